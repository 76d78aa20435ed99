//! A cache zone at run time (`[[cache]]`): its store, its coalescing table and
//! its counters, shared by every worker, and kept across reloads that leave
//! the zone's name and sizes as they were (the cache stays warm).

use super::coalesce::Coalescer;
use super::policy::Options;
use super::store::{Object, Store};
use serde::Serialize;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tollgate_config::CacheZone;

/// One zone of a snapshot.
pub struct Zone {
    pub cfg: CacheZone,
    /// The policy's options, from `cfg`.
    pub opts: Options,
    /// What outlives a reload.
    pub shared: Arc<ZoneShared>,
}

/// The store, the flights and the counters of a zone: the same across reloads
/// while the zone keeps its name and sizes.
pub struct ZoneShared {
    pub store: Store,
    /// Misses in flight by primary key; followers get the stored object.
    pub flights: Arc<Coalescer<Arc<Object>>>,
    pub stats: ZoneStats,
}

/// A zone's counters (relaxed; the store counts stores, evictions and purges).
#[derive(Debug, Default)]
pub struct ZoneStats {
    /// Answered from the store without going to the origin (fresh, stale
    /// allowed by the client, stale-while-revalidate, 304 to a conditional
    /// request, a follower of a coalesced miss).
    pub hits: AtomicU64,
    /// Looked up, nothing usable stored: forwarded.
    pub misses: AtomicU64,
    /// Served stale (stale-while-revalidate, max-stale, stale-if-error).
    pub stale: AtomicU64,
    /// Conditional requests sent to the origin (in the foreground or the background).
    pub revalidations: AtomicU64,
    /// Revalidations the origin answered 304: the stored response was freshened.
    pub not_modified: AtomicU64,
    /// Requests that waited for another request's origin response.
    pub coalesced: AtomicU64,
    /// Requests not looked up (methods other than GET and HEAD, ranges,
    /// preconditions, bodies, upgrades).
    pub bypass: AtomicU64,
    /// 504s to `only-if-cached` requests.
    pub only_if_cached_misses: AtomicU64,
    /// Stored objects dropped after an unsafe method (RFC 9111 section 4.4).
    pub invalidated: AtomicU64,
}

impl ZoneStats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

impl Zone {
    /// A zone with an empty store.
    pub fn new(cfg: CacheZone) -> Arc<Zone> {
        let shared = Arc::new(ZoneShared {
            store: Store::new(cfg.memory as usize, cfg.max_object as usize),
            flights: Arc::new(Coalescer::new()),
            stats: ZoneStats::default(),
        });
        Zone::with_shared(cfg, shared)
    }

    fn with_shared(cfg: CacheZone, shared: Arc<ZoneShared>) -> Arc<Zone> {
        let opts = Options {
            heuristic_percent: u64::from(cfg.heuristic_percent),
            heuristic_max: cfg.heuristic_max.as_secs(),
            store_set_cookie: cfg.store_set_cookie,
        };
        Arc::new(Zone { cfg, opts, shared })
    }

    /// The zones of a new config, given the running ones: a zone of the same
    /// name and the same `memory` and `max_object` keeps its store (and its
    /// counters); the others start empty. Returns the zones and the names of
    /// those whose store is new although the running config had the name.
    pub fn carry(old: &[Arc<Zone>], new: &[CacheZone]) -> (Vec<Arc<Zone>>, Vec<String>) {
        let mut emptied = Vec::new();
        let zones = new
            .iter()
            .map(|cfg| match old.iter().find(|z| z.cfg.name == cfg.name) {
                Some(z) if z.cfg.memory == cfg.memory && z.cfg.max_object == cfg.max_object => {
                    Zone::with_shared(cfg.clone(), z.shared.clone())
                }
                Some(_) => {
                    emptied.push(cfg.name.clone());
                    Zone::new(cfg.clone())
                }
                None => Zone::new(cfg.clone()),
            })
            .collect();
        (zones, emptied)
    }

    /// Whether the PURGE method is accepted from `ip`.
    pub fn allows_purge(&self, ip: IpAddr) -> bool {
        let ip = crate::headers::canonical_ip(ip);
        self.cfg.purge_from.iter().any(|n| n.contains(&ip))
    }

