//! What a run or a chat turn must carry: the user's message, and a well-formed `author`.

use serde_json::Value;

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
}
