//! The tool gateway as data: the calls the core asks for, the replies it consumes, and the
//! typed failures of docs/contract.md#tool-gateway-api.
//!
//! A runtime turns a [`GatewayCall`] into an HTTP request (or hands it to a scripted fake) and
//! feeds back `Result<GatewayReply, GatewayError>`.

use crate::operation::{OpId, Text};
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Correlates a gateway call with its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub u64);

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The `returnTo` value that rides the mint on the desktop surface.
pub const DESKTOP_RETURN_TO: &str = "connop-desktop";

/// One request to the tool gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GatewayCall {
    /// `GET v1/connectors` (all pages). `timeout: None` is the client's default (30 s).
    List {
        /// Per-call timeout.
        timeout: Option<Duration>,
    },
    /// `POST v1/connectors/connections`. Never retried. (Boxed: it is rare and large.)
    Mint(Box<MintRequest>),
    /// `GET v1/connectors/accounts/<connection_id>`.
    Account {
        /// The account to read.
        connection_id: Text,
        /// Time left to the deadline, clamped to [1 s, 10 s].
        timeout: Duration,
    },
}

impl GatewayCall {
    /// The route the call takes.
    pub const fn route(&self) -> GatewayRoute {
        match self {
            GatewayCall::List { .. } => GatewayRoute::List,
            GatewayCall::Mint(_) => GatewayRoute::Mint,
            GatewayCall::Account { .. } => GatewayRoute::Account,
        }
    }
}

/// A route of the tool gateway's API: what a [`GatewayCall`] asks of it, named by a short
/// name (a metric label, and a test control's name for it). Its HTTP method and path are the
/// wire's ([`crate::wire`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GatewayRoute {
    /// The connector list, every page.
    List,
    /// The mint.
    Mint,
    /// An account read.
    Account,
}

impl GatewayRoute {
    /// Every route, in this order.
    pub const ALL: [GatewayRoute; 3] = [
        GatewayRoute::List,
        GatewayRoute::Mint,
        GatewayRoute::Account,
    ];

    /// The short name: `list`, `mint` or `account`.
    pub const fn name(self) -> &'static str {
        match self {
            GatewayRoute::List => "list",
            GatewayRoute::Mint => "mint",
            GatewayRoute::Account => "account",
        }
    }

    /// The route a short name names.
    pub fn parse(name: &str) -> Option<Self> {
        GatewayRoute::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Whether a retryable failure ([`GatewayError::is_retryable`]) gets its one retry. The
    /// mint's never does: the gateway cannot de-duplicate authorization starts. An account
    /// read that `timed_out` does not either: its timeout is the time the watcher had left for
    /// it, so the attempt spent all of it and a retry could only run past the deadline.
    pub const fn retries(self, timed_out: bool) -> bool {
        match self {
            GatewayRoute::Mint => false,
            GatewayRoute::Account => !timed_out,
            GatewayRoute::List => true,
        }
    }
}

/// The body of a mint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MintRequest {
    /// Every target to mint, in order.
    pub connectors: Vec<Text>,
    /// `true` for reconnect.
    pub reinitiate: bool,
    /// Where the vendor sends the browser back: `connop-desktop` on the desktop surface, the
    /// host's own return URL when it gave one (docs/contract.md#return-hints), else none.
    pub return_to: Option<Text>,
    /// The operation id, whenever `return_to` rides the mint.
    pub op: Option<OpId>,
}

/// One row of the connector list, parsed, with the row as the gateway sent it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectorRow {
    /// The connector slug.
    pub connector: Text,
    /// Whether the gateway offers it.
    pub enabled: bool,
    /// Whether an account works.
    pub connected: bool,
    /// The gateway's free-form status reason, if any.
    pub status_reason: Option<Text>,
    /// The row verbatim: the status action returns it unchanged.
    pub raw: Value,
}

impl ConnectorRow {
    /// A row as a gateway would send it (used by fakes and the simulated gateway).
    pub fn new(connector: &str, enabled: bool, connected: bool) -> Self {
        let mut raw = serde_json::Map::new();
        raw.insert("connector".into(), connector.into());
        raw.insert("enabled".into(), enabled.into());
        raw.insert("connected".into(), connected.into());
        ConnectorRow {
            connector: connector.into(),
            enabled,
            connected,
            status_reason: None,
            raw: Value::Object(raw),
        }
    }

