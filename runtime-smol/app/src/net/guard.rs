//! Who may talk to an HTTP listener of the application: one policy for the HTTP API
//! (`gateway --http`), the simulated tool gateway and `connect`'s return URL. Each of them
//! listens on this machine, where any web page the person opens can reach it too.
//!
//! - **Host.** A request must name the listener in its `Host`: `localhost`, `127.0.0.1`,
//!   `[::1]`, or the address it is bound to, with any port or none; with `--allow-remote`,
//!   also the names given with `--allow-host`. Anything else is 421: a page of another site
//!   whose name was made to resolve to this machine (DNS rebinding) sends its own name, and
//!   is turned away before it can read or write anything.
//! - **Writes.** A request that may change something (any method but `GET`, `HEAD` and
//!   `OPTIONS`) with a body must say the body's type: `application/json`, or
//!   `application/x-www-form-urlencoded` on the one form route (the consent page's); any other
//!   type, or none, is 415. The types a page of another site may send without asking first
//!   (`text/plain`, forms, multipart) are thus refused. Its `Origin`, when it sends one, must
//!   be the listener's own (`http://` and the request's `Host`): any other origin, and `null`
//!   (what a sandboxed page or a redirect across sites sends), is 403. Programs send no
//!   `Origin` and are served.
//! - **Bodies.** A body is read up to a cap, refused (413) past it by its `Content-Length`
//!   before anything else is done (the credentials are checked after), or as it arrives; and
//!   it must arrive within [`READ_TIMEOUT`] (else 408 and the connection closes), as must the
//!   request's headers (else the connection closes).

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Bytes};
use hyper::header::{self, HeaderMap};
use hyper::{Method, StatusCode, Uri};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// How long a listener waits for a request's headers, and then for its whole body: a client
/// that sends part of either and stalls is cut off after this (its connection closes; a
/// stalled body is answered 408 first).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The names every listener answers to: it listens on this machine.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// What a write route takes as its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepts {
    /// `application/json`: every write route but the consent form.
    Json,
    /// `application/x-www-form-urlencoded`: the consent page's own form.
    Form,
}

impl Accepts {
    /// The media type.
    pub const fn media_type(self) -> &'static str {
        match self {
            Accepts::Json => "application/json",
            Accepts::Form => "application/x-www-form-urlencoded",
        }
    }
}

/// Why a listener refused a request before doing anything with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A `Host` that does not name this listener (421).
    #[error(
        "This server answers to {names}, not to the Host {host:?}: a page of another site that \
         reaches this machine under its own name is refused. To serve another name, start the \
         server with --allow-remote and --allow-host NAME."
    )]
    Host {
        /// The `Host` as sent.
        host: String,
        /// The names it answers to, listed.
        names: String,
    },
    /// No `Host` at all (421).
    #[error("The request names no Host: send the Host this server answers to ({names}).")]
    NoHost {
        /// The names it answers to, listed.
        names: String,
    },
    /// A write sent by a page of another origin (403).
    #[error(
        "A page of {origin} may not write here: only this server's own pages, and programs \
         that send no Origin, may. Nothing was changed."
    )]
    Origin {
        /// The `Origin` as sent.
        origin: String,
    },
    /// A write whose body is not of the type the route takes (415).
    #[error(
        "This route takes {expected} bodies, not {found}: send Content-Type: {expected}. \
         Nothing was changed."
    )]
    ContentType {
        /// The `Content-Type` sent (`no type` when none was).
        found: String,
        /// The type the route takes.
        expected: &'static str,
    },
    /// A body over the cap (413).
    #[error("Request body is larger than {limit} bytes")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// A body that did not arrive in time (408).
    #[error(
        "The request body did not arrive within {} seconds; the connection is closed.",
        READ_TIMEOUT.as_secs()
    )]
    Timeout,
}

impl Refusal {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Host { .. } | Refusal::NoHost { .. } => StatusCode::MISDIRECTED_REQUEST,
            Refusal::Origin { .. } => StatusCode::FORBIDDEN,
            Refusal::ContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Refusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::Timeout => StatusCode::REQUEST_TIMEOUT,
        }
    }

    /// A machine-readable code for JSON answers.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Host { .. } | Refusal::NoHost { .. } => "misdirected_host",
            Refusal::Origin { .. } => "cross_origin_write",
            Refusal::ContentType { .. } => "unsupported_media_type",
            Refusal::TooLarge { .. } => "body_too_large",
            Refusal::Timeout => "request_timeout",
        }
    }

    /// Whether the answer must close the connection: part of the body was never read.
    pub fn closes(&self) -> bool {
        matches!(self, Refusal::TooLarge { .. } | Refusal::Timeout)
    }
}

