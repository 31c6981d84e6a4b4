//! Errors by blame. [`CallerError`]: the host driving the core (or the card client through
//! it) asked for something the contract does not allow; nothing changed. Gateway misbehaviour
//! is [`GatewayError`](crate::tool_gateway::GatewayError), which the core absorbs into the flow.

use crate::operation::TransitionError;

/// Caller misuse: the input was refused and nothing changed.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallerError {
    /// A move the transition table does not allow, or an unknown target.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// A card answer with a status other than `skipped` or `approved` (4002).
    #[error("Connection answer is invalid.")]
    InvalidAnswer {
        /// The offending status.
        status: String,
    },
    /// A card answer from a host's API naming a target the operation does not have.
    #[error("the answer names '{name}', which is not a target of this operation (its targets: {})", targets.join(", "))]
    UnknownAnswerTarget {
        /// The name in the answer.
        name: String,
        /// The operation's targets.
        targets: Vec<String>,
    },
    /// The tool call has no connection operation (a status call, refused arguments).
    #[error("this tool call has no connection operation")]
    NoOperation,
    /// A registration asked of an operation the host did not make detached, or of one
    /// already settled.
    #[error("only an open operation made by its host registers on the host's request")]
    NotDetached,
    /// A gateway reply of another kind than the call asked for: a runtime bug. The call is
    /// treated as answered with an invalid response so the flow never hangs on it.
    #[error("gateway call {call} expected a {expected} reply, got {got}")]
    ReplyMismatch {
        /// The call.
        call: crate::tool_gateway::CallId,
        /// What the call was.
        expected: &'static str,
        /// What came back.
        got: &'static str,
    },
}
