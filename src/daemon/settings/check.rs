//! What the shape cannot say, checked once serde has read the file: ids present and
//! unique, paths absolute or `~/`, names and lists well formed, ports free of Claude's
//! traffic. Each problem is an [`Invalid`] at its key path; `load.rs` puts the line and
//! column to it. The lists read here (the execution-bearing names, the egress allowlist)
//! are `src/sandbox/`'s.

use std::collections::HashMap;

use super::{Limits, NetworkMode, SessionSandbox, Settings, Template};
use crate::jsonpath::KeyPath;
use crate::sandbox::egress_rules::{held_ports, routing_entries, Rules};
use crate::sandbox::exec_list;
use crate::sandbox::MacOptIns;

/// A problem at a key path of the document.
pub(super) struct Invalid {
    pub(super) at: KeyPath,
    pub(super) problem: String,
}

pub(super) fn invalid(at: KeyPath, problem: impl Into<String>) -> Invalid {
    Invalid {
        at,
        problem: problem.into(),
    }
}

pub(super) fn validate(s: &Settings) -> Result<(), Invalid> {
    let top = KeyPath::default();
    check_passthrough(&s.env_passthrough, top.clone().key("env_passthrough"))?;
    check_egress(
        &s.session_sandbox.egress,
        top.clone().key("session_sandbox").key("egress"),
    )?;
    check_limits(
        &s.session_sandbox.limits,
        top.clone().key("session_sandbox").key("limits"),
    )?;
    let mut ids = HashMap::new();
    for (i, p) in s.projects.iter().enumerate() {
        check_id(&p.id, ("projects", i, "project"), &mut ids)?;
        let at = top.clone().key("projects").index(i);
        if !(p.path.starts_with('/') || p.path == "~" || p.path.starts_with("~/")) {
            return Err(invalid(
                at.key("path"),
                format!("{:?} must be absolute or start with ~/", p.path),
            ));
        }
    }
    let mut ids = HashMap::new();
    for (i, t) in s.terminal_templates.iter().enumerate() {
        validate_template(t, i, &mut ids)?;
        check_listen_ports(t, i, &s.session_sandbox)?;
    }
    if !s.api.listen.is_empty() {
        let at = || top.clone().key("api").key("listen");
        let addr: std::net::SocketAddr = s.api.listen.parse().map_err(|_| {
            invalid(
                at(),
                format!("{:?} is not an address like 127.0.0.1:4850", s.api.listen),
            )
        })?;
        if !addr.ip().is_loopback() {
            return Err(invalid(
                at(),
                format!("{:?} must be a loopback address", s.api.listen),
            ));
        }
    }
    Ok(())
}

fn validate_template<'a>(
    t: &'a Template,
    i: usize,
    ids: &mut HashMap<&'a String, usize>,
) -> Result<(), Invalid> {
    check_id(&t.id, ("terminal_templates", i, "template"), ids)?;
    let at = KeyPath::default().key("terminal_templates").index(i);
    check_command(t, at.clone().key("command"))?;
    check_paths(t, &at)?;
    if !t.model.is_empty() && !valid_model(&t.model) {
        return Err(invalid(
            at.key("model"),
            format!("{:?} is not a model name", t.model),
        ));
    }
    check_passthrough(&t.env_passthrough, at.clone().key("env_passthrough"))?;
    if let Some(x) = t
        .writable_exceptions
        .iter()
        .position(|x| !exec_list::valid_exception(x))
    {
        return Err(invalid(
            at.key("writable_exceptions").index(x),
            format!(
                "{:?} is neither a path (absolute or ~/…) nor one of {}",
                t.writable_exceptions[x],
                exec_list::root_names().join(", ")
            ),
        ));
    }
    check_egress(&t.egress, at.clone().key("egress"))?;
    check_limits(&t.limits, at.clone().key("limits"))?;
    check_macos(&t.macos, at.clone().key("macos"))?;
    if !t.permission_mode.is_empty() && !valid_permission_mode(&t.permission_mode) {
        return Err(invalid(
            at.key("permission_mode"),
            format!("{:?} is not one word of letters", t.permission_mode),
        ));
    }
    Ok(())
}

