//! A llama-server process for the gates that talk to it over HTTP, killed
//! when dropped.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Spec;
use crate::http;

/// The server process (killed when dropped) and its port.
pub struct Server {
    process: crate::proc::Background,
    port: u16,
}

pub fn param_usize(spec: &Spec, key: &str, default: usize) -> usize {
    spec.params
        .get(key)
        .and_then(|v| v.as_integer())
        .map(|v| v.max(1) as usize)
        .unwrap_or(default)
}

/// The token ids in array `key` of a reply.
pub fn tokens_of(v: &serde_json::Value, key: &str) -> Result<Vec<i64>> {
    v[key]
        .as_array()
        .with_context(|| format!("the reply has no `{key}` array"))?
        .iter()
        .map(|t| t.as_i64().context("a token id is not an integer"))
        .collect()
}

pub fn param_f64s(spec: &Spec, key: &str, default: &[f64]) -> Vec<f64> {
    match spec.params.get(key) {
        Some(toml::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
            .collect(),
        _ => default.to_vec(),
    }
}

pub fn start(
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
    port: u16,
    log: &Path,
) -> Result<Server> {
    let process = crate::proc::Cmd::from_argv(argv)?
        .envs(env)
        .spawn_logged(log)?;
    let server = Server { process, port };
    let t = Instant::now();
    loop {
        if let Some(status) = server.process.exited()? {
            bail!(
                "llama-server exited during start-up ({status}); log: {}",
                log.display()
            );
        }
        if let Ok((200, _)) = http::request(port, "GET", "/health", None, Duration::from_secs(5)) {
            return Ok(server);
        }
        if t.elapsed() > Duration::from_secs(180) {
            bail!(
                "llama-server did not become healthy in 180 s; log: {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

impl Server {
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// A request and its status, the body parsed as JSON (null when it is not).
pub fn call(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value)> {
    let body = body.map(|b| b.to_string());
    let (status, text) = http::request(
        port,
        method,
        path,
        body.as_deref(),
        Duration::from_secs(900),
    )?;
    Ok((status, serde_json::from_str(&text).unwrap_or_default()))
}

pub fn post(server: &Server, path: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
    let (status, text) = http::request(
        server.port,
        "POST",
        path,
        Some(&body.to_string()),
        Duration::from_secs(900),
    )?;
    if status != 200 {
        bail!(
            "{path} answered {status}: {}",
            text.chars().take(300).collect::<String>()
        );
    }
    serde_json::from_str(&text).with_context(|| format!("parsing the reply of {path}"))
}

pub fn count_tokens(server: &Server, text: &str) -> Result<usize> {
    let v = post(server, "/tokenize", &json!({ "content": text }))?;
    Ok(v["tokens"].as_array().map(|a| a.len()).unwrap_or(0))
}

/// One row per model × configuration, each timed, its figures from `measure`
/// (an error becomes the row's error).
pub fn rows_by_config(
    spec: &Spec,
    mut measure: impl FnMut(&str, &super::Config) -> Result<std::collections::BTreeMap<String, f64>>,
) -> Vec<super::report::Row> {
    let mut rows = Vec::new();
    for model in &spec.models {
        for c in spec.configs.iter().filter(|c| c.runs_on(model)) {
            let t = Instant::now();
            let mut row = super::report::Row {
                model: model.clone(),
                config: c.name.clone(),
                ..Default::default()
            };
            crate::progress::note(&format!("gate {}: {model} {}", spec.name, c.name));
            match measure(model, c) {
                Ok(figs) => row.figures = figs,
                Err(e) => row.error = Some(format!("{e:#}")),
            }
            row.seconds = t.elapsed().as_secs_f64();
            rows.push(row);
        }
    }
    rows
}

/// Starts the gate's server (its first `run` command) for one model and
/// configuration on a free port; the log goes to the gate's scratch folder.
pub fn start_for(
    spec: &Spec,
    ctx: &super::engine::GateCtx,
    model: &str,
    c: &super::Config,
) -> Result<Server> {
    let path = ctx
        .models
        .get(model)
        .with_context(|| format!("model {model} is not available"))?;
    let port = http::free_port()?;
    let mut vars = super::engine::param_vars(spec);
    vars.extend(c.vars.clone());
    vars.insert("model".into(), path.display().to_string());
    vars.insert("port".into(), port.to_string());
    vars.insert("scratch".into(), format!("{}/", ctx.scratch.display()));
    let server_cmd = spec.run.first().with_context(|| {
        format!(
            "gate {} needs the server command as its first `run` entry",
            spec.name
        )
    })?;
    let argv: Vec<String> = server_cmd
        .iter()
        .map(|a| super::engine::expand(a, &vars, &ctx.bin_dir))
        .collect::<Result<_>>()?;
    let log = ctx
        .scratch
        .join(format!("{model}-{}-server.log", c.name.replace('/', "_")));
    start(&argv, &c.env, port, &log)
}
