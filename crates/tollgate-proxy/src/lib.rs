//! Tollgate's data path.
//!
//! The request path, in order (docs/architecture.md draws it):
//! accept ([`server`]) -> client IO and timers ([`io`]) -> HTTP/1.1 session
//! ([`session`]) -> route (rules, in tollgate-config) -> balance ([`lb`]) -> upstream
//! pool ([`pool`]) -> response ([`body`]) -> log ([`access_log`]). Errors become
//! responses in one place, [`rescue`]. Servers are taken in and out of balancing
//! by [`health`] checks (active, on a thread of their own, and passive).

#![forbid(unsafe_code)]

pub mod access_log;
pub mod body;
pub mod demo;
mod hash;
pub mod headers;
pub mod health;
pub mod io;
pub mod lb;
pub mod pool;
pub mod rescue;
pub mod server;
pub mod session;
pub mod snapshot;

pub use server::{Server, StartError};
pub use snapshot::Snapshot;
