//! What a host tells a tool call (docs/contract.md#host-seams), and the one way both runtimes start
//! it.

use super::interrupt::Interrupt;
use super::op::{CallStarter, EventSink, OpEnv, OpHandle};
use super::registry::SharedRegistry;
use crate::clock::{Clock, SystemClock};
use crate::random::entropy;
use connop_core::flow::{Flow, FlowConfig, OperationOptions, Surface};
use connop_core::operation::{OpId, Target, Text};
use connop_core::tool::{Dialect, ToolResult};
use connop_core::tool_gateway::DESKTOP_RETURN_TO;
use serde_json::Value;
use std::sync::Arc;

/// What the host tells a tool call (docs/contract.md#host-seams): where it registers, which surface
/// the session has, where events go, which tool gateway to use, the operation's options and clock.
/// Generic over the gateway so both runtimes share it.
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
    /// The host's tick, deadline and local catalog, carried to the flow as they are.
    pub options: OperationOptions,
    /// The agent's tool call id.
    pub tool_call_id: Option<Text>,
    /// Where the vendor sends the browser back (the mint's `returnTo`,
    /// docs/contract.md#return-hints); `None`: [`desktop_return_to`](Self::desktop_return_to) on
    /// the desktop surface, nothing elsewhere.
    pub return_to: Option<Text>,
    /// The desktop app's own name, sent as `returnTo` on the desktop surface (default
    /// `connop-desktop`; an embedding names its own host app, docs/contract.md#prepare).
    pub desktop_return_to: Text,
    /// The turn's interrupt handle.
    pub interrupt: Option<Interrupt>,
    /// What time it is and how the driver sleeps: the system clock, or a test's virtual one.
    pub clock: Arc<dyn Clock>,
    /// How gateway calls run; `None`: the runtime's own way (a worker thread per operation
    /// for the blocking runtime, inside the operation's future for smol). An in-process
    /// gateway that answers at once can run inline ([`InlineCalls`](crate::InlineCalls)).
    pub calls: Option<Arc<dyn CallStarter>>,
    /// Whose words the tool speaks (connop's by default).
    pub dialect: Dialect,
    /// Whether the host offers connectors in this session (see [`FlowConfig::available`]).
    pub available: bool,
    /// The calls run one at a time on the driving thread (see
    /// [`FlowConfig::serial_calls`]): set it with inline calls.
    pub serial_calls: bool,
}

impl<G: ?Sized> ToolContext<G> {
    /// A context with the defaults: surface unset, no card callback (links), 1 s tick, 300 s
    /// deadline, empty catalog, the system clock, the runtime's own way of running calls.
    pub fn new(registry: SharedRegistry, session_key: &str, gateway: Arc<G>) -> Self {
        ToolContext {
            registry,
            session_key: session_key.into(),
            agent_session_id: None,
            surface: Surface::Unset,
            events: None,
            gateway,
            options: OperationOptions::default(),
            tool_call_id: None,
            return_to: None,
            desktop_return_to: DESKTOP_RETURN_TO.into(),
            interrupt: None,
            clock: Arc::new(SystemClock::new()),
            calls: None,
            dialect: Dialect::Connop,
            available: true,
            serial_calls: false,
        }
    }

    /// The flow's configuration for this context.
    pub fn flow_config(&self) -> FlowConfig {
        let mut config = FlowConfig::new(self.registry.key(&self.session_key));
        config.surface = self.surface.clone();
        config.card_callback = self.events.is_some();
        config.options = self.options.clone();
        config.tool_call_id = self.tool_call_id.clone();
        config.return_to = self.return_to.clone();
        config.desktop_return_to = self.desktop_return_to.clone();
        config.dialect = self.dialect;
        config.available = self.available;
        config.serial_calls = self.serial_calls;
        config
    }

    /// An operation's environment in this context: its registry (held weakly: a registry and
    /// the operations it holds are freed together), the event sink, how its calls run and
    /// the clock.
    fn env(&self, calls: Option<Arc<dyn CallStarter>>) -> OpEnv {
        OpEnv {
            registry: Arc::downgrade(self.registry.cell()),
            events: self.events.clone(),
            calls,
            clock: self.clock.clone(),
        }
    }