    /// Adds a `statusReason`.
    pub fn with_status_reason(mut self, reason: &str) -> Self {
        if let Value::Object(map) = &mut self.raw {
            map.insert("statusReason".into(), reason.into());
        }
        self.status_reason = Some(reason.into());
        self
    }

    /// Parses a row of `{"items": [...]}`. Unknown fields are kept in `raw` and ignored.
    pub fn from_json(raw: Value) -> Result<Self, GatewayError> {
        let obj = raw
            .as_object()
            .ok_or_else(|| GatewayError::invalid("a connector row is not an object"))?;
        let connector = obj
            .get("connector")
            .and_then(Value::as_str)
            .ok_or_else(|| GatewayError::invalid("a connector row has no 'connector'"))?;
        let flag = |key: &str| -> Result<bool, GatewayError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(GatewayError::invalid(format!("'{key}' is not a boolean"))),
            }
        };
        let enabled = flag("enabled")?;
        let connected = flag("connected")?;
        let status_reason = optional_text(obj.get("statusReason"), "statusReason")?;
        Ok(ConnectorRow {
            connector: connector.into(),
            enabled,
            connected,
            status_reason,
            raw,
        })
    }
}

/// What a mint answered for one connector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MintStatus {
    /// An account already works.
    Active,
    /// A link was made.
    Initiated,
    /// The gateway refused.
    Failed,
}

impl MintStatus {
    /// Parses the wire value; anything else is an invalid response.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(MintStatus::Active),
            "initiated" => Some(MintStatus::Initiated),
            "failed" => Some(MintStatus::Failed),
            _ => None,
        }
    }

    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            MintStatus::Active => "active",
            MintStatus::Initiated => "initiated",
            MintStatus::Failed => "failed",
        }
    }
}

/// One row of a mint answer's `results`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MintRow {
    /// The connector slug.
    pub connector: Text,
    /// The outcome.
    pub status: MintStatus,
    /// The vendor link (for `initiated`).
    pub connect_url: Option<Text>,
    /// The account the watcher will read.
    pub connection_id: Option<Text>,
    /// Free-form reason.
    pub status_reason: Option<Text>,
}

impl MintRow {
    /// Parses one row of `results`.
    pub fn from_json(raw: &Value) -> Result<Self, GatewayError> {
        let obj = raw
            .as_object()
            .ok_or_else(|| GatewayError::invalid("a mint result is not an object"))?;
        let connector = obj
            .get("connector")
            .and_then(Value::as_str)
            .ok_or_else(|| GatewayError::invalid("a mint result has no 'connector'"))?;
        let status = obj.get("status").and_then(Value::as_str).unwrap_or("");
        let status = MintStatus::parse(status)
            .ok_or_else(|| GatewayError::invalid(format!("unknown mint status '{status}'")))?;
        Ok(MintRow {
            connector: connector.into(),
            status,
            connect_url: optional_text(obj.get("connectUrl"), "connectUrl")?,
            connection_id: optional_text(obj.get("connectionId"), "connectionId")?,
            status_reason: optional_text(obj.get("statusReason"), "statusReason")?,
        })
    }
}

/// An account's status as the account route reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccountStatus {
    /// Not finished at the vendor yet.
    Pending,
    /// Working.
    Active,
    /// The vendor failed it.
    Failed,
    /// The link ran out.
    Expired,
    /// The user revoked it.
    Revoked,
    /// Disabled.
    Inactive,
}

impl AccountStatus {
    /// Parses the wire value; anything else is an invalid response.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => AccountStatus::Pending,
            "active" => AccountStatus::Active,
            "failed" => AccountStatus::Failed,
            "expired" => AccountStatus::Expired,
            "revoked" => AccountStatus::Revoked,
            "inactive" => AccountStatus::Inactive,
            _ => return None,
        })
    }

    /// The wire value.
    pub const fn as_str(self) -> &'static str {
        match self {
            AccountStatus::Pending => "pending",
            AccountStatus::Active => "active",
            AccountStatus::Failed => "failed",
            AccountStatus::Expired => "expired",
            AccountStatus::Revoked => "revoked",
            AccountStatus::Inactive => "inactive",
        }
    }
}

/// An account read's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// The account id.
    pub connection_id: Text,
    /// The connector slug.
    pub connector: Text,
    /// Where the account stands.
    pub status: AccountStatus,
    /// Free-form reason.
    pub status_reason: Option<Text>,
}

