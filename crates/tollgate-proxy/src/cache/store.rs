//! The memory tier: stored responses by primary key and `Vary` variant, bounded
//! in bytes, evicted by S3-FIFO.
//!
//! ## Layout
//! A primary key (the URI: [`tollgate_wire::cache::key::primary_key`]) maps to the list of its variants
//! (at most [`MAX_VARIANTS`]); each variant is one stored response, an
//! `Arc<Object>` (head, body segments, metadata, and the secondary key its
//! request had, RFC 9111 section 4.1). A lookup clones the `Arc`: the shard lock
//! is held for a hash lookup and a key comparison, never while bytes are
//! written to a client, and an object evicted or replaced while a client reads
//! it lives on until that client is done.
//!
//! The store is split in shards (a mutex each) by the key's hash; every worker
//! thread shares it. The hash is std's keyed SipHash, so a client cannot choose
//! URIs that collide on purpose. A 64-bit hash collision between two keys (or a
//! shard's index and a key) is handled by comparing the full key: a lookup of
//! the other key misses, and storing it replaces the first.
//!
//! ## Eviction: S3-FIFO
//! (Yang et al., SOSP 2023), per shard, by bytes: new objects enter a small FIFO
//! (10% of the bytes); an object reaching its head is dropped unless it was read
//! since it entered, in which case it moves to the main FIFO; the main FIFO gives
//! objects read since their last pass another round (a 2-bit frequency, bumped
//! without the lock). Keys dropped from the small FIFO are remembered in a ghost
//! FIFO (hashes only, as many as the main FIFO holds objects); a key stored again
//! while remembered goes straight to the main FIFO. A scan of objects read once
//! passes through the small FIFO without pushing out the objects read often,
//! which LRU cannot do, at the cost of a FIFO queue entry rather than a list
//! node per object.
//!
//! ## Why not foyer
//! foyer (a hybrid memory+disk cache, S3-FIFO among its policies) was evaluated
//! (0.22): its memory cache would do, but (1) it has no iteration over keys, so
//! purge by prefix would need a second index of every key beside it; (2) a
//! variant list per URI is not its model: each variant would be an entry under
//! a composite key plus a separate list entry, two lookups per hit; (3) it raises
//! the workspace's minimum Rust from 1.85 to 1.91 and brings about 45 more crates
//! to build on two cores; (4) its disk tier runs its own flushers on a tokio
//! runtime and recovers entries only by key, again without a way to purge by
//! prefix. Its per-entry record (an Arc'd record with hash, weight, reference
//! count, flags and an intrusive list link, about 80 bytes, plus the key) is no
//! smaller than this index. The disk tier (disk.rs) is Tollgate's own too,
//! for the reasons disk.rs gives.
//!
//! ## Index memory per object
//! [`Store::index_bytes`] adds up what the index holds beyond the objects
//! themselves; the test `index_bytes_per_object` measures it with 100,000
//! objects of 40-byte keys: 165 bytes per object. Of that: the hash table slot
//! (hash, key box, variant list: 49 bytes, about 64 with the table's free
//! slots), the S3-FIFO node (32, about 42 with the vector's spare room), the
//! FIFO entry (8, about 10), the key (40) and the variant list (4). Once
//! eviction starts the ghost FIFO adds up to 25 bytes per object of the main
//! FIFO, and the allocator rounds the key and list allocations up. The `Object`
//! itself (head and body handles, metadata, the `Arc`'s counts) is 248 bytes
//! more, counted with the object's bytes against the capacity. Keeping the key
//! only in the object (the index holding hashes, as Traffic Server's directory
//! does) would bring the index near 100 bytes; purge by prefix would then read
//! the objects.

use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use tollgate_config::HeaderLookup;
use tollgate_wire::cache::head::StoredHead;
use tollgate_wire::cache::policy::{EntryMeta, StoreMeta};
use tollgate_wire::cache::vary::Vary;

/// Most variants kept per URI; storing one more drops the oldest. `Vary:
/// User-Agent` would otherwise store a copy per browser build.
pub const MAX_VARIANTS: usize = 16;

