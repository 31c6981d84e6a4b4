//! `connop gateway`: the JSON-RPC server (docs/protocol.md#overview) on stdio and on listeners, and
//! the HTTP API (docs/http-api.md#overview) when `--http` is given, until a signal or the end of
//! stdin.

use super::listen::{Bound, Connections, ListenAddr, bind};
use super::tool_gateway::choose_tool_gateway;
use crate::api::executor::end_all_agent_commands;
use crate::api::{Api, ApiConfig};
use crate::error::{AppError, EnvironmentError, UsageError};
use crate::rpc::transport::{TransportInfo, serve_transport};
use crate::rpc::{RpcConfig, RpcServer};
use crate::sync::Count;
use async_signal::Signals;
use connop_core::tool_gateway::AsyncToolGateway;
use futures_lite::StreamExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Options of `connop gateway`.
pub struct ServeOptions {
    /// Serve stdio (also when neither a listener nor the HTTP API is asked for).
    pub stdio: bool,
    /// The JSON-RPC server's listeners.
    pub listen: Vec<ListenAddr>,
    /// The HTTP API of runs and sessions, if asked for.
    pub http: Option<(SocketAddr, ApiConfig)>,
    /// How the JSON-RPC server runs operations, given the tool gateway (chosen, and the
    /// embedded one started, only once every listener is bound and the store is open).
    pub rpc: Box<dyn FnOnce(Arc<dyn AsyncToolGateway>) -> RpcConfig>,
}

/// Refuses what would expose an unauthenticated protocol beyond this machine
/// (docs/operating.md#connop-gateway): `--listen tcp:` on an address that is not loopback unless
/// `allow_remote`; `--http` on one without an API key, `allow_remote` or not (a keyless API is
/// anyone's who reaches it); and `--allow-host` names for a keyless API (it answers only to its
/// loopback names).
pub fn check_exposure(
    listen: &[ListenAddr],
    http: Option<SocketAddr>,
    has_api_key: bool,
    allow_remote: bool,
    allow_hosts: &[String],
) -> Result<(), UsageError> {
    if !allow_remote {
        for addr in listen {
            if let ListenAddr::Tcp(tcp) = addr {
                if !loopback(tcp) {
                    return Err(UsageError::RemoteListen { addr: *tcp });
                }
            }
        }
    }
    match http {
        Some(addr) if !loopback(&addr) && !has_api_key => {
            Err(UsageError::RemoteHttpWithoutKey { addr })
        }
        Some(_) if !has_api_key && !allow_hosts.is_empty() => Err(UsageError::AllowHostWithoutKey),
        _ => Ok(()),
    }
}

/// The same for `connop sim-gateway`, whose `/sim` controls only its token guards: an address
/// that is not loopback needs a token, unless `allow_remote`.
pub fn check_sim_exposure(
    listen: SocketAddr,
    has_token: bool,
    allow_remote: bool,
) -> Result<(), UsageError> {
    if allow_remote || has_token || loopback(&listen) {
        return Ok(());
    }
    Err(UsageError::RemoteSimWithoutToken { addr: listen })
}

