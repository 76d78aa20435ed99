//! Request coalescing: of N concurrent misses for one key, one (the leader)
//! goes to the origin; the others (followers) wait for it, for a bounded time,
//! and are then either handed what the leader stored or told to go to the
//! origin themselves.
//!
//! A follower goes to the origin itself when the leader's response was not
//! stored (not cacheable, or a `Vary` the follower may not match: the data path
//! hands followers the stored object and checks it as for any hit), when the
//! leader failed or was dropped (its guard's `Drop` reports that, so a leader
//! task that panics or is cancelled releases its followers), or when the wait
//! timed out. In all those cases the follower does not become a leader: after
//! one failed attempt the requests spread out again rather than queue behind a
//! second leader (Varnish's "hit-for-miss" has the same effect).
//!
//! Keys are whatever the data path coalesces on: the primary key, since the
//! variant a request needs is only known once a response names its `Vary`.
//!
//! The table is shared by every worker thread (a mutex held for a hash-map
//! operation); waiting uses a `tokio::sync::watch` channel per flight, so a
//! follower on one worker's runtime is woken by a leader on another's.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the leader's flight ended with.
#[derive(Debug, Clone)]
enum State<T> {
    Pending,
    Stored(T),
    NotStored,
    Failed,
}

/// The coalescing table: one flight per key at most.
pub struct Coalescer<T> {
    flights: Mutex<HashMap<String, watch::Receiver<State<T>>>>,
}

/// What [`Coalescer::join`] made of the caller.
pub enum Role<T: Clone + Send + Sync + 'static> {
    /// Go to the origin, then [`Leader::stored`] or [`Leader::not_stored`].
    Leader(Leader<T>),
    /// Another request is fetching: [`Follower::wait`].
    Follower(Follower<T>),
}

/// Why a follower goes to the origin itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallthrough {
    /// The leader's response was not stored.
    NotStored,
    /// The leader failed (origin error, or its task ended without a result).
    LeaderFailed,
    /// The leader took longer than the wait allowed.
    Timeout,
}

impl<T: Clone + Send + Sync + 'static> Default for Coalescer<T> {
    fn default() -> Self {
        Coalescer { flights: Mutex::new(HashMap::new()) }
    }
}

impl<T: Clone + Send + Sync + 'static> Coalescer<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins the flight for `key`, or starts one with the caller as its leader.
    pub fn join(self: &Arc<Self>, key: &str) -> Role<T> {
        let mut flights = self.flights.lock();
        if let Some(rx) = flights.get(key) {
            return Role::Follower(Follower { rx: rx.clone() });
        }
        let (tx, rx) = watch::channel(State::Pending);
        flights.insert(key.to_owned(), rx);
        Role::Leader(Leader { table: self.clone(), key: key.to_owned(), tx: Some(tx) })
    }

    /// Flights in progress.
    pub fn in_flight(&self) -> usize {
        self.flights.lock().len()
    }
}

/// The request that fetches for everyone. Dropping it without a verdict
/// releases the followers as [`Fallthrough::LeaderFailed`].
pub struct Leader<T: Clone + Send + Sync + 'static> {
    table: Arc<Coalescer<T>>,
    key: String,
    tx: Option<watch::Sender<State<T>>>,
}

