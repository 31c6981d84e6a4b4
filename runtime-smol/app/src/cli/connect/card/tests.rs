//! The card without a terminal: its model, its layout at every width, its keys.

use super::*;
use connop_core::card::CardAnswer;
use connop_core::contract::SettleReason;
use connop_core::contract::{Actor, TargetAction, TargetState};
use connop_core::flow::Event;
use connop_core::operation::{DEFAULT_DEADLINE, OpId};
use connop_core::operation::{Operation, Patch, Target};
use connop_core::payload::{CardRequest, OperationView, UpdateFrame};
use connop_core::time::Timestamp;
use std::time::Duration;

const T0: u64 = 1_800_000_000;
const GMAIL_URL: &str = "https://connect.example/gmail/1";

fn new_op(names: &[&str]) -> Operation {
    Operation::new(
        OpId::from_entropy([1, 2, 3, 4, 5, 6]),
        names
            .iter()
            .map(|n| Target::connector(n, TargetAction::Connect))
            .collect(),
        Timestamp::from_secs(T0),
        Duration::from_secs(300),
    )
}

fn link(url: &str, id: &str) -> Patch {
    Patch {
        connect_url: Some(url.into()),
        connection_id: Some(id.into()),
        detail: None,
        extra: None,
    }
}

/// gmail initiated with a link, notion pending.
fn op() -> Operation {
    let mut op = new_op(&["gmail", "notion"]);
    op.transition(
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        link(GMAIL_URL, "ca_gmail_1"),
    )
    .unwrap();
    op
}

fn request(op: &Operation) -> Event {
    Event::Request(Box::new(CardRequest {
        op_id: op.op_id(),
        seq: op.seq(),
        deadline_at: op.deadline_at(),
        timeout_seconds: 300.0,
        targets: op.rows().to_vec(),
        tool_call_id: None,
    }))
}

fn moved(op: &mut Operation, name: &str, to: TargetState, actor: Actor, p: Patch) -> Event {
    let change = op.transition(name, to, actor, p).unwrap();
    assert!(change.is_some(), "the test moves for real");
    Event::Update(Box::new(UpdateFrame {
        view: OperationView::of(op),
        change,
    }))
}

fn settled(op: &mut Operation, reason: SettleReason) -> Event {
    assert!(op.settle(reason, Timestamp::from_secs(T0 + 10)));
    Event::Update(Box::new(UpdateFrame {
        view: OperationView::of(op),
        change: None,
    }))
}

fn card(events: &[&Event]) -> CardModel {
    let mut model = CardModel::new();
    for e in events {
        model.apply(e);
    }
    model
}

pub(crate) fn at(secs: u64) -> Timestamp {
    Timestamp::from_secs(T0 + secs)
}

fn assert_fits(lines: &[String], width: u16) {
    for line in lines {
        assert!(
            line.chars().count() <= usize::from(width),
            "{line:?} is wider than {width}"
        );
    }
}

#[test]
fn the_request_sets_the_card_up() {
    let op = op();
    let mut model = CardModel::new();
    assert!(model.op_id().is_none());
    assert!(model.apply(&request(&op)));
    assert_eq!(model.op_id(), Some(op.op_id()));
    assert_eq!(model.seq(), Some(1));
    assert_eq!(model.deadline_at(), at(300));
    assert_eq!(model.timeout(), Duration::from_secs(300));
    assert_eq!(model.rows().len(), 2);
    assert_eq!(model.rows()[0].connect_url.as_deref(), Some(GMAIL_URL));
    assert!(!model.is_settled() && model.settled_by().is_none());
}

#[test]
fn a_newer_frame_replaces_the_view_and_an_older_one_is_dropped() {
    let mut op = op();
    let req = request(&op);
    let f2 = moved(
        &mut op,
        "gmail",
        TargetState::Connected,
        Actor::BackendWatcher,
        Patch::default(),
    );
    let f3 = moved(
        &mut op,
        "notion",
        TargetState::Skipped,
        Actor::User,
        Patch::default(),
    );
    let mut model = card(&[&req]);
    assert!(model.apply(&f3));
    assert_eq!(model.seq(), Some(3));
    assert!(!model.apply(&f2), "seq 2 < 3: dropped");
    assert!(!model.apply(&f3), "the same seq again: dropped");
    assert_eq!(model.rows()[0].state, TargetState::Connected);
    assert_eq!(model.rows()[1].state, TargetState::Skipped);
    let fin = settled(&mut op, SettleReason::AllResolved);
    assert!(model.apply(&fin));
    assert!(model.is_settled());
    assert_eq!(model.settled_by(), Some(SettleReason::AllResolved));
    assert_eq!(model.settled_at(), Some(at(10)));
    // A request that comes late keeps the newer rows.
    assert!(model.apply(&req));
    assert_eq!(model.seq(), Some(4));
    assert_eq!(model.rows()[1].state, TargetState::Skipped);
}

