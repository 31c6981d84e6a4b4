//! The managed flow of docs/contract.md#tool: one `manage_connections` tool call as a sans-IO state
//! machine.
//!
//! Every input is an [`Input`] fed with [`Flow::handle_input`] at `now` (the typed
//! `handle_*(…, now)` methods are the same inputs by name). Effects go out through
//! [`Flow::poll_effect`]; [`Flow::poll_timeout`] names the next wake-up and why. The flow owns
//! its [`Operation`] and decides every rule once: which call to make, whether an answer is
//! late, when to settle and what to return.
//!
//! **The drain rule: after every input, drain [`Flow::poll_effect`] to `None`, then ask
//! [`Flow::poll_timeout`].** An input may queue several effects whose order matters (close the
//! registry entry, then the settle frame, then the result), a settle withdraws the calls still
//! queued, and the wake-up is only right once the queue reflects every input so far. Executing
//! an effect may feed a new input (a registry or gateway answer); keep draining after it.
//!
//! ```text
//!  start ─▶ Registering ─▶ (Repairing) ─▶ Minting ─▶ (Misrouting) ─▶ Watching ─▶ Done
//!   │  (card path only)        reconnect                 catalog hit      │ settle
//!   └─▶ status: one list read ─────────────────────────────────────────────┘
//! ```

#[cfg(test)]
mod host_tests;
mod input;
mod prepare;
#[cfg(test)]
mod testing;
mod wake;
mod watch;
mod watching;

use crate::card::{AnswerKind, CardAnswer, CardReply};
use crate::contract::{Actor, Kind, SettleReason, TargetAction, TargetState};
use crate::error::CallerError;
use crate::operation::{ChangeRecord, OpId, Operation, Patch, Target, Text};
use crate::payload::{
    CardRequest, ModelResult, OperationResult, OperationView, ResultPath, UpdateFrame,
};
use crate::registry::RegistryKey;
use crate::time::Timestamp;
use crate::tool::{self, Dialect, ToolAction, ToolArgs, ToolResult};
use crate::tool_gateway::{CallId, GatewayCall, GatewayError, GatewayReply, GatewayRoute};
use serde_json::Value;
use std::collections::VecDeque;
use std::time::Duration;

pub use input::{Handled, Input};
pub use wake::{Wake, WakeReason};
pub use watch::{MAX_READ_TIMEOUT, MIN_READ_TIMEOUT};

/// The default watcher tick (docs/contract.md#watcher).
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);

/// The shortest watcher tick a host runs: a shorter one (0 included) would read each account
/// again as soon as the last read answered, keeping a core busy for as long as the operation
/// waits.
pub const MIN_TICK: Duration = Duration::from_millis(10);

/// What a host chooses once for every operation it runs (from its command line, or its own
/// settings) and carries unchanged to each flow: the watcher's tick, the deadline, and the
/// names its local MCP catalog serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationOptions {
    /// The watcher tick: each row's reads are this far apart unless a change or a return
    /// hint calls for one at once.
    pub tick: Duration,
    /// How long an operation stays open before it settles `deadline`.
    pub deadline: Duration,
    /// Names the local MCP catalog serves: a failed mint of one of these that the tool
    /// gateway does not list is a local MCP server, not an account (the misroute check).
    pub local_catalog: Vec<Text>,
}

impl Default for OperationOptions {
    /// A 1 s tick, a 300 s deadline, no local catalog.
    fn default() -> Self {
        OperationOptions {
            tick: DEFAULT_TICK,
            deadline: crate::operation::DEFAULT_DEADLINE,
            local_catalog: Vec::new(),
        }
    }
}

/// The surface the host's session runs on. It decides card or links
/// (docs/contract.md#card-or-links).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Surface {
    /// No surface named: a card if there is a callback.
    #[default]
    Unset,
    /// The desktop app: a card, and `returnTo`/`op` ride the mint.
    Desktop,
    /// A terminal UI (`connop connect`): a card.
    Tui,
    /// A plain command line: links.
    Cli,
    /// A messaging platform or anything else: links.
    Other(Text),
}

impl Surface {
    /// Parses a session's `source`.
    pub fn parse(source: &str) -> Self {
        match source.trim() {
            "" => Surface::Unset,
            "desktop" => Surface::Desktop,
            "tui" => Surface::Tui,
            "cli" => Surface::Cli,
            other => Surface::Other(other.into()),
        }
    }

    /// The surface of a host's platform name, as the original agent system names its
    /// platforms: trimmed and lower-cased, `desktop`, `tui` and `cli` are themselves, empty is
    /// unset, and any other name is a chat platform (`messaging`: links, no card).
    pub fn of_platform(platform: &str) -> Self {
        match Surface::parse(&platform.trim().to_lowercase()) {
            Surface::Other(_) => Surface::Other("messaging".into()),
            known => known,
        }
    }

    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Surface::Unset => "",
            Surface::Desktop => "desktop",
            Surface::Tui => "tui",
            Surface::Cli => "cli",
            Surface::Other(s) => s,
        }
    }

    /// Whether the surface can show a card.
    pub fn has_card(&self) -> bool {
        matches!(self, Surface::Unset | Surface::Desktop | Surface::Tui)
    }
}

