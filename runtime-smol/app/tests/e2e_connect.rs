//! `connop connect` end to end: off a terminal it finishes on its own with `--sim-auto`;
//! under a pseudo-terminal the live card takes keys (a row number skips, `c` continues, `q`
//! and Ctrl-C interrupt). Every wait is a channel receive with a generous bound.

mod support;

use connop_core::tool_gateway::SIMULATED_CATALOG;
use std::process::Stdio;
use support::connop;
use support::terminal::OnTerminal;

#[test]
fn connect_with_sim_auto_finishes_on_its_own_and_prints_the_settled_result() {
    let out = connop()
        .args(["connect", "gmail", "notion", "--sim-auto", "2", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("connop runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the result JSON on stdout");
    assert_eq!(result["status"], "settled");
    assert_eq!(result["settled_by"], "all_resolved");
    assert!(
        result["targets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state"] == "connected")
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("embedded simulated tool gateway"),
        "{stderr}"
    );
    assert!(
        stderr.contains("gmail: connected"),
        "one line per change off a terminal: {stderr}"
    );
}

const HELP: &str = "skip a row";

#[test]
fn on_a_terminal_row_numbers_skip_rows() {
    let mut term = OnTerminal::start(&["connect", "gmail", "notion"]);
    term.expect(HELP);
    term.press(b"1");
    term.expect("skipped");
    term.press(b"2");
    // Settled, nothing connected: exit 3, and the summary says why.
    let shown = term.finish(3);
    assert!(
        shown.contains("gmail   skipped\r\nnotion  skipped"),
        "{shown}"
    );
}

#[test]
fn on_a_terminal_c_continues() {
    let mut term = OnTerminal::start(&["connect", "gmail", "notion"]);
    term.expect(HELP);
    term.press(b"c");
    let shown = term.finish(3);
    assert!(
        shown.contains("gmail   not connected\r\nnotion  not connected"),
        "{shown}"
    );
}

#[test]
fn on_a_terminal_q_and_ctrl_c_interrupt() {
    for key in [&b"q"[..], &[0x03]] {
        let mut term = OnTerminal::start(&["connect", "gmail"]);
        term.expect(HELP);
        term.press(key);
        // Interrupted from the keyboard: 130, as a shell reports Ctrl-C.
        let shown = term.finish(130);
        assert!(
            shown.contains("gmail  not connected"),
            "key {key:?}: {shown}"
        );
    }
}

/// `NO_COLOR` or `TERM=dumb`: no colour and no cursor movement, so not one escape sequence;
/// each change is a line, the links whole, and the keys are said once.
#[test]
fn no_color_and_dumb_terminals_get_plain_lines() {
    for (name, value) in [("NO_COLOR", "1"), ("TERM", "dumb")] {
        let mut command = connop();
        command.env(name, value).args(["connect", "gmail"]);
        let mut term = OnTerminal::spawn(command, true, None);
        term.expect("keys: 1 skip a row");
        term.press(b"q");
        let shown = term.finish(130);
        assert!(!shown.contains('\x1b'), "{name}={value}: {shown:?}");
        // The link whole: its id is 32 hex digits after the connector.
        let id = shown
            .split("/connect/ca_gmail_")
            .nth(1)
            .map(|rest| rest.chars().take_while(char::is_ascii_hexdigit).count());
        assert_eq!(id, Some(32), "{shown}");
        assert!(shown.contains("Open a link in a browser"), "{shown}");
    }
}

/// stdin is not a terminal: no key can be read, so the card shows no keys line.
#[test]
fn without_keys_the_card_shows_no_keys_line() {
    let mut command = connop();
    command.args(["connect", "gmail"]);
    let mut term = OnTerminal::spawn(command, false, None);
    term.expect(" left");
    let kill = std::process::Command::new("kill")
        .args(["-INT", &term.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let shown = term.finish(130);
    assert!(!shown.contains("skip"), "{shown}");
    assert!(!shown.contains("continue"), "{shown}");
}

/// Rows past 9 take two digits; a digit that may start one waits for the next or Enter.
#[test]
fn rows_past_nine_can_be_skipped() {
    use connop_app::sim_gateway::{SimOptions, SimToolGateway};
    let names: Vec<String> = (1..=11).map(|i| format!("c{i}")).collect();
    let sim = SimToolGateway::start(SimOptions::default().token("t0ken")).unwrap();
    sim.apply_state(serde_json::json!({ "listed": names }))
        .unwrap();
    let mut command = connop();
    command
        .env("CONNECTOR_GATEWAY_URL", sim.url())
        .env("CONNECTOR_GATEWAY_TOKEN", "t0ken")
        .env("NO_COLOR", "1")
        .arg("connect")
        .args(&names);
    let mut term = OnTerminal::spawn(command, true, None);
    term.expect("(Enter after 1)");
    term.press(b"11");
    term.expect("c11: skipped");
    term.press(b"1\r");
    term.expect("c1: skipped");
    term.press(b"c");
    let shown = term.finish(3);
    assert!(shown.contains("c1   skipped"), "{shown}");
    assert!(shown.contains("c11  skipped"), "{shown}");
    assert!(shown.contains("c10  not connected"), "{shown}");
}

/// A window too short for the card: the card says what it leaves out, links are hyperlinks
/// where asked, and the keys still work.
#[test]
fn a_short_window_shows_what_fits_and_hyperlinks() {
    let mut command = connop();
    command
        .env("FORCE_HYPERLINK", "1")
        .arg("connect")
        .args(SIMULATED_CATALOG);
    let mut term = OnTerminal::spawn(command, true, Some((60, 10)));
    term.expect("more lines (make the window taller)");
    term.expect("\x1b]8;;http://127.0.0.1:");
    term.press(b"c");
    let shown = term.finish(3);
    // Back on the normal screen, the final card once, then the summary.
    assert!(shown.contains("\x1b[?1049l"), "{shown:?}");
    assert!(shown.contains("settled: you continued"), "{shown:?}");
    assert!(
        shown.contains("google_calendar  not connected"),
        "{shown:?}"
    );
}

/// `connop connectors` on a terminal prints its list and no log line at the default level,
/// as `connect` does there.
#[test]
fn connectors_on_a_terminal_print_no_log_line() {
    let mut command = connop();
    command.env_remove("RUST_LOG").args(["connectors"]);
    let term = OnTerminal::spawn(command, true, None);
    let shown = term.finish(0);
    assert!(shown.contains("google_calendar  not connected"), "{shown}");
    assert!(!shown.contains(" INFO "), "{shown}");
}

/// A name the tool gateway does not list is a usage error said before anything listens:
/// the error line is all there is on stderr.
#[test]
fn a_usage_error_comes_before_anything_listens() {
    let out = connop()
        .env_remove("RUST_LOG")
        .args(["connect", "gmial"])
        .stdin(Stdio::null())
        .output()
        .expect("connop runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["connop: unknown connector 'gmial' (did you mean 'gmail'?)"],
        "{stderr}"
    );
}

/// With `NO_COLOR` the card's lines speak the person's words, as the coloured card does: no
/// actor, no wire name of a settle reason.
#[test]
fn no_color_lines_use_the_cards_words() {
    let mut command = connop();
    command
        .env("NO_COLOR", "1")
        .args(["connect", "gmail", "--sim-auto", "0.5"]);
    let term = OnTerminal::spawn(command, true, None);
    let shown = term.finish(0);
    for internal in ["backend_watcher", "all_resolved", " -> ", "card: "] {
        assert!(!shown.contains(internal), "{internal:?} in {shown}");
    }
    assert!(shown.contains("gmail: connected"), "{shown}");
    assert!(shown.contains("settled: all resolved"), "{shown}");
}

/// `connop connectors` with the embedded simulated gateway says, in one line, that each
/// command starts its own (so a `connect` before it left nothing here); with a hosted tool
/// gateway it says nothing of the kind.
#[test]
fn connectors_say_each_command_starts_its_own_simulated_gateway() {
    let out = connop()
        .args(["connectors"])
        .stdin(Stdio::null())
        .output()
        .expect("connop runs");
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("each command starts its own"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].contains("CONNECTOR_GATEWAY_URL"), "{stderr}");
}
