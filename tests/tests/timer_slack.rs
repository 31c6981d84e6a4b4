//! Timer slack (the runtimes coalesce wake-ups): timers that fire up to the slack late, never
//! early, change no read count and settle a deadline by `deadline + slack` at the latest.

use connop_fixtures::{ScriptedToolGateway, Sim, SimReport};
use connop_tests::assert_clean;
use serde_json::json;

fn run(slack: f64, flips: &[(&str, usize)], deadline: f64) -> SimReport {
    Sim::new(ScriptedToolGateway::new().flips(flips))
        .tick(1.0)
        .deadline(deadline)
        .slack(slack)
        .run(json!({"action": "connect", "connectors": ["gmail", "notion"]}))
}

/// When each account read started, in virtual seconds.
fn reads(out: &SimReport) -> Vec<f64> {
    out.log
        .lines
        .iter()
        .filter(|l| l.text.starts_with("call") && l.text.contains("account ca_"))
        .map(|l| l.at.as_secs_f64())
        .collect()
}

#[test]
fn a_slack_changes_no_read_count_and_no_read_comes_early() {
    let exact = run(0.0, &[("gmail", 3), ("notion", 5)], 300.0);
    let late = run(0.010, &[("gmail", 3), ("notion", 5)], 300.0);
    assert_clean(&exact);
    assert_clean(&late);
    // The same result but for when it settled.
    let without_time = |out: &SimReport| {
        let mut value = out.result.as_ref().expect("a result").to_value();
        value
            .as_object_mut()
            .expect("an object")
            .remove("settled_at");
        value
    };
    assert_eq!(without_time(&exact), without_time(&late));
    let (exact, late) = (reads(&exact), reads(&late));
    assert_eq!(exact.len(), late.len(), "{exact:?} against {late:?}");
    for (e, l) in exact.iter().zip(&late) {
        assert!(*l >= *e, "a read at {l} s came before its tick at {e} s");
    }
    assert!(
        exact.iter().zip(&late).any(|(e, l)| l > e),
        "no timer fired late: the slack was not exercised"
    );
}

#[test]
fn a_deadline_settles_by_deadline_plus_slack_never_before() {
    for slack in [0.0, 0.001, 0.010, 0.050] {
        let out = run(slack, &[], 5.0);
        assert_clean(&out);
        let at = out.returned_at.expect("the tool returned").as_secs_f64();
        assert!(
            (5.0..=5.0 + slack + 1e-9).contains(&at),
            "slack {slack}: settled at {at} s"
        );
        let view = out.flow.operation().expect("an operation").settlement();
        assert!(view.is_some(), "slack {slack}: not settled");
    }
}
