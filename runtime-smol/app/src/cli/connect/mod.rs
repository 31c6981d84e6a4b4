//! `connop connect` and `connop connectors` (docs/operating.md#command-line and #connop-connect):
//! one operation from a terminal, on the card path (surface `tui`), in named steps: the tool
//! gateway set-up and the check of the names against its list, the card drawn on stderr (`card`,
//! `screen`), the keys read from stdin (`keys`), SIGINT/SIGTERM watched, and at the end a summary
//! (or the model result with `--json`) on stdout and the exit status (`outcome`).

pub mod card;
mod keys;
pub mod outcome;
pub mod returns;
mod screen;

use super::{choose_for_person, print_stdout, profile, uses_embedded, watch};
use crate::error::{AppError, UpstreamError};
use crate::escape::{Lines, escape_controls};
use crate::sync::random_hex;
use crate::telemetry::manage_connections;
use async_signal::Signal;
use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::{OperationOptions, Surface};
use connop_core::operation::Text;
use connop_core::tool_gateway::{
    AsyncToolGateway, ConnectorRow, GatewayCall, GatewayReply, GatewayRoute, SIMULATED_CATALOG,
};
use futures_lite::StreamExt;
use outcome::{
    EXIT_FAILED, InterruptCause, RecordingToolGateway, check_names, exit_status, gateway_failure,
    summary,
};
use screen::{RestoreOnDrop, Screen};
use serde_json::{Value, json};
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// Options of `connop connect`.
pub struct ConnectOptions {
    /// The connectors to connect.
    pub names: Vec<String>,
    /// Reconnect (repair) instead of connect.
    pub reconnect: bool,
    /// With reconnect: always mint anew.
    pub force: bool,
    /// The operation's tick, deadline and local catalog.
    pub options: OperationOptions,
    /// Print the model result as one compact JSON line instead of the summary.
    pub json: bool,
    /// For the embedded simulated tool gateway: accounts complete by themselves after this
    /// long.
    pub sim_auto: Option<Duration>,
}

/// Runs one operation from a terminal: the names checked against the tool gateway's list
/// first (an unknown one is a usage error, and nothing is minted), then a live card on
/// stderr (one line per change when stderr is not a terminal), keys from stdin in raw mode
/// (a row number skips that row, `c` continues, `q` or Ctrl-C interrupts; SIGINT/SIGTERM
/// interrupt too). At the end, one summary line per target on stdout, or the model result
/// JSON with `--json`. Returns the exit status of docs/operating.md#connop-connect.
pub fn run_connect(options: ConnectOptions) -> Result<u8, AppError> {
    let loopback_return = returns::requested()?;
    if uses_embedded() {
        // The embedded tool gateway lists its catalog: the names are checked before it starts,
        // so that a usage error comes before anything listens.
        let listed: Vec<ConnectorRow> = SIMULATED_CATALOG
            .iter()
            .map(|name| ConnectorRow::new(name, true, false))
            .collect();
        check_names(&options.names, &listed, &options.options.local_catalog)?;
    }
    let tool_gateway = choose_for_person(options.sim_auto)?;
    let recording = RecordingToolGateway::new(tool_gateway.client.clone());
    let client: Arc<dyn AsyncToolGateway> = recording.clone();
    let rows = smol::block_on(client.call(GatewayCall::List { timeout: None }))
        .and_then(GatewayReply::into_connectors)
        .map_err(|error| gateway_failure(&tool_gateway.url, GatewayRoute::List, error))?;
    check_names(&options.names, &rows, &options.options.local_catalog)?;
    tool_gateway.announce();

    let registry = SharedRegistry::new(profile());
    let session_key = format!("connect-{}", random_hex(6));
    let interrupt = Interrupt::new();
    let cause = InterruptCause::default();
    let screen = Screen::new();
    let mut ctx: ToolContext<dyn AsyncToolGateway> =
        ToolContext::new(registry.clone(), &session_key, client);
    ctx.surface = Surface::Tui;
    ctx.events = Some(screen.events());
    ctx.options = options.options.clone();
    ctx.interrupt = Some(interrupt.clone());
    // The browser's way back (docs/contract.md#return-hints): each return reads the rows at once.
    let returns = returns::start_if_wanted(
        loopback_return || tool_gateway.embedded.is_some(),
        &registry,
        &session_key,
    );
    ctx.return_to = returns.as_ref().map(|r| Text::from(r.url()));

    let restore = RestoreOnDrop(screen.clone());
    let raw = keys::read_keys(screen.clone(), registry, &session_key, &interrupt, &cause)?;
    screen.keys_readable(raw.is_some());
    let args = tool_args(&options);
    let result = smol::block_on(run_operation(&args, &ctx, &screen, &interrupt, &cause))?;
    screen.finish();
    drop(restore);
    drop(raw);
    let status = exit_status(&result, cause.exit_status());
    let failed = result.get("error").is_some() && status == EXIT_FAILED;
    if options.json {
        print_stdout("the result", &result.to_string())?;
    } else if result.get("error").is_none() {
        let model = screen.model();
        let model = model.lock().unwrap_or_else(|p| p.into_inner());
        let lines = summary(&result, |name| model.last_live_state(name));
        print_stdout("the summary", &lines.join("\n"))?;
    }
    // The embedded tool gateway stops only now: links stayed valid until the end.
    drop(tool_gateway.embedded);
    drop(returns);
    if failed {
        return Err(match recording.first_failure() {
            Some((route, error)) => gateway_failure(&tool_gateway.url, route, error).into(),
            None => UpstreamError::Operation {
                reason: result["error"].as_str().unwrap_or_default().to_owned(),
            }
            .into(),
        });
    }
    Ok(status)
}