impl Account {
    /// Parses an account body.
    pub fn from_json(raw: &Value) -> Result<Self, GatewayError> {
        let obj = raw
            .as_object()
            .ok_or_else(|| GatewayError::invalid("an account is not an object"))?;
        let text = |key: &str| -> Result<Text, GatewayError> {
            obj.get(key)
                .and_then(Value::as_str)
                .map(Text::from)
                .ok_or_else(|| GatewayError::invalid(format!("an account has no '{key}'")))
        };
        let status = obj.get("status").and_then(Value::as_str).unwrap_or("");
        let status = AccountStatus::parse(status)
            .ok_or_else(|| GatewayError::invalid(format!("unknown account status '{status}'")))?;
        Ok(Account {
            connection_id: text("connectionId")?,
            connector: text("connector")?,
            status,
            status_reason: optional_text(obj.get("statusReason"), "statusReason")?,
        })
    }
}

fn optional_text(value: Option<&Value>, key: &str) -> Result<Option<Text>, GatewayError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str().into())),
        Some(_) => Err(GatewayError::invalid(format!("'{key}' is not a string"))),
    }
}

/// A successful gateway answer.
#[derive(Clone, Debug, PartialEq)]
pub enum GatewayReply {
    /// The connector list (all pages).
    Connectors(Vec<ConnectorRow>),
    /// The mint's `results`.
    Minted(Vec<MintRow>),
    /// The account, or `None` for a 404 (account unknown yet).
    Account(Option<Account>),
}

impl GatewayReply {
    /// The route whose answer this is.
    pub const fn route(&self) -> GatewayRoute {
        match self {
            GatewayReply::Connectors(_) => GatewayRoute::List,
            GatewayReply::Minted(_) => GatewayRoute::Mint,
            GatewayReply::Account(_) => GatewayRoute::Account,
        }
    }

    /// The rows of a list reply. A reply of another kind is the gateway's fault (or its
    /// client's): an invalid response.
    pub fn into_connectors(self) -> Result<Vec<ConnectorRow>, GatewayError> {
        match self {
            GatewayReply::Connectors(rows) => Ok(rows),
            other => Err(other.mismatch(GatewayRoute::List)),
        }
    }

    /// The rows of a mint reply; another kind is an invalid response.
    pub fn into_minted(self) -> Result<Vec<MintRow>, GatewayError> {
        match self {
            GatewayReply::Minted(rows) => Ok(rows),
            other => Err(other.mismatch(GatewayRoute::Mint)),
        }
    }

    /// The account of an account reply (`None`: not known yet); another kind is an invalid
    /// response.
    pub fn into_account(self) -> Result<Option<Account>, GatewayError> {
        match self {
            GatewayReply::Account(account) => Ok(account),
            other => Err(other.mismatch(GatewayRoute::Account)),
        }
    }

    fn mismatch(&self, route: GatewayRoute) -> GatewayError {
        GatewayError::invalid(format!(
            "a {} answer to a {} call",
            self.route().name(),
            route.name()
        ))
    }
}

/// Why a gateway call failed. The gateway (or the way to it) is to blame, never the caller.
///
/// The `Display` text is the `<reason>` in the error message of docs/contract.md#prepare.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// An external gateway with no token: refused without sending.
    #[error("no CONNECTOR_GATEWAY_TOKEN is set for the connector gateway")]
    MissingToken,
    /// 401 or 403.
    #[error("the connector gateway refused the credentials (HTTP {status})")]
    Auth {
        /// The HTTP status.
        status: u16,
    },
    /// 404 on the list or the mint.
    #[error("the connector gateway does not offer this route (HTTP 404)")]
    Unavailable,
    /// 429.
    #[error("the connector gateway is rate limiting requests (retry after {:.3} s)", retry_after.as_secs_f64())]
    RateLimited {
        /// From `Retry-After` (seconds), else the body's `retryAfterMs`, else 1 s.
        retry_after: Duration,
    },
    /// Any other non-success status.
    #[error("the connector gateway answered HTTP {status}")]
    Http {
        /// The HTTP status.
        status: u16,
    },
    /// The request did not complete (connect refused, reset, timeout).
    #[error("{0}")]
    Transport(String),
    /// A body that does not parse, or a value outside an enumerated set.
    #[error("the connector gateway sent an invalid response: {0}")]
    InvalidResponse(String),
}

impl GatewayError {
    /// An invalid response with a reason.
    pub fn invalid(reason: impl Into<String>) -> Self {
        GatewayError::InvalidResponse(reason.into())
    }

