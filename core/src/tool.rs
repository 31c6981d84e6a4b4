//! The `manage_connections` tool: argument validation (docs/contract.md#arguments), the status
//! rendering (docs/contract.md#status-action), the pinned error texts, and the tool result.

use crate::operation::{OpId, Text};
use crate::payload::ModelResult;
use crate::tool_gateway::ConnectorRow;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

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
    /// Whose words the call's texts and results speak.
    pub dialect: Dialect,
}

/// Whose words and argument forms the tool speaks (a host picks one; every rule is the same).
///
/// - [`Connop`](Self::Connop): connop's own: names are strings; the texts name the connector
///   portal.
/// - [`Original`](Self::Original): the original agent system's tool, for a host that lays its
///   module layout over connop: a target may also be `{"name": …}` (or `{"name": …, "mcp":
///   true}` for a local MCP server, whose actions `install`, `enable`, `authorize` it names and
///   refuses), the texts are that system's word for word, and the status action matches names
///   through `-`/`_`/space spellings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// connop's own words.
    #[default]
    Connop,
    /// The original agent system's words and argument forms.
    Original,
}

/// The actions of a local MCP server, which connop names (in the original's words) only to
/// refuse: it runs hosted connectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McpAction {
    /// Install from the catalog.
    Install,
    /// Turn on a configured server.
    Enable,
    /// Authorize a configured server.
    Authorize,
}

impl McpAction {
    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            McpAction::Install => "install",
            McpAction::Enable => "enable",
            McpAction::Authorize => "authorize",
        }
    }
}

/// Names joined for a text: `a, b`.
fn joined(names: &[Text]) -> String {
    names.iter().map(|n| &**n).collect::<Vec<_>>().join(", ")
}

/// Arguments the tool refuses, before any gateway call. `Display` is the pinned text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// The arguments are not a JSON object.
    #[error("the tool arguments must be a JSON object.")]
    NotAnObject,
    /// An action the tool does not know.
    #[error("{}", match .0 {
        Dialect::Connop => "action must be one of status, connect, reconnect. Disconnecting an account is done by the user in the connector portal, not through this tool.",
        Dialect::Original => "action must be one of status, connect, reconnect, install, enable, authorize. install, enable, authorize apply to local MCP servers (targets {\"name\": ..., \"mcp\": true}); the rest apply to managed connectors. Disconnecting an account is done by the user in the Nous Portal dashboard, not through this tool.",
    })]
    UnknownAction(Dialect),
    /// `connectors` is not a target, nor a list of them.
    #[error("{}", match .0 {
        Dialect::Connop => "'connectors' must be a list of connector names.",
        Dialect::Original => "'connectors' must be a list of names or {name, mcp} objects.",
    })]
    ConnectorsNotAList(Dialect),
    /// A target object with keys other than `name` and `mcp` (sorted).
    #[error(
        "unknown target field(s) {}: a target is {{\"name\": \"<slug>\"}} or {{\"name\": \"<server>\", \"mcp\": true}}. Transport, URLs and credentials come from the catalog manifest, never from the call.",
        .0.join(", ")
    )]
    UnknownTargetFields(Vec<String>),
    /// A name that is empty after trimming, or not a string.
    #[error("every target needs a non-empty 'name'.")]
    EmptyName,
    /// connect or reconnect without names.
    #[error(
        "'{0}' requires 'connectors': the connector slugs to authorize (e.g. [\"gmail\"]). Use action 'status' to list them."
    )]
    NamesRequired(&'static str),
    /// A local MCP server's action naming hosted connectors.
    #[error(
        "'{}' is an MCP action: every target must carry \"mcp\": true (got managed connector(s) {}). Managed connectors use connect / reconnect / status.",
        .action.as_str(), joined(.names)
    )]
    McpActionOnConnectors {
        /// The action.
        action: McpAction,
        /// The hosted connectors named.
        names: Vec<Text>,
    },
    /// A local MCP server's action without names.
    #[error(
        "'{}' requires 'connectors': the MCP server name(s), e.g. [{{\"name\": \"linear\", \"mcp\": true}}].",
        .0.as_str()
    )]
    McpNamesRequired(McpAction),
    /// A hosted connector's action naming local MCP servers.
    #[error(
        "'{action}' is a managed-connector action; MCP targets ({}) use install, enable, authorize.",
        joined(.names)
    )]
    ConnectorActionOnMcp {
        /// The action.
        action: &'static str,
        /// The MCP servers named.
        names: Vec<Text>,
    },
    /// A local MCP server's action, well formed: connop runs hosted connectors only.
    #[error(
        "'{}' is not available here: this host runs no local MCP servers ({}). Use action status to see the hosted connectors.",
        .action.as_str(), joined(.names)
    )]
    NoLocalMcp {
        /// The action.
        action: McpAction,
        /// The MCP servers named.
        names: Vec<Text>,
    },
}

