//! Which tool gateway a command uses: the hosted one `CONNECTOR_GATEWAY_URL` names, or, when
//! it is unset, the embedded simulated tool gateway (SPEC §6.1).

use crate::app::error::{AppError, EnvironmentError};
use crate::app::sim_gateway::{SimOptions, SimToolGateway};
use crate::app::sync::random_hex;
use crate::http::AsyncHttpToolGateway;
use connop_core::tool_gateway::AsyncToolGateway;
use connop_core::wire::ClientConfig;
use std::sync::Arc;
use std::time::Duration;

/// The tool gateway a command uses, and the embedded simulated one if it had to be started.
pub struct ChosenToolGateway {
    /// The client every operation mints and reads through.
    pub client: Arc<dyn AsyncToolGateway>,
    /// The embedded simulated tool gateway, kept alive while the command runs.
    pub embedded: Option<SimToolGateway>,
}

/// `CONNECTOR_GATEWAY_URL`/`CONNECTOR_GATEWAY_TOKEN`, or, when the URL is unset, the embedded
/// simulated tool gateway (its address announced on stderr); `auto_complete` is its
/// `--auto-complete`. The embedded gateway's token guards its `/sim/*` controls too (SPEC
/// §12.2): it is `CONNECTOR_GATEWAY_TOKEN` when that is set, so whoever set it can drive them,
/// and a fresh random one otherwise.
pub fn choose_tool_gateway(auto_complete: Option<Duration>) -> Result<ChosenToolGateway, AppError> {
    let url = std::env::var("CONNECTOR_GATEWAY_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    let token = std::env::var("CONNECTOR_GATEWAY_TOKEN").ok();
    let Some(url) = url else {
        let token = token
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| random_hex(16));
        return start_embedded(token, auto_complete);
    };
    if token.as_deref().is_none_or(|t| t.trim().is_empty()) {
        eprintln!(
            "connop: CONNECTOR_GATEWAY_TOKEN is unset: every call to {url} will fail without being sent"
        );
    }
    let client = AsyncHttpToolGateway::new(ClientConfig::new(url, token))
        .map_err(EnvironmentError::HttpClient)?;
    Ok(ChosenToolGateway {
        client: Arc::new(client),
        embedded: None,
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
    eprintln!("connop: CONNECTOR_GATEWAY_URL is unset: using the embedded simulated tool gateway");
    eprintln!("listening {}", sim.url());
    let client = AsyncHttpToolGateway::new(ClientConfig::new(sim.url(), Some(token)))
        .map_err(EnvironmentError::HttpClient)?;
    Ok(ChosenToolGateway {
        client: Arc::new(client),
        embedded: Some(sim),
    })
}
