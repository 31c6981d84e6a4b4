//! # connop-core
//!
//! The connection-operation contract as a pure state machine. An AI agent's tool call asks
//! the user to connect accounts; a hosted tool gateway mints links; the user finishes or
//! skips each on a card; a watcher reads each account; the operation **settles exactly
//! once** and the tool call returns a frozen result.
//!
//! This crate does no I/O: no clock, no thread, no socket, no file, no random source. A
//! [`Flow`] consumes [`Input`]s through [`Flow::handle_input`] (registry and gateway answers,
//! card answers, Continue, timers, interrupts, the operation handle's moves), each with `now`,
//! and produces [`Effect`]s (register, call the gateway, emit an event, close, return) that a
//! runtime executes. Time and randomness are parameters.
//!
//! ## The drive loop
//!
//! **After every input, drain [`Flow::poll_effect`] to `None`, then ask
//! [`Flow::poll_timeout`].** Execute each effect in the order it comes (executing one may feed
//! a new input: keep draining); then sleep until the wake-up it names or the next input,
//! whichever comes first. The order of an input's effects is part of the contract (the
//! registry entry closes before the settle frame, which goes before the result), a settle
//! withdraws the calls still queued, and the wake-up is right only once every effect so far
//! has been taken. Here the "runtime" is a virtual clock and a gateway that finds each account
//! active on its second read:
//!
//! ```
//! use connop_core::prelude::*;
//! use serde_json::json;
//!
//! fn gateway(call: &GatewayCall, reads: &mut u32) -> Result<GatewayReply, GatewayError> {
//!     Ok(match call {
//!         GatewayCall::Mint(mint) => GatewayReply::Minted(
//!             mint.connectors
//!                 .iter()
//!                 .map(|name| MintRow {
//!                     connector: name.clone(),
//!                     status: MintStatus::Initiated,
//!                     connect_url: Some(format!("https://connect.example/{name}").into()),
//!                     connection_id: Some(format!("ca_{name}").into()),
//!                     status_reason: None,
//!                 })
//!                 .collect(),
//!         ),
//!         GatewayCall::Account { connection_id, .. } => {
//!             *reads += 1;
//!             let status = if *reads > 2 { AccountStatus::Active } else { AccountStatus::Pending };
//!             GatewayReply::Account(Some(Account {
//!                 connection_id: connection_id.clone(),
//!                 connector: connection_id.trim_start_matches("ca_").into(),
//!                 status,
//!                 status_reason: None,
//!             }))
//!         }
//!         GatewayCall::List { .. } => GatewayReply::Connectors(Vec::new()),
//!     })
//! }
//!
//! let mut now = Timestamp::from_secs(1_800_000_000);
//! let config = FlowConfig::new(RegistryKey::new("/home/me/.connop", "session-1"));
//! let args = json!({"action": "connect", "connectors": ["gmail", "notion"]});
//! let mut flow = Flow::start(&args, config, [0x5e, 0xed, 0, 0, 0, 1], now);
//! let (mut reads, mut result, mut events) = (0, None, Vec::new());
//!
//! loop {
//!     // Drain after every input: executing an effect may feed the next input at once.
//!     while let Some(effect) = flow.poll_effect() {
//!         let input = match effect {
//!             Effect::Register { .. } => Input::Registered(Ok(())),
//!             Effect::Call { id, call } => {
//!                 let result = gateway(&call, &mut reads);
//!                 Input::Gateway { id, result }
//!             }
//!             Effect::Emit(event) => {
//!                 events.push(event.name());
//!                 continue;
//!             }
//!             Effect::Return(tool_result) => {
//!                 result = Some(tool_result);
//!                 continue;
//!             }
//!             _ => continue, // Close: this runtime keeps no registry
//!         };
//!         flow.handle_input(input, now).expect("replies match their calls");
//!     }
//!     if flow.is_done() {
//!         break;
//!     }
//!     let wake = flow.poll_timeout().expect("an open operation always has a deadline");
//!     now = wake.at; // a real runtime sleeps until then, or until the next input
//!     flow.handle_input(Input::Timeout, now).expect("a timer is always taken");
//! }
//!
//! let result = result.expect("every flow returns once").to_value();
//! assert_eq!(result["settled_by"], "all_resolved");
//! assert_eq!(result["targets"][0]["state"], "connected");
//! assert!(!result.to_string().contains("connect_url"));
//! assert_eq!(events.iter().filter(|e| **e == "connection.request").count(), 1);
//! ```
//!
//! ## Map
//! - [`contract`]: states, actors, kinds, the transition table as data, settle reasons.
//! - [`operation`]: targets, moves, change records, settle and the frozen snapshot.
//! - [`payload`]: the wire payloads with their exact key orders.
//! - [`flow`]: the managed flow: prepare, watcher, card answers, Continue, interrupt, deadline.
//! - [`tool`]: argument validation, the pinned texts, the status rendering.
//! - [`card`]: card answers. [`registry`]: one open operation per session.
//! - [`tool_gateway`]: the tool gateway's calls, replies and errors as data, and its traits.
//! - [`rpc`]: the JSON-RPC protocol (lines, session ownership and the checks in order, error
//!   objects).
//! - [`run`]: the run lifecycle of an agent turn over HTTP (first terminal status wins).
//! - [`wire`]: the tool-gateway HTTP API as a sans-IO exchange (requests out, responses in).
//!
//! ## Words
//!
//! Each word means one thing across the workspace.
//!
//! - **tool gateway**: the hosted service an operation works through: it lists connectors,
//!   mints connect links and reads accounts. Its calls, replies and errors as data are
//!   [`tool_gateway`]; its HTTP API is [`wire`]. A **route** is one of its three calls, list,
//!   mint or account ([`tool_gateway::GatewayRoute`]). A *simulated* tool gateway answers
//!   the same API with no account anywhere: the application's (the embedded default and
//!   `connop sim-gateway`) and the fixtures' scripted one. Both list
//!   [`tool_gateway::SIMULATED_CATALOG`] and answer account reads by a **read script**
//!   ([`tool_gateway::ReadScript`]).
//! - **JSON-RPC server**: what `connop gateway` serves an agent host, one JSON object a line
//!   on stdio and listeners ([`rpc`]): sessions, tool calls and their events. The host is
//!   its client; the tool gateway is upstream of it.
//! - **session**: on the JSON-RPC server, a conversation, owned by the transport that created
//!   it; its key is where its operation registers ([`registry`], at most one open operation
//!   a session). Over the HTTP API, a stored chat history that turns append to.
//! - **operation**: one request to connect accounts, from the tool call that opens it until
//!   it settles ([`Operation`]).
//! - **target**: one thing an operation asks for: a connector to connect or reconnect, or a
//!   local MCP server ([`Target`]). (A fuzz target is a *fuzz target*.)
//! - **row**: a target as the operation holds it now: state, link, detail, account id
//!   ([`operation::TargetRow`]). A **move** changes a row's state, by the one actor the
//!   transition table allows ([`contract`]). The **witness move**: a mint or a read that found
//!   the account moves a `pending` row `→ initiated` first, then where the answer says.
//! - **settle**: an operation's one ending, with a [`SettleReason`]: every unresolved row
//!   becomes `not_connected` and the result freezes. A row is **resolved** once `connected`
//!   or `skipped`.
//! - **flow**: one tool call as a sans-IO state machine ([`Flow`]): it owns the operation and
//!   decides every rule. It takes **inputs** ([`Input`], each with `now`) and gives
//!   **effects** ([`Effect`]: register, call the tool gateway, emit an event, close, return),
//!   which a runtime executes in order.
//! - **options**: what a host chooses once for every operation it runs, the tick, the
//!   deadline and the local catalog ([`OperationOptions`]), carried unchanged to each flow.
//! - **card**: what the user sees of an open operation and answers: a row per target, skip,
//!   Continue ([`card`]). On the card **path** the tool call waits for the settle; on the
//!   links path it returns the links at once ([`Path`]).
//! - **surface**: where the session's user is (the desktop app, a terminal UI, a command line,
//!   a chat platform); it chooses the card or the links ([`Surface`]).
//! - **run**: one agent turn over the HTTP API, with its event stream; its first terminal
//!   status wins ([`run`]).
//! - **step**: one round of a driver over an operation: the runtimes' operation handle feeds
//!   the answers, fires the timers due, runs the effects and says what comes **next**. A flow
//!   *moves* a row; an exchange with the tool gateway and a JSON-RPC request also say what
//!   comes next ([`wire::ExchangeNext`]); a read script holds *reads* (the simulated gateway's
//!   control body calls them steps).
//! - **method**, **request**, **response**, **answer**: a JSON-RPC request and its method are
//!   [`rpc::Request`] and [`rpc::Method`]; an exchange with the tool gateway sends an
//!   [`wire::HttpRequest`] with an [`wire::HttpMethod`] and gets back an [`wire::HttpAnswer`]
//!   (an [`wire::HttpResponse`] or a transport failure). What a gateway call answered, as a
//!   driver feeds it back to its operation, is a *call answer*.
//! - **started**, **scenario**: the store's `Started` says what starting a run did; the
//!   handle's `CallsStarted` says how the calls a driver started answered. A `Scenario` is a
//!   row of the tests' table (one ported seed test); a `RandomScenario` is a world the
//!   fixtures draw from a seed.

