//! The blocking HTTP client of the tool gateway (SPEC §6).
//!
//! Every rule of the API lives in [`connop_core::wire`]; this client only moves the bytes of
//! each request the exchange yields with isahc and feeds the answer back. The isahc helpers
//! here are public so the async client sends exactly the same requests.

use connop_core::gateway::{
    Account, BlockingGateway, ConnectorRow, GatewayCall, GatewayError, GatewayReply, MintRequest,
    MintRow,
};
use connop_core::wire::{self, Answer, ClientConfig, Exchange, Method, TransportError};
use isahc::HttpClient;
use isahc::config::Configurable;
use std::io::Read;
use std::time::Duration;

/// The largest answer body read. A tool-gateway answer is a few KiB (a list page holds at most
/// 50 rows); past this the transfer is abandoned, so a gateway cannot make the client buffer
/// without bound. Such a request did not complete: a transport failure.
pub const MAX_BODY: u64 = 4 << 20;

/// The transport failure of an answer longer than [`MAX_BODY`].
pub fn too_large() -> TransportError {
    TransportError::Failed(format!("the answer is larger than {} MiB", MAX_BODY >> 20))
}

/// An isahc client for the mint, whose connections are never reused: curl resends a request
/// whose reused connection closed before any answer byte, and a mint is never sent twice.
pub fn mint_client() -> Result<HttpClient, isahc::Error> {
    HttpClient::builder().connection_cache_size(0).build()
}

/// The environment variable that names an external tool gateway's origin.
pub const URL_VAR: &str = "CONNECTOR_GATEWAY_URL";
/// The environment variable that holds the gateway's bearer token.
pub const TOKEN_VAR: &str = "CONNECTOR_GATEWAY_TOKEN";

/// Why an HTTP gateway client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// isahc could not start its agent (curl init, thread spawn).
    #[error("could not start the HTTP client: {0}")]
    Client(#[from] isahc::Error),
}

/// The client config the environment names, or `None` when `CONNECTOR_GATEWAY_URL` is unset
/// (the host then runs the embedded simulated gateway, SPEC §6.1).
pub fn env_config() -> Option<ClientConfig> {
    ClientConfig::from_env_values(std::env::var(URL_VAR).ok(), std::env::var(TOKEN_VAR).ok())
}

/// Builds the isahc request for a wire request, body type left to the caller (sync `Body` or
/// `AsyncBody`), so both clients send byte-identical requests.
pub fn to_isahc<B>(request: &wire::Request) -> Result<isahc::Request<B>, TransportError>
where
    B: From<Vec<u8>> + From<()>,
{
    let mut builder = isahc::Request::builder()
        .method(request.method.as_str())
        .uri(request.url.as_str())
        .timeout(request.timeout);
    for (name, value) in &request.headers {
        builder = builder.header(*name, value.as_str());
    }
    let body = match &request.body {
        Some(body) => B::from(body.clone().into_bytes()),
        None => B::from(()),
    };
    builder
        .body(body)
        .map_err(|e| TransportError::Failed(format!("the request could not be built: {e}")))
}

/// Maps an isahc failure to the exchange's transport input; timeouts are kept apart so the
/// reason can name the timeout.
pub fn transport_error(error: &isahc::Error) -> TransportError {
    if error.is_timeout() {
        TransportError::TimedOut
    } else {
        TransportError::Failed(error.to_string())
    }
}

/// Maps a failure while reading a body (isahc wraps its own errors, timeouts included, in
/// `io::Error`).
pub fn body_error(error: std::io::Error) -> TransportError {
    transport_error(&isahc::Error::from(error))
}

/// The wire response for an isahc response whose body was read.
pub fn to_wire<B>(response: &isahc::Response<B>, body: Vec<u8>) -> wire::Response {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    wire::Response {
        status: response.status().as_u16(),
        retry_after,
        body,
    }
}

/// The tool gateway over HTTP, blocking the calling thread for each call. One isahc client
/// per gateway, so connections are reused across calls — except by the mint.
#[derive(Debug)]
pub struct HttpGateway {
    config: ClientConfig,
    client: HttpClient,
    /// The mint's client: see [`mint_client`].
    mint_client: HttpClient,
}

impl HttpGateway {
    /// A gateway client for `config` with its own isahc clients.
    pub fn new(config: ClientConfig) -> Result<Self, HttpError> {
        Ok(HttpGateway::with_clients(
            config,
            HttpClient::new()?,
            mint_client()?,
        ))
    }

    /// A gateway client on caller-built isahc clients (proxies, TLS roots, shared pools):
    /// `client` for the reads, `mint_client` for the mint. Build `mint_client` with
    /// `connection_cache_size(0)` (as [`mint_client`] does): on a reused connection curl may
    /// send a mint twice.
    pub fn with_clients(config: ClientConfig, client: HttpClient, mint_client: HttpClient) -> Self {
        HttpGateway {
            config,
            client,
            mint_client,
        }
    }