/// A CPU weight within cgroup v2's range (docs/settings.md#limits); 0 is none.
fn check_limits(l: &Limits, at: KeyPath) -> Result<(), Invalid> {
    match l.cpu_weight {
        Some(w) if w != 0 && !Limits::CPU_WEIGHTS.contains(&w) => Err(invalid(
            at.key("cpu_weight"),
            format!("{w} is not a CPU weight (1 to 10000, or 0 for none)"),
        )),
        _ => Ok(()),
    }
}

/// A template's `command`: a program, named alone (its arguments go in `args`).
fn check_command(t: &Template, at: KeyPath) -> Result<(), Invalid> {
    let c = &t.command;
    if c.trim().is_empty() {
        let got = if c.is_empty() {
            "empty".to_string()
        } else {
            format!("{c:?} is blank")
        };
        return Err(invalid(
            at,
            format!(
                "{got}: name the program the {:?} template runs, such as \"/bin/bash\" or \"claude\"",
                t.id
            ),
        ));
    }
    // A name with a space that is not a path: a program and its arguments in one
    // string, which no program is called. (An absolute path may hold a space.)
    if !(c.starts_with('/') || c.starts_with('~')) && c.trim().contains(char::is_whitespace) {
        let mut words = c.split_whitespace();
        let program = words.next().unwrap_or_default();
        let args: Vec<String> = words.map(|w| format!("{w:?}")).collect();
        return Err(invalid(
            at,
            format!(
                "{c:?} is a program and its arguments in one string: put the program in \
                 command and each argument in args, as in \"command\": {program:?}, \
                 \"args\": [{}]",
                args.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A template's `read`, `read_write` and `deny` paths: absolute or `~/`, checked when
/// the file is read rather than at the template's first launch, naming the template.
fn check_paths(t: &Template, at: &KeyPath) -> Result<(), Invalid> {
    for (key, list) in [
        ("read", &t.read),
        ("read_write", &t.read_write),
        ("deny", &t.deny),
    ] {
        if let Some(i) = list
            .iter()
            .position(|p| !(p.starts_with('/') || p == "~" || p.starts_with("~/")))
        {
            return Err(invalid(
                at.clone().key(key).index(i),
                format!(
                    "{:?} in the {:?} template's {key} list must be absolute or start with ~/",
                    list[i], t.id
                ),
            ));
        }
    }
    Ok(())
}

/// The `id` of item `i` of a list (`projects`, each a `project`): not empty, and no
/// earlier item's.
fn check_id<'a>(
    id: &'a String,
    (list, i, what): (&str, usize, &str),
    ids: &mut HashMap<&'a String, usize>,
) -> Result<(), Invalid> {
    let at = KeyPath::default().key(list).index(i).key("id");
    if id.is_empty() {
        return Err(invalid(at, format!("empty: a {what} needs an id")));
    }
    if let Some(first) = ids.insert(id, i) {
        return Err(invalid(at, format!("{id:?} is {list}[{first}]'s id too")));
    }
    Ok(())
}

/// An `env_passthrough` list: every entry a name without `=` or NUL, or a non-empty
/// prefix and one `*` as its last character (`crate::host::env::valid_pattern`).
fn check_passthrough(list: &[String], at: KeyPath) -> Result<(), Invalid> {
    match list
        .iter()
        .position(|p| !crate::host::env::valid_pattern(p))
    {
        None => Ok(()),
        Some(i) => Err(invalid(
            at.index(i),
            format!(
                "{:?} is not a variable name or a prefix ending in * (such as AWS_*)",
                list[i]
            ),
        )),
    }
}

/// An `egress` list: every entry a host, a `*.domain`, an address with its port or a
/// preset (docs/settings.md#network).
fn check_egress(list: &[String], at: KeyPath) -> Result<(), Invalid> {
    for (i, e) in list.iter().enumerate() {
        Rules::parse(std::slice::from_ref(e)).map_err(|why| invalid(at.clone().index(i), why))?;
    }
    Ok(())
}

/// A template's `listen_ports`: none the forwarder of its proxied sandbox listens on
/// (its proxy port, each loopback address its egress list bridges), nor the port of a
/// loopback address its routing URLs name: a tool listening there would get Claude's
/// requests, bearer and all (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude).
fn check_listen_ports(t: &Template, i: usize, sandbox: &SessionSandbox) -> Result<(), Invalid> {
    if t.listen_ports.is_empty() {
        return Ok(());
    }
    let proxied = !sandbox.network_off && matches!(t.network, None | Some(NetworkMode::Proxied));
    let mut list = routing_entries(&t.env);
    if proxied {
        list.extend(sandbox.egress.iter().cloned());
        list.extend(t.egress.iter().cloned());
    }
    // Each entry was checked on its own above.
    let rules = Rules::parse(&list).unwrap_or_default();
    let bridges = rules.bridges();
    let mut held: Vec<u16> = bridges.iter().map(|b| b.port()).collect();
    if proxied {
        held = held_ports(&rules);
    }
    let Some(x) = t.listen_ports.iter().position(|p| held.contains(p)) else {
        return Ok(());
    };
    let port = t.listen_ports[x];
    let why = match bridges.iter().find(|b| b.port() == port) {
        Some(b) if proxied => format!("the sandbox's forwarder listens on it for {b}"),
        Some(b) => format!("the template's routing URL sends Claude's requests to {b}"),
        None => "the sandbox's forwarder listens on it, the egress proxy's port".to_string(),
    };
    Err(invalid(
        KeyPath::default()
            .key("terminal_templates")
            .index(i)
            .key("listen_ports")
            .index(x),
        format!(
            "{port}: {why}, where Claude's traffic goes; a tool listening there would \
             take it (and the token with it)"
        ),
    ))
}

/// A template's `macos` opt-ins: every `automation` entry a bundle id, every `mach`
/// entry a service name. A name the escape section closes is accepted and stays
/// closed (explain and doctor say so).
fn check_macos(m: &MacOptIns, at: KeyPath) -> Result<(), Invalid> {
    for (key, list, what) in [
        (
            "automation",
            &m.automation,
            "a bundle id (com.apple.Terminal)",
        ),
        ("mach", &m.mach, "a Mach service name (com.example.service)"),
    ] {
        if let Some(i) = list.iter().position(|n| !valid_mac_name(n)) {
            return Err(invalid(
                at.clone().key(key).index(i),
                format!("{:?} is not {what}", list[i]),
            ));
        }
    }
    Ok(())
}

/// A `--model` value relay passes on: a model name or alias, 1-128 characters of
/// letters, digits and `._:/@[]-`, not starting with `-` (it must not read as a flag).
pub fn valid_model(m: &str) -> bool {
    (1..=128).contains(&m.len())
        && !m.starts_with('-')
        && m.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/@[]-".contains(&b))
}

/// A `--permission-mode` value relay passes on: one word of 1-32 ASCII letters.
/// Claude Code itself checks it against its own list (2.1.332: `acceptEdits`, `auto`,
/// `bypassPermissions`, `manual`, `dontAsk`, `plan`).
pub fn valid_permission_mode(m: &str) -> bool {
    (1..=32).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_alphabetic())
}

/// A name macOS gives an app or a Mach service, as relay takes it in `macos`: 1-255
/// ASCII letters, digits and `.-_`, with a dot, starting with a letter or digit
/// (`com.apple.Terminal`, `com.example.service`).
pub fn valid_mac_name(n: &str) -> bool {
    (1..=255).contains(&n.len())
        && n.contains('.')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::settings::{describe_unknown, parse, seed, to_pretty};
    use std::path::Path;

    /// Every project and every template has an id, each once in its list.
    #[test]
    fn ids_are_there_and_each_once_in_its_list() {
        let p = Path::new("/cfg/settings.json");
        for (file, want) in [
            (
                r#"{"projects": [{"id": "", "path": "~"}]}"#,
                r#"/cfg/settings.json:1:22: projects[0].id: empty: a project needs an id"#,
            ),
            (
                r#"{"terminal_templates": [{"id": "", "command": "x"}]}"#,
                r#"/cfg/settings.json:1:32: terminal_templates[0].id: empty: a template needs an id"#,
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x"}, {"id": "t", "command": "y"}]}"#,
                r#"/cfg/settings.json:1:61: terminal_templates[1].id: "t" is terminal_templates[0]'s id too"#,
            ),
        ] {
            assert_eq!(parse(p, file.as_bytes()).err().unwrap().to_string(), want);
        }
        // A project and a template may share an id.
        assert!(parse(
            p,
            br#"{"projects": [{"id": "a", "path": "~"}], "terminal_templates": [{"id": "a", "command": "x"}]}"#
        )
        .is_ok());
    }

    #[test]
    fn env_passthrough_entries_are_checked_and_merged_per_template() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(
            p,
            br#"{"env_passthrough": ["GITHUB_TOKEN", "AWS_*"],
                 "terminal_templates": [{"id": "t", "command": "/bin/sh",
                                         "env_passthrough": ["AWS_*", "NPM_TOKEN"]}]}"#,
        )
        .unwrap();
        assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
        let t = l.settings.template("t").unwrap();
        assert_eq!(
            l.settings.env_passthrough_for(t),
            ["GITHUB_TOKEN", "AWS_*", "NPM_TOKEN"]
        );
        for bad in ["*", "A*B", "A=B", "", "**"] {
            let top = format!(r#"{{"env_passthrough": ["OK", {bad:?}]}}"#);
            let e = parse(p, top.as_bytes()).err().unwrap();
            assert_eq!(e.key, "env_passthrough[1]", "{e}");
            assert!(e.problem.starts_with(&format!("{bad:?} is not")), "{e}");
            let in_template = format!(
                r#"{{"terminal_templates": [{{"id": "t", "command": "/bin/sh", "env_passthrough": [{bad:?}]}}]}}"#
            );
            let e = parse(p, in_template.as_bytes()).err().unwrap();
            assert_eq!(e.key, "terminal_templates[0].env_passthrough[0]", "{e}");
            assert!(e.problem.starts_with(&format!("{bad:?} is not")), "{e}");
        }
        let e = parse(p, br#"{"env_passthrough": "GITHUB_TOKEN"}"#)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "/cfg/settings.json:1:21: env_passthrough: expected a list of variable names, \
             got \"GITHUB_TOKEN\""
        );
    }

    #[test]
    fn model_and_permission_mode_are_checked_in_the_file() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, br#"{"terminal_templates":[{"id":"claude-code","command":"claude","model":"claude-opus-4-1[1m]","permission_mode":"acceptEdits"}]}"#).unwrap();
        assert_eq!(
            l.settings.terminal_templates[0].model,
            "claude-opus-4-1[1m]"
        );
        assert!(l.unknown_keys.is_empty());
        for bad in [
            br#"{"terminal_templates":[{"id":"c","command":"x","model":"--dangerously-skip-permissions"}]}"#.as_slice(),
            br#"{"terminal_templates":[{"id":"c","command":"x","model":"a b"}]}"#,
            br#"{"terminal_templates":[{"id":"c","command":"x","permission_mode":"plan --x"}]}"#,
        ] {
            let e = parse(p, bad).err().unwrap();
            assert!(e.key.starts_with("terminal_templates[0]."), "{e}");
        }
        assert!(valid_permission_mode("bypassPermissions"));
        assert!(!valid_permission_mode(""));
        assert!(valid_model("sonnet") && !valid_model("") && !valid_model("-m"));
    }

    /// `listen_ports`: read as port numbers; refused, naming the entry and why, when one
    /// is a port the template's forwarder or gateway holds (docs/settings.md#terminal_templates).
    #[test]
    fn listen_ports_never_name_a_port_claudes_traffic_goes_to() {
        let p = Path::new("/cfg/settings.json");
        let file = |template: &str, sandbox: &str| {
            format!(
                r#"{{"session_sandbox": {{{sandbox}}}, "terminal_templates": [{{"id": "a", "command": "x"}}, {template}]}}"#
            )
        };
        let ok = |template: &str, sandbox: &str| -> Vec<u16> {
            let l = parse(p, file(template, sandbox).as_bytes()).unwrap();
            assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
            l.settings.terminal_templates[1].listen_ports.clone()
        };
        let refused = |template: &str, sandbox: &str| -> (String, String) {
            let e = parse(p, file(template, sandbox).as_bytes()).err().unwrap();
            (e.key, e.problem)
        };
        let gateway = r#""env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000/v1"}"#;
        assert_eq!(
            ok(
                &format!(
                    r#"{{"id": "b", "command": "x", {gateway}, "listen_ports": [3000, 0, 5173]}}"#
                ),
                ""
            ),
            vec![3000, 0, 5173]
        );
        assert!(Template::new("t", "t", "x").listen_ports.is_empty());
        let want = |x: usize, port: u16, why: &str| {
            (
                format!("terminal_templates[1].listen_ports[{x}]"),
                format!(
                    "{port}: {why}, where Claude's traffic goes; a tool listening there would \
                     take it (and the token with it)"
                ),
            )
        };
        for (template, sandbox, x, port, why) in [
            // The proxy port, whichever the forwarder takes.
            (r#"{"id": "b", "command": "x", "listen_ports": [3000, 3128]}"#.to_string(), "", 1, 3128,
             "the sandbox's forwarder listens on it, the egress proxy's port".to_string()),
            (r#"{"id": "b", "command": "x", "egress": ["127.0.0.1:3128"], "listen_ports": [3129]}"#.to_string(),
             "", 0, 3129, "the sandbox's forwarder listens on it, the egress proxy's port".to_string()),
            // A bridge: the template's, the settings', its routing URL's.
            (r#"{"id": "b", "command": "x", "egress": ["127.0.0.1:5432"], "listen_ports": [5432]}"#.to_string(),
             "", 0, 5432, "the sandbox's forwarder listens on it for 127.0.0.1:5432".to_string()),
            (r#"{"id": "b", "command": "x", "network": "proxied", "listen_ports": [6379]}"#.to_string(),
             r#""egress": ["[::1]:6379"]"#, 0, 6379, "the sandbox's forwarder listens on it for [::1]:6379".to_string()),
            (format!(r#"{{"id": "b", "command": "x", {gateway}, "listen_ports": [4000]}}"#),
             "", 0, 4000, "the sandbox's forwarder listens on it for 127.0.0.1:4000".to_string()),
            // On the host's network the gateway's port is Claude's all the same.
            (format!(r#"{{"id": "b", "command": "x", "network": "host", {gateway}, "listen_ports": [4000]}}"#),
             "", 0, 4000, "the template's routing URL sends Claude's requests to 127.0.0.1:4000".to_string()),
            (format!(r#"{{"id": "b", "command": "x", {gateway}, "listen_ports": [4000]}}"#),
             r#""network_off": true"#, 0, 4000, "the template's routing URL sends Claude's requests to 127.0.0.1:4000".to_string()),
        ] {
            assert_eq!(refused(&template, sandbox), want(x, port, &why), "{template}");
        }
        // Without a forwarder (the host's network, or none), its ports are free to take,
        // and a bridge of another template is not this one's.
        for (template, sandbox) in [
            (
                r#"{"id": "b", "command": "x", "network": "host", "egress": ["127.0.0.1:5432"], "listen_ports": [3128, 5432]}"#,
                "",
            ),
            (
                r#"{"id": "b", "command": "x", "network": "none", "listen_ports": [3128]}"#,
                "",
            ),
            (
                r#"{"id": "b", "command": "x", "listen_ports": [3128]}"#,
                r#""network_off": true"#,
            ),
        ] {
            assert!(!ok(template, sandbox).is_empty(), "{template}");
        }
        let other = r#"{"terminal_templates": [{"id": "a", "command": "x", "egress": ["127.0.0.1:5432"]},
            {"id": "b", "command": "x", "listen_ports": [5432]}]}"#;
        assert!(parse(p, other.as_bytes()).is_ok());
        // Not a port number: serde's refusal, in words.
        let e = refused(
            r#"{"id": "b", "command": "x", "listen_ports": [80, 70000]}"#,
            "",
        );
        assert_eq!(
            e,
            (
                "terminal_templates[1].listen_ports[1]".to_string(),
                "expected a port number (0 to 65535), got 70000".to_string()
            )
        );
    }

    #[test]
    fn macos_opt_ins_are_read_checked_per_entry_and_absent_from_the_seed() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(
            p,
            br#"{"terminal_templates": [{"id": "t", "command": "/bin/sh", "macos":
                  {"keychain": true, "clipboard": true, "automation": ["com.apple.Terminal"],
                   "mach": ["com.example.service", "com.apple.coreservices.launchservicesd"],
                   "keychian": true}}]}"#,
        )
        .unwrap();
        let m = &l.settings.template("t").unwrap().macos;
        assert!(m.keychain && m.clipboard);
        assert_eq!(m.automation, ["com.apple.Terminal"]);
        // An escape's name is taken; it stays closed (the renderer, explain, doctor).
        assert_eq!(m.mach[1], "com.apple.coreservices.launchservicesd");
        assert_eq!(
            describe_unknown(&l.unknown_keys).split(" at ").next(),
            Some("unknown keys: terminal_templates[0].macos.keychian")
        );
        // Written back as read; a template without opt-ins writes no `macos`.
        let text = to_pretty(&l.settings);
        let again = parse(p, text.as_bytes()).unwrap();
        assert_eq!(
            again.settings.terminal_templates,
            l.settings.terminal_templates
        );
        let seed = seed();
        assert!(seed.terminal_templates.iter().all(|t| t.macos.is_empty()));
        assert!(!to_pretty(&seed).contains("macos"));
        for (macos, key, problem) in [
            (
                r#"{"automation": ["com.apple.Terminal", "Terminal"]}"#,
                "terminal_templates[0].macos.automation[1]",
                "\"Terminal\" is not a bundle id",
            ),
            (
                r#"{"mach": ["com.example.a\")) (allow default"]}"#,
                "terminal_templates[0].macos.mach[0]",
                "is not a Mach service name",
            ),
            (
                r#"{"keychain": "yes"}"#,
                "terminal_templates[0].macos.keychain",
                "expected true or false",
            ),
            (
                r#"{"mach": "com.example.a"}"#,
                "terminal_templates[0].macos.mach",
                "expected a list of Mach service names",
            ),
        ] {
            let file = format!(
                r#"{{"terminal_templates": [{{"id": "t", "command": "/bin/sh", "macos": {macos}}}]}}"#
            );
            let e = parse(p, file.as_bytes()).err().unwrap();
            assert!(e.key.starts_with(key), "{e}");
            assert!(e.problem.contains(problem), "{e}");
        }
        assert!(valid_mac_name("com.apple.Terminal") && valid_mac_name("org.python-3.x_y"));
        assert!(!valid_mac_name("") && !valid_mac_name(".com.a") && !valid_mac_name("a b.c"));
    }
}
