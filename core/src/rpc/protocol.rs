//! The protocol's lines and parameters: a line in, a request or a framing error out; the
//! parameter checks in their pinned order; the error objects and the answer, result and
//! event lines.

use crate::card::CardAnswer;
use crate::error::CallerError;
use crate::operation::OpId;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::fmt;

/// The longest line a transport accepts (1 MiB); longer ones are refused with `-32600`.
pub const MAX_LINE: usize = 1 << 20;

/// The methods of the JSON-RPC protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `session.create`
    SessionCreate,
    /// `session.interrupt`
    SessionInterrupt,
    /// `session.close`
    SessionClose,
    /// `connectors.manage`
    ConnectorsManage,
    /// `connectors.list`
    ConnectorsList,
    /// `connectors.operation.status`
    OperationStatus,
    /// `connection.respond`
    ConnectionRespond,
    /// `connection.returned`: the browser came back (a return hint, docs/contract.md#return-hints).
    ConnectionReturned,
}

impl Method {
    /// Parses a method name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "session.create" => Method::SessionCreate,
            "session.interrupt" => Method::SessionInterrupt,
            "session.close" => Method::SessionClose,
            "connectors.manage" => Method::ConnectorsManage,
            "connectors.list" => Method::ConnectorsList,
            "connectors.operation.status" => Method::OperationStatus,
            "connection.respond" => Method::ConnectionRespond,
            "connection.returned" => Method::ConnectionReturned,
            _ => return None,
        })
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::SessionCreate => "session.create",
            Method::SessionInterrupt => "session.interrupt",
            Method::SessionClose => "session.close",
            Method::ConnectorsManage => "connectors.manage",
            Method::ConnectorsList => "connectors.list",
            Method::OperationStatus => "connectors.operation.status",
            Method::ConnectionRespond => "connection.respond",
            Method::ConnectionReturned => "connection.returned",
        }
    }
}

/// A well-formed request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The JSON-RPC id; `None` for a notification (no `id` member), which is carried out but
    /// never answered. An explicit `"id": null` is a request, answered with a null id.
    pub id: Option<Value>,
    /// The method.
    pub method: Method,
    /// The params object (empty when absent).
    pub params: Map<String, Value>,
}

/// A JSON-RPC error: `{"code", "message", "data": {"reason"}}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The human-readable message.
    pub message: String,
    /// The machine-readable reason.
    pub reason: &'static str,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl RpcError {
    fn new(code: i64, reason: &'static str, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            reason,
        }
    }

    /// `-32700`: the line is not JSON.
    pub fn parse_error() -> Self {
        Self::new(-32700, "PARSE_ERROR", "the line is not valid JSON")
    }

    /// `-32600`: not a request object, or no method.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(-32600, "INVALID_REQUEST", message)
    }

    /// `-32600`: a line longer than [`MAX_LINE`].
    pub fn line_too_long() -> Self {
        Self::invalid_request("the line is longer than 1 MiB")
    }

    /// `-32602`: params is not an object.
    pub fn params_not_an_object() -> Self {
        Self::new(-32602, "INVALID_PARAMS", "params must be an object")
    }

    /// `-32601`: `unknown method: <name>`.
    pub fn method_not_found(name: &str) -> Self {
        Self::new(
            -32601,
            "METHOD_NOT_FOUND",
            format!("unknown method: {name}"),
        )
    }

    /// `4000`: `session_id required`.
    pub fn session_id_required() -> Self {
        Self::new(4000, "INVALID_PARAMS", "session_id required")
    }

    /// `4000`: `session already exists`.
    pub fn session_exists() -> Self {
        Self::new(4000, "INVALID_PARAMS", "session already exists")
    }

    /// `4000`: another invalid parameter.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(4000, "INVALID_PARAMS", message)
    }

    /// `4001`: a stranger transport, or no such session.
    pub fn not_owner() -> Self {
        Self::new(
            4001,
            "NOT_OWNER",
            "session not found or not owned by this transport",
        )
    }

    /// `4000`: `op_id required`.
    pub fn op_id_required() -> Self {
        Self::new(4000, "INVALID_PARAMS", "op_id required")
    }

    /// `4004`: no open operation with that id (a settled one has been closed).
    pub fn unknown_operation() -> Self {
        Self::new(
            4004,
            "UNKNOWN_OPERATION",
            "no open operation with that op_id in this session",
        )
    }

    /// `4002`: `Connection answer is invalid.` (nothing moved).
    pub fn invalid_answer() -> Self {
        Self::new(4002, "INVALID_ANSWER", "Connection answer is invalid.")
    }

    /// `5034`: the tool gateway failed.
    pub fn connector_request_failed(reason: impl fmt::Display) -> Self {
        Self::new(
            5034,
            "CONNECTOR_REQUEST_FAILED",
            format!("The connector gateway request failed: {reason}"),
        )
    }

    /// The error object.
    pub fn to_value(&self) -> Value {
        json!({"code": self.code, "message": self.message, "data": {"reason": self.reason}})
    }
}

