//! What a session prints, made safe for the person's terminal
//! ([cli.md](../../docs/cli.md#what-a-session-prints-on-your-terminal)).
//!
//! The threat: a session controls every byte of its output, and a terminal acts on
//! some byte sequences outside the session's screen — it writes or reads the clipboard
//! (OSC 52), sets the window title and then types it back as input (OSC 2 + `CSI 21 t`),
//! changes the palette, fetches files (OSC 1337, kitty graphics), redefines keys
//! (DECUDK), or passes anything to an outer terminal (tmux's `DCS tmux;`).
//!
//! Three ways out, one per use:
//! - [`Filter`] for a live attach stream (`relay sandbox`): the session's screen keeps
//!   working (cursor, colour, erase, alternate screen, mouse and paste modes, the
//!   reports programs ask for), and the sequences on the drop list never reach the
//!   terminal. It is a streaming state machine: a sequence split across reads is still
//!   recognized, a held sequence is bounded ([`STRING_MAX`], [`CSI_MAX`]), and only
//!   whole, well-formed sequences are ever written, so the terminal is never left
//!   inside a half-sent one.
//! - [`visible`] for a log (`relay terminal log`): every control byte but `\n`, `\t`
//!   and the `\r` of `\r\n` is written as visible text.
//! - [`json_line`] for `--json`: serde already escapes C0; this escapes C1 as well.
//!
//! The host's scrollback and logs keep the bytes as the session wrote them; filtering
//! happens here, where they reach a person.

/// The longest OSC or DCS string held while deciding; a longer one is dropped whole.
pub const STRING_MAX: usize = 4096;
/// The longest CSI (or ESC + intermediates) held; a longer one is dropped whole.
pub const CSI_MAX: usize = 256;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const ENQ: u8 = 0x05;
const DEL: u8 = 0x7f;
const REPLACEMENT: &[u8] = "\u{fffd}".as_bytes();

/// One unit of input after UTF-8 decoding.
#[derive(Clone, Copy)]
enum Tok {
    /// An ASCII byte (C0 controls included).
    Ascii(u8),
    /// A valid multi-byte character that is not a C1 control: its bytes, its length.
    Char([u8; 4], usize),
    /// A C1 control (U+0080–U+009F, UTF-8 encoded): acts as `ESC` + (code − 0x40).
    C1(u8),
    /// Bytes that are not UTF-8 (a raw 8-bit C1 byte among them).
    Bad,
}

/// A strict, streaming UTF-8 decoder (overlongs, surrogates and raw C1 bytes are
/// `Bad`), so no byte 0x80–0x9F reaches the terminal except inside a valid character.
#[derive(Default)]
struct Utf8 {
    buf: [u8; 4],
    len: usize,
    need: usize,
    lo: u8,
    hi: u8,
}

impl Utf8 {
    /// Feeds one byte; calls `emit` with zero, one or two tokens.
    fn push(&mut self, b: u8, emit: &mut impl FnMut(Tok)) {
        if self.need > 0 {
            if (self.lo..=self.hi).contains(&b) {
                self.buf[self.len] = b;
                self.len += 1;
                self.need -= 1;
                (self.lo, self.hi) = (0x80, 0xbf);
                if self.need == 0 {
                    let len = std::mem::take(&mut self.len);
                    emit(self.complete(len));
                }
                return;
            }
            // A cut sequence: one replacement, then `b` starts afresh.
            self.need = 0;
            self.len = 0;
            emit(Tok::Bad);
        }
        let (need, lo, hi) = match b {
            0x00..=0x7f => return emit(Tok::Ascii(b)),
            0xc2..=0xdf => (1, 0x80, 0xbf),
            0xe0 => (2, 0xa0, 0xbf),
            0xe1..=0xec | 0xee..=0xef => (2, 0x80, 0xbf),
            0xed => (2, 0x80, 0x9f),
            0xf0 => (3, 0x90, 0xbf),
            0xf1..=0xf3 => (3, 0x80, 0xbf),
            0xf4 => (3, 0x80, 0x8f),
            _ => return emit(Tok::Bad),
        };
        self.buf[0] = b;
        self.len = 1;
        (self.need, self.lo, self.hi) = (need, lo, hi);
    }

