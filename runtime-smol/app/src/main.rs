//! `connop`: connection operations for AI-agent gateways, from the command line.

use clap::{Args, Parser, Subcommand};
use connop_app::api::executor::TurnExecutor;
use connop_app::api::{ApiConfig, DEFAULT_MAX_BODY};
use connop_app::cli::connect::{ConnectOptions, run_connect, run_connectors};
use connop_app::cli::listen::{ListenAddr, host_port};
use connop_app::cli::peer::{DmOptions, peer_dm};
use connop_app::cli::serve::{ServeOptions, check_exposure, check_sim_exposure, serve};
use connop_app::cli::sim_gateway::run_sim_tool_gateway;
use connop_app::cli::{lease, profile, seconds, tick, watch_signals};
use connop_app::error::{AppError, UsageError};
use connop_app::escape::{Lines, escape_controls};
use connop_app::net::guard::host_name;
use connop_app::rpc::{DEFAULT_MAX_OUTPUT, RpcConfig};
use connop_app::sim_gateway::SimOptions;
use connop_app::store::Database;
use connop_app::store::postgres::{DEFAULT_POOL_SIZE, PgOptions};
use connop_app::telemetry::{LogFormat, init_logging};
use connop_core::flow::OperationOptions;
use connop_core::operation::Text;
use std::io::IsTerminal as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// The variables every command reads, shown under each command's help.
const ENVIRONMENT: &str = "Environment:\n  CONNECTOR_GATEWAY_URL    the tool gateway's origin; unset: an embedded simulated gateway is started\n  CONNECTOR_GATEWAY_TOKEN  its bearer token (with the URL unset: the embedded gateway's, /sim/* included)\n  CONNOP_HOME              where state lives (default ~/.connop)\n  CONNOP_DATABASE_URL      gateway --http: sessions and runs in PostgreSQL, shared by replicas\n  CONNOP_RETURN_URL        connect: `loopback` serves a return URL on 127.0.0.1 for a hosted tool gateway too (always with the embedded one)\n  RUST_LOG                 what is logged on stderr (default info; warn for connect's card on a terminal)";

