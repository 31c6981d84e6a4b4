//! What both HTTP clients of the tool gateway (blocking and async) must do, each test run on
//! both (docs/contract.md#tool-gateway-api): the routes with their token and content type,
//! pagination, the error mapping, the one retry of a read (not of an account read that timed
//! out) and never of the mint, the token check before sending, timeouts, a refused
//! connection, a connection dropped under a mint, and a bounded answer.

use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use connop_blocking::http::{HttpToolGateway, MAX_BODY};
use connop_core::tool_gateway::{
    Account, AccountStatus, AsyncToolGateway, BlockingToolGateway, ConnectorRow, GatewayCall,
    GatewayError, GatewayReply, MintRow, MintStatus,
};
use connop_core::wire::ClientConfig;
use connop_fixtures::canned::{Canned, Server, account_body, mint_request, reply};
use connop_smol::http::AsyncHttpToolGateway;
use serde_json::json;
use std::net::TcpListener;
use std::time::{Duration, Instant};

const SECOND: Duration = Duration::from_secs(1);

/// The two kinds of client, for `Client::new`.
const KINDS: [&str; 2] = ["blocking", "async"];

/// One client of each kind, behind the calls these tests make.
enum Client {
    Blocking(HttpToolGateway),
    Async(std::sync::Arc<AsyncHttpToolGateway>),
}

impl Client {
    /// The client of `kind` (one of [`KINDS`]) for `config`.
    fn new(kind: &str, config: ClientConfig) -> Client {
        match kind {
            "blocking" => Client::Blocking(HttpToolGateway::new(config).expect("client")),
            _ => Client::Async(std::sync::Arc::new(
                AsyncHttpToolGateway::new(config).expect("client"),
            )),
        }
    }

    fn list(&self) -> Result<Vec<ConnectorRow>, GatewayError> {
        self.call(&GatewayCall::List { timeout: None })
            .and_then(GatewayReply::into_connectors)
    }

    fn mint(&self) -> Result<Vec<MintRow>, GatewayError> {
        self.call(&GatewayCall::Mint(Box::new(mint_request())))
            .and_then(GatewayReply::into_minted)
    }

    fn account(&self, id: &str, timeout: Duration) -> Result<Option<Account>, GatewayError> {
        let call = GatewayCall::Account {
            connection_id: id.into(),
            timeout,
        };
        self.call(&call).and_then(GatewayReply::into_account)
    }

    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        match self {
            Client::Blocking(g) => g.call(call),
            Client::Async(g) => smol::block_on(g.call(call.clone())),
        }
    }
}

#[test]
fn every_route_sends_the_token_and_content_type() {
    for kind in KINDS {
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
        let client = Client::new(kind, server.config());
        let rows = client.list().unwrap();
        let names: Vec<_> = rows.iter().map(|r| r.connector.to_string()).collect();
        assert_eq!(names, ["gmail", "notion", "slack"], "{kind}");
        let minted = client.mint().unwrap();
        assert_eq!(minted[0].status, MintStatus::Initiated, "{kind}");
        assert_eq!(minted[1].connection_id.as_deref(), Some("ca_notion_1"));
        let account = client.account("ca gmail/1", SECOND).unwrap().unwrap();
        assert_eq!(account.status, AccountStatus::Active, "{kind}");

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
            ],
            "{kind}"
        );
        for s in &seen {
            assert_eq!(
                s.header("authorization"),
                Some("Bearer tok-123"),
                "{kind} {s:?}"
            );
            assert_eq!(
                s.header("content-type"),
                Some("application/json"),
                "{kind} {s:?}"
            );
        }
        assert_eq!(
            seen[3].body, r#"{"connectors":["gmail","notion"],"reinitiate":false}"#,
            "{kind}"
        );
        assert!(seen[0].body.is_empty(), "{kind}");
    }
}

#[test]
fn the_mint_is_sent_once_even_on_a_server_error() {
    for kind in KINDS {
        for status in [500, 503] {
            let server = Server::start(vec![reply(status, json!({"error": "boom"}))]);
            let client = Client::new(kind, server.config());
            assert_eq!(client.mint(), Err(GatewayError::Http { status }), "{kind}");
            assert_eq!(server.finish().len(), 1, "{kind} {status}");
        }
    }
}

#[test]
fn an_account_read_is_retried_once_after_a_server_error() {
    for kind in KINDS {
        let server = Server::start(vec![
            reply(500, json!({})),
            reply(200, account_body("ca_1", "pending")),
            reply(502, json!({})),
            reply(200, account_body("ca_1", "expired")),
        ]);
        let client = Client::new(kind, server.config());
        let account = client.account("ca_1", SECOND).unwrap().unwrap();
        assert_eq!(account.status, AccountStatus::Pending, "{kind}");
        // The same through the generic call.
        let call = GatewayCall::Account {
            connection_id: "ca_1".into(),
            timeout: SECOND,
        };
        let reply = client.call(&call).unwrap();
        let GatewayReply::Account(Some(account)) = reply else {
            panic!("{kind}: {reply:?}")
        };
        assert_eq!(account.status, AccountStatus::Expired, "{kind}");
        let seen = server.finish();
        assert_eq!(seen.len(), 4, "{kind}");
        assert!(seen.iter().all(|s| s.path == seen[0].path), "{kind}");
    }
}

