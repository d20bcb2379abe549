//! The bench (docs/performance.md): relay against the floor (raw bubblewrap with the
//! argument list relay rendered) and against Anthropic's sandbox-runtime (`srt`), in
//! one isolated instance per case (the e2e harness's [`Relay`]), contenders alternated.
//!
//! `cargo run --release -p relay-e2e --bin bench -- <case> [--runs N] [--json] [--svg PATH]`
//! with case one of `launch`, `first-turn`, `terminal-first-output`, `concurrent`, `leak`,
//! `memory`, `throughput`, `network`, `network-hold`, `everyday`, `stream-turn` (needs
//! `RELAY_E2E_CLAUDE_CODE`, the pinned Claude Code), `plot`, and `hold` (no figures: keeps the launch case's instance
//! up and prints the command line of one `relay sandbox true` against it, for a profiler
//! such as `perf trace`, until its stdin ends).
//! Run `cargo build --release --workspace` first: the instance runs the binaries beside
//! this one. Not a test: `cargo test` never runs it.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use relay_e2e::daemon::{base_settings, Relay};

#[path = "bench/everyday.rs"]
mod everyday;
use relay_e2e::pty::Pty;
use serde_json::{json, Value};

const USAGE: &str =
    "usage: bench <launch|first-turn|terminal-first-output|concurrent|leak|memory|throughput|redact|plot|hold|network|network-hold|everyday|stream-turn|cgroup> [--runs N] [--json] [--svg PATH] [--no-api]";

struct Opts {
    case: String,
    runs: Option<usize>,
    json: bool,
    svg: PathBuf,
    /// Settings without `api.listen`: no API port to deny, so no Landlock ruleset.
    no_api: bool,
}

