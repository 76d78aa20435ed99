//! Stick counters: `[[table]]`s of counters per key (the client's address, a
//! request header, a cookie or the path), shared by every worker and kept
//! across reloads, and what counts connections and requests in them
//! (HAProxy's stick tables with `store`, and `track-sc`). Rules read the
//! counters (`counter` conditions: rate limits, connection limits); the
//! admin API and `show table` list them.
//!
//! The arithmetic is pure and takes `now` ([`Rate`], [`Counters`], the
//! table's expiry and eviction); [`now_ms`] is the clock it is given.

use lru::LruCache;
use parking_lot::Mutex;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tollgate_config::{ConnectionAction, Counter, CounterLookup, Frontend, RequestFacts, TrackKey, TrackTable};
use tollgate_wire::cookie;
use tollgate_wire::h1::RequestHead;

/// Milliseconds on a monotonic clock (from the first call in the process);
/// read once per request counted and once per response (a request's rules
/// read its counters as of when it was counted).
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The longest key kept: longer header, cookie or path values are cut here
/// (HAProxy's string tables cut at their `len`), so that 10,000 clients
/// sending 8 KiB values cannot make a table hold 80 MB of keys.
pub const MAX_KEY: usize = 256;

/// An entry's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Ip(IpAddr),
    Text(Box<[u8]>),
}

/// One write per key (the derived hash wrote an address's tag and each of
/// its parts apart: 88 instructions a request where this takes a third).
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Key::Ip(IpAddr::V4(v4)) => state.write_u32(v4.to_bits()),
            Key::Ip(IpAddr::V6(v6)) => state.write_u128(v6.to_bits()),
            Key::Text(t) => state.write(t),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Ip(ip) => write!(f, "{ip}"),
            Key::Text(t) => f.write_str(&String::from_utf8_lossy(t)),
        }
    }
}

impl Key {
    fn text(v: &[u8]) -> Key {
        Key::Text(v[..v.len().min(MAX_KEY)].into())
    }
}

/// Events over a sliding period (HAProxy's `freq_ctr`): the count of the
/// current period, plus the previous period's weighted by the part of it
/// that still lies within one period of now. Two numbers per rate, whatever
/// the event rate.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rate {
    /// When the current period began (ms).
    start: u64,
    curr: u64,
    prev: u64,
}

impl Rate {
    fn rotate(&mut self, now: u64, period: u64) {
        let elapsed = now.saturating_sub(self.start);
        if elapsed < period {
            return;
        }
        self.prev = if elapsed < 2 * period { self.curr } else { 0 };
        self.curr = 0;
        self.start = now - elapsed % period;
    }

    pub fn add(&mut self, n: u64, now: u64, period: u64) {
        self.rotate(now, period);
        self.curr = self.curr.saturating_add(n);
    }

    /// Events within the last `period` (ms) at `now`.
    pub fn read(&self, now: u64, period: u64) -> u64 {
        let mut r = *self;
        r.rotate(now, period);
        let left = period - now.saturating_sub(r.start).min(period);
        let period = period.max(1);
        // u64 arithmetic while it cannot overflow (any count below 2^32 over
        // periods below 2^32 ms); a byte rate past that in 128 bits.
        let weighted = match r.prev.checked_mul(left) {
            Some(x) => x / period,
            None => (u128::from(r.prev) * u128::from(left) / u128::from(period)) as u64,
        };
        r.curr.saturating_add(weighted)
    }
}

/// The counters of one entry.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub conn_cur: u64,
    pub conn_cnt: u64,
    conn_rate: Rate,
    pub http_req_cnt: u64,
    http_req_rate: Rate,
    /// Responses 400 to 499 (HAProxy's `http_err`).
    pub http_err_cnt: u64,
    http_err_rate: Rate,
    /// Responses 500 to 599 (HAProxy's `http_fail`).
    pub http_fail_cnt: u64,
    http_fail_rate: Rate,
    pub bytes_in_cnt: u64,
    bytes_in_rate: Rate,
    pub bytes_out_cnt: u64,
    bytes_out_rate: Rate,
    /// The last change (ms): the entry expires `expire` after it.
    touched: u64,
    /// The events counted here not yet sent to the peers (a `share` table).
    unsent: Events,
}