    fn complete(&self, len: usize) -> Tok {
        if len == 2 && self.buf[0] == 0xc2 && self.buf[1] <= 0x9f {
            return Tok::C1(self.buf[1]);
        }
        Tok::Char(self.buf, len)
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Str {
    Osc,
    Dcs,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum State {
    Ground,
    /// `ESC` held.
    Esc,
    /// `ESC` and intermediates (0x20–0x2F) held.
    EscInter,
    /// `ESC [` and parameters held until the final byte.
    Csi,
    /// A dropped CSI: swallowed up to its final byte.
    CsiIgnore,
    /// `ESC ]` or `ESC P` and the string so far held until its terminator.
    Str(Str),
    /// An `ESC` inside a held string: `\` ends it (ST); anything else ends it too and
    /// starts a new sequence.
    StrEsc(Str),
    /// A dropped string (SOS, PM, APC, or an OSC/DCS over the cap or malformed):
    /// swallowed up to ST (or BEL, for an OSC).
    Ignore {
        bel_ends: bool,
    },
    IgnoreEsc,
}

/// The streaming filter for an attach stream. Feed it every output chunk in order.
pub struct Filter {
    utf8: Utf8,
    state: State,
    /// The sequence being decided, in 7-bit form (a C1 is held as `ESC` + byte).
    held: Vec<u8>,
}

impl Default for Filter {
    fn default() -> Self {
        Self::new()
    }
}

impl Filter {
    pub fn new() -> Filter {
        Filter {
            utf8: Utf8::default(),
            state: State::Ground,
            held: Vec::new(),
        }
    }

    /// Filters one chunk, appending what may reach the terminal to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut utf8 = std::mem::take(&mut self.utf8);
        for &b in input {
            utf8.push(b, &mut |t| self.token(t, out));
        }
        self.utf8 = utf8;
    }

    /// Filters one chunk and returns what may reach the terminal.
    pub fn filter(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        self.feed(input, &mut out);
        out
    }

    fn token(&mut self, t: Tok, out: &mut Vec<u8>) {
        match t {
            // A C1 control is its 7-bit form: ESC, then the byte 0x40 below it.
            Tok::C1(c) => {
                self.ascii(ESC, out);
                self.ascii(c - 0x40, out);
            }
            Tok::Ascii(b) => self.ascii(b, out),
            Tok::Char(..) | Tok::Bad => self.other(t, out),
        }
    }

    /// A non-ASCII character, or bytes that are not UTF-8.
    fn other(&mut self, t: Tok, out: &mut Vec<u8>) {
        match self.state {
            State::Ground => match t {
                Tok::Char(b, n) => out.extend_from_slice(&b[..n]),
                _ => out.extend_from_slice(REPLACEMENT),
            },
            // Not part of an escape: the ESC is dropped and the character printed.
            State::Esc | State::EscInter => {
                self.reset(State::Ground);
                self.other(t, out);
            }
            State::Csi => self.reset(State::CsiIgnore),
            State::Str(kind) => match t {
                Tok::Char(b, n) => self.hold(&b[..n], kind),
                _ => self.drop_string(kind),
            },
            State::StrEsc(kind) => {
                self.end_string(kind, false, out);
                self.reset(State::Ground);
                self.other(t, out);
            }
            State::IgnoreEsc => {
                self.reset(State::Ground);
                self.other(t, out);
            }
            State::CsiIgnore | State::Ignore { .. } => {}
        }
    }

    fn ascii(&mut self, b: u8, out: &mut Vec<u8>) {
        // CAN and SUB cancel any sequence; ESC starts a new one (inside a string it
        // may be the first half of ST).
        match (self.state, b) {
            (State::Ground, ESC) => return self.start_escape(),
            (State::Ground, ENQ) => return, // the answerback string, typed into the input
            (State::Ground, _) => return out.push(b),
            (State::Str(kind), ESC) => {
                self.state = State::StrEsc(kind);
                return;
            }
            (State::Ignore { .. }, ESC) => {
                self.state = State::IgnoreEsc;
                return;
            }
            (_, ESC) => return self.start_escape(),
            (_, CAN | SUB) => return self.reset(State::Ground),
            _ => {}
        }
        match self.state {
            State::Ground => unreachable!("handled above"),
            State::Esc | State::EscInter | State::Csi | State::CsiIgnore => self.in_escape(b, out),
            State::Str(_) | State::StrEsc(_) | State::Ignore { .. } | State::IgnoreEsc => {
                self.in_string(b, out)
            }
        }
    }

    /// An ASCII byte other than ESC, CAN and SUB inside an escape or a CSI.
    fn in_escape(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Esc => match b {
                b'[' => self.push_state(b, State::Csi),
                b']' => self.push_state(b, State::Str(Str::Osc)),
                b'P' => self.push_state(b, State::Str(Str::Dcs)),
                // SOS, PM, APC (kitty graphics among them): never shown.
                b'X' | b'^' | b'_' => self.reset(State::Ignore { bel_ends: false }),
                // A lone ST ends nothing; dropped, so passthrough leftovers do not show.
                b'\\' => self.reset(State::Ground),
                0x20..=0x2f => self.push_state(b, State::EscInter),
                0x30..=0x7e => {
                    out.extend_from_slice(&[ESC, b]);
                    self.reset(State::Ground);
                }
                DEL => {}
                _ => self.control(b, out),
            },
            State::EscInter => match b {
                0x20..=0x2f if self.held.len() < CSI_MAX => self.held.push(b),
                0x20..=0x2f => self.reset(State::Ground),
                0x30..=0x7e => {
                    self.held.push(b);
                    if keep_esc(&self.held[1..]) {
                        out.extend_from_slice(&self.held);
                    }
                    self.reset(State::Ground);
                }
                DEL => {}
                _ => self.control(b, out),
            },
            State::Csi => match b {
                0x20..=0x3f if self.held.len() < CSI_MAX => self.held.push(b),
                0x20..=0x3f => self.reset(State::CsiIgnore),
                0x40..=0x7e => {
                    if keep_csi(&self.held[2..], b) {
                        out.extend_from_slice(&self.held);
                        out.push(b);
                    }
                    self.reset(State::Ground);
                }
                DEL => {}
                _ => self.control(b, out),
            },
            State::CsiIgnore => match b {
                0x40..=0x7e => self.reset(State::Ground),
                0x20..=0x3f | DEL => {}
                _ => self.control(b, out),
            },
            _ => unreachable!("`ascii` sends only escape states here"),
        }
    }

    /// An ASCII byte other than ESC, CAN and SUB inside an OSC, a DCS or an ignored
    /// string, or just after its ESC.
    fn in_string(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Str(kind) => match b {
                BEL if kind == Str::Osc => {
                    self.end_string(kind, true, out);
                    self.reset(State::Ground);
                }
                0x20..=0x7e => self.hold(&[b], kind),
                DEL => {}
                // Another control inside a string: not a sequence worth keeping.
                _ => self.drop_string(kind),
            },
            State::StrEsc(kind) => {
                self.end_string(kind, false, out);
                if b == b'\\' {
                    self.reset(State::Ground);
                } else {
                    self.start_escape();
                    self.ascii(b, out);
                }
            }
            State::Ignore { bel_ends } => {
                if b == BEL && bel_ends {
                    self.reset(State::Ground);
                }
            }
            State::IgnoreEsc => {
                if b == b'\\' {
                    self.reset(State::Ground);
                } else {
                    self.start_escape();
                    self.ascii(b, out);
                }
            }
            _ => unreachable!("`ascii` sends only string states here"),
        }
    }

