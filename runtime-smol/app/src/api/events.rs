//! `GET /v1/runs/{id}/events`: server-sent events. Every stored event of the run from the
//! start, then the new ones as they are stored (here or by another replica), ending after the
//! terminal event; `: keepalive` every 15 s meanwhile.
//!
//! The stream reads the store whenever the run's watch wakes it: after a change this process
//! stored, or a notification that another replica stored one. It also reads every few seconds
//! without being woken, so a notification lost with a broken connection delays an event, never
//! loses it.
//!
//! A frame is made only when the client has taken the one before (a channel of one), from a
//! page of [`PAGE`] events read when needed, and goes out in slices of [`SLICE`] bytes: a
//! client that reads slowly or not at all holds one frame and a page, not the whole run
//! copied into the connection's buffer; one that takes nothing for [`STALLED`] is let go.

use super::error::ApiError;
use super::routes::{Body, full};
use super::server::{Api, Streaming, lock};
use crate::store::Store as _;
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

/// How long a frame may wait for a client that takes nothing before the stream ends.
const STALLED: Duration = Duration::from_secs(60);

/// Events read from the store at a time.
const PAGE: u32 = 1;

/// The largest piece of a frame handed to the connection at once (slices share the frame).
const SLICE: usize = 64 * 1024;

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
        let (tx, rx) = async_channel::bounded::<Result<Frame<Bytes>, Infallible>>(1);
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
            let wait = match self.store.events(&run_id, next, PAGE).await {
                Ok(fresh) => {
                    let full_page = fresh.len() == PAGE as usize;
                    for event in fresh {
                        let (seq, terminal) = (event.seq, event.is_terminal());
                        // The event's text goes as soon as its frame is made.
                        let frame = format!("event: {}\ndata: {}\n\n", event.event, event.data);
                        drop(event);
                        if !send(&tx, Bytes::from(frame), &run_id, STALLED).await {
                            return;
                        }
                        last_write = Instant::now();
                        next = seq.saturating_add(1);
                        if terminal {
                            return;
                        }
                    }
                    if full_page {
                        continue;
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
                let keepalive = Bytes::from_static(b": keepalive\n\n");
                if !send(&tx, keepalive, &run_id, STALLED).await {
                    return;
                }
                last_write = Instant::now();
            }
        }
    }
}

/// Sends one frame, slice by slice, each once the client took the one before; `false` when
/// the client is gone or took nothing for `stalled` (then the stream ends, and what it held
/// is freed).
async fn send(tx: &Frames, frame: Bytes, run_id: &str, stalled: Duration) -> bool {
    let mut start = 0;
    while start < frame.len() {
        let end = frame.len().min(start + SLICE);
        if !send_slice(tx, frame.slice(start..end), run_id, stalled).await {
            return false;
        }
        start = end;
    }
    true
}

async fn send_slice(tx: &Frames, slice: Bytes, run_id: &str, stalled: Duration) -> bool {
    let sent = futures_lite::future::or(
        async { Some(tx.send(Ok(Frame::data(slice))).await) },
        async {
            smol::Timer::after(stalled).await;
            None
        },
    )
    .await;
    match sent {
        Some(sent) => sent.is_ok(),
        None => {
            tracing::warn!(
                target: "connop::api",
                run_id,
                stalled_s = stalled.as_secs_f64(),
                "event stream closed: the client took nothing",
            );
            false
        }
    }
}

fn error(error: ApiError) -> Response<Body> {
    let (status, body) = error.answer();
    full(status, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_goes_in_slices_one_at_a_time_and_a_client_that_takes_nothing_is_let_go() {
        smol::block_on(async {
            let (tx, rx) = async_channel::bounded::<Result<Frame<Bytes>, Infallible>>(1);
            let frame = Bytes::from(vec![b'a'; 2 * SLICE + 10]);
            let reader = smol::spawn(async move {
                let mut sizes = Vec::new();
                while let Ok(Ok(frame)) = rx.recv().await {
                    sizes.push(frame.into_data().map(|d| d.len()).unwrap_or(0));
                }
                sizes
            });
            assert!(send(&tx, frame, "run_1", Duration::from_secs(10)).await);
            drop(tx);
            assert_eq!(reader.await, [SLICE, SLICE, 10]);

            // Nobody takes anything: the first slice fills the channel, the second waits out
            // the stall and the stream ends.
            let (tx, _rx) = async_channel::bounded::<Result<Frame<Bytes>, Infallible>>(1);
            let started = Instant::now();
            let frame = Bytes::from(vec![b'a'; 2 * SLICE]);
            assert!(!send(&tx, frame, "run_2", Duration::from_millis(50)).await);
            assert!(started.elapsed() >= Duration::from_millis(50));
        });
    }
}