/// Bytes counted per object on top of its head, body and key: the `Object`
/// and its metadata, the index entries.
const OBJECT_OVERHEAD: usize = 256;

/// A response body as stored: the segments it arrived in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    segments: Vec<Bytes>,
    len: u64,
}

impl Body {
    pub fn new(segments: Vec<Bytes>) -> Self {
        let len = segments.iter().map(|s| s.len() as u64).sum();
        Body { segments, len }
    }

    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `start..end` (clamped to the body), sharing the segments.
    pub fn slice(&self, start: u64, end: u64) -> Body {
        let end = end.min(self.len);
        let mut out = Vec::new();
        let mut at = 0u64;
        for s in &self.segments {
            let (from, to) = (at, at + s.len() as u64);
            at = to;
            if to <= start || from >= end {
                continue;
            }
            let a = start.saturating_sub(from) as usize;
            let b = (end.min(to) - from) as usize;
            out.push(s.slice(a..b));
        }
        Body::new(out)
    }
}

/// One stored response.
#[derive(Debug)]
pub struct Object {
    pub head: StoredHead,
    pub body: Body,
    pub meta: EntryMeta,
    pub vary: Vary,
    /// The secondary key of the request it was stored for.
    secondary: Box<[u8]>,
    /// S3-FIFO's 2-bit access count, bumped by lookups without the shard lock.
    freq: AtomicU8,
}

impl Object {
    /// The object for a response to a request with headers `req` (its
    /// secondary key comes from them); `Vary: *` is refused.
    pub fn of_request(
        req: &dyn HeaderLookup,
        head: StoredHead,
        body: Body,
        meta: StoreMeta,
    ) -> Result<Arc<Object>, PutError> {
        let secondary = meta.vary.key(req).ok_or(PutError::VaryStar)?;
        Ok(Arc::new(Object::new(head, body, meta.meta, meta.vary, secondary)))
    }

    /// An object from its parts (the disk tier reads them back).
    pub fn new(head: StoredHead, body: Body, meta: EntryMeta, vary: Vary, secondary: Box<[u8]>) -> Object {
        Object { head, body, meta, vary, secondary, freq: AtomicU8::new(0) }
    }

    /// The same response with a new head and metadata (after a 304, RFC 9111
    /// section 4.3.4); the body is shared, not copied.
    pub fn updated(old: &Object, head: StoredHead, meta: EntryMeta) -> Object {
        Object {
            head,
            body: old.body.clone(),
            meta,
            vary: old.vary.clone(),
            secondary: old.secondary.clone(),
            freq: AtomicU8::new(old.freq.load(Relaxed)),
        }
    }

    /// The secondary key of the request it was stored for.
    pub fn secondary(&self) -> &[u8] {
        &self.secondary
    }

    /// Whether `other` is a response for the same variant (same `Vary`, same
    /// secondary key).
    pub fn same_variant(&self, other: &Object) -> bool {
        self.vary == other.vary && self.secondary == other.secondary
    }

    /// Whether this variant is selected for a request (RFC 9111 section 4.1).
    pub fn matches(&self, req: &dyn HeaderLookup) -> bool {
        self.vary.selects(&self.secondary, self.meta.content_encoding.as_deref(), req)
    }

    fn weight(&self, key: &str) -> usize {
        self.head.len() + self.body.len() as usize + key.len() + self.secondary.len() + OBJECT_OVERHEAD
    }

    fn touch(&self) {
        let f = self.freq.load(Relaxed);
        if f < 3 {
            self.freq.store(f + 1, Relaxed);
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// The variant selected for the request (the most recent, if several match).
    Hit(Arc<Object>),
    /// Responses are stored for the URI, none for this request's `Vary` fields.
    VaryMiss,
    /// Nothing stored for the URI.
    UriMiss,
}

/// Why an object was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutError {
    /// Larger than `max_object` or than a shard.
    TooLarge,
    /// `Vary: *` (RFC 9111 section 4.1: never selected).
    VaryStar,
}

/// Counters, relaxed.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub inserts: AtomicU64,
    pub evictions: AtomicU64,
    pub purged: AtomicU64,
}

