//! `shutdown sessions server`: the exchanges and tunnels of a server end at
//! an operator's word.
//!
//! Each worker keeps a thread-local table with an entry per client
//! connection (an HTTP/2 stream, a tcp session): a [`Watcher`], made when the
//! connection starts. While one of its exchanges waits on a server (the
//! response head, the body relay, a tunnel), [`UnlessShut`] marks the entry
//! with the server and keeps the task's waker there; the admin side sends
//! each worker the server's id, and the worker wakes the entries marked with
//! it ([`fire`]).
//!
//! Thread-local and per connection, not a `Notify` on the server: a
//! `Notify` registration per request cost 280 instructions (a lock, a waker
//! clone, a line shared by every worker), a registration per request in this
//! table 130; per connection, a request pays a mark and an unmark (the waker is
//! cloned once per connection). Workers run current-thread runtimes, so a
//! task never leaves the thread whose table its entry is in.

use crate::observe::termination::Termination;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

struct Entry {
    /// The server waited on now (`ServerRt::id`); 0: none.
    server: u64,
    /// The connection task's waker, from its first wait.
    waker: Option<Waker>,
    /// `server`'s sessions were shut down during this wait.
    fired: bool,
}

struct Table {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
}

thread_local! {
    // Const-initialised: no lazy-init check on the path of every request.
    static WAITS: RefCell<Table> = const { RefCell::new(Table { entries: Vec::new(), free: Vec::new() }) };
}

/// A connection's entry in its worker's table; freed on drop.
pub(crate) struct Watcher {
    slot: usize,
}

/// A [`Watcher`]'s entry, for the waits of the connection's exchanges.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchId(usize);

impl Watcher {
    pub(crate) fn new() -> Self {
        let slot = WAITS.with(|t| {
            let mut t = t.borrow_mut();
            let entry = Some(Entry { server: 0, waker: None, fired: false });
            match t.free.pop() {
                Some(i) => {
                    t.entries[i] = entry;
                    i
                }
                None => {
                    t.entries.push(entry);
                    t.entries.len() - 1
                }
            }
        });
        Watcher { slot }
    }

    pub(crate) fn id(&self) -> WatchId {
        WatchId(self.slot)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // `try_with`: the thread may be ending (its table gone first).
        let _ = WAITS.try_with(|t| {
            if let Ok(mut t) = t.try_borrow_mut()
                && let Some(e) = t.entries.get_mut(self.slot)
            {
                *e = None;
                t.free.push(self.slot);
            }
        });
    }
}

/// `f`, or `Err(Killed)` once the sessions of the server `server` are shut
/// down while `f` waits: `f` is polled first, and the wait is marked only
/// when `f` is pending. A future of its own rather than a `select!`: it wraps
/// every exchange's wait for a response head, and the macro's machinery cost
/// more than the mark.
pub(crate) struct UnlessShut<'a, F> {
    f: Pin<&'a mut F>,
    watch: WatchId,
    server: u64,
    marked: bool,
}

impl<'a, F> UnlessShut<'a, F> {
    pub(crate) fn new(f: Pin<&'a mut F>, watch: WatchId, server: u64) -> Self {
        UnlessShut { f, watch, server, marked: false }
    }
}

impl<F: Future> Future for UnlessShut<'_, F> {
    type Output = Result<F::Output, Termination>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(out) = self.f.as_mut().poll(cx) {
            self.unmark();
            return Poll::Ready(Ok(out));
        }
        let (slot, server, first) = (self.watch.0, self.server, !self.marked);
        self.marked = true;
        let fired = WAITS.with(|t| {
            let mut t = t.borrow_mut();
            let Some(e) = t.entries.get_mut(slot).and_then(Option::as_mut) else { return false };
            if first {
                e.server = server;
                e.fired = false;
            }
            if e.waker.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
                e.waker = Some(cx.waker().clone());
            }
            e.fired
        });
        if fired {
            self.unmark();
            return Poll::Ready(Err(Termination::Killed));
        }
        Poll::Pending
    }
}

impl<F> UnlessShut<'_, F> {
    fn unmark(&mut self) {
        if std::mem::take(&mut self.marked) {
            let slot = self.watch.0;
            let _ = WAITS.try_with(|t| {
                if let Ok(mut t) = t.try_borrow_mut()
                    && let Some(Some(e)) = t.entries.get_mut(slot)
                {
                    e.server = 0;
                }
            });
        }
    }
}

impl<F> Drop for UnlessShut<'_, F> {
    fn drop(&mut self) {
        self.unmark();
    }
}

/// Fires this worker's waits on `server`; returns how many there were.
pub(crate) fn fire(server: u64) -> usize {
    let wakers: Vec<Waker> = WAITS.with(|t| {
        let mut t = t.borrow_mut();
        t.entries
            .iter_mut()
            .flatten()
            .filter(|e| e.server == server && !e.fired)
            .filter_map(|e| {
                e.fired = true;
                e.waker.clone()
            })
            .collect()
    });
    let n = wakers.len();
    wakers.into_iter().for_each(Waker::wake);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_the_waits_on_one_server_only() {
        let (wa, wb) = (Watcher::new(), Watcher::new());
        let mut cx = Context::from_waker(Waker::noop());
        let mut pend_a = std::future::pending::<()>();
        let mut pend_b = std::future::pending::<()>();
        let mut a = UnlessShut::new(Pin::new(&mut pend_a), wa.id(), 1);
        let mut b = UnlessShut::new(Pin::new(&mut pend_b), wb.id(), 2);
        assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut b).poll(&mut cx).is_pending());
        assert_eq!(fire(1), 1);
        assert_eq!(Pin::new(&mut a).poll(&mut cx), Poll::Ready(Err(Termination::Killed)));
        assert!(Pin::new(&mut b).poll(&mut cx).is_pending());
        assert_eq!(fire(1), 0, "fired once; the entry is unmarked after");
        drop(a);
        // The next wait of the same connection, on server 1 again: not fired
        // by the earlier shutdown.
        let mut pend_c = std::future::pending::<()>();
        let mut c = UnlessShut::new(Pin::new(&mut pend_c), wa.id(), 1);
        assert!(Pin::new(&mut c).poll(&mut cx).is_pending());
        // A wait that ends by itself unmarks its entry.
        let mut ready = std::future::ready(7);
        let mut d = UnlessShut::new(Pin::new(&mut ready), wb.id(), 2);
        drop(b);
        assert_eq!(Pin::new(&mut d).poll(&mut cx), Poll::Ready(Ok(7)));
        assert_eq!(fire(2), 0);
        drop((c, d));
        WAITS.with(|t| assert_eq!(t.borrow().entries.iter().flatten().count(), 2));
        drop((wa, wb));
        WAITS.with(|t| assert_eq!(t.borrow().entries.iter().flatten().count(), 0));
    }
}
