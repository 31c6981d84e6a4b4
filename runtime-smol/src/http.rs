//! The async HTTP client of the tool gateway (docs/contract.md#tool-gateway-api).
//!
//! The same [`connop_core::wire`] exchange as the blocking client, with the bytes moved by
//! isahc's async API: a request runs on isahc's own agent thread, so awaiting it never blocks
//! the executor, and many calls share one client (and its connections).

use connop_blocking::http::{
    HttpError, MAX_BODY, body_error, env_config, mint_client, to_isahc, to_wire, too_large,
    transport_error,
};
use connop_core::tool_gateway::{AsyncToolGateway, GatewayCall, GatewayFuture};
use connop_core::wire::{self, ClientConfig, Exchange, HttpAnswer, HttpMethod};
use futures_lite::io::AsyncReadExt;
use isahc::HttpClient;
use std::sync::Arc;

/// The tool gateway over HTTP for async hosts. One isahc client per gateway, so connections
/// are reused across calls and across concurrent operations — except by the mint. Shared
/// with each call's future, which outlives the call that lent the gateway.
#[derive(Clone, Debug)]
pub struct AsyncHttpToolGateway(Arc<Clients>);

#[derive(Debug)]
struct Clients {
    config: ClientConfig,
    client: HttpClient,
    /// The mint's client: see [`mint_client`].
    mint_client: HttpClient,
}

impl AsyncHttpToolGateway {
    /// A gateway client for `config` with its own isahc clients.
    pub fn new(config: ClientConfig) -> Result<Self, HttpError> {
        Ok(AsyncHttpToolGateway::with_clients(
            config,
            HttpClient::new()?,
            mint_client()?,
        ))
    }

    /// A gateway client on caller-built isahc clients (proxies, TLS roots, shared pools):
    /// `client` for the reads, `mint_client` for the mint. Build `mint_client` with
    /// `connection_cache_size(0)`: on a reused connection curl may send a mint twice.
    pub fn with_clients(config: ClientConfig, client: HttpClient, mint_client: HttpClient) -> Self {
        AsyncHttpToolGateway(Arc::new(Clients {
            config,
            client,
            mint_client,
        }))
    }

    /// The gateway the environment names; `Ok(None)` when `CONNECTOR_GATEWAY_URL` is unset.
    /// A URL with no token still builds: its calls are refused without sending.
    pub fn from_env() -> Result<Option<Self>, HttpError> {
        env_config().map(AsyncHttpToolGateway::new).transpose()
    }

    /// Where this client sends.
    pub fn config(&self) -> &ClientConfig {
        &self.0.config
    }

    /// Sends one wire request and reads the whole answer (at most [`MAX_BODY`] bytes of it).
    pub async fn send(&self, request: &wire::HttpRequest) -> HttpAnswer {
        // The mint is the API's only POST.
        let client = match request.method {
            HttpMethod::Post => &self.0.mint_client,
            HttpMethod::Get => &self.0.client,
        };
        let request: isahc::Request<isahc::AsyncBody> = to_isahc(request)?;
        let mut response = client
            .send_async(request)
            .await
            .map_err(|e| transport_error(&e))?;
        let mut body = Vec::new();
        response
            .body_mut()
            .take(MAX_BODY + 1)
            .read_to_end(&mut body)
            .await
            .map_err(body_error)?;
        if body.len() as u64 > MAX_BODY {
            return Err(too_large());
        }
        Ok(to_wire(&response, body))
    }
}

impl AsyncToolGateway for AsyncHttpToolGateway {
    /// Runs the call's [`Exchange`] to its end (pages, the one retry), sending each request
    /// with [`send`](AsyncHttpToolGateway::send).
    fn call(&self, call: GatewayCall) -> GatewayFuture {
        let this = self.clone();
        GatewayFuture::pending(async move {
            let this = &this;
            Exchange::run_async(this.config(), &call, move |request| async move {
                this.send(&request).await
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    //! What both clients must do is tested once, on both, in `tests/tests/http_clients.rs`.
    use super::*;
    use connop_core::tool_gateway::{GatewayError, GatewayReply};
    use connop_fixtures::canned::{Canned, Server, mint_request, reply};
    use serde_json::json;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    fn mint(gateway: &Arc<AsyncHttpToolGateway>) -> GatewayFuture {
        gateway.call(GatewayCall::Mint(Box::new(mint_request())))
    }

    #[test]
    fn a_pending_request_does_not_block_the_executor() {
        // Both calls run on one thread: the fast one must finish while the slow one waits.
        let slow = Server::start(vec![Canned::Hang]);
        let fast = Server::start(vec![reply(200, json!({"results": []}))]);
        let config = slow
            .config()
            .with_default_timeout(Duration::from_millis(400));
        let slow_gateway = Arc::new(AsyncHttpToolGateway::new(config).unwrap());
        let fast_gateway = Arc::new(AsyncHttpToolGateway::new(fast.config()).unwrap());
        let fast_done = AtomicBool::new(false);
        let (slow_result, fast_result) = smol::block_on(futures_lite::future::zip(
            async {
                let result = mint(&slow_gateway).await;
                (result, fast_done.load(Ordering::SeqCst))
            },
            async {
                let result = mint(&fast_gateway).await;
                fast_done.store(true, Ordering::SeqCst);
                result
            },
        ));
        assert_eq!(fast_result, Ok(GatewayReply::Minted(Vec::new())));
        assert!(matches!(slow_result.0, Err(GatewayError::Transport(_))));
        assert!(
            slow_result.1,
            "the fast call finished while the slow one was pending"
        );
        assert_eq!((slow.finish().len(), fast.finish().len()), (1, 1));
    }
}
