//! The vendor's consent page of the simulated gateway (docs/contract.md#consent-page): what a
//! person sees when they open a connect link, and the pure helpers behind it (the form body, the
//! loopback return URL, the catalog's display names and scopes).
//!
//! A `GET` only shows; a decision needs a `POST` with the page's one-time nonce, so a link
//! previewer that fetches the URL decides nothing.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use std::net::{Ipv4Addr, Ipv6Addr};

/// What a query value percent-encodes: everything but RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// How a connector is named on the page, and the scopes its consent asks for.
pub fn catalog_entry(slug: &str) -> (String, &'static [&'static str]) {
    let (name, scopes): (&str, &'static [&'static str]) = match slug {
        "gmail" => ("Gmail", &["Read your email", "Send email on your behalf"]),
        "notion" => (
            "Notion",
            &["Read pages and databases", "Create and edit pages"],
        ),
        "slack" => (
            "Slack",
            &[
                "Read messages in channels you are in",
                "Post messages as you",
            ],
        ),
        "github" => (
            "GitHub",
            &[
                "Read repositories and issues",
                "Open issues and pull requests",
            ],
        ),
        "linear" => (
            "Linear",
            &["Read issues and projects", "Create and update issues"],
        ),
        "google_calendar" => (
            "Google Calendar",
            &["Read your calendars", "Create and change events"],
        ),
        // A connector listed through `/sim/state`: a plain name and generic scopes.
        other => {
            let name = other
                .split(['_', '-'])
                .filter(|w| !w.is_empty())
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_uppercase().chain(c).collect::<String>())
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join(" ");
            return (name, &["Read your account", "Act on your behalf"]);
        }
    };
    (name.to_owned(), scopes)
}

/// The account label a read answers and the page shows.
pub fn account_label(connector: &str) -> String {
    format!("{connector} (simulated)")
}

/// The decision a `POST /connect/<id>` form carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `decision=approve`: the account becomes active.
    Approve,
    /// `decision=deny`: the account fails with `user denied access`.
    Deny,
}

/// The fields of an `application/x-www-form-urlencoded` body, decoded.
pub fn form_fields(body: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let spaced = s.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced)
            .decode_utf8_lossy()
            .into_owned()
    };
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The form's nonce and decision (`None` for a missing or unknown one).
pub fn parse_form(body: &str) -> (Option<String>, Option<Decision>) {
    let fields = form_fields(body);
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let decision = match get("decision").as_deref() {
        Some("approve") => Some(Decision::Approve),
        Some("deny") => Some(Decision::Deny),
        _ => None,
    };
    (get("nonce").filter(|n| !n.is_empty()), decision)
}

/// Whether `url` is an absolute `http://` URL on a loopback host (127.0.0.0/8, `localhost`,
/// `[::1]`): the only return URLs the browser is sent back to, so a page can never redirect a
/// person to another machine.
pub fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &url[7..])
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // `http://127.0.0.1@elsewhere/` is elsewhere: no user info at all.
    if authority.contains('@') || authority.is_empty() {
        return false;
    }
    if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, port)) = v6.split_once(']') else {
            return false;
        };
        return valid_port(port) && host.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    if port.is_some_and(|p| !valid_port(&format!(":{p}"))) {
        return false;
    }
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// The longest `returnTo` a mint takes, in bytes.
pub const MAX_RETURN_TO: usize = 2048;

/// The longest app name a mint takes as its `returnTo`.
pub const MAX_APP_NAME: usize = 128;

/// Why a mint's `returnTo` was refused (400 at the mint; nothing was minted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReturnToError {
    /// A control character (CR, LF, NUL, DEL, …): it could never go into a `Location`.
    #[error("'returnTo' holds a control character")]
    Control,
    /// Longer than [`MAX_RETURN_TO`].
    #[error("'returnTo' is longer than 2048 bytes")]
    TooLong,
    /// Neither an app's name nor a URL the browser may be sent back to.
    #[error(
        "'returnTo' is neither an app name (1 to 128 letters, digits, '.', '_' or '-') nor an \
         http:// URL on a loopback host (127.0.0.0/8, localhost, [::1]) written in printable \
         ASCII without spaces: the browser is sent back only to such a URL"
    )]
    Neither,
}

