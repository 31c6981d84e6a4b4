//! The flow's side of the watcher (docs/contract.md#watcher and #return-hints): which reads start
//! and when, what an account read or a list read moves, the 429 back-off, and return hints. The
//! [`Watcher`] keeps each row's tick; this is what the flow does with it.

use super::watch::{Slot, read_timeout};
use super::{Flow, Purpose, Stage};
use crate::contract::{Actor, TargetState};
use crate::error::CallerError;
use crate::operation::{Patch, TransitionError};
use crate::time::Timestamp;
use crate::tool_gateway::{AccountStatus, GatewayCall, GatewayError, GatewayReply};
use std::time::Duration;

impl Flow {
    /// Starts every read that is due: each live row with a connection id and no read out
    /// whose own tick has come, in row order, then one list read for the live rows without
    /// one. Nothing is read during a back-off.
    pub(super) fn maybe_tick(&mut self, now: Timestamp) {
        // No read starts once the deadline has come: the deadline settles first.
        if self.stage != Stage::Watching || now >= self.op().deadline_at() {
            return;
        }
        if self.serial_calls {
            return self.maybe_read_one(now);
        }
        let backoff = self.watch.backoff_until;
        let is_due = |slot: &Slot| slot.due(backoff).is_some_and(|w| w.at <= now);
        let timeout = read_timeout(self.op().deadline_at(), now);
        let mut need_list = false;
        for index in 0..self.op().rows().len() {
            let row = &self.op().rows()[index];
            if !row.state.is_live() {
                continue;
            }
            let Some(id) = &row.connection_id else {
                need_list = true;
                continue;
            };
            if !is_due(&self.watch.rows[index]) {
                continue;
            }
            // Cloned only for a read that goes out: a reference count is an atomic write
            // on a line a parked operation left cold.
            let call = GatewayCall::Account {
                connection_id: id.clone(),
                timeout,
            };
            let call = self.call(Purpose::Read(index), call);
            let slot = &mut self.watch.rows[index];
            slot.in_flight = Some(call);
            slot.next_at = None;
        }
        if need_list && is_due(&self.watch.list) {
            let call = self.call(
                Purpose::WatchList,
                GatewayCall::List {
                    timeout: Some(timeout),
                },
            );
            self.watch.list.in_flight = Some(call);
            self.watch.list.next_at = None;
        }
    }

    /// With calls one at a time: when no call is out, starts the one read most overdue (the
    /// earliest due; among those due at the same instant, the first reader after the one
    /// read last), with the time then left as its timeout.
    fn maybe_read_one(&mut self, now: Timestamp) {
        if !self.pending.is_empty() {
            return;
        }
        let backoff = self.watch.backoff_until;
        let rows = self.op().rows();
        let count = rows.len() + 1;
        let need_list = rows
            .iter()
            .any(|r| r.state.is_live() && r.connection_id.is_none());
        let mut best: Option<(Timestamp, usize)> = None;
        for offset in 1..=count {
            let reader = (self.watch.last_read + offset) % count;
            let slot = match rows.get(reader) {
                Some(row) if row.state.is_live() && row.connection_id.is_some() => {
                    &self.watch.rows[reader]
                }
                None if need_list => &self.watch.list,
                _ => continue,
            };
            let Some(due) = slot.due(backoff).filter(|w| w.at <= now) else {
                continue;
            };
            if best.is_none_or(|(at, _)| due.at < at) {
                best = Some((due.at, reader));
            }
        }
        let Some((_, reader)) = best else { return };
        self.watch.last_read = reader;
        let timeout = read_timeout(self.op().deadline_at(), now);
        if let Some(id) = self
            .op()
            .rows()
            .get(reader)
            .and_then(|r| r.connection_id.clone())
        {
            let call = GatewayCall::Account {
                connection_id: id,
                timeout,
            };
            let call = self.call(Purpose::Read(reader), call);
            let slot = &mut self.watch.rows[reader];
            slot.in_flight = Some(call);
            slot.next_at = None;
        } else {
            let call = GatewayCall::List {
                timeout: Some(timeout),
            };
            let call = self.call(Purpose::WatchList, call);
            self.watch.list.in_flight = Some(call);
            self.watch.list.next_at = None;
        }
    }

