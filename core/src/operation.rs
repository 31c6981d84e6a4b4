//! One connection operation: its targets, the moves on them, and the settle that freezes it.
//!
//! [`Operation`] is plain data with the rules of docs/contract.md#targets and #operation on it:
//! every move is checked against the transition table, a move to the current state is a no-op,
//! settle is a compare-and-set that freezes a snapshot. It knows nothing of gateways, cards or time
//! passing; the [`Flow`](crate::flow::Flow) drives it.

use crate::contract::{Actor, Kind, SettleReason, TargetAction, TargetState, allowed_actor};
use crate::time::Timestamp;
use serde_json::{Map, Value};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Shared immutable text: names, links, details and ids are cloned into every view and
/// frame, so they are reference-counted rather than copied.
pub type Text = Arc<str>;

/// The default operation deadline (docs/contract.md#operation).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);

/// An operation id: 12 lower-case hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId([u8; 12]);

impl OpId {
    /// Builds the id from 6 random bytes. The runtime draws them from a cryptographic source;
    /// the core never draws randomness itself.
    pub fn from_entropy(bytes: [u8; 6]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 12];
        for (i, b) in bytes.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0x0f)];
        }
        OpId(out)
    }

    /// Parses an id as it appears on the wire.
    pub fn parse(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() != 12 || !bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut out = [0u8; 12];
        out.copy_from_slice(bytes);
        Some(OpId(out))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpId({})", self.as_str())
    }
}

impl serde::Serialize for OpId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the agent asked for: `(name, kind, action)`, and the card's text for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Lower-case slug, e.g. `gmail`.
    pub name: Text,
    /// Hosted connector or local MCP server.
    pub kind: Kind,
    /// Connect or reconnect (or a local MCP server's action).
    pub action: TargetAction,
    /// What the card tells the user to do for this target; a settled model result drops it.
    pub instructions: Option<Text>,
}

impl Target {
    /// A connector target.
    pub fn connector(name: &str, action: TargetAction) -> Self {
        Target {
            name: name.into(),
            kind: Kind::Connector,
            action,
            instructions: None,
        }
    }
}

/// What few rows carry: the card's instructions, a local MCP server's environment
/// requirements, and fields a host's move attached. Kept behind one pointer, so a connector
/// row (which has none) stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowExtras {
    /// The card's text for the user.
    pub instructions: Option<Text>,
    /// The environment a local MCP server needs (`[{"name", "prompt"?, "required"?, …}]`).
    pub required_env: Option<Value>,
    /// Fields a move attached (e.g. the `tools` of a connected MCP server), shown after the
    /// row's own in its snapshot. The last move that carried any replaced them all.
    pub extra: Map<String, Value>,
}

/// A target and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetRow {
    /// Lower-case slug.
    pub name: Text,
    /// Hosted connector or local MCP server.
    pub kind: Kind,
    /// Connect or reconnect.
    pub action: TargetAction,
    /// The current state.
    pub state: TargetState,
    /// Human-readable detail; `None` is the empty detail.
    pub detail: Option<Text>,
    /// The vendor link, once minted.
    pub connect_url: Option<Text>,
    /// The hosted account the watcher reads, once minted.
    pub connection_id: Option<Text>,
    /// Instructions, MCP requirements and attached fields; `None` when the row has none.
    pub extras: Option<Box<RowExtras>>,
}

impl TargetRow {
    fn new(target: Target) -> Self {
        let extras = target.instructions.map(|instructions| {
            Box::new(RowExtras {
                instructions: Some(instructions),
                ..RowExtras::default()
            })
        });
        TargetRow {
            name: target.name,
            kind: target.kind,
            action: target.action,
            state: TargetState::Pending,
            detail: None,
            connect_url: None,
            connection_id: None,
            extras,
        }
    }

    /// The detail as text (`""` when there is none).
    pub fn detail_str(&self) -> &str {
        self.detail.as_deref().unwrap_or("")
    }

    /// The card's instructions, if any.
    pub fn instructions(&self) -> Option<&str> {
        self.extras.as_ref()?.instructions.as_deref()
    }

    /// The environment a local MCP server needs, if given.
    pub fn required_env(&self) -> Option<&Value> {
        self.extras.as_ref()?.required_env.as_ref()
    }

    /// The fields moves attached (empty when none).
    pub fn extra(&self) -> Option<&Map<String, Value>> {
        self.extras.as_ref().map(|e| &e.extra)
    }

    fn extras_mut(&mut self) -> &mut RowExtras {
        self.extras.get_or_insert_with(Box::default)
    }
}