/// The memory tier.
pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    max_object: usize,
    pub stats: StoreStats,
}

impl Store {
    /// A store of at most `capacity` bytes, objects of at most `max_object`
    /// bytes, in 16 shards (fewer when the capacity is small, so a shard can
    /// hold an object of `max_object`).
    pub fn new(capacity: usize, max_object: usize) -> Store {
        let mut shards = 16;
        while shards > 1 && capacity / shards < max_object.saturating_mul(4) {
            shards /= 2;
        }
        Store::with_shards(capacity, max_object, shards)
    }

    pub fn with_shards(capacity: usize, max_object: usize, shards: usize) -> Store {
        let shards = shards.max(1);
        let per = capacity / shards;
        Store {
            shards: (0..shards).map(|_| Mutex::new(Shard::new(per))).collect(),
            hasher: RandomState::new(),
            max_object: max_object.min(per),
            stats: StoreStats::default(),
        }
    }

    fn locate(&self, primary: &str) -> (u64, &Mutex<Shard>) {
        let h = self.hasher.hash_one(primary);
        // The low bits pick the shard; the table hashes the whole value again.
        (h, &self.shards[(h >> 32) as usize % self.shards.len()])
    }

    /// The variant of `primary` selected for a request with headers `req`
    /// (RFC 9111 section 4.1: the most recent of those whose `Vary` fields
    /// match).
    pub fn get(&self, primary: &str, req: &dyn HeaderLookup) -> Lookup {
        let (h, shard) = self.locate(primary);
        let shard = shard.lock();
        let Some(entry) = shard.map.get(&h).filter(|e| &*e.key == primary) else { return Lookup::UriMiss };
        let mut best: Option<&Arc<Object>> = None;
        for id in &entry.variants {
            let Some(obj) = shard.nodes[*id as usize].obj.as_ref() else { continue };
            if obj.matches(req) && best.is_none_or(|b| newer(obj, b)) {
                best = Some(obj);
            }
        }
        match best {
            Some(obj) => {
                obj.touch();
                Lookup::Hit(obj.clone())
            }
            None => Lookup::VaryMiss,
        }
    }

    /// Every stored variant of `primary` (for validating several at once,
    /// RFC 9111 section 4.3.1, and for 304 selection, section 4.3.4).
    pub fn variants(&self, primary: &str) -> Vec<Arc<Object>> {
        let (h, shard) = self.locate(primary);
        let shard = shard.lock();
        let Some(entry) = shard.map.get(&h).filter(|e| &*e.key == primary) else { return Vec::new() };
        entry.variants.iter().filter_map(|id| shard.nodes[*id as usize].obj.clone()).collect()
    }

    /// Stores a response for `primary`, received for a request with headers
    /// `req` (its secondary key comes from them). Replaces every stored variant
    /// that request would have selected (RFC 9111 section 4.1: the newer
    /// response wins).
    pub fn put(
        &self,
        primary: &str,
        req: &dyn HeaderLookup,
        head: StoredHead,
        body: Body,
        meta: StoreMeta,
    ) -> Result<Arc<Object>, PutError> {
        let obj = Object::of_request(req, head, body, meta)?;
        self.insert_with_request(primary, &obj, req)?;
        Ok(obj)
    }

    /// Stores `obj`, made for a request with headers `req`, as [`Store::put`] does.
    pub fn insert_with_request(
        &self,
        primary: &str,
        obj: &Arc<Object>,
        req: &dyn HeaderLookup,
    ) -> Result<(), PutError> {
        self.insert_with(primary, obj, &|o: &Object| o.matches(req))
    }

    /// Stores an object made elsewhere (read from the disk tier), replacing the
    /// stored variants with its `Vary` and secondary key.
    pub fn insert(&self, primary: &str, obj: &Arc<Object>) -> Result<(), PutError> {
        self.insert_with(primary, obj, &|o: &Object| o.same_variant(obj))
    }