impl<T: Clone + Send + Sync + 'static> Leader<T> {
    /// The response was stored as `value`: followers get it.
    pub fn stored(mut self, value: T) {
        self.finish(State::Stored(value));
    }

    /// The response cannot be shared: followers go to the origin.
    pub fn not_stored(mut self) {
        self.finish(State::NotStored);
    }

    /// The origin failed: followers go to the origin (or serve stale) themselves.
    pub fn failed(mut self) {
        self.finish(State::Failed);
    }

    fn finish(&mut self, state: State<T>) {
        if let Some(tx) = self.tx.take() {
            // Removed first: a request arriving after this looks in the store
            // (or leads a new flight), it does not follow a finished one.
            self.table.flights.lock().remove(&self.key);
            // Followers may all be gone; nothing to tell then.
            let _ = tx.send(state);
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Drop for Leader<T> {
    fn drop(&mut self) {
        self.finish(State::Failed);
    }
}

/// A request waiting for a leader.
pub struct Follower<T> {
    rx: watch::Receiver<State<T>>,
}

impl<T: Clone + Send + Sync + 'static> Follower<T> {
    /// Waits at most `limit` for the leader: `Ok` with what it stored, or why
    /// to go to the origin.
    pub async fn wait(mut self, limit: Duration) -> Result<T, Fallthrough> {
        let done = tokio::time::timeout(limit, self.rx.wait_for(|s| !matches!(s, State::Pending))).await;
        match done {
            Err(_) => Err(Fallthrough::Timeout),
            // The sender is gone without a verdict: only if the leader's finish
            // never ran, which Drop prevents; treat it as a failure.
            Ok(Err(_)) => Err(Fallthrough::LeaderFailed),
            Ok(Ok(state)) => match &*state {
                State::Stored(v) => Ok(v.clone()),
                State::NotStored => Err(Fallthrough::NotStored),
                State::Failed | State::Pending => Err(Fallthrough::LeaderFailed),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn table() -> Arc<Coalescer<Arc<str>>> {
        Arc::new(Coalescer::new())
    }

    /// N tasks miss at once: the first leads, the others wait and get its value.
    async fn run(n: usize, verdict: fn(Leader<Arc<str>>)) -> (usize, Vec<Result<Arc<str>, Fallthrough>>) {
        let t = table();
        let fetches = Arc::new(AtomicUsize::new(0));
        let joined = Arc::new(AtomicUsize::new(0));
        let (go_tx, go_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (t, fetches, joined, mut go) = (t.clone(), fetches.clone(), joined.clone(), go_rx.clone());
            tasks.push(tokio::spawn(async move {
                let role = t.join("http://a/x");
                joined.fetch_add(1, Ordering::SeqCst);
                match role {
                    Role::Leader(l) => {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        // The origin answers once everyone has joined.
                        let _ = go.wait_for(|g| *g).await;
                        verdict(l);
                        None
                    }
                    Role::Follower(f) => Some(f.wait(Duration::from_secs(5)).await),
                }
            }));
        }
        while joined.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
        let _ = go_tx.send(true);
        let mut results = Vec::new();
        for task in tasks {
            if let Some(r) = task.await.unwrap() {
                results.push(r);
            }
        }
        assert_eq!(t.in_flight(), 0);
        (fetches.load(Ordering::SeqCst), results)
    }

    #[tokio::test]
    async fn concurrent_misses_make_one_fetch_and_followers_get_the_stored_value() {
        let (fetches, results) = run(10, |l| l.stored(Arc::from("body"))).await;
        assert_eq!(fetches, 1);
        assert_eq!(results.len(), 9);
        assert!(results.iter().all(|r| r.as_deref() == Ok("body")));
    }

    #[tokio::test]
    async fn a_response_not_stored_sends_followers_to_the_origin() {
        let (fetches, results) = run(5, |l| l.not_stored()).await;
        assert_eq!(fetches, 1);
        assert_eq!(results, vec![Err(Fallthrough::NotStored); 4]);
    }

    #[tokio::test]
    async fn a_failed_or_dropped_leader_releases_followers() {
        let (_, results) = run(3, |l| l.failed()).await;
        assert_eq!(results, vec![Err(Fallthrough::LeaderFailed); 2]);
        let (_, results) = run(3, drop).await;
        assert_eq!(results, vec![Err(Fallthrough::LeaderFailed); 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn followers_wait_a_bounded_time() {
        let t = table();
        let Role::Leader(leader) = t.join("k") else { panic!("first is the leader") };
        let Role::Follower(f) = t.join("k") else { panic!("second follows") };
        assert_eq!(f.wait(Duration::from_millis(100)).await, Err(Fallthrough::Timeout));
        // The flight goes on until the leader is done.
        assert_eq!(t.in_flight(), 1);
        leader.stored(Arc::from("late"));
        assert_eq!(t.in_flight(), 0);
        // The next request leads a new flight.
        assert!(matches!(t.join("k"), Role::Leader(_)));
    }

    #[tokio::test]
    async fn keys_are_independent_and_followers_across_threads_are_woken() {
        let t = table();
        let Role::Leader(a) = t.join("a") else { panic!() };
        let Role::Leader(_b) = t.join("b") else { panic!() };
        let Role::Follower(f) = t.join("a") else { panic!() };
        // A follower on another thread's runtime (as on another worker).
        let waiter = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            rt.block_on(f.wait(Duration::from_secs(5)))
        });
        std::thread::sleep(Duration::from_millis(20));
        a.stored(Arc::from("A"));
        assert_eq!(waiter.join().unwrap().as_deref(), Ok("A"));
    }
}
