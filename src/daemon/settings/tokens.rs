//! The token file each project's launches run on: a project's own `claude_token_file`
//! over the top-level one (docs/settings.md#claude_token_file), every file the settings
//! name (what every sandboxed launch is denied), and the check of one value.

use std::path::{Path, PathBuf};

use super::Settings;

/// The `claude_token_file` value a project's launches run on: the project's own when it
/// sets one (`""` meaning none), else the top-level one; with the key it came from, for
/// messages. A project id that names no project gets the top-level value.
pub fn project_token_value<'a>(s: &'a Settings, project_id: &str) -> (&'a str, String) {
    match s.projects.iter().position(|p| p.id == project_id) {
        Some(i) => match &s.projects[i].claude_token_file {
            Some(v) => (v.as_str(), format!("projects[{i}].claude_token_file")),
            None => (s.claude_token_file.as_str(), "claude_token_file".into()),
        },
        None => (s.claude_token_file.as_str(), "claude_token_file".into()),
    }
}

/// The token file a project's launches run on (`Ok(None)`: none), checked as
/// [`token_file_path`] checks it.
pub fn project_token_path(
    s: &Settings,
    project_id: &str,
    home: &Path,
) -> Result<Option<PathBuf>, String> {
    let (value, key) = project_token_value(s, project_id);
    token_file_path(value, home).map_err(|e| keyed(e, &key))
}

/// One configured token file and the projects whose launches run on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredToken {
    pub path: PathBuf,
    /// Where it is set: `claude_token_file`, `projects[1].claude_token_file`, …
    pub keys: Vec<String>,
    /// The ids of the projects that run on it, in settings order.
    pub projects: Vec<String>,
}

/// Every token file the settings name (the top-level one even when every project sets
/// its own), each once, in settings order: what every sandboxed launch is denied. An
/// error names the first value that is not a path: no sandbox can be built that would
/// be sure to hide it.
pub fn configured_tokens(s: &Settings, home: &Path) -> Result<Vec<ConfiguredToken>, String> {
    match every_token(s, home) {
        (all, None) => Ok(all),
        (_, Some(e)) => Err(e),
    }
}