fn parse_args() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let mut o = Opts {
        case: String::new(),
        runs: None,
        json: false,
        svg: PathBuf::from("docs/bench-launch.svg"),
        no_api: false,
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--no-api" => o.no_api = true,
            "--runs" => {
                let v = args.next().ok_or("--runs needs a number")?;
                o.runs = Some(v.parse().map_err(|_| format!("--runs {v}: not a number"))?);
            }
            "--svg" => o.svg = PathBuf::from(args.next().ok_or("--svg needs a path")?),
            c if !c.starts_with('-') && o.case.is_empty() => o.case = c.to_string(),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.case.is_empty() {
        return Err("no case".into());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if std::env::var_os("RELAY_E2E_DIR").is_none() {
        // The instances go under the target dir unless told otherwise.
        std::env::set_var(
            "RELAY_E2E_DIR",
            relay_e2e::bin_dir().join("bench-instances"),
        );
    }
    let report = match o.case.as_str() {
        "launch" => launch(o.runs.unwrap_or(200), None, o.no_api),
        "plot" => launch(o.runs.unwrap_or(200), Some(&o.svg), o.no_api),
        "first-turn" => first_turn(o.runs.unwrap_or(50)),
        "terminal-first-output" => terminal_first_output(o.runs.unwrap_or(50)),
        "concurrent" => concurrent(o.runs.unwrap_or(64)),
        "leak" => leak(o.runs.unwrap_or(1000)),
        "memory" => memory(o.runs.unwrap_or(50)),
        "throughput" => throughput(o.runs.unwrap_or(200)),
        "redact" => redact(o.runs.unwrap_or(200)),
        "hold" => hold(o.no_api),
        "network" => network(o.runs.unwrap_or(200)),
        "network-hold" => network_hold(o.runs.unwrap_or(64)),
        "everyday" => everyday::everyday(o.runs.unwrap_or(100)),
        "stream-turn" => stream_turn(o.runs.unwrap_or(30)),
        "cgroup" => cgroup(o.runs.unwrap_or(200)),
        other => {
            eprintln!("bench: unknown case {other}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report.json).unwrap());
    } else {
        print!("{}", report.text);
    }
    ExitCode::SUCCESS
}

struct Report {
    text: String,
    json: Value,
}

/// The instance every case runs: the suite's settings plus a `true` template
/// (`/bin/true`) and a `hold` template (`/bin/sleep`, same grants) whose profile is
/// read while it runs.
fn instance() -> Relay {
    instance_with(false)
}

/// [`instance`], with `no_api`: no `api.listen`, so the daemon denies no API port and a
/// launch carries no Landlock ruleset (docs/performance.md).
fn instance_with(no_api: bool) -> Relay {
    let mut s = base_settings(None);
    if no_api {
        s.as_object_mut().unwrap().remove("api");
    }
    let t = s["terminal_templates"].as_array_mut().unwrap();
    t.push(json!({"id": "true", "name": "True", "command": "/bin/true"}));
    t.push(json!({"id": "hold", "name": "Hold", "command": "/bin/sleep", "args": ["600"]}));
    let mut r = Relay::start(s);
    // No token here to look for; a 200 MB log would only slow the scan at drop.
    r.scan_on_drop = false;
    r
}

/// The `hold` case: the launch case's instance, up until stdin ends.
fn hold(no_api: bool) -> Report {
    let r = instance_with(no_api);
    println!("{:?}", sandbox_cmd(&r, &["true"]));
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Report {
        text: String::new(),
        json: json!({"case": "hold"}),
    }
}

fn sandbox_cmd(r: &Relay, args: &[&str]) -> Command {
    let mut full = vec!["sandbox"];
    full.extend_from_slice(args);
    let mut c = r.cli_command(&full);
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Milliseconds the command took from spawn to exit, and whether it exited 0.
fn timed(mut c: Command) -> (f64, bool) {
    let t = Instant::now();
    let ok = c.status().map(|s| s.success()).unwrap_or(false);
    (t.elapsed().as_secs_f64() * 1000.0, ok)
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

struct Series {
    name: String,
    samples: Vec<f64>,
    failures: usize,
}

impl Series {
    fn new(name: &str) -> Series {
        Series {
            name: name.into(),
            samples: Vec::new(),
            failures: 0,
        }
    }
    fn sorted(&self) -> Vec<f64> {
        let mut s = self.samples.clone();
        s.sort_by(|a, b| a.total_cmp(b));
        s
    }
    fn median(&self) -> f64 {
        pct(&self.sorted(), 50.0)
    }
    fn json(&self) -> Value {
        let s = self.sorted();
        json!({"name": self.name, "runs": s.len(), "failures": self.failures,
            "median_ms": pct(&s, 50.0), "p90_ms": pct(&s, 90.0), "p99_ms": pct(&s, 99.0),
            "min_ms": s.first(), "max_ms": s.last()})
    }
    fn row(&self) -> String {
        let s = self.sorted();
        format!(
            "{:<10} {:>5} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
            self.name,
            s.len(),
            self.failures,
            pct(&s, 50.0),
            pct(&s, 90.0),
            pct(&s, 99.0),
            s.first().copied().unwrap_or(f64::NAN)
        )
    }
}

const HEADER: &str = "contender   runs  fail    median       p90       p99       min   (ms)\n";

/// The bwrap arguments relay rendered for a launch of `hold` (the same grants as
/// `true`), read from `<config>/profiles/*.bwrap` while it runs.
fn captured_profile(r: &Relay) -> Result<Vec<String>, String> {
    let mut c = sandbox_cmd(r, &["hold"]);
    let mut child = c.spawn().map_err(|e| format!("spawn: {e}"))?;
    let dir = r.config.join("profiles");
    let deadline = Instant::now() + relay_e2e::WAIT;
    let mut pause = Duration::from_millis(2);
    let found = loop {
        let hit = std::fs::read_dir(&dir).ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "bwrap"))
        });
        if let Some(p) = hit {
            if let Ok(b) = std::fs::read(&p) {
                if !b.is_empty() {
                    break Some(b);
                }
            }
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let bytes = found.ok_or("no profile appeared")?;
    relay_shim_decode(&bytes)
}

/// The NUL-terminated arguments of a profile (shim/src/bwrap_profile.rs's format).
fn relay_shim_decode(bytes: &[u8]) -> Result<Vec<String>, String> {
    if bytes.last() != Some(&0) {
        return Err("profile not NUL-terminated".into());
    }
    bytes[..bytes.len() - 1]
        .split(|b| *b == 0)
        .map(|a| String::from_utf8(a.to_vec()).map_err(|_| "profile not UTF-8".to_string()))
        .collect()
}

/// `srt` from the bench's own npm folder (`<target>/bench-srt`), installed there if
/// missing; `Err` says why it is unavailable.
fn srt_bin() -> Result<PathBuf, String> {
    let prefix = relay_e2e::bin_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(relay_e2e::bin_dir)
        .join("bench-srt");
    let bin = prefix.join("node_modules/.bin/srt");
    if !bin.exists() {
        std::fs::create_dir_all(&prefix).map_err(|e| e.to_string())?;
        let st = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg("@anthropic-ai/sandbox-runtime")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("npm: {e}"))?;
        if !st.success() || !bin.exists() {
            return Err(format!("npm install @anthropic-ai/sandbox-runtime: {st}"));
        }
    }
    Ok(bin)
}

/// An `srt` settings file as close as it allows to relay's `true` launch: no network,
/// writes only to the project folder, the token file unreadable.
fn srt_settings(r: &Relay) -> PathBuf {
    let p = r.root.join("srt-settings.json");
    let v = json!({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {
            "denyRead": [r.config.display().to_string()],
            "allowWrite": [r.project.display().to_string()],
            "denyWrite": []
        }
    });
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    p
}

/// One `srt` run with its output kept: `Err` holds what it said when it failed (it
/// needs `rg` and `socat` on Linux).
fn srt_probe(bin: &Path, settings: &Path, dir: &Path) -> Result<(), String> {
    let out = Command::new(bin)
        .arg("--settings")
        .arg(settings)
        .arg("/bin/true")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("srt: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "srt failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn launch(runs: usize, svg: Option<&Path>, no_api: bool) -> Report {
    let r = instance_with(no_api);
    let profile = captured_profile(&r).expect("capture relay's bwrap profile");
    let srt_settings = srt_settings(&r);
    let srt = srt_bin().and_then(|bin| srt_probe(&bin, &srt_settings, &r.project).map(|_| bin));
    let mut relay = Series::new("relay");
    let mut raw = Series::new("raw-bwrap");
    let mut srt_s = Series::new("srt");
    let raw_cmd = || {
        let mut c = Command::new("bwrap");
        c.args(&profile).arg("--").arg("/bin/true");
        c.current_dir(&r.project)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    for _ in 0..3 {
        // Warm-up: page cache, the host's first launch.
        let _ = timed(sandbox_cmd(&r, &["true"]));
        let _ = timed(raw_cmd());
    }
    for _ in 0..runs {
        let (ms, ok) = timed(sandbox_cmd(&r, &["true"]));
        relay.samples.push(ms);
        relay.failures += usize::from(!ok);
        let (ms, ok) = timed(raw_cmd());
        raw.samples.push(ms);
        raw.failures += usize::from(!ok);
        if let Ok(bin) = &srt {
            let mut c = Command::new(bin);
            c.arg("--settings").arg(&srt_settings).arg("/bin/true");
            c.current_dir(&r.project)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let (ms, ok) = timed(c);
            srt_s.samples.push(ms);
            srt_s.failures += usize::from(!ok);
        }
    }
    let ratio_raw = relay.median() / raw.median();
    let ratio_srt = srt_s.median() / relay.median();
    let mut text = format!(
        "launch: {runs} runs each, alternated; /bin/true to exit{}\n{HEADER}",
        if no_api { "; no API listener" } else { "" }
    );
    text += &relay.row();
    text += &raw.row();
    match &srt {
        Ok(_) => text += &srt_s.row(),
        Err(e) => text += &format!("srt        unavailable: {e}\n"),
    }
    text += &format!(
        "relay/raw-bwrap median: {ratio_raw:.2}x (target <= 1.5x: {})\n",
        met(ratio_raw <= 1.5)
    );
    if srt.is_ok() {
        text += &format!(
            "srt/relay median: {ratio_srt:.1}x (target >= 25x: {})\n",
            met(ratio_srt >= 25.0)
        );
    }
    text += &format!("raw bwrap argv: bwrap {} -- /bin/true\n", profile.join(" "));
    if let Some(path) = svg {
        let mut series = vec![&relay, &raw];
        if srt.is_ok() {
            series.push(&srt_s);
        }
        std::fs::write(path, plot_svg(&series, runs)).expect("write svg");
        text += &format!("plot: {}\n", path.display());
    }
    Report {
        text,
        json: json!({
            "case": "launch", "runs": runs, "no_api": no_api,
            "series": [relay.json(), raw.json(), if srt.is_ok() { srt_s.json() } else { json!({"name": "srt", "unavailable": srt.as_ref().err()}) }],
            "relay_over_raw": ratio_raw, "srt_over_relay": if srt.is_ok() { json!(ratio_srt) } else { Value::Null },
            "raw_bwrap_args": profile,
            "samples_ms": {"relay": relay.samples, "raw-bwrap": raw.samples, "srt": srt_s.samples},
        }),
    }
}

/// The prompt of the first turn; the fake agent answers `echo: <prompt>`.
const FIRST_PROMPT: &str = "bench-first-turn";

/// A headless session's first turn: `relay session start` then `relay session message`
/// until its answer, against the fake agent (the instance's `claude`) run directly in
/// stream-json mode, timed from its spawn to its `result` line for the same prompt.
fn first_turn(runs: usize) -> Report {
    let r = instance();
    let want = format!("echo: {FIRST_PROMPT}");
    let relay_turn = || -> (f64, bool) {
        let t = Instant::now();
        let v = r.cli_json(&["session", "start", "--project", "p1"]);
        let Some(id) = v["id"].as_str().map(str::to_string) else {
            return (t.elapsed().as_secs_f64() * 1000.0, false);
        };
        let out = r
            .cli_command(&["session", "message", "--id", &id, FIRST_PROMPT])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let ok = out.is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(&want)
        });
        // Untimed: the session ends so that the runs do not pile up live agents.
        let _ = r
            .cli_command(&["session", "stop", "--id", &id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        (ms, ok)
    };
    let raw_turn = || -> (f64, bool) {
        let t = Instant::now();
        let ok = raw_agent_turn(&r);
        (t.elapsed().as_secs_f64() * 1000.0, ok)
    };
    for _ in 0..2 {
        let _ = relay_turn();
        let _ = raw_turn();
    }
    settle(&r);
    let mut relay = Series::new("relay");
    let mut raw = Series::new("raw-agent");
    for _ in 0..runs {
        let (ms, ok) = relay_turn();
        relay.samples.push(ms);
        relay.failures += usize::from(!ok);
        let (ms, ok) = raw_turn();
        raw.samples.push(ms);
        raw.failures += usize::from(!ok);
    }
    let ratio = relay.median() / raw.median();
    let mut text = format!(
        "first-turn: {runs} runs each, alternated; `relay session start` + `relay session message {FIRST_PROMPT}` to its answer\n\
         raw-agent: the fake agent spawned unsandboxed in stream-json mode, the same prompt, to its result line\n{HEADER}"
    );
    text += &relay.row();
    text += &raw.row();
    text += &format!("relay/raw-agent median: {ratio:.2}x\n");
    Report {
        text,
        json: json!({"case": "first-turn", "runs": runs, "prompt": FIRST_PROMPT,
            "series": [relay.json(), raw.json()], "relay_over_raw": ratio,
            "samples_ms": {"relay": relay.samples, "raw-agent": raw.samples}}),
    }
}

/// The fake agent (the instance's `claude`) run directly, headless: one user line in,
/// read until its `result` line; whether that result answered the prompt.
fn raw_agent_turn(r: &Relay) -> bool {
    use std::io::{BufRead, Write};
    let mut child = match Command::new(r.home.join(".local/bin/claude"))
        .args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ])
        .env("TMPDIR", &r.tmp)
        .current_dir(&r.project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => return false,
    };
    let line = json!({"type": "user", "message": {"role": "user", "content": FIRST_PROMPT}});
    let mut stdin = child.stdin.take().unwrap();
    let wrote = writeln!(stdin, "{line}").is_ok();
    let mut ok = false;
    if wrote {
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        for l in out.lines() {
            let Ok(l) = l else { break };
            let v: Value = serde_json::from_str(&l).unwrap_or(Value::Null);
            if v["type"] == "result" {
                ok = v["result"]
                    .as_str()
                    .is_some_and(|t| t.contains(&format!("echo: {FIRST_PROMPT}")));
                break;
            }
        }
    }
    drop(stdin);
    let _ = child.wait();
    ok
}

/// The line the `first-output` template's target prints before it idles.
const FIRST_LINE: &str = "bench-first-output";

/// `relay terminal start` of a template whose target prints one line, until that line
/// is seen through `relay terminal attach` on a pty, against the same program spawned on
/// a pty of the bench's own (both read the same way: [`Pty`]).
fn terminal_first_output(runs: usize) -> Report {
    let mut s = base_settings(None);
    let script = format!("echo {FIRST_LINE}; exec sleep 600");
    s["terminal_templates"].as_array_mut().unwrap().push(json!({
        "id": "first-output", "name": "First output", "command": "/bin/sh", "args": ["-c", script.clone()]
    }));
    let mut r = Relay::start(s);
    r.scan_on_drop = false;
    let limit = relay_e2e::WAIT;
    let relay_run = || -> (f64, bool) {
        let t = Instant::now();
        let v = r.cli_json(&[
            "terminal",
            "start",
            "--project",
            "p1",
            "--template",
            "first-output",
        ]);
        let Some(id) = v["id"].as_str().map(str::to_string) else {
            return (t.elapsed().as_secs_f64() * 1000.0, false);
        };
        let mut pty = Pty::spawn(r.cli_command(&["terminal", "attach", "--id", &id]), 80, 24);
        let ok = pty.shows_within(FIRST_LINE, limit);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        // Untimed: the terminal ends, then its client.
        let _ = r
            .cli_command(&["terminal", "stop", "--id", &id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = pty.child.kill();
        let _ = pty.child.wait();
        (ms, ok)
    };
    let raw_run = || -> (f64, bool) {
        let t = Instant::now();
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(&script).current_dir(&r.project);
        let mut pty = Pty::spawn(c, 80, 24);
        let ok = pty.shows_within(FIRST_LINE, limit);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let _ = pty.child.kill();
        let _ = pty.child.wait();
        (ms, ok)
    };
    for _ in 0..2 {
        let _ = relay_run();
        let _ = raw_run();
    }
    settle(&r);
    let mut relay = Series::new("relay");
    let mut raw = Series::new("raw-pty");
    for _ in 0..runs {
        let (ms, ok) = relay_run();
        relay.samples.push(ms);
        relay.failures += usize::from(!ok);
        let (ms, ok) = raw_run();
        raw.samples.push(ms);
        raw.failures += usize::from(!ok);
    }
    let ratio = relay.median() / raw.median();
    let mut text = format!(
        "terminal-first-output: {runs} runs each, alternated; `relay terminal start` + `relay terminal attach` until `{FIRST_LINE}`\n\
         raw-pty: `sh -c 'echo {FIRST_LINE}; exec sleep 600'` unsandboxed on a pty the bench opens\n{HEADER}"
    );
    text += &relay.row();
    text += &raw.row();
    text += &format!("relay/raw-pty median: {ratio:.2}x\n");
    Report {
        text,
        json: json!({"case": "terminal-first-output", "runs": runs, "line": FIRST_LINE,
            "series": [relay.json(), raw.json()], "relay_over_raw": ratio,
            "samples_ms": {"relay": relay.samples, "raw-pty": raw.samples}}),
    }
}

fn met(b: bool) -> &'static str {
    if b {
        "met"
    } else {
        "MISSED"
    }
}

/// `n` `relay sandbox shell -- -c 'echo bench-I; exit 4'` started at once: each must
/// print its own line and exit 4.
fn concurrent(n: usize) -> Report {
    let r = instance();
    let _ = timed(sandbox_cmd(&r, &["true"]));
    let t0 = Instant::now();
    let children: Vec<_> = (0..n)
        .map(|i| {
            let script = format!("echo bench-{i}; exit 4");
            let mut c = r.cli_command(&["sandbox", "shell", "--", "-c", &script]);
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (i, Instant::now(), c.spawn().expect("spawn relay sandbox"))
        })
        .collect();
    let waiters: Vec<_> = children
        .into_iter()
        .map(|(i, t, c)| {
            std::thread::spawn(move || {
                let out = c.wait_with_output().expect("wait");
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                let ok = out.status.code() == Some(4)
                    && String::from_utf8_lossy(&out.stdout).contains(&format!("bench-{i}"));
                (ms, ok, String::from_utf8_lossy(&out.stderr).into_owned())
            })
        })
        .collect();
    let mut s = Series::new("relay");
    let mut errors = Vec::new();
    for w in waiters {
        let (ms, ok, err) = w.join().unwrap();
        s.samples.push(ms);
        if !ok {
            s.failures += 1;
            errors.push(err.trim().to_string());
        }
    }
    let wall = t0.elapsed().as_secs_f64() * 1000.0;
    errors.sort();
    errors.dedup();
    let mut text = format!(
        "concurrent: {n} `relay sandbox` at once, each printing its line and exiting 4\n{HEADER}"
    );
    text += &s.row();
    text += &format!(
        "wall {wall:.0} ms; {} of {n} lost (target 0: {})\n",
        s.failures,
        met(s.failures == 0)
    );
    for e in &errors {
        text += &format!("  error: {e}\n");
    }
    Report {
        text,
        json: json!({"case": "concurrent", "n": n, "wall_ms": wall, "series": s.json(), "errors": errors}),
    }
}

/// (VmRSS in KiB, open descriptors) of a process.
fn rss_fds(pid: u64) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (rss, fds)
}

/// A process's open descriptors by kind (`socket`, `pipe`, `anon_inode:[…]`, a file's
/// folder), the instance's root shown as `<instance>`.
fn fd_kinds(pid: u64, root: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in rd.flatten() {
            let t = std::fs::read_link(e.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let kind = if let Some((k, _)) = t.split_once(":[") {
                if k == "anon_inode" {
                    t.clone()
                } else {
                    k.to_string()
                }
            } else if t.starts_with('/') {
                let parent = Path::new(&t).parent().map(|p| p.display().to_string());
                let parent = parent.unwrap_or_default();
                format!(
                    "{}/*",
                    parent.replace(&root.display().to_string(), "<instance>")
                )
            } else {
                t
            };
            *m.entry(kind).or_insert(0) += 1;
        }
    }
    m
}

fn pids(r: &Relay) -> (u64, u64) {
    let daemon = u64::from(r.ready.pid);
    // From the event log, which keeps every line (the daemon's ring keeps the last
    // 4096 events: a long run pushes `host.started` out of it).
    let host = relay_e2e::read_jsonl(&r.config.join("events.jsonl"))
        .iter()
        .rev()
        .find(|e| e["name"] == "host.started")
        .and_then(|e| e["pid"].as_u64())
        .expect("a host.started event with a pid");
    (daemon, host)
}

/// Polls until the daemon has no running session.
fn settle(r: &Relay) {
    let deadline = Instant::now() + relay_e2e::WAIT;
    let mut pause = Duration::from_millis(5);
    while Instant::now() < deadline {
        let (_, v, _) = r.api("GET", "/api/status", None);
        if v["sessions_running"] == 0 {
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

fn leak(runs: usize) -> Report {
    let r = instance();
    for _ in 0..10 {
        let _ = timed(sandbox_cmd(&r, &["true"]));
    }
    settle(&r);
    let (dpid, hpid) = pids(&r);
    let (d0, df0) = rss_fds(dpid);
    let (h0, hf0) = rss_fds(hpid);
    let mut s = Series::new("relay");
    let mut half = (0, 0);
    for i in 0..runs {
        if i == runs / 2 {
            settle(&r);
            half = (rss_fds(dpid).0, rss_fds(hpid).0);
        }
        let (ms, ok) = timed(sandbox_cmd(&r, &["true"]));
        s.samples.push(ms);
        s.failures += usize::from(!ok);
    }
    settle(&r);
    let (_, hpid_after) = pids(&r);
    let (d1, df1) = rss_fds(dpid);
    let (h1, hf1) = rss_fds(hpid);
    let host_fds = fd_kinds(hpid, &r.root);
    let (_, terms, _) = r.api("GET", "/api/terminals", None);
    let listed = terms
        .as_array()
        .or_else(|| terms["terminals"].as_array())
        .map(|a| a.len())
        .unwrap_or(0);
    let mut text = format!("leak: {runs} sequential `relay sandbox true`\n{HEADER}");
    text += &s.row();
    text += "process   RSS before   RSS halfway   RSS after   fds before  fds after\n";
    text += &format!(
        "daemon    {d0:>7} KiB  {:>9} KiB  {d1:>7} KiB  {df0:>9}  {df1:>9}\n",
        half.0
    );
    text += &format!(
        "host      {h0:>7} KiB  {:>9} KiB  {h1:>7} KiB  {hf0:>9}  {hf1:>9}\n",
        half.1
    );
    text += &format!("host descriptors after, by kind: {host_fds:?}\n");
    text += &format!("terminals the daemon still lists after the runs: {listed}\n");
    if hpid_after != hpid {
        text += &format!("host restarted during the run ({hpid} -> {hpid_after})\n");
    }
    text += &format!(
        "fd growth: daemon {}, host {} (target 0: {})\n",
        df1 as i64 - df0 as i64,
        hf1 as i64 - hf0 as i64,
        met(df1 <= df0 && hf1 <= hf0)
    );
    Report {
        text,
        json: json!({"case": "leak", "runs": runs, "series": s.json(),
            "daemon": {"pid": dpid, "rss_kib_before": d0, "rss_kib_halfway": half.0, "rss_kib_after": d1, "fds_before": df0, "fds_after": df1},
            "host": {"pid": hpid, "pid_after": hpid_after, "rss_kib_before": h0, "rss_kib_halfway": half.1, "rss_kib_after": h1, "fds_before": hf0, "fds_after": hf1, "fds_after_by_kind": host_fds},
            "terminals_listed_after": listed}),
    }
}

fn memory(n: usize) -> Report {
    let r = instance();
    let _ = timed(sandbox_cmd(&r, &["true"]));
    settle(&r);
    let (dpid, hpid) = pids(&r);
    let (d0, _) = rss_fds(dpid);
    let (h0, _) = rss_fds(hpid);
    for _ in 0..n {
        let v = r.cli_json(&["terminal", "start", "--project", "p1", "--template", "hold"]);
        assert!(v["id"].is_string(), "terminal start: {v}");
    }
    let (d1, _) = rss_fds(dpid);
    let (h1, _) = rss_fds(hpid);
    let per_d = (d1 as f64 - d0 as f64) / n as f64;
    let per_h = (h1 as f64 - h0 as f64) / n as f64;
    let mut text = format!("memory: idle, then {n} live terminals (`hold`: /bin/sleep 600)\n");
    text += "process   idle RSS    with terminals   per terminal\n";
    text += &format!("daemon    {d0:>7} KiB  {d1:>10} KiB  {per_d:>9.1} KiB\n");
    text += &format!("host      {h0:>7} KiB  {h1:>10} KiB  {per_h:>9.1} KiB\n");
    text += &format!(
        "daemon idle < 8 MiB: {}; host idle < 12 MiB: {}; < 256 KiB per extra terminal (daemon + host): {}\n",
        met(d0 < 8 * 1024),
        met(h0 < 12 * 1024),
        met(per_d + per_h < 256.0)
    );
    Report {
        text,
        json: json!({"case": "memory", "terminals": n,
            "daemon": {"idle_rss_kib": d0, "loaded_rss_kib": d1, "per_terminal_kib": per_d},
            "host": {"idle_rss_kib": h0, "loaded_rss_kib": h1, "per_terminal_kib": per_h}}),
    }
}

/// The generator both throughput contenders run: `mb` MB of text lines.
fn writer_script(mb: usize) -> String {
    format!(
        "yes 'relay bench line of text 0123456789' | head -c {}",
        mb * 1_000_000
    )
}

/// The redactor alone, in this process: `mb` MB of the throughput case's text, fed in
/// 4 KiB reads (what the host's pty reader hands it), with no token (the credential
/// shapes only) and with one (its encodings too), against copying the same reads.
fn redact(mb: usize) -> Report {
    use relay::host::redact::{Patterns, Redactor};
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    let line = b"relay bench line of text 0123456789\r\n";
    let chunk: Vec<u8> = line.iter().copied().cycle().take(4096).collect();
    let reads = mb * 1_000_000 / chunk.len();
    let token = relay::protocol::Secret::new(relay_e2e::fake_token());
    let mut rows = Vec::new();
    let mut text = format!("redact: {mb} MB in 4 KiB reads through the redactor alone\n");
    text += "contender        seconds      MB/s\n";
    // The copy: what a pass-through costs (a read's bytes into a new buffer).
    let t = Instant::now();
    let mut copied = 0usize;
    for _ in 0..reads {
        let out = std::hint::black_box(chunk.clone());
        copied += out.len();
    }
    let copy_s = t.elapsed().as_secs_f64();
    rows.push(("copy", copy_s, copied));
    for (label, secret) in [("no token", None), ("with a token", Some(&token))] {
        let mut r = Redactor::new(Arc::new(Patterns::new(secret)), Arc::new(AtomicU64::new(0)));
        let t = Instant::now();
        let mut out = 0usize;
        for _ in 0..reads {
            out += std::hint::black_box(r.feed(&chunk)).len();
        }
        out += r.finish().len();
        rows.push((label, t.elapsed().as_secs_f64(), out));
    }
    let mb_f = (reads * chunk.len()) as f64 / 1e6;
    let mut json_rows = Vec::new();
    for (label, s, bytes) in &rows {
        text += &format!("{label:<14} {s:>9.3}  {:>8.1}\n", mb_f / s);
        json_rows.push(
            json!({"contender": label, "seconds": s, "mb_per_s": mb_f / s, "bytes_out": bytes}),
        );
    }
    Report {
        text,
        json: json!({"case": "redact", "mb": mb_f, "rows": json_rows}),
    }
}

/// What a launch pays for its session's cgroup (src/limits/, issue 39's target: at most
/// 2 ms): the folder made and its limits written (`Group::create`, before the shim is
/// spawned), and at the end the counters read and the folder removed (`reached`,
/// `remove`), each timed alone in this process under a folder `prepare` made for it.
#[cfg(target_os = "linux")]
fn cgroup(runs: usize) -> Report {
    use relay::limits::{cgroup::Group, Prepared};
    let prepared = relay::limits::prepare(std::process::id());
    let Prepared::Cgroups(c) = &prepared else {
        let why = prepared.why_none().unwrap_or_default().to_string();
        return Report {
            text: format!("cgroup: no cgroup relay can write here: {why}\n"),
            json: json!({"case": "cgroup", "unavailable": why}),
        };
    };
    let limits = relay::protocol::SessionLimits {
        pids_max: 64,
        memory_max_mib: 64,
        cpu_weight: 100,
        cgroup: Some(c.clone()),
    };
    let (mut make, mut end) = (Series::new("create"), Series::new("end"));
    for i in 0..runs {
        let t = Instant::now();
        match Group::create(c, &format!("bench-{i}"), &limits) {
            Ok(g) => {
                make.samples.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                std::hint::black_box(g.reached());
                g.remove();
                end.samples.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            Err(_) => make.failures += 1,
        }
    }
    relay::limits::release(&prepared);
    let version = match c {
        relay::protocol::Cgroups::V2 { .. } => "v2",
        relay::protocol::Cgroups::V1 { .. } => "v1",
    };
    Report {
        text: format!(
            "cgroup {version}: a session's cgroup per launch, {runs} runs\n{HEADER}{}{}",
            make.row(),
            end.row()
        ),
        json: json!({"case": "cgroup", "version": version, "rows": [make.json(), end.json()]}),
    }
}

#[cfg(not(target_os = "linux"))]
fn cgroup(_runs: usize) -> Report {
    Report {
        text: "cgroup: Linux only (macOS has no cgroups)\n".into(),
        json: json!({"case": "cgroup", "unavailable": "macOS has no cgroups"}),
    }
}

fn throughput(mb: usize) -> Report {
    let r = instance();
    let script = writer_script(mb);
    let target_mb = mb as f64;
    // Through relay: the host's pty, its redactor and the attach stream.
    let t = Instant::now();
    let mut c = r.cli_command(&["sandbox", "shell", "--", "-c", &script]);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("spawn relay sandbox");
    let mut out = Vec::with_capacity(mb * 1_100_000);
    let _ = child.stdout.take().unwrap().read_to_end(&mut out);
    let relay_ok = child.wait().map(|s| s.success()).unwrap_or(false);
    let relay_s = t.elapsed().as_secs_f64();
    let relay_bytes = out.len() as u64;
    let (notes, skipped) = skipped_chunks(&out);
    drop(out);
    // Raw: a pty of our own, the same script on its slave, its master read here.
    let t = Instant::now();
    let (raw_bytes, raw_ok) = raw_pty_copy(&script);
    let raw_s = t.elapsed().as_secs_f64();
    // Rates of the target's output (the pty adds a CR per line on top).
    let (rr, rw) = (target_mb / relay_s, target_mb / raw_s);
    // What reached the attached client, scaled the same way.
    let delivered = relay_bytes as f64 / raw_bytes.max(1) as f64;
    let rd = rr * delivered;
    let mut text = format!("throughput: a target writing {mb} MB to its pty\n");
    text += "contender   bytes read     seconds   target MB/s  ok\n";
    text += &format!("relay       {relay_bytes:>11}  {relay_s:>9.2}  {rr:>10.1}   {relay_ok}\n");
    text += &format!("raw-pty     {raw_bytes:>11}  {raw_s:>9.2}  {rw:>10.1}   {raw_ok}\n");
    text += &format!(
        "relay delivered {:.1}% of the raw copy's bytes ({notes} skip notes, {skipped} chunks skipped)\n",
        delivered * 100.0
    );
    text += &format!(
        "relay/raw, target's rate: {:.2}; delivered rate: {:.2} (target >= 0.5: {})\n",
        rr / rw,
        rd / rw,
        met(rd / rw >= 0.5)
    );
    Report {
        text,
        json: json!({"case": "throughput", "mb": mb,
            "relay": {"bytes": relay_bytes, "seconds": relay_s, "target_mb_per_s": rr, "delivered_mb_per_s": rd, "ok": relay_ok, "skip_notes": notes, "chunks_skipped": skipped},
            "raw_pty": {"bytes": raw_bytes, "seconds": raw_s, "mb_per_s": rw, "ok": raw_ok},
            "ratio_target_rate": rr / rw, "ratio_delivered_rate": rd / rw}),
    }
}

/// The `[relay: N chunks of output skipped]` notes in `out`: how many, and N summed.
fn skipped_chunks(out: &[u8]) -> (u64, u64) {
    let needle = b"[relay: ";
    let (mut notes, mut total) = (0, 0);
    let mut i = 0;
    while i + needle.len() <= out.len() {
        if &out[i..i + needle.len()] == needle {
            let rest = &out[i + needle.len()..out.len().min(i + 80)];
            let text = String::from_utf8_lossy(rest);
            if let Some((n, tail)) = text.split_once(' ') {
                if tail.starts_with("chunks of output skipped") {
                    notes += 1;
                    total += n.parse::<u64>().unwrap_or(0);
                }
            }
            i += needle.len();
        } else {
            i += 1;
        }
    }
    (notes, total)
}

fn drain(mut r: impl Read) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // EIO: the slave side closed.
            Err(_) => return total,
        }
    }
}

fn raw_pty_copy(script: &str) -> (u64, bool) {
    let mut master = -1;
    let mut slave = -1;
    // Safety: openpty writes two descriptors into our locals; null name/termios/winsize
    // are allowed.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            // `*mut` for macOS's signature; Linux takes `*const`, which it coerces to.
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // Safety: both descriptors were just returned by openpty and are owned here only.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let out = slave.try_clone().expect("dup slave");
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn writer");
    drop(slave);
    let _ = master.as_raw_fd();
    let bytes = drain(std::fs::File::from(master));
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    (bytes, ok)
}

/// A hand-written SVG: per contender, every sample as a dot (log-scale milliseconds,
/// jittered sideways), a box from p25 to p75, the median as a thick line and p90/p99 as
/// ticks.
fn plot_svg(series: &[&Series], runs: usize) -> String {
    let (w, h) = (760.0, 460.0);
    let (left, right, top, bottom) = (70.0, 20.0, 40.0, 60.0);
    let all: Vec<f64> = series.iter().flat_map(|s| s.samples.clone()).collect();
    let lo = all.iter().copied().fold(f64::MAX, f64::min).max(0.1);
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 2.0);
    let (l0, l1) = (lo.log10().floor(), hi.log10().ceil());
    let y = |ms: f64| top + (h - top - bottom) * (1.0 - (ms.max(1e-3).log10() - l0) / (l1 - l0));
    let col_w = (w - left - right) / series.len() as f64;
    let colors = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">Launch of /bin/true to exit, {runs} runs each, alternated (ms, log scale)</text>\n",
        w / 2.0
    );
    let mut e = l0 as i32;
    while e <= l1 as i32 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            if v < 10f64.powf(l0) || v > 10f64.powf(l1) {
                continue;
            }
            let yy = y(v);
            s += &format!("<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\n<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>\n", w - right, left - 6.0, yy + 4.0);
        }
        e += 1;
    }
    for (i, se) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let cx = left + col_w * (i as f64 + 0.5);
        let sorted = se.sorted();
        // Deterministic jitter: a small LCG.
        let mut seed: u64 = 0x9e37_79b9 + i as u64;
        for v in &se.samples {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let j = ((seed >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * col_w * 0.5;
            s += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{c}\" fill-opacity=\"0.35\"/>\n",
                cx + j,
                y(*v)
            );
        }
        let bw = col_w * 0.3;
        let (q1, q3) = (pct(&sorted, 25.0), pct(&sorted, 75.0));
        s += &format!("<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\"/>\n", cx - bw / 2.0, y(q3), bw, (y(q1) - y(q3)).max(1.0));
        let med = pct(&sorted, 50.0);
        s += &format!("<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-width=\"3\"/>\n", cx - bw / 2.0, cx + bw / 2.0, y(med), y(med));
        // p90 labelled on the left, p99 on the right, the median further right: no
        // two labels share a line when the three are close.
        for (p, label, tx, anchor) in [
            (90.0, "p90", cx - bw / 2.0 - 4.0, "end"),
            (99.0, "p99", cx + bw / 2.0 + 4.0, "start"),
        ] {
            let v = pct(&sorted, p);
            s += &format!("<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n<text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" font-size=\"10\">{label} {v:.1}</text>\n", cx - bw / 4.0, cx + bw / 4.0, y(v), y(v), y(v) + 3.0);
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">median {med:.1}</text>\n",
            cx + bw / 2.0 + 4.0,
            y(med) + 3.0
        );
        s += &format!(
            "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n",
            h - bottom + 22.0,
            se.name
        );
    }
    s += &format!("<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">dots: every run; box: p25 to p75; thick line: median; ticks: p90 (left label), p99</text>\n", w / 2.0, h - 12.0);
    s += "</svg>\n";
    s
}

/// Python inside a sandbox: `n` HTTP/1.1 requests, each on a new connection, to
/// `127.0.0.1:PORT`, then ten downloads of the server's large body; prints the
/// per-request milliseconds and each download's MB/s as JSON.
const NETWORK_CLIENT: &str = r#"
import json, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def get(path):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
    got = 0
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        got += len(b)
    s.close()
    return got
samples = []
for _ in range(n):
    t = time.perf_counter(); get("/small"); samples.append((time.perf_counter() - t) * 1000)
mb_s = []
for _ in range(10):
    t = time.perf_counter(); size = get("/large"); mb_s.append(size / (time.perf_counter() - t) / 1e6)
print(json.dumps({"rtt_ms": samples, "mb_s": mb_s, "bytes": size}))
"#;

/// Python inside a sandbox: 8 connections to `127.0.0.1:PORT` held open, each answered
/// once (so each went all the way through); prints `held N`, then waits on stdin.
const HOLD_CLIENT: &str = r#"
import socket, sys
port = int(sys.argv[1])
held = []
for _ in range(8):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"ping\n")
    if s.recv(16).startswith(b"pong"):
        held.append(s)
