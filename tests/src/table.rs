//! Seed 001 written once: one table of scenarios (the seed's every test, as data plus
//! checks) played by five drivers — the deterministic simulation, and each runtime (blocking,
//! smol) against the in-process scripted gateway and against the simulated gateway over real
//! loopback HTTP.
//!
//! Every driver runs on virtual time: the simulation on its own clock, the runtimes on an
//! [`AutoClock`] that moves only when everything waits. So the checks are exact on every
//! driver (read counts, the instant the tool call returned), and an input from "another
//! thread" lands before time moves on.

use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
use connop_core::contract::{Actor, SettleReason, TargetState};
use connop_core::flow::{Event, Input, Surface};
use connop_core::operation::{OpId, Patch};
use connop_core::payload::{CardRequest, OperationView, UpdateFrame};
use connop_core::tool_gateway::{
    AccountStatus, AsyncToolGateway, BlockingToolGateway, GatewayCall, GatewayError, GatewayReply,
    GatewayRoute, MintStatus,
};
use connop_fixtures::auto_clock::AutoClock;
use connop_fixtures::{
    CallHook, Latency, MintLog, SIM_EPOCH, ScriptedRead, ScriptedToolGateway, Sim, SimEntry,
};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A tool gateway the runtimes play scenarios against.
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

/// Which runtime a test drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// `connop_blocking`, on the test thread.
    Blocking,
    /// `connop_smol`, under `smol::block_on`.
    Smol,
}

/// Who plays a scenario.
#[derive(Clone, Copy)]
pub enum Driver<'a> {
    /// The deterministic simulation of the core (`connop_fixtures::Sim`).
    Sim,
    /// `connop_blocking::manage_connections` on the test thread.
    Blocking(&'a dyn Backend),
    /// `connop_smol::manage_connections` under `smol::block_on`.
    Smol(&'a dyn Backend),
}

impl Driver<'_> {
    /// A name for failure messages.
    pub fn name(&self) -> String {
        match self {
            Driver::Sim => "simulation".into(),
            Driver::Blocking(backend) => format!("blocking / {}", backend.name()),
            Driver::Smol(backend) => format!("smol / {}", backend.name()),
        }
    }
}

/// What one play produced, the same on every driver.
pub struct Played {
    /// The tool result.
    pub result: Value,
    /// Card requests (the card callback's payloads).
    pub cards: Vec<CardRequest>,
    /// Update frames.
    pub frames: Vec<UpdateFrame>,
    /// Whether the session still had an open operation afterwards.
    pub open_after: bool,
    /// What the card's panel saw of the live operation, read after the tool call returned
    /// (only when the scenario looks for it and found it registered at the card).
    pub panel_view: Option<OperationView>,
    /// The operation a scenario opened in the session before the call.
    pub preopened: Option<OpId>,
    /// Mints the call made (not the pre-opened operation's).
    pub mints: Vec<MintLog>,
    /// Account reads the call made (connection ids), in order.
    pub reads: Vec<String>,
    /// List reads the call made.
    pub lists: usize,
    /// When the tool call returned, in virtual time since it started.
    pub returned_at: Duration,
    /// How a link of a freshly minted gmail begins, on this driver.
    pub gmail_link: String,
    /// The simulation's effect log (the simulation only).
    pub log: Option<String>,
}

impl Played {
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

    /// When the simulation logged it, that the log has `line`.
    fn logged(&self, line: &str) {
        if let Some(log) = &self.log {
            assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
        }
    }
}

/// What happens on the card (or inside a gateway call) during a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Card {
    /// Shows the card and returns (the seeds' `_desktop_callback`).
    Show,
    /// The panel finds the live operation in the registry at the card.
    CaptureLiveOperation,
    /// Another actor skips notion through the operation handle, at the card's instant.
    SkipNotionFromAnotherThread,
    /// The first account read settles `continue` while it is in flight; it then answers.
    ContinueDuringRead,
    /// Another actor triggers the turn's interrupt, at the card's instant.
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
    pub check: fn(&Played),
}

