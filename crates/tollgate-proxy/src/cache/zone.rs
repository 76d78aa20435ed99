//! A cache zone at run time (`[[cache]]`): its tiers (memory, and disk when
//! configured), its coalescing table and its counters, shared by every worker,
//! and kept across reloads that leave the zone's name and sizes as they were
//! (the cache stays warm). A disk tier is kept by its directory: a reload
//! that changes the memory size or renames the zone keeps the files.
//!
//! [`ZoneShared`]'s `get`, `put`, `update` and `purge` are the tiers seen as
//! one store (disk.rs: the tiers are inclusive).

use super::coalesce::Coalescer;
use super::disk::{DiskStore, Found};
use super::store::{Body, Lookup, Object, PutError, Store};
use serde::Serialize;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tollgate_config::CacheZone;
use tollgate_config::HeaderLookup;
use tollgate_wire::cache::head::StoredHead;
use tollgate_wire::cache::policy::{EntryMeta, Options, StoreMeta};

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
    /// The memory tier.
    pub store: Arc<Store>,
    /// The disk tier.
    pub disk: Option<Arc<DiskStore>>,
    /// Misses in flight by primary key; followers get the stored object.
    pub flights: Arc<Coalescer<Arc<Object>>>,
    pub stats: Arc<ZoneStats>,
}

impl ZoneShared {
    /// The variant of `key` selected for a request with headers `req`: from
    /// memory, else from disk (read off the event loop, then put back in
    /// memory).
    pub async fn get(&self, key: &str, req: &dyn HeaderLookup) -> Lookup {
        let mem = self.store.get(key, req);
        let Some(disk) = self.disk.as_ref().filter(|_| !matches!(mem, Lookup::Hit(_))) else { return mem };
        let file = match disk.find(key, req) {
            Found::File(f) => f,
            Found::VaryMiss => return Lookup::VaryMiss,
            Found::UriMiss => return mem,
        };
        match disk.read(key, file).await {
            Some(obj) => {
                // Too large for memory: served from disk every time.
                let _ = self.store.insert(key, &obj);
                Lookup::Hit(obj)
            }
            None => mem,
        }
    }

    /// Stores a response in memory and (queued) on disk. An object larger
    /// than the memory tier takes goes to disk only.
    pub fn put(
        &self,
        key: &str,
        req: &dyn HeaderLookup,
        head: StoredHead,
        body: Body,
        meta: StoreMeta,
    ) -> Result<Arc<Object>, PutError> {
        let Some(disk) = &self.disk else { return self.store.put(key, req, head, body, meta) };
        let obj = Object::of_request(req, head, body, meta)?;
        let mem = self.store.insert_with_request(key, &obj, req);
        match (mem, disk.write(key, &obj)) {
            (Ok(()), _) | (Err(PutError::TooLarge), true) => Ok(obj),
            (Err(e), _) => Err(e),
        }
    }

    /// A stored object with a new head and metadata (after a 304): replaced in
    /// memory and rewritten on disk. `None` when it is no longer stored.
    pub fn update(&self, key: &str, old: &Arc<Object>, head: StoredHead, meta: EntryMeta) -> Option<Arc<Object>> {
        let updated = self.store.update(key, old, head.clone(), meta.clone());
        let Some(disk) = &self.disk else { return updated };
        let obj = match updated {
            Some(o) => o,
            None if disk.holds(key, old) => Arc::new(Object::updated(old, head, meta)),
            None => return None,
        };
        disk.write(key, &obj);
        Some(obj)
    }

    /// Drops every variant of `key` from both tiers; returns how many were
    /// stored (the larger count of the two: the tiers overlap).
    pub fn purge(&self, key: &str) -> usize {
        let mem = self.store.purge(key);
        self.both(mem, self.disk.as_ref().map_or(0, |d| d.purge(key)))
    }

    /// Drops every key starting with `prefix` from both tiers.
    pub fn purge_prefix(&self, prefix: &str) -> usize {
        let mem = self.store.purge_prefix(prefix);
        self.both(mem, self.disk.as_ref().map_or(0, |d| d.purge_prefix(prefix)))
    }

