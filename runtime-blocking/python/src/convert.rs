//! JSON values to Python objects and back: payloads cross as plain `dict`/`list`/`str`, so a
//! Python host reads them like the JSON the other hosts get.
//!
//! Both directions are bounded by [`MAX_NESTING`] and a Python value that contains itself is
//! refused, so no value (a host's arguments, a card answer, a gateway object's answer) can
//! exhaust the stack: each is a Python exception that says where in the value it went wrong.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// How deep containers may nest in a value crossing between Python and Rust, the outermost
/// one included: 127, the deepest serde_json's parser takes (its recursion limit is 128), so a
/// Python value is taken exactly when its JSON text would be.
pub const MAX_NESTING: usize = 127;

/// How many steps of a path an error message shows before it elides the rest.
const PATH_SHOWN: usize = 8;

/// A JSON value as a Python object. A value nested past [`MAX_NESTING`] (which nothing
/// connop builds reaches) is a `ValueError`, not a deep recursion.
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    to_py_at(py, value, 0)
}

fn to_py_at<'py>(py: Python<'py>, value: &Value, depth: usize) -> PyResult<Bound<'py, PyAny>> {
    if matches!(value, Value::Array(_) | Value::Object(_)) && depth >= MAX_NESTING {
        return Err(PyValueError::new_err(format!(
            "a value for Python nests containers more than {MAX_NESTING} deep"
        )));
    }
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py_at(py, item, depth + 1)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, to_py_at(py, item, depth + 1)?)?;
            }
            dict.into_any()
        }
    })
}

/// A Python object as a JSON value: `None`, `bool`, `int`, `float`, `str`, dicts with string
/// keys, lists and tuples, nested at most [`MAX_NESTING`] deep. `what` names the value in
/// messages (`args`, `answer`). Another type, or a dict key that is not a `str`, is a
/// `TypeError`; a value nested too deep, one that contains itself, an integer outside JSON's
/// range or a float JSON cannot carry is a `ValueError`.
pub fn from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    from_py_at(obj, &mut Vec::new()).map_err(|mut failure| {
        failure.path.reverse();
        failure.into_err(what)
    })
}

/// One segment of the path into a value: a key or an index.
#[derive(Clone, Debug)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Why a value is refused; its path is collected on the way out (innermost segment first).
struct Failure {
    why: Why,
    path: Vec<Segment>,
}

enum Why {
    TooDeep,
    /// The container at this path is the one `at` steps from the top.
    Cycle {
        at: usize,
    },
    NotJson(String),
    KeyNotStr(String),
    IntOutOfRange,
    FloatNotJson(f64),
    Python(PyErr),
}

impl Failure {
    fn new(why: Why) -> Self {
        Failure {
            why,
            path: Vec::new(),
        }
    }

    fn into_err(self, what: &str) -> PyErr {
        let here = show_path(what, &self.path);
        match self.why {
            Why::TooDeep => PyValueError::new_err(format!(
                "{what} nests containers more than {MAX_NESTING} deep (at {here}): connop takes \
                 at most {MAX_NESTING} levels, as a JSON parser does"
            )),
            Why::Cycle { at } => PyValueError::new_err(format!(
                "{what} contains itself: {here} is {}",
                show_path(what, &self.path[..at])
            )),
            Why::NotJson(type_name) => PyTypeError::new_err(format!(
                "{here}: {} {type_name} is not JSON data (JSON data is None, bool, int, float, \
                 str, and dicts with str keys, lists and tuples of those)",
                article(&type_name)
            )),
            Why::KeyNotStr(type_name) => PyTypeError::new_err(format!(
                "{here}: a dict key that is not a str ({type_name}); JSON object keys are str"
            )),
            Why::IntOutOfRange => PyValueError::new_err(format!(
                "{here}: an integer outside JSON's range (-2**63 to 2**64 - 1)"
            )),
            Why::FloatNotJson(f) => PyValueError::new_err(format!(
                "{here}: {} is not a JSON number",
                if f.is_nan() {
                    "nan".to_owned()
                } else {
                    format!("{f}")
                }
            )),
            Why::Python(error) => error,
        }
    }
}