    /// ≥ 500 and transport failures are retried once (never for the mint).
    pub fn is_retryable(&self) -> bool {
        match self {
            GatewayError::Http { status } => *status >= 500,
            GatewayError::Transport(_) => true,
            _ => false,
        }
    }
}

/// A future returned by an [`AsyncToolGateway`].
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The tool gateway for blocking hosts. One method: every route of
/// docs/contract.md#tool-gateway-api is a [`GatewayCall`], exactly what a flow's
/// [`Effect::Call`](crate::flow::Effect::Call) asks for, so a runtime passes its effects through
/// and a fake answers them in one place. The fixtures' scripted gateway and the blocking HTTP
/// client implement it; the core never calls it. [`GatewayReply::into_connectors`] and its siblings
/// unwrap a reply of a known kind.
pub trait BlockingToolGateway: Send + Sync {
    /// Runs one call to its end (every list page; the one retry of a read, never of the mint)
    /// and answers the reply of the call's kind: rows for a list, rows for a mint, the
    /// account (or `None` for a 404) for an account read.
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError>;
}

/// The tool gateway for async hosts: the same one method as [`BlockingToolGateway`]. The call
/// is handed over owned and the answer is a `'static` future the driver keeps as it is; the
/// gateway is only lent, so a gateway whose answer takes a while keeps in its future what it
/// needs (an `Arc` of its own state), and an in-process gateway that knows the answer at once
/// returns it ready, with no allocation and no reference count touched.
pub trait AsyncToolGateway: Send + Sync {
    /// Runs one call to its end; see [`BlockingToolGateway::call`].
    fn call(&self, call: GatewayCall) -> GatewayFuture;
}

/// An async tool gateway's answer to one call.
#[must_use = "a gateway call does nothing until its answer is awaited"]
pub enum GatewayFuture {
    /// Known at once (`None` once taken).
    Ready(Option<Result<GatewayReply, GatewayError>>),
    /// Still on its way.
    Pending(BoxFuture<'static, Result<GatewayReply, GatewayError>>),
}

impl GatewayFuture {
    /// An answer known at once.
    pub fn ready(answer: Result<GatewayReply, GatewayError>) -> Self {
        GatewayFuture::Ready(Some(answer))
    }

    /// An answer still on its way.
    pub fn pending(
        answer: impl Future<Output = Result<GatewayReply, GatewayError>> + Send + 'static,
    ) -> Self {
        GatewayFuture::Pending(Box::pin(answer))
    }
}

impl Future for GatewayFuture {
    type Output = Result<GatewayReply, GatewayError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut *self {
            GatewayFuture::Ready(answer) => Poll::Ready(answer.take().unwrap_or_else(|| {
                Err(GatewayError::Transport(
                    "the call was polled after it answered".into(),
                ))
            })),
            GatewayFuture::Pending(answer) => answer.as_mut().poll(cx),
        }
    }
}

impl std::fmt::Debug for GatewayFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayFuture::Ready(answer) => f.debug_tuple("Ready").field(answer).finish(),
            GatewayFuture::Pending(_) => f.write_str("Pending"),
        }
    }
}

// ----- what the simulated tool gateways share --------------------------------------------
//
// Two fakes answer as a tool gateway: the simulated one the application serves (the embedded
// default, and `connop sim-gateway`) and the fixtures' scripted one. They share the catalog a
// newcomer connects from and the rule their account reads follow.

/// The connectors the simulated tool gateway lists, in list order: what a newcomer connects
/// with no account anywhere, and the names the test worlds draw from.
pub const SIMULATED_CATALOG: [&str; 6] = [
    "gmail",
    "notion",
    "slack",
    "github",
    "linear",
    "google_calendar",
];

/// How a simulated tool gateway answers the account reads of one connector: its read script,
/// else its flip, else what it knows of the account.
#[derive(Debug)]
pub struct ReadScript<'a, S> {
    /// What the script's reads answer: the first read the first, and so on; the last one
    /// answers every read after it. Empty: no script.
    pub reads: &'a [S],
    /// The read from which the account answers `active` (`pending` before it), when there is
    /// no script.
    pub flip: Option<usize>,
}

/// What a [`ReadScript`] says one read answers.
#[derive(Debug, PartialEq, Eq)]
pub enum ScriptedAnswer<'a, S> {
    /// This read of the script.
    Read(&'a S),
    /// This status, by the flip.
    Status(AccountStatus),
    /// Neither a script nor a flip: the gateway's own account answers.
    Unscripted,
}

