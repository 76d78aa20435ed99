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
            let list = self.members(
                &r.list,
                &key,
                "a member's HTTP bind",
                "a tier needs two members or more (this one among them)",
            );
            let me = match &r.me {
                Some(m) => match m.get_ref().parse::<SocketAddr>() {
                    Ok(a) => match list.iter().position(|l| *l == a) {
                        Some(me) => Some(me),
                        None => {
                            self.err(m.span(), format!("{key}.self"), format!("{a} is not in `list`"));
                            None
                        }
                    },
                    Err(_) => {
                        self.err(m.span(), format!("{key}.self"), format!("`{}` is not an IP:port", m.get_ref()));
                        None
                    }
                },
                None => {
                    let binds: Vec<SocketAddr> =
                        frontends.iter().flat_map(|f| f.binds.iter().map(|b| b.addr)).collect();
                    let mine = list.iter().position(|l| binds.contains(l));
                    if mine.is_none() && self.errors.len() == before {
                        self.err(
                            p.span(),
                            key.clone(),
                            "no member of `list` is a bind of this config: say which is this instance with self = \"IP:port\"",
                        );
                    }
                    mine
                }
            };
            let interval = match &r.check {
                None => PEER_CHECK,
                Some(d) => self.duration(d, &format!("{key}.check"), false).unwrap_or(PEER_CHECK),
            };
            let (Some(me), true) = (me, self.errors.len() == before) else { continue };
            let zone = &mut caches[i];
            let name = backend_name(&zone.name);
            let servers = list
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != me)
                .map(|(_, addr)| Server {
                    name: addr.to_string(),
                    addr: *addr,
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
                })
                .collect();
            zone.peers = Some(CachePeers { list, me, backend: backends.len() });
            backends.push(Arc::new(Backend {
                name,
                mode: Mode::Http,
                balance: Balance::RoundRobin,
                timeouts: *timeouts,
                // One more try (at another member, which then serves as the owner).
                retries: 1,
                redispatch: true,
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
                discover: None,
            }));
        }
    }
}