/// How the outcome reaches the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// A card that blocks the tool call until settle.
    Card,
    /// Links in the result, returned at once.
    Links,
}

impl Path {
    /// Card when a card callback exists and the surface has a card; links otherwise.
    pub fn choose(surface: &Surface, has_card_callback: bool) -> Self {
        if has_card_callback && surface.has_card() {
            Path::Card
        } else {
            Path::Links
        }
    }
}

/// What the host tells the flow about the tool call.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Where the operation registers (card path).
    pub registry_key: RegistryKey,
    /// The session's surface.
    pub surface: Surface,
    /// Whether the host has a card callback.
    pub card_callback: bool,
    /// The host's tick, deadline and local catalog.
    pub options: OperationOptions,
    /// The agent's tool call id, echoed in the card request.
    pub tool_call_id: Option<Text>,
    /// Where the vendor sends the browser back after a decision (the mint's `returnTo`), on
    /// any surface; `None`: [`desktop_return_to`](Self::desktop_return_to) on the desktop
    /// surface, nothing elsewhere.
    pub return_to: Option<Text>,
    /// The desktop app's own name, the mint's `returnTo` on the desktop surface when no
    /// `return_to` is given: a hosted gateway knows its apps by name (docs/contract.md#prepare), so
    /// a host embedding connop names its own (default `connop-desktop`).
    pub desktop_return_to: Text,
    /// Whose words the tool speaks and which argument forms it takes.
    pub dialect: Dialect,
    /// Whether the host offers connectors in this session at all: when it says no, every
    /// call with valid arguments is refused before any gateway call.
    pub available: bool,
    /// The host runs the gateway calls one at a time on the operation's own thread (inline):
    /// the watcher then hands out one account read at a time, each when the one before it
    /// answered, with the time then left, and none once the deadline has come.
    pub serial_calls: bool,
}

impl FlowConfig {
    /// Defaults: surface unset with a card callback (the card path), 1 s tick, 300 s deadline,
    /// empty catalog, no tool call id.
    pub fn new(registry_key: RegistryKey) -> Self {
        FlowConfig {
            registry_key,
            surface: Surface::Unset,
            card_callback: true,
            options: OperationOptions::default(),
            tool_call_id: None,
            return_to: None,
            desktop_return_to: crate::tool_gateway::DESKTOP_RETURN_TO.into(),
            dialect: Dialect::Connop,
            available: true,
            serial_calls: false,
        }
    }
}

/// Something the host must do, in order.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Register the operation under `key`, then answer with [`Input::Registered`].
    /// Nothing else happens until then.
    Register {
        /// Where.
        key: RegistryKey,
        /// Which operation.
        op_id: OpId,
    },
    /// Start a gateway call; answer with [`Input::Gateway`].
    Call {
        /// Correlates the answer.
        id: CallId,
        /// What to ask.
        call: GatewayCall,
    },
    /// Send an event to the owner of the session.
    Emit(Event),
    /// Remove the registry entry under `key` if it is still `op_id`.
    Close {
        /// Where.
        key: RegistryKey,
        /// Which operation.
        op_id: OpId,
    },
    /// The tool call's result. Exactly one per flow.
    Return(Box<ToolResult>),
}

/// An event for the session's owner. Payloads are boxed so a queued effect stays small.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// `connection.request`: show the card (the card callback's payload).
    Request(Box<CardRequest>),
    /// `connection.update`: a change or the settle.
    Update(Box<UpdateFrame>),
}

impl Event {
    /// The event's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Request(_) => "connection.request",
            Event::Update(_) => "connection.update",
        }
    }
}

/// Where the flow is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    /// The status action: one list read.
    Status,
    /// Card path: waiting for the registry.
    Registering,
    /// Reconnect repair: the list read.
    Repairing,
    /// The one mint.
    Minting,
    /// The misroute check's list read, for these rows.
    Misrouting(Vec<usize>),
    /// The watcher runs.
    Watching,
    /// An operation the host opened itself ([`Flow::open`]): registered, moved only by its
    /// host's inputs; no gateway call, no watcher.
    Held,
    /// Returned; nothing more happens.
    Done,
}

/// Why the flow asked for a gateway call ([`Flow::call_purpose`]). A host that answers some
/// reads from its own knowledge (an embedding that knows which connectors its hosted gateway
/// offers) tells them apart by it; the call itself is the same request.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallPurpose {
    /// The status action's list read.
    StatusList,
    /// Reconnect's repair read (docs/contract.md#prepare).
    RepairList,
    /// The one mint.
    Mint,
    /// The misroute check's list read: which names the hosted gateway offers
    /// (docs/contract.md#prepare).
    MisrouteList,
    /// The watcher's list fallback (docs/contract.md#watcher).
    WatchList,
    /// An account read.
    AccountRead,
}

/// What a pending gateway call was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    StatusList,
    RepairList,
    Mint,
    MisrouteList,
    WatchList,
    Read(usize),
}

