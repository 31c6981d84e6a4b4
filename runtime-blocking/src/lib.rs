//! # connop-blocking
//!
//! Runs connection operations on the calling thread, for synchronous hosts.
//!
//! [`manage_connections`] runs one tool call: it starts the core's
//! [`Flow`](connop_core::flow::Flow), executes its effects (registry, gateway calls, events,
//! the result) and waits on one re-armable deadline for the next timer or change. Other
//! threads reach the operation through its [`OpHandle`] (card answers, Continue, interrupt,
//! and the SPEC §11 seams `transition`, `refresh`, `settle`, `view`), found in the
//! [`SharedRegistry`] or through the context's [`Interrupt`]. Every rule stays in the core.
//!
//! The pieces that do not depend on how a thread waits ([`OpHandle`], [`SharedRegistry`],
//! [`Interrupt`], [`ToolContext`], [`Clock`]) are shared with the smol runtime.

pub mod calls;
pub mod clock;
pub mod host;
pub mod http;
pub mod interrupt;
pub mod op;
pub mod registry;
pub mod sync;

pub use calls::{InlineCalls, WorkerCalls};
pub use clock::Clock;
pub use host::{ToolContext, manage_connections, run_to_end, run_tool_call};
pub use interrupt::Interrupt;
pub use op::{CallStarter, DriverStep, EventSink, OpEnv, OpHandle};
pub use registry::SharedRegistry;
