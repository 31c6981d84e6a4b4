//! The `connop` application (feature `app`), behind `src/bin/connop.rs`:
//!
//! - servers: [`rpc`], the JSON-RPC server of docs/protocol.md#overview and its transports;
//!   [`api`], the HTTP API of runs and sessions (docs/http-api.md#overview) with its store and turn
//!   executors; [`sim_gateway`], the simulated tool gateway
//!   (docs/contract.md#simulated-tool-gateway);
//! - state: [`store`], sessions and runs in SQLite or PostgreSQL (docs/http-api.md#overview and
//!   docs/operating.md#postgresql); [`lease`], which live process holds a session
//!   (docs/http-api.md#leases);
//! - [`cli`]: one module per subcommand (`gateway`, `connect` with its terminal card,
//!   `sim-gateway`, `peer dm`, `lease`), and [`error`], the errors they end with, split by
//!   blame; [`escape`], how remote text is shown on a terminal.
//!
//! The upstream *tool gateway* (the hosted service that mints links) and this process's
//! *JSON-RPC server* never share a name here.

pub mod api;
pub mod cli;
pub mod error;
pub mod escape;
pub mod lease;
pub mod net;
pub mod private_fs;
pub mod rpc;
pub mod sim_gateway;
pub mod store;
pub mod sync;
pub mod telemetry;
