//! `discover` on a backend: servers found in DNS rather than listed (HAProxy's
//! `server-template` with `resolvers`). A backend names a service by its SRV
//! name (`_http._tcp.app.internal`: each record a server, its target and
//! port, weight and priority) or a name and port (each A/AAAA address a
//! server). The runtime looks the name up every `every` and puts the servers
//! found in the config in force; this module holds the pure part: what a set
//! of records makes.

use crate::{DnsAddr, Server, ServerTls};
use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// A backend's `discover` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Discover {
    pub source: Source,
    /// How often the name is looked up again (default 10 s).
    pub every: Duration,
    /// Every setting of the servers found but their name, address, weight
    /// (from SRV records, else this one's), backup and cookie.
    pub server: Server,
    /// With TLS and no `sni` given: the name checked in each server's
    /// certificate is its SRV target.
    pub sni_from_target: bool,
}

/// What is looked up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// An SRV name: `_service._proto.domain`.
    Srv(String),
    /// A name whose A and AAAA records are the servers, all on this port.
    Addrs(DnsAddr),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Srv(n) => write!(f, "SRV {n}"),
            Source::Addrs(a) => write!(f, "{a}"),
        }
    }
}

/// Default `every`.
pub const DISCOVER_EVERY: Duration = Duration::from_secs(10);

/// One SRV record, its target looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvRecord {
    pub priority: u16,
    pub weight: u16,
    /// Lower case, without the trailing dot.
    pub target: String,
    pub port: u16,
    /// The target's address (the first IPv4 one, else the first).
    pub addr: IpAddr,
}

/// A server an answer calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `target:port` (SRV) or `ip:port`.
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    pub backup: bool,
    /// The SRV target, for TLS's name.
    pub target: Option<String>,
}

/// The servers SRV records make (RFC 2782): one per record; those of the
/// lowest priority are the primaries, the others backups; weights scaled so
/// that the largest is 256 (a weight of 0 counts as 1), or `weight` for all
/// when every record has the same. A record repeated is kept once.
pub fn from_srv(records: &[SrvRecord], weight: u32) -> Vec<Found> {
    let Some(primary) = records.iter().map(|r| r.priority).min() else { return Vec::new() };
    let max = records.iter().map(|r| r.weight).max().unwrap_or(0);
    let same = records.iter().all(|r| r.weight == max);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for r in records {
        let name = format!("{}:{}", r.target, r.port);
        if !seen.insert(name.clone()) {
            continue;
        }
        let weight = if same { weight } else { (u32::from(r.weight) * 256).div_ceil(u32::from(max)).clamp(1, 256) };
        out.push(Found {
            name,
            addr: SocketAddr::new(r.addr, r.port),
            weight,
            backup: r.priority > primary,
            target: Some(r.target.clone()),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The servers a name's addresses make: one per address, on `port`.
pub fn from_addrs(addrs: &[IpAddr], port: u16, weight: u32) -> Vec<Found> {
    let mut addrs: Vec<SocketAddr> = addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
    addrs.sort();
    addrs.dedup();
    addrs.into_iter().map(|addr| Found { name: addr.to_string(), addr, weight, backup: false, target: None }).collect()
}

impl Discover {
    /// The server `found` makes, its persistence cookie not among `taken`
    /// (the name with `:`, `[` and `]` made `-`, so every instance of a fleet
    /// names a server the same).
    pub fn server(&self, found: &Found, taken: &HashSet<String>) -> Server {
        let base: String = found.name.chars().map(|c| if matches!(c, ':' | '[' | ']') { '-' } else { c }).collect();
        let mut cookie = base.clone();
        let mut n = 1;
        while taken.contains(&cookie) {
            n += 1;
            cookie = format!("{base}-{n}");
        }
        let mut tls = self.server.tls.clone();
        if let (Some(t), Some(target), true) = (&tls, &found.target, self.sni_from_target)
            && let Ok(name) = rustls::pki_types::ServerName::try_from(target.clone())
        {
            let digest = t.digest ^ crate::tls::digest(&[], target);
            tls = Some(Arc::new(ServerTls { server_name: name, digest, ..(**t).clone() }));
        }
        Server {
            name: found.name.clone(),
            addr: found.addr,
            weight: found.weight,
            backup: found.backup,
            cookie,
            tls,
            dns: None,
            unresolved: None,
            disabled: false,
            discovered: true,
            ..self.server.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(priority: u16, weight: u16, target: &str, port: u16, ip: &str) -> SrvRecord {
        SrvRecord { priority, weight, target: target.into(), port, addr: ip.parse().unwrap() }
    }

    #[test]
    fn srv_records_make_servers_with_weights_and_backups() {
        let found = from_srv(
            &[
                rec(10, 10, "b.app", 8080, "10.0.0.2"),
                rec(10, 30, "a.app", 8080, "10.0.0.1"),
                rec(20, 0, "c.app", 9000, "10.0.0.3"),
                rec(10, 30, "a.app", 8080, "10.0.0.1"),
            ],
            1,
        );
        let got: Vec<_> = found.iter().map(|f| (f.name.as_str(), f.addr.to_string(), f.weight, f.backup)).collect();
        assert_eq!(
            got,
            [
                ("a.app:8080", "10.0.0.1:8080".to_string(), 256, false),
                ("b.app:8080", "10.0.0.2:8080".to_string(), 86, false),
                ("c.app:9000", "10.0.0.3:9000".to_string(), 1, true),
            ]
        );
        // Equal weights: the template's.
        let same = from_srv(&[rec(0, 5, "a", 1, "10.0.0.1"), rec(0, 5, "b", 1, "10.0.0.2")], 7);
        assert!(same.iter().all(|f| f.weight == 7 && !f.backup));
        // All zero: equal too.
        assert!(
            from_srv(&[rec(0, 0, "a", 1, "10.0.0.1"), rec(0, 0, "b", 1, "10.0.0.2")], 1).iter().all(|f| f.weight == 1)
        );
        assert!(from_srv(&[], 1).is_empty());
    }

    #[test]
    fn addresses_make_one_server_each() {
        let ips: Vec<IpAddr> =
            ["10.0.0.2", "2001:db8::1", "10.0.0.1", "10.0.0.2"].iter().map(|s| s.parse().unwrap()).collect();
        let names: Vec<_> = from_addrs(&ips, 80, 3).into_iter().map(|f| (f.name, f.weight)).collect();
        assert_eq!(names, [("10.0.0.1:80".into(), 3), ("10.0.0.2:80".into(), 3), ("[2001:db8::1]:80".to_string(), 3)]);
    }
}
