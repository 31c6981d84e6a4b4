//! The parts of the `connop` binary: the JSON-RPC gateway and its transports, the terminal
//! card of `connop connect`.

pub mod api;
pub mod card;
pub mod commands;
pub mod lease;
pub mod peer;
pub mod server;
pub mod transport;

pub use server::{Gateway, GatewayConfig};
pub use transport::serve;
