//! The `relay` command line. Every verb takes `--json` (one line on stdout). On
//! failure: nothing on stdout, `error: …` on stderr, exit 1. Everything printed goes
//! through [`termout`] (no control sequence a session chose reaches the terminal) and
//! [`emit`] (a reader that went away, as `| head` does, is not an error).

mod args;
mod attach;
mod client;
mod sandbox;
mod service;
pub mod termout;
mod turn;
mod unit;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};

use args::{AuditVerb, Json, SandboxVerb, ServiceVerb, SessionVerb, TerminalVerb, Verb};
use client::Client;

pub(crate) fn config_dir(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(d) = flag {
        return absolute(d);
    }
    if let Some(d) = std::env::var_os("RELAY_CONFIG_DIR").filter(|v| !v.is_empty()) {
        return absolute(PathBuf::from(d));
    }
    crate::daemon::paths::default_config_dir().ok_or_else(|| {
        "no home directory (HOME is not set and the account has none); pass --config-dir"
            .to_string()
    })
}

fn absolute(p: PathBuf) -> Result<PathBuf, String> {
    if p.is_absolute() {
        Ok(p)
    } else {
        std::env::current_dir()
            .map(|c| c.join(p))
            .map_err(|e| format!("current directory: {e}"))
    }
}

/// What a verb prints: the `--json` line and the text form, or (`terminal log --raw`)
/// bytes written exactly as they are.
struct Out {
    json: Value,
    text: String,
    raw: Option<Vec<u8>>,
}

impl Out {
    fn new(json: Value, text: String) -> Out {
        Out {
            json,
            text,
            raw: None,
        }
    }
}

/// `error: <msg>` on stderr (control bytes visible), exit 1. A closed stderr is ignored.
pub(crate) fn fail(msg: impl std::fmt::Display) -> ExitCode {
    let line = format!("error: {}\n", termout::visible(msg.to_string().as_bytes()));
    let _ = std::io::stderr().write_all(line.as_bytes());
    ExitCode::from(1)
}

/// Writes `bytes` to stdout and answers `code`. A closed pipe (`EPIPE`: the reader
/// went away, as `relay terminal log | head` does) is not an error: the verb ends
/// quietly with the status it would have had. Any other write error is `error: …`, 1.
pub(crate) fn emit(bytes: &[u8], code: ExitCode) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => fail(format!("write stdout: {e}")),
    }
}

/// A text form as it is printed: control bytes visible, one final newline.
fn text_line(text: &str) -> Vec<u8> {
    let mut t = termout::visible(text.as_bytes())
        .trim_end_matches('\n')
        .to_string();
    t.push('\n');
    t.into_bytes()
}

/// A `--json` answer as it is printed: one line, C1 escaped too.
fn json_bytes(v: &Value) -> Vec<u8> {
    let mut line = termout::json_line(v);
    line.push('\n');
    line.into_bytes()
}

