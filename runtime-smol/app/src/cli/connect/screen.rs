//! The card on stderr: drawn live on a terminal, one line per change otherwise.
//!
//! The live card is drawn on the terminal's alternate screen, whole, from its top-left
//! corner, at most as tall as the window: a card that is taller than the window or a window
//! that shrinks can then leave nothing behind, on the screen or in the scrollback (the
//! alternate screen has none). When the operation settles the terminal goes back to its
//! normal screen and the final card is printed there once. [`Painter`] makes that text; it is
//! pure, and tested against a small terminal model.
//!
//! With `NO_COLOR` or `TERM=dumb` (docs/operating.md#connop-connect), or when stderr is not a
//! terminal, nothing moves the cursor: each change is one line, and the hint and the keys are
//! printed once.

use super::card::{
    CardModel, LINK_HINT, Layout, Line, Style, Tone, stderr_is_terminal, style_from_env,
    terminal_size,
};
use async_signal::{Signal, Signals};
use connop_blocking::{EventSink, SystemClock};
use connop_core::contract::TargetState;
use connop_core::flow::Event;
use futures_lite::{FutureExt, StreamExt};
use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// State shared by the screen, the key reader and the operation's events.
pub(super) type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Enter the alternate screen and hide the cursor.
const ENTER: &str = "\x1b[?1049h\x1b[?25l";
/// Back to the normal screen, cursor shown.
const LEAVE: &str = "\x1b[?1049l\x1b[?25h";
/// Start and end of a synchronized update (terminals without it ignore both): the card is
/// shown whole, never half drawn.
const BEGIN_UPDATE: &str = "\x1b[?2026h";
const END_UPDATE: &str = "\x1b[?2026l";

/// The text that draws cards on the alternate screen, and leaves it.
#[derive(Clone, Debug)]
pub struct Painter {
    style: Style,
    on_alternate: bool,
}

impl Painter {
    /// A painter that has drawn nothing yet.
    pub fn new(style: Style) -> Self {
        Painter {
            style,
            on_alternate: false,
        }
    }

    /// One whole frame for a window of `cols` × `rows`: the screen is cleared and the card
    /// drawn from the top-left corner, cut to the window's height ([`fit_height`]); the
    /// first frame enters the alternate screen.
    pub fn frame(&mut self, layout: Layout, cols: u16, rows: u16) -> String {
        let mut out = String::new();
        if !self.on_alternate {
            out.push_str(ENTER);
            self.on_alternate = true;
        }
        out.push_str(BEGIN_UPDATE);
        out.push_str("\x1b[H\x1b[2J");
        let lines = fit_height(layout, cols, rows);
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                // The last line gets no newline: one at the bottom row would scroll the card.
                out.push_str("\r\n");
            }
            out.push_str(&line.paint(self.style));
        }
        out.push_str(END_UPDATE);
        out
    }

    /// Leaves the alternate screen (if a frame entered it), then prints `lines` once on the
    /// normal screen.
    pub fn finish(&mut self, lines: &[Line]) -> String {
        let mut out = String::new();
        if self.on_alternate {
            out.push_str(LEAVE);
            self.on_alternate = false;
        }
        for line in lines {
            out.push_str(&line.paint(self.style));
            // A carriage return too: the terminal may not add one (raw output).
            out.push_str("\r\n");
        }
        out
    }

    /// Leaves the alternate screen if a frame entered it, printing nothing else.
    pub fn restore(&mut self) -> String {
        self.finish(&[])
    }
}

