//! The target's environment and working folder, carried as data.
//!
//! Why: the shim and the sandbox launcher run outside every sandbox, and the dynamic
//! loader reads its variables (`LD_LIBRARY_PATH`, `LD_PRELOAD`, `DYLD_*`, `GCONV_PATH`,
//! …) and searches the working folder (an empty `LD_LIBRARY_PATH` entry) before a
//! single line of relay's code runs. A session can write its own folder, and the
//! person's shell can hold any variable. So the host starts the shim with one variable,
//! [`TARGET_VAR`], whose value is the target's folder and environment hex-encoded (no
//! loader or libc reads it as anything but bytes), and `/` as the working folder; the
//! shim starts the launcher the same way; and only `relay-shim enter`, the first
//! program inside the sandbox, applies them to the target
//! (docs/session-host.md#what-a-child-inherits).
//!
//! Format before hex: the folder, then each `NAME=VALUE`, each followed by a NUL. An
//! empty folder means "stay where the launcher put you" (bwrap's `--chdir`).

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The one variable the shim and the launcher are started with.
pub const TARGET_VAR: &str = "RELAY_SHIM_TARGET";

/// Longest value the kernel takes for one environment string is 128 KiB
/// (`MAX_ARG_STRLEN`); hex doubles the size, so the decoded data stays below this.
pub const MAX_TARGET_BYTES: usize = 60 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// Where the target starts; `None`: where the launcher put it.
    pub cwd: Option<PathBuf>,
    pub env: Vec<(OsString, OsString)>,
}

impl Target {
    /// The value of `name` in the target's environment.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .map(|(_, v)| v.as_os_str())
    }

    /// `TARGET_VAR`'s value. Errors name the problem, never the content.
    pub fn encode(&self) -> Result<String, String> {
        let mut raw: Vec<u8> = Vec::new();
        let cwd = self.cwd.as_deref().map(Path::as_os_str).unwrap_or_default();
        if cwd.as_bytes().contains(&0) {
            return Err("the working folder holds a NUL byte".into());
        }
        raw.extend_from_slice(cwd.as_bytes());
        raw.push(0);
        for (k, v) in &self.env {
            let (k, v) = (k.as_bytes(), v.as_bytes());
            if k.is_empty() || k.contains(&b'=') || k.contains(&0) || v.contains(&0) {
                return Err(format!(
                    "the environment name {} cannot be passed",
                    String::from_utf8_lossy(k)
                ));
            }
            raw.extend_from_slice(k);
            raw.push(b'=');
            raw.extend_from_slice(v);
            raw.push(0);
        }
        if raw.len() > MAX_TARGET_BYTES {
            return Err(format!(
                "the environment and folder take {} bytes, more than the {MAX_TARGET_BYTES} \
                 relay passes to a session",
                raw.len()
            ));
        }
        Ok(hex(&raw))
    }

    /// Reads [`Target::encode`]'s output back.
    pub fn decode(text: &OsStr) -> Result<Target, String> {
        let raw = unhex(text.as_bytes()).ok_or_else(|| format!("{TARGET_VAR} is not hex"))?;
        if raw.len() > MAX_TARGET_BYTES {
            return Err(format!("{TARGET_VAR} is too large"));
        }
        let mut parts = raw.split(|b| *b == 0);
        let cwd = parts.next().unwrap_or_default();
        if raw.last() != Some(&0) {
            return Err(format!("{TARGET_VAR} is cut short"));
        }
        let mut env = Vec::new();
        for entry in parts {
            if entry.is_empty() {
                continue;
            }
            let eq = entry
                .iter()
                .position(|b| *b == b'=')
                .filter(|i| *i > 0)
                .ok_or_else(|| format!("{TARGET_VAR} holds an entry without a name"))?;
            env.push((
                OsString::from_vec(entry[..eq].to_vec()),
                OsString::from_vec(entry[eq + 1..].to_vec()),
            ));
        }
        Ok(Target {
            cwd: (!cwd.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(cwd))),
            env,
        })
    }

    /// The target as the shim was given it: [`TARGET_VAR`] of this process.
    pub fn from_process() -> Result<Target, String> {
        let text =
            std::env::var_os(TARGET_VAR).ok_or_else(|| format!("{TARGET_VAR} is not set"))?;
        Target::decode(&text)
    }

    /// `NAME=VALUE` strings for `execve`, built before any fork.
    pub fn envp(&self) -> Vec<CString> {
        self.env
            .iter()
            .filter_map(|(k, v)| {
                let mut s = k.as_bytes().to_vec();
                s.push(b'=');
                s.extend_from_slice(v.as_bytes());
                CString::new(s).ok()
            })
            .collect()
    }
}

/// The whole environment a program outside the sandbox gets: [`TARGET_VAR`] alone.
pub fn launcher_envp(encoded: &str) -> Vec<CString> {
    CString::new(format!("{TARGET_VAR}={encoded}"))
        .into_iter()
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    text.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            cwd: Some(PathBuf::from("/home/ada/src/demo")),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("EMPTY".into(), "".into()),
                ("EQ".into(), "a=b=c".into()),
                ("UTF".into(), "é\n".into()),
            ],
        }
    }

    #[test]
    fn a_target_survives_the_trip() {
        let t = target();
        let text = t.encode().unwrap();
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        assert_eq!(Target::decode(OsStr::new(&text)).unwrap(), t);
        assert_eq!(t.var("EQ"), Some(OsStr::new("a=b=c")));
        let none = Target {
            cwd: None,
            env: vec![],
        };
        assert_eq!(
            Target::decode(OsStr::new(&none.encode().unwrap())).unwrap(),
            none
        );
    }

    #[test]
    fn a_bad_value_is_refused_without_quoting_it() {
        for bad in ["zz", "0", "41", "00413d", "003d7800"] {
            let e = Target::decode(OsStr::new(bad));
            assert!(e.is_err(), "{bad}: {e:?}");
        }
        let t = Target {
            cwd: None,
            env: vec![("A".into(), "x".repeat(MAX_TARGET_BYTES).into())],
        };
        let e = t.encode().unwrap_err();
        assert!(e.contains("more than") && !e.contains("xxx"), "{e}");
        let t = Target {
            cwd: None,
            env: vec![("A=B".into(), "secret".into())],
        };
        assert!(!t.encode().unwrap_err().contains("secret"));
    }

    #[test]
    fn the_launcher_gets_one_variable() {
        let envp = launcher_envp("00");
        assert_eq!(envp.len(), 1);
        assert_eq!(envp[0].to_bytes(), b"RELAY_SHIM_TARGET=00");
    }
}
