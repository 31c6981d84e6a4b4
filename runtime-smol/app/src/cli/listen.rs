//! The JSON-RPC server's listeners (`--listen unix:PATH`, `--listen tcp:HOST:PORT`): each
//! accepted connection is its own transport.

use crate::error::EnvironmentError;
use crate::net::{AcceptBackoff, ListenerLog};
use crate::rpc::RpcServer;
use crate::rpc::transport::{TransportInfo, serve_transport};
use crate::sync::Count;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the JSON-RPC server listens: `unix:PATH` or `tcp:HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A unix socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

/// Why a `--listen` value was refused (the parser reports it as a usage error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListenAddrError {
    /// `unix:` with nothing after it.
    #[error("unix: needs a socket path, e.g. unix:/tmp/connop.sock")]
    NoPath,
    /// `tcp:` with something that is not `HOST:PORT`.
    #[error("'{0}' is not HOST:PORT (an IP address or localhost), e.g. tcp:127.0.0.1:7777")]
    NotHostPort(String),
    /// Neither scheme.
    #[error("'{0}' is neither unix:PATH nor tcp:HOST:PORT")]
    NoScheme(String),
}

impl std::str::FromStr for ListenAddr {
    type Err = ListenAddrError;
    fn from_str(s: &str) -> Result<Self, ListenAddrError> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(ListenAddrError::NoPath);
            }
            return Ok(ListenAddr::Unix(path.into()));
        }
        if let Some(addr) = s.strip_prefix("tcp:") {
            return host_port(addr)
                .map(ListenAddr::Tcp)
                .map_err(|_| ListenAddrError::NotHostPort(addr.to_owned()));
        }
        Err(ListenAddrError::NoScheme(s.to_owned()))
    }
}

/// A `HOST:PORT` to listen on that is not one (the parser reports it as a usage error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not HOST:PORT (an IP address or localhost), e.g. 127.0.0.1:8642")]
pub struct HostPortError(String);

/// `HOST:PORT` with an IP address, or `localhost` for 127.0.0.1 (no name lookup: an address
/// to bind, not one to resolve).
pub fn host_port(text: &str) -> Result<SocketAddr, HostPortError> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let refused = || HostPortError(text.to_owned());
    let (host, port) = text.rsplit_once(':').ok_or_else(refused)?;
    if !host.eq_ignore_ascii_case("localhost") {
        return Err(refused());
    }
    let port: u16 = port.parse().map_err(|_| refused())?;
    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The transports accepted so far that may still be live, for shutdown to wait on.
pub type Connections = Arc<Mutex<Vec<smol::Task<()>>>>;

/// How long a unix socket's owner may take to answer before it counts as live anyway.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A listener bound, not yet announced nor accepting: every listener of a command is bound
/// before anything is announced or started, so a refused one leaves nothing behind.
pub enum Bound {
    /// A TCP listener and the address it took.
    Tcp(smol::net::TcpListener, SocketAddr),
    /// A unix socket listener and its path.
    Unix(smol::net::unix::UnixListener, PathBuf),
}

/// Binds `addr`. A unix socket another live process answers on is refused (`address in
/// use`); a stale one (nobody answers) is replaced.
pub async fn bind(addr: &ListenAddr) -> Result<Bound, EnvironmentError> {
    let shown = match addr {
        ListenAddr::Tcp(tcp) => format!("tcp:{tcp}"),
        ListenAddr::Unix(path) => format!("unix:{}", path.display()),
    };
    let failed = |source| EnvironmentError::Listen {
        addr: shown.clone(),
        source,
    };
    match addr {
        ListenAddr::Tcp(tcp) => {
            let listener = smol::net::TcpListener::bind(tcp).await.map_err(failed)?;
            let bound = listener.local_addr().map_err(failed)?;
            Ok(Bound::Tcp(listener, bound))
        }
        ListenAddr::Unix(path) => {
            if socket_is_live(path).await {
                return Err(EnvironmentError::AddressInUse { addr: shown });
            }
            let listener = smol::net::unix::UnixListener::bind(path).map_err(failed)?;
            Ok(Bound::Unix(listener, path.clone()))
        }
    }
}

/// A unix socket file this process bound: its path and inode.
pub struct SocketFile(PathBuf, u64);

