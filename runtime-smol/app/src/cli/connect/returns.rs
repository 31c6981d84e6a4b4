//! The loopback return URL of `connop connect` (docs/contract.md#return-hints): after a consent
//! decision the vendor (here the simulated tool gateway) sends the browser back to the mint's
//! `returnTo` with `connection_id=<id>&status=active|failed` added to its query. This listener
//! answers that request with a short page and turns it into a return hint, so the card changes as
//! soon as the person is back instead of at the next tick.
//!
//! It is a small HTTP/1.1 server on `127.0.0.1:0` on its own thread; dropping the
//! [`ReturnListener`] stops it. Like every listener it passes each request through the guard
//! ([`crate::net::guard`]): a `Host` other than its loopback names is 421, a body over
//! [`MAX_BODY`] is 413 and one that stalls 408, and none of them is a return.

use crate::error::UsageError;
use crate::net::guard::{self, Guard, Refusal};
use crate::net::{http1, serve_connections};
use crate::sim_gateway::consent::escape_html;
use connop_blocking::{OpHandle, SharedRegistry};
use connop_core::operation::Text;
use futures_lite::FutureExt;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use smol::net::{TcpListener, TcpStream};
use smol_hyper::rt::FuturesIo;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The path the return URL serves.
pub const RETURN_PATH: &str = "/returned";

/// The largest request body the return URL reads (1 KiB): a return is a `GET` and carries
/// none; a larger one is 413.
pub const MAX_BODY: usize = 1 << 10;

/// What `CONNOP_RETURN_URL` must hold for a hosted tool gateway to get the loopback return
/// URL too.
pub const LOOPBACK: &str = "loopback";

/// One return, as the browser brought it back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Return {
    /// The account the decision was about, when the vendor named it.
    pub connection_id: Option<String>,
    /// `active` or `failed`, when the vendor said (only shown; the read decides).
    pub status: Option<String>,
}

impl Return {
    /// Reads `connection_id` and `status` from a query string (percent-decoded, `+` as a
    /// space); anything else in it is ignored.
    pub fn from_query(query: &str) -> Self {
        let mut found = Return::default();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode(value);
            let value = (!value.is_empty()).then_some(value);
            match decode(key).as_str() {
                "connection_id" => found.connection_id = value,
                "status" => found.status = value,
                _ => {}
            }
        }
        found
    }
}

fn decode(text: &str) -> String {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// What to do with each return; runs on the listener's thread.
pub type OnReturn = Arc<dyn Fn(&Return) + Send + Sync>;

/// Whether `CONNOP_RETURN_URL=loopback` asks for the loopback return URL with a hosted tool
/// gateway too (unset or empty: no). Any other value is refused rather than ignored.
pub fn requested() -> Result<bool, UsageError> {
    match std::env::var("CONNOP_RETURN_URL") {
        Ok(value) if value.trim().eq_ignore_ascii_case(LOOPBACK) => Ok(true),
        Ok(value) if value.trim().is_empty() => Ok(false),
        Ok(value) => Err(UsageError::ReturnUrl { value }),
        Err(std::env::VarError::NotPresent) => Ok(false),
        Err(std::env::VarError::NotUnicode(value)) => Err(UsageError::ReturnUrl {
            value: value.to_string_lossy().into_owned(),
        }),
    }
}

/// The hint a return makes for the session's open operation: the row holding its connection
/// id, or every live row when no row holds it (or none was named). Nothing is open (settled,
/// not yet registered): nothing to read.
pub fn hint_from(registry: &SharedRegistry, session_key: &str) -> OnReturn {
    let registry = registry.clone();
    let session_key = session_key.to_owned();
    Arc::new(move |back: &Return| {
        let Some(op) = registry.current(&session_key) else {
            return;
        };
        hint(&op, back);
    })
}

/// Starts the return listener when `wanted` (with the embedded tool gateway, whose consent
/// page redirects there, or when [`requested`]); a listener that cannot bind is logged and
/// done without (the watcher's ticks still see the decision).
pub fn start_if_wanted(
    wanted: bool,
    registry: &SharedRegistry,
    session_key: &str,
) -> Option<ReturnListener> {
    if !wanted {
        return None;
    }
    match ReturnListener::start(hint_from(registry, session_key)) {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(%error, "no loopback return URL: returns wait for the next tick");
            None
        }
    }
}

fn hint(op: &OpHandle, back: &Return) {
    let target = target_of(back, |id| op.target_of_connection(id));
    // The target comes from the operation itself, so it is never unknown to it.
    let _ = op.return_hint(target.as_deref());
}

/// The row a return's hint reads: the one holding its connection id (`holding` looks it up
/// in the operation), or `None`, every live row, when no row holds it or none was named. A
/// hint only ever asks for a read: what the read answers decides.
pub fn target_of(back: &Return, holding: impl FnOnce(&str) -> Option<Text>) -> Option<Text> {
    back.connection_id.as_deref().and_then(holding)
}

