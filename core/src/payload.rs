//! The payloads of docs/contract.md#payloads, with their exact key orders.
//!
//! Each payload owns cheap clones of the rows it shows and decides, by its type, which link
//! fields a target snapshot carries. A card-path model result cannot carry a link: its
//! serializer never writes one.

use crate::contract::SettleReason;
use crate::operation::{ChangeRecord, OpId, Operation, TargetRow, Text};
use crate::time::Timestamp;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// Which link fields a target snapshot carries (docs/contract.md#target-snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Neither `connect_url` nor `connection_id` (card-path model result).
    Hidden,
    /// `connect_url` only (links-path model result).
    Url,
    /// `connection_id` only (a card-path model result in the original's dialect).
    Id,
    /// Both (operation view, update frames, card request).
    UrlAndId,
}

/// Serializes rows as target snapshots: `name, kind, action, state, [detail],
/// [instructions], [connect_url], [connection_id], [required_env]`, then the fields a move
/// attached; optional keys only when non-empty.
pub struct Snapshots<'a> {
    rows: &'a [TargetRow],
    links: Links,
    instructions: bool,
}

impl<'a> Snapshots<'a> {
    /// Rows shown with the given links and their instructions.
    pub fn new(rows: &'a [TargetRow], links: Links) -> Self {
        Snapshots {
            rows,
            links,
            instructions: true,
        }
    }

    /// The same rows without the card's instructions (a settled result: the card is gone).
    pub fn without_instructions(mut self) -> Self {
        self.instructions = false;
        self
    }
}

/// One row as a target snapshot, with its links and instructions.
pub fn target_snapshot(row: &TargetRow) -> impl Serialize + '_ {
    Snapshot {
        row,
        links: Links::UrlAndId,
        instructions: true,
    }
}

impl Serialize for Snapshots<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.rows.len()))?;
        for row in self.rows {
            seq.serialize_element(&Snapshot {
                row,
                links: self.links,
                instructions: self.instructions,
            })?;
        }
        seq.end()
    }
}

struct Snapshot<'a> {
    row: &'a TargetRow,
    links: Links,
    instructions: bool,
}

impl Serialize for Snapshot<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let row = self.row;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("name", &*row.name)?;
        map.serialize_entry("kind", &row.kind)?;
        map.serialize_entry("action", &row.action)?;
        map.serialize_entry("state", &row.state)?;
        if let Some(detail) = non_empty(&row.detail) {
            map.serialize_entry("detail", detail)?;
        }
        let extras = row.extras.as_deref();
        if let Some(text) = extras.and_then(|e| e.instructions.as_deref()) {
            if self.instructions && !text.is_empty() {
                map.serialize_entry("instructions", text)?;
            }
        }
        if matches!(self.links, Links::Url | Links::UrlAndId) {
            if let Some(url) = non_empty(&row.connect_url) {
                map.serialize_entry("connect_url", url)?;
            }
        }
        if matches!(self.links, Links::Id | Links::UrlAndId) {
            if let Some(id) = non_empty(&row.connection_id) {
                map.serialize_entry("connection_id", id)?;
            }
        }
        if let Some(extras) = extras {
            if let Some(env) = &extras.required_env {
                map.serialize_entry("required_env", env)?;
            }
            for (key, value) in &extras.extra {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

fn non_empty(text: &Option<Text>) -> Option<&str> {
    text.as_deref().filter(|t| !t.is_empty())
}

fn secs(t: Timestamp) -> f64 {
    t.as_secs_f64()
}

/// The operation view (docs/contract.md#operation-view): the status RPC, update frames, the live
/// handle.
#[derive(Clone, Debug, PartialEq)]
pub struct OperationView {
    /// The id.
    pub op_id: OpId,
    /// The write counter.
    pub seq: u64,
    /// The deadline.
    pub deadline_at: Timestamp,
    /// When it settled.
    pub settled_at: Option<Timestamp>,
    /// Why it settled.
    pub settled_by: Option<SettleReason>,
    /// Live rows while open; the frozen rows once settled.
    pub targets: Vec<TargetRow>,
}

impl OperationView {
    /// The view of an operation: the live rows while open, the frozen snapshot once settled.
    pub fn of(op: &Operation) -> Self {
        match op.settlement() {
            Some(s) => OperationView {
                op_id: op.op_id(),
                seq: s.seq,
                deadline_at: op.deadline_at(),
                settled_at: Some(s.at),
                settled_by: Some(s.by),
                targets: s.targets.clone(),
            },
            None => OperationView {
                op_id: op.op_id(),
                seq: op.seq(),
                deadline_at: op.deadline_at(),
                settled_at: None,
                settled_by: None,
                targets: op.rows().to_vec(),
            },
        }
    }

    /// Whether the view is of a settled operation.
    pub fn settled(&self) -> bool {
        self.settled_by.is_some()
    }

    fn write_fields<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        map.serialize_entry("op_id", &self.op_id)?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("deadline_at", &secs(self.deadline_at))?;
        map.serialize_entry("settled_at", &self.settled_at.map(secs))?;
        map.serialize_entry("settled_by", &self.settled_by)?;
        map.serialize_entry("settled", &self.settled())?;
        map.serialize_entry("targets", &Snapshots::new(&self.targets, Links::UrlAndId))
    }
}

impl Serialize for OperationView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.write_fields(&mut map)?;
        map.end()
    }
}

