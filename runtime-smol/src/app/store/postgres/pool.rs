//! Connections to PostgreSQL on smol, and a pool of them.
//!
//! `tokio-postgres` speaks the protocol over any stream with tokio's I/O traits and needs no
//! tokio runtime when it is given the stream ([`tokio_postgres::Config::connect_raw`]): here
//! the stream is smol's TCP or unix socket behind a small adapter, and each connection's
//! protocol task runs on smol. The pool keeps up to `size` connections, made when first
//! needed, each with the statements it prepared.

use super::super::StoreError;
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Connection, NoTls, Row, Statement};

/// How long a connection attempt may take when the URL says nothing (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Parameters of a statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A socket to the server: TCP, or the server's unix socket.
pub enum Socket {
    /// TCP (`host=name` or an address).
    Tcp(smol::net::TcpStream),
    /// A unix socket (`host=/path/to/socket/folder`).
    Unix(smol::net::unix::UnixStream),
}

impl tokio::io::AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let unfilled = buf.initialize_unfilled();
        let n = ready!(match self.get_mut() {
            Socket::Tcp(s) => futures_lite::AsyncRead::poll_read(Pin::new(s), cx, unfilled),
            Socket::Unix(s) => futures_lite::AsyncRead::poll_read(Pin::new(s), cx, unfilled),
        })?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => futures_lite::AsyncWrite::poll_write(Pin::new(s), cx, buf),
            Socket::Unix(s) => futures_lite::AsyncWrite::poll_write(Pin::new(s), cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => futures_lite::AsyncWrite::poll_flush(Pin::new(s), cx),
            Socket::Unix(s) => futures_lite::AsyncWrite::poll_flush(Pin::new(s), cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => futures_lite::AsyncWrite::poll_close(Pin::new(s), cx),
            Socket::Unix(s) => futures_lite::AsyncWrite::poll_close(Pin::new(s), cx),
        }
    }
}

/// A connection's client and its protocol state; the state must be driven (polled) for the
/// client to get answers.
pub type Connected = (Client, Connection<Socket, NoTlsStream>);

/// Connects to the first of the URL's hosts that answers (no TLS: `sslmode=require` is
/// refused by the handshake). `target` names the database in errors, without a password.
pub async fn connect(config: &Config, target: &str) -> Result<Connected, StoreError> {
    let timeout = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let hosts = config.get_hosts();
    let ports = config.get_ports();
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the URL names no host");
    for (i, host) in hosts.iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let socket = async {
            match host {
                Host::Tcp(name) => {
                    let stream = match config.get_hostaddrs().get(i) {
                        Some(addr) => smol::net::TcpStream::connect((*addr, port)).await?,
                        None => smol::net::TcpStream::connect((name.as_str(), port)).await?,
                    };
                    stream.set_nodelay(true)?;
                    Ok(Socket::Tcp(stream))
                }
                Host::Unix(folder) => {
                    let path = folder.join(format!(".s.PGSQL.{port}"));
                    Ok(Socket::Unix(
                        smol::net::unix::UnixStream::connect(path).await?,
                    ))
                }
            }
        };
        let timed_out = async {
            smol::Timer::after(timeout).await;
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            ))
        };
        match futures_lite::future::or(socket, timed_out).await {
            Ok(socket) => {
                return config.connect_raw(socket, NoTls).await.map_err(|source| {
                    StoreError::Refused {
                        target: target.to_owned(),
                        source,
                    }
                });
            }
            Err(e) => last = e,
        }
    }
    Err(StoreError::Unreachable {
        target: target.to_owned(),
        source: last,
    })
}

/// Connects, and drives the connection on smol until the client is dropped.
async fn connect_client(config: &Config, target: &str) -> Result<Client, StoreError> {
    let (client, connection) = connect(config, target).await?;
    smol::spawn(async move {
        let _ = connection.await;
    })
    .detach();
    Ok(client)
}

/// A pooled connection and the statements it prepared.
struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

/// Up to `size` connections, made when first needed.
pub(crate) struct Pool {
    config: Config,
    target: String,
    idle: Mutex<Vec<Conn>>,
    slots: smol::lock::Semaphore,
}

impl Pool {
    pub(crate) fn new(config: Config, target: String, size: usize) -> Self {
        Pool {
            config,
            target,
            idle: Mutex::default(),
            slots: smol::lock::Semaphore::new(size.max(1)),
        }
    }

    /// The connection settings.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The database, named without a password.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection, waiting for one while all are in use.
    pub(crate) async fn get(&self) -> Result<Pooled<'_>, StoreError> {
        let slot = self.slots.acquire().await;
        let reused = loop {
            match self.idle().pop() {
                Some(conn) if conn.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match reused {
            Some(conn) => conn,
            None => Conn {
                client: connect_client(&self.config, &self.target).await?,
                statements: HashMap::new(),
            },
        };
        Ok(Pooled {
            pool: self,
            conn: Some(conn),
            in_transaction: false,
            _slot: slot,
        })
    }
}

/// A connection taken from the pool; back to it when dropped, unless it broke or was left
/// inside a transaction (then it is closed, and the server rolls the transaction back).
pub(crate) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
    in_transaction: bool,
    _slot: smol::lock::SemaphoreGuard<'a>,
}

impl Pooled<'_> {
    fn conn(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("a pooled connection is only taken when dropped")
    }

    async fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        let conn = self.conn();
        if let Some(statement) = conn.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = conn.client.prepare(sql).await?;
        conn.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// The rows of a statement.
    pub(crate) async fn query(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql).await?;
        Ok(self.conn().client.query(&statement, params).await?)
    }

    /// The one row of a statement, if any.
    pub(crate) async fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql).await?;
        Ok(self.conn().client.query_opt(&statement, params).await?)
    }

    /// How many rows a statement changed.
    pub(crate) async fn execute(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql).await?;
        Ok(self.conn().client.execute(&statement, params).await?)
    }

    /// Statements without parameters, unprepared.
    pub(crate) async fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        Ok(self.conn().client.batch_execute(sql).await?)
    }

    /// Begins a transaction.
    pub(crate) async fn begin(&mut self) -> Result<(), StoreError> {
        self.in_transaction = true;
        self.batch("BEGIN").await
    }

    /// Commits it.
    pub(crate) async fn commit(&mut self) -> Result<(), StoreError> {
        self.batch("COMMIT").await?;
        self.in_transaction = false;
        Ok(())
    }

    /// Rolls it back.
    pub(crate) async fn rollback(&mut self) -> Result<(), StoreError> {
        self.batch("ROLLBACK").await?;
        self.in_transaction = false;
        Ok(())
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !self.in_transaction && !conn.client.is_closed() {
                self.pool.idle().push(conn);
            }
        }
    }
}
