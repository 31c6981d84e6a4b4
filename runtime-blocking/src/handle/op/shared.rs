//! The handle itself: a cloneable reference to one operation's shared part, what a host
//! gives it to run, and what any thread reads of it.

use super::state::State;
use crate::clock::Clock;
use connop_core::flow::{CallPurpose, Event, Flow};
use connop_core::operation::{OpId, TargetRow, Text};
use connop_core::payload::{CardRequest, OperationResult, OperationView};
use connop_core::registry::{Registry, RegistryEntry};
use connop_core::time::Timestamp;
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{CallId, GatewayCall};
use event_listener::Event as Signal;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Receives the operation's events: the card request and every update frame. It runs on the
/// pumping thread and must not block for long; it may call back into the [`OpHandle`].
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// Starts a gateway call for an operation. The starter eventually delivers the answer with
/// [`OpHandle::deliver`] (possibly before `start` returns, for an instant in-process gateway),
/// or hands it to the driver's next [`OpHandle::step`].
pub trait CallStarter: Send + Sync {
    /// Starts `call`; its answer goes back to `op`.
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall);
}

/// The process's registry of open operations, as the handle stores itself in it.
pub(crate) type RegistryCell = Arc<Mutex<Registry<OpHandle>>>;

/// How an operation refers to its registry: weakly, since the registry holds the operation
/// (open, or settled and kept), and the two must not keep each other alive once the host has
/// dropped both.
pub(crate) type RegistryRef = Weak<Mutex<Registry<OpHandle>>>;

fn no_result() -> ToolResult {
    ToolResult::Error("the operation ended without a result".into())
}

/// Locks a mutex, even one a panicking callback poisoned: one failed callback must not wedge
/// every later call on the operation or the registry.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What an operation needs from its host while it runs.
pub(crate) struct OpEnv {
    /// Where it registers (card path); gone when the host dropped it.
    pub(crate) registry: RegistryRef,
    /// The card callback and update frames; `None` on the links path.
    pub(crate) events: Option<EventSink>,
    /// How gateway calls run; `None`: the driver starts them (they come out of its step).
    pub(crate) calls: Option<Arc<dyn CallStarter>>,
    /// What time it is, and how a driver sleeps.
    pub(crate) clock: Arc<dyn Clock>,
}

/// The shared part of one operation.
pub struct OpShared {
    pub(super) state: Mutex<State>,
    pub(super) op_id: Option<OpId>,
    pub(super) env: OpEnv,
    /// A pump ran the queue empty: callers waiting for their effects look again.
    pub(super) progress: Signal,
}

/// A cloneable, thread-safe handle on a running operation: the operation handle of
/// docs/contract.md#host-seams.
#[derive(Clone)]
pub struct OpHandle(pub(crate) Arc<OpShared>);

impl std::fmt::Debug for OpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpHandle")
            .field("op_id", &self.0.op_id)
            .finish()
    }
}

impl RegistryEntry for OpHandle {
    fn op_id(&self) -> OpId {
        self.0.op_id.unwrap_or_else(|| OpId::from_entropy([0; 6]))
    }
    fn is_settled(&self) -> bool {
        self.lock()
            .flow
            .operation()
            .is_some_and(|op| op.is_settled())
    }
}

