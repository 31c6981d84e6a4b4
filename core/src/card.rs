//! Card answers (docs/contract.md#card-answers): what the user's card sends back through
//! `connection.respond`.

use crate::error::CallerError;
use crate::operation::Text;
use serde_json::Value;

/// One target's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerTarget {
    /// The target's name (unknown names are ignored).
    pub name: Text,
    /// `skipped` or `approved`; anything else refuses the whole answer.
    pub status: Text,
}

/// The statuses a card answer may give a target; any other refuses the whole answer.
pub const ANSWER_STATUSES: [&str; 2] = ["skipped", "approved"];

/// A parsed card answer: `{"targets": [{"name", "status"}], "settled_by"?: "continue"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CardAnswer {
    /// Per-target answers (a missing `targets` is `[]`).
    pub targets: Vec<AnswerTarget>,
    /// `settled_by: "continue"`: the user pressed Continue.
    pub settle_continue: bool,
}

/// What an answer asks of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKind {
    /// `skipped`: move to skipped by the user.
    Skip,
    /// `approved`: accepted and ignored for connectors.
    Approve,
}

/// Why an answer is malformed (JSON-RPC 4000): it is not of the answer's shape at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedAnswer {
    /// `result` is not an object.
    #[error("result must be an object")]
    NotAnObject,
    /// `targets` is not a list of `{"name": str, "status": str}`.
    #[error("result.targets must be a list of {{\"name\": str, \"status\": str}}")]
    BadTargets,
    /// `settled_by` present and not `continue`.
    #[error("result.settled_by must be \"continue\" when present")]
    BadSettledBy,
}

impl CardAnswer {
    /// A Continue with no per-target answers.
    pub fn continue_() -> Self {
        CardAnswer {
            targets: Vec::new(),
            settle_continue: true,
        }
    }

    /// Skips the named targets.
    pub fn skip(names: &[&str]) -> Self {
        CardAnswer {
            targets: names
                .iter()
                .map(|n| AnswerTarget {
                    name: (*n).into(),
                    status: "skipped".into(),
                })
                .collect(),
            settle_continue: false,
        }
    }

    /// Parses the `result` of a `connection.respond`.
    pub fn from_json(result: &Value) -> Result<Self, MalformedAnswer> {
        let obj = result.as_object().ok_or(MalformedAnswer::NotAnObject)?;
        let targets = match obj.get("targets") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    let name = item.get("name").and_then(Value::as_str);
                    let status = item.get("status").and_then(Value::as_str);
                    match (item.is_object(), name, status) {
                        (true, Some(name), Some(status)) => Ok(AnswerTarget {
                            name: name.into(),
                            status: status.into(),
                        }),
                        _ => Err(MalformedAnswer::BadTargets),
                    }
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(MalformedAnswer::BadTargets),
        };
        let settle_continue = match obj.get("settled_by") {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) if s == "continue" => true,
            Some(_) => return Err(MalformedAnswer::BadSettledBy),
        };
        Ok(CardAnswer {
            targets,
            settle_continue,
        })
    }

    /// Checks every status; any status but `skipped`/`approved` (`connected` included) refuses
    /// the whole answer.
    pub fn kinds(&self) -> Result<Vec<AnswerKind>, CallerError> {
        self.targets
            .iter()
            .map(|t| match &*t.status {
                "skipped" => Ok(AnswerKind::Skip),
                "approved" => Ok(AnswerKind::Approve),
                other => Err(CallerError::InvalidAnswer {
                    status: other.to_owned(),
                }),
            })
            .collect()
    }
}

/// The reply to a card answer: `{"status": "ok", "settled": <bool>}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardReply {
    /// Whether the operation is settled after the answer.
    pub settled: bool,
}

impl serde::Serialize for CardReply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("status", "ok")?;
        map.serialize_entry("settled", &self.settled)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_parse_or_are_malformed() {
        let ok =
            CardAnswer::from_json(&json!({"targets": [{"name": "notion", "status": "skipped"}]}))
                .unwrap();
        assert_eq!(ok.targets.len(), 1);
        assert!(!ok.settle_continue);
        assert_eq!(
            CardAnswer::from_json(&json!({"settled_by": "continue"})).unwrap(),
            CardAnswer::continue_()
        );
        assert_eq!(
            CardAnswer::from_json(&json!([])),
            Err(MalformedAnswer::NotAnObject)
        );
        assert_eq!(
            CardAnswer::from_json(&json!({"targets": {}})),
            Err(MalformedAnswer::BadTargets)
        );
        assert_eq!(
            CardAnswer::from_json(&json!({"targets": [{"name": 1, "status": "skipped"}]})),
            Err(MalformedAnswer::BadTargets)
        );
        assert_eq!(
            CardAnswer::from_json(&json!({"settled_by": "deadline"})),
            Err(MalformedAnswer::BadSettledBy)
        );
    }

    #[test]
    fn the_answer_statuses_are_exactly_those_accepted() {
        for status in ANSWER_STATUSES {
            let answer =
                CardAnswer::from_json(&json!({"targets": [{"name": "x", "status": status}]}))
                    .unwrap();
            assert!(answer.kinds().is_ok(), "{status}");
        }
        for status in ["connected", "Skipped", ""] {
            let answer =
                CardAnswer::from_json(&json!({"targets": [{"name": "x", "status": status}]}))
                    .unwrap();
            assert!(answer.kinds().is_err(), "{status}");
        }
    }

    #[test]
    fn a_connected_claim_refuses_the_whole_answer() {
        let answer = CardAnswer::from_json(&json!({"targets": [
            {"name": "notion", "status": "skipped"}, {"name": "gmail", "status": "connected"}]}))
        .unwrap();
        let err = answer.kinds().unwrap_err();
        assert_eq!(err.to_string(), "Connection answer is invalid.");
        assert_eq!(
            serde_json::to_string(&CardReply { settled: true }).unwrap(),
            r#"{"status":"ok","settled":true}"#
        );
    }
}