impl<'a, S> ReadScript<'a, S> {
    /// What the `nth` read of the account answers, counting from 1 (a 0 counts as the first).
    pub fn answer(&self, nth: usize) -> ScriptedAnswer<'a, S> {
        let nth = nth.max(1);
        if let Some(last) = self.reads.len().checked_sub(1) {
            return ScriptedAnswer::Read(&self.reads[(nth - 1).min(last)]);
        }
        match self.flip {
            Some(flip) if nth >= flip => ScriptedAnswer::Status(AccountStatus::Active),
            Some(_) => ScriptedAnswer::Status(AccountStatus::Pending),
            None => ScriptedAnswer::Unscripted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_parse_and_keep_the_verbatim_body() {
        let raw = json!({"connector": "gmail", "enabled": true, "connected": false, "extra": 1});
        let row = ConnectorRow::from_json(raw.clone()).unwrap();
        assert_eq!(&*row.connector, "gmail");
        assert!(row.enabled && !row.connected);
        assert_eq!(row.raw, raw);
        assert!(ConnectorRow::from_json(json!({"enabled": true})).is_err());
        assert!(ConnectorRow::from_json(json!({"connector": "x", "connected": "yes"})).is_err());
    }

    #[test]
    fn enumerated_values_outside_the_set_are_invalid_responses() {
        let err =
            MintRow::from_json(&json!({"connector": "gmail", "status": "weird"})).unwrap_err();
        assert!(matches!(err, GatewayError::InvalidResponse(_)));
        let acc = json!({"connectionId": "ca_1", "connector": "gmail", "status": "zombie"});
        assert!(Account::from_json(&acc).is_err());
        let acc = json!({"connectionId": "ca_1", "connector": "gmail", "status": "expired",
                         "statusReason": "", "label": "x"});
        let acc = Account::from_json(&acc).unwrap();
        assert_eq!(acc.status, AccountStatus::Expired);
        assert_eq!(acc.status_reason, None);
    }

    #[test]
    fn a_reply_unwraps_to_its_own_kind_only() {
        let rows = vec![ConnectorRow::new("gmail", true, false)];
        let list = GatewayReply::Connectors(rows.clone());
        assert_eq!(list.clone().into_connectors(), Ok(rows));
        assert_eq!(
            list.clone().into_minted(),
            Err(GatewayError::invalid("a list answer to a mint call"))
        );
        assert!(matches!(
            list.into_account(),
            Err(GatewayError::InvalidResponse(_))
        ));
        assert_eq!(GatewayReply::Account(None).into_account(), Ok(None));
        assert_eq!(
            GatewayReply::Minted(Vec::new()).into_minted(),
            Ok(Vec::new())
        );
    }

    #[test]
    fn only_5xx_and_transport_are_retryable() {
        assert!(GatewayError::Http { status: 502 }.is_retryable());
        assert!(GatewayError::Transport("reset".into()).is_retryable());
        assert!(!GatewayError::Http { status: 400 }.is_retryable());
        assert!(!GatewayError::Auth { status: 401 }.is_retryable());
    }

    #[test]
    fn a_read_script_answers_its_reads_in_order_then_its_last_one_again() {
        let script = ReadScript {
            reads: &["a", "b"],
            flip: Some(1),
        };
        let answers: Vec<_> = (0..=4).map(|n| script.answer(n)).collect();
        assert_eq!(
            answers,
            [
                ScriptedAnswer::Read(&"a"),
                ScriptedAnswer::Read(&"a"),
                ScriptedAnswer::Read(&"b"),
                ScriptedAnswer::Read(&"b"),
                ScriptedAnswer::Read(&"b"),
            ],
            "a script wins over a flip"
        );
        let flip: ReadScript<'_, ()> = ReadScript {
            reads: &[],
            flip: Some(3),
        };
        assert_eq!(
            flip.answer(2),
            ScriptedAnswer::Status(AccountStatus::Pending)
        );
        assert_eq!(
            flip.answer(3),
            ScriptedAnswer::Status(AccountStatus::Active)
        );
        let neither: ReadScript<'_, ()> = ReadScript {
            reads: &[],
            flip: None,
        };
        assert_eq!(neither.answer(1), ScriptedAnswer::Unscripted);
    }
}
