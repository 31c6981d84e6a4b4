//! The application's errors, split by who has to act, as the core splits `CallerError` from
//! `GatewayError`: the person at the command line ([`UsageError`]), this machine
//! ([`EnvironmentError`]), or the service at the other end ([`UpstreamError`]: a peer
//! gateway). [`AppError`] is any of them, and decides the exit code.
//!
//! Every message names what to fix: the flag, the path, the URL.

use super::lease::Refusal;
use super::store::StoreError;
use super::store::postgres::DatabaseUrlError;
use super::telemetry::LogFilterError;
use connop_blocking::http::HttpError;
use connop_core::tool_gateway::{GatewayError, GatewayRoute};
use std::io;

/// Any error a `connop` command ends with.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The command line is wrong.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// This machine refused something the command needs.
    #[error(transparent)]
    Environment(#[from] EnvironmentError),
    /// The service at the other end failed or refused.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl AppError {
    /// The exit status: 2 for a usage error (as for a flag the parser refuses), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Usage(_) => 2,
            AppError::Environment(_) | AppError::Upstream(_) => 1,
        }
    }
}

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> Self {
        AppError::Environment(error.into())
    }
}

impl From<Refusal> for AppError {
    fn from(refusal: Refusal) -> Self {
        AppError::Environment(refusal.into())
    }
}