/// What a move may carry besides the new state. Each given field replaces the stored one;
/// a field left `None` keeps what is stored (a later move without a link keeps the link).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patch {
    /// A new detail (an empty text clears it).
    pub detail: Option<Text>,
    /// A new link.
    pub connect_url: Option<Text>,
    /// A new account id.
    pub connection_id: Option<Text>,
    /// Fields to attach to the row, replacing those a move attached before (a host's move of
    /// a local MCP server carries its `tools`, say).
    pub extra: Option<Box<Map<String, Value>>>,
}

impl Patch {
    /// A patch that only replaces the detail.
    pub fn detail(detail: impl Into<Text>) -> Self {
        Patch {
            detail: Some(detail.into()),
            ..Patch::default()
        }
    }
}

/// One effective change: `{"target", "from", "to", "actor", "detail"}`.
///
/// A refresh produces a record with `from == to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRecord {
    /// The target's name.
    pub target: Text,
    /// The state before.
    pub from: TargetState,
    /// The state after.
    pub to: TargetState,
    /// Who moved it.
    pub actor: Actor,
    /// The row's detail after the move.
    pub detail: Option<Text>,
}

impl ChangeRecord {
    /// Whether this record is a refresh (no state change).
    pub fn is_refresh(&self) -> bool {
        self.from == self.to
    }
}

/// A move the contract does not allow. Caller misuse: nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// No target of that name in this operation.
    #[error("unknown target '{name}'")]
    UnknownTarget {
        /// The name asked for.
        name: String,
    },
    /// The table has no such edge, or another actor owns it.
    #[error("{kind} {name}: {from} -> {to} by {actor}")]
    Illegal {
        /// The target's kind.
        kind: Kind,
        /// The target's name.
        name: String,
        /// Its current state.
        from: TargetState,
        /// The state asked for.
        to: TargetState,
        /// Who asked.
        actor: Actor,
    },
}

/// The frozen outcome of a settled operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// When it settled.
    pub at: Timestamp,
    /// Why it settled.
    pub by: SettleReason,
    /// `seq` after the settle bump.
    pub seq: u64,
    /// The rows as they stood at settle, links included. Never changes again.
    pub targets: Vec<TargetRow>,
}

/// One connection operation (docs/contract.md#operation).
#[derive(Clone, Debug)]
pub struct Operation {
    op_id: OpId,
    created_at: Timestamp,
    deadline_at: Timestamp,
    seq: u64,
    rows: Vec<TargetRow>,
    settlement: Option<Settlement>,
}

impl Operation {
    /// A new operation: every target `pending`, in the order given, `seq` 0.
    pub fn new(
        op_id: OpId,
        targets: Vec<Target>,
        created_at: Timestamp,
        deadline: Duration,
    ) -> Self {
        Operation {
            op_id,
            created_at,
            deadline_at: created_at + deadline,
            seq: 0,
            rows: targets.into_iter().map(TargetRow::new).collect(),
            settlement: None,
        }
    }

    /// The id.
    pub fn op_id(&self) -> OpId {
        self.op_id
    }

    /// When it was created.
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// `created_at + deadline`, fixed at creation.
    pub fn deadline_at(&self) -> Timestamp {
        self.deadline_at
    }

    /// The deadline as a duration.
    pub fn deadline(&self) -> Duration {
        self.deadline_at - self.created_at
    }

    /// The write counter: bumped on every effective change and once at settle.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The live rows, in the order asked for.
    pub fn rows(&self) -> &[TargetRow] {
        &self.rows
    }

    /// One live row by name.
    pub fn row(&self, name: &str) -> Option<&TargetRow> {
        self.rows.iter().find(|r| &*r.name == name)
    }

