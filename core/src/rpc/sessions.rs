//! Who owns which session, and the checks of docs/protocol.md#errors in their pinned order.
//!
//! A [`SessionTable`] is the JSON-RPC server's record of sessions: each one belongs to the
//! transport that created it, has a `session_key` its operations register under, and a
//! `source` that decides card or links. The server keeps the table behind its lock and wires
//! what the table decides to the runtime; the table decides everything else:
//!
//! 1. `session.create`: its parameters, the defaults (`session_id` fresh, `session_key` =
//!    the id, `source` = `tui`), the refusal of a transport that already closed (4001), then
//!    of a live id or key (4000 `session already exists`).
//! 2. Every other method: `session_id` present (4000), then owned by the calling transport
//!    (4001) — [`SessionTable::admit`].
//! 3. Then, outside the lock, [`SessionRequest::check`]: `op_id` present (4000), the
//!    operation open in this session (4004, through the caller's lookup), the card answer
//!    well formed (4000). A refused answer (4002) and a tool-gateway failure (5034) come from
//!    running the call.
//!
//! The table is generic over what the server attaches to a session (its interrupt token and
//! the owner's outbox, say), so it stays pure.

use super::{Method, Request, RpcError, card_answer, op_id, optional_str, session_id};
use crate::card::CardAnswer;
use crate::flow::Surface;
use crate::operation::{OpId, Text};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};

/// A transport (stdio, or one accepted connection), as the table knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransportId(u64);

/// One session.
#[derive(Clone, Debug, PartialEq)]
pub struct Session<A> {
    /// The session id.
    pub id: Text,
    /// The key its operations register under: the host's key for the conversation
    /// (docs/contract.md#registry).
    pub key: Text,
    /// Where it runs: decides card or links (docs/contract.md#card-or-links).
    pub source: Surface,
    /// The transport that created it; the only one its methods and events go to.
    pub owner: TransportId,
    /// What the server attached to it.
    pub attached: A,
}

/// The parameters of `session.create`, checked before the table is consulted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSession {
    id: Option<Text>,
    key: Option<Text>,
    source: String,
}

impl NewSession {
    /// Reads `session_id`, `session_key` and `source`: each an optional string (4000 when
    /// not a string); an empty id or key counts as absent; `source` defaults to `tui`.
    pub fn parse(params: &Map<String, Value>) -> Result<Self, RpcError> {
        let given = |key| -> Result<Option<Text>, RpcError> {
            Ok(optional_str(params, key)?
                .filter(|s| !s.is_empty())
                .map(Text::from))
        };
        Ok(NewSession {
            id: given("session_id")?,
            key: given("session_key")?,
            source: optional_str(params, "source")?.unwrap_or("tui").to_owned(),
        })
    }
}

/// A session the table created.
#[derive(Clone, Debug, PartialEq)]
pub struct Created {
    /// The session id.
    pub id: Text,
    /// The answer of `session.create`: `{"session_id", "session_key", "source"}`.
    pub answer: Value,
}

/// What a request became after the table's checks.
#[derive(Debug)]
pub enum Admitted<A> {
    /// `session.create` made a session; answer at once.
    Created(Created),
    /// Any other method, on a session the caller owns: finish its checks with
    /// [`SessionRequest::check`] once the table's lock is released.
    Session(SessionRequest<A>),
}

/// A request on a session its transport owns, with a copy of that session.
#[derive(Debug)]
pub struct SessionRequest<A> {
    /// The session, as it was when the request was admitted.
    pub session: Session<A>,
    method: SessionMethod,
    params: Map<String, Value>,
}

/// The methods that name a session (all but `session.create`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionMethod {
    Interrupt,
    Close,
    Manage,
    List,
    Status,
    Respond,
    Returned,
}

impl SessionMethod {
    fn of(method: Method) -> Option<Self> {
        Some(match method {
            Method::SessionCreate => return None,
            Method::SessionInterrupt => SessionMethod::Interrupt,
            Method::SessionClose => SessionMethod::Close,
            Method::ConnectorsManage => SessionMethod::Manage,
            Method::ConnectorsList => SessionMethod::List,
            Method::OperationStatus => SessionMethod::Status,
            Method::ConnectionRespond => SessionMethod::Respond,
            Method::ConnectionReturned => SessionMethod::Returned,
        })
    }
}