/// One listener's names, and the checks of every request against them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    /// Lower-case host names, IPv6 addresses in brackets, without ports.
    names: Vec<String>,
}

impl Guard {
    /// The guard of a listener bound to `bound`: the loopback names, the bound address itself
    /// (unless it is `0.0.0.0` or `[::]`, which no client can name), and `extra` (the
    /// `--allow-host` names, already checked with [`host_name`]).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Self {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|n| (*n).to_owned()).collect();
        let ip = bound.ip().to_canonical();
        if !ip.is_unspecified() {
            names.push(ip_name(ip));
        }
        for name in extra {
            names.push(normalize(name));
        }
        let mut unique = Vec::with_capacity(names.len());
        for name in names {
            if !unique.contains(&name) {
                unique.push(name);
            }
        }
        Guard { names: unique }
    }

    /// The names this listener answers to.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The `Host` check, then (for a write) the type and `Origin` checks.
    pub fn admit(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        accepts: Accepts,
    ) -> Result<(), Refusal> {
        self.host(uri, headers)?;
        if is_write(method) {
            content_type(headers, accepts)?;
            origin(headers)?;
        }
        Ok(())
    }

    /// Whether the request names this listener: its `Host` (and the authority of an
    /// absolute request target, when it has one) must be one of the names, with any port.
    pub fn host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        let mut named = false;
        if let Some(authority) = uri.authority() {
            named = true;
            self.known(authority.as_str())?;
        }
        for value in headers.get_all(header::HOST) {
            named = true;
            self.known(&String::from_utf8_lossy(value.as_bytes()))?;
        }
        if named {
            Ok(())
        } else {
            Err(Refusal::NoHost {
                names: self.listed(),
            })
        }
    }

    fn known(&self, host: &str) -> Result<(), Refusal> {
        match split_authority(host) {
            Some((name, _)) if self.names.contains(&name) => Ok(()),
            _ => Err(Refusal::Host {
                host: host.to_owned(),
                names: self.listed(),
            }),
        }
    }

    fn listed(&self) -> String {
        self.names.join(", ")
    }
}

/// Whether a request with `method` may change something (and so is checked as a write).
pub fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A write's body type: `accepts`. A write without a body has nothing to type.
fn content_type(headers: &HeaderMap, accepts: Accepts) -> Result<(), Refusal> {
    if !has_body(headers) {
        return Ok(());
    }
    let expected = accepts.media_type();
    let refused = |found: String| Refusal::ContentType { found, expected };
    match headers.get(header::CONTENT_TYPE) {
        None => Err(refused("no type".to_owned())),
        Some(value) => {
            let text = String::from_utf8_lossy(value.as_bytes());
            let media = text.split(';').next().unwrap_or("").trim();
            if media.eq_ignore_ascii_case(expected) {
                Ok(())
            } else {
                Err(refused(text.into_owned()))
            }
        }
    }
}

/// Whether the request says it has a body: a `Content-Length` other than 0, or a
/// `Transfer-Encoding`.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes().iter().any(|b| *b != b'0'))
}

/// A write's `Origin`: none, or this listener's own (`http://` or `https://` and the request's
/// `Host`, the same port, the default port of its scheme when it names none).
fn origin(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    let own = headers
        .get(header::HOST)
        .map(|host| String::from_utf8_lossy(host.as_bytes()).into_owned())
        .is_some_and(|host| same_origin(&origin, &host));
    if own {
        Ok(())
    } else {
        Err(Refusal::Origin { origin })
    }
}

/// Whether `origin` (`scheme://host[:port]`) is the origin of a server reached as `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    let (scheme, authority) = match origin.split_once("://") {
        Some((scheme, authority)) => (scheme.to_ascii_lowercase(), authority),
        None => return false,
    };
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let (Some((origin_name, origin_port)), Some((host_name, host_port))) =
        (split_authority(authority), split_authority(host))
    else {
        return false;
    };
    origin_name == host_name
        && origin_port.unwrap_or(default_port) == host_port.unwrap_or(default_port)
}

/// `name[:port]` or `[v6][:port]`: the name (lower case, an address in its canonical form),
/// and the port if any; `None` when it is neither.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = v6.parse().ok()?;
        (format!("[{ip}]"), after)
    } else {
        match authority.split_once(':') {
            Some((name, _)) => (name.to_owned(), &authority[name.len()..]),
            None => (authority.to_owned(), ""),
        }
    };
    let port = match port {
        "" => None,
        digits => {
            let digits = digits.strip_prefix(':')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(digits.parse::<u16>().ok()?)
        }
    };
    let name = normalize(&name);
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    valid.then_some((name, port))
}

