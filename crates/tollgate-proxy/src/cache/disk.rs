//! The disk tier of a zone: one file per stored response under a directory,
//! an index in memory, bounded in bytes, kept across restarts.
//!
//! ## Tiers
//! The tiers are inclusive: every response stored in memory is also written
//! to disk (in the background), and the memory tier holds the ones read
//! lately. An object evicted from memory is still on disk, and after a
//! restart (or a crash) everything written is there. A response larger than
//! the memory tier takes (`max_object` may reach the disk's size) is kept on
//! disk only. A lookup that misses in memory asks the index; a hit on disk is
//! read, checked, served, and put back in memory. A 304 that freshens a
//! stored response rewrites its file (head and metadata change; the body is
//! the same). PURGE, the admin API and invalidation drop both tiers.
//!
//! ## Files
//! `<dir>/<xx>/<id>`: `id` is a random 64-bit number in hex, `xx` its low
//! byte, so no directory holds more than 1/256 of the files. The format is
//! `disk_file.rs`: a header (key, `Vary` and secondary key, the stored head,
//! the RFC 9111 section 4.2.3 times and the rest of the metadata) and the
//! body, each with a CRC-32. A file is written as `<id>.tmp` and renamed into
//! place, so a name is either a whole file or absent; without an fsync a
//! crash may still leave a file whose blocks never reached the disk, which
//! the checksums catch: a file that fails them is deleted and counted in
//! `disk_errors`, never served. Leftover `.tmp` files are deleted at start.
//!
//! ## Index
//! In memory, per zone: primary key -> variants, each with its file id, size,
//! `Vary`, secondary key, and the `Date` / response time that pick the most
//! recent matching variant (RFC 9111 section 4.1). So a lookup needs no disk
//! access to know whether there is something to read, and purge by prefix
//! walks the keys without reading a file. At start a thread reads every
//! file's header (not its body) to rebuild it, oldest first; until it is done
//! lookups miss for what it has not reached yet ([`DiskStore::loaded`]).
//! `index_bytes_per_object` (disk_tests.rs) measures it with 100,000 files of
//! 40-byte URLs: 174 bytes per file, of which the slot (file id, key hash,
//! size in blocks, dates, CLOCK bits, 48 bytes, about 63 with the vector's
//! spare room), the hash table entry (hash, key, variant list: 48 bytes, about
//! 56 with the table's free slots), the URL (40), the variant list (4) and the
//! CLOCK queue entry (8, about 10). A variant of a response with `Vary` adds
//! its `Vary` names and secondary key (about 56 bytes and the values).
//!
//! ## Eviction
//! By bytes: each file counts its length rounded up to 4 KiB (the block a
//! file system gives the smallest file). CLOCK (second chance) in the order
//! files were written: a file read since its last pass goes round again,
//! else it is deleted. S3-FIFO's small queue would need its ghost entries
//! across restarts to work; the memory tier in front already keeps the
//! objects read often, so the disk tier sees mostly its misses.
//!
//! ## I/O off the event loop
//! Writes, renames and deletes run on one thread per zone (`tollgate-disk-…`)
//! fed by a channel: the request path only queues a job (the object is an
//! `Arc` the memory tier shares, so nothing is copied), writes land in the
//! order they were queued (a purge queued after a write removes it), and the
//! disk sees one writer however many workers store. Writes queued beyond
//! [`DiskStore::max_queued`] bytes are dropped (counted: `disk_dropped`),
//! never waited for. Reads, which a request waits for, go through tokio's
//! blocking pool (`spawn_blocking`, one `read` of the whole file), so several
//! run side by side and the worker's thread never blocks on the disk.
//! `tokio::fs` would be the same pool with a task per call; io_uring would
//! need a runtime of its own and unsafe code.
//!
//! ## Why not foyer
//! foyer (0.22) was evaluated for this tier as it was for the memory one
//! (store.rs): its block engine bounds the disk and recovers after a restart,
//! but (1) it keeps entries by a hash of the key with no way to list keys, so
//! purge by prefix (the admin API) would need a second, persisted index of
//! every key beside it; (2) one variant list per URI is not its model
//! (a composite key per variant plus a list entry, kept consistent across
//! crashes by us); (3) it would replace the memory tier too (its hybrid cache
//! owns both), losing the S3-FIFO store and its byte accounting; (4) it raises
//! the minimum Rust from 1.85 to 1.91 and brings about 45 crates, and runs its
//! own flusher tasks. A file per object is simple to check, to recover and
//! to purge, and the page cache does the buffering.

