//! Which tool gateway a command uses: the hosted one `CONNECTOR_GATEWAY_URL` names, or, when
//! it is unset, the embedded simulated tool gateway (docs/contract.md#simulated-tool-gateway).

use crate::error::{AppError, EnvironmentError, UpstreamError};
use crate::sim_gateway::{SimOptions, SimToolGateway};
use crate::sync::random_hex;
use connop_core::tool_gateway::{AsyncToolGateway, GatewayError, GatewayRoute};
use connop_core::wire::ClientConfig;
use connop_smol::http::AsyncHttpToolGateway;
use std::sync::Arc;
use std::time::Duration;

/// The tool gateway a command uses, and the embedded simulated one if it had to be started.
pub struct ChosenToolGateway {
    /// The client every operation mints and reads through.
    pub client: Arc<dyn AsyncToolGateway>,
    /// The embedded simulated tool gateway, kept alive while the command runs.
    pub embedded: Option<SimToolGateway>,
    /// The tool gateway's origin, for messages.
    pub url: String,
}

impl ChosenToolGateway {
    /// Says `listening <url>` for the embedded simulated tool gateway (its consent pages are
    /// there); a hosted one is not announced. A command calls it once it checked everything
    /// it can refuse, so that a usage error is never said after a `listening` line.
    pub fn announce(&self) {
        if let Some(sim) = &self.embedded {
            super::announce_listening(format_args!("{}", sim.url()));
        }
    }
}

/// `CONNECTOR_GATEWAY_URL`, unless unset or blank.
fn gateway_url() -> Option<String> {
    std::env::var("CONNECTOR_GATEWAY_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Whether a command uses the embedded simulated tool gateway (`CONNECTOR_GATEWAY_URL` is
/// unset): each command starts its own, with nothing connected.
pub fn uses_embedded() -> bool {
    gateway_url().is_none()
}

/// As [`choose_tool_gateway`], for a command a person runs (`connect`, `connectors`): a
/// hosted tool gateway without a token is an error that says so, not a warning.
pub fn choose_for_person(auto_complete: Option<Duration>) -> Result<ChosenToolGateway, AppError> {
    let url = gateway_url();
    let token = std::env::var("CONNECTOR_GATEWAY_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty());
    match (url, token) {
        (Some(url), None) => Err(UpstreamError::ToolGateway {
            url: url.trim_end_matches('/').to_owned(),
            route: GatewayRoute::List,
            error: GatewayError::MissingToken,
        }
        .into()),
        _ => choose_tool_gateway(auto_complete),
    }
}

/// `CONNECTOR_GATEWAY_URL`/`CONNECTOR_GATEWAY_TOKEN`, or, when the URL is unset, the embedded
/// simulated tool gateway (announced by [`ChosenToolGateway::announce`]); `auto_complete` is its
/// `--auto-complete`. The embedded gateway's token guards its `/sim/*` controls too
/// (docs/contract.md#simulated-tool-gateway): it is `CONNECTOR_GATEWAY_TOKEN` when that is set, so
/// whoever set it can drive them, and a fresh random one otherwise.
pub fn choose_tool_gateway(auto_complete: Option<Duration>) -> Result<ChosenToolGateway, AppError> {
    let url = gateway_url();
    let token = std::env::var("CONNECTOR_GATEWAY_TOKEN").ok();
    let Some(url) = url else {
        let token = token
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| random_hex(16));
        return start_embedded(token, auto_complete);
    };
    if token.as_deref().is_none_or(|t| t.trim().is_empty()) {
        tracing::warn!(
            target: "connop::tool_gateway",
            url = %url,
            "CONNECTOR_GATEWAY_TOKEN is unset: every call to the tool gateway will fail without being sent",
        );
    }
    let origin = url.trim_end_matches('/').to_owned();
    let client = AsyncHttpToolGateway::new(ClientConfig::new(url, token))
        .map_err(EnvironmentError::HttpClient)?;
    Ok(ChosenToolGateway {
        client: Arc::new(client),
        embedded: None,
        url: origin,
    })
}

fn start_embedded(
    token: String,
    auto_complete: Option<Duration>,
) -> Result<ChosenToolGateway, AppError> {
    let mut options = SimOptions::default().token(token.clone());
    if let Some(after) = auto_complete {
        options = options.auto_complete(after);
    }
    let sim = SimToolGateway::start(options).map_err(EnvironmentError::EmbeddedToolGateway)?;
    tracing::info!(
        target: "connop::tool_gateway",
        url = %sim.url(),
        "CONNECTOR_GATEWAY_URL is unset: using the embedded simulated tool gateway",
    );
    let client = AsyncHttpToolGateway::new(ClientConfig::new(sim.url(), Some(token)))
        .map_err(EnvironmentError::HttpClient)?;
    Ok(ChosenToolGateway {
        client: Arc::new(client),
        url: sim.url(),
        embedded: Some(sim),
    })
}
