//! Server names followed at run time (docs/configuration.md, `resolve`).
//!
//! A server written as `host:port` in a backend that follows names gets its
//! address from DNS (hickory-resolver: /etc/hosts, then the name servers of
//! /etc/resolv.conf or `[global.dns]`): once before the config serves (at
//! start and at each reload, [`settle`]), then every `resolve.every` on a
//! thread of its own ([`follow`]). A name that does not resolve leaves its
//! server DOWN with the reason; when it resolves, or its address changes, the
//! change is logged and applied as a snapshot swap that carries every live
//! state, without a reload. A lookup that fails for a passing reason (a
//! timeout, a name server that does not answer) keeps the address known.

pub(crate) use super::changes::{Change, What};
use super::reload::ReloadError;
use crate::pipeline::snapshot::Snapshot;
use crate::upstream::resolver;
use hickory_resolver::{ResolveError, TokioResolver};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tollgate_config::{Config, Dns, DnsAddr};

/// What one lookup of a name found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    Addrs(Vec<IpAddr>),
    /// The name does not exist, or has no address: its servers go DOWN.
    Missing(String),
    /// The lookup itself failed (timeout, no name server answered): the
    /// address known is kept.
    Failed(String),
}

/// The names `config`'s servers are written as, in the backends `due`
/// (all when none).
fn names(config: &Config, due: Option<&HashSet<String>>) -> HashSet<String> {
    config
        .backends
        .iter()
        .filter(|b| b.resolve_every.is_some() && due.is_none_or(|d| d.contains(&b.name)))
        .flat_map(|b| b.servers.iter().filter_map(|s| s.dns.as_ref().map(|d| d.host.clone())))
        .collect()
}

/// Applies what the lookups `found` to the servers of `config` (of the
/// backends `due`, all when none) and returns the changes worth a log line.
/// A server whose address is among those found keeps it (a name with several
/// addresses in rotation does not move it); else it takes the first IPv4
/// address, or the first.
pub(crate) fn apply(config: &mut Config, found: &HashMap<String, Found>, due: Option<&HashSet<String>>) -> Vec<Change> {
    let mut changes = Vec::new();
    for b in &mut config.backends {
        if b.resolve_every.is_none() || due.is_some_and(|d| !d.contains(&b.name)) {
            continue;
        }
        let b = std::sync::Arc::make_mut(b);
        for s in &mut b.servers {
            let Some(name) = s.dns.clone() else { continue };
            let Some(f) = found.get(&name.host) else { continue };
            let change =
                |what| Change { backend: b.name.clone(), server: s.name.clone(), name: name.to_string(), what };
            match f {
                Found::Addrs(ips) if s.unresolved.is_none() && ips.contains(&s.addr.ip()) => {}
                Found::Addrs(ips) => {
                    let Some(ip) = super::discover::pick(ips) else { continue };
                    let to = SocketAddr::new(ip, name.port);
                    let from = s.unresolved.is_none().then_some(s.addr);
                    s.addr = to;
                    s.unresolved = None;
                    changes.push(change(What::Resolved { to, from }));
                }
                Found::Missing(why) => {
                    if s.unresolved.is_none() {
                        changes.push(change(What::Lost(why.clone())));
                    }
                    s.addr = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), name.port);
                    s.unresolved = Some(why.clone());
                }
                Found::Failed(why) => {
                    if s.unresolved.is_some() {
                        s.unresolved = Some(why.clone());
                    }
                }
            }
        }
    }
    changes
}

/// The addresses `previous` knew for the names of `config`'s servers: a
/// reload keeps them where a lookup fails for a passing reason.
fn keep_known(config: &mut Config, previous: &Config) {
    let known: HashMap<&DnsAddr, SocketAddr> = previous
        .backends
        .iter()
        .flat_map(|b| &b.servers)
        .filter(|s| s.unresolved.is_none())
        .filter_map(|s| s.dns.as_ref().map(|d| (d, s.addr)))
        .collect();
    for b in &mut config.backends {
        if !b.servers.iter().any(|s| s.dns.as_ref().is_some_and(|d| known.contains_key(d))) {
            continue;
        }
        for s in &mut std::sync::Arc::make_mut(b).servers {
            if let Some(addr) = s.dns.as_ref().and_then(|d| known.get(d)) {
                s.addr = *addr;
                s.unresolved = None;
            }
        }
    }
}