/// The lines of a card that fit `rows` rows at `cols` columns (a line longer than the width
/// takes more than one row). First the title, then the time bar and the keys (the keys last
/// of all), then as many whole rows as fit, then the hint if there is room. When some rows
/// do not fit, a line says how many lines are left out.
pub fn fit_height(layout: Layout, cols: u16, rows: u16) -> Vec<Line> {
    let mut left = usize::from(rows).max(1);
    let height = |lines: &[Line]| lines.iter().map(|l| l.rows_at(cols)).sum::<usize>();
    let Layout {
        head,
        body,
        hint,
        mut foot,
    } = layout;
    let mut shown = Vec::new();
    for line in head {
        if line.rows_at(cols) > left {
            break;
        }
        left -= line.rows_at(cols);
        shown.push(line);
    }
    while height(&foot) > left && !foot.is_empty() {
        foot.remove(0);
    }
    left -= height(&foot);
    if height(&body) + height(&hint) <= left {
        shown.extend(body);
        shown.extend(hint);
        shown.extend(foot);
        return shown;
    }
    if height(&body) <= left {
        shown.extend(body);
        shown.extend(foot);
        return shown;
    }
    let mut kept = 0;
    for line in &body {
        // One row stays for the line that says what is left out.
        if line.rows_at(cols) + 1 > left {
            break;
        }
        left -= line.rows_at(cols);
        kept += 1;
    }
    let hidden = body.len() - kept;
    shown.extend(body.into_iter().take(kept));
    if left >= 1 {
        let more = format!("… {hidden} more lines (make the window taller)");
        shown.push(Line::toned(Tone::Dim, fit_cols(&more, cols)));
    }
    shown.extend(foot);
    shown
}

/// `text` cut to `cols` characters, ending in `…` when cut.
fn fit_cols(text: &str, cols: u16) -> String {
    let cols = usize::from(cols).max(1);
    if text.chars().count() <= cols {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(cols - 1).collect();
    out.push('…');
    out
}

/// How the card is shown.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Drawn live on the alternate screen.
    Live,
    /// One line per change, no cursor movement.
    Lines,
}

/// What the card shows and how it is put on stderr.
#[derive(Clone)]
pub(super) struct Screen {
    model: Shared<CardModel>,
    painter: Shared<Painter>,
    mode: Mode,
    clock: SystemClock,
}

impl Screen {
    pub(super) fn new() -> Self {
        let style = stderr_is_terminal()
            .then(|| style_from_env(|name| std::env::var(name).ok()))
            .flatten();
        Screen {
            model: Arc::new(Mutex::new(CardModel::new())),
            painter: Arc::new(Mutex::new(Painter::new(style.unwrap_or_default()))),
            mode: if style.is_some() {
                Mode::Live
            } else {
                Mode::Lines
            },
            clock: SystemClock::new(),
        }
    }

    /// Whether keys can be read (stdin is a terminal): the card shows its keys line only then.
    pub(super) fn keys_readable(&self, readable: bool) {
        lock(&self.model).set_keys(readable);
    }

    /// The card's model, which the keys are read against.
    pub(super) fn model(&self) -> Shared<CardModel> {
        self.model.clone()
    }

    /// Draws the card anew (live mode only).
    pub(super) fn draw(&self) {
        if !matches!(self.mode, Mode::Live) {
            return;
        }
        // The model stays locked until the drawing is out: two drawings never cross, so the
        // newer state is always the one left on screen.
        let model = lock(&self.model);
        let (cols, rows) = terminal_size();
        let layout = model.layout(self.clock.now(), cols);
        let text = lock(&self.painter).frame(layout, cols, rows);
        write_stderr(&text);
    }

    /// The operation's events: each fresh one redraws the card, or prints its change line.
    pub(super) fn events(&self) -> EventSink {
        let screen = self.clone();
        Arc::new(move |event: &Event| {
            let text = {
                let mut model = lock(&screen.model);
                if !model.apply(event) {
                    return;
                }
                match screen.mode {
                    Mode::Live => None,
                    Mode::Lines => Some(plain_lines(&model, event)),
                }
            };
            match text {
                None => screen.draw(),
                Some(text) if !text.is_empty() => write_stderr(&format!("{text}\n")),
                Some(_) => {}
            }
        })
    }