/// What a mint's `returnTo` may be: the requesting app's name (`connop-desktop`), shown on the
/// consent page, or an `http://` URL on a loopback host that a decision sends the browser back
/// to. Checked at the mint, so that a decision never meets a return URL it cannot use.
pub fn check_return_to(value: &str) -> Result<(), ReturnToError> {
    if value.chars().any(char::is_control) {
        return Err(ReturnToError::Control);
    }
    if value.len() > MAX_RETURN_TO {
        return Err(ReturnToError::TooLong);
    }
    let app_name = (1..=MAX_APP_NAME).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    let url = value.bytes().all(|b| b.is_ascii_graphic()) && is_loopback_http(value);
    if app_name || url {
        Ok(())
    } else {
        Err(ReturnToError::Neither)
    }
}

/// `""` or `:<digits>` within a port's range.
fn valid_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => {
            digits.is_empty()
                || (digits.bytes().all(|b| b.is_ascii_digit()) && digits.parse::<u16>().is_ok())
        }
    }
}

/// `url` with `connection_id=<id>&status=<status>` added to its query (before any fragment).
pub fn with_outcome(url: &str, connection_id: &str, status: &str) -> String {
    let (base, fragment) = match url.split_once('#') {
        Some((base, fragment)) => (base, Some(fragment)),
        None => (url, None),
    };
    let id = percent_encoding::utf8_percent_encode(connection_id, UNRESERVED);
    let mut out = base.to_owned();
    match base.split_once('?') {
        None => out.push('?'),
        Some((_, query)) if query.is_empty() || query.ends_with('&') => {}
        Some(_) => out.push('&'),
    }
    out.push_str(&format!("connection_id={id}&status={status}"));
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// Text made safe for HTML text and attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the consent form shows (every field raw; the page escapes them).
pub struct ConsentForm<'a> {
    /// The account's id (the link's last segment).
    pub connection_id: &'a str,
    /// The connector's slug.
    pub connector: &'a str,
    /// Who asks: the mint's `returnTo`, or `None` for "an app".
    pub requester: Option<&'a str>,
    /// The one-time nonce the form posts back.
    pub nonce: &'a str,
}

/// The consent page: who asks, for which account, with which scopes; Approve and Deny in one
/// form. The markup of the nonce field and the two buttons is relied on by clients that
/// drive the page (tests, benchmarks): keep it byte for byte.
pub fn consent_page(form: &ConsentForm<'_>) -> String {
    let (name, scopes) = catalog_entry(form.connector);
    let name = escape_html(&name);
    let requester = match form.requester {
        Some(app) => format!("<strong>{}</strong>", escape_html(app)),
        None => "An app".to_owned(),
    };
    let scopes: String = scopes
        .iter()
        .map(|s| format!("<li>{}</li>", escape_html(s)))
        .collect();
    let body = format!(
        "<p class=\"who\">{requester} wants to connect to your <strong>{name}</strong> account</p>\n\
         <p class=\"account\">{label}</p>\n\
         <p>It will be able to:</p>\n<ul class=\"scopes\">{scopes}</ul>\n\
         <form method=\"post\" action=\"/connect/{id}\">\n\
         <input type=\"hidden\" name=\"nonce\" value=\"{nonce}\">\n\
         <div class=\"buttons\">\
         <button name=\"decision\" value=\"deny\">Deny</button>\
         <button name=\"decision\" value=\"approve\">Approve</button>\
         </div>\n</form>\n",
        label = escape_html(&account_label(form.connector)),
        id = escape_html(form.connection_id),
        nonce = escape_html(form.nonce),
    );
    page("consent", &format!("Connect {name}"), &body)
}

/// A page with a title and one message (decisions, refusals, stale links).
pub fn message_page(title: &str, text: &str) -> String {
    page(
        "message",
        &escape_html(title),
        &format!("<p>{}</p>\n", escape_html(text)),
    )
}

const STYLE: &str = "\
*{box-sizing:border-box}\
body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;\
background:#f3f4f6;color:#111827;font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}\
main{background:#fff;max-width:28rem;width:calc(100% - 2rem);padding:2rem;border-radius:12px;\
box-shadow:0 1px 3px rgba(0,0,0,.1),0 8px 24px rgba(0,0,0,.06)}\
h1{font-size:1.35rem;margin:0 0 1rem}\
.who{font-size:1.05rem}\
.account{display:inline-block;margin:0 0 .5rem;padding:.2rem .6rem;border-radius:999px;\
background:#eef2ff;color:#3730a3;font-size:.9rem}\
.scopes{padding-left:1.2rem;margin:.25rem 0 1.5rem}\
.buttons{display:flex;gap:.75rem;justify-content:flex-end}\
button{font:inherit;padding:.55rem 1.2rem;border-radius:8px;border:1px solid #d1d5db;\
background:#fff;color:#111827;cursor:pointer}\
button[value=approve]{background:#2563eb;border-color:#2563eb;color:#fff}\
button:focus-visible{outline:3px solid #93c5fd;outline-offset:2px}\
footer{margin-top:1.5rem;color:#6b7280;font-size:.8rem}";