/// Events of one key: what a peer sends the others (runtime/peers.rs), and
/// adds to their counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Events {
    #[serde(default)]
    pub conns: u64,
    #[serde(default)]
    pub reqs: u64,
    #[serde(default)]
    pub errs: u64,
    #[serde(default)]
    pub fails: u64,
    #[serde(default)]
    pub bytes_in: u64,
    #[serde(default)]
    pub bytes_out: u64,
}

impl Events {
    pub fn is_empty(&self) -> bool {
        *self == Events::default()
    }
}

impl Counters {
    /// The value of `c` at `now`, rates over `period` (ms).
    pub fn get(&self, c: Counter, now: u64, period: u64) -> u64 {
        match c {
            Counter::ConnCur => self.conn_cur,
            Counter::ConnCnt => self.conn_cnt,
            Counter::ConnRate => self.conn_rate.read(now, period),
            Counter::HttpReqCnt => self.http_req_cnt,
            Counter::HttpReqRate => self.http_req_rate.read(now, period),
            Counter::HttpErrCnt => self.http_err_cnt,
            Counter::HttpErrRate => self.http_err_rate.read(now, period),
            Counter::HttpFailCnt => self.http_fail_cnt,
            Counter::HttpFailRate => self.http_fail_rate.read(now, period),
            Counter::BytesInCnt => self.bytes_in_cnt,
            Counter::BytesInRate => self.bytes_in_rate.read(now, period),
            Counter::BytesOutCnt => self.bytes_out_cnt,
            Counter::BytesOutRate => self.bytes_out_rate.read(now, period),
        }
    }

    fn opened(&mut self, now: u64, period: u64) {
        self.conn_cur += 1;
        self.conn_cnt += 1;
        self.conn_rate.add(1, now, period);
        self.touched = now;
        self.unsent.conns += 1;
    }

    /// Events a peer counted: added to the counts and rates (not to what
    /// this instance sends; `conn_cur` stays this instance's).
    pub fn add_remote(&mut self, e: &Events, now: u64, period: u64) {
        let add = |cnt: &mut u64, rate: &mut Rate, n: u64| {
            *cnt = cnt.saturating_add(n);
            rate.add(n, now, period);
        };
        add(&mut self.conn_cnt, &mut self.conn_rate, e.conns);
        add(&mut self.http_req_cnt, &mut self.http_req_rate, e.reqs);
        add(&mut self.http_err_cnt, &mut self.http_err_rate, e.errs);
        add(&mut self.http_fail_cnt, &mut self.http_fail_rate, e.fails);
        add(&mut self.bytes_in_cnt, &mut self.bytes_in_rate, e.bytes_in);
        add(&mut self.bytes_out_cnt, &mut self.bytes_out_rate, e.bytes_out);
        self.touched = now;
    }

    fn closed(&mut self, now: u64) {
        self.conn_cur = self.conn_cur.saturating_sub(1);
        self.touched = now;
    }

    fn request(&mut self, now: u64, period: u64) {
        self.http_req_cnt += 1;
        self.http_req_rate.add(1, now, period);
        self.touched = now;
        self.unsent.reqs += 1;
    }

    fn response(&mut self, status: u16, (bytes_in, bytes_out): (u64, u64), now: u64, period: u64) {
        if (400..500).contains(&status) {
            self.http_err_cnt += 1;
            self.http_err_rate.add(1, now, period);
            self.unsent.errs += 1;
        } else if (500..600).contains(&status) {
            self.http_fail_cnt += 1;
            self.http_fail_rate.add(1, now, period);
            self.unsent.fails += 1;
        }
        self.unsent.bytes_in = self.unsent.bytes_in.saturating_add(bytes_in);
        self.unsent.bytes_out = self.unsent.bytes_out.saturating_add(bytes_out);
        self.bytes_in_cnt = self.bytes_in_cnt.saturating_add(bytes_in);
        self.bytes_in_rate.add(bytes_in, now, period);
        self.bytes_out_cnt = self.bytes_out_cnt.saturating_add(bytes_out);
        self.bytes_out_rate.add(bytes_out, now, period);
        self.touched = now;
    }

    /// Whether the entry may go at `now`: nothing open and untouched for `expire`.
    fn expired(&self, now: u64, expire: u64) -> bool {
        self.conn_cur == 0 && now.saturating_sub(self.touched) >= expire
    }

