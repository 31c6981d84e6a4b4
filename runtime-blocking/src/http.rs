//! The blocking HTTP client of the tool gateway (docs/contract.md#tool-gateway-api).
//!
//! Every rule of the API lives in [`connop_core::wire`]; this client only moves the bytes of
//! each request the exchange yields with isahc and feeds the answer back. The isahc helpers
//! here are public so the async client sends exactly the same requests.

use connop_core::tool_gateway::{BlockingToolGateway, GatewayCall, GatewayError, GatewayReply};
use connop_core::wire::{self, ClientConfig, Exchange, HttpAnswer, HttpMethod, TransportError};
use isahc::HttpClient;
use isahc::config::Configurable;
use std::io::Read;

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
/// (the host then runs the embedded simulated gateway, docs/contract.md#simulated-tool-gateway).
pub fn env_config() -> Option<ClientConfig> {
    ClientConfig::from_env_values(std::env::var(URL_VAR).ok(), std::env::var(TOKEN_VAR).ok())
}

/// Builds the isahc request for a wire request, body type left to the caller (sync `Body` or
/// `AsyncBody`), so both clients send byte-identical requests.
pub fn to_isahc<B>(request: &wire::HttpRequest) -> Result<isahc::Request<B>, TransportError>
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
pub fn to_wire<B>(response: &isahc::Response<B>, body: Vec<u8>) -> wire::HttpResponse {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    wire::HttpResponse {
        status: response.status().as_u16(),
        retry_after,
        body,
    }
}

/// The tool gateway over HTTP, blocking the calling thread for each call. One isahc client
/// per gateway, so connections are reused across calls — except by the mint.
#[derive(Debug)]
pub struct HttpToolGateway {
    config: ClientConfig,
    client: HttpClient,
    /// The mint's client: see [`mint_client`].
    mint_client: HttpClient,
}

impl HttpToolGateway {
    /// A gateway client for `config` with its own isahc clients.
    pub fn new(config: ClientConfig) -> Result<Self, HttpError> {
        Ok(HttpToolGateway::with_clients(
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
        HttpToolGateway {
            config,
            client,
            mint_client,
        }
    }

    /// The gateway the environment names; `Ok(None)` when `CONNECTOR_GATEWAY_URL` is unset.
    /// A URL with no token still builds: its calls are refused without sending.
    pub fn from_env() -> Result<Option<Self>, HttpError> {
        env_config().map(HttpToolGateway::new).transpose()
    }

    /// Where this client sends.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Sends one wire request and reads the whole answer (at most [`MAX_BODY`] bytes of it).
    pub fn send(&self, request: &wire::HttpRequest) -> HttpAnswer {
        // The mint is the API's only POST.
        let client = match request.method {
            HttpMethod::Post => &self.mint_client,
            HttpMethod::Get => &self.client,
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
}

impl BlockingToolGateway for HttpToolGateway {
    /// Runs the call's [`Exchange`] to its end (pages, the one retry), sending each request
    /// with [`send`](HttpToolGateway::send).
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        Exchange::run(&self.config, call, |request| self.send(request))
    }
}

#[cfg(test)]
mod tests {
    //! What both clients must do is tested once, on both, in `tests/tests/http_clients.rs`.
    use super::*;

    #[test]
    fn debug_output_hides_the_token() {
        let gateway =
            HttpToolGateway::new(ClientConfig::new("http://gw.test/", Some("hush".into())))
                .unwrap();
        assert_eq!(gateway.config().base_url, "http://gw.test");
        assert!(!format!("{gateway:?}").contains("hush"));
    }
}