    /// The position of a row by name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.rows.iter().position(|r| &*r.name == name)
    }

    /// The name of the row holding `connection_id` (a return URL names the account, not the
    /// target).
    pub fn target_with_connection(&self, connection_id: &str) -> Option<&Text> {
        self.rows
            .iter()
            .find(|r| r.connection_id.as_deref() == Some(connection_id))
            .map(|r| &r.name)
    }

    /// At least one target, and every target resolved.
    #[must_use]
    pub fn all_resolved(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(|r| r.state.is_resolved())
    }

    /// The frozen outcome, once settled.
    #[must_use]
    pub fn settlement(&self) -> Option<&Settlement> {
        self.settlement.as_ref()
    }

    /// Whether settle has happened.
    #[must_use]
    pub fn is_settled(&self) -> bool {
        self.settlement.is_some()
    }

    /// Moves target `name` to `to` on behalf of `actor`.
    ///
    /// `Ok(None)` is a no-op (already in `to`): no record, no bump. `Ok(Some(record))` is an
    /// effective change. An unknown name or a move the table does not give `actor` is an
    /// error and changes nothing.
    pub fn transition(
        &mut self,
        name: &str,
        to: TargetState,
        actor: Actor,
        patch: Patch,
    ) -> Result<Option<ChangeRecord>, TransitionError> {
        let index = self
            .index_of(name)
            .ok_or_else(|| TransitionError::UnknownTarget {
                name: name.to_owned(),
            })?;
        self.transition_at(index, to, actor, patch)
    }

    /// [`transition`](Self::transition) by row position.
    ///
    /// # Panics
    /// If `index` is out of range (a caller bug, never input-derived).
    pub fn transition_at(
        &mut self,
        index: usize,
        to: TargetState,
        actor: Actor,
        patch: Patch,
    ) -> Result<Option<ChangeRecord>, TransitionError> {
        let row = &mut self.rows[index];
        let from = row.state;
        if from == to {
            return Ok(None);
        }
        if allowed_actor(row.kind, from, to) != Some(actor) {
            return Err(TransitionError::Illegal {
                kind: row.kind,
                name: row.name.to_string(),
                from,
                to,
                actor,
            });
        }
        row.state = to;
        apply_patch(row, patch);
        self.seq += 1;
        Ok(Some(ChangeRecord {
            target: row.name.clone(),
            from,
            to,
            actor,
            detail: row.detail.clone(),
        }))
    }

    /// Replaces a row's link and detail with no state change; the record has `from == to`.
    /// `connect_url: None` removes the link.
    pub fn refresh(
        &mut self,
        name: &str,
        connect_url: Option<Text>,
        detail: Option<Text>,
        actor: Actor,
    ) -> Result<ChangeRecord, TransitionError> {
        let index = self
            .index_of(name)
            .ok_or_else(|| TransitionError::UnknownTarget {
                name: name.to_owned(),
            })?;
        let row = &mut self.rows[index];
        row.connect_url = connect_url;
        row.detail = detail.filter(|d| !d.is_empty());
        self.seq += 1;
        Ok(ChangeRecord {
            target: row.name.clone(),
            from: row.state,
            to: row.state,
            actor,
            detail: row.detail.clone(),
        })
    }

    /// Replaces what a local MCP server row says it needs from the environment. A host
    /// writes it before the card shows; it is no move (no record, no `seq` bump), and a
    /// settled operation's frozen snapshot keeps what it had.
    pub fn set_required_env(
        &mut self,
        name: &str,
        env: Option<Value>,
    ) -> Result<(), TransitionError> {
        let index = self
            .index_of(name)
            .ok_or_else(|| TransitionError::UnknownTarget {
                name: name.to_owned(),
            })?;
        self.rows[index].extras_mut().required_env = env;
        Ok(())
    }

    /// Settles: the first call wins and returns true; every later call returns false and
    /// changes nothing.
    ///
    /// The winner stamps every unresolved row `not_connected` (no change record, detail
    /// untouched), bumps `seq` once and freezes a snapshot with links.
    pub fn settle(&mut self, reason: SettleReason, now: Timestamp) -> bool {
        if self.settlement.is_some() {
            return false;
        }
        for row in &mut self.rows {
            if !row.state.is_resolved() {
                row.state = TargetState::NotConnected;
            }
        }
        self.seq += 1;
        self.settlement = Some(Settlement {
            at: now,
            by: reason,
            seq: self.seq,
            targets: self.rows.clone(),
        });
        true
    }
}