/// The person's input is wrong: a flag's value, an argument, a variable. Exit 2.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// A duration flag that is negative, infinite or not a number.
    #[error("--{flag} must be a non-negative number of seconds, not {value}")]
    Seconds {
        /// The flag, without its dashes.
        flag: &'static str,
        /// What was given.
        value: f64,
    },
    /// A duration flag past what a duration holds.
    #[error("--{flag} is too large: {value:e} seconds")]
    SecondsTooLarge {
        /// The flag, without its dashes.
        flag: &'static str,
        /// What was given.
        value: f64,
    },
    /// `CONNOP_RETURN_URL` other than `loopback`.
    #[error(
        "CONNOP_RETURN_URL={value:?} is not understood: set it to 'loopback' (a return URL on \
         127.0.0.1 for a hosted tool gateway that redirects there), or unset it"
    )]
    ReturnUrl {
        /// What was given.
        value: String,
    },
    /// A tick so short that the watcher would read the tool gateway without a pause.
    #[error(
        "--tick must be at least {} seconds (each live row is read once per tick), not {value}",
        min.as_secs_f64()
    )]
    TickTooShort {
        /// What was given.
        value: f64,
        /// The shortest tick allowed.
        min: std::time::Duration,
    },
    /// `--sim-auto` with a hosted tool gateway, which it cannot reach.
    #[error("--sim-auto applies to the embedded simulated gateway; unset CONNECTOR_GATEWAY_URL")]
    SimAutoNeedsEmbedded,
    /// `lease hold --metadata` that is not a JSON object.
    #[error("--metadata must be a JSON object, e.g. '{{\"app\": \"desktop\"}}': {reason}")]
    Metadata {
        /// What is wrong with it.
        reason: String,
    },
    /// `RUST_LOG` that is no log filter.
    #[error(transparent)]
    LogFilter(#[from] LogFilterError),
    /// `--listen tcp:` on an address that is not loopback, without `--allow-remote`.
    #[error(
        "--listen tcp:{addr} is not a loopback address, and the JSON-RPC protocol has no \
         authentication: listen on 127.0.0.1 (or a unix socket), or pass --allow-remote if \
         everyone who can reach {addr} may run operations"
    )]
    RemoteListen {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// `--http` on an address that is not loopback, with no API key (`--allow-remote` or not).
    #[error(
        "--http {addr} is not a loopback address and no --api-key (CONNOP_API_KEY) is set: \
         an API without a key is anyone's who can reach it, so it listens on loopback only, \
         --allow-remote or not; set a key, or listen on 127.0.0.1"
    )]
    RemoteHttpWithoutKey {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// `--allow-host` for an `--http` API with no key.
    #[error(
        "--allow-host needs --api-key (CONNOP_API_KEY): an HTTP API without a key answers only \
         to its loopback names, so that no other machine's name reaches it"
    )]
    AllowHostWithoutKey,
    /// `sim-gateway --listen` on an address that is not loopback, with no `--token`, without
    /// `--allow-remote`.
    #[error(
        "sim-gateway --listen {addr} is not a loopback address and no --token is set: anyone \
         who can reach it could drive its /sim controls; set a token, listen on 127.0.0.1, or \
         pass --allow-remote"
    )]
    RemoteSimWithoutToken {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// `--database-url` that is not a usable PostgreSQL URL.
    #[error(transparent)]
    DatabaseUrl(#[from] DatabaseUrlError),
    /// `connop connect` with names the tool gateway does not list; nothing was minted.
    #[error("{}", unknown_connectors(unknown, listed))]
    UnknownConnectors {
        /// Each unknown name with the closest listed one, if any is close.
        unknown: Vec<(String, Option<String>)>,
        /// What the tool gateway lists.
        listed: Vec<String>,
    },
    /// `peer dm --url` that is no usable URL.
    #[error("--url {url:?} is not a usable peer URL, e.g. http://127.0.0.1:8642: {reason}")]
    PeerUrl {
        /// What was given.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
}

/// This machine refused: a port, a file, the state database, a signal handler, stdout. Exit 1.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    /// A listener could not be bound (in use, no permission, no such folder).
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address as the flag gave it (`tcp:…`, `unix:…`, `HOST:PORT`).
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// Another live process answers on the unix socket `--listen` names.
    #[error(
        "cannot listen on {addr}: address in use (another live process answers on it; stop \
         it or choose another path)"
    )]
    AddressInUse {
        /// The address as the flag gave it (`unix:…`).
        addr: String,
    },
    /// The state database (`CONNOP_HOME/state.db`) could not be opened or used.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The lease registry refused, or could not be used.
    #[error("{reason}: {0}", reason = .0.reason())]
    Lease(#[from] Refusal),
    /// The embedded simulated tool gateway could not start.
    #[error("cannot start the simulated gateway: {0}")]
    EmbeddedToolGateway(io::Error),
    /// An HTTP client (for the tool gateway or a peer) could not be made.
    #[error(transparent)]
    HttpClient(#[from] HttpError),
    /// SIGINT, SIGTERM and SIGHUP could not be watched.
    #[error("cannot watch signals: {0}")]
    Signals(io::Error),
    /// The thread that reads the card's keys could not start.
    #[error("cannot read keys: {0}")]
    Keys(io::Error),
    /// stdout went away (its reader closed it) before the output was written.
    #[error("cannot write {what} to stdout: {source}")]
    Stdout {
        /// What was being written.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
}

fn unknown_connectors(unknown: &[(String, Option<String>)], listed: &[String]) -> String {
    let parts: Vec<String> = unknown
        .iter()
        .map(|(name, suggestion)| match suggestion {
            Some(close) => format!("unknown connector '{name}' (did you mean '{close}'?)"),
            None => format!(
                "unknown connector '{name}' (`connop connectors` lists them: {})",
                listed.join(", ")
            ),
        })
        .collect();
    parts.join("; ")
}

/// What to do about a failed tool-gateway call, by its cause.
fn tool_gateway_text(url: &str, route: GatewayRoute, error: &GatewayError) -> String {
    let route = route.name();
    match error {
        GatewayError::MissingToken => format!(
            "CONNECTOR_GATEWAY_TOKEN is unset: set it to the bearer token of the tool gateway at {url}"
        ),
        GatewayError::Auth { status } => format!(
            "the tool gateway at {url} refused CONNECTOR_GATEWAY_TOKEN (HTTP {status}): check the token"
        ),
        GatewayError::Unavailable => format!(
            "the tool gateway at {url} has no connector API (HTTP 404 on the {route} request): check CONNECTOR_GATEWAY_URL"
        ),
        GatewayError::RateLimited { retry_after } => format!(
            "the tool gateway at {url} is rate limiting requests (HTTP 429 on the {route} request): try again in {} s",
            retry_after.as_secs().max(1)
        ),
        GatewayError::Http { status } => format!(
            "the tool gateway at {url} answered HTTP {status} to the {route} request: try again later, or check CONNECTOR_GATEWAY_URL"
        ),
        GatewayError::Transport(reason) => format!(
            "cannot reach the tool gateway at {url} ({reason}): check CONNECTOR_GATEWAY_URL"
        ),
        GatewayError::InvalidResponse(reason) => format!(
            "the tool gateway at {url} sent an invalid answer to the {route} request ({reason}): check that CONNECTOR_GATEWAY_URL names a connector gateway"
        ),
        other => format!("the {route} request to the tool gateway at {url} failed: {other}"),
    }
}

/// A peer gateway or the tool gateway failed or refused. Exit 1.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A tool-gateway call of `connop connect` or `connop connectors` failed.
    #[error("{}", tool_gateway_text(url, *route, error))]
    ToolGateway {
        /// The tool gateway's origin.
        url: String,
        /// The call's route.
        route: GatewayRoute,
        /// Why.
        error: GatewayError,
    },
    /// `connop connect`'s operation ended with an error result no gateway call explains.
    #[error("the operation failed: {reason}")]
    Operation {
        /// The result's `error` text.
        reason: String,
    },
    /// Nothing came back: connection refused, timeout, reset.
    #[error("{method} {url} failed: {source}")]
    PeerUnreachable {
        /// The request's method.
        method: &'static str,
        /// The request's URL.
        url: String,
        /// Why.
        source: isahc::Error,
    },
    /// A request answered with more than `peer dm` reads.
    #[error("{method} {url} answered more than {} MiB; the answer was not read", limit >> 20)]
    PeerAnswerTooLarge {
        /// The request's method.
        method: &'static str,
        /// The request's URL.
        url: String,
        /// The most that is read, in bytes.
        limit: u64,
    },
    /// A request answered with an HTTP error.
    #[error("{request_name} answered HTTP {status}: {reason}")]
    PeerRefused {
        /// The request (`GET /api/sessions`, …).
        request_name: &'static str,
        /// The status.
        status: u16,
        /// The peer's error message, or the start of its body.
        reason: String,
    },
    /// A request answered with a body that is not JSON.
    #[error("{request_name} answered HTTP {status} with a body that is not JSON: {excerpt}")]
    PeerNotJson {
        /// The request (`GET /api/sessions`, `the chat request`).
        request_name: &'static str,
        /// The status.
        status: u16,
        /// The start of the body.
        excerpt: String,
    },
    /// A request answered JSON without what it must carry.
    #[error("{request_name} answered without {missing}")]
    PeerIncomplete {
        /// The request.
        request_name: &'static str,
        /// What is missing (``a `session_id` ``, …).
        missing: &'static str,
    },
    /// The chat request answered an error.
    #[error("the peer answered HTTP {status} to the chat request: {message}")]
    ChatRefused {
        /// The status.
        status: u16,
        /// The peer's error message.
        message: String,
    },
    /// The chat request answered neither a completion nor a queued turn.
    #[error(
        "the peer answered HTTP {status} to the chat request with an unknown answer \
         (object {object:?}): {excerpt}"
    )]
    ChatUnknown {
        /// The status.
        status: u16,
        /// The answer's `object`.
        object: String,
        /// The start of the answer.
        excerpt: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_exit_2_and_the_rest_1() {
        let usage = AppError::from(UsageError::Seconds {
            flag: "tick",
            value: -1.0,
        });
        assert_eq!(usage.exit_code(), 2);
        assert_eq!(
            usage.to_string(),
            "--tick must be a non-negative number of seconds, not -1"
        );
        let listen = AppError::from(EnvironmentError::Listen {
            addr: "tcp:127.0.0.1:1".into(),
            source: io::Error::from(io::ErrorKind::AddrInUse),
        });
        assert_eq!(listen.exit_code(), 1);
        assert!(
            listen
                .to_string()
                .starts_with("cannot listen on tcp:127.0.0.1:1: ")
        );
        let peer = AppError::from(UpstreamError::PeerRefused {
            request_name: "GET /api/sessions",
            status: 401,
            reason: "Invalid API key".into(),
        });
        assert_eq!(peer.exit_code(), 1);
        assert_eq!(
            peer.to_string(),
            "GET /api/sessions answered HTTP 401: Invalid API key"
        );
    }

    #[test]
    fn a_lease_refusal_keeps_its_reason_in_front() {
        let refusal = Refusal::MaxConcurrentSessions { max: 2, live: 2 };
        let error = AppError::from(refusal);
        assert_eq!(error.exit_code(), 1);
        assert_eq!(
            error.to_string(),
            "MAX_CONCURRENT_SESSIONS: 2 live sessions already reach the cap of 2; release one first"
        );
    }
}
