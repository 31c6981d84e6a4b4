//! The `connop` application (feature `app`): the JSON-RPC server and its transports, the HTTP
//! API of runs and sessions, leases, `peer dm`, the terminal card of `connop connect`, the
//! simulated tool gateway, and the command line behind `src/bin/connop.rs`.

pub mod api;
pub mod card;
pub mod cli;
pub mod lease;
pub mod peer;
pub mod rpc;
pub mod sim_gateway;
