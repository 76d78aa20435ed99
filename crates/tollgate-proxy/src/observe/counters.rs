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

/// The upper bounds of [`Histogram`]'s buckets, in microseconds
/// (Prometheus's default buckets, from 1 ms to 10 s): a last one, unbounded,
/// takes the rest.
pub const BUCKETS_US: [u64; 12] =
    [1_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000];

/// How long something took, counted into fixed buckets (not cumulative here:
/// [`Histogram::report`] adds them up for Prometheus's `le` buckets), and the
/// sum: two relaxed additions per observation.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; 13],
    sum_us: AtomicU64,
}

/// A histogram's figures: the cumulative count at each of [`BUCKETS_US`] then of
/// all (`+Inf`), and the sum of the observations in seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HistogramReport {
    pub cumulative: Vec<u64>,
    pub sum_seconds: f64,
}

impl HistogramReport {
    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

impl Histogram {
    pub fn observe(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_US.iter().position(|b| us <= *b).unwrap_or(BUCKETS_US.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn report(&self) -> HistogramReport {
        let cumulative = self
            .counts
            .iter()
            .scan(0, |total, c| {
                *total += get(c);
                Some(*total)
            })
            .collect();
        HistogramReport { cumulative, sum_seconds: get(&self.sum_us) as f64 / 1e6 }
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
    /// Of `requests`, those that came on HTTP/3 streams.
    pub h3_requests: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Requests refused by a `deny`, `tarpit` or `silent_drop` rule.
    pub denied: AtomicU64,
    /// Connections refused by a `connection_rule` (`reject`, `silent_drop`).
    pub denied_connections: AtomicU64,
    /// Requests refused as malformed, too large or too slow.
    pub request_errors: AtomicU64,
    pub responses: ClassCounts,
    pub session_rate: Rate,
    pub request_rate: Rate,
    /// Each request's time, from its first byte to its response's last.
    pub duration: Histogram,
}

impl FrontendStats {
    /// A new client connection; counted until the guard drops.
    pub fn open_session(self: &Arc<Self>) -> SessionGuard {
        let cur = self.sessions_cur.fetch_add(1, Ordering::Relaxed) + 1;
        self.sessions_max.fetch_max(cur, Ordering::Relaxed);
        self.sessions_total.fetch_add(1, Ordering::Relaxed);
        SessionGuard(self.clone())
    }

    /// One answered request: its status, the bytes each way, and how long it
    /// took (from its first byte to its response's last).
    pub fn count_exchange(&self, status: u16, bytes_in: u64, bytes_out: u64, took: Duration) {
        self.duration.observe(took);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_in_the_first_bucket_that_holds_them_and_add_up() {
        let h = Histogram::default();
        for ms in [0, 1, 2, 7, 100, 100, 20_000] {
            h.observe(Duration::from_millis(ms));
        }
        let r = h.report();
        // le: 1ms 5ms 10ms 25ms 50ms 100ms 250ms 500ms 1s 2.5s 5s 10s +Inf
        assert_eq!(r.cumulative, [2, 3, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 7]);
        assert_eq!(r.count(), 7);
        assert!((r.sum_seconds - 20.21).abs() < 1e-9, "{}", r.sum_seconds);
        assert_eq!(r.cumulative.len(), BUCKETS_US.len() + 1);
    }
}
