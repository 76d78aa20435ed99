//! The counters the data path keeps per frontend (servers keep theirs in
//! [`crate::lb::ServerStats`]) and their per-second rates: relaxed atomics
//! bumped on the request path. The rates are computed off it, by
//! [`crate::runtime::report::tick`] once a second, from the totals' differences. What
//! the admin outputs show of them is made in report.rs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A counter's value now.
pub(crate) fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Responses by class: index 0 = other, 1 = 1xx .. 5 = 5xx.
pub type ClassCounts = [AtomicU64; 6];

/// Counts one response of `status` in `counts`.
pub fn count_status(counts: &ClassCounts, status: u16) {
    let class = (status / 100) as usize;
    counts[if (1..=5).contains(&class) { class } else { 0 }].fetch_add(1, Ordering::Relaxed);
}

/// Events per second over the last second, and the highest seen, from a total.
#[derive(Debug, Default)]
pub struct Rate {
    last_total: AtomicU64,
    per_sec: AtomicU64,
    max: AtomicU64,
}

impl Rate {
    /// A second has passed and the total is now `total`.
    pub fn tick(&self, total: u64, elapsed: Duration) {
        let prev = self.last_total.swap(total, Ordering::Relaxed);
        let ms = elapsed.as_millis().max(1) as u64;
        let rate = total.saturating_sub(prev) * 1000 / ms;
        self.per_sec.store(rate, Ordering::Relaxed);
        self.max.fetch_max(rate, Ordering::Relaxed);
    }
    pub fn per_sec(&self) -> u64 {
        get(&self.per_sec)
    }
    pub fn max(&self) -> u64 {
        get(&self.max)
    }
    /// Carries a rate into the next generation of its owner (a reload).
    pub(crate) fn copied(&self) -> Self {
        Rate {
            last_total: AtomicU64::new(get(&self.last_total)),
            per_sec: AtomicU64::new(get(&self.per_sec)),
            max: AtomicU64::new(get(&self.max)),
        }
    }
}

/// A frontend's counters. Kept across reloads for a frontend of the same name.
#[derive(Debug, Default)]
pub struct FrontendStats {
    pub sessions_cur: AtomicU64,
    pub sessions_max: AtomicU64,
    pub sessions_total: AtomicU64,
    pub requests: AtomicU64,
    /// Of `requests`, those that came on HTTP/2 streams.
    pub h2_requests: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Requests refused by a `deny` rule.
    pub denied: AtomicU64,
    /// Requests refused as malformed, too large or too slow.
    pub request_errors: AtomicU64,
    pub responses: ClassCounts,
    pub session_rate: Rate,
    pub request_rate: Rate,
}

impl FrontendStats {
    /// A new client connection; counted until the guard drops.
    pub fn open_session(self: &Arc<Self>) -> SessionGuard {
        let cur = self.sessions_cur.fetch_add(1, Ordering::Relaxed) + 1;
        self.sessions_max.fetch_max(cur, Ordering::Relaxed);
        self.sessions_total.fetch_add(1, Ordering::Relaxed);
        SessionGuard(self.clone())
    }

    /// One answered request: its status and the bytes each way.
    pub fn count_exchange(&self, status: u16, bytes_in: u64, bytes_out: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        count_status(&self.responses, status);
    }
}

/// A client connection counted in its frontend's current sessions.
#[derive(Debug)]
pub struct SessionGuard(Arc<FrontendStats>);

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.0.sessions_cur.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Requests waiting for a server slot (`maxconn`), per backend. Shared by every
/// generation of a backend across reloads.
#[derive(Debug, Default)]
pub struct QueueStats {
    pub cur: AtomicU64,
    pub max: AtomicU64,
    pub total: AtomicU64,
}

impl QueueStats {
    /// A request starts waiting; it is counted until the guard drops.
    pub fn enter(self: &Arc<Self>) -> QueueGuard {
        let cur = self.cur.fetch_add(1, Ordering::Relaxed) + 1;
        self.max.fetch_max(cur, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        QueueGuard(self.clone())
    }
}

#[derive(Debug)]
pub struct QueueGuard(Arc<QueueStats>);

impl Drop for QueueGuard {
    fn drop(&mut self) {
        self.0.cur.fetch_sub(1, Ordering::Relaxed);
    }
}