impl OpHandle {
    /// Wraps a freshly started flow; its first effects wait in its queue for a driver.
    pub(crate) fn new(flow: Flow, env: OpEnv) -> Self {
        let op_id = flow.operation().map(|op| op.op_id());
        OpHandle(Arc::new(OpShared {
            state: Mutex::new(State::new(flow)),
            op_id,
            env,
            progress: Signal::new(),
        }))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.0.state)
    }

    /// The operation id (none for a status call or refused arguments).
    pub fn op_id(&self) -> Option<OpId> {
        self.0.op_id
    }

    /// The operation view (docs/contract.md#operation-view): live rows while open, the frozen
    /// snapshot with links once settled.
    pub fn view(&self) -> Option<OperationView> {
        self.lock().flow.view()
    }

    /// The operation's change counter (none for a status call or refused arguments): a
    /// host that only asks whether something changed reads this, not the whole view.
    pub fn seq(&self) -> Option<u64> {
        self.lock().flow.operation().map(|op| op.seq())
    }

    /// Whether the operation settled.
    pub fn is_settled(&self) -> bool {
        RegistryEntry::is_settled(self)
    }

    /// The tool result, once returned (the frozen result: every read gives the same).
    pub fn result(&self) -> Option<ToolResult> {
        self.lock().result.as_deref().cloned()
    }

    /// What a driver returns once the operation finished: the frozen result, or an error
    /// saying there is none (a flow that ended without returning, which it should not).
    pub fn finished_result(&self) -> ToolResult {
        self.result().unwrap_or_else(no_result)
    }

    /// The clock the operation runs on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.0.env.clock
    }

    /// Removes the operation's registry entry, if the entry is still this operation (a late
    /// close never evicts a newer one). It goes on unregistered.
    pub fn close_registration(&self) {
        let Some(op_id) = self.0.op_id else { return };
        let key = self.lock().flow.registry_key().clone();
        if let Some(registry) = self.0.env.registry.upgrade() {
            let closed = lock(&registry).close(&key, op_id);
            drop(closed);
        }
    }

    /// The session key it registers under.
    pub fn session_key(&self) -> Text {
        self.lock().flow.registry_key().session_key.clone()
    }

    /// Replaces what a local MCP server's row needs from the environment (no move).
    pub fn set_required_env(
        &self,
        name: &str,
        env: Option<serde_json::Value>,
    ) -> Result<(), connop_core::error::CallerError> {
        self.lock().flow.set_required_env(name, env)
    }

    /// The card request as it would be now (the card path emits it once).
    pub fn card_request(&self) -> Option<CardRequest> {
        self.lock().flow.card_request()
    }

    /// The operation as its host reads it at any time: the live rows while open, the frozen
    /// snapshot once settled.
    pub fn host_result(&self) -> Option<OperationResult> {
        self.lock().flow.host_result()
    }

    /// One row as it stands, and when the watcher reads it next at the earliest (after a
    /// 429), if it holds it back.
    pub fn target(&self, name: &str) -> Option<(TargetRow, Option<Timestamp>)> {
        let state = self.lock();
        let row = state.flow.operation()?.row(name)?.clone();
        Some((row, state.flow.next_read_at(name)))
    }

    /// The rows' names, in order.
    pub fn target_names(&self) -> Vec<Text> {
        let state = self.lock();
        state
            .flow
            .operation()
            .map(|op| op.rows().iter().map(|r| r.name.clone()).collect())
            .unwrap_or_default()
    }

    /// The target whose row holds `connection_id`, if any: a loopback return names the
    /// account; [`return_hint`](Self::return_hint) then names this target, or none (every
    /// live row) when no row holds it.
    pub fn target_of_connection(&self, connection_id: &str) -> Option<Text> {
        let state = self.lock();
        let op = state.flow.operation()?;
        op.target_with_connection(connection_id).cloned()
    }

    /// Whether the flow still waits for the answer to `id` (a call it no longer awaits must
    /// not start: the operation settled).
    pub fn awaits(&self, id: CallId) -> bool {
        self.lock().flow.awaits(id)
    }

    /// Why the flow made call `id`, while it still awaits the answer: a call starter that
    /// answers some reads itself tells them apart by it.
    pub fn call_purpose(&self, id: CallId) -> Option<CallPurpose> {
        self.lock().flow.call_purpose(id)
    }

    /// A weak reference, for interrupt tokens that must not keep an operation alive.
    pub(crate) fn downgrade(&self) -> Weak<OpShared> {
        Arc::downgrade(&self.0)
    }
}
