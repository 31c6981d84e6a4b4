//! `GET /v1/runs/{id}/events`: server-sent events. Every stored event of the run from the
//! start, then the new ones as they are stored (here or by another replica), ending after the
//! terminal event; `: keepalive` every 15 s meanwhile.
//!
//! The stream reads the store whenever the run's watch wakes it: after a change this process
//! stored, or a notification that another replica stored one. It also reads every few seconds
//! without being woken, so a notification lost with a broken connection delays an event, never
//! loses it.

use super::error::ApiError;
use super::routes::{Body, full};
use super::{Api, Streaming, lock};
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::{Bytes, Frame};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often an idle event stream says it is alive.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// How long a stream waits for a wake-up before it reads the store anyway.
const RECHECK: Duration = Duration::from_secs(5);

/// How long a stream waits after the store failed before it reads again.
const RETRY: Duration = Duration::from_secs(1);

type Frames = async_channel::Sender<Result<Frame<Bytes>, Infallible>>;

impl Api {
    /// The stream of run `id`; `streaming` holds the count of live streams until the
    /// connection is done.
    pub(super) async fn events(
        self: &Arc<Self>,
        id: &str,
        streaming: &Streaming,
    ) -> Response<Body> {
        match self.store.run(id).await {
            Ok(Some(_)) => {}
            Ok(None) => return error(ApiError::RunNotFound(id.to_owned())),
            Err(e) => return error(e.into()),
        }
        let (tx, rx) = async_channel::unbounded::<Result<Frame<Bytes>, Infallible>>();
        *lock(streaming) = Some(self.streams.enter());
        smol::spawn(self.clone().write_events(id.to_owned(), tx)).detach();
        let mut response = Response::new(StreamBody::new(rx).boxed());
        let headers = response.headers_mut();
        headers.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            hyper::header::CACHE_CONTROL,
            hyper::header::HeaderValue::from_static("no-cache"),
        );
        response
    }

    /// Sends the run's events as they are stored, until the terminal one or until the client
    /// goes away.
    async fn write_events(self: Arc<Self>, run_id: String, tx: Frames) {
        let watch = self.signals.watch(&run_id);
        let mut next = 0;
        let mut last_write = Instant::now();
        loop {
            let listener = watch.listen();
            let wait = match self.store.events(&run_id, next).await {
                Ok(fresh) => {
                    for event in &fresh {
                        let frame = format!("event: {}\ndata: {}\n\n", event.event, event.data);
                        if tx.send(Ok(Frame::data(Bytes::from(frame)))).await.is_err() {
                            return;
                        }
                        last_write = Instant::now();
                        next = event.seq.saturating_add(1);
                        if event.is_terminal() {
                            return;
                        }
                    }
                    RECHECK
                }
                Err(_) => RETRY,
            };
            let keepalive = KEEPALIVE.saturating_sub(last_write.elapsed());
            let woke = futures_lite::future::or(
                async {
                    listener.await;
                    true
                },
                async {
                    smol::Timer::after(wait.min(keepalive)).await;
                    false
                },
            )
            .await;
            if !woke && last_write.elapsed() >= KEEPALIVE {
                let keepalive = Frame::data(Bytes::from_static(b": keepalive\n\n"));
                if tx.send(Ok(keepalive)).await.is_err() {
                    return;
                }
                last_write = Instant::now();
            }
        }
    }
}

fn error(error: ApiError) -> Response<Body> {
    let (status, body) = error.answer();
    full(status, &body)
}
