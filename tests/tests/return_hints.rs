//! Return hints and per-row ticks (docs/contract.md#return-hints) as input orders on the virtual
//! clock: the browser comes back while a read is out, after settle, for a row that is gone; one
//! vendor's slow read never holds back another row.

use connop_core::card::CardAnswer;
use connop_core::flow::Input;
use connop_core::tool_gateway::{AccountStatus, GatewayError};
use connop_fixtures::{Latency, ScriptedRead, ScriptedToolGateway, Sim, SimReport};
use connop_tests::assert_clean;
use serde_json::json;
use std::time::Duration;

fn connect(names: &[&str]) -> serde_json::Value {
    json!({"action": "connect", "connectors": names})
}

fn hint(target: &str) -> Input {
    Input::ReturnHint {
        target: Some(target.into()),
    }
}

fn hint_all() -> Input {
    Input::ReturnHint { target: None }
}

/// When each account read of `connector` started, in virtual seconds.
fn reads_of(out: &SimReport, connector: &str) -> Vec<f64> {
    let needle = format!("account ca_{connector}_");
    out.log
        .lines
        .iter()
        .filter(|l| l.text.starts_with("call") && l.text.contains(&needle))
        .map(|l| l.at.as_secs_f64())
        .collect()
}

/// When `connector`'s row was first seen connected, in virtual seconds.
fn connected_at(out: &SimReport, connector: &str) -> Option<f64> {
    let needle = format!("{connector} initiated->connected");
    out.log
        .lines
        .iter()
        .find(|l| l.text.contains(&needle))
        .map(|l| l.at.as_secs_f64())
}

fn logged(out: &SimReport, text: &str) -> bool {
    out.log.lines.iter().any(|l| l.text.contains(text))
}

#[test]
fn a_hint_reads_the_named_row_at_once_and_only_it() {
    let out = Sim::new(ScriptedToolGateway::new())
        .tick(5.0)
        .deadline(3.0)
        .at(1.0, hint("gmail"))
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert_eq!(reads_of(&out, "gmail"), [0.0, 1.0], "{}", out.log.render());
    assert_eq!(reads_of(&out, "notion"), [0.0]);
    assert!(logged(&out, "return hint(gmail) -> read=true"));
    assert_eq!(
        out.returned_at,
        Some(Duration::from_secs(3)),
        "deadline kept"
    );
}

#[test]
fn a_hint_naming_nothing_reads_every_live_row_and_a_found_connection_settles_at_once() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 3)]);
    let out = Sim::new(gw)
        .tick(60.0)
        .deadline(5.0)
        .at(0.2, Input::CardAnswer(CardAnswer::skip(&["slack"])))
        .at(1.5, hint_all())
        .run(connect(&["gmail", "notion", "slack"]));
    assert_clean(&out);
    // The skip is a change (every live row is read at once); then the hint reads both, and
    // gmail's change reads notion once more.
    assert_eq!(reads_of(&out, "gmail"), [0.0, 0.2, 1.5]);
    assert_eq!(reads_of(&out, "notion"), [0.0, 0.2, 1.5, 1.5]);
    assert_eq!(
        reads_of(&out, "slack"),
        [0.0],
        "a skipped row is never read again"
    );
    assert_eq!(connected_at(&out, "gmail"), Some(1.5));
}

#[test]
fn rows_without_connection_ids_get_one_list_read_from_a_hint() {
    let gw = ScriptedToolGateway::new().without_connection_ids();
    let out = Sim::new(gw)
        .tick(30.0)
        .deadline(5.0)
        .at(2.0, hint_all())
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert!(out.gateway.reads.is_empty());
    // The watcher's lists: at 0 and at the hint (the repair/misroute paths list nothing here).
    assert_eq!(out.gateway.lists.len(), 2, "{}", out.log.render());
}

#[test]
fn a_hint_while_a_read_is_in_flight_gets_exactly_one_more_read_right_after_it_answers() {
    let out = Sim::new(ScriptedToolGateway::new())
        .tick(10.0)
        .deadline(5.0)
        .latency(Latency {
            account: Duration::from_secs(2),
            ..Latency::default()
        })
        .at(0.5, hint("gmail"))
        .at(0.7, hint("gmail"))
        .at(1.0, hint_all())
        .run(connect(&["gmail"]));
    // The checker fails the run if a second read of the row was ever in flight.
    assert_clean(&out);
    assert_eq!(reads_of(&out, "gmail"), [0.0, 2.0], "{}", out.log.render());
    assert!(logged(&out, "return hint(gmail) -> read=true"));
}