pub fn run() -> ExitCode {
    let cli = match args::parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                return emit(e.to_string().as_bytes(), ExitCode::SUCCESS);
            }
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            return fail(format!("{first} (see relay --help)"));
        }
    };
    if let Verb::Completions { shell } = cli.verb {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut args::command(), "relay", &mut out);
        return emit(&out, ExitCode::SUCCESS);
    }
    let config_flag = cli.config_dir.clone();
    let config = match config_dir(cli.config_dir) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let (json_flag, result) = match cli.verb {
        Verb::Serve { log_level } => return serve(config, log_level),
        // Answered above, without a config dir.
        Verb::Completions { .. } => return ExitCode::SUCCESS,
        Verb::Sandbox {
            verb:
                Some(SandboxVerb::Explain {
                    template,
                    directory,
                    backend,
                    json: Json { json },
                }),
            ..
        } => (
            json,
            explain(
                &Client::new(&config),
                &template,
                directory,
                backend.as_deref(),
            ),
        ),
        Verb::Sandbox {
            template,
            args,
            detach_keys,
            json: Json { json },
            ..
        } => {
            return sandbox::run(
                &config,
                sandbox::Options {
                    template: &template.unwrap_or_default(),
                    args: &args,
                    detach_keys: detach_keys.as_deref(),
                    json_out: json,
                    config_flag: config_flag.as_ref(),
                },
            )
        }
        Verb::Terminal(TerminalVerb::Attach {
            id,
            detach_keys,
            json: Json { json },
        }) => {
            return attach::terminal(
                &config,
                &id,
                detach_keys.as_deref(),
                json,
                config_flag.as_ref(),
            )
        }
        Verb::Doctor {
            json: Json { json },
        } => return doctor(&Client::new(&config), json),
        Verb::Version {
            json: Json { json },
        } => (
            json,
            Ok(Out::new(
                json!({"version": env!("CARGO_PKG_VERSION")}),
                format!("relay {}", env!("CARGO_PKG_VERSION")),
            )),
        ),
        Verb::Status {
            json: Json { json },
        } => (json, status(&Client::new(&config))),
        Verb::Service(ServiceVerb::Install {
            dry_run,
            json: Json { json },
        }) => (json, service::install(&config, dry_run)),
        Verb::Service(ServiceVerb::Uninstall {
            json: Json { json },
        }) => (json, service::uninstall()),
        Verb::Service(ServiceVerb::Status {
            json: Json { json },
        }) => (json, service::status(&config)),
        Verb::Settings {
            open,
            json: Json { json },
        } => (json, settings_link(&Client::new(&config), open)),
        Verb::Audit {
            verb: Some(AuditVerb::Scan {
                json: Json { json },
            }),
            json: Json { json: json_before },
        } => return audit_scan(&Client::new(&config), json || json_before),
        Verb::Audit {
            verb: None,
            json: Json { json },
        } => (json, audit(&Client::new(&config))),
        Verb::Terminal(v) => terminal(&Client::new(&config), v),
        Verb::Session(SessionVerb::Message {
            id,
            text,
            stream,
            json: Json { json },
        }) => return turn::run(&Client::new(&config), &id, &text.join(" "), stream, json),
        Verb::Session(v) => session(&Client::new(&config), v),
    };
    match result {
        Ok(out) => {
            let bytes = if json_flag {
                json_bytes(&out.json)
            } else if let Some(raw) = out.raw {
                raw
            } else if out.text.is_empty() {
                Vec::new()
            } else {
                text_line(&out.text)
            };
            emit(&bytes, ExitCode::SUCCESS)
        }
        Err(e) => fail(e),
    }
}