#[test]
fn events_of_another_operation_are_dropped() {
    let op = op();
    let mut other = Operation::new(
        OpId::from_entropy([9, 9, 9, 9, 9, 9]),
        vec![Target::connector("slack", TargetAction::Connect)],
        Timestamp::from_secs(T0),
        Duration::from_secs(60),
    );
    let mut model = card(&[&request(&op)]);
    assert!(!model.apply(&request(&other)));
    let frame = moved(
        &mut other,
        "slack",
        TargetState::Initiated,
        Actor::BackendWatcher,
        Patch::default(),
    );
    assert!(!model.apply(&frame));
    assert_eq!(model.rows()[0].name.as_ref(), "gmail");
}

#[test]
fn a_frame_before_the_request_still_shows_and_the_request_gives_the_timeout() {
    let mut op = new_op(&["gmail"]);
    let frame = moved(
        &mut op,
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        link(GMAIL_URL, "ca"),
    );
    let mut model = card(&[&frame]);
    assert_eq!(model.timeout(), DEFAULT_DEADLINE);
    let Event::Request(mut req) = request(&op) else {
        unreachable!()
    };
    req.timeout_seconds = 60.0;
    assert!(model.apply(&Event::Request(req)));
    assert_eq!(model.timeout(), Duration::from_secs(60));
    assert_eq!(model.rows()[0].state, TargetState::Initiated);
}

/// gmail initiated with a link and a long detail, notion failed with a detail, slack
/// initiated with a very long link.
pub(crate) fn busy_card() -> CardModel {
    let mut op = new_op(&["gmail", "notion", "slack"]);
    let long_url = format!("https://connect.example/slack/{}", "x".repeat(120));
    let events = [
        moved(
            &mut op,
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            Patch {
                detail: Some("waiting for the user to finish the Google consent screen".into()),
                ..link(GMAIL_URL, "ca_gmail_1")
            },
        ),
        moved(
            &mut op,
            "notion",
            TargetState::Failed,
            Actor::BackendWatcher,
            Patch::detail("vendor refused the mint"),
        ),
        moved(
            &mut op,
            "slack",
            TargetState::Initiated,
            Actor::BackendWatcher,
            link(&long_url, "ca_slack_1"),
        ),
    ];
    let mut model = card(&[&request(&op)]);
    for e in &events {
        model.apply(e);
    }
    model
}

/// Whether a line is a link on a line of its own (the one kind of line that may be wider
/// than the terminal: the terminal wraps it, the card never cuts it).
fn is_link_line(line: &str) -> bool {
    line.trim_start().starts_with("https://")
}

#[test]
fn lines_never_exceed_the_width_and_links_stay_whole() {
    let model = busy_card();
    let long_url = model.rows()[2].connect_url.clone().unwrap();
    for width in [40u16, 80, 120, 20, 10, 1, 0] {
        let lines = model.render_plain(at(30), width);
        let rest: Vec<String> = lines.iter().filter(|l| !is_link_line(l)).cloned().collect();
        assert_fits(&rest, width.max(1));
        // Each link is on one line, whole: never cut or broken by the card.
        let all = lines.concat();
        assert!(all.contains(GMAIL_URL), "width {width}: gmail link whole");
        assert!(
            lines.iter().any(|l| l.trim_start() == &*long_url),
            "width {width}: long link whole on its own line: {lines:#?}"
        );
    }
}

