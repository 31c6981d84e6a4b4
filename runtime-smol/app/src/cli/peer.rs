//! `connop peer dm` (docs/http-api.md#peer-dm): sends one message into a peer's Bot Chat and
//! reports what the peer did with it.
//!
//! A peer either runs the turn and answers with the reply (`*.session.chat.completion`) or,
//! when its Bot Chat is open in a live owner, hands the turn to that owner's queue and answers
//! `*.session.chat.queued`. The second answer means the message WAS delivered, so it is
//! reported as such (and the sender is told not to resend) instead of as an empty reply.
//!
//! The peer's sessions are read a page at a time (`next_cursor`), keeping only the best Bot
//! Chat so far, so a peer with many sessions costs requests, not memory; a peer that answers
//! one list without a cursor is read in one request.
//!
//! What the peer sent is printed with its control characters escaped
//! ([`escape_controls`]): a reply keeps its lines, everything else is one line.
//!
//! This is a one-shot command, so it uses isahc's blocking API with one client per call.

use crate::error::{AppError, EnvironmentError, UpstreamError, UsageError};
use crate::escape::{Lines, escape_controls};
use connop_blocking::http::HttpError;
use isahc::HttpClient;
use isahc::config::Configurable;
use serde_json::{Value, json};
use std::io::Read as _;
use std::io::Write;
use std::time::Duration;

/// How long one HTTP request to the peer may take before the command gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The title that marks a peer's bot-to-bot chat session.
const BOT_CHAT_TITLE: &str = "Bot Chat";

/// The `object` prefixes a peer may answer with: ours and the original system's.
const CHAT_OBJECT_PREFIXES: [&str; 2] = ["connop.session.chat.", "hermes.session.chat."];

/// The most of a peer's answer that is read (4 MiB); a longer answer is refused.
pub const MAX_PEER_ANSWER: u64 = 4 << 20;

/// The longest slice of an unexpected body quoted in an error, so stderr stays readable.
const BODY_EXCERPT_CHARS: usize = 200;

/// The most pages of a peer's session list read while looking for its Bot Chat; past them
/// the best one found so far is used (or a new one made).
const MAX_SESSION_PAGES: usize = 10_000;

/// The arguments of `connop peer dm`, kept apart from clap so the command can be run (and
/// tested) without parsing a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmOptions {
    /// The peer's name, only used in the output.
    pub peer: String,
    /// The message sent into the peer's Bot Chat.
    pub message: String,
    /// The peer's HTTP API origin, e.g. `http://peer:8642` (a trailing `/` is ignored).
    pub url: String,
    /// The peer's API key, sent as `Authorization: Bearer <key>` on every request.
    pub key: Option<String>,
    /// The sender's profile, only echoed in the `--json` output.
    pub profile: Option<String>,
    /// Print one compact JSON object instead of text, for scripts.
    pub json: bool,
}

/// Runs `connop peer dm`: finds (or creates) the peer's newest Bot Chat, sends the message
/// and writes the outcome to `out`. A bad `--url` is a usage error; the peer's failures and
/// refusals are [`UpstreamError`]s.
pub fn peer_dm(options: &DmOptions, out: &mut dyn Write) -> Result<(), AppError> {
    let peer = Peer::new(&options.url, options.key.as_deref())?;
    let session_id = peer.ensure_bot_chat()?;
    let (status, answer) = peer.chat(&session_id, &options.message)?;
    let object = answer.get("object").and_then(Value::as_str).unwrap_or("");
    let kind = CHAT_OBJECT_PREFIXES
        .iter()
        .find_map(|prefix| object.strip_prefix(prefix));
    let profile = options.profile.as_deref();
    let text = match kind {
        Some("completion") => completion_output(options, profile, &session_id, &answer),
        Some("queued") => queued_output(options, profile, &session_id, &answer),
        _ => {
            return Err(match error_message(&answer) {
                Some(message) => UpstreamError::ChatRefused { status, message },
                None => UpstreamError::ChatUnknown {
                    status,
                    object: object.to_owned(),
                    excerpt: excerpt(&answer.to_string()),
                },
            }
            .into());
        }
    };
    writeln!(out, "{text}").map_err(|source| {
        EnvironmentError::Stdout {
            what: "the answer",
            source,
        }
        .into()
    })
}