/// A name as compared: lower case; an IPv4 address as written canonically.
fn normalize(name: &str) -> String {
    let name = name.trim().to_ascii_lowercase();
    match name.parse::<Ipv4Addr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => match name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .and_then(|n| n.parse::<Ipv6Addr>().ok())
        {
            Some(ip) => format!("[{ip}]"),
            None => name,
        },
    }
}

fn ip_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    }
}

/// Checks an `--allow-host NAME`: a host name or an address, without a scheme, a port or a
/// path; the name as the guard compares it, or why not.
pub fn host_name(name: &str) -> Result<String, String> {
    let trimmed = name.trim();
    if let Ok(ip) = trimmed.parse::<IpAddr>() {
        return Ok(ip_name(ip.to_canonical()));
    }
    match split_authority(trimmed) {
        Some((normal, None)) if !normal.contains(':') => Ok(normal),
        Some((_, Some(_))) => Err(format!(
            "{name:?} has a port: give the name alone (any port is served)"
        )),
        _ => Err(format!(
            "{name:?} is not a host name or an address (letters, digits, '-', '.')"
        )),
    }
}

/// Refuses a body that says (by its `Content-Length`) it is larger than `limit`, before it
/// is read, and before the request's credentials are checked.
pub fn declared_within(headers: &HeaderMap, limit: usize) -> Result<(), Refusal> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Refusal::TooLarge { limit });
    }
    Ok(())
}

