//! The JSON-RPC server's listeners (`--listen unix:PATH`, `--listen tcp:HOST:PORT`): each
//! accepted connection is its own transport.

use crate::app::error::EnvironmentError;
use crate::app::rpc::RpcServer;
use crate::app::rpc::transport::serve_transport;
use connop_blocking::sync::Count;
use futures_lite::StreamExt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
    #[error("'{0}' is not HOST:PORT, e.g. tcp:127.0.0.1:7777")]
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
            return addr
                .parse()
                .map(ListenAddr::Tcp)
                .map_err(|_| ListenAddrError::NotHostPort(addr.to_owned()));
        }
        Err(ListenAddrError::NoScheme(s.to_owned()))
    }
}

/// The transports accepted so far that may still be live, for shutdown to wait on.
pub type Connections = Arc<Mutex<Vec<smol::Task<()>>>>;

/// Binds `addr`, says `listening <scheme>://<addr>` on stderr, and accepts transports until
/// the returned task is dropped.
pub async fn listen(
    addr: &ListenAddr,
    server: &Arc<RpcServer>,
    in_flight: &Arc<Count>,
    connections: &Connections,
) -> Result<smol::Task<()>, EnvironmentError> {
    let (server, in_flight, connections) = (server.clone(), in_flight.clone(), connections.clone());
    let failed = |source| EnvironmentError::Listen {
        addr: match addr {
            ListenAddr::Tcp(tcp) => format!("tcp:{tcp}"),
            ListenAddr::Unix(path) => format!("unix:{}", path.display()),
        },
        source,
    };
    match addr {
        ListenAddr::Tcp(tcp) => {
            let listener = smol::net::TcpListener::bind(tcp).await.map_err(failed)?;
            let bound = listener.local_addr().map_err(failed)?;
            eprintln!("listening tcp://{bound}");
            Ok(smol::spawn(async move {
                accept_all(listener.incoming(), server, in_flight, connections).await;
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
            let listener = smol::net::unix::UnixListener::bind(path).map_err(failed)?;
            eprintln!("listening unix://{}", path.display());
            Ok(smol::spawn(async move {
                accept_all(listener.incoming(), server, in_flight, connections).await;
            }))
        }
    }
}

/// Serves every accepted connection as its own transport until the listener fails.
async fn accept_all<S>(
    mut incoming: impl futures_lite::Stream<Item = std::io::Result<S>> + Unpin,
    server: Arc<RpcServer>,
    in_flight: Arc<Count>,
    connections: Connections,
) where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Clone + Unpin + Send + 'static,
{
    while let Some(Ok(stream)) = incoming.next().await {
        let task = smol::spawn(serve_transport(
            server.clone(),
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
            "'localhost' is not HOST:PORT, e.g. tcp:127.0.0.1:7777"
        );
        assert_eq!(
            refused("udp:1"),
            "'udp:1' is neither unix:PATH nor tcp:HOST:PORT"
        );
        assert_eq!("unix:".parse::<ListenAddr>(), Err(ListenAddrError::NoPath));
    }
}