    /// Live, redraws every second (the time bar moves) and at once when the window changes
    /// size, until the task is dropped.
    pub(super) fn redraw_every_second(&self) -> Option<smol::Task<()>> {
        let screen = self.clone();
        let mut resized = Signals::new([Signal::Winch]).ok();
        matches!(self.mode, Mode::Live).then(|| {
            smol::spawn(async move {
                loop {
                    let tick = async {
                        smol::Timer::after(Duration::from_secs(1)).await;
                    };
                    match resized.as_mut() {
                        Some(signals) => {
                            tick.or(async {
                                signals.next().await;
                            })
                            .await
                        }
                        None => tick.await,
                    }
                    screen.draw();
                }
            })
        })
    }

    /// The end: back on the normal screen, the settled card printed once.
    pub(super) fn finish(&self) {
        if !matches!(self.mode, Mode::Live) {
            return;
        }
        let model = lock(&self.model);
        let (cols, _) = terminal_size();
        let lines = model.render(self.clock.now(), cols);
        let text = lock(&self.painter).finish(&lines);
        write_stderr(&text);
    }

    /// Back on the normal screen whatever happened (an error, a panic's unwind).
    pub(super) fn restore(&self) {
        let text = lock(&self.painter).restore();
        if !text.is_empty() {
            write_stderr(&text);
        }
    }
}

/// What the card says for one event it accepted, line by line (no cursor movement): the
/// event's own line; after the card request, what to do with a link and the keys; after a
/// row failed or expired, what is left to do.
fn plain_lines(model: &CardModel, event: &Event) -> String {
    let mut text = model.plain_line(event).unwrap_or_default();
    let mut say = |line: &str| {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(line);
    };
    match event {
        Event::Request(_) => {
            say(LINK_HINT);
            if let Some(keys) = model.keys_line() {
                say(&format!("keys: {keys}"));
            }
        }
        Event::Update(frame) => {
            let stuck = frame
                .change
                .as_ref()
                .is_some_and(|c| matches!(c.to, TargetState::Failed | TargetState::Expired));
            if let Some(left) = model.left_to_do().filter(|_| stuck) {
                say(&left);
            }
        }
        _ => {}
    }
    text
}

/// Leaves the alternate screen when dropped, so an early return or a panic never leaves the
/// terminal on it.
pub(super) struct RestoreOnDrop(pub(super) Screen);

impl Drop for RestoreOnDrop {
    fn drop(&mut self) {
        self.0.restore();
    }
}

