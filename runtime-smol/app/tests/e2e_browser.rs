//! A person in a real browser (docs/contract.md#consent-page and docs/operating.md#connop-connect):
//! headless Chromium, driven over WebDriver, opens the links `connop connect gmail notion` prints
//! on a pseudo-terminal, approves one and denies the other on the consent page, and the card
//! follows; re-opening a decided link changes nothing. And a page of another origin, open in the
//! same browser, posts to the HTTP API and to a consent link and changes nothing. Runs with
//! `CONNOP_BROWSER_TESTS=1` and the distribution's `chromium` and `chromium-driver` packages;
//! otherwise it is reported ignored, with the reason.

mod support;

use connop_app::sim_gateway::{SimOptions, SimRequest, SimToolGateway};
use connop_core::tool_gateway::AccountStatus;
use std::io::{BufRead, BufReader, Write};
use support::connop;
use support::http_api::Api;
use support::stores::{Place, StoreKind};
use support::terminal::OnTerminal;
use support::webdriver::Browser;

/// The whole link the card printed for `connector`'s account, and the account's id.
fn link_in(shown: &str, connector: &str) -> (String, String) {
    let end = shown
        .find(&format!("/connect/ca_{connector}_"))
        .unwrap_or_else(|| panic!("no link to {connector}: {shown}"));
    let start = shown[..end].rfind("http://").expect("the link's start");
    let tail = &shown[end..];
    let len = tail
        .find(|c: char| c.is_whitespace() || c.is_control())
        .unwrap_or(tail.len());
    let link = shown[start..end + len].to_owned();
    let id = link.rsplit('/').next().unwrap_or_default().to_owned();
    (link, id)
}

