//! The card's words: one for each state a row shows, each outcome a run ends with, and each
//! way an operation settles. The live card, its plain lines and the summary all say them so,
//! in a person's words rather than the wire's.

use connop_core::contract::{SettleReason, TargetState};

/// A row's state as the card says it while the operation is open.
pub fn state_word(state: TargetState) -> &'static str {
    match state {
        TargetState::NotConnected => "not connected",
        other => other.as_str(),
    }
}

/// What a target's run ended with, as the final card and the summary say it: `state` as
/// settled, and `last_live` the state it had before (settle writes `not_connected` over
/// `failed` and `expired`; the person is still told which it was).
pub fn outcome_word(state: TargetState, last_live: Option<TargetState>) -> &'static str {
    match (state, last_live) {
        (TargetState::Connected, _) => "connected",
        (TargetState::Skipped, _) => "skipped",
        (_, Some(TargetState::Failed)) => "failed",
        (_, Some(TargetState::Expired)) => "not connected (the link expired)",
        _ => "not connected",
    }
}

/// A state by its wire name (as a model result carries it).
pub fn state_named(name: &str) -> Option<TargetState> {
    TargetState::ALL.into_iter().find(|s| s.as_str() == name)
}

/// How the card says the operation settled.
pub fn settled_words(reason: SettleReason) -> &'static str {
    match reason {
        SettleReason::AllResolved => "settled: all resolved",
        SettleReason::Continue => "settled: you continued",
        SettleReason::Deadline => "settled: the time ran out",
        SettleReason::Interrupt => "settled: interrupted",
    }
}