fn serve(config: PathBuf, log_level: Option<String>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("runtime: {e}")),
    };
    match rt.block_on(crate::daemon::serve(config, log_level)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn ok_json(c: &Client, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let a = c.call(method, path, body)?;
    if (200..300).contains(&a.status) {
        Ok(a.json())
    } else {
        Err(a.error_text())
    }
}

/// `relay sandbox explain`: the sandbox a terminal of `template` gets in `directory`
/// (default: here), from the daemon's launch path (`GET /api/sandbox/explain`).
fn explain(
    c: &Client,
    template: &str,
    directory: Option<String>,
    backend: Option<&str>,
) -> Result<Out, String> {
    use crate::http::encode_component as enc;
    let here = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let dir = match directory {
        None => here,
        // `~` is the daemon's to expand; a relative folder is taken from here.
        Some(d) if d == "~" || d.starts_with("~/") || d.starts_with('/') => PathBuf::from(d),
        Some(d) => here.join(d),
    };
    let mut path = format!(
        "/api/sandbox/explain?template={}&directory={}",
        enc(template),
        enc(&dir.to_string_lossy())
    );
    if let Some(b) = backend {
        path.push_str(&format!("&backend={}", enc(b)));
    }
    let v = ok_json(c, "GET", &path, None)?;
    let e: crate::sandbox::explain::Explanation =
        serde_json::from_value(v.clone()).map_err(|e| format!("relay's answer: {e}"))?;
    Ok(Out::new(v, crate::sandbox::explain::to_text(&e)))
}

fn describe(e: &Value) -> String {
    let mut s = format!(
        "{}  {}  project={}  template={}  {}",
        e["id"].as_str().unwrap_or("?"),
        e["state"].as_str().unwrap_or("?"),
        e["project_id"].as_str().unwrap_or("?"),
        e["template_id"].as_str().unwrap_or("?"),
        e["directory"].as_str().unwrap_or("")
    );
    if let Some(n) = e["name"].as_str() {
        s.push_str(&format!("  name={n}"));
    }
    if let Some(code) = e["exit_status"].as_i64() {
        s.push_str(&format!("  exit={code}"));
    }
    if let Some(r) = e["exit_reason"].as_str() {
        s.push_str(&format!("  ended={r}"));
    }
    if let Some(fp) = e["token_fingerprint"].as_str() {
        s.push_str(&format!("  token={fp}"));
    }
    if e["stale"] == true {
        s.push_str("  stale");
    }
    s
}

fn list_text(items: &Value) -> String {
    let v = items.as_array().cloned().unwrap_or_default();
    if v.is_empty() {
        return "(none)".into();
    }
    v.iter().map(describe).collect::<Vec<_>>().join("\n")
}

fn terminal(c: &Client, v: TerminalVerb) -> (bool, Result<Out, String>) {
    match v {
        TerminalVerb::Start {
            project,
            template,
            name,
            directory,
            cols,
            rows,
            extra_arg,
            json: Json { json },
        } => {
            let directory = directory.or_else(|| {
                std::env::current_dir()
                    .ok()
                    .map(|d| d.to_string_lossy().into_owned())
            });
            let body = json!({"project": project, "template": template, "name": name, "directory": directory, "cols": cols, "rows": rows, "extra_args": extra_arg});
            (
                json,
                ok_json(c, "POST", "/api/terminals", Some(&body)).map(|v| Out {
                    text: format!("started {}", describe(&v)),
                    json: v,
                    raw: None,
                }),
            )
        }
        TerminalVerb::List {
            json: Json { json },
        } => (
            json,
            ok_json(c, "GET", "/api/terminals", None).map(|v| Out {
                text: list_text(&v["terminals"]),
                json: v,
                raw: None,
            }),
        ),
        TerminalVerb::Log {
            id,
            raw,
            json: Json { json },
        } => {
            // The log is what the session wrote: as text its controls are made visible
            // here; `--raw` hands the bytes over untouched; JSON escapes them.
            let r = c
                .call("GET", &format!("/api/terminals/{id}/log"), None)
                .and_then(|a| {
                    if a.status == 200 {
                        let text = String::from_utf8_lossy(&a.body).into_owned();
                        Ok(Out {
                            json: json!({"id": id, "log": text}),
                            text: termout::visible(&a.body),
                            raw: raw.then_some(a.body),
                        })
                    } else {
                        Err(a.error_text())
                    }
                });
            (json, r)
        }
        TerminalVerb::Stop {
            id,
            json: Json { json },
        } => (
            json,
            ok_json(c, "DELETE", &format!("/api/terminals/{id}"), None).map(|v| Out {
                text: format!("stopped {}", describe(&v)),
                json: v,
                raw: None,
            }),
        ),
        TerminalVerb::Purge {
            id,
            json: Json { json },
        } => (json, purge(c, "terminals", &id)),
        // `run` hands attaches to `attach::terminal` before this point.
        TerminalVerb::Attach {
            json: Json { json },
            ..
        } => (json, Err("attach: internal dispatch".into())),
    }
}

fn session(c: &Client, v: SessionVerb) -> (bool, Result<Out, String>) {
    match v {
        SessionVerb::Start {
            project,
            directory,
            name,
            model,
            permission_mode,
            json: Json { json },
        } => {
            let directory = directory.or_else(|| {
                std::env::current_dir()
                    .ok()
                    .map(|d| d.to_string_lossy().into_owned())
            });
            let mut body = json!({"project": project, "directory": directory, "name": name});
            if let Some(m) = model {
                body["model"] = m.into();
            }
            if let Some(p) = permission_mode {
                body["permission_mode"] = p.into();
            }
            (
                json,
                ok_json(c, "POST", "/api/sessions", Some(&body)).map(|v| Out {
                    text: format!("started {}", describe(&v)),
                    json: v,
                    raw: None,
                }),
            )
        }
        // `run` hands messages to `turn::run` before this point.
        SessionVerb::Message {
            json: Json { json },
            ..
        } => (json, Err("message: internal dispatch".into())),
        SessionVerb::List {
            json: Json { json },
        } => (
            json,
            ok_json(c, "GET", "/api/sessions", None).map(|v| Out {
                text: list_text(&v["sessions"]),
                json: v,
                raw: None,
            }),
        ),
        SessionVerb::Stop {
            id,
            json: Json { json },
        } => (
            json,
            ok_json(c, "DELETE", &format!("/api/sessions/{id}"), None).map(|v| Out {
                text: format!("stopped {}", describe(&v)),
                json: v,
                raw: None,
            }),
        ),
        SessionVerb::Purge {
            id,
            json: Json { json },
        } => (json, purge(c, "sessions", &id)),
        SessionVerb::Resume {
            id,
            json: Json { json },
        } => (
            json,
            ok_json(c, "POST", &format!("/api/sessions/{id}/resume"), None).map(|v| Out {
                text: format!("resumed {}", describe(&v)),
                json: v,
                raw: None,
            }),
        ),
    }
}

fn purge(c: &Client, what: &str, id: &str) -> Result<Out, String> {
    ok_json(c, "POST", &format!("/api/{what}/{id}/purge"), None).map(|v| Out {
        text: format!("purged {}", describe(&v["entry"])),
        json: v,
        raw: None,
    })
}

/// `relay audit scan`: the report on stdout either way; exit 1 when the token was found
/// (as `relay doctor` does with a failed check).
fn audit_scan(c: &Client, json_out: bool) -> ExitCode {
    let v = match ok_json(c, "POST", "/api/audit/scan", None) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let findings = v["findings"].as_array().cloned().unwrap_or_default();
    let code = if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        return emit(&json_bytes(&v), code);
    }
    let mut text = String::new();
    for f in &findings {
        let place = match f["offset"].as_u64() {
            Some(o) => format!("{}:{o}", f["file"].as_str().unwrap_or("?")),
            None => format!("{} (its name)", f["file"].as_str().unwrap_or("?")),
        };
        text.push_str(&format!(
            "found  {place}  {}\n",
            f["encoding"].as_str().unwrap_or("?")
        ));
    }
    for f in v["skipped"].as_array().cloned().unwrap_or_default() {
        text.push_str(&format!(
            "skipped  {}  {}\n",
            f["file"].as_str().unwrap_or("?"),
            f["why"].as_str().unwrap_or("?")
        ));
    }
    text.push_str(&format!(
        "scanned {} files ({} bytes) for the token {}: {}",
        v["files"],
        v["bytes"],
        v["token_fingerprint"].as_str().unwrap_or("?"),
        if findings.is_empty() {
            "not found".to_string()
        } else {
            format!("found in {} places", findings.len())
        }
    ));
    emit(&text_line(&text), code)
}

