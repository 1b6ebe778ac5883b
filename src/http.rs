//! The one HTTP client (on `ureq`): the gates' requests to a llama-server
//! on the loopback address and downloads of pinned archives. Proxies come
//! from the usual environment variables (`HTTPS_PROXY`, `NO_PROXY`, ...).

use anyhow::{Context, Result};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// The largest reply body read into memory (the gates' replies are JSON of
/// at most a few MiB; a download goes to a file instead).
const MAX_BODY: u64 = 256 << 20;

/// An agent that hands every status back and gives up after `timeout`; the
/// loopback server is never reached through a proxy.
fn agent(timeout: Duration, loopback: bool) -> ureq::Agent {
    let mut c = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout));
    if loopback {
        c = c.proxy(None);
    }
    c.build().into()
}

fn local_url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

fn send(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<ureq::http::Response<ureq::Body>> {
    let req = ureq::http::Request::builder()
        .method(method)
        .uri(local_url(port, path))
        .header("Content-Type", "application/json")
        .body(body.unwrap_or("").to_string())
        .with_context(|| format!("building {method} {path}"))?;
    agent(timeout, true)
        .run(req)
        .with_context(|| format!("{method} {path} on 127.0.0.1:{port}"))
}

/// A request to the server on `127.0.0.1:port` with a JSON body: its status
/// and its body's text, whatever the status.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String)> {
    let mut resp = send(port, method, path, body, timeout)?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .lossy_utf8(true)
        .read_to_string()
        .with_context(|| format!("reading the reply to {method} {path}"))?;
    Ok((status, text))
}

/// A POST whose reply is read as it streams: its status and a reader of the
/// body. Dropping the reader before the end closes the connection (which a
/// llama-server takes as the client going away).
pub fn post_streaming(
    port: u16,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<(u16, impl Read)> {
    let resp = send(port, "POST", path, Some(body), timeout)?;
    let status = resp.status().as_u16();
    Ok((status, resp.into_body().into_reader()))
}

/// Downloads `url` into the file `dest` (created or truncated) and returns
/// the number of bytes; a `file://` URL (an offline mirror) is copied. The
/// caller checks the content before keeping it.
pub fn download(url: &str, dest: &Path) -> Result<u64> {
    if let Some(path) = url.strip_prefix("file://") {
        return std::fs::copy(path, dest).with_context(|| format!("copying {path}"));
    }
    // Long enough for a large archive on a slow link; a stalled one still ends.
    let mut resp = agent(Duration::from_secs(3600), false)
        .get(url)
        .call()
        .with_context(|| format!("fetching {url}"))?;
    let status = resp.status();
    anyhow::ensure!(
        status.is_success(),
        "fetching {url}: the server answered {status}"
    );
    let mut f =
        std::fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
    let n = std::io::copy(&mut resp.body_mut().as_reader(), &mut f)
        .with_context(|| format!("downloading {url}"))?;
    f.sync_all()
        .with_context(|| format!("writing {}", dest.display()))?;
    Ok(n)
}

/// A free TCP port on the loopback address.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    /// A one-shot server: answers each connection with `reply`, hands the
    /// request it read to the test.
    fn serve(replies: Vec<Vec<u8>>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for reply in replies {
                let (mut s, _) = l.accept().unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut head = String::new();
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    r.read_line(&mut line).unwrap();
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len];
                r.read_exact(&mut body).unwrap();
                head.push_str(&String::from_utf8_lossy(&body));
                seen.push(head);
                s.write_all(&reply).unwrap();
            }
            seen
        });
        (port, h)
    }

    #[test]
    fn sized_and_chunked_replies_any_status() {
        let (port, h) = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec(),
            b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                .to_vec(),
        ]);
        let t = Duration::from_secs(10);
        assert_eq!(
            request(port, "GET", "/health", None, t).unwrap(),
            (200, "ok".to_string())
        );
        assert_eq!(
            request(port, "POST", "/completion", Some("{\"a\":1}"), t).unwrap(),
            (400, "abcde".to_string())
        );
        let seen = h.join().unwrap();
        assert!(
            seen[0].starts_with("GET /health HTTP/1.1\r\n"),
            "{}",
            seen[0]
        );
        assert!(seen[1].starts_with("POST /completion HTTP/1.1\r\n"));
        assert!(seen[1]
            .to_ascii_lowercase()
            .contains("content-type: application/json"));
        assert!(seen[1].ends_with("{\"a\":1}"), "{}", seen[1]);
    }

    #[test]
    fn a_stream_is_read_as_it_comes() {
        let (port, h) = serve(vec![b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: {}\n\n"
            .to_vec()]);
        let (status, mut r) =
            post_streaming(port, "/completion", "{}", Duration::from_secs(10)).unwrap();
        assert_eq!(status, 200);
        let mut buf = [0u8; 64];
        let k = r.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..k]).starts_with("data:"));
        h.join().unwrap();
    }

    #[test]
    fn downloads_to_a_file_and_refuses_an_error_status() {
        let body = vec![7u8; 100_000];
        let mut ok = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        ok.extend_from_slice(&body);
        let (port, h) = serve(vec![
            ok,
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        ]);
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("a");
        let url = format!("http://127.0.0.1:{port}/a.tar.gz");
        assert_eq!(download(&url, &dest).unwrap(), 100_000);
        assert_eq!(std::fs::read(&dest).unwrap(), body);
        let e = download(&url, &tmp.path().join("b")).unwrap_err();
        assert!(format!("{e:#}").contains("404"), "{e:#}");
        h.join().unwrap();
        let local = format!("file://{}", dest.display());
        assert_eq!(download(&local, &tmp.path().join("c")).unwrap(), 100_000);
        assert!(download("file:///nonexistent/polykv", &tmp.path().join("d")).is_err());
    }

    #[test]
    fn nothing_listening_is_an_error() {
        let port = free_port().unwrap();
        assert!(request(port, "GET", "/health", None, Duration::from_secs(5)).is_err());
    }
}
