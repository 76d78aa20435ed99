//! Servers found in DNS (`discover` on a backend; tollgate_config::discover
//! has what an answer makes). The name is looked up before the config serves
//! ([`settle`], with the names of `resolve`) and then every `discover.every`
//! on the DNS thread (dns.rs's `follow`); the servers found replace those the
//! last answer found, as a snapshot swap that carries every live state by
//! server name (health, DRAIN/MAINT, a weight set at run time), so a server
//! that stays in the answer keeps its state. A lookup that fails for a
//! passing reason keeps the last answer's servers (across a reload too); a
//! name that does not exist, or has no record, leaves the backend with its
//! listed servers only.

use super::changes::{Change, What};
use hickory_resolver::{ResolveError, TokioResolver};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tollgate_config::discover::{Found, Source, SrvRecord, from_addrs, from_srv};
use tollgate_config::{Backend, Config, Discover, Server};

/// What one lookup of a backend's `discover` name found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Servers(Vec<Found>),
    /// No such name, or no record: no server found.
    Missing(String),
    /// The lookup failed (a timeout, no name server answered): the last
    /// answer's servers stay.
    Failed(String),
}

/// The backends of `config` that discover servers, with what they look up,
/// among those `due` (all when none).
pub(crate) fn sources(config: &Config, due: Option<&HashSet<String>>) -> Vec<(String, Discover)> {
    config
        .backends
        .iter()
        .filter(|b| due.is_none_or(|d| d.contains(&b.name)))
        .filter_map(|b| b.discover.as_ref().map(|d| (b.name.clone(), (**d).clone())))
        .collect()
}

/// Why a lookup found nothing, when the name does not exist (NXDOMAIN) or
/// has no record of the type asked (`no_record` says which); `None` for a
/// failure that may pass (a timeout, no name server answering).
pub(crate) fn missing(e: &ResolveError, no_record: &str) -> Option<String> {
    if e.is_nx_domain() {
        Some("no such name (NXDOMAIN)".into())
    } else if e.is_no_records_found() {
        Some(no_record.into())
    } else {
        None
    }
}

fn classify(e: &ResolveError) -> Option<String> {
    missing(e, "no record")
}

/// The first IPv4 address, else the first.
pub(crate) fn pick(ips: &[IpAddr]) -> Option<IpAddr> {
    ips.iter().find(|ip| ip.is_ipv4()).or(ips.first()).copied()
}

/// Looks `d`'s name up (an SRV name: its records, then each target's
/// addresses), all within `limit`.
pub(crate) async fn lookup(resolver: &TokioResolver, d: &Discover, limit: Duration) -> Answer {
    let weight = d.server.weight;
    let work = async {
        match &d.source {
            Source::Addrs(a) => match resolver.lookup_ip(a.host.as_str()).await {
                Ok(ips) => {
                    let ips: Vec<IpAddr> = ips.iter().collect();
                    if ips.is_empty() {
                        Answer::Missing("no address record".into())
                    } else {
                        Answer::Servers(from_addrs(&ips, a.port, weight))
                    }
                }
                Err(e) => classify(&e).map_or_else(|| Answer::Failed(e.to_string()), Answer::Missing),
            },
            Source::Srv(name) => {
                let srv = match resolver.srv_lookup(name.as_str()).await {
                    Ok(srv) => srv,
                    Err(e) => return classify(&e).map_or_else(|| Answer::Failed(e.to_string()), Answer::Missing),
                };
                // "." as the target: the service is not offered there (RFC 2782).
                let wanted: Vec<_> = srv
                    .iter()
                    .map(|r| {
                        (
                            r.priority(),
                            r.weight(),
                            r.target().to_ascii().trim_end_matches('.').to_ascii_lowercase(),
                            r.port(),
                        )
                    })
                    .filter(|(_, _, t, _)| !t.is_empty())
                    .collect();
                let targets: HashSet<&String> = wanted.iter().map(|w| &w.2).collect();
                let mut set = tokio::task::JoinSet::new();
                for t in targets {
                    let (r, t) = (resolver.clone(), t.clone());
                    set.spawn(async move {
                        let found = r.lookup_ip(t.as_str()).await.map(|ips| ips.iter().collect::<Vec<_>>());
                        (t, found)
                    });
                }
                let mut addrs: HashMap<String, IpAddr> = HashMap::new();
                while let Some(done) = set.join_next().await {
                    let Ok((t, found)) = done else { continue };
                    match found {
                        Ok(ips) => {
                            if let Some(ip) = pick(&ips) {
                                addrs.insert(t, ip);
                            }
                        }
                        // A target that does not exist is left out; one whose
                        // lookup failed makes the whole answer uncertain.
                        Err(e) if classify(&e).is_some() => {}
                        Err(e) => return Answer::Failed(format!("target {t}: {e}")),
                    }
                }
                let records: Vec<SrvRecord> = wanted
                    .into_iter()
                    .filter_map(|(priority, weight, target, port)| {
                        let addr = *addrs.get(&target)?;
                        Some(SrvRecord { priority, weight, target, port, addr })
                    })
                    .collect();
                Answer::Servers(from_srv(&records, weight))
            }
        }
    };
    match tokio::time::timeout(limit, work).await {
        Ok(a) => a,
        Err(_) => Answer::Failed(format!("no answer within {} ms", limit.as_millis())),
    }
}

