//! The HTTP API of docs/http-api.md#overview (`connop gateway --http ADDR`): runs with server-sent
//! events, sessions and session chat. Every request passes the listener's guard first
//! ([`crate::net::guard`]: its `Host`, and for a write its JSON body and `Origin`); every
//! route but `/health` then requires `Authorization: Bearer K` when a key is set. Without a
//! key the API answers only to its loopback names, whatever `--allow-host` says: any local
//! process may use it. Errors are OpenAI-style: `{"error": {"message", "type", "code"}}`.
//!
//! The HTTP API never acquires a lease and is never refused by one: a desktop lease is a
//! viewer, so every turn runs here, and no delivery record is ever written.
//!
//! - `routes`: from a request to its handler, and the answer's shape;
//! - `runs`, `sessions`, `events`: the handlers (runs, sessions and chat, event streams);
//! - [`executor`]: who answers turns; the store ([`crate::store`]) keeps sessions,
//!   runs, their events and idempotency keys, in SQLite or PostgreSQL.
//!
//! Nothing of a run stays in memory but the stop switch of a turn running here: `GET`, stops
//! and event streams read the store, so any replica answers for any run.

mod error;
mod events;
pub mod executor;
mod input;
mod routes;
mod runs;
mod server;
mod sessions;

pub use error::ApiError;
pub use routes::Body as ResponseBody;
pub use server::{Api, ApiConfig, DEFAULT_MAX_BODY};