    fn insert_with(
        &self,
        primary: &str,
        obj: &Arc<Object>,
        replaces: &dyn Fn(&Object) -> bool,
    ) -> Result<(), PutError> {
        let weight = obj.weight(primary);
        if weight > self.max_object {
            return Err(PutError::TooLarge);
        }
        let (h, shard) = self.locate(primary);
        let mut shard = shard.lock();
        let evicted = shard.insert(h, primary, replaces, obj.clone(), weight);
        self.stats.inserts.fetch_add(1, Relaxed);
        self.stats.evictions.fetch_add(evicted, Relaxed);
        Ok(())
    }

    /// Replaces a stored object (`old`, from a lookup) by the same response
    /// with a new head and metadata, after a 304 (RFC 9111 section 4.3.4). The
    /// body is shared, not copied. `None` when `old` is no longer stored.
    pub fn update(&self, primary: &str, old: &Arc<Object>, head: StoredHead, meta: EntryMeta) -> Option<Arc<Object>> {
        let (h, shard) = self.locate(primary);
        let mut shard = shard.lock();
        let shard = &mut *shard;
        let entry = shard.map.get(&h).filter(|e| &*e.key == primary)?;
        let id = *entry
            .variants
            .iter()
            .find(|id| shard.nodes[**id as usize].obj.as_ref().is_some_and(|o| Arc::ptr_eq(o, old)))?;
        let obj = Arc::new(Object::updated(old, head, meta));
        let node = &mut shard.nodes[id as usize];
        let weight = obj.weight(primary);
        shard.bytes = shard.bytes - node.weight as usize + weight;
        match node.queue {
            Queue::Small => shard.small_bytes = shard.small_bytes - node.weight as usize + weight,
            Queue::Main | Queue::Free => {}
        }
        node.weight = weight as u32;
        node.obj = Some(obj.clone());
        let evicted = shard.evict();
        self.stats.evictions.fetch_add(evicted, Relaxed);
        Some(obj)
    }

    /// Drops every variant of `primary`; returns how many there were.
    pub fn purge(&self, primary: &str) -> usize {
        let (h, shard) = self.locate(primary);
        let mut shard = shard.lock();
        let n = match shard.map.get(&h) {
            Some(e) if &*e.key == primary => shard.remove_entry(h),
            _ => 0,
        };
        self.stats.purged.fetch_add(n as u64, Relaxed);
        n
    }

    /// Drops every variant of every key starting with `prefix`; returns how
    /// many. Walks every key, one shard locked at a time: an admin operation.
    pub fn purge_prefix(&self, prefix: &str) -> usize {
        let mut n = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let hashes: Vec<u64> =
                shard.map.iter().filter(|(_, e)| e.key.starts_with(prefix)).map(|(h, _)| *h).collect();
            for h in hashes {
                n += shard.remove_entry(h);
            }
        }
        self.stats.purged.fetch_add(n as u64, Relaxed);
        n
    }

    /// Objects stored (variants counted one by one).
    pub fn objects(&self) -> usize {
        self.shards.iter().map(|s| s.lock().live).sum()
    }

    /// Bytes stored, as counted against the capacity.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }

    /// Bytes the index takes beyond the objects (see the module doc).
    pub fn index_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().index_bytes()).sum()
    }
}

fn newer(a: &Object, b: &Object) -> bool {
    (a.meta.date, a.meta.response_time) > (b.meta.date, b.meta.response_time)
}

/// The table is keyed by a hash already: use it as is.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ *b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
    Free,
}

struct Node {
    obj: Option<Arc<Object>>,
    /// The hash of its primary key.
    hash: u64,
    weight: u32,
    /// Bumped each time the slot is reused, so queue entries of an earlier
    /// occupant are recognised and skipped.
    generation: u32,
    queue: Queue,
}

struct Entry {
    key: Box<str>,
    variants: Vec<u32>,
}