/// Why a line was refused before it became a request, with the id to answer under.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    /// The request's id if it could be read, else `null`; `None` for a notification (a
    /// well-formed object with a method and no `id`), which is never answered, not even with
    /// an error.
    pub id: Option<Value>,
    /// The framing error.
    pub error: RpcError,
}

/// Parses one line (without its newline) into a request, or the framing error to answer.
///
/// JSON-RPC 2.0's rules on what is answered: a line that is no request object (not JSON,
/// not an object, no string `method`, a `jsonrpc` other than `"2.0"`) is an invalid request,
/// answered under its `id` or `null`; an object with a method and no `id` is a notification,
/// never answered, even when its method or params are refused. A missing `jsonrpc` member is
/// tolerated (older clients omit it); a wrong one is refused.
pub fn parse_line(line: &[u8]) -> Result<Request, Refused> {
    let refuse = |id: Option<Value>, error| Err(Refused { id, error });
    if line.len() > MAX_LINE {
        return refuse(Some(Value::Null), RpcError::line_too_long());
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(_) => return refuse(Some(Value::Null), RpcError::parse_error()),
    };
    let Value::Object(mut object) = value else {
        return refuse(
            Some(Value::Null),
            RpcError::invalid_request("a request must be a JSON object"),
        );
    };
    let id = object.remove("id");
    // Not a request at all: answered, under its id or null.
    let answered = || Some(id.clone().unwrap_or(Value::Null));
    match object.get("jsonrpc") {
        None => {}
        Some(Value::String(version)) if version == "2.0" => {}
        Some(_) => {
            return refuse(
                answered(),
                RpcError::invalid_request("jsonrpc must be \"2.0\""),
            );
        }
    }
    let name = match object.remove("method") {
        Some(Value::String(name)) => name,
        Some(_) => {
            return refuse(
                answered(),
                RpcError::invalid_request("method must be a string"),
            );
        }
        None => {
            return refuse(
                answered(),
                RpcError::invalid_request("a request needs a method"),
            );
        }
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => return refuse(id, RpcError::params_not_an_object()),
    };
    match Method::parse(&name) {
        Some(method) => Ok(Request { id, method, params }),
        None => refuse(id, RpcError::method_not_found(&name)),
    }
}

/// Whether `line` (without its newline) is an HTTP request line: a method token, a target, and
/// `HTTP/<version>`, one space apart (`POST / HTTP/1.1`, `GET /x?y HTTP/1.0`,
/// `PRI * HTTP/2.0`). A web page or another program speaking HTTP to a JSON-RPC listener
/// sends one first; no JSON value looks like one. A transport whose first line is one closes
/// without answering and runs nothing that follows (the body of such a request may well hold
/// valid JSON-RPC lines, put there by a page of another site).
pub fn is_http_request_line(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|b| *b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let digits = |v: &[u8]| match v {
        [major] => major.is_ascii_digit(),
        [major, b'.', minor] => major.is_ascii_digit() && minor.is_ascii_digit(),
        _ => false,
    };
    !method.is_empty()
        && method.iter().all(token)
        && !target.is_empty()
        && target.iter().all(u8::is_ascii_graphic)
        && version.strip_prefix(b"HTTP/").is_some_and(digits)
}

/// The line that answers a request with `id`: the result or the error, or nothing for a
/// notification (`None`).
pub fn reply_line(id: Option<&Value>, outcome: Result<&Value, &RpcError>) -> Option<String> {
    let id = id?;
    Some(match outcome {
        Ok(result) => result_line(id, result),
        Err(error) => error_line(id, error),
    })
}