#[test]
fn the_detail_is_cut_before_the_link() {
    let model = busy_card();
    let lines = model.render_plain(at(0), 80);
    let gmail = &lines[1];
    assert!(gmail.starts_with("  1  gmail   initiated  https://connect.example/gmail/1  "));
    assert!(gmail.ends_with('…'), "{gmail:?}");
    assert_eq!(gmail.chars().count(), 80);
    assert_eq!(
        lines[2].trim_end(),
        "  2  notion  failed     vendor refused the mint"
    );
    // At 120 the gmail detail fits whole.
    let wide = model.render_plain(at(0), 120);
    assert!(wide[1].ends_with("Google consent screen"));
    // At 40 the link goes under the row, whole, and the row keeps some detail.
    let narrow = model.render_plain(at(0), 40);
    assert!(narrow[1].starts_with("  1  gmail   initiated  waiting"));
    assert_eq!(narrow[2], format!("     {GMAIL_URL}"));
}

#[test]
fn the_card_has_a_title_a_hint_a_bar_and_key_help() {
    let mut model = card(&[&request(&op())]);
    model.set_keys(true);
    let lines = model.render_plain(at(48), 80);
    assert_eq!(lines[0], "connop · op 010203040506 · 0/2 resolved");
    assert_eq!(lines[1], format!("  1  gmail   initiated  {GMAIL_URL}"));
    assert_eq!(lines[2], "  2  notion  pending");
    assert_eq!(
        lines[3],
        "Open a link in a browser to connect that account; the card updates by itself."
    );
    assert_eq!(lines[4], "[█████████████████░░░] 4:12 left");
    assert_eq!(lines[5], "1–2 skip a row · c continue · q quit (interrupt)");
    assert_eq!(lines.len(), 6);
    let narrow = model.render_plain(at(48), 40);
    assert_eq!(narrow[2], format!("     {GMAIL_URL}"));
    assert_eq!(narrow.last().unwrap(), "1–2 skip · c continue · q quit");
    assert_fits(&narrow, 40);
}

#[test]
fn the_keys_line_shows_only_when_keys_can_be_read() {
    let mut model = card(&[&request(&op())]);
    let without = model.render_plain(at(0), 80);
    assert!(without.iter().all(|l| !l.contains("skip")), "{without:#?}");
    assert_eq!(model.keys_line(), None);
    model.set_keys(true);
    let with = model.render_plain(at(0), 80);
    assert_eq!(with.len(), without.len() + 1);
    assert!(model.keys_line().unwrap().starts_with("1–2 skip a row"));
}

#[test]
fn no_hint_without_a_link_to_open() {
    let model = card(&[&request(&new_op(&["gmail"]))]);
    let lines = model.render_plain(at(0), 80);
    assert!(lines.iter().all(|l| !l.contains("browser")), "{lines:#?}");
}

fn bar(model: &CardModel, now: Timestamp, width: u16) -> String {
    let lines = model.render_plain(now, width);
    let bar = lines.iter().find(|l| l.ends_with(" left"));
    bar.cloned().unwrap_or_default()
}

#[test]
fn the_time_bar_follows_the_time_left() {
    let model = card(&[&request(&op())]);
    assert_eq!(bar(&model, at(0), 80), "[████████████████████] 5:00 left");
    assert_eq!(bar(&model, at(150), 80), "[██████████░░░░░░░░░░] 2:30 left");
    assert_eq!(bar(&model, at(300), 80), "[░░░░░░░░░░░░░░░░░░░░] 0:00 left");
    assert_eq!(bar(&model, at(999), 80), "[░░░░░░░░░░░░░░░░░░░░] 0:00 left");
    let almost = Timestamp::from_nanos(at(300).as_nanos() - 1);
    assert_eq!(bar(&model, almost, 80), "[█░░░░░░░░░░░░░░░░░░░] 0:01 left");
    // Narrow terminals get a shorter bar, then the time alone.
    assert_eq!(bar(&model, at(150), 20), "[████░░░░] 2:30 left");
    assert_eq!(bar(&model, at(150), 12), "2:30 left");
    let mut fresh = CardModel::new();
    let Event::Request(mut req) = request(&op()) else {
        unreachable!()
    };
    req.timeout_seconds = 7200.0;
    req.deadline_at = at(7200);
    fresh.apply(&Event::Request(req));
    assert_eq!(
        bar(&fresh, at(0), 80),
        "[████████████████████] 2:00:00 left"
    );
}