    /// The gateway the environment names; `Ok(None)` when `CONNECTOR_GATEWAY_URL` is unset.
    /// A URL with no token still builds: its calls are refused without sending.
    pub fn from_env() -> Result<Option<Self>, HttpError> {
        env_config().map(HttpGateway::new).transpose()
    }

    /// Where this client sends.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Sends one wire request and reads the whole answer (at most [`MAX_BODY`] bytes of it).
    pub fn send(&self, request: &wire::Request) -> Answer {
        // The mint is the API's only POST.
        let client = match request.method {
            Method::Post => &self.mint_client,
            Method::Get => &self.client,
        };
        let request: isahc::Request<isahc::Body> = to_isahc(request)?;
        let mut response = client.send(request).map_err(|e| transport_error(&e))?;
        let mut body = Vec::new();
        response
            .body_mut()
            .take(MAX_BODY + 1)
            .read_to_end(&mut body)
            .map_err(body_error)?;
        if body.len() as u64 > MAX_BODY {
            return Err(too_large());
        }
        Ok(to_wire(&response, body))
    }

    /// Runs one gateway call to its end (pages, the one retry).
    pub fn exchange(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        self.drive(Exchange::start(&self.config, call))
    }

    fn drive(&self, mut step: wire::Step) -> Result<GatewayReply, GatewayError> {
        loop {
            match step {
                wire::Step::Send(pending) => {
                    let answer = self.send(pending.request());
                    step = pending.receive(answer);
                }
                wire::Step::Done(result) => return result,
            }
        }
    }
}

fn mismatch(route: &str, reply: &GatewayReply) -> GatewayError {
    GatewayError::invalid(format!("a {} answer to a {route} call", reply.kind()))
}

impl BlockingGateway for HttpGateway {
    fn list(&self, timeout: Option<Duration>) -> Result<Vec<ConnectorRow>, GatewayError> {
        match self.drive(Exchange::list(&self.config, timeout))? {
            GatewayReply::Connectors(rows) => Ok(rows),
            other => Err(mismatch("list", &other)),
        }
    }

    fn mint(&self, request: &MintRequest) -> Result<Vec<MintRow>, GatewayError> {
        match self.drive(Exchange::mint(&self.config, request))? {
            GatewayReply::Minted(rows) => Ok(rows),
            other => Err(mismatch("mint", &other)),
        }
    }