/// What each backend's lookup found, with the name it looked up (a reload
/// meanwhile may have changed the backend's).
pub(crate) type Answers = HashMap<String, (Source, Answer)>;

/// Looks up every backend's name at once.
pub(crate) async fn lookup_all(resolver: &TokioResolver, wanted: Vec<(String, Discover)>, limit: Duration) -> Answers {
    let mut set = tokio::task::JoinSet::new();
    for (backend, d) in wanted {
        let r = resolver.clone();
        set.spawn(async move { (backend, (d.source.clone(), lookup(&r, &d, limit).await)) });
    }
    let mut out = HashMap::new();
    while let Some(done) = set.join_next().await {
        if let Ok((b, a)) = done {
            out.insert(b, a);
        }
    }
    out
}

/// Puts the servers each answer found in place of the ones found before, in
/// the backends answered for (a failed lookup changes nothing). Listed
/// servers come first, then those found, by name. Returns a change per
/// server that appeared, went or changed.
pub(crate) fn apply(config: &mut Config, answers: &Answers) -> Vec<Change> {
    let mut changes = Vec::new();
    for b in &mut config.backends {
        // An answer for the name the backend looks up now.
        if let Some((source, a)) = answers.get(&b.name)
            && b.discover.as_ref().is_some_and(|d| d.source == *source)
        {
            changes.extend(apply_one(b, a));
        }
    }
    changes
}

fn apply_one(b: &mut Arc<Backend>, answer: &Answer) -> Vec<Change> {
    let Some(d) = b.discover.clone() else { return Vec::new() };
    let (found, why) = match answer {
        Answer::Failed(_) => return Vec::new(),
        Answer::Servers(f) => (f.as_slice(), None),
        Answer::Missing(why) => (&[][..], Some(why.clone())),
    };
    let listed: Vec<_> = b.servers.iter().filter(|s| !s.discovered).cloned().collect();
    let mut taken: HashSet<String> = listed.iter().map(|s| s.cookie.clone()).collect();
    let old: HashMap<&str, &Server> = b.servers.iter().filter(|s| s.discovered).map(|s| (s.name.as_str(), s)).collect();
    let mut next = listed;
    let mut changes = Vec::new();
    let source = d.source.to_string();
    let change =
        |server: &str, what| Change { backend: b.name.clone(), server: server.into(), name: source.clone(), what };
    for f in found {
        let mut s = d.server(f, &taken);
        let was = old.get(f.name.as_str());
        // A server found again keeps its cookie value.
        if let Some(was) = was {
            s.cookie = was.cookie.clone();
        }
        taken.insert(s.cookie.clone());
        let what = |changed| What::Found { addr: s.addr, weight: s.weight, backup: s.backup, changed };
        match was {
            None => changes.push(change(&s.name, what(false))),
            Some(was) if **was != s => changes.push(change(&s.name, what(true))),
            Some(_) => {}
        }
        next.push(s);
    }
    let kept: HashSet<&str> = found.iter().map(|f| f.name.as_str()).collect();
    for name in old.keys().filter(|n| !kept.contains(*n)) {
        changes.push(change(name, What::NotFound(why.clone())));
    }
    if !changes.is_empty() {
        changes.sort_by(|a, b| a.server.cmp(&b.server));
        Arc::make_mut(b).servers = next;
    }
    changes
}

/// A reload's config takes the servers `previous` found for the backends
/// whose lookup failed, when they look the same name up.
pub(crate) fn keep_found(config: &mut Config, previous: &Config, answers: &Answers) {
    for b in &mut config.backends {
        let Some(d) = b.discover.clone() else { continue };
        if !matches!(answers.get(&b.name), Some((_, Answer::Failed(_)))) {
            continue;
        }
        let Some(was) = previous.backends.iter().find(|p| p.name == b.name) else { continue };
        if was.discover.as_ref().is_none_or(|w| w.source != d.source) {
            continue;
        }
        let found: Vec<Found> = was
            .servers
            .iter()
            .filter(|s| s.discovered)
            .map(|s| Found {
                name: s.name.clone(),
                addr: s.addr,
                weight: s.weight,
                backup: s.backup,
                target: matches!(d.source, Source::Srv(_))
                    .then(|| s.name.rsplit_once(':').map_or("", |t| t.0).to_string()),
            })
            .collect();
        apply_one(b, &Answer::Servers(found));
    }
}

