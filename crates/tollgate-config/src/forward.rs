//! `forward` on a backend: a forward proxy. Requests routed to such a backend
//! go to the host they name (an absolute-form target, `CONNECT`'s authority,
//! or the Host field) rather than to listed servers, within what the
//! backend's lists allow. The checks here are pure: they take a name, a port
//! or an address and say whether it may be reached.

use crate::AuthPolicy;
use ipnet::IpNet;
use std::net::IpAddr;

/// What a forward-proxy backend lets its clients reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// Host names (as the request writes them) that may be asked for;
    /// `None`: any.
    pub allow_hosts: Option<Vec<HostPattern>>,
    /// Ports a plain HTTP request may go to (default [`DEFAULT_PORTS`]).
    pub ports: Vec<u16>,
    /// Ports a `CONNECT` may open a tunnel to (default 443, Squid's `SSL_ports`).
    pub connect_ports: Vec<u16>,
    /// Addresses that may be connected to; `None`: every public one (none of
    /// [`PRIVATE_NETWORKS`]).
    pub allow_networks: Option<Vec<IpNet>>,
    /// Addresses never connected to, whatever `allow_networks` says.
    pub deny_networks: Vec<IpNet>,
    /// Proxy authentication (`Proxy-Authorization`, 407): the userlist and realm.
    pub auth: Option<AuthPolicy>,
}

/// Ports for plain HTTP requests when `ports` is not given.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];
/// Ports for `CONNECT` when `connect_ports` is not given.
pub const DEFAULT_CONNECT_PORTS: [u16; 1] = [443];

/// Networks a forward proxy does not reach unless `allow_networks` names
/// them: this host, private and shared networks, link-local, documentation,
/// benchmarking, multicast and reserved ranges (RFC 6890's special-purpose
/// registries), and Teredo (2001::/32, whose IPv4 address is hidden), so that
/// a client outside cannot reach inside through the proxy. IPv6 addresses
/// that carry an IPv4 one (mapped, compatible, NAT64, 6to4) are judged by it:
/// [`embedded_v4`].
pub const PRIVATE_NETWORKS: [&str; 23] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/32",
    "2001:db8::/32",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// A name in `allow_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// `example.com`: that name alone (or an address written as such).
    Exact(String),
    /// `*.example.com`: any name under it (not `example.com` itself); kept
    /// as `.example.com`.
    Under(String),
}

impl HostPattern {
    /// `pattern` as written in the config, or why it is not one.
    pub fn parse(pattern: &str) -> Result<HostPattern, String> {
        let p = pattern.to_ascii_lowercase();
        let (under, name) = match p.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, p.as_str()),
        };
        let label_ok = |l: &str| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let is_addr = !under && name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok();
        if !is_addr && (name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok)) {
            return Err(format!("`{pattern}` is not a host name, `*.` and a domain, or an address"));
        }
        let name = name.trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(if under { HostPattern::Under(format!(".{name}")) } else { HostPattern::Exact(name) })
    }

    /// Whether `host` (lower case, without port or brackets) is this.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(n) => n == host,
            HostPattern::Under(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
        }
    }
}

/// Why a destination is refused: the access log's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The host is not in `allow_hosts`.
    Host,
    /// The port is not in `ports` / `connect_ports`.
    Port,
    /// No address of the host may be connected to.
    Network,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Host => "forward-host-denied",
            Refusal::Port => "forward-port-denied",
            Refusal::Network => "forward-network-denied",
        }
    }
}

impl Forward {
    /// What may be asked by name: `host` (lower case, without brackets) on
    /// `port`, by a `CONNECT` or a plain request.
    pub fn check_name(&self, host: &str, port: u16, connect: bool) -> Result<(), Refusal> {
        let ports = if connect { &self.connect_ports } else { &self.ports };
        if !ports.contains(&port) {
            return Err(Refusal::Port);
        }
        if let Some(hosts) = &self.allow_hosts
            && !hosts.iter().any(|p| p.matches(host))
        {
            return Err(Refusal::Host);
        }
        Ok(())
    }

    /// Whether an address may be connected to: not in `deny_networks`, and in
    /// `allow_networks` (when given) or else public. An IPv4 address written
    /// as IPv6 (`::ffff:a.b.c.d`) is judged as the IPv4 one.
    pub fn addr_allowed(&self, ip: IpAddr) -> bool {
        let judged = |ip: IpAddr| {
            if self.deny_networks.iter().any(|n| n.contains(&ip)) {
                return false;
            }
            match &self.allow_networks {
                Some(allowed) => allowed.iter().any(|n| n.contains(&ip)),
                None => is_public(ip),
            }
        };
        match ip {
            // An IPv6 address that leads to an IPv4 one passes only if both do
            // (an IPv4-mapped one is the IPv4 address itself).
            IpAddr::V6(v6) => match (v6.to_ipv4_mapped(), embedded_v4(v6)) {
                (Some(v4), _) => judged(IpAddr::V4(v4)),
                (None, Some(v4)) => judged(ip) && judged(IpAddr::V4(v4)),
                (None, None) => judged(ip),
            },
            v4 => judged(v4),
        }
    }
}

