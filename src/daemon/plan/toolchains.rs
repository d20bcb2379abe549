//! The person's toolchains, read-only in every sandbox (docs/settings.md#toolchains).
//! They are found from relay's `PATH`: each folder outside the system's, and the
//! install root behind it. rustup's proxies in `~/.cargo/bin` run `~/.rustup`; pyenv's
//! shims run `~/.pyenv`; nvm's `bin` lives in its node's folder; a link in
//! `~/.local/bin` (pipx, uv) points into its tool's own environment.
//! Credentials that live in those roots stay masked ([`CREDENTIALS`]).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::protocol::Backend;

/// One toolchain folder a sandbox reads, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    pub root: PathBuf,
    pub why: String,
    /// The variable its tools find it by, when the launch's `HOME` is not the person's.
    pub var: Option<&'static str>,
}

/// Files that hold credentials, relative to the home: masked in every sandbox whose
/// grants would hold them (a toolchain's, a template's, a home project's).
pub const CREDENTIALS: &[&str] = &[
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".npmrc",
    ".pypirc",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".netrc",
    ".git-credentials",
    ".local/share/keyrings",
    ".aws/credentials",
    ".kube/config",
    ".config/gcloud/credentials.db",
    ".config/gcloud/access_tokens.db",
    ".config/gcloud/application_default_credentials.json",
    ".config/gcloud/legacy_credentials",
    ".azure/msal_token_cache.json",
    ".azure/accessTokens.json",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".config/hub",
    ".gnupg/private-keys-v1.d",
    ".ssh/id_rsa",
    ".ssh/id_ecdsa",
    ".ssh/id_ecdsa_sk",
    ".ssh/id_ed25519",
    ".ssh/id_ed25519_sk",
    ".ssh/id_dsa",
];

/// Where pipx and uv keep one environment per tool, below the home.
const VENVS: &[&str] = &[".local/share/pipx/venvs", ".local/share/uv/tools"];

/// The most links of one `PATH` folder followed to their tools' roots.
const LINKS_MAX: usize = 512;

/// Whether `root` is too wide to be a toolchain's: `/`, the home or a folder above it,
/// or one of the system's live or shared folders.
fn too_wide(root: &Path, home: &Path) -> bool {
    const LIVE: &[&str] = &["/proc", "/sys", "/dev", "/run", "/var/run"];
    const SHARED: &[&str] = &["/tmp", "/var/tmp", "/private/tmp", "/var/folders"];
    home.starts_with(root)
        || LIVE
            .iter()
            .any(|s| root.starts_with(s) || Path::new(s).starts_with(root))
        || SHARED.iter().any(|s| Path::new(s).starts_with(root))
}

/// Whether `dir` is one of the folders every sandbox of `backend` reads already.
fn is_system(dir: &Path, backend: Backend) -> bool {
    let system: &[&str] = match backend {
        Backend::Bwrap => &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"],
        Backend::Seatbelt => &["/usr", "/bin", "/sbin", "/opt/homebrew", "/System"],
    };
    system.iter().any(|s| dir.starts_with(s))
}

/// The toolchains behind the absolute folders of `path_env`, in order, each once.
/// `var` reads relay's environment (`RUSTUP_HOME`, `PYENV_ROOT`).
pub fn found(
    home: &Path,
    path_env: &OsStr,
    backend: Backend,
    var: impl Fn(&str) -> Option<PathBuf>,
) -> Vec<Toolchain> {
    // Roots are compared with where they really are: the home too.
    let written_home = home;
    let real_home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let home = real_home.as_path();
    let mut out: Vec<Toolchain> = Vec::new();
    let mut add = |root: PathBuf, why: String, var: Option<&'static str>| {
        // A root reached through a link is not taken: a session could have planted it
        // (`~/.rustup` → `/`).
        if std::fs::canonicalize(&root).ok().as_ref() != Some(&root) || too_wide(&root, home) {
            return;
        }
        if root.is_dir() && !out.iter().any(|t| root.starts_with(&t.root)) {
            out.retain(|t| !t.root.starts_with(&root));
            out.push(Toolchain { root, why, var });
        }
    };
    for dir in std::env::split_paths(path_env).filter(|d| d.is_absolute()) {
        let dir = match dir.strip_prefix(written_home) {
            Ok(rest) => home.join(rest),
            Err(_) => dir,
        };
        if is_system(&dir, backend) || !dir.is_dir() || dir == home {
            continue;
        }
        let shown = tilde(&dir, home);
        add(
            dir.clone(),
            format!("a folder of relay's PATH ({shown})"),
            None,
        );
        for (root, why, var) in behind(&dir, home, &var) {
            add(root, why, var);
        }
    }
    out
}

