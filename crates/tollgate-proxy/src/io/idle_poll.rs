//! Idle polling: a worker that has just had work keeps asking the kernel for
//! I/O events, without sleeping, for a short window before it lets its thread
//! sleep in `epoll_wait`. The window adapts to the load, between 0 and
//! `global.idle_poll`: it grows while the gaps between bursts of work are short
//! enough to catch and drops to 0 when they are longer than `global.idle_poll`
//! ([`adapt`]).
//!
//! Off by default (`global.idle_poll = "0us"`), like HAProxy's `busy-polling`.
//!
//! Why: a worker that sleeps as soon as its run queue is empty is woken by the
//! next packet, and that wake-up is paid by whoever sent the packet: the kernel
//! on the sender's core must wake a sleeping thread on another core (an
//! inter-processor interrupt; under a hypervisor, a VM exit on the sending
//! vCPU, and the host rescheduling the halted one). Where the clients or the
//! servers share a core that is the limit, those wake-ups cost them
//! throughput. HAProxy's `busy-polling` never sleeps at all; Seastar polls for
//! a while before it sleeps; this is the latter, bounded, and paid in the
//! worker's own CPU time, and, because the window adapts, only while work
//! comes often. What it bought on the benchmark machine, and what it cost, is
//! in docs/architecture.md, "Idle polling".
//!
//! How: every connection task (and every HTTP/2 stream task, on either
//! side) is wrapped in [`counted`], which bumps a
//! per-thread work counter each time the task is polled. The poller task
//! ([`run`]) yields in a loop: tokio runs whatever is ready, then polls its I/O
//! driver with a zero timeout (a yielded task is deferred until after the
//! driver has been polled). While the counter moves the window restarts; once
//! it has not moved for the whole window, the poller parks until a counted
//! task runs again, and tokio sleeps in `epoll_wait` as it always did.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The per-thread state: polls of counted tasks on this thread, and the
/// poller's waker while it is parked waiting for work (and, for the tests to
/// watch it adapt, the window it last used).
struct State {
    work: Cell<u64>,
    parked: Cell<Option<Waker>>,
    #[cfg(test)]
    limit: Cell<Duration>,
}

thread_local! {
    static STATE: State = const {
        State {
            work: Cell::new(0),
            parked: Cell::new(None),
            #[cfg(test)]
            limit: Cell::new(Duration::ZERO),
        }
    };
}

/// Counts one unit of work on this thread, and wakes the parked poller.
#[inline]
fn note_work() {
    STATE.with(|s| {
        s.work.set(s.work.get().wrapping_add(1));
        if let Some(w) = s.parked.take() {
            w.wake();
        }
    });
}

fn work() -> u64 {
    STATE.with(|s| s.work.get())
}

pin_project_lite::pin_project! {
    /// A future whose every poll counts as work for this thread's poller.
    /// (A struct, not an `async fn`: an `async fn` that pins its argument
    /// keeps it twice in its state, and this wraps every connection's task.)
    pub struct Counted<F> {
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        note_work();
        self.project().fut.poll(cx)
    }
}

/// `fut`, counting each of its polls as work for this thread's poller.
pub fn counted<F: Future>(fut: F) -> Counted<F> {
    Counted { fut }
}

/// Resolves once a counted task has run since the counter read `seen`.
async fn work_since(seen: u64) {
    poll_fn(|cx| {
        if work() != seen {
            return Poll::Ready(());
        }
        STATE.with(|s| s.parked.set(Some(cx.waker().clone())));
        Poll::Pending
    })
    .await
}

/// How often a poller whose window is 0 (off) looks at the setting again.
const RECHECK_OFF: Duration = Duration::from_secs(1);

/// The first window an adapting poller tries (or `global.idle_poll`, if smaller).
const GROW_START: Duration = Duration::from_micros(10);

/// The next window, after an idle period of `idle` (from the last work of a
/// busy period to the first of the next, polling and sleeping together) that
/// the window `limit` did not catch; `max` is `global.idle_poll`.
///
/// The rule is cpuidle-haltpoll's (the Linux guest driver that polls before it
/// halts a vCPU): an idle period that a longer window, within `max`, would
/// have caught doubles the window (from [`GROW_START`]); one longer than `max`,
/// which no allowed window would have caught, halves it, and a window below
/// [`GROW_START`] drops to 0. So under steady load, where the gaps between
/// requests are microseconds, the window settles at `max`, and a lightly
/// loaded worker, whose gaps are milliseconds, stops polling after a few of
/// them instead of burning `max` after every request. Pure, for tests.
fn adapt(limit: Duration, max: Duration, idle: Duration) -> Duration {
    if idle > max {
        let half = limit / 2;
        if half < GROW_START { Duration::ZERO } else { half }
    } else if idle > limit {
        (limit * 2).max(GROW_START).min(max)
    } else {
        limit
    }
}