/// The output for a turn the peer ran here: its reply, or `(no reply)` when empty.
fn completion_output(
    options: &DmOptions,
    profile: Option<&str>,
    session_id: &str,
    answer: &Value,
) -> String {
    let reply = answer
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if options.json {
        let session_id = str_field(answer, "session_id").unwrap_or(session_id);
        json!({
            "peer": options.peer,
            "profile": profile,
            "session_id": session_id,
            "reply": reply,
        })
        .to_string()
    } else if reply.is_empty() {
        "(no reply)".to_owned()
    } else {
        escape_controls(reply, Lines::Many).into_owned()
    }
}

/// The output for a turn handed to the open Bot Chat's owner: delivered, answered there.
fn queued_output(
    options: &DmOptions,
    profile: Option<&str>,
    session_id: &str,
    answer: &Value,
) -> String {
    let session_id = str_field(answer, "session_id").unwrap_or(session_id);
    if options.json {
        json!({
            "peer": options.peer,
            "profile": profile,
            "session_id": session_id,
            "status": str_field(answer, "status").unwrap_or("queued"),
            "delivery_id": answer.get("delivery_id").cloned().unwrap_or(Value::Null),
        })
        .to_string()
    } else {
        let sentence = format!(
            "Peer '{}' has its Bot Chat open, so the message went into that chat (session \
             {session_id}) and is answered there. The reply cannot come back on this call. \
             Do NOT resend.",
            options.peer
        );
        escape_controls(&sentence, Lines::One).into_owned()
    }
}

/// A non-empty string field of a JSON object, the only shape the answers' ids take.
fn str_field<'a>(value: &'a Value, name: &str) -> Option<&'a str> {
    value
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The message of an OpenAI-style `{"error": {"message"}}` body (or a bare `{"error": "…"}`).
fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error")?;
    let message = match error {
        Value::String(s) => s.as_str(),
        other => other.get("message").and_then(Value::as_str)?,
    };
    Some(message.to_owned())
}

