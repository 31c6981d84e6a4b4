//! Logs through `tracing`, on stderr only (stdout carries JSON-RPC and results): `RUST_LOG`
//! is the filter (default `info`), `--log-format text|json` the shape.
//!
//! The HTTP client's own events are held at `warn` whatever `RUST_LOG` says: at `trace` it
//! logs the wire, bearer tokens included, and tokens are never logged.

use tracing::Level;
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

/// The shape of log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A `RUST_LOG` that is no filter.
#[derive(Debug, thiserror::Error)]
#[error("RUST_LOG={value:?} is not a log filter (e.g. info, connop_smol=debug): {reason}")]
pub struct LogFilterError {
    value: String,
    reason: String,
}

/// Installs the process's logger: `RUST_LOG` (or `default` when unset or empty) decides what
/// is logged, `format` how. A second call keeps the first logger.
pub fn init_logging(format: LogFormat, default: &str) -> Result<(), LogFilterError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => {
            EnvFilter::builder()
                .parse(&value)
                .map_err(|e| LogFilterError {
                    reason: e.to_string(),
                    value,
                })?
        }
        // The HTTP client's own warnings (a call dropped with its operation reads "request
        // completed with error: unknown error") say less than connop's log of the same call,
        // which names the route and the status: by default only its errors show.
        _ => EnvFilter::new(format!("{default},isahc=error")),
    };
    // Past `warn`, the HTTP client turns curl's verbose mode on and logs headers.
    let no_wire =
        filter_fn(|meta| !meta.target().starts_with("isahc") || *meta.level() <= Level::WARN);
    let filter = filter.and(no_wire);
    let layer = match format {
        LogFormat::Text => fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init();
    Ok(())
}