/// Lines for `settle`: the backends whose lookup found nothing or failed.
pub(crate) fn report(config: &Config, answers: &Answers) -> Vec<String> {
    let mut out = Vec::new();
    for b in &config.backends {
        let Some(d) = &b.discover else { continue };
        let n = b.servers.iter().filter(|s| s.discovered).count();
        match answers.get(&b.name).map(|(_, a)| a) {
            Some(Answer::Missing(why)) => out.push(format!("backend {}: {}: {why}: no server found", b.name, d.source)),
            Some(Answer::Failed(why)) => {
                out.push(format!("backend {}: {}: the lookup failed ({why}); {n} server(s) kept", b.name, d.source))
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config() -> Config {
        tollgate_config::parse(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
             [[backend]]\nname = \"b\"\ndiscover = { dns = \"app.test:80\" }\n\
             \x20 [[backend.server]]\n  name = \"fixed\"\n  addr = \"127.0.0.1:9000\"\n",
            Path::new("t.toml"),
        )
        .unwrap()
    }

    fn source() -> Source {
        Source::Addrs(tollgate_config::DnsAddr { host: "app.test".into(), port: 80 })
    }

    fn answer(a: Answer) -> Answers {
        HashMap::from([("b".to_string(), (source(), a))])
    }

    fn found(ips: &[&str]) -> Answers {
        let ips: Vec<IpAddr> = ips.iter().map(|s| s.parse().unwrap()).collect();
        answer(Answer::Servers(from_addrs(&ips, 80, 1)))
    }

    fn names(c: &Config) -> Vec<&str> {
        c.backends[0].servers.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn answers_replace_the_servers_found_before_and_say_what_changed() {
        let mut c = config();
        let ch = apply(&mut c, &found(&["10.0.0.2", "10.0.0.1"]));
        assert_eq!(names(&c), ["fixed", "10.0.0.1:80", "10.0.0.2:80"]);
        assert_eq!(ch.len(), 2);
        assert_eq!(
            ch[0].to_string(),
            "server b/10.0.0.1:80: found by app.test:80: 10.0.0.1:80, weight 1: it takes traffic"
        );
        // The same answer: nothing to do (no snapshot swap).
        assert!(apply(&mut c, &found(&["10.0.0.1", "10.0.0.2"])).is_empty());
        // A failed lookup changes nothing; one for another backend neither.
        let failed = answer(Answer::Failed("timeout".into()));
        assert!(apply(&mut c, &failed).is_empty());
        let other = HashMap::from([("x".to_string(), (source(), Answer::Missing("gone".into())))]);
        assert!(apply(&mut c, &other).is_empty());
        // An answer for another name than the backend's now (a reload came
        // between the lookup and its answer) changes nothing.
        let stale = Source::Addrs(tollgate_config::DnsAddr { host: "old.test".into(), port: 80 });
        let ips = vec!["10.0.0.9".parse().unwrap()];
        let elsewhere = HashMap::from([("b".to_string(), (stale, Answer::Servers(from_addrs(&ips, 80, 1))))]);
        assert!(apply(&mut c, &elsewhere).is_empty());
        assert_eq!(names(&c).len(), 3);
        // One goes, one comes.
        let ch = apply(&mut c, &found(&["10.0.0.2", "10.0.0.3"]));
        let lines: Vec<String> = ch.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "server b/10.0.0.1:80: no longer found by app.test:80: removed",
                "server b/10.0.0.3:80: found by app.test:80: 10.0.0.3:80, weight 1: it takes traffic",
            ]
        );
        assert_eq!(names(&c), ["fixed", "10.0.0.2:80", "10.0.0.3:80"]);
        // The name is gone: the listed server stays.
        let gone = answer(Answer::Missing("no such name (NXDOMAIN)".into()));
        let ch = apply(&mut c, &gone);
        assert_eq!(ch[0].to_string(), "server b/10.0.0.2:80: app.test:80: no such name (NXDOMAIN): removed");
        assert_eq!(names(&c), ["fixed"]);
    }

    #[test]
    fn a_server_found_again_keeps_its_cookie_and_a_reload_keeps_what_was_found() {
        let mut c = config();
        apply(&mut c, &found(&["10.0.0.1"]));
        std::sync::Arc::make_mut(&mut c.backends[0]).servers[1].cookie = "kept".into();
        // Same name, another weight (SRV-like): a change, the cookie kept.
        let mut heavier = found(&["10.0.0.1"]);
        if let Some((_, Answer::Servers(f))) = heavier.get_mut("b") {
            f[0].weight = 9;
        }
        let ch = apply(&mut c, &heavier);
        assert_eq!(ch[0].to_string(), "server b/10.0.0.1:80: app.test:80 now gives 10.0.0.1:80, weight 9");
        assert_eq!((c.backends[0].servers[1].weight, c.backends[0].servers[1].cookie.as_str()), (9, "kept"));

        // A reload whose lookup failed takes the servers found before.
        let mut next = config();
        let failed = answer(Answer::Failed("timeout".into()));
        keep_found(&mut next, &c, &failed);
        assert_eq!(names(&next), ["fixed", "10.0.0.1:80"]);
        assert_eq!(next.backends[0].servers[1].weight, 9);
        assert_eq!(report(&next, &failed), ["backend b: app.test:80: the lookup failed (timeout); 1 server(s) kept"]);
        // Not when it succeeded, nor when the name looked up changed.
        let mut next = config();
        keep_found(&mut next, &c, &HashMap::new());
        assert_eq!(names(&next), ["fixed"]);
    }
}
