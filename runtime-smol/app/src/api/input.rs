//! What a run or a chat turn must carry: the user's message, and a well-formed `author`; and
//! what no text the API stores may hold: a NUL character (U+0000).
//!
//! PostgreSQL's text cannot hold a NUL; SQLite's can. So that both stores answer alike, the
//! rule is one, checked before anything is read or stored: a request whose path or body
//! holds a NUL (a raw zero byte, or a JSON `\u0000` escape) is refused with 400
//! `nul_character`, and an agent's reply or error holding one is not stored as it is.

use serde_json::Value;

/// Whether `text` can be stored: it holds no NUL character.
pub(super) fn storable(text: &str) -> bool {
    !text.contains('\0')
}

/// Whether a request body holds a NUL: a zero byte, or a `\u0000` escape in a JSON string
/// (a backslash escaped itself, as in `\\u0000`, starts no escape).
pub(super) fn body_holds_nul(body: &[u8]) -> bool {
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            0 => return true,
            b'\\' => {
                if body.get(i + 1..i + 6) == Some(b"u0000".as_slice()) {
                    return true;
                }
                // The escaped character is not the start of another escape.
                i += 2;
            }
            _ => i += 1,
        }
    }
    false
}

/// `author`, when given: an object with a non-empty string `id`, a string `name`, a bool
/// `is_bot`.
pub(super) fn valid_author(author: Option<&Value>) -> bool {
    match author {
        None | Some(Value::Null) => true,
        Some(a) => {
            a.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.is_empty())
                && a.get("name").is_some_and(Value::is_string)
                && a.get("is_bot").is_some_and(Value::is_boolean)
        }
    }
}

/// The user's message of a run's `input`: the string, or the last user message of a list.
pub(super) fn user_message(input: &Value) -> Option<String> {
    let text = match input {
        Value::String(s) => s.clone(),
        Value::Array(messages) => {
            let last = messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str).unwrap_or("user") == "user")?;
            match last.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return None,
            }
        }
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_and_authors_are_checked() {
        assert_eq!(user_message(&json!("ping")), Some("ping".into()));
        assert_eq!(user_message(&json!("   ")), None);
        let messages = json!([{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "last"}]);
        assert_eq!(user_message(&messages), Some("last".into()));
        assert_eq!(user_message(&json!([])), None);
        assert!(valid_author(Some(
            &json!({"id": "bot:cto", "name": "cto", "is_bot": true})
        )));
        assert!(!valid_author(Some(
            &json!({"id": "", "name": "cto", "is_bot": true})
        )));
        assert!(!valid_author(Some(
            &json!({"id": "x", "is_bot": "yes", "name": "n"})
        )));
        assert!(valid_author(None));
    }

    #[test]
    fn a_nul_in_a_body_is_found_raw_or_escaped_and_an_escaped_backslash_is_not_one() {
        assert!(body_holds_nul(b"{\"input\": \"a\\u0000b\"}"));
        assert!(body_holds_nul(b"{\"input\": \"a\0\"}"));
        assert!(
            body_holds_nul(br#"["\\\u0000"]"#),
            "an escaped backslash, then the escape"
        );
        assert!(!body_holds_nul(br#"["\\u0000"]"#), "the text \\u0000");
        assert!(body_holds_nul(br#"["\u00000"]"#), "a NUL, then a zero");
        assert!(!body_holds_nul(br#"["\u0001", "u0000", "\\\\"]"#));
        assert!(!body_holds_nul(br#"{"input": "fine \" \\ \u00e9"}"#));
        assert!(!body_holds_nul(b"\\"), "a lone backslash at the end");
        for text in ["a\0b", "\0"] {
            assert!(!storable(text));
            let json = serde_json::to_vec(&serde_json::json!({ "t": text })).unwrap();
            assert!(body_holds_nul(&json), "{json:?}");
        }
        assert!(storable("fine"));
    }
}
