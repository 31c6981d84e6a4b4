//! `GET /v1/runs/{id}/events`: server-sent events. Every event of the run from the start,
//! then live ones, ending after the terminal event; `: keepalive` every 15 s meanwhile.

use super::error::ApiError;
use super::routes::{Body, full};
use super::runs::RunCell;
use super::{Api, Streaming, lock};
use connop_core::run::RunEvent;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::{Bytes, Frame};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// How often an idle event stream says it is alive.
const KEEPALIVE: Duration = Duration::from_secs(15);

impl Api {
    /// The stream of run `id`; `streaming` holds the count of live streams until the
    /// connection is done.
    pub(super) fn events(self: &Arc<Self>, id: &str, streaming: &Streaming) -> Response<Body> {
        let cell = match self.cell(id) {
            Some(cell) => cell,
            // A finished run: its stored events replay, then the stream ends.
            None => match self.store.run(id) {
                Ok(Some(run)) => Arc::new(RunCell::new(run)),
                Ok(None) => return error(ApiError::RunNotFound(id.to_owned())),
                Err(e) => return error(e.into()),
            },
        };
        let (tx, rx) = async_channel::unbounded::<Result<Frame<Bytes>, Infallible>>();
        *lock(streaming) = Some(self.streams.enter());
        smol::spawn(write_events(cell, tx)).detach();
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
}

fn error(error: ApiError) -> Response<Body> {
    let (status, body) = error.answer();
    full(status, &body)
}

/// Sends the run's events as they are appended, until the terminal one or until the
/// client goes away.
async fn write_events(
    cell: Arc<RunCell>,
    tx: async_channel::Sender<Result<Frame<Bytes>, Infallible>>,
) {
    let mut sent = 0;
    loop {
        let listener = cell.changed.listen();
        // Events are only ever appended, so `sent` never passes their count.
        let fresh: Vec<RunEvent> = lock(&cell.run)
            .events()
            .get(sent..)
            .unwrap_or_default()
            .to_vec();
        for event in &fresh {
            let frame = format!("event: {}\ndata: {}\n\n", event.event, event.data);
            if tx.send(Ok(Frame::data(Bytes::from(frame)))).await.is_err() {
                return;
            }
            sent += 1;
            if event.is_terminal() {
                return;
            }
        }
        let woke = futures_lite::future::or(
            async {
                listener.await;
                true
            },
            async {
                smol::Timer::after(KEEPALIVE).await;
                false
            },
        )
        .await;
        if !woke
            && tx
                .send(Ok(Frame::data(Bytes::from_static(b": keepalive\n\n"))))
                .await
                .is_err()
        {
            return;
        }
    }
}