#[test]
fn a_settled_card_shows_final_states_and_the_reason() {
    let mut op = op();
    let req = request(&op);
    let skip = moved(
        &mut op,
        "notion",
        TargetState::Skipped,
        Actor::User,
        Patch::default(),
    );
    let fin = settled(&mut op, SettleReason::Continue);
    let model = card(&[&req, &skip, &fin]);
    for width in [40u16, 80, 120] {
        let lines = model.render_plain(at(20), width);
        assert_fits(&lines, width);
        assert_eq!(lines[0], "connop · op 010203040506 · settled");
        assert!(lines[1].starts_with("  1  gmail   not connected"));
        assert!(lines[2].starts_with("  2  notion  skipped"));
        assert_eq!(lines.last().unwrap(), "settled: you continued");
        let all = lines.concat();
        assert!(!all.contains("left") && !all.contains("quit") && !all.contains("https"));
    }
}

#[test]
fn an_empty_card_waits() {
    let lines = CardModel::new().render_plain(at(0), 80);
    assert_eq!(lines, vec!["connop · waiting for the card…".to_owned()]);
    assert_eq!(CardModel::new().press(b'c'), None);
    assert_eq!(CardModel::new().press(b'q'), Some(CardAction::Interrupt));
}

#[test]
fn names_are_capped_and_control_characters_are_shown_escaped() {
    let mut op = new_op(&["a-very-long-connector-name-indeed", "b\u{1b}[31m"]);
    let frame = moved(
        &mut op,
        "b\u{1b}[31m",
        TargetState::Failed,
        Actor::BackendWatcher,
        Patch::detail("bad\x1b[2Jthing\nhere"),
    );
    let model = card(&[&request(&op), &frame]);
    let lines = model.render_plain(at(0), 80);
    assert_fits(&lines, 80);
    assert!(lines[1].starts_with("  1  a-very-long-con…  pending"));
    assert!(lines[2].starts_with("  2  b\\x1b[31m  "), "{:?}", lines[2]);
    assert!(
        lines[2].ends_with("bad\\x1b[2Jthing\\nhere"),
        "{:?}",
        lines[2]
    );
    assert!(lines.iter().all(|l| !l.chars().any(char::is_control)));
    let line = model.plain_line(&frame).unwrap();
    assert!(!line.chars().any(char::is_control));
    assert!(
        line.starts_with("b\\x1b[31m: ") && line.ends_with("bad\\x1b[2Jthing\\nhere"),
        "{line}"
    );
}

/// The plain lines say what the card says, in its words: no move arrow, no actor, no wire
/// name of a settle reason.
#[test]
fn plain_lines_for_each_event_kind() {
    let mut op = new_op(&["gmail", "notion"]);
    let mut model = CardModel::new();
    let mut line = |event: &Event| {
        model.apply(event);
        model.plain_line(event)
    };
    let minted = moved(
        &mut op,
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        link(GMAIL_URL, "ca_gmail_1"),
    );
    assert_eq!(
        line(&minted).unwrap(),
        format!("gmail: initiated {GMAIL_URL}")
    );
    let failed = moved(
        &mut op,
        "notion",
        TargetState::Failed,
        Actor::BackendWatcher,
        Patch::detail("vendor refused"),
    );
    assert_eq!(line(&failed).unwrap(), "notion: failed — vendor refused");
    assert_eq!(
        line(&request(&op)).unwrap(),
        format!(
            "connop · op 010203040506 · 0/2 resolved: gmail initiated {GMAIL_URL}, notion \
             failed — vendor refused"
        )
    );
    let change = op
        .refresh(
            "gmail",
            Some("https://connect.example/gmail/2".into()),
            None,
            Actor::BackendWatcher,
        )
        .unwrap();
    let refreshed = Event::Update(Box::new(UpdateFrame {
        view: OperationView::of(&op),
        change: Some(change),
    }));
    assert_eq!(
        line(&refreshed).unwrap(),
        "gmail: initiated https://connect.example/gmail/2"
    );
    let connected = moved(
        &mut op,
        "gmail",
        TargetState::Connected,
        Actor::BackendWatcher,
        Patch::default(),
    );
    assert_eq!(line(&connected).unwrap(), "gmail: connected");
    let skipped = moved(
        &mut op,
        "notion",
        TargetState::Skipped,
        Actor::User,
        Patch::default(),
    );
    assert_eq!(line(&skipped).unwrap(), "notion: skipped — vendor refused");
    let fin = settled(&mut op, SettleReason::AllResolved);
    assert_eq!(
        line(&fin).unwrap(),
        "settled: all resolved — gmail connected, notion skipped"
    );
    let Event::Update(mut bare) = fin else {
        unreachable!()
    };
    bare.view.settled_by = None;
    bare.view.seq += 1;
    assert_eq!(line(&Event::Update(bare)), None);
}

