//! `connop connect` end to end: off a terminal it finishes on its own with `--sim-auto`;
//! under a pseudo-terminal the live card takes keys (a row number skips, `c` continues, `q`
//! and Ctrl-C interrupt). Every wait is a channel receive with a generous bound.

mod support;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};
use support::{BOUND, connop, wait_bounded};

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
        stderr.contains("gmail: initiated -> connected"),
        "one line per change off a terminal: {stderr}"
    );
}

/// A child on a pseudo-terminal: everything it writes, and a way to type.
struct OnTerminal {
    master: std::fs::File,
    output: Receiver<Vec<u8>>,
    seen: Vec<u8>,
    child: std::process::Child,
}

impl OnTerminal {
    fn start(args: &[&str]) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pty");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().expect("a path"))
            .expect("the slave side")
            .into();
        let child = connop()
            .args(args)
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("connop runs");
        let master = std::fs::File::from(master);
        let mut reader = master.try_clone().unwrap();
        let (tx, output) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        OnTerminal {
            master,
            output,
            seen: Vec::new(),
            child,
        }
    }

    /// Waits until the output contains `text`.
    fn expect(&mut self, text: &str) {
        let deadline = Instant::now() + BOUND;
        while !String::from_utf8_lossy(&self.seen).contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(_) => panic!(
                    "no {text:?} on the terminal; saw:\n{}",
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }

    fn press(&mut self, key: &[u8]) {
        self.master.write_all(key).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits for the exit, checks its status, and returns everything shown.
    fn finish(mut self, code: i32) -> String {
        let status = wait_bounded(self.child);
        assert_eq!(status.code(), Some(code), "{status:?}");
        while let Ok(chunk) = self.output.recv_timeout(Duration::from_millis(200)) {
            self.seen.extend(chunk);
        }
        String::from_utf8_lossy(&self.seen).into_owned()
    }
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
