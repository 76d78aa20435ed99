//! Live backends and servers, and server selection.
//!
//! A [`BackendRt`] is the running form of a configured backend: its servers with
//! their live state (weight, admin state, health, in-flight requests, counters) and
//! the balancing state. Selection is synchronous and does no I/O; waiting for a free
//! slot (`maxconn`) is the caller's job, through [`BackendRt::slot_freed`].
//!
//! Algorithms follow HAProxy's documented semantics:
//! - `roundrobin`: smooth weighted round robin on the live weights (a server of weight
//!   2 next to one of weight 1 gets 2 of every 3 requests, interleaved).
//! - `static-rr`: the same on the configured weights; live weight changes do not apply.
//! - `leastconn`: fewest in-flight requests relative to weight; round robin among equals.
//! - `first`: the first server (in config order) with a free slot.
//! - `source`, `uri`, `hdr(NAME)`: a hash of the client address, the path, or the
//!   header, mapped onto the weighted server list (HAProxy's map-based hashing);
//!   `hdr` falls back to round robin when the header is absent.
//! - `random`: power of two choices: two servers drawn by weight, the less loaded wins.

pub mod health;
pub(crate) mod shutdown;
pub mod sticky;
pub mod track;

use health::{CheckResult, CheckStatus, ServerHealth};
use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use tokio::sync::Notify;
use tollgate_config::{Backend, Balance, Server};
use tollgate_wire::hash::hash_bytes;

/// Administrative state, as HAProxy's `set server ... state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AdminState {
    /// Takes traffic.
    Ready = 0,
    /// No new sessions; clients already bound to it keep going.
    Drain = 1,
    /// No traffic at all.
    Maint = 2,
}

impl AdminState {
    /// "ready", "drain" or "maint", as the API and the command socket spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "ready" => Some(AdminState::Ready),
            "drain" => Some(AdminState::Drain),
            "maint" => Some(AdminState::Maint),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => AdminState::Drain,
            2 => AdminState::Maint,
            _ => AdminState::Ready,
        }
    }
}

/// Counters for one server. Relaxed atomics: they are statistics.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub requests: AtomicU64,
    pub connect_errors: AtomicU64,
    pub connections_opened: AtomicU64,
    /// Connections kept for reuse by reading the rest of a response its client left.
    pub connections_saved: AtomicU64,
    /// Request bytes sent to it (head and body payload).
    pub bytes_in: AtomicU64,
    /// Response bytes from it (body payload).
    pub bytes_out: AtomicU64,
    /// The most requests it had in flight at once.
    pub sessions_max: AtomicU64,
    /// Responses by class: index 0 = other, 1 = 1xx .. 5 = 5xx.
    pub responses: [AtomicU64; 6],
    /// Requests per second (from `requests`, see [`crate::runtime::report::tick`]).
    pub session_rate: crate::observe::counters::Rate,
}

impl ServerStats {
    /// A copy of `other`'s counts (a server whose config changed in a reload).
    fn copied(other: &ServerStats) -> Self {
        let c = |a: &AtomicU64| AtomicU64::new(a.load(Ordering::Relaxed));
        ServerStats {
            requests: c(&other.requests),
            connect_errors: c(&other.connect_errors),
            connections_opened: c(&other.connections_opened),
            connections_saved: c(&other.connections_saved),
            bytes_in: c(&other.bytes_in),
            bytes_out: c(&other.bytes_out),
            sessions_max: c(&other.sessions_max),
            responses: std::array::from_fn(|i| c(&other.responses[i])),
            session_rate: other.session_rate.copied(),
        }
    }
}

/// A server with its live state.
#[derive(Debug)]
pub struct ServerRt {
    pub cfg: Server,
    /// Position in the backend's server list.
    pub index: usize,
    weight: AtomicU32,
    admin: AtomicU8,
    /// When the admin state last changed (or the server was created).
    admin_changed: Mutex<std::time::Instant>,
    up: AtomicBool,
    inflight: AtomicU32,
    pub stats: ServerStats,
    /// Health checks' state and counters (health.rs; `up` is set through `set_up` under its lock).
    pub(crate) health: ServerHealth,
    /// Stays the same across reloads and runtime changes that carry the
    /// server: `shutdown sessions` names it to the workers (shutdown.rs).
    pub(crate) id: u64,
}

