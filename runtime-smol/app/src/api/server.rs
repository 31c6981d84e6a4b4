//! The API's state and its listener: the store opened, every connection served, and the
//! shutdown in order.

use super::error::ApiError;
use super::executor::TurnExecutor;
use crate::net::guard::Guard;
use crate::net::{http1, serve_connections};
use crate::store::{self, Database, Guarded, RunSignals, Store, StoreError};
use crate::sync::{Count, CountGuard};
use connop_blocking::SystemClock;
use connop_core::run::{RunChange, SHUTDOWN_ERROR};
use hyper::StatusCode;
use hyper::service::service_fn;
use serde_json::Value;
use smol::net::{TcpListener, TcpStream};
use smol_hyper::rt::FuturesIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// What a handler answers: a status and a JSON body, or why not.
pub(super) type HandlerAnswer = Result<(StatusCode, Value), ApiError>;

/// A connection's hold on the count of live event streams.
pub(super) type Streaming = Arc<Mutex<Option<CountGuard>>>;

/// What the HTTP API needs.
pub struct ApiConfig {
    /// Where sessions and runs are kept.
    pub database: Database,
    /// The bearer key every route but `/health` requires, if any.
    pub api_key: Option<String>,
    /// Who answers turns.
    pub executor: TurnExecutor,
    /// The largest request body read; a larger one is answered 413 ([`DEFAULT_MAX_BODY`]).
    pub max_body: usize,
    /// The names served besides the loopback ones and the bound address (`--allow-host`,
    /// checked with [`crate::net::guard::host_name`]); used only with an API key.
    pub allow_hosts: Vec<String>,
}

/// The default cap on an HTTP request body (1 MiB).
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// The API's state.
pub struct Api {
    pub(super) store: Arc<Guarded>,
    /// Event-stream wake-ups and the stop switches of the turns running here.
    pub(super) signals: Arc<RunSignals>,
    pub(super) executor: TurnExecutor,
    pub(super) api_key: Option<String>,
    /// Which requests the listener serves at all.
    pub(super) guard: Guard,
    /// The largest request body read (413 past it).
    pub(super) max_body: usize,
    pub(super) clock: SystemClock,
    /// Event streams still writing (shutdown waits for them to say `run.interrupted`).
    pub(super) streams: Arc<Count>,
    /// Forgets expired idempotency keys now and then; ends with the API.
    _housekeeping: smol::Task<()>,
}

/// How often expired idempotency keys are forgotten.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(600);

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Api {
    /// Opens the store (marking runs a dead process left unsettled `interrupted`);
    /// `bound` is the API's bound address (its port names a PostgreSQL replica by default,
    /// and the guard serves it as a name).
    pub async fn open(config: ApiConfig, bound: SocketAddr) -> Result<Arc<Self>, StoreError> {
        let clock = SystemClock::new();
        let signals = Arc::new(RunSignals::default());
        let store =
            store::open(&config.database, signals.clone(), bound.port(), clock.now()).await?;
        let api_key = config.api_key.filter(|k| !k.is_empty());
        // A keyless API is anyone's on this machine: never more than that.
        let extra: &[String] = if api_key.is_some() {
            &config.allow_hosts
        } else {
            &[]
        };
        let guard = Guard::new(bound, extra);
        let housekeeping = smol::spawn({
            let (store, clock) = (store.clone(), clock);
            async move {
                loop {
                    let _ = store.forget_expired_keys(clock.now()).await;
                    smol::Timer::after(HOUSEKEEPING_EVERY).await;
                }
            }
        });
        Ok(Arc::new(Api {
            store,
            signals,
            executor: config.executor,
            api_key,
            guard,
            max_body: config.max_body,
            clock,
            streams: Arc::default(),
            _housekeeping: housekeeping,
        }))
    }

    /// Whether the API requires a key.
    pub fn has_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// Serves the API on `listener` until the future is dropped.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        let name = listener
            .local_addr()
            .map_or_else(|_| "http".to_owned(), |a| format!("http:{a}"));
        serve_connections(listener, name, |stream| self.clone().connection(stream)).await
    }

    async fn connection(self: Arc<Self>, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        // Set while this connection serves an event stream, dropped when the connection is
        // done: an event stream closes its connection after its last event, so shutdown waits
        // until that event was written out, not merely queued.
        let streaming: Streaming = Arc::default();
        let slot = streaming.clone();
        let service = service_fn(move |request| {
            let (api, slot) = (self.clone(), slot.clone());
            async move { Ok::<_, Infallible>(api.respond(request, &slot).await) }
        });
        let _ = http1()
            .serve_connection(FuturesIo::new(stream), service)
            .await;
        drop(lock(&streaming).take());
    }

    /// Shutdown, in the order of docs/http-api.md#shutdown-and-restarts: every active run is marked
    /// `interrupted` and stored, `run.interrupted` goes to every open event stream, then the turns
    /// are stopped (their commands killed; the cancellation that follows changes nothing). Returns
    /// once the event streams wrote their last event, or after `within`.
    ///
    /// A store that does not answer holds no shutdown: the interrupts and the streams share
    /// `within`, and taking leave of it gets 100 ms. Runs whose interrupt was not stored are
    /// ended at the next start (or by a surviving replica).
    pub async fn shut_down(&self, within: Duration) {
        let until = std::time::Instant::now() + within;
        let here = self.signals.running_here();
        let now = self.clock.now();
        // Stored (and so told to every stream, here and on other replicas) together.
        let interrupts: Vec<_> = here
            .iter()
            .map(|id| {
                self.store
                    .apply(id, RunChange::Interrupt(SHUTDOWN_ERROR), now)
            })
            .collect();
        at_most(until, join_all(interrupts)).await;
        for id in &here {
            self.signals.stop_here(id);
        }
        at_most(until, self.streams.wait_zero()).await;
        let leave_until = std::time::Instant::now() + LEAVE_WITHIN;
        at_most(leave_until, async {
            let _ = self.store.leave().await;
        })
        .await;
    }
}

/// How long a shutting-down process waits for the store to take its leave.
const LEAVE_WITHIN: Duration = Duration::from_millis(100);

/// `work`, or nothing once `until` passed.
async fn at_most(until: std::time::Instant, work: impl std::future::Future<Output = ()>) {
    futures_lite::future::or(work, async {
        smol::Timer::at(until).await;
    })
    .await
}

/// Awaits every future, all at once.
async fn join_all<F: std::future::Future + Unpin>(mut futures: Vec<F>) {
    std::future::poll_fn(|cx| {
        futures.retain_mut(|f| std::pin::Pin::new(f).poll(cx).is_pending());
        if futures.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}
