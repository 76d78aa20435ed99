//! The process's file descriptor budget, and the errors that say the process
//! (not a peer) ran out of something.
//!
//! Every client connection usually has one server connection, so each takes
//! two descriptors; listeners (one per worker and bind), the workers' event
//! loops, health checks, splice pipes and files take the rest. Without a
//! limit below what `RLIMIT_NOFILE` allows, a burst of clients takes every
//! descriptor: then connects to servers and health checks fail with `EMFILE`
//! inside the proxy, and a check that counted that against the server would
//! take every server DOWN (issue 33: 1,305 requests got 503 in one run).
//! [`FdBudget`] derives `global.max_connections` from the limit when the
//! file leaves it out ([`settle`]); [`Shortage`] tells a local failure from a
//! server's, so that neither health checks, passive checks, error counters
//! nor retries count it against the server (the request gets a 503 whose log
//! reason says `local-...`).

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most client connections a derived `max_connections` allows (the fixed
/// default before it was derived): past this, other limits (memory, ports)
/// matter more than descriptors.
pub const DERIVED_MAX: usize = tollgate_config::DEFAULT_MAX_CONNECTIONS;
/// Descriptors set aside whatever the config: standard input, output and
/// error, the access log, the admin listener and command socket, the
/// pidfile, the cache disk tiers' files being read or written, the health
/// checker's event loop, and room for what a reload opens before it closes
/// the old.
pub const FIXED_RESERVE: u64 = 64;
/// Descriptors each worker holds besides its listeners: its event loop's
/// epoll and wake-up descriptors, with room to spare.
pub const PER_WORKER: u64 = 4;
/// The limit assumed when the system reports none (RLIM_INFINITY).
const UNLIMITED: u64 = 1 << 20;

/// The soft file descriptor limit as it was found at start, and as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit in force.
    pub current: u64,
    /// The soft limit found, when it was raised to the hard limit.
    pub raised_from: Option<u64>,
}

/// The process's soft `RLIMIT_NOFILE`. The first call raises it to the hard
/// limit, as HAProxy does at start, so that the derived `max_connections`
/// (and the splice pipes, splice.rs) have what the administrator allowed
/// rather than the shell's default of 1024; if that fails, the soft limit
/// stays as it was. Later calls return the same answer.
pub fn nofile() -> FdLimit {
    static LIMIT: OnceLock<FdLimit> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let found = getrlimit(Resource::Nofile);
        let soft = found.current.unwrap_or(UNLIMITED);
        match found.maximum {
            // An unlimited hard limit (not on Linux, where it is bounded by
            // fs.nr_open) is not a value to ask for: keep the soft one.
            Some(hard) if hard > soft => {
                match setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: Some(hard) }) {
                    Ok(()) => FdLimit { current: hard, raised_from: Some(soft) },
                    Err(_) => FdLimit { current: soft, raised_from: None },
                }
            }
            _ => FdLimit { current: soft, raised_from: None },
        }
    })
}

/// The most splice pipes open at once under a limit of `nofile` descriptors:
/// an eighth of it, so that pipes (two descriptors each) take at most a quarter.
pub fn pipes_for(nofile: u64) -> usize {
    usize::try_from(nofile / 8).unwrap_or(usize::MAX)
}

/// What the descriptors of a process running a config go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    /// The soft `RLIMIT_NOFILE`.
    pub nofile: u64,
    pub workers: usize,
    /// Listening addresses (each open once per worker).
    pub listeners: usize,
    /// Servers with active checks (one connection each while a check runs).
    pub checked_servers: usize,
    /// `global.splice`: pipes may take a quarter of the descriptors ([`pipes_for`]).
    pub splice: bool,
}

impl FdBudget {
    /// Descriptors not available to connections: [`FIXED_RESERVE`], each
    /// worker's listeners and event loop ([`PER_WORKER`]), one per checked
    /// server, and the splice pipes' share when splice is on.
    pub fn reserve(&self) -> u64 {
        let workers = self.workers as u64;
        let pipes = if self.splice { 2 * pipes_for(self.nofile) as u64 } else { 0 };
        FIXED_RESERVE
            .saturating_add(workers.saturating_mul(self.listeners as u64 + PER_WORKER))
            .saturating_add(self.checked_servers as u64)
            .saturating_add(pipes)
    }

    /// `max_connections` when the config leaves it out: half of what the
    /// reserve leaves (a client connection and its server connection each),
    /// at least 1 and at most [`DERIVED_MAX`].
    pub fn max_connections(&self) -> usize {
        let spare = self.nofile.saturating_sub(self.reserve()) / 2;
        usize::try_from(spare).unwrap_or(usize::MAX).clamp(1, DERIVED_MAX)
    }

    /// The limit `max_connections` client connections need ([`FdBudget::fits`]).
    pub fn needed(&self, max_connections: usize) -> u64 {
        (max_connections as u64).saturating_mul(2).saturating_add(self.reserve())
    }

    /// Whether `max_connections` client connections, each with a server
    /// connection, fit in the limit next to the reserve.
    pub fn fits(&self, max_connections: usize) -> bool {
        self.needed(max_connections) <= self.nofile
    }
}