/// The next [`ServerRt::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl ServerRt {
    /// A server as the config has it: UP (its checks, if any, decide),
    /// except one whose name does not resolve, DOWN until it does; READY, or
    /// MAINT when `disabled`.
    pub fn new(cfg: Server, index: usize, backend: &Backend) -> Self {
        let disabled = cfg.disabled;
        ServerRt {
            health: ServerHealth::new(&cfg, backend),
            weight: AtomicU32::new(cfg.weight),
            up: AtomicBool::new(cfg.unresolved.is_none()),
            cfg,
            index,
            admin: AtomicU8::new(if disabled { AdminState::Maint } else { AdminState::Ready } as u8),
            admin_changed: Mutex::new(std::time::Instant::now()),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            inflight: AtomicU32::new(0),
            stats: ServerStats::default(),
        }
    }

    /// A server whose config changed in a reload, taking the running one's state:
    /// admin state, `weight` (decided by [`crate::runtime::reload::carry`]), counters, and
    /// its health when `health` (same checks of the same address) or else a fresh
    /// health state, checked first as a new server is. In-flight requests stay
    /// counted on `old`, which the connections that hold them keep.
    pub fn carried(cfg: Server, index: usize, backend: &Backend, old: &ServerRt, weight: u32, health: bool) -> Self {
        let fresh = ServerRt::new(cfg, index, backend);
        let (health, up) = if health {
            (ServerHealth::carried(&fresh.cfg, backend, &old.health), old.is_up())
        } else {
            // UP, unless its name does not resolve.
            let up = fresh.is_up();
            (fresh.health, up)
        };
        ServerRt {
            weight: AtomicU32::new(weight.min(256)),
            admin: AtomicU8::new(old.admin.load(Ordering::Relaxed)),
            admin_changed: Mutex::new(*old.admin_changed.lock()),
            up: AtomicBool::new(up),
            stats: ServerStats::copied(&old.stats),
            health,
            id: old.id,
            ..fresh
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.cfg.addr
    }
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }
    pub fn set_weight(&self, w: u32) {
        self.weight.store(w.min(256), Ordering::Relaxed);
    }
    pub fn admin(&self) -> AdminState {
        AdminState::from_u8(self.admin.load(Ordering::Relaxed))
    }
    pub fn set_admin(&self, s: AdminState) {
        let was = self.admin.swap(s as u8, Ordering::Relaxed);
        if was != s as u8 {
            *self.admin_changed.lock() = std::time::Instant::now();
        }
    }
    /// `f`, unless this server's sessions are shut down first (`shutdown
    /// sessions server`, shutdown.rs), `watch` being the connection's entry.
    /// `f` is polled first: one that is ready at once (a response already
    /// read whole) never marks its wait.
    /// `f` comes pinned where it was made (`std::pin::pin!`): moving a large
    /// future in here cost a copy per request.
    pub(crate) fn unless_shut<'a, F: Future>(
        &self,
        f: Pin<&'a mut F>,
        watch: shutdown::WatchId,
    ) -> shutdown::UnlessShut<'a, F> {
        shutdown::UnlessShut::new(f, watch, self.id)
    }
    /// When the admin state last changed.
    pub fn admin_changed(&self) -> std::time::Instant {
        *self.admin_changed.lock()
    }
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }
    /// Passive health checks: the data path reports each request's outcome here
    /// (`ok` false: connection error or 5xx). See [`ServerHealth::observe`].
    pub fn observe(&self, ok: bool) {
        self.health.observe(ok, |up| self.set_up(up))
    }
    /// Takes the server DOWN now, through its health state (it comes back
    /// after `rise` passed checks).
    pub fn mark_down(&self, reason: &str) {
        self.health.mark_down(reason.to_string(), |up| self.set_up(up))
    }
    /// Applies an active check's result (check.rs).
    pub fn apply_check(&self, result: CheckResult) {
        self.health.apply(result, |up| self.set_up(up))
    }
    /// Health state, last check, time since the last change, check counters.
    pub fn check_status(&self) -> CheckStatus {
        self.health.status()
    }
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }
    fn has_slot(&self) -> bool {
        self.cfg.maxconn.is_none_or(|m| self.inflight() < m)
    }
    /// May take a new (non-sticky) request: READY, up, weight > 0.
    fn usable(&self) -> bool {
        self.admin() == AdminState::Ready && self.is_up() && self.weight() > 0
    }
    /// May take a request from a client already bound to it (cookie, stick
    /// table): up and not in MAINT. DRAIN and weight 0 still serve such clients,
    /// as HAProxy's do.
    pub fn accepts_sticky(&self) -> bool {
        self.admin() != AdminState::Maint && self.is_up()
    }
}

