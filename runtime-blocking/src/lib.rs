//! # connop-blocking
//!
//! Runs connection operations on the calling thread, for synchronous hosts.

pub mod http;
