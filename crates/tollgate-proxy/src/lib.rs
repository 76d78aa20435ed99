//! Tollgate's data path, in folders that are layers, each importing only
//! those below it (docs/architecture.md's module map; CI checks that no two
//! folders import each other):
//!
//! 1. [`observe`]: counters, access logs, why an exchange ended.
//! 2. [`io`]: buffers, lazily registered sockets, splice, idle polling, limits.
//! 3. [`net`]: TLS termination, the PROXY header reader.
//! 4. [`lb`]: backends and servers, selection, health state, stick tables.
//! 5. [`upstream`]: connections to servers, HTTP/2 to them, the pool.
//! 6. [`cache`]: the cache's storage (memory and disk tiers, zones).
//! 7. [`pipeline`]: the request phase, once for both client protocols: route
//!    (rules, in tollgate-config) -> Basic auth -> the cache's hooks ->
//!    balance -> upstream -> response head; errors become responses in one
//!    place, [`pipeline::rescue`].
//! 8. [`session`]: a client's HTTP/1.1 connection, its HTTP/2 streams, TCP mode.
//! 9. [`runtime`]: listeners and workers, reloads, active health checks, the
//!    report, live control.
//!
//! The wire formats and pure HTTP rules are the tollgate-wire crate; the admin
//! interfaces the tollgate-admin crate, started by the binary.

// Unsafe code only where a measured win needs it, isolated and documented:
// sockopt.rs (one setsockopt no safe crate wraps).
#![deny(unsafe_code)]

pub mod cache;
pub mod io;
pub mod lb;
pub mod net;
pub mod observe;
pub mod pipeline;
pub mod runtime;
pub mod session;
pub mod upstream;

pub use pipeline::snapshot::Snapshot;
pub use pipeline::start_error::StartError;
pub use runtime::reload::{ReloadError, ReloadReport};
pub use runtime::server::{Inherited, Server, Stopper};