/// The parameters of `connectors.manage`.
#[derive(Clone, Debug, PartialEq)]
pub struct ManageParams {
    /// The tool arguments (`{}` when absent).
    pub args: Value,
    /// The host's tool call id, echoed in the card request.
    pub tool_call_id: Option<Text>,
    /// The agent's own session id (it rotates; the session key does not).
    pub agent_session_id: Option<Text>,
}

/// A session method that passed every check before its effect; `O` is the caller's handle of
/// the operation it names.
#[derive(Debug)]
pub enum Call<O> {
    /// `session.interrupt`: settle the session's open operation `interrupt`.
    Interrupt,
    /// `session.close`: interrupt, then forget the session.
    Close,
    /// `connectors.list`: read the tool gateway's connector list.
    List,
    /// `connectors.manage`: run the tool.
    Manage(ManageParams),
    /// `connectors.operation.status`: the operation's view.
    Status(O),
    /// `connection.respond`: feed the card answer to the operation.
    Respond(O, CardAnswer),
    /// `connection.returned`: feed a return hint, naming this target if any, to the
    /// operation.
    Returned(O, Option<Text>),
}

impl<A> SessionRequest<A> {
    /// The rest of the checks of docs/protocol.md#errors, in order: `op_id` present (4000), the
    /// operation open in this session — `find(session_key, op_id)`, 4004 when it finds none —, the
    /// card answer well formed (4000). Methods that name no operation check their own parameters
    /// (`tool_call_id` and `agent_session_id` are optional strings).
    pub fn check<O>(
        self,
        find: impl FnOnce(&str, OpId) -> Option<O>,
    ) -> Result<(Session<A>, Call<O>), RpcError> {
        let params = &self.params;
        let call = match self.method {
            SessionMethod::Interrupt => Call::Interrupt,
            SessionMethod::Close => Call::Close,
            SessionMethod::List => Call::List,
            SessionMethod::Manage => Call::Manage(ManageParams {
                args: params.get("args").cloned().unwrap_or_else(|| json!({})),
                tool_call_id: optional_str(params, "tool_call_id")?.map(Text::from),
                agent_session_id: optional_str(params, "agent_session_id")?.map(Text::from),
            }),
            SessionMethod::Status => Call::Status(self.operation(find)?),
            SessionMethod::Respond => {
                let op = self.operation(find)?;
                Call::Respond(op, card_answer(params)?)
            }
            SessionMethod::Returned => {
                let op = self.operation(find)?;
                Call::Returned(op, optional_str(params, "target")?.map(Text::from))
            }
        };
        Ok((self.session, call))
    }

    /// `op_id` present (4000), then open in this session (4004).
    fn operation<O>(&self, find: impl FnOnce(&str, OpId) -> Option<O>) -> Result<O, RpcError> {
        let op_id = op_id(&self.params)?;
        find(&self.session.key, op_id).ok_or_else(RpcError::unknown_operation)
    }
}

/// The sessions of one JSON-RPC server, keyed by id and by key, with their owners.
#[derive(Debug)]
pub struct SessionTable<A> {
    by_id: HashMap<Text, Session<A>>,
    id_of_key: HashMap<Text, Text>,
    /// Transports that may still create sessions: a closed one never leaves one behind.
    open: HashSet<TransportId>,
    next_transport: u64,
    stopping: bool,
}

impl<A> Default for SessionTable<A> {
    fn default() -> Self {
        SessionTable {
            by_id: HashMap::new(),
            id_of_key: HashMap::new(),
            open: HashSet::new(),
            next_transport: 1,
            stopping: false,
        }
    }
}

impl<A> SessionTable<A> {
    /// A table with no transport and no session.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new transport, which may create sessions until it closes.
    pub fn open_transport(&mut self) -> TransportId {
        let id = TransportId(self.next_transport);
        self.next_transport += 1;
        self.open.insert(id);
        id
    }

