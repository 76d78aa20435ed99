//! Tollgate's wire formats and the pure rules over them: what a client or a
//! server sends, read and written as bytes, with no I/O, no clock of its own
//! (times come in as arguments) and no runtime. Every parser here has a fuzz
//! target (fuzz/), which depends on this crate only.
//!
//! - [`h1`]: the HTTP/1.1 codec (request and response heads, chunked bodies,
//!   framing rules) and [`headers`], the header rules a request gets on its way.
//! - [`proxy_proto`]: the PROXY protocol, versions 1 and 2.
//! - [`hello`]: the TLS ClientHello reader (SNI and ALPN before the handshake).
//! - [`cookie`]: the persistence cookie codec (insert, prefix, rewrite).
//! - [`encoding`]: content codings: `Accept-Encoding` and whether a response
//!   may be compressed.
//! - [`files`]: static files: a request path under a root (no way out),
//!   preconditions against a file's validators, content types.
//! - [`cache`]: RFC 9111 as pure functions: `Cache-Control`, targeted fields,
//!   freshness and storability, `Vary`, ranges, stored heads, `Cache-Status`,
//!   the primary key.
//! - [`hash`], [`clock`]: the hash balancing uses; HTTP dates.

#![forbid(unsafe_code)]

pub mod cache;
pub mod clock;
pub mod cookie;
pub mod encoding;
pub mod files;
pub mod h1;
pub mod hash;
pub mod headers;
pub mod hello;
pub mod proxy_proto;
