//! Key bytes into card actions: a row number skips that row (two digits past row 9), `c`
//! continues, `q` or Ctrl-C interrupts; escape sequences are no keys.

use super::model::CardModel;
use connop_core::card::CardAnswer;
use connop_core::operation::Text;

impl CardModel {
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
