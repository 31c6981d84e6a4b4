//! One table of scenarios (every test of seed 001) that runs on both runtimes, against the
//! in-process scripted gateway or the simulated gateway over real loopback HTTP.
//!
//! Real time: timings use the seeds' own small ticks and deadlines; assertions use generous
//! upper bounds, and every hand-off between threads is an event (a channel, a join), never a
//! sleep.

use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
use connop_core::contract::{Actor, SettleReason, TargetState};
use connop_core::flow::{Event, Surface};
use connop_core::operation::Patch;
use connop_core::payload::{CardRequest, UpdateFrame};
use connop_core::tool_gateway::{
    AccountStatus, AsyncToolGateway, BlockingToolGateway, GatewayCall, GatewayError, GatewayReply,
    MintStatus,
};
use connop_fixtures::{CallHook, MintLog, ScriptedRead, ScriptedToolGateway};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which runtime drives the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// `connop_blocking::manage_connections` on the test thread.
    Blocking,
    /// `connop_smol::manage_connections` under `smol::block_on`.
    Smol,
}

/// A tool gateway to run scenarios against.
pub trait Backend: Send + Sync {
    /// A name for failure messages.
    fn name(&self) -> String;
    /// Sets the world a scenario starts from.
    fn set_world(&self, world: &ScriptedToolGateway);
    /// The gateway for the blocking runtime.
    fn blocking(&self) -> Arc<dyn BlockingToolGateway>;
    /// The gateway for the smol runtime.
    fn asynchronous(&self) -> Arc<dyn AsyncToolGateway>;
    /// Whether the blocking runtime may run calls inline (the gateway answers at once).
    fn inline_calls(&self) -> bool;
    /// Mints seen, in order.
    fn mints(&self) -> Vec<MintLog>;
    /// Account reads seen (connection ids), in order.
    fn reads(&self) -> Vec<String>;
    /// List reads seen.
    fn lists(&self) -> usize;
    /// How a link of a freshly minted `slug` begins.
    fn link_prefix(&self, slug: &str) -> String;
}

/// What one run produced.
pub struct Run {
    /// The tool result.
    pub result: Value,
    /// Card requests (the card callback's payloads).
    pub cards: Vec<CardRequest>,
    /// Update frames.
    pub frames: Vec<UpdateFrame>,
    /// The registry afterwards.
    pub registry: SharedRegistry,
    /// How long the tool call took.
    pub elapsed: Duration,
    /// An operation handle a hook captured during the run.
    pub captured: Option<OpHandle>,
    /// The backend's logs, read after the run.
    pub mints: Vec<MintLog>,
    /// Account reads.
    pub reads: Vec<String>,
    /// List reads.
    pub lists: usize,
}