    /// The time left before the entry may go (ms), for `show table`.
    fn left(&self, now: u64, expire: u64) -> u64 {
        if self.conn_cur > 0 { expire } else { expire.saturating_sub(now.saturating_sub(self.touched)) }
    }
}

/// One key's counters; held (an `Arc`) by what it counts while it lasts, so
/// that a table never drops an entry a connection or request still counts in.
#[derive(Debug)]
pub struct Entry {
    counters: Mutex<Counters>,
    period: u64,
}

impl Entry {
    pub fn get(&self, c: Counter, now: u64) -> u64 {
        self.counters.lock().get(c, now, self.period)
    }
}

/// A `[[table]]` at run time: its entries in shards, each an LRU map under
/// a lock, so that workers counting different keys rarely wait on each
/// other, and the entry to drop when a shard is full (the least recently
/// used one nobody holds) is found without a scan.
pub struct Table {
    pub cfg: TrackTable,
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: foldhash::fast::RandomState,
    /// Keys not counted because their shard was full of entries in use.
    pub refused: AtomicU64,
}

/// One shard's entries, least recently used last.
type Shard = LruCache<Key, Arc<Entry>, foldhash::fast::RandomState>;

/// Entries looked at, from the least recently used, for one to drop when a
/// shard is full: past that many in use, the new key is not counted.
const EVICT_TRIES: usize = 8;

impl Table {
    pub fn new(cfg: TrackTable) -> Table {
        // Shards only where a table is large enough for the split to stay
        // close to its size (a shard holds size / shards entries).
        let n = if cfg.size >= 4096 { 16 } else { 1 };
        let per_shard = cfg.size.div_ceil(n);
        let hasher = foldhash::fast::RandomState::default();
        let shards = (0..n).map(|_| Mutex::new(LruCache::unbounded_with_hasher(hasher.clone()))).collect();
        Table { cfg, shards, per_shard, hasher, refused: AtomicU64::new(0) }
    }

    fn ms(d: std::time::Duration) -> u64 {
        d.as_millis().max(1) as u64
    }

    /// The entry of `key`, made if it is new (dropping expired entries, and
    /// the least recently used one when the shard is full). `None` when the
    /// shard is full of entries in use: the key is not counted.
    pub fn entry(&self, key: Key, now: u64) -> Option<Arc<Entry>> {
        // The map's own hash picks the shard: the high bits, its buckets use the low ones.
        let shard = &self.shards[((self.hasher.hash_one(&key) >> 32) % self.shards.len() as u64) as usize];
        let expire = Self::ms(self.cfg.expire);
        let mut map = shard.lock();
        if let Some(e) = map.get(&key) {
            let mut c = e.counters.lock();
            if c.expired(now, expire) {
                *c = Counters { touched: now, ..Counters::default() };
            }
            drop(c);
            return Some(e.clone());
        }
        while let Some((_, e)) = map.peek_lru() {
            if Arc::strong_count(e) == 1 && e.counters.lock().expired(now, expire) {
                map.pop_lru();
            } else {
                break;
            }
        }
        if map.len() >= self.per_shard {
            let mut freed = false;
            for _ in 0..EVICT_TRIES {
                let Some((k, e)) = map.peek_lru() else { break };
                if Arc::strong_count(e) == 1 {
                    map.pop_lru();
                    freed = true;
                    break;
                }
                let k = k.clone();
                map.promote(&k);
            }
            if !freed {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        let counters = Mutex::new(Counters { touched: now, ..Counters::default() });
        let e = Arc::new(Entry { counters, period: Self::ms(self.cfg.period) });
        map.put(key, e.clone());
        Some(e)
    }

    /// Entries held now (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live entries at `now`: key, counters, ms before expiry; most
    /// recently used first, at most `limit`.
    pub fn entries(&self, now: u64, limit: usize) -> Vec<(Key, Counters, u64)> {
        let expire = Self::ms(self.cfg.expire);
        self.scan(limit, |k, c| (!c.expired(now, expire)).then(|| (k.clone(), c.clone(), c.left(now, expire))))
    }

    /// What `f` makes of each entry (those it makes nothing of left out),
    /// most recently used first, at most `limit`.
    fn scan<T>(&self, limit: usize, mut f: impl FnMut(&Key, &mut Counters) -> Option<T>) -> Vec<T> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let map = shard.lock();
            for (k, e) in map.iter() {
                if out.len() >= limit {
                    return out;
                }
                out.extend(f(k, &mut e.counters.lock()));
            }
        }
        out
    }

