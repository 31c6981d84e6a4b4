//! The terminal card of `connop connect` (SPEC §8, §12.3): one connection operation shown
//! live on a terminal, answered with single keys.
//!
//! Almost everything here is pure so it can be tested without a terminal:
//! - [`CardModel`] folds the operation's [`Event`]s (the card request, then update frames)
//!   into what the card shows, dropping frames older than what it already has (SPEC §3.4).
//! - [`CardModel::render`] lays the card out for a width as [`Line`]s of toned [`Span`]s;
//!   [`Line::paint`] gives the text with colours and OSC 8 hyperlinks, or plain. Links are
//!   never cut: one too long for its row gets a line of its own, which the terminal wraps.
//!   The card goes to **stderr**: stdout is reserved for the summary or the model result.
//! - [`change_line`] is the plain one-line-per-change form for when stderr is not a terminal
//!   (or colour and cursor movement are off).
//! - [`Key`], [`CardModel::press`] and [`EscapeFilter`] turn key bytes into a [`CardAction`];
//!   rows past 9 take two digits.
//!
//! The terminal itself is the small rest: [`RawMode`] (single keys, no echo, Ctrl-C as a byte),
//! [`is_terminal`] and [`terminal_size`].

use crate::escape::{Lines, escape_controls};
use connop_core::card::CardAnswer;
use connop_core::contract::{SettleReason, TargetState};
use connop_core::flow::Event;
use connop_core::operation::{DEFAULT_DEADLINE, OpId, TargetRow, Text};
use connop_core::time::Timestamp;
use rustix::fd::AsFd;
use rustix::termios::{self, LocalModes, OptionalActions, SpecialCodeIndex, Termios};
use std::fmt::Write as _;
use std::time::Duration;

/// Cells of the time-left bar at full width.
const BAR_CELLS: usize = 20;
/// The widest a name column gets; longer names are cut with `…`.
const NAME_CAP: usize = 16;
/// A detail cut to fewer characters than this is left out instead.
const MIN_DETAIL: usize = 4;
/// The width used when the terminal does not say.
const DEFAULT_WIDTH: u16 = 80;
/// The height used when the terminal does not say.
const DEFAULT_HEIGHT: u16 = 24;

/// What the card shows: the state of one operation as of the newest event seen.
///
/// It exists so the terminal loop never rebuilds state from deltas: every frame carries the
/// full view (SPEC §3.4), and the model keeps the newest one by `seq`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CardModel {
    op_id: Option<OpId>,
    seq: Option<u64>,
    deadline_at: Timestamp,
    timeout: Option<Duration>,
    rows: Vec<TargetRow>,
    settled_at: Option<Timestamp>,
    settled_by: Option<SettleReason>,
    /// The rows as they were before the settle frame (settle writes `not_connected` over
    /// `failed` and `expired`; the summary still tells them apart).
    live_rows: Vec<TargetRow>,
    /// Whether keys can be read: the keys line shows only then.
    keys: bool,
    /// The digits of a row number typed so far, when more may follow (rows past 9).
    pending: Option<usize>,
}

impl CardModel {
    /// An empty card, waiting for its `connection.request`.
    pub fn new() -> Self {
        CardModel::default()
    }

    /// Folds one event in; returns whether the card changed (and so should be redrawn).
    ///
    /// The card request sets the card up and gives the deadline's length. An update frame
    /// replaces the whole view when its `seq` is newer than the one shown; an older or equal
    /// one is dropped. Events of another operation than the first one seen are dropped.
    pub fn apply(&mut self, event: &Event) -> bool {
        match event {
            Event::Request(card) => {
                if self.is_foreign(card.op_id) {
                    return false;
                }
                self.op_id = Some(card.op_id);
                self.timeout = Duration::try_from_secs_f64(card.timeout_seconds).ok();
                if self.is_newer(card.seq) {
                    self.seq = Some(card.seq);
                    self.deadline_at = card.deadline_at;
                    self.rows = card.targets.clone();
                    self.live_rows = card.targets.clone();
                }
                true
            }
            Event::Update(frame) => {
                let view = &frame.view;
                if self.is_foreign(view.op_id) || !self.is_newer(view.seq) {
                    return false;
                }
                self.op_id = Some(view.op_id);
                self.seq = Some(view.seq);
                self.deadline_at = view.deadline_at;
                self.settled_at = view.settled_at;
                self.settled_by = view.settled_by;
                if view.settled_by.is_none() {
                    self.live_rows = view.targets.clone();
                }
                self.rows = view.targets.clone();
                true
            }
            // An event kind this card predates changes nothing it shows.
            _ => false,
        }
    }

    /// Says whether keys can be read (stdin is a terminal); without them the card shows no
    /// keys line.
    pub fn set_keys(&mut self, readable: bool) {
        self.keys = readable;
    }

    /// The state a target was in before the operation settled, as the card last saw it.
    pub fn last_live_state(&self, name: &str) -> Option<String> {
        self.live_rows
            .iter()
            .find(|r| &*r.name == name)
            .map(|r| r.state.as_str().to_owned())
    }

    fn is_foreign(&self, op_id: OpId) -> bool {
        self.op_id.is_some_and(|mine| mine != op_id)
    }

    fn is_newer(&self, seq: u64) -> bool {
        self.seq.is_none_or(|mine| seq > mine)
    }

    /// The operation shown, once an event arrived.
    pub fn op_id(&self) -> Option<OpId> {
        self.op_id
    }

    /// The `seq` of the view shown, once an event arrived.
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// The operation's deadline.
    pub fn deadline_at(&self) -> Timestamp {
        self.deadline_at
    }