impl Scenario {
    fn new(
        name: &'static str,
        world: ScriptedToolGateway,
        args: Value,
        check: fn(&Played),
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
    fn preopen(mut self) -> Self {
        self.preopen = true;
        self
    }
}

const SESSION: &str = "s1";

/// Plays one scenario on one driver.
pub fn play(scenario: &Scenario, driver: Driver<'_>) -> Played {
    match driver {
        Driver::Sim => play_sim(scenario),
        Driver::Blocking(backend) => play_runtime(scenario, false, backend),
        Driver::Smol(backend) => play_runtime(scenario, true, backend),
    }
}

fn play_sim(scenario: &Scenario) -> Played {
    let mut sim = Sim::new(scenario.world.clone())
        .tick(scenario.tick)
        .deadline(scenario.deadline)
        .surface(scenario.surface.clone())
        .catalog(&scenario.catalog);
    let panel_found = Rc::new(RefCell::new(false));
    match scenario.card {
        Card::Show => {}
        Card::None => sim = sim.without_card(),
        Card::CaptureLiveOperation => {
            let found = panel_found.clone();
            sim = sim.on_card(move |card, ctl| {
                let key = ctl.flow.registry_key().clone();
                *found.borrow_mut() = ctl.registry.get(&key, card.op_id).is_some();
            });
        }
        Card::SkipNotionFromAnotherThread => {
            sim = sim.on_card(|_, ctl| {
                let skip = Input::Transition {
                    name: "notion".into(),
                    to: TargetState::Skipped,
                    actor: Actor::User,
                    patch: Patch::default(),
                };
                ctl.after(Duration::ZERO, skip);
            });
        }
        Card::InterruptFromAnotherThread => {
            sim = sim.on_card(|_, ctl| ctl.after(Duration::ZERO, Input::Interrupt));
        }
        Card::ContinueDuringRead => {
            // The read is in flight for 5 ms; the settle lands while it is.
            let fired = Rc::new(RefCell::new(false));
            sim = sim
                .latency(Latency {
                    account: Duration::from_millis(5),
                    ..Latency::default()
                })
                .on_call(move |call, ctl| {
                    if call.route() == GatewayRoute::Account && !fired.replace(true) {
                        ctl.after(Duration::ZERO, Input::Settle(SettleReason::Continue));
                    }
                });
        }
    }
    let mut preopened = None;
    if scenario.preopen {
        let open = OpId::from_entropy([0x0b, 0x0e, 0x00, 0x00, 0x00, 0x01]);
        let entry = SimEntry {
            op_id: open,
            settled: false,
        };
        sim.registry
            .open(sim.key.clone(), entry)
            .expect("an empty registry");
        preopened = Some(open);
    }
    let key = sim.key.clone();
    let out = sim.run(scenario.args.clone());
    crate::assert_clean(&out);
    Played {
        result: out.json(),
        cards: out.cards.clone(),
        frames: out.frames.clone(),
        open_after: out.registry.current(&key).is_some(),
        panel_view: panel_found.borrow().then(|| out.flow.view()).flatten(),
        preopened,
        mints: out.gateway.mints.clone(),
        reads: out.gateway.reads.iter().map(|(id, _)| id.clone()).collect(),
        lists: out.gateway.lists.len(),
        returned_at: out.returned_at.expect("every simulated call returns"),
        gmail_link: "https://connect.example/gmail/".into(),
        log: Some(out.log.render()),
    }
}

fn play_runtime(scenario: &Scenario, smol: bool, backend: &dyn Backend) -> Played {
    backend.set_world(&scenario.world);
    let clock = AutoClock::new(SIM_EPOCH);
    let _keeper = clock.keep();
    let registry = SharedRegistry::new("/test/.connop");
    let cards: Arc<Mutex<Vec<CardRequest>>> = Arc::default();
    let frames: Arc<Mutex<Vec<UpdateFrame>>> = Arc::default();
    let captured: Arc<Mutex<Option<OpHandle>>> = Arc::default();
    let interrupt = Interrupt::new();
    let actors: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();

    let events = {
        let (cards, frames, captured, registry, interrupt, actors, clock) = (
            cards.clone(),
            frames.clone(),
            captured.clone(),
            registry.clone(),
            interrupt.clone(),
            actors.clone(),
            clock.clone(),
        );
        let mode = scenario.card;
        move |event: &Event| match event {
            Event::Request(card) => {
                cards.lock().unwrap().push((**card).clone());
                let live = registry.get(SESSION, card.op_id);
                // Another actor works while time stands still: it holds the clock.
                let actor = |work: Box<dyn FnOnce() + Send>| {
                    let hold = clock.hold();
                    actors.lock().unwrap().push(std::thread::spawn(move || {
                        work();
                        drop(hold);
                    }));
                };
                match mode {
                    Card::CaptureLiveOperation | Card::ContinueDuringRead => {
                        *captured.lock().unwrap() = live
                    }
                    Card::SkipNotionFromAnotherThread => {
                        let op = live.expect("the card's operation is in the registry");
                        actor(Box::new(move || {
                            op.transition(
                                "notion",
                                TargetState::Skipped,
                                Actor::User,
                                Patch::default(),
                            )
                            .expect("a legal skip");
                        }));
                    }
                    Card::InterruptFromAnotherThread => {
                        let interrupt = interrupt.clone();
                        actor(Box::new(move || interrupt.trigger()));
                    }
                    Card::Show | Card::None => {}
                }
            }
            Event::Update(frame) => frames.lock().unwrap().push((**frame).clone()),
            _ => {}
        }
    };

    // The first account read settles `continue` from inside the read, then answers.
    let hook: Option<CallHook> = (scenario.card == Card::ContinueDuringRead).then(|| {
        let captured = captured.clone();
        let fired = Arc::new(Mutex::new(false));
        let hook: CallHook = Arc::new(move |call: &GatewayCall, answer| {
            if call.route() == GatewayRoute::Account
                && !std::mem::replace(&mut *fired.lock().unwrap(), true)
            {
                let op = captured
                    .lock()
                    .unwrap()
                    .clone()
                    .expect("the card came before the first read");
                assert!(op.settle(SettleReason::Continue));
            }
            answer
        });
        hook
    });

    let mut preopened = None;
    if scenario.preopen {
        preopened = Some(preopen(&registry, backend, &clock));
    }
    let (mints_before, reads_before, lists_before) = (
        backend.mints().len(),
        backend.reads().len(),
        backend.lists(),
    );

    let events: Option<connop_blocking::EventSink> = if scenario.card == Card::None {
        None
    } else {
        Some(Arc::new(events))
    };
    let result = if smol {
        let gateway = hooked_async(backend.asynchronous(), hook);
        let mut ctx: ToolContext<dyn AsyncToolGateway> =
            ToolContext::new(registry.clone(), SESSION, gateway);
        configure(&mut ctx, scenario, events, &interrupt, &clock);
        smol::block_on(connop_smol::manage_connections(&scenario.args, &ctx)).to_value()
    } else {
        let tracked = Arc::new(InFlight {
            inner: hooked_blocking(backend.blocking(), hook),
            calls: Arc::default(),
        });
        let gateway: Arc<dyn BlockingToolGateway> = tracked.clone();
        let mut ctx: ToolContext<dyn BlockingToolGateway> =
            ToolContext::new(registry.clone(), SESSION, gateway.clone());
        configure(&mut ctx, scenario, events, &interrupt, &clock);
        if backend.inline_calls() {
            ctx.calls = Some(Arc::new(connop_blocking::InlineCalls(gateway)));
        }
        let result = connop_blocking::manage_connections(&scenario.args, &ctx).to_value();
        // A call the settle withdrew may still be out on the call pool: let it land here, not
        // in the next scenario's counts.
        tracked.wait_idle();
        result
    };
    let returned_at = clock.elapsed();
    for actor in std::mem::take(&mut *actors.lock().unwrap()) {
        actor.join().expect("an actor thread panicked");
    }
    if let Some(op) = scenario
        .preopen
        .then(|| registry.current(SESSION))
        .flatten()
    {
        op.interrupt();
    }
    let panel_view = captured.lock().unwrap().as_ref().and_then(OpHandle::view);
    Played {
        result,
        cards: std::mem::take(&mut *cards.lock().unwrap()),
        frames: std::mem::take(&mut *frames.lock().unwrap()),
        open_after: preopened.is_none() && registry.current(SESSION).is_some(),
        panel_view: (scenario.card == Card::CaptureLiveOperation)
            .then_some(panel_view)
            .flatten(),
        preopened,
        mints: backend.mints().split_off(mints_before),
        reads: backend.reads().split_off(reads_before),
        lists: backend.lists() - lists_before,
        returned_at,
        gmail_link: backend.link_prefix("gmail"),
        log: None,
    }
}

fn configure<G: ?Sized>(
    ctx: &mut ToolContext<G>,
    scenario: &Scenario,
    events: Option<connop_blocking::EventSink>,
    interrupt: &Interrupt,
    clock: &Arc<AutoClock>,
) {
    ctx.surface = scenario.surface.clone();
    ctx.options.tick = Duration::from_secs_f64(scenario.tick);
    ctx.options.deadline = Duration::from_secs_f64(scenario.deadline);
    ctx.options.local_catalog = scenario.catalog.iter().map(|s| (*s).into()).collect();
    ctx.events = events;
    ctx.interrupt = Some(interrupt.clone());
    ctx.agent_session_id = Some("20260914_rotated_agent_id".into());
    ctx.clock = clock.clone();
}

/// Opens an unsettled card-path operation in the session, as the seeds' `live.open` does:
/// started and stepped once (registered, minted, card shown), then left alone.
fn preopen(registry: &SharedRegistry, backend: &dyn Backend, clock: &Arc<AutoClock>) -> OpId {
    use connop_blocking::clock::Clock as _;
    let mut ctx: ToolContext<dyn BlockingToolGateway> =
        ToolContext::new(registry.clone(), SESSION, backend.blocking());
    ctx.events = Some(Arc::new(|_: &Event| {}));
    ctx.surface = Surface::Desktop;
    ctx.clock = clock.clone();
    let calls = Arc::new(connop_blocking::InlineCalls(backend.blocking()));
    let op = ctx.start(
        &json!({"action": "connect", "connectors": ["gmail"]}),
        Some(calls),
    );
    let waker = std::task::Waker::noop();
    let mut start = |_: &mut Vec<_>, _: &mut Vec<_>| connop_blocking::CallsStarted::AtOnce;
    let _ = op.step(&mut Vec::new(), &mut Vec::new(), &mut start, waker);
    // No driver steps it again: the clock need not wait for it.
    clock.finished(waker);
    assert!(registry.current(SESSION).is_some());
    op.op_id().expect("a connect has an operation")
}

/// Counts the blocking gateway's calls still out, so a scenario ends only once they landed.
struct InFlight {
    inner: Arc<dyn BlockingToolGateway>,
    calls: Arc<(Mutex<usize>, std::sync::Condvar)>,
}

impl InFlight {
    fn wait_idle(&self) {
        let (count, idle) = &*self.calls;
        let guard = count.lock().unwrap();
        let (_guard, wait) = idle
            .wait_timeout_while(guard, Duration::from_secs(30), |n| *n > 0)
            .unwrap();
        assert!(!wait.timed_out(), "a gateway call was still out after 30 s");
    }
}

impl BlockingToolGateway for InFlight {
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        let (count, idle) = &*self.calls;
        *count.lock().unwrap() += 1;
        let answer = self.inner.call(call);
        let mut n = count.lock().unwrap();
        *n -= 1;
        if *n == 0 {
            idle.notify_all();
        }
        answer
    }
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
    fn call(&self, call: GatewayCall) -> connop_core::tool_gateway::GatewayFuture {
        let answer = self.inner.call(call.clone());
        let hook = self.hook.clone();
        connop_core::tool_gateway::GatewayFuture::pending(async move {
            let answer = answer.await;
            hook(&call, answer)
        })
    }
}

