//! Runs as the logs and metrics see them: started, and finished with their status.

use super::metrics::metrics;
use connop_core::run::Run;

/// A run was started: logged and counted (it is active until [`run_finished`]).
pub fn run_started(run: &Run) {
    tracing::info!(
        target: "connop::run",
        run_id = run.run_id(),
        session_id = run.session_id(),
        "run started",
    );
    metrics().runs_started.inc();
    metrics().runs_active.inc();
}

/// A run's turn is over and the run is terminal: logged and counted, once per
/// [`run_started`].
pub fn run_finished(run: &Run) {
    let status = run.status();
    let duration_ms = run
        .updated_at()
        .saturating_since(run.created_at())
        .as_millis() as u64;
    tracing::info!(
        target: "connop::run",
        run_id = run.run_id(),
        status = status.as_str(),
        duration_ms,
        error = run.error(),
        "run finished",
    );
    metrics().run_finished(status.as_str());
}