use super::disk_file::{self, Corrupt, Header};
use super::store::{IdMap, MAX_VARIANTS, Object};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use tollgate_config::HeaderLookup;
use tollgate_wire::cache::vary::Vary;

/// The unit a file's size is counted in.
const BLOCK: u64 = 4096;

/// Counters, relaxed.
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Lookups answered from a file.
    pub hits: AtomicU64,
    /// Files written.
    pub writes: AtomicU64,
    /// Files deleted to make room.
    pub evictions: AtomicU64,
    /// Files that could not be written or read, or failed their checksums.
    pub errors: AtomicU64,
    /// Writes not queued: the writer was too far behind.
    pub dropped: AtomicU64,
}

/// A zone's disk tier.
pub struct DiskStore {
    shared: Arc<Shared>,
    jobs: mpsc::Sender<Job>,
    max_queued: u64,
}

/// What the request path and the writer thread share.
struct Shared {
    root: PathBuf,
    index: Mutex<Index>,
    stats: DiskStats,
    /// Bytes of writes queued and not yet written.
    queued: AtomicU64,
    /// Set once the index is rebuilt.
    loaded: tokio::sync::watch::Sender<bool>,
}

enum Job {
    Write {
        key: Box<str>,
        obj: Arc<Object>,
        size: u64,
    },
    /// Drop `files` (already out of the index), then whatever is stored
    /// under `key` by writes queued before the purge.
    Purge {
        key: Box<str>,
        files: Vec<u64>,
    },
    PurgePrefix {
        prefix: Box<str>,
        files: Vec<u64>,
    },
    /// A reader found this file corrupt or gone.
    Forget {
        key: Box<str>,
        file: u64,
    },
    Resize(u64),
    /// Called once every job queued before it is done.
    Flush(Box<dyn FnOnce() + Send>),
}

