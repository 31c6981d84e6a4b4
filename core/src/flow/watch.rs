//! The watcher (SPEC §5.5): one account read per live row per tick, the list fallback for
//! rows without a connection id, 429 back-off, and the re-read at once after a change.

use super::{Flow, Purpose, Stage, Wake, WakeReason};
use crate::contract::{Actor, TargetState};
use crate::operation::{Operation, Patch, Text};
use crate::time::Timestamp;
use crate::tool_gateway::{AccountStatus, CallId, GatewayCall, GatewayError, GatewayReply};
use std::time::Duration;

/// The shortest account-read timeout.
pub const MIN_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest account-read timeout.
pub const MAX_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A read's timeout: the time left to the deadline, clamped to [1 s, 10 s].
pub fn read_timeout(deadline_at: Timestamp, now: Timestamp) -> Duration {
    (deadline_at - now).clamp(MIN_READ_TIMEOUT, MAX_READ_TIMEOUT)
}

/// The watcher's bookkeeping. A tick issues its reads at once; the next tick is planned when
/// the last of them has answered.
#[derive(Debug, Default)]
pub(super) struct Watcher {
    /// Per row: the account read in flight, if any (at most one).
    in_flight: Vec<Option<CallId>>,
    /// The list-fallback read in flight, if any.
    list_in_flight: Option<CallId>,
    /// Reads of the current tick not yet answered.
    outstanding: usize,
    /// A change happened while reads were out: re-read at once when they are in.
    changed: bool,
    /// When the next tick is due (none while a tick's reads are out).
    next_tick_at: Option<Timestamp>,
    /// After a 429: no read before this.
    backoff_until: Option<Timestamp>,
}

impl Watcher {
    pub(super) fn new(rows: usize) -> Self {
        Watcher {
            in_flight: vec![None; rows],
            ..Watcher::default()
        }
    }

    /// The first read happens at once after the card.
    pub(super) fn start(&mut self, now: Timestamp) {
        self.next_tick_at = Some(now);
    }

    /// An effective change: the next read happens at once, not a tick later.
    pub(super) fn wake(&mut self, now: Timestamp) {
        if self.outstanding > 0 {
            self.changed = true;
        } else {
            self.next_tick_at = Some(self.next_tick_at.map_or(now, |t| t.min(now)));
        }
    }

    /// Settled: every read in flight is forgotten.
    pub(super) fn clear(&mut self) {
        self.in_flight.iter_mut().for_each(|c| *c = None);
        self.list_in_flight = None;
        self.outstanding = 0;
        self.next_tick_at = None;
    }

    fn due(&self) -> Option<Wake> {
        let at = self.next_tick_at?;
        Some(match self.backoff_until {
            Some(until) if until > at => Wake {
                at: until,
                reason: WakeReason::Backoff,
            },
            _ => Wake {
                at,
                reason: WakeReason::Tick,
            },
        })
    }

    /// The next tick, unless reads are out or nothing is left to read.
    pub(super) fn next_wake(&self, op: &Operation) -> Option<Wake> {
        if self.outstanding > 0 || !op.rows().iter().any(|r| r.state.is_live()) {
            return None;
        }
        self.due()
    }
}

impl Flow {
    /// Runs a tick if one is due.
    pub(super) fn maybe_tick(&mut self, now: Timestamp) {
        if let Some(wake) = self.watch.next_wake(self.op()) {
            if now >= wake.at {
                self.run_tick(now);
            }
        }
    }

    /// One tick: for each live row in order, its own account (if it has an id and no read
    /// out); one list read for the live rows without an id.
    fn run_tick(&mut self, now: Timestamp) {
        let timeout = read_timeout(self.op().deadline_at(), now);
        self.watch.next_tick_at = None;
        let mut need_list = false;
        for index in 0..self.op().rows().len() {
            let row = &self.op().rows()[index];
            if !row.state.is_live() {
                continue;
            }
            match &row.connection_id {
                Some(id) if self.watch.in_flight[index].is_none() => {
                    let call = GatewayCall::Account {
                        connection_id: id.clone(),
                        timeout,
                    };
                    let id = self.call(Purpose::Read(index), call);
                    self.watch.in_flight[index] = Some(id);
                    self.watch.outstanding += 1;
                }
                Some(_) => {}
                None => need_list = true,
            }
        }
        if need_list && self.watch.list_in_flight.is_none() {
            let id = self.call(
                Purpose::WatchList,
                GatewayCall::List {
                    timeout: Some(timeout),
                },
            );
            self.watch.list_in_flight = Some(id);
            self.watch.outstanding += 1;
        }
        if self.watch.outstanding == 0 {
            self.complete_tick(now);
        }
    }

    /// The last read of a tick answered: plan the next one.
    fn complete_tick(&mut self, now: Timestamp) {
        let at = if std::mem::take(&mut self.watch.changed) {
            now
        } else {
            now + self.tick
        };
        self.watch.next_tick_at = Some(at);
    }

    fn read_answered(&mut self, now: Timestamp) {
        self.watch.outstanding = self.watch.outstanding.saturating_sub(1);
        if self.stage == Stage::Watching && self.watch.outstanding == 0 {
            self.complete_tick(now);
        }
    }

    fn back_off(&mut self, retry_after: Duration, now: Timestamp) {
        let until = now + retry_after;
        self.watch.backoff_until = Some(self.watch.backoff_until.map_or(until, |b| b.max(until)));
    }

    /// A watcher move: on a pending row the read is the witness that the attempt started, so
    /// it first steps `→initiated`.
    fn watch_move(
        &mut self,
        index: usize,
        to: TargetState,
        actor: Actor,
        detail: Option<Text>,
        now: Timestamp,
    ) {
        if self.op().rows()[index].state == TargetState::Pending {
            self.step(
                index,
                TargetState::Initiated,
                Actor::BackendWatcher,
                Patch::default(),
                now,
            );
        }
        if self.stage == Stage::Watching {
            self.step(
                index,
                to,
                actor,
                Patch {
                    detail,
                    ..Patch::default()
                },
                now,
            );
        }
    }

    /// An account read answered. A row that is no longer live drops it.
    pub(super) fn on_read(
        &mut self,
        index: usize,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        self.watch.in_flight[index] = None;
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
                    self.watch_move(index, to, actor, detail, now);
                }
            }
            Err(GatewayError::RateLimited { retry_after }) => self.back_off(retry_after, now),
            _ => {}
        }
        self.read_answered(now);
    }

    /// The list fallback answered: `connected: true` connects a live row without an id. No
    /// other list field moves a row.
    pub(super) fn on_watch_list(
        &mut self,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        self.watch.list_in_flight = None;
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
                    self.watch_move(
                        index,
                        TargetState::Connected,
                        Actor::BackendWatcher,
                        detail,
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
        self.read_answered(now);
    }
}
