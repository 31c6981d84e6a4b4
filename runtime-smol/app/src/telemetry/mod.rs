//! Logs and metrics (docs/operating.md#logs and #metrics), for the application only: the library
//! crates log nothing and carry no `tracing` dependency; what they do is logged here, around them.
//!
//! - [`init_logging`]: `tracing` on stderr, `RUST_LOG` and `--log-format`;
//! - [`metrics()`]: the process's Prometheus metrics, [`encode`]d for `GET /metrics`;
//! - [`run_started`], [`run_finished`]: runs logged and counted;
//! - [`manage_connections`]: a tool call whose operation is logged and counted, its
//!   tool-gateway calls observed by an [`ObservedToolGateway`].
//!
//! Tokens and API keys are never logged: no header is, and the HTTP client's own wire logs
//! are held back.

mod logs;
mod metrics;
mod operations;
mod runs;

pub use logs::{LogFilterError, LogFormat, init_logging};
pub use metrics::{CONTENT_TYPE, Metrics, encode, metrics};
pub use operations::{FAILURE_LOG_EVERY, ObservedToolGateway, manage_connections};
pub use runs::{run_finished, run_started};
