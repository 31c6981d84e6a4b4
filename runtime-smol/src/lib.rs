//! # connop-smol
//!
//! Runs connection operations on smol: [`manage_connections`] is a future, so thousands of
//! operations share one executor. Gateway calls run concurrently inside each operation's
//! future; its timer is an `async_io::Timer` re-armed from the core's next wake-up. The
//! operation handle, registry, interrupt token and tool context are the ones of
//! [`connop_blocking`], so hosts use the same API on both runtimes.

#[cfg(feature = "app")]
pub mod app;
pub mod driver;
pub mod http;

pub use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
pub use driver::{manage_connections, run_to_end, run_tool_call};
