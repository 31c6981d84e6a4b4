//! Connections to PostgreSQL on smol, and a pool of them.
//!
//! `tokio-postgres` speaks the protocol over any stream with tokio's I/O traits and needs no
//! tokio runtime when it is given the stream ([`tokio_postgres::Config::connect_raw`]): here
//! the stream is smol's TCP or unix socket behind a small adapter, and each connection's
//! protocol task runs on smol. The pool keeps up to `size` connections, made when first
//! needed, each with the statements it prepared.
//!
//! Nothing waits on the server without a bound: a connection (socket and handshake) is made
//! within [`CONNECT_TIMEOUT`] (or the URL's `connect_timeout`), a free pooled connection is
//! waited for as long, and every statement is answered within [`QUERY_TIMEOUT`]. A
//! connection whose statement ran out of time is closed, never pooled again.
//!
//! A connection's buffers keep the capacity of the largest message it ever carried (a run's
//! output, an event's data), so a pool that kept every connection would hold its size times
//! the largest payload for good. The socket counts the bytes it moves; a connection that moved
//! more than [`RECYCLE_AFTER`] while taken is closed when given back, not pooled, and its
//! buffers go with it.

use super::super::StoreError;
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Connection, NoTls, Row, Statement};

/// How long a connection attempt (the socket and the handshake) may take when the URL says
/// nothing (`connect_timeout`); also how long a free pooled connection is waited for.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one statement may wait for the server's answer. Every statement of the store is
/// small; one that takes longer finds a server that is away or stuck.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes a connection may move while taken and still go back to the pool: a bound on what
/// an idle connection's buffers hold. Making a connection again costs a few milliseconds,
/// nothing beside moving a payload this large.
const RECYCLE_AFTER: u64 = 256 * 1024;

/// Parameters of a statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A socket to the server, counting the bytes it moves.
pub struct Socket {
    stream: Stream,
    moved: Arc<AtomicU64>,
}

/// TCP (`host=name` or an address), or the server's unix socket (`host=/path/to/folder`).
enum Stream {
    Tcp(smol::net::TcpStream),
    Unix(smol::net::unix::UnixStream),
}

/// What both kinds of stream are to the adapter below.
trait Io: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> Io for T {}

impl Socket {
    fn new(stream: Stream) -> Self {
        Socket {
            stream,
            moved: Arc::default(),
        }
    }

    /// Counts bytes read and written, readable while the connection's task owns the socket.
    fn counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.moved)
    }

    fn count(&self, n: usize) {
        self.moved.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn io(&mut self) -> Pin<&mut dyn Io> {
        match &mut self.stream {
            Stream::Tcp(s) => Pin::new(s),
            Stream::Unix(s) => Pin::new(s),
        }
    }
}

impl tokio::io::AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = ready!(this.io().poll_read(cx, buf.initialize_unfilled()))?;
        this.count(n);
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
        let this = self.get_mut();
        let n = ready!(this.io().poll_write(cx, buf))?;
        this.count(n);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_close(cx)
    }
}

/// A connection's client and its protocol state; the state must be driven (polled) for the
/// client to get answers.
pub type Connected = (Client, Connection<Socket, NoTlsStream>);

/// Connects to the first of the URL's hosts that answers (no TLS: `sslmode=require` is
/// refused by the handshake). `target` names the database in errors, without a password.
pub async fn connect(config: &Config, target: &str) -> Result<Connected, StoreError> {
    Ok(connect_counted(config, target).await?.0)
}