/// The install roots behind one `PATH` folder.
fn behind(
    dir: &Path,
    home: &Path,
    var: &impl Fn(&str) -> Option<PathBuf>,
) -> Vec<(PathBuf, String, Option<&'static str>)> {
    let shown = tilde(dir, home);
    let mut roots = Vec::new();
    if dir.ends_with(".cargo/bin") {
        let rustup = var("RUSTUP_HOME").unwrap_or_else(|| home.join(".rustup"));
        let why = format!("rustup's toolchains, which {shown} runs");
        roots.push((rustup, why, Some("RUSTUP_HOME")));
    }
    if dir.ends_with(".pyenv/shims") || dir.ends_with(".pyenv/bin") {
        let pyenv = var("PYENV_ROOT").unwrap_or_else(|| home.join(".pyenv"));
        let why = format!("pyenv's versions, which {shown} runs");
        roots.push((pyenv, why, Some("PYENV_ROOT")));
    }
    // nvm's node: the version's folder, where its libraries are. Known layouts only: a
    // tool's folder beside its `bin` may hold its credentials.
    let text = dir.to_string_lossy();
    if let Some(parent) = dir.parent().filter(|_| dir.ends_with("bin")) {
        if text.contains(".nvm/versions/node/") {
            let why = format!("the tool {shown} belongs to");
            roots.push((parent.to_path_buf(), why, None));
        }
    }
    // sdkman's candidate: its whole folder, the versions and the `current` link among
    // them that `PATH` names (`candidates/java/current/bin`): a root through that link
    // is not taken, the folder holding it is.
    if let Ok(rest) = dir.strip_prefix(home.join(".sdkman/candidates")) {
        if let Some(tool) = rest.components().next() {
            let why = format!(
                "sdkman's {}, whose version {shown} runs",
                tool.as_os_str().to_string_lossy()
            );
            roots.push((home.join(".sdkman/candidates").join(tool), why, None));
        }
    }
    roots.extend(link_roots(dir, home).into_iter().map(|(r, w)| (r, w, None)));
    roots
}

/// Where the links in `dir` lead (pipx's and uv's tools): each target's environment,
/// the folder above its `bin`, or its own folder.
fn link_roots(dir: &Path, home: &Path) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut roots = BTreeMap::new();
    for e in entries.flatten().take(LINKS_MAX) {
        if !e.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let Ok(target) = std::fs::canonicalize(e.path()) else {
            continue;
        };
        let Some(folder) = target.parent() else {
            continue;
        };
        if folder.starts_with(dir) || !folder.starts_with(home) {
            continue;
        }
        // pipx's and uv's tools: the tool's own environment, nothing wider.
        let Some(root) = folder.ancestors().find(|a| {
            a.parent()
                .is_some_and(|p| VENVS.iter().any(|v| p.ends_with(v)))
        }) else {
            continue;
        };
        let name = e.file_name().to_string_lossy().into_owned();
        roots
            .entry(root.to_path_buf())
            .or_insert(format!("where {}/{name} leads", tilde(dir, home)));
    }
    roots.into_iter().collect()
}

/// `path` with the home written `~`.
fn tilde(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}