    /// Objects purged from both tiers: those on disk only count too.
    fn both(&self, mem: usize, disk: usize) -> usize {
        if disk > mem {
            self.store.stats.purged.fetch_add((disk - mem) as u64, Relaxed);
        }
        mem.max(disk)
    }
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
    /// Requests not looked up (methods other than GET and HEAD,
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
    /// A zone with an empty memory tier, and its disk tier opened (the files
    /// there are indexed in the background).
    pub fn new(cfg: CacheZone) -> Result<Arc<Zone>, String> {
        let disk = match &cfg.disk {
            Some(d) => Some(open_disk(&cfg, d)?),
            None => None,
        };
        Ok(Zone::fresh(cfg, disk))
    }

    fn fresh(cfg: CacheZone, disk: Option<Arc<DiskStore>>) -> Arc<Zone> {
        let shared = Arc::new(ZoneShared {
            store: Arc::new(Store::new(cfg.memory as usize, cfg.max_object as usize)),
            disk,
            flights: Arc::new(Coalescer::new()),
            stats: Arc::default(),
        });
        Zone::with_shared(cfg, shared)
    }

    fn with_shared(cfg: CacheZone, shared: Arc<ZoneShared>) -> Arc<Zone> {
        let opts = Options {
            heuristic_percent: u64::from(cfg.heuristic_percent),
            heuristic_max: cfg.heuristic_max.as_secs(),
            store_set_cookie: cfg.store_set_cookie,
            targeted: cfg.targeted_cache_control.as_deref().map(Box::from),
            stale_if_error: cfg.stale_if_error.as_secs(),
        };
        Arc::new(Zone { cfg, opts, shared })
    }

    /// The zones of a new config, given the running ones: a zone of the same
    /// name and the same `memory` and `max_object` keeps its memory tier (and
    /// its counters); the others start with an empty one. A disk tier is kept
    /// by its directory, whichever zone had it (resized if its size changed).
    /// Returns the zones and the names of those whose memory tier is new
    /// although the running config had the name.
    pub fn carry(old: &[Arc<Zone>], new: &[CacheZone]) -> Result<(Vec<Arc<Zone>>, Vec<String>), String> {
        let mut emptied = Vec::new();
        let mut zones = Vec::new();
        for cfg in new {
            let disk = match &cfg.disk {
                Some(d) => match old.iter().filter_map(|z| z.shared.disk.as_ref()).find(|s| s.root() == d.path) {
                    Some(s) => {
                        if s.capacity() != d.size {
                            s.resize(d.size);
                        }
                        Some(s.clone())
                    }
                    None => Some(open_disk(cfg, d)?),
                },
                None => None,
            };
            let same_disk = |z: &Zone| match (&z.shared.disk, &disk) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            let zone = match old.iter().find(|z| z.cfg.name == cfg.name) {
                Some(z) if z.cfg.memory == cfg.memory && z.cfg.max_object == cfg.max_object => {
                    let shared = if same_disk(z) {
                        z.shared.clone()
                    } else {
                        Arc::new(ZoneShared {
                            store: z.shared.store.clone(),
                            disk,
                            flights: z.shared.flights.clone(),
                            stats: z.shared.stats.clone(),
                        })
                    };
                    Zone::with_shared(cfg.clone(), shared)
                }
                Some(_) => {
                    emptied.push(cfg.name.clone());
                    Zone::fresh(cfg.clone(), disk)
                }
                None => Zone::fresh(cfg.clone(), disk),
            };
            zones.push(zone);
        }
        Ok((zones, emptied))
    }

    /// Waits until the disk tier (if any) has indexed the files it found at
    /// start.
    pub async fn disk_loaded(&self) {
        if let Some(d) = &self.shared.disk {
            d.loaded().await;
        }
    }

    /// Waits until the writes queued to the disk tier so far are done.
    pub async fn disk_flush(&self) {
        if let Some(d) = &self.shared.disk {
            d.flush().await;
        }
    }

    /// Whether the PURGE method is accepted from `ip`.
    pub fn allows_purge(&self, ip: IpAddr) -> bool {
        let ip = tollgate_wire::headers::canonical_ip(ip);
        self.cfg.purge_from.iter().any(|n| n.contains(&ip))
    }

