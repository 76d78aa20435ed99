//! What a DNS lookup changed in the servers of the config in force (a
//! server's name followed, `resolve`; servers discovered, `discover`), for
//! the log line of each.

use std::net::SocketAddr;

/// One server changed by a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub backend: String,
    pub server: String,
    /// What was looked up: a server's `host:port`, a backend's `discover` name.
    pub name: String,
    pub what: What,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum What {
    /// It has an address now: `from` the one it had, none when it had none.
    Resolved { to: SocketAddr, from: Option<SocketAddr> },
    /// It had one and lost it: DOWN.
    Lost(String),
    /// Found by `discover`: a new server, or (`changed`) one found again
    /// with another address, weight or role.
    Found { addr: SocketAddr, weight: u32, backup: bool, changed: bool },
    /// No longer found by `discover` (why, when the name is gone): removed.
    NotFound(Option<String>),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (b, s, n) = (&self.backend, &self.server, &self.name);
        match &self.what {
            What::Resolved { to, from: None } => write!(f, "server {b}/{s}: {n} resolves to {to}: it takes traffic"),
            What::Resolved { to, from: Some(was) } => write!(f, "server {b}/{s}: {n} resolves to {to} now (was {was})"),
            What::Lost(why) => write!(f, "server {b}/{s}: {n} does not resolve ({why}): the server is DOWN"),
            What::Found { addr, weight, backup, changed } => {
                let role = if *backup { " (a backup)" } else { "" };
                match changed {
                    false => write!(f, "server {b}/{s}: found by {n}: {addr}, weight {weight}{role}: it takes traffic"),
                    true => write!(f, "server {b}/{s}: {n} now gives {addr}, weight {weight}{role}"),
                }
            }
            What::NotFound(None) => write!(f, "server {b}/{s}: no longer found by {n}: removed"),
            What::NotFound(Some(why)) => write!(f, "server {b}/{s}: {n}: {why}: removed"),
        }
    }
}
