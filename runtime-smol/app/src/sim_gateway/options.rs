//! How to run a simulated gateway: the flags of `connop sim-gateway`, and how it names the
//! accounts it mints.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// How to run a simulated gateway (the flags of `connop sim-gateway`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimOptions {
    /// Where to listen; port 0 picks a free one. Default `127.0.0.1:0`.
    pub listen: SocketAddr,
    /// `--auto-complete`: minted accounts become active by themselves this long after.
    pub auto_complete: Option<Duration>,
    /// `--token`: the bearer token every `/v1` and `/sim` route requires.
    pub token: Option<String>,
    /// `--allow-host`: names served besides the loopback ones and the bound address.
    pub allow_hosts: Vec<String>,
    /// How accounts are named: [`LinkIds::Random`] unless a test asks otherwise.
    pub link_ids: LinkIds,
}

/// How a simulated gateway names the accounts it mints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkIds {
    /// `ca_<slug>_<32 hex digits>`, 128 random bits ([`RandomIds`](super::RandomIds)):
    /// nobody can guess a link.
    #[default]
    Random,
    /// `ca_<slug>_<n>`, `n` the mint call ([`NumberedIds`](super::NumberedIds)): for tests
    /// that name accounts.
    Numbered,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            auto_complete: None,
            token: None,
            allow_hosts: Vec::new(),
            link_ids: LinkIds::Random,
        }
    }
}

impl SimOptions {
    /// Sets the listen address.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Sets the auto-complete delay.
    pub fn auto_complete(mut self, after: Duration) -> Self {
        self.auto_complete = Some(after);
        self
    }

    /// Requires a bearer token on the `/v1` and `/sim` routes.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serves these names too (checked with [`crate::net::guard::host_name`]).
    pub fn allow_hosts(mut self, names: Vec<String>) -> Self {
        self.allow_hosts = names;
        self
    }

    /// Names accounts `ca_<slug>_<n>` (`n` the mint call): guessable, for tests only.
    pub fn numbered_ids(mut self) -> Self {
        self.link_ids = LinkIds::Numbered;
        self
    }
}
