//! Prepare (docs/contract.md#prepare): the repair read, the one mint, the misroute check, and the
//! end of prepare (settle, card, or links).

use super::{Effect, Event, Flow, Path, Purpose, Stage, Surface};
use crate::contract::{Actor, SettleReason, TargetAction, TargetState};
use crate::operation::{Patch, Text};
use crate::payload::{ModelResult, ResultPath};
use crate::time::Timestamp;
use crate::tool::{self, Dialect, ToolResult};
use crate::tool_gateway::{
    GatewayCall, GatewayError, GatewayReply, MintRequest, MintRow, MintStatus,
};

impl Flow {
    /// Starts prepare: connect mints all; reconnect with force mints all with `reinitiate`;
    /// reconnect without force reads the list first (repair).
    pub(super) fn begin_prepare(&mut self, now: Timestamp) {
        let reconnect = self.op().rows().first().map(|r| r.action) == Some(TargetAction::Reconnect);
        let force = self.args.as_ref().is_some_and(|a| a.force);
        if reconnect && !force {
            self.stage = Stage::Repairing;
            self.call(Purpose::RepairList, GatewayCall::List { timeout: None });
        } else {
            let names: Vec<Text> = self.op().rows().iter().map(|r| r.name.clone()).collect();
            self.mint(names, reconnect, now);
        }
    }

    /// One mint for every name given; a mint with no names makes no call.
    fn mint(&mut self, connectors: Vec<Text>, reinitiate: bool, now: Timestamp) {
        if connectors.is_empty() {
            self.misroute_check(now);
            return;
        }
        let return_to = self
            .return_to
            .clone()
            .or_else(|| (self.surface == Surface::Desktop).then(|| self.desktop_return_to.clone()));
        let request = MintRequest {
            connectors,
            reinitiate,
            op: return_to.is_some().then(|| self.op().op_id()),
            return_to,
        };
        self.stage = Stage::Minting;
        self.call(Purpose::Mint, GatewayCall::Mint(Box::new(request)));
    }

    /// Repair: rows the list says are connected move to `connected` as witnessed (through
    /// `initiated`) with no mint; the rest are minted with `reinitiate: true`.
    pub(super) fn on_repair_list(
        &mut self,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        let rows = match result {
            Ok(GatewayReply::Connectors(rows)) => rows,
            Ok(_) => Vec::new(),
            Err(err) => return self.fail_prepare(&err),
        };
        let mut to_mint = Vec::new();
        for index in 0..self.op().rows().len() {
            let name = self.op().rows()[index].name.clone();
            let connected = rows.iter().any(|r| r.connector == name && r.connected);
            if connected {
                self.witnessed_move(
                    index,
                    Patch::default(),
                    TargetState::Connected,
                    Actor::BackendWatcher,
                    Patch::default(),
                    now,
                );
            } else if self.op().rows()[index].state == TargetState::Pending {
                to_mint.push(name);
            }
        }
        self.mint(to_mint, true, now);
    }

    /// Applies the mint answer row by row; rows naming no target are ignored.
    pub(super) fn on_mint(&mut self, result: Result<GatewayReply, GatewayError>, now: Timestamp) {
        let rows = match result {
            Ok(GatewayReply::Minted(rows)) => rows,
            Ok(_) => Vec::new(),
            Err(err) => return self.fail_prepare(&err),
        };
        for row in rows {
            if let Some(index) = self.op().index_of(&row.connector) {
                self.apply_mint_row(index, row, now);
            }
        }
        self.misroute_check(now);
    }