/// A target's name as given (docs/contract.md#arguments): trimmed and lower-cased; empty is
/// refused. Callers drop duplicates, keeping the first.
pub fn target_name(raw: &str) -> Result<Text, ArgError> {
    let name = raw.trim().to_lowercase();
    if name.is_empty() {
        return Err(ArgError::EmptyName);
    }
    Ok(name.into())
}

/// Validates the tool's arguments (docs/contract.md#arguments) in connop's own dialect.
pub fn parse_args(args: &Value) -> Result<ToolArgs, ArgError> {
    parse_args_in(args, Dialect::Connop)
}

/// One target as the arguments name it: a hosted connector, or (the original's dialect) a
/// local MCP server.
struct Named {
    name: Text,
    mcp: bool,
}

/// The targets `connectors` names, normalised: a bare string or object is a list of one;
/// names trimmed and lower-cased; duplicates dropped, order kept.
fn parse_targets(value: Option<&Value>, dialect: Dialect) -> Result<Vec<Named>, ArgError> {
    let one = std::slice::from_ref;
    let items: &[Value] = match value {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(item @ Value::String(_)) => one(item),
        Some(item @ Value::Object(_)) if dialect == Dialect::Original => one(item),
        Some(_) => return Err(ArgError::ConnectorsNotAList(dialect)),
    };
    let mut out: Vec<Named> = Vec::with_capacity(items.len());
    for item in items {
        let named = match item {
            Value::String(raw) => Named {
                name: target_name(raw)?,
                mcp: false,
            },
            Value::Object(fields) if dialect == Dialect::Original => {
                let mut unknown: Vec<String> = fields
                    .keys()
                    .filter(|k| !matches!(k.as_str(), "name" | "mcp"))
                    .cloned()
                    .collect();
                if !unknown.is_empty() {
                    unknown.sort();
                    return Err(ArgError::UnknownTargetFields(unknown));
                }
                let name = match fields.get("name") {
                    Some(Value::String(raw)) => target_name(raw)?,
                    _ => return Err(ArgError::EmptyName),
                };
                let mcp = matches!(fields.get("mcp"), Some(Value::Bool(true)));
                Named { name, mcp }
            }
            _ => return Err(ArgError::ConnectorsNotAList(dialect)),
        };
        if !out
            .iter()
            .any(|n| n.name == named.name && n.mcp == named.mcp)
        {
            out.push(named);
        }
    }
    Ok(out)
}

/// Validates the tool's arguments in `dialect`, before any gateway call: the
/// targets first, then the action against them.
pub fn parse_args_in(args: &Value, dialect: Dialect) -> Result<ToolArgs, ArgError> {
    let empty = serde_json::Map::new();
    let obj = match args {
        Value::Object(map) => map,
        Value::Null => &empty,
        _ => return Err(ArgError::NotAnObject),
    };
    let targets = parse_targets(obj.get("connectors"), dialect)?;
    enum Asked {
        Tool(ToolAction),
        Mcp(McpAction),
    }
    let asked = match obj.get("action") {
        None | Some(Value::Null) => Asked::Tool(ToolAction::Status),
        Some(Value::String(s)) => match (s.trim().to_lowercase().as_str(), dialect) {
            ("status", _) => Asked::Tool(ToolAction::Status),
            ("connect", _) => Asked::Tool(ToolAction::Connect),
            ("reconnect", _) => Asked::Tool(ToolAction::Reconnect),
            ("install", Dialect::Original) => Asked::Mcp(McpAction::Install),
            ("enable", Dialect::Original) => Asked::Mcp(McpAction::Enable),
            ("authorize", Dialect::Original) => Asked::Mcp(McpAction::Authorize),
            _ => return Err(ArgError::UnknownAction(dialect)),
        },
        Some(_) => return Err(ArgError::UnknownAction(dialect)),
    };
    let names = |mcp: bool| -> Vec<Text> {
        targets
            .iter()
            .filter(|t| t.mcp == mcp)
            .map(|t| t.name.clone())
            .collect()
    };
    let action = match asked {
        Asked::Mcp(action) => {
            let managed = names(false);
            if !managed.is_empty() {
                return Err(ArgError::McpActionOnConnectors {
                    action,
                    names: managed,
                });
            }
            if targets.is_empty() {
                return Err(ArgError::McpNamesRequired(action));
            }
            return Err(ArgError::NoLocalMcp {
                action,
                names: names(true),
            });
        }
        Asked::Tool(action) => action,
    };
    let mcp = names(true);
    if !mcp.is_empty() {
        return Err(ArgError::ConnectorActionOnMcp {
            action: action.as_str(),
            names: mcp,
        });
    }
    let connectors = names(false);
    let force = matches!(obj.get("force"), Some(Value::Bool(true)));
    if action != ToolAction::Status && connectors.is_empty() {
        return Err(ArgError::NamesRequired(action.as_str()));
    }
    Ok(ToolArgs {
        action,
        connectors,
        force,
        dialect,
    })
}

