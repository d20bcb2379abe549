//! What keeps one session from reaching the token through a later launch: the folders
//! a sandboxed session can write, the programs a token launch hands fd 5 to (pinned
//! read-only in every sandbox while the token setting is set), and where the token file
//! sits (its own folder, masked whole, or a shared one). See `docs/THREAT-MODEL.md`
//! ("Planted programs and links", "A token that appears or changes").
//!
//! Everything here reads the filesystem but decides nothing about a request: the launch
//! path (`launch.rs`) calls these and turns an `Err` into `400 sandbox_unavailable`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::daemon::settings::Settings;
use crate::protocol::CLAUDE_CODE_TEMPLATE;
use crate::sandbox::resolve::{expand_home, resolve_in, Role};

/// How many `#!` interpreters deep a program is followed (a script run by a script
/// run by a binary is already unusual).
const MAX_INTERPRETERS: usize = 4;

/// The real path when it exists, else the path itself.
fn real_or_written(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Every folder some sandboxed session can write under these settings, plus `live`:
/// the read-write roots of the sandboxed sessions running now (settings may have
/// changed since they started). A project folder counts whole, since any folder in it
/// can be a session directory. Unsandboxed templates are not counted: they can write
/// anything (docs/THREAT-MODEL.md, "Not defended").
pub fn session_writable_roots(s: &Settings, home: &Path, live: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for p in &s.projects {
        add(real_or_written(&expand_home(&p.path, home)));
    }
    for t in s.terminal_templates.iter().filter(|t| t.sandbox) {
        for rw in &t.read_write {
            add(real_or_written(&expand_home(rw, home)));
        }
    }
    for p in live {
        add(p.clone());
    }
    out
}

/// What a token launch hands fd 5 to, found the way the launch finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramPins {
    /// The program as the launch will run it (absolute), when found.
    pub program: Option<PathBuf>,
    /// Real folders no session may change: each folder holding a link on the way to
    /// the real file, the real file's folder (an npm install loads its modules from
    /// there), the same for every `#!` interpreter, and the `PATH` folders searched
    /// before the hit (a session could plant a program of the same name there).
    pub folders: Vec<PathBuf>,
    /// `PATH` folders searched before the hit that do not exist: pinning cannot cover
    /// them, so a launch refuses when a session could create one.
    pub missing_path_dirs: Vec<PathBuf>,
    /// Real files (the program, an interpreter) with more hard links than relay found
    /// in the folders it pins: a session could write the file through another name.
    pub stray_links: Vec<(PathBuf, u64)>,
}

impl ProgramPins {
    fn add(&mut self, folder: PathBuf) {
        if !self.folders.contains(&folder) {
            self.folders.push(folder);
        }
    }
}

/// relay's own programs, which run outside every sandbox: `relay` (the person runs it
/// by path) and the two helpers beside it. Their folders are pinned like the Claude
/// program's (docs/THREAT-MODEL.md#relays-own-programs).
pub fn relay_programs() -> Vec<PathBuf> {
    match std::env::current_exe() {
        Ok(me) => vec![
            me,
            crate::helpers::sibling("relay-sessions"),
            crate::helpers::sibling("relay-shim"),
        ],
        Err(_) => Vec::new(),
    }
}

/// The sandbox launcher runs outside every sandbox at every launch, with the token pipe
/// on a token launch: one in a folder some session can write (`writable`, as
/// [`session_writable_roots`] finds them) could be that session's. `Err` says which
/// folder and what to do; a launch refuses and doctor does not run it.
pub fn launcher_outside_sessions(launcher: &Path, writable: &[PathBuf]) -> Result<(), String> {
    let real = real_or_written(launcher);
    match writable.iter().find(|w| real.starts_with(w)) {
        None => Ok(()),
        Some(w) => Err(format!(
            "the sandbox launcher {} lies in {}, which sessions can write, and it runs \
             outside every sandbox; use the system's, or one outside every project and \
             template grant (session_sandbox.bwrap_launcher, seatbelt_launcher)",
            launcher.display(),
            w.display()
        )),
    }
}

/// The programs a token launch can run under these settings: the one Claude program
/// (`Settings::claude_program`, docs/settings.md).
pub fn token_programs(s: &Settings) -> Vec<String> {
    vec![s.claude_program()]
}

