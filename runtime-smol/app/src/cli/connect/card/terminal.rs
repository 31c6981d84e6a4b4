//! The terminal itself: single-key mode, whether a stream is a terminal, its size, and what
//! the environment lets the card draw.

use super::line::Style;
use rustix::fd::AsFd;
use rustix::termios::{self, LocalModes, OptionalActions, SpecialCodeIndex, Termios};

/// The width used when the terminal does not say.
const DEFAULT_WIDTH: u16 = 80;
/// The height used when the terminal does not say.
const DEFAULT_HEIGHT: u16 = 24;

/// Stdin in single-key mode for as long as the guard lives: no line buffering, no echo, and
/// Ctrl-C arrives as byte `0x03` instead of a signal. Output processing stays on, so `\n`
/// still starts a new line. Dropping the guard (also during a panic's unwind) restores the
/// terminal as it was.
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Enters single-key mode, or `None` when stdin is not a terminal (or refuses).
    pub fn enter() -> Option<RawMode> {
        let stdin = rustix::stdio::stdin();
        if !termios::isatty(stdin) {
            return None;
        }
        let saved = termios::tcgetattr(stdin).ok()?;
        let mut raw = saved.clone();
        raw.local_modes
            .remove(LocalModes::ICANON | LocalModes::ECHO | LocalModes::ISIG);
        raw.special_codes[SpecialCodeIndex::VMIN] = 1;
        raw.special_codes[SpecialCodeIndex::VTIME] = 0;
        termios::tcsetattr(stdin, OptionalActions::Now, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // Nothing better to do if the terminal went away meanwhile.
        let _ = termios::tcsetattr(rustix::stdio::stdin(), OptionalActions::Now, &self.saved);
    }
}

impl std::fmt::Debug for RawMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawMode")
    }
}

/// Whether `fd` is a terminal: decides between the live card and plain change lines.
pub fn is_terminal<Fd: AsFd>(fd: Fd) -> bool {
    termios::isatty(fd)
}

/// Whether stdin is a terminal (keys can be read in raw mode).
pub fn stdin_is_terminal() -> bool {
    is_terminal(rustix::stdio::stdin())
}

/// Whether stderr is a terminal (the card can be drawn in place).
pub fn stderr_is_terminal() -> bool {
    is_terminal(rustix::stdio::stderr())
}

/// The size of the terminal the card is drawn on (stderr) as (columns, rows); 80×24 when it
/// does not say.
pub fn terminal_size() -> (u16, u16) {
    let size = termios::tcgetwinsize(rustix::stdio::stderr()).ok();
    let cols = size.map(|w| w.ws_col).filter(|&c| c > 0);
    let rows = size.map(|w| w.ws_row).filter(|&r| r > 0);
    (
        cols.unwrap_or(DEFAULT_WIDTH),
        rows.unwrap_or(DEFAULT_HEIGHT),
    )
}

/// How the card may draw on stderr, from the environment (docs/operating.md#connop-connect):
/// `NO_COLOR` (set and not empty) or `TERM=dumb` turn colour and cursor movement off; OSC 8
/// hyperlinks are used where the terminal is known to have them (`FORCE_HYPERLINK=1` or `0` decides
/// instead).
pub fn style_from_env(get: impl Fn(&str) -> Option<String>) -> Option<Style> {
    let set = |name: &str| get(name).is_some_and(|v| !v.is_empty());
    let term = get("TERM").unwrap_or_default();
    if set("NO_COLOR") || term == "dumb" {
        return None;
    }
    let hyperlinks = match get("FORCE_HYPERLINK").as_deref() {
        Some("0") => false,
        Some(v) if !v.is_empty() => true,
        _ => {
            let program = get("TERM_PROGRAM").unwrap_or_default();
            let vte = get("VTE_VERSION").and_then(|v| v.parse::<u32>().ok());
            [
                "iTerm.app",
                "WezTerm",
                "vscode",
                "ghostty",
                "Hyper",
                "Tabby",
            ]
            .contains(&program.as_str())
                || vte.is_some_and(|v| v >= 5000)
                || set("KITTY_WINDOW_ID")
                || set("WT_SESSION")
                || set("KONSOLE_VERSION")
                || [
                    "xterm-kitty",
                    "foot",
                    "alacritty",
                    "wezterm",
                    "xterm-ghostty",
                ]
                .iter()
                .any(|t| term.starts_with(t))
        }
    };
    Some(Style {
        color: true,
        hyperlinks,
    })
}