    /// A transport closed: it creates no session any more (4001). Returns the ids of the
    /// sessions it owns, which the server closes (docs/protocol.md#sessions: a closing transport
    /// acts as `session.close` on each).
    pub fn close_transport(&mut self, transport: TransportId) -> Vec<Text> {
        self.open.remove(&transport);
        self.by_id
            .values()
            .filter(|s| s.owner == transport)
            .map(|s| s.id.clone())
            .collect()
    }

    /// Shutdown began: every session created from now on is born stopped (see
    /// [`SessionTable::admit`]). Returns what is attached to every live session, for the
    /// server to interrupt.
    pub fn stop(&mut self) -> Vec<A>
    where
        A: Clone,
    {
        self.stopping = true;
        self.by_id.values().map(|s| s.attached.clone()).collect()
    }

    /// Whether shutdown began.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The first checks of a request, in the order of docs/protocol.md#errors. `session.create`
    /// is decided here whole: its parameters (4000), a closed transport (4001), a live id or key
    /// (4000); its id is `fresh_id()` when none is given, and `attach(stopping)` makes what the
    /// server attaches to it (`stopping`: shutdown began, so it starts interrupted). Every other
    /// method: `session_id` (4000), then owned by `transport` (4001).
    pub fn admit(
        &mut self,
        transport: TransportId,
        request: Request,
        fresh_id: impl FnOnce() -> String,
        attach: impl FnOnce(bool) -> A,
    ) -> Result<Admitted<A>, RpcError>
    where
        A: Clone,
    {
        let Some(method) = SessionMethod::of(request.method) else {
            let new = NewSession::parse(&request.params)?;
            return self
                .create(transport, new, fresh_id, attach)
                .map(Admitted::Created);
        };
        let session = self.owned(transport, &request.params)?.clone();
        Ok(Admitted::Session(SessionRequest {
            session,
            method,
            params: request.params,
        }))
    }

    /// Creates a session owned by `transport` (see [`SessionTable::admit`]).
    pub fn create(
        &mut self,
        transport: TransportId,
        new: NewSession,
        fresh_id: impl FnOnce() -> String,
        attach: impl FnOnce(bool) -> A,
    ) -> Result<Created, RpcError> {
        if !self.open.contains(&transport) {
            return Err(RpcError::not_owner());
        }
        let id = new.id.unwrap_or_else(|| fresh_id().into());
        let key = new.key.unwrap_or_else(|| id.clone());
        if self.by_id.contains_key(&id) || self.id_of_key.contains_key(&key) {
            return Err(RpcError::session_exists());
        }
        let answer = json!({"session_id": &*id, "session_key": &*key, "source": new.source});
        self.id_of_key.insert(key.clone(), id.clone());
        self.by_id.insert(
            id.clone(),
            Session {
                id: id.clone(),
                key,
                source: Surface::parse(&new.source),
                owner: transport,
                attached: attach(self.stopping),
            },
        );
        Ok(Created { id, answer })
    }

    /// The session a request names, if `transport` owns it: `session_id` missing or empty is
    /// 4000; no such session, or another transport's, is 4001 (a stranger learns nothing).
    pub fn owned(
        &self,
        transport: TransportId,
        params: &Map<String, Value>,
    ) -> Result<&Session<A>, RpcError> {
        let id = session_id(params)?;
        match self.by_id.get(id) {
            Some(session) if session.owner == transport => Ok(session),
            _ => Err(RpcError::not_owner()),
        }
    }

    /// A session by id.
    pub fn get(&self, session_id: &str) -> Option<&Session<A>> {
        self.by_id.get(session_id)
    }

    /// Forgets a session, only if `owner` still owns it: a late close never removes a session
    /// that was closed and created again meanwhile.
    pub fn forget(&mut self, session_id: &str, owner: TransportId) -> Option<Session<A>> {
        if self.by_id.get(session_id)?.owner != owner {
            return None;
        }
        let session = self.by_id.remove(session_id)?;
        self.id_of_key.remove(&session.key);
        Some(session)
    }

