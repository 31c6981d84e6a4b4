//! The `manage_connections` tool: argument validation (SPEC §5.1), the status rendering
//! (§5.2), the pinned error texts, and the tool result.

use crate::operation::{OpId, Text};
use crate::payload::ModelResult;
use crate::tool_gateway::{ConnectorRow, GatewayError};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// What the tool was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolAction {
    /// List the connectors.
    Status,
    /// Mint links for the named connectors.
    Connect,
    /// Repair (or with `force`, redo) the named connectors.
    Reconnect,
}

impl ToolAction {
    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolAction::Status => "status",
            ToolAction::Connect => "connect",
            ToolAction::Reconnect => "reconnect",
        }
    }
}

/// Validated tool arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolArgs {
    /// The action.
    pub action: ToolAction,
    /// Trimmed, lower-cased, de-duplicated names in the order given.
    pub connectors: Vec<Text>,
    /// Reconnect without the repair check.
    pub force: bool,
}

/// Arguments the tool refuses, before any gateway call. `Display` is the pinned text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// The arguments are not a JSON object.
    #[error("the tool arguments must be a JSON object.")]
    NotAnObject,
    /// An action outside status, connect, reconnect.
    #[error(
        "action must be one of status, connect, reconnect. Disconnecting an account is done by the user in the connector portal, not through this tool."
    )]
    UnknownAction,
    /// `connectors` is neither null, a string, nor a list of strings.
    #[error("'connectors' must be a list of connector names.")]
    ConnectorsNotAList,
    /// A name that is empty after trimming.
    #[error("every target needs a non-empty 'name'.")]
    EmptyName,
    /// connect or reconnect without names.
    #[error(
        "'{0}' requires 'connectors': the connector slugs to authorize (e.g. [\"gmail\"]). Use action 'status' to list them."
    )]
    NamesRequired(&'static str),
}

/// A target's name as given (SPEC §5.1): trimmed and lower-cased; empty is refused. Callers
/// drop duplicates, keeping the first.
pub fn target_name(raw: &str) -> Result<Text, ArgError> {
    let name = raw.trim().to_lowercase();
    if name.is_empty() {
        return Err(ArgError::EmptyName);
    }
    Ok(name.into())
}

/// Validates the tool's arguments (SPEC §5.1).
pub fn parse_args(args: &Value) -> Result<ToolArgs, ArgError> {
    let empty = serde_json::Map::new();
    let obj = match args {
        Value::Object(map) => map,
        Value::Null => &empty,
        _ => return Err(ArgError::NotAnObject),
    };
    let action = match obj.get("action") {
        None | Some(Value::Null) => ToolAction::Status,
        Some(Value::String(s)) => match s.trim().to_lowercase().as_str() {
            "status" => ToolAction::Status,
            "connect" => ToolAction::Connect,
            "reconnect" => ToolAction::Reconnect,
            _ => return Err(ArgError::UnknownAction),
        },
        Some(_) => return Err(ArgError::UnknownAction),
    };
    let raw_names: Vec<&str> = match obj.get("connectors") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().ok_or(ArgError::ConnectorsNotAList))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ArgError::ConnectorsNotAList),
    };
    let mut connectors: Vec<Text> = Vec::with_capacity(raw_names.len());
    for raw in raw_names {
        let name = target_name(raw)?;
        if !connectors.contains(&name) {
            connectors.push(name);
        }
    }
    let force = matches!(obj.get("force"), Some(Value::Bool(true)));
    if action != ToolAction::Status && connectors.is_empty() {
        return Err(ArgError::NamesRequired(action.as_str()));
    }
    Ok(ToolArgs {
        action,
        connectors,
        force,
    })
}

/// The refusal when the session already has an open operation (SPEC §4).
pub fn already_open_text(op_id: OpId) -> String {
    format!(
        "a connection operation is already open in this session ({op_id}); it settles when the user finishes with the card, on Continue, or at its deadline. Do not start another."
    )
}

/// The error when a mint or a list read fails (SPEC §5.4).
pub fn gateway_failed_text(error: &GatewayError) -> String {
    format!(
        "The connector gateway request failed: {error}. If this persists, the user can manage connections in the connector portal."
    )
}

/// The detail of a target the local MCP catalog names and the gateway does not list.
pub fn misroute_detail(name: &str) -> String {
    format!(
        "{name} is a local MCP server, not a hosted connector account. Set it up as a local MCP server instead; this tool cannot connect it."
    )
}

/// The hint of the status action.
pub const STATUS_HINT: &str = "connected=false means calls to that connector will return CONNECTION_REQUIRED. Use action 'connect' to start an authorization.";

/// A name the gateway does not list, with the closest listed name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnknownName {
    /// The name asked for.
    pub name: Text,
    /// A listed name it probably meant, or null.
    pub did_you_mean: Option<Text>,
}

/// The status action's result (SPEC §5.2).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusResult {
    /// The rows, verbatim, filtered to the names asked for (if any).
    pub connectors: Vec<Value>,
    /// Names asked for that the gateway does not list.
    pub unknown: Vec<UnknownName>,
}

impl StatusResult {
    /// Renders the connector list for the names asked for.
    pub fn render(rows: &[ConnectorRow], names: &[Text]) -> Self {
        let connectors = rows
            .iter()
            .filter(|row| names.is_empty() || names.contains(&row.connector))
            .map(|row| row.raw.clone())
            .collect();
        let listed: Vec<&str> = rows.iter().map(|r| &*r.connector).collect();
        let unknown = names
            .iter()
            .filter(|n| !listed.contains(&&***n))
            .map(|n| UnknownName {
                name: n.clone(),
                did_you_mean: did_you_mean(n, &listed).map(Text::from),
            })
            .collect();
        StatusResult {
            connectors,
            unknown,
        }
    }
}

