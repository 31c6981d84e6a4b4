//! How a `connop connect` run ends for a person (docs/operating.md#connop-connect): the up-front
//! connector check, the exit status, the human summary, and the one-line error a failed
//! tool-gateway call becomes. Pure functions, except [`RecordingToolGateway`], which remembers the
//! first failed call so the error names what to fix instead of repeating the agent's wording.

use super::card::{outcome_word, state_named};
use crate::error::{UpstreamError, UsageError};
use crate::escape::{Lines, escape_controls};
use connop_core::contract::TargetState;
use connop_core::operation::Text;
use connop_core::tool::did_you_mean;
use connop_core::tool_gateway::{
    AsyncToolGateway, ConnectorRow, GatewayCall, GatewayError, GatewayFuture, GatewayRoute,
};
use serde_json::Value;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Exit status: every target connected.
pub const EXIT_CONNECTED: u8 = 0;
/// Exit status: an error result or a tool-gateway failure.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: settled with a target not connected (skipped, not connected).
pub const EXIT_NOT_CONNECTED: u8 = 3;
/// Exit status: interrupted from the keyboard (`q`, Ctrl-C, SIGINT), as a shell reports
/// SIGINT.
pub const EXIT_KEYBOARD: u8 = 130;
/// Exit status: ended by SIGTERM, as a shell reports it.
pub const EXIT_TERMINATED: u8 = 143;
/// Exit status: ended by SIGHUP (the terminal closed), as a shell reports it.
pub const EXIT_HANGUP: u8 = 129;

/// What interrupted the run, if anything: the first cause wins.
#[derive(Clone, Debug, Default)]
pub struct InterruptCause(Arc<AtomicU8>);

impl InterruptCause {
    /// `q`, Ctrl-C or SIGINT.
    pub fn keyboard(&self) {
        self.set(EXIT_KEYBOARD);
    }

    /// SIGTERM.
    pub fn terminated(&self) {
        self.set(EXIT_TERMINATED);
    }

    /// SIGHUP: the terminal went away.
    pub fn hung_up(&self) {
        self.set(EXIT_HANGUP);
    }

    fn set(&self, code: u8) {
        let _ = self
            .0
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The exit status of the cause, once one happened.
    pub fn exit_status(&self) -> Option<u8> {
        Some(self.0.load(Ordering::SeqCst)).filter(|c| *c != 0)
    }
}

/// The exit status of a run that returned `result` (docs/operating.md#connop-connect).
///
/// An interrupt decides when the operation ended by it or never got to settle; an operation
/// that settled otherwise before the key or signal arrived keeps its own status.
pub fn exit_status(result: &Value, interrupted: Option<u8>) -> u8 {
    let errored = result.get("error").is_some();
    let by_interrupt = result["settled_by"] == "interrupt";
    match interrupted {
        Some(code) if errored || by_interrupt => return code,
        _ => {}
    }
    if errored {
        return EXIT_FAILED;
    }
    if by_interrupt {
        return EXIT_KEYBOARD;
    }
    let targets = result["targets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if !targets.is_empty() && targets.iter().all(|t| t["state"] == "connected") {
        EXIT_CONNECTED
    } else {
        EXIT_NOT_CONNECTED
    }
}

/// The names the tool gateway does not list (nor the local MCP catalog names), as a usage
/// error suggesting the closest listed name; `Ok` when every name is known.
pub fn check_names(
    names: &[String],
    rows: &[ConnectorRow],
    catalog: &[Text],
) -> Result<(), UsageError> {
    let listed: Vec<&str> = rows.iter().map(|r| &*r.connector).collect();
    let unknown: Vec<(String, Option<String>)> = names
        .iter()
        .map(|n| n.trim().to_lowercase())
        .filter(|n| !listed.contains(&n.as_str()) && !catalog.iter().any(|c| **c == **n))
        .map(|n| {
            let suggestion = did_you_mean(&n, &listed).map(str::to_owned);
            (n, suggestion)
        })
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(UsageError::UnknownConnectors {
            unknown,
            listed: listed.iter().map(|s| (*s).to_owned()).collect(),
        })
    }
}

/// What a person is told about one target when the run ends, in the final card's words.
///
/// `last_live` is the state the card showed before the settle (settle writes
/// `not_connected` over `failed` and `expired`), when the card saw one.
pub fn summary_line(target: &Value, last_live: Option<&str>, name_width: usize) -> String {
    let name = shown(target["name"].as_str().unwrap_or("?"));
    let detail = shown(target["detail"].as_str().unwrap_or(""));
    let state = state_named(target["state"].as_str().unwrap_or(""));
    let outcome = outcome_word(
        state.unwrap_or(TargetState::NotConnected),
        last_live.and_then(state_named),
    );
    let mut line = format!("{name:<name_width$}  {outcome}");
    if !detail.is_empty() && state != Some(TargetState::Connected) {
        line.push_str(": ");
        line.push_str(&detail);
    }
    line.trim_end().to_owned()
}

/// A tool gateway's text as the summary shows it: one line, its controls escaped.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls(text, Lines::One)
}

