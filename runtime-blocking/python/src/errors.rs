//! The module's exceptions, split by blame like the core's errors.

use connop_core::error::CallerError;
use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};

create_exception!(
    connop,
    ConnopError,
    PyException,
    "Every error connop raises."
);
create_exception!(
    connop,
    IllegalTransition,
    PyValueError,
    "A move the transition table does not allow, or an unknown target: nothing changed."
);
create_exception!(
    connop,
    InvalidAnswer,
    PyValueError,
    "A card answer with a status other than `skipped` or `approved`: nothing moved."
);
create_exception!(
    connop,
    NoOperation,
    ConnopError,
    "The tool call has no connection operation (a status call, refused arguments)."
);
create_exception!(
    connop,
    OperationAlreadyOpen,
    ConnopError,
    "The session already has an open operation; `args[1]` is its op id."
);
create_exception!(
    connop,
    GatewayClientError,
    ConnopError,
    "connop's HTTP client could not be built."
);

/// A refused input as the exception of its kind.
pub fn caller_error(error: CallerError) -> PyErr {
    match error {
        CallerError::Transition(e) => IllegalTransition::new_err(e.to_string()),
        CallerError::InvalidAnswer { .. } => InvalidAnswer::new_err(error.to_string()),
        CallerError::NoOperation => NoOperation::new_err(error.to_string()),
        other => ConnopError::new_err(other.to_string()),
    }
}