/// Finds `program` as a launch would (a path as is, a name on `path_env`) and collects
/// every folder that decides what actually runs. A link on the way that sits in a
/// session-writable folder is followed too (its folder is pinned); the pins make it
/// unchangeable from then on.
pub fn program_pins(program: &str, home: &Path, path_env: &std::ffi::OsStr) -> ProgramPins {
    pins_at(program, home, path_env, 0)
}

/// [`program_pins`] of a program met `depth` interpreters deep: the depth goes on
/// through every interpreter, so a chain that loops (a script whose interpreter runs
/// it again) ends at [`MAX_INTERPRETERS`] instead of taking relay down.
fn pins_at(program: &str, home: &Path, path_env: &std::ffi::OsStr, depth: usize) -> ProgramPins {
    let mut pins = ProgramPins::default();
    let hit = if program.contains('/') || program.starts_with('~') {
        // A relative path would be found against the daemon's folder here and against
        // the session's in the shim: not found.
        let p = expand_home(program, home);
        (p.is_absolute() && is_executable(&p)).then_some(p)
    } else {
        let mut hit = None;
        for dir in std::env::split_paths(path_env).filter(|d| d.is_absolute()) {
            let candidate = dir.join(program);
            match std::fs::canonicalize(&dir) {
                Ok(real) => pins.add(real),
                Err(_) => pins.missing_path_dirs.push(dir.clone()),
            }
            if is_executable(&candidate) {
                hit = Some(candidate);
                break;
            }
        }
        hit
    };
    let Some(hit) = hit else {
        return pins;
    };
    pins.program = Some(hit.clone());
    follow(&hit, home, path_env, &mut pins, depth);
    pins
}

/// Pins the folders of `path`'s links and of its real file, then its interpreter.
fn follow(
    path: &Path,
    home: &Path,
    path_env: &std::ffi::OsStr,
    pins: &mut ProgramPins,
    depth: usize,
) {
    let Some(text) = path.to_str() else { return };
    let Ok((resolved, link_dirs)) = resolve_in(text, home, Role::Read, &[]) else {
        return;
    };
    for dir in link_dirs {
        pins.add(dir);
    }
    if let Some(parent) = path.parent() {
        pins.add(real_or_written(parent));
    }
    if let Some(folder) = resolved.canonical.parent() {
        pins.add(folder.to_path_buf());
    }
    hard_links(&resolved.canonical, pins, MAX_LINK_SEARCH);
    if depth >= MAX_INTERPRETERS {
        return;
    }
    if let Some((interpreter, arg)) = shebang(&resolved.canonical) {
        let program = if interpreter.ends_with("/env") {
            // `#!/usr/bin/env node`: env itself, then the name it looks up.
            follow(Path::new(&interpreter), home, path_env, pins, depth + 1);
            match arg {
                Some(name) => name,
                None => return,
            }
        } else {
            interpreter
        };
        let next = pins_at(&program, home, path_env, depth + 1);
        pins.missing_path_dirs.extend(next.missing_path_dirs);
        pins.stray_links.extend(next.stray_links);
        for f in next.folders {
            pins.add(f);
        }
    }
}

/// Most entries [`hard_links`] looks at before it gives up (a large `node_modules`):
/// names past it are not found, so the file counts as having a stray link.
const MAX_LINK_SEARCH: usize = 20_000;