/// Reads a body of at most `limit` bytes within [`READ_TIMEOUT`]: a larger one (by its
/// `Content-Length`, or as it arrives) is refused without reading further, a slower one
/// refused when the time is up. A client that went away mid-body leaves what arrived.
pub async fn read_body<B>(headers: &HeaderMap, body: B, limit: usize) -> Result<Bytes, Refusal>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    declared_within(headers, limit)?;
    let collect = async {
        match Limited::new(body, limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => Err(Refusal::TooLarge { limit }),
            Err(_) => Ok(Bytes::new()),
        }
    };
    futures_lite::future::or(collect, async {
        smol::Timer::after(READ_TIMEOUT).await;
        Err(Refusal::Timeout)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn guard() -> Guard {
        Guard::new("127.0.0.1:8642".parse().unwrap(), &[])
    }

    fn host(guard: &Guard, host: &str) -> Result<(), Refusal> {
        guard.host(&Uri::from_static("/"), &headers(&[("host", host)]))
    }

    #[test]
    fn only_the_listener_s_own_names_are_served_with_any_port() {
        let guard = guard();
        for served in [
            "localhost",
            "LOCALHOST:8642",
            "127.0.0.1:1",
            "127.0.0.1",
            "[::1]:8642",
            "[0:0:0:0:0:0:0:1]",
        ] {
            assert_eq!(host(&guard, served), Ok(()), "{served}");
        }
        for refused in [
            "attacker.example:8642",
            "localhost.attacker.example",
            "127.0.0.2:8642",
            "127.0.0.1.nip.io",
            "[::2]",
            "localhost:99999",
            "localhost:",
            "localhost:80x",
            "",
            "127.0.0.1@evil",
        ] {
            assert!(
                matches!(host(&guard, refused), Err(Refusal::Host { .. })),
                "{refused}"
            );
        }
        assert!(matches!(
            guard.host(&Uri::from_static("/"), &HeaderMap::new()),
            Err(Refusal::NoHost { .. })
        ));
        // An absolute target names its host too.
        let absolute = Uri::from_static("http://attacker.example/x");
        assert!(
            guard
                .host(&absolute, &headers(&[("host", "localhost")]))
                .is_err()
        );
        let refusal = host(&guard, "evil.example").unwrap_err();
        assert_eq!(refusal.status(), StatusCode::MISDIRECTED_REQUEST);
        assert!(
            refusal.to_string().contains("\"evil.example\""),
            "{refusal}"
        );
        assert!(refusal.to_string().contains("--allow-host"), "{refusal}");
    }

    #[test]
    fn the_bound_address_and_the_allowed_names_are_served_too() {
        let guard = Guard::new(
            "192.0.2.7:80".parse().unwrap(),
            &[
                host_name("API.Example.Test").unwrap(),
                host_name("::2").unwrap(),
            ],
        );
        for served in ["192.0.2.7", "api.example.test:443", "[::2]:1", "localhost"] {
            assert_eq!(host(&guard, served), Ok(()), "{served}");
        }
        let wildcard = Guard::new("0.0.0.0:80".parse().unwrap(), &[]);
        assert_eq!(wildcard.names(), ["localhost", "127.0.0.1", "[::1]"]);
        assert!(host(&wildcard, "0.0.0.0").is_err());
        assert!(
            host_name("api.example.test:80")
                .unwrap_err()
                .contains("port")
        );
        assert!(host_name("http://x").is_err());
        assert!(host_name("a/b").is_err());
    }

    #[test]
    fn a_write_takes_its_route_s_type_and_comes_from_no_page_or_its_own() {
        let guard = guard();
        let post = |pairs: &[(&'static str, &str)], accepts| {
            guard.admit(
                &Method::POST,
                &Uri::from_static("/"),
                &headers(pairs),
                accepts,
            )
        };
        let host = ("host", "127.0.0.1:8642");
        let json = ("content-type", "application/json; charset=utf-8");
        let sized = ("content-length", "2");
        assert_eq!(post(&[host, json, sized], Accepts::Json), Ok(()));
        assert_eq!(
            post(&[host, ("content-length", "0")], Accepts::Json),
            Ok(())
        );
        assert_eq!(post(&[host], Accepts::Json), Ok(()), "no body, no type");
        let plain = ("content-type", "text/plain");
        assert_eq!(
            post(&[host, plain], Accepts::Json),
            Ok(()),
            "no body to type"
        );
        for (pairs, found) in [
            (vec![host, sized], "no type"),
            (vec![host, ("transfer-encoding", "chunked")], "no type"),
            (
                vec![host, sized, ("content-type", "text/plain")],
                "text/plain",
            ),
            (
                vec![host, sized, ("content-type", "application/jsonx")],
                "application/jsonx",
            ),
        ] {
            assert_eq!(
                post(&pairs, Accepts::Json),
                Err(Refusal::ContentType {
                    found: found.to_owned(),
                    expected: "application/json"
                })
            );
        }
        let form = ("content-type", "application/x-www-form-urlencoded");
        assert_eq!(post(&[host, sized, form], Accepts::Form), Ok(()));
        assert!(post(&[host, sized, form], Accepts::Json).is_err());
        assert!(post(&[host, sized, json], Accepts::Form).is_err());
        for own in [
            "http://127.0.0.1:8642",
            "HTTP://127.0.0.1:8642",
            "https://127.0.0.1:8642",
        ] {
            assert_eq!(
                post(&[host, json, ("origin", own)], Accepts::Json),
                Ok(()),
                "{own}"
            );
        }
        for foreign in [
            "null",
            "http://evil.example",
            "http://127.0.0.1:8643",
            "http://localhost:8642",
            "http://127.0.0.1",
            "file://",
            "http://127.0.0.1:8642/path",
            "127.0.0.1:8642",
        ] {
            let refused = post(&[host, json, ("origin", foreign)], Accepts::Json);
            assert!(matches!(refused, Err(Refusal::Origin { .. })), "{foreign}");
        }
        // Reads are never checked as writes.
        let get = guard.admit(
            &Method::GET,
            &Uri::from_static("/"),
            &headers(&[
                host,
                ("origin", "http://evil.example"),
                ("content-type", "text/plain"),
            ]),
            Accepts::Json,
        );
        assert_eq!(get, Ok(()));
        let default_port = guard.admit(
            &Method::POST,
            &Uri::from_static("/"),
            &headers(&[("host", "localhost"), ("origin", "http://localhost")]),
            Accepts::Json,
        );
        assert_eq!(default_port, Ok(()));
    }

    #[test]
    fn a_body_is_read_up_to_its_cap() {
        use http_body_util::Full;
        let body = || Full::new(Bytes::from_static(b"0123456789"));
        smol::block_on(async {
            assert_eq!(
                read_body(&HeaderMap::new(), body(), 10).await,
                Ok(Bytes::from_static(b"0123456789"))
            );
            assert_eq!(
                read_body(&HeaderMap::new(), body(), 9).await,
                Err(Refusal::TooLarge { limit: 9 })
            );
            let declared = headers(&[("content-length", "400000000")]);
            assert_eq!(
                declared_within(&declared, 1 << 20),
                Err(Refusal::TooLarge { limit: 1 << 20 })
            );
        });
        assert!(
            Refusal::Timeout.closes()
                && !Refusal::NoHost {
                    names: String::new()
                }
                .closes()
        );
        assert_eq!(Refusal::Timeout.status(), StatusCode::REQUEST_TIMEOUT);
    }
}