impl Purpose {
    fn public(self) -> CallPurpose {
        match self {
            Purpose::StatusList => CallPurpose::StatusList,
            Purpose::RepairList => CallPurpose::RepairList,
            Purpose::Mint => CallPurpose::Mint,
            Purpose::MisrouteList => CallPurpose::MisrouteList,
            Purpose::WatchList => CallPurpose::WatchList,
            Purpose::Read(_) => CallPurpose::AccountRead,
        }
    }

    /// The route of the call made for this purpose.
    fn route(self) -> GatewayRoute {
        match self {
            Purpose::StatusList
            | Purpose::RepairList
            | Purpose::MisrouteList
            | Purpose::WatchList => GatewayRoute::List,
            Purpose::Mint => GatewayRoute::Mint,
            Purpose::Read(_) => GatewayRoute::Account,
        }
    }

    /// Whether `reply` is of the kind this call asked for.
    fn accepts(self, reply: &GatewayReply) -> bool {
        reply.route() == self.route()
    }
}

/// One tool call of `manage_connections`.
#[derive(Debug)]
pub struct Flow {
    args: Option<ToolArgs>,
    path: Path,
    registry_key: RegistryKey,
    surface: Surface,
    tick: Duration,
    local_catalog: Vec<Text>,
    tool_call_id: Option<Text>,
    return_to: Option<Text>,
    desktop_return_to: Text,
    dialect: Dialect,
    serial_calls: bool,
    /// Opened by the host ([`Flow::open`]): after registering it holds.
    held: bool,
    /// Made by the host before any registry ([`Flow::detached`]): only the host settles it.
    host_settles: bool,
    /// The registry's last answer to a registration the host asked for ([`Flow::detached`]).
    registration: Option<Result<(), OpId>>,
    /// A pass of the watcher the host asked for ([`Input::Observe`]): the next row to read.
    observing: Option<usize>,
    stage: Stage,
    op: Option<Operation>,
    registered: bool,
    returned: bool,
    next_call: u64,
    pending: Vec<(CallId, Purpose)>,
    effects: VecDeque<Effect>,
    watch: watch::Watcher,
}

impl Flow {
    /// Starts a tool call. `entropy` is 6 random bytes for the op id (the runtime draws them).
    ///
    /// Refused arguments return at once; `status` asks for one list read; connect and
    /// reconnect create the operation and, on the card path, ask to register it before any
    /// gateway call.
    #[must_use = "a flow does nothing until its effects are drained"]
    pub fn start(args: &Value, config: FlowConfig, entropy: [u8; 6], now: Timestamp) -> Flow {
        let path = Path::choose(&config.surface, config.card_callback);
        let deadline = config.options.deadline;
        let available = config.available;
        let mut flow = Flow::blank(config, path);
        let args = match tool::parse_args_in(args, flow.dialect) {
            Ok(args) => args,
            Err(err) => {
                flow.finish(ToolResult::Error(err.to_string()));
                return flow;
            }
        };
        if !available {
            flow.finish(ToolResult::Error(tool::UNAVAILABLE_TEXT.into()));
            return flow;
        }
        match args.action {
            ToolAction::Status => {
                flow.args = Some(args);
                flow.stage = Stage::Status;
                flow.call(Purpose::StatusList, GatewayCall::List { timeout: None });
            }
            ToolAction::Connect | ToolAction::Reconnect => {
                let action = match args.action {
                    ToolAction::Reconnect => TargetAction::Reconnect,
                    _ => TargetAction::Connect,
                };
                let targets = args
                    .connectors
                    .iter()
                    .map(|name| Target {
                        name: name.clone(),
                        kind: Kind::Connector,
                        action,
                        instructions: None,
                    })
                    .collect();
                let op_id = flow.create_operation(targets, deadline, entropy, now);
                flow.args = Some(args);
                if path == Path::Card {
                    flow.stage = Stage::Registering;
                    flow.push(Effect::Register {
                        key: flow.registry_key.clone(),
                        op_id,
                    });
                } else {
                    flow.begin_prepare(now);
                }
            }
        }
        flow
    }

    /// A flow with nothing started yet.
    fn blank(config: FlowConfig, path: Path) -> Flow {
        Flow {
            args: None,
            path,
            registry_key: config.registry_key,
            surface: config.surface,
            tick: config.options.tick,
            local_catalog: config.options.local_catalog,
            tool_call_id: config.tool_call_id,
            return_to: config.return_to,
            desktop_return_to: config.desktop_return_to,
            dialect: config.dialect,
            serial_calls: config.serial_calls,
            held: false,
            host_settles: false,
            registration: None,
            observing: None,
            stage: Stage::Done,
            op: None,
            registered: false,
            returned: false,
            next_call: 0,
            pending: Vec::new(),
            effects: VecDeque::new(),
            watch: watch::Watcher::default(),
        }
    }

    /// Creates the flow's operation (every target `pending`), with a watcher sized to its
    /// rows; returns its id.
    fn create_operation(
        &mut self,
        targets: Vec<Target>,
        deadline: Duration,
        entropy: [u8; 6],
        now: Timestamp,
    ) -> OpId {
        let op = Operation::new(OpId::from_entropy(entropy), targets, now, deadline);
        self.watch = watch::Watcher::new(op.rows().len());
        let op_id = op.op_id();
        self.op = Some(op);
        op_id
    }