    /// Drops every entry nobody holds (`clear table`); returns how many went.
    pub fn clear(&self) -> usize {
        let mut gone = 0;
        for shard in self.shards.iter() {
            let mut map = shard.lock();
            let keep: Vec<(Key, Arc<Entry>)> =
                map.iter().filter(|(_, e)| Arc::strong_count(e) > 1).map(|(k, e)| (k.clone(), e.clone())).collect();
            gone += map.len() - keep.len();
            map.clear();
            for (k, e) in keep.into_iter().rev() {
                map.put(k, e);
            }
        }
        gone
    }

    pub fn period_ms(&self) -> u64 {
        Self::ms(self.cfg.period)
    }

    /// The events counted here since the last call, by key (at most `limit`
    /// keys; the others wait for the next call), for the peers.
    pub fn take_unsent(&self, limit: usize) -> Vec<(Key, Events)> {
        self.scan(limit, |k, c| (!c.unsent.is_empty()).then(|| (k.clone(), std::mem::take(&mut c.unsent))))
    }

    /// Events a peer counted for `key`, added to its entry (made if new).
    pub fn add_remote(&self, key: Key, events: &Events, now: u64) {
        if let Some(e) = self.entry(key, now) {
            e.counters.lock().add_remote(events, now, e.period);
        }
    }
}

/// The tables of a new config: a table of the same name and policy as one of
/// `old` is that one, entries and all; any other starts empty.
pub fn carry(old: &[Arc<Table>], new: &[TrackTable]) -> Vec<Arc<Table>> {
    new.iter()
        .map(|cfg| match old.iter().find(|t| t.cfg == *cfg) {
            Some(t) => t.clone(),
            None => Arc::new(Table::new(cfg.clone())),
        })
        .collect()
}

/// The most tables a frontend tracks (the config checks it).
const SLOTS: usize = 3;

/// The entries a connection or a request counts in, by table index. A
/// connection's are released (its `conn_cur` taken back) when it is dropped.
#[derive(Default)]
pub struct Tracked {
    slots: [Option<(usize, Arc<Entry>)>; SLOTS],
    connection: bool,
    /// When the request was counted: its rules read the counters as of then.
    now: u64,
}

/// What a request looks like to a table's key.
pub struct RequestKeys<'a> {
    pub src: IpAddr,
    pub head: &'a RequestHead,
}

impl Tracked {
    /// A new connection from `src`, counted in the frontend's `src` tables.
    pub fn connection(tables: &[Arc<Table>], track: &[usize], src: IpAddr) -> Tracked {
        let mut t = Tracked::default();
        t.connection = true;
        let now = now_ms();
        t.now = now;
        for (slot, &ti) in t.slots.iter_mut().zip(track) {
            let Some(table) = tables.get(ti).filter(|t| t.cfg.key == TrackKey::Src) else { continue };
            if let Some(e) = table.entry(Key::Ip(src), now) {
                e.counters.lock().opened(now, e.period);
                *slot = Some((ti, e));
            }
        }
        t
    }

    /// One request, counted in every table the frontend tracks whose key it
    /// has (a header or cookie it does not carry counts nowhere).
    pub fn request(&mut self, tables: &[Arc<Table>], track: &[usize], keys: &RequestKeys<'_>) {
        let now = now_ms();
        self.now = now;
        let fields = &keys.head.fields;
        for (slot, &ti) in self.slots.iter_mut().zip(track) {
            let Some(table) = tables.get(ti) else { continue };
            let key = match &table.cfg.key {
                TrackKey::Src => Some(Key::Ip(keys.src)),
                TrackKey::Path => Some(Key::text(keys.head.path().as_bytes())),
                TrackKey::Header(h) => fields.get(h.as_str().as_bytes()).map(Key::text),
                TrackKey::Cookie(c) => {
                    fields.get_all(b"cookie").find_map(|f| cookie::find(f, c.as_bytes())).map(Key::text)
                }
            };
            *slot = key.and_then(|k| table.entry(k, now)).map(|e| {
                e.counters.lock().request(now, e.period);
                (ti, e)
            });
        }
    }

