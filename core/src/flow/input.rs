//! Every input a [`Flow`](super::Flow) takes, as one value, and what the flow reports back.
//! [`Flow::handle_input`](super::Flow::handle_input) is the one door an input comes in by.
//!
//! Naming the inputs as data lets a simulation, a random generator or a fuzzer schedule any of
//! them, replay them, and log them, with the same types a runtime feeds.

use crate::card::{CardAnswer, CardReply};
use crate::contract::{Actor, SettleReason, TargetState};
use crate::operation::{ChangeRecord, OpId, Patch, Text};
use crate::tool_gateway::{CallId, GatewayError, GatewayReply};

/// One input to a [`Flow`](super::Flow), fed with
/// [`Flow::handle_input`](super::Flow::handle_input) at an instant.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// The registry's answer to [`Effect::Register`](super::Effect::Register): `Err` carries
    /// the id of the operation already open under the key.
    Registered(Result<(), OpId>),
    /// The answer to [`Effect::Call`](super::Effect::Call) `id`. An answer the flow no longer
    /// waits for is late and dropped.
    Gateway {
        /// The call it answers.
        id: CallId,
        /// What the tool gateway answered.
        result: Result<GatewayReply, GatewayError>,
    },
    /// A timer fired (an early wake-up does nothing before its time).
    Timeout,
    /// The card's answer (`connection.respond`, docs/contract.md#card-answers).
    CardAnswer(CardAnswer),
    /// The user pressed Continue.
    Continue,
    /// The turn was interrupted (docs/contract.md#interrupt).
    Interrupt,
    /// The operation handle's `settle`.
    Settle(SettleReason),
    /// The operation handle's `transition`: a move from outside the flow.
    Transition {
        /// The target's name.
        name: Text,
        /// The state to move to.
        to: TargetState,
        /// Who moves it.
        actor: Actor,
        /// What the move carries besides the state.
        patch: Patch,
    },
    /// The operation handle's `refresh`: a new link and detail, no state change.
    Refresh {
        /// The target's name.
        name: Text,
        /// The row's link from now on (`None` removes it).
        connect_url: Option<Text>,
        /// The row's detail from now on (`None` or empty clears it).
        detail: Option<Text>,
        /// Who refreshes it.
        actor: Actor,
    },
    /// The browser came back from the vendor (docs/contract.md#return-hints): read the named live
    /// row (every live row when `None`) at once.
    ReturnHint {
        /// The target the return names, if any.
        target: Option<Text>,
    },
    /// Register a detached operation ([`Flow::detached`](super::Flow::detached)) under its
    /// key (under `profile`, when given).
    Register {
        /// The profile to register under, if not the one it was made with.
        profile: Option<Text>,
    },
    /// One pass of the watcher over a detached operation
    /// ([`Flow::handle_observe`](super::Flow::handle_observe)).
    Observe,
    /// Settle `all_resolved` if every target resolved.
    SettleIfAllResolved,
}

