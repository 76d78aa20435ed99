//! The command socket's server management (cli.rs has the rest of the
//! language and finds the servers named): `add server`, `del server`, `set
//! server ... addr`, `shutdown sessions server`, in HAProxy's words and with
//! its messages. Pure: parsing and the answers; the changes go through
//! [`ServerAdmin`].

use super::{ControlError, NewServer};
use std::net::{IpAddr, SocketAddr};

/// The changes these commands make to the live server.
pub trait ServerAdmin {
    fn add_server(&self, backend: &str, new: NewServer) -> Result<(), ControlError>;
    fn del_server(&self, backend: &str, server: &str) -> Result<(), ControlError>;
    /// Returns the address the server had.
    fn set_server_addr(&self, backend: &str, server: &str, addr: SocketAddr) -> Result<SocketAddr, ControlError>;
    fn shutdown_sessions(&self, backend: &str, server: &str) -> Result<(), ControlError>;
}

const NEW_SERVER: &str = "New server registered.\n";
const SERVER_DELETED: &str = "Server deleted.\n";
const ALREADY_EXISTS: &str = "Already exists a server with the same name in backend.\n";
const NOT_IN_MAINT: &str = "Only servers in maintenance mode can be deleted.\n";
const STILL_IN_USE: &str = "Server still has connections attached to it, cannot remove it.\n";
const ADD_USAGE: &str = "'add server' expects <backend>/<server> <addr>:<port> [weight <w>] [maxconn <n>] [backup] \
[check].\n";
const ADDR_USAGE: &str = "'set server <srv> addr' expects an IPv4 or IPv6 address, optionally followed by \
'port <port>'.\n";

/// `add server <backend>/<server> <addr>:<port> [weight W] [maxconn N]
/// [backup] [check]`: the target as typed, and the server or why it cannot be.
pub(crate) fn parse_add(words: &[&str]) -> (String, Result<NewServer, String>) {
    let target = words.first().copied().unwrap_or("");
    (target.to_string(), parse_add_spec(target, &words[words.len().min(1)..]))
}

fn parse_add_spec(target: &str, rest: &[&str]) -> Result<NewServer, String> {
    let name = match target.split_once('/') {
        Some((b, s)) if !b.is_empty() && !s.is_empty() => s.to_string(),
        _ => return Err("Require 'backend/server'.\n".into()),
    };
    let Some((addr, options)) = rest.split_first() else { return Err(ADD_USAGE.into()) };
    let addr: SocketAddr = addr.parse().map_err(|_| {
        format!("'{addr}' is not an address and port (names belong in the config file, with 'resolve').\n")
    })?;
    let mut new = NewServer { name, addr, weight: None, maxconn: None, backup: false, check: false, disabled: true };
    let mut it = options.iter();
    while let Some(word) = it.next() {
        match *word {
            "weight" => {
                let w = it.next().and_then(|w| w.parse::<u32>().ok()).filter(|w| *w <= 256);
                new.weight = Some(w.ok_or("'weight' expects an integer between 0 and 256.\n")?);
            }
            "maxconn" => {
                let n = it.next().and_then(|n| n.parse::<u32>().ok()).filter(|n| *n > 0);
                new.maxconn = Some(n.ok_or("'maxconn' expects a positive integer.\n")?);
            }
            "backup" => new.backup = true,
            "check" => new.check = true,
            other => return Err(format!("unknown keyword '{other}'. {ADD_USAGE}")),
        }
    }
    Ok(new)
}

/// `set server <b>/<s> addr <ip> [port <port>]`.
pub(crate) fn parse_addr(args: &[&str]) -> Result<(IpAddr, Option<u16>), String> {
    let ip = args.first().and_then(|a| a.parse::<IpAddr>().ok());
    let port = match args.get(1..) {
        None | Some([]) => Ok(None),
        Some(["port", p]) => p.parse::<u16>().ok().filter(|p| *p != 0).map(Some).ok_or(()),
        Some(_) => Err(()),
    };
    match (ip, port) {
        (Some(ip), Ok(port)) => Ok((ip, port)),
        _ => Err(ADDR_USAGE.into()),
    }
}

/// Runs `add server`; `has_backend` tells whether the backend named exists.
pub(crate) fn add(
    rt: &dyn ServerAdmin,
    has_backend: impl Fn(&str) -> bool,
    target: &str,
    spec: Result<NewServer, String>,
) -> String {
    let Some((backend, _)) = target.split_once('/') else { return "Require 'backend/server'.\n".into() };
    if !has_backend(backend) {
        return "No such backend.\n".into();
    }
    let new = match spec {
        Ok(new) => new,
        Err(message) => return message,
    };
    match rt.add_server(backend, new) {
        Ok(()) => NEW_SERVER.into(),
        Err(ControlError::ServerExists { .. }) => ALREADY_EXISTS.into(),
        Err(e) => message(&e),
    }
}

/// Runs `del server` on a server found.
pub(crate) fn del(rt: &dyn ServerAdmin, backend: &str, server: &str) -> String {
    match rt.del_server(backend, server) {
        Ok(()) => SERVER_DELETED.into(),
        Err(ControlError::NotInMaintenance) => NOT_IN_MAINT.into(),
        Err(ControlError::StillInUse(_)) => STILL_IN_USE.into(),
        Err(e) => message(&e),
    }
}

/// Runs `set server ... addr` on a server found, whose report shows `addr`
/// and `fqdn`: HAProxy's report of what changed.
pub(crate) fn set_addr(
    rt: &dyn ServerAdmin,
    (backend, server): (&str, &str),
    (addr, fqdn): (&str, Option<&str>),
    (ip, port): (IpAddr, Option<u16>),
) -> String {
    let Some(current) = addr.parse::<SocketAddr>().ok().or_else(|| fqdn_port(fqdn)) else {
        return "No such server.\n".into();
    };
    let addr = SocketAddr::new(ip, port.unwrap_or(current.port()));
    if addr == current {
        return "no need to change the addr, port\n".into();
    }
    match rt.set_server_addr(backend, server, addr) {
        Ok(was) => {
            let mut out = format!("IP changed from '{}' to '{}'", was.ip(), addr.ip());
            if was.port() != addr.port() {
                out += &format!(", port changed from '{}' to '{}'", was.port(), addr.port());
            }
            out + " by 'stats socket command'\n"
        }
        Err(e) => message(&e),
    }
}

/// A server whose name does not resolve has no address: `0.0.0.0` and the name's port.
fn fqdn_port(fqdn: Option<&str>) -> Option<SocketAddr> {
    let port = fqdn?.rsplit_once(':')?.1.parse().ok()?;
    Some(SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), port))
}

/// Runs `shutdown sessions server` on a server found: no output when done, as HAProxy.
pub(crate) fn shutdown(rt: &dyn ServerAdmin, backend: &str, server: &str) -> String {
    match rt.shutdown_sessions(backend, server) {
        Ok(()) => String::new(),
        Err(e) => message(&e),
    }
}

fn message(e: &ControlError) -> String {
    match e {
        ControlError::ReadOnly => "Permission denied\n".into(),
        ControlError::NoBackend(_) => "No such backend.\n".into(),
        ControlError::NoServer { .. } => "No such server.\n".into(),
        other => format!("{other}.\n"),
    }
}
