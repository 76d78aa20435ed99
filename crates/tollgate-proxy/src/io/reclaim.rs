//! Connection slots taken back at the limit: when every one of
//! `global.max_connections` is held and a client waits in a listener's
//! backlog, the workers close a connection that is only waiting on its
//! client, so that the new client is served rather than left in the queue.
//! First a keep-alive connection idle between requests, the longest idle (as
//! nginx frees idle keep-alive connections when it runs out), then one that
//! has waited longest for a request head (a first request that does not
//! come, a head sent a byte at a time: a slowloris), if it has waited at
//! least [`HEAD_GRACE`]. A connection with a request in progress is never
//! taken: its timeouts bound it.
//!
//! Each worker keeps a thread-local table with an entry per client
//! connection (as lb/shutdown.rs does): a request marks it busy or waiting,
//! a thread-local write, no lock and no allocation. The accept loop that finds
//! no slot wakes every worker's [`serve`] task, which closes its own
//! connection (workers run current-thread runtimes: a connection's entry is
//! in the table of the thread that runs it).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What a connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// A request in progress, or a response: not to be taken.
    Busy,
    /// Keep-alive, between two requests, nothing of the next one yet.
    Idle,
    /// A request head: the first one of the connection (or of its TLS
    /// handshake), or one that has begun and is not complete.
    Head,
}

/// A connection that waits on its client for a head has this long before
/// it may be taken (a connection just accepted has its request on the way).
pub const HEAD_GRACE: Duration = Duration::from_secs(1);

struct Slot {
    wait: Wait,
    since: Instant,
    /// Chosen to give way; the connection is told at its next poll.
    taken: bool,
    /// The connection task's waker, from its last wait.
    waker: Option<Waker>,
}

struct Table {
    entries: Vec<Option<Slot>>,
    free: Vec<usize>,
}

thread_local! {
    // Const-initialised: no lazy-init check on the path of every request.
    static SLOTS: RefCell<Table> = const { RefCell::new(Table { entries: Vec::new(), free: Vec::new() }) };
}

fn with_slot<R>(index: usize, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
    SLOTS.try_with(|t| t.borrow_mut().entries.get_mut(index).and_then(Option::as_mut).map(f)).ok().flatten()
}

/// A connection's entry in its worker's table; freed on drop. Holds only
/// its index (the table is the thread's), so a connection's future stays
/// `Send` as tokio's spawn asks.
pub struct Registration {
    index: usize,
}

impl Registration {
    pub fn new(wait: Wait, since: Instant) -> Registration {
        let index = SLOTS.with(|t| {
            let mut t = t.borrow_mut();
            let slot = Some(Slot { wait, since, taken: false, waker: None });
            match t.free.pop() {
                Some(i) => {
                    t.entries[i] = slot;
                    i
                }
                None => {
                    t.entries.push(slot);
                    t.entries.len() - 1
                }
            }
        });
        Registration { index }
    }

    /// Now waiting for `wait`, since `since`.
    pub fn set(&self, wait: Wait, since: Instant) {
        with_slot(self.index, |s| {
            s.wait = wait;
            s.since = since;
        });
    }

    /// Now busy.
    pub fn busy(&self) {
        with_slot(self.index, |s| s.wait = Wait::Busy);
    }

    /// Resolves when the connection is taken back.
    pub fn taken(&self) -> Taken<'_> {
        Taken(self)
    }
}

/// [`Registration::taken`]'s future.
pub struct Taken<'a>(&'a Registration);

impl Future for Taken<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let taken = with_slot(self.0.index, |s| {
            if s.taken {
                s.taken = false;
                return true;
            }
            match &s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => s.waker = Some(cx.waker().clone()),
            }
            false
        });
        if taken == Some(true) { Poll::Ready(()) } else { Poll::Pending }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // `try_with`: the thread may be ending (its table gone first).
        let _ = SLOTS.try_with(|t| {
            let mut t = t.borrow_mut();
            if let Some(e) = t.entries.get_mut(self.index) {
                *e = None;
                t.free.push(self.index);
            }
        });
    }
}

/// The entry to take at `now` among `(wait, since)`: the longest idle one,
/// else the one waiting longest for a head past [`HEAD_GRACE`].
fn choose(entries: impl Iterator<Item = (usize, Wait, Instant)>, now: Instant) -> Option<usize> {
    let mut idle: Option<(Instant, usize)> = None;
    let mut head: Option<(Instant, usize)> = None;
    for (i, wait, since) in entries {
        let best = match wait {
            Wait::Busy => continue,
            Wait::Idle => &mut idle,
            Wait::Head if now.saturating_duration_since(since) < HEAD_GRACE => continue,
            Wait::Head => &mut head,
        };
        if best.is_none_or(|(t, _)| since < t) {
            *best = Some((since, i));
        }
    }
    idle.or(head).map(|(_, i)| i)
}

/// Takes back this worker's best connection to take (see the module's
/// doc); returns whether there was one.
pub fn reclaim_one(now: Instant) -> bool {
    SLOTS.with(|t| {
        let mut t = t.borrow_mut();
        let live = t.entries.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|s| (i, s.wait, s.since)));
        let Some(i) = choose(live, now) else { return false };
        let Some(slot) = t.entries[i].as_mut() else { return false };
        slot.wait = Wait::Busy;
        slot.taken = true;
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
        true
    })
}

/// A worker's part: each time an accept loop finds every slot held with a
/// client waiting (`signal`), take back one of this worker's connections.
pub async fn serve(signal: Arc<Notify>) {
    loop {
        signal.notified().await;
        if reclaim_one(Instant::now()) {
            tracing::debug!("max_connections reached with a client waiting: a waiting connection closed for it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_first_then_the_oldest_head_past_its_grace() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(10);
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        // A head waiting 9 s, an idle connection for 2 s, a busy one.
        let entries = [(0, Wait::Head, s(1)), (1, Wait::Idle, s(8)), (2, Wait::Busy, s(0))];
        assert_eq!(choose(entries.into_iter(), now), Some(1), "idle first");
        let entries = [(0, Wait::Head, s(5)), (1, Wait::Head, s(1)), (2, Wait::Busy, s(0))];
        assert_eq!(choose(entries.into_iter(), now), Some(1), "the oldest head");
        // A head just begun is not taken, nor a busy connection.
        let entries = [(0, Wait::Head, now - Duration::from_millis(500)), (1, Wait::Busy, s(0))];
        assert_eq!(choose(entries.into_iter(), now), None);
        let entries = [(3, Wait::Idle, s(2)), (4, Wait::Idle, s(1))];
        assert_eq!(choose(entries.into_iter(), now), Some(4), "the longest idle");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_taken_connection_is_told_and_its_entry_goes_with_it() {
        let long_ago = Instant::now() - Duration::from_secs(5);
        let a = Registration::new(Wait::Head, long_ago);
        let b = Registration::new(Wait::Busy, long_ago);
        assert!(reclaim_one(Instant::now()));
        tokio::time::timeout(Duration::from_secs(1), a.taken()).await.expect("told");
        assert!(!reclaim_one(Instant::now()), "taken once; the busy one is not taken");
        drop((a, b));
        let c = Registration::new(Wait::Idle, Instant::now());
        assert!(reclaim_one(Instant::now()));
        c.taken().await;
        SLOTS.with(|t| assert_eq!(t.borrow().entries.iter().filter(|e| e.is_some()).count(), 1));
    }
}