/// The IPv4 address an IPv6 one leads to, where the IPv6 address is made
/// of it: IPv4-compatible (`::a.b.c.d`, RFC 4291), SIIT (`::ffff:0:a.b.c.d`,
/// RFC 6052), NAT64 (`64:ff9b::/96` and the local-use `64:ff9b:1::/48`, RFC
/// 6052 and 8215: the last 32 bits) and 6to4 (`2002:AABB:CCDD::/48`, RFC 3056).
pub fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let last = |hi: u16, lo: u16| std::net::Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) != (0, 0) && (hi, lo) != (0, 1) => Some(last(hi, lo)),
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(last(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x64, 0xff9b, 1, _, _, _, hi, lo] => Some(last(hi, lo)),
        [0x2002, hi, lo, ..] => Some(last(hi, lo)),
        _ => None,
    }
}

/// Whether `ip` is outside every one of [`PRIVATE_NETWORKS`].
pub fn is_public(ip: IpAddr) -> bool {
    use std::sync::OnceLock;
    static NETS: OnceLock<Vec<IpNet>> = OnceLock::new();
    let nets = NETS.get_or_init(|| PRIVATE_NETWORKS.iter().filter_map(|n| n.parse().ok()).collect());
    !nets.iter().any(|n| n.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd() -> Forward {
        Forward {
            allow_hosts: None,
            ports: DEFAULT_PORTS.to_vec(),
            connect_ports: DEFAULT_CONNECT_PORTS.to_vec(),
            allow_networks: None,
            deny_networks: Vec::new(),
            auth: None,
        }
    }

    #[test]
    fn the_private_list_parses_and_public_addresses_pass_by_default() {
        assert_eq!(PRIVATE_NETWORKS.iter().filter_map(|n| n.parse::<IpNet>().ok()).count(), PRIVATE_NETWORKS.len());
        let f = fwd();
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!f.addr_allowed(private.parse().unwrap()), "{private}");
        }
        // IPv6 addresses made of a private IPv4 one: NAT64, compatible, SIIT,
        // 6to4; Teredo hides its IPv4 address: refused whole.
        for private in
            ["64:ff9b::a00:1", "64:ff9b:1::7f00:1", "::127.0.0.1", "::ffff:0:a00:1", "2002:a00:1::1", "2001::1"]
        {
            assert!(!f.addr_allowed(private.parse().unwrap()), "{private}");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(f.addr_allowed(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn allow_networks_replaces_the_default_and_deny_networks_wins() {
        let mut f = fwd();
        f.allow_networks = Some(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(f.addr_allowed("127.0.0.1".parse().unwrap()));
        assert!(f.addr_allowed("::ffff:127.0.0.2".parse().unwrap()));
        assert!(!f.addr_allowed("8.8.8.8".parse().unwrap()), "not listed");
        f.deny_networks = vec!["127.0.0.2/32".parse().unwrap()];
        assert!(!f.addr_allowed("127.0.0.2".parse().unwrap()));
        assert!(f.addr_allowed("127.0.0.3".parse().unwrap()));
        let mut g = fwd();
        g.deny_networks = vec!["8.8.0.0/16".parse().unwrap()];
        assert!(!g.addr_allowed("8.8.8.8".parse().unwrap()));
        assert!(g.addr_allowed("1.1.1.1".parse().unwrap()));
    }

    #[test]
    fn names_and_ports() {
        let mut f = fwd();
        assert_eq!(f.check_name("example.com", 80, false), Ok(()));
        assert_eq!(f.check_name("example.com", 8080, false), Err(Refusal::Port));
        assert_eq!(f.check_name("example.com", 443, true), Ok(()));
        assert_eq!(f.check_name("example.com", 80, true), Err(Refusal::Port), "CONNECT to 80 is not in connect_ports");
        f.allow_hosts = Some(vec![HostPattern::parse("*.Example.com").unwrap(), HostPattern::parse("a.test").unwrap()]);
        assert_eq!(f.check_name("www.example.com", 443, true), Ok(()));
        assert_eq!(f.check_name("a.b.example.com", 80, false), Ok(()));
        assert_eq!(f.check_name("example.com", 80, false), Err(Refusal::Host), "*. is under the domain only");
        assert_eq!(f.check_name("badexample.com", 80, false), Err(Refusal::Host));
        assert_eq!(f.check_name("a.test", 80, false), Ok(()));
        assert_eq!(f.check_name("b.a.test", 80, false), Err(Refusal::Host));
        assert_eq!(HostPattern::parse("[::1]"), Ok(HostPattern::Exact("::1".into())));
        assert_eq!(HostPattern::parse("10.0.0.1"), Ok(HostPattern::Exact("10.0.0.1".into())));
        for bad in ["", "*.", "a..b", "a b", "*.*.x", "x/y", "*"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
