//! The JSON-RPC server of docs/protocol.md#overview: sessions owned by the transport that created
//! them, the seven methods, and events routed to the owner of the operation's session.
//!
//! Every rule of the protocol (framing, who owns a session, the order of the checks, the
//! error objects) is decided by [`connop_core::rpc`] and its [`SessionTable`]; every rule of
//! an operation by the core's flow. This module holds the table's lock and wires its
//! decisions to the runtime: interrupts, the registry, the tool gateway, the outboxes.

mod outbox;
pub mod transport;

use crate::sync::Switch;
use crate::sync::random_hex;
use crate::telemetry::{ObservedToolGateway, manage_connections};
use connop_blocking::{EventSink, Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::{Event, OperationOptions};
use connop_core::operation::Text;
use connop_core::rpc::{
    self, Admitted, Call, ManageParams, Request, RpcError, Session, SessionTable, TransportId,
};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{AsyncToolGateway, GatewayCall, GatewayError, GatewayReply};
pub use outbox::{DEFAULT_MAX_OUTPUT, Outbox};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// How the JSON-RPC server runs operations.
#[derive(Clone)]
pub struct RpcConfig {
    /// The upstream tool gateway every operation mints and reads through.
    pub tool_gateway: Arc<dyn AsyncToolGateway>,
    /// The profile (`CONNOP_HOME`) the registry belongs to.
    pub profile: Text,
    /// The operations' tick, deadline and local catalog.
    pub options: OperationOptions,
    /// How many bytes of answers and events may wait for one transport's client to read
    /// them; past it the transport closes ([`DEFAULT_MAX_OUTPUT`]: 16 MiB).
    pub max_output: usize,
}

/// A transport as the server knows it: its id in the session table and its outbox.
#[derive(Clone)]
pub struct TransportHandle {
    id: TransportId,
    out: Outbox,
}

impl TransportHandle {
    /// Sends a line; a closed transport drops it, and so does one past its output bound.
    pub fn send(&self, line: String) {
        self.out.send(line);
    }
}

/// What the server attaches to a session in the table.
#[derive(Clone)]
struct SessionLink {
    /// Attached to every operation of the session: closing the session (or shutdown)
    /// interrupts them, even one still in prepare that registers later.
    interrupt: Interrupt,
    /// The owner's outbox, where the session's events go.
    out: Outbox,
}

/// The JSON-RPC server's state, shared by every transport.
pub struct RpcServer {
    config: RpcConfig,
    /// The tool gateway as `connectors.list` calls it, outside any operation.
    list_gateway: Arc<ObservedToolGateway>,
    registry: SharedRegistry,
    sessions: Mutex<SessionTable<SessionLink>>,
    /// Tells every transport to stop reading (shutdown).
    stopping: Switch,
}

impl RpcServer {
    /// A server with no transport and no session.
    pub fn new(config: RpcConfig) -> Arc<Self> {
        Arc::new(RpcServer {
            registry: SharedRegistry::new(config.profile.clone()),
            list_gateway: Arc::new(ObservedToolGateway::new(
                config.tool_gateway.clone(),
                "connectors.list",
            )),
            config,
            sessions: Mutex::default(),
            stopping: Switch::default(),
        })
    }

    fn sessions(&self) -> MutexGuard<'_, SessionTable<SessionLink>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new transport writing to `out`.
    pub fn transport(&self, out: Outbox) -> TransportHandle {
        TransportHandle {
            id: self.sessions().open_transport(),
            out,
        }
    }

    /// A transport closed: every session it owns is closed (its open operation interrupted),
    /// and it creates none after.
    pub fn transport_closed(&self, transport: &TransportHandle) {
        let owned = self.sessions().close_transport(transport.id);
        for id in owned {
            self.close_session(&id, transport.id);
        }
    }

    /// Shutdown: every open operation settles `interrupt` (so every pending manage answers)
    /// and every transport stops reading, answers what is pending, and closes.
    pub fn shut_down(&self) {
        let links = {
            let mut sessions = self.sessions();
            // Under the table's lock: a session created from now on is born interrupted.
            self.stopping.flip();
            sessions.stop()
        };
        for link in links {
            link.interrupt.trigger();
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

    /// Takes one request, in the order the transport read it: the checks of
    /// docs/protocol.md#errors and every method that never waits are decided here and answered at
    /// once; a manage or a list continues as a [`PendingRequest`] with the session it was checked
    /// against. So a session created before the input ended exists when the transport closes its
    /// sessions, and a manage read before then belongs to that session (its close
    /// interrupts it).
    pub fn begin(self: &Arc<Self>, transport: &TransportHandle, request: Request) -> RequestNext {
        let id = request.id.clone();
        match self.decide(transport, request) {
            Ok(Decided::Answer(result)) => {
                RequestNext::Answer(rpc::reply_line(id.as_ref(), Ok(&result)))
            }
            Ok(Decided::Later(kind)) => RequestNext::Later(PendingRequest {
                server: self.clone(),
                id,
                kind,
            }),
            Err(error) => RequestNext::Answer(rpc::reply_line(id.as_ref(), Err(&error))),
        }
    }

    fn decide(&self, transport: &TransportHandle, request: Request) -> Result<Decided, RpcError> {
        let admitted = self.sessions().admit(
            transport.id,
            request,
            || random_hex(8),
            |stopping| {
                let interrupt = Interrupt::new();
                if stopping {
                    // No operation holds it yet: nothing settles under the table's lock.
                    interrupt.trigger();
                }
                SessionLink {
                    interrupt,
                    out: transport.out.clone(),
                }
            },
        )?;
        let request = match admitted {
            Admitted::Created(created) => return Ok(Decided::Answer(created.answer)),
            Admitted::Session(request) => request,
        };
        // The table's lock is released: the registry is asked without it.
        let (session, call) = request.check(|key, op_id| self.registry.get(key, op_id))?;
        let answer = match call {
            Call::List => return Ok(Decided::Later(Later::List)),
            Call::Manage(params) => {
                return Ok(Decided::Later(Later::Manage(Box::new((session, params)))));
            }
            Call::Interrupt => {
                let interrupted = self
                    .registry
                    .current(&session.key)
                    .is_some_and(|op| op.interrupt());
                json!({"status": "ok", "interrupted": interrupted})
            }
            Call::Close => {
                self.close_session(&session.id, session.owner);
                json!({"status": "ok"})
            }
            Call::Status(op) => {
                // Closed between the lookup and now: it is no longer open.
                let view = op.view().ok_or_else(RpcError::unknown_operation)?;
                serde_json::to_value(view).unwrap_or(Value::Null)
            }
            Call::Respond(op, answer) => {
                let reply = op.respond(&answer).map_err(|e| rpc::answer_refused(&e))?;
                serde_json::to_value(reply).unwrap_or(Value::Null)
            }
            Call::Returned(op, target) => {
                let read = op
                    .return_hint(target.as_deref())
                    .map_err(|e| rpc::hint_refused(&e))?;
                serde_json::to_value(rpc::HintReply { read }).unwrap_or(Value::Null)
            }
        };
        Ok(Decided::Answer(answer))
    }

    /// Interrupts, then forgets the session if `owner` still owns it (docs/protocol.md#sessions).
    /// The interrupt settles its open operation before returning, so the settle frame still
    /// reaches the session's owner and the session key is never free while that operation
    /// is open.
    fn close_session(&self, session_id: &str, owner: TransportId) {
        let Some(interrupt) = self
            .sessions()
            .get(session_id)
            .filter(|s| s.owner == owner)
            .map(|s| s.attached.interrupt.clone())
        else {
            return;
        };
        // Not under the lock: the settle frame's routing takes it.
        interrupt.trigger();
        self.sessions().forget(session_id, owner);
    }

    /// The events of an operation go to whichever transport owns the session with its key
    /// at the time of the event.
    fn event_sink(self: &Arc<Self>, key: Text) -> EventSink {
        let server: Weak<RpcServer> = Arc::downgrade(self);
        Arc::new(move |event: &Event| {
            let Some(server) = server.upgrade() else {
                return;
            };
            let Some((session_id, out)) = server
                .sessions()
                .route(&key)
                .map(|s| (s.id.clone(), s.attached.out.clone()))
            else {
                return;
            };
            let line = match event {
                Event::Request(card) => rpc::event_line(event.name(), &session_id, card),
                Event::Update(frame) => rpc::event_line(event.name(), &session_id, frame),
                // An event kind this server predates has no line on the protocol.
                _ => return,
            };
            out.send(line);
        })
    }

    async fn manage(
        self: &Arc<Self>,
        session: Session<SessionLink>,
        params: ManageParams,
    ) -> ToolResult {
        let mut ctx: ToolContext<dyn AsyncToolGateway> = ToolContext::new(
            self.registry.clone(),
            &session.key,
            self.config.tool_gateway.clone(),
        );
        ctx.surface = session.source;
        ctx.events = Some(self.event_sink(session.key.clone()));
        ctx.options = self.config.options.clone();
        ctx.tool_call_id = params.tool_call_id;
        ctx.agent_session_id = params.agent_session_id;
        ctx.interrupt = Some(session.attached.interrupt);
        manage_connections(&params.args, &ctx).await
    }

    async fn list(&self) -> Result<Value, RpcError> {
        let call = GatewayCall::List { timeout: None };
        let rows = self.list_gateway.call(call).await;
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
pub enum RequestNext {
    /// The answer line, ready now (none for a notification).
    Answer(Option<String>),
    /// A request that waits (manage, list): run it to get its answer line.
    Later(PendingRequest),
}

enum Decided {
    Answer(Value),
    Later(Later),
}

enum Later {
    /// Boxed: a waiting manage is rare next to the answers that go out at once.
    Manage(Box<(Session<SessionLink>, ManageParams)>),
    List,
}

/// A checked request that waits for the tool gateway or for its operation to settle.
pub struct PendingRequest {
    server: Arc<RpcServer>,
    /// `None` for a notification: it runs, and is not answered.
    id: Option<Value>,
    kind: Later,
}

impl PendingRequest {
    /// Runs it to its answer line (none for a notification).
    pub async fn run(self) -> Option<String> {
        match self.kind {
            Later::Manage(call) => {
                let (session, params) = *call;
                let result = self.server.manage(session, params).await;
                // Written straight from the typed result, once, as it goes out.
                Some(rpc::result_line(self.id.as_ref()?, &result))
            }
            Later::List => rpc::reply_line(self.id.as_ref(), self.server.list().await.as_ref()),
        }
    }
}