    pub fn report(&self) -> CacheReport {
        let s = &self.shared.stats;
        let store = &self.shared.store;
        let get = |a: &AtomicU64| a.load(Relaxed);
        let disk = self.shared.disk.as_ref().map(|d| {
            let ds = d.stats();
            DiskReport {
                path: d.root().display().to_string(),
                limit: d.capacity(),
                objects: d.objects(),
                bytes: d.bytes(),
                loaded: d.is_loaded(),
                hits: get(&ds.hits),
                writes: get(&ds.writes),
                evictions: get(&ds.evictions),
                errors: get(&ds.errors),
                dropped: get(&ds.dropped),
            }
        });
        CacheReport {
            disk,
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

fn open_disk(cfg: &CacheZone, d: &tollgate_config::CacheDisk) -> Result<Arc<DiskStore>, String> {
    DiskStore::open(&d.path, d.size, cfg.max_object, &cfg.name)
        .map_err(|e| format!("cache zone `{}`: disk `{}`: {e}", cfg.name, d.path.display()))
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
        let room = z.disk.as_ref().map_or(z.memory, |d| d.size);
        if z.max_object == 0 || z.max_object > room {
            problems.push(format!("cache[{i}].max_object: must be from 1 to `memory` (or `disk.size`) bytes"));
        }
        if let Some(d) = &z.disk
            && config.caches[..i].iter().filter_map(|o| o.disk.as_ref()).any(|o| o.path == d.path)
        {
            problems.push(format!("cache[{i}].disk.path: another zone has `{}`", d.path.display()));
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
    /// The disk tier, if the zone has one.
    pub disk: Option<DiskReport>,
}

/// A zone's disk tier in the statistics report.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DiskReport {
    pub path: String,
    /// `disk.size`.
    pub limit: u64,
    pub objects: u64,
    /// Bytes of files, each rounded up to 4 KiB, as counted against `limit`.
    pub bytes: u64,
    /// The files found at start are indexed.
    pub loaded: bool,
    /// Lookups answered from a file (memory had nothing).
    pub hits: u64,
    pub writes: u64,
    pub evictions: u64,
    /// Files that could not be written or read, or failed their checksums.
    pub errors: u64,
    /// Writes dropped because the writer was too far behind.
    pub dropped: u64,
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
            targeted_cache_control: Some(CacheZone::DEFAULT_TARGETED.into()),
            strip_targeted_cache_control: true,
            stale_if_error: Duration::ZERO,
            heuristic_percent: 10,
            heuristic_max: Duration::from_secs(60),
            purge_from: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            disk: None,
            peers: None,
        }
    }

    #[test]
    fn a_reload_keeps_the_store_of_an_unchanged_zone() {
        let old = vec![Zone::new(cfg("a", 1 << 20, 1 << 10)).unwrap(), Zone::new(cfg("b", 1 << 20, 1 << 10)).unwrap()];
        let mut a2 = cfg("a", 1 << 20, 1 << 10);
        a2.store_set_cookie = false;
        let (zones, emptied) =
            Zone::carry(&old, &[a2, cfg("b", 2 << 20, 1 << 10), cfg("c", 1 << 20, 1 << 10)]).unwrap();
        assert!(Arc::ptr_eq(&zones[0].shared, &old[0].shared), "same name and sizes: same store");
        assert!(!zones[0].opts.store_set_cookie, "the new options apply");
        assert!(!Arc::ptr_eq(&zones[1].shared, &old[1].shared), "resized: a new store");
        assert_eq!(emptied, ["b"]);
        assert_eq!(zones[2].cfg.name, "c");
        assert_eq!(zones[0].opts.heuristic_max, 60);
    }

    #[test]
    fn purge_is_accepted_from_the_listed_sources_only() {
        let z = Zone::new(cfg("a", 1 << 20, 1 << 10)).unwrap();
        assert!(z.allows_purge("127.0.0.1".parse().unwrap()));
        assert!(z.allows_purge("::1".parse().unwrap()));
        assert!(z.allows_purge("::ffff:127.0.0.1".parse().unwrap()), "IPv4-mapped");
        assert!(!z.allows_purge("10.0.0.1".parse().unwrap()));
    }
}
