//! The one process runner. Every program the forge starts goes through here
//! (on `duct`): the build's CMake and Ninja, the gates' commands and servers,
//! `pip download`, nvcc and C compiler probes. Standard input is always
//! closed; a timeout kills the program; a failure says which program, how it
//! ended, and shows what it printed between dividers (or names the log that
//! holds it).

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output};
use std::time::Duration;

/// How running a program went wrong. Callers branch on `Timeout` (a gate's
/// row is marked timed out) and on `Start` (a missing program is an
/// environment problem, not a failed check).
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("could not start `{program}`: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("`{program}` exited with {status}{shown}")]
    Failed {
        program: String,
        status: ExitStatus,
        /// What it printed, between dividers, or where its log is.
        shown: String,
    },
    #[error("`{program}` ran past its timeout of {secs} s{shown}")]
    Timeout {
        program: String,
        secs: u64,
        shown: String,
    },
    #[error("`{program}`: {what}: {source}")]
    Io {
        program: String,
        what: &'static str,
        source: std::io::Error,
    },
}

/// Lines of a program's output shown in an error.
const SHOWN_LINES: usize = 30;

/// The last lines of `text` between dividers, or nothing when it is empty.
pub fn between_dividers(text: &str) -> String {
    let text = text.trim_end();
    if text.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(SHOWN_LINES)..].join("\n");
    format!("\n----\n{tail}\n----")
}

