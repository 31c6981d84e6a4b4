//! Races as explicit input orders on a virtual clock. A gateway answer arrives `latency`
//! after its call; an input scheduled inside that window lands while the call is in flight.

use connop_core::card::CardAnswer;
use connop_core::contract::{Actor, TargetState};
use connop_core::flow::Input;
use connop_core::operation::Patch;
use connop_core::tool_gateway::{AccountStatus, GatewayError};
use connop_fixtures::{Latency, ScriptedRead, ScriptedToolGateway, Sim, WorldAction};
use connop_tests::assert_clean;
use serde_json::json;
use std::time::Duration;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn connect(names: &[&str]) -> serde_json::Value {
    json!({"action": "connect", "connectors": names})
}

fn slow_reads(ms: u64) -> Latency {
    Latency {
        account: MS(ms),
        ..Latency::default()
    }
}

#[test]
fn continue_while_an_account_read_is_in_flight_wins_and_the_read_is_dropped() {
    let gw = ScriptedToolGateway::new()
        .script("gmail", vec![ScriptedRead::Status(AccountStatus::Active)]);
    let out = Sim::new(gw)
        .latency(slow_reads(10))
        .on_card(|_, ctl| ctl.after(MS(5), Input::Continue))
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "continue");
    assert_eq!(out.json()["targets"][0]["state"], "not_connected");
    assert_eq!(out.returned_at, Some(MS(5)));
    assert_eq!(
        out.replies,
        [Ok(connop_core::card::CardReply { settled: true })]
    );
    assert!(
        out.log
            .render()
            .contains("answer #1 account ca_gmail_1 active (late)")
    );
    // The late answer produced no frame: the settle frame is the last one.
    assert!(out.frames.last().unwrap().change.is_none());
}

#[test]
fn interrupt_while_a_read_is_in_flight_settles_at_once() {
    let out = Sim::new(ScriptedToolGateway::new())
        .tick(5.0)
        .latency(slow_reads(3_000))
        .on_card(|_, ctl| ctl.after(MS(20), Input::Interrupt))
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "interrupt");
    assert_eq!(out.returned_at, Some(MS(20)));
}

#[test]
fn a_connected_read_on_a_row_that_failed_meanwhile_is_dropped() {
    // The read of gmail is in flight; meanwhile the row fails; then the read says active.
    // failed → connected is no edge: the answer is late, not an error.
    let gw = ScriptedToolGateway::new()
        .script("gmail", vec![ScriptedRead::Status(AccountStatus::Active)]);
    let out = Sim::new(gw)
        .deadline(1.0)
        .latency(slow_reads(10))
        .on_card(|_, ctl| {
            let fail = Input::Transition {
                name: "gmail".into(),
                to: TargetState::Failed,
                actor: Actor::BackendWatcher,
                patch: Patch::default(),
            };
            ctl.after(MS(5), fail);
        })
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert!(
        out.log
            .render()
            .contains("0.010  answer #1 account ca_gmail_1 active")
    );
    let moves: Vec<TargetState> = out
        .frames
        .iter()
        .filter_map(|f| f.change.as_ref())
        .map(|c| c.to)
        .collect();
    assert_eq!(
        moves,
        [TargetState::Initiated, TargetState::Failed],
        "the active read moved nothing"
    );
    assert_eq!(out.json()["settled_by"], "deadline");
    assert_eq!(out.json()["targets"][0]["state"], "not_connected");
    assert_eq!(out.gateway.reads.len(), 1, "a failed row is not read again");
}

#[test]
fn a_card_answer_after_settle_moves_nothing_and_reports_settled() {
    let out = Sim::new(ScriptedToolGateway::new())
        .on_card(|_, ctl| {
            ctl.after(MS(5), Input::Continue);
            ctl.after(MS(6), Input::CardAnswer(CardAnswer::skip(&["gmail"])));
            ctl.after(MS(7), Input::Interrupt);
        })
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "continue");
    let settled = connop_core::card::CardReply { settled: true };
    assert_eq!(out.replies, [Ok(settled), Ok(settled)]);
    assert_eq!(
        out.states()["gmail"],
        "not_connected",
        "the late skip did not move the frozen row"
    );
    assert_eq!(out.frames.iter().filter(|f| f.change.is_none()).count(), 1);
    assert!(
        out.log
            .render()
            .contains("input  interrupt -> settled=false")
    );
}

#[test]
fn the_deadline_fires_on_its_own_timer_whatever_reads_are_in_flight() {
    let out = Sim::new(ScriptedToolGateway::new())
        .deadline(2.0)
        .latency(slow_reads(20_000))
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "deadline");
    assert_eq!(out.returned_at, Some(Duration::from_secs(2)));
    assert_eq!(
        out.gateway.reads.len(),
        1,
        "one read in flight per row, never a second"
    );
}