impl DiskStore {
    /// Opens the tier at `root` (created if missing, with its 256
    /// subdirectories), holding at most `capacity` bytes, and starts its
    /// thread, which first rebuilds the index from the files there.
    /// `max_object` bounds the write queue (see the module doc).
    pub fn open(root: &Path, capacity: u64, max_object: u64, zone: &str) -> std::io::Result<Arc<DiskStore>> {
        for d in 0..256 {
            std::fs::create_dir_all(root.join(format!("{d:02x}")))?;
        }
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            index: Mutex::new(Index::new(capacity)),
            stats: DiskStats::default(),
            queued: AtomicU64::new(0),
            loaded: tokio::sync::watch::channel(false).0,
        });
        let (tx, rx) = mpsc::channel();
        let s = shared.clone();
        std::thread::Builder::new().name(format!("tollgate-disk-{zone}")).spawn(move || writer(&s, &rx))?;
        Ok(Arc::new(DiskStore { shared, jobs: tx, max_queued: (64 << 20).max(2 * max_object) }))
    }

    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    pub fn stats(&self) -> &DiskStats {
        &self.shared.stats
    }

    /// The most bytes of writes waiting at once.
    pub fn max_queued(&self) -> u64 {
        self.max_queued
    }

    fn send(&self, job: Job) {
        // The thread ends only when the store is dropped.
        let _ = self.jobs.send(job);
    }

    /// The file of the variant of `key` selected for a request with headers
    /// `req`, from the index alone (then [`DiskStore::read`] it).
    pub fn find(&self, key: &str, req: &dyn HeaderLookup) -> Found {
        self.shared.index.lock().find(key, req)
    }

    /// Reads `file` (found for `key`) off the event loop and checks it; `None`
    /// when it is gone or fails its checks (then it is dropped).
    pub async fn read(&self, key: &str, file: u64) -> Option<Arc<Object>> {
        let path = self.shared.path_of(file);
        let read = tokio::task::spawn_blocking(move || std::fs::read(path)).await;
        let stats = &self.shared.stats;
        let bad = match read {
            Ok(Ok(bytes)) => match disk_file::decode(Bytes::from(bytes)) {
                Ok((k, obj)) if k == key => {
                    stats.hits.fetch_add(1, Relaxed);
                    return Some(Arc::new(obj));
                }
                Ok(_) | Err(_) => true,
            },
            // Evicted or purged between the lookup and the read: a miss.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => false,
            Ok(Err(_)) => true,
            Err(_) => return None,
        };
        if bad {
            stats.errors.fetch_add(1, Relaxed);
            let file = self.shared.path_of(file);
            tracing::warn!(file = %file.display(), "cache: a disk file failed its checks and is dropped");
        }
        self.send(Job::Forget { key: key.into(), file });
        None
    }

    /// Queues `obj` (stored under `key`) to be written; false when the queue
    /// is full and it was dropped.
    pub fn write(&self, key: &str, obj: &Arc<Object>) -> bool {
        let size = obj.head.len() as u64 + obj.body.len() + key.len() as u64 + 256;
        let queued = self.shared.queued.fetch_add(size, Relaxed) + size;
        if queued > self.max_queued {
            self.shared.queued.fetch_sub(size, Relaxed);
            self.shared.stats.dropped.fetch_add(1, Relaxed);
            return false;
        }
        self.send(Job::Write { key: key.into(), obj: obj.clone(), size });
        true
    }

    /// Whether the variant of `obj` is stored for `key` (a 304 may freshen
    /// an object that is on disk only).
    pub fn holds(&self, key: &str, obj: &Object) -> bool {
        self.shared.index.lock().holds(key, &obj.vary, obj.secondary())
    }

    /// Drops every variant of `key`; returns how many.
    pub fn purge(&self, key: &str) -> usize {
        let files = self.shared.index.lock().remove_key(key);
        let n = files.len();
        self.send(Job::Purge { key: key.into(), files });
        n
    }

    /// Drops every variant of every key starting with `prefix`; returns how many.
    pub fn purge_prefix(&self, prefix: &str) -> usize {
        let files = self.shared.index.lock().remove_prefix(prefix);
        let n = files.len();
        self.send(Job::PurgePrefix { prefix: prefix.into(), files });
        n
    }

    /// A new size (a reload); files are evicted in the background to fit.
    pub fn resize(&self, capacity: u64) {
        self.send(Job::Resize(capacity));
    }

    /// Waits until the index is rebuilt from the files found at start.
    pub async fn loaded(&self) {
        let mut rx = self.shared.loaded.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Whether the index is rebuilt.
    pub fn is_loaded(&self) -> bool {
        *self.shared.loaded.borrow()
    }

    /// Waits until every job queued before this call is done.
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Flush(Box::new(move || {
            let _ = tx.send(());
        })));
        let _ = rx.await;
    }

    /// [`DiskStore::flush`] for a thread outside the runtime (a stopping
    /// server), waiting at most `limit`; false if the writer did not finish.
    pub fn flush_blocking(&self, limit: std::time::Duration) -> bool {
        let (tx, rx) = mpsc::channel();
        self.send(Job::Flush(Box::new(move || {
            let _ = tx.send(());
        })));
        rx.recv_timeout(limit).is_ok()
    }

    /// Objects (variants) stored.
    pub fn objects(&self) -> u64 {
        self.shared.index.lock().live as u64
    }

    /// Bytes stored, as counted against the size.
    pub fn bytes(&self) -> u64 {
        self.shared.index.lock().bytes
    }

    /// The size in force.
    pub fn capacity(&self) -> u64 {
        self.shared.index.lock().capacity
    }

    /// Memory the index takes beyond the objects' keys (see the module doc).
    pub fn index_bytes(&self) -> usize {
        self.shared.index.lock().index_bytes()
    }
}