/// The tool's model-facing declaration (name, description, JSON Schema of the arguments) in
/// `dialect`: the actions it takes and the target forms it accepts. There is no wait action,
/// no timeout and no reason argument: the operation's deadline is the host's.
pub fn schema(dialect: Dialect) -> Value {
    let (actions, item): (&[&str], Value) = match dialect {
        Dialect::Connop => (
            &["status", "connect", "reconnect"],
            json!({"type": "string", "description": "A connector slug, e.g. \"gmail\"."}),
        ),
        Dialect::Original => (
            &[
                "status",
                "connect",
                "reconnect",
                "install",
                "enable",
                "authorize",
            ],
            json!({"anyOf": [
                {"type": "string", "description": "A managed connector slug, e.g. \"gmail\"."},
                {"type": "object",
                 "properties": {
                     "name": {"type": "string", "description": "The connector slug or MCP server name."},
                     "mcp": {"type": "boolean", "description": "true for a local MCP server."},
                 },
                 "required": ["name"],
                 "additionalProperties": false},
            ]}),
        ),
    };
    json!({
        "name": "manage_connections",
        "description": "Connect the user's accounts. status lists the connectors and whether each works; connect (or reconnect, to repair one) asks the user to authorize the named connectors and returns once each is connected, skipped or not connected. The user disconnects accounts themselves; this tool never does.",
        "parameters": {
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": actions,
                    "description": "What to do; status when omitted.",
                },
                "connectors": {
                    "type": "array",
                    "items": item,
                    "description": "The targets of connect and reconnect; for status, the names to show (all when omitted).",
                },
                "force": {
                    "type": "boolean",
                    "description": "reconnect only: restart the authorization even if the account works (to switch accounts).",
                },
            },
            "required": [],
        },
    })
}

/// The refusal when the session already has an open operation (docs/contract.md#registry).
pub fn already_open_text(op_id: OpId) -> String {
    format!(
        "a connection operation is already open in this session ({op_id}); it settles when the user finishes with the card, on Continue, or at its deadline. Do not start another."
    )
}

/// The error when the gateway cannot be reached: a mint or list read failed, or (a host's
/// word) its client could not be built. `reason` says why.
pub fn gateway_failed_text(reason: &dyn std::fmt::Display, dialect: Dialect) -> String {
    let portal = match dialect {
        Dialect::Connop => "the connector portal",
        Dialect::Original => "the Nous Portal",
    };
    format!(
        "The connector gateway request failed: {reason}. If this persists, the user can manage connections in {portal}."
    )
}

/// The refusal when the host says connectors are not available in the session.
pub const UNAVAILABLE_TEXT: &str = "Connectors are not available in this session.";

/// The detail of a target the local MCP catalog names and the gateway does not list.
pub fn misroute_detail(name: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Connop => format!(
            "{name} is a local MCP server, not a hosted connector account. Set it up as a local MCP server instead; this tool cannot connect it."
        ),
        Dialect::Original => format!(
            "{name} is a local MCP server, not a hosted connector account. Call manage_connections with action install and connectors [{{\"name\": \"{name}\", \"mcp\": true}}]."
        ),
    }
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