/// Writes to stderr; a closed stderr (its reader went away) must not panic the operation.
fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::connect::card::tests::at;
    use crate::cli::connect::card::tests::busy_card;

    /// A small model of a terminal: enough of VT100 and xterm to replay what the painter
    /// writes (printing with autowrap, CR, LF with scrolling into the scrollback, cursor
    /// home, erase display, the alternate screen; colours and hyperlinks are skipped).
    struct Terminal {
        cols: usize,
        rows: usize,
        grid: Vec<Vec<char>>,
        /// The normal screen and its cursor while the alternate one is shown.
        saved_main: Option<(Vec<Vec<char>>, usize, usize)>,
        scrollback: Vec<String>,
        row: usize,
        col: usize,
    }

    impl Terminal {
        fn new(cols: usize, rows: usize) -> Self {
            Terminal {
                cols,
                rows,
                grid: vec![vec![' '; cols]; rows],
                saved_main: None,
                scrollback: Vec::new(),
                row: 0,
                col: 0,
            }
        }

        /// A window resize: the grid is cut or padded (no reflow), the cursor kept inside.
        fn resize(&mut self, cols: usize, rows: usize) {
            for line in &mut self.grid {
                line.resize(cols, ' ');
            }
            self.grid.resize(rows, vec![' '; cols]);
            (self.cols, self.rows) = (cols, rows);
            self.row = self.row.min(rows - 1);
            self.col = self.col.min(cols);
        }

        fn line_feed(&mut self) {
            if self.row + 1 < self.rows {
                self.row += 1;
                return;
            }
            let top = self.grid.remove(0);
            if self.saved_main.is_none() {
                // Only the normal screen has a scrollback.
                self.scrollback
                    .push(top.iter().collect::<String>().trim_end().into());
            }
            self.grid.push(vec![' '; self.cols]);
        }

        fn feed(&mut self, text: &str) {
            let mut chars = text.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\x1b' => match chars.next() {
                        Some('[') => {
                            let mut params = String::new();
                            let mut last = ' ';
                            for c in chars.by_ref() {
                                if ('\x40'..='\x7e').contains(&c) {
                                    last = c;
                                    break;
                                }
                                params.push(c);
                            }
                            self.csi(&params, last);
                        }
                        Some(']') => {
                            // OSC: up to ST (ESC \) or BEL.
                            while let Some(c) = chars.next() {
                                if c == '\x07' {
                                    break;
                                }
                                if c == '\x1b' && chars.peek() == Some(&'\\') {
                                    chars.next();
                                    break;
                                }
                            }
                        }
                        other => panic!("unexpected escape {other:?}"),
                    },
                    '\r' => self.col = 0,
                    '\n' => self.line_feed(),
                    c if c.is_control() => panic!("unexpected control {c:?}"),
                    c => {
                        if self.col == self.cols {
                            self.col = 0;
                            self.line_feed();
                        }
                        self.grid[self.row][self.col] = c;
                        self.col += 1;
                    }
                }
            }
        }

        fn csi(&mut self, params: &str, last: char) {
            match (params, last) {
                ("?1049", 'h') => {
                    self.saved_main = Some((self.grid.clone(), self.row, self.col));
                    self.grid = vec![vec![' '; self.cols]; self.rows];
                }
                ("?1049", 'l') => {
                    if let Some((mut main, row, col)) = self.saved_main.take() {
                        for line in &mut main {
                            line.resize(self.cols, ' ');
                        }
                        main.resize(self.rows, vec![' '; self.cols]);
                        self.grid = main;
                        (self.row, self.col) = (row.min(self.rows - 1), col.min(self.cols));
                    }
                }
                ("?25" | "?2026", 'h' | 'l') | (_, 'm') => {}
                ("", 'H') => (self.row, self.col) = (0, 0),
                ("2", 'J') => self.grid = vec![vec![' '; self.cols]; self.rows],
                other => panic!("unexpected CSI {other:?}"),
            }
        }

        fn screen(&self) -> Vec<String> {
            let mut lines: Vec<String> = self
                .grid
                .iter()
                .map(|l| l.iter().collect::<String>().trim_end().to_owned())
                .collect();
            while lines.last().is_some_and(String::is_empty) {
                lines.pop();
            }
            lines
        }
    }

    fn colours() -> Style {
        Style {
            color: true,
            hyperlinks: true,
        }
    }

    /// What a card's lines look like on a fresh terminal of that size, wrapped as it wraps.
    fn wrapped(lines: &[Line], cols: usize) -> Vec<String> {
        let mut out = Vec::new();
        for line in lines {
            let chars: Vec<char> = line.text().chars().collect();
            if chars.is_empty() {
                out.push(String::new());
            }
            for chunk in chars.chunks(cols) {
                out.push(chunk.iter().collect::<String>().trim_end().to_owned());
            }
        }
        out
    }

    #[test]
    fn a_card_taller_than_the_window_leaves_nothing_in_the_scrollback() {
        let mut model = busy_card();
        model.set_keys(true);
        let (cols, rows) = (40u16, 7u16);
        let mut term = Terminal::new(40, 7);
        term.feed("$ connop connect gmail notion slack\r\n");
        let mut painter = Painter::new(colours());
        for second in 0..5 {
            let frame = painter.frame(model.layout(at(second), cols), cols, rows);
            term.feed(&frame);
            let screen = term.screen();
            assert!(screen.len() <= 7, "{screen:#?}");
            assert_eq!(screen[0], "connop · op 010203040506 · 0/3 resolved");
            assert!(
                screen.iter().any(|l| l.contains("more lines")),
                "{screen:#?}"
            );
            assert!(
                screen.last().unwrap().starts_with("1–3 skip"),
                "{screen:#?}"
            );
        }
        assert!(term.scrollback.is_empty(), "{:#?}", term.scrollback);
        // The end: back on the normal screen, whose text is untouched, with the card once.
        let fin = painter.finish(&model.render(at(5), cols));
        term.feed(&fin);
        let printed: Vec<String> = term
            .scrollback
            .iter()
            .chain(&term.screen())
            .cloned()
            .collect();
        assert_eq!(printed[0], "$ connop connect gmail notion slack");
        let title = "connop · op 010203040506 · 0/3 resolved";
        assert_eq!(
            printed.iter().filter(|l| *l == title).count(),
            1,
            "{printed:#?}"
        );
    }

    #[test]
    fn a_shrinking_window_leaves_no_stale_lines() {
        let model = busy_card();
        let mut painter = Painter::new(colours());
        let mut term = Terminal::new(120, 30);
        term.feed(&painter.frame(model.layout(at(0), 120), 120, 30));
        term.resize(50, 12);
        let frame = painter.frame(model.layout(at(1), 50), 50, 12);
        term.feed(&frame);
        // Exactly what a fresh terminal of the new size shows for the new frame.
        let mut fresh = Terminal::new(50, 12);
        fresh.feed(&frame);
        assert_eq!(term.screen(), fresh.screen());
        let lines = fit_height(model.layout(at(1), 50), 50, 12);
        assert_eq!(term.screen(), wrapped(&lines, 50));
        assert!(term.scrollback.is_empty());
    }

    #[test]
    fn links_are_drawn_whole_and_the_terminal_wraps_them() {
        let model = busy_card();
        let long_url = model.rows()[2].connect_url.clone().unwrap().to_string();
        let mut painter = Painter::new(Style::default());
        let mut term = Terminal::new(40, 40);
        term.feed(&painter.frame(model.layout(at(0), 40), 40, 40));
        // The link's rows, joined as a terminal copies a wrapped line, give it whole.
        let screen = term.screen();
        let start = screen
            .iter()
            .position(|l| long_url.starts_with(l.as_str()) && !l.is_empty())
            .expect("the link starts a line");
        let joined: String = screen[start..].concat();
        assert!(joined.starts_with(&long_url), "{screen:#?}");
    }

    #[test]
    fn hyperlinks_and_colours_only_where_asked() {
        let model = busy_card();
        let lines = model.render(at(0), 200);
        let link_line = lines
            .iter()
            .find(|l| l.text().contains("https://"))
            .unwrap();
        let painted = link_line.paint(colours());
        assert!(
            painted.contains("\x1b]8;;https://connect.example/gmail/1\x1b\\"),
            "{painted:?}"
        );
        assert!(painted.contains("\x1b[36minitiated\x1b[0m"), "{painted:?}");
        let plain = link_line.paint(Style::default());
        assert_eq!(plain, link_line.text());
        assert!(!plain.contains('\x1b'));
        let no_links = link_line.paint(Style {
            color: true,
            hyperlinks: false,
        });
        assert!(!no_links.contains("\x1b]8"), "{no_links:?}");
    }

    #[test]
    fn the_height_keeps_the_title_and_the_keys_first() {
        let mut model = busy_card();
        model.set_keys(true);
        let all = model.render(at(0), 80).len();
        let fit = fit_height(model.layout(at(0), 80), 80, 200);
        assert_eq!(fit.len(), all, "everything fits");
        for rows in 1..12u16 {
            let fit = fit_height(model.layout(at(0), 80), 80, rows);
            let height: usize = fit.iter().map(|l| l.rows_at(80)).sum();
            assert!(height <= usize::from(rows), "{rows}: {fit:#?}");
            assert!(fit[0].text().starts_with("connop"), "{rows}");
            if rows >= 3 {
                assert!(fit.last().unwrap().text().starts_with("1–3 skip"), "{rows}");
            }
        }
    }

    #[test]
    fn nothing_is_left_on_the_alternate_screen() {
        let mut painter = Painter::new(colours());
        assert_eq!(painter.restore(), "");
        let _ = painter.frame(busy_card().layout(at(0), 80), 80, 24);
        assert_eq!(painter.restore(), LEAVE);
        assert_eq!(painter.restore(), "");
    }
}
