//! The `connop` application (feature `app`), behind `src/bin/connop.rs`:
//!
//! - servers: [`rpc`], the JSON-RPC server of SPEC §7 and its transports; [`api`], the HTTP
//!   API of runs and sessions (SPEC §9) with its store and turn executors; [`sim_gateway`],
//!   the simulated tool gateway (SPEC §6.1);
//! - state: [`store`], sessions and runs in SQLite or PostgreSQL (SPEC §9, §12.6);
//!   [`lease`], which live process holds a session (SPEC §9.3);
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