#[derive(Parser)]
#[command(
    name = "connop",
    version,
    about = "Connection operations for AI-agent gateways: connect accounts through a tool gateway, settle exactly once.",
    after_help = ENVIRONMENT
)]
struct Cli {
    /// The shape of log lines on stderr: `text` or `json` (one object per line). RUST_LOG
    /// says what is logged (default `info`).
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "CONNOP_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the JSON-RPC gateway protocol on stdio and/or unix and TCP listeners.
    ///
    /// One JSON object per line. Each transport (stdio, or one accepted connection) owns the
    /// sessions it creates; requests on a transport are served concurrently. SIGINT, SIGTERM,
    /// SIGHUP, or EOF of stdin (when stdio is served) settle every open operation
    /// `interrupt`, answer every pending request, end the active runs and their agent
    /// commands, and exit 0. Once everything is bound, each server says
    /// `listening <scheme>://<addr>` on stderr, in this order: the embedded tool gateway (with
    /// CONNECTOR_GATEWAY_URL unset), each --listen as given, then --http.
    #[command(name = "gateway", after_help = ENVIRONMENT)]
    Serve(ServeArgs),
    /// Connect accounts from this terminal: one operation with a live card.
    ///
    /// The names are checked against the tool gateway's list first. The card shows each
    /// connector's state, link and detail, and the time left. Open a link to authorize; press
    /// a row number to skip that row (past row 9: two digits, or a digit and Enter), `c` to
    /// continue with what is connected, `q` or Ctrl-C to stop. Off a terminal, or with
    /// NO_COLOR or TERM=dumb, one line per change goes to stderr. At the end, one line per
    /// connector on stdout (the result JSON with --json). Exit status: 0 all connected, 3 one
    /// not connected, 1 a tool-gateway failure, 2 a usage error (an unknown connector
    /// included), 130 interrupted from the keyboard or SIGINT, 143 SIGTERM, 129 SIGHUP.
    #[command(after_help = ENVIRONMENT)]
    Connect(ConnectArgs),
    /// List the tool gateway's connectors and whether each one is connected.
    #[command(after_help = ENVIRONMENT)]
    Connectors(ConnectorsArgs),
    /// Talk to other gateways.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Leases: which live process owns a session (CONNOP_HOME/runtime/active_sessions.json).
    ///
    /// A lease marks a viewer, not an executor: the HTTP API never acquires one and is never
    /// refused by one.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Run the simulated tool gateway on its own (the API of the hosted tool gateway, with
    /// consent pages at /connect/{id} and test controls under /sim/).
    #[command(name = "sim-gateway")]
    SimToolGateway(SimArgs),
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
    /// Seconds between two account reads of the watcher (at least 0.01).
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

impl Timings {
    /// The operations' options, built once from the flags: a usage error names a bad one.
    fn options(&self) -> Result<OperationOptions, UsageError> {
        Ok(OperationOptions {
            deadline: seconds("deadline", self.deadline)?,
            tick: tick(self.tick)?,
            local_catalog: self
                .mcp_catalog
                .iter()
                .map(|s| Text::from(s.trim()))
                .collect(),
        })
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Serve stdio (the default when neither --listen nor --http is given).
    #[arg(long)]
    stdio: bool,
    /// Serve the HTTP API of runs, sessions and session chat on HOST:PORT (port 0 picks one;
    /// prints `listening http://<addr>`). State lives in CONNOP_HOME/state.db, or in
    /// PostgreSQL with --database-url.
    #[arg(long, value_name = "HOST:PORT", value_parser = host_port)]
    http: Option<SocketAddr>,
    /// Require `Authorization: Bearer K` on every HTTP route but /health.
    #[arg(long, value_name = "K", env = "CONNOP_API_KEY")]
    api_key: Option<String>,
    /// Refuse HTTP request bodies larger than BYTES with 413.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY)]
    max_body: usize,
    /// Close a JSON-RPC transport whose client leaves more than BYTES of answers and events
    /// unread (its sessions close, their operations settle `interrupt`).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_OUTPUT)]
    max_output: usize,
    /// Allow `--listen tcp:` on an address that is not loopback (the JSON-RPC protocol has
    /// no authentication), and --allow-host names for the HTTP API. An --http API without
    /// --api-key stays on loopback whatever this says: any local process may use it.
    #[arg(long)]
    allow_remote: bool,
    /// With --allow-remote and --api-key: a host name (or address) the HTTP API also answers
    /// to (repeatable). Every request must name the API in its Host: localhost, 127.0.0.1,
    /// `[::1]` or the --http address, any port; any other Host is refused with 421, so a page of
    /// another site that resolves its own name to this machine gets nothing.
    #[arg(long, value_name = "NAME", requires = "allow_remote", value_parser = host_name)]
    allow_host: Vec<String>,
    /// Keep sessions, messages, runs, run events and idempotency keys in PostgreSQL at URL
    /// (postgres://user:password@host:port/database) instead of SQLite in CONNOP_HOME: any
    /// number of gateways may share it, each one replica of the others.
    #[arg(
        long,
        value_name = "URL",
        env = "CONNOP_DATABASE_URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    /// This replica's id on the shared database (default: HOST:PORT, this host's name and the
    /// --http port). A process that starts under the id of a dead one ends that one's
    /// unsettled runs at once.
    #[arg(
        long,
        value_name = "ID",
        env = "CONNOP_REPLICA_ID",
        requires = "database_url"
    )]
    replica_id: Option<String>,
    /// Pooled connections to the shared database, at most.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_POOL_SIZE, env = "CONNOP_DATABASE_POOL")]
    database_pool: usize,
    /// Who answers turns: `echo` (the reply is the message).
    #[arg(long, value_name = "NAME", default_value = "echo", value_parser = ["echo"])]
    agent: String,
    /// Answer each turn with CMD run through `sh -c`: it gets {"session_id", "message",
    /// "history"} as JSON on stdin; its stdout is the reply; a non-zero exit fails the turn
    /// with its stderr; a stop kills it. Overrides --agent.
    #[arg(long, value_name = "CMD")]
    agent_cmd: Option<String>,
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
    /// Print the agent's model result as one JSON line on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// With the embedded simulated gateway: accounts complete by themselves after SECS.
    #[arg(long, value_name = "SECS")]
    sim_auto: Option<f64>,
    #[command(flatten)]
    timings: Timings,
}