/// What a request brings to hashing algorithms.
pub struct SelectInput<'a> {
    pub src: IpAddr,
    pub path: &'a str,
    pub headers: &'a dyn tollgate_config::HeaderLookup,
}

/// The outcome of one selection.
pub enum Pick {
    /// A slot on this server is taken; release it with [`Slot`]'s drop.
    Server(Slot),
    /// Usable servers exist but all are at their `maxconn`: wait for a slot.
    Full,
    /// No server can take the request.
    NoServer,
}

/// An in-flight request on a server. Dropping it frees the slot.
pub struct Slot {
    pub server: Arc<ServerRt>,
    backend: Arc<BackendRt>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.server.inflight.fetch_sub(1, Ordering::Relaxed);
        self.backend.shared.inflight.fetch_sub(1, Ordering::Relaxed);
        if self.server.cfg.maxconn.is_some() {
            self.backend.shared.freed.notify_one();
        }
    }
}

#[derive(Debug, Default)]
struct LbState {
    /// Smooth weighted round robin: current weight per server.
    current: Vec<i64>,
    /// Rotating start for leastconn ties and other scans.
    next: usize,
    rng: u64,
}

/// A backend with its live servers.
#[derive(Debug)]
pub struct BackendRt {
    pub cfg: Arc<Backend>,
    pub servers: Vec<Arc<ServerRt>>,
    /// `stick = { on = "source" }`: where each client address was sent.
    /// Shared with the next generation after a reload that keeps the policy and
    /// the servers' order (entries are server indexes).
    pub stick: Option<Arc<sticky::StickTable>>,
    state: Mutex<LbState>,
    /// Shared by every generation of a backend across reloads.
    shared: Arc<BackendShared>,
}

/// What every generation of a backend shares across reloads: a slot freed under
/// one config wakes a request queued under another, and the counts go on.
#[derive(Debug, Default)]
pub struct BackendShared {
    freed: Notify,
    /// Requests waiting for a slot.
    pub queue: Arc<crate::observe::counters::QueueStats>,
    /// Requests in flight on any of its servers, and the most at once.
    pub inflight: AtomicU64,
    pub sessions_max: AtomicU64,
    /// Requests per second (see [`crate::runtime::report::tick`]).
    pub session_rate: crate::observe::counters::Rate,
    /// From a request sent to a server to its response head.
    pub response_time: crate::observe::counters::Histogram,
    /// Opening a connection to a server (TCP, the PROXY header, TLS, HTTP/2).
    pub connect_time: crate::observe::counters::Histogram,
}

impl std::ops::Deref for BackendRt {
    type Target = BackendShared;
    fn deref(&self) -> &BackendShared {
        &self.shared
    }
}