/// How `global.max_connections` was settled at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The figure in force.
    pub max_connections: usize,
    /// Derived from the limit (the file left the key out).
    pub derived: bool,
    /// Whether that many connections fit in the limit ([`FdBudget::fits`]).
    pub fits: bool,
}

/// `global.max_connections` under `budget`: the file's value when it sets one
/// (`set`), else [`FdBudget::max_connections`].
pub fn decide(set: Option<usize>, budget: &FdBudget) -> Settled {
    let (max_connections, derived) = match set {
        Some(n) => (n, false),
        None => (budget.max_connections(), true),
    };
    Settled { max_connections, derived, fits: budget.fits(max_connections) }
}

/// Settles `global.max_connections` at start ([`decide`]) under the
/// process's limit ([`nofile`], raised to the hard limit by the first call),
/// writes the figure in force into `global` and logs it; warns, as HAProxy
/// does, when the file asks for more connections than the limit allows.
pub fn settle(global: &mut tollgate_config::Global, budget: FdBudget, raised_from: Option<u64>) -> Settled {
    let nofile = budget.nofile;
    if let Some(soft) = raised_from {
        tracing::info!("file descriptor limit raised from {soft} to the hard limit, {nofile}");
    }
    let settled = decide(global.max_connections_set.then_some(global.max_connections), &budget);
    let n = settled.max_connections;
    let reserve = budget.reserve();
    if settled.derived {
        tracing::info!(
            "global.max_connections: {n}, derived from the file descriptor limit {nofile} \
             ({reserve} kept for listeners, event loops, health checks, pipes and files; two per connection)"
        );
    } else {
        tracing::info!("global.max_connections: {n} (file descriptor limit {nofile})");
    }
    if !settled.fits {
        tracing::warn!(
            "the file descriptor limit {nofile} is too low for global.max_connections = {n}: \
             {n} connections and their server connections need {} (about {} fit); raise the limit \
             (ulimit -n, systemd LimitNOFILE=) or lower max_connections. Meanwhile, when descriptors \
             run out, accepts pause and requests that cannot reach a server get 503 (local-fd-limit)",
            budget.needed(n),
            budget.max_connections(),
        );
    }
    global.max_connections = n;
    settled
}

/// A resource of this process or of the system ran out: the operation failed
/// for a reason of the proxy's own, not the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortage {
    /// EMFILE: the process is at its descriptor limit.
    ProcessFds,
    /// ENFILE: the system is at its descriptor limit.
    SystemFds,
    /// ENOBUFS: no socket buffer space.
    Buffers,
    /// ENOMEM.
    Memory,
    /// EADDRNOTAVAIL on connect: no local port left to connect from.
    Ports,
}

impl Shortage {
    /// The shortage `e` reports, if it is one.
    pub fn of(e: &io::Error) -> Option<Shortage> {
        match e.raw_os_error()? {
            libc::EMFILE => Some(Shortage::ProcessFds),
            libc::ENFILE => Some(Shortage::SystemFds),
            libc::ENOBUFS => Some(Shortage::Buffers),
            libc::ENOMEM => Some(Shortage::Memory),
            libc::EADDRNOTAVAIL => Some(Shortage::Ports),
            _ => None,
        }
    }

    /// The access log's termination reason for a request it failed.
    pub fn reason(self) -> &'static str {
        match self {
            Shortage::ProcessFds | Shortage::SystemFds => "local-fd-limit",
            Shortage::Buffers | Shortage::Memory => "local-no-memory",
            Shortage::Ports => "local-no-ports",
        }
    }
}

impl std::fmt::Display for Shortage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shortage::ProcessFds => "this process is out of file descriptors (EMFILE)",
            Shortage::SystemFds => "the system is out of file descriptors (ENFILE)",
            Shortage::Buffers => "the system is out of socket buffers (ENOBUFS)",
            Shortage::Memory => "out of memory (ENOMEM)",
            Shortage::Ports => "no local port left to connect from (EADDRNOTAVAIL)",
        })
    }
}

/// How often a [`Throttle`]d warning is logged at most.
pub const THROTTLE_EVERY: Duration = Duration::from_secs(10);

/// Lets a warning that can repeat thousands of times a second (every accept,
/// connect or check failing for want of descriptors) through once per
/// [`THROTTLE_EVERY`], counting the ones held back in between.
pub struct Throttle {
    /// When the next one may go, in milliseconds since [`epoch`] (0: now).
    next_ms: AtomicU64,
    held: AtomicU64,
}

impl Throttle {
    pub const fn new() -> Self {
        Throttle { next_ms: AtomicU64::new(0), held: AtomicU64::new(0) }
    }

    /// `Some(held back since the last one)` when this warning is to be logged.
    pub fn ready(&self) -> Option<u64> {
        self.ready_at(epoch().elapsed().as_millis() as u64)
    }

    fn ready_at(&self, now_ms: u64) -> Option<u64> {
        let next = self.next_ms.load(Ordering::Relaxed);
        let later = now_ms.saturating_add(THROTTLE_EVERY.as_millis() as u64);
        if now_ms >= next && self.next_ms.compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new()
    }
}