/// A whole page; `kind` (`consent` or `message`) is the body's class, so a client can tell
/// the form from an answer.
fn page(kind: &str, title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{STYLE}</style></head>\n\
         <body class=\"{kind}\"><main><h1>{title}</h1>\n{body}\
         <footer>connop simulated tool gateway</footer></main></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_urls_are_return_urls() {
        for good in [
            "http://127.0.0.1:4000/returned",
            "http://127.9.9.9/",
            "http://localhost:1/x?y=1",
            "HTTP://LOCALHOST",
            "http://[::1]:8080/r",
        ] {
            assert!(is_loopback_http(good), "{good}");
        }
        for bad in [
            "https://127.0.0.1/",
            "connop-desktop",
            "http://example.com/",
            "http://127.0.0.1@example.com/",
            "http://128.0.0.1/",
            "http://[::2]/",
            "http://localhost:99999/",
            "http:///x",
            "",
        ] {
            assert!(!is_loopback_http(bad), "{bad}");
        }
    }

    #[test]
    fn a_return_to_is_an_app_name_or_a_loopback_url_in_printable_ascii() {
        for fine in [
            "connop-desktop",
            "hermes-desktop-dev",
            "portal",
            "a.b_c-1",
            "http://127.0.0.1:4000/returned?op=1#f",
            "http://[::1]/r",
        ] {
            assert_eq!(check_return_to(fine), Ok(()), "{fine}");
        }
        for (bad, why) in [
            (
                "http://127.0.0.1/r\r\nSet-Cookie: a",
                ReturnToError::Control,
            ),
            ("connop-desktop\n", ReturnToError::Control),
            ("http://127.0.0.1/\u{7f}", ReturnToError::Control),
            ("http://127.0.0.1/\u{85}", ReturnToError::Control),
            ("http://127.0.0.1/é", ReturnToError::Neither),
            ("http://127.0.0.1/a b", ReturnToError::Neither),
            ("http://example.com/", ReturnToError::Neither),
            ("https://127.0.0.1/", ReturnToError::Neither),
            ("javascript:alert(1)", ReturnToError::Neither),
            ("connop desktop", ReturnToError::Neither),
            ("", ReturnToError::Neither),
        ] {
            assert_eq!(check_return_to(bad), Err(why), "{bad:?}");
        }
        assert_eq!(check_return_to(&"a".repeat(MAX_APP_NAME)), Ok(()));
        assert_eq!(
            check_return_to(&"a".repeat(MAX_APP_NAME + 1)),
            Err(ReturnToError::Neither)
        );
        let long = format!("http://127.0.0.1/{}", "a".repeat(MAX_RETURN_TO));
        assert_eq!(check_return_to(&long), Err(ReturnToError::TooLong));
    }

    #[test]
    fn the_outcome_joins_the_query_before_the_fragment() {
        assert_eq!(
            with_outcome("http://127.0.0.1:9/r", "ca_gmail_1", "active"),
            "http://127.0.0.1:9/r?connection_id=ca_gmail_1&status=active"
        );
        assert_eq!(
            with_outcome("http://localhost/r?op=1#top", "ca x", "failed"),
            "http://localhost/r?op=1&connection_id=ca%20x&status=failed#top"
        );
        assert_eq!(
            with_outcome("http://localhost/r?", "a", "active"),
            "http://localhost/r?connection_id=a&status=active"
        );
    }

    #[test]
    fn forms_decode() {
        assert_eq!(
            parse_form("nonce=ab%2Bc&decision=approve"),
            (Some("ab+c".into()), Some(Decision::Approve))
        );
        assert_eq!(parse_form("decision=deny"), (None, Some(Decision::Deny)));
        assert_eq!(parse_form("nonce=&decision=maybe"), (None, None));
    }

    #[test]
    fn the_page_keeps_its_markup_contract_and_escapes() {
        let page = consent_page(&ConsentForm {
            connection_id: "ca_gmail_1",
            connector: "gmail",
            requester: Some("<app>"),
            nonce: "n0nce",
        });
        assert!(page.contains(r#"<input type="hidden" name="nonce" value="n0nce">"#));
        assert!(page.contains(r#"<button name="decision" value="approve">"#));
        assert!(page.contains(r#"<button name="decision" value="deny">"#));
        assert!(page.contains("&lt;app&gt;"));
        assert!(page.contains("Gmail") && page.contains("Send email on your behalf"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no external resources"
        );
        assert_eq!(catalog_entry("my_crm").0, "My Crm");
    }
}