    /// [`Input::ReturnHint`](super::Input::ReturnHint): the browser came back from the
    /// vendor, so the answer is likely there now. The named live row (every live row when
    /// none is named) is read at once, or once more right after the read it has out; the
    /// back-off still holds it. Ignored once settled or closed, and before the watcher
    /// starts (its first read is at once anyway). Never moves the deadline.
    ///
    /// Returns whether a live row was there to read; an unknown name is the caller's error.
    pub fn handle_return_hint(
        &mut self,
        target: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, CallerError> {
        let op = self.op.as_ref().ok_or(CallerError::NoOperation)?;
        let named = match target {
            Some(name) => {
                Some(
                    op.index_of(name)
                        .ok_or_else(|| TransitionError::UnknownTarget {
                            name: name.to_owned(),
                        })?,
                )
            }
            None => None,
        };
        if op.is_settled() || self.stage != Stage::Watching {
            return Ok(false);
        }
        let mut read = false;
        for (index, row) in op.rows().iter().enumerate() {
            if !row.state.is_live() || named.is_some_and(|n| n != index) {
                continue;
            }
            read = true;
            match row.connection_id {
                Some(_) => self.watch.rows[index].hurry(now),
                None => self.watch.list.hurry(now),
            }
        }
        self.maybe_tick(now);
        Ok(read)
    }

    fn back_off(&mut self, retry_after: Duration, now: Timestamp) {
        let until = now + retry_after;
        self.watch.backoff_until = Some(self.watch.backoff_until.map_or(until, |b| b.max(until)));
    }

    /// An account read answered. A row that is no longer live drops it.
    pub(super) fn on_read(
        &mut self,
        index: usize,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        // Planned before the answer moves anything: a move then asks for the re-read at once.
        self.watch.rows[index].answered(self.tick, now);
        let live = self.op().rows()[index].state.is_live();
        match result {
            Ok(GatewayReply::Account(Some(account))) if live => {
                let detail = account.status_reason.filter(|r| !r.is_empty());
                let to = match account.status {
                    AccountStatus::Active => Some((TargetState::Connected, Actor::BackendWatcher)),
                    AccountStatus::Failed | AccountStatus::Revoked | AccountStatus::Inactive => {
                        Some((TargetState::Failed, Actor::BackendWatcher))
                    }
                    AccountStatus::Expired => Some((TargetState::Expired, Actor::Clock)),
                    AccountStatus::Pending => None,
                };
                if let Some((to, actor)) = to {
                    let patch = Patch {
                        detail,
                        ..Patch::default()
                    };
                    self.witnessed_move(index, Patch::default(), to, actor, patch, now);
                }
            }
            Err(GatewayError::RateLimited { retry_after }) => self.back_off(retry_after, now),
            _ => {}
        }
    }

    /// The list fallback answered: `connected: true` connects a live row without an id. No
    /// other list field moves a row.
    pub(super) fn on_watch_list(
        &mut self,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        self.watch.list.answered(self.tick, now);
        match result {
            Ok(GatewayReply::Connectors(list)) => {
                for index in 0..self.op().rows().len() {
                    let row = &self.op().rows()[index];
                    if !row.state.is_live() || row.connection_id.is_some() {
                        continue;
                    }
                    let Some(hit) = list.iter().find(|l| l.connector == row.name && l.connected)
                    else {
                        continue;
                    };
                    let detail = if row.detail.is_none() {
                        hit.status_reason.clone()
                    } else {
                        None
                    };
                    let patch = Patch {
                        detail,
                        ..Patch::default()
                    };
                    self.witnessed_move(
                        index,
                        Patch::default(),
                        TargetState::Connected,
                        Actor::BackendWatcher,
                        patch,
                        now,
                    );
                    if self.stage != Stage::Watching {
                        break;
                    }
                }
            }
            Err(GatewayError::RateLimited { retry_after }) => self.back_off(retry_after, now),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::TargetState;
    use crate::error::CallerError;
    use crate::flow::{Effect, Flow, FlowConfig, Input, WakeReason};
    use crate::registry::RegistryKey;
    use crate::time::Timestamp;
    use crate::tool_gateway::{
        Account, AccountStatus, CallId, GatewayCall, GatewayError, GatewayReply,
    };
    use serde_json::json;
    use std::time::Duration;

    const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

    fn at(ms: u64) -> Timestamp {
        T0 + Duration::from_millis(ms)
    }

    /// A flow watching gmail and notion, past its mint; returns the reads it started.
    fn watching_with(config: FlowConfig) -> (Flow, Vec<(CallId, GatewayCall)>) {
        let args = json!({"action": "connect", "connectors": ["gmail", "notion"]});
        let mut flow = Flow::start(&args, config, [1, 2, 3, 4, 5, 6], T0);
        let mut reads = Vec::new();
        while let Some(effect) = flow.poll_effect() {
            match effect {
                Effect::Register { .. } => {
                    flow.handle_input(Input::Registered(Ok(())), T0).unwrap();
                }
                Effect::Call {
                    id,
                    call: GatewayCall::Mint(mint),
                } => {
                    let minted = super::super::testing::minted(&mint);
                    flow.handle_gateway(id, Ok(minted), T0).unwrap();
                }
                Effect::Call { id, call } => reads.push((id, call)),
                _ => {}
            }
        }
        (flow, reads)
    }

    fn reads(flow: &mut Flow) -> Vec<(CallId, GatewayCall)> {
        std::iter::from_fn(|| flow.poll_effect())
            .filter_map(|e| match e {
                Effect::Call { id, call } => Some((id, call)),
                _ => None,
            })
            .collect()
    }

    fn read_of(read: &(CallId, GatewayCall)) -> (&str, Duration) {
        match &read.1 {
            GatewayCall::Account {
                connection_id,
                timeout,
            } => (connection_id, *timeout),
            other => panic!("not an account read: {other:?}"),
        }
    }

    #[test]
    fn with_calls_one_at_a_time_each_read_starts_when_the_last_answered_with_the_time_then_left() {
        let mut config = FlowConfig::new(RegistryKey::new("/h", "s"));
        config.options.deadline = Duration::from_millis(1_800);
        config.options.tick = Duration::from_secs(10);
        config.serial_calls = true;
        let (mut flow, first) = watching_with(config);
        assert_eq!(first.len(), 1, "one read out at a time: {first:?}");
        assert_eq!(
            read_of(&first[0]),
            ("ca_gmail", Duration::from_millis(1_800))
        );
        assert_eq!(
            flow.poll_timeout().map(|w| w.reason),
            Some(WakeReason::Deadline)
        );
        // gmail's read took 0.6 s: notion is due since the tick began, and read now with the
        // 1.2 s then left.
        flow.handle_gateway(first[0].0, pending("ca_gmail"), at(600))
            .unwrap();
        let wake = flow.poll_timeout().unwrap();
        assert_eq!((wake.at, wake.reason), (T0, WakeReason::Tick));
        flow.handle_timeout(at(600));
        let second = reads(&mut flow);
        assert_eq!(second.len(), 1);
        assert_eq!(
            read_of(&second[0]),
            ("ca_notion", Duration::from_millis(1_200))
        );
        // notion's read answers after the deadline: no read starts, the deadline settles.
        flow.handle_gateway(second[0].0, pending("ca_notion"), at(1_900))
            .unwrap();
        flow.handle_timeout(at(1_900));
        let effects: Vec<_> = std::iter::from_fn(|| flow.poll_effect()).collect();
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Call { .. })),
            "{effects:?}"
        );
        assert_eq!(
            flow.view().unwrap().settled_by,
            Some(crate::contract::SettleReason::Deadline)
        );
    }