    /// The deadline's length, from the card request (SPEC's default 300 s until it arrives).
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_DEADLINE)
    }

    /// The rows, in the order the targets were asked for.
    pub fn rows(&self) -> &[TargetRow] {
        &self.rows
    }

    /// When the operation settled, once the settle frame arrived.
    pub fn settled_at(&self) -> Option<Timestamp> {
        self.settled_at
    }

    /// Why the operation settled, once the settle frame arrived.
    pub fn settled_by(&self) -> Option<SettleReason> {
        self.settled_by
    }

    /// Whether the settle frame arrived: the card is final and the loop can end.
    pub fn is_settled(&self) -> bool {
        self.settled_by.is_some()
    }

    /// The card as lines for a terminal `width` columns wide.
    ///
    /// A title; one numbered line per row (`  1  gmail   initiated  <link>  <detail>`); then,
    /// while open, what to do with a link, the time-left bar and the keys (only when keys can
    /// be read), or `settled by <reason>` once settled. Every line fits the width except a
    /// link too long for it: a link is never cut, so it gets a line of its own (under the
    /// name when it fits there) that the terminal wraps. A settled card shows no links.
    pub fn render(&self, now: Timestamp, width: u16) -> Vec<Line> {
        self.layout(now, width).lines()
    }

    /// [`CardModel::render`] in its parts, so a window too short for all of it can keep the
    /// title and the keys and show as many rows as fit.
    pub fn layout(&self, now: Timestamp, width: u16) -> Layout {
        let width = usize::from(width).max(1);
        let head = vec![Line::toned(Tone::Title, fit(&self.title(), width))];
        let mut body = Vec::new();
        self.render_rows(width, &mut body);
        let mut foot = Vec::new();
        let mut hint = Vec::new();
        match self.settled_by {
            Some(reason) => foot.push(Line::plain(fit(&format!("settled by {reason}"), width))),
            None if self.op_id.is_some() => {
                if self.rows.iter().any(|r| row_link(r).is_some()) {
                    for line in wrap_words(LINK_HINT, width) {
                        hint.push(Line::toned(Tone::Dim, line));
                    }
                }
                foot.push(Line::plain(self.time_bar(now, width)));
                if self.keys {
                    foot.push(Line::toned(Tone::Dim, self.key_help(width)));
                }
            }
            None => {}
        }
        Layout {
            head,
            body,
            hint,
            foot,
        }
    }

    /// [`CardModel::render`] as plain text, one string per line.
    pub fn render_plain(&self, now: Timestamp, width: u16) -> Vec<String> {
        self.render(now, width).iter().map(Line::text).collect()
    }

    fn title(&self) -> String {
        let Some(op_id) = self.op_id else {
            return "connop · waiting for the card…".to_owned();
        };
        let resolved = self.rows.iter().filter(|r| r.state.is_resolved()).count();
        let status = if self.is_settled() {
            "settled".to_owned()
        } else {
            format!("{resolved}/{} resolved", self.rows.len())
        };
        format!("connop · op {op_id} · {status}")
    }

    fn render_rows(&self, width: usize, lines: &mut Vec<Line>) {
        let index_w = self.rows.len().to_string().len();
        let name_w = self
            .rows
            .iter()
            .map(|r| chars(&clean(&r.name)))
            .max()
            .unwrap_or(0)
            .min(NAME_CAP);
        let state_w = self
            .rows
            .iter()
            .map(|r| r.state.as_str().len())
            .max()
            .unwrap_or(0);
        // Where a row's text starts: under the name.
        let indent = " ".repeat(2 + index_w + 2);
        for (i, row) in self.rows.iter().enumerate() {
            let name = fit(&clean(&row.name), name_w);
            let head = format!("  {:>index_w$}  {name:<name_w$}  ", i + 1);
            let state = row.state.as_str();
            let pad = " ".repeat(state_w - state.len());
            // A settled card shows outcomes: its links lead nowhere useful any more.
            let url = match self.settled_by {
                Some(_) => None,
                None => row_link(row),
            };
            let detail = clean(row.detail_str());
            let mut line = Line::plain(head);
            line.push(Tone::State(row.state), state.to_owned());
            line.push(Tone::Plain, pad);
            let url_inline = url
                .as_ref()
                .is_some_and(|u| line.width() + 2 + chars(u) <= width);
            if let (true, Some(url)) = (url_inline, &url) {
                line.push(Tone::Plain, "  ".into());
                line.push(Tone::Link, url.clone());
            }
            let room = width.saturating_sub(line.width() + 2);
            if !detail.is_empty() && room >= MIN_DETAIL.min(chars(&detail)) && room > 0 {
                line.push(Tone::Plain, "  ".into());
                line.push(Tone::Detail, fit(&detail, room));
            }
            line.trim_end();
            line.fit(width);
            lines.push(line);
            if let (false, Some(url)) = (url_inline, url) {
                // Under the name when the link fits there; else from the first column, so the
                // terminal wraps it without a gap.
                let indent = if chars(&indent) + chars(&url) <= width {
                    indent.as_str()
                } else {
                    ""
                };
                let mut link = Line::plain(indent.to_owned());
                link.push(Tone::Link, url);
                lines.push(link);
            }
        }
    }

    fn time_bar(&self, now: Timestamp, width: usize) -> String {
        let left = self.deadline_at.saturating_since(now);
        let label = format!(" {} left", clock(left));
        let cells = BAR_CELLS.min(width.saturating_sub(chars(&label) + 2));
        if cells < 4 {
            return fit(label.trim_start(), width);
        }
        let filled = filled_cells(left, self.timeout(), cells);
        let mut bar = String::with_capacity(cells * 3 + label.len() + 2);
        bar.push('[');
        bar.extend(std::iter::repeat_n('█', filled));
        bar.extend(std::iter::repeat_n('░', cells - filled));
        bar.push(']');
        bar.push_str(&label);
        bar
    }

    fn key_help(&self, width: usize) -> String {
        if let Some(n) = self.pending {
            let long =
                format!("row {n}…: Enter skips it, or type its next digit · Backspace cancels");
            if chars(&long) <= width {
                return long;
            }
            return fit(&format!("row {n}…: Enter skips it"), width);
        }
        let rows = self.rows.len();
        // The digits that may start a longer row number wait for Enter.
        let waits: Vec<String> = (1..=9)
            .filter(|d| d * 10 <= rows)
            .map(|d| d.to_string())
            .collect();
        let enter = if waits.is_empty() {
            String::new()
        } else {
            format!(" (Enter after {})", waits.join(", "))
        };
        let (long_rows, short_rows) = match rows {
            0 => (String::new(), String::new()),
            1 => ("1 skip a row · ".to_owned(), "1 skip · ".to_owned()),
            n => (
                format!("1–{n} skip a row{enter} · "),
                format!("1–{n} skip · "),
            ),
        };
        let long = format!("{long_rows}c continue · q quit (interrupt)");
        if chars(&long) <= width {
            return long;
        }
        fit(&format!("{short_rows}c continue · q quit"), width)
    }

    /// What a key byte asks for, or `None` when it asks for nothing (yet).
    ///
    /// A row number skips that row if it exists and can still be skipped (not resolved, not
    /// settled). With more than 9 rows a digit that may start a longer number waits for the
    /// next digit or Enter (`1`, then `2` is row 12; `1`, then Enter is row 1); Backspace
    /// takes the last digit back. `c`/`C` is Continue while open; `q`/`Q` and Ctrl-C (`0x03`
    /// in raw mode) interrupt. Every other byte is ignored and drops a number being typed.
    pub fn press(&mut self, byte: u8) -> Option<CardAction> {
        let key = Key::from_byte(byte);
        let pending = self.pending.take();
        match key? {
            Key::Interrupt => Some(CardAction::Interrupt),
            _ if self.is_settled() || self.op_id.is_none() => None,
            Key::Continue => Some(CardAction::Continue),
            Key::Digit(d) => {
                let n = pending.unwrap_or(0) * 10 + usize::from(d);
                if n == 0 {
                    return None;
                }
                if n * 10 <= self.rows.len() {
                    self.pending = Some(n);
                    return None;
                }
                self.skip(n)
            }
            Key::Enter => self.skip(pending?),
            Key::Backspace => {
                self.pending = pending.map(|n| n / 10).filter(|n| *n > 0);
                None
            }
        }
    }

    /// The keys line, when keys can be read (for a card printed line by line).
    pub fn keys_line(&self) -> Option<String> {
        self.keys.then(|| self.key_help(usize::MAX))
    }

    /// A number is being typed (the keys line shows it).
    pub fn pending_row(&self) -> Option<usize> {
        self.pending
    }

    fn skip(&self, n: usize) -> Option<CardAction> {
        let row = self.rows.get(n.checked_sub(1)?)?;
        (!row.state.is_final()).then(|| CardAction::Skip(row.name.clone()))
    }
}