#[test]
fn a_hint_after_settle_is_ignored() {
    let out = Sim::new(ScriptedToolGateway::new())
        .tick(10.0)
        .at(0.5, Input::Continue)
        .at(1.0, hint("gmail"))
        .at(1.0, hint_all())
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "continue");
    assert_eq!(reads_of(&out, "gmail"), [0.0]);
    assert!(logged(&out, "return hint(gmail) -> read=false"));
    assert!(logged(&out, "return hint(every live row) -> read=false"));
}

#[test]
fn a_hint_naming_an_unknown_target_is_refused_and_a_resolved_one_reads_nothing() {
    let out = Sim::new(ScriptedToolGateway::new())
        .tick(10.0)
        .deadline(3.0)
        .at(0.2, Input::CardAnswer(CardAnswer::skip(&["notion"])))
        .at(0.5, hint("nope"))
        .at(0.6, hint("notion"))
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert!(
        logged(&out, "return hint(nope) -> refused: unknown target 'nope'"),
        "{}",
        out.log.render()
    );
    assert!(logged(&out, "return hint(notion) -> read=false"));
    assert_eq!(reads_of(&out, "notion"), [0.0]);
    // The skip's re-read; neither hint read anything.
    assert_eq!(reads_of(&out, "gmail"), [0.0, 0.2]);
}

#[test]
fn hints_never_move_the_deadline() {
    let mut sim = Sim::new(ScriptedToolGateway::new())
        .tick(1.0)
        .deadline(2.0)
        .latency(Latency {
            account: Duration::from_millis(300),
            ..Latency::default()
        });
    for i in 0..40 {
        sim = sim.at(f64::from(i) * 0.05, hint_all());
    }
    let out = sim.run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "deadline");
    assert_eq!(out.returned_at, Some(Duration::from_secs(2)));
}

#[test]
fn a_hint_during_a_429_back_off_reads_when_the_back_off_ends() {
    let limited = ScriptedRead::Fail(GatewayError::RateLimited {
        retry_after: Duration::from_secs(3),
    });
    let gw = ScriptedToolGateway::new().script(
        "gmail",
        vec![limited, ScriptedRead::Status(AccountStatus::Pending)],
    );
    let out = Sim::new(gw)
        .tick(1.0)
        .deadline(3.5)
        .at(1.0, hint("notion"))
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert!(logged(&out, "return hint(notion) -> read=true"));
    assert_eq!(reads_of(&out, "notion"), [0.0, 3.0], "{}", out.log.render());
    assert_eq!(reads_of(&out, "gmail"), [0.0, 3.0]);
}

#[test]
fn one_rows_stalled_read_never_delays_another_rows_completion() {
    // gmail's vendor takes 4 s per read; notion's account is active from its second read on.
    // notion is read on its own tick, so its completion is seen at 1 s, not after gmail's
    // read comes back (the old shared tick saw it at 5 s).
    let gw = ScriptedToolGateway::new().flips(&[("notion", 2)]);
    let out = Sim::new(gw)
        .tick(1.0)
        .deadline(30.0)
        .stall("gmail", 4.0)
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert_eq!(
        connected_at(&out, "notion"),
        Some(1.0),
        "{}",
        out.log.render()
    );
    assert_eq!(reads_of(&out, "notion"), [0.0, 1.0]);
    // gmail: one read at a time, each a tick after the last answered (or at once after
    // notion's change, which came while its first read was out).
    assert_eq!(reads_of(&out, "gmail")[..3], [0.0, 4.0, 9.0]);
}

#[test]
fn a_hint_is_not_held_behind_another_rows_stalled_read() {
    let gw = ScriptedToolGateway::new().flips(&[("notion", 2)]);
    let out = Sim::new(gw)
        .tick(10.0)
        .deadline(30.0)
        .stall("gmail", 4.0)
        .at(0.3, hint("notion"))
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert_eq!(
        connected_at(&out, "notion"),
        Some(0.3),
        "{}",
        out.log.render()
    );
}
