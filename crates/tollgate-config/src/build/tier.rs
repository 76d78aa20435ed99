//! `peers` on a `[[cache]]` zone (tier.rs): the members, which one this
//! instance is, and the backend the others are servers of.

use super::*;
use crate::tier::{CachePeers, PEER_CHECK, Peers, backend_name};

impl Builder<'_> {
    /// `[global.peers]`: the members, and which one this instance is (`self`,
    /// else the only member whose address this host has).
    pub(super) fn global_peers(&mut self, p: &Spanned<RawGlobalPeers>) -> Option<Peers> {
        let key = "global.peers";
        let r = p.get_ref();
        let before = self.errors.len();
        let list = self.members(
            &r.list,
            key,
            "where that peer listens for the others",
            "name two peers or more (this one among them)",
        );
        let me = match &r.me {
            Some(m) => match m.get_ref().parse::<SocketAddr>().ok().and_then(|a| list.iter().position(|l| *l == a)) {
                Some(me) => Some(me),
                None => {
                    self.err(m.span(), format!("{key}.self"), format!("`{}` is not one of `list`", m.get_ref()));
                    None
                }
            },
            None if self.offline => None,
            None => {
                // An address of this host is one a socket can be bound to.
                let local: Vec<usize> = (0..list.len())
                    .filter(|i| std::net::UdpSocket::bind(SocketAddr::new(list[*i].ip(), 0)).is_ok())
                    .collect();
                match local[..] {
                    [me] => Some(me),
                    _ if self.errors.len() > before => None,
                    [] => {
                        self.err(p.span(), key, "no peer of `list` has an address of this host: say which is this one with self = \"IP:port\"");
                        None
                    }
                    _ => {
                        self.err(p.span(), key, "several peers of `list` have addresses of this host: say which is this one with self = \"IP:port\"");
                        None
                    }
                }
            }
        };
        (self.errors.len() == before).then_some(())?;
        Some(Peers { list, me: me? })
    }

    /// A `list` of members: each an IP:port, none twice, two or more.
    fn members(
        &mut self,
        list: &Spanned<Vec<Spanned<String>>>,
        key: &str,
        what: &str,
        too_few: &str,
    ) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for (j, a) in list.get_ref().iter().enumerate() {
            match a.get_ref().parse::<SocketAddr>() {
                Ok(addr) if out.contains(&addr) => {
                    self.err(a.span(), format!("{key}.list[{j}]"), format!("{addr} is listed twice"));
                }
                Ok(addr) => out.push(addr),
                Err(_) => self.err(
                    a.span(),
                    format!("{key}.list[{j}]"),
                    format!("`{}` is not an IP:port ({what})", a.get_ref()),
                ),
            }
        }
        if list.get_ref().len() < 2 {
            self.err(list.span(), format!("{key}.list"), too_few);
        }
        out
    }

    /// A table's or a stick table's `share`: only with `[global.peers]`.
    pub(super) fn share(&mut self, share: Option<&Spanned<bool>>, key: &str) -> bool {
        let Some(s) = share else { return false };
        if *s.get_ref() && !self.has_peers {
            self.err(s.span(), key, "sharing needs [global.peers] (the instances to share with)");
        }
        *s.get_ref()
    }

    /// Each zone's `peers`, now that the frontends' binds are known (this
    /// instance is the member whose address one of them binds, unless
    /// `self` says which).
    pub(super) fn cache_peers(
        &mut self,
        raw: &[Spanned<RawCacheZone>],
        caches: &mut [CacheZone],
        backends: &mut Vec<Arc<Backend>>,
        frontends: &[Frontend],
        timeouts: &Timeouts,
    ) {
        for (i, z) in raw.iter().enumerate() {
            let Some(p) = &z.get_ref().peers else { continue };
            let key = format!("cache[{i}].peers");
            let r = p.get_ref();
            let before = self.errors.len();
            let binds: Vec<SocketAddr> = frontends.iter().flat_map(|f| f.binds.iter().map(|b| b.addr)).collect();
            // The members: listed, or each address of a name (on its port).
            let (list, dns) = match (&r.list, &r.dns) {
                (Some(l), None) => (
                    self.members(
                        l,
                        &key,
                        "a member's HTTP bind",
                        "a tier needs two members or more (this one among them)",
                    ),
                    None,
                ),
                (None, Some(d)) => match HostPort::parse(d.get_ref()) {
                    Some(HostPort { host: HostName::Name(host), port: Some(port) }) if port != 0 => {
                        (Vec::new(), Some(DnsAddr { host, port }))
                    }
                    _ => {
                        self.err(
                            d.span(),
                            format!("{key}.dns"),
                            format!("`{}` is not a host name and port (like \"tollgate.internal:80\")", d.get_ref()),
                        );
                        (Vec::new(), None)
                    }
                },
                (Some(_), Some(d)) => {
                    self.err(d.span(), format!("{key}.dns"), "give `list` or `dns`, not both");
                    (Vec::new(), None)
                }
                (None, None) => {
                    self.err(
                        p.span(),
                        key.clone(),
                        "name the members: list = [\"IP:port\", ...] or dns = \"name:port\"",
                    );
                    (Vec::new(), None)
                }
            };
            if let (Some(e), None) = (&r.every, &dns) {
                self.err(
                    e.span(),
                    format!("{key}.every"),
                    "`every` is how often `dns` is looked up: it goes with `dns`",
                );
            }
            let me = match &r.me {
                Some(m) => match m.get_ref().parse::<SocketAddr>() {
                    Ok(a) if dns.is_some() || list.contains(&a) => Some(a),
                    Ok(a) => {
                        self.err(m.span(), format!("{key}.self"), format!("{a} is not in `list`"));
                        None
                    }
                    Err(_) => {
                        self.err(m.span(), format!("{key}.self"), format!("`{}` is not an IP:port", m.get_ref()));
                        None
                    }
                },
                // Listed: the member that is a bind. Found in DNS: the bind
                // on that port with an address of its own.
                None => {
                    let mine = match &dns {
                        None => list.iter().find(|l| binds.contains(l)).copied(),
                        Some(d) => binds.iter().find(|b| b.port() == d.port && !b.ip().is_unspecified()).copied(),
                    };
                    if mine.is_none() && self.errors.len() == before {
                        self.err(
                            p.span(),
                            key.clone(),
                            "no member is a bind of this config: say which is this instance with self = \"IP:port\"",
                        );
                    }
                    mine
                }
            };
            let interval = match &r.check {
                None => PEER_CHECK,
                Some(d) => self.duration(d, &format!("{key}.check"), false).unwrap_or(PEER_CHECK),
            };
            let every = match &r.every {
                None => crate::discover::DISCOVER_EVERY,
                Some(d) => self.duration(d, &format!("{key}.every"), false).unwrap_or(crate::discover::DISCOVER_EVERY),
            };
            let (Some(me), true) = (me, self.errors.len() == before) else { continue };
            let zone = &mut caches[i];
            let name = backend_name(&zone.name);
            let member = |addr: SocketAddr| Server {
                name: addr.to_string(),
                addr,
                weight: 1,
                backup: false,
                maxconn: None,
                check: true,
                check_port: None,
                cookie: addr.to_string(),
                send_proxy: None,
                tls: None,
                proto: Proto::H1,
                keep_alive: timeouts.server_keep_alive,
                dns: None,
                unresolved: None,
                disabled: false,
                discovered: false,
            };
            let servers = list.iter().filter(|a| **a != me).map(|a| member(*a)).collect();
            let discover = dns.map(|d| {
                let template = Server {
                    discovered: true,
                    ..member(SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), d.port))
                };
                Arc::new(crate::Discover {
                    source: crate::discover::Source::Addrs(d),
                    every,
                    server: template,
                    sni_from_target: false,
                })
            });
            zone.peers = Some(CachePeers { me, backend: backends.len() });
            backends.push(Arc::new(Backend {
                name,
                mode: Mode::Http,
                balance: Balance::RoundRobin,
                // A member that does not connect within a second is passed
                // over: the request is fetched here instead (pipeline/mod.rs).
                timeouts: Timeouts { connect: timeouts.connect.min(Duration::from_secs(1)), ..*timeouts },
                retries: 0,
                redispatch: false,
                check: Some(HealthCheck {
                    kind: CheckKind::Tcp,
                    interval,
                    timeout: interval.min(Duration::from_secs(1)),
                    fall: 1,
                    rise: 1,
                    port: None,
                }),
                observe: None,
                cookie: None,
                stick: None,
                servers,
                compression: None,
                files: None,
                resolve_every: None,
                cache: None,
                auth: None,
                forward: None,
                discover,
            }));
        }
    }
}
