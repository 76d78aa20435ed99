//! A forward proxy: requests routed to a backend with `forward` go to the
//! host they name, within what its lists allow (tollgate-config forward.rs).
//!
//! ```text
//! destination (absolute-form, CONNECT's authority, Host / :authority)
//!   -> a loop through this proxy? (Via) 508
//!   -> Proxy-Authorization (407)
//!   -> name and port allowed? (403)
//!   -> DNS (per worker, cached), an address allowed? (403)
//!   -> CONNECT: a new connection, 200, then a tunnel
//!      otherwise: the request goes on as to any server (pooled connections,
//!      retries to the same address), with Via and without the proxy's fields
//! ```
//!
//! The address is checked after the lookup and is the one connected to: a
//! name cannot pass the check with one address and be reached at another.

use crate::lb::ServerRt;
use crate::pipeline::auth::{self, AuthRt};
use crate::pipeline::rescue::ProxyError;
use hickory_resolver::TokioResolver;
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tollgate_config::forward::{Forward, Refusal};
use tollgate_config::{Backend, Dns, Frontend, Proto, Server};
use tollgate_wire::h1::{RequestHead, TargetForm};

/// Where a request asks to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// Lower case, without brackets or a final dot.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// A `CONNECT`: a tunnel rather than a request.
    pub(crate) connect: bool,
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// What this proxy adds to `Via` (RFC 9110 section 7.6.3), with a token of
/// this process, by which a request that comes back through it is known.
static VIA: LazyLock<String> = LazyLock::new(|| {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("1.1 tollgate-{:08x}", h.finish() as u32)
});

/// The destination a request names: a CONNECT's authority, an absolute-form
/// target's (which the parser made the Host), or the Host field (an
/// origin-form request, as a transparent proxy gets them; HTTP/2's
/// :authority). Plain requests go over plain HTTP: an `https` target (or
/// HTTP/2 and HTTP/3 `:scheme`) is refused, its client should ask for a
/// tunnel (CONNECT).
pub(crate) fn destination(head: &RequestHead) -> Result<Destination, ProxyError> {
    let connect = head.form == Some(TargetForm::Authority);
    // (An HTTP/2 or HTTP/3 request for `https` too: it would go out in clear.)
    if head.https && !connect {
        return Err(ProxyError::Refused { status: 400, reason: "forward-https-needs-connect" });
    }
    let authority = head.fields.get(b"host").ok_or(ProxyError::Refused { status: 400, reason: "missing-host" })?;
    let text = std::str::from_utf8(authority).map_err(|_| ProxyError::Refused { status: 400, reason: "bad-host" })?;
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (h, after) = rest.split_once(']').ok_or(ProxyError::Refused { status: 400, reason: "bad-host" })?;
            (h, after.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        },
    };
    let port = match port {
        Some(p) => {
            p.parse::<u16>().ok().filter(|p| *p > 0).ok_or(ProxyError::Refused { status: 400, reason: "bad-host" })?
        }
        None if connect => return Err(ProxyError::Refused { status: 400, reason: "bad-target" }),
        None => 80,
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return Err(ProxyError::Refused { status: 400, reason: "bad-host" });
    }
    Ok(Destination { host, port, connect })
}

/// Whether the request came through this process already (its `Via` has
/// this process's token): forwarding it again would loop.
pub(crate) fn looped(head: &RequestHead) -> bool {
    let token = &VIA.as_bytes()[4..];
    head.fields.get_all(b"via").any(|v| v.windows(token.len()).any(|w| w == token))
}

/// The checks before any lookup: a loop, proxy authentication, the name and
/// port. A refusal is logged with the client and the destination.
pub(crate) async fn admit(
    auth: &AuthRt,
    fe: &Frontend,
    fwd: &Forward,
    head: &mut RequestHead,
    client: SocketAddr,
) -> Result<Destination, ProxyError> {
    let dest = destination(head)?;
    if looped(head) {
        tracing::warn!(client = %client, frontend = %fe.name, destination = %dest, "forward proxy: the request came back through this proxy (Via); refused (508)");
        return Err(ProxyError::Refused { status: 508, reason: "forward-loop" });
    }
    if let Some(policy) = &fwd.auth {
        auth::check_proxy(auth, fe, policy, &head.fields, client).await?;
    }
    head.fields.remove(b"proxy-authorization");
    if let Err(why) = fwd.check_name(&dest.host, dest.port, dest.connect) {
        return Err(refused(fe, client, &dest, why, None));
    }
    Ok(dest)
}

fn refused(fe: &Frontend, client: SocketAddr, dest: &Destination, why: Refusal, addr: Option<IpAddr>) -> ProxyError {
    let addr = addr.map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(client = %client, frontend = %fe.name, destination = %dest, address = %addr, reason = why.reason(), "forward proxy: destination refused (403)");
    ProxyError::ForwardDenied(why)
}

thread_local! {
    /// Each worker's resolver (hickory's, with its cache), made on first use
    /// for the `[global.dns]` it was made for.
    static RESOLVER: RefCell<Option<(Dns, TokioResolver)>> = const { RefCell::new(None) };
}

fn resolver(dns: &Dns) -> TokioResolver {
    RESOLVER.with(|r| {
        let mut r = r.borrow_mut();
        match &*r {
            Some((d, res)) if d == dns => res.clone(),
            _ => {
                let res = crate::upstream::resolver(dns);
                *r = Some((dns.clone(), res.clone()));
                res
            }
        }
    })
}

