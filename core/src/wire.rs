//! The tool-gateway HTTP API of docs/contract.md#tool-gateway-api as a sans-IO exchange.
//!
//! Every rule of the API (routes, headers, pagination, status mapping, the one retry, the
//! timeouts) is decided here, once, so that the blocking and the async clients only move
//! bytes and cannot disagree. An [`Exchange`] runs one [`GatewayCall`]: it yields an
//! [`HttpRequest`] to send, takes the [`HttpResponse`] (or a [`TransportError`]) back, and
//! ends with the call's `Result<GatewayReply, GatewayError>`. [`Exchange::run`] (a blocking
//! `send`) and [`Exchange::run_async`] (an async one) are that loop, written once for each
//! kind of client.
//!
//! ```
//! use connop_core::tool_gateway::{GatewayCall, GatewayReply};
//! use connop_core::wire::{ClientConfig, Exchange, HttpResponse, ExchangeNext};
//!
//! let config = ClientConfig::new("http://127.0.0.1:8080/", Some("t0k".into()));
//! let call = GatewayCall::List { timeout: None };
//! let mut next = Exchange::start(&config, &call);
//! let result = loop {
//!     match next {
//!         ExchangeNext::Send(in_flight) => {
//!             assert_eq!(in_flight.request().url, "http://127.0.0.1:8080/v1/connectors?limit=50");
//!             // A real client sends the request here.
//!             let body = br#"{"items": [{"connector": "gmail", "enabled": true}], "nextCursor": null}"#;
//!             next = in_flight.receive(Ok(HttpResponse::new(200, body.to_vec())));
//!         }
//!         ExchangeNext::Done(result) => break result,
//!     }
//! };
//! let Ok(GatewayReply::Connectors(rows)) = result else { panic!("a list answers rows") };
//! assert_eq!(&*rows[0].connector, "gmail");
//! ```

use crate::tool_gateway::{
    Account, ConnectorRow, GatewayCall, GatewayError, GatewayReply, GatewayRoute, MintRequest,
    MintRow,
};
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// docs/contract.md#tool-gateway-api: a request that names no timeout gives the gateway this long.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// docs/contract.md#tool-gateway-api: the list stops following cursors after this many pages, so a
/// gateway that keeps answering cursors cannot hold a call forever.
pub const DEFAULT_MAX_PAGES: usize = 20;

/// The page size asked of the connector list.
pub const PAGE_LIMIT: usize = 50;

/// What a 429 waits when the gateway says nothing about it (docs/contract.md#watcher).
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where the gateway is and how to talk to it; shared by every call of one client.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The gateway's origin, without a trailing `/` (the routes are appended to it).
    pub base_url: String,
    /// The bearer token; `None` (or empty) refuses every call without sending.
    pub token: Option<String>,
    /// The timeout of the mint, and of a list that names none.
    pub default_timeout: Duration,
    /// How many list pages one list call follows at most.
    pub max_pages: usize,
    /// The host adds its own credentials to each request (a header provider of its own): no
    /// `Authorization` goes out from here, and no token is needed.
    pub host_credentials: bool,
}

impl ClientConfig {
    /// A config with the defaults of docs/contract.md#tool-gateway-api. Trailing `/`s of the origin
    /// are dropped, and an empty token counts as none, so an env var set to `""` is refused rather
    /// than sent.
    pub fn new(base_url: impl Into<String>, token: Option<String>) -> Self {
        let mut base_url = base_url.into();
        let trimmed = base_url.trim_end_matches('/').len();
        base_url.truncate(trimmed);
        ClientConfig {
            base_url,
            token: token.filter(|t| !t.trim().is_empty()),
            default_timeout: DEFAULT_TIMEOUT,
            max_pages: DEFAULT_MAX_PAGES,
            host_credentials: false,
        }
    }

    /// A config for a host that adds its own credentials to every request: the requests
    /// carry no `Authorization` of this client's.
    pub fn with_host_credentials(base_url: impl Into<String>) -> Self {
        let mut config = ClientConfig::new(base_url, None);
        config.host_credentials = true;
        config
    }

    /// The config the environment describes (`CONNECTOR_GATEWAY_URL`,
    /// `CONNECTOR_GATEWAY_TOKEN`), from values the runtime read: `None` when no URL is set,
    /// which means "use the embedded simulated gateway" (docs/contract.md#simulated-tool-gateway).
    pub fn from_env_values(url: Option<String>, token: Option<String>) -> Option<Self> {
        let url = url.filter(|u| !u.trim().is_empty())?;
        Some(ClientConfig::new(url.trim(), token))
    }

    /// Overrides the default timeout (tests and slow links).
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// Overrides the page cap.
    pub fn with_max_pages(mut self, max_pages: usize) -> Self {
        self.max_pages = max_pages;
        self
    }

    fn token(&self) -> Option<&str> {
        self.token.as_deref().filter(|t| !t.trim().is_empty())
    }
}

impl fmt::Debug for ClientConfig {
    // The token is a credential: never print it in logs or panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("default_timeout", &self.default_timeout)
            .field("max_pages", &self.max_pages)
            .field("host_credentials", &self.host_credentials)
            .finish()
    }
}

/// The HTTP methods the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpMethod {
    /// The list and the account read.
    Get,
    /// The mint.
    Post,
}

impl HttpMethod {
    /// The method as it goes on the request line.
    pub const fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
        }
    }
}

/// The connector list's path; its pages add `?limit=` and `&cursor=`.
const LIST_PATH: &str = "/v1/connectors";
/// The mint's path.
const MINT_PATH: &str = "/v1/connectors/connections";
/// The account reads' path; the percent-encoded account id follows a `/`.
const ACCOUNTS_PATH: &str = "/v1/connectors/accounts";

impl GatewayRoute {
    /// The HTTP method.
    pub const fn method(self) -> HttpMethod {
        match self {
            GatewayRoute::List | GatewayRoute::Account => HttpMethod::Get,
            GatewayRoute::Mint => HttpMethod::Post,
        }
    }