/// The instant throttles count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(nofile: u64, splice: bool) -> FdBudget {
        FdBudget { nofile, workers: 2, listeners: 1, checked_servers: 3, splice }
    }

    /// reserve = 64 + 2 workers x (1 listener + 4) + 3 checked servers
    /// (+ 1024 / 8 pipes x 2 descriptors with splice); then half of the rest.
    #[test]
    fn max_connections_is_derived_from_the_fd_limit() {
        assert_eq!(budget(1024, false).reserve(), 77);
        assert_eq!(budget(1024, false).max_connections(), (1024 - 77) / 2);
        assert_eq!(budget(1024, true).reserve(), 77 + 256);
        assert_eq!(budget(1024, true).max_connections(), (1024 - 333) / 2);
        // A high limit: capped.
        assert_eq!(budget(1 << 20, true).max_connections(), DERIVED_MAX);
        // A limit the reserve alone exceeds: still one connection.
        assert_eq!(budget(50, true).max_connections(), 1);
        // More workers and listeners take more.
        let wide = FdBudget { workers: 16, listeners: 4, ..budget(4096, false) };
        assert_eq!(wide.max_connections(), (4096 - (64 + 16 * 8 + 3)) / 2);
    }

    #[test]
    fn what_fits_is_what_the_derivation_gives() {
        for nofile in [256, 1024, 4096, 65536] {
            for splice in [false, true] {
                let b = budget(nofile, splice);
                let n = b.max_connections();
                assert!(b.fits(n), "{nofile} {splice}: {n}");
                assert!(!b.fits(n + 1), "{nofile} {splice}: {n} + 1");
            }
        }
    }

    #[test]
    fn shortages_are_told_from_peer_errors() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(Shortage::of(&e(libc::EMFILE)), Some(Shortage::ProcessFds));
        assert_eq!(Shortage::of(&e(libc::ENFILE)), Some(Shortage::SystemFds));
        assert_eq!(Shortage::of(&e(libc::ENOBUFS)), Some(Shortage::Buffers));
        assert_eq!(Shortage::of(&e(libc::ENOMEM)), Some(Shortage::Memory));
        assert_eq!(Shortage::of(&e(libc::EADDRNOTAVAIL)), Some(Shortage::Ports));
        // The server's (or the network's) doing: counted against the server.
        for peer in [libc::ECONNREFUSED, libc::ECONNRESET, libc::ETIMEDOUT, libc::EHOSTUNREACH, libc::ENETUNREACH] {
            assert_eq!(Shortage::of(&e(peer)), None, "{peer}");
        }
        assert_eq!(Shortage::of(&io::Error::from(io::ErrorKind::ConnectionRefused)), None);
        assert_eq!(Shortage::of(&io::Error::other("x")), None);
        assert_eq!(Shortage::ProcessFds.reason(), "local-fd-limit");
        assert_eq!(Shortage::SystemFds.reason(), "local-fd-limit");
        assert_eq!(Shortage::Memory.reason(), "local-no-memory");
        assert_eq!(Shortage::Ports.reason(), "local-no-ports");
    }

    /// Left out, the key is derived; written, it is kept, and checked against the limit.
    #[test]
    fn the_file_wins_and_is_checked_against_the_limit() {
        let b = budget(1024, false);
        assert_eq!(decide(None, &b), Settled { max_connections: 473, derived: true, fits: true });
        assert_eq!(decide(Some(400), &b), Settled { max_connections: 400, derived: false, fits: true });
        assert_eq!(decide(Some(100_000), &b), Settled { max_connections: 100_000, derived: false, fits: false });
        assert_eq!(b.needed(100_000), 200_077);
        // A limit too low for even one connection: derived anyway, and said so.
        assert_eq!(decide(None, &budget(50, false)), Settled { max_connections: 1, derived: true, fits: false });
    }

    #[test]
    fn settle_writes_the_figure_in_force() {
        let src = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n";
        let mut g = tollgate_config::parse(src, std::path::Path::new("t.toml")).unwrap().global;
        assert!(!g.max_connections_set);
        assert_eq!(settle(&mut g, budget(1024, false), None).max_connections, 473);
        assert_eq!(g.max_connections, 473);
        g.max_connections_set = true;
        g.max_connections = 9_000;
        assert!(!settle(&mut g, budget(1024, false), Some(256)).fits);
        assert_eq!(g.max_connections, 9_000);
    }

    #[test]
    fn throttle_lets_one_through_per_period() {
        let t = Throttle::new();
        assert_eq!(t.ready_at(1_000), Some(0));
        assert_eq!(t.ready_at(1_001), None);
        assert_eq!(t.ready_at(5_000), None);
        assert_eq!(t.ready_at(11_000), Some(2), "two held back");
        assert_eq!(t.ready_at(11_000), None);
    }

    /// The limit is read (and raised) once; splice's pipes follow it.
    #[test]
    fn the_limit_is_read_once() {
        let a = nofile();
        assert_eq!(a, nofile());
        assert!(a.current >= 1);
        assert_eq!(crate::io::splice::pipes_max(), pipes_for(a.current));
    }
}