    /// The request's response: its status and bytes counted, the entries let go.
    pub fn finish(&mut self, status: u16, bytes_in: u64, bytes_out: u64) {
        if self.is_empty() {
            return;
        }
        let now = now_ms();
        for (_, e) in self.slots.iter_mut().filter_map(Option::take) {
            e.counters.lock().response(status, (bytes_in, bytes_out), now, e.period);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

impl CounterLookup for Tracked {
    fn counter(&self, table: usize, counter: Counter) -> Option<u64> {
        let (_, e) = self.slots.iter().flatten().find(|(t, _)| *t == table)?;
        Some(e.get(counter, self.now))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.connection {
            return;
        }
        let now = now_ms();
        for (_, e) in self.slots.iter().flatten() {
            e.counters.lock().closed(now);
        }
    }
}

/// What a frontend's connection rules make of a new connection.
pub enum Admit {
    /// Served; counted in the frontend's `src` tables while it lasts.
    Go(Tracked),
    Reject,
    SilentDrop,
}

/// A new connection from `src` on frontend `fe`: counted in its `src` tables
/// (a refused one too: its `conn_cnt` and `conn_rate` go up, as HAProxy
/// counts before it rejects), then its connection rules in order.
pub fn admit(tables: &[Arc<Table>], fe: &Frontend, src: IpAddr) -> Admit {
    if fe.track.is_empty() && fe.connection_rules.is_empty() {
        return Admit::Go(Tracked::default());
    }
    let tracked = Tracked::connection(tables, &fe.track, src);
    let no_headers = http::HeaderMap::new();
    let facts = RequestFacts {
        host: "",
        path: "",
        method: &http::Method::GET,
        headers: &no_headers,
        src,
        tls: false,
        sni: "",
        counters: &tracked,
        client_cert: None,
    };
    match fe.connection_rules.iter().find(|r| r.when.matches(&facts)).map(|r| r.action) {
        Some(ConnectionAction::Reject) => Admit::Reject,
        Some(ConnectionAction::SilentDrop) => Admit::SilentDrop,
        None => Admit::Go(tracked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn table(key: TrackKey, size: usize) -> Table {
        Table::new(TrackTable {
            name: "t".into(),
            key,
            size,
            expire: Duration::from_secs(30),
            period: Duration::from_secs(10),
            share: false,
        })
    }

    fn ip(n: u32) -> Key {
        Key::Ip(IpAddr::from(n.to_be_bytes()))
    }

    #[test]
    fn a_rate_slides_over_its_period() {
        let p = 10_000;
        let mut r = Rate::default();
        let t0 = 1_000_000;
        for i in 0..100 {
            r.add(1, t0 + i * 10, p);
        }
        assert_eq!(r.read(t0 + 999, p), 100, "all within the current period");
        // Half a period into the next: the 100 of the previous one weigh half.
        let start = t0 - t0 % p;
        let half = start + p + p / 2;
        let v = r.read(half, p);
        assert!((49..=51).contains(&v), "{v}");
        r.add(10, half, p);
        let v = r.read(half, p);
        assert!((59..=61).contains(&v), "{v}");
        // Two periods later, nothing.
        assert_eq!(r.read(start + 3 * p, p), 0);
        // A clock that has not reached the first period yet.
        let mut r = Rate::default();
        r.add(5, 3, p);
        assert_eq!(r.read(4, p), 5);
    }

    #[test]
    fn counters_of_connections_requests_and_responses() {
        let mut c = Counters::default();
        let (p, now) = (10_000, 50_000);
        c.opened(now, p);
        c.opened(now, p);
        c.request(now, p);
        c.response(404, (100, 2000), now, p);
        c.response(503, (10, 20), now, p);
        c.response(200, (1, 2), now, p);
        c.closed(now);
        let got: Vec<u64> = Counter::ALL.iter().map(|k| c.get(*k, now, p)).collect();
        // conn_cur cnt rate, req cnt rate, err cnt rate, fail cnt rate, in cnt rate, out cnt rate
        assert_eq!(got, vec![1, 2, 2, 1, 1, 1, 1, 1, 1, 111, 111, 2022, 2022]);
        assert!(!c.expired(now + 60_000, 30_000), "a connection is open");
        c.closed(now + 1);
        assert!(!c.expired(now + 20_000, 30_000) && c.expired(now + 30_001, 30_000));
    }

    #[test]
    fn a_full_table_drops_its_least_recently_used_entry_not_in_use() {
        let t = table(TrackKey::Src, 3);
        let now = 1_000;
        let held = t.entry(ip(1), now).unwrap();
        for n in 2..=3 {
            t.entry(ip(n), now).unwrap();
        }
        assert_eq!(t.len(), 3);
        // Full: ip(1) is the least recently used but held, so ip(2) goes.
        t.entry(ip(4), now).unwrap();
        let keys: Vec<String> = t.entries(now, 10).iter().map(|(k, _, _)| k.to_string()).collect();
        assert_eq!(t.len(), 3);
        assert!(keys.contains(&"0.0.0.1".to_string()) && !keys.contains(&"0.0.0.2".to_string()), "{keys:?}");
        // Every entry held: a new key is not counted.
        let _all: Vec<_> = (3..=4).map(|n| t.entry(ip(n), now).unwrap()).collect();
        assert!(t.entry(ip(9), now).is_none());
        assert_eq!(t.refused.load(Ordering::Relaxed), 1);
        drop(held);
    }

    #[test]
    fn entries_expire_and_a_key_coming_back_starts_again() {
        let t = table(TrackKey::Path, 100);
        let e = t.entry(Key::text(b"/a"), 1_000).unwrap();
        e.counters.lock().request(1_000, 10_000);
        drop(e);
        assert_eq!(t.entries(20_000, 10).len(), 1);
        assert_eq!(t.entries(31_001, 10).len(), 0, "expired at 30 s");
        let e = t.entry(Key::text(b"/a"), 31_001).unwrap();
        assert_eq!(e.get(Counter::HttpReqCnt, 31_001), 0, "counts from zero again");
        drop(e);
        // A new key drops the expired ones at the LRU end first.
        let t = table(TrackKey::Path, 100);
        for i in 0..50u32 {
            t.entry(Key::text(format!("/{i}").as_bytes()), 1_000).unwrap();
        }
        t.entry(Key::text(b"/late"), 40_000).unwrap();
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn ten_thousand_clients_stay_within_the_size() {
        let t = table(TrackKey::Src, 1000);
        for n in 0..10_000 {
            let e = t.entry(ip(n), 1_000 + u64::from(n)).unwrap();
            e.counters.lock().request(1_000, 10_000);
        }
        assert!(t.len() <= 1000, "{}", t.len());
        assert!(t.len() >= 990, "{}", t.len());
        // The most recent clients are the ones kept.
        assert!(t.entries(20_000, 2000).iter().any(|(k, _, _)| *k == ip(9_999)));
    }

    #[test]
    fn long_keys_are_cut() {
        let k = Key::text(&[b'a'; 10_000]);
        assert!(matches!(&k, Key::Text(t) if t.len() == MAX_KEY));
    }

    #[test]
    fn tracked_connection_and_request() {
        let tables =
            vec![Arc::new(table(TrackKey::Src, 100)), Arc::new(table(TrackKey::Header("x-key".parse().unwrap()), 100))];
        let src: IpAddr = "10.0.0.1".parse().unwrap();
        let conn = Tracked::connection(&tables, &[0, 1], src);
        assert_eq!(conn.counter(0, Counter::ConnCur), Some(1));
        assert_eq!(conn.counter(1, Counter::ConnCur), None, "a header table counts no connection");
        let mut head = RequestHead::default();
        head.fields.append(b"x-key", b"k1");
        let keys = RequestKeys { src, head: &head };
        let mut req = Tracked::default();
        req.request(&tables, &[0, 1], &keys);
        assert_eq!((req.counter(0, Counter::HttpReqCnt), req.counter(1, Counter::HttpReqRate)), (Some(1), Some(1)));
        req.finish(429, 10, 20);
        assert!(req.is_empty());
        let mut again = Tracked::default();
        again.request(&tables, &[0, 1], &keys);
        assert_eq!(again.counter(1, Counter::HttpErrCnt), Some(1));
        assert_eq!(again.counter(0, Counter::BytesOutCnt), Some(20));
        drop(conn);
        assert_eq!(again.counter(0, Counter::ConnCur), Some(0), "the connection let go");
        // Without the header, the header table does not count the request.
        let empty = RequestHead::default();
        let keys = RequestKeys { src, head: &empty };
        let mut r = Tracked::default();
        r.request(&tables, &[0, 1], &keys);
        assert_eq!(r.counter(1, Counter::HttpReqCnt), None);
    }
}