print("held %d" % len(held), flush=True)
sys.stdin.read()
"#;

/// A host server that answers each connection's first line with `pong` and keeps it
/// open; the count of connections it holds.
fn hold_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let held = std::sync::Arc::new(AtomicUsize::new(0));
    let count = held.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut c = c;
                let mut buf = [0u8; 64];
                if c.read(&mut buf).unwrap_or(0) > 0 && c.write_all(b"pong\n").is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                    while c.read(&mut buf).unwrap_or(0) > 0 {}
                    count.fetch_sub(1, Ordering::SeqCst);
                }
            });
        }
    });
    (port, held)
}

/// The `network-hold` case (issue 23): `n` proxied sessions, each holding 8 connections
/// through its bridge and relay's proxy to one host server; the daemon's memory and
/// descriptors before and while they are held, and how many went through.
fn network_hold(n: usize) -> Report {
    use std::sync::atomic::Ordering;
    let (port, held) = hold_server();
    let mut s = relay_e2e::daemon::base_settings(None);
    s["terminal_templates"].as_array_mut().unwrap().push(json!({
        "id": "hold8", "name": "H", "command": "/usr/bin/python3",
        "egress": [format!("127.0.0.1:{port}")]}));
    let r = Relay::start(s);
    std::fs::write(r.project.join("hold.py"), HOLD_CLIENT).unwrap();
    let daemon = r.ready.pid as u64;
    let before = rss_fds(daemon);
    let t0 = Instant::now();
    let ids: Vec<String> = (0..n)
        .map(|_| {
            let body = json!({"project": "p1", "template": "hold8",
                "extra_args": [r.project.join("hold.py").to_str().unwrap(), port.to_string()]});
            let (st, v, _) = r.api("POST", "/api/terminals", Some(&body));
            assert_eq!(st, 201, "{v}");
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    let mut done = 0;
    relay_e2e::wait::until(Duration::from_secs(120), || {
        done = ids
            .iter()
            .filter(|id| {
                let (_, _, raw) = r.api("GET", &format!("/api/terminals/{id}/log"), None);
                raw.windows(6).any(|w| w == b"held 8")
            })
            .count();
        done == n
    });
    let wall = t0.elapsed().as_secs_f64() * 1000.0;
    let during = rss_fds(daemon);
    let through = held.load(Ordering::SeqCst);
    for id in &ids {
        let _ = r.api("DELETE", &format!("/api/terminals/{id}"), None);
    }
    let text = format!(
        "network-hold: {n} proxied sessions x 8 held connections each\n\
         {done} of {n} sessions held all 8; the host server holds {through} of {} \
         (target all: {})\n\
         daemon RSS {} KiB before, {} KiB while held (+{} KiB, {:.1} KiB a connection); \
         descriptors {} before, {} while held; {wall:.0} ms to hold them all\n",
        n * 8,
        met(through == n * 8),
        before.0,
        during.0,
        during.0.saturating_sub(before.0),
        during.0.saturating_sub(before.0) as f64 / (n * 8).max(1) as f64,
        before.1,
        during.1,
    );
    Report {
        text,
        json: json!({"case": "network-hold", "n": n, "sessions_done": done,
            "connections_held": through, "rss_kib": [before.0, during.0],
            "fds": [before.1, during.1], "wall_ms": wall}),
    }
}

/// A host HTTP server on loopback: `/small` is 12 bytes, `/large` 64 MiB.
fn network_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut c = c;
                let mut buf = [0u8; 2048];
                let n = c.read(&mut buf).unwrap_or(0);
                let large = buf[..n].windows(6).any(|w| w == b"/large");
                let body_len = if large { 64 << 20 } else { 12 };
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\ncontent-length: {body_len}\r\nconnection: close\r\n\r\n"
                );
                if large {
                    let chunk = vec![b'x'; 1 << 16];
                    for _ in 0..(body_len / chunk.len()) {
                        if c.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                } else {
                    let _ = c.write_all(b"small-reply\n");
                }
            });
        }
    });
    port
}

