//! A child process on a pseudo-terminal, as a person runs it: everything it writes, a way
//! to type, and the window's size.

use super::{BOUND, connop, wait_bounded};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A child on a pseudo-terminal: everything it writes, and a way to type.
pub struct OnTerminal {
    master: std::fs::File,
    output: Receiver<Vec<u8>>,
    seen: Vec<u8>,
    child: std::process::Child,
}

impl OnTerminal {
    /// `connop <args>` with stdin, stdout and stderr on a new terminal.
    pub fn start(args: &[&str]) -> Self {
        let mut command = connop();
        command.args(args);
        OnTerminal::spawn(command, true, None)
    }

    /// Runs `command` with stdout and stderr on a new terminal of `size` (columns, rows),
    /// and stdin too when `stdin_terminal` (else stdin is closed).
    pub fn spawn(mut command: Command, stdin_terminal: bool, size: Option<(u16, u16)>) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pty");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        if let Some((cols, rows)) = size {
            let winsize = rustix::termios::Winsize {
                ws_row: rows,
                ws_col: cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            rustix::termios::tcsetwinsize(&master, winsize).expect("the window size");
        }
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().expect("a path"))
            .expect("the slave side")
            .into();
        let stdin = if stdin_terminal {
            Stdio::from(slave.try_clone().unwrap())
        } else {
            Stdio::null()
        };
        let child = command
            .stdin(stdin)
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
    pub fn expect(&mut self, text: &str) {
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

    /// Waits until the output, without its escape sequences, contains `text`.
    pub fn expect_shown(&mut self, text: &str) {
        let deadline = Instant::now() + BOUND;
        while !self.shown().contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(_) => panic!("no {text:?} on the terminal; saw:\n{}", self.shown()),
            }
        }
    }

    /// Everything shown so far without escape sequences (colours, cursor movement, OSC 8).
    pub fn shown(&self) -> String {
        strip_escapes(&self.seen())
    }

    /// Everything shown so far.
    pub fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Types `key`.
    pub fn press(&mut self, key: &[u8]) {
        self.master.write_all(key).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits for the exit, checks its status, and returns everything shown.
    pub fn finish(mut self, code: i32) -> String {
        let status = wait_bounded(self.child);
        assert_eq!(
            status.code(),
            Some(code),
            "{status:?}: {}",
            String::from_utf8_lossy(&self.seen)
        );
        while let Ok(chunk) = self.output.recv_timeout(Duration::from_millis(200)) {
            self.seen.extend(chunk);
        }
        String::from_utf8_lossy(&self.seen).into_owned()
    }
}

/// `text` without its CSI (`ESC [ … final`) and OSC (`ESC ] … ESC \`) sequences.
pub fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\x07' || (c == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}