    /// The path, the account's as a template: `/v1/connectors/accounts/{connection_id}`.
    pub const fn path(self) -> &'static str {
        match self {
            GatewayRoute::List => LIST_PATH,
            GatewayRoute::Mint => MINT_PATH,
            GatewayRoute::Account => "/v1/connectors/accounts/{connection_id}",
        }
    }

    /// The route a request path asks for, with what follows the accounts' path and its `/`
    /// (the account id, still percent-encoded; empty for the list and the mint): how a
    /// simulated tool gateway routes what it serves. The query is not part of `path`.
    pub fn of_path(path: &str) -> Option<(GatewayRoute, &str)> {
        match path {
            LIST_PATH => Some((GatewayRoute::List, "")),
            MINT_PATH => Some((GatewayRoute::Mint, "")),
            _ => {
                let id = path.strip_prefix(ACCOUNTS_PATH)?.strip_prefix('/')?;
                Some((GatewayRoute::Account, id))
            }
        }
    }

    /// The method and the path, as logs name the route: `GET /v1/connectors`.
    pub const fn endpoint(self) -> &'static str {
        match self {
            GatewayRoute::List => "GET /v1/connectors",
            GatewayRoute::Mint => "POST /v1/connectors/connections",
            GatewayRoute::Account => "GET /v1/connectors/accounts/{connection_id}",
        }
    }
}

/// The HTTP status a failure came with, when it came with one: the inverse of what
/// [`InFlight::receive`] makes of a status.
pub fn failure_status(error: &GatewayError) -> Option<u16> {
    match error {
        GatewayError::Auth { status } | GatewayError::Http { status } => Some(*status),
        GatewayError::Unavailable => Some(404),
        GatewayError::RateLimited { .. } => Some(429),
        _ => None,
    }
}

/// The outcome label of a call that answered.
pub const OUTCOME_OK: &str = "ok";

/// A call's outcome as logs and metrics name it: [`OUTCOME_OK`], or the kind of failure
/// (`missing_token`, `auth`, `unavailable`, `rate_limited`, `http_5xx`, `http_4xx`,
/// `transport`, `invalid_response`).
pub fn outcome_label(result: &Result<GatewayReply, GatewayError>) -> &'static str {
    match result {
        Ok(_) => OUTCOME_OK,
        Err(GatewayError::MissingToken) => "missing_token",
        Err(GatewayError::Auth { .. }) => "auth",
        Err(GatewayError::Unavailable) => "unavailable",
        Err(GatewayError::RateLimited { .. }) => "rate_limited",
        Err(GatewayError::Http { status }) if *status >= 500 => "http_5xx",
        Err(GatewayError::Http { .. }) => "http_4xx",
        Err(GatewayError::Transport(_)) => "transport",
        Err(GatewayError::InvalidResponse(_)) => "invalid_response",
    }
}

/// One HTTP request to send, complete: the client adds nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// GET or POST.
    pub method: HttpMethod,
    /// The full URL, query included.
    pub url: String,
    /// `Authorization`, `Content-Type` and `Accept`, in that order.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body (the mint only).
    pub body: Option<String>,
    /// How long the whole request may take, connect to last byte.
    pub timeout: Duration,
}

impl HttpRequest {
    /// A header's value by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for HttpRequest {
    // The Authorization header carries the token: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("authorization") {
                    "<redacted>"
                } else {
                    v
                };
                (*k, v)
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body", &self.body)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What came back for a request: only the parts the API reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The raw `Retry-After` header, if any (read on a 429).
    pub retry_after: Option<String>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A response with no `Retry-After`.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        HttpResponse {
            status,
            retry_after: None,
            body: body.into(),
        }
    }

    /// Adds a `Retry-After` header value.
    pub fn with_retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }
}

/// A request that got no HTTP answer. Both kinds are retried once, but never for the mint and
/// not a timed-out account read (see the exchange's retry rule).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// Connect refused, reset, DNS, TLS…: the client's own description.
    Failed(String),
    /// The request's timeout passed before the answer was complete.
    TimedOut,
}

/// The answer a client feeds back for a sent request.
pub type HttpAnswer = Result<HttpResponse, TransportError>;

/// What to do next in an exchange.
#[must_use = "an exchange goes on only when its request is sent and answered"]
#[derive(Debug)]
pub enum ExchangeNext {
    /// Send this request, then feed its answer to [`InFlight::receive`].
    Send(InFlight),
    /// The call is over.
    Done(Result<GatewayReply, GatewayError>),
}

/// An exchange waiting for the answer to one request. Consuming it on receive makes it
/// impossible to feed two answers to one request or to skip one.
#[must_use = "an exchange goes on only when this request is answered"]
#[derive(Debug)]
pub struct InFlight {
    exchange: Exchange,
    request: HttpRequest,
    retried: bool,
}

impl InFlight {
    /// The request to send.
    pub fn request(&self) -> &HttpRequest {
        &self.request
    }

    /// Whether this request is the retry of a failed one (for logs).
    pub fn is_retry(&self) -> bool {
        self.retried
    }

    /// Feeds the request's answer; yields the next request or the call's result.
    pub fn receive(self, answer: HttpAnswer) -> ExchangeNext {
        let InFlight {
            mut exchange,
            request,
            retried,
        } = self;
        let timed_out = matches!(answer, Err(TransportError::TimedOut));
        let outcome = match answer {
            Ok(response) => exchange.on_response(response),
            Err(TransportError::Failed(reason)) => Err(GatewayError::Transport(reason)),
            Err(TransportError::TimedOut) => Err(GatewayError::Transport(format!(
                "the request timed out after {} s",
                request.timeout.as_secs_f64()
            ))),
        };
        match outcome {
            Ok(AfterResponse::Fetch(next)) => exchange.send(next),
            Ok(AfterResponse::Reply(reply)) => ExchangeNext::Done(Ok(reply)),
            Err(err) if err.is_retryable() && !retried && exchange.retries(timed_out) => {
                ExchangeNext::Send(InFlight {
                    exchange,
                    request,
                    retried: true,
                })
            }
            Err(err) => ExchangeNext::Done(Err(err)),
        }
    }
}

/// The route an exchange runs, with what it gathered so far.
#[derive(Debug)]
enum Leg {
    List {
        items: Vec<ConnectorRow>,
        pages: usize,
    },
    Mint,
    Account,
}

/// One gateway call on its way through the API: the routes, pagination and the one retry.
pub struct Exchange {
    leg: Leg,
    base_url: String,
    /// `None`: the host adds its own credentials.
    token: Option<String>,
    max_pages: usize,
    timeout: Duration,
}