/// The poller of one worker: runs for as long as the worker's runtime. `window`
/// (`global.idle_poll`, the longest window) is read at the start of every busy
/// period, so a reload that changes it takes effect on the next one. The
/// window in use adapts between 0 and that ([`adapt`]). While the setting is 0
/// the poller is not woken by work at all (it would cost a task poll per burst
/// of work for nothing); it looks at the setting again every [`RECHECK_OFF`].
pub async fn run(window: impl Fn() -> Duration) {
    let mut limit = Duration::ZERO;
    // When the last busy period's last work was seen, if the poller has slept since.
    let mut last_work: Option<Instant> = None;
    loop {
        if window().is_zero() {
            (limit, last_work) = (Duration::ZERO, None);
            tokio::time::sleep(RECHECK_OFF).await;
            continue;
        }
        work_since(work()).await;
        let max = window();
        if max.is_zero() {
            continue;
        }
        let start = Instant::now();
        if let Some(t) = last_work.take() {
            limit = adapt(limit, max, start - t);
        }
        limit = limit.min(max);
        #[cfg(test)]
        STATE.with(|s| s.limit.set(limit));
        let mut seen = work();
        let mut quiet_since = start;
        loop {
            tokio::task::yield_now().await;
            let now = work();
            if now != seen {
                seen = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= limit {
                break;
            }
        }
        last_work = Some(quiet_since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    fn is_parked() -> bool {
        STATE.with(|s| {
            let w = s.parked.take();
            let parked = w.is_some();
            s.parked.set(w);
            parked
        })
    }

    #[test]
    fn counted_counts_polls_and_passes_the_output_through() {
        runtime().block_on(async {
            let before = work();
            let out = counted(async {
                tokio::task::yield_now().await;
                7
            })
            .await;
            assert_eq!(out, 7);
            // polled twice: once to the yield, once to the end
            assert_eq!(work() - before, 2);
        });
    }

    fn limit() -> Duration {
        STATE.with(|s| s.limit.get())
    }

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_window_grows_on_gaps_it_could_catch_and_shrinks_on_longer_ones() {
        let max = 50 * US;
        // A short gap the window missed: from nothing to GROW_START, then doubling up to max.
        assert_eq!(adapt(Duration::ZERO, max, 3 * US), GROW_START);
        assert_eq!(adapt(10 * US, max, 12 * US), 20 * US);
        assert_eq!(adapt(20 * US, max, 30 * US), 40 * US);
        assert_eq!(adapt(40 * US, max, 45 * US), max);
        // A gap within the window (caught, or as good as) changes nothing.
        assert_eq!(adapt(40 * US, max, 40 * US), 40 * US);
        assert_eq!(adapt(max, max, 50 * US), max);
        // A gap longer than max, which no allowed window would catch, halves it; below GROW_START it is 0.
        assert_eq!(adapt(max, max, 51 * US), 25 * US);
        assert_eq!(adapt(25 * US, max, 5000 * US), 12 * US + 500 * Duration::from_nanos(1));
        assert_eq!(adapt(12 * US, max, 5000 * US), Duration::ZERO);
        assert_eq!(adapt(Duration::ZERO, max, 5000 * US), Duration::ZERO);
        // A max below GROW_START is the window at once.
        assert_eq!(adapt(Duration::ZERO, 4 * US, 2 * US), 4 * US);
    }

    #[test]
    fn the_poller_parks_until_work_and_polls_for_a_window_that_follows_the_gaps() {
        runtime().block_on(async {
            let reads = Arc::new(AtomicU32::new(0));
            let r = reads.clone();
            // Roomy, so that a loaded machine's late wake-ups stay within it.
            let max = Duration::from_millis(5);
            tokio::spawn(run(move || {
                r.fetch_add(1, Ordering::Relaxed);
                max
            }));
            // No work yet: the poller is parked, not polling.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert_eq!(reads.load(Ordering::Relaxed), 1);
            assert!(is_parked());
            // A busy period: the setting is read again, and the poller runs
            // (not parked) until its window has passed with no more work.
            // Work that follows at once is a gap the window could catch: it
            // grows from 0 by doubling until it is the setting.
            let mut windows = Vec::new();
            while windows.last() != Some(&max) {
                assert!(windows.len() < 20, "{windows:?}");
                let t0 = Instant::now();
                counted(async {}).await;
                tokio::task::yield_now().await;
                assert!(!is_parked());
                while !is_parked() {
                    tokio::task::yield_now().await;
                }
                assert!(t0.elapsed() >= limit(), "parked after {:?}, window {:?}", t0.elapsed(), limit());
                windows.push(limit());
            }
            assert_eq!(windows[..3], [Duration::ZERO, GROW_START, 2 * GROW_START], "{windows:?}");
            assert_eq!(reads.load(Ordering::Relaxed) as usize, 1 + 2 * windows.len());
            // A gap longer than the setting halves the window.
            tokio::time::sleep(2 * max).await;
            counted(async {}).await;
            tokio::task::yield_now().await;
            assert_eq!(limit(), max / 2);
        });
    }

    #[test]
    fn a_zero_window_never_polls_and_is_looked_at_again() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(async {
            let window = Arc::new(AtomicU32::new(0));
            let reads = Arc::new(AtomicU32::new(0));
            let (w, r) = (window.clone(), reads.clone());
            tokio::spawn(run(move || {
                r.fetch_add(1, Ordering::Relaxed);
                Duration::from_millis(w.load(Ordering::Relaxed).into())
            }));
            tokio::task::yield_now().await;
            assert_eq!(reads.load(Ordering::Relaxed), 1);
            // Off: work does not wake the poller, which is not parked on work.
            counted(async {}).await;
            tokio::task::yield_now().await;
            assert!(!is_parked());
            assert_eq!(reads.load(Ordering::Relaxed), 1);
            // Turned on (a reload): read again within RECHECK_OFF, then parked on work.
            window.store(2, Ordering::Relaxed);
            tokio::time::sleep(RECHECK_OFF + Duration::from_millis(1)).await;
            assert_eq!(reads.load(Ordering::Relaxed), 2);
            assert!(is_parked());
        });
    }
}