/// The status action's result (docs/contract.md#status-action).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusResult {
    /// The rows, verbatim, filtered to the names asked for (if any).
    pub connectors: Vec<Value>,
    /// Names asked for that the gateway does not list.
    pub unknown: Vec<UnknownName>,
    /// Whose words: the original's names an unknown name with no close match by its name
    /// alone and says so in the hint.
    pub dialect: Dialect,
}

impl StatusResult {
    /// Renders the connector list for the names asked for, in connop's dialect.
    pub fn render(rows: &[ConnectorRow], names: &[Text]) -> Self {
        StatusResult::render_in(rows, names, Dialect::Connop)
    }

    /// Renders the connector list for the names asked for. In the original's dialect a name
    /// matches a row spelt the same but for case, `-`, `_` and spaces (`google-calendar` is
    /// `googlecalendar`); in connop's only the same name does, and such a spelling is an
    /// unknown name whose suggestion is that row.
    pub fn render_in(rows: &[ConnectorRow], names: &[Text], dialect: Dialect) -> Self {
        let matches = |name: &str, row: &ConnectorRow| match dialect {
            Dialect::Connop => name == &*row.connector,
            Dialect::Original => squash(name) == squash(&row.connector),
        };
        let connectors = rows
            .iter()
            .filter(|row| names.is_empty() || names.iter().any(|n| matches(n, row)))
            .map(|row| row.raw.clone())
            .collect();
        let listed: Vec<&str> = rows.iter().map(|r| &*r.connector).collect();
        let unknown = names
            .iter()
            .filter(|n| !rows.iter().any(|row| matches(n, row)))
            .map(|n| UnknownName {
                name: n.clone(),
                did_you_mean: did_you_mean(n, &listed).map(Text::from),
            })
            .collect();
        StatusResult {
            connectors,
            unknown,
            dialect,
        }
    }
}

/// The sentence the original's status hint adds when it names unknown names.
pub const UNKNOWN_HINT: &str = " Names under 'unknown' are not connectors the gateway offers; where one is close, did_you_mean names it: ask the user before using it.";

impl Serialize for StatusResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("connectors", &self.connectors)?;
        match self.dialect {
            Dialect::Original if !self.unknown.is_empty() => {
                map.serialize_entry("hint", &format!("{STATUS_HINT}{UNKNOWN_HINT}"))?;
                let unknown: Vec<Value> = self
                    .unknown
                    .iter()
                    .map(|u| {
                        let mut entry = serde_json::Map::new();
                        entry.insert("name".into(), Value::from(&*u.name));
                        if let Some(close) = &u.did_you_mean {
                            entry.insert("did_you_mean".into(), Value::from(&**close));
                        }
                        Value::Object(entry)
                    })
                    .collect();
                map.serialize_entry("unknown", &unknown)?;
            }
            _ => {
                map.serialize_entry("hint", STATUS_HINT)?;
                if !self.unknown.is_empty() {
                    map.serialize_entry("unknown", &self.unknown)?;
                }
            }
        }
        map.end()
    }
}