fn apply_patch(row: &mut TargetRow, patch: Patch) {
    if let Some(detail) = patch.detail {
        row.detail = (!detail.is_empty()).then_some(detail);
    }
    if let Some(url) = patch.connect_url {
        row.connect_url = Some(url);
    }
    if let Some(id) = patch.connection_id {
        row.connection_id = Some(id);
    }
    if let Some(extra) = patch.extra {
        row.extras_mut().extra = *extra;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TargetState::*;

    fn op(names: &[&str]) -> Operation {
        Operation::new(
            OpId::from_entropy([0xab, 0xcd, 0xef, 0x01, 0x23, 0x45]),
            names
                .iter()
                .map(|n| Target::connector(n, TargetAction::Connect))
                .collect(),
            Timestamp::from_secs(1_000),
            DEFAULT_DEADLINE,
        )
    }

    #[test]
    fn op_id_is_twelve_lower_hex() {
        let id = OpId::from_entropy([0xab, 0xcd, 0xef, 0x01, 0x23, 0x45]);
        assert_eq!(id.as_str(), "abcdef012345");
        assert_eq!(OpId::parse("abcdef012345"), Some(id));
        assert_eq!(OpId::parse("ABCDEF012345"), None);
        assert_eq!(OpId::parse("abc"), None);
    }

    #[test]
    fn a_move_to_the_same_state_is_a_no_op() {
        let mut op = op(&["gmail"]);
        let rec = op.transition(
            "gmail",
            Initiated,
            Actor::BackendWatcher,
            Patch::detail("x"),
        );
        assert!(rec.unwrap().is_some());
        assert_eq!(op.seq(), 1);
        let again = op.transition(
            "gmail",
            Initiated,
            Actor::BackendWatcher,
            Patch::detail("y"),
        );
        assert_eq!(again, Ok(None));
        assert_eq!(op.seq(), 1);
        assert_eq!(op.row("gmail").unwrap().detail_str(), "x");
    }

    #[test]
    fn illegal_moves_carry_the_exact_text_and_change_nothing() {
        let mut op = op(&["gmail"]);
        let err = op
            .transition("gmail", Connected, Actor::BackendWatcher, Patch::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "connector gmail: pending -> connected by backend_watcher"
        );
        let err = op
            .transition("slack", Skipped, Actor::User, Patch::default())
            .unwrap_err();
        assert_eq!(err.to_string(), "unknown target 'slack'");
        let err = op
            .transition("gmail", Skipped, Actor::BackendWatcher, Patch::default())
            .unwrap_err();
        assert!(matches!(err, TransitionError::Illegal { .. }));
        assert_eq!(op.seq(), 0);
        assert_eq!(op.row("gmail").unwrap().state, Pending);
    }

    #[test]
    fn a_later_move_without_a_link_keeps_the_link() {
        let mut op = op(&["gmail"]);
        let patch = Patch {
            connect_url: Some("https://x/1".into()),
            connection_id: Some("ca_1".into()),
            detail: None,
            extra: None,
        };
        op.transition("gmail", Initiated, Actor::BackendWatcher, patch)
            .unwrap();
        op.transition(
            "gmail",
            Failed,
            Actor::BackendWatcher,
            Patch::detail("denied"),
        )
        .unwrap();
        let row = op.row("gmail").unwrap();
        assert_eq!(row.connect_url.as_deref(), Some("https://x/1"));
        assert_eq!(row.connection_id.as_deref(), Some("ca_1"));
        assert_eq!(row.detail_str(), "denied");
    }

    #[test]
    fn refresh_records_from_equal_to() {
        let mut op = op(&["gmail"]);
        let rec = op
            .refresh("gmail", None, Some("moved".into()), Actor::BackendWatcher)
            .unwrap();
        assert!(rec.is_refresh());
        assert_eq!(op.seq(), 1);
        assert_eq!(op.row("gmail").unwrap().detail_str(), "moved");
    }

    #[test]
    fn settle_is_a_compare_and_set_and_freezes() {
        let mut op = op(&["gmail", "notion"]);
        op.transition(
            "gmail",
            Initiated,
            Actor::BackendWatcher,
            Patch::detail("waiting"),
        )
        .unwrap();
        op.transition("notion", Skipped, Actor::User, Patch::default())
            .unwrap();
        assert!(op.settle(SettleReason::Continue, Timestamp::from_secs(1_005)));
        assert!(!op.settle(SettleReason::Deadline, Timestamp::from_secs(1_300)));
        let s = op.settlement().unwrap();
        assert_eq!(s.by, SettleReason::Continue);
        assert_eq!(s.seq, 3);
        assert_eq!(s.targets[0].state, NotConnected);
        assert_eq!(
            s.targets[0].detail_str(),
            "waiting",
            "the settle reason is never written into a row"
        );
        assert_eq!(s.targets[1].state, Skipped);
        // Nothing leaves not_connected; a refresh of the live row leaves the frozen one alone.
        assert!(
            op.transition("gmail", Connected, Actor::BackendWatcher, Patch::default())
                .is_err()
        );
        op.refresh("gmail", Some("u".into()), Some("later".into()), Actor::User)
            .unwrap();
        assert_eq!(op.settlement().unwrap().targets[0].detail_str(), "waiting");
    }

    #[test]
    fn all_resolved_needs_at_least_one_target() {
        assert!(!op(&[]).all_resolved());
        let mut op = op(&["gmail"]);
        op.transition("gmail", Skipped, Actor::User, Patch::default())
            .unwrap();
        assert!(op.all_resolved());
    }
}
