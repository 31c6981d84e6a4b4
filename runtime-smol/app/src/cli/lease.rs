//! `connop lease hold` and `connop lease list` (docs/http-api.md#leases), on the registry of
//! [`crate::lease`].

use super::{print_stdout, watch_signals};
use crate::error::{AppError, UsageError};
use crate::lease::{LeaseEntry, list, try_acquire};
use futures_lite::StreamExt;
use serde_json::{Value, json};
use std::path::Path;

/// `--metadata`: a JSON object, or a usage error saying what it is instead.
pub fn metadata(given: &str) -> Result<Value, UsageError> {
    let reason = match serde_json::from_str::<Value>(given) {
        Ok(value @ Value::Object(_)) => return Ok(value),
        Ok(_) => format!("{given} is not an object"),
        Err(e) => format!("{given} is not JSON ({e})"),
    };
    Err(UsageError::Metadata { reason })
}

/// `connop lease hold`: takes the lease, prints its entry as one JSON line on stdout, waits
/// until stdin reaches EOF or SIGINT/SIGTERM/SIGHUP arrives, then releases it.
pub fn hold(home: &Path, session_id: &str, surface: &str, metadata: Value) -> Result<(), AppError> {
    let lease = try_acquire(home, session_id, surface, metadata, 0)?;
    // Watch signals before the lease is announced, so one sent right after the line is caught.
    // (On failure the dropped lease is released.)
    let mut signals = watch_signals()?;
    print_stdout("the lease", &lease.entry().to_json().to_string())?;
    smol::block_on(futures_lite::future::or(
        async {
            // A read error ends the hold like EOF does.
            let _ = futures_lite::io::copy(
                smol::Unblock::new(std::io::stdin()),
                futures_lite::io::sink(),
            )
            .await;
        },
        async {
            signals.next().await;
        },
    ));
    Ok(lease.release()?)
}

/// `connop lease list`: prints `{"entries": [...]}` with the live leases as one JSON line.
pub fn print_list(home: &Path) -> Result<(), AppError> {
    let entries = list(home)?;
    let entries: Vec<Value> = entries.iter().map(LeaseEntry::to_json).collect();
    print_stdout("the leases", &json!({ "entries": entries }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_must_be_a_json_object() {
        assert_eq!(metadata(r#"{"a": 1}"#).unwrap(), json!({"a": 1}));
        let not_object = metadata("[1]").unwrap_err().to_string();
        assert!(
            not_object.starts_with("--metadata must be a JSON object")
                && not_object.contains("[1] is not an object"),
            "{not_object}"
        );
        let not_json = metadata("{oops").unwrap_err().to_string();
        assert!(not_json.contains("{oops is not JSON ("), "{not_json}");
    }
}
