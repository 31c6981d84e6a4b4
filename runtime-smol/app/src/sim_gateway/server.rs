//! The HTTP side of the simulated gateway: hyper 1 (HTTP/1.1, keep-alive) over smol. Every
//! request passes the listener's guard ([`crate::net::guard`]) before the world sees it:
//! its `Host`; for a write its type (JSON, or the consent form's) and `Origin`; its body, at
//! most [`MAX_BODY`] bytes within the read timeout, or [`MAX_CONTROL_BODY`] for a `/sim/...`
//! control that carries the token.

use super::options::{LinkIds, SimOptions};
use super::world::{
    ControlError, IdSource, NumberedIds, SimRequest, SimResponse, SimWorld, authorized,
};
use crate::net::guard::{self, Accepts, Guard};
use crate::net::http1;
use crate::sync::random_hex;
use futures_lite::FutureExt;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Request, Response};
use serde_json::Value;
use smol::net::{TcpListener, TcpStream};
use smol_hyper::rt::FuturesIo;
use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest request body the simulated gateway reads (1 MiB) from a request that does not
/// carry its token; a larger one is answered 413.
pub const MAX_BODY: usize = 1 << 20;

/// The largest body of a `/sim/...` control that carries the token (64 MiB: a fault's body
/// may stand for a hosted gateway's oversized answer).
pub const MAX_CONTROL_BODY: usize = 64 << 20;

/// Unguessable link ids and nonces: 128 bits from the operating system's random source each,
/// in hex. What every listener uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn account(&mut self, _mint: usize) -> String {
        random_hex(16)
    }

    fn nonce(&mut self) -> String {
        random_hex(16)
    }
}

/// A simulated gateway's shared state and address: cheap to clone, serves HTTP with
/// [`SimServer::serve`], and gives tests direct access to the world.
#[derive(Clone, Debug)]
pub struct SimServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    addr: SocketAddr,
    token: Option<String>,
    /// Which requests the listener serves at all.
    guard: Guard,
    world: Mutex<SimWorld>,
}

impl SimServer {
    /// A server whose connect links point at `addr` (the address its listener is bound to).
    /// `options.listen` is not used here.
    pub fn new(addr: SocketAddr, options: &SimOptions) -> Self {
        let ids: Box<dyn IdSource> = match options.link_ids {
            LinkIds::Random => Box::new(RandomIds),
            LinkIds::Numbered => Box::new(NumberedIds::default()),
        };
        let world = SimWorld::new(
            &format!("http://{addr}"),
            options.token.clone(),
            options.auto_complete,
            ids,
        );
        SimServer {
            inner: Arc::new(Inner {
                addr,
                token: options.token.clone(),
                guard: Guard::new(addr, &options.allow_hosts),
                world: Mutex::new(world),
            }),
        }
    }

    /// Binds `options.listen` and makes the server for the bound address. Call
    /// [`SimServer::serve`] with the listener from any smol executor.
    pub fn bind(options: &SimOptions) -> io::Result<(SimServer, TcpListener)> {
        let listener = std::net::TcpListener::bind(options.listen)?;
        let addr = listener.local_addr()?;
        let listener = TcpListener::try_from(listener)?;
        Ok((SimServer::new(addr, options), listener))
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://<addr>`: the value for `CONNECTOR_GATEWAY_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The bearer token the `/v1` routes require, if any.
    pub fn token(&self) -> Option<&str> {
        self.inner.token.as_deref()
    }

    /// Answers one request in-process (logged like an HTTP one; a fault's delay is not slept).
    pub fn handle(&self, request: SimRequest) -> SimResponse {
        self.world().handle(request, Instant::now())
    }

    /// Same as `POST /sim/state` (the body as a JSON value).
    pub fn apply_state(&self, state: Value) -> Result<(), ControlError> {
        self.world().apply_state(&state, Instant::now())
    }

    /// Same as `POST /sim/faults`.
    pub fn queue_faults(&self, faults: Value) -> Result<(), ControlError> {
        self.world().queue_faults(&faults)
    }

    /// Same as `POST /sim/accounts/<id>`; `Ok(false)` when the account is unknown.
    pub fn set_account(&self, connection_id: &str, body: Value) -> Result<bool, ControlError> {
        self.world()
            .set_account(connection_id, &body, Instant::now())
    }

    /// Same as `POST /sim/reset`.
    pub fn reset(&self) {
        self.world().reset();
    }

    /// Every request received so far, in order (same as `GET /sim/log`, without logging one).
    pub fn log(&self) -> Vec<SimRequest> {
        self.world().log().cloned().collect()
    }

    /// Runs `f` on the world under its lock (do not block inside).
    pub fn with_world<R>(&self, f: impl FnOnce(&mut SimWorld) -> R) -> R {
        f(&mut self.world())
    }

    fn world(&self) -> MutexGuard<'_, SimWorld> {
        self.inner
            .world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Accepts and serves connections until the future is dropped; each connection is served
    /// concurrently on an executor owned by this future, so it runs from any smol executor
    /// (or `smol::block_on`) and dropping it closes every connection. Writes nothing to stdout.
    pub async fn serve(self, listener: TcpListener) {
        let ex = smol::Executor::new();
        ex.run(async {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let server = self.clone();
                        ex.spawn(server.connection(stream)).detach();
                    }
                    // Out of file descriptors and the like: back off, keep serving.
                    Err(_) => {
                        smol::Timer::after(Duration::from_millis(20)).await;
                    }
                }
            }
        })
        .await
    }

    async fn connection(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        // A reset fault makes the service fail: hyper then drops the connection unanswered.
        let service = service_fn(move |request| {
            let server = self.clone();
            async move { server.respond(request).await.ok_or(Reset) }
        });
        let _ = http1()
            .serve_connection(FuturesIo::new(stream), service)
            .await;
    }

    /// The answer to one request; `None`: close the connection without answering.
    async fn respond<B>(&self, request: Request<B>) -> Option<Response<Full<Bytes>>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        // The consent page's own form is the one route that takes a form.
        let accepts = if path.starts_with("/connect/") {
            Accepts::Form
        } else {
            Accepts::Json
        };
        let admitted = self
            .inner
            .guard
            .admit(&parts.method, &parts.uri, &parts.headers, accepts);
        let token = parts
            .headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let limit = if path.starts_with("/sim/") && authorized(self.token(), token) {
            MAX_CONTROL_BODY
        } else {
            MAX_BODY
        };
        let body = match admitted {
            Ok(()) => guard::read_body(&parts.headers, body, limit).await,
            Err(refusal) => Err(refusal),
        };
        let body = match body {
            Ok(body) => body,
            // Refused before the world saw it: nothing changed, nothing logged.
            Err(refusal) => return Some(to_http(SimResponse::refused(&path, &refusal))),
        };
        let request = SimRequest {
            method: parts.method.as_str().to_owned(),
            path,
            query: parts.uri.query().unwrap_or("").to_owned(),
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| {
                    let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    (name.as_str().to_owned(), value)
                })
                .collect(),
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        // The lock is released before the delay: a slow answer never holds up another one.
        let answer = self.handle(request);
        if !answer.delay.is_zero() {
            smol::Timer::after(answer.delay).await;
        }
        if answer.reset {
            return None;
        }
        Some(to_http(answer))
    }
}