/// Whether `addr` is reachable from this machine only.
fn loopback(addr: &SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// Serves until SIGINT, SIGTERM, SIGHUP (`signals`, watched by the caller before it announced
/// anything: see [`watch_signals`](super::watch_signals)), or EOF of stdin when stdio is a
/// transport; then settles every open operation `interrupt`, answers every pending manage,
/// ends the active runs, and returns (within a second).
pub fn serve(options: ServeOptions, mut signals: Signals) -> Result<(), AppError> {
    smol::block_on(async move {
        // Everything that can be refused first: a failed start announces nothing and leaves
        // no embedded tool gateway behind its error line.
        let mut bound = Vec::new();
        for addr in &options.listen {
            bound.push(bind(addr).await?);
        }
        let api = match options.http {
            Some((addr, config)) => Some(open_api(addr, config).await?),
            None => None,
        };
        // The socket files this process made, removed when it ends (unless replaced by then).
        let sockets: Vec<_> = bound.iter().filter_map(Bound::socket_file).collect();
        // Announced in this order: the embedded tool gateway, each `--listen`, the HTTP API.
        let tool_gateway = choose_tool_gateway(None)?;
        tool_gateway.announce();
        let server = RpcServer::new((options.rpc)(tool_gateway.client.clone()));
        let in_flight = Arc::new(Count::default());
        let connections: Connections = Arc::default();
        let mut listeners: Vec<smol::Task<()>> = bound
            .into_iter()
            .map(|bound| bound.serve(&server, &in_flight, &connections))
            .collect();
        let api = api.map(|(api, listener, bound)| {
            super::announce_listening(format_args!("http://{bound}"));
            if !api.has_key() {
                tracing::warn!(
                    target: "connop::listener",
                    listener = %format_args!("http:{bound}"),
                    "the HTTP API has no key: any local process may start runs and read \
                     sessions through it; set --api-key K (or CONNOP_API_KEY) to require one",
                );
            }
            listeners.push(smol::spawn(api.clone().serve(listener)));
            api
        });
        let stdio = options.stdio || (options.listen.is_empty() && api.is_none());
        let mut stdio_task = stdio.then(|| {
            smol::spawn(serve_transport(
                server.clone(),
                in_flight.clone(),
                TransportInfo {
                    kind: "stdio",
                    peer: String::new(),
                },
                smol::Unblock::new(std::io::stdin()),
                smol::Unblock::new(std::io::stdout()),
            ))
        });
        // EOF of stdin ends the stdio transport, and with it the process. The race borrows
        // the task: dropping it would cancel its last answers.
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
        // Runs first (docs/http-api.md#shutdown-and-restarts: marked interrupted, streams told),
        // then operations.
        if let Some(api) = &api {
            api.shut_down(Duration::from_millis(400)).await;
        }
        server.shut_down();
        drop(listeners);
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
        // The grace between SIGTERM and SIGKILL does not fit in the second shutdown has.
        end_all_agent_commands();
        drop(tool_gateway);
        for socket in &sockets {
            socket.remove();
        }
        Ok(())
    })
}

/// Binds `addr` and opens the store, for the HTTP API to serve once announced.
async fn open_api(
    addr: SocketAddr,
    config: ApiConfig,
) -> Result<(Arc<Api>, smol::net::TcpListener, SocketAddr), AppError> {
    let failed = |source| EnvironmentError::Listen {
        addr: addr.to_string(),
        source,
    };
    let listener = smol::net::TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    // After the bind: a PostgreSQL replica's default id is this host and port.
    let api = Api::open(config, bound).await?;
    Ok((api, listener, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_or_allowed_addresses_are_exposed() {
        let tcp = |s: &str| ListenAddr::Tcp(s.parse().unwrap());
        let http = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        let unix = ListenAddr::Unix("/tmp/x.sock".into());
        for fine in [
            "127.0.0.1:0",
            "127.9.9.9:1",
            "[::1]:0",
            "[::ffff:127.0.0.1]:0",
        ] {
            assert!(check_exposure(&[tcp(fine), unix.clone()], None, false, false, &[]).is_ok());
            assert!(check_exposure(&[], http(fine), false, false, &[]).is_ok());
        }
        for remote in ["0.0.0.0:0", "[::]:0", "192.0.2.1:7", "[::ffff:0.0.0.0]:1"] {
            let refused = check_exposure(&[tcp(remote)], None, true, false, &[]).unwrap_err();
            assert!(
                matches!(refused, UsageError::RemoteListen { .. }),
                "{refused}"
            );
            assert!(check_exposure(&[tcp(remote)], None, false, true, &[]).is_ok());
            for allow_remote in [false, true] {
                let refused =
                    check_exposure(&[], http(remote), false, allow_remote, &[]).unwrap_err();
                assert!(refused.to_string().contains("no --api-key"), "{refused}");
            }
            assert!(check_exposure(&[], http(remote), true, false, &[]).is_ok());
        }
        let names = ["api.example.test".to_owned()];
        let refused = check_exposure(&[], http("127.0.0.1:0"), false, true, &names).unwrap_err();
        assert!(
            matches!(refused, UsageError::AllowHostWithoutKey),
            "{refused}"
        );
        assert!(check_exposure(&[], http("127.0.0.1:0"), true, true, &names).is_ok());
    }
}