impl fmt::Debug for Exchange {
    // The token is a credential: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("leg", &self.leg)
            .field("base_url", &self.base_url)
            .field("max_pages", &self.max_pages)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// Runs a whole call with a blocking `send` (one request in, its answer out): the loop
    /// every blocking client would otherwise write by hand.
    pub fn run(
        config: &ClientConfig,
        call: &GatewayCall,
        mut send: impl FnMut(&HttpRequest) -> HttpAnswer,
    ) -> Result<GatewayReply, GatewayError> {
        let mut next = Exchange::start(config, call);
        loop {
            match next {
                ExchangeNext::Send(in_flight) => {
                    let answer = send(in_flight.request());
                    next = in_flight.receive(answer);
                }
                ExchangeNext::Done(result) => return result,
            }
        }
    }

    /// [`run`](Self::run) with an async `send`: the same loop, awaiting each answer. Still
    /// pure: it needs no runtime, only what `send` awaits, and it is `Send` when `send`'s
    /// futures are.
    ///
    /// `send` gets its own copy of each request, so the future it returns borrows nothing of
    /// the exchange: on stable Rust a future that borrows its closure's argument cannot be
    /// shown to be `Send`, and an async client's calls must be.
    pub async fn run_async<F>(
        config: &ClientConfig,
        call: &GatewayCall,
        mut send: impl FnMut(HttpRequest) -> F,
    ) -> Result<GatewayReply, GatewayError>
    where
        F: std::future::Future<Output = HttpAnswer>,
    {
        let mut next = Exchange::start(config, call);
        loop {
            match next {
                ExchangeNext::Send(in_flight) => {
                    let answer = send(in_flight.request().clone()).await;
                    next = in_flight.receive(answer);
                }
                ExchangeNext::Done(result) => return result,
            }
        }
    }

    /// Starts any call (what a runtime does with an `Effect::Call`).
    pub fn start(config: &ClientConfig, call: &GatewayCall) -> ExchangeNext {
        match call {
            GatewayCall::List { timeout } => Exchange::list(config, *timeout),
            GatewayCall::Mint(request) => Exchange::mint(config, request),
            GatewayCall::Account {
                connection_id,
                timeout,
            } => Exchange::account(config, connection_id, *timeout),
        }
    }

    /// Starts a list read: every page, `timeout` per request (`None`: the default).
    pub fn list(config: &ClientConfig, timeout: Option<Duration>) -> ExchangeNext {
        let leg = Leg::List {
            items: Vec::new(),
            pages: 0,
        };
        let timeout = timeout.unwrap_or(config.default_timeout);
        Exchange::begin(config, leg, timeout, |ex| ex.list_request(None))
    }

    /// Starts a mint, with the default timeout. It is sent once whatever happens: the gateway
    /// cannot de-duplicate authorization starts.
    pub fn mint(config: &ClientConfig, request: &MintRequest) -> ExchangeNext {
        let mut body = serde_json::Map::new();
        let connectors = request
            .connectors
            .iter()
            .map(|c| Value::from(&**c))
            .collect();
        body.insert("connectors".into(), Value::Array(connectors));
        body.insert("reinitiate".into(), request.reinitiate.into());
        if let Some(return_to) = &request.return_to {
            body.insert("returnTo".into(), (&**return_to).into());
        }
        if let Some(op) = &request.op {
            body.insert("op".into(), op.as_str().into());
        }
        let body = Value::Object(body).to_string();
        Exchange::begin(config, Leg::Mint, config.default_timeout, |ex| {
            let url = format!("{}{MINT_PATH}", ex.base_url);
            ex.request(GatewayRoute::Mint.method(), url, Some(body))
        })
    }

    /// Starts an account read with the watcher's timeout.
    pub fn account(config: &ClientConfig, connection_id: &str, timeout: Duration) -> ExchangeNext {
        Exchange::begin(config, Leg::Account, timeout, |ex| {
            let url = format!(
                "{}{ACCOUNTS_PATH}/{}",
                ex.base_url,
                percent_encode(connection_id)
            );
            ex.request(GatewayRoute::Account.method(), url, None)
        })
    }

    fn begin(
        config: &ClientConfig,
        leg: Leg,
        timeout: Duration,
        first: impl FnOnce(&Exchange) -> HttpRequest,
    ) -> ExchangeNext {
        let token = match (config.token(), config.host_credentials) {
            (_, true) => None,
            (Some(token), false) => Some(token.to_owned()),
            (None, false) => return ExchangeNext::Done(Err(GatewayError::MissingToken)),
        };
        let exchange = Exchange {
            leg,
            base_url: config.base_url.trim_end_matches('/').to_owned(),
            token,
            max_pages: config.max_pages.max(1),
            timeout,
        };
        let request = first(&exchange);
        exchange.send(request)
    }

    fn send(self, request: HttpRequest) -> ExchangeNext {
        ExchangeNext::Send(InFlight {
            exchange: self,
            request,
            retried: false,
        })
    }

    fn request(&self, method: HttpMethod, url: String, body: Option<String>) -> HttpRequest {
        HttpRequest {
            method,
            url,
            headers: match &self.token {
                Some(token) => vec![
                    ("Authorization", format!("Bearer {token}")),
                    ("Content-Type", "application/json".into()),
                    ("Accept", "application/json".into()),
                ],
                None => vec![
                    ("Content-Type", "application/json".into()),
                    ("Accept", "application/json".into()),
                ],
            },
            body,
            timeout: self.timeout,
        }
    }

    fn list_request(&self, cursor: Option<&str>) -> HttpRequest {
        let mut url = format!("{}{LIST_PATH}?limit={PAGE_LIMIT}", self.base_url);
        if let Some(cursor) = cursor {
            url.push_str("&cursor=");
            url.push_str(&percent_encode(cursor));
        }
        self.request(GatewayRoute::List.method(), url, None)
    }

    /// The route this exchange runs.
    fn route(&self) -> GatewayRoute {
        match self.leg {
            Leg::List { .. } => GatewayRoute::List,
            Leg::Mint => GatewayRoute::Mint,
            Leg::Account => GatewayRoute::Account,
        }
    }

