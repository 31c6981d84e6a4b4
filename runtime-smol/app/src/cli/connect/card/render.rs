//! The card laid out for a width: a title, one line per row, what to do with a link, the
//! time-left bar and the keys, or the settle reason; and the plain one-line-per-change form.

use super::line::{Line, Tone, chars, clean, fit};
use super::model::CardModel;
use super::words::{outcome_word, settled_words, state_word};
use connop_core::contract::TargetState;
use connop_core::flow::Event;
use connop_core::operation::TargetRow;
use connop_core::time::Timestamp;
use std::time::Duration;

/// Cells of the time-left bar at full width.
const BAR_CELLS: usize = 20;
/// The widest a name column gets; longer names are cut with `…`.
const NAME_CAP: usize = 16;
/// A detail cut to fewer characters than this is left out instead.
const MIN_DETAIL: usize = 4;
/// What ends the wait for a row nothing moves, when no key can be read.
const WAITS: &str = "the operation waits until its time runs out or it is interrupted";

impl CardModel {
    /// The card as lines for a terminal `width` columns wide.
    ///
    /// A title; one numbered line per row (`  1  gmail   initiated  <link>  <detail>`); then,
    /// while open, what to do with a link, the time-left bar and the keys (only when keys can
    /// be read), or how it settled once settled. Every line fits the width except a
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
            Some(reason) => foot.push(Line::plain(fit(settled_words(reason), width))),
            None if self.op_id.is_some() => {
                if self.rows.iter().any(|r| row_link(r).is_some()) {
                    for line in wrap_words(LINK_HINT, width) {
                        hint.push(Line::toned(Tone::Dim, line));
                    }
                }
                if let Some(left) = self.left_to_do() {
                    for line in wrap_words(&left, width) {
                        foot.push(Line::plain(line));
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

    /// A row's state as the card says it: its state while open, its outcome once settled.
    fn row_word(&self, row: &TargetRow) -> &'static str {
        match self.settled_by {
            Some(_) => outcome_word(row.state, self.live_state(&row.name)),
            None => state_word(row.state),
        }
    }

    /// What is left for the person to do while a row failed or expired: such a row is not
    /// resolved, and nothing moves it by itself (a denied consent, a link run out), so the
    /// operation waits for a skip or Continue. `None` while no row is so.
    pub fn left_to_do(&self) -> Option<String> {
        if self.is_settled() {
            return None;
        }
        let stuck: Vec<(usize, String)> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.state, TargetState::Failed | TargetState::Expired))
            .map(|(i, r)| (i + 1, clean(&r.name)))
            .collect();
        let (what, todo) = match (stuck.as_slice(), self.keys) {
            ([], _) => return None,
            ([(n, name)], true) => (
                format!("{name} is not resolved"),
                format!("press {n} to skip it, or c to continue with what is connected"),
            ),
            ([(_, name)], false) => (format!("{name} is not resolved"), WAITS.to_owned()),
            (rows, keys) => {
                let names: Vec<&str> = rows.iter().map(|(_, name)| name.as_str()).collect();
                let todo = if keys {
                    "press a row's number to skip it, or c to continue with what is connected"
                } else {
                    WAITS
                };
                (
                    format!("{} are not resolved", names.join(", ")),
                    todo.to_owned(),
                )
            }
        };
        Some(format!("{what}: {todo}"))
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
            .map(|r| self.row_word(r).len())
            .max()
            .unwrap_or(0);
        // Where a row's text starts: under the name.
        let indent = " ".repeat(2 + index_w + 2);
        for (i, row) in self.rows.iter().enumerate() {
            let name = fit(&clean(&row.name), name_w);
            let head = format!("  {:>index_w$}  {name:<name_w$}  ", i + 1);
            let state = self.row_word(row);
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

    pub(super) fn key_help(&self, width: usize) -> String {
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

impl CardModel {
    /// One plain line for an event, for when stderr is not a terminal or colour and cursor
    /// movement are off (docs/operating.md#command-line), in the card's words: no actor, no wire
    /// name.
    ///
    /// Call it once [`CardModel::apply`] accepted the event (a stale frame prints nothing):
    /// the request gives the card's title and every row, a change the row's new state (with
    /// its link while it has one to open, and its detail), the settle frame how it settled
    /// and each row's outcome; a frame with neither a change nor a settle gives `None`.
    pub fn plain_line(&self, event: &Event) -> Option<String> {
        match event {
            Event::Request(card) => {
                let rows: Vec<String> = card.targets.iter().map(|r| self.row_text(r)).collect();
                Some(format!("{}: {}", self.title(), rows.join(", ")))
            }
            Event::Update(frame) => match (&frame.change, frame.view.settled_by) {
                (Some(change), _) => {
                    let row = frame.view.targets.iter().find(|r| r.name == change.target);
                    let mut line = format!("{}: {}", clean(&change.target), state_word(change.to));
                    if let Some(url) = row.and_then(row_link) {
                        line.push(' ');
                        line.push_str(&url);
                    }
                    if let Some(detail) = change.detail.as_deref().filter(|d| !d.is_empty()) {
                        line.push_str(" — ");
                        line.push_str(&clean(detail));
                    }
                    Some(line)
                }
                (None, Some(reason)) => {
                    let rows: Vec<String> = frame
                        .view
                        .targets
                        .iter()
                        .map(|r| format!("{} {}", clean(&r.name), self.row_word(r)))
                        .collect();
                    Some(format!("{} — {}", settled_words(reason), rows.join(", ")))
                }
                (None, None) => None,
            },
            _ => None,
        }
    }

    /// A row in one line: its name, state, link (while it has one to open) and detail.
    fn row_text(&self, row: &TargetRow) -> String {
        let mut s = format!("{} {}", clean(&row.name), self.row_word(row));
        if let Some(url) = row_link(row) {
            s.push(' ');
            s.push_str(&url);
        }
        if !row.detail_str().is_empty() {
            s.push_str(" — ");
            s.push_str(&clean(row.detail_str()));
        }
        s
    }
}