/// The address to connect to: the destination's first address (IPv4 first)
/// that `fwd` allows. None allowed: 403; no answer: 502, or 504 when the
/// lookup took longer than `limit`.
pub(crate) async fn address(
    fe: &Frontend,
    fwd: &Forward,
    dest: &Destination,
    dns: &Dns,
    limit: Duration,
    client: SocketAddr,
) -> Result<SocketAddr, ProxyError> {
    let ips: Vec<IpAddr> = match dest.host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let r = resolver(dns);
            match tokio::time::timeout(limit, r.lookup_ip(dest.host.as_str())).await {
                Ok(Ok(found)) => found.iter().collect(),
                Ok(Err(e)) => {
                    tracing::info!(client = %client, frontend = %fe.name, destination = %dest, "forward proxy: {e}");
                    return Err(ProxyError::ForwardDns { timeout: false });
                }
                Err(_) => return Err(ProxyError::ForwardDns { timeout: true }),
            }
        }
    };
    // The proxy's own addresses are not destinations (they would reach its
    // other frontends and local services from itself), unless
    // `allow_networks` names them.
    let listed = |ip: IpAddr| fwd.allow_networks.as_ref().is_some_and(|n| n.iter().any(|n| n.contains(&ip)));
    let allowed = |ip: &&IpAddr| fwd.addr_allowed(**ip) && (listed(**ip) || !is_local(**ip));
    let pick = ips.iter().filter(|ip| ip.is_ipv4()).find(allowed).or_else(|| ips.iter().find(allowed));
    match pick {
        Some(ip) => Ok(SocketAddr::new(*ip, dest.port)),
        None => Err(refused(fe, client, dest, Refusal::Network, ips.first().copied())),
    }
}

/// Whether `ip` is one of this host's addresses: one a socket can be bound
/// to (the kernel refuses others with EADDRNOTAVAIL).
fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// A server for one destination address, made for the request: its
/// connections are pooled by address like any server's.
pub(crate) fn server(be: &Backend, dest: &Destination, addr: SocketAddr) -> Arc<ServerRt> {
    let cfg = Server {
        name: dest.to_string(),
        addr,
        weight: 1,
        backup: false,
        maxconn: None,
        check: false,
        check_port: None,
        cookie: String::new(),
        send_proxy: None,
        tls: None,
        proto: Proto::H1,
        keep_alive: be.timeouts.server_keep_alive,
        dns: None,
        unresolved: None,
        disabled: false,
        discovered: false,
    };
    Arc::new(ServerRt::new(cfg, 0, be))
}

/// What a forwarded request loses and gains: the fields meant for this proxy
/// (`Proxy-Connection`, which some clients still send) go, `Via` says it came
/// through here.
pub(crate) fn prepare(head: &mut RequestHead) {
    head.fields.remove(b"proxy-connection");
    head.fields.append(b"via", VIA.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_wire::h1::{Parsed, parse_request};

    fn head(bytes: &[u8]) -> RequestHead {
        let mut h = RequestHead::default();
        match parse_request(bytes, &mut h, 65536, 100, 8192) {
            Ok(Parsed::Complete(..)) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn destinations_from_each_form() {
        let d = |b: &[u8]| destination(&head(b)).map_err(|e| e.reason());
        let dest = |host: &str, port, connect| Ok(Destination { host: host.into(), port, connect });
        assert_eq!(d(b"GET http://Example.COM./x HTTP/1.1\r\n\r\n"), dest("example.com", 80, false));
        assert_eq!(d(b"GET http://a.test:8080/x HTTP/1.1\r\nHost: b\r\n\r\n"), dest("a.test", 8080, false));
        assert_eq!(d(b"CONNECT a.test:443 HTTP/1.1\r\n\r\n"), dest("a.test", 443, true));
        assert_eq!(d(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"), dest("::1", 8443, true));
        assert_eq!(d(b"GET /x HTTP/1.1\r\nHost: h.test:81\r\n\r\n"), dest("h.test", 81, false));
        assert_eq!(d(b"GET /x HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"), dest("10.0.0.1", 80, false));
        let refused = destination(&head(b"GET https://a.test/ HTTP/1.1\r\n\r\n")).unwrap_err();
        assert_eq!((refused.status(), refused.reason()), (400, "forward-https-needs-connect"));
        assert_eq!(d(b"GET /x HTTP/1.0\r\n\r\n"), Err("missing-host"));
        assert_eq!(d(b"GET /x HTTP/1.1\r\nHost: a:0\r\n\r\n"), Err("bad-host"));
        let mut h2 = head(b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n");
        h2.https = true;
        assert_eq!(destination(&h2).map_err(|e| e.reason()), Err("forward-https-needs-connect"), ":scheme https");
        assert_eq!(Destination { host: "::1".into(), port: 1, connect: true }.to_string(), "[::1]:1");
    }

    #[test]
    fn this_hosts_addresses_are_local() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(!is_local("192.0.2.1".parse().unwrap()), "TEST-NET-1 is no one's");
    }

    #[test]
    fn a_request_that_came_through_here_is_a_loop() {
        let mut h = head(b"GET http://a.test/ HTTP/1.1\r\nVia: 1.1 other\r\n\r\n");
        assert!(!looped(&h));
        prepare(&mut h);
        assert!(looped(&h));
        let again = format!("GET / HTTP/1.1\r\nHost: a\r\nVia: 1.0 x, {}\r\n\r\n", *VIA);
        assert!(looped(&head(again.as_bytes())));
        let h = head(b"GET / HTTP/1.1\r\nHost: a\r\nVia: 1.1 tollgate-00000000\r\n\r\n");
        assert!(!looped(&h), "another Tollgate is not this one");
    }
}