    /// `active` → connected as witnessed (through `initiated`, with the row's account id);
    /// `initiated` → initiated with its link; anything else → failed. The detail is the row's
    /// `statusReason` (absent: empty), never the state.
    fn apply_mint_row(&mut self, index: usize, row: MintRow, now: Timestamp) {
        let detail: Text = row.status_reason.unwrap_or_else(|| Text::from(""));
        let w = Actor::BackendWatcher;
        match row.status {
            MintStatus::Active => {
                let patch = Patch {
                    detail: Some(detail),
                    connection_id: row.connection_id,
                    connect_url: None,
                    extra: None,
                };
                self.witnessed_move(
                    index,
                    patch,
                    TargetState::Connected,
                    w,
                    Patch::default(),
                    now,
                );
            }
            MintStatus::Initiated => {
                let patch = Patch {
                    detail: Some(detail),
                    connect_url: row.connect_url,
                    connection_id: row.connection_id,
                    extra: None,
                };
                self.move_row(index, TargetState::Initiated, w, patch, now);
            }
            MintStatus::Failed => {
                self.move_row(index, TargetState::Failed, w, Patch::detail(detail), now);
            }
        }
    }

    /// Candidates: failed, no connection id, named by the local MCP catalog. With none,
    /// nothing is read.
    fn misroute_check(&mut self, now: Timestamp) {
        let candidates: Vec<usize> = self
            .op()
            .rows()
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.state == TargetState::Failed
                    && r.connection_id.is_none()
                    && self.local_catalog.contains(&r.name)
            })
            .map(|(i, _)| i)
            .collect();
        if candidates.is_empty() {
            return self.finish_prepare(now);
        }
        self.stage = Stage::Misrouting(candidates);
        self.call(Purpose::MisrouteList, GatewayCall::List { timeout: None });
    }

    /// Each candidate the list does not name gets the misroute detail and loses its link. If
    /// that is every target, the operation settles `all_resolved` before any card. A failed
    /// read misroutes nothing.
    pub(super) fn on_misroute_list(
        &mut self,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        let Stage::Misrouting(candidates) = std::mem::replace(&mut self.stage, Stage::Minting)
        else {
            return;
        };
        let Ok(GatewayReply::Connectors(rows)) = result else {
            return self.finish_prepare(now);
        };
        let mut misrouted = 0;
        for index in candidates {
            let row = &self.op().rows()[index];
            if row.state != TargetState::Failed || rows.iter().any(|r| r.connector == row.name) {
                continue;
            }
            let name = row.name.clone();
            let detail: Text = tool::misroute_detail(&name, self.dialect).into();
            let op = self.op.as_mut().expect(
                "invariant: only connect/reconnect flows prepare, and they have an operation",
            );
            if let Ok(change) = op.refresh(&name, None, Some(detail), Actor::BackendWatcher) {
                self.on_change(change, now);
                misrouted += 1;
            }
        }
        if misrouted == self.op().rows().len() {
            self.settle(SettleReason::AllResolved, now);
            return;
        }
        self.finish_prepare(now);
    }

    /// All resolved → settle; card path → emit the card once and watch (first read at once);
    /// links path → return the links.
    fn finish_prepare(&mut self, now: Timestamp) {
        if self.op().all_resolved() {
            self.settle(SettleReason::AllResolved, now);
            return;
        }
        match self.path {
            Path::Card => {
                let card = self.card_request_of(self.op());
                self.push(Effect::Emit(Event::Request(Box::new(card))));
                self.stage = Stage::Watching;
                self.watch.start(now);
                self.maybe_tick(now);
            }
            Path::Links => {
                let result = ModelResult::of(self.op(), ResultPath::Links)
                    .with_account_ids(self.dialect == Dialect::Original);
                self.finish(ToolResult::Model(result));
            }
        }
    }

    /// A failed mint or repair read: the tool returns the error and the operation closes
    /// without settling (no frame).
    fn fail_prepare(&mut self, err: &GatewayError) {
        if self.registered {
            self.push(Effect::Close {
                key: self.registry_key.clone(),
                op_id: self.op().op_id(),
            });
        }
        self.finish(ToolResult::Error(tool::gateway_failed_text(
            err,
            self.dialect,
        )));
    }
}