fn connect(names: &[&str]) -> Value {
    json!({"action": "connect", "connectors": names})
}

fn reconnect(names: &[&str], force: bool) -> Value {
    json!({"action": "reconnect", "connectors": names, "force": force})
}

fn mint_pairs(played: &Played) -> Vec<(Vec<String>, bool)> {
    played
        .mints
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
            |p| {
                let names: Vec<Vec<String>> = p.mints.iter().map(|m| m.connectors.clone()).collect();
                assert_eq!(names, [["gmail", "notion"]], "one mint for every target, up front");
                let [card] = p.cards.as_slice() else {
                    panic!("one card, got {}", p.cards.len())
                };
                assert_eq!(card.op_id.as_str(), p.result["op_id"]);
                let card = serde_json::to_value(card).unwrap();
                let card_names: Vec<&str> = card["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].as_str().unwrap())
                    .collect();
                assert_eq!(card_names, ["gmail", "notion"]);
                for t in card["targets"].as_array().unwrap() {
                    assert_eq!((&t["kind"], &t["action"]), (&json!("connector"), &json!("connect")));
                }
                assert_eq!(p.result["status"], "settled");
                assert_eq!(p.result["settled_by"], "all_resolved");
                assert!(p.states().values().all(|s| s == "connected"), "{:?}", p.states());
                assert!(!p.result.to_string().contains("connect_url"));
                assert!(!p.open_after, "closed on settle");
                assert_eq!((p.reads_of("ca_gmail_1"), p.reads_of("ca_notion_1")), (2, 3));
                assert_eq!(p.returned_at, Duration::ZERO, "a 0 s tick reads at once");
            },
        ),
        Scenario::new(
            "test_desktop_connect_url_stays_on_the_live_operation_for_the_panel",
            gw().flips(&[("gmail", 2)]),
            connect(&["gmail"]),
            |p| {
                // The panel found the live operation in the registry by session and op id;
                // its view is the frozen snapshot, links included.
                let view = p.panel_view.as_ref().expect("the panel found the live operation");
                assert!(view.settled());
                let url = view.targets[0].connect_url.as_deref().unwrap();
                assert!(url.starts_with(&p.gmail_link), "{url}");
                assert!(!p.result.to_string().contains("connect_url"));
            },
        )
        .card(Card::CaptureLiveOperation),
        Scenario::new(
            "test_watcher_transitions_on_flip_and_settles_by_deadline_when_nothing_flips",
            gw(),
            connect(&["gmail"]),
            |p| {
                assert_eq!(p.result["settled_by"], "deadline");
                assert_eq!(p.result["targets"][0]["state"], "not_connected");
                // Reads at 0, 10, 20, 30, 40 ms; the deadline at 50 ms.
                assert_eq!(p.reads.len(), 5, "it did poll: {:?}", p.reads);
                assert_eq!(p.returned_at, Duration::from_millis(50));
            },
        )
        .deadline(0.05)
        .tick(0.01),
        Scenario::new(
            "test_the_watcher_reads_one_account_per_target_per_tick_and_never_the_list",
            gw().flips(&[("gmail", 3), ("notion", 2)]),
            connect(&["gmail", "notion"]),
            |p| {
                assert_eq!(p.lists, 0);
                assert_eq!(p.reads_of("ca_gmail_1"), 3);
                assert_eq!(p.reads_of("ca_notion_1"), 2, "connected on read 2; never read again");
                assert_eq!(p.reads.len(), 5, "no other account: {:?}", p.reads);
            },
        ),
        Scenario::new(
            "test_respond_from_the_card_skips_a_target_and_wakes_the_loop",
            gw().flips(&[("gmail", 2)]),
            connect(&["gmail", "notion"]),
            |p| {
                assert_eq!(p.states()["gmail"], "connected");
                assert_eq!(p.states()["notion"], "skipped");
                assert_eq!(p.result["settled_by"], "all_resolved");
                // Woken by the skip itself, not by the next 10 ms tick.
                assert_eq!(p.returned_at, Duration::ZERO);
                p.logged("handle.transition(notion -> skipped by user) -> moved");
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
            |p| {
                assert_eq!(p.target("gmail")["state"], "not_connected");
                assert_eq!(p.target("gmail")["detail"], "vendor: bad scope");
                assert_eq!(p.target("notion")["detail"], "vendor: bad scope");
                assert!(p.reads.is_empty(), "failed rows are not read");
                assert_eq!(p.returned_at, Duration::from_millis(50));
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
            |p| {
                assert_eq!(p.mints.len(), 1);
                assert_eq!(p.cards.len(), 1);
                assert_eq!(p.target("gmail")["state"], "connected");
                let detail = p.target("notion")["detail"].as_str().unwrap().to_owned();
                assert!(detail.starts_with("notion is a local MCP server"), "{detail}");
                assert_eq!(p.lists, 1, "one list read for the misroute check");
            },
        )
        .deadline(0.2)
        .tick(0.01)
        .catalog(&["notion"]),
        Scenario::new(
            "test_mint_failure_detail_survives (every target misrouted settles before any card)",
            gw().mint_status(MintStatus::Failed).listed(Some(&[])),
            connect(&["notion"]),
            |p| {
                assert!(p.cards.is_empty());
                assert_eq!(p.result["settled_by"], "all_resolved");
                assert_eq!(
                    p.result["targets"][0]["detail"],
                    "notion is a local MCP server, not a hosted connector account. Set it up as a local MCP server instead; this tool cannot connect it."
                );
                assert_eq!(p.returned_at, Duration::ZERO);
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
            |p| assert_eq!(p.result["targets"][0]["detail"], "gateway hiccup"),
        )
        .deadline(0.05)
        .tick(0.01)
        .catalog(&["notion"]),
        Scenario::new(
            "test_reconnect_on_an_active_target_makes_no_gateway_mint",
            gw().connected(&["gmail"]),
            reconnect(&["gmail"], false),
            |p| {
                assert!(p.mints.is_empty());
                assert_eq!(p.lists, 1, "the repair read");
                assert_eq!(p.result["targets"][0]["state"], "connected");
                assert_eq!(p.result["settled_by"], "all_resolved");
            },
        ),
        Scenario::new(
            "test_reconnect_force_always_reinitiates_even_when_active",
            gw().connected(&["gmail"]).flips(&[("gmail", 1)]),
            reconnect(&["gmail"], true),
            |p| {
                assert_eq!(mint_pairs(p), [(vec!["gmail".to_owned()], true)]);
                assert_eq!(p.lists, 0, "force skips the repair read");
            },
        )
        .deadline(0.05)
        .tick(0.01),
        Scenario::new(
            "test_reconnect_on_a_disconnected_target_reinitiates",
            gw().flips(&[("gmail", 2)]),
            reconnect(&["gmail"], false),
            |p| assert_eq!(mint_pairs(p), [(vec!["gmail".to_owned()], true)]),
        ),
        Scenario::new(
            "test_off_desktop_connect_returns_links_and_does_not_block",
            gw(),
            connect(&["gmail"]),
            |p| {
                assert_eq!(p.result["status"], "initiated");
                let url = p.result["targets"][0]["connect_url"].as_str().unwrap();
                assert!(url.starts_with(&p.gmail_link), "{url}");
                assert!(p.result.get("op_id").is_some());
                assert!(p.lists == 0 && p.reads.is_empty(), "no watcher without a card");
                assert!(!p.open_after);
                assert_eq!(p.returned_at, Duration::ZERO);
            },
        )
        .surface(Surface::Cli)
        .card(Card::None),
        Scenario::new(
            "test_callback_presence_decides_the_card_path_on_tui",
            gw().flips(&[("gmail", 1)]),
            connect(&["gmail"]),
            |p| {
                assert_eq!(p.cards.len(), 1);
                assert_eq!(p.result["targets"][0]["state"], "connected");
                assert!(p.result["targets"][0].get("connect_url").is_none());
            },
        )
        .surface(Surface::Tui),
        Scenario::new(
            "test_second_connect_while_an_operation_is_open_is_refused",
            gw(),
            connect(&["notion"]),
            |p| {
                let open = p.preopened.expect("an operation was open");
                assert_eq!(
                    p.result["error"],
                    format!(
                        "a connection operation is already open in this session ({open}); it settles when the user finishes with the card, on Continue, or at its deadline. Do not start another."
                    )
                );
                assert!(p.mints.is_empty(), "the refused call mints nothing");
                assert!(p.lists == 0 && p.reads.is_empty());
            },
        )
        .preopen(),
        Scenario::new(
            "test_connected_read_on_a_failed_target_is_ignored_not_an_error",
            gw().mint_status(MintStatus::Failed)
                .status_reason("denied")
                .flips(&[("gmail", 1)]),
            connect(&["gmail"]),
            |p| {
                assert!(p.result.get("error").is_none());
                assert_eq!(p.result["targets"][0]["state"], "not_connected");
                assert_eq!(p.result["targets"][0]["detail"], "denied");
            },
        )
        .deadline(0.05)
        .tick(0.01),
        Scenario::new(
            "test_continue_during_a_connected_read_keeps_the_settled_result",
            gw().script("gmail", vec![ScriptedRead::Status(AccountStatus::Active)]),
            connect(&["gmail"]),
            |p| {
                assert!(p.result.get("error").is_none());
                assert_eq!(p.result["settled_by"], "continue");
                assert_eq!(p.result["targets"][0]["state"], "not_connected");
                assert_eq!(p.reads.len(), 1);
                p.logged("account ca_gmail_1 active (late)");
            },
        )
        .card(Card::ContinueDuringRead)
        .tick(0.01),
        Scenario::new(
            "test_interrupt_wakes_the_loop_and_settles_before_the_next_tick",
            gw(),
            connect(&["gmail"]),
            |p| {
                assert_eq!(p.result["settled_by"], "interrupt");
                assert_eq!(p.returned_at, Duration::ZERO, "woke on the interrupt, not the 5 s tick");
                // The read made at once after the card, if the interrupt did not come first.
                assert!(p.reads.len() <= 1, "{:?}", p.reads);
            },
        )
        .card(Card::InterruptFromAnotherThread)
        .tick(5.0)
        .deadline(10.0),
    ]
}

/// Plays every scenario of the table on one driver and reports all failures at once.
pub fn play_table(driver: Driver<'_>) {
    let mut failures = Vec::new();
    let scenarios = seed_001();
    let trace = std::env::var_os("CONNOP_TABLE_TRACE").is_some();
    for scenario in &scenarios {
        if trace {
            eprintln!("{}: {}", driver.name(), scenario.name);
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let played = play(scenario, driver);
            (scenario.check)(&played);
        }));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("{} on {}: {message}", scenario.name, driver.name()));
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
    server: connop_app::sim_gateway::SimToolGateway,
    blocking: Arc<dyn BlockingToolGateway>,
    asynchronous: Arc<dyn AsyncToolGateway>,
}

