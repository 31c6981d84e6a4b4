//! Seed 001 on the deterministic simulation: the seed's every test is a scenario of the one
//! table in `connop_tests::table`, which the runtimes play too (`runtime_table.rs`). Time is
//! virtual; races are input orders; docs/contract.md#invariants is checked at every step.

use connop_core::tool_gateway::GatewayError;
use connop_fixtures::{ScriptedToolGateway, Sim};
use connop_tests::assert_clean;
use connop_tests::table::{Driver, play_table};
use serde_json::json;

#[test]
fn seed_001_on_the_simulation() {
    play_table(Driver::Sim);
}

fn connect(names: &[&str]) -> serde_json::Value {
    json!({"action": "connect", "connectors": names})
}

/// The seed's `_run`: desktop, a card callback, a 0 s tick.
fn sim(gw: ScriptedToolGateway) -> Sim {
    Sim::new(gw).tick(0.0)
}

#[test]
fn a_failed_mint_returns_the_gateway_error_and_closes_unsettled() {
    let gw = ScriptedToolGateway::new().mint_error(GatewayError::Http { status: 502 });
    let out = sim(gw).run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(
        out.json()["error"],
        "The connector gateway request failed: the connector gateway answered HTTP 502. If this persists, the user can manage connections in the connector portal."
    );
    assert!(out.registry.is_empty(), "the registry entry is closed");
    assert!(out.frames.is_empty() && out.cards.is_empty());
    assert!(!out.flow.operation().unwrap().is_settled());
}