/// The start of `text`, cut on a char boundary, for quoting unexpected bodies.
fn excerpt(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(BODY_EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// Percent-encodes one path segment, so any session id lands in the path as one segment.
fn path_segment(raw: &str) -> String {
    let mut encoded = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// One peer's HTTP API: where it is, the key it wants and the client that talks to it.
struct Peer<'a> {
    client: HttpClient,
    base: &'a str,
    key: Option<&'a str>,
}

impl<'a> Peer<'a> {
    fn new(url: &'a str, key: Option<&'a str>) -> Result<Self, AppError> {
        let base = url.trim_end_matches('/');
        if base.is_empty() {
            return Err(bad_url(url, "it is empty"));
        }
        let client =
            HttpClient::new().map_err(|e| EnvironmentError::HttpClient(HttpError::Client(e)))?;
        Ok(Peer {
            client,
            base,
            key: key.filter(|k| !k.is_empty()),
        })
    }

    /// The id of the peer's newest `Bot Chat` session, created when there is none. The list
    /// is read page by page; only the best Bot Chat so far is kept.
    fn ensure_bot_chat(&self) -> Result<String, AppError> {
        let request_name = "GET /api/sessions";
        let mut best: Option<(f64, String)> = None;
        let mut path = "/api/sessions".to_owned();
        for _ in 0..MAX_SESSION_PAGES {
            let (status, body) = self.send("GET", &path, None)?;
            let listing = expect_success(request_name, status, &body)?;
            let sessions = listing.get("sessions").and_then(Value::as_array).ok_or(
                UpstreamError::PeerIncomplete {
                    request_name,
                    missing: "a `sessions` list",
                },
            )?;
            if let Some((created, id)) = newest_bot_chat(sessions) {
                if best.as_ref().is_none_or(|(b, _)| created >= *b) {
                    best = Some((created, id.to_owned()));
                }
            }
            match str_field(&listing, "next_cursor") {
                Some(cursor) => path = format!("/api/sessions?cursor={}", path_segment(cursor)),
                None => break,
            }
        }
        if let Some((_, id)) = best {
            return Ok(id);
        }
        let request_name = "POST /api/sessions";
        let request = json!({ "title": BOT_CHAT_TITLE });
        let (status, body) = self.send("POST", "/api/sessions", Some(&request))?;
        let created = expect_success(request_name, status, &body)?;
        let id = str_field(&created, "session_id").ok_or(UpstreamError::PeerIncomplete {
            request_name,
            missing: "a `session_id`",
        })?;
        Ok(id.to_owned())
    }

    /// Sends the message into `session_id`; the answer is parsed whatever its HTTP status,
    /// because its `object` decides (a queued turn answers 202).
    fn chat(&self, session_id: &str, message: &str) -> Result<(u16, Value), AppError> {
        let path = format!("/api/sessions/{}/chat", path_segment(session_id));
        let request = json!({ "message": message });
        let (status, body) = self.send("POST", &path, Some(&request))?;
        let answer = serde_json::from_slice(&body).map_err(|_| UpstreamError::PeerNotJson {
            request_name: "the chat request",
            status,
            excerpt: excerpt(&String::from_utf8_lossy(&body)),
        })?;
        Ok((status, answer))
    }

    /// One request to the peer with the bearer key and the timeout; the status and the whole
    /// body, or why nothing came back.
    fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>), AppError> {
        let url = format!("{}{path}", self.base);
        let mut builder = isahc::Request::builder()
            .method(method)
            .uri(url.as_str())
            .timeout(REQUEST_TIMEOUT)
            .header("Accept", "application/json");
        if let Some(key) = self.key {
            builder = builder.header("Authorization", format!("Bearer {key}"));
        }
        let bytes = match body {
            Some(body) => {
                builder = builder.header("Content-Type", "application/json");
                body.to_string().into_bytes()
            }
            None => Vec::new(),
        };
        // No request can be made to it: the URL is the user's to fix.
        let request = builder.body(bytes).map_err(|e| bad_url(self.base, e))?;
        let unreachable = |source| UpstreamError::PeerUnreachable {
            method,
            url: url.clone(),
            source,
        };
        let mut response = self.client.send(request).map_err(unreachable)?;
        let mut body = Vec::new();
        response
            .body_mut()
            .take(MAX_PEER_ANSWER + 1)
            .read_to_end(&mut body)
            .map_err(|e| unreachable(isahc::Error::from(e)))?;
        if body.len() as u64 > MAX_PEER_ANSWER {
            return Err(UpstreamError::PeerAnswerTooLarge {
                method,
                url,
                limit: MAX_PEER_ANSWER,
            }
            .into());
        }
        Ok((response.status().as_u16(), body))
    }
}

/// `--url` that cannot be used, with why.
fn bad_url(url: &str, reason: impl std::fmt::Display) -> AppError {
    UsageError::PeerUrl {
        url: url.to_owned(),
        reason: reason.to_string(),
    }
    .into()
}

/// The JSON body of a successful (2xx) answer, or why the request_name failed.
fn expect_success(
    request_name: &'static str,
    status: u16,
    body: &[u8],
) -> Result<Value, UpstreamError> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    if !(200..300).contains(&status) {
        let reason = parsed
            .as_ref()
            .and_then(error_message)
            .unwrap_or_else(|| excerpt(&String::from_utf8_lossy(body)));
        return Err(UpstreamError::PeerRefused {
            request_name,
            status,
            reason,
        });
    }
    parsed.ok_or_else(|| UpstreamError::PeerNotJson {
        request_name,
        status,
        excerpt: excerpt(&String::from_utf8_lossy(body)),
    })
}

/// The newest session titled exactly `Bot Chat` (by `created_at`; on a tie the later one in
/// the list), with its `created_at`, skipping entries without a usable id.
fn newest_bot_chat(sessions: &[Value]) -> Option<(f64, &str)> {
    let mut newest: Option<(f64, &str)> = None;
    for session in sessions {
        if session.get("title").and_then(Value::as_str) != Some(BOT_CHAT_TITLE) {
            continue;
        }
        let Some(id) = str_field(session, "session_id") else {
            continue;
        };
        let created = session
            .get("created_at")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NEG_INFINITY);
        if newest.is_none_or(|(best, _)| created >= best) {
            newest = Some((created, id));
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_bot_chat_wins_and_ties_go_to_the_later_one() {
        let sessions = [
            json!({"session_id": "a", "title": "Bot Chat", "created_at": 5}),
            json!({"session_id": "b", "title": "Bot Chat", "created_at": 9.5}),
            json!({"session_id": "c", "title": "Bot Chat", "created_at": 9.5}),
            json!({"session_id": "d", "title": "bot chat", "created_at": 99}),
            json!({"session_id": "e", "title": "Bot Chat", "created_at": 1}),
        ];
        assert_eq!(newest_bot_chat(&sessions), Some((9.5, "c")));
        assert_eq!(newest_bot_chat(&sessions[3..4]), None);
    }

    #[test]
    fn a_session_id_stays_one_path_segment() {
        assert_eq!(path_segment("bot-chat_1.x~"), "bot-chat_1.x~");
        assert_eq!(path_segment("a/b c?"), "a%2Fb%20c%3F");
    }
}