/// [`connect`], and the count of the bytes its socket moves. The socket and the handshake
/// together get the connect timeout: a server that accepts and never answers is given up
/// on as one that refuses.
async fn connect_counted(
    config: &Config,
    target: &str,
) -> Result<(Connected, Arc<AtomicU64>), StoreError> {
    let timeout = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let hosts = config.get_hosts();
    let ports = config.get_ports();
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the URL names no host");
    for (i, host) in hosts.iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let attempt = async {
            let socket = match host {
                Host::Tcp(name) => {
                    let stream = match config.get_hostaddrs().get(i) {
                        Some(addr) => smol::net::TcpStream::connect((*addr, port)).await,
                        None => smol::net::TcpStream::connect((name.as_str(), port)).await,
                    };
                    stream.and_then(|stream| {
                        stream.set_nodelay(true)?;
                        Ok(Socket::new(Stream::Tcp(stream)))
                    })
                }
                Host::Unix(folder) => {
                    let path = folder.join(format!(".s.PGSQL.{port}"));
                    smol::net::unix::UnixStream::connect(path)
                        .await
                        .map(|stream| Socket::new(Stream::Unix(stream)))
                }
            };
            let socket = socket.map_err(Attempt::Socket)?;
            let moved = socket.counter();
            let connected = config
                .connect_raw(socket, NoTls)
                .await
                .map_err(Attempt::Refused)?;
            Ok((connected, moved))
        };
        let timed_out = async {
            smol::Timer::after(timeout).await;
            Err(Attempt::Socket(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {} s", timeout.as_secs_f64()),
            )))
        };
        match futures_lite::future::or(attempt, timed_out).await {
            Ok(connected) => return Ok(connected),
            Err(Attempt::Socket(e)) => last = e,
            Err(Attempt::Refused(source)) => {
                return Err(StoreError::Refused {
                    target: target.to_owned(),
                    user: config.get_user().unwrap_or("(user)").to_owned(),
                    database: config
                        .get_dbname()
                        .or(config.get_user())
                        .unwrap_or("(database)")
                        .to_owned(),
                    source,
                });
            }
        }
    }
    Err(StoreError::Unreachable {
        target: target.to_owned(),
        source: last,
    })
}

/// How one connection attempt failed: no socket (try the next host), or the server's no.
enum Attempt {
    Socket(io::Error),
    Refused(tokio_postgres::Error),
}

/// `work`, unless it takes longer than `after`: then [`StoreError::Timeout`].
pub(crate) async fn within<T>(
    after: Duration,
    target: &str,
    what: &'static str,
    work: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    futures_lite::future::or(work, async {
        smol::Timer::after(after).await;
        Err(StoreError::Timeout {
            target: target.to_owned(),
            what,
            after,
        })
    })
    .await
}

/// A statement's answer within [`QUERY_TIMEOUT`].
pub(crate) async fn timed<T>(
    target: &str,
    work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    within(QUERY_TIMEOUT, target, "a statement", async {
        Ok(work.await?)
    })
    .await
}

/// A pooled connection, the statements it prepared, the bytes its socket moved, and the
/// task that drives it. Dropped, it lets the connection end by itself (it says goodbye to
/// the server once the client is gone); [`Conn::cut`] ends it at once.
struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
    moved: Arc<AtomicU64>,
    driver: Option<smol::Task<()>>,
}

impl Conn {
    /// Connects, and drives the connection on smol until the client is dropped.
    async fn open(config: &Config, target: &str) -> Result<Self, StoreError> {
        let ((client, connection), moved) = connect_counted(config, target).await?;
        let driver = smol::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn {
            client,
            statements: HashMap::new(),
            moved,
            driver: Some(driver),
        })
    }

    /// Closes the socket now, without waiting on a server that may never answer.
    fn cut(mut self) {
        drop(self.driver.take());
    }

    /// The bytes moved since the last call.
    fn take_moved(&self) -> u64 {
        self.moved.swap(0, Ordering::Relaxed)
    }
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

    /// A connection, waiting for one while all are in use (at most the connect timeout).
    pub(crate) async fn get(&self) -> Result<Pooled<'_>, StoreError> {
        let wait = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(CONNECT_TIMEOUT);
        let slot = within(wait, &self.target, "a free pooled connection", async {
            Ok(self.slots.acquire().await)
        })
        .await?;
        let reused = loop {
            match self.idle().pop() {
                Some(conn) if conn.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match reused {
            Some(conn) => conn,
            None => Conn::open(&self.config, &self.target).await?,
        };
        // What the handshake and an earlier holder moved is not this holder's.
        conn.take_moved();
        Ok(Pooled {
            pool: self,
            conn: Some(conn),
            in_transaction: false,
            broken: false,
            _slot: slot,
        })
    }
}