impl OverHttp {
    /// Starts a simulated gateway with a token, and clients for it.
    pub fn start() -> Self {
        use connop_app::sim_gateway::{SimOptions, SimToolGateway};
        let token = "table-token";
        // The scenarios name accounts as the scripted gateway does (`ca_gmail_1`).
        let server = SimToolGateway::start(SimOptions::default().token(token).numbered_ids())
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
    pub fn server(&self) -> &connop_app::sim_gateway::SimServer {
        self.server.server()
    }

    fn requests(
        &self,
        method: &str,
        path_prefix: &str,
    ) -> Vec<connop_app::sim_gateway::SimRequest> {
        self.server()
            .log()
            .into_iter()
            .filter(|r| r.method == method && r.path.starts_with(path_prefix))
            .collect()
    }
}

/// The simulated gateway's `/sim/state` for a scripted world (the seeds' knobs).
pub fn sim_state(world: &ScriptedToolGateway) -> Value {
    use connop_core::tool_gateway::SIMULATED_CATALOG;
    let read = |s: &ScriptedRead| match s {
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
        for slug in SIMULATED_CATALOG {
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
        "scripts": world.scripts.iter().map(|(k, v)| (k.clone(), Value::Array(v.iter().map(read).collect()))).collect::<serde_json::Map<_, _>>(),
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
