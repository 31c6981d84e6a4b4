//! What the `connop` subcommands do, behind the command-line parsing of `src/bin/connop.rs`.

use super::rpc::transport::serve;
use super::rpc::{Gateway, GatewayConfig};
use super::sim_gateway::{SimOptions, SimToolGateway};
use crate::http::AsyncHttpToolGateway;
use connop_blocking::clock::random_hex;
use connop_blocking::sync::Count;
use connop_core::operation::Text;
use connop_core::tool_gateway::AsyncToolGateway;
use connop_core::wire::ClientConfig;
use futures_lite::StreamExt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a gateway listens: `unix:PATH` or `tcp:HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A unix socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl std::str::FromStr for ListenAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/tmp/connop.sock".into());
            }
            return Ok(ListenAddr::Unix(path.into()));
        }
        if let Some(addr) = s.strip_prefix("tcp:") {
            return addr
                .parse()
                .map(ListenAddr::Tcp)
                .map_err(|_| format!("'{addr}' is not HOST:PORT, e.g. tcp:127.0.0.1:7777"));
        }
        Err(format!("'{s}' is neither unix:PATH nor tcp:HOST:PORT"))
    }
}

/// The tool gateway to use, and the embedded simulated one if it had to be started.
pub struct ToolGateway {
    /// The client.
    pub gateway: Arc<dyn AsyncToolGateway>,
    /// The embedded simulated gateway, kept alive while the command runs.
    pub embedded: Option<SimToolGateway>,
}

/// `CONNECTOR_GATEWAY_URL`/`CONNECTOR_GATEWAY_TOKEN`, or, when the URL is unset, the embedded
/// simulated tool gateway with a fresh random token (announced on stderr with its address).
pub fn tool_gateway(auto_complete: Option<Duration>) -> Result<ToolGateway, String> {
    let url = std::env::var("CONNECTOR_GATEWAY_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    let token = std::env::var("CONNECTOR_GATEWAY_TOKEN").ok();
    match url {
        Some(url) => {
            if token.as_deref().is_none_or(|t| t.trim().is_empty()) {
                eprintln!(
                    "connop: CONNECTOR_GATEWAY_TOKEN is unset: every call to {url} will fail without being sent"
                );
            }
            let client = AsyncHttpToolGateway::new(ClientConfig::new(url, token))
                .map_err(|e| e.to_string())?;
            Ok(ToolGateway {
                gateway: Arc::new(client),
                embedded: None,
            })
        }
        None => {
            let token = random_hex(16);
            let mut options = SimOptions::default().token(token.clone());
            if let Some(after) = auto_complete {
                options = options.auto_complete(after);
            }
            let sim = SimToolGateway::start(options)
                .map_err(|e| format!("cannot start the simulated gateway: {e}"))?;
            eprintln!(
                "connop: CONNECTOR_GATEWAY_URL is unset: using the embedded simulated tool gateway"
            );
            eprintln!("listening {}", sim.url());
            let client = AsyncHttpToolGateway::new(ClientConfig::new(sim.url(), Some(token)))
                .map_err(|e| e.to_string())?;
            Ok(ToolGateway {
                gateway: Arc::new(client),
                embedded: Some(sim),
            })
        }
    }
}

/// The profile: `CONNOP_HOME`, else `~/.connop`.
pub fn profile() -> Text {
    match std::env::var("CONNOP_HOME") {
        Ok(home) if !home.is_empty() => home.into(),
        _ => {
            let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
            format!("{home}/.connop").into()
        }
    }
}

/// Options of `connop gateway`.
pub struct GatewayOptions {
    /// Serve stdio (also when neither a listener nor the HTTP API is asked for).
    pub stdio: bool,
    /// Listeners.
    pub listen: Vec<ListenAddr>,
    /// The HTTP API of runs and sessions, if asked for.
    pub http: Option<(SocketAddr, super::api::ApiConfig)>,
    /// Operation timings and catalog.
    pub config: GatewayConfig,
}

type Tasks = Arc<Mutex<Vec<smol::Task<()>>>>;

/// Runs the gateway until SIGINT, SIGTERM, or EOF of stdin when stdio is a transport; then
/// settles every open operation `interrupt`, answers every pending manage, and returns.
pub fn run_gateway(options: GatewayOptions) -> Result<(), String> {
    smol::block_on(async move {
        let gateway = Gateway::new(options.config);
        let in_flight = Arc::new(Count::default());
        let connections: Tasks = Arc::default();
        let mut listeners = Vec::new();
        for addr in &options.listen {
            listeners.push(listen(addr, &gateway, &in_flight, &connections).await?);
        }
        let api = match options.http {
            Some((addr, config)) => {
                let api = super::api::Api::open(config)?;
                let listener = smol::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
                let bound = listener.local_addr().map_err(|e| e.to_string())?;
                eprintln!("listening http://{bound}");
                listeners.push(smol::spawn(api.clone().serve(listener)));
                Some(api)
            }
            None => None,
        };
        let stdio = options.stdio || (options.listen.is_empty() && api.is_none());
        let mut signals =
            async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int])
                .map_err(|e| format!("cannot watch signals: {e}"))?;
        let mut stdio_task = stdio.then(|| {
            let (gateway, in_flight) = (gateway.clone(), in_flight.clone());
            smol::spawn(serve(
                gateway,
                in_flight,
                smol::Unblock::new(std::io::stdin()),
                smol::Unblock::new(std::io::stdout()),
            ))
        });
        // EOF of stdin ends the stdio transport, and with it the gateway. The race borrows the
        // task: dropping it would cancel its last answers.
        let stdio_ended = match stdio_task.as_mut() {
            Some(task) => {
                futures_lite::future::or(
                    async {
                        task.await;
                        true
                    },
                    async {
                        signals.next().await;
                        false
                    },
                )
                .await
            }
            None => {
                signals.next().await;
                false
            }
        };
        // Runs first (SPEC §9.1: marked interrupted, streams told), then operations.
        if let Some(api) = &api {
            api.shut_down(Duration::from_millis(400)).await;
        }
        gateway.shut_down();
        for listener in listeners {
            drop(listener);
        }
        let mut pending: Vec<smol::Task<()>> =
            std::mem::take(&mut *connections.lock().unwrap_or_else(|p| p.into_inner()));
        if !stdio_ended {
            pending.extend(stdio_task);
        }
        let drained = async {
            for task in pending {
                task.await;
            }
            in_flight.wait_zero().await;
        };
        // Every pending answer goes out; the process leaves within a second regardless.
        futures_lite::future::or(drained, async {
            smol::Timer::after(Duration::from_millis(900)).await;
        })
        .await;
        Ok(())
    })
}

async fn listen(
    addr: &ListenAddr,
    gateway: &Arc<Gateway>,
    in_flight: &Arc<Count>,
    connections: &Tasks,
) -> Result<smol::Task<()>, String> {
    let (gateway, in_flight, connections) =
        (gateway.clone(), in_flight.clone(), connections.clone());
    match addr {
        ListenAddr::Tcp(addr) => {
            let listener = smol::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on tcp:{addr}: {e}"))?;
            let bound = listener.local_addr().map_err(|e| e.to_string())?;
            eprintln!("listening tcp://{bound}");
            Ok(smol::spawn(async move {
                accept_all(listener.incoming(), gateway, in_flight, connections).await;
            }))
        }
        ListenAddr::Unix(path) => {
            // A socket file left by an earlier run would make bind fail.
            if std::fs::metadata(path).is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_socket()
            }) {
                let _ = std::fs::remove_file(path);
            }
            let listener = smol::net::unix::UnixListener::bind(path)
                .map_err(|e| format!("cannot listen on unix:{}: {e}", path.display()))?;
            eprintln!("listening unix://{}", path.display());
            Ok(smol::spawn(async move {
                accept_all(listener.incoming(), gateway, in_flight, connections).await;
            }))
        }
    }
}

/// Serves every accepted connection as its own transport until the listener fails.
async fn accept_all<S>(
    mut incoming: impl futures_lite::Stream<Item = std::io::Result<S>> + Unpin,
    gateway: Arc<Gateway>,
    in_flight: Arc<Count>,
    connections: Tasks,
) where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Clone + Unpin + Send + 'static,
{
    while let Some(Ok(stream)) = incoming.next().await {
        let task = smol::spawn(serve(
            gateway.clone(),
            in_flight.clone(),
            stream.clone(),
            stream,
        ));
        let mut connections = connections.lock().unwrap_or_else(|p| p.into_inner());
        // Only live connections are kept for shutdown: a finished one's task is dropped here,
        // or every connection ever served would stay allocated.
        connections.retain(|task| !task.is_finished());
        connections.push(task);
    }
}

/// Runs the simulated tool gateway on its own until SIGINT or SIGTERM.
pub fn run_sim_gateway(options: SimOptions) -> Result<(), String> {
    smol::block_on(async move {
        let (server, listener) = super::sim_gateway::SimServer::bind(&options)
            .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
        eprintln!("listening {}", server.url());
        let mut signals =
            async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int])
                .map_err(|e| format!("cannot watch signals: {e}"))?;
        futures_lite::future::or(server.serve(listener), async {
            signals.next().await;
        })
        .await;
        Ok(())
    })
}

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
    /// For the embedded simulated gateway: accounts complete by themselves after this long.
    pub sim_auto: Option<Duration>,
}

/// Runs one operation from a terminal (surface `tui`): a live card on stderr (one line per
/// change when stderr is not a terminal), keys from stdin in raw mode (a row number skips
/// that row, `c` continues, `q` or Ctrl-C interrupts; SIGINT/SIGTERM interrupt too), and the
/// model result JSON on stdout at the end.
pub fn run_connect(options: ConnectOptions) -> Result<(), String> {
    use super::card::{
        CardAction, CardModel, EscapeFilter, RawMode, redraw_sequence, stderr_is_terminal,
        terminal_width,
    };
    use connop_blocking::{Interrupt, ToolContext};
    use connop_core::flow::{Event, Surface};
    use std::io::Write as _;

    let tool = tool_gateway(options.sim_auto)?;
    let registry = connop_blocking::SharedRegistry::new(profile());
    let session_key = format!("connect-{}", random_hex(6));
    let interrupt = Interrupt::new();
    let model = Arc::new(Mutex::new(CardModel::new()));
    let live = stderr_is_terminal();
    let drawn = Arc::new(Mutex::new(0usize));
    let clock = connop_blocking::SystemClock::new();

    let draw = {
        let (model, drawn) = (model.clone(), drawn.clone());
        move || {
            let model = model.lock().unwrap_or_else(|p| p.into_inner());
            let lines = model.render(clock.now(), terminal_width());
            let mut drawn = drawn.lock().unwrap_or_else(|p| p.into_inner());
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(redraw_sequence(&lines, *drawn).as_bytes());
            let _ = err.flush();
            *drawn = lines.len();
        }
    };
    let events: connop_blocking::EventSink = {
        let (model, draw) = (model.clone(), draw.clone());
        Arc::new(move |event: &Event| {
            let fresh = model.lock().unwrap_or_else(|p| p.into_inner()).apply(event);
            if !fresh {
                return;
            }
            if live {
                draw();
            } else if let Some(line) = super::card::change_line(event) {
                // A closed stderr (its reader went away) must not panic the operation.
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        })
    };

    let action = if options.reconnect {
        "reconnect"
    } else {
        "connect"
    };
    let args =
        serde_json::json!({"action": action, "connectors": options.names, "force": options.force});
    let mut ctx: ToolContext<dyn AsyncToolGateway> =
        ToolContext::new(registry.clone(), &session_key, tool.gateway.clone());
    ctx.surface = Surface::Tui;
    ctx.events = Some(events);
    ctx.tick = options.tick;
    ctx.deadline = options.deadline;
    ctx.local_catalog = options.catalog;
    ctx.interrupt = Some(interrupt.clone());

    // Keys: raw mode on a terminal; the reading thread stays blocked in read() until exit.
    let raw = RawMode::enter();
    if raw.is_some() {
        let (model, registry, interrupt, key) = (
            model.clone(),
            registry.clone(),
            interrupt.clone(),
            session_key.clone(),
        );
        std::thread::Builder::new()
            .name("connop-keys".into())
            .spawn(move || {
                use std::io::Read as _;
                let mut filter = EscapeFilter::new();
                let mut stdin = std::io::stdin().lock();
                let mut byte = [0u8; 1];
                while stdin.read(&mut byte).is_ok_and(|n| n == 1) {
                    let Some(byte) = filter.feed(byte[0]) else {
                        continue;
                    };
                    let action = model
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .action_for(byte);
                    match action {
                        Some(CardAction::Interrupt) => interrupt.trigger(),
                        Some(action) => {
                            if let (Some(op), Some(answer)) =
                                (registry.current(&key), action.to_answer())
                            {
                                let _ = op.respond(&answer);
                            }
                        }
                        None => {}
                    }
                }
            })
            .map_err(|e| format!("cannot read keys: {e}"))?;
    }

    let result = smol::block_on(async {
        let mut signals =
            async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int])
                .map_err(|e| format!("cannot watch signals: {e}"))?;
        let stop = interrupt.clone();
        let watch_signals = smol::spawn(async move {
            if signals.next().await.is_some() {
                stop.trigger();
            }
        });
        let redraw = live.then(|| {
            let draw = draw.clone();
            smol::spawn(async move {
                loop {
                    smol::Timer::after(Duration::from_secs(1)).await;
                    draw();
                }
            })
        });
        let result = crate::driver::manage_connections(&args, &ctx).await;
        drop(redraw);
        drop(watch_signals);
        Ok::<_, String>(result)
    })?;
    if live {
        draw();
    }
    drop(raw);
    let text = if options.json {
        result.to_string()
    } else {
        serde_json::to_string_pretty(&result).unwrap_or_default()
    };
    // Not `println!`: a stdout whose reader went away is an error exit, not a panic.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write the result: {e}"))?;
    drop(tool);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse_with_clear_errors() {
        assert_eq!(
            "unix:/tmp/x.sock".parse(),
            Ok(ListenAddr::Unix("/tmp/x.sock".into()))
        );
        assert_eq!(
            "tcp:127.0.0.1:0".parse(),
            Ok(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()))
        );
        assert!(
            "tcp:localhost"
                .parse::<ListenAddr>()
                .unwrap_err()
                .contains("HOST:PORT")
        );
        assert!(
            "udp:1"
                .parse::<ListenAddr>()
                .unwrap_err()
                .contains("neither")
        );
        assert!("unix:".parse::<ListenAddr>().is_err());
    }
}