#![deny(missing_docs)]

pub mod card;
pub mod contract;
pub mod error;
pub mod flow;
pub mod operation;
pub mod payload;
pub mod registry;
pub mod rpc;
pub mod run;
pub mod time;
pub mod tool;
pub mod tool_gateway;
pub mod wire;

pub use card::{CardAnswer, CardReply};
pub use contract::{Actor, Kind, SettleReason, TargetAction, TargetState};
pub use error::CallerError;
pub use flow::{
    CallPurpose, Effect, Event, Flow, FlowConfig, Handled, Input, OperationOptions, Path, Surface,
    Wake, WakeReason,
};
pub use operation::{ChangeRecord, OpId, Operation, Patch, Target, Text, TransitionError};
pub use registry::{Registry, RegistryEntry, RegistryKey};
pub use time::Timestamp;
pub use tool::ToolResult;
pub use tool_gateway::{CallId, GatewayCall, GatewayError, GatewayReply};

/// Everything a runtime's drive loop needs.
pub mod prelude {
    pub use crate::card::{CardAnswer, CardReply};
    pub use crate::contract::{Actor, SettleReason, TargetState};
    pub use crate::error::CallerError;
    pub use crate::flow::{
        Effect, Event, Flow, FlowConfig, Handled, Input, OperationOptions, Path, Surface, Wake,
        WakeReason,
    };
    pub use crate::operation::{OpId, Patch, Text};
    pub use crate::registry::{Registry, RegistryEntry, RegistryKey};
    pub use crate::time::Timestamp;
    pub use crate::tool::ToolResult;
    pub use crate::tool_gateway::{
        Account, AccountStatus, AsyncToolGateway, BlockingToolGateway, CallId, ConnectorRow,
        GatewayCall, GatewayError, GatewayReply, MintRequest, MintRow, MintStatus,
    };
}
