//! The runtime-neutral operation handle, shared by both runtimes: the [`OpHandle`] every
//! thread or task reaches a running operation through, the process's [`SharedRegistry`], the
//! turn's [`Interrupt`], and the [`ToolContext`] a host starts a tool call with.
//!
//! The layers point one way: `op` (the handle and its pump) ← `registry`, `interrupt` ←
//! `context`. A driver owns nothing of the operation: it loops on [`OpHandle::step`] and
//! sleeps as the answer says, woken through the waker it registered there.

mod context;
mod interrupt;
mod op;
mod registry;

pub use context::{AlreadyOpen, ToolContext};
pub use interrupt::Interrupt;
pub use op::{
    CallAnswer, CallStarter, CallsStarted, DriverCall, EventSink, Next, OpHandle, OpShared,
    StartCalls, WaitThrough, waiting_through,
};
pub use registry::SharedRegistry;