impl Serialize for StatusResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("connectors", &self.connectors)?;
        map.serialize_entry("hint", STATUS_HINT)?;
        if !self.unknown.is_empty() {
            map.serialize_entry("unknown", &self.unknown)?;
        }
        map.end()
    }
}

/// The listed name a user probably meant: equal after lower-casing and dropping `-`, `_` and
/// spaces; else the nearest within Levenshtein distance 2 (ties: list order); else none.
pub fn did_you_mean<'a>(name: &str, listed: &[&'a str]) -> Option<&'a str> {
    fn squash(s: &str) -> String {
        s.chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .flat_map(char::to_lowercase)
            .collect()
    }
    let wanted = squash(name);
    if let Some(hit) = listed.iter().find(|l| squash(l) == wanted) {
        return Some(hit);
    }
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in listed {
        let d = levenshtein(name, candidate);
        if d <= 2 && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Edit distance over characters.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// What the tool call returns.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolResult {
    /// connect / reconnect (SPEC §3.5).
    Model(ModelResult),
    /// status (SPEC §5.2).
    Status(StatusResult),
    /// `{"error": "<text>"}`.
    Error(String),
}

impl ToolResult {
    /// The error text, if this is an error.
    pub fn error(&self) -> Option<&str> {
        match self {
            ToolResult::Error(text) => Some(text),
            _ => None,
        }
    }

    /// The result as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The result as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolResult::Model(m) => m.serialize(s),
            ToolResult::Status(st) => st.serialize(s),
            ToolResult::Error(text) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("error", text)?;
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(args: Value) -> Vec<String> {
        parse_args(&args)
            .unwrap()
            .connectors
            .iter()
            .map(|n| n.to_string())
            .collect()
    }

    #[test]
    fn names_are_trimmed_lowered_and_deduplicated_in_order() {
        let got =
            names(json!({"action": " Connect ", "connectors": [" Gmail", "notion", "GMAIL"]}));
        assert_eq!(got, ["gmail", "notion"]);
        assert_eq!(
            names(json!({"action": "connect", "connectors": "Slack"})),
            ["slack"]
        );
        let status = parse_args(&json!({})).unwrap();
        assert_eq!(status.action, ToolAction::Status);
        assert!(status.connectors.is_empty());
        assert_eq!(parse_args(&Value::Null).unwrap().action, ToolAction::Status);
    }

    #[test]
    fn argument_errors_carry_the_pinned_texts() {
        let err = |v: Value| parse_args(&v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"action": "disconnect"})),
            "action must be one of status, connect, reconnect. Disconnecting an account is done by the user in the connector portal, not through this tool."
        );
        assert_eq!(err(json!({"action": "wait"})), err(json!({"action": 3})));
        assert_eq!(
            err(json!({"action": "connect", "connectors": [1]})),
            "'connectors' must be a list of connector names."
        );
        assert_eq!(
            err(json!({"connectors": {"a": 1}})),
            "'connectors' must be a list of connector names."
        );
        assert_eq!(
            err(json!({"action": "connect", "connectors": ["  "]})),
            "every target needs a non-empty 'name'."
        );
        assert_eq!(
            err(json!({"action": "reconnect"})),
            "'reconnect' requires 'connectors': the connector slugs to authorize (e.g. [\"gmail\"]). Use action 'status' to list them."
        );
        assert_eq!(
            err(json!({"action": "connect", "connectors": []})),
            "'connect' requires 'connectors': the connector slugs to authorize (e.g. [\"gmail\"]). Use action 'status' to list them."
        );
    }

    #[test]
    fn did_you_mean_prefers_squashed_equality_then_distance_then_order() {
        let listed = ["gmail", "google_calendar", "notion", "slack"];
        assert_eq!(
            did_you_mean("google-calendar", &listed),
            Some("google_calendar")
        );
        assert_eq!(
            did_you_mean("googlecalendar", &listed),
            Some("google_calendar")
        );
        assert_eq!(did_you_mean("gmial", &listed), Some("gmail"));
        assert_eq!(did_you_mean("notoin", &listed), Some("notion"));
        assert_eq!(did_you_mean("salesforce", &listed), None);
        // Both are at distance 2 from "xx": the tie goes to list order.
        assert_eq!(did_you_mean("xx", &["ab", "ax"]), Some("ax"));
        assert_eq!(did_you_mean("zz", &["ab", "cd"]), Some("ab"));
        assert_eq!(levenshtein("kitten", "sitting"), 3);
    }

    #[test]
    fn status_keeps_rows_verbatim_and_lists_unknown_names() {
        let rows = vec![
            ConnectorRow::new("gmail", true, true),
            ConnectorRow::new("notion", true, false).with_status_reason("expired token"),
        ];
        let names: Vec<Text> = vec!["notion".into(), "gmial".into(), "zzzzzz".into()];
        let v =
            serde_json::to_value(ToolResult::Status(StatusResult::render(&rows, &names))).unwrap();
        assert_eq!(
            v,
            json!({
                "connectors": [{"connector": "notion", "enabled": true, "connected": false, "statusReason": "expired token"}],
                "hint": STATUS_HINT,
                "unknown": [{"name": "gmial", "did_you_mean": "gmail"}, {"name": "zzzzzz", "did_you_mean": null}],
            })
        );
        let all = serde_json::to_value(StatusResult::render(&rows, &[])).unwrap();
        assert_eq!(all["connectors"].as_array().unwrap().len(), 2);
        assert!(all.get("unknown").is_none());
    }
}