/// A name as spellings compare: lower-cased, without `-`, `_` and spaces.
fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The listed name a user probably meant: equal after lower-casing and dropping `-`, `_` and
/// spaces; else the nearest within Levenshtein distance 2 (ties: list order); else none.
pub fn did_you_mean<'a>(name: &str, listed: &[&'a str]) -> Option<&'a str> {
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
    /// connect / reconnect (docs/contract.md#model-result).
    Model(ModelResult),
    /// status (docs/contract.md#status-action).
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

    #[test]
    fn the_original_dialect_takes_name_objects_and_refuses_mcp_mixes_in_its_words() {
        let parse = |v: Value| parse_args_in(&v, Dialect::Original);
        let args = parse(json!({"action": " Connect ",
                                "connectors": [" Gmail", {"name": "NOTION"}, "gmail", {"name": "notion", "mcp": false}]}))
        .unwrap();
        let names: Vec<&str> = args.connectors.iter().map(|n| &**n).collect();
        assert_eq!(names, ["gmail", "notion"]);
        assert_eq!(args.dialect, Dialect::Original);
        let one = parse(json!({"action": "reconnect", "connectors": {"name": "Slack"}})).unwrap();
        assert_eq!(&*one.connectors[0], "slack");
        let err = |v: Value| parse(v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"connectors": [{"name": "x", "url": "u", "auth": "a"}]})),
            "unknown target field(s) auth, url: a target is {\"name\": \"<slug>\"} or {\"name\": \"<server>\", \"mcp\": true}. Transport, URLs and credentials come from the catalog manifest, never from the call."
        );
        assert_eq!(
            err(json!({"connectors": [{"name": 3}]})),
            "every target needs a non-empty 'name'."
        );
        assert_eq!(
            err(json!({"action": "authorize", "connectors": ["a", {"name": "b", "mcp": true}]})),
            "'authorize' is an MCP action: every target must carry \"mcp\": true (got managed connector(s) a). Managed connectors use connect / reconnect / status."
        );
        assert_eq!(
            err(json!({"action": "install"})),
            "'install' requires 'connectors': the MCP server name(s), e.g. [{\"name\": \"linear\", \"mcp\": true}]."
        );
        assert_eq!(
            err(json!({"action": "status", "connectors": [{"name": "linear", "mcp": true}]})),
            "'status' is a managed-connector action; MCP targets (linear) use install, enable, authorize."
        );
        assert!(
            err(json!({"action": "install", "connectors": [{"name": "linear", "mcp": true}]}))
                .starts_with("'install' is not available here")
        );
        assert!(err(json!({"action": "disconnect"})).contains("in the Nous Portal dashboard"));
        // connop's own dialect refuses both forms as before.
        assert_eq!(
            parse_args(&json!({"connectors": [{"name": "gmail"}]})).unwrap_err(),
            ArgError::ConnectorsNotAList(Dialect::Connop)
        );
        assert_eq!(
            parse_args(&json!({"action": "install"})).unwrap_err(),
            ArgError::UnknownAction(Dialect::Connop)
        );
    }

    #[test]
    fn the_original_status_matches_spellings_and_names_an_unknown_without_a_close_one_alone() {
        let rows = vec![
            ConnectorRow::new("gmail", true, false),
            ConnectorRow::new("googlecalendar", true, false),
        ];
        let names: Vec<Text> = vec!["google-calendar".into(), "gmal".into(), "calendar".into()];
        let v = serde_json::to_value(StatusResult::render_in(&rows, &names, Dialect::Original))
            .unwrap();
        assert_eq!(v["connectors"][0]["connector"], "googlecalendar");
        assert_eq!(v["connectors"].as_array().unwrap().len(), 1);
        assert_eq!(
            v["unknown"],
            json!([{"name": "gmal", "did_you_mean": "gmail"}, {"name": "calendar"}])
        );
        assert!(v["hint"].as_str().unwrap().contains("did_you_mean"));
        let exact = serde_json::to_value(StatusResult::render_in(
            &rows,
            &["gmail".into()],
            Dialect::Original,
        ))
        .unwrap();
        assert_eq!(exact["hint"], STATUS_HINT);
        assert!(exact.get("unknown").is_none());
    }

    #[test]
    fn the_gateway_and_misroute_texts_speak_the_dialect() {
        let why = "gateway on fire";
        assert!(gateway_failed_text(&why, Dialect::Connop).ends_with("in the connector portal."));
        assert_eq!(
            gateway_failed_text(&why, Dialect::Original),
            "The connector gateway request failed: gateway on fire. If this persists, the user can manage connections in the Nous Portal."
        );
        assert_eq!(
            misroute_detail("linear", Dialect::Original),
            "linear is a local MCP server, not a hosted connector account. Call manage_connections with action install and connectors [{\"name\": \"linear\", \"mcp\": true}]."
        );
    }

    #[test]
    fn the_schema_names_the_dialects_actions_and_no_wait_timeout_or_reason() {
        for (dialect, actions) in [(Dialect::Connop, 3), (Dialect::Original, 6)] {
            let schema = schema(dialect);
            let props = &schema["parameters"]["properties"];
            assert_eq!(props["action"]["enum"].as_array().unwrap().len(), actions);
            assert!(!props["action"]["enum"].to_string().contains("wait"));
            assert!(props.get("timeout_seconds").is_none() && props.get("reason").is_none());
            assert_eq!(props["force"]["type"], "boolean");
            // Every action the schema names is one the arguments take.
            for action in props["action"]["enum"].as_array().unwrap() {
                let got = parse_args_in(&json!({"action": action}), dialect);
                assert!(
                    !matches!(got, Err(ArgError::UnknownAction(_))),
                    "{action}: {got:?}"
                );
            }
        }
    }
}
