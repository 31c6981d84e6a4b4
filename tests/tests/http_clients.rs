//! What both HTTP clients of the tool gateway (blocking and async) must do against a gateway
//! that misbehaves at the connection level: never send a mint twice, and never buffer an
//! answer without bound.

use connop_blocking::http::{HttpGateway, MAX_BODY};
use connop_core::gateway::{AsyncGateway, BlockingGateway, GatewayError, MintRow};
use connop_core::wire::ClientConfig;
use connop_fixtures::canned::{Canned, Server, mint_request};
use connop_fixtures::sim_gateway::{SimGateway, SimOptions};
use connop_smol::http::AsyncHttpGateway;
use serde_json::json;

/// One client of each kind, behind the calls these tests make.
enum Client {
    Blocking(HttpGateway),
    Async(AsyncHttpGateway),
}

impl Client {
    /// The blocking client (`0`) or the async one (`1`) for `config`.
    fn new(kind: usize, config: ClientConfig) -> Client {
        match kind {
            0 => Client::Blocking(HttpGateway::new(config).expect("client")),
            _ => Client::Async(AsyncHttpGateway::new(config).expect("client")),
        }
    }

    fn list(&self) -> Result<(), GatewayError> {
        match self {
            Client::Blocking(g) => g.list(None).map(drop),
            Client::Async(g) => smol::block_on(g.list(None)).map(drop),
        }
    }

    fn mint(&self) -> Result<Vec<MintRow>, GatewayError> {
        match self {
            Client::Blocking(g) => g.mint(&mint_request()),
            Client::Async(g) => smol::block_on(g.mint(&mint_request())),
        }
    }
}

#[test]
fn a_mint_is_sent_once_when_the_gateway_drops_it_even_after_warm_calls() {
    for kind in 0..2 {
        let sim = SimGateway::start(SimOptions::default().token("t")).unwrap();
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
    for kind in 0..2 {
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