/// `connop connectors`: the tool gateway's connectors with their connected state, one per
/// line, or `{"connectors": [rows verbatim]}` with `--json`.
pub fn run_connectors(json: bool) -> Result<u8, AppError> {
    let tool_gateway = choose_for_person(None)?;
    let rows = smol::block_on(
        tool_gateway
            .client
            .clone()
            .call(GatewayCall::List { timeout: None }),
    )
    .and_then(GatewayReply::into_connectors)
    .map_err(|error| gateway_failure(&tool_gateway.url, GatewayRoute::List, error))?;
    let text = if json {
        let raw: Vec<&Value> = rows.iter().map(|r| &r.raw).collect();
        json!({ "connectors": raw }).to_string()
    } else {
        // Names and reasons are the tool gateway's: shown on one line, controls escaped.
        let shown = |text: &str| escape_controls(text, Lines::One).into_owned();
        let names: Vec<String> = rows.iter().map(|r| shown(&r.connector)).collect();
        let width = names.iter().map(|n| n.chars().count()).max();
        let width = width.unwrap_or(0);
        let lines: Vec<String> = rows
            .iter()
            .zip(&names)
            .map(|(row, name)| {
                let state = if row.connected {
                    "connected"
                } else if !row.enabled {
                    "not enabled"
                } else {
                    "not connected"
                };
                let mut line = format!("{name:<width$}  {state}");
                if let Some(reason) = row.status_reason.as_deref().filter(|_| !row.connected) {
                    line.push_str(": ");
                    line.push_str(&shown(reason));
                }
                line
            })
            .collect();
        lines.join("\n")
    };
    print_stdout("the connectors", &text)?;
    if tool_gateway.embedded.is_some() {
        // Not `eprintln!`: a stderr nobody reads changes no exit status.
        let _ = writeln!(
            std::io::stderr(),
            "CONNECTOR_GATEWAY_URL is unset: each command starts its own simulated tool gateway, \
             with nothing connected by an earlier command"
        );
    }
    Ok(0)
}

/// The tool arguments of the operation.
fn tool_args(options: &ConnectOptions) -> Value {
    let action = if options.reconnect {
        "reconnect"
    } else {
        "connect"
    };
    json!({"action": action, "connectors": options.names, "force": options.force})
}

/// Runs the operation to its result, with SIGINT, SIGTERM or SIGHUP (the terminal closed)
/// interrupting it (their cause kept for the exit status) and, on a terminal, the card
/// redrawn every second (its time bar moves).
async fn run_operation(
    args: &Value,
    ctx: &ToolContext<dyn AsyncToolGateway>,
    screen: &Screen,
    interrupt: &Interrupt,
    cause: &InterruptCause,
) -> Result<Value, AppError> {
    let mut signals = watch(&[Signal::Term, Signal::Int, Signal::Hup])?;
    let (stop, cause) = (interrupt.clone(), cause.clone());
    let _signals = smol::spawn(async move {
        if let Some(signal) = signals.next().await {
            match signal {
                Ok(Signal::Term) => cause.terminated(),
                Ok(Signal::Hup) => cause.hung_up(),
                _ => cause.keyboard(),
            }
            stop.trigger();
        }
    });
    let _redraw = screen.redraw_every_second();
    Ok(manage_connections(args, ctx).await.to_value())
}