    fn account(
        &self,
        connection_id: &str,
        timeout: Duration,
    ) -> Result<Option<Account>, GatewayError> {
        match self.drive(Exchange::account(&self.config, connection_id, timeout))? {
            GatewayReply::Account(account) => Ok(account),
            other => Err(mismatch("account", &other)),
        }
    }

    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        self.exchange(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use connop_core::gateway::{AccountStatus, MintStatus};
    use connop_fixtures::canned::{Canned, Server, account_body, mint_request, reply};
    use serde_json::json;
    use std::net::TcpListener;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn every_route_sends_the_token_and_content_type() {
        let server = Server::start(vec![
            reply(
                200,
                json!({"items": [{"connector": "gmail", "enabled": true}],
                              "nextCursor": "c 2/="}),
            ),
            reply(
                200,
                json!({"items": [{"connector": "notion", "connected": true}],
                              "nextCursor": "c3"}),
            ),
            reply(
                200,
                json!({"items": [{"connector": "slack"}], "nextCursor": null}),
            ),
            reply(
                200,
                json!({"results": [
                {"connector": "gmail", "status": "initiated", "connectUrl": "https://c/1",
                 "connectionId": "ca_gmail_1"},
                {"connector": "notion", "status": "active", "connectionId": "ca_notion_1"}],
                "summary": "whatever"}),
            ),
            reply(200, account_body("ca gmail/1", "active")),
        ]);
        let gateway = HttpGateway::new(server.config()).unwrap();
        let rows = gateway.list(None).unwrap();
        let names: Vec<_> = rows.iter().map(|r| r.connector.to_string()).collect();
        assert_eq!(names, ["gmail", "notion", "slack"]);
        let minted = gateway.mint(&mint_request()).unwrap();
        assert_eq!(minted[0].status, MintStatus::Initiated);
        assert_eq!(minted[1].connection_id.as_deref(), Some("ca_notion_1"));
        let account = gateway.account("ca gmail/1", SECOND).unwrap().unwrap();
        assert_eq!(account.status, AccountStatus::Active);

        let seen = server.finish();
        let lines: Vec<_> = seen
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect();
        assert_eq!(
            lines,
            [
                "GET /v1/connectors?limit=50",
                "GET /v1/connectors?limit=50&cursor=c%202%2F%3D",
                "GET /v1/connectors?limit=50&cursor=c3",
                "POST /v1/connectors/connections",
                "GET /v1/connectors/accounts/ca%20gmail%2F1",
            ]
        );
        for s in &seen {
            assert_eq!(s.header("authorization"), Some("Bearer tok-123"), "{s:?}");
            assert_eq!(s.header("content-type"), Some("application/json"), "{s:?}");
        }
        assert_eq!(
            seen[3].body,
            r#"{"connectors":["gmail","notion"],"reinitiate":false}"#
        );
        assert!(seen[0].body.is_empty());
    }

    #[test]
    fn the_mint_is_sent_once_even_on_a_server_error() {
        let server = Server::start(vec![reply(500, json!({"error": "boom"}))]);
        let gateway = HttpGateway::new(server.config()).unwrap();
        let err = gateway.mint(&mint_request()).unwrap_err();
        assert_eq!(err, GatewayError::Http { status: 500 });
        assert_eq!(server.finish().len(), 1);
    }

    #[test]
    fn an_account_read_is_retried_once_after_a_server_error() {
        let server = Server::start(vec![
            reply(500, json!({})),
            reply(200, account_body("ca_1", "pending")),
        ]);
        let gateway = HttpGateway::new(server.config()).unwrap();
        let account = gateway.account("ca_1", SECOND).unwrap().unwrap();
        assert_eq!(account.status, AccountStatus::Pending);
        let seen = server.finish();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].path, seen[1].path);
    }

    #[test]
    fn a_404_account_is_none_and_a_429_carries_retry_after() {
        let server = Server::start(vec![
            reply(404, json!({"error": "connection_not_found"})),
            Canned::Reply {
                status: 429,
                headers: vec![("Retry-After", "2".into())],
                body: r#"{"retryAfterMs": 5000}"#.into(),
            },
            reply(429, json!({"retryAfterMs": 250})),
            reply(401, json!({})),
            reply(404, json!({})),
        ]);
        let gateway = HttpGateway::new(server.config()).unwrap();
        assert_eq!(gateway.account("ca_1", SECOND), Ok(None));
        let two = GatewayError::RateLimited {
            retry_after: 2 * SECOND,
        };
        assert_eq!(gateway.account("ca_1", SECOND), Err(two));
        let quarter = GatewayError::RateLimited {
            retry_after: Duration::from_millis(250),
        };
        assert_eq!(gateway.list(None), Err(quarter));
        assert_eq!(gateway.list(None), Err(GatewayError::Auth { status: 401 }));
        let call = GatewayCall::Mint(Box::new(mint_request()));
        assert_eq!(gateway.call(&call), Err(GatewayError::Unavailable));
        assert_eq!(server.finish().len(), 5);
    }

    #[test]
    fn a_missing_token_sends_nothing() {
        let server = Server::start(vec![]);
        let config = ClientConfig::new(format!("http://{}", server.addr), None);
        let gateway = HttpGateway::new(config).unwrap();
        assert_eq!(gateway.list(None), Err(GatewayError::MissingToken));
        assert_eq!(
            gateway.mint(&mint_request()),
            Err(GatewayError::MissingToken)
        );
        assert_eq!(
            gateway.account("ca_1", SECOND),
            Err(GatewayError::MissingToken)
        );
        assert!(server.finish().is_empty());
    }

    #[test]
    fn a_refused_connection_is_a_transport_error() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = ClientConfig::new(format!("http://{addr}"), Some("t".into()));
        let gateway = HttpGateway::new(config).unwrap();
        let err = gateway.account("ca_1", SECOND).unwrap_err();
        assert!(matches!(err, GatewayError::Transport(_)), "{err:?}");
        let err = gateway.mint(&mint_request()).unwrap_err();
        assert!(matches!(err, GatewayError::Transport(_)), "{err:?}");
    }

    #[test]
    fn a_slow_answer_past_the_timeout_is_a_transport_error() {
        // The mint (default timeout, never retried): one request.
        let server = Server::start(vec![Canned::Hang]);
        let short = Duration::from_millis(150);
        let gateway = HttpGateway::new(server.config().with_default_timeout(short)).unwrap();
        let started = std::time::Instant::now();
        let err = gateway.mint(&mint_request()).unwrap_err();
        assert_eq!(
            err,
            GatewayError::Transport("the request timed out after 0.15 s".into())
        );
        assert!(started.elapsed() < 10 * short, "{:?}", started.elapsed());
        assert_eq!(server.finish().len(), 1);

        // An account read (its own timeout): retried once, then given up.
        let server = Server::start(vec![Canned::Hang, Canned::Hang]);
        let gateway = HttpGateway::new(server.config()).unwrap();
        let err = gateway
            .account("ca_1", Duration::from_millis(100))
            .unwrap_err();
        assert_eq!(
            err,
            GatewayError::Transport("the request timed out after 0.1 s".into())
        );
        assert_eq!(server.finish().len(), 2);
    }

    #[test]
    fn debug_output_hides_the_token() {
        let gateway =
            HttpGateway::new(ClientConfig::new("http://gw.test/", Some("hush".into()))).unwrap();
        assert_eq!(gateway.config().base_url, "http://gw.test");
        assert!(!format!("{gateway:?}").contains("hush"));
    }
}
