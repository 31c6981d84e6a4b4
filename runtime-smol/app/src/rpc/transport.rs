//! One transport: newline-delimited JSON-RPC over a byte stream (stdio, or one accepted unix
//! or TCP connection). Requests are served concurrently, each as its own task; answers and
//! events go out in order through one writer.
//!
//! What waits to be written is bounded ([`Outbox`]): a client that sends and never reads
//! gets its transport closed once the bound is passed, as if it had closed it (its sessions
//! close and their operations settle `interrupt`), instead of growing the process.

use super::outbox::{Budget, Outbox};
use super::{RequestNext, RpcServer, TransportHandle};
use crate::sync::Count;
use crate::telemetry::metrics;
use connop_core::rpc::{self, MAX_LINE};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a transport is, for its log lines: `stdio`, `unix` or `tcp`, and who is at the other
/// end when that is known.
#[derive(Clone, Debug)]
pub struct TransportInfo {
    /// `stdio`, `unix` or `tcp`.
    pub kind: &'static str,
    /// The peer's address, if any.
    pub peer: String,
}

/// Why a transport closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closed {
    /// Its input ended.
    Eof,
    /// Reading failed.
    ReadError,
    /// The process is shutting down.
    Shutdown,
    /// Its queued output passed the bound.
    OutputLimit,
    /// Its first line was an HTTP request line: a web page or an HTTP client, not a JSON-RPC
    /// client. Nothing it sent is answered or run.
    HttpRequest,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::Eof => "end of input",
            Closed::ReadError => "read error",
            Closed::Shutdown => "shutdown",
            Closed::OutputLimit => "queued output over its limit",
            Closed::HttpRequest => "an HTTP request, not JSON-RPC",
        }
    }
}

/// Counts a transport open in the metrics while it lives.
struct OpenTransport;

impl OpenTransport {
    fn new() -> Self {
        metrics().transports_open.inc();
        OpenTransport
    }
}

impl Drop for OpenTransport {
    fn drop(&mut self) {
        metrics().transports_open.dec();
    }
}

/// Serves one transport until its input ends (or its output passes the bound, or shutdown),
/// then closes its sessions (interrupting their operations), waits for every pending answer
/// and flushes them.
pub async fn serve_transport<R, W>(
    server: Arc<RpcServer>,
    in_flight: Arc<Count>,
    info: TransportInfo,
    reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let number = NEXT.fetch_add(1, Ordering::Relaxed);
    let _open = OpenTransport::new();
    tracing::info!(
        target: "connop::transport",
        transport = number,
        kind = info.kind,
        peer = %info.peer,
        "transport opened",
    );
    let (out, lines) = Outbox::new(server.config.max_output);
    let transport = server.transport(out.clone());
    let writing = smol::spawn(write_lines(lines, writer, out.budget.clone()));
    let mine = Arc::new(Count::default());
    let closed = read_requests(&server, &transport, &in_flight, &mine, reader).await;
    if closed == Closed::HttpRequest {
        tracing::warn!(
            target: "connop::transport",
            transport = number,
            kind = info.kind,
            peer = %info.peer,
            "the transport's first line is an HTTP request (a web page or an HTTP client, not a \
             JSON-RPC client): closing it without answering or running anything it sent",
        );
    }
    if closed == Closed::OutputLimit {
        tracing::warn!(
            target: "connop::transport",
            transport = number,
            kind = info.kind,
            peer = %info.peer,
            limit_bytes = server.config.max_output,
            "transport output over its limit (the client does not read): closing it",
        );
    }
    server.transport_closed(&transport);
    mine.wait_zero().await;
    drop(transport);
    drop(out);
    writing.await;
    tracing::info!(
        target: "connop::transport",
        transport = number,
        kind = info.kind,
        peer = %info.peer,
        reason = closed.as_str(),
        "transport closed",
    );
}

async fn write_lines<W: AsyncWrite + Unpin>(
    lines: async_channel::Receiver<String>,
    mut writer: W,
    budget: Arc<Budget>,
) {
    loop {
        let next = futures_lite::future::or(async { lines.recv().await.ok() }, async {
            budget.over.wait().await;
            None
        })
        .await;
        let Some(line) = next else { break };
        let size = line.len() + 1;
        // A client that never reads blocks this write: the bound's switch ends it.
        let wrote = futures_lite::future::or(
            async {
                writer.write_all(line.as_bytes()).await.is_ok()
                    && writer.write_all(b"\n").await.is_ok()
                    && (!lines.is_empty() || writer.flush().await.is_ok())
            },
            async {
                budget.over.wait().await;
                false
            },
        )
        .await;
        budget.release(size);
        if !wrote {
            break;
        }
    }
    if !budget.over.is_on() {
        let _ = writer.flush().await;
    }
    // What is still queued will never be written.
    lines.close();
    while let Ok(line) = lines.try_recv() {
        budget.release(line.len() + 1);
    }
}