/// The variables a tool finds its root by, for every sandbox that gets the roots: a
/// token launch's `HOME` is not the person's, and a root kept elsewhere is not under
/// any `HOME`: `RUSTUP_HOME`, `PYENV_ROOT`, for the roots found.
pub fn env(found: &[Toolchain]) -> Vec<(String, String)> {
    found
        .iter()
        .filter_map(|t| Some((t.var?.to_string(), t.root.to_string_lossy().into_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A developer's home: rustup, pyenv, nvm, a pipx tool linked from `~/.local/bin`.
    fn home() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let h = std::fs::canonicalize(t.path()).unwrap();
        for d in [
            ".cargo/bin",
            ".rustup/toolchains/stable/bin",
            ".pyenv/shims",
            ".pyenv/versions/3.12.1/bin",
            ".nvm/versions/node/v20.1.0/bin",
            ".local/bin",
            ".local/share/pipx/venvs/black/bin",
            ".sdkman/candidates/java/21.0.2-tem/bin",
        ] {
            std::fs::create_dir_all(h.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("21.0.2-tem", h.join(".sdkman/candidates/java/current"))
            .unwrap();
        std::os::unix::fs::symlink(
            h.join(".local/share/pipx/venvs/black/bin/black"),
            h.join(".local/bin/black"),
        )
        .unwrap();
        std::fs::write(h.join(".local/share/pipx/venvs/black/bin/black"), "").unwrap();
        (t, h)
    }

    #[test]
    fn each_path_folder_in_the_home_brings_its_install_root() {
        let (_t, h) = home();
        let path = [
            ".cargo/bin",
            ".pyenv/shims",
            ".nvm/versions/node/v20.1.0/bin",
            ".local/bin",
            ".sdkman/candidates/java/current/bin",
        ]
        .iter()
        .map(|d| h.join(d).display().to_string())
        .chain(["/usr/bin".to_string(), "/bin".to_string()])
        .collect::<Vec<_>>()
        .join(":");
        let found = found(&h, OsStr::new(&path), Backend::Bwrap, |_| None);
        let roots: Vec<PathBuf> = found.iter().map(|t| t.root.clone()).collect();
        let want: Vec<PathBuf> = [
            ".cargo/bin",
            ".rustup",
            ".pyenv",
            ".nvm/versions/node/v20.1.0",
            ".local/bin",
            ".local/share/pipx/venvs/black",
            ".sdkman/candidates/java",
        ]
        .iter()
        .map(|d| h.join(d))
        .collect();
        assert_eq!(roots, want, "{found:?}");
        // sdkman's `current` is a link: not a root, the candidate's folder holding it is.
        assert!(found[6].why.contains("sdkman's java"), "{found:?}");
        assert!(found[1].why.contains("rustup") && found[1].why.contains("~/.cargo/bin"));
        // The shim folder is inside pyenv's root: one grant.
        assert!(!roots.contains(&h.join(".pyenv/shims")));
        let env = env(&found);
        assert_eq!(
            env,
            vec![
                (
                    "RUSTUP_HOME".into(),
                    h.join(".rustup").display().to_string()
                ),
                ("PYENV_ROOT".into(), h.join(".pyenv").display().to_string()),
            ]
        );
    }

    #[test]
    fn system_folders_the_home_and_missing_folders_bring_nothing() {
        let (_t, h) = home();
        let path = format!(
            "/usr/local/bin:/usr/bin:{}:{}/nope",
            h.display(),
            h.display()
        );
        assert_eq!(
            found(&h, OsStr::new(&path), Backend::Bwrap, |_| None),
            vec![]
        );
        let path = format!("/opt/homebrew/bin:{}/.local/bin", h.display());
        let roots: Vec<PathBuf> = found(&h, OsStr::new(&path), Backend::Seatbelt, |_| None)
            .into_iter()
            .map(|t| t.root)
            .collect();
        assert_eq!(
            roots,
            vec![
                h.join(".local/bin"),
                h.join(".local/share/pipx/venvs/black")
            ]
        );
    }

    #[test]
    fn a_root_reached_through_a_link_or_wider_than_a_toolchain_is_never_taken() {
        let (_t, h) = home();
        // A session that could write the home planted `~/.rustup` → `/`, and a tool's
        // folder whose `bin` is not a known layout.
        std::fs::remove_dir_all(h.join(".rustup")).unwrap();
        std::os::unix::fs::symlink("/", h.join(".rustup")).unwrap();
        std::fs::create_dir_all(h.join(".fly/bin")).unwrap();
        std::fs::write(h.join(".fly/config.yml"), "access_token: x").unwrap();
        let path = format!(
            "{}:{}",
            h.join(".cargo/bin").display(),
            h.join(".fly/bin").display()
        );
        let roots: Vec<PathBuf> = found(&h, OsStr::new(&path), Backend::Bwrap, |_| None)
            .into_iter()
            .map(|t| t.root)
            .collect();
        assert_eq!(roots, vec![h.join(".cargo/bin"), h.join(".fly/bin")]);
        for wide in ["/", "/tmp", "/run/user/0", "/proc/1"] {
            assert!(too_wide(Path::new(wide), &h), "{wide}");
        }
        assert!(too_wide(h.parent().unwrap(), &h));
        assert!(!too_wide(&h.join(".rustup"), &h));
    }

    #[test]
    fn rustup_home_from_relays_environment_wins() {
        let (_t, h) = home();
        let elsewhere = h.join("tools/rustup");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let path = h.join(".cargo/bin").display().to_string();
        let at = elsewhere.clone();
        let found = found(&h, OsStr::new(&path), Backend::Bwrap, move |n| {
            (n == "RUSTUP_HOME").then(|| at.clone())
        });
        assert!(found.iter().any(|t| t.root == elsewhere), "{found:?}");
    }
}