/// What [`Flow::handle_input`](super::Flow::handle_input) reports back to whoever fed the
/// input. Everything else the input caused comes out of
/// [`Flow::poll_effect`](super::Flow::poll_effect).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Taken, with nothing to report: a registry answer, a gateway answer, a timer.
    Taken,
    /// The reply to a card answer or a Continue (`connection.respond`'s result).
    Card(CardReply),
    /// An interrupt or a handle's settle: whether this input settled the operation.
    Settled(bool),
    /// A transition's change record; `None` for a move to the state the row is already in.
    Moved(Option<ChangeRecord>),
    /// A refresh's change record.
    Refreshed(ChangeRecord),
    /// A return hint: whether a live row was there to read (`connection.returned`'s `read`).
    Hinted {
        /// False when nothing was live (or the operation had settled).
        read: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CallerError;
    use crate::flow::{Effect, Flow, FlowConfig};
    use crate::registry::RegistryKey;
    use crate::time::Timestamp;
    use crate::tool_gateway::GatewayCall;
    use serde_json::json;

    fn start(now: Timestamp) -> Flow {
        let config = FlowConfig::new(RegistryKey::new("/h", "s"));
        let args = json!({"action": "connect", "connectors": ["gmail", "notion"]});
        Flow::start(&args, config, [1, 2, 3, 4, 5, 6], now)
    }

    fn minted(call: &GatewayCall) -> GatewayReply {
        let GatewayCall::Mint(mint) = call else {
            panic!("the first call is the mint: {call:?}")
        };
        super::super::testing::minted(mint)
    }

    /// Drains the effects; answers the registry and the mint through `handle_input`.
    fn drain(flow: &mut Flow, now: Timestamp) -> Vec<Effect> {
        let mut seen = Vec::new();
        while let Some(effect) = flow.poll_effect() {
            let input = match &effect {
                Effect::Register { .. } => Some(Input::Registered(Ok(()))),
                Effect::Call { id, call } if matches!(call, GatewayCall::Mint(_)) => {
                    Some(Input::Gateway {
                        id: *id,
                        result: Ok(minted(call)),
                    })
                }
                _ => None,
            };
            seen.push(effect);
            if let Some(input) = input {
                assert_eq!(flow.handle_input(input, now), Ok(Handled::Taken));
            }
        }
        seen
    }

    #[test]
    fn each_input_reports_what_its_typed_method_returns() {
        let t0 = Timestamp::from_secs(1_800_000_000);
        let mut flow = start(t0);
        drain(&mut flow, t0);

        let moved = flow.handle_input(
            Input::Transition {
                name: "gmail".into(),
                to: TargetState::Connected,
                actor: Actor::BackendWatcher,
                patch: Patch::detail("ok"),
            },
            t0,
        );
        let Ok(Handled::Moved(Some(change))) = moved else {
            panic!("{moved:?}")
        };
        assert_eq!(
            (change.from, change.to),
            (TargetState::Initiated, TargetState::Connected)
        );
        let again = Input::Transition {
            name: "gmail".into(),
            to: TargetState::Connected,
            actor: Actor::BackendWatcher,
            patch: Patch::default(),
        };
        assert_eq!(flow.handle_input(again, t0), Ok(Handled::Moved(None)));
        let unknown = Input::Refresh {
            name: "nope".into(),
            connect_url: None,
            detail: None,
            actor: Actor::User,
        };
        assert!(flow.handle_input(unknown, t0).is_err());
        let refresh = Input::Refresh {
            name: "notion".into(),
            connect_url: Some("https://c/2".into()),
            detail: None,
            actor: Actor::BackendWatcher,
        };
        assert!(matches!(
            flow.handle_input(refresh, t0),
            Ok(Handled::Refreshed(c)) if c.is_refresh()
        ));
        drain(&mut flow, t0);

        let bogus = CardAnswer {
            targets: vec![crate::card::AnswerTarget {
                name: "notion".into(),
                status: "connected".into(),
            }],
            settle_continue: false,
        };
        assert!(matches!(
            flow.handle_input(Input::CardAnswer(bogus), t0),
            Err(CallerError::InvalidAnswer { .. })
        ));
        assert_eq!(
            flow.handle_input(Input::Timeout, t0),
            Ok(Handled::Taken),
            "a timer is taken even when nothing is due"
        );
        drain(&mut flow, t0);
        assert_eq!(
            flow.handle_input(Input::Continue, t0),
            Ok(Handled::Card(CardReply { settled: true }))
        );
        assert_eq!(
            flow.handle_input(Input::Interrupt, t0),
            Ok(Handled::Settled(false)),
            "settled once: a later interrupt loses"
        );
        assert_eq!(
            flow.handle_input(Input::Settle(SettleReason::Deadline), t0),
            Ok(Handled::Settled(false))
        );
        let late = Input::Gateway {
            id: CallId(999),
            result: Err(GatewayError::Unavailable),
        };
        assert_eq!(flow.handle_input(late, t0), Ok(Handled::Taken));
        let effects = drain(&mut flow, t0);
        assert!(
            matches!(effects.last(), Some(Effect::Return(_))),
            "{effects:?}"
        );
        assert!(flow.is_done());
    }

    #[test]
    fn a_hosts_answer_naming_no_target_is_refused_and_moves_nothing() {
        let t0 = Timestamp::from_secs(1_800_000_000);
        let mut flow = start(t0);
        drain(&mut flow, t0);
        let answer = |names: &[&str]| CardAnswer::skip(names);
        let refused = flow.handle_card_answer_naming_targets(&answer(&["notion", "gmial"]), t0);
        assert_eq!(
            refused.unwrap_err().to_string(),
            "the answer names 'gmial', which is not a target of this operation (its targets: \
             gmail, notion)"
        );
        assert!(flow.poll_effect().is_none(), "nothing moved");
        // The card's protocol ignores the name; the host's API takes the known ones.
        assert_eq!(
            flow.handle_card_answer(&answer(&["notion", "gmial"]), t0),
            Ok(CardReply { settled: false })
        );
        assert_eq!(
            flow.handle_card_answer_naming_targets(&answer(&["gmail"]), t0),
            Ok(CardReply { settled: true })
        );
    }

    #[test]
    fn an_interrupt_settles_and_says_so() {
        let t0 = Timestamp::from_secs(1_800_000_000);
        let mut flow = start(t0);
        drain(&mut flow, t0);
        assert_eq!(
            flow.handle_input(Input::Interrupt, t0),
            Ok(Handled::Settled(true))
        );
        let settled_by = flow.view().and_then(|v| v.settled_by);
        assert_eq!(settled_by, Some(SettleReason::Interrupt));
    }
}