#[test]
fn bytes_map_to_keys() {
    assert_eq!(Key::from_byte(b'1'), Some(Key::Digit(1)));
    assert_eq!(Key::from_byte(b'9'), Some(Key::Digit(9)));
    assert_eq!(Key::from_byte(b'0'), Some(Key::Digit(0)));
    assert_eq!(Key::from_byte(b'\r'), Some(Key::Enter));
    assert_eq!(Key::from_byte(b'\n'), Some(Key::Enter));
    assert_eq!(Key::from_byte(0x7f), Some(Key::Backspace));
    assert_eq!(Key::from_byte(b'c'), Some(Key::Continue));
    assert_eq!(Key::from_byte(b'C'), Some(Key::Continue));
    assert_eq!(Key::from_byte(b'q'), Some(Key::Interrupt));
    assert_eq!(Key::from_byte(b'Q'), Some(Key::Interrupt));
    assert_eq!(Key::from_byte(0x03), Some(Key::Interrupt));
    for other in [b'x', b' ', 0x1b, 0x04, 0xff] {
        assert_eq!(Key::from_byte(other), None, "{other:#x}");
    }
}

#[test]
fn rows_past_nine_take_two_digits() {
    let names: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut model = card(&[&request(&new_op(&names))]);
    model.set_keys(true);
    let skip = |n: usize| Some(CardAction::Skip(format!("c{n}").into()));
    assert!(
        model
            .keys_line()
            .unwrap()
            .starts_with("1–12 skip a row (Enter after 1)")
    );
    // 2 to 9 cannot start a longer number here: at once.
    assert_eq!(model.press(b'5'), skip(5));
    // 1 may: it waits, and says so.
    assert_eq!(model.press(b'1'), None);
    assert_eq!(model.pending_row(), Some(1));
    let lines = model.render_plain(at(0), 100);
    assert!(
        lines.last().unwrap().starts_with("row 1…: Enter skips it"),
        "{lines:#?}"
    );
    assert_eq!(model.press(b'2'), skip(12));
    assert_eq!(model.pending_row(), None);
    assert_eq!(model.press(b'1'), None);
    assert_eq!(model.press(b'0'), skip(10));
    assert_eq!(model.press(b'1'), None);
    assert_eq!(model.press(b'\r'), skip(1));
    // Backspace takes the digit back; Enter alone does nothing.
    assert_eq!(model.press(b'1'), None);
    assert_eq!(model.press(0x7f), None);
    assert_eq!(model.press(b'\r'), None);
    // Another key drops a number being typed.
    assert_eq!(model.press(b'1'), None);
    assert_eq!(model.press(b'x'), None);
    assert_eq!(model.pending_row(), None);
    assert_eq!(model.press(b'0'), None);
    assert_eq!(model.press(b'1'), None);
    assert_eq!(model.press(b'3'), None, "no row 13");
}

#[test]
fn keys_turn_into_actions_on_skippable_rows_only() {
    let mut op = new_op(&["gmail", "notion", "slack"]);
    let req = request(&op);
    let connected = {
        op.transition(
            "gmail",
            TargetState::Initiated,
            Actor::BackendWatcher,
            link(GMAIL_URL, "ca"),
        )
        .unwrap();
        moved(
            &mut op,
            "gmail",
            TargetState::Connected,
            Actor::BackendWatcher,
            Patch::default(),
        )
    };
    let failed = moved(
        &mut op,
        "slack",
        TargetState::Failed,
        Actor::BackendWatcher,
        Patch::default(),
    );
    let mut model = card(&[&req, &connected, &failed]);
    assert_eq!(model.press(b'1'), None, "connected: resolved");
    assert_eq!(model.press(b'2'), Some(CardAction::Skip("notion".into())));
    assert_eq!(model.press(b'3'), Some(CardAction::Skip("slack".into())));
    assert_eq!(model.press(b'4'), None, "no row 4");
    assert_eq!(model.press(b'9'), None);
    assert_eq!(model.press(b'c'), Some(CardAction::Continue));
    assert_eq!(model.press(b'C'), Some(CardAction::Continue));
    assert_eq!(model.press(b'q'), Some(CardAction::Interrupt));
    assert_eq!(model.press(b'Q'), Some(CardAction::Interrupt));
    assert_eq!(model.press(0x03), Some(CardAction::Interrupt));
    assert_eq!(model.press(b'x'), None);
    assert_eq!(model.press(b'0'), None);
    let skipped = moved(
        &mut op,
        "notion",
        TargetState::Skipped,
        Actor::User,
        Patch::default(),
    );
    model.apply(&skipped);
    assert_eq!(model.press(b'2'), None, "skipped: resolved");
    let fin = settled(&mut op, SettleReason::Interrupt);
    model.apply(&fin);
    assert_eq!(model.press(b'3'), None, "settled: nothing to skip");
    assert_eq!(model.press(b'c'), None);
    assert_eq!(model.press(b'q'), Some(CardAction::Interrupt));
}