fn quote(s: &str) -> String {
    if s.contains("$CUDA_HOME") && !s.contains(['"', '`', '\\']) {
        // A placeholder the user's shell expands.
        return format!("\"{s}\"");
    }
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A command line as a shell would take it back.
pub fn show(argv: &[String]) -> String {
    argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

/// A program, its arguments and environment, and how long it may run.
#[derive(Debug, Clone)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    dir: Option<PathBuf>,
    timeout: Option<Duration>,
}

impl Cmd {
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Cmd {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            dir: None,
            timeout: None,
        }
    }

    /// `argv[0]` with `argv[1..]`; an empty command line is refused.
    pub fn from_argv(argv: &[String]) -> anyhow::Result<Self> {
        let (program, rest) = argv
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("an empty command line"))?;
        Ok(Cmd::new(program).args(rest))
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Self {
        self.env
            .push((k.as_ref().to_owned(), v.as_ref().to_owned()));
        self
    }

    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// The program's file name, for messages.
    pub fn name(&self) -> String {
        let p = Path::new(&self.program);
        p.file_name()
            .unwrap_or(p.as_os_str())
            .to_string_lossy()
            .into_owned()
    }

    /// The command line as a shell would take it back, environment first.
    pub fn shown(&self) -> String {
        let env: String = self
            .env
            .iter()
            .map(|(k, v)| format!("{}={} ", k.to_string_lossy(), quote(&v.to_string_lossy())))
            .collect();
        let argv: Vec<String> = std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        format!("{env}{}", show(&argv))
    }

    fn expression(&self) -> duct::Expression {
        let mut e = duct::cmd(&self.program, &self.args)
            .stdin_null()
            .unchecked();
        for (k, v) in &self.env {
            e = e.env(k, v);
        }
        if let Some(d) = &self.dir {
            e = e.dir(d);
        }
        e
    }

    fn start_error(&self, source: std::io::Error) -> ProcError {
        ProcError::Start {
            program: self.name(),
            source,
        }
    }

    fn io_error(&self, what: &'static str, source: std::io::Error) -> ProcError {
        ProcError::Io {
            program: self.name(),
            what,
            source,
        }
    }

    /// Waits within the timeout; past it the program is killed.
    fn wait(&self, handle: &duct::Handle, shown: impl Fn() -> String) -> Result<Output, ProcError> {
        let done = match self.timeout {
            Some(t) => handle
                .wait_timeout(t)
                .map_err(|e| self.io_error("waiting", e))?
                .cloned(),
            None => Some(
                handle
                    .wait()
                    .map_err(|e| self.io_error("waiting", e))?
                    .clone(),
            ),
        };
        match done {
            Some(out) => Ok(out),
            None => {
                let _ = handle.kill();
                let _ = handle.wait();
                Err(ProcError::Timeout {
                    program: self.name(),
                    secs: self.timeout.map_or(0, |t| t.as_secs()),
                    shown: shown(),
                })
            }
        }
    }

    /// Runs it with stdout and stderr captured, whatever its exit status
    /// (probes: a version query, a compiler test).
    pub fn probe(&self) -> Result<Output, ProcError> {
        let handle = self
            .expression()
            .stdout_capture()
            .stderr_capture()
            .start()
            .map_err(|e| self.start_error(e))?;
        self.wait(&handle, String::new)
    }

    /// Runs it with stdout and stderr captured; a non-zero exit is an error
    /// that shows the end of its stderr (else its stdout) between dividers.
    pub fn read(&self) -> Result<Output, ProcError> {
        let out = self.probe()?;
        if out.status.success() {
            return Ok(out);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let text = if stderr.trim().is_empty() {
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            stderr.into_owned()
        };
        Err(ProcError::Failed {
            program: self.name(),
            status: out.status,
            shown: between_dividers(&text),
        })
    }

    /// Runs it with stdout and stderr appended to `log` (after a `$ command`
    /// line); a failure names the log.
    pub fn run_logged(&self, log: &Path) -> Result<(), ProcError> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| self.io_error("opening its log", e))?;
        writeln!(f, "$ {}", self.shown()).map_err(|e| self.io_error("writing its log", e))?;
        let handle = self.start_into(f)?;
        let in_log = || format!("; log: {}", log.display());
        let out = self.wait(&handle, in_log)?;
        if !out.status.success() {
            return Err(ProcError::Failed {
                program: self.name(),
                status: out.status,
                shown: in_log(),
            });
        }
        Ok(())
    }

    /// Runs it with stdout and stderr merged, each line written to `log` and
    /// handed to `on_line` as it comes (a build's progress). No timeout: the
    /// caller sees every line. A failure shows the log's lines chosen by
    /// `excerpt` between dividers.
    pub fn run_lines(
        &self,
        log: &mut std::fs::File,
        log_path: &Path,
        mut on_line: impl FnMut(&str),
        excerpt: impl Fn(&str) -> String,
    ) -> Result<(), ProcError> {
        let reader = self
            .expression()
            .stderr_to_stdout()
            .reader()
            .map_err(|e| self.start_error(e))?;
        for line in BufReader::new(&reader).lines() {
            let line = line.map_err(|e| self.io_error("reading its output", e))?;
            writeln!(log, "{line}").map_err(|e| self.io_error("writing its log", e))?;
            on_line(&line);
        }
        // At the end of its output the reader has waited for the program.
        let status = reader
            .try_wait()
            .map_err(|e| self.io_error("waiting", e))?
            .map(|o| o.status);
        match status {
            Some(s) if s.success() => Ok(()),
            Some(status) => {
                let text = std::fs::read_to_string(log_path).unwrap_or_default();
                Err(ProcError::Failed {
                    program: self.name(),
                    status,
                    shown: format!(
                        "; full log: {}\n----\n{}\n----",
                        log_path.display(),
                        excerpt(&text)
                    ),
                })
            }
            None => Err(self.io_error(
                "waiting",
                std::io::Error::other("its output ended but it is still running"),
            )),
        }
    }

    /// Starts it in the background with stdout and stderr written to `log`;
    /// it is killed when the returned handle is dropped.
    pub fn spawn_logged(&self, log: &Path) -> Result<Background, ProcError> {
        let f = std::fs::File::create(log).map_err(|e| self.io_error("creating its log", e))?;
        Ok(Background {
            handle: self.start_into(f)?,
        })
    }

    /// Starts it with stdout and stderr both written to `f`.
    fn start_into(&self, f: std::fs::File) -> Result<duct::Handle, ProcError> {
        let err = f
            .try_clone()
            .map_err(|e| self.io_error("opening its log", e))?;
        self.expression()
            .stdout_file(f)
            .stderr_file(err)
            .start()
            .map_err(|e| self.start_error(e))
    }
}

/// A program running in the background, killed and reaped when dropped.
#[derive(Debug)]
pub struct Background {
    handle: duct::Handle,
}