/// A file with several hard links can be written through any of them, and a read-only
/// folder protects names, not the file. npm's own install gives Claude Code's binary a
/// second name in its platform package next to the main one, so the other names are
/// looked for in the real file's folder and in its npm scope (`node_modules/@scope`);
/// their folders are pinned too. Names found nowhere there leave the file in
/// `stray_links`, and a token launch refuses.
fn hard_links(real: &Path, pins: &mut ProgramPins, max_entries: usize) {
    let Ok(meta) = std::fs::metadata(real) else {
        return;
    };
    if meta.nlink() <= 1 {
        return;
    }
    let id = (meta.dev(), meta.ino());
    let mut roots: Vec<PathBuf> = real.parent().map(Path::to_path_buf).into_iter().collect();
    let scope = real.ancestors().skip(1).find(|a| {
        a.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('@'))
            && a.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "node_modules")
    });
    if let Some(scope) = scope {
        roots.push(scope.to_path_buf());
    }
    let mut found: Vec<PathBuf> = Vec::new();
    let mut seen = 0usize;
    for root in &roots {
        let mut stack = vec![(root.clone(), 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                seen += 1;
                if seen > max_entries {
                    break;
                }
                let Ok(t) = e.file_type() else { continue };
                let path = e.path();
                if t.is_dir() && depth < 4 {
                    stack.push((path, depth + 1));
                } else if t.is_file() {
                    if let Ok(m) = e.metadata() {
                        if (m.dev(), m.ino()) == id && !found.contains(&path) {
                            found.push(path);
                        }
                    }
                }
            }
        }
    }
    for name in &found {
        if let Some(folder) = name.parent() {
            pins.add(folder.to_path_buf());
        }
    }
    if (found.len() as u64) < meta.nlink() {
        pins.stray_links.push((real.to_path_buf(), meta.nlink()));
    }
}

/// The `PATH` a Claude launch runs with: the `claude-code` template's `env.PATH` when it
/// sets one, else relay's own. Pins and the program are found with it, since the shim
/// and `#!/usr/bin/env` look programs up the same way inside the sandbox.
pub fn claude_path_env(s: &Settings) -> std::ffi::OsString {
    claude_path_env_from(s, &std::env::var_os("PATH").unwrap_or_default())
}

/// [`claude_path_env`] with relay's own `PATH` given (empty: `/usr/bin:/bin`).
pub fn claude_path_env_from(s: &Settings, relay_path: &std::ffi::OsStr) -> std::ffi::OsString {
    s.template(CLAUDE_CODE_TEMPLATE)
        .and_then(|t| t.env.get("PATH"))
        .map(std::ffi::OsString::from)
        .or_else(|| (!relay_path.is_empty()).then(|| relay_path.to_os_string()))
        .unwrap_or_else(|| "/usr/bin:/bin".into())
}

/// The `PATH` a launch that gets the token runs with: the absolute entries of
/// `path_env` that no session can write, or that are pinned. Claude Code runs programs
/// by name without asking (`git`, at once), and a program of that name planted in a
/// writable `PATH` folder would run beside the token.
pub fn token_launch_path(
    path_env: &std::ffi::OsStr,
    writable: &[PathBuf],
    pinned: &[PathBuf],
) -> std::ffi::OsString {
    let kept: Vec<PathBuf> = std::env::split_paths(path_env)
        .filter(|d| d.is_absolute())
        .filter(|d| {
            let real = real_or_written(d);
            !writable.iter().any(|r| real.starts_with(r))
                || pinned.iter().any(|p| real.starts_with(p))
        })
        .collect();
    std::env::join_paths(kept).unwrap_or_default()
}

/// The interpreter of a `#!` script and the first word after it that is not an
/// option (`env -S node` names node).
fn shebang(path: &Path) -> Option<(String, Option<String>)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 256];
    let n = f.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interpreter = words.next()?.to_string();
    let arg = words.find(|w| !w.starts_with('-')).map(str::to_string);
    Some((interpreter, arg))
}

pub(in crate::daemon) fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// How the token path is hidden from one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDeny {
    /// The entries to add to the launch's deny list: the token's own folder when it
    /// holds no folders (masked whole, so a file saved there by rename or by a link is
    /// still under the mask), else the file alone.
    pub deny: Vec<PathBuf>,
    /// The token's folder when some grant of this launch reaches it: the launch could
    /// see a token saved there if the mask came off (the folder replaced as a whole).
    pub exposed_folder: Option<PathBuf>,
}

