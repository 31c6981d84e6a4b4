//! The contract's vocabulary as Python enums. Each member's `value` is the wire name; every
//! argument that takes one also takes that name as a `str`. Which moves are legal is decided
//! by the core alone.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

macro_rules! contract_enum {
    ($py:ident, $core:ty, $pyname:literal, $doc:literal, { $($variant:ident = $name:literal),+ $(,)? }) => {
        #[doc = $doc]
        #[pyclass(module = "connop", name = $pyname, eq, eq_int, frozen, hash)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $py {
            $(
                #[pyo3(name = $name)]
                $variant,
            )+
        }

        #[pymethods]
        impl $py {
            /// The wire name.
            #[getter]
            fn value(&self) -> &'static str {
                <$core>::from(*self).as_str()
            }

            fn __str__(&self) -> &'static str {
                self.value()
            }
        }

        impl From<$py> for $core {
            fn from(value: $py) -> $core {
                match value {
                    $($py::$variant => <$core>::$variant,)+
                }
            }
        }

        impl From<$core> for $py {
            fn from(value: $core) -> $py {
                match value {
                    $(<$core>::$variant => $py::$variant,)+
                }
            }
        }

        impl $py {
            /// The member, from itself or from its wire name.
            /// A miss costs no Python exception (a host's own `str` enum, whose members are
            /// the wire names, is read on every move).
            pub fn extract(obj: &Bound<'_, PyAny>) -> PyResult<$core> {
                if let Ok(member) = obj.cast::<$py>() {
                    return Ok((*member.get()).into());
                }
                if let Ok(name) = obj.cast::<PyString>() {
                    let name = name.to_cow()?;
                    $(
                        if name == <$core>::$variant.as_str() {
                            return Ok(<$core>::$variant);
                        }
                    )+
                    return Err(PyValueError::new_err(format!(
                        concat!("'{}' is not a ", $pyname), name
                    )));
                }
                Err(PyValueError::new_err(concat!("expected a ", $pyname, " or its name")))
            }
        }
    };
}

use connop_core::contract::{Actor, Kind, SettleReason, TargetAction, TargetState};

contract_enum!(PyTargetState, TargetState, "TargetState",
    "Where a target stands.", {
    Pending = "pending",
    Initiated = "initiated",
    Connected = "connected",
    Skipped = "skipped",
    Failed = "failed",
    Expired = "expired",
    NotConnected = "not_connected",
});

contract_enum!(PyActor, Actor, "Actor", "Who asks for a move; each edge has one.", {
    User = "user",
    BackendWatcher = "backend_watcher",
    Clock = "clock",
});

contract_enum!(PySettleReason, SettleReason, "SettleReason",
    "Why an operation settled (`continue_`: `continue` is a Python keyword).", {
    AllResolved = "all_resolved",
    Continue = "continue_",
    Deadline = "deadline",
    Interrupt = "interrupt",
});

contract_enum!(PyKind, Kind, "Kind", "What a target is.", {
    Connector = "connector",
    Mcp = "mcp",
});

contract_enum!(PyTargetAction, TargetAction, "TargetAction", "What was asked for a target.", {
    Connect = "connect",
    Reconnect = "reconnect",
    Install = "install",
    Enable = "enable",
    Authorize = "authorize",
});