struct Shard {
    map: IdMap<Entry>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// (node, generation) packed: `id << 32 | gen`.
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    ghost: VecDeque<u64>,
    ghost_set: IdSet,
    capacity: usize,
    bytes: usize,
    small_bytes: usize,
    live: usize,
    main_live: usize,
}

impl Shard {
    fn new(capacity: usize) -> Shard {
        Shard {
            map: IdMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            ghost_set: IdSet::default(),
            capacity,
            bytes: 0,
            small_bytes: 0,
            live: 0,
            main_live: 0,
        }
    }

    /// Inserts; returns how many objects were evicted to make room.
    fn insert(
        &mut self,
        h: u64,
        key: &str,
        replaces: &dyn Fn(&Object) -> bool,
        obj: Arc<Object>,
        weight: usize,
    ) -> u64 {
        // Another key with the same hash: it gives way.
        if self.map.get(&h).is_some_and(|e| &*e.key != key) {
            self.remove_entry(h);
        }
        // Drop the variants this request would have selected (all of them when
        // the new response has no Vary: it is newer and matches every request,
        // so they could never be chosen again); keep at most MAX_VARIANTS - 1
        // others (the oldest go first).
        if let Some(e) = self.map.get(&h) {
            let all = obj.vary == Vary::None;
            let stale: Vec<u32> = e
                .variants
                .iter()
                .copied()
                .filter(|id| all || self.nodes[*id as usize].obj.as_ref().is_none_or(|o| replaces(o)))
                .collect();
            for id in stale {
                self.remove_node(id);
            }
        }
        if let Some(e) = self.map.get(&h).filter(|e| e.variants.len() >= MAX_VARIANTS) {
            let oldest =
                e.variants.iter().copied().min_by_key(|id| {
                    self.nodes[*id as usize].obj.as_ref().map(|o| (o.meta.date, o.meta.response_time))
                });
            if let Some(id) = oldest {
                self.remove_node(id);
            }
        }
        let to_main = self.ghost_set.remove(&h);
        let queue = if to_main { Queue::Main } else { Queue::Small };
        let id = match self.free.pop() {
            Some(id) => {
                let n = &mut self.nodes[id as usize];
                n.obj = Some(obj);
                n.hash = h;
                n.weight = weight as u32;
                n.generation = n.generation.wrapping_add(1);
                n.queue = queue;
                id
            }
            None => {
                self.nodes.push(Node { obj: Some(obj), hash: h, weight: weight as u32, generation: 0, queue });
                (self.nodes.len() - 1) as u32
            }
        };
        let tag = (id as u64) << 32 | self.nodes[id as usize].generation as u64;
        if to_main {
            self.main.push_back(tag);
            self.main_live += 1;
        } else {
            self.small.push_back(tag);
            self.small_bytes += weight;
        }
        self.bytes += weight;
        self.live += 1;
        self.map.entry(h).or_insert_with(|| Entry { key: key.into(), variants: Vec::new() }).variants.push(id);
        self.evict()
    }

    /// Removes every variant of the entry at `h`; returns how many.
    fn remove_entry(&mut self, h: u64) -> usize {
        let Some(e) = self.map.get(&h) else { return 0 };
        let ids = e.variants.clone();
        for id in &ids {
            self.remove_node(*id);
        }
        self.map.remove(&h);
        ids.len()
    }

    /// Frees a node (its queue entry is skipped later) and unlinks it from its entry.
    fn remove_node(&mut self, id: u32) {
        let n = &mut self.nodes[id as usize];
        if n.queue == Queue::Free {
            return;
        }
        let (h, weight, queue) = (n.hash, n.weight as usize, n.queue);
        n.obj = None;
        n.queue = Queue::Free;
        self.bytes -= weight;
        self.live -= 1;
        match queue {
            Queue::Small => self.small_bytes -= weight,
            Queue::Main => self.main_live -= 1,
            Queue::Free => {}
        }
        self.free.push(id);
        if let Some(e) = self.map.get_mut(&h) {
            e.variants.retain(|v| *v != id);
            if e.variants.is_empty() {
                self.map.remove(&h);
            }
        }
        self.compact();
    }

