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
//! out) and dropped after [`IDLE_MAX_AGE`]: many app servers close idle keep-alive
//! connections after a few seconds (Node.js after 5 s), and reusing one that the
//! server is closing costs the request a retry. A connection the server closed
//! while it was idle is noticed at checkout without a system call: its socket was
//! reported readable by the reactor.

use crate::buf::Buf;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Idle connections older than this are closed rather than reused.
pub const IDLE_MAX_AGE: Duration = Duration::from_secs(4);
/// Idle connections kept per server per worker.
const MAX_IDLE_PER_SERVER: usize = 1024;

/// A connection to a server.
pub struct Upstream {
    pub stream: TcpStream,
    pub buf: Buf,
    pub addr: SocketAddr,
    /// Served a request before (a failure before any response byte may then be
    /// the server closing an idle connection, and the request can be retried).
    pub reused: bool,
    since: Instant,
}

thread_local! {
    static POOL: RefCell<HashMap<SocketAddr, Vec<Upstream>, BuildHasherDefault<AddrHasher>>> = RefCell::new(HashMap::default());
}

/// FNV-1a for the pool's keys: the keys are our own server addresses (no
/// attacker-chosen keys, so no need for SipHash's flood resistance).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Whether an idle connection is still open: the server has sent nothing (no
/// FIN, no stray bytes). Costs a system call only when the reactor saw activity.
fn still_open(up: &Upstream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    match up.stream.poll_read_ready(&mut cx) {
        Poll::Pending => true,
        Poll::Ready(Err(_)) => false,
        Poll::Ready(Ok(())) => {
            let mut probe = [0u8; 1];
            matches!(up.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        }
    }
}

/// Takes the newest live idle connection to `addr`, if any.
pub fn checkout(addr: SocketAddr) -> Option<Upstream> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.get_mut(&addr)?;
        // Entries are pushed in time order: only the oldest can be stale.
        let now = Instant::now();
        let stale = list.iter().take_while(|i| now.duration_since(i.since) > IDLE_MAX_AGE).count();
        if stale > 0 {
            list.drain(..stale);
        }
        while let Some(up) = list.pop() {
            if still_open(&up) {
                return Some(up);
            }
        }
        None
    })
}

/// Marks a connection whose last exchange is complete as idle from now, for a
/// later [`reusable`] check (a private connection kept by its client's task).
pub fn idle(up: &mut Upstream) {
    up.reused = true;
    up.since = Instant::now();
}

/// Whether an idle connection kept outside the pool may serve another request:
/// not older than [`IDLE_MAX_AGE`] and still open.
pub fn reusable(up: &Upstream) -> bool {
    up.since.elapsed() <= IDLE_MAX_AGE && still_open(up)
}

/// Returns a connection whose last exchange is complete (nothing left unread).
pub fn checkin(mut up: Upstream) {
    up.reused = true;
    up.since = Instant::now();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.entry(up.addr).or_default();
        if list.len() >= MAX_IDLE_PER_SERVER {
            list.remove(0);
        }
        list.push(up);
    })
}

/// Closes this worker's idle connections to `addr` (after one of them turned out
/// dead: the server probably restarted, and the others are dead too).
pub fn forget(addr: SocketAddr) {
    POOL.with(|p| {
        p.borrow_mut().remove(&addr);
    })
}

#[derive(Debug)]
pub enum ConnectError {
    Timeout,
    Io(std::io::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Timeout => write!(f, "connect timeout"),
            ConnectError::Io(e) => write!(f, "connect: {e}"),
        }
    }
}

/// Opens a new connection to `addr`.
pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Upstream, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => return Err(ConnectError::Timeout),
        Ok(Err(e)) => return Err(ConnectError::Io(e)),
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    Ok(Upstream { stream, buf: Buf::new(), addr, reused: false, since: Instant::now() })
}