/// Decides how the token is hidden from a launch whose grants are `grants` (any
/// access) and `read_write` (the writable ones), canonical. `path_based` is Seatbelt,
/// whose denies match paths at access time: any layout is safe there. bwrap masks what
/// exists when the sandbox starts, so there:
/// - the token's folder is masked whole when it holds no folders (and is not the home);
/// - a token in a shared folder that this launch's grants reach is refused: a token
///   saved there later by rename (editors, `mv`) would not be under the mask;
/// - a missing folder that this launch could create, or see created, is refused.
pub fn token_deny(
    token: &Path,
    home: &Path,
    grants: &[PathBuf],
    path_based: bool,
) -> Result<TokenDeny, String> {
    let Some(folder) = token.parent().map(Path::to_path_buf) else {
        return Ok(TokenDeny {
            deny: vec![token.to_path_buf()],
            exposed_folder: None,
        });
    };
    let reaches = |p: &Path| grants.iter().any(|g| p.starts_with(g));
    let folder_real = std::fs::canonicalize(&folder).ok();
    let Some(real) = folder_real else {
        // The folder does not exist (yet).
        let mut existing = folder.clone();
        while !existing.exists() {
            if !existing.pop() {
                break;
            }
        }
        let existing = real_or_written(&existing);
        if !path_based && reaches(&existing) {
            return Err(format!(
                "claude_token_file {}: folder {} does not exist, and this session could \
                 create it or see it created; create it first (mkdir -m 700 {})",
                token.display(),
                folder.display(),
                folder.display()
            ));
        }
        return Ok(TokenDeny {
            deny: vec![token.to_path_buf()],
            exposed_folder: None,
        });
    };
    let own_folder = real != real_or_written(home)
        && real.parent().is_some()
        && std::fs::read_dir(&real)
            .map(|rd| {
                rd.flatten()
                    .all(|e| e.file_type().map(|t| !t.is_dir()).unwrap_or(false))
            })
            .unwrap_or(false);
    let exposed_folder = reaches(&real).then(|| real.clone());
    if own_folder {
        return Ok(TokenDeny {
            deny: vec![folder, token.to_path_buf()],
            exposed_folder,
        });
    }
    if !path_based && exposed_folder.is_some() {
        return Err(format!(
            "claude_token_file {}: its folder {} holds other folders, so it cannot be \
             hidden whole, and this session's grants reach it: a token saved there by \
             rename would be readable by the session; keep the token in a folder of its \
             own (for example ~/.config/claude-ltt/token)",
            token.display(),
            folder.display()
        ));
    }
    Ok(TokenDeny {
        deny: vec![token.to_path_buf()],
        exposed_folder,
    })
}