/// The `network` case (issue 23's targets): `relay sandbox true` on the private network
/// against the host's, alternated; then, from inside one sandbox of each, requests to a
/// host server over the bridge against directly, and a 64 MiB download each way.
fn network(runs: usize) -> Report {
    let port = network_server();
    let mut s = relay_e2e::daemon::base_settings(None);
    let t = s["terminal_templates"].as_array_mut().unwrap();
    t.push(
        json!({"id": "true-proxied", "name": "T", "command": "/bin/true",
        "egress": [format!("127.0.0.1:{port}")]}),
    );
    t.push(json!({"id": "true-host", "name": "T", "command": "/bin/true", "network": "host"}));
    t.push(
        json!({"id": "py-proxied", "name": "P", "command": "/usr/bin/python3",
        "egress": [format!("127.0.0.1:{port}")]}),
    );
    t.push(json!({"id": "py-host", "name": "P", "command": "/usr/bin/python3", "network": "host"}));
    let r = Relay::start(s);
    std::fs::write(r.project.join("client.py"), NETWORK_CLIENT).unwrap();
    let mut proxied = Series::new("proxied");
    let mut host = Series::new("host");
    for i in 0..(runs + 3) {
        for (series, template) in [(&mut proxied, "true-proxied"), (&mut host, "true-host")] {
            let mut c = sandbox_cmd(&r, &[template]);
            c.current_dir(&r.project);
            let (ms, ok) = timed(c);
            if i >= 3 {
                if ok {
                    series.samples.push(ms);
                } else {
                    series.failures += 1;
                }
            }
        }
    }
    let mut text = format!("launch, {runs} runs each, alternated\n{HEADER}");
    text.push_str(&proxied.row());
    text.push_str(&host.row());
    let mut json = json!({"case": "network", "launch": [proxied.json(), host.json()]});
    let requests = runs.max(50).to_string();
    for template in ["py-proxied", "py-host"] {
        let out = r
            .cli_command(&[
                "sandbox",
                template,
                "--",
                "client.py",
                &port.to_string(),
                &requests,
            ])
            .current_dir(&r.project)
            .stdin(Stdio::null())
            .output()
            .expect("relay sandbox");
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{template}: {}", String::from_utf8_lossy(&out.stderr)));
        let mut rtt = Series::new(template);
        rtt.samples = v["rtt_ms"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        let mut mb = Series::new(template);
        mb.samples = v["mb_s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        text.push_str(&format!(
            "{template}: request median {:.3} ms, p90 {:.3} ms over {} requests; 64 MiB median {:.0} MB/s over {} downloads (min {:.0}, max {:.0})\n",
            rtt.median(),
            pct(&rtt.sorted(), 90.0),
            rtt.samples.len(),
            mb.median(),
            mb.samples.len(),
            mb.sorted().first().copied().unwrap_or(f64::NAN),
            mb.sorted().last().copied().unwrap_or(f64::NAN),
        ));
        json[template] = json!({"rtt": rtt.json(), "mb_s": v["mb_s"]});
    }
    Report { text, json }
}

