//! # connop-smol
//!
//! Runs connection operations on smol (or any executor): [`manage_connections`] is a future,
//! so thousands of operations share one executor. Gateway calls run concurrently inside each
//! operation's future; timers are coalesced, so operations due in the same slot share one
//! wake-up. The operation handle, registry, interrupt token and tool context are the ones of
//! [`connop_blocking::handle`], so hosts use the same API on both runtimes.
//!
//! With `default-features = false` this crate is the runtime only: the driver and the async
//! HTTP client of the tool gateway. The default `app` feature adds the `connop` application.

#[cfg(feature = "app")]
pub mod app;
pub mod driver;
pub mod http;
mod timers;

pub use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
pub use driver::{manage_connections, run_to_end};
