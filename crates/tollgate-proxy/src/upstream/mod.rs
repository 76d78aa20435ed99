//! Upstream connections: connect, and keep idle keep-alive connections per server.
//!
//! An upstream connection is a socket and its read buffer, used by one client
//! connection's task at a time: no task or channel of its own, so a proxied
//! request costs no hand-off between tasks.
//!
//! Each worker thread has its own pool (a thread local): workers run single-threaded
//! runtimes, so checkout and checkin take no lock and a socket stays on the thread
//! whose reactor it is registered with.
//!
//! Idle connections are reused newest first (the hottest stay warm, the rest age
//! out) and dropped once idle for longer than their backend's
//! `timeout.server_keep_alive` (4 s by default): many app servers close idle
//! keep-alive connections after a few seconds (Node.js after 5 s), and reusing one
//! that the server is closing costs the request a retry. [`sweep`] closes those
//! nobody checked out. A connection the server closed
//! while it was idle is noticed at checkout without a system call: its socket was
//! reported readable by the reactor.
//!
//! A server with `tls` is reached over rustls ([`UpStream`] is plain TCP or
//! TLS, the same codec runs over both); one whose protocol is HTTP/2 (`proto`
//! h2 or h2c, or ALPN's choice) gets one multiplexed connection per worker, and
//! each exchange is a stream of it, which the data path sends a request head to
//! and takes response heads from, the bodies going as bytes (h2.rs). The
//! modules, lowest first: h2.rs (an HTTP/2 connection and its exchanges),
//! stream.rs (the byte stream, the connection, the pool's key), dial.rs
//! (opening one), and here the pool over them.

mod dial;
pub(crate) use dial::resolver;
pub mod h2;
mod stream;

pub use dial::{Dialed, dial};
pub use stream::{ConnectError, Connection, PoolKey, UpStream, Upstream};

use h2::Session;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use stream::PerServer;
use tollgate_config::Server;

/// How often each worker closes the idle connections past their keep-alive
/// time ([`sweep`]), so one is closed at most this long after it.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Idle connections kept per server per worker.
const MAX_IDLE_PER_SERVER: usize = 1024;

thread_local! {
    static POOL: RefCell<PerServer<Vec<Upstream>>> = RefCell::new(HashMap::default());
}

/// Whether an idle connection is still open: the server has sent nothing (no
/// FIN, no stray bytes, no TLS alert). Costs a system call only when the
/// reactor saw activity.
fn still_open(up: &Upstream) -> bool {
    let Some(tcp) = up.stream.tcp() else { return false };
    let mut cx = Context::from_waker(Waker::noop());
    match tcp.poll_read_ready(&mut cx) {
        Poll::Pending => true,
        Poll::Ready(Err(_)) => false,
        Poll::Ready(Ok(())) => {
            let mut probe = [0u8; 1];
            matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        }
    }
}

/// An idle connection to `server`: a stream of its live HTTP/2 connection,
/// else the newest live idle HTTP/1.1 connection, if any.
pub fn checkout(server: &Server) -> Option<Upstream> {
    let key = (server.addr, server.transport_key());
    if server.may_be_h2()
        && let Some(up) = h2_checkout(key)
    {
        return Some(up);
    }
    checkout_idle(key, Instant::now())
}

/// The newest idle HTTP/1.1 connection under `key` that is within its
/// keep-alive time at `now` and still open; the expired ones met are closed.
fn checkout_idle(key: PoolKey, now: Instant) -> Option<Upstream> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.get_mut(&key)?;
        // Newest first: the first one expired means the rest are older still
        // (only connections to one address with two keep-alive times, from
        // two backends, can be out of order: those may close early).
        while let Some(up) = list.pop() {
            if up.expired(now) {
                list.clear();
                return None;
            }
            if still_open(&up) {
                return Some(up);
            }
        }
        None
    })
}

/// Closes this worker's idle connections past their keep-alive time, and
/// every connection, idle or HTTP/2, to a server not in `live` (a reload
/// removed it, or changed its address or how it is reached). Each worker runs
/// it every [`SWEEP_EVERY`] (server.rs): without it, a connection nobody
/// checks out again stays open until the server closes it. With
/// `forwarding` (a forward proxy's backend is configured, whose destinations
/// are no configured server), idle plain HTTP/1.1 connections to any address
/// stay until their keep-alive time.
pub fn sweep(live: &HashSet<PoolKey>, forwarding: bool) {
    let now = Instant::now();
    POOL.with(|p| {
        p.borrow_mut().retain(|key, list| {
            list.retain(|up| !up.expired(now));
            live.contains(key) || (forwarding && key.1 == 0 && !list.is_empty())
        })
    });
    h2_sweep(live);
}