#[test]
#[cfg_attr(
    not(connop_browser_tests),
    ignore = "set CONNOP_BROWSER_TESTS=1 to run the browser test (needs the chromium and chromium-driver packages)"
)]
fn a_person_approves_one_link_and_denies_the_other_in_chromium() {
    let sim = SimToolGateway::start(SimOptions::default().token("t0ken")).unwrap();
    let mut command = connop();
    command
        .env("CONNECTOR_GATEWAY_URL", sim.url())
        .env("CONNECTOR_GATEWAY_TOKEN", "t0ken")
        .args(["connect", "gmail", "notion"]);
    let mut term = OnTerminal::spawn(command, true, Some((120, 30)));
    term.expect_shown("/connect/ca_notion_");
    // The hint follows the rows: both links are whole by then.
    term.expect_shown("Open a link in a browser");
    let shown = term.shown();
    let ((gmail, gmail_id), (notion, notion_id)) =
        (link_in(&shown, "gmail"), link_in(&shown, "notion"));
    assert!(gmail.starts_with(&sim.url()), "{gmail}");

    let browser = Browser::start();
    browser.open(&gmail);
    browser.wait_for("body.consent");
    let page = browser.text();
    for shown in [
        "Gmail",
        "gmail (simulated)",
        "Read your email",
        "Approve",
        "Deny",
    ] {
        assert!(page.contains(shown), "{shown}: {page}");
    }
    let approve = browser
        .find(r#"button[name="decision"][value="approve"]"#)
        .expect("an Approve button");
    assert!(
        browser
            .find(r#"button[name="decision"][value="deny"]"#)
            .is_some()
    );
    // `scripts/screenshots` sets the folder to `docs/`, for the README.
    let folder = std::env::var_os("CONNOP_SCREENSHOT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into());
    let shot = folder.join("consent-page.png");
    std::fs::write(&shot, browser.screenshot()).unwrap();
    assert_eq!(
        sim.with_world(|w| w.account(&gmail_id).unwrap().status),
        AccountStatus::Pending,
        "showing the page decides nothing"
    );
    browser.click(&approve);
    browser.wait_for("body.message");
    assert!(
        browser.text().contains("Gmail is connected"),
        "{}",
        browser.text()
    );

    browser.open(&notion);
    let deny = browser
        .find(r#"button[name="decision"][value="deny"]"#)
        .expect("a Deny button");
    browser.click(&deny);
    browser.wait_for("body.message");
    assert!(
        browser.text().contains("Access to Notion was denied"),
        "{}",
        browser.text()
    );

    // The card follows the browser.
    term.expect_shown("gmail   connected");
    term.expect_shown("notion  failed     user denied access");

    // Decided links, opened again: they say so and change nothing.
    browser.open(&notion);
    assert!(
        browser.text().contains("already used to deny"),
        "{}",
        browser.text()
    );
    assert!(
        !browser.source().contains("<button"),
        "{}",
        browser.source()
    );
    browser.open(&gmail);
    assert!(
        browser.text().contains("already connected"),
        "{}",
        browser.text()
    );
    assert!(!browser.source().contains("<button"));
    let states = sim.with_world(|w| {
        [w.account(&gmail_id), w.account(&notion_id)].map(|a| {
            let a = a.unwrap();
            (a.status, a.status_reason.clone())
        })
    });
    assert_eq!(
        states,
        [
            (AccountStatus::Active, None),
            (AccountStatus::Failed, Some("user denied access".into()))
        ]
    );

    // Continue: notion is not connected, so the exit status is 3.
    term.press(b"c");
    let shown = support::terminal::strip_escapes(&term.finish(3));
    assert!(
        shown.contains("gmail   connected\r\nnotion  failed: user denied access"),
        "{shown}"
    );
    eprintln!("the consent page's screenshot: {}", shot.display());
}

/// Serves `page` (HTML) to every request on a loopback port of its own: another origin than
/// every connop listener. Its URL.
fn serve_page(page: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    url
}

#[test]
#[cfg_attr(
    not(connop_browser_tests),
    ignore = "set CONNOP_BROWSER_TESTS=1 to run the browser test (needs the chromium and chromium-driver packages)"
)]
fn a_page_of_another_origin_changes_nothing_through_the_api_or_a_consent_link() {
    let place = Place::new(StoreKind::Sqlite);
    let api = Api::start(&place, &[]);
    let sim = SimToolGateway::start(SimOptions::default().token("t0ken")).unwrap();
    let minted = sim.handle(
        SimRequest::new("POST", "/v1/connectors/connections")
            .header("authorization", "Bearer t0ken")
            .body(r#"{"connectors": ["gmail"], "reinitiate": false}"#),
    );
    let row = &minted.json_body()["results"][0];
    let (link, id) = (
        row["connectUrl"].as_str().unwrap().to_owned(),
        row["connectionId"].as_str().unwrap().to_owned(),
    );
    // The worst case: the page even knows a nonce the consent page handed out.
    let consent = sim.handle(SimRequest::new("GET", &format!("/connect/{id}")));
    let marker = r#"name="nonce" value=""#;
    let start = consent.body.find(marker).unwrap() + marker.len();
    let nonce = consent.body[start..].split('"').next().unwrap().to_owned();

    let page = format!(
        r#"<!doctype html><html><head><title>another site</title></head><body>
<form id="decide" method="post" action="{link}">
<input type="hidden" name="nonce" value="{nonce}">
<input type="hidden" name="decision" value="approve">
</form>
<script>
fetch("{api}/v1/runs", {{method: "POST", mode: "no-cors",
    body: JSON.stringify({{input: "from another site", session_id: "xs-browser"}})}})
  .then(() => "sent", (e) => "failed: " + e)
  .then((what) => {{
    const p = document.createElement("p");
    p.id = "fetched";
    p.textContent = what;
    document.body.appendChild(p);
  }});
</script></body></html>"#,
        api = api.url,
    );
    let other = serve_page(page);

    let browser = Browser::start();
    browser.open(&other);
    let fetched = browser.wait_for("#fetched");
    assert!(!fetched.is_empty());
    let (status, sessions) = api.get("/api/sessions");
    assert_eq!(status, 200);
    assert!(
        !sessions.to_string().contains("xs-browser"),
        "the page's text/plain POST made a run: {sessions}"
    );

    // The page submits its form to the consent link: refused, the account stays pending.
    let form = browser.wait_for("#decide");
    browser.submit(&form);
    browser.wait_for("body.message");
    let text = browser.text();
    assert!(text.contains("Nothing was changed"), "{text}");
    assert_eq!(
        sim.with_world(|w| w.account(&id).unwrap().status),
        AccountStatus::Pending,
        "{text}"
    );

    // The consent page's own form, in the same browser, still decides.
    browser.open(&link);
    let approve = browser
        .find(r#"button[name="decision"][value="approve"]"#)
        .expect("an Approve button");
    browser.click(&approve);
    browser.wait_for("body.message");
    assert!(
        browser.text().contains("Gmail is connected"),
        "{}",
        browser.text()
    );
    assert_eq!(
        sim.with_world(|w| w.account(&id).unwrap().status),
        AccountStatus::Active
    );
}