/// The operation as its host reads it at any time (the original system's `result()`): the
/// operation view's fields, the live rows while open and the frozen snapshot once settled,
/// links and account ids included; once settled the card's instructions are gone.
#[derive(Clone, Debug, PartialEq)]
pub struct OperationResult(pub OperationView);

impl Serialize for OperationResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let view = &self.0;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("op_id", &view.op_id)?;
        map.serialize_entry("seq", &view.seq)?;
        map.serialize_entry("deadline_at", &secs(view.deadline_at))?;
        map.serialize_entry("settled_at", &view.settled_at.map(secs))?;
        map.serialize_entry("settled_by", &view.settled_by)?;
        let targets = Snapshots::new(&view.targets, Links::UrlAndId);
        if view.settled() {
            map.serialize_entry("targets", &targets.without_instructions())?;
        } else {
            map.serialize_entry("targets", &targets)?;
        }
        map.end()
    }
}

/// A `connection.update` payload (docs/contract.md#update-frame): the full view, plus the change
/// for a transition or refresh. The settle frame has no change and `settled: true`.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateFrame {
    /// The whole operation as of this frame.
    pub view: OperationView,
    /// The change that caused it; `None` for the settle frame.
    pub change: Option<ChangeRecord>,
}

impl Serialize for UpdateFrame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.view.write_fields(&mut map)?;
        if let Some(change) = &self.change {
            map.serialize_entry("target", &*change.target)?;
            map.serialize_entry("from", &change.from)?;
            map.serialize_entry("to", &change.to)?;
            map.serialize_entry("actor", &change.actor)?;
            map.serialize_entry("detail", change.detail.as_deref().unwrap_or(""))?;
        }
        map.end()
    }
}

/// A `connection.request` payload (docs/contract.md#card-request). Never carries a reason. Its
/// targets carry links and, where minted, connection ids (docs/contract.md#target-snapshot:
/// `connection_id` belongs to the operation view and the card request); only model results never
/// do.
#[derive(Clone, Debug, PartialEq)]
pub struct CardRequest {
    /// The id.
    pub op_id: OpId,
    /// The write counter when the card was emitted.
    pub seq: u64,
    /// The deadline.
    pub deadline_at: Timestamp,
    /// The deadline in seconds (300.0 by default).
    pub timeout_seconds: f64,
    /// Rows with their links.
    pub targets: Vec<TargetRow>,
    /// The agent's tool call, when the host gave one.
    pub tool_call_id: Option<Text>,
}

impl Serialize for CardRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("op_id", &self.op_id)?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("deadline_at", &secs(self.deadline_at))?;
        map.serialize_entry("timeout_seconds", &self.timeout_seconds)?;
        map.serialize_entry("targets", &Snapshots::new(&self.targets, Links::UrlAndId))?;
        if let Some(id) = &self.tool_call_id {
            map.serialize_entry("tool_call_id", &**id)?;
        }
        map.end()
    }
}