/// Marks a connection whose last exchange is complete as idle from now, for
/// `keep_alive` at most, for a later [`reusable`] check (a private connection
/// kept by its client's task).
pub fn idle(up: &mut Upstream, keep_alive: Duration) {
    up.reused = true;
    up.since = Instant::now();
    up.keep_alive = keep_alive;
}

/// Whether an idle connection kept outside the pool may serve another request:
/// not idle past its keep-alive time, and still open.
pub fn reusable(up: &Upstream) -> bool {
    !up.expired(Instant::now()) && still_open(up)
}

/// Returns a connection whose last exchange is complete (nothing left unread),
/// to be reused within `keep_alive`. An HTTP/2 stream is done with instead:
/// its connection stays with the worker.
pub fn checkin(mut up: Upstream, keep_alive: Duration) {
    if up.stream.is_h2() {
        return;
    }
    idle(&mut up, keep_alive);
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.entry(up.key).or_default();
        if list.len() >= MAX_IDLE_PER_SERVER {
            list.remove(0);
        }
        list.push(up);
    })
}

/// Closes this worker's idle connections to a server (after one of them turned
/// out dead: the server probably restarted, and the others are dead too), and
/// forgets its HTTP/2 connection.
pub fn forget(key: PoolKey) {
    POOL.with(|p| {
        p.borrow_mut().remove(&key);
    });
    h2_forget(key);
}

/// Opens a new connection to `server` (see [`dial`]). For an HTTP/2 server it
/// becomes the worker's connection to it (one opened meanwhile by another
/// request is used instead), and the exchange gets a stream of it.
pub async fn connect(
    server: &Server,
    proxy_header: Option<&[u8]>,
    timeout: Duration,
) -> Result<Upstream, ConnectError> {
    let key = (server.addr, server.transport_key());
    if server.may_be_h2() {
        return h2_connect(server, key, timeout).await;
    }
    match dial(server, server.addr, proxy_header, timeout).await? {
        Dialed::H1(stream) => Ok(Connection::new(stream, key, false)),
        Dialed::H2(_) => Err(ConnectError::Io(io::Error::other("HTTP/2 where HTTP/1.1 was expected"))),
    }
}

/// One server's connection on this worker, and the last failure to open one.
#[derive(Default)]
struct Gate {
    session: Option<Session>,
    failed_at: Option<Instant>,
}

thread_local! {
    static GATES: RefCell<PerServer<Arc<tokio::sync::Mutex<Gate>>>> = RefCell::new(HashMap::default());
}

fn gate(key: PoolKey) -> Arc<tokio::sync::Mutex<Gate>> {
    GATES.with(|g| g.borrow_mut().entry(key).or_default().clone())
}

/// A stream on this worker's live connection to the server, if it has one
/// (and no exchange is opening one right now).
fn h2_checkout(key: PoolKey) -> Option<Upstream> {
    let gate = gate(key);
    let g = gate.try_lock().ok()?;
    let session = g.session.as_ref().filter(|s| s.is_open())?;
    Some(open_stream(session, key, true))
}

/// A new exchange on `session`, to the data path a connection like any other.
fn open_stream(session: &Session, key: PoolKey, reused: bool) -> Upstream {
    Connection::new(UpStream::h2(h2::Exchange::new(session, key.0)), key, reused)
}

/// Forgets this worker's connection to the server (it turned out dead), if
/// it has one: called for every server, HTTP/1.1 ones too, so it only looks.
fn h2_forget(key: PoolKey) {
    let Some(gate) = GATES.with(|g| g.borrow().get(&key).cloned()) else { return };
    if let Ok(mut g) = gate.try_lock() {
        g.session = None;
    }
}

/// Drops this worker's gates of servers not in `live`: their connections close
/// once the exchanges still using them are done.
fn h2_sweep(live: &HashSet<PoolKey>) {
    GATES.with(|g| g.borrow_mut().retain(|key, _| live.contains(key)));
}

