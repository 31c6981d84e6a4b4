//! A line of the card as runs of toned text, and how a terminal is asked to show it.

use crate::escape::{Lines, escape_controls};
use connop_core::contract::TargetState;
use std::fmt::Write as _;

/// How a piece of the card is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// As is.
    Plain,
    /// The title: bold.
    Title,
    /// Help text: dim.
    Dim,
    /// A state: coloured by what it means.
    State(TargetState),
    /// A link: underlined, and an OSC 8 hyperlink where the terminal has them.
    Link,
    /// A row's detail.
    Detail,
}

/// A run of text with one tone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// How it is shown.
    pub tone: Tone,
    /// The text, with no control characters.
    pub text: String,
}

/// One line of the card.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Line(pub Vec<Span>);

/// What the terminal is asked to do beyond plain text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// SGR colours and attributes.
    pub color: bool,
    /// OSC 8 hyperlinks around links.
    pub hyperlinks: bool,
}

impl Line {
    /// A line of plain text.
    pub fn plain(text: String) -> Self {
        Line::toned(Tone::Plain, text)
    }

    /// A line of one tone.
    pub fn toned(tone: Tone, text: String) -> Self {
        Line(vec![Span { tone, text }])
    }

    pub(super) fn push(&mut self, tone: Tone, text: String) {
        self.0.push(Span { tone, text });
    }

    pub(super) fn trim_end(&mut self) {
        while let Some(last) = self.0.last_mut() {
            let trimmed = last.text.trim_end().len();
            last.text.truncate(trimmed);
            if !last.text.is_empty() {
                break;
            }
            self.0.pop();
        }
    }

    /// Cuts the line to `width` columns, ending in `…` when cut.
    pub(super) fn fit(&mut self, width: usize) {
        if self.width() <= width {
            return;
        }
        let mut left = width.saturating_sub(1);
        let mut kept = Vec::new();
        for mut span in std::mem::take(&mut self.0) {
            let n = chars(&span.text);
            if n > left {
                span.text = span.text.chars().take(left).collect();
                span.text.push('…');
                kept.push(span);
                break;
            }
            left -= n;
            kept.push(span);
        }
        if width == 0 {
            kept.clear();
        }
        self.0 = kept;
    }

    /// The text without styling.
    pub fn text(&self) -> String {
        self.0.iter().map(|s| s.text.as_str()).collect()
    }

    /// How many columns the text takes.
    pub fn width(&self) -> usize {
        self.0.iter().map(|s| chars(&s.text)).sum()
    }

    /// How many terminal rows the line takes at `cols` columns (a long link wraps).
    pub fn rows_at(&self, cols: u16) -> usize {
        self.width().div_ceil(usize::from(cols).max(1)).max(1)
    }

    /// The line for the terminal: SGR colours and OSC 8 hyperlinks as `style` allows.
    pub fn paint(&self, style: Style) -> String {
        let mut out = String::new();
        for span in &self.0 {
            let sgr = if style.color { sgr(span.tone) } else { None };
            let link = style.hyperlinks && span.tone == Tone::Link;
            if link {
                let _ = write!(out, "\x1b]8;;{}\x1b\\", span.text);
            }
            match sgr {
                Some(code) => {
                    let _ = write!(out, "\x1b[{code}m{}\x1b[0m", span.text);
                }
                None => out.push_str(&span.text),
            }
            if link {
                out.push_str("\x1b]8;;\x1b\\");
            }
        }
        out
    }
}

/// The SGR parameters of a tone, `None` for plain text.
fn sgr(tone: Tone) -> Option<&'static str> {
    use TargetState::*;
    Some(match tone {
        Tone::Plain | Tone::Detail => return None,
        Tone::Title => "1",
        Tone::Dim => "2",
        Tone::Link => "4",
        Tone::State(Connected) => "1;32",
        Tone::State(Skipped) => "33",
        Tone::State(Failed | NotConnected) => "1;31",
        Tone::State(Expired) => "35",
        Tone::State(Initiated) => "36",
        Tone::State(_) => "2",
    })
}

pub(super) fn chars(s: &str) -> usize {
    s.chars().count()
}

/// `s` cut to `width` characters, ending in `…` when cut.
pub(super) fn fit(s: &str, width: usize) -> String {
    if chars(s) <= width {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        out.push('…');
    }
    out
}

/// Text from the tool gateway (names, details, links) with its control characters shown as
/// escapes ([`escape_controls`]), on one line.
pub(super) fn clean(s: &str) -> String {
    escape_controls(s, Lines::One).into_owned()
}