impl BackendRt {
    pub fn new(cfg: Arc<Backend>) -> Arc<Self> {
        let servers = cfg
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| Arc::new(ServerRt::new(s.clone(), i, &cfg)))
            .collect::<Vec<_>>();
        let stick = cfg.stick.map(|p| Arc::new(sticky::StickTable::new(p)));
        Self::with_servers(cfg, servers, Arc::default(), stick)
    }

    /// The next generation of `previous` after a reload: `servers` (built by the
    /// reload, some of them `previous`'s own) under the new `cfg`.
    /// The stick table is kept when its policy and the servers (names, in order)
    /// are unchanged, so bound clients stay bound across the reload; with
    /// servers added or removed, its entries for the servers still there are.
    pub(crate) fn succeed(previous: &BackendRt, cfg: Arc<Backend>, servers: Vec<Arc<ServerRt>>) -> Arc<Self> {
        let same_servers = previous.servers.len() == servers.len()
            && previous.servers.iter().zip(&servers).all(|(a, b)| a.cfg.name == b.cfg.name);
        let stick = match (&previous.stick, cfg.stick) {
            (Some(t), Some(p)) if previous.cfg.stick == Some(p) && same_servers => Some(t.clone()),
            (Some(t), Some(p)) if previous.cfg.stick == Some(p) => {
                let moved = |i: usize| {
                    let name = &previous.servers.get(i)?.cfg.name;
                    servers.iter().position(|s| &s.cfg.name == name)
                };
                Some(Arc::new(t.remapped(p, moved)))
            }
            (_, p) => p.map(|p| Arc::new(sticky::StickTable::new(p))),
        };
        Self::with_servers(cfg, servers, previous.shared.clone(), stick)
    }

    fn with_servers(
        cfg: Arc<Backend>,
        servers: Vec<Arc<ServerRt>>,
        shared: Arc<BackendShared>,
        stick: Option<Arc<sticky::StickTable>>,
    ) -> Arc<Self> {
        Arc::new(BackendRt {
            state: Mutex::new(LbState { current: vec![0; servers.len()], next: 0, rng: 0x9E37_79B9_7F4A_7C15 }),
            servers,
            stick,
            cfg,
            shared,
        })
    }

    /// The server whose persistence cookie value is `value`.
    pub fn server_by_cookie(&self, value: &[u8]) -> Option<&Arc<ServerRt>> {
        self.servers.iter().find(|s| s.cfg.cookie.as_bytes() == value)
    }

    /// Takes a slot on `server` if it is below its `maxconn`.
    pub fn try_take(self: &Arc<Self>, server: &Arc<ServerRt>) -> Option<Slot> {
        server.has_slot().then(|| self.take(server))
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    pub fn server(&self, name: &str) -> Option<&Arc<ServerRt>> {
        self.servers.iter().find(|s| s.cfg.name == name)
    }

    /// Resolves when some server of this backend frees a slot.
    pub async fn slot_freed(&self) {
        self.shared.freed.notified().await
    }

    /// Picks a server for a request. `exclude` lists server indexes already tried.
    pub fn select(self: &Arc<Self>, input: &SelectInput<'_>, exclude: &[usize]) -> Pick {
        // Primaries first; backups only when no primary is usable.
        let mut any_full = false;
        for backup in [false, true] {
            let mut candidates: Vec<&Arc<ServerRt>> = Vec::with_capacity(self.servers.len());
            for s in &self.servers {
                if s.cfg.backup == backup && s.usable() && !exclude.contains(&s.index) {
                    if s.has_slot() {
                        candidates.push(s);
                    } else {
                        any_full = true;
                    }
                }
            }
            if candidates.is_empty() {
                if any_full {
                    return Pick::Full;
                }
                continue;
            }
            let chosen = self.choose(&candidates, input);
            return Pick::Server(self.take(chosen));
        }
        Pick::NoServer
    }

    /// Takes a slot on a given server (sticky routing), if it can serve.
    pub fn take_slot(self: &Arc<Self>, server: &Arc<ServerRt>) -> Slot {
        self.take(server)
    }

    fn take(self: &Arc<Self>, s: &Arc<ServerRt>) -> Slot {
        let cur = s.inflight.fetch_add(1, Ordering::Relaxed) as u64 + 1;
        s.stats.sessions_max.fetch_max(cur, Ordering::Relaxed);
        let all = self.shared.inflight.fetch_add(1, Ordering::Relaxed) + 1;
        self.shared.sessions_max.fetch_max(all, Ordering::Relaxed);
        s.stats.requests.fetch_add(1, Ordering::Relaxed);
        Slot { server: s.clone(), backend: self.clone() }
    }

    fn choose<'a>(&self, c: &[&'a Arc<ServerRt>], input: &SelectInput<'_>) -> &'a Arc<ServerRt> {
        if c.len() == 1 {
            return c[0];
        }
        match &self.cfg.balance {
            Balance::RoundRobin => self.smooth_rr(c, |s| s.weight()),
            Balance::StaticRr => self.smooth_rr(c, |s| s.cfg.weight),
            Balance::LeastConn => self.least_conn(c),
            Balance::First => c[0],
            Balance::Source => {
                let h = match input.src {
                    IpAddr::V4(v4) => hash_bytes(&v4.octets()),
                    IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                        Some(v4) => hash_bytes(&v4.octets()),
                        None => hash_bytes(&v6.octets()),
                    },
                };
                weighted_map(c, h)
            }
            Balance::Uri => weighted_map(c, hash_bytes(input.path.as_bytes())),
            Balance::Hdr(name) => {
                let mut h = None;
                input.headers.any_value(name.as_str(), &mut |v| {
                    h = Some(hash_bytes(v));
                    true
                });
                match h {
                    Some(h) => weighted_map(c, h),
                    None => self.smooth_rr(c, |s| s.weight()),
                }
            }
            Balance::Random => {
                let (a, b) = {
                    let mut st = self.state.lock();
                    let a = weighted_map(c, next_rand(&mut st.rng));
                    let b = weighted_map(c, next_rand(&mut st.rng));
                    (a, b)
                };
                // Compare load relative to weight: a/wa <= b/wb.
                let la = a.inflight() as u64 * b.weight().max(1) as u64;
                let lb = b.inflight() as u64 * a.weight().max(1) as u64;
                if la <= lb { a } else { b }
            }
        }
    }

    /// nginx's smooth weighted round robin: each pick adds every candidate's weight to
    /// its current value, takes the largest, and subtracts the total from it.
    fn smooth_rr<'a>(&self, c: &[&'a Arc<ServerRt>], weight: impl Fn(&ServerRt) -> u32) -> &'a Arc<ServerRt> {
        let mut st = self.state.lock();
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        for (i, s) in c.iter().enumerate() {
            let w = weight(s).max(1) as i64;
            total += w;
            let cur = &mut st.current[s.index];
            *cur += w;
            if best.is_none_or(|(_, b)| *cur > b) {
                best = Some((i, *cur));
            }
        }
        let (i, _) = best.expect("candidates is not empty");
        st.current[c[i].index] -= total;
        c[i]
    }

    fn least_conn<'a>(&self, c: &[&'a Arc<ServerRt>]) -> &'a Arc<ServerRt> {
        let mut st = self.state.lock();
        let start = st.next % c.len();
        st.next = st.next.wrapping_add(1);
        let mut best = c[start];
        for k in 1..c.len() {
            let s = c[(start + k) % c.len()];
            // (inflight + 1) / weight, compared without division.
            let ls = (s.inflight() as u64 + 1) * best.weight().max(1) as u64;
            let lb = (best.inflight() as u64 + 1) * s.weight().max(1) as u64;
            if ls < lb {
                best = s;
            }
        }
        best
    }
}