    /// A C0 control met inside an escape or a CSI: terminals carry it out on the spot
    /// and go on with the sequence, so it is written now (ENQ excepted).
    fn control(&mut self, b: u8, out: &mut Vec<u8>) {
        if b != ENQ {
            out.push(b);
        }
    }

    fn start_escape(&mut self) {
        self.held.clear();
        self.held.push(ESC);
        self.state = State::Esc;
    }

    fn push_state(&mut self, b: u8, s: State) {
        self.held.push(b);
        self.state = s;
    }

    fn reset(&mut self, s: State) {
        self.held.clear();
        self.state = s;
    }

    fn hold(&mut self, bytes: &[u8], kind: Str) {
        if self.held.len() + bytes.len() > STRING_MAX {
            return self.drop_string(kind);
        }
        self.held.extend_from_slice(bytes);
    }

    fn drop_string(&mut self, kind: Str) {
        self.reset(State::Ignore {
            bel_ends: kind == Str::Osc,
        });
    }

    /// A held string has ended: written, with a proper terminator, if it is kept.
    fn end_string(&mut self, kind: Str, bel: bool, out: &mut Vec<u8>) {
        let body = &self.held[2..];
        let keep = match kind {
            Str::Osc => keep_osc(body),
            Str::Dcs => keep_dcs(body),
        };
        if keep {
            out.extend_from_slice(&self.held);
            if bel {
                out.push(BEL);
            } else {
                out.extend_from_slice(&[ESC, b'\\']);
            }
        }
        self.held.clear();
    }
}