/// [`configured_tokens`] without giving up at a bad value: every file that is a path,
/// and the first error. The token watcher keeps watching those while the person fixes
/// the other (a launch is refused meanwhile).
pub fn every_token(s: &Settings, home: &Path) -> (Vec<ConfiguredToken>, Option<String>) {
    let mut out: Vec<ConfiguredToken> = Vec::new();
    let mut first_error = None;
    let mut add = |path: PathBuf, key: String, project: Option<&str>| {
        let i = match out.iter().position(|t| t.path == path) {
            Some(i) => i,
            None => {
                out.push(ConfiguredToken {
                    path,
                    keys: vec![],
                    projects: vec![],
                });
                out.len() - 1
            }
        };
        let t = &mut out[i];
        if !t.keys.contains(&key) {
            t.keys.push(key);
        }
        if let Some(p) = project {
            t.projects.push(p.to_string());
        }
    };
    match token_file_path(&s.claude_token_file, home) {
        Ok(Some(p)) => add(p, "claude_token_file".into(), None),
        Ok(None) => {}
        Err(e) => first_error = Some(e),
    }
    for p in &s.projects {
        match project_token_path(s, &p.id, home) {
            Ok(Some(path)) => {
                let (_, key) = project_token_value(s, &p.id);
                add(path, key, Some(&p.id));
            }
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    (out, first_error)
}

/// `claude_token_file "x" must …` said of the key it came from.
fn keyed(message: String, key: &str) -> String {
    match message.strip_prefix("claude_token_file ") {
        Some(rest) if key != "claude_token_file" => format!("{key} {rest}"),
        _ => message,
    }
}

/// Checks the `claude_token_file` value: empty (unset), absolute or `~/`-prefixed.
pub fn token_file_path(value: &str, home: &Path) -> Result<Option<PathBuf>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    if let Some(rest) = value.strip_prefix("~/") {
        if rest.trim_start_matches('/').is_empty() {
            return Err(format!(
                "claude_token_file {value:?} must name a file, absolute or starting with ~/"
            ));
        }
        return Ok(Some(crate::sandbox::resolve::expand_home(value, home)));
    }
    if value.starts_with('/') {
        return Ok(Some(PathBuf::from(value)));
    }
    Err(format!(
        "claude_token_file {value:?} must be an absolute path or start with ~/"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::settings::parse;

    #[test]
    fn each_project_runs_on_its_own_token_file_or_the_top_level_one() {
        let home = Path::new("/home/ada");
        let text = br#"{"claude_token_file": "~/.config/relay/token",
            "projects": [
                {"id": "work", "path": "~/w", "claude_token_file": "~/.config/work/token",
                 "account": "work"},
                {"id": "home", "path": "~/h"},
                {"id": "none", "path": "~/n", "claude_token_file": ""},
                {"id": "also", "path": "~/a", "claude_token_file": "/home/ada/.config/work/token"}
            ]}"#;
        let s = parse(Path::new("/cfg/settings.json"), text)
            .unwrap()
            .settings;
        assert_eq!(s.projects[0].account.as_deref(), Some("work"));
        let path = |id: &str| project_token_path(&s, id, home).unwrap();
        assert_eq!(
            path("work"),
            Some(PathBuf::from("/home/ada/.config/work/token"))
        );
        assert_eq!(
            path("home"),
            Some(PathBuf::from("/home/ada/.config/relay/token"))
        );
        assert_eq!(path("none"), None);
        assert_eq!(
            path("unknown"),
            Some(PathBuf::from("/home/ada/.config/relay/token"))
        );
        let all = configured_tokens(&s, home).unwrap();
        let view: Vec<_> = all
            .iter()
            .map(|t| (t.path.to_str().unwrap(), t.keys.clone(), t.projects.clone()))
            .collect();
        assert_eq!(
            view,
            vec![
                (
                    "/home/ada/.config/relay/token",
                    vec!["claude_token_file".to_string()],
                    vec!["home".to_string()]
                ),
                (
                    "/home/ada/.config/work/token",
                    vec![
                        "projects[0].claude_token_file".to_string(),
                        "projects[3].claude_token_file".to_string()
                    ],
                    vec!["work".to_string(), "also".to_string()]
                ),
            ]
        );
        // Every project setting its own: the top-level file is still denied everywhere.
        let mut only = s.clone();
        only.projects.retain(|p| p.id != "home");
        let all = configured_tokens(&only, home).unwrap();
        assert_eq!(all[0].path, PathBuf::from("/home/ada/.config/relay/token"));
        assert!(all[0].projects.is_empty());
        // `null` is no value: refused, never read as "the top-level one".
        let null = br#"{"projects": [{"id": "w", "path": "~/w", "claude_token_file": null}]}"#;
        let e = parse(Path::new("/cfg/settings.json"), null).err().unwrap();
        assert!(e.to_string().contains("claude_token_file"), "{e}");
        // A bad project value is named by its key, and fails the whole list; the watcher
        // still gets every other file.
        let mut bad = s.clone();
        bad.projects[1].claude_token_file = Some("relative".into());
        let e = configured_tokens(&bad, home).unwrap_err();
        assert!(
            e.starts_with("projects[1].claude_token_file \"relative\""),
            "{e}"
        );
        assert_eq!(project_token_path(&bad, "home", home).unwrap_err(), e);
        let (watched, first) = every_token(&bad, home);
        assert_eq!(first, Some(e.clone()));
        assert_eq!(watched.len(), 2, "{watched:?}");
        assert!(project_token_path(&bad, "work", home).is_ok());
    }

    #[test]
    fn token_setting_values() {
        let home = Path::new("/home/ada");
        assert_eq!(token_file_path("", home), Ok(None));
        assert_eq!(
            token_file_path("~/.config/t", home),
            Ok(Some(PathBuf::from("/home/ada/.config/t")))
        );
        assert_eq!(
            token_file_path("/etc/t", home),
            Ok(Some(PathBuf::from("/etc/t")))
        );
        for bad in ["token", "./t", "~", "~/", "~bob/t"] {
            let e = token_file_path(bad, home).unwrap_err();
            assert!(e.contains("claude_token_file") && e.contains(bad), "{e}");
        }
    }
}
