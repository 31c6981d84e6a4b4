//! The host entry point `manage_connections(args, context)` on the calling thread.

use crate::calls::{InlineCalls, WorkerCalls};
use crate::clock::{Clock, entropy};
use crate::interrupt::Interrupt;
use crate::op::{CallStarter, DriverStep, EventSink, OpEnv, OpHandle};
use crate::registry::SharedRegistry;
use connop_core::flow::{DEFAULT_TICK, Flow, FlowConfig, Surface};
use connop_core::operation::{DEFAULT_DEADLINE, Text};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::BlockingToolGateway;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the host tells a tool call (SPEC §11): where it registers, which surface the session
/// has, where events go, which gateway to use, and the operation's timings. Generic over the
/// gateway so both runtimes share it.
pub struct ToolContext<G: ?Sized> {
    /// The process's registry.
    pub registry: SharedRegistry,
    /// The gateway's key for the conversation: the operation registers under it.
    pub session_key: Text,
    /// The agent's own session id (it rotates when the agent compacts; informational).
    pub agent_session_id: Option<Text>,
    /// The session's surface.
    pub surface: Surface,
    /// The card callback, which also receives update frames; `None` means links.
    pub events: Option<EventSink>,
    /// The tool gateway.
    pub gateway: Arc<G>,
    /// Names the local MCP catalog serves.
    pub local_catalog: Vec<Text>,
    /// The watcher tick.
    pub tick: Duration,
    /// The operation deadline.
    pub deadline: Duration,
    /// The agent's tool call id.
    pub tool_call_id: Option<Text>,
    /// The turn's interrupt handle.
    pub interrupt: Option<Interrupt>,
    /// Blocking runtime only: run gateway calls on the operation's own thread (for an
    /// in-process gateway that answers at once) instead of a per-operation worker thread.
    pub inline_calls: bool,
}

impl<G: ?Sized> ToolContext<G> {
    /// A context with the defaults: surface unset, no card callback (links), 1 s tick, 300 s
    /// deadline, empty catalog, calls on a worker thread.
    pub fn new(registry: SharedRegistry, session_key: &str, gateway: Arc<G>) -> Self {
        ToolContext {
            registry,
            session_key: session_key.into(),
            agent_session_id: None,
            surface: Surface::Unset,
            events: None,
            gateway,
            local_catalog: Vec::new(),
            tick: DEFAULT_TICK,
            deadline: DEFAULT_DEADLINE,
            tool_call_id: None,
            interrupt: None,
            inline_calls: false,
        }
    }

    /// The flow's configuration for this context.
    pub fn flow_config(&self) -> FlowConfig {
        FlowConfig {
            registry_key: self.registry.key(&self.session_key),
            surface: self.surface.clone(),
            card_callback: self.events.is_some(),
            tick: self.tick,
            deadline: self.deadline,
            local_catalog: self.local_catalog.clone(),
            tool_call_id: self.tool_call_id.clone(),
        }
    }

    /// Starts the tool call's operation with `calls` running its gateway calls; nothing runs
    /// until the returned handle is pumped.
    pub fn start(&self, args: &Value, calls: Arc<dyn CallStarter>) -> OpHandle {
        let clock = Clock::new();
        let flow = Flow::start(args, self.flow_config(), entropy(), clock.now());
        let env = OpEnv {
            registry: self.registry.clone(),
            events: self.events.clone(),
            calls,
            clock,
        };
        let op = OpHandle::new(flow, env);
        if let Some(interrupt) = &self.interrupt {
            interrupt.attach(&op);
        }
        op
    }
}

impl<G: ?Sized> Clone for ToolContext<G> {
    fn clone(&self) -> Self {
        ToolContext {
            registry: self.registry.clone(),
            session_key: self.session_key.clone(),
            agent_session_id: self.agent_session_id.clone(),
            surface: self.surface.clone(),
            events: self.events.clone(),
            gateway: self.gateway.clone(),
            local_catalog: self.local_catalog.clone(),
            tick: self.tick,
            deadline: self.deadline,
            tool_call_id: self.tool_call_id.clone(),
            interrupt: self.interrupt.clone(),
            inline_calls: self.inline_calls,
        }
    }
}

/// Runs one `manage_connections` tool call on the calling thread and returns its result as
/// JSON. On the card path it blocks until the operation settles; other threads reach it
/// through the registry's [`OpHandle`] or the context's [`Interrupt`].
pub fn manage_connections(args: &Value, context: &ToolContext<dyn BlockingToolGateway>) -> Value {
    let op = start_tool_call(args, context);
    drive(&op, true);
    // Serialized by the thread that settled the operation, while this one slept.
    op.take_result_json()
        .unwrap_or_else(|| result_of(&op).to_value())
}

/// [`manage_connections`], returning the typed result.
pub fn run_tool_call(args: &Value, context: &ToolContext<dyn BlockingToolGateway>) -> ToolResult {
    run_to_end(&start_tool_call(args, context))
}

fn start_tool_call(args: &Value, context: &ToolContext<dyn BlockingToolGateway>) -> OpHandle {
    let calls: Arc<dyn CallStarter> = if context.inline_calls {
        Arc::new(InlineCalls(context.gateway.clone()))
    } else {
        Arc::new(WorkerCalls::new(context.gateway.clone()))
    };
    context.start(args, calls)
}

/// Drives an operation on this thread until its tool call returns: executes its effects, and
/// sleeps until the next timer or the next change, whichever comes first. One re-armable
/// deadline wait, never slices.
pub fn run_to_end(op: &OpHandle) -> ToolResult {
    drive(op, false);
    result_of(op)
}

fn result_of(op: &OpHandle) -> ToolResult {
    op.result()
        .unwrap_or_else(|| ToolResult::Error("the operation ended without a result".into()))
}

/// The loop of [`run_to_end`], which stops once the result is in without taking it;
/// `wants_json`: the caller returns the result as JSON.
fn drive(op: &OpHandle, wants_json: bool) {
    op.park_here(wants_json);
    op.pump();
    // `unpark` leaves a token when it comes before `park`, so no wake-up is lost between
    // reading the state and parking.
    loop {
        match op.driver_step() {
            DriverStep::Finished => return,
            DriverStep::FireTimers => op.fire_timers(),
            DriverStep::Sleep(Some(at)) => {
                std::thread::park_timeout(at.saturating_duration_since(Instant::now()))
            }
            DriverStep::Sleep(None) => std::thread::park(),
        }
    }
}