/// Maps a hash onto the candidates in proportion to their weights.
fn weighted_map<'a>(c: &[&'a Arc<ServerRt>], h: u64) -> &'a Arc<ServerRt> {
    let total: u64 = c.iter().map(|s| s.weight().max(1) as u64).sum();
    let mut point = h % total;
    for s in c {
        let w = s.weight().max(1) as u64;
        if point < w {
            return s;
        }
        point -= w;
    }
    c[c.len() - 1]
}

/// xorshift64*: fast, good enough to draw servers (and request ids); `state`
/// must not be 0.
pub(crate) fn next_rand(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn backend(balance: Balance, servers: &[(&str, u32, bool, Option<u32>)]) -> Arc<BackendRt> {
        let servers = servers
            .iter()
            .enumerate()
            .map(|(i, (name, weight, backup, maxconn))| Server {
                name: name.to_string(),
                addr: format!("127.0.0.1:{}", 3000 + i).parse().unwrap(),
                weight: *weight,
                backup: *backup,
                maxconn: *maxconn,
                check: false,
                check_port: None,
                cookie: name.to_string(),
                send_proxy: None,
                tls: None,
                proto: Default::default(),
                keep_alive: std::time::Duration::from_secs(4),
                dns: None,
                unresolved: None,
                disabled: false,
                discovered: false,
            })
            .collect();
        BackendRt::new(Arc::new(Backend {
            name: "b".into(),
            mode: tollgate_config::Mode::Http,
            balance,
            timeouts: Default::default(),
            retries: 3,
            redispatch: true,
            check: None,
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
        }))
    }

    #[test]
    fn a_disabled_server_starts_in_maintenance() {
        let b = backend(Balance::RoundRobin, &[("s1", 1, false, None)]);
        let mut cfg = b.servers[0].cfg.clone();
        cfg.disabled = true;
        let s = ServerRt::new(cfg, 0, &b.cfg);
        assert_eq!(s.admin(), AdminState::Maint);
        assert_eq!(b.servers[0].admin(), AdminState::Ready);
    }

    fn input<'a>(headers: &'a http::HeaderMap, src: &str, path: &'a str) -> SelectInput<'a> {
        SelectInput { src: src.parse().unwrap(), path, headers }
    }

    fn pick(b: &Arc<BackendRt>, i: &SelectInput<'_>) -> String {
        match b.select(i, &[]) {
            Pick::Server(slot) => slot.server.cfg.name.clone(),
            Pick::Full => "FULL".into(),
            Pick::NoServer => "NONE".into(),
        }
    }

    fn count(b: &Arc<BackendRt>, n: usize, mut i: impl FnMut(usize) -> (String, String)) -> HashMap<String, usize> {
        let h = http::HeaderMap::new();
        let mut out = HashMap::new();
        for k in 0..n {
            let (src, path) = i(k);
            *out.entry(pick(b, &input(&h, &src, &path))).or_default() += 1;
        }
        out
    }

    #[test]
    fn roundrobin_even_and_weighted() {
        let b = backend(Balance::RoundRobin, &[("s1", 1, false, None), ("s2", 1, false, None)]);
        let c = count(&b, 1000, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!((c["s1"], c["s2"]), (500, 500));
        let b = backend(Balance::RoundRobin, &[("s1", 2, false, None), ("s2", 1, false, None)]);
        let c = count(&b, 1000, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!((c["s1"], c["s2"]), (667, 333));
        // Smooth: never three in a row for 2:1.
        let h = http::HeaderMap::new();
        let seq: Vec<String> = (0..6).map(|_| pick(&b, &input(&h, "1.1.1.1", "/"))).collect();
        assert!(!seq.windows(3).any(|w| w.iter().all(|s| s == "s1")), "{seq:?}");
    }

    #[test]
    fn roundrobin_follows_live_weight_static_rr_does_not() {
        let b = backend(Balance::RoundRobin, &[("s1", 1, false, None), ("s2", 1, false, None)]);
        b.server("s1").unwrap().set_weight(3);
        let c = count(&b, 400, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!((c["s1"], c["s2"]), (300, 100));
        let b = backend(Balance::StaticRr, &[("s1", 1, false, None), ("s2", 1, false, None)]);
        b.server("s1").unwrap().set_weight(3);
        let c = count(&b, 400, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!((c["s1"], c["s2"]), (200, 200));
    }

    #[test]
    fn weight_zero_drain_maint_down_are_skipped_backup_takes_over() {
        let b = backend(Balance::RoundRobin, &[("s1", 1, false, None), ("s2", 0, false, None), ("bk", 1, true, None)]);
        let c = count(&b, 10, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!(c["s1"], 10);
        b.server("s1").unwrap().set_admin(AdminState::Drain);
        let c = count(&b, 10, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!(c["bk"], 10, "backup serves when no primary is usable");
        b.server("bk").unwrap().set_up(false);
        let c = count(&b, 3, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!(c["NONE"], 3);
    }

    #[test]
    fn leastconn_prefers_idle_and_rotates_ties() {
        let b = backend(Balance::LeastConn, &[("s1", 1, false, None), ("s2", 1, false, None), ("s3", 1, false, None)]);
        let h = http::HeaderMap::new();
        let i = input(&h, "1.1.1.1", "/");
        // Hold two requests on whichever servers get them; the third goes to the idle one.
        let a = match b.select(&i, &[]) {
            Pick::Server(s) => s,
            _ => panic!(),
        };
        let c = match b.select(&i, &[]) {
            Pick::Server(s) => s,
            _ => panic!(),
        };
        assert_ne!(a.server.index, c.server.index);
        let d = match b.select(&i, &[]) {
            Pick::Server(s) => s,
            _ => panic!(),
        };
        let mut seen = vec![a.server.index, c.server.index, d.server.index];
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
        drop((a, c, d));
        // All idle: ties rotate.
        let c = count(&b, 300, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!((c["s1"], c["s2"], c["s3"]), (100, 100, 100));
    }

    #[test]
    fn first_fills_in_order_with_maxconn() {
        let b = backend(Balance::First, &[("s1", 1, false, Some(2)), ("s2", 1, false, Some(1))]);
        let h = http::HeaderMap::new();
        let i = input(&h, "1.1.1.1", "/");
        let mut held = Vec::new();
        let mut names = Vec::new();
        for _ in 0..3 {
            match b.select(&i, &[]) {
                Pick::Server(s) => {
                    names.push(s.server.cfg.name.clone());
                    held.push(s);
                }
                _ => panic!(),
            }
        }
        assert_eq!(names, ["s1", "s1", "s2"]);
        assert!(matches!(b.select(&i, &[]), Pick::Full));
        held.pop();
        assert!(matches!(b.select(&i, &[]), Pick::Server(_)));
    }

    #[test]
    fn hashing_is_stable_and_spreads() {
        for balance in [Balance::Source, Balance::Uri] {
            let b = backend(balance.clone(), &[("s1", 1, false, None), ("s2", 1, false, None)]);
            let h = http::HeaderMap::new();
            for k in 0..50 {
                let src = format!("10.0.{}.{}", k / 250, k % 250);
                let path = format!("/item/{k}");
                let first = pick(&b, &input(&h, &src, &path));
                for _ in 0..5 {
                    assert_eq!(pick(&b, &input(&h, &src, &path)), first, "{balance:?} must be sticky");
                }
            }
            let c =
                count(&b, 1000, |k| (format!("10.{}.{}.{}", k / 65536, (k / 256) % 256, k % 256), format!("/p/{k}")));
            assert!(c["s1"] > 400 && c["s2"] > 400, "{balance:?} spread {c:?}");
        }
    }

    #[test]
    fn hdr_hashes_header_and_falls_back_to_rr() {
        let b = backend(
            Balance::Hdr(http::HeaderName::from_static("x-user")),
            &[("s1", 1, false, None), ("s2", 1, false, None)],
        );
        let mut h = http::HeaderMap::new();
        h.insert("x-user", "alice".parse().unwrap());
        let first = pick(&b, &input(&h, "1.1.1.1", "/"));
        for _ in 0..10 {
            assert_eq!(pick(&b, &input(&h, "1.1.1.1", "/")), first);
        }
        let c = count(&b, 100, |_| ("1.1.1.1".into(), "/".into()));
        assert_eq!((c["s1"], c["s2"]), (50, 50));
    }

    #[test]
    fn random_p2c_avoids_the_loaded_server() {
        let b = backend(Balance::Random, &[("s1", 1, false, None), ("s2", 1, false, None)]);
        // Load s1 with 5 held requests: p2c must then send (almost) everything to s2.
        let held: Vec<Slot> = (0..5).map(|_| b.take_slot(&b.servers[0].clone())).collect();
        let c = count(&b, 200, |_| ("1.1.1.1".into(), "/".into()));
        drop(held);
        assert!(c.get("s2").copied().unwrap_or(0) > c.get("s1").copied().unwrap_or(0) * 2, "{c:?}");
        let c = count(&b, 2000, |_| ("1.1.1.1".into(), "/".into()));
        assert!(c["s1"] > 800 && c["s2"] > 800, "{c:?}");
    }

    #[test]
    fn exclude_skips_tried_servers() {
        let b = backend(Balance::RoundRobin, &[("s1", 1, false, None), ("s2", 1, false, None)]);
        let h = http::HeaderMap::new();
        for _ in 0..10 {
            match b.select(&input(&h, "1.1.1.1", "/"), &[0]) {
                Pick::Server(s) => assert_eq!(s.server.cfg.name, "s2"),
                _ => panic!(),
            }
        }
        assert!(matches!(b.select(&input(&h, "1.1.1.1", "/"), &[0, 1]), Pick::NoServer));
    }
}
