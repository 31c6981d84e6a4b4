//! The vocabulary of the contract: target states, actors, kinds, settle reasons, and the
//! transition table as data.
//!
//! Every question "may this actor move this target from here to there?" is answered by
//! [`allowed_actor`], which reads the two tables below and nothing else. Nothing else in the
//! crate encodes an edge.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a target stands. The wire value is the snake-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetState {
    /// Nothing minted yet.
    Pending,
    /// A link exists; the user is at the vendor.
    Initiated,
    /// The backend saw a working account.
    Connected,
    /// The user chose "Not now".
    Skipped,
    /// The attempt failed (mint refused; vendor failed, revoked or inactive).
    Failed,
    /// The link ran out.
    Expired,
    /// Written by settle on every unresolved target; never a transition target.
    NotConnected,
}

impl TargetState {
    /// Every state, in the order of the contract's table.
    pub const ALL: [TargetState; 7] = [
        TargetState::Pending,
        TargetState::Initiated,
        TargetState::Connected,
        TargetState::Skipped,
        TargetState::Failed,
        TargetState::Expired,
        TargetState::NotConnected,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TargetState::Pending => "pending",
            TargetState::Initiated => "initiated",
            TargetState::Connected => "connected",
            TargetState::Skipped => "skipped",
            TargetState::Failed => "failed",
            TargetState::Expired => "expired",
            TargetState::NotConnected => "not_connected",
        }
    }

    /// `connected` and `skipped` resolve a target; `failed` and `expired` keep it open.
    pub const fn is_resolved(self) -> bool {
        matches!(self, TargetState::Connected | TargetState::Skipped)
    }

    /// A live target is one the watcher still reads.
    pub const fn is_live(self) -> bool {
        matches!(self, TargetState::Pending | TargetState::Initiated)
    }

    /// States nothing ever leaves.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            TargetState::Connected | TargetState::Skipped | TargetState::NotConnected
        )
    }
}

impl fmt::Display for TargetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who asks for a move. Each edge of the table has exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// The person at the card.
    User,
    /// Mints and account reads.
    BackendWatcher,
    /// Link expiry.
    Clock,
}

impl Actor {
    /// Every actor.
    pub const ALL: [Actor; 3] = [Actor::User, Actor::BackendWatcher, Actor::Clock];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Actor::User => "user",
            Actor::BackendWatcher => "backend_watcher",
            Actor::Clock => "clock",
        }
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a target is: a hosted account, or (later) a local MCP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A hosted account behind the tool gateway.
    Connector,
    /// A local MCP server; the table carries it for later.
    Mcp,
}

impl Kind {
    /// Every kind the transition table has edges for.
    pub const ALL: [Kind; 2] = [Kind::Connector, Kind::Mcp];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Connector => "connector",
            Kind::Mcp => "mcp",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the agent asked for a target. connop's tool asks `connect` and `reconnect` of hosted
/// connectors; a host's own operations may carry the local MCP server actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetAction {
    /// A first connection.
    Connect,
    /// Repair (or, with force, redo) an existing connection.
    Reconnect,
    /// Install a local MCP server from the catalog.
    Install,
    /// Turn on a configured local MCP server.
    Enable,
    /// Authorize a configured local MCP server.
    Authorize,
}

impl TargetAction {
    /// Every action.
    pub const ALL: [TargetAction; 5] = [
        TargetAction::Connect,
        TargetAction::Reconnect,
        TargetAction::Install,
        TargetAction::Enable,
        TargetAction::Authorize,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TargetAction::Connect => "connect",
            TargetAction::Reconnect => "reconnect",
            TargetAction::Install => "install",
            TargetAction::Enable => "enable",
            TargetAction::Authorize => "authorize",
        }
    }
}

/// Why an operation settled. The wire value is the snake-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleReason {
    /// Every target resolved (or every target was misrouted in prepare).
    AllResolved,
    /// The user pressed Continue.
    Continue,
    /// The deadline passed.
    Deadline,
    /// The turn was interrupted or the host shut down.
    Interrupt,
}