impl Background {
    /// Its exit status once it has ended.
    pub fn exited(&self) -> std::io::Result<Option<ExitStatus>> {
        Ok(self.handle.try_wait()?.map(|o| o.status))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.handle.kill();
        let _ = self.handle.wait();
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn sh(script: &str) -> Cmd {
        Cmd::new("sh").args(["-c", script])
    }

    #[test]
    fn read_captures_and_failure_shows_stderr_between_dividers() {
        let out = sh("echo out; echo err >&2").read().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
        let e = sh("echo partial; echo 'it broke' >&2; exit 3")
            .read()
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ProcError::Failed { .. }), "{text}");
        assert!(text.contains("exited with"), "{text}");
        assert!(text.contains("\n----\nit broke\n----"), "{text}");
        assert!(
            !text.contains("partial"),
            "stderr is shown, not stdout: {text}"
        );
    }

    #[test]
    fn probe_returns_a_failure_instead_of_an_error() {
        let out = sh("exit 4").probe().unwrap();
        assert_eq!(out.status.code(), Some(4));
    }

    #[test]
    fn a_missing_program_is_a_start_error() {
        let e = Cmd::new("polykv-no-such-program").read().unwrap_err();
        assert!(matches!(e, ProcError::Start { .. }), "{e}");
        assert!(e.to_string().contains("polykv-no-such-program"));
    }

    #[test]
    fn stdin_is_closed_and_env_and_dir_are_passed() {
        let tmp = tempfile::tempdir().unwrap();
        let out = sh("cat; echo \"$POLYKV_X\"; pwd")
            .env("POLYKV_X", "forty two")
            .dir(tmp.path())
            .read()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("forty two"));
        let pwd = std::fs::canonicalize(lines.next().unwrap()).unwrap();
        assert_eq!(pwd, std::fs::canonicalize(tmp.path()).unwrap());
    }

    #[test]
    fn a_timeout_kills_the_program() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("log");
        let marker = tmp.path().join("survived");
        let script = format!("sleep 30; touch {}", marker.display());
        let e = sh(&script)
            .timeout(Duration::from_millis(200))
            .run_logged(&log)
            .unwrap_err();
        assert!(matches!(e, ProcError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains(&log.display().to_string()));
        assert!(!marker.exists());
    }

    #[test]
    fn run_logged_appends_the_command_and_its_output() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("log");
        std::fs::write(&log, "before\n").unwrap();
        sh("echo one; echo two >&2")
            .env("A", "b c")
            .run_logged(&log)
            .unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.starts_with("before\n$ A='b c' sh -c "), "{text}");
        assert!(text.contains("one\n") && text.contains("two\n"), "{text}");
        let e = sh("exit 1").run_logged(&log).unwrap_err();
        assert!(e.to_string().contains("; log: "), "{e}");
    }

    #[test]
    fn run_lines_streams_merged_output_and_shows_the_excerpt_on_failure() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        let mut log = std::fs::File::create(&path).unwrap();
        let mut seen = Vec::new();
        sh("echo '[1/2] a'; echo warn >&2; echo '[2/2] b'")
            .run_lines(&mut log, &path, |l| seen.push(l.to_string()), |t| t.into())
            .unwrap();
        assert_eq!(seen.len(), 3);
        assert!(seen.contains(&"warn".to_string()));
        let e = sh("echo 'error: bad'; exit 2")
            .run_lines(
                &mut log,
                &path,
                |_| {},
                |t| t.lines().last().unwrap_or("").into(),
            )
            .unwrap_err();
        assert!(e.to_string().contains("\n----\nerror: bad\n----"), "{e}");
    }

    #[test]
    fn a_background_program_is_killed_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let bg = sh("sleep 30")
            .spawn_logged(&tmp.path().join("log"))
            .unwrap();
        assert!(bg.exited().unwrap().is_none());
        let quick = sh("exit 5").spawn_logged(&tmp.path().join("log2")).unwrap();
        let status = loop {
            if let Some(s) = quick.exited().unwrap() {
                break s;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(5));
        drop(bg);
    }

    #[test]
    fn shown_quotes_like_a_shell() {
        let c = Cmd::new("/bin/prog")
            .args(["a b", "it's", "plain"])
            .env("K", "v");
        assert_eq!(c.shown(), "K=v /bin/prog 'a b' 'it'\\''s' plain");
        assert_eq!(c.name(), "prog");
        assert_eq!(
            show(&["a".into(), "-DX=tree 1, 2".into()]),
            "a '-DX=tree 1, 2'"
        );
        assert_eq!(
            show(&["$CUDA_HOME/bin/nvcc".into()]),
            "\"$CUDA_HOME/bin/nvcc\""
        );
    }
}