/// "a" or "an" before a type's name.
fn article(name: &str) -> &'static str {
    match name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u' | 'A' | 'E' | 'I' | 'O' | 'U') => "an",
        _ => "a",
    }
}

/// `args['a'][0]`, eliding the middle of a long path.
fn show_path(what: &str, path: &[Segment]) -> String {
    let mut out = what.to_owned();
    let show = |out: &mut String, segment: &Segment| match segment {
        Segment::Key(key) => {
            let _ = write!(out, "[{}]", python_str(key));
        }
        Segment::Index(i) => {
            let _ = write!(out, "[{i}]");
        }
    };
    if path.len() <= PATH_SHOWN {
        path.iter().for_each(|segment| show(&mut out, segment));
    } else {
        path[..PATH_SHOWN / 2]
            .iter()
            .for_each(|segment| show(&mut out, segment));
        let _ = write!(out, "…{} more…", path.len() - PATH_SHOWN);
        path[path.len() - PATH_SHOWN / 2..]
            .iter()
            .for_each(|segment| show(&mut out, segment));
    }
    out
}

/// A key as Python would write it in single quotes (shortened when long).
fn python_str(key: &str) -> String {
    let mut out = String::from("'");
    for (n, c) in key.chars().enumerate() {
        if n == 40 {
            out.push('…');
            break;
        }
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The conversion, with the containers on the way down to `obj` in `containers` (the cycle
/// check: a container met again on its own path). A container that appears twice side by
/// side is not a cycle and converts twice.
fn from_py_at(
    obj: &Bound<'_, PyAny>,
    containers: &mut Vec<*mut pyo3::ffi::PyObject>,
) -> Result<Value, Failure> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(Failure::new(Why::IntOutOfRange));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let f = f.value();
        return Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| Failure::new(Why::FloatNotJson(f)));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_cow()
            .map(|s| Value::String(s.into_owned()))
            .map_err(|e| Failure::new(Why::Python(e)));
    }
    let is_container = obj.cast::<PyDict>().is_ok()
        || obj.cast::<PyList>().is_ok()
        || obj.cast::<PyTuple>().is_ok();
    if !is_container {
        return Err(Failure::new(Why::NotJson(type_name(obj))));
    }
    let pointer = obj.as_ptr();
    if let Some(at) = containers.iter().position(|&p| p == pointer) {
        return Err(Failure::new(Why::Cycle { at }));
    }
    if containers.len() >= MAX_NESTING {
        return Err(Failure::new(Why::TooDeep));
    }
    containers.push(pointer);
    let value = container(obj, containers);
    containers.pop();
    value
}

/// A dict, list or tuple, each item converted one level down.
fn container(
    obj: &Bound<'_, PyAny>,
    containers: &mut Vec<*mut pyo3::ffi::PyObject>,
) -> Result<Value, Failure> {
    let item = |index: usize, item: &Bound<'_, PyAny>, containers: &mut Vec<_>| {
        from_py_at(item, containers).map_err(|mut failure| {
            failure.path.push(Segment::Index(index));
            failure
        })
    };
    // No Python code runs during the walk (nothing here calls into Python or makes a Python
    // object a collection could start from), so no container changes under its iterator.
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (key, value) in dict.iter() {
            let key = match key.cast::<PyString>() {
                Ok(key) => key
                    .to_cow()
                    .map_err(|e| Failure::new(Why::Python(e)))?
                    .into_owned(),
                Err(_) => return Err(Failure::new(Why::KeyNotStr(type_name(&key)))),
            };
            let value = from_py_at(&value, containers).map_err(|mut failure| {
                failure.path.push(Segment::Key(key.clone()));
                failure
            })?;
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list
            .iter()
            .enumerate()
            .map(|(index, next)| item(index, &next, containers))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    let tuple = obj
        .cast::<PyTuple>()
        .map_err(|e| Failure::new(Why::Python(e.into())))?;
    tuple
        .iter()
        .enumerate()
        .map(|(index, next)| item(index, &next, containers))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The name of `obj`'s type, for a message.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}
