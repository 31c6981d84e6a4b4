//! One transport: newline-delimited JSON-RPC over a byte stream (stdio, or one accepted unix
//! or TCP connection). Requests are served concurrently, each as its own task; answers and
//! events go out in order through one writer.

use super::{RequestStep, RpcServer, TransportHandle};
use connop_blocking::sync::Count;
use connop_core::rpc::{self, MAX_LINE};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::sync::Arc;

/// Serves one transport until its input ends, then closes its sessions (interrupting their
/// operations), waits for every pending answer and flushes them.
pub async fn serve_transport<R, W>(
    server: Arc<RpcServer>,
    in_flight: Arc<Count>,
    reader: R,
    writer: W,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, lines) = async_channel::unbounded::<String>();
    let transport = server.transport(out);
    let writing = smol::spawn(write_lines(lines, writer));
    let mine = Arc::new(Count::default());
    read_requests(&server, &transport, &in_flight, &mine, reader).await;
    server.transport_closed(&transport);
    mine.wait_zero().await;
    drop(transport);
    writing.await;
}

async fn write_lines<W: AsyncWrite + Unpin>(lines: async_channel::Receiver<String>, mut writer: W) {
    while let Ok(line) = lines.recv().await {
        if writer.write_all(line.as_bytes()).await.is_err()
            || writer.write_all(b"\n").await.is_err()
        {
            return;
        }
        if lines.is_empty() && writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.flush().await;
}

async fn read_requests<R: AsyncRead + Unpin>(
    server: &Arc<RpcServer>,
    transport: &TransportHandle,
    in_flight: &Arc<Count>,
    mine: &Arc<Count>,
    mut reader: R,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    // Past the limit the rest of the line is skipped, never buffered.
    let mut too_long = false;
    loop {
        let read = futures_lite::future::or(async { reader.read(&mut chunk).await.ok() }, async {
            server.stopped().await;
            None
        })
        .await;
        let Some(n) = read.filter(|n| *n > 0) else {
            break;
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
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
                    take_line(server, transport, in_flight, mine, &line, too_long);
                    line.clear();
                    too_long = false;
                    rest = &rest[end + 1..];
                }
                None => rest = &[],
            }
        }
    }
    if !line.is_empty() || too_long {
        take_line(server, transport, in_flight, mine, &line, too_long);
    }
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
        Err(refused) => transport.send(rpc::error_line(&refused.id, &refused.error)),
        Ok(request) => match server.begin(transport, request) {
            RequestStep::Answer(answer) => transport.send(answer),
            RequestStep::Later(pending) => {
                let transport = transport.clone();
                let guards = (in_flight.enter(), mine.enter());
                smol::spawn(async move {
                    transport.send(pending.run().await);
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
