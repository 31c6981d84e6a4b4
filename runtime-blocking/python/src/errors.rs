//! The module's exceptions, split by blame like the core's errors.

use connop_core::card::{ANSWER_STATUSES, MalformedAnswer};
use connop_core::error::CallerError;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

create_exception!(
    connop,
    ConnopError,
    PyException,
    "Every error connop raises."
);

/// The two refusals of a caller's value: each a [`ConnopError`] and a `ValueError` at once,
/// which `create_exception!` (one base) cannot make, so they are made by `type()` once.
pub struct ValueErrors {
    pub illegal_transition: Py<PyType>,
    pub invalid_answer: Py<PyType>,
}

static VALUE_ERRORS: PyOnceLock<ValueErrors> = PyOnceLock::new();

/// [`ValueErrors`], made on first use.
pub fn value_errors(py: Python<'_>) -> PyResult<&ValueErrors> {
    VALUE_ERRORS.get_or_try_init(py, || {
        let make = |name: &str, doc: &str| -> PyResult<Py<PyType>> {
            let bases = PyTuple::new(
                py,
                [py.get_type::<ConnopError>(), py.get_type::<PyValueError>()],
            )?;
            let namespace = PyDict::new(py);
            namespace.set_item("__doc__", doc)?;
            namespace.set_item("__module__", "connop")?;
            let made = py.get_type::<PyType>().call1((name, bases, namespace))?;
            Ok(made.cast_into::<PyType>()?.unbind())
        };
        Ok(ValueErrors {
            illegal_transition: make(
                "IllegalTransition",
                "A move the transition table does not allow, or an unknown target: nothing \
                 changed.",
            )?,
            invalid_answer: {
                let made = make(
                    "InvalidAnswer",
                    "A card answer refused whole, nothing moved: not of the answer's shape, a \
                     status other than those in ``allowed`` (``skipped``, ``approved``), or a \
                     name that is not one of the operation's targets.",
                )?;
                made.bind(py)
                    .setattr("allowed", PyTuple::new(py, ANSWER_STATUSES)?)?;
                made
            },
        })
    })
}

/// An `IllegalTransition` saying `message`.
pub fn illegal_transition(message: String) -> PyErr {
    Python::attach(|py| match value_errors(py) {
        Ok(errors) => PyErr::from_type(errors.illegal_transition.bind(py).clone(), message),
        Err(error) => error,
    })
}

/// An `InvalidAnswer` saying `message`.
pub fn invalid_answer(message: String) -> PyErr {
    Python::attach(|py| match value_errors(py) {
        Ok(errors) => PyErr::from_type(errors.invalid_answer.bind(py).clone(), message),
        Err(error) => error,
    })
}
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

/// The allowed answer statuses, quoted for a message.
fn allowed_statuses() -> String {
    ANSWER_STATUSES
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(" or ")
}

/// A card answer not of the answer's shape, in the Python API's words.
pub fn malformed_answer(error: MalformedAnswer) -> PyErr {
    let shape = "{'targets': [{'name': str, 'status': str}, ...], 'settled_by': 'continue'} \
                 (both keys optional)";
    invalid_answer(match error {
        MalformedAnswer::NotAnObject => format!("a card answer is a dict {shape}"),
        MalformedAnswer::BadTargets => {
            format!("answer['targets'] must be a list of {{'name': str, 'status': str}}: {shape}")
        }
        MalformedAnswer::BadSettledBy => {
            "answer['settled_by'] must be 'continue' when present".to_owned()
        }
    })
}

/// A refused input as the exception of its kind.
pub fn caller_error(error: CallerError) -> PyErr {
    match error {
        CallerError::Transition(e) => illegal_transition(e.to_string()),
        CallerError::InvalidAnswer { status } => invalid_answer(format!(
            "Connection answer is invalid: status '{status}'; a card answer's status is {}",
            allowed_statuses()
        )),
        CallerError::UnknownAnswerTarget { .. } => invalid_answer(error.to_string()),
        CallerError::NoOperation => NoOperation::new_err(error.to_string()),
        other => ConnopError::new_err(other.to_string()),
    }
}
