//! The JSON-RPC protocol of docs/protocol.md#overview as pure functions: a line in, a request or a
//! framing error out; the parameter checks in their pinned order; the error objects and the answer,
//! result and event lines; and the [`SessionTable`] that decides who owns which session.
//!
//! A transport only moves lines and the server only holds the lock; which code an input
//! earns is decided here. This module only presents its two parts: `protocol` (lines,
//! parameters, errors) and `sessions` (the table).

mod protocol;
mod sessions;

pub use protocol::*;
pub use sessions::{
    Admitted, Call, Created, ManageParams, NewSession, Session, SessionRequest, SessionTable,
    TransportId,
};
