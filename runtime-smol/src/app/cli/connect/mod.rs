//! `connop connect` (SPEC §8): one operation from a terminal, on the card path (surface
//! `tui`), in named steps: the tool gateway set-up, the card drawn on stderr (`screen`),
//! the keys read from stdin (`keys`), SIGINT/SIGTERM watched, and the model result printed
//! on stdout at the end.

pub mod card;
mod keys;
pub mod returns;
mod screen;

use super::{choose_tool_gateway, print_stdout, profile, watch_signals};
use crate::app::error::AppError;
use crate::app::sync::random_hex;
use crate::app::telemetry::manage_connections;
use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::Surface;
use connop_core::operation::Text;
use connop_core::tool_gateway::AsyncToolGateway;
use futures_lite::StreamExt;
use screen::Screen;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// State shared by the screen, the key reader and the operation's events.
type Shared<T> = Arc<std::sync::Mutex<T>>;

/// Options of `connop connect`.
pub struct ConnectOptions {
    /// The connectors to connect.
    pub names: Vec<String>,
    /// Reconnect (repair) instead of connect.
    pub reconnect: bool,
    /// With reconnect: always mint anew.
    pub force: bool,
    /// The operation deadline.
    pub deadline: Duration,
    /// The watcher tick.
    pub tick: Duration,
    /// The local MCP catalog.
    pub catalog: Vec<Text>,
    /// Print the result as one compact JSON line.
    pub json: bool,
    /// For the embedded simulated tool gateway: accounts complete by themselves after this
    /// long.
    pub sim_auto: Option<Duration>,
}

/// Runs one operation from a terminal: a live card on stderr (one line per change when
/// stderr is not a terminal), keys from stdin in raw mode (a row number skips that row, `c`
/// continues, `q` or Ctrl-C interrupts; SIGINT/SIGTERM interrupt too), and the model result
/// JSON on stdout at the end.
pub fn run_connect(options: ConnectOptions) -> Result<(), AppError> {
    let tool_gateway = choose_tool_gateway(options.sim_auto)?;
    let registry = SharedRegistry::new(profile());
    let session_key = format!("connect-{}", random_hex(6));
    let interrupt = Interrupt::new();
    let screen = Screen::new();
    let mut ctx: ToolContext<dyn AsyncToolGateway> =
        ToolContext::new(registry.clone(), &session_key, tool_gateway.client.clone());
    ctx.surface = Surface::Tui;
    ctx.events = Some(screen.events());
    ctx.tick = options.tick;
    ctx.deadline = options.deadline;
    ctx.local_catalog = options.catalog.clone();
    ctx.interrupt = Some(interrupt.clone());
    // The browser's way back (SPEC §12.1): each return reads the rows at once.
    let returns =
        returns::start_if_wanted(tool_gateway.embedded.is_some(), &registry, &session_key);
    ctx.return_to = returns.as_ref().map(|r| Text::from(r.url()));

    let raw = keys::read_keys(screen.model(), registry, &session_key, &interrupt)?;
    let args = tool_args(&options);
    let result = smol::block_on(run_operation(&args, &ctx, &screen, &interrupt))?;
    screen.finish();
    drop(raw);
    print_result(&result, options.json)?;
    // The embedded tool gateway stops only now: links stayed valid until the end.
    drop(tool_gateway);
    drop(returns);
    Ok(())
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

/// Runs the operation to its result, with SIGINT/SIGTERM interrupting it and, on a terminal,
/// the card redrawn every second (its time bar moves).
async fn run_operation(
    args: &Value,
    ctx: &ToolContext<dyn AsyncToolGateway>,
    screen: &Screen,
    interrupt: &Interrupt,
) -> Result<Value, AppError> {
    let mut signals = watch_signals()?;
    let stop = interrupt.clone();
    let _signals = smol::spawn(async move {
        if signals.next().await.is_some() {
            stop.trigger();
        }
    });
    let _redraw = screen.redraw_every_second();
    Ok(manage_connections(args, ctx).await)
}

/// The model result on stdout: pretty, or one compact line with `--json`.
fn print_result(result: &Value, json: bool) -> Result<(), AppError> {
    let text = if json {
        result.to_string()
    } else {
        serde_json::to_string_pretty(result).unwrap_or_default()
    };
    print_stdout("the result", &text)
}