/// The answer line for a result, written straight from it (no JSON value built first: a
/// tool result is written once, as it goes out).
pub fn result_line(id: &Value, result: &impl Serialize) -> String {
    #[derive(Serialize)]
    struct Line<'a, R> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a R,
    }
    line(&Line {
        jsonrpc: "2.0",
        id,
        result,
    })
    .unwrap_or_else(|| result_line(id, &Value::Null))
}

/// The answer line for an error.
pub fn error_line(id: &Value, error: &RpcError) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_value()}).to_string()
}

/// An event line: `{"jsonrpc": "2.0", "method": "event", "params": {"type", "session_id", "payload"}}`,
/// written straight from the payload.
pub fn event_line(kind: &str, session_id: &str, payload: &impl Serialize) -> String {
    #[derive(Serialize)]
    struct Line<'a, P> {
        jsonrpc: &'static str,
        method: &'static str,
        params: Params<'a, P>,
    }
    #[derive(Serialize)]
    struct Params<'a, P> {
        #[serde(rename = "type")]
        kind: &'a str,
        session_id: &'a str,
        payload: &'a P,
    }
    line(&Line {
        jsonrpc: "2.0",
        method: "event",
        params: Params {
            kind,
            session_id,
            payload,
        },
    })
    .unwrap_or_else(|| event_line(kind, session_id, &Value::Null))
}

/// One line of JSON; `None` if the value cannot be written as JSON (a map with keys that are
/// no strings), which the caller answers with `null` in its place.
fn line(value: &impl Serialize) -> Option<String> {
    serde_json::to_string(value).ok()
}

/// The first check of every session method: `session_id` present (a non-empty string).
pub fn session_id(params: &Map<String, Value>) -> Result<&str, RpcError> {
    match params.get("session_id") {
        Some(Value::String(id)) if !id.is_empty() => Ok(id),
        _ => Err(RpcError::session_id_required()),
    }
}

/// The op id, after the ownership check: missing → `op_id required`; a value that is no op id
/// can name no open operation → `4004`.
pub fn op_id(params: &Map<String, Value>) -> Result<OpId, RpcError> {
    match params.get("op_id") {
        None | Some(Value::Null) => Err(RpcError::op_id_required()),
        Some(Value::String(text)) if text.is_empty() => Err(RpcError::op_id_required()),
        Some(Value::String(text)) => OpId::parse(text).ok_or_else(RpcError::unknown_operation),
        Some(_) => Err(RpcError::unknown_operation()),
    }
}

/// The card answer of `connection.respond`, after the operation was found: a malformed
/// answer is `4000`.
pub fn card_answer(params: &Map<String, Value>) -> Result<CardAnswer, RpcError> {
    let result = params.get("result").unwrap_or(&Value::Null);
    CardAnswer::from_json(result).map_err(|e| RpcError::invalid_params(e.to_string()))
}

/// The error a refused card answer earns.
pub fn answer_refused(error: &CallerError) -> RpcError {
    match error {
        CallerError::InvalidAnswer { .. } => RpcError::invalid_answer(),
        other => RpcError::invalid_params(other.to_string()),
    }
}

/// The reply to `connection.returned`: `{"status": "ok", "read": <bool>}`, `read` false
/// when nothing was live to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HintReply {
    /// Whether a live row was there to read.
    pub read: bool,
}

impl Serialize for HintReply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("status", "ok")?;
        map.serialize_entry("read", &self.read)?;
        map.end()
    }
}

/// The error a refused return hint earns: an unknown target is `4000`
/// `unknown target '<name>'`.
pub fn hint_refused(error: &CallerError) -> RpcError {
    RpcError::invalid_params(error.to_string())
}

