//! `connop sim-gateway`: the simulated tool gateway on its own, until SIGINT, SIGTERM or
//! SIGHUP.

use super::watch_signals;
use crate::error::{AppError, EnvironmentError};
use crate::sim_gateway::{SimOptions, SimServer};
use futures_lite::StreamExt;

/// Runs the simulated tool gateway until SIGINT, SIGTERM or SIGHUP.
pub fn run_sim_tool_gateway(options: SimOptions) -> Result<(), AppError> {
    smol::block_on(async move {
        // Before the `listening` line: a signal sent right after it is caught.
        let mut signals = watch_signals()?;
        let (server, listener) =
            SimServer::bind(&options).map_err(|source| EnvironmentError::Listen {
                addr: options.listen.to_string(),
                source,
            })?;
        super::announce_listening(format_args!("{}", server.url()));
        futures_lite::future::or(server.serve(listener), async {
            signals.next().await;
        })
        .await;
        Ok(())
    })
}