fn audit(c: &Client) -> Result<Out, String> {
    let v = ok_json(c, "GET", "/api/audit", None)?;
    let text = v["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    let mut line = format!(
                        "{}  {}  {}",
                        r["action"].as_str().unwrap_or("?"),
                        r["outcome"].as_str().unwrap_or("?"),
                        r["session_id"].as_str().unwrap_or("-")
                    );
                    if let Some(code) = r["code"].as_str() {
                        line.push_str(&format!("  {code}"));
                    }
                    if let Some(e) = r["error"].as_str() {
                        line.push_str(&format!("  {e}"));
                    }
                    line
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    Ok(Out::new(v, text))
}

fn doctor(c: &Client, json_out: bool) -> ExitCode {
    let v = match ok_json(c, "POST", "/api/doctor", None) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let code = if v["ok"] == true {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        return emit(&json_bytes(&v), code);
    }
    let mut text = String::new();
    for ch in v["checks"].as_array().cloned().unwrap_or_default() {
        text.push_str(&format!(
            "{:<5} {:<16} {}\n",
            ch["status"].as_str().unwrap_or("?"),
            ch["name"].as_str().unwrap_or("?"),
            ch["detail"].as_str().unwrap_or("")
        ));
        if matches!(ch["status"].as_str(), Some("fail") | Some("warn")) {
            if let Some(fix) = ch["fix"].as_str() {
                text.push_str(&format!("{:<22} fix: {fix}\n", ""));
            }
        }
    }
    if text.is_empty() {
        return emit(b"", code);
    }
    emit(&text_line(&text), code)
}

fn settings_link(c: &Client, open: bool) -> Result<Out, String> {
    let v = ok_json(c, "POST", "/api/login-code", None)?;
    let url = v["url"]
        .as_str()
        .ok_or("relay answered without a link")?
        .to_string();
    if open {
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        std::process::Command::new(opener)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("{opener} {url}: {e}"))?;
    }
    Ok(Out {
        text: format!("{url}\n(one-time link, valid for 60 s)"),
        json: v,
        raw: None,
    })
}

fn status(c: &Client) -> Result<Out, String> {
    let v = ok_json(c, "GET", "/api/status", None)?;
    let token = match v["paths"]["claude_token_file"].as_str() {
        Some(p) => format!("Claude token file: {p}"),
        None => "Claude token file: not set".to_string(),
    };
    let text = format!(
        "relay {} running (pid {})\nconfig: {}\n{}\nsessions running: {}{}",
        v["version"].as_str().unwrap_or("?"),
        v["pid"],
        v["paths"]["config"].as_str().unwrap_or("?"),
        token,
        v["sessions_running"],
        v["settings"]["note"]
            .as_str()
            .map(|n| format!("\nsettings: {n}"))
            .unwrap_or_default()
    );
    Ok(Out::new(v, text))
}