/// `ESC` + intermediates + final: every one but `ESC %` (DOCS), which would take the
/// terminal out of UTF-8, where the bytes of ordinary characters act as C1 controls.
fn keep_esc(seq: &[u8]) -> bool {
    seq.first() != Some(&b'%')
}

/// Splits a CSI body into (private marker, parameters, intermediates); `None` when it
/// is not well formed (a marker after the first byte, a parameter after an
/// intermediate), which terminals ignore and which is therefore never written.
fn csi_parts(body: &[u8]) -> Option<(Option<u8>, &[u8], &[u8])> {
    let (marker, rest) = match body.first() {
        Some(&m @ (b'<' | b'=' | b'>' | b'?')) => (Some(m), &body[1..]),
        _ => (None, body),
    };
    let split = rest
        .iter()
        .position(|b| (0x20..=0x2f).contains(b))
        .unwrap_or(rest.len());
    let (params, inter) = rest.split_at(split);
    let params_ok = params
        .iter()
        .all(|b| b.is_ascii_digit() || *b == b';' || *b == b':');
    let inter_ok = inter.iter().all(|b| (0x20..=0x2f).contains(b));
    (params_ok && inter_ok).then_some((marker, params, inter))
}

fn numbers(params: &[u8]) -> impl Iterator<Item = Option<u32>> + '_ {
    params.split(|b| *b == b';').map(|p| {
        let p = p.split(|b| *b == b':').next().unwrap_or_default();
        std::str::from_utf8(p).ok().and_then(|s| s.parse().ok())
    })
}

/// Window operations the screen may use: report the text area and cell size in
/// characters or pixels (14, 15, 16, 18, 19), save and restore the title (22, 23).
const WINDOW_OPS_KEPT: [u32; 7] = [14, 15, 16, 18, 19, 22, 23];

/// Whether a CSI (body between `ESC [` and `final`) may reach the terminal. Dropped:
/// window operations (`CSI … t`: move, resize, iconify, raise, report the title) but
/// the size reports and title save/restore; xterm's title modes (`CSI > … t`,
/// `CSI > … T`); media copy (`CSI … i`, to a printer); page and screen size changes
/// (`CSI … $ |`, `CSI … * |`, DECCOLM `CSI ? 3 h/l`); bell volumes (`CSI … SP t`,
/// `CSI … SP u`); the Linux console's settings (`CSI … ]`). Everything else — cursor,
/// colour, erase, scroll regions, modes (alternate screen, mouse, bracketed paste,
/// focus), keyboard protocols, device reports — is the session's screen.
fn keep_csi(body: &[u8], fin: u8) -> bool {
    let Some((marker, params, inter)) = csi_parts(body) else {
        return false;
    };
    match (fin, marker, inter) {
        (b't', None, []) => {
            let first = numbers(params).next().flatten();
            first.is_some_and(|n| WINDOW_OPS_KEPT.contains(&n))
        }
        (b't', Some(_), []) => false,
        (b'T', Some(b'>'), []) => false,
        (b'i', _, _) => false,
        (b'|', _, [b'$'] | [b'*']) => false,
        // Bell and margin-bell volume (DECSWBV, DECSMBV): the terminal's, not the screen's.
        (b't' | b'u', _, [b' ']) => false,
        // The Linux console's settings (`CSI 9;n ]` blanking, `CSI 10;n ]` bell, …).
        (b']', _, _) => false,
        (b'h' | b'l', Some(b'?'), []) => !numbers(params).any(|n| n == Some(3)),
        _ => true,
    }
}

/// Whether an OSC string (after `ESC ]`, before its terminator) may reach the
/// terminal. Kept: hyperlinks (8), shell-integration marks (133), and colour queries
/// (4, 5, 10–19 where every value asked is `?`). Everything else is dropped, the
/// clipboard (52), titles (0, 1, 2), X properties (3), palette changes and resets (4,
/// 5, 10–19 with a value, 104, 105, 110–119), the working directory (7),
/// notifications (9, 99, 777), fonts (50), iTerm2's commands and file transfers
/// (1337) among them.
fn keep_osc(body: &[u8]) -> bool {
    let mut fields = body.split(|b| *b == b';');
    let cmd = fields.next().unwrap_or_default();
    if cmd.is_empty() || cmd.len() > 5 || !cmd.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let rest: Vec<&[u8]> = fields.collect();
    match cmd {
        b"8" | b"133" => true,
        b"4" | b"5" => {
            !rest.is_empty()
                && rest.len().is_multiple_of(2)
                && rest.chunks(2).all(|p| {
                    !p[0].is_empty() && p[0].iter().all(u8::is_ascii_digit) && p[1] == b"?"
                })
        }
        [b'1', b'0'..=b'9'] => !rest.is_empty() && rest.iter().all(|f| *f == b"?"),
        _ => false,
    }
}

