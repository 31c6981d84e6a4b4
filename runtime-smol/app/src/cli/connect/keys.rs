//! The card's keys: stdin in raw mode, read on a thread of its own; a row number skips that
//! row (two digits past row 9), `c` continues, `q` or Ctrl-C interrupts.

use super::card::{CardAction, EscapeFilter, RawMode};
use super::outcome::InterruptCause;
use super::screen::Screen;
use crate::error::{AppError, EnvironmentError};
use connop_blocking::{Interrupt, SharedRegistry};
use std::io::Read as _;

/// On a terminal, puts it in raw mode and reads keys until the process exits (the thread
/// stays blocked in `read`); the returned mode restores the terminal when dropped. Off a
/// terminal, reads nothing.
pub(super) fn read_keys(
    screen: Screen,
    registry: SharedRegistry,
    session_key: &str,
    interrupt: &Interrupt,
    cause: &InterruptCause,
) -> Result<Option<RawMode>, AppError> {
    let Some(raw) = RawMode::enter() else {
        return Ok(None);
    };
    let (key, interrupt, cause) = (session_key.to_owned(), interrupt.clone(), cause.clone());
    std::thread::Builder::new()
        .name("connop-keys".into())
        .spawn(move || {
            let mut filter = EscapeFilter::new();
            let mut stdin = std::io::stdin().lock();
            let mut byte = [0u8; 1];
            while stdin.read(&mut byte).is_ok_and(|n| n == 1) {
                let Some(byte) = filter.feed(byte[0]) else {
                    continue;
                };
                let (action, typing) = {
                    let model = screen.model();
                    let mut model = model.lock().unwrap_or_else(|p| p.into_inner());
                    let before = model.pending_row();
                    let action = model.press(byte);
                    (action, before != model.pending_row())
                };
                // A row number being typed shows on the keys line.
                if typing {
                    screen.draw();
                }
                match action {
                    Some(CardAction::Interrupt) => {
                        cause.keyboard();
                        interrupt.trigger();
                    }
                    Some(action) => {
                        if let (Some(op), Some(answer)) =
                            (registry.current(&key), action.to_answer())
                        {
                            let _ = op.respond(&answer);
                        }
                    }
                    None => {}
                }
            }
        })
        .map_err(EnvironmentError::Keys)?;
    Ok(Some(raw))
}
