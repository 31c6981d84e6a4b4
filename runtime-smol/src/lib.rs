//! # connop-smol
//!
//! Runs connection operations on smol (or any executor): [`manage_connections`] is a future,
//! so thousands of operations share one executor. Gateway calls run concurrently inside each
//! operation's future; timers are coalesced, so operations due in the same slot share one
//! wake-up. The operation handle, registry, interrupt token and tool context are the ones of
//! [`connop_blocking::handle`], so hosts use the same API on both runtimes.
//!
//! This crate is the runtime only: the driver and the async HTTP client of the tool gateway.
//! The `connop` application (JSON-RPC server, HTTP API, store, card, simulated tool gateway)
//! is the unpublished `connop-app` crate beside it (`runtime-smol/app/`).

pub mod driver;
pub mod http;
mod timers;

pub use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
pub use driver::{manage_connections, run_to_end};