    /// Queue entries of freed nodes are skipped when reached; when they pile up
    /// (many purges or replacements and no eviction) the queues are rebuilt.
    fn compact(&mut self) {
        if self.small.len() + self.main.len() <= 2 * self.live + 64 {
            return;
        }
        let nodes = &self.nodes;
        let alive = |tag: &u64| {
            let n = &nodes[(*tag >> 32) as usize];
            n.queue != Queue::Free && n.generation == *tag as u32
        };
        self.small.retain(alive);
        self.main.retain(alive);
    }

    /// Evicts until the shard fits; returns how many objects went.
    fn evict(&mut self) -> u64 {
        let mut evicted = 0;
        while self.bytes > self.capacity {
            // S3-FIFO: the small FIFO gives way while it holds over 10% of the
            // bytes (or the main FIFO is empty).
            let from_small = self.small_bytes > self.capacity / 10 || self.main_live == 0;
            let went = if from_small { self.evict_small() } else { self.evict_main() };
            match went {
                Some(true) => evicted += 1,
                Some(false) => {}
                None => break,
            }
        }
        evicted
    }

    /// The node a queue entry stands for, if it is still that occupant.
    fn live_node(&self, tag: u64, queue: Queue) -> Option<u32> {
        let id = (tag >> 32) as u32;
        let n = &self.nodes[id as usize];
        (n.queue == queue && n.generation == tag as u32).then_some(id)
    }

    /// One step of the small FIFO: `Some(true)` when an object was evicted,
    /// `Some(false)` when one moved to main or a dead entry was skipped, `None`
    /// when the queue is empty.
    fn evict_small(&mut self) -> Option<bool> {
        let tag = self.small.pop_front()?;
        let Some(id) = self.live_node(tag, Queue::Small) else { return Some(false) };
        let n = &mut self.nodes[id as usize];
        let read = n.obj.as_ref().is_some_and(|o| o.freq.load(Relaxed) > 0);
        if read {
            if let Some(o) = &n.obj {
                o.freq.store(0, Relaxed);
            }
            n.queue = Queue::Main;
            self.small_bytes -= n.weight as usize;
            self.main_live += 1;
            self.main.push_back(tag);
            return Some(false);
        }
        let h = n.hash;
        self.remove_node(id);
        self.remember(h);
        Some(true)
    }

    fn evict_main(&mut self) -> Option<bool> {
        let tag = self.main.pop_front()?;
        let Some(id) = self.live_node(tag, Queue::Main) else { return Some(false) };
        let n = &self.nodes[id as usize];
        if let Some(o) = n.obj.as_ref().filter(|o| o.freq.load(Relaxed) > 0) {
            o.freq.fetch_sub(1, Relaxed);
            self.main.push_back(tag);
            return Some(false);
        }
        self.remove_node(id);
        Some(true)
    }

    /// The ghost FIFO holds as many hashes as the main FIFO holds objects.
    fn remember(&mut self, h: u64) {
        if self.ghost_set.insert(h) {
            self.ghost.push_back(h);
        }
        while self.ghost.len() > self.main_live.max(16) {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
    }

    fn index_bytes(&self) -> usize {
        use std::mem::size_of;
        // A hashbrown slot is the (key, value) pair plus one control byte.
        let map = self.map.capacity() * (size_of::<(u64, Entry)>() + 1)
            + self.map.values().map(|e| e.key.len() + e.variants.capacity() * size_of::<u32>()).sum::<usize>();
        let ghost = self.ghost_set.capacity() * (size_of::<u64>() + 1) + self.ghost.capacity() * size_of::<u64>();
        map + self.nodes.capacity() * size_of::<Node>()
            + self.free.capacity() * size_of::<u32>()
            + (self.small.capacity() + self.main.capacity()) * size_of::<u64>()
            + ghost
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