/// One summary line per target of a settled result.
pub fn summary(result: &Value, last_live: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let targets = result["targets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let width = targets
        .iter()
        .map(|t| shown(t["name"].as_str().unwrap_or("?")).chars().count())
        .max()
        .unwrap_or(0);
    targets
        .iter()
        .map(|t| {
            let live = last_live(t["name"].as_str().unwrap_or(""));
            summary_line(t, live.as_deref(), width)
        })
        .collect()
}

/// The tool gateway of a run, remembering its first failed call.
pub struct RecordingToolGateway {
    inner: Arc<dyn AsyncToolGateway>,
    failure: Arc<Mutex<Option<(GatewayRoute, GatewayError)>>>,
}

impl RecordingToolGateway {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn AsyncToolGateway>) -> Arc<Self> {
        Arc::new(RecordingToolGateway {
            inner,
            failure: Arc::default(),
        })
    }

    /// The route and error of the first call that failed, if one did.
    pub fn first_failure(&self) -> Option<(GatewayRoute, GatewayError)> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl AsyncToolGateway for RecordingToolGateway {
    fn call(&self, call: GatewayCall) -> GatewayFuture {
        let route = call.route();
        let answer = self.inner.call(call);
        let failure = self.failure.clone();
        GatewayFuture::pending(async move {
            let answer = answer.await;
            if let Err(error) = &answer {
                let mut first = failure.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| (route, error.clone()));
            }
            answer
        })
    }
}

/// A failed tool-gateway call as the one line that says what to fix.
pub fn gateway_failure(url: &str, route: GatewayRoute, error: GatewayError) -> UpstreamError {
    UpstreamError::ToolGateway {
        url: url.to_owned(),
        route,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(states: &[&str], settled_by: &str) -> Value {
        let targets: Vec<Value> = states
            .iter()
            .enumerate()
            .map(|(i, s)| json!({"name": format!("t{i}"), "state": s}))
            .collect();
        json!({"settled_by": settled_by, "targets": targets, "status": "settled"})
    }

    #[test]
    fn exit_statuses_follow_the_outcome() {
        let all = result(&["connected", "connected"], "all_resolved");
        assert_eq!(exit_status(&all, None), EXIT_CONNECTED);
        let skipped = result(&["connected", "skipped"], "all_resolved");
        assert_eq!(exit_status(&skipped, None), EXIT_NOT_CONNECTED);
        let cont = result(&["not_connected"], "continue");
        assert_eq!(exit_status(&cont, None), EXIT_NOT_CONNECTED);
        let deadline = result(&["not_connected"], "deadline");
        assert_eq!(exit_status(&deadline, None), EXIT_NOT_CONNECTED);
        let error = json!({"error": "The connector gateway request failed: x."});
        assert_eq!(exit_status(&error, None), EXIT_FAILED);
        let interrupted = result(&["not_connected"], "interrupt");
        assert_eq!(
            exit_status(&interrupted, Some(EXIT_TERMINATED)),
            EXIT_TERMINATED
        );
        assert_eq!(
            exit_status(&interrupted, Some(EXIT_KEYBOARD)),
            EXIT_KEYBOARD
        );
        assert_eq!(exit_status(&error, Some(EXIT_KEYBOARD)), EXIT_KEYBOARD);
        // A key pressed after everything connected changes nothing.
        assert_eq!(exit_status(&all, Some(EXIT_KEYBOARD)), EXIT_CONNECTED);
        assert_eq!(
            exit_status(&result(&[], "all_resolved"), None),
            EXIT_NOT_CONNECTED
        );
    }

    #[test]
    fn the_first_cause_wins() {
        let cause = InterruptCause::default();
        assert_eq!(cause.exit_status(), None);
        cause.terminated();
        cause.keyboard();
        assert_eq!(cause.exit_status(), Some(EXIT_TERMINATED));
    }

    #[test]
    fn unknown_names_are_usage_errors_with_suggestions() {
        let rows: Vec<ConnectorRow> = ["gmail", "notion", "google_calendar"]
            .iter()
            .map(|n| ConnectorRow::new(n, true, false))
            .collect();
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(check_names(&names(&["gmail", " Notion "]), &rows, &[]).is_ok());
        let error = check_names(&names(&["gmial"]), &rows, &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown connector 'gmial' (did you mean 'gmail'?)"
        );
        let error = check_names(&names(&["gmial", "dropbox"]), &rows, &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown connector 'gmial' (did you mean 'gmail'?); unknown connector 'dropbox' \
             (`connop connectors` lists them: gmail, notion, google_calendar)"
        );
        // A name of the local MCP catalog is the misroute check's business, not a typo.
        assert!(check_names(&names(&["filesystem"]), &rows, &["filesystem".into()]).is_ok());
    }

    #[test]
    fn the_summary_has_one_line_per_target() {
        let result = json!({"targets": [
            {"name": "gmail", "state": "connected"},
            {"name": "notion", "state": "skipped"},
            {"name": "slack", "state": "not_connected", "detail": "user denied access"},
            {"name": "linear", "state": "not_connected"},
            {"name": "github", "state": "not_connected", "detail": "x\ny"},
            {"name": "gh\u{1b}[2J", "state": "connected"},
        ]});
        let live = |name: &str| match name {
            "slack" => Some("failed".to_owned()),
            "github" => Some("expired".to_owned()),
            _ => None,
        };
        assert_eq!(
            summary(&result, live),
            [
                "gmail      connected",
                "notion     skipped",
                "slack      failed: user denied access",
                "linear     not connected",
                "github     not connected (the link expired): x\\ny",
                "gh\\x1b[2J  connected",
            ]
        );
    }
}
