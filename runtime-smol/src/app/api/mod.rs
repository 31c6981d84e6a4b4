//! The HTTP API of SPEC §9 (`connop gateway --http ADDR`): runs with server-sent events,
//! sessions and session chat. Every route but `/health` requires `Authorization: Bearer K`
//! when a key is set. Errors are OpenAI-style: `{"error": {"message", "type", "code"}}`.
//!
//! The HTTP API never acquires a lease and is never refused by one: a desktop lease is a
//! viewer, so every turn runs here, and no delivery record is ever written.

pub mod executor;
pub mod store;

use connop_blocking::SystemClock;
use connop_blocking::clock::random_hex;
use connop_blocking::sync::Switch;
use connop_core::run::{Run, RunEvent, SHUTDOWN_ERROR, StopOutcome, run_id};
use executor::{Executor, Outcome, Turn};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use smol::net::{TcpListener, TcpStream};
use smol_hyper::rt::{FuturesIo, SmolTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use store::{SessionRow, Store};

type Body = BoxBody<Bytes, Infallible>;

/// A connection's hold on the count of live event streams.
type Streaming = Arc<Mutex<Option<connop_blocking::sync::CountGuard>>>;

/// How often an idle event stream says it is alive.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// What the HTTP API needs.
pub struct ApiConfig {
    /// `CONNOP_HOME`: `state.db` lives there.
    pub home: PathBuf,
    /// The bearer key every route but `/health` requires, if any.
    pub api_key: Option<String>,
    /// Who answers turns.
    pub executor: Executor,
}

/// A run being tracked: its state, a signal for its subscribers, and its stop switch.
struct RunCell {
    run: Mutex<Run>,
    changed: event_listener::Event,
    stop: Switch,
}

/// The API's state.
pub struct Api {
    store: Store,
    executor: Executor,
    api_key: Option<String>,
    clock: SystemClock,
    runs: Mutex<HashMap<String, Arc<RunCell>>>,
    /// Idempotency-Key → (the request body, the first answer's status and body).
    idempotency: Mutex<HashMap<String, (String, StatusCode, Value)>>,
    /// Event streams still writing (shutdown waits for them to say `run.interrupted`).
    streams: Arc<connop_blocking::sync::Count>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn error(status: StatusCode, message: &str, kind: &str, code: &str) -> (StatusCode, Value) {
    (
        status,
        json!({"error": {"message": message, "type": kind, "code": code}}),
    )
}

fn bad_request(message: &str, code: &str) -> (StatusCode, Value) {
    error(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        code,
    )
}

fn full(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// `author`, when given: an object with a non-empty string `id`, a string `name`, a bool
/// `is_bot`.
fn valid_author(author: Option<&Value>) -> bool {
    match author {
        None | Some(Value::Null) => true,
        Some(a) => {
            a.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.is_empty())
                && a.get("name").is_some_and(Value::is_string)
                && a.get("is_bot").is_some_and(Value::is_boolean)
        }
    }
}

/// The user's message of a run's `input`: the string, or the last user message of a list.
fn user_message(input: &Value) -> Option<String> {
    let text = match input {
        Value::String(s) => s.clone(),
        Value::Array(messages) => {
            let last = messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str).unwrap_or("user") == "user")?;
            match last.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return None,
            }
        }
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

impl Api {
    /// Opens the store (marking runs a dead process left unsettled `interrupted`).
    pub fn open(config: ApiConfig) -> Result<Arc<Self>, String> {
        let clock = SystemClock::new();
        let store = Store::open(&config.home, clock.now())?;
        Ok(Arc::new(Api {
            store,
            executor: config.executor,
            api_key: config.api_key.filter(|k| !k.is_empty()),
            clock,
            runs: Mutex::default(),
            idempotency: Mutex::default(),
            streams: Arc::default(),
        }))
    }

    /// Serves the API on `listener` until the future is dropped.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        let ex = smol::Executor::new();
        ex.run(async {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        ex.spawn(self.clone().connection(stream)).detach();
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
        let _ = http1::Builder::new()
            .timer(SmolTimer::new())
            .serve_connection(FuturesIo::new(stream), service)
            .await;
        drop(lock(&streaming).take());
    }

    /// Shutdown, in SPEC §9.1's order: every active run is marked `interrupted` and stored,
    /// `run.interrupted` goes to every open event stream, then the turns are stopped (their
    /// commands killed; the cancellation that follows changes nothing). Returns once the
    /// event streams wrote their last event, or after `within`.
    pub async fn shut_down(&self, within: Duration) {
        let cells: Vec<Arc<RunCell>> = lock(&self.runs).values().cloned().collect();
        let now = self.clock.now();
        for cell in &cells {
            let ended = {
                let mut run = lock(&cell.run);
                let ended = run.interrupt(SHUTDOWN_ERROR, now);
                if ended {
                    let _ = self.store.save_run(&run);
                }
                ended
            };
            if ended {
                cell.changed.notify(usize::MAX);
            }
        }
        for cell in &cells {
            cell.stop.flip();
        }
        futures_lite::future::or(self.streams.wait_zero(), async {
            smol::Timer::after(within).await;
        })
        .await;
    }

    async fn respond(
        self: Arc<Self>,
        request: Request<Incoming>,
        streaming: &Streaming,
    ) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().trim_end_matches('/').to_owned();
        if path == "/health" {
            return full(StatusCode::OK, &json!({"status": "ok"}));
        }
        if let Some(key) = &self.api_key {
            let given = parts
                .headers
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            if given != Some(&format!("Bearer {key}")) {
                let (status, body) = error(
                    StatusCode::UNAUTHORIZED,
                    "Invalid API key",
                    "invalid_request_error",
                    "invalid_api_key",
                );
                return full(status, &body);
            }
        }
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        let idempotency_key = parts
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = match (&parts.method, segments.as_slice()) {
            (&Method::POST, ["v1", "runs"]) => self.create_run(&body, idempotency_key),
            (&Method::GET, ["v1", "runs", id]) => self.get_run(id),
            (&Method::POST, ["v1", "runs", id, "stop"]) => self.stop_run(id),
            (&Method::GET, ["v1", "runs", id, "events"]) => return self.events(id, streaming),
            (&Method::GET, ["api", "sessions"]) => self.list_sessions(),
            (&Method::POST, ["api", "sessions"]) => self.create_session(&body),
            (&Method::POST, ["api", "sessions", id, "chat"]) => self.chat(id, &body).await,
            _ => error(
                StatusCode::NOT_FOUND,
                &format!("No route for {} {path}", parts.method),
                "invalid_request_error",
                "not_found",
            ),
        };
        full(answer.0, &answer.1)
    }

    fn internal(message: String) -> (StatusCode, Value) {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &message,
            "server_error",
            "internal_error",
        )
    }

    fn list_sessions(&self) -> (StatusCode, Value) {
        match self.store.sessions() {
            Ok(rows) => (
                StatusCode::OK,
                json!({"sessions": rows.iter().map(SessionRow::to_json).collect::<Vec<_>>()}),
            ),
            Err(e) => Self::internal(e),
        }
    }

    fn create_session(&self, body: &[u8]) -> (StatusCode, Value) {
        let body: Value = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(v @ Value::Object(_)) => v,
                _ => return bad_request("Invalid JSON", "invalid_json"),
            }
        };
        let text = |key: &str| {
            body.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let row = SessionRow {
            session_id: text("session_id")
                .map_or_else(|| format!("session_{}", random_hex(8)), str::to_owned),
            title: text("title").unwrap_or("").to_owned(),
            source: text("source").unwrap_or("api_server").to_owned(),
            created_at: self.clock.now().as_secs_f64(),
        };
        match self.store.create_session(&row) {
            Ok(true) => (StatusCode::CREATED, row.to_json()),
            Ok(false) => error(
                StatusCode::CONFLICT,
                &format!("Session already exists: {}", row.session_id),
                "invalid_request_error",
                "session_exists",
            ),
            Err(e) => Self::internal(e),
        }
    }

    fn ensure_session(&self, session_id: &str) -> Result<(), String> {
        if self.store.session(session_id)?.is_none() {
            let row = SessionRow {
                session_id: session_id.to_owned(),
                title: String::new(),
                source: "api_server".into(),
                created_at: self.clock.now().as_secs_f64(),
            };
            self.store.create_session(&row)?;
        }
        Ok(())
    }

    async fn chat(&self, session_id: &str, body: &[u8]) -> (StatusCode, Value) {
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return bad_request("Invalid JSON", "invalid_json");
        };
        match self.store.session(session_id) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return error(
                    StatusCode::NOT_FOUND,
                    &format!("Session not found: {session_id}"),
                    "invalid_request_error",
                    "session_not_found",
                );
            }
            Err(e) => return Self::internal(e),
        }
        let Some(message) = body
            .get("message")
            .and_then(Value::as_str)
            .filter(|m| !m.trim().is_empty())
        else {
            return bad_request("Missing 'message' field", "missing_message");
        };
        if !valid_author(body.get("author")) {
            return bad_request("invalid_author", "invalid_author");
        }
        let turn = match self.turn(session_id, message, body.get("author")) {
            Ok(turn) => turn,
            Err(e) => return Self::internal(e),
        };
        match self
            .executor
            .answer(&turn, futures_lite::future::pending())
            .await
        {
            Outcome::Reply(reply) => {
                if let Err(e) =
                    self.store
                        .add_message(session_id, "assistant", &reply, None, self.clock.now())
                {
                    return Self::internal(e);
                }
                (
                    StatusCode::OK,
                    json!({"object": "connop.session.chat.completion", "session_id": session_id,
                           "message": {"role": "assistant", "content": reply}}),
                )
            }
            Outcome::Failed(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &e,
                "server_error",
                "turn_failed",
            ),
            Outcome::Stopped => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "The turn was stopped.",
                "server_error",
                "turn_stopped",
            ),
        }
    }

    /// Records the user's message and builds the turn with the history before it.
    fn turn(
        &self,
        session_id: &str,
        message: &str,
        author: Option<&Value>,
    ) -> Result<Turn, String> {
        let history = self.store.history(session_id)?;
        self.store
            .add_message(session_id, "user", message, author, self.clock.now())?;
        Ok(Turn {
            session_id: session_id.to_owned(),
            message: message.to_owned(),
            history,
        })
    }

    fn create_run(
        self: &Arc<Self>,
        body: &[u8],
        idempotency_key: Option<String>,
    ) -> (StatusCode, Value) {
        let text = String::from_utf8_lossy(body).into_owned();
        if let Some(key) = &idempotency_key {
            if let Some((first_body, status, answer)) = lock(&self.idempotency).get(key) {
                if *first_body == text {
                    return (*status, answer.clone());
                }
                return error(
                    StatusCode::CONFLICT,
                    "Idempotency-Key reused with a different body",
                    "invalid_request_error",
                    "idempotency_key_conflict",
                );
            }
        }
        let answer = self.start_run(body);
        if let Some(key) = idempotency_key {
            lock(&self.idempotency).insert(key, (text, answer.0, answer.1.clone()));
        }
        answer
    }

    fn start_run(self: &Arc<Self>, body: &[u8]) -> (StatusCode, Value) {
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
            return bad_request("Invalid JSON", "invalid_json");
        };
        let Some(input) = body.get("input") else {
            return bad_request("Missing 'input' field", "missing_input");
        };
        let Some(message) = user_message(input) else {
            return bad_request("No user message found in input", "no_user_message");
        };
        if !valid_author(body.get("author")) {
            return bad_request("invalid_author", "invalid_author");
        }
        let session_id = body
            .get("session_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("session_{}", random_hex(8)), str::to_owned);
        let turn = match self
            .ensure_session(&session_id)
            .and_then(|()| self.turn(&session_id, &message, body.get("author")))
        {
            Ok(turn) => turn,
            Err(e) => return Self::internal(e),
        };
        let mut entropy = [0u8; 16];
        connop_blocking::clock::random_bytes(&mut entropy);
        let run = Run::new(run_id(entropy), session_id, self.clock.now());
        if let Err(e) = self.store.save_run(&run) {
            return Self::internal(e);
        }
        let id = run.run_id().to_owned();
        let cell = Arc::new(RunCell {
            run: Mutex::new(run),
            changed: event_listener::Event::new(),
            stop: Switch::default(),
        });
        lock(&self.runs).insert(id.clone(), cell.clone());
        smol::spawn(self.clone().execute(cell, turn)).detach();
        (
            StatusCode::ACCEPTED,
            json!({"run_id": id, "status": "started"}),
        )
    }

    /// Applies one change to a run, stores it, and wakes its subscribers.
    fn update(&self, cell: &RunCell, change: impl FnOnce(&mut Run)) {
        {
            let mut run = lock(&cell.run);
            change(&mut run);
            let _ = self.store.save_run(&run);
        }
        cell.changed.notify(usize::MAX);
    }

    async fn execute(self: Arc<Self>, cell: Arc<RunCell>, turn: Turn) {
        let now = self.clock.now();
        self.update(&cell, |run| {
            run.start(now);
        });
        let outcome = self.executor.answer(&turn, cell.stop.wait()).await;
        let now = self.clock.now();
        if let Outcome::Reply(reply) = &outcome {
            let _ = self
                .store
                .add_message(&turn.session_id, "assistant", reply, None, now);
        }
        self.update(&cell, |run| {
            match outcome {
                // The executors answer in one piece: the reply is one delta, then the end.
                Outcome::Reply(reply) => {
                    run.delta(&reply, now);
                    run.complete(&reply, now)
                }
                Outcome::Failed(e) => run.fail(&e, now),
                Outcome::Stopped => run.cancelled(now),
            };
        });
    }

    fn cell(&self, id: &str) -> Option<Arc<RunCell>> {
        lock(&self.runs).get(id).cloned()
    }

    fn not_found(id: &str) -> (StatusCode, Value) {
        error(
            StatusCode::NOT_FOUND,
            &format!("Run not found: {id}"),
            "invalid_request_error",
            "run_not_found",
        )
    }

    fn get_run(&self, id: &str) -> (StatusCode, Value) {
        if let Some(cell) = self.cell(id) {
            return (StatusCode::OK, lock(&cell.run).to_json());
        }
        match self.store.run(id) {
            Ok(Some(run)) => (StatusCode::OK, run.to_json()),
            Ok(None) => Self::not_found(id),
            Err(e) => Self::internal(e),
        }
    }

    fn stop_run(&self, id: &str) -> (StatusCode, Value) {
        let Some(cell) = self.cell(id) else {
            return self.get_run(id);
        };
        let now = self.clock.now();
        let mut outcome = StopOutcome::Unchanged;
        self.update(&cell, |run| outcome = run.stop(now));
        if outcome == StopOutcome::Stopping {
            cell.stop.flip();
        }
        (StatusCode::OK, lock(&cell.run).to_json())
    }

    /// Server-sent events: every event from the start, then live ones, ending after the
    /// terminal event; `: keepalive` every 15 s meanwhile.
    fn events(self: &Arc<Self>, id: &str, streaming: &Streaming) -> Response<Body> {
        let cell = match self.cell(id) {
            Some(cell) => cell,
            None => match self.store.run(id) {
                Ok(Some(run)) => Arc::new(RunCell {
                    run: Mutex::new(run),
                    changed: event_listener::Event::new(),
                    stop: Switch::default(),
                }),
                Ok(None) => {
                    let (status, body) = Self::not_found(id);
                    return full(status, &body);
                }
                Err(e) => {
                    let (status, body) = Self::internal(e);
                    return full(status, &body);
                }
            },
        };
        let (tx, rx) = async_channel::unbounded::<Result<Frame<Bytes>, Infallible>>();
        *lock(streaming) = Some(self.streams.enter());
        smol::spawn(async move {
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
        })
        .detach();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_and_authors_are_checked() {
        assert_eq!(user_message(&json!("ping")), Some("ping".into()));
        assert_eq!(user_message(&json!("   ")), None);
        let messages = json!([{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "last"}]);
        assert_eq!(user_message(&messages), Some("last".into()));
        assert_eq!(user_message(&json!([])), None);
        assert!(valid_author(Some(
            &json!({"id": "bot:cto", "name": "cto", "is_bot": true})
        )));
        assert!(!valid_author(Some(
            &json!({"id": "", "name": "cto", "is_bot": true})
        )));
        assert!(!valid_author(Some(
            &json!({"id": "x", "is_bot": "yes", "name": "n"})
        )));
        assert!(valid_author(None));
    }
}