#[test]
fn actions_become_card_answers() {
    assert_eq!(
        CardAction::Skip("notion".into()).to_answer(),
        Some(CardAnswer::skip(&["notion"]))
    );
    assert_eq!(
        CardAction::Continue.to_answer(),
        Some(CardAnswer::continue_())
    );
    assert_eq!(CardAction::Interrupt.to_answer(), None);
}

#[test]
fn escape_sequences_are_not_keys() {
    let mut filter = EscapeFilter::new();
    let keys = |filter: &mut EscapeFilter, bytes: &[u8]| -> Vec<u8> {
        bytes.iter().filter_map(|b| filter.feed(*b)).collect()
    };
    assert_eq!(keys(&mut filter, b"\x1b[A\x1b[1~2"), b"2");
    assert_eq!(keys(&mut filter, b"\x1b[1;5C1"), b"1");
    assert_eq!(keys(&mut filter, b"\x1bOPc"), b"c");
    assert_eq!(keys(&mut filter, b"\x1bq"), b"q", "Alt+q still quits");
    assert_eq!(keys(&mut filter, b"c\x03"), b"c\x03");
}

#[test]
fn terminal_helpers_answer_without_a_terminal() {
    assert!(terminal_size().0 > 0 && terminal_size().1 > 0);
    // Whatever the test harness gives us, these must not panic, and raw mode restores.
    let _ = stdin_is_terminal() || stderr_is_terminal();
    drop(RawMode::enter());
}

#[test]
fn sample_render() {
    let mut op = new_op(&["gmail", "notion", "slack"]);
    let req = request(&op);
    let gmail = moved(
        &mut op,
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        Patch {
            detail: Some("waiting for the user to finish the Google consent screen".into()),
            ..link(GMAIL_URL, "ca_gmail_1")
        },
    );
    let notion = moved(
        &mut op,
        "notion",
        TargetState::Initiated,
        Actor::BackendWatcher,
        link("https://connect.example/notion/7", "ca_notion_7"),
    );
    let slack = moved(
        &mut op,
        "slack",
        TargetState::Failed,
        Actor::BackendWatcher,
        Patch::detail("vendor refused the mint"),
    );
    let model = card(&[&req, &gmail, &notion, &slack]);
    let lines = model.render_plain(at(48), 80);
    assert_fits(&lines, 80);
    for line in lines {
        println!("{line}");
    }
}

#[test]
fn style_follows_no_color_term_and_known_terminals() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(style_from_env(env(&[("NO_COLOR", "1")])), None);
    assert_eq!(style_from_env(env(&[("TERM", "dumb")])), None);
    let plain_xterm = Style {
        color: true,
        hyperlinks: false,
    };
    // An empty NO_COLOR is no request (no-color.org).
    assert_eq!(
        style_from_env(env(&[("NO_COLOR", ""), ("TERM", "xterm-256color")])),
        Some(plain_xterm)
    );
    let linked = Some(Style {
        color: true,
        hyperlinks: true,
    });
    assert_eq!(
        style_from_env(env(&[("TERM_PROGRAM", "iTerm.app")])),
        linked
    );
    assert_eq!(style_from_env(env(&[("VTE_VERSION", "7006")])), linked);
    assert_eq!(style_from_env(env(&[("TERM", "xterm-kitty")])), linked);
    assert_eq!(style_from_env(env(&[("FORCE_HYPERLINK", "1")])), linked);
    assert_eq!(
        style_from_env(env(&[("FORCE_HYPERLINK", "0"), ("WT_SESSION", "x")])),
        Some(plain_xterm)
    );
}