/// A connection taken from the pool; back to it when dropped, unless it broke, was left
/// inside a transaction (then it is closed, and the server rolls the transaction back) or
/// moved more than [`RECYCLE_AFTER`] bytes (then it is closed, and its buffers freed). One
/// whose statement ran out of time is cut off at once: its server may never answer.
pub(crate) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
    in_transaction: bool,
    broken: bool,
    _slot: smol::lock::SemaphoreGuard<'a>,
}

impl Pooled<'_> {
    fn conn(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("a pooled connection is only taken when dropped")
    }

    /// Marks the connection broken when its statement ran out of time (its answer may still
    /// come, to nobody).
    fn note<T>(&mut self, answer: Result<T, StoreError>) -> Result<T, StoreError> {
        if matches!(answer, Err(StoreError::Timeout { .. })) {
            self.broken = true;
        }
        answer
    }

    async fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        let target = self.pool.target();
        let conn = self.conn();
        if let Some(statement) = conn.statements.get(sql) {
            return Ok(statement.clone());
        }
        let prepared = timed(target, conn.client.prepare(sql)).await;
        let statement = self.note(prepared)?;
        self.conn().statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// The rows of a statement.
    pub(crate) async fn query(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql).await?;
        let target = self.pool.target();
        let answer = timed(target, self.conn().client.query(&statement, params)).await;
        self.note(answer)
    }

    /// The one row of a statement, if any.
    pub(crate) async fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql).await?;
        let target = self.pool.target();
        let answer = timed(target, self.conn().client.query_opt(&statement, params)).await;
        self.note(answer)
    }

    /// How many rows a statement changed.
    pub(crate) async fn execute(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql).await?;
        let target = self.pool.target();
        let answer = timed(target, self.conn().client.execute(&statement, params)).await;
        self.note(answer)
    }

    /// Statements without parameters, unprepared.
    pub(crate) async fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        let target = self.pool.target();
        let answer = timed(target, self.conn().client.batch_execute(sql)).await;
        self.note(answer)
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

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.detach();
        }
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.broken {
            conn.cut();
            return;
        }
        let reusable =
            !self.in_transaction && !conn.client.is_closed() && conn.take_moved() <= RECYCLE_AFTER;
        if reusable {
            self.pool.idle().push(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server process behind a connection taken from `pool` and given back at once.
    async fn backend(pool: &Pool) -> i32 {
        let mut db = pool.get().await.expect("a connection");
        let row = db.query_opt("SELECT pg_backend_pid()", &[]).await.unwrap();
        row.expect("one row").get(0)
    }

    #[test]
    #[cfg_attr(
        not(connop_postgres_tests),
        ignore = "set CONNOP_TEST_DATABASE_URL=postgres://… to run the PostgreSQL tests"
    )]
    fn a_connection_that_carried_a_large_payload_is_closed_not_pooled() {
        let url = std::env::var("CONNOP_TEST_DATABASE_URL").expect("a test server");
        let pool = Pool::new(url.parse().expect("a postgres URL"), "test".into(), 4);
        smol::block_on(async {
            let first = backend(&pool).await;
            assert_eq!(
                backend(&pool).await,
                first,
                "a small query keeps its connection"
            );

            let large = usize::try_from(RECYCLE_AFTER).unwrap() + 1;
            let mut db = pool.get().await.unwrap();
            let row = db
                .query_opt("SELECT repeat('a', $1)", &[&i32::try_from(large).unwrap()])
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row.get::<_, &str>(0).len(), large);
            drop(db);
            let second = backend(&pool).await;
            assert_ne!(
                second, first,
                "a large row read: the connection is not pooled"
            );
            assert_eq!(backend(&pool).await, second);

            let text = "b".repeat(large);
            let mut db = pool.get().await.unwrap();
            let row = db
                .query_opt("SELECT length($1::TEXT)", &[&text])
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row.get::<_, i32>(0), i32::try_from(large).unwrap());
            drop(db);
            let third = backend(&pool).await;
            assert_ne!(
                third, second,
                "a large parameter sent: the connection is not pooled"
            );
        });
    }
}
