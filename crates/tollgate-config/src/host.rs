//! A host and an optional port, as HTTP names them: a `Host` field, the host of
//! an `Origin`, an entry of `admin.allowed_hosts` (RFC 9110 section 7.2, RFC
//! 3986 section 3.2.2). The admin listener compares them to tell its own
//! requests from DNS-rebinding and cross-site ones (docs/admin.md, "Security").

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host part: a DNS name or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostName {
    /// Lower case, without a trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// `host[:port]`. `port` is `None` when none is written, which a request means
/// as its scheme's default port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub host: HostName,
    pub port: Option<u16>,
}

/// The longest DNS name (RFC 1035 section 2.3.4, without the trailing dot).
const MAX_NAME: usize = 253;

impl HostPort {
    /// Reads `name`, `name:port`, `1.2.3.4[:port]` or `[v6][:port]`. A name
    /// is letters, digits, `-` and `_` in dot-separated labels, compared without
    /// case and without its trailing dot; a name whose last label is a number
    /// is not one (a browser reads `127.1` as an IPv4 address). Nothing else
    /// (user info, a path, an IPv6 address without brackets, a zone id) is
    /// accepted: `None`. An empty port (`host:`) is no port.
    pub fn parse(s: &str) -> Option<HostPort> {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (literal, after) = rest.split_once(']')?;
            let ip: Ipv6Addr = literal.parse().ok()?;
            (HostName::Ip(IpAddr::V6(ip)), after)
        } else {
            let (name, after) = match s.find(':') {
                Some(i) => (&s[..i], &s[i..]),
                None => (s, ""),
            };
            match name.parse::<Ipv4Addr>() {
                Ok(ip) => (HostName::Ip(IpAddr::V4(ip)), after),
                Err(_) => (HostName::Name(dns_name(name)?), after),
            }
        };
        let port = match port {
            "" | ":" => None,
            p => {
                let digits = p.strip_prefix(':')?;
                if !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some(digits.parse::<u16>().ok()?)
            }
        };
        Some(HostPort { host, port })
    }
}

/// `name` in lower case without its trailing dot, if it is a DNS name.
fn dns_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > MAX_NAME {
        return None;
    }
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    let last = name.rsplit('.').next().unwrap_or(name);
    if !labels_ok || last.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(name.to_ascii_lowercase())
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostName::Name(n) => f.write_str(n),
            HostName::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            HostName::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.host)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(s: &str) -> Option<String> {
        HostPort::parse(s).map(|h| h.to_string())
    }

    #[test]
    fn names_and_addresses_with_or_without_port() {
        assert_eq!(hp("Stats.Example.COM"), Some("stats.example.com".into()));
        assert_eq!(hp("stats.example.com.:8404"), Some("stats.example.com:8404".into()));
        assert_eq!(hp("localhost:"), Some("localhost".into()));
        assert_eq!(hp("my_host-1"), Some("my_host-1".into()));
        assert_eq!(hp("127.0.0.1:8404"), Some("127.0.0.1:8404".into()));
        assert_eq!(hp("[::1]:8404"), Some("[::1]:8404".into()));
        assert_eq!(hp("[0:0::0001]"), Some("[::1]".into()), "IPv6 compared as addresses");
        let h = HostPort::parse("10.0.0.5:80").unwrap();
        assert_eq!((h.host, h.port), (HostName::Ip("10.0.0.5".parse().unwrap()), Some(80)));
        let h = HostPort::parse("a.b").unwrap();
        assert_eq!((h.host, h.port), (HostName::Name("a.b".into()), None));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            ":80",
            ".",
            "a..b",
            "a b",
            "user@host",
            "host/path",
            "host:80:80",
            "host:http",
            "host:65536",
            "host:-1",
            "host:+80",
            "::1",
            "[::1",
            "[::1]x",
            "[fe80::1%25eth0]",
            "[127.0.0.1]",
            "127.1",
            "1.2.3.256",
            "0x7f.0.0.1",
            "ex%61mple.com",
            "*.example.com",
            "\u{e9}t\u{e9}.fr",
            &"a".repeat(64),
            &format!("{}.com", ["a"; 130].join(".")),
        ] {
            assert_eq!(hp(bad), None, "{bad:?}");
        }
        assert_eq!(hp("[::1]:"), Some("[::1]".into()), "an empty port is no port");
    }
}