/// The note of a card-path model result.
pub const CARD_NOTE: &str = "Settled once. connected → use the app now; skipped → the user chose Not now, do not connect it or route around it; not_connected → ask the user what to do, never re-mint on your own.";

/// The note of a links-path model result.
pub const LINKS_NOTE: &str = "Show each connect_url to the user; they open it in a browser to authorize. Ask them to tell you when they are done, then check with action 'status'. Do not call connect again for the same app.";

/// Which surface a model result is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultPath {
    /// The frozen snapshot, no links, `status: settled`.
    Card,
    /// Links per target, `status: initiated` while any target is initiated.
    Links,
}

/// What the agent's tool call returns for connect and reconnect (docs/contract.md#model-result).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResult {
    /// The id.
    pub op_id: OpId,
    /// The write counter.
    pub seq: u64,
    /// The deadline.
    pub deadline_at: Timestamp,
    /// When it settled (links path: only if prepare settled it).
    pub settled_at: Option<Timestamp>,
    /// Why it settled.
    pub settled_by: Option<SettleReason>,
    /// The rows shown.
    pub targets: Vec<TargetRow>,
    /// Card or links.
    pub path: ResultPath,
    /// Whether each row shows its account id (the original system's results do; connop's
    /// keep it from the model).
    pub account_ids: bool,
}

impl ModelResult {
    /// The result of an operation on a path: the frozen snapshot when settled, else the live
    /// rows (links path only).
    pub fn of(op: &Operation, path: ResultPath) -> Self {
        let view = OperationView::of(op);
        ModelResult {
            op_id: view.op_id,
            seq: view.seq,
            deadline_at: view.deadline_at,
            settled_at: view.settled_at,
            settled_by: view.settled_by,
            targets: view.targets,
            path,
            account_ids: false,
        }
    }

    /// The same result, showing each row's account id or not.
    pub fn with_account_ids(mut self, shown: bool) -> Self {
        self.account_ids = shown;
        self
    }

    /// `settled` on the card path; on the links path `initiated` while any target is.
    pub fn status(&self) -> &'static str {
        match self.path {
            ResultPath::Card => "settled",
            ResultPath::Links => {
                let initiated = self
                    .targets
                    .iter()
                    .any(|t| t.state == crate::contract::TargetState::Initiated);
                if initiated { "initiated" } else { "settled" }
            }
        }
    }

    /// The note for the path.
    pub fn note(&self) -> &'static str {
        match self.path {
            ResultPath::Card => CARD_NOTE,
            ResultPath::Links => LINKS_NOTE,
        }
    }
}

