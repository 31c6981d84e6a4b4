//! Text for a terminal: what others sent (a peer's reply, a tool gateway's connector names
//! and details, the messages inside errors) is printed with its control characters shown,
//! never obeyed. A terminal takes an escape sequence in the text as an order: move the cursor,
//! clear the screen, set the window's title, make a link, or answer a query by typing into
//! the shell.
//!
//! [`escape_controls`] is the one function every printing path uses. It shows
//! - `\n`, `\r` and `\t` as those two characters (in multi-line text, `\n` and `\t` are kept
//!   as they are: a reply of several lines stays several lines);
//! - every other C0 control and DEL as `\xHH` (ESC is `\x1b`);
//! - C1 controls (U+0080–U+009F, which some terminals obey like ESC sequences) and the
//!   bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069, which reorder what is
//!   shown) as `\u{HHHH}`.
//!
//! A backslash is left as it is: the escapes are for reading, not for decoding back.
//! `--json` output needs none of this: JSON escapes control characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// What a printed text may keep of its line structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// One line (an error line, a name, a row of the card): newlines and tabs are escaped.
    One,
    /// Several lines (a peer's reply): newlines and tabs are kept.
    Many,
}

/// Whether `c` changes how a terminal shows text instead of being shown.
fn is_escaped(c: char, lines: Lines) -> bool {
    match c {
        '\n' | '\t' => lines == Lines::One,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        c => c.is_control(),
    }
}

/// `text` with its control characters shown as escapes (see the module's text); borrowed
/// when there are none.
pub fn escape_controls(text: &str, lines: Lines) -> Cow<'_, str> {
    if !text.chars().any(|c| is_escaped(c, lines)) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_escaped(c, lines) {
            shown.push(c);
            continue;
        }
        let _ = match c {
            '\n' => shown.write_str("\\n"),
            '\r' => shown.write_str("\\r"),
            '\t' => shown.write_str("\\t"),
            c if u32::from(c) < 0x80 => write!(shown, "\\x{:02x}", u32::from(c)),
            c => write!(shown, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        let text = "a\u{1b}[2Jb\u{7}c\rd\u{0}e\u{7f}f\u{9b}31mg\u{202e}h\u{2066}i";
        assert_eq!(
            escape_controls(text, Lines::One),
            "a\\x1b[2Jb\\x07c\\rd\\x00e\\x7ff\\u{9b}31mg\\u{202e}h\\u{2066}i"
        );
        assert_eq!(escape_controls("one\ntwo\tx", Lines::One), "one\\ntwo\\tx");
        assert_eq!(
            escape_controls("one\ntwo\tx\r\n", Lines::Many),
            "one\ntwo\tx\\r\n"
        );
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        for text in ["", "gmail", "résumé — 日本語 \\x1b", "a\nb\tc"] {
            let lines = if text.contains('\n') {
                Lines::Many
            } else {
                Lines::One
            };
            assert!(matches!(escape_controls(text, lines), Cow::Borrowed(t) if t == text));
        }
    }
}