#[test]
fn a_429_backs_off_every_live_target_until_retry_after() {
    let limited = ScriptedRead::Fail(GatewayError::RateLimited {
        retry_after: Duration::from_secs(3),
    });
    let gw = ScriptedToolGateway::new()
        .script(
            "gmail",
            vec![
                limited,
                ScriptedRead::Status(AccountStatus::Pending),
                ScriptedRead::Status(AccountStatus::Active),
            ],
        )
        .script(
            "notion",
            vec![
                ScriptedRead::Status(AccountStatus::Pending),
                ScriptedRead::Status(AccountStatus::Pending),
                ScriptedRead::Status(AccountStatus::Active),
            ],
        );
    let out = Sim::new(gw).tick(1.0).run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    let log = out.log.render();
    // Both read at 0; gmail is limited; nobody is read again before 3 s, then once a tick.
    let read_times: Vec<f64> = out
        .log
        .lines
        .iter()
        .filter(|l| l.text.starts_with("call") && l.text.contains("account"))
        .map(|l| l.at.as_secs_f64())
        .collect();
    assert_eq!(read_times, [0.0, 0.0, 3.0, 3.0, 4.0, 4.0], "{log}");
    assert!(log.contains("timer  back-off over"), "{log}");
    assert_eq!(out.json()["settled_by"], "all_resolved");
}

#[test]
fn a_429_asking_for_centuries_saturates_and_the_deadline_still_fires() {
    // `Retry-After: 1e18` parses to a valid Duration; now + it saturates instead of
    // overflowing, and the back-off never hides the deadline.
    let limited = ScriptedRead::Fail(GatewayError::RateLimited {
        retry_after: Duration::MAX,
    });
    let gw = ScriptedToolGateway::new().script("gmail", vec![limited]);
    let out = Sim::new(gw)
        .tick(1.0)
        .deadline(5.0)
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "deadline");
    assert_eq!(out.returned_at, Some(Duration::from_secs(5)));
    assert_eq!(out.gateway.reads.len(), 1, "no read during the back-off");
}

#[test]
fn read_timeouts_are_the_time_left_clamped_to_one_and_ten_seconds() {
    let out = Sim::new(ScriptedToolGateway::new())
        .tick(2.0)
        .deadline(13.0)
        .run(connect(&["gmail"]));
    assert_clean(&out);
    let timeouts: Vec<f64> = out
        .gateway
        .reads
        .iter()
        .map(|(_, t)| t.as_secs_f64())
        .collect();
    // Reads at 0, 2, 4, …, 12 s: time left 13, 11, 9, 7, 5, 3, 1.
    assert_eq!(timeouts, [10.0, 10.0, 9.0, 7.0, 5.0, 3.0, 1.0]);
}

#[test]
fn at_the_same_instant_an_answer_lands_before_the_deadline() {
    // The read answers active exactly at the deadline: inputs of an instant come before its
    // timers, so the answer connects the row and the operation settles all_resolved.
    let gw = ScriptedToolGateway::new()
        .script("gmail", vec![ScriptedRead::Status(AccountStatus::Active)]);
    let out = Sim::new(gw)
        .deadline(1.0)
        .latency(slow_reads(1_000))
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "all_resolved");
}

#[test]
fn list_fallback_watches_rows_without_connection_ids_and_backs_off_on_429() {
    let mut gw = ScriptedToolGateway::new().without_connection_ids();
    gw.list_faults = vec![GatewayError::RateLimited {
        retry_after: Duration::from_secs(5),
    }];
    let out = Sim::new(gw)
        .tick(1.0)
        .on_card(|_, ctl| ctl.after(MS(7_500), WorldAction::VendorConnected("gmail".into())))
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert!(out.gateway.reads.is_empty());
    // Lists at 0 (429 for 5 s), 5, 6, 7, 8 (connected).
    assert_eq!(out.gateway.lists.len(), 5, "{}", out.log.render());
    assert_eq!(out.returned_at, Some(Duration::from_secs(8)));
    assert_eq!(out.json()["settled_by"], "all_resolved");
}

#[test]
fn a_pending_row_steps_through_initiated_before_any_watcher_move() {
    // A mint that names no row for notion leaves it pending; with no connection id it is
    // watched through the list, and its connection steps pending → initiated → connected,
    // both by the watcher.
    let gw = ScriptedToolGateway::new()
        .without_connection_ids()
        .connected(&["notion"])
        .omit_from_mint("notion");
    let out = Sim::new(gw).run(connect(&["notion"]));
    assert_clean(&out);
    assert_eq!(out.gateway.mints.len(), 1);
    assert!(!out.gateway.lists.is_empty(), "watched through the list");
    // The mint moved nothing: the card shows the row still pending.
    assert_eq!(out.cards.len(), 1);
    assert_eq!(out.cards[0].targets[0].state, TargetState::Pending);
    let moves: Vec<(TargetState, TargetState, Actor)> = out
        .frames
        .iter()
        .filter_map(|f| f.change.as_ref())
        .map(|c| (c.from, c.to, c.actor))
        .collect();
    assert_eq!(
        moves,
        [
            (
                TargetState::Pending,
                TargetState::Initiated,
                Actor::BackendWatcher
            ),
            (
                TargetState::Initiated,
                TargetState::Connected,
                Actor::BackendWatcher
            )
        ]
    );
}