/// The world's answer as hyper's. An answer HTTP cannot carry (a header value a fault's or a
/// script's body put there, say) becomes a 500 that says so, never a blank one.
fn to_http(answer: SimResponse) -> Response<Full<Bytes>> {
    let mut response = Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    response
        .body(Full::new(Bytes::from(answer.body)))
        .unwrap_or_else(|error| {
            let body = serde_json::json!({
                "error": "internal_error",
                "detail": format!("the simulated gateway made an answer HTTP cannot carry: {error}"),
            });
            let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
            *response.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        })
}

/// The service error of a reset fault: the connection is closed with no answer.
#[derive(Debug)]
struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a simulated connection reset")
    }
}

impl std::error::Error for Reset {}

/// Serves a simulated gateway on `listener` until the future is dropped: the embeddable entry
/// point (the caller binds, prints `listening http://<addr>` itself, and awaits this).
pub async fn serve(listener: TcpListener, options: SimOptions) -> io::Result<()> {
    let addr = listener.local_addr()?;
    SimServer::new(addr, &options).serve(listener).await;
    Ok(())
}

/// A simulated gateway running on its own thread: what tests and the CLI start.
///
/// Dereferences to its [`SimServer`] for the world controls; dropping it stops the server.
#[derive(Debug)]
pub struct SimToolGateway {
    server: SimServer,
    stop: Option<async_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SimToolGateway {
    /// Binds `options.listen`, starts serving on a new thread, and returns once bound.
    pub fn start(options: SimOptions) -> io::Result<SimToolGateway> {
        let (server, listener) = SimServer::bind(&options)?;
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("connop-sim-gateway".into())
            .spawn(move || {
                smol::block_on(serving.serve(listener).or(async {
                    let _ = stopped.recv().await;
                }));
            })?;
        Ok(SimToolGateway {
            server,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The shared state and controls.
    pub fn server(&self) -> &SimServer {
        &self.server
    }

    /// Stops serving and waits for the thread (open connections are closed).
    pub fn shutdown(self) {}
}

impl Deref for SimToolGateway {
    type Target = SimServer;

    fn deref(&self) -> &SimServer {
        &self.server
    }
}

impl Drop for SimToolGateway {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn an_answer_http_cannot_carry_is_a_500_that_says_so() {
        let mut answer = SimResponse::refused("/v1", &guard::Refusal::Timeout);
        answer
            .headers
            .push(("location".into(), "http://x/\r\nSet-Cookie: a".into()));
        let response = to_http(answer);
        assert_eq!(response.status().as_u16(), 500);
        let body = smol::block_on(response.into_body().collect())
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("cannot carry"), "{text}");
    }

    #[test]
    fn link_ids_and_nonces_are_128_random_bits() {
        let mut ids = RandomIds;
        let (a, b) = (ids.account(1), ids.account(1));
        assert_ne!(a, b);
        for token in [a, b, ids.nonce()] {
            assert_eq!(token.len(), 32);
            assert!(token.bytes().all(|c| c.is_ascii_hexdigit()), "{token}");
        }
    }
}
