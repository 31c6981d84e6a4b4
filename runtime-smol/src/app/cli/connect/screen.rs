//! The card on stderr: redrawn in place on a terminal, one line per change otherwise.

use super::Shared;
use super::card::{CardModel, change_line, redraw_sequence, stderr_is_terminal, terminal_width};
use connop_blocking::{EventSink, SystemClock};
use connop_core::flow::Event;
use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the card shows and how much of it is on the screen.
#[derive(Clone)]
pub(super) struct Screen {
    model: Shared<CardModel>,
    /// How many lines the last drawing took, for the next one to replace.
    drawn: Shared<usize>,
    /// stderr is a terminal: draw the card; otherwise print changes.
    live: bool,
    clock: SystemClock,
}

impl Screen {
    pub(super) fn new() -> Self {
        Screen {
            model: Arc::new(Mutex::new(CardModel::new())),
            drawn: Arc::default(),
            live: stderr_is_terminal(),
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

    /// Repaints the card in place of the last drawing.
    fn draw(&self) {
        // The model stays locked until the drawing is out: two drawings never cross, so the
        // newer state is always the one left on screen.
        let model = lock(&self.model);
        let lines = model.render(self.clock.now(), terminal_width());
        let mut drawn = lock(&self.drawn);
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(redraw_sequence(&lines, *drawn).as_bytes());
        let _ = err.flush();
        *drawn = lines.len();
    }

    /// The operation's events: each fresh one redraws the card, or prints its change line.
    pub(super) fn events(&self) -> EventSink {
        let screen = self.clone();
        Arc::new(move |event: &Event| {
            if !lock(&screen.model).apply(event) {
                return;
            }
            if screen.live {
                screen.draw();
            } else if let Some(line) = change_line(event) {
                // A closed stderr (its reader went away) must not panic the operation.
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        })
    }

    /// On a terminal, redraws every second until the task is dropped.
    pub(super) fn redraw_every_second(&self) -> Option<smol::Task<()>> {
        let screen = self.clone();
        self.live.then(|| {
            smol::spawn(async move {
                loop {
                    smol::Timer::after(Duration::from_secs(1)).await;
                    screen.draw();
                }
            })
        })
    }

    /// The last drawing, with the settled state.
    pub(super) fn finish(&self) {
        if self.live {
            self.draw();
        }
    }
}