    #[test]
    fn with_calls_one_at_a_time_every_row_is_read_once_before_any_twice() {
        let mut config = FlowConfig::new(RegistryKey::new("/h", "s"));
        config.options.tick = Duration::ZERO;
        config.serial_calls = true;
        let (mut flow, mut out) = watching_with(config);
        let mut order = Vec::new();
        for _ in 0..4 {
            let [read] = out.as_slice() else {
                panic!("{out:?}")
            };
            let (id, _) = read_of(read);
            order.push(id.to_owned());
            let answer = pending(id);
            flow.handle_gateway(read.0, answer, T0).unwrap();
            flow.handle_timeout(T0);
            out = reads(&mut flow);
        }
        assert_eq!(order, ["ca_gmail", "ca_notion", "ca_gmail", "ca_notion"]);
    }

    /// A flow watching gmail and notion; returns their first reads' call ids.
    fn watching(deadline: Duration) -> (Flow, CallId, CallId) {
        let mut config = FlowConfig::new(RegistryKey::new("/h", "s"));
        config.options.deadline = deadline;
        let (flow, reads) = watching_with(config);
        let [(gmail, _), (notion, _)] = reads.as_slice() else {
            panic!("both rows read at once after the card: {reads:?}")
        };
        (flow, *gmail, *notion)
    }

