//! How the real binary ends on an error: one line `connop: <why>` on stderr that names what
//! to fix, and exit 2 for the user's mistakes (a flag's value, an argument) or 1 for the
//! machine's refusals and a peer's failures. Nothing here waits for a timer: every command
//! fails before it serves anything.

mod support;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use support::connop;

/// Runs `connop args…` with `CONNOP_HOME` set to `home` and stdin closed.
fn run(args: &[&str], home: &std::path::Path) -> Output {
    connop()
        .args(args)
        .env("CONNOP_HOME", home)
        .stdin(Stdio::null())
        .output()
        .expect("connop runs")
}

/// The exit code and the `connop: ` line of stderr (the embedded tool gateway's notices
/// aside).
fn failure(output: &Output) -> (Option<i32>, String) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .rfind(|l| l.starts_with("connop: "))
        .unwrap_or_default()
        .to_owned();
    (output.status.code(), line)
}

/// A fresh folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("connop-e2e-errors-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_bad_flag_value_is_a_usage_error_naming_the_flag() {
    let home = Scratch::new("flags");
    let cases: [(&[&str], &str); 7] = [
        (
            &["gateway", "--tick=-1"],
            "connop: --tick must be a non-negative number of seconds, not -1",
        ),
        (
            // A watcher with no pause between reads floods the tool gateway.
            &["connect", "gmail", "--tick", "0"],
            "connop: --tick must be at least 0.01 seconds (each live row is read once per tick), not 0",
        ),
        (
            &["gateway", "--tick", "0.001"],
            "connop: --tick must be at least 0.01 seconds (each live row is read once per tick), not 0.001",
        ),
        (
            &["connect", "gmail", "--deadline=1e300"],
            "connop: --deadline is too large: 1e300 seconds",
        ),
        (
            &["gateway", "--deadline", "NaN"],
            "connop: --deadline must be a non-negative number of seconds, not NaN",
        ),
        (
            &["sim-gateway", "--auto-complete", "inf"],
            "connop: --auto-complete must be a non-negative number of seconds, not inf",
        ),
        (
            &["lease", "hold", "s1", "--metadata", "[1]"],
            "connop: --metadata must be a JSON object, e.g. '{\"app\": \"desktop\"}': [1] is not an object",
        ),
    ];
    for (args, line) in cases {
        let output = run(args, &home.0);
        assert_eq!(failure(&output), (Some(2), line.to_owned()), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    // Nothing was started: no lease was taken, no state written.
    assert!(!home.0.join("runtime").exists());
}

#[test]
fn a_return_url_setting_connect_does_not_understand_is_refused_not_ignored() {
    let home = Scratch::new("return-url");
    let output = connop()
        .args(["connect", "gmail"])
        .env("CONNOP_HOME", &home.0)
        .env("CONNOP_RETURN_URL", "https://example.com/back")
        .stdin(Stdio::null())
        .output()
        .expect("connop runs");
    assert_eq!(
        failure(&output),
        (
            Some(2),
            "connop: CONNOP_RETURN_URL=\"https://example.com/back\" is not understood: set it to \
             'loopback' (a return URL on 127.0.0.1 for a hosted tool gateway that redirects \
             there), or unset it"
                .to_owned()
        )
    );
    // Every command a person runs names the variables it reads in its help.
    for command in ["connect", "connectors", "gateway"] {
        let help = run(&[command, "--help"], &home.0);
        let text = String::from_utf8_lossy(&help.stdout);
        for variable in ["CONNECTOR_GATEWAY_URL", "CONNOP_HOME", "CONNOP_RETURN_URL"] {
            assert!(text.contains(variable), "{command} --help: {variable}");
        }
    }
}

#[test]
fn a_stderr_nobody_can_write_changes_no_exit_status() {
    // A closed pipe or a full disk on stderr: the exit status still tells (no panic, 101).
    let home = Scratch::new("stderr");
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let typo = connop()
        .args(["connect", "gmial"])
        .env("CONNOP_HOME", &home.0)
        .stdin(Stdio::null())
        .stderr(full())
        .output()
        .expect("connop runs");
    assert_eq!(typo.status.code(), Some(2));
    let connected = connop()
        .args(["connect", "gmail", "--sim-auto", "0"])
        .env("CONNOP_HOME", &home.0)
        .stdin(Stdio::null())
        .stderr(full())
        .output()
        .expect("connop runs");
    assert_eq!(connected.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&connected.stdout),
        "gmail  connected\n"
    );
}