impl SettleReason {
    /// Every reason.
    pub const ALL: [SettleReason; 4] = [
        SettleReason::AllResolved,
        SettleReason::Continue,
        SettleReason::Deadline,
        SettleReason::Interrupt,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            SettleReason::AllResolved => "all_resolved",
            SettleReason::Continue => "continue",
            SettleReason::Deadline => "deadline",
            SettleReason::Interrupt => "interrupt",
        }
    }
}

impl fmt::Display for SettleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

use Actor::{BackendWatcher as W, Clock as C, User as U};
use TargetState::{
    Connected as Con, Expired as Exp, Failed as Fail, Initiated as Init, Pending as Pend,
    Skipped as Skip,
};

/// One row of a transition table: `(from, to, the one actor allowed)`.
pub type Edge = (TargetState, TargetState, Actor);

/// The edges for kind `connector`. `failed → initiated` and `expired → initiated` are the
/// user's retry edges, kept for later: connop has no "try again" yet.
pub const CONNECTOR_EDGES: &[Edge] = &[
    (Pend, Init, W),
    (Pend, Fail, W),
    (Pend, Skip, U),
    (Init, Con, W),
    (Init, Fail, W),
    (Init, Exp, C),
    (Init, Skip, U),
    (Fail, Init, U),
    (Fail, Skip, U),
    (Exp, Init, U),
    (Exp, Skip, U),
];

/// The edges for kind `mcp`.
pub const MCP_EDGES: &[Edge] = &[
    (Pend, Init, W),
    (Pend, Fail, W),
    (Init, Con, W),
    (Init, Fail, W),
    (Fail, Init, U),
    (Pend, Skip, U),
    (Init, Skip, U),
    (Fail, Skip, U),
];

/// The table of a kind.
pub const fn edges(kind: Kind) -> &'static [Edge] {
    match kind {
        Kind::Connector => CONNECTOR_EDGES,
        Kind::Mcp => MCP_EDGES,
    }
}

/// The one actor allowed to move a target of `kind` from `from` to `to`, if the edge exists.
pub fn allowed_actor(kind: Kind, from: TargetState, to: TargetState) -> Option<Actor> {
    edges(kind)
        .iter()
        .find(|(f, t, _)| *f == from && *t == to)
        .map(|(_, _, actor)| *actor)
}

/// Whether `actor` may move a target of `kind` from `from` to `to`.
pub fn is_legal(kind: Kind, from: TargetState, to: TargetState, actor: Actor) -> bool {
    allowed_actor(kind, from, to) == Some(actor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [TargetState; 7] = TargetState::ALL;

    #[test]
    fn nothing_leaves_a_final_state_and_nothing_returns_to_pending() {
        for kind in [Kind::Connector, Kind::Mcp] {
            for (from, to, _) in edges(kind) {
                assert!(!from.is_final(), "{kind} edge leaves final {from}");
                assert_ne!(*to, TargetState::Pending);
                assert_ne!(*to, TargetState::NotConnected);
                assert_ne!(from, to);
            }
        }
    }

    #[test]
    fn every_pair_has_at_most_one_actor() {
        for kind in [Kind::Connector, Kind::Mcp] {
            for from in ALL {
                for to in ALL {
                    let n = edges(kind)
                        .iter()
                        .filter(|(f, t, _)| *f == from && *t == to)
                        .count();
                    assert!(n <= 1, "{kind} {from}->{to} listed {n} times");
                }
            }
        }
    }

    #[test]
    fn there_is_no_pending_to_connected_edge() {
        assert_eq!(
            allowed_actor(
                Kind::Connector,
                TargetState::Pending,
                TargetState::Connected
            ),
            None
        );
        assert_eq!(
            allowed_actor(
                Kind::Connector,
                TargetState::Initiated,
                TargetState::Expired
            ),
            Some(Actor::Clock)
        );
        assert!(!is_legal(
            Kind::Mcp,
            TargetState::Initiated,
            TargetState::Expired,
            Actor::Clock
        ));
    }
}