/// An optional string parameter; a non-string is `4000`.
pub fn optional_str<'a>(
    params: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_params(format!("{key} must be a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(line: &str) -> (Value, i64) {
        let r = parse_line(line.as_bytes()).unwrap_err();
        (r.id.expect("answered"), r.error.code)
    }

    #[test]
    fn a_notification_is_carried_out_and_never_answered() {
        let note = parse_line(
            br#"{"jsonrpc": "2.0", "method": "session.close", "params": {"session_id": "s"}}"#,
        )
        .unwrap();
        assert_eq!(
            (note.id.as_ref(), note.method),
            (None, Method::SessionClose)
        );
        assert_eq!(
            reply_line(note.id.as_ref(), Ok(&json!({"status": "ok"}))),
            None
        );
        // Refused notifications are not answered either: no id, no line.
        for line in [
            r#"{"jsonrpc": "2.0", "method": "no.such.method"}"#,
            r#"{"jsonrpc": "2.0", "method": "session.create", "params": [1]}"#,
        ] {
            let refused = parse_line(line.as_bytes()).unwrap_err();
            assert_eq!(refused.id, None, "{line}");
            assert_eq!(reply_line(refused.id.as_ref(), Err(&refused.error)), None);
        }
        // An explicit null id is a request, answered with a null id.
        let null = parse_line(br#"{"id": null, "method": "session.create"}"#).unwrap();
        assert_eq!(
            reply_line(null.id.as_ref(), Ok(&json!(1))).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":null,"result":1}"#)
        );
        // What is no request at all is answered, under null when it has no id.
        assert_eq!(refused(r#"{"method": 5}"#), (Value::Null, -32600));
        assert_eq!(refused(r#"{"params": {}}"#), (Value::Null, -32600));
    }

    #[test]
    fn a_jsonrpc_version_other_than_2_0_is_an_invalid_request() {
        for version in [r#""1.0""#, r#""2""#, "2.0", "null", r#""2.0 ""#] {
            let line = format!(r#"{{"jsonrpc": {version}, "id": 9, "method": "session.create"}}"#);
            let wrong = parse_line(line.as_bytes()).unwrap_err();
            assert_eq!(
                (wrong.id, wrong.error.code),
                (Some(json!(9)), -32600),
                "{line}"
            );
            assert_eq!(wrong.error.message, r#"jsonrpc must be "2.0""#);
            // Without an id it is still no request: answered under null.
            let line = format!(r#"{{"jsonrpc": {version}, "method": "session.create"}}"#);
            assert_eq!(refused(&line), (Value::Null, -32600));
        }
        assert!(parse_line(br#"{"jsonrpc": "2.0", "id": 1, "method": "session.create"}"#).is_ok());
        assert!(parse_line(br#"{"id": 1, "method": "session.create"}"#).is_ok());
    }

    #[test]
    fn framing_errors_get_their_codes() {
        assert_eq!(refused("{not json"), (Value::Null, -32700));
        assert_eq!(refused("[1, 2]"), (Value::Null, -32600));
        assert_eq!(refused(r#"{"id": 3}"#), (json!(3), -32600));
        assert_eq!(refused(r#"{"id": 3, "method": 7}"#), (json!(3), -32600));
        assert_eq!(
            refused(r#"{"id": 4, "method": "session.create", "params": [1]}"#),
            (json!(4), -32602)
        );
        let nope = parse_line(br#"{"id": "x", "method": "nope"}"#).unwrap_err();
        assert_eq!(nope.id, Some(json!("x")));
        assert_eq!(nope.error.code, -32601);
        assert_eq!(nope.error.message, "unknown method: nope");
        let long = format!(
            r#"{{"method": "session.create", "pad": "{}"}}"#,
            "x".repeat(MAX_LINE)
        );
        assert_eq!(refused(&long).1, -32600);
    }

    #[test]
    fn nesting_past_the_recursion_limit_is_a_parse_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(refused(&deep), (Value::Null, -32700));
        let params = format!(
            r#"{{"id": 1, "method": "session.create", "params": {{"a": {}1{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(refused(&params), (Value::Null, -32700));
    }

    #[test]
    fn a_request_parses_with_defaults() {
        let r = parse_line(br#"{"jsonrpc": "2.0", "id": 7, "method": "session.create"}"#).unwrap();
        assert_eq!(
            (r.id, r.method, r.params.len()),
            (Some(json!(7)), Method::SessionCreate, 0)
        );
        for m in [
            Method::SessionCreate,
            Method::SessionInterrupt,
            Method::SessionClose,
            Method::ConnectorsManage,
            Method::ConnectorsList,
            Method::OperationStatus,
            Method::ConnectionRespond,
        ] {
            assert_eq!(Method::parse(m.as_str()), Some(m));
        }
    }

    #[test]
    fn parameter_checks_carry_the_pinned_codes() {
        let params = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(session_id(&params(json!({}))).unwrap_err().code, 4000);
        assert_eq!(
            session_id(&params(json!({"session_id": ""})))
                .unwrap_err()
                .message,
            "session_id required"
        );
        assert_eq!(session_id(&params(json!({"session_id": "s"}))), Ok("s"));
        assert_eq!(
            op_id(&params(json!({}))).unwrap_err().message,
            "op_id required"
        );
        assert_eq!(
            op_id(&params(json!({"op_id": "zz"}))).unwrap_err().code,
            4004
        );
        assert!(op_id(&params(json!({"op_id": "0123456789ab"}))).is_ok());
        assert_eq!(
            card_answer(&params(json!({"result": []})))
                .unwrap_err()
                .code,
            4000
        );
        assert_eq!(
            card_answer(&params(json!({"result": {"settled_by": "deadline"}})))
                .unwrap_err()
                .code,
            4000
        );
        let invalid = CallerError::InvalidAnswer {
            status: "connected".into(),
        };
        assert_eq!(
            answer_refused(&invalid).to_value(),
            json!({"code": 4002, "message": "Connection answer is invalid.", "data": {"reason": "INVALID_ANSWER"}})
        );
        assert_eq!(
            RpcError::not_owner().to_value()["data"]["reason"],
            "NOT_OWNER"
        );
    }

    #[test]
    fn lines_are_json_rpc() {
        let line = result_line(&json!(7), &json!({"status": "ok"}));
        assert_eq!(line, r#"{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}"#);
        let line = error_line(&Value::Null, &RpcError::parse_error());
        assert!(line.contains(r#""code":-32700"#) && line.contains(r#""reason":"PARSE_ERROR""#));
        let line = event_line("connection.update", "s1", &json!({"seq": 1}));
        assert_eq!(
            line,
            r#"{"jsonrpc":"2.0","method":"event","params":{"type":"connection.update","session_id":"s1","payload":{"seq":1}}}"#
        );
    }

    /// Written straight from the typed value, a line has the bytes it had when the value
    /// went through a `serde_json::Value` first; one that cannot be JSON carries `null`.
    #[test]
    fn lines_written_from_typed_values_match_the_value_route() {
        use crate::tool::ToolResult;
        use std::collections::BTreeMap;
        let mut map = BTreeMap::new();
        map.insert(2, vec![1.5, -0.0]);
        map.insert(10, vec![f64::MAX]);
        let result = ToolResult::Error("refused \"x\"\n".into());
        let via_value =
            |id: &Value, v: Value| json!({"jsonrpc": "2.0", "id": id, "result": v}).to_string();
        for id in [json!(7), json!("a"), Value::Null] {
            assert_eq!(
                result_line(&id, &result),
                via_value(&id, serde_json::to_value(&result).unwrap())
            );
            assert_eq!(
                result_line(&id, &map),
                via_value(&id, serde_json::to_value(&map).unwrap())
            );
        }
        let event = json!({"jsonrpc": "2.0", "method": "event",
            "params": {"type": "t", "session_id": "s", "payload": serde_json::to_value(&map).unwrap()}});
        assert_eq!(event_line("t", "s", &map), event.to_string());
        // Keys that are no strings cannot be JSON: the line still goes out, with null.
        let mut odd = BTreeMap::new();
        odd.insert((1, 2), 3);
        assert_eq!(
            result_line(&json!(1), &odd),
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#
        );
        assert!(event_line("t", "s", &odd).ends_with(r#""payload":null}}"#));
    }

    #[test]
    fn http_request_lines_are_told_from_json() {
        for http in [
            &b"POST / HTTP/1.1"[..],
            b"GET /x?y=1 HTTP/1.0\r",
            b"PRI * HTTP/2.0",
            b"OPTIONS * HTTP/1.1",
            b"get /lower HTTP/1.1",
            b"M-SEARCH * HTTP/1.1",
            b"GET http://127.0.0.1:7/ HTTP/1.1",
        ] {
            assert!(
                is_http_request_line(http),
                "{:?}",
                String::from_utf8_lossy(http)
            );
        }
        for not in [
            &br#"{"jsonrpc": "2.0", "id": 1, "method": "session.create"}"#[..],
            b"",
            b"POST / HTTP/1.1 extra",
            b"POST  / HTTP/1.1",
            b"POST / HTTP/1.10",
            b"POST / HTTPS/1.1",
            b"POST / http/1.1",
            b"Host: x",
            b"POST / HTTP/",
            b"\"POST\" / HTTP/1.1",
            b"[1, 2] / HTTP/1.1",
            b"POST /\x01 HTTP/1.1",
        ] {
            assert!(
                !is_http_request_line(not),
                "{:?}",
                String::from_utf8_lossy(not)
            );
        }
    }
}
