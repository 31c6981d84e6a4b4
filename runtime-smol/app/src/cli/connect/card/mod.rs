//! The terminal card of `connop connect` (docs/operating.md#command-line and #connop-connect): one
//! connection operation shown live on a terminal, answered with single keys.
//!
//! Almost everything here is pure so it can be tested without a terminal; by trade:
//! - `model`: [`CardModel`] folds the operation's [`Event`](connop_core::flow::Event)s (the
//!   card request, then update frames) into what the card shows, dropping frames older than
//!   what it already has (docs/contract.md#update-frame).
//! - `render`: [`CardModel::render`] lays the card out for a width as [`Line`]s of toned
//!   [`Span`]s. Links are never cut: one too long for its row gets a line of its own, which
//!   the terminal wraps. The card goes to **stderr**: stdout is reserved for the summary or
//!   the model result. [`CardModel::plain_line`] is the plain one-line-per-change form for
//!   when stderr is not a terminal (or colour and cursor movement are off).
//! - `words`: the card's words for each state, outcome and settle reason, which the live
//!   card, its plain lines and the summary share.
//! - `line`: a [`Line`] of toned [`Span`]s; [`Line::paint`] gives the text with colours and
//!   OSC 8 hyperlinks, or plain.
//! - `keys`: [`Key`], [`CardModel::press`] and [`EscapeFilter`] turn key bytes into a
//!   [`CardAction`]; rows past 9 take two digits.
//! - `terminal`: the terminal itself, the small rest: [`RawMode`] (single keys, no echo,
//!   Ctrl-C as a byte), [`is_terminal`], [`terminal_size`] and [`style_from_env`].
//!
//! This module only presents them; none of them uses it.

mod keys;
mod line;
mod model;
mod render;
mod terminal;
mod words;

pub use keys::{CardAction, EscapeFilter, Key};
pub use line::{Line, Span, Style, Tone};
pub use model::CardModel;
pub use render::{LINK_HINT, Layout};
pub use terminal::{
    RawMode, is_terminal, stderr_is_terminal, stdin_is_terminal, style_from_env, terminal_size,
};
pub use words::{outcome_word, settled_words, state_named, state_word};

#[cfg(test)]
pub(crate) mod tests;
