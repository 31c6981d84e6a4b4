//! Shared helpers of connop's cross-crate tests.

use connop_fixtures::SimReport;

/// Fails with the effect log when the simulation saw a broken invariant of
/// docs/contract.md#invariants.
pub fn assert_clean(report: &SimReport) {
    assert!(
        report.violations.is_empty(),
        "invariants broken: {:#?}\n--- log ---\n{}",
        report.violations,
        report.log.render()
    );
}

/// The connect URLs of a list of target snapshots, by name.
pub fn links(targets: &serde_json::Value) -> Vec<(String, String)> {
    targets
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or_default().to_owned(),
                t["connect_url"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub mod fuzzing;
pub mod table;