#[derive(Args)]
struct ConnectorsArgs {
    /// Print the rows as the tool gateway sends them, as one JSON object on one line.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum PeerCommand {
    /// Send a message into a peer gateway's Bot Chat and print its reply.
    ///
    /// Finds (or creates) the peer's newest session titled `Bot Chat` and posts the message
    /// to it. If the peer has that chat open elsewhere, the message is queued there and
    /// answered there: that is a success, not an empty reply. Exits 1 on a transport or HTTP
    /// failure, with the reason on stderr.
    Dm(DmArgs),
}

#[derive(Subcommand)]
enum LeaseCommand {
    /// Hold a lease on a session until stdin closes or a signal arrives; prints the lease.
    /// Refused (exit 1) when another live process owns the session
    /// (SESSION_NOT_OWNED) or the registry is unreadable (SESSION_COORDINATION_UNAVAILABLE).
    Hold(HoldArgs),
    /// Print the live leases as JSON (dead owners are pruned first).
    List,
}

#[derive(Args)]
struct HoldArgs {
    /// The session to hold.
    session_id: String,
    /// The surface holding it (e.g. desktop).
    #[arg(long, value_name = "S", default_value = "desktop")]
    surface: String,
    /// Metadata to record with the lease, as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    metadata: String,
}

#[derive(Args)]
struct DmArgs {
    /// The peer's name (echoed in the output).
    peer: String,
    /// The message.
    message: String,
    /// The peer gateway's HTTP API origin, e.g. http://127.0.0.1:8642.
    #[arg(long, value_name = "URL")]
    url: String,
    /// The peer's API key.
    #[arg(long, value_name = "K")]
    key: Option<String>,
    /// A profile name, only echoed.
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SimArgs {
    /// Address to listen on. Prints `listening http://<addr>` once bound.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0", value_parser = host_port)]
    listen: SocketAddr,
    /// Accounts become active by themselves this many seconds after their mint.
    #[arg(long, value_name = "SECS")]
    auto_complete: Option<f64>,
    /// Require this bearer token on every /v1 and /sim route (consent pages stay open).
    #[arg(long, value_name = "T")]
    token: Option<String>,
    /// Listen on an address that is not loopback without a --token, and serve --allow-host
    /// names.
    #[arg(long)]
    allow_remote: bool,
    /// With --allow-remote: a host name (or address) the gateway also answers to
    /// (repeatable). Every request must name it in its Host: localhost, 127.0.0.1, `[::1]` or
    /// the --listen address, any port; any other Host is refused with 421.
    #[arg(long, value_name = "NAME", requires = "allow_remote", value_parser = host_name)]
    allow_host: Vec<String>,
}

/// Runs the command; `Ok` carries its exit status.
fn run(cli: Cli) -> Result<u8, AppError> {
    match cli.command {
        Command::Serve(args) => {
            // Flags first: nothing starts on a bad one.
            let options = args.timings.options()?;
            check_exposure(
                &args.listen,
                args.http,
                args.api_key.as_deref().is_some_and(|k| !k.is_empty()),
                args.allow_remote,
                &args.allow_host,
            )?;
            // Before the first `listening` line (the embedded tool gateway's, if any).
            let signals = watch_signals()?;
            let max_output = args.max_output;
            let rpc = Box::new(move |tool_gateway| RpcConfig {
                tool_gateway,
                profile: profile(),
                options,
                max_output,
            });
            let executor = match args.agent_cmd {
                Some(command) => TurnExecutor::Command(command),
                None => TurnExecutor::Echo,
            };
            let database = match args.database_url.as_deref().filter(|u| !u.is_empty()) {
                Some(url) => {
                    let mut options = PgOptions::from_url(url).map_err(UsageError::from)?;
                    options.replica_id = args.replica_id;
                    options.pool_size = args.database_pool;
                    Database::Postgres(Box::new(options))
                }
                None => Database::Sqlite {
                    home: PathBuf::from(&*profile()),
                },
            };
            let http = args.http.map(|addr| {
                let api = ApiConfig {
                    database,
                    api_key: args.api_key,
                    executor,
                    max_body: args.max_body,
                    allow_hosts: args.allow_host,
                };
                (addr, api)
            });
            serve(
                ServeOptions {
                    stdio: args.stdio,
                    listen: args.listen,
                    http,
                    rpc,
                },
                signals,
            )
            .map(|()| 0)
        }
        Command::Connect(args) => {
            if args.sim_auto.is_some() && std::env::var_os("CONNECTOR_GATEWAY_URL").is_some() {
                return Err(UsageError::SimAutoNeedsEmbedded.into());
            }
            run_connect(ConnectOptions {
                names: args.names,
                reconnect: args.reconnect,
                force: args.force,
                options: args.timings.options()?,
                json: args.json,
                sim_auto: args.sim_auto.map(|s| seconds("sim-auto", s)).transpose()?,
            })
        }
        Command::Connectors(args) => run_connectors(args.json),
        Command::Peer(PeerCommand::Dm(args)) => {
            let options = DmOptions {
                peer: args.peer,
                message: args.message,
                url: args.url,
                key: args.key,
                profile: args.profile,
                json: args.json,
            };
            peer_dm(&options, &mut std::io::stdout().lock()).map(|()| 0)
        }
        Command::Lease(LeaseCommand::Hold(args)) => {
            let metadata = lease::metadata(&args.metadata)?;
            let home = PathBuf::from(&*profile());
            lease::hold(&home, &args.session_id, &args.surface, metadata).map(|()| 0)
        }
        Command::Lease(LeaseCommand::List) => {
            lease::print_list(&PathBuf::from(&*profile())).map(|()| 0)
        }
        Command::SimToolGateway(args) => {
            let has_token = args.token.as_deref().is_some_and(|t| !t.is_empty());
            check_sim_exposure(args.listen, has_token, args.allow_remote)?;
            let mut options = SimOptions::default().listen(args.listen);
            if let Some(secs) = args.auto_complete {
                options = options.auto_complete(seconds("auto-complete", secs)?);
            }
            if let Some(token) = args.token {
                options = options.token(token);
            }
            options = options.allow_hosts(args.allow_host);
            run_sim_tool_gateway(options).map(|()| 0)
        }
    }
}

/// The command's exit status (0 on success; `connect` has its own,
/// docs/operating.md#connop-connect); on an error, `connop: <why>` on stderr and the error's exit
/// code (2 for a usage error, as for a flag the parser refuses; 1 otherwise).
fn main() -> ExitCode {
    let cli = Cli::parse();
    // A person at a terminal reads the card, or the list, on stderr and stdout: there, only
    // warnings interrupt it unless RUST_LOG asks for more.
    let for_a_person = matches!(cli.command, Command::Connect(_) | Command::Connectors(_))
        && std::io::stderr().is_terminal();
    let default_filter = if for_a_person { "warn" } else { "info" };
    let started = init_logging(cli.log_format, default_filter)
        .map_err(|e| AppError::from(UsageError::from(e)))
        .and_then(|()| run(cli));
    match started {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            // Not `eprintln!`: with stderr gone the exit code still tells. An error may quote
            // what a peer or a tool gateway sent: shown, never obeyed by the terminal.
            let line = error.to_string();
            let line = escape_controls(&line, Lines::One);
            let _ = writeln!(std::io::stderr(), "connop: {line}");
            ExitCode::from(error.exit_code())
        }
    }
}