/// The card as a person sees it, at three widths, open and settled.
#[test]
fn snapshots_of_the_card() {
    let mut model = busy_card();
    model.set_keys(true);
    for width in [100u16, 60, 30] {
        let text = model.render_plain(at(48), width).join("\n");
        insta::assert_snapshot!(format!("busy_card_{width}"), text);
    }
    let painted: Vec<String> = model
        .render(at(48), 100)
        .iter()
        .map(|l| {
            l.paint(Style {
                color: true,
                hyperlinks: true,
            })
            .escape_debug()
            .to_string()
        })
        .collect();
    insta::assert_snapshot!("busy_card_painted", painted.join("\n"));
    let mut op = op();
    let req = request(&op);
    let connected = moved(
        &mut op,
        "gmail",
        TargetState::Connected,
        Actor::BackendWatcher,
        Patch::default(),
    );
    let fin = settled(&mut op, SettleReason::Continue);
    let model = card(&[&req, &connected, &fin]);
    insta::assert_snapshot!("settled_card", model.render_plain(at(20), 80).join("\n"));
}

/// After a Deny (a row failed) the card says what is left to do: the row is not resolved
/// until it is skipped, or Continue settles with what is connected.
#[test]
fn a_failed_row_says_what_is_left_to_do() {
    let mut op = op();
    let req = request(&op);
    let connected = moved(
        &mut op,
        "gmail",
        TargetState::Connected,
        Actor::BackendWatcher,
        Patch::default(),
    );
    let denied = moved(
        &mut op,
        "notion",
        TargetState::Failed,
        Actor::BackendWatcher,
        Patch::detail("user denied access"),
    );
    let mut model = card(&[&req, &connected, &denied]);
    model.set_keys(true);
    let text = model.render_plain(at(20), 80).join("\n");
    assert!(text.contains("1/2 resolved"), "{text}");
    assert!(
        text.contains("notion is not resolved: press 2 to skip it, or c to continue"),
        "{text}"
    );
    insta::assert_snapshot!("denied_card", text);
    // Without keys to read, it says what ends the wait instead.
    model.set_keys(false);
    let text = model.render_plain(at(20), 80).join("\n");
    assert!(!text.contains("press"), "{text}");
    assert!(text.contains("notion is not resolved"), "{text}");
}

/// The final card and the summary word each outcome the same way.
#[test]
fn the_final_card_and_the_summary_share_their_words() {
    let mut op = new_op(&["gmail", "notion", "slack", "github", "linear"]);
    let req = request(&op);
    let mut events = vec![req];
    for (name, to, actor) in [
        ("gmail", TargetState::Initiated, Actor::BackendWatcher),
        ("gmail", TargetState::Connected, Actor::BackendWatcher),
        ("notion", TargetState::Skipped, Actor::User),
        ("slack", TargetState::Initiated, Actor::BackendWatcher),
        ("slack", TargetState::Failed, Actor::BackendWatcher),
        ("github", TargetState::Initiated, Actor::BackendWatcher),
        ("github", TargetState::Expired, Actor::Clock),
    ] {
        events.push(moved(&mut op, name, to, actor, Patch::default()));
    }
    events.push(settled(&mut op, SettleReason::Continue));
    let model = card(&events.iter().collect::<Vec<_>>());
    let lines = model.render_plain(at(20), 80);
    let result = serde_json::to_value(OperationView::of(&op)).unwrap();
    let summary =
        crate::cli::connect::outcome::summary(&result, |name| model.last_live_state(name));
    for (i, name) in ["gmail", "notion", "slack", "github", "linear"]
        .iter()
        .enumerate()
    {
        let row = lines[i + 1]
            .split_whitespace()
            .skip(2)
            .collect::<Vec<_>>()
            .join(" ");
        let said = summary[i]
            .strip_prefix(*name)
            .unwrap_or_default()
            .trim()
            .to_owned();
        assert_eq!(
            row, said,
            "{name}: the card says {row:?}, the summary {said:?}"
        );
    }
    assert_eq!(lines.last().unwrap(), "settled: you continued");
}