#[test]
fn arguments_that_cannot_work_together_or_at_all_are_usage_errors() {
    let home = Scratch::new("arguments");
    let sim_auto = connop()
        .args(["connect", "gmail", "--sim-auto", "1"])
        .env("CONNOP_HOME", &home.0)
        .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
        .stdin(Stdio::null())
        .output()
        .expect("connop runs");
    assert_eq!(
        failure(&sim_auto),
        (
            Some(2),
            "connop: --sim-auto applies to the embedded simulated gateway; unset CONNECTOR_GATEWAY_URL".to_owned()
        )
    );
    let empty_url = run(&["peer", "dm", "mini", "hi", "--url", ""], &home.0);
    let (code, line) = failure(&empty_url);
    assert_eq!(code, Some(2));
    assert!(
        line.starts_with("connop: --url \"\" is not a usable peer URL"),
        "{line}"
    );
    // What the parser refuses exits 2 as well.
    let parser = run(&["gateway", "--listen", "udp:1"], &home.0);
    assert_eq!(parser.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&parser.stderr);
    assert!(
        stderr.contains("'udp:1' is neither unix:PATH nor tcp:HOST:PORT"),
        "{stderr}"
    );
}

#[test]
fn what_the_machine_refuses_exits_1_naming_the_path_or_address() {
    let home = Scratch::new("machine");
    let socket = home.0.join("no-such-folder").join("rpc.sock");
    let listen = format!("unix:{}", socket.display());
    let output = run(&["gateway", "--listen", &listen], &home.0);
    let (code, line) = failure(&output);
    assert_eq!(code, Some(1));
    assert!(
        line.starts_with(&format!("connop: cannot listen on {listen}: ")),
        "{line}"
    );
    // Refused before anything started: no embedded tool gateway announced beside the error.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().collect::<Vec<_>>(), [line.as_str()]);

    // CONNOP_HOME is a file: the state database has no folder to live in.
    let file = home.0.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let output = run(&["gateway", "--http", "127.0.0.1:0"], &file);
    let (code, line) = failure(&output);
    assert_eq!(code, Some(1));
    assert!(
        line.starts_with(&format!("connop: cannot create {}: ", file.display())),
        "{line}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("listening "), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = run(&["sim-gateway", "--listen", &addr], &home.0);
    let (code, line) = failure(&output);
    assert_eq!(code, Some(1));
    assert!(
        line.starts_with(&format!("connop: cannot listen on {addr}: ")),
        "{line}"
    );

    // An unreadable lease registry refuses, with its reason in front.
    std::fs::create_dir_all(home.0.join("runtime")).unwrap();
    std::fs::write(home.0.join("runtime/active_sessions.json"), b"{oops").unwrap();
    let output = run(&["lease", "list"], &home.0);
    let (code, line) = failure(&output);
    assert_eq!(code, Some(1));
    assert!(
        line.starts_with("connop: SESSION_COORDINATION_UNAVAILABLE: the session registry "),
        "{line}"
    );
}

#[test]
fn a_peer_that_cannot_be_reached_exits_1_naming_the_url() {
    let home = Scratch::new("peer");
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let url = format!("http://{addr}");
    let output = run(&["peer", "dm", "mini", "hi", "--url", &url], &home.0);
    let (code, line) = failure(&output);
    assert_eq!(code, Some(1));
    assert!(
        line.starts_with(&format!("connop: GET {url}/api/sessions failed: ")),
        "{line}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn error_lines_escape_the_control_characters_a_peer_or_a_tool_gateway_sent() {
    use connop_fixtures::canned::{Server, reply};
    use serde_json::json;
    let home = Scratch::new("escapes");
    // A peer whose refusal would set the terminal's title and clear the screen.
    let peer = Server::start(vec![reply(
        500,
        json!({"error": {"message": "boom\u{1b}]0;owned\u{7}\u{1b}[2J\nsecond line"}}),
    )]);
    let url = format!("http://{}", peer.addr);
    let output = run(&["peer", "dm", "mini", "hi", "--url", &url], &home.0);
    peer.finish();
    let (code, line) = failure(&output);
    assert_eq!(code, Some(1));
    assert!(
        line.ends_with("boom\\x1b]0;owned\\x07\\x1b[2J\\nsecond line"),
        "{line}"
    );
    assert!(!output.stderr.contains(&0x1b), "{line}");

    // A tool gateway listing a connector whose name holds escape sequences.
    let tool_gateway = Server::start(vec![reply(
        200,
        json!({"items": [{"connector": "gm\u{1b}[31mail", "enabled": true}], "nextCursor": null}),
    )]);
    let output = connop()
        .args(["connect", "nosuch"])
        .env("CONNOP_HOME", &home.0)
        .env(
            "CONNECTOR_GATEWAY_URL",
            format!("http://{}", tool_gateway.addr),
        )
        .env("CONNECTOR_GATEWAY_TOKEN", "t0ken")
        .stdin(Stdio::null())
        .output()
        .expect("connop runs");
    tool_gateway.finish();
    let (code, line) = failure(&output);
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("gm\\x1b[31mail"), "{line}");
    assert!(!output.stderr.contains(&0x1b), "{line}");
}
