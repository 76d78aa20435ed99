//! Why a start (or the snapshot a start or reload builds) failed, as the
//! binary reports it: below the server and the snapshot, which both return it.

use std::net::SocketAddr;

#[derive(Debug)]
pub enum StartError {
    Bind {
        frontend: String,
        addr: SocketAddr,
        error: std::io::Error,
    },
    AccessLog(std::io::Error),
    /// A TLS bind's server config could not be built.
    Tls(String),
    Runtime(std::io::Error),
    /// A cache zone's disk tier could not be opened.
    Cache(String),
    /// A `static` backend's root could not be opened.
    Files(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind { frontend, addr, error } => bind_error(f, frontend, addr, error),
            StartError::AccessLog(e) => write!(f, "cannot open the access log: {e}"),
            StartError::Tls(e) => write!(f, "TLS: {e}"),
            StartError::Runtime(e) => write!(f, "cannot start a worker: {e}"),
            StartError::Cache(e) | StartError::Files(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A bind failure, as a start or a reload reports it. An address in use gets a
/// message of its own that names it: with SO_REUSEPORT the likely culprit is a
/// second Tollgate (`server::refuse_if_in_use`).
pub(crate) fn bind_error(
    f: &mut std::fmt::Formatter<'_>,
    frontend: &str,
    addr: &SocketAddr,
    error: &std::io::Error,
) -> std::fmt::Result {
    if error.kind() == std::io::ErrorKind::AddrInUse {
        write!(f, "frontend `{frontend}`: {addr} is already in use (another tollgate running?)")
    } else {
        write!(f, "frontend `{frontend}`: cannot listen on {addr}: {error}")
    }
}
