//! # connop-smol
//!
//! Runs connection operations on smol.

pub mod http;
