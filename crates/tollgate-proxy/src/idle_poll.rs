//! Idle polling: a worker that has just had work keeps asking the kernel for
//! I/O events, without sleeping, for a short window (`global.idle_poll`) before
//! it lets its thread sleep in `epoll_wait`.
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
//! worker's own CPU time. What it bought on the benchmark machine, and what it
//! cost, is in docs/architecture.md, "Idle polling".
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
/// poller's waker while it is parked waiting for work.
struct State {
    work: Cell<u64>,
    parked: Cell<Option<Waker>>,
}

thread_local! {
    static STATE: State = const { State { work: Cell::new(0), parked: Cell::new(None) } };
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

/// The poller of one worker: runs for as long as the worker's runtime. `window`
/// is read at the start of every busy period, so a reload that changes
/// `global.idle_poll` takes effect on the next one. While the window is 0 the
/// poller is not woken by work at all (it would cost a task poll per burst of
/// work for nothing); it looks at the setting again every [`RECHECK_OFF`].
pub async fn run(window: impl Fn() -> Duration) {
    loop {
        if window().is_zero() {
            tokio::time::sleep(RECHECK_OFF).await;
            continue;
        }
        work_since(work()).await;
        let window = window();
        if window.is_zero() {
            continue;
        }
        let mut seen = work();
        let mut quiet_since = Instant::now();
        loop {
            tokio::task::yield_now().await;
            let now = work();
            if now != seen {
                seen = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= window {
                break;
            }
        }
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

    #[test]
    fn the_poller_parks_until_work_and_polls_for_the_window_after_it() {
        runtime().block_on(async {
            let reads = Arc::new(AtomicU32::new(0));
            let r = reads.clone();
            tokio::spawn(run(move || {
                r.fetch_add(1, Ordering::Relaxed);
                Duration::from_millis(2)
            }));
            // No work yet: the poller is parked, not polling.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert_eq!(reads.load(Ordering::Relaxed), 1);
            assert!(is_parked());
            // Work starts a busy period: the poller keeps running (it is not
            // parked) until the window has passed with no more work.
            let t0 = Instant::now();
            counted(async {}).await;
            tokio::task::yield_now().await;
            assert_eq!(reads.load(Ordering::Relaxed), 2);
            assert!(!is_parked());
            while !is_parked() {
                tokio::task::yield_now().await;
            }
            assert!(t0.elapsed() >= Duration::from_millis(2), "parked after {:?}", t0.elapsed());
            // One busy period, and parked again until the next work.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert_eq!(reads.load(Ordering::Relaxed), 3);
            assert!(is_parked());
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
