//! The JSON-RPC gateway of SPEC §7: sessions owned by the transport that created them, the
//! seven methods, and events routed to the owner of the operation's session.
//!
//! Every rule of the protocol (framing, the order of the checks, the error objects) comes
//! from [`connop_core::rpc`]; every rule of an operation from the core's flow. This module
//! only keeps the sessions and wires them to the runtime.

pub mod transport;

use crate::driver::manage_connections;
use connop_blocking::clock::random_hex;
use connop_blocking::{EventSink, Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::operation::Text;
use connop_core::rpc::{self, Method, Request, RpcError};
use connop_core::tool_gateway::{AsyncToolGateway, GatewayCall, GatewayError, GatewayReply};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// How the gateway runs operations.
#[derive(Clone)]
pub struct GatewayConfig {
    /// The tool gateway.
    pub gateway: Arc<dyn AsyncToolGateway>,
    /// The profile (`CONNOP_HOME`) the registry belongs to.
    pub profile: Text,
    /// The watcher tick.
    pub tick: Duration,
    /// The operation deadline.
    pub deadline: Duration,
    /// The local MCP catalog.
    pub catalog: Vec<Text>,
}

/// Where a transport's lines go: answers and events, in order, to its writer.
pub type Outbox = async_channel::Sender<String>;

/// A transport as the gateway knows it.
#[derive(Clone)]
pub struct TransportHandle {
    id: u64,
    out: Outbox,
    /// Set before the transport's sessions are closed: no session is created for it after.
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl TransportHandle {
    /// Sends a line; a closed transport drops it.
    pub fn send(&self, line: String) {
        let _ = self.out.try_send(line);
    }
}

struct Session {
    key: Text,
    source: Surface,
    owner: TransportHandle,
    /// Attached to every operation of the session: closing the session (or shutdown)
    /// interrupts them, even one still in prepare that registers later.
    interrupt: Interrupt,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<Text, Session>,
    id_of_key: HashMap<Text, Text>,
}

/// The gateway's state, shared by every transport.
pub struct Gateway {
    config: GatewayConfig,
    registry: SharedRegistry,
    sessions: Mutex<Sessions>,
    /// Tells every transport to stop reading (shutdown).
    stopping: connop_blocking::sync::Switch,
    next_transport: AtomicU64,
}

impl Gateway {
    /// A gateway with no sessions.
    pub fn new(config: GatewayConfig) -> Arc<Self> {
        Arc::new(Gateway {
            registry: SharedRegistry::new(config.profile.clone()),
            config,
            sessions: Mutex::default(),
            stopping: connop_blocking::sync::Switch::default(),
            next_transport: AtomicU64::new(1),
        })
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new transport writing to `out`.
    pub fn transport(&self, out: Outbox) -> TransportHandle {
        TransportHandle {
            id: self.next_transport.fetch_add(1, Ordering::Relaxed),
            out,
            closed: Arc::default(),
        }
    }

    /// A transport closed: every session it owns is closed (its open operation interrupted).
    pub fn transport_closed(&self, transport: &TransportHandle) {
        transport.closed.store(true, Ordering::Release);
        let owned: Vec<Text> = self
            .sessions()
            .by_id
            .iter()
            .filter(|(_, s)| s.owner.id == transport.id)
            .map(|(id, _)| id.clone())
            .collect();
        for id in owned {
            self.close_session(&id);
        }
    }

    /// Shutdown: every open operation settles `interrupt` (so every pending manage answers)
    /// and every transport stops reading, answers what is pending, and closes.
    pub fn shut_down(&self) {
        let tokens: Vec<Interrupt> = {
            let sessions = self.sessions();
            // Under the lock `session.create` checks it under: no session is created unstopped.
            self.stopping.flip();
            sessions
                .by_id
                .values()
                .map(|s| s.interrupt.clone())
                .collect()
        };
        for token in tokens {
            token.trigger();
        }
    }

    /// Completes once shutdown began.
    pub async fn stopped(&self) {
        self.stopping.wait().await;
    }

    /// The registry of open operations.
    pub fn registry(&self) -> &SharedRegistry {
        &self.registry
    }

    /// Takes one request, in the order the transport read it: the checks of SPEC §7 and
    /// every method that never waits are decided here and answered at once; a manage or a
    /// list continues as [`Pending`] with the session it was checked against. So a session
    /// created before the input ended exists when the transport closes its sessions, and a
    /// manage read before then belongs to that session (its close interrupts it).
    pub fn begin(self: &Arc<Self>, transport: &TransportHandle, request: Request) -> Step {
        let id = request.id.clone();
        match self.decide(transport, request) {
            Ok(Decided::Answer(result)) => Step::Answer(rpc::result_line(&id, &result)),
            Ok(Decided::Later(kind)) => Step::Later(Pending {
                gateway: self.clone(),
                id,
                kind,
            }),
            Err(error) => Step::Answer(rpc::error_line(&id, &error)),
        }
    }

    fn decide(&self, transport: &TransportHandle, request: Request) -> Result<Decided, RpcError> {
        let params = request.params;
        if request.method == Method::SessionCreate {
            return self.create_session(transport, &params).map(Decided::Answer);
        }
        let session_id = rpc::session_id(&params)?;
        let (key, source, interrupt) = self.owned(transport, session_id)?;
        let answer = match request.method {
            Method::SessionCreate | Method::ConnectorsList => {
                return Ok(Decided::Later(Later::List));
            }
            Method::ConnectorsManage => {
                return Ok(Decided::Later(Later::Manage {
                    key,
                    source,
                    interrupt,
                    params,
                }));
            }
            Method::SessionInterrupt => {
                let interrupted = self.registry.current(&key).is_some_and(|op| op.interrupt());
                json!({"status": "ok", "interrupted": interrupted})
            }
            Method::SessionClose => {
                self.close_session(session_id);
                json!({"status": "ok"})
            }
            Method::OperationStatus => {
                let op_id = rpc::op_id(&params)?;
                let op = self
                    .registry
                    .get(&key, op_id)
                    .ok_or_else(RpcError::unknown_operation)?;
                let view = op.view().ok_or_else(RpcError::unknown_operation)?;
                serde_json::to_value(view).unwrap_or(Value::Null)
            }
            Method::ConnectionRespond => {
                let op_id = rpc::op_id(&params)?;
                let op = self
                    .registry
                    .get(&key, op_id)
                    .ok_or_else(RpcError::unknown_operation)?;
                let answer = rpc::card_answer(&params)?;
                let reply = op.respond(&answer).map_err(|e| rpc::answer_refused(&e))?;
                serde_json::to_value(reply).unwrap_or(Value::Null)
            }
        };
        Ok(Decided::Answer(answer))
    }

    /// The session's key, source and interrupt token if `transport` owns it; 4001 otherwise.
    fn owned(
        &self,
        transport: &TransportHandle,
        session_id: &str,
    ) -> Result<(Text, Surface, Interrupt), RpcError> {
        let sessions = self.sessions();
        match sessions.by_id.get(session_id) {
            Some(session) if session.owner.id == transport.id => Ok((
                session.key.clone(),
                session.source.clone(),
                session.interrupt.clone(),
            )),
            _ => Err(RpcError::not_owner()),
        }
    }

    fn create_session(
        &self,
        transport: &TransportHandle,
        params: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let id: Text = match rpc::optional_str(params, "session_id")? {
            Some(id) if !id.is_empty() => id.into(),
            _ => random_hex(8).into(),
        };
        let key: Text = match rpc::optional_str(params, "session_key")? {
            Some(key) if !key.is_empty() => key.into(),
            _ => id.clone(),
        };
        let source = rpc::optional_str(params, "source")?
            .unwrap_or("tui")
            .to_owned();
        let mut sessions = self.sessions();
        // Checked under the lock that closing takes too: a session is never left behind by a
        // transport that is gone.
        if transport.closed.load(Ordering::Acquire) {
            return Err(RpcError::not_owner());
        }
        if sessions.by_id.contains_key(&id) || sessions.id_of_key.contains_key(&key) {
            return Err(RpcError::session_exists());
        }
        let interrupt = Interrupt::new();
        if self.stopping.is_on() {
            interrupt.trigger();
        }
        sessions.id_of_key.insert(key.clone(), id.clone());
        sessions.by_id.insert(
            id.clone(),
            Session {
                key: key.clone(),
                source: Surface::parse(&source),
                owner: transport.clone(),
                interrupt,
            },
        );
        Ok(json!({"session_id": &*id, "session_key": &*key, "source": source}))
    }

    /// Interrupts, then forgets the session (SPEC §7). The interrupt settles its open
    /// operation before returning, so the settle frame still reaches the session's owner and
    /// the session key is never free while that operation is open.
    fn close_session(&self, session_id: &str) {
        let Some((owner, interrupt)) = self
            .sessions()
            .by_id
            .get(session_id)
            .map(|s| (s.owner.id, s.interrupt.clone()))
        else {
            return;
        };
        // Not under the lock: the settle frame's routing takes it.
        interrupt.trigger();
        let mut sessions = self.sessions();
        if sessions
            .by_id
            .get(session_id)
            .is_some_and(|s| s.owner.id == owner)
        {
            if let Some(session) = sessions.by_id.remove(session_id) {
                sessions.id_of_key.remove(&session.key);
            }
        }
    }

    /// The events of an operation go to whichever transport owns the session with its key
    /// at the time of the event.
    fn event_sink(self: &Arc<Self>, key: Text) -> EventSink {
        let gateway: Weak<Gateway> = Arc::downgrade(self);
        Arc::new(move |event: &Event| {
            let Some(gateway) = gateway.upgrade() else {
                return;
            };
            let target = {
                let sessions = gateway.sessions();
                sessions.id_of_key.get(&key).and_then(|id| {
                    sessions
                        .by_id
                        .get(id)
                        .map(|s| (id.clone(), s.owner.clone()))
                })
            };
            if let Some((session_id, owner)) = target {
                let line = match event {
                    Event::Request(card) => rpc::event_line(event.name(), &session_id, card),
                    Event::Update(frame) => rpc::event_line(event.name(), &session_id, frame),
                    // An event kind this server predates has no line on the protocol.
                    _ => return,
                };
                owner.send(line);
            }
        })
    }

    async fn manage(
        self: &Arc<Self>,
        key: &Text,
        source: Surface,
        interrupt: Interrupt,
        params: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let args = params.get("args").cloned().unwrap_or_else(|| json!({}));
        let mut ctx: ToolContext<dyn AsyncToolGateway> =
            ToolContext::new(self.registry.clone(), key, self.config.gateway.clone());
        ctx.surface = source;
        ctx.events = Some(self.event_sink(key.clone()));
        ctx.tick = self.config.tick;
        ctx.deadline = self.config.deadline;
        ctx.local_catalog = self.config.catalog.clone();
        ctx.tool_call_id = rpc::optional_str(params, "tool_call_id")?.map(Text::from);
        ctx.agent_session_id = rpc::optional_str(params, "agent_session_id")?.map(Text::from);
        ctx.interrupt = Some(interrupt);
        Ok(manage_connections(&args, &ctx).await)
    }

    async fn list(&self) -> Result<Value, RpcError> {
        let call = GatewayCall::List { timeout: None };
        let rows = self.config.gateway.call(&call).await;
        match rows.and_then(GatewayReply::into_connectors) {
            Ok(rows) => {
                let rows: Vec<Value> = rows.into_iter().map(|r| r.raw).collect();
                Ok(json!({"available": true, "connectors": rows}))
            }
            Err(GatewayError::Unavailable) => Ok(json!({"available": false, "connectors": []})),
            Err(error) => Err(RpcError::connector_request_failed(error)),
        }
    }
}

/// What a request led to.
pub enum Step {
    /// The answer line, ready now.
    Answer(String),
    /// A request that waits (manage, list): run it to get its answer line.
    Later(Pending),
}

enum Decided {
    Answer(Value),
    Later(Later),
}

enum Later {
    Manage {
        key: Text,
        source: Surface,
        interrupt: Interrupt,
        params: Map<String, Value>,
    },
    List,
}

/// A checked request that waits for the tool gateway or for its operation to settle.
pub struct Pending {
    gateway: Arc<Gateway>,
    id: Value,
    kind: Later,
}

impl Pending {
    /// Runs it to its answer line.
    pub async fn run(self) -> String {
        let result = match self.kind {
            Later::Manage {
                key,
                source,
                interrupt,
                params,
            } => self.gateway.manage(&key, source, interrupt, &params).await,
            Later::List => self.gateway.list().await,
        };
        match result {
            Ok(result) => rpc::result_line(&self.id, &result),
            Err(error) => rpc::error_line(&self.id, &error),
        }
    }
}