    /// Where an event of an operation registered under `key` goes: the session with that key
    /// now (the owner at the time of the event), if there is one.
    pub fn route(&self, key: &str) -> Option<&Session<A>> {
        self.by_id.get(self.id_of_key.get(key)?)
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::parse_line;

    /// What the tests attach to a session: whether it was born stopped.
    type Table = SessionTable<bool>;

    fn request(method: &str, params: Value) -> Request {
        let line = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        parse_line(line.to_string().as_bytes()).expect("a well-formed request")
    }

    fn fresh() -> String {
        "fresh0000001".into()
    }

    fn create(table: &mut Table, t: TransportId, params: Value) -> Result<Created, RpcError> {
        match table.admit(t, request("session.create", params), fresh, |stopping| {
            stopping
        })? {
            Admitted::Created(created) => Ok(created),
            Admitted::Session(_) => panic!("session.create admitted as a session method"),
        }
    }

    /// Admits and checks a session method; `ops` are the open operations `(key, op_id)`.
    fn call(
        table: &mut Table,
        t: TransportId,
        method: &str,
        params: Value,
        ops: &[(&str, &str)],
    ) -> Result<Call<OpId>, RpcError> {
        let admitted = table.admit(t, request(method, params), fresh, |s| s)?;
        let Admitted::Session(request) = admitted else {
            panic!("{method} admitted as session.create");
        };
        request
            .check(|key, op_id| {
                ops.iter()
                    .any(|(k, id)| *k == key && OpId::parse(id) == Some(op_id))
                    .then_some(op_id)
            })
            .map(|(_, call)| call)
    }

    fn code(result: Result<impl std::fmt::Debug, RpcError>) -> (i64, String) {
        let error = result.expect_err("a refusal");
        (error.code, error.message)
    }

    const OP: &str = "0123456789ab";

    #[test]
    fn create_fills_the_defaults_and_keeps_what_is_given() {
        let mut table = Table::new();
        let t = table.open_transport();
        let made = create(&mut table, t, json!({})).unwrap();
        assert_eq!(
            made.answer,
            json!({"session_id": "fresh0000001", "session_key": "fresh0000001", "source": "tui"})
        );
        let made = create(
            &mut table,
            t,
            json!({"session_id": "s1", "source": "desktop"}),
        )
        .unwrap();
        assert_eq!(
            made.answer,
            json!({"session_id": "s1", "session_key": "s1", "source": "desktop"})
        );
        // An empty id is fresh too; the key given is kept.
        let params = json!({"session_id": "", "session_key": "k2", "source": "cli"});
        let new = NewSession::parse(params.as_object().unwrap()).unwrap();
        let made = table.create(t, new, || "fresh2".into(), |s| s).unwrap();
        assert_eq!(
            made.answer,
            json!({"session_id": "fresh2", "session_key": "k2", "source": "cli"})
        );
        let s1 = table.get("s1").unwrap();
        assert_eq!(
            (&*s1.key, &s1.source, s1.owner),
            ("s1", &Surface::Desktop, t)
        );
        assert_eq!(table.route("k2").map(|s| &*s.id), Some("fresh2"));
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn create_refuses_bad_params_then_a_closed_transport_then_a_live_id_or_key() {
        let mut table = Table::new();
        let t = table.open_transport();
        create(
            &mut table,
            t,
            json!({"session_id": "s1", "session_key": "k1"}),
        )
        .unwrap();
        assert_eq!(
            code(create(&mut table, t, json!({"session_id": "s1"}))),
            (4000, "session already exists".into())
        );
        assert_eq!(
            code(create(
                &mut table,
                t,
                json!({"session_id": "s2", "session_key": "k1"})
            )),
            (4000, "session already exists".into())
        );
        // A session whose key is another's id is fine: ids and keys are apart.
        create(
            &mut table,
            t,
            json!({"session_id": "k9", "session_key": "x"}),
        )
        .unwrap();
        table.close_transport(t);
        // The closed transport is refused before the id is looked at…
        assert_eq!(
            code(create(&mut table, t, json!({"session_id": "s1"}))).0,
            4001
        );
        // …and after its parameters are.
        assert_eq!(
            code(create(&mut table, t, json!({"session_id": 7}))),
            (4000, "session_id must be a string".into())
        );
        assert_eq!(code(create(&mut table, t, json!({"source": []}))).0, 4000);
    }

    #[test]
    fn a_session_created_after_stop_is_born_stopped() {
        let mut table = Table::new();
        let t = table.open_transport();
        create(&mut table, t, json!({"session_id": "before"})).unwrap();
        assert!(!table.is_stopping());
        assert_eq!(table.stop(), vec![false]);
        create(&mut table, t, json!({"session_id": "after"})).unwrap();
        assert!(table.is_stopping());
        assert!(table.get("after").unwrap().attached);
        assert!(!table.get("before").unwrap().attached);
    }

    #[test]
    fn session_methods_check_session_id_then_the_owner() {
        let mut table = Table::new();
        let (mine, stranger) = (table.open_transport(), table.open_transport());
        create(&mut table, mine, json!({"session_id": "s1"})).unwrap();
        for method in [
            "session.interrupt",
            "session.close",
            "connectors.manage",
            "connectors.list",
            "connectors.operation.status",
            "connection.respond",
            "connection.returned",
        ] {
            let no_id = call(&mut table, mine, method, json!({"op_id": OP}), &[]);
            assert_eq!(
                code(no_id),
                (4000, "session_id required".into()),
                "{method}"
            );
            let empty = call(&mut table, mine, method, json!({"session_id": ""}), &[]);
            assert_eq!(code(empty).0, 4000, "{method}");
            // A stranger gets 4001 even for a valid op in that session, before any op check.
            let params = json!({"session_id": "s1", "op_id": OP, "result": {}});
            let strange = call(&mut table, stranger, method, params.clone(), &[("s1", OP)]);
            assert_eq!(
                code(strange),
                (
                    4001,
                    "session not found or not owned by this transport".into()
                ),
                "{method}"
            );
            let unknown = call(&mut table, mine, method, json!({"session_id": "nope"}), &[]);
            assert_eq!(code(unknown).0, 4001, "{method}");
            assert!(call(&mut table, mine, method, params, &[("s1", OP)]).is_ok());
        }
    }

    #[test]
    fn operation_methods_check_op_id_then_the_operation_then_the_answer() {
        let mut table = Table::new();
        let t = table.open_transport();
        create(
            &mut table,
            t,
            json!({"session_id": "s1", "session_key": "key1"}),
        )
        .unwrap();
        let open = [("key1", OP)];
        for method in [
            "connectors.operation.status",
            "connection.respond",
            "connection.returned",
        ] {
            let malformed = json!({"result": "not an object"});
            let mut params = malformed.clone();
            params["session_id"] = json!("s1");
            // op_id missing (even with a malformed answer): 4000 op_id required.
            assert_eq!(
                code(call(&mut table, t, method, params.clone(), &open)),
                (4000, "op_id required".into())
            );
            // Not an op id, or not open under this session's key: 4004, before the answer.
            for op in [json!("zz"), json!(5), json!("ba9876543210")] {
                params["op_id"] = op;
                assert_eq!(
                    code(call(&mut table, t, method, params.clone(), &open)).0,
                    4004,
                    "{method}"
                );
            }
            // The lookup is by the session's key, not its id.
            params["op_id"] = json!(OP);
            let by_id = call(&mut table, t, method, params.clone(), &[("s1", OP)]);
            assert_eq!(code(by_id).0, 4004);
        }
        let respond = |result: Value| json!({"session_id": "s1", "op_id": OP, "result": result});
        let bad = call(
            &mut table,
            t,
            "connection.respond",
            respond(json!([])),
            &open,
        );
        assert_eq!(code(bad).0, 4000);
        let bad = json!({"settled_by": "deadline"});
        assert_eq!(
            code(call(
                &mut table,
                t,
                "connection.respond",
                respond(bad),
                &open
            ))
            .0,
            4000
        );
        let good = json!({"targets": [{"name": "gmail", "status": "skipped"}]});
        match call(&mut table, t, "connection.respond", respond(good), &open) {
            Ok(Call::Respond(op, answer)) => {
                assert_eq!(Some(op), OpId::parse(OP));
                assert_eq!(answer.targets.len(), 1);
            }
            other => panic!("not a respond call: {other:?}"),
        }
        let returned = |target: Value| json!({"session_id": "s1", "op_id": OP, "target": target});
        let bad = call(
            &mut table,
            t,
            "connection.returned",
            returned(json!(7)),
            &open,
        );
        assert_eq!(code(bad), (4000, "target must be a string".into()));
        match call(
            &mut table,
            t,
            "connection.returned",
            returned(json!("gmail")),
            &open,
        ) {
            Ok(Call::Returned(op, Some(target))) => {
                assert_eq!(Some(op), OpId::parse(OP));
                assert_eq!(&*target, "gmail");
            }
            other => panic!("not a returned call naming gmail: {other:?}"),
        }
        assert!(matches!(
            call(
                &mut table,
                t,
                "connection.returned",
                returned(Value::Null),
                &open
            ),
            Ok(Call::Returned(_, None))
        ));
        let status = json!({"session_id": "s1", "op_id": OP});
        assert!(matches!(
            call(&mut table, t, "connectors.operation.status", status, &open),
            Ok(Call::Status(_))
        ));
    }

    #[test]
    fn manage_reads_its_optional_params() {
        let mut table = Table::new();
        let t = table.open_transport();
        create(&mut table, t, json!({"session_id": "s1"})).unwrap();
        match call(
            &mut table,
            t,
            "connectors.manage",
            json!({"session_id": "s1"}),
            &[],
        ) {
            Ok(Call::Manage(params)) => assert_eq!(
                params,
                ManageParams {
                    args: json!({}),
                    tool_call_id: None,
                    agent_session_id: None
                }
            ),
            other => panic!("not a manage call: {other:?}"),
        }
        let given = json!({"session_id": "s1", "args": {"action": "status"},
                           "tool_call_id": "call_1", "agent_session_id": "a1"});
        match call(&mut table, t, "connectors.manage", given, &[]) {
            Ok(Call::Manage(params)) => {
                assert_eq!(params.args, json!({"action": "status"}));
                assert_eq!(params.tool_call_id.as_deref(), Some("call_1"));
                assert_eq!(params.agent_session_id.as_deref(), Some("a1"));
            }
            other => panic!("not a manage call: {other:?}"),
        }
        let bad = json!({"session_id": "s1", "tool_call_id": 3});
        assert_eq!(
            code(call(&mut table, t, "connectors.manage", bad, &[])),
            (4000, "tool_call_id must be a string".into())
        );
        let methods = [
            ("session.interrupt", "Interrupt"),
            ("session.close", "Close"),
            ("connectors.list", "List"),
        ];
        for (method, name) in methods {
            let made = call(&mut table, t, method, json!({"session_id": "s1"}), &[]).unwrap();
            assert_eq!(format!("{made:?}"), name);
        }
    }

    #[test]
    fn closing_a_transport_hands_back_only_its_sessions() {
        let mut table = Table::new();
        let (a, b) = (table.open_transport(), table.open_transport());
        assert_ne!(a, b);
        create(&mut table, a, json!({"session_id": "a1"})).unwrap();
        create(&mut table, a, json!({"session_id": "a2"})).unwrap();
        create(&mut table, b, json!({"session_id": "b1"})).unwrap();
        let mut owned = table.close_transport(a);
        owned.sort();
        assert_eq!(owned, vec![Text::from("a1"), Text::from("a2")]);
        // Closing does not forget: the server interrupts each session first.
        assert_eq!(table.len(), 3);
        assert!(create(&mut table, b, json!({"session_id": "b2"})).is_ok());
    }

    #[test]
    fn forget_removes_only_a_session_its_owner_still_owns() {
        let mut table = Table::new();
        let (a, b) = (table.open_transport(), table.open_transport());
        create(
            &mut table,
            a,
            json!({"session_id": "s1", "session_key": "k"}),
        )
        .unwrap();
        assert!(table.forget("s1", b).is_none(), "not b's");
        assert!(table.route("k").is_some());
        let gone = table.forget("s1", a).unwrap();
        assert_eq!((&*gone.id, &*gone.key), ("s1", "k"));
        assert!(table.route("k").is_none() && table.is_empty());
        assert!(table.forget("s1", a).is_none(), "already gone");
        // Id and key are free again; a late close by the first owner leaves the new one.
        create(
            &mut table,
            b,
            json!({"session_id": "s1", "session_key": "k"}),
        )
        .unwrap();
        assert!(table.forget("s1", a).is_none());
        assert_eq!(table.route("k").map(|s| s.owner), Some(b));
    }
}