    /// Opens an operation the host drives itself (the seeds open one directly,
    /// docs/contract.md#host-seams): it registers like a card-path operation — refused with the
    /// tool's error when the session already has one — and then holds. No mint, no card, no
    /// watcher: only the host's inputs (transition, refresh, card answers, settle, interrupt) move
    /// it, and its deadline when the host feeds timeouts. It settles `all_resolved` once every
    /// target resolved, like a watched operation.
    #[must_use = "a flow does nothing until its effects are drained"]
    pub fn open(
        targets: Vec<Target>,
        config: FlowConfig,
        entropy: [u8; 6],
        now: Timestamp,
    ) -> Flow {
        let deadline = config.options.deadline;
        let mut flow = Flow::blank(config, Path::Card);
        flow.held = true;
        let op_id = flow.create_operation(targets, deadline, entropy, now);
        flow.stage = Stage::Registering;
        flow.push(Effect::Register {
            key: flow.registry_key.clone(),
            op_id,
        });
        flow
    }

    /// Makes an operation that exists before any registry does (the original system's
    /// operation object): the host moves it, refreshes it, settles it and reads it; its
    /// changes go out as update frames. It registers only when the host asks
    /// ([`Input::Register`]), and nothing settles it but the host: not every target resolving
    /// (the host asks [`Input::SettleIfAllResolved`]), not its deadline (recorded, fired only
    /// if the host feeds timeouts). No gateway call, no card, no watcher.
    #[must_use = "a flow does nothing until its effects are drained"]
    pub fn detached(
        targets: Vec<Target>,
        config: FlowConfig,
        entropy: [u8; 6],
        now: Timestamp,
    ) -> Flow {
        let deadline = config.options.deadline;
        let mut flow = Flow::blank(config, Path::Card);
        flow.held = true;
        flow.host_settles = true;
        flow.create_operation(targets, deadline, entropy, now);
        flow.stage = Stage::Held;
        flow
    }

    // ----- outputs ------------------------------------------------------------------------

