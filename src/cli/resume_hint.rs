//! Claude Code's resume hint, taken out of what `relay sandbox` shows. When Claude Code
//! ends it prints `Resume this session with:` and, on the next line, the command
//! (`claude [its flags] --resume <id>`). Under `relay sandbox` that command cannot
//! work: the run's conversation lived in the Claude config folder relay made for it,
//! which goes with the run (docs/cli.md#relay-sandbox-template), and typed in the
//! person's shell it would start Claude outside the sandbox. [`ResumeHint`] drops those
//! two lines' text from the output (their escape sequences still pass, so the
//! terminal's state is as Claude left it), and `relay sandbox` says what works instead.
//! Pure: unit-tested below.

/// The line Claude Code prints before the command.
const MARKER: &[u8] = b"Resume this session with:";

/// The longest line held while it is decided; a longer one passes whole.
const LINE_MAX: usize = 4096;

/// Where the output stands in an escape sequence (it arrives whole from
/// `termout::Filter`, but is followed across calls all the same).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seq {
    Ground,
    /// After ESC.
    Escape,
    /// After ESC and an intermediate byte (a character-set designation).
    Inter,
    /// A CSI, until its final byte.
    Csi,
    /// An OSC, DCS, SOS, PM or APC string, until BEL or ESC \.
    Str,
    /// ESC inside such a string.
    StrEscape,
}

/// What one byte of output is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Byte {
    /// Part of the line's text.
    Text,
    Newline,
    /// A carriage return, or a byte of an escape sequence: not text.
    Control,
}

impl Seq {
    fn step(&mut self, b: u8) -> Byte {
        let (next, kind) = match (*self, b) {
            (Seq::Ground, 0x1b) => (Seq::Escape, Byte::Control),
            (Seq::Ground, b'\n') => (Seq::Ground, Byte::Newline),
            (Seq::Ground, b'\r') => (Seq::Ground, Byte::Control),
            (Seq::Ground, _) => (Seq::Ground, Byte::Text),
            (Seq::Escape, b'[') => (Seq::Csi, Byte::Control),
            (Seq::Escape, b']' | b'P' | b'X' | b'^' | b'_') => (Seq::Str, Byte::Control),
            (Seq::Escape | Seq::Inter, 0x20..=0x2f) => (Seq::Inter, Byte::Control),
            (Seq::Escape | Seq::Inter, _) => (Seq::Ground, Byte::Control),
            (Seq::Csi, 0x40..=0x7e) => (Seq::Ground, Byte::Control),
            (Seq::Csi, _) => (Seq::Csi, Byte::Control),
            (Seq::Str, 0x07) => (Seq::Ground, Byte::Control),
            (Seq::Str, 0x1b) => (Seq::StrEscape, Byte::Control),
            (Seq::Str, _) => (Seq::Str, Byte::Control),
            (Seq::StrEscape, b'\\') => (Seq::Ground, Byte::Control),
            (Seq::StrEscape, _) => (Seq::Str, Byte::Control),
        };
        *self = next;
        kind
    }
}

/// What is held back.
enum Held {
    /// Nothing: output passes as it comes.
    Nothing,
    /// A line whose text so far begins [`MARKER`].
    Marker,
    /// A whole marker line, and the line after it so far (the command, perhaps).
    Command { marker: Vec<u8> },
}

pub struct ResumeHint {
    seq: Seq,
    /// No text yet on the current line (escape sequences may have passed).
    line_start: bool,
    held: Held,
    /// The bytes of the line being decided, and its text.
    line: Vec<u8>,
    text: Vec<u8>,
    /// A hint was taken out.
    pub dropped: bool,
}

impl Default for ResumeHint {
    fn default() -> Self {
        ResumeHint {
            seq: Seq::Ground,
            line_start: true,
            held: Held::Nothing,
            line: Vec::new(),
            text: Vec::new(),
            dropped: false,
        }
    }
}

/// The escape sequences of `bytes` (a held line, which starts outside one): what of a
/// dropped line still goes to the terminal.
fn sequences_of(bytes: &[u8]) -> Vec<u8> {
    let mut esc = Seq::Ground;
    let mut out = Vec::new();
    for &b in bytes {
        let before = esc;
        if esc.step(b) == Byte::Control && (before != Seq::Ground || b == 0x1b) {
            out.push(b);
        }
    }
    out
}

/// The command Claude Code prints under the marker: a word `--resume` or `-r`.
fn is_resume_command(text: &[u8]) -> bool {
    String::from_utf8_lossy(text)
        .split_whitespace()
        .any(|w| w == "--resume" || w == "-r")
}

impl ResumeHint {
    /// Whether output is held, waiting for more to decide.
    pub fn holding(&self) -> bool {
        !matches!(self.held, Held::Nothing)
    }