impl Serialize for ModelResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let links = match (self.path, self.account_ids) {
            (ResultPath::Card, false) => Links::Hidden,
            (ResultPath::Card, true) => Links::Id,
            (ResultPath::Links, false) => Links::Url,
            (ResultPath::Links, true) => Links::UrlAndId,
        };
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("op_id", &self.op_id)?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("deadline_at", &secs(self.deadline_at))?;
        map.serialize_entry("settled_at", &self.settled_at.map(secs))?;
        map.serialize_entry("settled_by", &self.settled_by)?;
        let targets = Snapshots::new(&self.targets, links);
        if self.settled_by.is_some() {
            map.serialize_entry("targets", &targets.without_instructions())?;
        } else {
            map.serialize_entry("targets", &targets)?;
        }
        map.serialize_entry("status", self.status())?;
        map.serialize_entry("note", self.note())?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Actor, TargetAction, TargetState};
    use crate::operation::{Patch, Target};
    use std::time::Duration;

    fn op() -> Operation {
        let mut op = Operation::new(
            OpId::from_entropy([1, 2, 3, 4, 5, 6]),
            vec![
                Target::connector("gmail", TargetAction::Connect),
                Target::connector("notion", TargetAction::Connect),
            ],
            Timestamp::from_secs(1_800_000_000),
            Duration::from_secs(300),
        );
        let patch = Patch {
            connect_url: Some("https://connect.example/gmail/1".into()),
            connection_id: Some("ca_gmail_1".into()),
            detail: None,
            extra: None,
        };
        op.transition(
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            patch,
        )
        .unwrap();
        op
    }

    #[test]
    fn the_view_carries_links_and_ids_in_key_order() {
        let json = serde_json::to_string(&OperationView::of(&op())).unwrap();
        assert_eq!(
            json,
            r#"{"op_id":"010203040506","seq":1,"deadline_at":1800000300.0,"settled_at":null,"settled_by":null,"settled":false,"targets":[{"name":"gmail","kind":"connector","action":"connect","state":"initiated","connect_url":"https://connect.example/gmail/1","connection_id":"ca_gmail_1"},{"name":"notion","kind":"connector","action":"connect","state":"pending"}]}"#
        );
    }

    #[test]
    fn a_card_result_never_mentions_a_link() {
        let mut op = op();
        op.settle(SettleReason::Continue, Timestamp::from_secs(1_800_000_010));
        let json = serde_json::to_string(&ModelResult::of(&op, ResultPath::Card)).unwrap();
        assert!(!json.contains("connect_url"));
        assert!(!json.contains("connection_id"));
        assert!(!json.contains("ca_gmail_1"));
        assert!(json.contains(r#""status":"settled""#));
        assert!(!json.contains(r#""settled":"#));
        let links = serde_json::to_string(&ModelResult::of(&op, ResultPath::Links)).unwrap();
        assert!(links.contains("connect_url"));
        assert!(!links.contains("connection_id"));
    }

    #[test]
    fn the_card_request_has_a_timeout_and_no_reason() {
        let op = op();
        let card = CardRequest {
            op_id: op.op_id(),
            seq: op.seq(),
            deadline_at: op.deadline_at(),
            timeout_seconds: 300.0,
            targets: op.rows().to_vec(),
            tool_call_id: None,
        };
        let v = serde_json::to_value(&card).unwrap();
        assert_eq!(v["timeout_seconds"], 300.0);
        assert!(v.get("reason").is_none() && v.get("tool_call_id").is_none());
        assert_eq!(v["targets"][0]["connection_id"], "ca_gmail_1");
        assert_eq!(
            v["targets"][0]["connect_url"],
            "https://connect.example/gmail/1"
        );
        assert!(
            v["targets"][1].get("connect_url").is_none(),
            "optional keys only when non-empty"
        );
    }

    #[test]
    fn a_snapshot_shows_instructions_requirements_and_attached_fields_in_order() {
        let mut op = Operation::new(
            OpId::from_entropy([1, 2, 3, 4, 5, 6]),
            vec![Target {
                name: "linear".into(),
                kind: crate::contract::Kind::Mcp,
                action: TargetAction::Install,
                instructions: Some("Paste the key".into()),
            }],
            Timestamp::from_secs(1_800_000_000),
            Duration::from_secs(300),
        );
        op.set_required_env("linear", Some(serde_json::json!([{"name": "KEY"}])))
            .unwrap();
        op.transition(
            "linear",
            TargetState::Initiated,
            Actor::BackendWatcher,
            Patch::default(),
        )
        .unwrap();
        let mut tools = serde_json::Map::new();
        tools.insert("tools".into(), serde_json::json!(["search"]));
        let patch = Patch {
            detail: Some("ready".into()),
            extra: Some(Box::new(tools)),
            ..Patch::default()
        };
        op.transition(
            "linear",
            TargetState::Connected,
            Actor::BackendWatcher,
            patch,
        )
        .unwrap();
        let view = serde_json::to_string(&OperationView::of(&op)).unwrap();
        assert!(
            view.contains(r#"{"name":"linear","kind":"mcp","action":"install","state":"connected","detail":"ready","instructions":"Paste the key","required_env":[{"name":"KEY"}],"tools":["search"]}"#),
            "{view}"
        );
        op.settle(
            SettleReason::AllResolved,
            Timestamp::from_secs(1_800_000_001),
        );
        let result = serde_json::to_string(&OperationResult(OperationView::of(&op))).unwrap();
        assert!(!result.contains("instructions") && result.contains(r#""tools":["search"]"#));
    }
}
