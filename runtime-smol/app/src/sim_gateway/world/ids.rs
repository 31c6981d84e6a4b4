//! Where the world's link ids and nonces come from: the world draws nothing at random itself.

/// Where a world's link ids and nonces come from. A link id is `ca_<connector>_` and
/// [`IdSource::account`]; whoever knows a pending link's id can open its consent page, so the
/// server's source is unguessable (`RandomIds`, 128 random bits each); tests that name
/// accounts give the world [`NumberedIds`].
pub trait IdSource: Send + std::fmt::Debug {
    /// What follows `ca_<connector>_` in the id of an account made by the `mint`-th mint call
    /// (counted from 1).
    fn account(&mut self, mint: usize) -> String;
    /// A fresh one-time nonce for a consent page's form.
    fn nonce(&mut self) -> String;
}

/// Guessable ids for tests: `ca_<connector>_<n>`, `n` the mint call that made the account,
/// and nonces counted from 1. Never what a listener uses.
#[derive(Clone, Debug, Default)]
pub struct NumberedIds {
    nonces: u64,
}

impl IdSource for NumberedIds {
    fn account(&mut self, mint: usize) -> String {
        mint.to_string()
    }

    fn nonce(&mut self) -> String {
        self.nonces += 1;
        format!("nonce{}", self.nonces)
    }
}
