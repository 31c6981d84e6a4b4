//! What the flow's unit tests share.

use crate::tool_gateway::{GatewayReply, MintRequest, MintRow, MintStatus};

/// The mint's answer every test gateway gives: each connector `initiated`, with the link
/// `https://c/<name>` and the account `ca_<name>`.
pub(super) fn minted(mint: &MintRequest) -> GatewayReply {
    GatewayReply::Minted(
        mint.connectors
            .iter()
            .map(|name| MintRow {
                connector: name.clone(),
                status: MintStatus::Initiated,
                connect_url: Some(format!("https://c/{name}").into()),
                connection_id: Some(format!("ca_{name}").into()),
                status_reason: None,
            })
            .collect(),
    )
}