    /// Starts the tool call's operation (both runtimes start it here): the flow at the
    /// clock's now, its environment, its interrupt. `calls` runs its gateway calls unless
    /// the context names its own (`None`: the driver starts them, taking them from its
    /// [`step`](OpHandle::step)). Nothing runs until a driver steps it.
    pub fn start(&self, args: &Value, calls: Option<Arc<dyn CallStarter>>) -> OpHandle {
        let flow = Flow::start(args, self.flow_config(), entropy(), self.clock.now());
        let op = OpHandle::new(flow, self.env(self.calls.clone().or(calls)));
        if let Some(interrupt) = &self.interrupt {
            interrupt.attach(&op);
        }
        op
    }
}

/// Why a host could not open an operation itself: its session already has an open one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AlreadyOpen {
    /// The open operation's id, when it is still open.
    pub open: Option<OpId>,
    /// The tool's refusal text (docs/contract.md#registry).
    pub message: String,
}

impl<G: ?Sized> ToolContext<G> {
    /// Opens an operation the host moves itself (the seam of docs/contract.md#host-seams; the
    /// core's [`Flow::open`]): registered under the session key before this returns, refused when
    /// the session has one open. It makes no gateway call and runs no watcher; the host
    /// moves it through the handle (its deadline fires only if the host steps it). Its
    /// events go to the context's sink.
    pub fn open(&self, targets: Vec<Target>) -> Result<OpHandle, AlreadyOpen> {
        let flow = Flow::open(targets, self.flow_config(), entropy(), self.clock.now());
        let op = OpHandle::new(flow, self.env(self.calls.clone()));
        op.run_queued();
        match op.result() {
            Some(ToolResult::Error(message)) => Err(AlreadyOpen {
                open: self
                    .registry
                    .current(&self.session_key)
                    .and_then(|o| o.op_id()),
                message,
            }),
            _ => {
                if let Some(interrupt) = &self.interrupt {
                    interrupt.attach(&op);
                }
                Ok(op)
            }
        }
    }
}

impl<G: ?Sized> ToolContext<G> {
    /// Makes an operation that exists before it is registered (the core's
    /// [`Flow::detached`]): the host moves, settles and reads it through the handle, and
    /// registers it under the context's session key when it wants
    /// ([`OpHandle::register`]). Its events go to the context's sink; nothing settles it
    /// but the host.
    pub fn detached(&self, targets: Vec<Target>) -> OpHandle {
        let flow = Flow::detached(targets, self.flow_config(), entropy(), self.clock.now());
        OpHandle::new(flow, self.env(self.calls.clone()))
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
            options: self.options.clone(),
            tool_call_id: self.tool_call_id.clone(),
            return_to: self.return_to.clone(),
            desktop_return_to: self.desktop_return_to.clone(),
            interrupt: self.interrupt.clone(),
            clock: self.clock.clone(),
            calls: self.calls.clone(),
            dialect: self.dialect,
            available: self.available,
            serial_calls: self.serial_calls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use connop_core::contract::{Actor, TargetAction, TargetState};
    use connop_core::operation::Patch;

    fn target(name: &str) -> Target {
        Target::connector(name, TargetAction::Connect)
    }

    #[test]
    fn a_host_opened_operation_holds_the_session_until_it_settles() {
        let registry = SharedRegistry::new("/p");
        let context: ToolContext<()> = ToolContext::new(registry.clone(), "s1", Arc::new(()));
        let op = context
            .open(vec![target("gmail")])
            .expect("an empty registry");
        assert_eq!(registry.current("s1").and_then(|o| o.op_id()), op.op_id());

        let refused = context.open(vec![target("notion")]).unwrap_err();
        assert_eq!(refused.open, op.op_id());
        assert!(refused.message.contains("already open"), "{refused}");

        op.transition("gmail", TargetState::Skipped, Actor::User, Patch::default())
            .unwrap();
        assert!(op.is_settled(), "every target resolved");
        assert!(registry.current("s1").is_none(), "closed on settle");
        assert!(context.open(vec![target("notion")]).is_ok());
    }
}