/// Whether a DCS string may reach the terminal. Kept: DECRQSS (`$q`) and XTGETTCAP
/// (`+q`) requests, whose answers carry the terminal's own state into the session's
/// input, and the old synchronized-update pair (`=1s`, `=2s`). Dropped: everything
/// else, tmux's and screen's passthrough (which would hand anything to an outer
/// terminal), user-defined keys (DECUDK), soft fonts, sixel and ReGIS graphics.
fn keep_dcs(body: &[u8]) -> bool {
    body.starts_with(b"$q") || body.starts_with(b"+q") || body == b"=1s" || body == b"=2s"
}

/// The bytes of a log as visible text: `\n`, `\t` and the `\r`s before `\n` are kept;
/// every other C0 control and DEL is written in caret notation (`ESC` is `^[`, a lone
/// `\r` is `^M`, DEL is `^?`); a C1 control (U+0080–U+009F) as `\u{9b}`; a byte that is
/// not UTF-8 as `\xNN`. Everything else, printable text in any script, is unchanged.
pub fn visible(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        let mut chars = chunk.valid().chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\n' | '\t' => out.push(c),
                // `\r` before `\n` (`\r\r\n` too, which a program writing `\r\n` to a
                // terminal that adds its own `\r` leaves) ends a line and hides nothing;
                // any other `\r` could write over what came before it. A valid run is
                // followed by invalid bytes or by nothing, never by `\n`, so the run is
                // all there is to look at.
                '\r' => {
                    let mut run = 1;
                    while chars.next_if_eq(&'\r').is_some() {
                        run += 1;
                    }
                    let shown = if chars.peek() == Some(&'\n') {
                        "\r"
                    } else {
                        "^M"
                    };
                    out.push_str(&shown.repeat(run));
                }
                '\x00'..='\x1f' => {
                    out.push('^');
                    out.push((c as u8 + 0x40) as char);
                }
                '\x7f' => out.push_str("^?"),
                '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                _ => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A JSON value as one line whose strings carry no control character at all: serde
/// escapes C0 and DEL is harmless, so this escapes C1 (U+0080–U+009F) as `\u00XX`,
/// which a terminal would otherwise take as CSI, OSC, DCS or ST.
pub fn json_line(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if !s.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if ('\u{80}'..='\u{9f}').contains(&c) {
            // Outside strings JSON is ASCII, so a C1 character is always inside one.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter over `input` fed in one piece, and fed byte by byte: both must agree.
    fn run(input: &[u8]) -> Vec<u8> {
        let whole = Filter::new().filter(input);
        let mut f = Filter::new();
        let mut split = Vec::new();
        for b in input {
            f.feed(std::slice::from_ref(b), &mut split);
        }
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&split),
            "fed whole and byte by byte differ for {input:?}"
        );
        whole
    }

    fn s(v: Vec<u8>) -> String {
        String::from_utf8(v).expect("filter output is UTF-8")
    }

    #[test]
    fn the_screen_passes_unchanged() {
        let screen: &[&[u8]] = &[
            b"plain text\r\n\ttab\x08\x07",
            "utf-8: é ✓ 日本 😀".as_bytes(),
            b"\x1b[1;31mred\x1b[0m \x1b[38;2;10;20;30m\x1b[48:5:17m",
            b"\x1b[H\x1b[2J\x1b[K\x1b[3;20r\x1b[10;5H\x1b[?25l\x1b[?25h",
            b"\x1b[?1049h\x1b[?1049l\x1b[?2004h\x1b[?2004l",
            b"\x1b[?1000h\x1b[?1002h\x1b[?1006h\x1b[?1004h\x1b[?2026h",
            b"\x1b[6n\x1b[c\x1b[>c\x1b[5n\x1b[>0q\x1b[?u\x1b[>1u\x1b[<u\x1b[>4;2m",
            b"\x1b[2 q\x1b[!p\x1b[?1$p\x1b[14t\x1b[18t\x1b[22;0t\x1b[23;0t",
            b"\x1b7\x1b8\x1bM\x1b=\x1b>\x1bc\x1b(0\x1b(B\x1b)0\x1b#8\x0e\x0f",
            b"\x1b]8;;https://example.com/a?b=c\x1b\\link\x1b]8;;\x1b\\",
            b"\x1b]8;id=1;file:///tmp/x\x07x\x1b]8;;\x07",
            b"\x1b]133;A\x07$ \x1b]133;B\x07",
            b"\x1b]10;?\x07\x1b]11;?\x1b\\\x1b]4;1;?;2;?\x07",
            b"\x1bP$qm\x1b\\\x1bP+q544e\x1b\\\x1bP=1s\x1b\\",
        ];
        for input in screen {
            assert_eq!(
                run(input),
                input.to_vec(),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn clipboard_title_palette_and_notifications_are_dropped_with_bel_or_st() {
        let dropped: &[&[u8]] = &[
            b"\x1b]52;c;aGVsbG8=\x07",
            b"\x1b]52;c;aGVsbG8=\x1b\\",
            b"\x1b]52;c;?\x07",
            b"\x1b]52;;\x07",
            b"\x1b]0;title\x07",
            b"\x1b]1;icon\x1b\\",
            b"\x1b]2;rm -rf ~\x07",
            b"\x1b]3;WM_NAME=x\x07",
            b"\x1b]4;1;#ff0000\x07",
            b"\x1b]4;1;?;2;#00ff00\x07",
            b"\x1b]10;#ffffff\x07",
            b"\x1b]11;rgb:00/00/00\x07",
            b"\x1b]12;?;#fff\x07",
            b"\x1b]104\x07",
            b"\x1b]110\x07",
            b"\x1b]7;file://host/etc\x07",
            b"\x1b]9;you have mail\x07",
            b"\x1b]777;notify;t;b\x07",
            b"\x1b]99;;hi\x1b\\",
            b"\x1b]50;?\x07",
            b"\x1b]1337;File=name=eA==;inline=0:aGk=\x07",
            b"\x1b]1337;SetUserVar=a=Yg==\x07",
            b"\x1b];x\x07",
            b"\x1b]x;52\x07",
            b"\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\",
            b"\x1bP0;1;0q#0;2;0;0;0#0!10~\x1b\\",
            b"\x1bP1;1|17/616263\x1b\\",
            b"\x1bP1;1;1{ @abc\x1b\\",
            b"\x1b_Gf=100,t=f;L2V0Yy9wYXNzd2Q=\x1b\\",
            b"\x1b^private\x1b\\",
            b"\x1bXsos\x1b\\",
            b"\x1b[21t",
            b"\x1b[20t",
            b"\x1b[t",
            b"\x1b[3;100;100t",
            b"\x1b[8;100;300t",
            b"\x1b[2t",
            b"\x1b[>0;1t",
            b"\x1b[>3T",
            b"\x1b[5i",
            b"\x1b[?5i",
            b"\x1b[0i",
            b"\x1b[132$|",
            b"\x1b[60*|",
            b"\x1b[?3h",
            b"\x1b[?1049;3l",
            b"\x1b[8 t",
            b"\x1b[8 u",
            b"\x1b[9;0]",
            b"\x1b[10;750]",
            b"\x1b%@",
            b"\x1b%G",
            b"\x05",
        ];
        for input in dropped {
            let mut framed = b"a".to_vec();
            framed.extend_from_slice(input);
            framed.extend_from_slice(b"z");
            assert_eq!(s(run(&framed)), "az", "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn a_sequence_split_across_reads_is_still_dropped() {
        let attack = b"before\x1b]52;c;c2VjcmV0\x07\x1b[31mafter\x1b]2;t\x1b\\";
        for cut in 0..=attack.len() {
            let mut f = Filter::new();
            let mut out = f.filter(&attack[..cut]);
            out.extend(f.filter(&attack[cut..]));
            assert_eq!(s(out), "before\x1b[31mafter", "cut at {cut}");
        }
        // And three pieces, through the ST's two bytes and the C1 form.
        let c1 = "x\u{9d}52;c;YQ==\u{9c}y".as_bytes();
        for a in 0..=c1.len() {
            for b in a..=c1.len() {
                let mut f = Filter::new();
                let mut out = f.filter(&c1[..a]);
                out.extend(f.filter(&c1[a..b]));
                out.extend(f.filter(&c1[b..]));
                assert_eq!(s(out), "xy", "cuts at {a}, {b}");
            }
        }
    }

    #[test]
    fn c1_controls_in_utf8_act_as_their_escapes_and_raw_c1_bytes_never_pass() {
        // UTF-8 encoded C1: OSC (U+009D) with ST (U+009C) or BEL, CSI (U+009B), DCS (U+0090).
        assert_eq!(s(run("a\u{9d}52;c;YQ==\u{9c}b".as_bytes())), "ab");
        assert_eq!(s(run("a\u{9d}0;t\u{07}b".as_bytes())), "ab");
        assert_eq!(s(run("a\u{9b}21tb".as_bytes())), "ab");
        assert_eq!(s(run("a\u{90}tmux;x\u{9c}b".as_bytes())), "ab");
        // A kept one is written in its 7-bit form.
        assert_eq!(s(run("a\u{9b}31mb".as_bytes())), "a\x1b[31mb");
        assert_eq!(s(run("a\u{9d}8;;u\u{9c}b".as_bytes())), "a\x1b]8;;u\x1b\\b");
        // Raw 8-bit C1 bytes are not UTF-8: a replacement character each, never the byte.
        let out = s(run(b"a\x9b21t\x9d52;c;YQ==\x9cb"));
        assert_eq!(out, "a\u{fffd}21t\u{fffd}52;c;YQ==\u{fffd}b");
        // Overlong and surrogate encodings are not UTF-8 either.
        assert_eq!(s(run(b"a\xe0\x82\x9bb")), "a\u{fffd}\u{fffd}\u{fffd}b");
        assert_eq!(s(run(b"a\xed\xa0\x80b")), "a\u{fffd}\u{fffd}\u{fffd}b");
        // A cut character followed by an escape: the escape is still recognized.
        assert_eq!(s(run(b"a\xe2\x94\x1b]52;c;YQ==\x07b")), "a\u{fffd}b");
    }

    #[test]
    fn garbage_and_nesting_never_leave_a_sequence_open() {
        // An OSC interrupted by another escape ends there; the new one is judged alone.
        assert_eq!(s(run(b"a\x1b]8;;u\x1b[31mb")), "a\x1b]8;;u\x1b\\\x1b[31mb");
        assert_eq!(s(run(b"a\x1b]52;c;\x1b]52;c;YQ==\x07b")), "ab");
        assert_eq!(s(run(b"a\x1b]8;;\x1b]2;t\x07b")), "a\x1b]8;;\x1b\\b");
        // ESC ESC: the first is dropped.
        assert_eq!(s(run(b"a\x1b\x1b[31mb")), "a\x1b[31mb");
        // CAN and SUB cancel a sequence.
        assert_eq!(s(run(b"a\x1b]52;c;YQ==\x18b")), "ab");
        assert_eq!(s(run(b"a\x1b[2\x1a1tb")), "a1tb");
        // A control inside a string drops it; the rest of the string is swallowed.
        assert_eq!(s(run(b"a\x1b]8;;u\nv\x1b\\b")), "ab");
        // Controls inside a CSI are carried out and the CSI goes on.
        assert_eq!(s(run(b"a\x1b[3\r1mb")), "a\r\x1b[31mb");
        // Malformed CSIs are never written: a marker late, a parameter after an intermediate.
        assert_eq!(s(run(b"a\x1b[1?hb")), "ab");
        assert_eq!(s(run(b"a\x1b[1 2qb")), "ab");
        // A character inside a CSI drops it up to its final byte.
        assert_eq!(s(run("a\x1b[3é1mb".as_bytes())), "ab");
        // ESC then a character: the ESC is dropped, the character printed.
        assert_eq!(s(run("a\x1béb".as_bytes())), "aéb");
        // SOS/PM/APC end at ESC + anything; BEL does not end them.
        assert_eq!(s(run(b"a\x1b_x\x07y\x1b[1mb")), "a\x1b[1mb");
        // A lone ST ends nothing and is dropped.
        assert_eq!(s(run(b"a\x1b\\b")), "ab");
    }

    #[test]
    fn a_long_or_unterminated_sequence_is_bounded_and_never_held() {
        // Over the cap: dropped whole, the rest of it swallowed, output after it flows.
        let mut long = b"a\x1b]52;c;".to_vec();
        long.extend(std::iter::repeat_n(b'Q', 100_000));
        long.extend_from_slice(b"\x07b");
        let mut f = Filter::new();
        let mut out = Vec::new();
        for piece in long.chunks(4096) {
            f.feed(piece, &mut out);
            assert!(f.held.len() <= STRING_MAX + 2, "held {}", f.held.len());
        }
        assert_eq!(s(out), "ab");
        // A kept kind over the cap is dropped too.
        let mut link = b"a\x1b]8;;https://x/".to_vec();
        link.extend(std::iter::repeat_n(b'p', STRING_MAX));
        link.extend_from_slice(b"\x1b\\b");
        assert_eq!(s(run(&link)), "ab");
        // An OSC that never ends holds nothing: memory stays bounded as it grows.
        let mut f = Filter::new();
        let mut out = f.filter(b"a\x1b]52;c;");
        for _ in 0..100 {
            out.extend(f.filter(&[b'A'; 4096]));
            assert!(f.held.len() <= STRING_MAX + 2);
        }
        assert_eq!(s(out), "a");
        // A CSI of endless parameters, likewise; its final byte ends it.
        let mut f = Filter::new();
        let mut out = f.filter(b"a\x1b[");
        for _ in 0..100 {
            out.extend(f.filter(&[b'1'; 1000]));
            assert!(f.held.len() <= CSI_MAX);
        }
        out.extend(f.filter(b"mb"));
        assert_eq!(s(out), "ab");
    }

    #[test]
    fn random_garbage_comes_out_as_text_and_kept_sequences_only() {
        // Bytes drawn mostly from the ones that matter to a parser; a fixed seed.
        let alphabet: &[u8] = b"\x1b\x1b\x1b]]P[[\\\x07\x18;;;0125849?t$q+mh \x0a\x0d\xc2\x9b\x9c\x9d\x90\xe2\x94\x80\xffab";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = (next() % 64) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let out = Filter::new().filter(&input);
            // Split at a random point: the same output.
            let cut = (next() % (len as u64 + 1)) as usize;
            let mut f = Filter::new();
            let mut split = f.filter(&input[..cut]);
            split.extend(f.filter(&input[cut..]));
            assert_eq!(out, split, "{input:?} cut at {cut}");
            // UTF-8 without C1; only whole kept sequences, so a second pass changes nothing.
            let text = String::from_utf8(out.clone()).expect("UTF-8");
            assert!(
                !text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
                "{input:?}"
            );
            assert_eq!(Filter::new().filter(&out), out, "not a fixpoint: {input:?}");
            for bad in [
                "\x1b]52", "\x1b]0", "\x1b]2", "\x1b]1;", "\x1b]9", "\x1bPt", "\x1b[21t",
            ] {
                assert!(
                    !text.contains(bad),
                    "{bad:?} passed for {input:?}: {text:?}"
                );
            }
        }
    }

    #[test]
    fn a_log_is_written_as_visible_text() {
        assert_eq!(
            visible(b"ok\r\n\x1b]52;c;YQ==\x07\x1b[31mred\ttab\n"),
            "ok\r\n^[]52;c;YQ==^G^[[31mred\ttab\n"
        );
        assert_eq!(visible(b"over\rwrite\x08\x7f\x00"), "over^Mwrite^H^?^@");
        assert_eq!(visible(b"end\r"), "end^M");
        assert_eq!(visible(b"a\r\r\nb\r\rc\r\r"), "a\r\r\nb^M^Mc^M^M");
        assert_eq!(visible("c1 \u{9b}21t é".as_bytes()), "c1 \\u{9b}21t é");
        assert_eq!(visible(b"raw \x9b21t \xff"), "raw \\x9b21t \\xff");
        let out = visible(b"\x1b\x07\x9b\x9d\x90\x9c\x05");
        assert!(
            !out.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{out:?}"
        );
    }

    #[test]
    fn json_lines_escape_c1_too() {
        let v = serde_json::json!({"log": "a\u{1b}]52;c;x\u{7}b\u{9d}52;c;y\u{9c}é"});
        let line = json_line(&v);
        assert_eq!(
            line,
            r#"{"log":"a\u001b]52;c;x\u0007b\u009d52;c;y\u009cé"}"#
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&line).unwrap(), v);
        assert!(!line.chars().any(char::is_control));
    }
}