    /// The next effect to execute, in order; `None` when the queue is empty. Drain it to
    /// `None` after every input.
    #[must_use = "an effect not executed is lost: the flow does not queue it again"]
    #[inline]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        let effect = self.effects.pop_front();
        if effect.is_none() && self.effects.capacity() > 4 {
            // A burst (the mint's frames, the card, a tick's reads) is over: a parked
            // operation keeps no more queue than a quiet tick needs.
            self.effects.shrink_to(4);
        }
        effect
    }

    /// Whether an effect waits in the queue: a host that drains after every input may look
    /// here first (most of a parked tick's inputs cause none).
    #[must_use]
    #[inline]
    pub fn has_effects(&self) -> bool {
        !self.effects.is_empty()
    }

    /// When the flow next needs [`Input::Timeout`], and why. Ask after draining the effects.
    #[must_use = "a flow not woken at this instant misses its tick or its deadline"]
    pub fn poll_timeout(&self) -> Option<Wake> {
        let op = self.op.as_ref()?;
        if self.stage == Stage::Done || self.stage == Stage::Status || op.is_settled() {
            return None;
        }
        let deadline = Wake {
            at: op.deadline_at(),
            reason: WakeReason::Deadline,
        };
        // With calls one at a time, the next read waits for the one out.
        let serial_busy = self.serial_calls && !self.pending.is_empty();
        let tick = if self.stage == Stage::Watching && !serial_busy {
            self.watch.next_wake(op)
        } else {
            None
        };
        match tick {
            Some(tick) if tick.at < deadline.at => Some(tick),
            _ => Some(deadline),
        }
    }

    /// Whether the flow has returned its result and will do nothing more.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done && self.effects.is_empty()
    }

    /// Whether the flow has returned: its result is queued (or taken) and no input moves it
    /// any more. Unlike [`Flow::is_done`], its last effects may still wait in the queue: a
    /// host that runs them on another thread can tell that the operation ended before they ran.
    #[must_use]
    pub fn has_returned(&self) -> bool {
        self.stage == Stage::Done
    }

    // ----- inputs -------------------------------------------------------------------------
    //
    // Each is one `Input` by name (`handle_input` dispatches here), so a runtime that holds the
    // pieces need not build the value.

    /// Feeds one input at `now`. Afterwards drain [`poll_effect`](Self::poll_effect) to `None`
    /// before asking [`poll_timeout`](Self::poll_timeout).
    ///
    /// `Err` is the caller's mistake and, but for one case, changed nothing: a gateway reply
    /// of another kind than its call asked for is still taken, as an invalid response, so the
    /// flow never waits on it forever, and reported as [`CallerError::ReplyMismatch`].
    ///
    /// The typed `handle_*` methods are the same inputs by name; this is where they meet.
    pub fn handle_input(&mut self, input: Input, now: Timestamp) -> Result<Handled, CallerError> {
        match input {
            Input::Registered(result) => {
                self.handle_registered(result, now);
                Ok(Handled::Taken)
            }
            Input::Gateway { id, result } => self
                .handle_gateway(id, result, now)
                .map(|()| Handled::Taken),
            Input::Timeout => {
                self.handle_timeout(now);
                Ok(Handled::Taken)
            }
            Input::CardAnswer(answer) => self.handle_card_answer(&answer, now).map(Handled::Card),
            Input::Continue => self.handle_continue(now).map(Handled::Card),
            Input::Interrupt => Ok(Handled::Settled(self.handle_interrupt(now))),
            Input::Settle(reason) => Ok(Handled::Settled(self.handle_settle(reason, now))),
            Input::Transition {
                name,
                to,
                actor,
                patch,
            } => self
                .handle_transition(&name, to, actor, patch, now)
                .map(Handled::Moved),
            Input::Refresh {
                name,
                connect_url,
                detail,
                actor,
            } => self
                .handle_refresh(&name, connect_url, detail, actor, now)
                .map(Handled::Refreshed),
            Input::ReturnHint { target } => self
                .handle_return_hint(target.as_deref(), now)
                .map(|read| Handled::Hinted { read }),
            Input::Register { profile } => self.handle_register(profile).map(|()| Handled::Taken),
            Input::Observe => self.handle_observe(now).map(|()| Handled::Taken),
            Input::SettleIfAllResolved => {
                Ok(Handled::Settled(self.handle_settle_if_all_resolved(now)))
            }
        }
    }

    /// [`Input::Registered`]: the registry's answer to [`Effect::Register`]; `Err` carries the
    /// id of the operation already open under the key.
    pub fn handle_registered(&mut self, result: Result<(), OpId>, now: Timestamp) {
        if self.held && self.host_settles {
            // A detached operation's registration: the answer is the host's to read; refused,
            // the operation goes on unregistered.
            self.registration = Some(result);
            if self.stage == Stage::Registering {
                self.stage = Stage::Held;
            }
            self.registered |= result.is_ok();
            if result.is_ok() && self.op().is_settled() {
                // Settled while the registry answered: undo the entry.
                self.push(Effect::Close {
                    key: self.registry_key.clone(),
                    op_id: self.op().op_id(),
                });
            }
            return;
        }
        if self.stage != Stage::Registering {
            // Settled (interrupt, deadline) before the registry answered: undo the entry.
            if result.is_ok() {
                if let Some(op) = &self.op {
                    self.push(Effect::Close {
                        key: self.registry_key.clone(),
                        op_id: op.op_id(),
                    });
                }
            }
            return;
        }
        match result {
            Ok(()) if self.held => {
                self.registered = true;
                self.stage = Stage::Held;
            }
            Ok(()) => {
                self.registered = true;
                self.begin_prepare(now);
            }
            Err(open) => self.finish(ToolResult::Error(tool::already_open_text(open))),
        }
    }

    /// [`Input::Gateway`]: a gateway call's answer. An answer for a call the flow no longer
    /// waits for (settled, or otherwise forgotten) is dropped: it is late, not an error.
    pub fn handle_gateway(
        &mut self,
        id: CallId,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) -> Result<(), CallerError> {
        let Some(pos) = self.pending.iter().position(|(c, _)| *c == id) else {
            return Ok(());
        };
        let (_, purpose) = self.pending.swap_remove(pos);
        match &result {
            // A reply of the wrong kind becomes an invalid response (so the flow never hangs
            // on it) and a caller error (so the runtime learns of its bug).
            Ok(reply) if !purpose.accepts(reply) => {
                let err = CallerError::ReplyMismatch {
                    call: id,
                    expected: purpose.route().name(),
                    got: reply.route().name(),
                };
                self.answered(purpose, Err(GatewayError::invalid(err.to_string())), now);
                Err(err)
            }
            // The answer moves on as it came, not through a checked copy: a parked tick feeds
            // one per row.
            _ => {
                self.answered(purpose, result, now);
                Ok(())
            }
        }
    }

    /// An awaited answer, of the kind its call asked for (or an error), to its purpose.
    fn answered(
        &mut self,
        purpose: Purpose,
        result: Result<GatewayReply, GatewayError>,
        now: Timestamp,
    ) {
        match purpose {
            Purpose::StatusList => self.on_status_list(result),
            Purpose::RepairList => self.on_repair_list(result, now),
            Purpose::Mint => self.on_mint(result, now),
            Purpose::MisrouteList => self.on_misroute_list(result, now),
            Purpose::WatchList => self.on_watch_list(result, now),
            Purpose::Read(index) => {
                self.on_read(index, result, now);
                if self.observing.is_some() {
                    self.observe_next(now);
                }
            }
        }
    }

    /// [`Input::Timeout`]: a timer fired (or the host woke early; nothing happens before its
    /// time).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let Some(op) = &self.op else { return };
        if self.stage == Stage::Done || op.is_settled() {
            return;
        }
        if now >= op.deadline_at() {
            self.settle(SettleReason::Deadline, now);
            return;
        }
        if self.stage == Stage::Watching {
            self.maybe_tick(now);
        }
    }

    /// [`Input::CardAnswer`]: the card's answer (docs/contract.md#card-answers). Any status but
    /// `skipped`/`approved` refuses the whole answer and moves nothing.
    pub fn handle_card_answer(
        &mut self,
        answer: &CardAnswer,
        now: Timestamp,
    ) -> Result<CardReply, CallerError> {
        let kinds = answer.kinds()?;
        let op = self.op.as_ref().ok_or(CallerError::NoOperation)?;
        if op.is_settled() || self.stage == Stage::Done {
            return Ok(CardReply {
                settled: op.is_settled(),
            });
        }
        for (target, kind) in answer.targets.iter().zip(kinds) {
            if kind != AnswerKind::Skip {
                continue;
            }
            let Some(index) = self.op().index_of(&target.name) else {
                continue;
            };
            if !self.op().rows()[index].state.is_resolved() {
                self.move_row(
                    index,
                    TargetState::Skipped,
                    Actor::User,
                    Patch::default(),
                    now,
                );
            }
        }
        if answer.settle_continue && !self.op().all_resolved() {
            self.settle(SettleReason::Continue, now);
        }
        if self.op().all_resolved() {
            self.settle(SettleReason::AllResolved, now);
        }
        Ok(CardReply {
            settled: self.op().is_settled(),
        })
    }

    /// A card answer from a host's own API: as [`handle_card_answer`](Self::handle_card_answer),
    /// but a name the operation has no target for is refused
    /// ([`CallerError::UnknownAnswerTarget`]) before anything moves. The card's protocol
    /// ignores such a name; a host calling an API means a target, and a typo must not pass.
    pub fn handle_card_answer_naming_targets(
        &mut self,
        answer: &CardAnswer,
        now: Timestamp,
    ) -> Result<CardReply, CallerError> {
        answer.kinds()?;
        let op = self.op.as_ref().ok_or(CallerError::NoOperation)?;
        if let Some(unknown) = answer
            .targets
            .iter()
            .find(|t| op.index_of(&t.name).is_none())
        {
            return Err(CallerError::UnknownAnswerTarget {
                name: unknown.name.to_string(),
                targets: op.rows().iter().map(|row| row.name.to_string()).collect(),
            });
        }
        self.handle_card_answer(answer, now)
    }

    /// [`Input::Continue`]: settles `continue` unless everything resolved.
    pub fn handle_continue(&mut self, now: Timestamp) -> Result<CardReply, CallerError> {
        self.handle_card_answer(&CardAnswer::continue_(), now)
    }

    /// [`Input::Interrupt`]: settles `interrupt` at once. Returns whether this settled.
    pub fn handle_interrupt(&mut self, now: Timestamp) -> bool {
        self.settle(SettleReason::Interrupt, now)
    }

    /// [`Input::Settle`]: a compare-and-set; returns whether this call won.
    pub fn handle_settle(&mut self, reason: SettleReason, now: Timestamp) -> bool {
        self.settle(reason, now)
    }

    /// [`Input::Transition`]: a move from outside the flow (the seeds' seam).
    pub fn handle_transition(
        &mut self,
        name: &str,
        to: TargetState,
        actor: Actor,
        patch: Patch,
        now: Timestamp,
    ) -> Result<Option<ChangeRecord>, CallerError> {
        let op = self.op.as_mut().ok_or(CallerError::NoOperation)?;
        let change = op.transition(name, to, actor, patch)?;
        if let Some(change) = &change {
            self.on_change(change.clone(), now);
        }
        Ok(change)
    }

    /// [`Input::Refresh`]: new link and detail, no state change.
    pub fn handle_refresh(
        &mut self,
        name: &str,
        connect_url: Option<Text>,
        detail: Option<Text>,
        actor: Actor,
        now: Timestamp,
    ) -> Result<ChangeRecord, CallerError> {
        let op = self.op.as_mut().ok_or(CallerError::NoOperation)?;
        let change = op.refresh(name, connect_url, detail, actor)?;
        self.on_change(change.clone(), now);
        Ok(change)
    }

    /// [`Input::Register`]: registers a detached operation ([`Flow::detached`]) under its
    /// key; the registry's answer is then [`registration`](Self::registration). Refused for
    /// a flow the tool started (it registers itself) and once settled.
    ///
    /// `profile` registers it under that profile instead of the one it was made with (a host
    /// serving several profiles knows which is active only when it registers).
    pub fn handle_register(&mut self, profile: Option<Text>) -> Result<(), CallerError> {
        let op = self.op.as_ref().ok_or(CallerError::NoOperation)?;
        if !self.host_settles || op.is_settled() || self.stage != Stage::Held {
            return Err(CallerError::NotDetached);
        }
        if let Some(profile) = profile {
            self.registry_key.profile = profile;
        }
        self.registration = None;
        self.stage = Stage::Registering;
        let op_id = op.op_id();
        self.push(Effect::Register {
            key: self.registry_key.clone(),
            op_id,
        });
        Ok(())
    }

    /// [`Input::Observe`]: one pass of the watcher over a detached operation, on its host's
    /// request (the host runs the reads, one at a time): each live row with an account id is
    /// read once, in order, as the watcher reads it — the same moves, the same late answers
    /// dropped, and a 429 ends the pass and holds every row back. Nothing is read during a
    /// back-off, once settled, or once the deadline has come. A pass under way goes on.
    pub fn handle_observe(&mut self, now: Timestamp) -> Result<(), CallerError> {
        let op = self.op.as_ref().ok_or(CallerError::NoOperation)?;
        if !self.host_settles {
            return Err(CallerError::NotDetached);
        }
        if op.is_settled() || self.observing.is_some() {
            return Ok(());
        }
        self.observing = Some(0);
        self.observe_next(now);
        Ok(())
    }

    /// Starts the pass's next read, or ends the pass.
    fn observe_next(&mut self, now: Timestamp) {
        let Some(mut next) = self.observing.take() else {
            return;
        };
        let op = self.op();
        let held_back = self.watch.backoff_until().is_some_and(|until| until > now);
        if op.is_settled() || now >= op.deadline_at() || held_back || self.stage != Stage::Held {
            return;
        }
        while let Some(row) = op.rows().get(next) {
            let index = next;
            next += 1;
            let Some(id) = row.connection_id.clone().filter(|_| row.state.is_live()) else {
                continue;
            };
            let call = GatewayCall::Account {
                connection_id: id,
                timeout: watch::read_timeout(op.deadline_at(), now),
            };
            self.observing = Some(next);
            self.call(Purpose::Read(index), call);
            return;
        }
    }

    /// [`Input::SettleIfAllResolved`]: settles `all_resolved` if every target resolved;
    /// returns whether this call settled.
    pub fn handle_settle_if_all_resolved(&mut self, now: Timestamp) -> bool {
        match &self.op {
            Some(op) if op.all_resolved() => self.settle(SettleReason::AllResolved, now),
            _ => false,
        }
    }

    /// Replaces what a local MCP server's row needs from the environment (no move, no
    /// frame: the host writes it before the card shows).
    pub fn set_required_env(&mut self, name: &str, env: Option<Value>) -> Result<(), CallerError> {
        let op = self.op.as_mut().ok_or(CallerError::NoOperation)?;
        op.set_required_env(name, env)?;
        Ok(())
    }

    // ----- reads --------------------------------------------------------------------------

    /// The registry's answer to the last [`Input::Register`]: `Err` names the operation
    /// already open under the key. `None` before any answer.
    #[must_use]
    pub fn registration(&self) -> Option<Result<(), OpId>> {
        self.registration
    }

    /// The card request (`connection.request`'s payload) as it would be now: the live rows
    /// with their links and instructions, the deadline, the tool call id. The card path emits
    /// it once; a host reads it any time (to show the card again on resume).
    #[must_use]
    pub fn card_request(&self) -> Option<CardRequest> {
        self.op.as_ref().map(|op| self.card_request_of(op))
    }

    fn card_request_of(&self, op: &Operation) -> CardRequest {
        CardRequest {
            op_id: op.op_id(),
            seq: op.seq(),
            deadline_at: op.deadline_at(),
            timeout_seconds: op.deadline().as_secs_f64(),
            targets: op.rows().to_vec(),
            tool_call_id: self.tool_call_id.clone(),
        }
    }

    /// The operation's result as a host reads it at any time: the operation view's fields,
    /// the live rows while open, the frozen snapshot once settled, links and account ids
    /// included; a settled result drops the card's instructions.
    #[must_use]
    pub fn host_result(&self) -> Option<OperationResult> {
        self.view().map(OperationResult)
    }

    /// When the watcher reads row `name` next at the earliest, if a 429 holds it back.
    #[must_use]
    pub fn next_read_at(&self, name: &str) -> Option<Timestamp> {
        let op = self.op.as_ref()?;
        op.row(name)?;
        self.watch.backoff_until()
    }

    /// The operation, for connect and reconnect.
    #[must_use]
    pub fn operation(&self) -> Option<&Operation> {
        self.op.as_ref()
    }

    /// The operation view (docs/contract.md#operation-view): live rows while open, the frozen
    /// snapshot once settled.
    #[must_use]
    pub fn view(&self) -> Option<OperationView> {
        self.op.as_ref().map(OperationView::of)
    }

    /// The watcher tick: each row's reads are this far apart unless a change or a return
    /// hint calls for one at once.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// Card or links.
    pub fn path(&self) -> Path {
        self.path
    }

    /// The validated arguments, if they were valid.
    pub fn args(&self) -> Option<&ToolArgs> {
        self.args.as_ref()
    }

    /// Where the operation registers.
    pub fn registry_key(&self) -> &RegistryKey {
        &self.registry_key
    }

    /// How many gateway calls are in flight.
    #[must_use]
    pub fn calls_in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Whether the flow still waits for the answer to `id` (an answer it does not wait for
    /// is late and will be dropped).
    #[must_use]
    pub fn awaits(&self, id: CallId) -> bool {
        self.pending.iter().any(|(c, _)| *c == id)
    }

    /// Why the flow asked for call `id`, while it waits for the answer.
    #[must_use]
    pub fn call_purpose(&self, id: CallId) -> Option<CallPurpose> {
        self.pending
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, purpose)| purpose.public())
    }

    // ----- internals ----------------------------------------------------------------------

    fn op(&self) -> &Operation {
        self.op
            .as_ref()
            .expect("invariant: only connect/reconnect flows get here; Flow::start gave them an op")
    }

    fn push(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    fn call(&mut self, purpose: Purpose, call: GatewayCall) -> CallId {
        let id = CallId(self.next_call);
        self.next_call += 1;
        self.pending.push((id, purpose));
        self.push(Effect::Call { id, call });
        id
    }

    /// Moves row `index`, and reports the change. A move the table refuses (the row moved on
    /// while an answer was in flight) is dropped: the answer is late.
    fn move_row(
        &mut self,
        index: usize,
        to: TargetState,
        actor: Actor,
        patch: Patch,
        now: Timestamp,
    ) -> bool {
        let Some(op) = self.op.as_mut() else {
            return false;
        };
        match op.transition_at(index, to, actor, patch) {
            Ok(Some(change)) => {
                self.on_change(change, now);
                true
            }
            Ok(None) | Err(_) => false,
        }
    }

    /// A move the backend witnessed: a mint or a read found the account. On a `pending` row
    /// that is the witness that the attempt started, so the row first moves `→ initiated` (as
    /// `backend_watcher`, with `witness`: what the mint handed out), then moves to `to` (as
    /// `actor`, with `patch`) unless that first move settled the operation. A row past
    /// `pending` moves to `to` alone.
    fn witnessed_move(
        &mut self,
        index: usize,
        witness: Patch,
        to: TargetState,
        actor: Actor,
        patch: Patch,
        now: Timestamp,
    ) {
        if self.op().rows()[index].state == TargetState::Pending {
            self.move_row(
                index,
                TargetState::Initiated,
                Actor::BackendWatcher,
                witness,
                now,
            );
            if self.op().is_settled() {
                return;
            }
        }
        self.move_row(index, to, actor, patch, now);
    }

    /// An effective change: a frame on the card path, and a wake for the watcher.
    fn on_change(&mut self, change: ChangeRecord, now: Timestamp) {
        if self.stage == Stage::Done {
            return;
        }
        if self.path == Path::Card {
            let view = OperationView::of(self.op());
            self.push(Effect::Emit(Event::Update(Box::new(UpdateFrame {
                view,
                change: Some(change),
            }))));
        }
        if self.stage == Stage::Watching {
            self.watch.wake(now);
        }
        if matches!(self.stage, Stage::Watching | Stage::Held)
            && !self.host_settles
            && self.op().all_resolved()
        {
            self.settle(SettleReason::AllResolved, now);
        }
    }

    /// Settles once: drops every call not yet started or in flight, then (card path) closes
    /// the registry entry, writes the settle frame and returns the frozen result, in that
    /// order. Returns whether this call won.
    fn settle(&mut self, reason: SettleReason, now: Timestamp) -> bool {
        let Some(op) = self.op.as_mut() else {
            return false;
        };
        if self.stage == Stage::Done || !op.settle(reason, now) {
            return false;
        }
        // Calls not yet taken never start.
        self.effects.retain(|e| !matches!(e, Effect::Call { .. }));
        self.pending.clear();
        self.watch.clear();
        match self.path {
            Path::Card => {
                if self.registered {
                    self.push(Effect::Close {
                        key: self.registry_key.clone(),
                        op_id: self.op().op_id(),
                    });
                }
                self.push(Effect::Emit(Event::Update(Box::new(UpdateFrame {
                    view: OperationView::of(self.op()),
                    change: None,
                }))));
                let result = ModelResult::of(self.op(), ResultPath::Card)
                    .with_account_ids(self.dialect == Dialect::Original);
                self.finish(ToolResult::Model(result));
            }
            Path::Links => {
                let result = ModelResult::of(self.op(), ResultPath::Links)
                    .with_account_ids(self.dialect == Dialect::Original);
                self.finish(ToolResult::Model(result));
            }
        }
        true
    }

    /// Returns the tool result (once) and stops.
    fn finish(&mut self, result: ToolResult) {
        if !self.returned {
            self.returned = true;
            self.push(Effect::Return(Box::new(result)));
        }
        self.stage = Stage::Done;
    }

    fn on_status_list(&mut self, result: Result<GatewayReply, GatewayError>) {
        let rendered = match result {
            Ok(GatewayReply::Connectors(rows)) => {
                let names = self
                    .args
                    .as_ref()
                    .map(|a| a.connectors.as_slice())
                    .unwrap_or(&[]);
                ToolResult::Status(tool::StatusResult::render_in(&rows, names, self.dialect))
            }
            // `handle_gateway` already turned a reply of another kind into an error.
            Ok(_) => ToolResult::Error(tool::gateway_failed_text(
                &GatewayError::invalid("not a list"),
                self.dialect,
            )),
            Err(err) => ToolResult::Error(tool::gateway_failed_text(&err, self.dialect)),
        };
        self.finish(rendered);
    }
}
