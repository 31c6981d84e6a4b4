//! A person in a real browser (SPEC §12.2, §12.3): headless Chromium, driven over WebDriver,
//! opens the links `connop connect gmail notion` prints on a pseudo-terminal, approves one and
//! denies the other on the consent page, and the card follows; re-opening a decided link
//! changes nothing. Runs with `CONNOP_BROWSER_TESTS=1` and the distribution's `chromium` and
//! `chromium-driver` packages; otherwise it is reported ignored, with the reason.

mod support;

use connop_core::tool_gateway::AccountStatus;
use connop_smol::app::sim_gateway::{SimOptions, SimToolGateway};
use support::connop;
use support::terminal::OnTerminal;
use support::webdriver::Browser;

/// The whole link the card printed for `connection_id`.
fn link_in(shown: &str, connection_id: &str) -> String {
    let end = shown
        .find(&format!("/connect/{connection_id}"))
        .unwrap_or_else(|| panic!("no link to {connection_id}: {shown}"));
    let start = shown[..end].rfind("http://").expect("the link's start");
    let tail = &shown[end..];
    let len = tail
        .find(|c: char| c.is_whitespace() || c.is_control())
        .unwrap_or(tail.len());
    shown[start..end + len].to_owned()
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
    term.expect_shown("/connect/ca_notion_1");
    let shown = term.shown();
    let (gmail, notion) = (
        link_in(&shown, "ca_gmail_1"),
        link_in(&shown, "ca_notion_1"),
    );
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
        sim.with_world(|w| w.account("ca_gmail_1").unwrap().status),
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
        [w.account("ca_gmail_1"), w.account("ca_notion_1")].map(|a| {
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