impl Shared {
    fn path_of(&self, file: u64) -> PathBuf {
        self.root.join(format!("{:02x}", file & 0xff)).join(format!("{file:016x}"))
    }

    /// Deletes files no longer in the index.
    fn delete(&self, files: &[u64]) {
        for f in files {
            if let Err(e) = std::fs::remove_file(self.path_of(*f))
                && e.kind() != std::io::ErrorKind::NotFound
            {
                self.stats.errors.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The writer thread: the index first, then the jobs in order until the
/// store is dropped.
fn writer(shared: &Shared, jobs: &mpsc::Receiver<Job>) {
    load(shared);
    shared.loaded.send_replace(true);
    let ids = RandomState::new();
    let mut n = 0u64;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Write { key, obj, size } => {
                n += 1;
                let file = ids.hash_one(n);
                write(shared, &key, &obj, file);
                shared.queued.fetch_sub(size, Relaxed);
            }
            Job::Purge { key, files } => {
                shared.delete(&files);
                let more = shared.index.lock().remove_key(&key);
                shared.delete(&more);
            }
            Job::PurgePrefix { prefix, files } => {
                shared.delete(&files);
                let more = shared.index.lock().remove_prefix(&prefix);
                shared.delete(&more);
            }
            Job::Forget { key, file } => {
                if shared.index.lock().remove_file(&key, file) {
                    shared.delete(&[file]);
                }
            }
            Job::Resize(capacity) => {
                let evicted = shared.index.lock().resize(capacity);
                shared.stats.evictions.fetch_add(evicted.len() as u64, Relaxed);
                shared.delete(&evicted);
            }
            Job::Flush(done) => done(),
        }
    }
}

/// Writes one file (as `.tmp`, renamed into place), then indexes it.
fn write(shared: &Shared, key: &str, obj: &Object, file: u64) {
    let path = shared.path_of(file);
    let tmp = path.with_extension("tmp");
    let head = disk_file::encode_head(key, obj, tollgate_wire::clock::unix_now());
    let len = head.len() as u64 + obj.body.len();
    let wrote = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&head)?;
        for s in obj.body.segments() {
            f.write_all(s)?;
        }
        Ok(())
    });
    if let Err(e) = wrote.and_then(|_| std::fs::rename(&tmp, &path)) {
        let _ = std::fs::remove_file(&tmp);
        shared.stats.errors.fetch_add(1, Relaxed);
        tracing::warn!(file = %path.display(), "cache: cannot write to the disk tier: {e}");
        return;
    }
    let entry = Variant::of(obj);
    let out = shared.index.lock().insert(key, entry, file, len);
    shared.stats.evictions.fetch_add(out.evicted, Relaxed);
    shared.delete(&out.files);
    // Last: a write counted is a write done, evictions and all.
    shared.stats.writes.fetch_add(1, Relaxed);
}

