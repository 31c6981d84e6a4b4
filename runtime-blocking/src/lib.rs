//! # connop-blocking
//!
//! The runtime-neutral operation handle, and the blocking driver for synchronous hosts.
//!
//! - [`handle`]: what both runtimes share. An [`OpHandle`] is one running operation, reached
//!   from any thread (card answers, Continue, interrupt, and the host seams of
//!   docs/contract.md#host-seams: `transition`, `refresh`, `settle`, `view`, `result`); the
//!   [`SharedRegistry`] finds it by session; an [`Interrupt`] settles a turn's operations; a
//!   [`ToolContext`] starts a tool call. Every rule stays in the core.
//! - [`manage_connections`] runs one tool call on the calling thread: it loops on
//!   [`OpHandle::step`] and parks until the next timer or change, one re-armable deadline.
//!   Gateway calls run off the operation's thread, on a shared pool ([`WorkerCalls`]), or
//!   inline ([`InlineCalls`]) for an in-process gateway that answers at once.
//! - [`http`]: the tool gateway's HTTP client ([`http::HttpToolGateway`]).
//! - [`random`]: unguessable ids from the system's random source, drawn from one
//!   process-wide pool that a fork empties.

pub mod calls;
pub mod clock;
pub mod driver;
pub mod handle;
pub mod http;
pub mod random;

pub use calls::{CallQueue, InlineCalls, OnAnswer, WorkerCalls};
pub use clock::{Clock, SystemClock};
pub use driver::{manage_connections, run_to_end};
pub use handle::{
    AlreadyOpen, CallAnswer, CallStarter, CallsStarted, DriverCall, EventSink, Interrupt, Next,
    OpHandle, SharedRegistry, StartCalls, ToolContext,
};