    /// Whether a retryable failure of this request gets its one retry
    /// ([`GatewayRoute::retries`]).
    fn retries(&self, timed_out: bool) -> bool {
        self.route().retries(timed_out)
    }

    fn on_response(&mut self, response: HttpResponse) -> Result<AfterResponse, GatewayError> {
        let status = response.status;
        match status {
            200..=299 => {}
            401 | 403 => return Err(GatewayError::Auth { status }),
            // Any 404 on the account route means "not known yet", whatever its body says.
            404 if matches!(self.leg, Leg::Account) => {
                return Ok(AfterResponse::Reply(GatewayReply::Account(None)));
            }
            404 => return Err(GatewayError::Unavailable),
            429 => {
                return Err(GatewayError::RateLimited {
                    retry_after: retry_after(&response),
                });
            }
            _ => return Err(GatewayError::Http { status }),
        }
        let body: Value = serde_json::from_slice(&response.body)
            .map_err(|e| GatewayError::invalid(format!("the body is not JSON ({e})")))?;
        match &mut self.leg {
            Leg::List { items, pages } => {
                let page = parse_list_page(body)?;
                items.extend(page.items);
                *pages += 1;
                match page.next_cursor {
                    Some(cursor) if *pages < self.max_pages => {
                        Ok(AfterResponse::Fetch(self.list_request(Some(&cursor))))
                    }
                    _ => Ok(AfterResponse::Reply(GatewayReply::Connectors(
                        std::mem::take(items),
                    ))),
                }
            }
            Leg::Mint => Ok(AfterResponse::Reply(GatewayReply::Minted(parse_mint(
                &body,
            )?))),
            Leg::Account => Ok(AfterResponse::Reply(GatewayReply::Account(Some(
                Account::from_json(&body)?,
            )))),
        }
    }
}

enum AfterResponse {
    /// Another list page.
    Fetch(HttpRequest),
    /// The call's answer.
    Reply(GatewayReply),
}

struct ListPage {
    items: Vec<ConnectorRow>,
    next_cursor: Option<String>,
}

/// `{"items": [...], "nextCursor": str|null}`; an empty cursor ends the list like a null one.
fn parse_list_page(body: Value) -> Result<ListPage, GatewayError> {
    let Value::Object(mut obj) = body else {
        return Err(GatewayError::invalid("the connector list is not an object"));
    };
    let next_cursor = match obj.get("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(GatewayError::invalid("'nextCursor' is not a string")),
    };
    let Some(Value::Array(rows)) = obj.remove("items") else {
        return Err(GatewayError::invalid(
            "the connector list has no 'items' list",
        ));
    };
    let items = rows
        .into_iter()
        .map(ConnectorRow::from_json)
        .collect::<Result<_, _>>()?;
    Ok(ListPage { items, next_cursor })
}

/// `{"results": [...], "summary"?}`: `results` is required, `summary` is never looked at.
fn parse_mint(body: &Value) -> Result<Vec<MintRow>, GatewayError> {
    let obj = body
        .as_object()
        .ok_or_else(|| GatewayError::invalid("the mint answer is not an object"))?;
    let rows = obj
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| GatewayError::invalid("the mint answer has no 'results' list"))?;
    rows.iter().map(MintRow::from_json).collect()
}

/// The `Retry-After` header in (possibly fractional) seconds, else the body's
/// `retryAfterMs`, else 1 s. An HTTP-date header is not understood (no clock here) and falls
/// through to the body.
fn retry_after(response: &HttpResponse) -> Duration {
    let from_header = response
        .retry_after
        .as_deref()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok());
    let from_body = || {
        let body: Value = serde_json::from_slice(&response.body).ok()?;
        let ms = body.get("retryAfterMs")?.as_f64()?;
        Duration::try_from_secs_f64(ms / 1000.0).ok()
    };
    from_header
        .or_else(from_body)
        .unwrap_or(DEFAULT_RETRY_AFTER)
}

