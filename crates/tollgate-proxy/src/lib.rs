//! Tollgate's data path.
//!
//! The request path, in order (docs/architecture.md draws it):
//! accept ([`server`]; the TLS handshake on TLS binds, [`tls`]) -> HTTP/1.1
//! connection ([`conn`], on tollgate-wire's codec `h1`; or an HTTP/2 stream,
//! [`h2conn`]) -> route (rules, in tollgate-config)
//! -> Basic auth ([`auth`]) -> the cache ([`cache`]) -> balance ([`lb`]) ->
//! upstream pool ([`upstream`]) -> response -> log ([`access_log`]). Errors become
//! responses in one place, [`rescue`]. Servers are taken in and out of balancing
//! by [`health`] checks (active, on a thread of their own, and passive). Basic
//! authentication ([`auth`]) gates requests once their backend is chosen.
//! Frontends in TCP mode ([`tcp`]) relay connections instead of requests.

// Unsafe code only where a measured win needs it, isolated and documented:
// sockopt.rs (one setsockopt no safe crate wraps).
#![deny(unsafe_code)]

pub mod access_log;
pub mod auth;
pub mod buf;
pub mod cache;
pub mod check;
pub mod conn;
pub mod control;
pub mod counters;
mod exchange;
pub mod h2conn;
mod h2io;
mod idle_poll;
pub mod lazy_tcp;
pub mod lb;
pub mod limits;
mod pipeline;
pub mod proxy_proto;
pub mod reload;
pub mod report;
pub mod rescue;
pub mod server;
pub mod snapshot;
mod sockopt;
pub mod splice;
pub mod start_error;
pub mod tcp;
pub mod termination;
pub mod tls;
pub mod upstream;

pub use reload::{ReloadError, ReloadReport};
pub use server::Server;
pub use snapshot::Snapshot;
pub use start_error::StartError;