/// The loopback return listener, serving until dropped.
pub struct ReturnListener {
    url: String,
    stop: Option<async_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ReturnListener {
    /// Binds `127.0.0.1:0` and serves on a new thread; `on_return` runs for every return.
    pub fn start(on_return: OnReturn) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let listener = TcpListener::try_from(listener)?;
        let url = format!("http://{addr}{RETURN_PATH}");
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let name = format!("return:{url}");
        let thread = std::thread::Builder::new()
            .name("connop-return-url".into())
            .spawn(move || {
                let serving = serve(listener, name, on_return);
                smol::block_on(serving.or(async {
                    let _ = stopped.recv().await;
                }));
            })?;
        Ok(ReturnListener {
            url,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The return URL: the mint's `returnTo`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for ReturnListener {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts until dropped; a failed accept backs off and never ends the listener.
async fn serve(listener: TcpListener, name: String, on_return: OnReturn) {
    let guard = match listener.local_addr() {
        Ok(bound) => Arc::new(Guard::new(bound, &[])),
        Err(_) => return,
    };
    serve_connections(listener, name, |stream| {
        connection(stream, guard.clone(), on_return.clone())
    })
    .await
}

async fn connection(stream: TcpStream, guard: Arc<Guard>, on_return: OnReturn) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let (guard, on_return) = (guard.clone(), on_return.clone());
        async move { Ok::<_, Infallible>(respond(request, &guard, &on_return).await) }
    });
    let _ = http1()
        .serve_connection(FuturesIo::new(stream), service)
        .await;
}

/// `GET /returned?…`: the guard, then the hint, then the page. Any other path is 404, any
/// other method 405.
async fn respond<B>(
    request: Request<B>,
    guard: &Guard,
    on_return: &OnReturn,
) -> Response<Full<Bytes>>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = request.into_parts();
    if let Err(refusal) = guard.host(&parts.uri, &parts.headers) {
        return refused(&refusal);
    }
    if parts.uri.path() != RETURN_PATH {
        return page(
            StatusCode::NOT_FOUND,
            "Not found",
            "Nothing is served here.",
        );
    }
    if parts.method != Method::GET && parts.method != Method::HEAD {
        return page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Not allowed",
            "Open this address in a browser.",
        );
    }
    if let Err(refusal) = guard::read_body(&parts.headers, body, MAX_BODY).await {
        return refused(&refusal);
    }
    let back = Return::from_query(parts.uri.query().unwrap_or(""));
    on_return(&back);
    page(
        StatusCode::OK,
        "You can close this tab",
        "connop heard you come back; the terminal shows the result.",
    )
}

/// The page of a request the guard refused: why, escaped (the refused `Host` is in it).
fn refused(refusal: &Refusal) -> Response<Full<Bytes>> {
    let mut response = page(
        refusal.status(),
        "Refused",
        &escape_html(&refusal.to_string()),
    );
    if refusal.closes() {
        response.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
    }
    response
}

/// A short HTML page; `text` is HTML, and nothing from the request goes into it unescaped.
fn page(status: StatusCode, title: &str, text: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         </head>\n<body style=\"font-family: sans-serif; margin: 3em\"><h1>{title}</h1>\
         <p>{text}</p></body></html>\n"
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use isahc::ReadResponseExt;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn a_query_gives_its_connection_id_and_status_decoded() {
        assert_eq!(
            Return::from_query("x=1&connection_id=ca_gmail_1&status=active"),
            Return {
                connection_id: Some("ca_gmail_1".into()),
                status: Some("active".into()),
            }
        );
        assert_eq!(
            Return::from_query("connection_id=ca%20a+b&status="),
            Return {
                connection_id: Some("ca a b".into()),
                status: None,
            }
        );
        assert_eq!(Return::from_query(""), Return::default());
    }

    #[test]
    fn a_get_of_the_return_url_answers_a_page_and_reports_the_return() {
        let (tx, rx) = channel();
        let tx = std::sync::Mutex::new(tx);
        let listener = ReturnListener::start(Arc::new(move |back: &Return| {
            let _ = tx.lock().unwrap().send(back.clone());
        }))
        .expect("bound");
        assert!(listener.url().starts_with("http://127.0.0.1:"));
        assert!(listener.url().ends_with(RETURN_PATH));

        let url = format!("{}?connection_id=ca_gmail_1&status=active", listener.url());
        let mut response = isahc::get(url).expect("answered");
        assert_eq!(response.status().as_u16(), 200);
        assert!(response.text().unwrap().contains("You can close this tab"));
        let back = rx.recv_timeout(Duration::from_secs(10)).expect("a return");
        assert_eq!(back.connection_id.as_deref(), Some("ca_gmail_1"));
        assert_eq!(back.status.as_deref(), Some("active"));

        // No connection id: still a return (every live row is read).
        let response = isahc::get(listener.url()).expect("answered");
        assert_eq!(response.status().as_u16(), 200);
        let back = rx.recv_timeout(Duration::from_secs(10)).expect("a return");
        assert_eq!(back, Return::default());

        let other = listener.url().replace(RETURN_PATH, "/other");
        assert_eq!(isahc::get(other).expect("answered").status().as_u16(), 404);
        let post = isahc::post(listener.url(), "").expect("answered");
        assert_eq!(post.status().as_u16(), 405);
        assert!(rx.try_recv().is_err(), "neither was a return");
    }
}