/// Rebuilds the index from the files under the root (headers only), oldest
/// first; deletes leftovers of interrupted writes and files that fail their
/// checks.
fn load(shared: &Shared) {
    let mut found: Vec<(Header, u64)> = Vec::new();
    for d in 0..256 {
        let dir = shared.root.join(format!("{d:02x}"));
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            // Anything else not named by us is left alone.
            let Some(file) = (name.len() == 16).then(|| u64::from_str_radix(name, 16).ok()).flatten() else {
                continue;
            };
            match read_header(&entry.path()) {
                Ok(h) => found.push((h, file)),
                Err(why) => {
                    shared.stats.errors.fetch_add(1, Relaxed);
                    tracing::warn!(file = %entry.path().display(), "cache: dropping a disk file at start: {why:?}");
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
    found.sort_by_key(|(h, _)| h.stored_at);
    let n = found.len();
    for (h, file) in found {
        let len = h.file_len;
        let out = shared.index.lock().insert(&h.key, Variant::from_header(&h), file, len);
        shared.stats.evictions.fetch_add(out.evicted, Relaxed);
        shared.delete(&out.files);
    }
    if n > 0 {
        tracing::info!(dir = %shared.root.display(), "cache: {n} file(s) found on disk");
    }
}

/// The header of one file, checked against its length.
fn read_header(path: &Path) -> Result<Header, Corrupt> {
    let mut f = std::fs::File::open(path).map_err(|_| Corrupt::Length)?;
    let file_len = f.metadata().map_err(|_| Corrupt::Length)?.len();
    let mut start = vec![0u8; disk_file::PREFIX];
    f.read_exact(&mut start).map_err(|_| Corrupt::Length)?;
    let hlen = disk_file::header_len(&start)?;
    if (disk_file::PREFIX + hlen) as u64 > file_len {
        return Err(Corrupt::Length);
    }
    start.resize(disk_file::PREFIX + hlen, 0);
    f.read_exact(&mut start[disk_file::PREFIX..]).map_err(|_| Corrupt::Length)?;
    disk_file::decode_header(&start, file_len)
}

// ---------------------------------------------------------------------------
// The index (pure: no I/O)

/// `Vary`, the secondary key and the `Content-Encoding` of a variant.
type VaryKey = (Vary, Box<[u8]>, Option<Box<str>>);

/// What the index keeps of a stored variant besides its file.
pub(crate) struct Variant {
    /// `Vary`, the secondary key and the `Content-Encoding` (for the
    /// `Accept-Encoding` match, vary.rs), for the variants of a response with
    /// `Vary` (most have none: no allocation then).
    vary: Option<Box<VaryKey>>,
    /// `Date` and the response time (Unix seconds, u32 until 2106): the most
    /// recent matching variant wins a lookup.
    date: u32,
    response_time: u32,
}

impl Variant {
    fn new(vary: &Vary, secondary: &[u8], coding: Option<&str>, date: u64, response_time: u64) -> Variant {
        let vary = (*vary != Vary::None).then(|| Box::new((vary.clone(), Box::from(secondary), coding.map(Box::from))));
        Variant { vary, date: secs(date), response_time: secs(response_time) }
    }

    fn of(obj: &Object) -> Variant {
        let coding = obj.meta.content_encoding.as_deref();
        Variant::new(&obj.vary, obj.secondary(), coding, obj.meta.date, obj.meta.response_time)
    }

    fn from_header(h: &Header) -> Variant {
        Variant::new(&h.vary, &h.secondary, h.content_encoding.as_deref(), h.date, h.response_time)
    }

    fn selects(&self, req: &dyn HeaderLookup) -> bool {
        self.vary.as_ref().is_none_or(|v| v.0.selects(&v.1, v.2.as_deref(), req))
    }

    fn same(&self, vary: &Vary, secondary: &[u8]) -> bool {
        match &self.vary {
            None => *vary == Vary::None,
            Some(v) => v.0 == *vary && *v.1 == *secondary,
        }
    }

    fn newness(&self) -> (u32, u32) {
        (self.date, self.response_time)
    }
}

fn secs(t: u64) -> u32 {
    t.min(u64::from(u32::MAX)) as u32
}

struct Slot {
    v: Variant,
    file: u64,
    /// The hash of its primary key.
    hash: u64,
    /// Size counted, in [`BLOCK`]s.
    blocks: u32,
    /// Bumped each time the slot is reused (stale CLOCK entries are skipped).
    generation: u32,
    live: bool,
    /// Read since the CLOCK hand last passed.
    referenced: bool,
}

struct Entry {
    key: Box<str>,
    variants: Vec<u32>,
}

/// What a lookup in the index found.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The file to read.
    File(u64),
    VaryMiss,
    UriMiss,
}

/// Files removed by an insertion: replaced variants and evictions (to
/// delete), and how many were evictions.
#[derive(Debug, Default)]
pub(crate) struct Removed {
    pub files: Vec<u64>,
    pub evicted: u64,
}

pub(crate) struct Index {
    hasher: RandomState,
    map: IdMap<Entry>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// CLOCK order: (slot << 32 | generation), oldest first.
    clock: VecDeque<u64>,
    capacity: u64,
    bytes: u64,
    live: usize,
}

impl Index {
    pub(crate) fn new(capacity: u64) -> Index {
        Index {
            hasher: RandomState::new(),
            map: IdMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            clock: VecDeque::new(),
            capacity,
            bytes: 0,
            live: 0,
        }
    }

    fn entry(&self, key: &str) -> Option<(u64, &Entry)> {
        let h = self.hasher.hash_one(key);
        self.map.get(&h).filter(|e| &*e.key == key).map(|e| (h, e))
    }

    /// The file of the most recent variant of `key` selected for `req`
    /// (RFC 9111 section 4.1), marked as read.
    pub(crate) fn find(&mut self, key: &str, req: &dyn HeaderLookup) -> Found {
        let Some((_, e)) = self.entry(key) else { return Found::UriMiss };
        let best = e
            .variants
            .iter()
            .map(|id| (*id, &self.slots[*id as usize]))
            .filter(|(_, s)| s.v.selects(req))
            .max_by_key(|(_, s)| s.v.newness())
            .map(|(id, _)| id);
        match best {
            Some(id) => {
                let s = &mut self.slots[id as usize];
                s.referenced = true;
                Found::File(s.file)
            }
            None => Found::VaryMiss,
        }
    }

    pub(crate) fn holds(&self, key: &str, vary: &Vary, secondary: &[u8]) -> bool {
        self.entry(key)
            .is_some_and(|(_, e)| e.variants.iter().any(|id| self.slots[*id as usize].v.same(vary, secondary)))
    }

    /// Indexes `file` (`len` bytes) as a variant of `key`: it replaces the
    /// variants with its `Vary` and secondary key (all of them when it has
    /// no `Vary`), the oldest goes past [`MAX_VARIANTS`], then files are
    /// evicted until the bytes fit.
    pub(crate) fn insert(&mut self, key: &str, v: Variant, file: u64, len: u64) -> Removed {
        let mut out = Removed::default();
        let h = self.hasher.hash_one(key);
        if self.map.get(&h).is_some_and(|e| &*e.key != key) {
            // Another key with the same hash gives way (store.rs does the same).
            out.files.extend(self.remove_hash(h));
        }
        if let Some(e) = self.map.get(&h) {
            let replaced: Vec<u32> = e
                .variants
                .iter()
                .copied()
                .filter(|id| {
                    let s = &self.slots[*id as usize].v;
                    match &v.vary {
                        None => true,
                        Some(new) => s.same(&new.0, &new.1),
                    }
                })
                .collect();
            for id in replaced {
                out.files.push(self.remove_slot(id));
            }
        }
        if let Some(e) = self.map.get(&h).filter(|e| e.variants.len() >= MAX_VARIANTS) {
            let oldest = e.variants.iter().copied().min_by_key(|id| self.slots[*id as usize].v.newness());
            if let Some(id) = oldest {
                out.files.push(self.remove_slot(id));
            }
        }
        let blocks = len.div_ceil(BLOCK).clamp(1, u64::from(u32::MAX)) as u32;
        let slot = Slot { v, file, hash: h, blocks, generation: 0, live: true, referenced: false };
        let id = match self.free.pop() {
            Some(id) => {
                let generation = self.slots[id as usize].generation.wrapping_add(1);
                self.slots[id as usize] = Slot { generation, ..slot };
                id
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.clock.push_back(u64::from(id) << 32 | u64::from(self.slots[id as usize].generation));
        self.bytes += u64::from(blocks) * BLOCK;
        self.live += 1;
        // Most keys have one variant: room for one.
        let entry = self.map.entry(h).or_insert_with(|| Entry { key: key.into(), variants: Vec::with_capacity(1) });
        entry.variants.push(id);
        let evicted = self.evict();
        out.evicted = evicted.len() as u64;
        out.files.extend(evicted);
        out
    }

    /// Evicts until the bytes fit; returns the files.
    fn evict(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        while self.bytes > self.capacity {
            let Some(tag) = self.clock.pop_front() else { break };
            let id = (tag >> 32) as u32;
            let s = &mut self.slots[id as usize];
            if !s.live || s.generation != tag as u32 {
                continue;
            }
            if s.referenced {
                s.referenced = false;
                self.clock.push_back(tag);
                continue;
            }
            out.push(self.remove_slot(id));
        }
        out
    }

    pub(crate) fn resize(&mut self, capacity: u64) -> Vec<u64> {
        self.capacity = capacity;
        self.evict()
    }

    /// Frees a slot and unlinks it from its entry; returns its file.
    fn remove_slot(&mut self, id: u32) -> u64 {
        let s = &mut self.slots[id as usize];
        s.live = false;
        let (h, file, size) = (s.hash, s.file, u64::from(s.blocks) * BLOCK);
        // The Vary strings go now, not when the slot is reused.
        s.v.vary = None;
        self.bytes -= size;
        self.live -= 1;
        self.free.push(id);
        if let Some(e) = self.map.get_mut(&h) {
            e.variants.retain(|v| *v != id);
            if e.variants.is_empty() {
                self.map.remove(&h);
            }
        }
        // CLOCK entries of freed slots are skipped when reached; rebuild the
        // queue when they pile up (purges without eviction).
        if self.clock.len() > 2 * self.live + 64 {
            let slots = &self.slots;
            self.clock.retain(|t| {
                let s = &slots[(*t >> 32) as usize];
                s.live && s.generation == *t as u32
            });
        }
        file
    }

    fn remove_hash(&mut self, h: u64) -> Vec<u64> {
        let ids = self.map.get(&h).map(|e| e.variants.clone()).unwrap_or_default();
        ids.into_iter().map(|id| self.remove_slot(id)).collect()
    }

    pub(crate) fn remove_key(&mut self, key: &str) -> Vec<u64> {
        match self.entry(key) {
            Some((h, _)) => self.remove_hash(h),
            None => Vec::new(),
        }
    }

    pub(crate) fn remove_prefix(&mut self, prefix: &str) -> Vec<u64> {
        let hashes: Vec<u64> = self.map.iter().filter(|(_, e)| e.key.starts_with(prefix)).map(|(h, _)| *h).collect();
        hashes.into_iter().flat_map(|h| self.remove_hash(h)).collect()
    }

    /// Removes `file` if it is still a variant of `key`.
    pub(crate) fn remove_file(&mut self, key: &str, file: u64) -> bool {
        let Some((_, e)) = self.entry(key) else { return false };
        let Some(id) = e.variants.iter().copied().find(|id| self.slots[*id as usize].file == file) else {
            return false;
        };
        self.remove_slot(id);
        true
    }

    fn index_bytes(&self) -> usize {
        use std::mem::size_of;
        let map = self.map.capacity() * (size_of::<(u64, Entry)>() + 1)
            + self.map.values().map(|e| e.key.len() + e.variants.capacity() * size_of::<u32>()).sum::<usize>();
        let vary = |v: &VaryKey| {
            let names = match &v.0 {
                Vary::Fields(f) => f.len() * size_of::<Box<str>>() + f.iter().map(|n| n.len()).sum::<usize>(),
                Vary::None | Vary::Star => 0,
            };
            size_of::<VaryKey>() + names + v.1.len() + v.2.as_ref().map_or(0, |c| c.len())
        };
        let slots = self.slots.capacity() * size_of::<Slot>()
            + self.slots.iter().filter_map(|s| s.v.vary.as_deref()).map(vary).sum::<usize>();
        map + slots + self.free.capacity() * size_of::<u32>() + self.clock.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