async fn read_requests<R: AsyncRead + Unpin>(
    server: &Arc<RpcServer>,
    transport: &TransportHandle,
    in_flight: &Arc<Count>,
    mine: &Arc<Count>,
    mut reader: R,
) -> Closed {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    // Past the limit the rest of the line is skipped, never buffered.
    let mut too_long = false;
    // Until the first line is read: if it is an HTTP request line, nothing is run.
    let mut first = true;
    let http_request =
        |line: &[u8], too_long: bool| !too_long && rpc::is_http_request_line(trim(line));
    let closed = 'reading: loop {
        // Checked first: a read that is always ready would win every race below.
        if transport.out.is_over() {
            break Closed::OutputLimit;
        }
        if server.stopping.is_on() {
            break Closed::Shutdown;
        }
        let read = futures_lite::future::or(
            async { Ok(reader.read(&mut chunk).await) },
            futures_lite::future::or(
                async {
                    server.stopped().await;
                    Err(Closed::Shutdown)
                },
                async {
                    transport.out.budget.over.wait().await;
                    Err(Closed::OutputLimit)
                },
            ),
        )
        .await;
        let n = match read {
            Ok(Ok(0)) => break Closed::Eof,
            Ok(Ok(n)) => n,
            Ok(Err(_)) => break Closed::ReadError,
            Err(closed) => break closed,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() && !transport.out.is_over() {
            let end = rest.iter().position(|b| *b == b'\n');
            let piece = &rest[..end.unwrap_or(rest.len())];
            if !too_long {
                line.extend_from_slice(piece);
                if line.len() > MAX_LINE {
                    too_long = true;
                    line = Vec::new();
                }
            }
            match end {
                Some(end) => {
                    if std::mem::take(&mut first) && http_request(&line, too_long) {
                        break 'reading Closed::HttpRequest;
                    }
                    take_line(server, transport, in_flight, mine, &line, too_long);
                    line.clear();
                    too_long = false;
                    rest = &rest[end + 1..];
                }
                None => rest = &[],
            }
        }
        // A client that keeps the socket full would otherwise keep this task running, and
        // the other transports' tasks (and this one's writer) waiting.
        futures_lite::future::yield_now().await;
    };
    if closed == Closed::Eof && (!line.is_empty() || too_long) {
        if first && http_request(&line, too_long) {
            return Closed::HttpRequest;
        }
        take_line(server, transport, in_flight, mine, &line, too_long);
    }
    closed
}

fn take_line(
    server: &Arc<RpcServer>,
    transport: &TransportHandle,
    in_flight: &Arc<Count>,
    mine: &Arc<Count>,
    line: &[u8],
    too_long: bool,
) {
    let line = trim(line);
    if too_long {
        transport.send(rpc::error_line(
            &serde_json::Value::Null,
            &rpc::RpcError::line_too_long(),
        ));
        return;
    }
    if line.is_empty() {
        return;
    }
    match rpc::parse_line(line) {
        Err(refused) => {
            if let Some(line) = rpc::reply_line(refused.id.as_ref(), Err(&refused.error)) {
                transport.send(line);
            }
        }
        Ok(request) => match server.begin(transport, request) {
            RequestNext::Answer(answer) => {
                if let Some(answer) = answer {
                    transport.send(answer);
                }
            }
            RequestNext::Later(pending) => {
                let transport = transport.clone();
                let guards = (in_flight.enter(), mine.enter());
                smol::spawn(async move {
                    if let Some(answer) = pending.run().await {
                        transport.send(answer);
                    }
                    drop(guards);
                })
                .detach();
            }
        },
    }
}

fn trim(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(end);
    &line[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_past_its_bound_drops_and_switches_over() {
        let (out, lines) = Outbox::new(10);
        out.send("1234".into());
        out.send("5678".into());
        assert_eq!((out.queued(), out.is_over()), (10, false));
        out.send("x".into());
        assert!(out.is_over());
        assert_eq!(out.queued(), 10, "the refused line is not queued");
        out.send("y".into());
        assert_eq!(lines.len(), 2);
        drop(lines);
        // A closed transport drops what is sent and keeps no count of it.
        let (out, lines) = Outbox::new(100);
        drop(lines);
        out.send("gone".into());
        assert_eq!((out.queued(), out.is_over()), (0, false));
    }
}
