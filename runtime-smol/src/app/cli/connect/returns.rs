//! The loopback return URL of `connop connect` (SPEC §12.1): after a consent decision the
//! vendor (here the simulated tool gateway) sends the browser back to the mint's `returnTo`
//! with `connection_id=<id>&status=active|failed` added to its query. This listener answers
//! that request with a short page and turns it into a return hint, so the card changes as
//! soon as the person is back instead of at the next tick.
//!
//! It is a small HTTP/1.1 server on `127.0.0.1:0` on its own thread; dropping the
//! [`ReturnListener`] stops it.

use crate::app::error::UsageError;
use crate::app::net::serve_connections;
use connop_blocking::{OpHandle, SharedRegistry};
use futures_lite::FutureExt;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use smol::net::{TcpListener, TcpStream};
use smol_hyper::rt::{FuturesIo, SmolTimer};
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The path the return URL serves.
pub const RETURN_PATH: &str = "/returned";

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
    let target = back
        .connection_id
        .as_deref()
        .and_then(|id| op.target_of_connection(id));
    // The target comes from the operation itself, so it is never unknown to it.
    let _ = op.return_hint(target.as_deref());
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
    serve_connections(listener, name, |stream| {
        connection(stream, on_return.clone())
    })
    .await
}

async fn connection(stream: TcpStream, on_return: OnReturn) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request: Request<Incoming>| {
        let on_return = on_return.clone();
        async move { Ok::<_, Infallible>(respond(&request, &on_return)) }
    });
    let _ = http1::Builder::new()
        .timer(SmolTimer::new())
        .serve_connection(FuturesIo::new(stream), service)
        .await;
}

/// `GET /returned?…`: the hint, then the page. Any other path is 404, any other method 405.
fn respond(request: &Request<Incoming>, on_return: &OnReturn) -> Response<Full<Bytes>> {
    if request.uri().path() != RETURN_PATH {
        return page(
            StatusCode::NOT_FOUND,
            "Not found",
            "Nothing is served here.",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Not allowed",
            "Open this address in a browser.",
        );
    }
    let back = Return::from_query(request.uri().query().unwrap_or(""));
    on_return(&back);
    page(
        StatusCode::OK,
        "You can close this tab",
        "connop heard you come back; the terminal shows the result.",
    )
}

/// A short HTML page; nothing from the request is echoed into it.
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
