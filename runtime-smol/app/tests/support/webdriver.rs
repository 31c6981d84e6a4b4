//! A small W3C WebDriver client for the browser test: the distribution's `chromedriver`
//! started on a free loopback port, one headless Chromium session, and the few commands the
//! test needs (navigate, find, click, page source, screenshot), as JSON over isahc.

use super::BOUND;
use isahc::config::Configurable;
use isahc::{HttpClient, ReadResponseExt, Request};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Chromium's flags that work in a container as root, with no network of its own.
const CHROMIUM_FLAGS: [&str; 9] = [
    "--window-size=900,640",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// W3C's key for an element reference in a JSON answer.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running `chromedriver` with one browser session; both end when dropped.
pub struct Browser {
    driver: Child,
    http: HttpClient,
    base: String,
    session: String,
    _profile: TempDir,
}

/// A folder removed when dropped (Chromium's fresh `--user-data-dir`).
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn find_program(names: &[&str]) -> String {
    for name in names {
        for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"] {
            let path = format!("{dir}/{name}");
            if std::path::Path::new(&path).exists() {
                return path;
            }
        }
    }
    panic!("none of {names:?} is installed: apt-get install -y chromium chromium-driver");
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session.
    pub fn start() -> Browser {
        let driver_path = find_program(&["chromedriver"]);
        let chromium = find_program(&["chromium", "chromium-browser"]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let http = HttpClient::builder()
            .proxy(None)
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let profile =
            std::env::temp_dir().join(format!("connop-browser-{}-{port}", std::process::id()));
        let mut browser = Browser {
            driver,
            http,
            base,
            session: String::new(),
            _profile: TempDir(profile.clone()),
        };
        browser.wait_ready();
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let session = browser.command(
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": chromium, "args": args},
            }}}),
        );
        browser.session = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {session}"))
            .to_owned();
        // Finding an element waits for it (a clicked form's answer may still be loading).
        let bound = BOUND.as_millis() as u64;
        browser.command(
            "POST",
            &browser.session_path("/timeouts"),
            json!({"implicit": bound, "pageLoad": bound}),
        );
        browser
    }

    /// Waits for chromedriver's own line saying it listens.
    fn wait_ready(&mut self) {
        let stdout = self.driver.stdout.take().expect("chromedriver's stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("started successfully") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(BOUND)
            .expect("chromedriver says it started within the bound");
    }

    /// One WebDriver command; the answer's `value`. A WebDriver error fails the test.
    fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Content-Type", "application/json")
            // A GET carries no body at all.
            .body(if body.is_null() {
                String::new()
            } else {
                body.to_string()
            })
            .unwrap();
        let mut response = self.http.send(request).expect("chromedriver answers");
        let text = response.text().unwrap();
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(
            response.status().is_success(),
            "{method} {path}: {} {text}",
            response.status()
        );
        answer["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url` and waits for the page to load.
    pub fn open(&self, url: &str) {
        self.command("POST", &self.session_path("/url"), json!({ "url": url }));
    }

    /// The page's HTML as the browser has it now.
    pub fn source(&self) -> String {
        let value = self.command("GET", &self.session_path("/source"), Value::Null);
        value.as_str().unwrap_or_default().to_owned()
    }

    /// The page's visible text.
    pub fn text(&self) -> String {
        let body = self.wait_for("body");
        let value = self.command(
            "GET",
            &self.session_path(&format!("/element/{body}/text")),
            Value::Null,
        );
        value.as_str().unwrap_or_default().to_owned()
    }

    /// The URL the browser is on.
    pub fn url(&self) -> String {
        let value = self.command("GET", &self.session_path("/url"), Value::Null);
        value.as_str().unwrap_or_default().to_owned()
    }

    /// Waits (at most the bound) for an element a CSS selector finds, and returns it.
    pub fn wait_for(&self, css: &str) -> String {
        self.find(css)
            .unwrap_or_else(|| panic!("no {css} on the page: {}", self.source()))
    }

    /// The first element a CSS selector finds, waiting for one at most the bound; `None`
    /// when none came. To check that something is absent, read [`Browser::source`] instead.
    pub fn find(&self, css: &str) -> Option<String> {
        let value = self.command(
            "POST",
            &self.session_path("/elements"),
            json!({"using": "css selector", "value": css}),
        );
        value
            .as_array()
            .and_then(|all| all.first())
            .and_then(|e| e[ELEMENT].as_str())
            .map(str::to_owned)
    }

    /// Clicks an element (a submit button posts its form; the click returns once the next
    /// page has loaded).
    pub fn click(&self, element: &str) {
        self.command(
            "POST",
            &self.session_path(&format!("/element/{element}/click")),
            json!({}),
        );
    }

    /// Submits a form (as its page's script would), and waits for the next page to load.
    pub fn submit(&self, form: &str) {
        self.command(
            "POST",
            &self.session_path("/execute/sync"),
            json!({"script": "arguments[0].submit();", "args": [{ELEMENT: form}]}),
        );
    }

    /// A PNG of the page.
    pub fn screenshot(&self) -> Vec<u8> {
        let value = self.command("GET", &self.session_path("/screenshot"), Value::Null);
        base64_decode(value.as_str().expect("base64 PNG"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = self.session_path("");
            let _ = self.http.send(
                Request::delete(format!("{}{path}", self.base))
                    .body(())
                    .unwrap(),
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (with padding) to bytes.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:#x}"),
        }
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c) << (18 - 6 * i);
        }
        let take = chunk.len() - 1;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    out
}