    /// Everything held goes out as it came (the stream ended, or no more came soon).
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if let Held::Command { marker } = std::mem::replace(&mut self.held, Held::Nothing) {
            out.extend_from_slice(&marker);
        }
        out.append(&mut self.line);
        self.text.clear();
    }

    /// Feeds output, appending to `out` what goes to the terminal now.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            let kind = self.seq.step(b);
            match self.held {
                Held::Nothing => {
                    if kind == Byte::Text && self.line_start && MARKER[0] == b {
                        self.held = Held::Marker;
                        self.line.push(b);
                        self.text.push(b);
                    } else {
                        out.push(b);
                    }
                    match kind {
                        Byte::Newline => self.line_start = true,
                        Byte::Text => self.line_start = false,
                        Byte::Control => {}
                    }
                    continue;
                }
                Held::Marker | Held::Command { .. } => self.line.push(b),
            }
            match kind {
                Byte::Text => {
                    self.text.push(b);
                    if matches!(self.held, Held::Marker) && !MARKER.starts_with(&self.text) {
                        self.line_start = false;
                        self.flush(out);
                    }
                }
                Byte::Newline => self.line_ends(out),
                Byte::Control => {}
            }
            if self.line.len() > LINE_MAX {
                self.line_start = false;
                self.flush(out);
            }
        }
    }

    /// A held line is whole: the marker waits for the next line; the command after a
    /// marker is dropped with it (their sequences kept); anything else goes out.
    fn line_ends(&mut self, out: &mut Vec<u8>) {
        self.line_start = true;
        let line = std::mem::take(&mut self.line);
        let text = std::mem::take(&mut self.text);
        let trimmed = text.trim_ascii_end();
        match std::mem::replace(&mut self.held, Held::Nothing) {
            Held::Marker if trimmed == MARKER => self.held = Held::Command { marker: line },
            Held::Command { marker } if is_resume_command(&text) => {
                out.extend_from_slice(&sequences_of(&marker));
                out.extend_from_slice(&sequences_of(&line));
                self.dropped = true;
            }
            Held::Command { marker } => {
                out.extend_from_slice(&marker);
                out.extend_from_slice(&line);
            }
            _ => out.extend_from_slice(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(reads: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut h = ResumeHint::default();
        let mut out = Vec::new();
        for r in reads {
            h.feed(r, &mut out);
        }
        h.flush(&mut out);
        (out, h.dropped)
    }

    /// What Claude Code 2.1.332 printed as it ended under `relay sandbox`.
    const CLAUDE_END: &[u8] = b"\x1b[2m\x1b[22m\r\n\x1b[2mResume this session with:\x1b[22m\r\n\x1b[2mclaude --setting-sources user --strict-mcp-config --resume 410d6e05-4069-49cc-80c6-af1a0f33a9e5\x1b[22m\r\n\x1b[2m\x1b[22m\x1b[?25h";

    #[test]
    fn claude_codes_hint_goes_and_its_sequences_stay() {
        let want = b"\x1b[2m\x1b[22m\r\n\x1b[2m\x1b[22m\x1b[2m\x1b[22m\x1b[2m\x1b[22m\x1b[?25h";
        assert_eq!(run(&[CLAUDE_END]), (want.to_vec(), true));
        // Split anywhere, the same.
        for at in 1..CLAUDE_END.len() {
            let (a, b) = CLAUDE_END.split_at(at);
            assert_eq!(run(&[a, b]), (want.to_vec(), true), "split at {at}");
        }
        // After a screen's worth of output on the same line's start.
        let mut after = b"bye\r\n".to_vec();
        after.extend_from_slice(CLAUDE_END);
        let (out, dropped) = run(&[&after]);
        assert!(dropped && out.starts_with(b"bye\r\n"));
        // The short form of the flag too.
        let (out, dropped) = run(&[b"Resume this session with:\nclaude -w \"x\" -r 1234\n"]);
        assert_eq!((out, dropped), (Vec::new(), true));
    }

    #[test]
    fn other_lines_pass_whole() {
        for text in [
            &b"Resume this session with:\nsomething else\n"[..],
            b"Resume this session with: now\nclaude --resume 1\n",
            b"Resume\n",
            b"Results: 3\nResume? [y/n] ",
            b"xResume this session with:\nclaude --resume 1\n",
            b"  Resume this session with:\nclaude --resume 1\n",
            b"plain text\r\n\x1b[31mred\x1b[0m\r\n",
        ] {
            assert_eq!(run(&[text]), (text.to_vec(), false), "{text:?}");
        }
        // A line longer than the bound passes without its end.
        let mut long = b"Resume this session with:\n".to_vec();
        long.extend(std::iter::repeat_n(b'a', LINE_MAX + 10));
        let mut h = ResumeHint::default();
        let mut out = Vec::new();
        h.feed(&long, &mut out);
        assert_eq!(out, long[..out.len()]);
        assert!(out.len() > LINE_MAX && !h.holding());
    }

    #[test]
    fn only_what_could_be_the_hint_is_held() {
        let mut h = ResumeHint::default();
        let mut out = Vec::new();
        h.feed(b"$ ", &mut out);
        assert!(!h.holding());
        h.feed(b"\r\n\x1b[1m", &mut out);
        assert!(!h.holding(), "sequences at a line's start pass at once");
        h.feed(b"Resu", &mut out);
        assert!(h.holding());
        assert_eq!(out, b"$ \r\n\x1b[1m");
        h.flush(&mut out);
        assert_eq!(out, b"$ \r\n\x1b[1mResu");
    }
}