/// Looks up every name at once, each within the resolver's bounds.
async fn lookup_all(resolver: &TokioResolver, names: HashSet<String>, limit: Duration) -> HashMap<String, Found> {
    let mut set = tokio::task::JoinSet::new();
    for name in names {
        let r = resolver.clone();
        set.spawn(async move {
            let found = match tokio::time::timeout(limit, r.lookup_ip(name.as_str())).await {
                Ok(Ok(ips)) => {
                    let ips: Vec<IpAddr> = ips.iter().collect();
                    if ips.is_empty() { Found::Missing("no address record".into()) } else { Found::Addrs(ips) }
                }
                Ok(Err(e)) => classify(&e),
                Err(_) => Found::Failed(format!("no answer within {} ms", limit.as_millis())),
            };
            (name, found)
        });
    }
    let mut out = HashMap::new();
    while let Some(done) = set.join_next().await {
        if let Ok((name, found)) = done {
            out.insert(name, found);
        }
    }
    out
}

fn classify(e: &ResolveError) -> Found {
    super::discover::missing(e, "no address record").map_or_else(|| Found::Failed(e.to_string()), Found::Missing)
}

/// The longest one round of lookups may take: each name server in turn, with
/// a margin.
fn round_limit(dns: &Dns) -> Duration {
    dns.timeout * (2 * dns.nameservers.len().max(1) as u32) + Duration::from_millis(500)
}

/// Before `config` serves (a start, a reload; `tollgate check`): each name
/// looked up, the servers given their addresses; where a lookup fails for a
/// passing reason, the address `previous` knew stays. Returns a line for each
/// server left without one (DOWN until its name resolves). Does nothing (no
/// thread, no socket) for a config without names.
pub fn settle(config: &mut Config, previous: Option<&Config>) -> Vec<String> {
    let wanted = names(config, None);
    let discovered = super::discover::sources(config, None);
    if wanted.is_empty() && discovered.is_empty() {
        return Vec::new();
    }
    if let Some(p) = previous {
        keep_known(config, p);
    }
    let dns = config.global.dns.clone();
    // A runtime on a thread of its own: the caller may be on one (the admin API's reload).
    let lookups = std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (r, limit) = (resolver(&dns), round_limit(&dns));
            Ok::<_, std::io::Error>(rt.block_on(async {
                tokio::join!(lookup_all(&r, wanted, limit), super::discover::lookup_all(&r, discovered, limit))
            }))
        })
        .join()
    });
    let (found, answers) = match lookups {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return vec![format!("DNS: cannot start the lookups: {e}")],
        Err(_) => return vec!["DNS: the lookups failed".into()],
    };
    apply(config, &found, None);
    super::discover::apply(config, &answers);
    if let Some(p) = previous {
        super::discover::keep_found(config, p, &answers);
    }
    let mut down = Vec::new();
    for b in &config.backends {
        for s in &b.servers {
            if let (Some(why), Some(name)) = (&s.unresolved, &s.dns) {
                down.push(format!(
                    "server {}/{}: {name} does not resolve ({why}): the server is DOWN until it does",
                    b.name, s.name
                ));
            }
        }
    }
    down.extend(super::discover::report(config, &answers));
    down
}

/// What the follower works on: the running server (server.rs).
pub(crate) trait Running: Send + Sync {
    fn snapshot(&self) -> Arc<Snapshot>;
    /// Applies `f` to a copy of the config in force and puts it in force,
    /// unless `f` finds no change worth a log line (then nothing is swapped).
    fn amend(&self, f: &mut dyn FnMut(&mut Config) -> Vec<Change>) -> Result<Vec<Change>, ReloadError>;
}

/// The backends of `every` (name, period) due at `now`, each marked as
/// looked up in `last`; a backend's first round is left out (the settle of
/// its start or reload did it).
fn due_now<'a>(
    last: &mut HashMap<String, Instant>,
    every: impl Iterator<Item = (&'a str, Duration)>,
    now: Instant,
) -> HashSet<String> {
    let mut due = HashSet::new();
    for (b, every) in every {
        match last.get(b) {
            Some(t) if now.duration_since(*t) < every => {}
            Some(_) => {
                due.insert(b.to_string());
                last.insert(b.to_string(), now);
            }
            None => {
                last.insert(b.to_string(), now);
            }
        }
    }
    due
}