impl Run {
    /// Target states in the result, by name.
    pub fn states(&self) -> std::collections::BTreeMap<String, String> {
        self.result["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    t["name"].as_str().unwrap_or("").to_owned(),
                    t["state"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// A target of the result by name.
    pub fn target(&self, name: &str) -> Value {
        self.result["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// How often an account was read.
    pub fn reads_of(&self, id: &str) -> usize {
        self.reads.iter().filter(|r| *r == id).count()
    }
}

/// What the card callback (or a gateway hook) does during a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Card {
    /// Shows the card and returns (the seeds' `_desktop_callback`).
    Show,
    /// Captures the live operation from the registry (the panel).
    CaptureLiveOperation,
    /// Another thread skips notion through the operation handle.
    SkipNotionFromAnotherThread,
    /// The first account read settles `continue` from inside the read, then answers active.
    ContinueDuringRead,
    /// Another thread triggers the turn's interrupt.
    InterruptFromAnotherThread,
    /// No card callback at all (links).
    None,
}

/// One scenario.
pub struct Scenario {
    /// The seed test it ports.
    pub name: &'static str,
    /// The world.
    pub world: ScriptedToolGateway,
    /// Tool arguments.
    pub args: Value,
    /// The session's surface.
    pub surface: Surface,
    /// What happens on the card.
    pub card: Card,
    /// Watcher tick, seconds.
    pub tick: f64,
    /// Deadline, seconds.
    pub deadline: f64,
    /// Local MCP catalog.
    pub catalog: Vec<&'static str>,
    /// Open another operation in the session first.
    pub preopen: bool,
    /// The assertions.
    pub check: fn(&Run, &dyn Backend),
}

impl Scenario {
    fn new(
        name: &'static str,
        world: ScriptedToolGateway,
        args: Value,
        check: fn(&Run, &dyn Backend),
    ) -> Self {
        Scenario {
            name,
            world,
            args,
            surface: Surface::Desktop,
            card: Card::Show,
            tick: 0.0,
            deadline: 300.0,
            catalog: Vec::new(),
            preopen: false,
            check,
        }
    }
    fn tick(mut self, t: f64) -> Self {
        self.tick = t;
        self
    }
    fn deadline(mut self, d: f64) -> Self {
        self.deadline = d;
        self
    }
    fn card(mut self, c: Card) -> Self {
        self.card = c;
        self
    }
    fn surface(mut self, s: Surface) -> Self {
        self.surface = s;
        self
    }
    fn catalog(mut self, c: &[&'static str]) -> Self {
        self.catalog = c.to_vec();
        self
    }
}

const SESSION: &str = "s1";

/// Runs one scenario on one runtime against one backend.
pub fn run(scenario: &Scenario, runtime: Runtime, backend: &dyn Backend) -> Run {
    backend.set_world(&scenario.world);
    let registry = SharedRegistry::new("/test/.connop");
    let cards: Arc<Mutex<Vec<CardRequest>>> = Arc::default();
    let frames: Arc<Mutex<Vec<UpdateFrame>>> = Arc::default();
    let captured: Arc<Mutex<Option<OpHandle>>> = Arc::default();
    let interrupt = Interrupt::new();
    let helpers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();

    let events = {
        let (cards, frames, captured, registry, interrupt, helpers) = (
            cards.clone(),
            frames.clone(),
            captured.clone(),
            registry.clone(),
            interrupt.clone(),
            helpers.clone(),
        );
        let mode = scenario.card;
        move |event: &Event| match event {
            Event::Request(card) => {
                cards.lock().unwrap().push((**card).clone());
                let live = registry.get(SESSION, card.op_id);
                match mode {
                    Card::CaptureLiveOperation | Card::ContinueDuringRead => {
                        *captured.lock().unwrap() = live
                    }
                    Card::SkipNotionFromAnotherThread => {
                        let op = live.expect("the card's operation is in the registry");
                        helpers.lock().unwrap().push(std::thread::spawn(move || {
                            op.transition(
                                "notion",
                                TargetState::Skipped,
                                Actor::User,
                                Patch::default(),
                            )
                            .unwrap();
                        }));
                    }
                    Card::InterruptFromAnotherThread => {
                        let interrupt = interrupt.clone();
                        helpers
                            .lock()
                            .unwrap()
                            .push(std::thread::spawn(move || interrupt.trigger()));
                    }
                    Card::Show | Card::None => {}
                }
            }
            Event::Update(frame) => frames.lock().unwrap().push((**frame).clone()),
            _ => {}
        }
    };

    let hook: Option<CallHook> = (scenario.card == Card::ContinueDuringRead).then(|| {
        let captured = captured.clone();
        let fired = Arc::new(Mutex::new(false));
        let hook: CallHook = Arc::new(move |call: &GatewayCall, answer| {
            let GatewayCall::Account { connection_id, .. } = call else {
                return answer;
            };
            if std::mem::replace(&mut *fired.lock().unwrap(), true) {
                return answer;
            }
            let op = captured
                .lock()
                .unwrap()
                .clone()
                .expect("the card came before the first read");
            assert!(op.settle(SettleReason::Continue));
            let _ = answer;
            Ok(GatewayReply::Account(Some(
                connop_core::tool_gateway::Account {
                    connection_id: connection_id.clone(),
                    connector: "gmail".into(),
                    status: AccountStatus::Active,
                    status_reason: None,
                },
            )))
        });
        hook
    });

    let mut preopened = None;
    if scenario.preopen {
        preopened = Some(preopen(&registry, backend));
    }

    let events: Option<connop_blocking::EventSink> = if scenario.card == Card::None {
        None
    } else {
        Some(Arc::new(events))
    };
    let started = Instant::now();
    let result = match runtime {
        Runtime::Blocking => {
            let gateway = hooked_blocking(backend.blocking(), hook);
            let mut ctx: ToolContext<dyn BlockingToolGateway> =
                ToolContext::new(registry.clone(), SESSION, gateway);
            configure(&mut ctx, scenario, events, &interrupt);
            ctx.inline_calls = backend.inline_calls();
            connop_blocking::manage_connections(&scenario.args, &ctx)
        }
        Runtime::Smol => {
            let gateway = hooked_async(backend.asynchronous(), hook);
            let mut ctx: ToolContext<dyn AsyncToolGateway> =
                ToolContext::new(registry.clone(), SESSION, gateway);
            configure(&mut ctx, scenario, events, &interrupt);
            smol::block_on(connop_smol::manage_connections(&scenario.args, &ctx))
        }
    };
    let elapsed = started.elapsed();
    for helper in std::mem::take(&mut *helpers.lock().unwrap()) {
        helper.join().expect("a helper thread panicked");
    }
    if let Some(op) = preopened {
        op.interrupt();
    }
    let captured = captured.lock().unwrap().clone();
    Run {
        result,
        cards: std::mem::take(&mut *cards.lock().unwrap()),
        frames: std::mem::take(&mut *frames.lock().unwrap()),
        registry,
        elapsed,
        captured,
        mints: backend.mints(),
        reads: backend.reads(),
        lists: backend.lists(),
    }
}

fn configure<G: ?Sized>(
    ctx: &mut ToolContext<G>,
    scenario: &Scenario,
    events: Option<connop_blocking::EventSink>,
    interrupt: &Interrupt,
) {
    ctx.surface = scenario.surface.clone();
    ctx.tick = Duration::from_secs_f64(scenario.tick);
    ctx.deadline = Duration::from_secs_f64(scenario.deadline);
    ctx.local_catalog = scenario.catalog.iter().map(|s| (*s).into()).collect();
    ctx.events = events;
    ctx.interrupt = Some(interrupt.clone());
    ctx.agent_session_id = Some("20260914_rotated_agent_id".into());
}

/// Opens an unsettled card-path operation in the session, as the seeds' `live.open` does:
/// started and pumped once (registered, minted, card shown), then left alone.
fn preopen(registry: &SharedRegistry, backend: &dyn Backend) -> OpHandle {
    let mut ctx: ToolContext<dyn BlockingToolGateway> =
        ToolContext::new(registry.clone(), SESSION, backend.blocking());
    ctx.events = Some(Arc::new(|_: &Event| {}));
    ctx.surface = Surface::Desktop;
    let calls = Arc::new(connop_blocking::InlineCalls(backend.blocking()));
    let op = ctx.start(
        &json!({"action": "connect", "connectors": ["gmail"]}),
        calls,
    );
    op.pump();
    assert!(registry.current(SESSION).is_some());
    op
}

struct Hooked<G: ?Sized> {
    inner: Arc<G>,
    hook: CallHook,
}

fn hooked_blocking(
    inner: Arc<dyn BlockingToolGateway>,
    hook: Option<CallHook>,
) -> Arc<dyn BlockingToolGateway> {
    match hook {
        Some(hook) => Arc::new(Hooked { inner, hook }),
        None => inner,
    }
}

fn hooked_async(
    inner: Arc<dyn AsyncToolGateway>,
    hook: Option<CallHook>,
) -> Arc<dyn AsyncToolGateway> {
    match hook {
        Some(hook) => Arc::new(Hooked { inner, hook }),
        None => inner,
    }
}

impl BlockingToolGateway for Hooked<dyn BlockingToolGateway> {
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        (self.hook)(call, self.inner.call(call))
    }
}

impl AsyncToolGateway for Hooked<dyn AsyncToolGateway> {
    fn call<'a>(
        &'a self,
        call: &'a GatewayCall,
    ) -> connop_core::tool_gateway::BoxFuture<'a, Result<GatewayReply, GatewayError>> {
        Box::pin(async move {
            let answer = self.inner.call(call).await;
            (self.hook)(call, answer)
        })
    }
}

fn connect(names: &[&str]) -> Value {
    json!({"action": "connect", "connectors": names})
}

fn reconnect(names: &[&str], force: bool) -> Value {
    json!({"action": "reconnect", "connectors": names, "force": force})
}

fn mint_pairs(run: &Run) -> Vec<(Vec<String>, bool)> {
    run.mints
        .iter()
        .map(|m| (m.connectors.clone(), m.reinitiate))
        .collect()
}

/// Every test of seed 001, as scenarios.
pub fn seed_001() -> Vec<Scenario> {
    let gw = ScriptedToolGateway::new;
    vec![
        Scenario::new(
            "test_desktop_connect_mints_once_emits_the_card_and_returns_outcomes_without_urls",
            gw().flips(&[("gmail", 2), ("notion", 3)]),
            connect(&["gmail", "notion"]),
            |run, _| {
                let names: Vec<Vec<String>> =
                    run.mints.iter().map(|m| m.connectors.clone()).collect();
                assert_eq!(names, [["gmail", "notion"]]);
                assert_eq!(run.cards.len(), 1);
                assert_eq!(run.cards[0].op_id.as_str(), run.result["op_id"]);
                let card = serde_json::to_value(&run.cards[0]).unwrap();
                let card_names: Vec<&str> = card["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].as_str().unwrap())
                    .collect();
                assert_eq!(card_names, ["gmail", "notion"]);
                assert!(
                    card["targets"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|t| t["kind"] == "connector" && t["action"] == "connect")
                );
                assert_eq!(run.result["status"], "settled");
                assert_eq!(run.result["settled_by"], "all_resolved");
                assert!(run.states().values().all(|s| s == "connected"));
                assert!(!run.result.to_string().contains("connect_url"));
                assert!(run.registry.current(SESSION).is_none(), "closed on settle");
            },
        ),
        Scenario::new(
            "test_desktop_connect_url_stays_on_the_live_operation_for_the_panel",
            gw().flips(&[("gmail", 2)]),
            connect(&["gmail"]),
            |run, backend| {
                let op = run
                    .captured
                    .as_ref()
                    .expect("the panel found the live operation");
                let view = op.view().unwrap();
                assert!(view.settled());
                let url = view.targets[0].connect_url.as_deref().unwrap();
                assert!(url.starts_with(&backend.link_prefix("gmail")), "{url}");
            },
        )
        .card(Card::CaptureLiveOperation),
        Scenario::new(
            "test_watcher_transitions_on_flip_and_settles_by_deadline_when_nothing_flips",
            gw(),
            connect(&["gmail"]),
            |run, _| {
                assert_eq!(run.result["settled_by"], "deadline");
                assert_eq!(run.result["targets"][0]["state"], "not_connected");
                assert!(run.reads.len() >= 2, "it did poll: {:?}", run.reads);
            },
        )
        .deadline(0.05)
        .tick(0.01),
        Scenario::new(
            "test_the_watcher_reads_one_account_per_target_per_tick_and_never_the_list",
            gw().flips(&[("gmail", 3), ("notion", 2)]),
            connect(&["gmail", "notion"]),
            |run, _| {
                assert_eq!(run.lists, 0);
                assert_eq!(run.reads_of("ca_gmail_1"), 3);
                assert_eq!(run.reads_of("ca_notion_1"), 2);
                assert!(
                    run.reads
                        .iter()
                        .all(|r| r == "ca_gmail_1" || r == "ca_notion_1")
                );
            },
        ),
        Scenario::new(
            "test_respond_from_the_card_skips_a_target_and_wakes_the_loop",
            gw().flips(&[("gmail", 2)]),
            connect(&["gmail", "notion"]),
            |run, _| {
                assert_eq!(run.states()["gmail"], "connected");
                assert_eq!(run.states()["notion"], "skipped");
                assert_eq!(run.result["settled_by"], "all_resolved");
            },
        )
        .card(Card::SkipNotionFromAnotherThread)
        .tick(0.01),
        Scenario::new(
            "test_mint_failure_detail_survives (hosted list names the catalog entry)",
            gw().mint_status(MintStatus::Failed)
                .status_reason("vendor: bad scope")
                .listed(Some(&["gmail", "notion"])),
            connect(&["gmail", "notion"]),
            |run, _| {
                assert_eq!(run.target("gmail")["state"], "not_connected");
                assert_eq!(run.target("gmail")["detail"], "vendor: bad scope");
                assert_eq!(run.target("notion")["detail"], "vendor: bad scope");
            },
        )
        .deadline(0.05)
        .tick(0.01)
        .catalog(&["notion"]),
        Scenario::new(
            "test_mint_failure_detail_survives (only an unlisted catalog name is misrouted)",
            gw().flips(&[("gmail", 1)])
                .mint_override("notion", MintStatus::Failed)
                .listed(Some(&["gmail"])),
            connect(&["gmail", "notion"]),
            |run, _| {
                assert_eq!(run.mints.len(), 1);
                assert!(!run.cards.is_empty());
                assert_eq!(run.target("gmail")["state"], "connected");
                assert!(
                    run.target("notion")["detail"]
                        .as_str()
                        .unwrap()
                        .starts_with("notion is a local MCP server")
                );
            },
        )
        .deadline(0.2)
        .tick(0.01)
        .catalog(&["notion"]),
        Scenario::new(
            "test_mint_failure_detail_survives (every target misrouted settles before any card)",
            gw().mint_status(MintStatus::Failed).listed(Some(&[])),
            connect(&["notion"]),
            |run, _| {
                assert!(run.cards.is_empty());
                assert_eq!(run.result["settled_by"], "all_resolved");
                assert!(
                    run.result["targets"][0]["detail"]
                        .as_str()
                        .unwrap()
                        .starts_with("notion is a local MCP server")
                );
            },
        )
        .deadline(30.0)
        .tick(0.01)
        .catalog(&["notion"]),
        Scenario::new(
            "test_mint_failure_detail_survives (the list read fails: nothing misrouted)",
            gw().mint_status(MintStatus::Failed)
                .status_reason("gateway hiccup")
                .listed(None),
            connect(&["notion"]),
            |run, _| assert_eq!(run.result["targets"][0]["detail"], "gateway hiccup"),
        )
        .deadline(0.05)
        .tick(0.01)
        .catalog(&["notion"]),
        Scenario::new(
            "test_reconnect_on_an_active_target_makes_no_gateway_mint",
            gw().connected(&["gmail"]),
            reconnect(&["gmail"], false),
            |run, _| {
                assert!(run.mints.is_empty());
                assert_eq!(run.result["targets"][0]["state"], "connected");
                assert_eq!(run.result["settled_by"], "all_resolved");
            },
        ),
        Scenario::new(
            "test_reconnect_force_always_reinitiates_even_when_active",
            gw().connected(&["gmail"]).flips(&[("gmail", 1)]),
            reconnect(&["gmail"], true),
            |run, _| assert_eq!(mint_pairs(run), [(vec!["gmail".to_owned()], true)]),
        )
        .deadline(0.05)
        .tick(0.01),
        Scenario::new(
            "test_reconnect_on_a_disconnected_target_reinitiates",
            gw().flips(&[("gmail", 2)]),
            reconnect(&["gmail"], false),
            |run, _| assert_eq!(mint_pairs(run), [(vec!["gmail".to_owned()], true)]),
        ),
        Scenario::new(
            "test_off_desktop_connect_returns_links_and_does_not_block",
            gw(),
            connect(&["gmail"]),
            |run, backend| {
                assert_eq!(run.result["status"], "initiated");
                let url = run.result["targets"][0]["connect_url"].as_str().unwrap();
                assert!(url.starts_with(&backend.link_prefix("gmail")), "{url}");
                assert!(run.result.get("op_id").is_some());
                assert!(
                    run.lists == 0 && run.reads.is_empty(),
                    "no watcher without a card"
                );
                assert!(run.registry.current(SESSION).is_none());
            },
        )
        .surface(Surface::Cli)
        .card(Card::None),
        Scenario::new(
            "test_callback_presence_decides_the_card_path_on_tui",
            gw().flips(&[("gmail", 1)]),
            connect(&["gmail"]),
            |run, _| {
                assert_eq!(run.cards.len(), 1);
                assert_eq!(run.result["targets"][0]["state"], "connected");
                assert!(run.result["targets"][0].get("connect_url").is_none());
            },
        )
        .surface(Surface::Tui),
        Scenario {
            preopen: true,
            ..Scenario::new(
                "test_second_connect_while_an_operation_is_open_is_refused",
                gw(),
                connect(&["notion"]),
                |run, _| {
                    let error = run.result["error"].as_str().unwrap();
                    assert!(error.contains("already open"), "{error}");
                    // The pre-opened operation made the only mint; the refused call made none.
                    assert_eq!(run.mints.len(), 1);
                    assert_eq!(run.mints[0].connectors, ["gmail"]);
                },
            )
        },
        Scenario::new(
            "test_connected_read_on_a_failed_target_is_ignored_not_an_error",
            gw().mint_status(MintStatus::Failed)
                .status_reason("denied")
                .flips(&[("gmail", 1)]),
            connect(&["gmail"]),
            |run, _| {
                assert!(run.result.get("error").is_none());
                let state = run.result["targets"][0]["state"].as_str().unwrap();
                assert!(["failed", "not_connected"].contains(&state));
                assert_eq!(run.result["targets"][0]["detail"], "denied");
            },
        )
        .deadline(0.05)
        .tick(0.01),
        Scenario::new(
            "test_continue_during_a_connected_read_keeps_the_settled_result",
            gw(),
            connect(&["gmail"]),
            |run, _| {
                assert!(run.result.get("error").is_none());
                assert_eq!(run.result["settled_by"], "continue");
                assert_eq!(run.result["targets"][0]["state"], "not_connected");
            },
        )
        .card(Card::ContinueDuringRead)
        .tick(0.01),
        Scenario::new(
            "test_interrupt_wakes_the_loop_and_settles_before_the_next_tick",
            gw(),
            connect(&["gmail"]),
            |run, _| {
                assert_eq!(run.result["settled_by"], "interrupt");
                assert!(
                    run.elapsed < Duration::from_secs(2),
                    "woke on the interrupt: {:?}",
                    run.elapsed
                );
            },
        )
        .card(Card::InterruptFromAnotherThread)
        .tick(5.0)
        .deadline(10.0),
    ]
}

/// Runs every scenario of the table and reports all failures at once.
pub fn run_table(runtime: Runtime, backend: &dyn Backend) {
    let mut failures = Vec::new();
    let scenarios = seed_001();
    let trace = std::env::var_os("CONNOP_TABLE_TRACE").is_some();
    for scenario in &scenarios {
        if trace {
            eprintln!("{runtime:?} / {}: {}", backend.name(), scenario.name);
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let run = run(scenario, runtime, backend);
            (scenario.check)(&run, backend);
        }));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!(
                "{} on {runtime:?} / {}: {message}",
                scenario.name,
                backend.name()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        scenarios.len(),
        failures.join("\n")
    );
}

/// The in-process scripted gateway as a backend.
pub struct InProcess(pub connop_fixtures::SharedToolGateway);

impl InProcess {
    /// A fresh backend.
    pub fn new() -> Self {
        InProcess(connop_fixtures::SharedToolGateway::default())
    }
}

impl Default for InProcess {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for InProcess {
    fn name(&self) -> String {
        "in-process scripted gateway".into()
    }
    fn set_world(&self, world: &ScriptedToolGateway) {
        self.0.with(|gw| *gw = world.clone());
    }
    fn blocking(&self) -> Arc<dyn BlockingToolGateway> {
        Arc::new(self.0.clone())
    }
    fn asynchronous(&self) -> Arc<dyn AsyncToolGateway> {
        Arc::new(self.0.clone())
    }
    fn inline_calls(&self) -> bool {
        true
    }
    fn mints(&self) -> Vec<MintLog> {
        self.0.with(|gw| gw.mints.clone())
    }
    fn reads(&self) -> Vec<String> {
        self.0
            .with(|gw| gw.reads.iter().map(|(id, _)| id.clone()).collect())
    }
    fn lists(&self) -> usize {
        self.0.with(|gw| gw.lists.len())
    }
    fn link_prefix(&self, slug: &str) -> String {
        format!("https://connect.example/{slug}/")
    }
}

/// The simulated tool gateway over real loopback HTTP, reached through the isahc clients.
pub struct OverHttp {
    server: connop_smol::app::sim_gateway::SimToolGateway,
    blocking: Arc<dyn BlockingToolGateway>,
    asynchronous: Arc<dyn AsyncToolGateway>,
}

impl OverHttp {
    /// Starts a simulated gateway with a token, and clients for it.
    pub fn start() -> Self {
        use connop_smol::app::sim_gateway::{SimOptions, SimToolGateway};
        let token = "table-token";
        let server = SimToolGateway::start(SimOptions::default().token(token))
            .expect("the simulated gateway binds");
        let config = connop_core::wire::ClientConfig::new(server.url(), Some(token.to_owned()));
        let blocking =
            connop_blocking::http::HttpToolGateway::new(config.clone()).expect("an isahc client");
        let asynchronous =
            connop_smol::http::AsyncHttpToolGateway::new(config).expect("an isahc client");
        OverHttp {
            server,
            blocking: Arc::new(blocking),
            asynchronous: Arc::new(asynchronous),
        }
    }

    /// The server, for tests that inspect it.
    pub fn server(&self) -> &connop_smol::app::sim_gateway::SimServer {
        self.server.server()
    }

    fn requests(
        &self,
        method: &str,
        path_prefix: &str,
    ) -> Vec<connop_smol::app::sim_gateway::SimRequest> {
        self.server()
            .log()
            .into_iter()
            .filter(|r| r.method == method && r.path.starts_with(path_prefix))
            .collect()
    }
}

/// The simulated gateway's `/sim/state` for a scripted world (the seeds' knobs).
pub fn sim_state(world: &ScriptedToolGateway) -> Value {
    use connop_smol::app::sim_gateway::CATALOG;
    let step = |s: &ScriptedRead| match s {
        ScriptedRead::Status(status) => json!(status.as_str()),
        ScriptedRead::NotFound => json!({"http": 404}),
        ScriptedRead::Fail(GatewayError::RateLimited { retry_after }) => {
            json!({"http": 429, "retry_after_ms": retry_after.as_millis() as u64})
        }
        ScriptedRead::Fail(GatewayError::Http { status }) => json!({"http": status}),
        ScriptedRead::Fail(_) => json!({"http": 500}),
    };
    let mint_entry = |status: MintStatus| {
        let mut entry = json!({
            "status": status.as_str(),
            "connectionId": world.mint_connection_id && status != MintStatus::Failed,
        });
        if let Some(reason) = &world.status_reason {
            entry["statusReason"] = json!(reason);
        }
        entry
    };
    let mut mint = serde_json::Map::new();
    if world.mint_status != MintStatus::Initiated {
        for slug in CATALOG {
            mint.insert((*slug).to_owned(), mint_entry(world.mint_status));
        }
    }
    for (slug, status) in &world.mint_overrides {
        mint.insert(slug.clone(), mint_entry(*status));
    }
    let mut state = json!({
        "connected": world.connected,
        "mint": mint,
        "flips": world.flips,
        "scripts": world.scripts.iter().map(|(k, v)| (k.clone(), Value::Array(v.iter().map(step).collect()))).collect::<serde_json::Map<_, _>>(),
        "statusReason": world.status_reason,
        "connectionIds": world.mint_connection_id,
    });
    if let Some(listed) = &world.listed {
        state["listed"] = json!(listed);
    }
    state
}

impl Backend for OverHttp {
    fn name(&self) -> String {
        format!("simulated gateway over HTTP at {}", self.server.url())
    }
    fn set_world(&self, world: &ScriptedToolGateway) {
        self.server().reset();
        self.server()
            .apply_state(sim_state(world))
            .expect("a valid /sim/state");
        if world.listed.is_none() {
            // An unavailable list: every list read fails (and its one retry too).
            let faults = json!({"faults": [{"route": "list", "status": 503, "count": 1000}]});
            self.server().queue_faults(faults).expect("valid faults");
        }
    }
    fn blocking(&self) -> Arc<dyn BlockingToolGateway> {
        self.blocking.clone()
    }
    fn asynchronous(&self) -> Arc<dyn AsyncToolGateway> {
        self.asynchronous.clone()
    }
    fn inline_calls(&self) -> bool {
        false
    }
    fn mints(&self) -> Vec<MintLog> {
        self.requests("POST", "/v1/connectors/connections")
            .into_iter()
            .map(|r| {
                let body: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
                MintLog {
                    connectors: body["connectors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.as_str().map(str::to_owned))
                        .collect(),
                    reinitiate: body["reinitiate"].as_bool().unwrap_or(false),
                    return_to: body["returnTo"].as_str().map(str::to_owned),
                    op: body["op"].as_str().map(str::to_owned),
                }
            })
            .collect()
    }
    fn reads(&self) -> Vec<String> {
        self.requests("GET", "/v1/connectors/accounts/")
            .into_iter()
            .map(|r| {
                r.path
                    .trim_start_matches("/v1/connectors/accounts/")
                    .to_owned()
            })
            .collect()
    }
    fn lists(&self) -> usize {
        self.server()
            .log()
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/v1/connectors")
            .count()
    }
    fn link_prefix(&self, slug: &str) -> String {
        format!("{}/connect/ca_{slug}_", self.server.url())
    }
}