/// The card's lines in parts: the title, the rows (with their links), the hint, and what
/// follows (the time bar and the keys, or the settle reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The title.
    pub head: Vec<Line>,
    /// The rows and their links.
    pub body: Vec<Line>,
    /// What to do with a link, while there is one to open.
    pub hint: Vec<Line>,
    /// The time bar and the keys; or the settle reason.
    pub foot: Vec<Line>,
}

impl Layout {
    /// Every line, in order.
    pub fn lines(self) -> Vec<Line> {
        let mut lines = self.head;
        lines.extend(self.body);
        lines.extend(self.hint);
        lines.extend(self.foot);
        lines
    }
}

/// What the card tells a person to do with a link.
pub const LINK_HINT: &str =
    "Open a link in a browser to connect that account; the card updates by itself.";

/// A row's link, while it is one to open: the row waits for the person at the vendor
/// (`initiated`). A failed or expired row's link was used or ran out.
fn row_link(row: &TargetRow) -> Option<String> {
    let url = row.connect_url.as_deref().filter(|u| !u.is_empty())?;
    (row.state == TargetState::Initiated).then(|| clean(url))
}

/// `text` in lines of at most `width` characters, broken at spaces (a word longer than the
/// width is cut).
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && chars(&line) + 1 + chars(word) > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines.into_iter().map(|l| fit(&l, width)).collect()
}

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

    fn push(&mut self, tone: Tone, text: String) {
        self.0.push(Span { tone, text });
    }

    fn trim_end(&mut self) {
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
    fn fit(&mut self, width: usize) {
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

/// Filled cells of the bar: the share of the deadline's length still left, rounded up so any
/// time left shows, exact in integer nanoseconds.
fn filled_cells(left: Duration, total: Duration, cells: usize) -> usize {
    if left.is_zero() {
        return 0;
    }
    if total.is_zero() || left >= total {
        return cells;
    }
    let (left, total) = (left.as_nanos(), total.as_nanos());
    let filled = (left * cells as u128).div_ceil(total);
    usize::try_from(filled).unwrap_or(cells).min(cells)
}

/// `m:ss` (or `h:mm:ss`), whole seconds rounded up so the full deadline reads `5:00`.
fn clock(left: Duration) -> String {
    let secs = left.as_nanos().div_ceil(1_000_000_000);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// `s` cut to `width` characters, ending in `…` when cut.
fn fit(s: &str, width: usize) -> String {
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
fn clean(s: &str) -> String {
    escape_controls(s, Lines::One).into_owned()
}

/// One plain line for an event, for when stderr is not a terminal (SPEC §8).
///
/// Print it only for events [`CardModel::apply`] accepted, so a stale frame prints nothing.
/// The request lists every row, a change names its move and actor, the settle frame gives
/// the reason and the final states; a frame with neither a change nor a settle gives `None`.
pub fn change_line(event: &Event) -> Option<String> {
    match event {
        Event::Request(card) => {
            let rows: Vec<String> = card.targets.iter().map(row_summary).collect();
            Some(format!("card: {}", rows.join(", ")))
        }
        Event::Update(frame) => match (&frame.change, frame.view.settled_by) {
            (Some(change), _) => {
                let mut line = format!(
                    "{}: {} -> {} ({})",
                    clean(&change.target),
                    change.from,
                    change.to,
                    change.actor
                );
                let row = frame.view.targets.iter().find(|r| r.name == change.target);
                if let Some(url) = row.and_then(|r| r.connect_url.as_deref()) {
                    if !url.is_empty() {
                        line.push(' ');
                        line.push_str(&clean(url));
                    }
                }
                if let Some(detail) = change.detail.as_deref().filter(|d| !d.is_empty()) {
                    line.push_str(" — ");
                    line.push_str(&clean(detail));
                }
                Some(line)
            }
            (None, Some(reason)) => {
                let states: Vec<String> = frame
                    .view
                    .targets
                    .iter()
                    .map(|r| format!("{}={}", clean(&r.name), r.state))
                    .collect();
                Some(format!("settled by {reason}: {}", states.join(" ")))
            }
            (None, None) => None,
        },
        _ => None,
    }
}

fn row_summary(row: &TargetRow) -> String {
    let mut s = format!("{} {}", clean(&row.name), row.state);
    if let Some(url) = row.connect_url.as_deref().filter(|u| !u.is_empty()) {
        s.push(' ');
        s.push_str(&clean(url));
    }
    if !row.detail_str().is_empty() {
        s.push_str(" — ");
        s.push_str(&clean(row.detail_str()));
    }
    s
}

/// A key the card knows, decoded from one byte of raw-mode input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A digit `0`–`9`: (part of) a row number.
    Digit(u8),
    /// Enter (`\r` or `\n`): ends a row number.
    Enter,
    /// Backspace (`0x7f` or `0x08`): takes a typed digit back.
    Backspace,
    /// `c` or `C`: Continue.
    Continue,
    /// `q`, `Q` or Ctrl-C: interrupt.
    Interrupt,
}

impl Key {
    /// The key of a byte, or `None` for a byte the card ignores.
    pub fn from_byte(byte: u8) -> Option<Key> {
        match byte {
            b'0'..=b'9' => Some(Key::Digit(byte - b'0')),
            b'\r' | b'\n' => Some(Key::Enter),
            0x7f | 0x08 => Some(Key::Backspace),
            b'c' | b'C' => Some(Key::Continue),
            b'q' | b'Q' | 0x03 => Some(Key::Interrupt),
            _ => None,
        }
    }
}

/// What a key asks of the operation; the caller sends it through the operation handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CardAction {
    /// Skip this target (`CardAnswer::skip(&[name])`).
    Skip(Text),
    /// Continue: settle with what is resolved.
    Continue,
    /// Interrupt the operation (`OpHandle::interrupt`).
    Interrupt,
}

impl CardAction {
    /// The card answer this action sends, or `None` for an interrupt (not an answer).
    pub fn to_answer(&self) -> Option<CardAnswer> {
        match self {
            CardAction::Skip(name) => Some(CardAnswer::skip(&[name.as_ref()])),
            CardAction::Continue => Some(CardAnswer::continue_()),
            CardAction::Interrupt => None,
        }
    }
}

/// Drops the bytes of terminal escape sequences (arrows, Home, F-keys) from key input, so
/// the `1` of `ESC [ 1 ~` never skips row 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EscapeFilter {
    state: EscapeState,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum EscapeState {
    #[default]
    Plain,
    /// After `ESC`.
    Escape,
    /// Inside `ESC [ …`, until a final byte `0x40`–`0x7e`.
    Csi,
    /// After `ESC O`: one more byte.
    Ss3,
}

impl EscapeFilter {
    /// A filter outside any sequence.
    pub fn new() -> Self {
        EscapeFilter::default()
    }

    /// The byte when it is a key of its own, `None` when it belongs to an escape sequence.
    /// A byte after a lone `ESC` that starts no sequence (Alt+key) passes.
    pub fn feed(&mut self, byte: u8) -> Option<u8> {
        use EscapeState::*;
        let (next, out) = match (self.state, byte) {
            (_, 0x1b) => (Escape, None),
            (Plain, b) => (Plain, Some(b)),
            (Escape, b'[') => (Csi, None),
            (Escape, b'O') => (Ss3, None),
            (Escape, b) => (Plain, Some(b)),
            (Csi, 0x40..=0x7e) => (Plain, None),
            (Csi, _) => (Csi, None),
            (Ss3, _) => (Plain, None),
        };
        self.state = next;
        out
    }
}

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

/// How the card may draw on stderr, from the environment (SPEC §12.3): `NO_COLOR` (set and
/// not empty) or `TERM=dumb` turn colour and cursor movement off; OSC 8 hyperlinks are used
/// where the terminal is known to have them (`FORCE_HYPERLINK=1` or `0` decides instead).
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
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use connop_core::contract::{Actor, TargetAction, TargetState};
    use connop_core::operation::{Operation, Patch, Target};
    use connop_core::payload::{CardRequest, OperationView, UpdateFrame};

    const T0: u64 = 1_800_000_000;
    const GMAIL_URL: &str = "https://connect.example/gmail/1";

    fn new_op(names: &[&str]) -> Operation {
        Operation::new(
            OpId::from_entropy([1, 2, 3, 4, 5, 6]),
            names
                .iter()
                .map(|n| Target::connector(n, TargetAction::Connect))
                .collect(),
            Timestamp::from_secs(T0),
            Duration::from_secs(300),
        )
    }

    fn link(url: &str, id: &str) -> Patch {
        Patch {
            connect_url: Some(url.into()),
            connection_id: Some(id.into()),
            detail: None,
            extra: None,
        }
    }

    /// gmail initiated with a link, notion pending.
    fn op() -> Operation {
        let mut op = new_op(&["gmail", "notion"]);
        op.transition(
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            link(GMAIL_URL, "ca_gmail_1"),
        )
        .unwrap();
        op
    }

    fn request(op: &Operation) -> Event {
        Event::Request(Box::new(CardRequest {
            op_id: op.op_id(),
            seq: op.seq(),
            deadline_at: op.deadline_at(),
            timeout_seconds: 300.0,
            targets: op.rows().to_vec(),
            tool_call_id: None,
        }))
    }

    fn moved(op: &mut Operation, name: &str, to: TargetState, actor: Actor, p: Patch) -> Event {
        let change = op.transition(name, to, actor, p).unwrap();
        assert!(change.is_some(), "the test moves for real");
        Event::Update(Box::new(UpdateFrame {
            view: OperationView::of(op),
            change,
        }))
    }

    fn settled(op: &mut Operation, reason: SettleReason) -> Event {
        assert!(op.settle(reason, Timestamp::from_secs(T0 + 10)));
        Event::Update(Box::new(UpdateFrame {
            view: OperationView::of(op),
            change: None,
        }))
    }

    fn card(events: &[&Event]) -> CardModel {
        let mut model = CardModel::new();
        for e in events {
            model.apply(e);
        }
        model
    }

    pub(crate) fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(T0 + secs)
    }

    fn assert_fits(lines: &[String], width: u16) {
        for line in lines {
            assert!(
                line.chars().count() <= usize::from(width),
                "{line:?} is wider than {width}"
            );
        }
    }

    #[test]
    fn the_request_sets_the_card_up() {
        let op = op();
        let mut model = CardModel::new();
        assert!(model.op_id().is_none());
        assert!(model.apply(&request(&op)));
        assert_eq!(model.op_id(), Some(op.op_id()));
        assert_eq!(model.seq(), Some(1));
        assert_eq!(model.deadline_at(), at(300));
        assert_eq!(model.timeout(), Duration::from_secs(300));
        assert_eq!(model.rows().len(), 2);
        assert_eq!(model.rows()[0].connect_url.as_deref(), Some(GMAIL_URL));
        assert!(!model.is_settled() && model.settled_by().is_none());
    }

    #[test]
    fn a_newer_frame_replaces_the_view_and_an_older_one_is_dropped() {
        let mut op = op();
        let req = request(&op);
        let f2 = moved(
            &mut op,
            "gmail",
            TargetState::Connected,
            Actor::BackendWatcher,
            Patch::default(),
        );
        let f3 = moved(
            &mut op,
            "notion",
            TargetState::Skipped,
            Actor::User,
            Patch::default(),
        );
        let mut model = card(&[&req]);
        assert!(model.apply(&f3));
        assert_eq!(model.seq(), Some(3));
        assert!(!model.apply(&f2), "seq 2 < 3: dropped");
        assert!(!model.apply(&f3), "the same seq again: dropped");
        assert_eq!(model.rows()[0].state, TargetState::Connected);
        assert_eq!(model.rows()[1].state, TargetState::Skipped);
        let fin = settled(&mut op, SettleReason::AllResolved);
        assert!(model.apply(&fin));
        assert!(model.is_settled());
        assert_eq!(model.settled_by(), Some(SettleReason::AllResolved));
        assert_eq!(model.settled_at(), Some(at(10)));
        // A request that comes late keeps the newer rows.
        assert!(model.apply(&req));
        assert_eq!(model.seq(), Some(4));
        assert_eq!(model.rows()[1].state, TargetState::Skipped);
    }

    #[test]
    fn events_of_another_operation_are_dropped() {
        let op = op();
        let mut other = Operation::new(
            OpId::from_entropy([9, 9, 9, 9, 9, 9]),
            vec![Target::connector("slack", TargetAction::Connect)],
            Timestamp::from_secs(T0),
            Duration::from_secs(60),
        );
        let mut model = card(&[&request(&op)]);
        assert!(!model.apply(&request(&other)));
        let frame = moved(
            &mut other,
            "slack",
            TargetState::Initiated,
            Actor::BackendWatcher,
            Patch::default(),
        );
        assert!(!model.apply(&frame));
        assert_eq!(model.rows()[0].name.as_ref(), "gmail");
    }

    #[test]
    fn a_frame_before_the_request_still_shows_and_the_request_gives_the_timeout() {
        let mut op = new_op(&["gmail"]);
        let frame = moved(
            &mut op,
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            link(GMAIL_URL, "ca"),
        );
        let mut model = card(&[&frame]);
        assert_eq!(model.timeout(), DEFAULT_DEADLINE);
        let Event::Request(mut req) = request(&op) else {
            unreachable!()
        };
        req.timeout_seconds = 60.0;
        assert!(model.apply(&Event::Request(req)));
        assert_eq!(model.timeout(), Duration::from_secs(60));
        assert_eq!(model.rows()[0].state, TargetState::Initiated);
    }

    /// gmail initiated with a link and a long detail, notion failed with a detail, slack
    /// initiated with a very long link.
    pub(crate) fn busy_card() -> CardModel {
        let mut op = new_op(&["gmail", "notion", "slack"]);
        let long_url = format!("https://connect.example/slack/{}", "x".repeat(120));
        let events = [
            moved(
                &mut op,
                "gmail",
                TargetState::Initiated,
                Actor::BackendWatcher,
                Patch {
                    detail: Some("waiting for the user to finish the Google consent screen".into()),
                    ..link(GMAIL_URL, "ca_gmail_1")
                },
            ),
            moved(
                &mut op,
                "notion",
                TargetState::Failed,
                Actor::BackendWatcher,
                Patch::detail("vendor refused the mint"),
            ),
            moved(
                &mut op,
                "slack",
                TargetState::Initiated,
                Actor::BackendWatcher,
                link(&long_url, "ca_slack_1"),
            ),
        ];
        let mut model = card(&[&request(&op)]);
        for e in &events {
            model.apply(e);
        }
        model
    }

    /// Whether a line is a link on a line of its own (the one kind of line that may be wider
    /// than the terminal: the terminal wraps it, the card never cuts it).
    fn is_link_line(line: &str) -> bool {
        line.trim_start().starts_with("https://")
    }

    #[test]
    fn lines_never_exceed_the_width_and_links_stay_whole() {
        let model = busy_card();
        let long_url = model.rows()[2].connect_url.clone().unwrap();
        for width in [40u16, 80, 120, 20, 10, 1, 0] {
            let lines = model.render_plain(at(30), width);
            let rest: Vec<String> = lines.iter().filter(|l| !is_link_line(l)).cloned().collect();
            assert_fits(&rest, width.max(1));
            // Each link is on one line, whole: never cut or broken by the card.
            let all = lines.concat();
            assert!(all.contains(GMAIL_URL), "width {width}: gmail link whole");
            assert!(
                lines.iter().any(|l| l.trim_start() == &*long_url),
                "width {width}: long link whole on its own line: {lines:#?}"
            );
        }
    }

    #[test]
    fn the_detail_is_cut_before_the_link() {
        let model = busy_card();
        let lines = model.render_plain(at(0), 80);
        let gmail = &lines[1];
        assert!(gmail.starts_with("  1  gmail   initiated  https://connect.example/gmail/1  "));
        assert!(gmail.ends_with('…'), "{gmail:?}");
        assert_eq!(gmail.chars().count(), 80);
        assert_eq!(
            lines[2].trim_end(),
            "  2  notion  failed     vendor refused the mint"
        );
        // At 120 the gmail detail fits whole.
        let wide = model.render_plain(at(0), 120);
        assert!(wide[1].ends_with("Google consent screen"));
        // At 40 the link goes under the row, whole, and the row keeps some detail.
        let narrow = model.render_plain(at(0), 40);
        assert!(narrow[1].starts_with("  1  gmail   initiated  waiting"));
        assert_eq!(narrow[2], format!("     {GMAIL_URL}"));
    }

    #[test]
    fn the_card_has_a_title_a_hint_a_bar_and_key_help() {
        let mut model = card(&[&request(&op())]);
        model.set_keys(true);
        let lines = model.render_plain(at(48), 80);
        assert_eq!(lines[0], "connop · op 010203040506 · 0/2 resolved");
        assert_eq!(lines[1], format!("  1  gmail   initiated  {GMAIL_URL}"));
        assert_eq!(lines[2], "  2  notion  pending");
        assert_eq!(
            lines[3],
            "Open a link in a browser to connect that account; the card updates by itself."
        );
        assert_eq!(lines[4], "[█████████████████░░░] 4:12 left");
        assert_eq!(lines[5], "1–2 skip a row · c continue · q quit (interrupt)");
        assert_eq!(lines.len(), 6);
        let narrow = model.render_plain(at(48), 40);
        assert_eq!(narrow[2], format!("     {GMAIL_URL}"));
        assert_eq!(narrow.last().unwrap(), "1–2 skip · c continue · q quit");
        assert_fits(&narrow, 40);
    }

    #[test]
    fn the_keys_line_shows_only_when_keys_can_be_read() {
        let mut model = card(&[&request(&op())]);
        let without = model.render_plain(at(0), 80);
        assert!(without.iter().all(|l| !l.contains("skip")), "{without:#?}");
        assert_eq!(model.keys_line(), None);
        model.set_keys(true);
        let with = model.render_plain(at(0), 80);
        assert_eq!(with.len(), without.len() + 1);
        assert!(model.keys_line().unwrap().starts_with("1–2 skip a row"));
    }

    #[test]
    fn no_hint_without_a_link_to_open() {
        let model = card(&[&request(&new_op(&["gmail"]))]);
        let lines = model.render_plain(at(0), 80);
        assert!(lines.iter().all(|l| !l.contains("browser")), "{lines:#?}");
    }

    fn bar(model: &CardModel, now: Timestamp, width: u16) -> String {
        let lines = model.render_plain(now, width);
        let bar = lines.iter().find(|l| l.ends_with(" left"));
        bar.cloned().unwrap_or_default()
    }

    #[test]
    fn the_time_bar_follows_the_time_left() {
        let model = card(&[&request(&op())]);
        assert_eq!(bar(&model, at(0), 80), "[████████████████████] 5:00 left");
        assert_eq!(bar(&model, at(150), 80), "[██████████░░░░░░░░░░] 2:30 left");
        assert_eq!(bar(&model, at(300), 80), "[░░░░░░░░░░░░░░░░░░░░] 0:00 left");
        assert_eq!(bar(&model, at(999), 80), "[░░░░░░░░░░░░░░░░░░░░] 0:00 left");
        let almost = Timestamp::from_nanos(at(300).as_nanos() - 1);
        assert_eq!(bar(&model, almost, 80), "[█░░░░░░░░░░░░░░░░░░░] 0:01 left");
        // Narrow terminals get a shorter bar, then the time alone.
        assert_eq!(bar(&model, at(150), 20), "[████░░░░] 2:30 left");
        assert_eq!(bar(&model, at(150), 12), "2:30 left");
        let mut fresh = CardModel::new();
        let Event::Request(mut req) = request(&op()) else {
            unreachable!()
        };
        req.timeout_seconds = 7200.0;
        req.deadline_at = at(7200);
        fresh.apply(&Event::Request(req));
        assert_eq!(
            bar(&fresh, at(0), 80),
            "[████████████████████] 2:00:00 left"
        );
    }

    #[test]
    fn a_settled_card_shows_final_states_and_the_reason() {
        let mut op = op();
        let req = request(&op);
        let skip = moved(
            &mut op,
            "notion",
            TargetState::Skipped,
            Actor::User,
            Patch::default(),
        );
        let fin = settled(&mut op, SettleReason::Continue);
        let model = card(&[&req, &skip, &fin]);
        for width in [40u16, 80, 120] {
            let lines = model.render_plain(at(20), width);
            assert_fits(&lines, width);
            assert_eq!(lines[0], "connop · op 010203040506 · settled");
            assert!(lines[1].starts_with("  1  gmail   not_connected"));
            assert!(lines[2].starts_with("  2  notion  skipped"));
            assert_eq!(lines.last().unwrap(), "settled by continue");
            let all = lines.concat();
            assert!(!all.contains("left") && !all.contains("quit") && !all.contains("https"));
        }
    }

    #[test]
    fn an_empty_card_waits() {
        let lines = CardModel::new().render_plain(at(0), 80);
        assert_eq!(lines, vec!["connop · waiting for the card…".to_owned()]);
        assert_eq!(CardModel::new().press(b'c'), None);
        assert_eq!(CardModel::new().press(b'q'), Some(CardAction::Interrupt));
    }

    #[test]
    fn names_are_capped_and_control_characters_are_shown_escaped() {
        let mut op = new_op(&["a-very-long-connector-name-indeed", "b\u{1b}[31m"]);
        let frame = moved(
            &mut op,
            "b\u{1b}[31m",
            TargetState::Failed,
            Actor::BackendWatcher,
            Patch::detail("bad\x1b[2Jthing\nhere"),
        );
        let model = card(&[&request(&op), &frame]);
        let lines = model.render_plain(at(0), 80);
        assert_fits(&lines, 80);
        assert!(lines[1].starts_with("  1  a-very-long-con…  pending"));
        assert!(lines[2].starts_with("  2  b\\x1b[31m  "), "{:?}", lines[2]);
        assert!(
            lines[2].ends_with("bad\\x1b[2Jthing\\nhere"),
            "{:?}",
            lines[2]
        );
        assert!(lines.iter().all(|l| !l.chars().any(char::is_control)));
        let line = change_line(&frame).unwrap();
        assert!(!line.chars().any(char::is_control));
        assert!(
            line.starts_with("b\\x1b[31m: ") && line.ends_with("bad\\x1b[2Jthing\\nhere"),
            "{line}"
        );
    }

    #[test]
    fn change_lines_for_each_event_kind() {
        let mut op = new_op(&["gmail", "notion"]);
        let minted = moved(
            &mut op,
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            link(GMAIL_URL, "ca_gmail_1"),
        );
        assert_eq!(
            change_line(&minted).unwrap(),
            format!("gmail: pending -> initiated (backend_watcher) {GMAIL_URL}")
        );
        let failed = moved(
            &mut op,
            "notion",
            TargetState::Failed,
            Actor::BackendWatcher,
            Patch::detail("vendor refused"),
        );
        assert_eq!(
            change_line(&failed).unwrap(),
            "notion: pending -> failed (backend_watcher) — vendor refused"
        );
        assert_eq!(
            change_line(&request(&op)).unwrap(),
            format!("card: gmail initiated {GMAIL_URL}, notion failed — vendor refused")
        );
        let change = op
            .refresh(
                "gmail",
                Some("https://connect.example/gmail/2".into()),
                None,
                Actor::BackendWatcher,
            )
            .unwrap();
        let refreshed = Event::Update(Box::new(UpdateFrame {
            view: OperationView::of(&op),
            change: Some(change),
        }));
        assert_eq!(
            change_line(&refreshed).unwrap(),
            "gmail: initiated -> initiated (backend_watcher) https://connect.example/gmail/2"
        );
        moved(
            &mut op,
            "gmail",
            TargetState::Connected,
            Actor::BackendWatcher,
            Patch::default(),
        );
        moved(
            &mut op,
            "notion",
            TargetState::Skipped,
            Actor::User,
            Patch::default(),
        );
        let fin = settled(&mut op, SettleReason::AllResolved);
        assert_eq!(
            change_line(&fin).unwrap(),
            "settled by all_resolved: gmail=connected notion=skipped"
        );
        let Event::Update(mut bare) = fin else {
            unreachable!()
        };
        bare.view.settled_by = None;
        assert_eq!(change_line(&Event::Update(bare)), None);
    }

    #[test]
    fn bytes_map_to_keys() {
        assert_eq!(Key::from_byte(b'1'), Some(Key::Digit(1)));
        assert_eq!(Key::from_byte(b'9'), Some(Key::Digit(9)));
        assert_eq!(Key::from_byte(b'0'), Some(Key::Digit(0)));
        assert_eq!(Key::from_byte(b'\r'), Some(Key::Enter));
        assert_eq!(Key::from_byte(b'\n'), Some(Key::Enter));
        assert_eq!(Key::from_byte(0x7f), Some(Key::Backspace));
        assert_eq!(Key::from_byte(b'c'), Some(Key::Continue));
        assert_eq!(Key::from_byte(b'C'), Some(Key::Continue));
        assert_eq!(Key::from_byte(b'q'), Some(Key::Interrupt));
        assert_eq!(Key::from_byte(b'Q'), Some(Key::Interrupt));
        assert_eq!(Key::from_byte(0x03), Some(Key::Interrupt));
        for other in [b'x', b' ', 0x1b, 0x04, 0xff] {
            assert_eq!(Key::from_byte(other), None, "{other:#x}");
        }
    }

    #[test]
    fn rows_past_nine_take_two_digits() {
        let names: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut model = card(&[&request(&new_op(&names))]);
        model.set_keys(true);
        let skip = |n: usize| Some(CardAction::Skip(format!("c{n}").into()));
        assert!(
            model
                .keys_line()
                .unwrap()
                .starts_with("1–12 skip a row (Enter after 1)")
        );
        // 2 to 9 cannot start a longer number here: at once.
        assert_eq!(model.press(b'5'), skip(5));
        // 1 may: it waits, and says so.
        assert_eq!(model.press(b'1'), None);
        assert_eq!(model.pending_row(), Some(1));
        let lines = model.render_plain(at(0), 100);
        assert!(
            lines.last().unwrap().starts_with("row 1…: Enter skips it"),
            "{lines:#?}"
        );
        assert_eq!(model.press(b'2'), skip(12));
        assert_eq!(model.pending_row(), None);
        assert_eq!(model.press(b'1'), None);
        assert_eq!(model.press(b'0'), skip(10));
        assert_eq!(model.press(b'1'), None);
        assert_eq!(model.press(b'\r'), skip(1));
        // Backspace takes the digit back; Enter alone does nothing.
        assert_eq!(model.press(b'1'), None);
        assert_eq!(model.press(0x7f), None);
        assert_eq!(model.press(b'\r'), None);
        // Another key drops a number being typed.
        assert_eq!(model.press(b'1'), None);
        assert_eq!(model.press(b'x'), None);
        assert_eq!(model.pending_row(), None);
        assert_eq!(model.press(b'0'), None);
        assert_eq!(model.press(b'1'), None);
        assert_eq!(model.press(b'3'), None, "no row 13");
    }

    #[test]
    fn keys_turn_into_actions_on_skippable_rows_only() {
        let mut op = new_op(&["gmail", "notion", "slack"]);
        let req = request(&op);
        let connected = {
            op.transition(
                "gmail",
                TargetState::Initiated,
                Actor::BackendWatcher,
                link(GMAIL_URL, "ca"),
            )
            .unwrap();
            moved(
                &mut op,
                "gmail",
                TargetState::Connected,
                Actor::BackendWatcher,
                Patch::default(),
            )
        };
        let failed = moved(
            &mut op,
            "slack",
            TargetState::Failed,
            Actor::BackendWatcher,
            Patch::default(),
        );
        let mut model = card(&[&req, &connected, &failed]);
        assert_eq!(model.press(b'1'), None, "connected: resolved");
        assert_eq!(model.press(b'2'), Some(CardAction::Skip("notion".into())));
        assert_eq!(model.press(b'3'), Some(CardAction::Skip("slack".into())));
        assert_eq!(model.press(b'4'), None, "no row 4");
        assert_eq!(model.press(b'9'), None);
        assert_eq!(model.press(b'c'), Some(CardAction::Continue));
        assert_eq!(model.press(b'C'), Some(CardAction::Continue));
        assert_eq!(model.press(b'q'), Some(CardAction::Interrupt));
        assert_eq!(model.press(b'Q'), Some(CardAction::Interrupt));
        assert_eq!(model.press(0x03), Some(CardAction::Interrupt));
        assert_eq!(model.press(b'x'), None);
        assert_eq!(model.press(b'0'), None);
        let skipped = moved(
            &mut op,
            "notion",
            TargetState::Skipped,
            Actor::User,
            Patch::default(),
        );
        model.apply(&skipped);
        assert_eq!(model.press(b'2'), None, "skipped: resolved");
        let fin = settled(&mut op, SettleReason::Interrupt);
        model.apply(&fin);
        assert_eq!(model.press(b'3'), None, "settled: nothing to skip");
        assert_eq!(model.press(b'c'), None);
        assert_eq!(model.press(b'q'), Some(CardAction::Interrupt));
    }

    #[test]
    fn actions_become_card_answers() {
        assert_eq!(
            CardAction::Skip("notion".into()).to_answer(),
            Some(CardAnswer::skip(&["notion"]))
        );
        assert_eq!(
            CardAction::Continue.to_answer(),
            Some(CardAnswer::continue_())
        );
        assert_eq!(CardAction::Interrupt.to_answer(), None);
    }

    #[test]
    fn escape_sequences_are_not_keys() {
        let mut filter = EscapeFilter::new();
        let keys = |filter: &mut EscapeFilter, bytes: &[u8]| -> Vec<u8> {
            bytes.iter().filter_map(|b| filter.feed(*b)).collect()
        };
        assert_eq!(keys(&mut filter, b"\x1b[A\x1b[1~2"), b"2");
        assert_eq!(keys(&mut filter, b"\x1b[1;5C1"), b"1");
        assert_eq!(keys(&mut filter, b"\x1bOPc"), b"c");
        assert_eq!(keys(&mut filter, b"\x1bq"), b"q", "Alt+q still quits");
        assert_eq!(keys(&mut filter, b"c\x03"), b"c\x03");
    }

    #[test]
    fn terminal_helpers_answer_without_a_terminal() {
        assert!(terminal_size().0 > 0 && terminal_size().1 > 0);
        // Whatever the test harness gives us, these must not panic, and raw mode restores.
        let _ = stdin_is_terminal() || stderr_is_terminal();
        drop(RawMode::enter());
    }

    #[test]
    fn sample_render() {
        let mut op = new_op(&["gmail", "notion", "slack"]);
        let req = request(&op);
        let gmail = moved(
            &mut op,
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            Patch {
                detail: Some("waiting for the user to finish the Google consent screen".into()),
                ..link(GMAIL_URL, "ca_gmail_1")
            },
        );
        let notion = moved(
            &mut op,
            "notion",
            TargetState::Initiated,
            Actor::BackendWatcher,
            link("https://connect.example/notion/7", "ca_notion_7"),
        );
        let slack = moved(
            &mut op,
            "slack",
            TargetState::Failed,
            Actor::BackendWatcher,
            Patch::detail("vendor refused the mint"),
        );
        let model = card(&[&req, &gmail, &notion, &slack]);
        let lines = model.render_plain(at(48), 80);
        assert_fits(&lines, 80);
        for line in lines {
            println!("{line}");
        }
    }

    #[test]
    fn style_follows_no_color_term_and_known_terminals() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(style_from_env(env(&[("NO_COLOR", "1")])), None);
        assert_eq!(style_from_env(env(&[("TERM", "dumb")])), None);
        let plain_xterm = Style {
            color: true,
            hyperlinks: false,
        };
        // An empty NO_COLOR is no request (no-color.org).
        assert_eq!(
            style_from_env(env(&[("NO_COLOR", ""), ("TERM", "xterm-256color")])),
            Some(plain_xterm)
        );
        let linked = Some(Style {
            color: true,
            hyperlinks: true,
        });
        assert_eq!(
            style_from_env(env(&[("TERM_PROGRAM", "iTerm.app")])),
            linked
        );
        assert_eq!(style_from_env(env(&[("VTE_VERSION", "7006")])), linked);
        assert_eq!(style_from_env(env(&[("TERM", "xterm-kitty")])), linked);
        assert_eq!(style_from_env(env(&[("FORCE_HYPERLINK", "1")])), linked);
        assert_eq!(
            style_from_env(env(&[("FORCE_HYPERLINK", "0"), ("WT_SESSION", "x")])),
            Some(plain_xterm)
        );
    }

    /// The card as a person sees it, at three widths, open and settled.
    #[test]
    fn snapshots_of_the_card() {
        let mut model = busy_card();
        model.set_keys(true);
        for width in [100u16, 60, 30] {
            let text = model.render_plain(at(48), width).join("\n");
            insta::assert_snapshot!(format!("busy_card_{width}"), text);
        }
        let painted: Vec<String> = model
            .render(at(48), 100)
            .iter()
            .map(|l| {
                l.paint(Style {
                    color: true,
                    hyperlinks: true,
                })
                .escape_debug()
                .to_string()
            })
            .collect();
        insta::assert_snapshot!("busy_card_painted", painted.join("\n"));
        let mut op = op();
        let req = request(&op);
        let connected = moved(
            &mut op,
            "gmail",
            TargetState::Connected,
            Actor::BackendWatcher,
            Patch::default(),
        );
        let fin = settled(&mut op, SettleReason::Continue);
        let model = card(&[&req, &connected, &fin]);
        insta::assert_snapshot!("settled_card", model.render_plain(at(20), 80).join("\n"));
    }
}