/// How often the follower looks whether a backend is due.
const TICK: Duration = Duration::from_secs(1);

/// Starts the thread that looks names up again, each backend every
/// `resolve.every`, and applies what changed to `core`; it ends when the
/// server stops (or is gone).
pub(crate) fn follow(core: Weak<dyn Running>, mut stop: watch::Receiver<bool>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("tollgate-dns".into()).spawn(move || {
        rt.block_on(async move {
            // When each backend's names, and its `discover` name, were last looked up.
            let mut last: HashMap<String, Instant> = HashMap::new();
            let mut last_found: HashMap<String, Instant> = HashMap::new();
            let mut resolver_for: Option<(Dns, TokioResolver)> = None;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                let Some(core) = core.upgrade() else { return };
                let snap = core.snapshot();
                let now = Instant::now();
                let named = snap
                    .config
                    .backends
                    .iter()
                    .filter(|b| b.servers.iter().any(|s| s.dns.is_some()))
                    .filter_map(|b| b.resolve_every.map(|e| (b.name.as_str(), e)));
                let due = due_now(&mut last, named, now);
                let discovering =
                    snap.config.backends.iter().filter_map(|b| b.discover.as_ref().map(|d| (b.name.as_str(), d.every)));
                let due_found = due_now(&mut last_found, discovering, now);
                if due.is_empty() && due_found.is_empty() {
                    continue;
                }
                let dns = snap.config.global.dns.clone();
                if resolver_for.as_ref().is_none_or(|(d, _)| *d != dns) {
                    resolver_for = Some((dns.clone(), resolver(&dns)));
                }
                let Some((_, r)) = &resolver_for else { continue };
                // Fresh answers each round (the name server's TTLs aside).
                r.clear_cache();
                let limit = round_limit(&dns);
                let wanted = super::discover::sources(&snap.config, Some(&due_found));
                let (found, answers) = tokio::join!(
                    lookup_all(r, names(&snap.config, Some(&due)), limit),
                    super::discover::lookup_all(r, wanted, limit)
                );
                drop(snap);
                for (backend, (_, a)) in &answers {
                    if let super::discover::Answer::Failed(why) = a {
                        tracing::warn!(
                            "DNS: backend {backend}: discovery failed ({why}); the servers found before stay"
                        );
                    }
                }
                for (name, f) in &found {
                    if let Found::Failed(why) = f {
                        tracing::warn!("DNS: looking up {name} failed ({why}); its servers keep their address");
                    }
                }
                let mut both = |cfg: &mut Config| {
                    let mut changes = apply(cfg, &found, Some(&due));
                    changes.extend(super::discover::apply(cfg, &answers));
                    changes
                };
                match core.amend(&mut both) {
                    Ok(changes) => {
                        for c in changes {
                            match c.what {
                                What::Lost(_) | What::NotFound(_) => tracing::warn!("{c}"),
                                What::Resolved { .. } | What::Found { .. } => tracing::info!("{c}"),
                            }
                        }
                    }
                    Err(e) => tracing::error!("DNS: the new addresses could not be applied: {e}"),
                }
            }
        });
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const FE: &str = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n";

    fn parse(src: &str) -> Result<Config, String> {
        tollgate_config::parse(&format!("{FE}{src}"), Path::new("t.toml")).map_err(|e| e.to_string())
    }

    fn config(extra: &str) -> Config {
        let src = format!(
            "[[backend]]\nname = \"b\"\n{extra}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"app.test:8080\"\n\
             \x20 [[backend.server]]\n  name = \"s2\"\n  addr = \"127.0.0.1:9000\"\n"
        );
        parse(&src).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_start_unresolved_then_follow_what_is_found() {
        let mut c = config("");
        let s1 = |c: &Config| c.backends[0].servers[0].clone();
        assert_eq!(s1(&c).dns, Some(DnsAddr { host: "app.test".into(), port: 8080 }));
        assert!(s1(&c).unresolved.is_some());
        assert_eq!(names(&c, None), HashSet::from(["app.test".to_string()]));

        let found = |f: Found| HashMap::from([("app.test".to_string(), f)]);
        // A passing failure keeps it unresolved, with that reason; nothing to log.
        assert!(apply(&mut c, &found(Found::Failed("timeout".into())), None).is_empty());
        assert_eq!(s1(&c).unresolved.as_deref(), Some("timeout"));
        // Resolved: the IPv4 address first.
        let ch = apply(&mut c, &found(Found::Addrs(vec![ip("2001:db8::1"), ip("10.0.0.5")])), None);
        let to: SocketAddr = "10.0.0.5:8080".parse().unwrap();
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].what, What::Resolved { to, from: None });
        assert_eq!((s1(&c).addr, s1(&c).unresolved), (to, None));
        assert_eq!(ch[0].to_string(), "server b/s1: app.test:8080 resolves to 10.0.0.5:8080: it takes traffic");
        // Still among the answers, in another order: kept.
        assert!(apply(&mut c, &found(Found::Addrs(vec![ip("10.0.0.9"), ip("10.0.0.5")])), None).is_empty());
        // A passing failure keeps the address.
        assert!(apply(&mut c, &found(Found::Failed("timeout".into())), None).is_empty());
        assert_eq!(s1(&c).addr, to);
        // Moved.
        let ch = apply(&mut c, &found(Found::Addrs(vec![ip("10.0.0.6")])), None);
        let moved: SocketAddr = "10.0.0.6:8080".parse().unwrap();
        assert_eq!(ch[0].what, What::Resolved { to: moved, from: Some(to) });
        // Gone: DOWN, logged once.
        let ch = apply(&mut c, &found(Found::Missing("no such name (NXDOMAIN)".into())), None);
        assert_eq!(ch[0].what, What::Lost("no such name (NXDOMAIN)".into()));
        assert!(s1(&c).unresolved.is_some() && s1(&c).addr.ip().is_unspecified());
        assert!(apply(&mut c, &found(Found::Missing("no such name (NXDOMAIN)".into())), None).is_empty());
        // The IP server is never touched; a backend not due is left alone.
        assert_eq!(c.backends[0].servers[1].addr, "127.0.0.1:9000".parse::<SocketAddr>().unwrap());
        let other = HashSet::from(["other".to_string()]);
        assert!(apply(&mut c, &found(Found::Addrs(vec![ip("10.0.0.7")])), Some(&other)).is_empty());
    }

    #[test]
    fn a_reload_keeps_known_addresses_and_resolve_false_resolves_at_load() {
        let mut old = config("");
        apply(&mut old, &HashMap::from([("app.test".into(), Found::Addrs(vec![ip("10.0.0.5")]))]), None);
        let mut new = config("");
        keep_known(&mut new, &old);
        assert_eq!(new.backends[0].servers[0].addr, "10.0.0.5:8080".parse::<SocketAddr>().unwrap());
        assert_eq!(new.backends[0].servers[0].unresolved, None);

        let c = parse(
            "[[backend]]\nname = \"b\"\nresolve = false\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"localhost:8080\"\n",
        )
        .unwrap();
        assert_eq!((c.backends[0].resolve_every, &c.backends[0].servers[0].dns), (None, &None));
        assert!(c.backends[0].servers[0].addr.ip().is_loopback());
        let c = config("resolve = { every = \"5s\" }");
        assert_eq!(c.backends[0].resolve_every, Some(Duration::from_secs(5)));
        let e = parse("[[backend]]\nname = \"b\"\nresolve = { every = \"100ms\" }\n").unwrap_err();
        assert!(e.contains("backend[0].resolve.every: must be 1s or more"), "{e}");
    }

    /// /etc/hosts answers without a name server: `localhost`.
    #[test]
    fn settle_resolves_from_the_hosts_file() {
        let mut c = tollgate_config::parse(
            &format!(
                "[global]\ndns = {{ nameservers = [\"127.0.0.1:9\"], timeout = \"200ms\" }}\n{FE}\
                 [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"localhost:8080\"\n"
            ),
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(settle(&mut c, None), Vec::<String>::new());
        let s = &c.backends[0].servers[0];
        assert_eq!(s.unresolved, None);
        assert!(s.addr.ip().is_loopback() && s.addr.port() == 8080, "{}", s.addr);
    }
}