impl SocketFile {
    /// Removes the file if it is still the one this process bound (another process may have
    /// replaced it meanwhile, taking it for stale).
    pub fn remove(&self) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.0).is_ok_and(|m| m.ino() == self.1) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Bound {
    /// The socket file a unix listener made, to remove when the process ends.
    pub fn socket_file(&self) -> Option<SocketFile> {
        use std::os::unix::fs::MetadataExt;
        match self {
            Bound::Unix(_, path) => std::fs::symlink_metadata(path)
                .ok()
                .map(|m| SocketFile(path.clone(), m.ino())),
            Bound::Tcp(..) => None,
        }
    }

    /// Says `listening <scheme>://<addr>` on stderr and accepts transports until the
    /// returned task is dropped.
    pub fn serve(
        self,
        server: &Arc<RpcServer>,
        in_flight: &Arc<Count>,
        connections: &Connections,
    ) -> smol::Task<()> {
        let (server, in_flight, connections) =
            (server.clone(), in_flight.clone(), connections.clone());
        match self {
            Bound::Tcp(listener, bound) => {
                super::announce_listening(format_args!("tcp://{bound}"));
                let log = ListenerLog::up(format!("tcp:{bound}"));
                smol::spawn(async move {
                    let accept = || async {
                        let (stream, peer) = listener.accept().await?;
                        let _ = stream.set_nodelay(true);
                        Ok((stream, peer.to_string()))
                    };
                    accept_all(log.name(), "tcp", accept, server, in_flight, connections).await;
                })
            }
            Bound::Unix(listener, path) => {
                super::announce_listening(format_args!("unix://{}", path.display()));
                let log = ListenerLog::up(format!("unix:{}", path.display()));
                smol::spawn(async move {
                    let accept = || async {
                        let (stream, _) = listener.accept().await?;
                        Ok((stream, String::new()))
                    };
                    accept_all(log.name(), "unix", accept, server, in_flight, connections).await;
                })
            }
        }
    }
}

/// Whether another process answers on the unix socket at `path`. A socket file nobody
/// answers on is stale and is removed (so the bind can take its place); anything that is no
/// socket is left for the bind to refuse.
async fn socket_is_live(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return false;
    }
    let probe = futures_lite::future::or(
        async { Some(smol::net::unix::UnixStream::connect(path).await) },
        async {
            smol::Timer::after(PROBE_TIMEOUT).await;
            None
        },
    )
    .await;
    match probe {
        // Answered, or too busy to answer at once (a full backlog): someone lives there.
        Some(Ok(_)) | None => true,
        Some(Err(e)) if e.kind() == ErrorKind::WouldBlock => true,
        Some(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => {
            tracing::info!(
                target: "connop::listener",
                path = %path.display(),
                "replacing a stale unix socket",
            );
            let _ = std::fs::remove_file(path);
            false
        }
        // Gone meanwhile, or not ours to probe: the bind says what is wrong.
        Some(Err(_)) => false,
    }
}

/// Serves every accepted connection as its own transport, for as long as the task lives.
async fn accept_all<S, F, Fut>(
    name: &str,
    kind: &'static str,
    accept: F,
    server: Arc<RpcServer>,
    in_flight: Arc<Count>,
    connections: Connections,
) where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Clone + Unpin + Send + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<(S, String)>>,
{
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, peer) = match accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                backoff.wait_after(name, &error).await;
                continue;
            }
        };
        backoff.accepted(name);
        let info = TransportInfo { kind, peer };
        let task = smol::spawn(serve_transport(
            server.clone(),
            in_flight.clone(),
            info,
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
        let refused = |s: &str| s.parse::<ListenAddr>().unwrap_err().to_string();
        assert_eq!(
            refused("tcp:localhost"),
            "'localhost' is not HOST:PORT (an IP address or localhost), e.g. tcp:127.0.0.1:7777"
        );
        assert_eq!(
            "tcp:localhost:0".parse(),
            Ok(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()))
        );
        assert_eq!(
            "tcp:[::1]:7".parse(),
            Ok(ListenAddr::Tcp("[::1]:7".parse().unwrap()))
        );
        assert_eq!(
            host_port("LocalHost:8642"),
            Ok("127.0.0.1:8642".parse().unwrap())
        );
        for bad in [
            "example.com:80",
            "localhost:99999",
            "localhost",
            ":80",
            "localhost:",
        ] {
            assert_eq!(
                host_port(bad).unwrap_err().to_string(),
                format!(
                    "'{bad}' is not HOST:PORT (an IP address or localhost), e.g. 127.0.0.1:8642"
                )
            );
        }
        assert_eq!(
            refused("udp:1"),
            "'udp:1' is neither unix:PATH nor tcp:HOST:PORT"
        );
        assert_eq!("unix:".parse::<ListenAddr>(), Err(ListenAddrError::NoPath));
    }
}