/// The `stream-turn` case (issue 23): the real Claude Code's streamed turns against the
/// `fakeapi` stand-in on loopback, one session on the private network (its API reached
/// over the bridge and relay's proxy) and one on the host's, alternated turn by turn;
/// each timed from `relay session message --stream` to its exit.
fn stream_turn(runs: usize) -> Report {
    use relay_e2e::daemon::TOKEN_SETTING;
    let claude = std::env::var("RELAY_E2E_CLAUDE_CODE")
        .expect("RELAY_E2E_CLAUDE_CODE: the pinned Claude Code binary");
    let mut r = Relay::prepare(None, false);
    let api = relay_e2e::fakeapi::FakeApi::start(&r.root, &json!({"turns": [{"text": "pong"}]}));
    r.write_token(&format!("sk-ant-oat01-{}", relay_e2e::random_hex(40)));
    let settings = |network: &str| {
        let mut s = base_settings(Some(TOKEN_SETTING));
        s["claude_path"] = json!(claude);
        let t = &mut s["terminal_templates"][0];
        t["command"] = json!(claude);
        t["env"] = json!({"ANTHROPIC_BASE_URL": api.url(), "CLAUDE_CODE_MAX_RETRIES": "0"});
        t["network"] = json!(network);
        s
    };
    r.write_settings(&settings("proxied"));
    r.launch_daemon();
    let start = |r: &Relay| {
        r.cli_json(&["session", "start", "--project", "p1"])["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let proxied_id = start(&r);
    r.write_settings(&settings("host"));
    let host_id = start(&r);
    let turn = |id: &str| -> (f64, bool) {
        let t = Instant::now();
        let out = r
            .cli_command(&["session", "message", "--id", id, "--stream", "ping"])
            .stdin(Stdio::null())
            .output();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        (
            ms,
            out.is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("pong")
            }),
        )
    };
    for id in [&proxied_id, &host_id] {
        let _ = turn(id);
    }
    let mut proxied = Series::new("proxied");
    let mut host = Series::new("host");
    for _ in 0..runs {
        for (series, id) in [(&mut proxied, &proxied_id), (&mut host, &host_id)] {
            let (ms, ok) = turn(id);
            if ok {
                series.samples.push(ms);
            } else {
                series.failures += 1;
            }
        }
    }
    let more = proxied.median() - host.median();
    let mut text = format!(
        "stream-turn: {runs} streamed turns each, alternated; the real Claude Code against fakeapi on loopback\n{HEADER}"
    );
    text += &proxied.row();
    text += &host.row();
    text += &format!("proxied - host median: {more:.1} ms a turn\n");
    Report {
        text,
        json: json!({"case": "stream-turn", "runs": runs, "series": [proxied.json(), host.json()],
            "proxied_minus_host_ms": more}),
    }
}