/// Percent-encodes a query value or a path segment: only the unreserved characters of
/// RFC 3986 (`A-Z a-z 0-9 - . _ ~`) pass; every other byte of the UTF-8 text becomes `%XX`.
/// Gateway ids and cursors are opaque, so nothing else is safe to pass through.
pub fn percent_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::OpId;
    use crate::tool_gateway::{AccountStatus, DESKTOP_RETURN_TO, MintStatus};
    use serde_json::json;
    use std::collections::VecDeque;

    const BASE: &str = "http://gw.test:8080";

    #[test]
    fn each_route_is_named_by_its_method_and_path() {
        for route in GatewayRoute::ALL {
            assert_eq!(
                route.endpoint(),
                format!("{} {}", route.method().as_str(), route.path())
            );
            assert_eq!(GatewayRoute::parse(route.name()), Some(route));
        }
        assert_eq!(GatewayRoute::parse("accounts"), None);
        assert_eq!(
            GatewayRoute::of_path("/v1/connectors"),
            Some((GatewayRoute::List, ""))
        );
        assert_eq!(
            GatewayRoute::of_path("/v1/connectors/accounts/ca_1%2F"),
            Some((GatewayRoute::Account, "ca_1%2F"))
        );
        assert_eq!(GatewayRoute::of_path("/v1/connectors/accounts"), None);
        assert_eq!(GatewayRoute::of_path("/v1/connectors/"), None);
    }

    fn config() -> ClientConfig {
        ClientConfig::new(BASE, Some("s3cret".into()))
    }

    fn ok(body: Value) -> HttpAnswer {
        Ok(HttpResponse::new(200, body.to_string()))
    }

    fn status(code: u16) -> HttpAnswer {
        Ok(HttpResponse::new(code, "{}"))
    }

    fn failed() -> HttpAnswer {
        Err(TransportError::Failed("connection refused".into()))
    }

    /// Runs `call` against canned answers; returns the result and every request sent.
    fn drive(
        config: &ClientConfig,
        call: &GatewayCall,
        answers: Vec<HttpAnswer>,
    ) -> (Result<GatewayReply, GatewayError>, Vec<HttpRequest>) {
        let mut answers = VecDeque::from(answers);
        let mut sent = Vec::new();
        let result = Exchange::run(config, call, |request| {
            sent.push(request.clone());
            answers
                .pop_front()
                .expect("the exchange sent more requests than scripted")
        });
        assert!(answers.is_empty(), "unused answers: {answers:?}");
        (result, sent)
    }

    fn list() -> GatewayCall {
        GatewayCall::List { timeout: None }
    }

    fn mint(names: &[&str]) -> GatewayCall {
        GatewayCall::Mint(Box::new(MintRequest {
            connectors: names.iter().map(|n| (*n).into()).collect(),
            reinitiate: false,
            return_to: None,
            op: None,
        }))
    }

    fn account(id: &str) -> GatewayCall {
        GatewayCall::Account {
            connection_id: id.into(),
            timeout: Duration::from_secs(7),
        }
    }

    fn row(name: &str) -> Value {
        json!({"connector": name, "enabled": true, "connected": false})
    }

    fn account_body(id: &str, status: &str) -> Value {
        json!({"connectionId": id, "connector": "gmail", "status": status, "label": "me",
               "active": status == "active", "createdAt": "x", "updatedAt": "y"})
    }

    fn names(result: Result<GatewayReply, GatewayError>) -> Vec<String> {
        match result {
            Ok(GatewayReply::Connectors(rows)) => {
                rows.iter().map(|r| r.connector.to_string()).collect()
            }
            other => panic!("not a list: {other:?}"),
        }
    }

    fn err(result: Result<GatewayReply, GatewayError>) -> GatewayError {
        result.expect_err("the call should fail")
    }

    // ---- requests ----

    #[test]
    fn every_request_carries_the_token_and_json_headers() {
        let calls = [list(), mint(&["gmail"]), account("ca_1")];
        let answers = [
            ok(json!({"items": [], "nextCursor": null})),
            ok(json!({"results": []})),
            ok(account_body("ca_1", "pending")),
        ];
        for (call, answer) in calls.iter().zip(answers) {
            let (result, sent) = drive(&config(), call, vec![answer]);
            assert!(result.is_ok(), "{result:?}");
            assert_eq!(sent.len(), 1);
            let req = &sent[0];
            assert_eq!(req.header("authorization"), Some("Bearer s3cret"));
            assert_eq!(req.header("Content-Type"), Some("application/json"));
            assert_eq!(req.header("accept"), Some("application/json"));
        }
    }

    #[test]
    fn list_route_and_timeouts() {
        let page = || ok(json!({"items": [row("gmail")], "nextCursor": null}));
        let (result, sent) = drive(&config(), &list(), vec![page()]);
        assert_eq!(names(result), ["gmail"]);
        assert_eq!(sent[0].method, HttpMethod::Get);
        assert_eq!(sent[0].url, format!("{BASE}/v1/connectors?limit=50"));
        assert_eq!(sent[0].body, None);
        assert_eq!(sent[0].timeout, DEFAULT_TIMEOUT);

        let call = GatewayCall::List {
            timeout: Some(Duration::from_millis(1500)),
        };
        let (_, sent) = drive(&config(), &call, vec![page()]);
        assert_eq!(sent[0].timeout, Duration::from_millis(1500));

        let short = config().with_default_timeout(Duration::from_secs(3));
        let (_, sent) = drive(&short, &list(), vec![page()]);
        assert_eq!(sent[0].timeout, Duration::from_secs(3));
    }

    #[test]
    fn mint_route_body_and_default_timeout() {
        let config = config().with_default_timeout(Duration::from_secs(4));
        let (result, sent) = drive(
            &config,
            &mint(&["gmail", "notion"]),
            vec![ok(json!({
                "results": [
                    {"connector": "gmail", "status": "initiated", "connectUrl": "https://c/1",
                     "connectionId": "ca_1", "reinitiated": false},
                    {"connector": "notion", "status": "active", "connectionId": "ca_2"},
                ],
                "summary": {"initiated": 1, "active": 1},
            }))],
        );
        let Ok(GatewayReply::Minted(rows)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].status, MintStatus::Initiated);
        assert_eq!(rows[0].connect_url.as_deref(), Some("https://c/1"));
        assert_eq!(rows[1].status, MintStatus::Active);
        let req = &sent[0];
        assert_eq!(req.method, HttpMethod::Post);
        assert_eq!(req.url, format!("{BASE}/v1/connectors/connections"));
        assert_eq!(req.timeout, Duration::from_secs(4));
        assert_eq!(
            req.body.as_deref(),
            Some(r#"{"connectors":["gmail","notion"],"reinitiate":false}"#)
        );
    }

    #[test]
    fn mint_carries_return_to_and_op_only_when_present() {
        let op = OpId::parse("0123456789ab").unwrap();
        let call = GatewayCall::Mint(Box::new(MintRequest {
            connectors: vec!["gmail".into()],
            reinitiate: true,
            return_to: Some(DESKTOP_RETURN_TO.into()),
            op: Some(op),
        }));
        let (_, sent) = drive(&config(), &call, vec![ok(json!({"results": []}))]);
        assert_eq!(
            sent[0].body.as_deref(),
            Some(
                r#"{"connectors":["gmail"],"reinitiate":true,"returnTo":"connop-desktop","op":"0123456789ab"}"#
            )
        );
    }

    #[test]
    fn account_route_encodes_the_id_and_takes_the_call_timeout() {
        let (result, sent) = drive(
            &config(),
            &account("ca_1/x y?"),
            vec![ok(account_body("ca_1/x y?", "active"))],
        );
        let Ok(GatewayReply::Account(Some(acc))) = result else {
            panic!("{result:?}")
        };
        assert_eq!(acc.status, AccountStatus::Active);
        assert_eq!(&*acc.connection_id, "ca_1/x y?");
        assert_eq!(sent[0].method, HttpMethod::Get);
        assert_eq!(
            sent[0].url,
            format!("{BASE}/v1/connectors/accounts/ca_1%2Fx%20y%3F")
        );
        assert_eq!(sent[0].timeout, Duration::from_secs(7));
        assert_eq!(sent[0].body, None);
    }

    #[test]
    fn trailing_slashes_of_the_base_url_are_dropped() {
        for base in ["http://gw.test:8080/", "http://gw.test:8080//"] {
            let config = ClientConfig::new(base, Some("t".into()));
            assert_eq!(config.base_url, BASE);
            let (_, sent) = drive(&config, &account("ca_1"), vec![status(404)]);
            assert_eq!(sent[0].url, format!("{BASE}/v1/connectors/accounts/ca_1"));
        }
        // Even a hand-built config with a trailing slash never produces `//`.
        let mut config = config();
        config.base_url.push('/');
        let (_, sent) = drive(&config, &account("ca_1"), vec![status(404)]);
        assert_eq!(sent[0].url, format!("{BASE}/v1/connectors/accounts/ca_1"));
    }

    #[test]
    fn percent_encoding_passes_only_unreserved_characters() {
        assert_eq!(percent_encode("AZaz09-._~"), "AZaz09-._~");
        assert_eq!(
            percent_encode("a b/c+d=e&f?g#h%"),
            "a%20b%2Fc%2Bd%3De%26f%3Fg%23h%25"
        );
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(percent_encode(""), "");
    }

    // ---- missing token ----

    #[test]
    fn no_token_refuses_every_route_without_sending() {
        for token in [None, Some(String::new()), Some("  ".into())] {
            let config = ClientConfig::new(BASE, token.clone());
            assert_eq!(config.token, None);
            for call in [list(), mint(&["gmail"]), account("ca_1")] {
                let (result, sent) = drive(&config, &call, vec![]);
                assert_eq!(result, Err(GatewayError::MissingToken));
                assert!(sent.is_empty());
            }
            // A hand-built config with an empty token is refused too.
            let mut config = config;
            config.token = token.map(|_| String::new());
            let ExchangeNext::Done(Err(GatewayError::MissingToken)) =
                Exchange::start(&config, &list())
            else {
                panic!("an empty token must not be sent");
            };
        }
    }

    // ---- pagination ----

    #[test]
    fn list_follows_cursors_and_concatenates_items() {
        let (result, sent) = drive(
            &config(),
            &list(),
            vec![
                ok(json!({"items": [row("gmail"), row("notion")], "nextCursor": "p2"})),
                ok(json!({"items": [row("slack")], "nextCursor": "page 3/+="})),
                ok(json!({"items": [row("github")], "nextCursor": null})),
            ],
        );
        assert_eq!(names(result), ["gmail", "notion", "slack", "github"]);
        let urls: Vec<_> = sent.iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                format!("{BASE}/v1/connectors?limit=50"),
                format!("{BASE}/v1/connectors?limit=50&cursor=p2"),
                format!("{BASE}/v1/connectors?limit=50&cursor=page%203%2F%2B%3D"),
            ]
        );
    }

    #[test]
    fn an_absent_or_empty_cursor_ends_the_list() {
        let (result, sent) = drive(&config(), &list(), vec![ok(json!({"items": [row("a")]}))]);
        assert_eq!((names(result), sent.len()), (vec!["a".to_string()], 1));
        let body = json!({"items": [row("a")], "nextCursor": ""});
        let (result, sent) = drive(&config(), &list(), vec![ok(body)]);
        assert_eq!((names(result), sent.len()), (vec!["a".to_string()], 1));
    }

    #[test]
    fn list_stops_after_the_page_cap() {
        let endless = |n: usize| -> Vec<HttpAnswer> {
            (0..n)
                .map(|i| ok(json!({"items": [row(&format!("c{i}"))], "nextCursor": format!("p{}", i + 1)})))
                .collect()
        };
        let (result, sent) = drive(&config(), &list(), endless(20));
        assert_eq!(sent.len(), DEFAULT_MAX_PAGES);
        let names = names(result);
        assert_eq!(names.len(), 20);
        assert_eq!((names[0].as_str(), names[19].as_str()), ("c0", "c19"));
        assert!(sent[19].url.ends_with("&cursor=p19"));

        let (result, sent) = drive(&config().with_max_pages(3), &list(), endless(3));
        assert_eq!(
            (result.map(|r| r.route()), sent.len()),
            (Ok(GatewayRoute::List), 3)
        );
        // A cap of zero still reads one page.
        let (_, sent) = drive(&config().with_max_pages(0), &list(), endless(1));
        assert_eq!(sent.len(), 1);
    }

    // ---- status mapping ----

    #[test]
    fn auth_statuses_map_to_auth_on_every_route() {
        for code in [401, 403] {
            for call in [list(), mint(&["gmail"]), account("ca_1")] {
                let (result, sent) = drive(&config(), &call, vec![status(code)]);
                assert_eq!(err(result), GatewayError::Auth { status: code });
                assert_eq!(sent.len(), 1, "auth errors are not retried");
            }
        }
    }

    #[test]
    fn not_found_is_unavailable_on_list_and_mint_but_none_on_account() {
        for call in [list(), mint(&["gmail"])] {
            let (result, _) = drive(&config(), &call, vec![status(404)]);
            assert_eq!(err(result), GatewayError::Unavailable);
        }
        for body in [
            r#"{"error": "connection_not_found"}"#,
            "",
            "<html>nope</html>",
        ] {
            let answer = Ok(HttpResponse::new(404, body));
            let (result, sent) = drive(&config(), &account("ca_1"), vec![answer]);
            assert_eq!(result, Ok(GatewayReply::Account(None)));
            assert_eq!(sent.len(), 1);
        }
    }

    #[test]
    fn other_non_success_statuses_are_http_errors() {
        for code in [100, 301, 304, 400, 409, 422, 499] {
            let (result, sent) = drive(&config(), &list(), vec![status(code)]);
            assert_eq!(err(result), GatewayError::Http { status: code });
            assert_eq!(sent.len(), 1, "only >= 500 is retried");
        }
        // A 2xx with no body is not a parseable answer.
        let (result, _) = drive(&config(), &list(), vec![Ok(HttpResponse::new(204, ""))]);
        assert!(matches!(err(result), GatewayError::InvalidResponse(_)));
    }

    #[test]
    fn rate_limit_prefers_the_header_then_the_body_then_one_second() {
        let cases: Vec<(HttpResponse, Duration)> = vec![
            (
                HttpResponse::new(429, "{}").with_retry_after("2"),
                Duration::from_secs(2),
            ),
            (
                HttpResponse::new(429, "").with_retry_after(" 0.25 "),
                Duration::from_millis(250),
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": 9000}"#).with_retry_after("3"),
                Duration::from_secs(3),
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": 1500}"#),
                Duration::from_millis(1500),
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": 2.5}"#),
                Duration::from_micros(2500),
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": 700}"#).with_retry_after("soon"),
                Duration::from_millis(700),
            ),
            (
                HttpResponse::new(429, "{}").with_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, "{}").with_retry_after("-1"),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": -5}"#),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": "10"}"#),
                DEFAULT_RETRY_AFTER,
            ),
            (HttpResponse::new(429, "not json"), DEFAULT_RETRY_AFTER),
            (HttpResponse::new(429, ""), Duration::from_secs(1)),
        ];
        for (response, expected) in cases {
            for call in [list(), mint(&["gmail"]), account("ca_1")] {
                let (result, sent) = drive(&config(), &call, vec![Ok(response.clone())]);
                assert_eq!(
                    err(result),
                    GatewayError::RateLimited {
                        retry_after: expected
                    },
                    "{response:?}"
                );
                assert_eq!(sent.len(), 1, "a 429 is not retried");
            }
        }
    }

    #[test]
    fn out_of_range_retry_after_values_fall_back_and_huge_ones_are_kept() {
        for (response, expected) in [
            (
                HttpResponse::new(429, "{}").with_retry_after("inf"),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, "{}").with_retry_after("NaN"),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, "{}").with_retry_after("1e30"),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, r#"{"retryAfterMs": 1e300}"#),
                DEFAULT_RETRY_AFTER,
            ),
            (
                HttpResponse::new(429, "{}").with_retry_after("1e18"),
                Duration::from_secs(1_000_000_000_000_000_000),
            ),
        ] {
            let (result, _) = drive(&config(), &account("ca_1"), vec![Ok(response)]);
            assert_eq!(
                err(result),
                GatewayError::RateLimited {
                    retry_after: expected
                }
            );
        }
    }

    #[test]
    fn a_body_nested_past_the_recursion_limit_is_an_invalid_response() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let (result, _) = drive(&config(), &list(), vec![Ok(HttpResponse::new(200, deep))]);
        assert!(matches!(err(result), GatewayError::InvalidResponse(_)));
    }

    // ---- retry ----

    #[test]
    fn server_errors_and_transport_failures_are_retried_once() {
        for call in [list(), account("ca_1")] {
            let (result, sent) = drive(&config(), &call, vec![status(500), status(503)]);
            assert_eq!(err(result), GatewayError::Http { status: 503 });
            assert_eq!(sent.len(), 2);
            assert_eq!(sent[0], sent[1], "the retry is the same request");

            let (result, sent) = drive(&config(), &call, vec![failed(), failed()]);
            let GatewayError::Transport(reason) = err(result) else {
                panic!()
            };
            assert!(reason.contains("connection refused"), "{reason}");
            assert_eq!(sent.len(), 2);
        }
        let (result, sent) = drive(
            &config(),
            &account("ca_1"),
            vec![status(502), ok(account_body("ca_1", "pending"))],
        );
        let Ok(GatewayReply::Account(Some(acc))) = result else {
            panic!("{result:?}")
        };
        assert_eq!((acc.status, sent.len()), (AccountStatus::Pending, 2));

        let (result, sent) = drive(
            &config(),
            &list(),
            vec![
                Err(TransportError::TimedOut),
                ok(json!({"items": [row("a")]})),
            ],
        );
        assert_eq!((names(result), sent.len()), (vec!["a".to_string()], 2));
    }

    #[test]
    fn an_account_read_that_timed_out_is_not_retried_but_one_that_failed_early_is() {
        let (result, sent) = drive(
            &config(),
            &account("ca_1"),
            vec![Err(TransportError::TimedOut)],
        );
        assert!(err(result).is_retryable());
        assert_eq!(sent.len(), 1, "the timeout was all the time the read had");
        let (result, sent) = drive(
            &config(),
            &account("ca_1"),
            vec![failed(), ok(account_body("ca_1", "active"))],
        );
        let Ok(GatewayReply::Account(Some(acc))) = result else {
            panic!("{result:?}")
        };
        assert_eq!((acc.status, sent.len()), (AccountStatus::Active, 2));
    }

    #[test]
    fn a_retry_is_flagged_and_a_timeout_names_its_duration() {
        let call = GatewayCall::List {
            timeout: Some(Duration::from_secs(7)),
        };
        let ExchangeNext::Send(first) = Exchange::start(&config(), &call) else {
            panic!()
        };
        assert!(!first.is_retry());
        let ExchangeNext::Send(second) = first.receive(Err(TransportError::TimedOut)) else {
            panic!()
        };
        assert!(second.is_retry());
        let ExchangeNext::Done(Err(GatewayError::Transport(reason))) =
            second.receive(Err(TransportError::TimedOut))
        else {
            panic!()
        };
        assert_eq!(reason, "the request timed out after 7 s");
    }

    #[test]
    fn a_failed_page_retries_that_page_only() {
        let (result, sent) = drive(
            &config(),
            &list(),
            vec![
                ok(json!({"items": [row("gmail")], "nextCursor": "p2"})),
                status(500),
                ok(json!({"items": [row("notion")], "nextCursor": "p3"})),
                failed(),
                ok(json!({"items": [row("slack")], "nextCursor": null})),
            ],
        );
        assert_eq!(names(result), ["gmail", "notion", "slack"]);
        let cursors: Vec<_> = sent
            .iter()
            .map(|r| r.url.rsplit('?').next().unwrap())
            .collect();
        assert_eq!(
            cursors,
            [
                "limit=50",
                "limit=50&cursor=p2",
                "limit=50&cursor=p2",
                "limit=50&cursor=p3",
                "limit=50&cursor=p3",
            ]
        );

        // Each page gets its own one retry; a page failing twice ends the call.
        let (result, sent) = drive(
            &config(),
            &list(),
            vec![
                ok(json!({"items": [row("gmail")], "nextCursor": "p2"})),
                status(500),
                status(500),
            ],
        );
        assert_eq!(err(result), GatewayError::Http { status: 500 });
        assert_eq!(sent.len(), 3);
    }

    #[test]
    fn the_mint_is_never_retried() {
        for answer in [
            status(500),
            status(502),
            failed(),
            Err(TransportError::TimedOut),
        ] {
            let (result, sent) = drive(&config(), &mint(&["gmail"]), vec![answer]);
            assert!(err(result).is_retryable());
            assert_eq!(sent.len(), 1);
        }
    }

    // ---- invalid responses ----

    #[test]
    fn bodies_that_do_not_parse_are_invalid_responses() {
        let bad: Vec<(GatewayCall, &str)> = vec![
            (list(), "not json"),
            (list(), "[]"),
            (list(), r#"{"nextCursor": null}"#),
            (list(), r#"{"items": {}}"#),
            (list(), r#"{"items": [], "nextCursor": 5}"#),
            (list(), r#"{"items": [{"enabled": true}]}"#),
            (
                list(),
                r#"{"items": [{"connector": "a", "connected": "yes"}]}"#,
            ),
            (mint(&["a"]), "{"),
            (mint(&["a"]), r#"{"summary": {}}"#),
            (mint(&["a"]), r#"{"results": {}}"#),
            (
                mint(&["a"]),
                r#"{"results": [{"connector": "a", "status": "weird"}]}"#,
            ),
            (mint(&["a"]), r#"{"results": [{"connector": "a"}]}"#),
            (account("ca_1"), ""),
            (
                account("ca_1"),
                r#"{"connectionId": "ca_1", "connector": "g", "status": "zombie"}"#,
            ),
            (account("ca_1"), r#"{"connector": "g", "status": "active"}"#),
        ];
        for (call, body) in bad {
            let (result, sent) = drive(&config(), &call, vec![Ok(HttpResponse::new(200, body))]);
            assert!(
                matches!(err(result), GatewayError::InvalidResponse(_)),
                "{body} on {}",
                call.route().name()
            );
            assert_eq!(sent.len(), 1, "invalid responses are not retried");
        }
    }

    #[test]
    fn unknown_fields_and_any_summary_are_tolerated() {
        for summary in [json!(null), json!("text"), json!(3), json!({"x": [1]})] {
            let body = json!({"results": [{"connector": "a", "status": "failed",
                                           "statusReason": "nope", "extra": 1}],
                              "summary": summary, "more": true});
            let (result, _) = drive(&config(), &mint(&["a"]), vec![ok(body)]);
            let Ok(GatewayReply::Minted(rows)) = result else {
                panic!("{result:?}")
            };
            assert_eq!(rows[0].status, MintStatus::Failed);
            assert_eq!(rows[0].status_reason.as_deref(), Some("nope"));
        }
        let body = json!({"items": [{"connector": "a", "connectionStatus": "x", "new": 1}],
                          "nextCursor": null, "total": 1});
        let (result, _) = drive(&config(), &list(), vec![ok(body)]);
        let Ok(GatewayReply::Connectors(rows)) = result else {
            panic!()
        };
        assert_eq!(rows[0].raw["new"], 1, "rows stay verbatim");
        let (result, _) = drive(
            &config(),
            &account("ca_1"),
            vec![ok(account_body("ca_1", "revoked"))],
        );
        assert!(matches!(result, Ok(GatewayReply::Account(Some(_)))));
    }

    // ---- config ----

    #[test]
    fn config_from_env_values() {
        assert_eq!(ClientConfig::from_env_values(None, Some("t".into())), None);
        assert_eq!(ClientConfig::from_env_values(Some(" ".into()), None), None);
        let config =
            ClientConfig::from_env_values(Some("https://gw.example/".into()), Some("t".into()))
                .unwrap();
        assert_eq!(config.base_url, "https://gw.example");
        assert_eq!(config.token.as_deref(), Some("t"));
        assert_eq!(
            (config.default_timeout, config.max_pages),
            (DEFAULT_TIMEOUT, 20)
        );
        let config = ClientConfig::from_env_values(Some("https://gw.example".into()), None);
        assert_eq!(config.unwrap().token, None);
    }

    /// Polls a future that never waits (its `send` answers at once) to its end, with no
    /// runtime: the async loop must not need one.
    fn ready<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("nothing here waits"),
        }
    }

    #[test]
    fn the_async_loop_sends_and_answers_as_the_blocking_one() {
        let scripts: Vec<(GatewayCall, Vec<HttpAnswer>)> = vec![
            (
                list(),
                vec![
                    ok(json!({"items": [row("gmail")], "nextCursor": "p2"})),
                    status(500),
                    ok(json!({"items": [row("notion")], "nextCursor": null})),
                ],
            ),
            (mint(&["gmail"]), vec![failed()]),
            (account("ca_1"), vec![status(404)]),
            (
                account("ca_1"),
                vec![failed(), ok(account_body("ca_1", "active"))],
            ),
        ];
        for (call, answers) in scripts {
            let (blocking, sent) = drive(&config(), &call, answers.clone());
            let mut queue = VecDeque::from(answers);
            let mut sent_async = Vec::new();
            let result = ready(Exchange::run_async(&config(), &call, |request| {
                sent_async.push(request);
                std::future::ready(queue.pop_front().expect("no more requests than scripted"))
            }));
            assert_eq!(result, blocking, "{}", call.route().name());
            assert_eq!(sent_async, sent, "{}", call.route().name());
            assert!(queue.is_empty());
        }
        // No token: refused without sending, like the blocking loop.
        let refused = ClientConfig::new(BASE, None);
        let result = ready(Exchange::run_async(&refused, &list(), |_| async {
            panic!("nothing is sent without a token")
        }));
        assert_eq!(result, Err(GatewayError::MissingToken));
    }

    #[test]
    fn a_host_with_its_own_credentials_sends_no_authorization_and_needs_no_token() {
        let config = ClientConfig::with_host_credentials(format!("{BASE}/"));
        let (result, sent) = drive(&config, &list(), vec![ok(json!({"items": []}))]);
        assert!(result.is_ok());
        assert_eq!(sent[0].url, format!("{BASE}/v1/connectors?limit=50"));
        assert_eq!(sent[0].header("authorization"), None);
        assert_eq!(sent[0].header("content-type"), Some("application/json"));
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let config = config();
        assert!(!format!("{config:?}").contains("s3cret"));
        let ExchangeNext::Send(in_flight) = Exchange::start(&config, &list()) else {
            panic!()
        };
        let text = format!("{in_flight:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("v1/connectors"));
    }
}
