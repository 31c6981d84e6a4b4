//! What the card shows: the operation's events folded into the newest view.

use connop_core::contract::{SettleReason, TargetState};
use connop_core::flow::Event;
use connop_core::operation::{DEFAULT_DEADLINE, OpId, TargetRow};
use connop_core::time::Timestamp;
use std::time::Duration;

/// What the card shows: the state of one operation as of the newest event seen.
///
/// It exists so the terminal loop never rebuilds state from deltas: every frame carries the
/// full view (docs/contract.md#update-frame), and the model keeps the newest one by `seq`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CardModel {
    pub(super) op_id: Option<OpId>,
    pub(super) seq: Option<u64>,
    pub(super) deadline_at: Timestamp,
    pub(super) timeout: Option<Duration>,
    pub(super) rows: Vec<TargetRow>,
    pub(super) settled_at: Option<Timestamp>,
    pub(super) settled_by: Option<SettleReason>,
    /// The rows as they were before the settle frame (settle writes `not_connected` over
    /// `failed` and `expired`; the summary still tells them apart).
    pub(super) live_rows: Vec<TargetRow>,
    /// Whether keys can be read: the keys line shows only then.
    pub(super) keys: bool,
    /// The digits of a row number typed so far, when more may follow (rows past 9).
    pub(super) pending: Option<usize>,
}

impl CardModel {
    /// An empty card, waiting for its `connection.request`.
    pub fn new() -> Self {
        CardModel::default()
    }

    /// Folds one event in; returns whether the card changed (and so should be redrawn).
    ///
    /// The card request sets the card up and gives the deadline's length. An update frame
    /// replaces the whole view when its `seq` is newer than the one shown; an older or equal
    /// one is dropped. Events of another operation than the first one seen are dropped.
    pub fn apply(&mut self, event: &Event) -> bool {
        match event {
            Event::Request(card) => {
                if self.is_foreign(card.op_id) {
                    return false;
                }
                self.op_id = Some(card.op_id);
                self.timeout = Duration::try_from_secs_f64(card.timeout_seconds).ok();
                if self.is_newer(card.seq) {
                    self.seq = Some(card.seq);
                    self.deadline_at = card.deadline_at;
                    self.rows = card.targets.clone();
                    self.live_rows = card.targets.clone();
                }
                true
            }
            Event::Update(frame) => {
                let view = &frame.view;
                if self.is_foreign(view.op_id) || !self.is_newer(view.seq) {
                    return false;
                }
                self.op_id = Some(view.op_id);
                self.seq = Some(view.seq);
                self.deadline_at = view.deadline_at;
                self.settled_at = view.settled_at;
                self.settled_by = view.settled_by;
                if view.settled_by.is_none() {
                    self.live_rows = view.targets.clone();
                }
                self.rows = view.targets.clone();
                true
            }
            // An event kind this card predates changes nothing it shows.
            _ => false,
        }
    }

    /// Says whether keys can be read (stdin is a terminal); without them the card shows no
    /// keys line.
    pub fn set_keys(&mut self, readable: bool) {
        self.keys = readable;
    }

    /// The state a target was in before the operation settled, as the card last saw it.
    pub fn last_live_state(&self, name: &str) -> Option<String> {
        self.live_state(name).map(|state| state.as_str().to_owned())
    }

    /// [`CardModel::last_live_state`], as a state.
    pub(super) fn live_state(&self, name: &str) -> Option<TargetState> {
        self.live_rows
            .iter()
            .find(|r| &*r.name == name)
            .map(|r| r.state)
    }

    fn is_foreign(&self, op_id: OpId) -> bool {
        self.op_id.is_some_and(|mine| mine != op_id)
    }

    fn is_newer(&self, seq: u64) -> bool {
        self.seq.is_none_or(|mine| seq > mine)
    }

    /// The operation shown, once an event arrived.
    pub fn op_id(&self) -> Option<OpId> {
        self.op_id
    }

    /// The `seq` of the view shown, once an event arrived.
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// The operation's deadline.
    pub fn deadline_at(&self) -> Timestamp {
        self.deadline_at
    }

    /// The deadline's length, from the card request (the default of 300 s until it arrives,
    /// docs/contract.md#operation).
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_DEADLINE)
    }

    /// The rows, in the order the targets were asked for.
    pub fn rows(&self) -> &[TargetRow] {
        &self.rows
    }

    /// When the operation settled, once the settle frame arrived.
    pub fn settled_at(&self) -> Option<Timestamp> {
        self.settled_at
    }

    /// Why the operation settled, once the settle frame arrived.
    pub fn settled_by(&self) -> Option<SettleReason> {
        self.settled_by
    }

    /// Whether the settle frame arrived: the card is final and the loop can end.
    pub fn is_settled(&self) -> bool {
        self.settled_by.is_some()
    }
}