/// Opens the worker's connection to `server` (unless another exchange opened
/// one meanwhile) and a stream on it. Exchanges that waited for an attempt
/// that failed fail too, at once, rather than each trying in turn. When ALPN
/// chose HTTP/1.1, the exchange gets that connection.
async fn h2_connect(server: &Server, key: PoolKey, timeout: Duration) -> Result<Upstream, ConnectError> {
    let asked = Instant::now();
    let gate = gate(key);
    let mut g = gate.lock().await;
    if let Some(s) = g.session.as_ref().filter(|s| s.is_open()) {
        return Ok(open_stream(s, key, false));
    }
    if g.failed_at.is_some_and(|t| t >= asked) {
        return Err(ConnectError::Io(std::io::Error::other("the connection being opened for it failed")));
    }
    match dial(server, server.addr, None, timeout).await {
        Ok(Dialed::H2(session)) => {
            let up = open_stream(&session, key, false);
            g.session = Some(session);
            g.failed_at = None;
            Ok(up)
        }
        Ok(Dialed::H1(stream)) => Ok(Connection::new(stream, key, false)),
        Err(e) => {
            g.failed_at = Some(Instant::now());
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stream::Io;
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    const KEEP: Duration = Duration::from_secs(4);

    /// A connection to `l` pooled for `keep_alive`, and the server's end.
    async fn pool_one(l: &tokio::net::TcpListener, keep_alive: Duration) -> (PoolKey, TcpStream) {
        let key = (l.local_addr().unwrap(), 0);
        let client = TcpStream::connect(key.0).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        checkin(Connection::new(UpStream::new(Io::Tcp(client)), key, false), keep_alive);
        (key, server)
    }

    /// A pooled connection to a listener of its own, and the server's end.
    async fn pooled() -> (PoolKey, TcpStream) {
        pool_one(&tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), KEEP).await
    }

    /// Makes the `i`th idle connection under `key` look idle since `ago`.
    fn idle_since(key: PoolKey, i: usize, ago: Duration) {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            let up = &mut p.get_mut(&key).unwrap()[i];
            up.since = up.since.checked_sub(ago).unwrap();
        });
    }

    fn pooled_count(key: PoolKey) -> usize {
        POOL.with(|p| p.borrow().get(&key).map_or(0, Vec::len))
    }

    /// What the server's end reads: 0 once the pool closed its connection.
    async fn closed(server: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(server.read(&mut byte).await, Ok(0) | Err(_))
    }

    #[tokio::test]
    async fn sweep_closes_idle_connections_too_old_and_those_to_servers_gone() {
        let (kept, mut kept_end) = pooled().await;
        let (old, mut old_end) = pooled().await;
        idle_since(old, 0, KEEP * 2);
        sweep(&HashSet::from([kept, old]), false);
        assert!(closed(&mut old_end).await);
        assert_eq!((pooled_count(kept), pooled_count(old)), (1, 0));
        // A reload removed the server: its connection closes, young as it is.
        sweep(&HashSet::from([old]), false);
        assert!(closed(&mut kept_end).await);
        assert_eq!(pooled_count(kept), 0);
    }

    /// With a forward proxy configured, a plain connection to an address no
    /// server has (a destination) stays until its keep-alive time.
    #[tokio::test]
    async fn a_forward_proxys_destinations_keep_their_idle_connections() {
        let (dest, mut dest_end) = pooled().await;
        sweep(&HashSet::new(), true);
        assert_eq!(pooled_count(dest), 1);
        idle_since(dest, 0, KEEP * 2);
        sweep(&HashSet::new(), true);
        assert!(closed(&mut dest_end).await);
        assert_eq!(pooled_count(dest), 0);
    }

    #[tokio::test]
    async fn each_idle_connection_keeps_its_own_keep_alive_time() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        // Oldest first: idle 8 s of 60 s allowed, idle 8 s of 4 s, idle 2 s of 4 s.
        let (key, mut long_end) = pool_one(&l, Duration::from_secs(60)).await;
        let (_, mut short_end) = pool_one(&l, KEEP).await;
        let (_, mut young_end) = pool_one(&l, KEEP).await;
        idle_since(key, 0, KEEP * 2);
        idle_since(key, 1, KEEP * 2);
        idle_since(key, 2, KEEP / 2);
        sweep(&HashSet::from([key]), false);
        assert!(closed(&mut short_end).await);
        assert_eq!(pooled_count(key), 2);
        // Checkout takes the newest, within its time.
        let young = checkout_idle(key, Instant::now()).expect("the young one");
        drop(young);
        assert!(closed(&mut young_end).await);
        // At 61 s the one kept for 60 s is past it too: closed, nothing to reuse.
        assert!(checkout_idle(key, Instant::now() + Duration::from_secs(53)).is_none());
        assert!(closed(&mut long_end).await);
        assert_eq!(pooled_count(key), 0);
    }
}