/// `(dev, ino)` of a path without following a last link; `None` when absent.
pub fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tempdir() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        (d, real)
    }

    fn exe(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_native_install_pins_the_link_folder_the_version_folder_and_earlier_path_dirs() {
        let (_g, home) = tempdir();
        let real = home.join(".local/share/claude/versions/2.1.0");
        exe(&real, "\x7fELF");
        std::fs::create_dir_all(home.join(".local/bin")).unwrap();
        symlink(&real, home.join(".local/bin/claude")).unwrap();
        std::fs::create_dir_all(home.join("bin")).unwrap();
        let path = std::env::join_paths([
            home.join("bin"),
            home.join("missing"),
            home.join(".local/bin"),
            PathBuf::from("/usr/bin"),
        ])
        .unwrap();
        let pins = program_pins("claude", &home, &path);
        assert_eq!(pins.program, Some(home.join(".local/bin/claude")));
        assert_eq!(
            pins.folders,
            vec![
                home.join("bin"),
                home.join(".local/bin"),
                home.join(".local/share/claude/versions"),
            ]
        );
        assert_eq!(pins.missing_path_dirs, vec![home.join("missing")]);
    }

    #[test]
    fn a_script_pins_its_interpreter_found_through_env() {
        let (_g, home) = tempdir();
        exe(&home.join("node/bin/node"), "\x7fELF");
        exe(
            &home.join("lib/claude-code/cli.js"),
            "#!/usr/bin/env -S node --no-warnings\nconsole.log(1)\n",
        );
        let path =
            std::env::join_paths([home.join("node/bin"), PathBuf::from("/usr/bin")]).unwrap();
        let pins = program_pins(
            home.join("lib/claude-code/cli.js").to_str().unwrap(),
            &home,
            &path,
        );
        assert!(
            pins.folders.contains(&home.join("lib/claude-code")),
            "{pins:?}"
        );
        assert!(pins.folders.contains(&home.join("node/bin")), "{pins:?}");
        assert!(
            pins.folders
                .contains(&std::fs::canonicalize("/usr/bin").unwrap()),
            "{pins:?}"
        );
    }

    #[test]
    fn a_second_name_is_pinned_when_found_in_the_npm_scope_and_refused_elsewhere() {
        let (_g, home) = tempdir();
        let scope = home.join("lib/node_modules/@anthropic-ai");
        let main = scope.join("claude-code/bin/claude.exe");
        exe(&main, "\x7fELF");
        std::fs::create_dir_all(scope.join("claude-code-linux-x64")).unwrap();
        std::fs::hard_link(&main, scope.join("claude-code-linux-x64/claude")).unwrap();
        let path = std::ffi::OsString::from("/usr/bin");
        let pins = program_pins(main.to_str().unwrap(), &home, &path);
        assert!(
            pins.folders.contains(&scope.join("claude-code-linux-x64")),
            "{pins:?}"
        );
        assert!(pins.stray_links.is_empty(), "{pins:?}");

        std::fs::create_dir_all(home.join("project")).unwrap();
        std::fs::hard_link(&main, home.join("project/blob")).unwrap();
        let pins = program_pins(main.to_str().unwrap(), &home, &path);
        assert_eq!(pins.stray_links, vec![(main.clone(), 3)]);
    }

    #[test]
    fn a_token_launch_path_keeps_what_no_session_can_write_or_what_is_pinned() {
        let (_g, home) = tempdir();
        for d in [".local/bin", ".cargo/bin"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let path = std::env::join_paths([
            PathBuf::from("node_modules/.bin"),
            home.join(".cargo/bin"),
            home.join(".local/bin"),
            PathBuf::from("/usr/bin"),
        ])
        .unwrap();
        let kept = token_launch_path(
            &path,
            std::slice::from_ref(&home),
            &[home.join(".local/bin")],
        );
        assert_eq!(
            std::env::split_paths(&kept).collect::<Vec<_>>(),
            vec![home.join(".local/bin"), PathBuf::from("/usr/bin")]
        );
    }

    #[test]
    fn the_token_folder_is_masked_whole_when_it_holds_no_folders() {
        let (_g, home) = tempdir();
        let folder = home.join(".config/ltt");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("token"), "x").unwrap();
        let token = folder.join("token");
        let d = token_deny(&token, &home, std::slice::from_ref(&home), false).unwrap();
        assert_eq!(d.deny, vec![folder.clone(), token.clone()]);
        assert_eq!(d.exposed_folder, Some(folder.clone()));

        // A folder inside: shared; refused where a grant reaches it, on bwrap only.
        std::fs::create_dir(folder.join("sub")).unwrap();
        let err = token_deny(&token, &home, std::slice::from_ref(&home), false).unwrap_err();
        assert!(err.contains("folder of its own"), "{err}");
        assert!(!err.contains('x') || !err.contains("\"x\""));
        let sbpl = token_deny(&token, &home, std::slice::from_ref(&home), true).unwrap();
        assert_eq!(sbpl.deny, vec![token.clone()]);
        let unreached = token_deny(&token, &home, &[home.join("project")], false).unwrap();
        assert_eq!(unreached.deny, vec![token.clone()]);
        assert_eq!(unreached.exposed_folder, None);
    }

    #[test]
    fn a_missing_token_folder_a_session_could_create_refuses_on_bwrap() {
        let (_g, home) = tempdir();
        std::fs::create_dir_all(home.join(".config")).unwrap();
        let token = home.join(".config/ltt/token");
        let err = token_deny(&token, &home, &[home.join(".config")], false).unwrap_err();
        assert!(err.contains("mkdir -m 700"), "{err}");
        assert!(token_deny(&token, &home, &[home.join(".config")], true).is_ok());
        let elsewhere = token_deny(&token, &home, &[home.join("project")], false).unwrap();
        assert_eq!(elsewhere.deny, vec![token]);
    }

    fn settings_with(
        projects: &[&str],
        templates: Vec<crate::daemon::settings::Template>,
    ) -> Settings {
        use crate::daemon::settings::Project;
        Settings {
            projects: projects
                .iter()
                .enumerate()
                .map(|(i, path)| Project {
                    id: format!("p{i}"),
                    name: format!("P{i}"),
                    path: path.to_string(),
                    allowed_templates: vec![],
                    allow_home_directory: false,
                    claude_token_file: None,
                    account: None,
                })
                .collect(),
            terminal_templates: templates,
            ..Default::default()
        }
    }

    fn template_rw(id: &str, sandbox: bool, rw: &[&str]) -> crate::daemon::settings::Template {
        crate::daemon::settings::Template {
            sandbox,
            read_write: rw.iter().map(|s| s.to_string()).collect(),
            ..crate::daemon::settings::Template::new(id, id, "sh")
        }
    }

    #[test]
    fn the_writable_roots_are_every_project_each_sandboxed_templates_read_write_and_the_live_ones_once(
    ) {
        // Threat: a folder some session can write left out here is never pinned, so a
        // program planted there would get the token at a later launch.
        let (_g, home) = tempdir();
        std::fs::create_dir_all(home.join("real")).unwrap();
        symlink(home.join("real"), home.join("link")).unwrap();
        let s = settings_with(
            &["~/proj", "~/link", "~/proj"],
            vec![
                template_rw("shell", true, &["~/data", "~/proj"]),
                template_rw("open", false, &["~/free"]),
            ],
        );
        let live = [PathBuf::from("/live/one"), home.join("data")];
        assert_eq!(
            session_writable_roots(&s, &home, &live),
            vec![
                home.join("proj"),
                home.join("real"),
                home.join("data"),
                PathBuf::from("/live/one"),
            ]
        );
        assert!(session_writable_roots(&settings_with(&[], vec![]), &home, &[]).is_empty());
    }

    #[test]
    fn relays_own_programs_are_this_binary_and_the_two_helpers_beside_it() {
        let me = std::env::current_exe().unwrap();
        let dir = me.parent().unwrap();
        assert_eq!(
            relay_programs(),
            vec![
                me.clone(),
                dir.join("relay-sessions"),
                dir.join("relay-shim")
            ]
        );
    }

    #[test]
    fn a_launcher_in_a_writable_folder_is_refused_naming_both() {
        let (_g, home) = tempdir();
        exe(&home.join("proj/bin/bwrap"), "\x7fELF");
        symlink(home.join("proj/bin/bwrap"), home.join("bwrap-link")).unwrap();
        let writable = [home.join("proj")];
        for launcher in [home.join("proj/bin/bwrap"), home.join("bwrap-link")] {
            let e = launcher_outside_sessions(&launcher, &writable).unwrap_err();
            assert!(
                e.contains(&launcher.display().to_string())
                    && e.contains(&format!("lies in {}", home.join("proj").display())),
                "{e}"
            );
        }
        assert_eq!(
            launcher_outside_sessions(Path::new("/usr/bin/bwrap"), &writable),
            Ok(())
        );
        assert_eq!(
            launcher_outside_sessions(&home.join("proj/bin/bwrap"), &[]),
            Ok(())
        );
    }

    #[test]
    fn the_token_programs_are_the_one_claude_program() {
        let s = Settings {
            claude_path: "/opt/claude/bin/claude".into(),
            ..Default::default()
        };
        assert_eq!(
            token_programs(&s),
            vec!["/opt/claude/bin/claude".to_string()]
        );
    }

    #[test]
    fn a_path_is_not_looked_up_on_path_and_must_be_an_absolute_executable() {
        let (_g, home) = tempdir();
        exe(&home.join("opt/claude"), "\x7fELF");
        std::fs::write(home.join("opt/plain"), "data").unwrap();
        std::fs::create_dir_all(home.join("bin")).unwrap();
        let path = std::env::join_paths([home.join("bin")]).unwrap();
        let pins = program_pins(home.join("opt/claude").to_str().unwrap(), &home, &path);
        assert_eq!(pins.program, Some(home.join("opt/claude")));
        assert_eq!(
            pins.folders,
            vec![home.join("opt")],
            "no PATH folder pinned"
        );
        let plain = program_pins(home.join("opt/plain").to_str().unwrap(), &home, &path);
        assert_eq!(plain.program, None, "not executable");
        assert_eq!(
            program_pins("~/opt/claude", &home, &path).program,
            Some(home.join("opt/claude"))
        );
    }

    #[test]
    fn an_env_that_runs_itself_is_followed_a_bounded_number_of_times() {
        // Threat: a program whose interpreter chain loops would hang (or overflow) the
        // launch that follows it.
        let (_g, home) = tempdir();
        let env = home.join("bin/env");
        exe(&env, &format!("#!{} env\n", env.display()));
        exe(&home.join("bin/claude"), &format!("#!{}\n", env.display()));
        let path = std::env::join_paths([home.join("bin")]).unwrap();
        let pins = program_pins("claude", &home, &path);
        assert_eq!(pins.program, Some(home.join("bin/claude")));
        assert_eq!(pins.folders, vec![home.join("bin")]);
        // Two scripts that name each other as their interpreter.
        let (a, b) = (home.join("loop/a"), home.join("loop/b"));
        exe(&a, &format!("#!{}\n", b.display()));
        exe(&b, &format!("#!{}\n", a.display()));
        let pins = program_pins(a.to_str().unwrap(), &home, &path);
        assert_eq!(pins.program, Some(a));
        assert_eq!(pins.folders, vec![home.join("loop")]);
    }

    #[test]
    fn every_name_of_a_hard_linked_program_is_found_in_its_folder_and_scope_or_it_is_stray() {
        // Threat: a second name of Claude's binary in a folder a session can write lets
        // it rewrite the file whatever the pins say.
        let (_g, home) = tempdir();
        let real = home.join("node_modules/@scope/pkg/bin/claude");
        exe(&real, "\x7fELF");
        let twin = home.join("node_modules/@scope/pkg-linux/claude");
        std::fs::create_dir_all(twin.parent().unwrap()).unwrap();
        std::fs::hard_link(&real, &twin).unwrap();
        let mut pins = ProgramPins::default();
        hard_links(&real, &mut pins, MAX_LINK_SEARCH);
        assert_eq!(
            pins.folders,
            vec![
                home.join("node_modules/@scope/pkg/bin"),
                home.join("node_modules/@scope/pkg-linux")
            ]
        );
        assert!(pins.stray_links.is_empty(), "{:?}", pins.stray_links);

        // Outside an npm scope only the file's own folder is searched: a second name in
        // a sibling package is stray, though its grandparent is a node_modules.
        let real = home.join("node_modules/pkg/bin/claude");
        exe(&real, "\x7fELF");
        std::fs::create_dir_all(home.join("node_modules/pkg/other")).unwrap();
        std::fs::hard_link(&real, home.join("node_modules/pkg/other/claude")).unwrap();
        let mut pins = ProgramPins::default();
        hard_links(&real, &mut pins, MAX_LINK_SEARCH);
        assert_eq!(pins.folders, vec![home.join("node_modules/pkg/bin")]);
        assert_eq!(pins.stray_links, vec![(real.clone(), 2)]);

        // The search is bounded: exactly the folder's two entries are looked at; one
        // fewer and a name is missed, so the file counts as stray.
        let real = home.join("two/claude");
        exe(&real, "\x7fELF");
        std::fs::hard_link(&real, home.join("two/claude2")).unwrap();
        let mut pins = ProgramPins::default();
        hard_links(&real, &mut pins, 2);
        assert!(pins.stray_links.is_empty(), "{:?}", pins.stray_links);
        for max in [0, 1] {
            let mut pins = ProgramPins::default();
            hard_links(&real, &mut pins, max);
            assert_eq!(pins.stray_links, vec![(real.clone(), 2)], "max {max}");
        }
    }

    #[test]
    fn a_shebang_gives_its_interpreter_and_first_word_that_is_no_option() {
        let (_g, home) = tempdir();
        let cases = [
            (
                "#!/usr/bin/env -S node --no-warnings\nx",
                Some(("/usr/bin/env", Some("node"))),
            ),
            ("#!/bin/sh\n", Some(("/bin/sh", None))),
            ("#! /usr/bin/python3 -u\n", Some(("/usr/bin/python3", None))),
            ("\x7fELF", None),
            ("#!\n", None),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = home.join(format!("s{i}"));
            std::fs::write(&p, text).unwrap();
            let want = want.map(|(i, a)| (i.to_string(), a.map(str::to_string)));
            assert_eq!(shebang(&p), want, "{text:?}");
        }
        assert_eq!(shebang(&home.join("missing")), None);
    }

    #[test]
    fn only_a_file_with_an_execute_bit_is_executable() {
        let (_g, home) = tempdir();
        for (mode, want) in [
            (0o755, true),
            (0o100, true),
            (0o001, true),
            (0o644, false),
            (0o600, false),
        ] {
            let p = home.join(format!("f{mode:o}"));
            std::fs::write(&p, "x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(is_executable(&p), want, "{mode:o}");
        }
        std::fs::create_dir(home.join("dir")).unwrap();
        std::fs::set_permissions(home.join("dir"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!is_executable(&home.join("dir")), "a folder");
        assert!(!is_executable(&home.join("missing")));
    }

    #[test]
    fn a_claude_launch_s_path_is_relay_s_own_unless_the_template_sets_one() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let want = if path.is_empty() {
            "/usr/bin:/bin".into()
        } else {
            path
        };
        assert_eq!(claude_path_env(&Settings::default()), want);
    }

    #[test]
    fn the_identity_is_the_link_s_own_device_and_inode() {
        let (_g, home) = tempdir();
        std::fs::write(home.join("f"), "x").unwrap();
        symlink(home.join("f"), home.join("l")).unwrap();
        for name in ["f", "l"] {
            let m = std::fs::symlink_metadata(home.join(name)).unwrap();
            assert_eq!(
                identity(&home.join(name)),
                Some((m.dev(), m.ino())),
                "{name}"
            );
        }
        assert_ne!(identity(&home.join("f")), identity(&home.join("l")));
        assert_eq!(identity(&home.join("missing")), None);
    }

    #[test]
    fn a_missing_token_folder_a_grant_reaches_is_refused_under_bwrap_alone() {
        // Threat: a folder that does not exist yet cannot be masked; a session that can
        // create it would see a token saved there later.
        let (_g, home) = tempdir();
        let token = home.join("proj/not/yet/token");
        std::fs::create_dir_all(home.join("proj")).unwrap();
        let e = token_deny(&token, &home, &[home.join("proj")], false).unwrap_err();
        assert!(
            e.contains("does not exist")
                && e.contains(&format!(
                    "mkdir -m 700 {}",
                    home.join("proj/not/yet").display()
                )),
            "{e}"
        );
        for (grants, path_based) in [
            (vec![home.join("elsewhere")], false),
            (vec![home.join("proj")], true),
        ] {
            assert_eq!(
                token_deny(&token, &home, &grants, path_based),
                Ok(TokenDeny {
                    deny: vec![token.clone()],
                    exposed_folder: None
                })
            );
        }
    }

    #[test]
    fn a_missing_token_folder_behind_a_link_to_a_grant_is_refused() {
        // Threat: the token's path names a link to a granted folder, then folders that
        // do not exist yet. Only the nearest folder that exists, resolved, shows the
        // grant reaches it: the missing ones as written name no grant.
        let (_g, home) = tempdir();
        std::fs::create_dir_all(home.join("proj")).unwrap();
        std::os::unix::fs::symlink(home.join("proj"), home.join("alias")).unwrap();
        for token in [
            home.join("alias/one/token"),
            home.join("alias/one/two/token"),
        ] {
            let e = token_deny(&token, &home, &[home.join("proj")], false).unwrap_err();
            assert!(e.contains("does not exist"), "{e}");
        }
    }

    #[test]
    fn a_second_name_deeper_than_four_folders_in_the_scope_is_not_searched() {
        let (_g, home) = tempdir();
        let real = home.join("node_modules/@s/pkg/claude");
        exe(&real, "\x7fELF");
        let deep = home.join("node_modules/@s/a/b/c/d/e");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::hard_link(&real, deep.join("claude")).unwrap();
        let mut pins = ProgramPins::default();
        hard_links(&real, &mut pins, MAX_LINK_SEARCH);
        assert_eq!(pins.stray_links, vec![(real.clone(), 2)]);
        // One folder less deep, it is found.
        std::fs::remove_file(deep.join("claude")).unwrap();
        std::fs::hard_link(&real, deep.parent().unwrap().join("claude")).unwrap();
        let mut pins = ProgramPins::default();
        hard_links(&real, &mut pins, MAX_LINK_SEARCH);
        assert!(pins.stray_links.is_empty(), "{:?}", pins.stray_links);
    }
}
