//! The process's metrics (docs/operating.md#metrics), in the Prometheus text format (0.0.4) that
//! `GET /metrics` answers. One registry per process: the JSON-RPC server, the HTTP API and the
//! turn executors count into it from wherever the event happens, with no handle to pass
//! around.

use connop_core::contract::SettleReason;
use connop_core::run::RunStatus;
use connop_core::tool_gateway::GatewayRoute;
use connop_core::wire::OUTCOME_OK;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::time::Duration;

/// The `Content-Type` of [`encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// How an operation ended that closed without settling: its prepare failed.
pub const ENDED_FAILED: &str = "failed";
/// How an operation ended that the links path returned unsettled.
pub const ENDED_LINKS: &str = "links";

/// How an operation ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    /// A settle reason, `failed` or `links`.
    pub reason: &'static str,
}

/// A tool-gateway call's route and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOutcome {
    /// `list`, `mint` or `account`.
    pub route: &'static str,
    /// `ok`, or the kind of failure (`http_5xx`, `transport`, `rate_limited`, …).
    pub outcome: &'static str,
}

/// A tool-gateway call's route.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Route {
    /// `list`, `mint` or `account`.
    pub route: &'static str,
}

/// A run's terminal status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Status {
    /// `completed`, `failed`, `cancelled` or `interrupted`.
    pub status: &'static str,
}

type Latency = Family<Route, Histogram, fn() -> Histogram>;

/// Every metric the process keeps.
pub struct Metrics {
    registry: Registry,
    /// Operations started and not yet ended.
    pub operations_open: Gauge,
    /// Operations ended: by settle reason, `failed` (prepare failed, closed unsettled) or
    /// `links` (the links path returned them unsettled).
    pub operations_settled: Family<Reason, Counter>,
    /// Tool-gateway calls, by route and outcome (a call includes its pages and its retry).
    pub tool_gateway_requests: Family<RouteOutcome, Counter>,
    /// How long tool-gateway calls took, by route.
    pub tool_gateway_latency: Latency,
    /// JSON-RPC transports open (stdio and accepted connections).
    pub transports_open: Gauge,
    /// Bytes of answers and events queued for JSON-RPC transports, not yet written.
    pub queued_output_bytes: Gauge,
    /// Runs started.
    pub runs_started: Counter,
    /// Runs ended, by terminal status.
    pub runs_finished: Family<Status, Counter>,
    /// Runs started and not yet terminal.
    pub runs_active: Gauge,
    /// Agent commands (`--agent-cmd`) running.
    pub agent_commands_running: Gauge,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let metrics = Metrics {
            operations_open: Gauge::default(),
            operations_settled: Family::default(),
            tool_gateway_requests: Family::default(),
            tool_gateway_latency: Family::new_with_constructor(latency_histogram),
            transports_open: Gauge::default(),
            queued_output_bytes: Gauge::default(),
            runs_started: Counter::default(),
            runs_finished: Family::default(),
            runs_active: Gauge::default(),
            agent_commands_running: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "connop_operations_open",
            "Connection operations started and not yet ended",
            metrics.operations_open.clone(),
        );
        registry.register(
            "connop_operations_settled",
            "Connection operations ended, by settle reason (failed: prepare failed; links: returned unsettled)",
            metrics.operations_settled.clone(),
        );
        registry.register(
            "connop_tool_gateway_requests",
            "Tool-gateway calls, by route and outcome",
            metrics.tool_gateway_requests.clone(),
        );
        registry.register(
            "connop_tool_gateway_request_duration_seconds",
            "How long tool-gateway calls took, by route",
            metrics.tool_gateway_latency.clone(),
        );
        registry.register(
            "connop_transports_open",
            "JSON-RPC transports open",
            metrics.transports_open.clone(),
        );
        registry.register(
            "connop_transport_queued_output_bytes",
            "Bytes queued for JSON-RPC transports and not yet written",
            metrics.queued_output_bytes.clone(),
        );
        registry.register(
            "connop_runs_started",
            "Runs started",
            metrics.runs_started.clone(),
        );
        registry.register(
            "connop_runs",
            "Runs ended, by terminal status",
            metrics.runs_finished.clone(),
        );
        registry.register(
            "connop_runs_active",
            "Runs started and not yet terminal",
            metrics.runs_active.clone(),
        );
        registry.register(
            "connop_agent_commands_running",
            "Agent commands (--agent-cmd) running",
            metrics.agent_commands_running.clone(),
        );
        // Every series a dashboard expects is there from the start, at zero.
        let settled = SettleReason::ALL.map(SettleReason::as_str);
        for reason in settled.into_iter().chain([ENDED_FAILED, ENDED_LINKS]) {
            let _ = metrics.operations_settled.get_or_create(&Reason { reason });
        }
        for route in GatewayRoute::ALL.map(GatewayRoute::name) {
            let _ = metrics.tool_gateway_requests.get_or_create(&RouteOutcome {
                route,
                outcome: OUTCOME_OK,
            });
            let _ = metrics.tool_gateway_latency.get_or_create(&Route { route });
        }
        for status in RunStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            let status = status.as_str();
            let _ = metrics.runs_finished.get_or_create(&Status { status });
        }
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Counts one tool-gateway call.
    pub fn tool_gateway_call(&self, route: &'static str, outcome: &'static str, took: Duration) {
        self.tool_gateway_requests
            .get_or_create(&RouteOutcome { route, outcome })
            .inc();
        self.tool_gateway_latency
            .get_or_create(&Route { route })
            .observe(took.as_secs_f64());
    }

    /// Counts one ended operation.
    pub fn operation_ended(&self, reason: &'static str) {
        self.operations_open.dec();
        self.operations_settled
            .get_or_create(&Reason { reason })
            .inc();
    }

    /// Counts one run that reached a terminal status.
    pub fn run_finished(&self, status: &'static str) {
        self.runs_active.dec();
        self.runs_finished.get_or_create(&Status { status }).inc();
    }
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Every metric in the Prometheus text format (version 0.0.4).
pub fn encode() -> String {
    let mut text = String::new();
    // Writing into a String cannot fail; an encoder error would leave what was written.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics().registry);
    text
}