    pub fn report(&self) -> CacheReport {
        let s = &self.shared.stats;
        let store = &self.shared.store;
        let get = |a: &AtomicU64| a.load(Relaxed);
        CacheReport {
            name: self.cfg.name.clone(),
            memory_limit: self.cfg.memory,
            max_object: self.cfg.max_object,
            objects: store.objects() as u64,
            bytes: store.bytes() as u64,
            hits: get(&s.hits),
            misses: get(&s.misses),
            stale: get(&s.stale),
            revalidations: get(&s.revalidations),
            not_modified: get(&s.not_modified),
            coalesced: get(&s.coalesced),
            bypass: get(&s.bypass),
            only_if_cached_misses: get(&s.only_if_cached_misses),
            stores: get(&store.stats.inserts),
            evictions: get(&store.stats.evictions),
            purged: get(&store.stats.purged),
            invalidated: get(&s.invalidated),
        }
    }
}

/// What the data path relies on in a `Config` built in code (the config
/// crate's builder guarantees it for a file): cache references in range, zone
/// names unique, sizes the store can hold.
pub fn validate(config: &tollgate_config::Config) -> Vec<String> {
    let mut problems = Vec::new();
    let n = config.caches.len();
    for (i, b) in config.backends.iter().enumerate() {
        if b.cache.is_some_and(|z| z >= n) {
            problems.push(format!("backend[{i}].cache: zone out of range"));
        }
    }
    for (i, fe) in config.frontends.iter().enumerate() {
        for (r, rule) in fe.rules.iter().enumerate() {
            if let Some(tollgate_config::CacheUse::Zone(z)) = rule.cache
                && z >= n
            {
                problems.push(format!("frontend[{i}].rule[{r}].cache: zone out of range"));
            }
        }
    }
    let mut names = std::collections::HashSet::new();
    for (i, z) in config.caches.iter().enumerate() {
        if !names.insert(z.name.as_str()) {
            problems.push(format!("cache[{i}]: a zone named `{}` already exists", z.name));
        }
        if z.max_object == 0 || z.max_object > z.memory {
            problems.push(format!("cache[{i}].max_object: must be from 1 to `memory` bytes"));
        }
    }
    problems
}

/// A zone in the statistics report.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CacheReport {
    pub name: String,
    /// `memory`: the most bytes the store holds.
    pub memory_limit: u64,
    pub max_object: u64,
    /// Stored responses (each variant counted).
    pub objects: u64,
    /// Bytes held, as counted against `memory_limit`.
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub stale: u64,
    pub revalidations: u64,
    pub not_modified: u64,
    pub coalesced: u64,
    pub bypass: u64,
    pub only_if_cached_misses: u64,
    pub stores: u64,
    pub evictions: u64,
    /// Objects removed by PURGE or the admin API.
    pub purged: u64,
    pub invalidated: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cfg(name: &str, memory: u64, max_object: u64) -> CacheZone {
        CacheZone {
            name: name.into(),
            memory,
            max_object,
            store_set_cookie: true,
            heuristic_percent: 10,
            heuristic_max: Duration::from_secs(60),
            purge_from: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
        }
    }

    #[test]
    fn a_reload_keeps_the_store_of_an_unchanged_zone() {
        let old = vec![Zone::new(cfg("a", 1 << 20, 1 << 10)), Zone::new(cfg("b", 1 << 20, 1 << 10))];
        let mut a2 = cfg("a", 1 << 20, 1 << 10);
        a2.store_set_cookie = false;
        let (zones, emptied) = Zone::carry(&old, &[a2, cfg("b", 2 << 20, 1 << 10), cfg("c", 1 << 20, 1 << 10)]);
        assert!(Arc::ptr_eq(&zones[0].shared, &old[0].shared), "same name and sizes: same store");
        assert!(!zones[0].opts.store_set_cookie, "the new options apply");
        assert!(!Arc::ptr_eq(&zones[1].shared, &old[1].shared), "resized: a new store");
        assert_eq!(emptied, ["b"]);
        assert_eq!(zones[2].cfg.name, "c");
        assert_eq!(zones[0].opts.heuristic_max, 60);
    }

    #[test]
    fn purge_is_accepted_from_the_listed_sources_only() {
        let z = Zone::new(cfg("a", 1 << 20, 1 << 10));
        assert!(z.allows_purge("127.0.0.1".parse().unwrap()));
        assert!(z.allows_purge("::1".parse().unwrap()));
        assert!(z.allows_purge("::ffff:127.0.0.1".parse().unwrap()), "IPv4-mapped");
        assert!(!z.allows_purge("10.0.0.1".parse().unwrap()));
    }
}