#[test]
fn a_404_account_is_none_and_a_429_carries_retry_after() {
    for kind in KINDS {
        let server = Server::start(vec![
            reply(404, json!({"error": "connection_not_found"})),
            Canned::Reply {
                status: 429,
                headers: vec![("Retry-After", "2".into())],
                body: r#"{"retryAfterMs": 5000}"#.into(),
            },
            reply(429, json!({"retryAfterMs": 250})),
            reply(401, json!({})),
            reply(403, json!({})),
            reply(404, json!({})),
        ]);
        let client = Client::new(kind, server.config());
        assert_eq!(client.account("ca_1", SECOND), Ok(None), "{kind}");
        let two = GatewayError::RateLimited {
            retry_after: 2 * SECOND,
        };
        assert_eq!(client.account("ca_1", SECOND), Err(two), "{kind}");
        let quarter = GatewayError::RateLimited {
            retry_after: Duration::from_millis(250),
        };
        assert_eq!(client.list(), Err(quarter), "{kind}");
        assert_eq!(client.list(), Err(GatewayError::Auth { status: 401 }));
        assert_eq!(client.list(), Err(GatewayError::Auth { status: 403 }));
        let call = GatewayCall::Mint(Box::new(mint_request()));
        assert_eq!(client.call(&call), Err(GatewayError::Unavailable), "{kind}");
        assert_eq!(server.finish().len(), 6, "{kind}");
    }
}

#[test]
fn a_missing_token_sends_nothing() {
    for kind in KINDS {
        let server = Server::start(vec![]);
        let config = ClientConfig::new(format!("http://{}", server.addr), None);
        let client = Client::new(kind, config);
        assert_eq!(client.list(), Err(GatewayError::MissingToken), "{kind}");
        assert_eq!(client.mint(), Err(GatewayError::MissingToken), "{kind}");
        let read = client.account("ca_1", SECOND);
        assert_eq!(read, Err(GatewayError::MissingToken), "{kind}");
        assert!(server.finish().is_empty(), "{kind}");
    }
}

#[test]
fn a_refused_connection_is_a_transport_error() {
    for kind in KINDS {
        // A port that was just free: nothing listens on it.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = ClientConfig::new(format!("http://{addr}"), Some("t".into()));
        let client = Client::new(kind, config);
        let err = client.account("ca_1", SECOND).unwrap_err();
        assert!(matches!(err, GatewayError::Transport(_)), "{kind} {err:?}");
        let err = client.mint().unwrap_err();
        assert!(matches!(err, GatewayError::Transport(_)), "{kind} {err:?}");
    }
}

#[test]
fn a_slow_answer_past_the_timeout_is_a_transport_error() {
    for kind in KINDS {
        // The mint (default timeout, never retried): one request.
        let server = Server::start(vec![Canned::Hang]);
        let short = Duration::from_millis(150);
        let client = Client::new(kind, server.config().with_default_timeout(short));
        let started = Instant::now();
        assert_eq!(
            client.mint(),
            Err(GatewayError::Transport(
                "the request timed out after 0.15 s".into()
            )),
            "{kind}"
        );
        assert!(
            started.elapsed() < 10 * short,
            "{kind} {:?}",
            started.elapsed()
        );
        assert_eq!(server.finish().len(), 1, "{kind}");

        // An account read (its own timeout, the time the watcher had left): not sent again.
        let server = Server::start(vec![Canned::Hang, Canned::Hang]);
        let client = Client::new(kind, server.config());
        assert_eq!(
            client.account("ca_1", Duration::from_millis(100)),
            Err(GatewayError::Transport(
                "the request timed out after 0.1 s".into()
            )),
            "{kind}"
        );
        assert_eq!(server.finish().len(), 1, "{kind}");

        // A list read with its own timeout: retried once, then given up.
        let server = Server::start(vec![Canned::Hang, Canned::Hang]);
        let client = Client::new(kind, server.config());
        let list = GatewayCall::List {
            timeout: Some(Duration::from_millis(100)),
        };
        assert_eq!(
            client.call(&list),
            Err(GatewayError::Transport(
                "the request timed out after 0.1 s".into()
            )),
            "{kind}"
        );
        assert_eq!(server.finish().len(), 2, "{kind}");
    }
}

#[test]
fn a_mint_is_sent_once_when_the_gateway_drops_it_even_after_warm_calls() {
    for kind in KINDS {
        let sim = SimToolGateway::start(SimOptions::default().token("t")).unwrap();
        let config = ClientConfig::new(sim.url(), Some("t".into()));
        let client = Client::new(kind, config);
        // Connections that a keep-alive client would reuse.
        client.list().unwrap();
        client.mint().unwrap();
        let reset = json!({"faults": [{"route": "mint", "reset": true}]});
        sim.queue_faults(reset).unwrap();
        let err = client.mint().unwrap_err();
        assert!(matches!(err, GatewayError::Transport(_)), "{err:?}");
        let mints = sim
            .log()
            .iter()
            .filter(|r| r.path == "/v1/connectors/connections")
            .count();
        assert_eq!(mints, 2, "the dropped mint was sent again");
    }
}

#[test]
fn a_body_past_the_limit_is_abandoned_as_a_transport_failure() {
    for kind in KINDS {
        let big = "x".repeat(MAX_BODY as usize + 1);
        let server = Server::start(vec![Canned::Reply {
            status: 200,
            headers: Vec::new(),
            body: big,
        }]);
        let client = Client::new(kind, server.config());
        let err = client.mint().unwrap_err();
        assert_eq!(
            err,
            GatewayError::Transport("the answer is larger than 4 MiB".into())
        );
        assert_eq!(server.finish().len(), 1);
    }
}
