//! The `connop` subcommands, behind the command-line parsing of `src/bin/connop.rs`: one
//! module per subcommand, and what they share (the tool gateway set-up, the profile, signals,
//! stdout). Each returns an [`AppError`](crate::error::AppError), whose blame decides the exit
//! code. This module only presents them: `flags` (the shared flags' values), `process` (the
//! profile, signals, stdout and stderr) and `tool_gateway` (which tool gateway a command
//! talks to) are what the subcommands share.

pub mod connect;
mod flags;
pub mod lease;
pub mod listen;
pub mod peer;
mod process;
pub mod serve;
pub mod sim_gateway;
mod tool_gateway;

pub use flags::{MIN_TICK, seconds, tick};
pub use process::{announce_listening, profile, watch_signals};
pub(crate) use process::{print_stdout, watch};
pub use tool_gateway::{ChosenToolGateway, choose_for_person, choose_tool_gateway, uses_embedded};