    fn pending(id: &str) -> Result<GatewayReply, GatewayError> {
        Ok(GatewayReply::Account(Some(Account {
            connection_id: id.into(),
            connector: id.trim_start_matches("ca_").into(),
            status: AccountStatus::Pending,
            status_reason: None,
        })))
    }

    fn calls(flow: &mut Flow) -> usize {
        std::iter::from_fn(|| flow.poll_effect())
            .filter(|e| matches!(e, Effect::Call { .. }))
            .count()
    }

    #[test]
    fn each_row_ticks_on_its_own_and_poll_timeout_names_the_earliest_wake() {
        let (mut flow, gmail, notion) = watching(Duration::from_secs(300));
        // gmail answers at 0.3 s: its next read is a tick later, whatever notion's read does.
        flow.handle_gateway(gmail, pending("ca_gmail"), at(300))
            .unwrap();
        let wake = flow.poll_timeout().unwrap();
        assert_eq!((wake.at, wake.reason), (at(1_300), WakeReason::Tick));
        // At 1.3 s gmail is read again; notion's read is still out and is not read twice.
        flow.handle_timeout(at(1_300));
        assert_eq!(calls(&mut flow), 1);
        // notion is rate limited at 1.5 s: every row backs off to 6.5 s.
        let limited = Err(GatewayError::RateLimited {
            retry_after: Duration::from_secs(5),
        });
        flow.handle_gateway(notion, limited, at(1_500)).unwrap();
        let wake = flow.poll_timeout().unwrap();
        assert_eq!((wake.at, wake.reason), (at(6_500), WakeReason::Backoff));
        // A hint during the back-off reads nothing yet.
        assert_eq!(flow.handle_return_hint(Some("notion"), at(2_000)), Ok(true));
        assert_eq!(calls(&mut flow), 0);
        flow.handle_timeout(at(6_500));
        assert_eq!(
            calls(&mut flow),
            1,
            "notion; gmail's second read is still out"
        );
    }

    #[test]
    fn the_deadline_is_the_wake_when_it_comes_first() {
        let (mut flow, gmail, notion) = watching(Duration::from_millis(800));
        flow.handle_gateway(gmail, pending("ca_gmail"), at(100))
            .unwrap();
        flow.handle_gateway(notion, pending("ca_notion"), at(100))
            .unwrap();
        let wake = flow.poll_timeout().unwrap();
        assert_eq!((wake.at, wake.reason), (at(800), WakeReason::Deadline));
        assert_eq!(flow.handle_return_hint(None, at(200)), Ok(true));
        assert_eq!(calls(&mut flow), 2, "a hint reads every live row at once");
        let wake = flow.poll_timeout().unwrap();
        assert_eq!(wake.at, at(800), "and never moves the deadline");
    }

    #[test]
    fn a_read_answered_with_a_reply_of_another_kind_is_taken_as_invalid_and_reported() {
        let (mut flow, gmail, notion) = watching(Duration::from_secs(300));
        let got = flow.handle_gateway(gmail, Ok(GatewayReply::Connectors(Vec::new())), at(300));
        assert_eq!(
            got,
            Err(CallerError::ReplyMismatch {
                call: gmail,
                expected: "account",
                got: "list",
            })
        );
        // Taken all the same: no longer awaited, the row unmoved, its next read a tick later.
        assert!(!flow.awaits(gmail));
        assert_eq!(calls(&mut flow), 0);
        flow.handle_gateway(notion, pending("ca_notion"), at(300))
            .unwrap();
        let view = flow.view().unwrap();
        assert!(
            view.targets
                .iter()
                .all(|t| t.state == TargetState::Initiated),
            "{view:?}"
        );
        let wake = flow.poll_timeout().unwrap();
        assert_eq!((wake.at, wake.reason), (at(1_300), WakeReason::Tick));
        flow.handle_timeout(at(1_300));
        assert_eq!(calls(&mut flow), 2, "both rows read again on the tick");
    }
}
