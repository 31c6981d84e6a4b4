//! What every listener of the application shares: its `listener up` and `listener down`
//! log lines, the back-off after a failed accept, the accept loop of its HTTP listeners, and
//! [`guard`], which requests an HTTP listener serves at all.

pub mod guard;

use smol::net::{TcpListener, TcpStream};
use std::future::Future;
use std::time::Duration;

/// Accepts on `listener`, named `name` in the log, until the future is dropped: each
/// connection is served by `connection`, as a task of the loop's own executor (dropped with
/// it). A failed accept backs off and never ends the listener.
pub async fn serve_connections<F, Fut>(listener: TcpListener, name: String, connection: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let log = ListenerLog::up(name);
    let ex = smol::Executor::new();
    let mut backoff = AcceptBackoff::default();
    ex.run(async {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    backoff.accepted(log.name());
                    ex.spawn(connection(stream)).detach();
                }
                // Out of file descriptors and the like: back off, keep serving.
                Err(error) => backoff.wait_after(log.name(), &error).await,
            }
        }
    })
    .await
}

/// The HTTP/1 connection settings of every HTTP listener: smol's timer, keep-alive, and each
/// request's headers within [`guard::READ_TIMEOUT`] (a connection that stalls in them, or
/// stays idle that long between requests, is closed).
pub fn http1() -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(smol_hyper::rt::SmolTimer::new())
        .header_read_timeout(guard::READ_TIMEOUT);
    builder
}

/// Logs `listener up` now and `listener down` when dropped (with the accept loop that holds
/// it, at shutdown).
#[derive(Debug)]
pub struct ListenerLog {
    name: String,
}

impl ListenerLog {
    /// A listener named `name` (`tcp:127.0.0.1:7777`, `unix:/run/connop.sock`, …) is up.
    pub fn up(name: impl Into<String>) -> Self {
        let name = name.into();
        tracing::info!(target: "connop::listener", listener = %name, "listener up");
        ListenerLog { name }
    }

    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ListenerLog {
    fn drop(&mut self) {
        tracing::info!(target: "connop::listener", listener = %self.name, "listener down");
    }
}

/// How long an accept loop waits after a failed accept: from 10 ms, doubling to 1 s, and
/// back to the start once an accept succeeds. A failed accept (no file descriptor left, a
/// connection aborted before it was taken) never ends a listener.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    /// Failures in a row.
    failures: u32,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    /// One more failure: how long to wait before the next accept.
    pub fn failed(&mut self) -> Duration {
        let wait = Self::FIRST
            .saturating_mul(1 << self.failures.min(7))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        wait
    }

    /// An accept succeeded; returns how many failures came before it.
    pub fn succeeded(&mut self) -> u32 {
        std::mem::take(&mut self.failures)
    }

    /// Logs a failed accept of `listener` and waits as long as the back-off says: every
    /// failure at `debug`, the first of a streak and every 30th at `warn`.
    pub async fn wait_after(&mut self, listener: &str, error: &std::io::Error) {
        let wait = self.failed();
        let wait_ms = wait.as_millis() as u64;
        if self.failures == 1 || self.failures % 30 == 0 {
            tracing::warn!(
                target: "connop::listener",
                listener,
                error = %error,
                failures = self.failures,
                wait_ms,
                "accept failed: backing off",
            );
        } else {
            tracing::debug!(
                target: "connop::listener",
                listener,
                error = %error,
                failures = self.failures,
                wait_ms,
                "accept failed: backing off",
            );
        }
        smol::Timer::after(wait).await;
    }

    /// Notes a successful accept, logging the end of a streak of failures.
    pub fn accepted(&mut self, listener: &str) {
        let failures = self.succeeded();
        if failures > 0 {
            tracing::info!(target: "connop::listener", listener, failures, "accepting again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_back_off_doubles_to_a_second_and_starts_over_after_a_success() {
        let mut backoff = AcceptBackoff::default();
        let waits: Vec<u128> = (0..10).map(|_| backoff.failed().as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(backoff.succeeded(), 10);
        assert_eq!(backoff.failed(), Duration::from_millis(10));
    }
}
