//! The connect lifecycle both core benchmarks drive: a tiny inline fake gateway (the
//! fixtures crate depends on this one, so it cannot be a dev-dependency) and the loop that
//! runs a card-path connect from `Flow::start` to `Effect::Return`.
//!
//! Mints answer `initiated` with `connection_id = ca_<name>` and a link; account reads answer
//! `pending` until the connection's read count reaches its target's flip number, then
//! `active`.

#![allow(dead_code)] // each benchmark uses a different part

use connop_core::prelude::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// The op id's random bytes: fixed, so every run is the same.
pub const ENTROPY: [u8; 6] = [0x5e, 0xed, 0, 0, 0, 1];

pub fn t0() -> Timestamp {
    Timestamp::from_secs(1_800_000_000)
}

pub fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t{i}")).collect()
}

pub fn connect_args(names: &[String]) -> Value {
    json!({"action": "connect", "connectors": names})
}

pub fn card_config(tick: Duration) -> FlowConfig {
    let mut config = FlowConfig::new(RegistryKey::new("/p", "s"));
    config.options.tick = tick;
    config
}

/// The inline fake gateway. Everything is prepared up front; answering clones `Arc<str>`s.
pub struct FakeGateway {
    mint_rows: Vec<MintRow>,
    names: Vec<Text>,
    index_of_id: HashMap<Text, usize>,
    reads: Vec<u32>,
    flips: Vec<u32>,
}

impl FakeGateway {
    pub fn new(names: &[String], flips: Vec<u32>) -> Self {
        let mint_rows: Vec<MintRow> = names
            .iter()
            .map(|name| MintRow {
                connector: name.as_str().into(),
                status: MintStatus::Initiated,
                connect_url: Some(format!("https://connect.example/{name}").into()),
                connection_id: Some(format!("ca_{name}").into()),
                status_reason: None,
            })
            .collect();
        let index_of_id = mint_rows
            .iter()
            .enumerate()
            .map(|(i, row)| (row.connection_id.clone().expect("minted with an id"), i))
            .collect();
        FakeGateway {
            names: mint_rows.iter().map(|r| r.connector.clone()).collect(),
            mint_rows,
            index_of_id,
            reads: vec![0; names.len()],
            flips,
        }
    }

    pub fn account(&self, index: usize, status: AccountStatus) -> GatewayReply {
        GatewayReply::Account(Some(Account {
            connection_id: self.mint_rows[index]
                .connection_id
                .clone()
                .expect("minted with an id"),
            connector: self.names[index].clone(),
            status,
            status_reason: None,
        }))
    }

    pub fn answer(&mut self, call: &GatewayCall) -> GatewayReply {
        match call {
            GatewayCall::Mint(_) => GatewayReply::Minted(self.mint_rows.clone()),
            GatewayCall::Account { connection_id, .. } => {
                let index = self.index_of_id[connection_id];
                self.reads[index] += 1;
                let status = if self.reads[index] >= self.flips[index] {
                    AccountStatus::Active
                } else {
                    AccountStatus::Pending
                };
                GatewayReply::Account(Some(Account {
                    connection_id: connection_id.clone(),
                    connector: self.names[index].clone(),
                    status,
                    status_reason: None,
                }))
            }
            GatewayCall::List { .. } => GatewayReply::Connectors(Vec::new()),
        }
    }
}

/// Runs a whole card-path connect from `Flow::start` to `Effect::Return`, and serializes the
/// returned tool result. Returns the JSON text.
pub fn run_lifecycle(args: &Value, config: FlowConfig, gateway: &mut FakeGateway) -> String {
    let mut now = t0();
    let mut flow = Flow::start(args, config, ENTROPY, now);
    let mut result = None;
    loop {
        while let Some(effect) = flow.poll_effect() {
            match effect {
                Effect::Register { .. } => flow.handle_registered(Ok(()), now),
                Effect::Call { id, call } => {
                    let reply = gateway.answer(&call);
                    flow.handle_gateway(id, Ok(reply), now)
                        .expect("replies match their calls");
                }
                Effect::Emit(event) => drop(std::hint::black_box(event)),
                Effect::Return(tool_result) => result = Some(tool_result.to_json()),
                _ => {} // Close: this loop keeps no registry
            }
        }
        if flow.is_done() {
            break;
        }
        let wake = flow
            .poll_timeout()
            .expect("an open operation always has a deadline");
        now = wake.at;
        flow.handle_timeout(now);
    }
    result.expect("every flow returns once")
}

pub fn lifecycle_inputs(names: &[String], flips: Vec<u32>) -> (Value, FlowConfig, FakeGateway) {
    (
        connect_args(names),
        card_config(Duration::ZERO),
        FakeGateway::new(names, flips),
    )
}
