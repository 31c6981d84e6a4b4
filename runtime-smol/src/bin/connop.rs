//! `connop`: connection operations for AI-agent gateways, from the command line.

use clap::{Args, Parser, Subcommand};
use connop_core::operation::Text;
use connop_fixtures::sim_gateway::SimOptions;
use connop_smol::gateway::GatewayConfig;
use connop_smol::gateway::commands::{self, ConnectOptions, GatewayOptions, ListenAddr};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "connop",
    version,
    about = "Connection operations for AI-agent gateways: connect accounts through a tool gateway, settle exactly once.",
    after_help = "Environment:\n  CONNECTOR_GATEWAY_URL    the tool gateway's origin; unset: an embedded simulated gateway is started\n  CONNECTOR_GATEWAY_TOKEN  its bearer token\n  CONNOP_HOME              where state lives (default ~/.connop)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the JSON-RPC gateway protocol on stdio and/or unix and TCP listeners.
    ///
    /// One JSON object per line. Each transport (stdio, or one accepted connection) owns the
    /// sessions it creates; requests on a transport are served concurrently. SIGINT, SIGTERM,
    /// or EOF of stdin (when stdio is served) settle every open operation `interrupt`, answer
    /// every pending request, and exit 0.
    Gateway(GatewayArgs),
    /// Connect accounts from this terminal: one operation with a live card.
    ///
    /// The card shows each connector's state, link and detail, and the time left. Open a link
    /// to authorize; press a row number to skip that row, `c` to continue with what is
    /// connected, `q` or Ctrl-C to stop. Off a terminal, one line per change goes to stderr.
    /// The result JSON is printed on stdout at the end.
    Connect(ConnectArgs),
    /// Run the simulated tool gateway on its own (the API of the hosted tool gateway, with
    /// consent pages at /connect/<id> and test controls under /sim/).
    SimGateway(SimArgs),
}

#[derive(Args)]
struct Timings {
    /// Seconds until an operation settles `deadline`.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 300.0,
        env = "CONNOP_DEADLINE"
    )]
    deadline: f64,
    /// Seconds between two account reads of the watcher.
    #[arg(long, value_name = "SECS", default_value_t = 1.0, env = "CONNOP_TICK")]
    tick: f64,
    /// Names the local MCP catalog serves (comma-separated): a failed mint of one of these
    /// that the gateway does not list is reported as a local MCP server, not an account.
    #[arg(
        long,
        value_name = "A,B",
        value_delimiter = ',',
        env = "CONNOP_MCP_CATALOG"
    )]
    mcp_catalog: Vec<String>,
}

#[derive(Args)]
struct GatewayArgs {
    /// Serve stdio (the default when no --listen is given).
    #[arg(long)]
    stdio: bool,
    /// Also listen on unix:PATH or tcp:HOST:PORT (repeatable; port 0 picks one). Each accepted
    /// connection is its own transport. Prints `listening <scheme>://<addr>` once bound.
    #[arg(long, value_name = "ADDR")]
    listen: Vec<ListenAddr>,
    #[command(flatten)]
    timings: Timings,
}

#[derive(Args)]
struct ConnectArgs {
    /// Connector slugs, e.g. gmail notion.
    #[arg(required = true, value_name = "NAMES")]
    names: Vec<String>,
    /// Repair existing connections (connected ones are kept, the rest minted anew).
    #[arg(long)]
    reconnect: bool,
    /// With --reconnect: mint every connector anew, connected or not.
    #[arg(long, requires = "reconnect")]
    force: bool,
    /// Print the result as one compact JSON line.
    #[arg(long)]
    json: bool,
    /// With the embedded simulated gateway: accounts complete by themselves after SECS.
    #[arg(long, value_name = "SECS")]
    sim_auto: Option<f64>,
    #[command(flatten)]
    timings: Timings,
}

#[derive(Args)]
struct SimArgs {
    /// Address to listen on. Prints `listening http://<addr>` once bound.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Accounts become active by themselves this many seconds after their mint.
    #[arg(long, value_name = "SECS")]
    auto_complete: Option<f64>,
    /// Require this bearer token on every API route.
    #[arg(long, value_name = "T")]
    token: Option<String>,
}

fn seconds(name: &str, secs: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("--{name} must be a non-negative number of seconds, not {secs}"))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Gateway(args) => {
            // Flags first: nothing starts on a bad one.
            let tick = seconds("tick", args.timings.tick)?;
            let deadline = seconds("deadline", args.timings.deadline)?;
            let tool = commands::tool_gateway(None)?;
            let config = GatewayConfig {
                gateway: tool.gateway.clone(),
                profile: commands::profile(),
                tick,
                deadline,
                catalog: args
                    .timings
                    .mcp_catalog
                    .iter()
                    .map(|s| Text::from(s.trim()))
                    .collect(),
            };
            commands::run_gateway(GatewayOptions {
                stdio: args.stdio,
                listen: args.listen,
                config,
            })
        }
        Command::Connect(args) => {
            if args.sim_auto.is_some() && std::env::var_os("CONNECTOR_GATEWAY_URL").is_some() {
                return Err("--sim-auto applies to the embedded simulated gateway; unset CONNECTOR_GATEWAY_URL".into());
            }
            commands::run_connect(ConnectOptions {
                names: args.names,
                reconnect: args.reconnect,
                force: args.force,
                deadline: seconds("deadline", args.timings.deadline)?,
                tick: seconds("tick", args.timings.tick)?,
                catalog: args
                    .timings
                    .mcp_catalog
                    .iter()
                    .map(|s| Text::from(s.trim()))
                    .collect(),
                json: args.json,
                sim_auto: args.sim_auto.map(|s| seconds("sim-auto", s)).transpose()?,
            })
        }
        Command::SimGateway(args) => {
            let mut options = SimOptions::default().listen(args.listen);
            if let Some(secs) = args.auto_complete {
                options = options.auto_complete(seconds("auto-complete", secs)?);
            }
            if let Some(token) = args.token {
                options = options.token(token);
            }
            commands::run_sim_gateway(options)
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("connop: {message}");
            ExitCode::FAILURE
        }
    }
}
