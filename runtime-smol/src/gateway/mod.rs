//! The parts of the `connop` binary: the JSON-RPC gateway and its transports, the terminal
//! card of `connop connect`.

pub mod card;
