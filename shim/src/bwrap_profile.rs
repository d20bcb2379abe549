//! The bwrap profile file: the rendered bubblewrap arguments, each one terminated by a NUL
//! byte (`a\0b\0c\0`). The daemon writes it with [`encode`], the shim reads it with
//! [`decode`] and puts the arguments in front of `-- <target> …`.
//!
//! NUL is the one byte no argument can contain, so no quoting is needed and an argument
//! holding a newline, a quote or a space survives exactly.

use std::fmt;

/// Largest profile file the shim reads.
pub const MAX_PROFILE_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileError {
    /// Argument `index` contains a NUL byte and cannot be written.
    NulInArgument { index: usize },
    /// Argument `index` is not UTF-8.
    NotUtf8 { index: usize },
    /// The bytes do not end with the NUL that terminates the last argument.
    Unterminated,
    /// The profile is larger than [`MAX_PROFILE_BYTES`].
    TooLarge { bytes: usize },
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::NulInArgument { index } => {
                write!(f, "argument {index} contains a NUL byte")
            }
            ProfileError::NotUtf8 { index } => write!(f, "argument {index} is not UTF-8"),
            ProfileError::Unterminated => write!(f, "last argument is not NUL-terminated"),
            ProfileError::TooLarge { bytes } => {
                write!(f, "{bytes} bytes, more than {MAX_PROFILE_BYTES}")
            }
        }
    }
}

impl std::error::Error for ProfileError {}

/// The profile bytes for `args`: each argument followed by one NUL.
pub fn encode(args: &[String]) -> Result<Vec<u8>, ProfileError> {
    let mut out = Vec::with_capacity(args.iter().map(|a| a.len() + 1).sum());
    for (index, arg) in args.iter().enumerate() {
        if arg.as_bytes().contains(&0) {
            return Err(ProfileError::NulInArgument { index });
        }
        out.extend_from_slice(arg.as_bytes());
        out.push(0);
    }
    if out.len() > MAX_PROFILE_BYTES {
        return Err(ProfileError::TooLarge { bytes: out.len() });
    }
    Ok(out)
}

/// The arguments in `bytes`, as written by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Vec<String>, ProfileError> {
    if bytes.len() > MAX_PROFILE_BYTES {
        return Err(ProfileError::TooLarge { bytes: bytes.len() });
    }
    let Some(body) = bytes.strip_suffix(&[0]) else {
        return if bytes.is_empty() {
            Ok(Vec::new())
        } else {
            Err(ProfileError::Unterminated)
        };
    };
    body.split(|&b| b == 0)
        .enumerate()
        .map(|(index, arg)| {
            String::from_utf8(arg.to_vec()).map_err(|_| ProfileError::NotUtf8 { index })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn format_is_nul_terminated_arguments() {
        let args = strings(&["--ro-bind", "/usr", "/usr"]);
        assert_eq!(encode(&args).unwrap(), b"--ro-bind\0/usr\0/usr\0".to_vec());
        assert_eq!(decode(b"--ro-bind\0/usr\0/usr\0").unwrap(), args);
    }

    #[test]
    fn newline_quotes_spaces_and_empty_arguments_survive() {
        let args = strings(&[
            "--setenv",
            "X",
            "line one\nline two",
            "it's \"quoted\"",
            "",
            " spaced ",
            "\\",
            "é",
        ]);
        assert_eq!(decode(&encode(&args).unwrap()).unwrap(), args);
    }

    #[test]
    fn empty_list_is_empty_file() {
        assert_eq!(encode(&[]).unwrap(), Vec::<u8>::new());
        assert_eq!(decode(b"").unwrap(), Vec::<String>::new());
        assert_eq!(decode(b"\0").unwrap(), strings(&[""]));
    }

    #[test]
    fn encode_refuses_nul_in_argument() {
        assert_eq!(
            encode(&strings(&["ok", "a\0b"])),
            Err(ProfileError::NulInArgument { index: 1 })
        );
    }

    #[test]
    fn decode_refuses_malformed_bytes() {
        assert_eq!(decode(b"--dev\0/dev"), Err(ProfileError::Unterminated));
        assert_eq!(
            decode(b"ok\0\xff\xfe\0"),
            Err(ProfileError::NotUtf8 { index: 1 })
        );
        let big = vec![b'a'; MAX_PROFILE_BYTES + 1];
        assert!(matches!(decode(&big), Err(ProfileError::TooLarge { .. })));
    }
}
