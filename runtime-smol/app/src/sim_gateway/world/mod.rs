//! The simulated gateway's world: plain data and a sans-IO request handler.
//!
//! [`SimWorld::handle`] turns one [`SimRequest`] into one [`SimResponse`] at a given instant;
//! the HTTP layer only converts to and from hyper and sleeps the response's delay. The world
//! draws nothing at random itself: its link ids and nonces come from the [`IdSource`] it is
//! given.
//!
//! By trade: `state` holds the world's data and its entry point, `http` a request and its
//! answer as plain data, `api` the `/v1/...` routes, `links` the consent links, `controls`
//! the `/sim/...` test controls, `faults` what the world is told to answer instead of its
//! own state, `ids` where names come from and `dates` its timestamps. This module only
//! presents them; none of them uses it.

mod api;
mod controls;
mod dates;
mod faults;
mod http;
mod ids;
mod links;
mod state;

pub use controls::ControlError;
pub(super) use http::authorized;
pub use http::{SimRequest, SimResponse};
pub use ids::{IdSource, NumberedIds};
pub use state::{SimAccount, SimWorld, UNKNOWN_CONNECTOR, USER_DENIED};

#[cfg(test)]
mod tests;
