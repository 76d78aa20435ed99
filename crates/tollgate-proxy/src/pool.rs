//! Upstream connections: connect, and keep idle keep-alive connections per server.
//!
//! Each worker thread has its own pool (a thread local): workers run single-threaded
//! runtimes, so checkout and checkin take no lock and a connection's driver task
//! stays on the thread that uses it.
//!
//! Idle connections are reused newest first (the hottest stay warm, the rest age
//! out) and dropped after [`IDLE_MAX_AGE`]: many app servers close idle keep-alive
//! connections after a few seconds (Node.js after 5 s), and reusing one that the
//! server is closing costs the request a retry.

use crate::body::ReqBody;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub type Sender = SendRequest<ReqBody>;

/// Idle connections older than this are closed rather than reused.
pub const IDLE_MAX_AGE: Duration = Duration::from_secs(4);
/// Idle connections kept per server per worker.
const MAX_IDLE_PER_SERVER: usize = 1024;

struct Idle {
    sender: Sender,
    since: Instant,
}

thread_local! {
    static POOL: RefCell<HashMap<SocketAddr, Vec<Idle>, BuildHasherDefault<AddrHasher>>> = RefCell::new(HashMap::default());
}

/// FNV-1a for the pool's keys: the keys are our own server addresses (no
/// attacker-chosen keys, so no need for SipHash's flood resistance), and SipHash was
/// ~1.3% of the instructions per request.
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

/// Takes the newest live idle connection to `addr`, if any.
pub fn checkout(addr: SocketAddr) -> Option<Sender> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.get_mut(&addr)?;
        // Entries are pushed in time order: only the oldest can be stale, so look at
        // the front until a fresh one (usually the first look).
        let now = Instant::now();
        let stale = list.iter().take_while(|i| now.duration_since(i.since) > IDLE_MAX_AGE).count();
        if stale > 0 {
            list.drain(..stale);
        }
        while let Some(idle) = list.pop() {
            if !idle.sender.is_closed() {
                return Some(idle.sender);
            }
        }
        None
    })
}

/// Returns a connection whose last response is complete.
pub fn checkin(addr: SocketAddr, sender: Sender) {
    if sender.is_closed() {
        return;
    }
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = p.entry(addr).or_default();
        if list.len() >= MAX_IDLE_PER_SERVER {
            list.remove(0);
        }
        list.push(Idle { sender, since: Instant::now() });
    })
}

#[derive(Debug)]
pub enum ConnectError {
    Timeout,
    Io(std::io::Error),
    Handshake(hyper::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Timeout => write!(f, "connect timeout"),
            ConnectError::Io(e) => write!(f, "connect: {e}"),
            ConnectError::Handshake(e) => write!(f, "handshake: {e}"),
        }
    }
}

/// Opens a new HTTP/1.1 connection to `addr` and spawns its driver on this worker.
pub async fn connect(addr: SocketAddr, timeout: Duration, max_header_size: usize) -> Result<Sender, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => return Err(ConnectError::Timeout),
        Ok(Err(e)) => return Err(ConnectError::Io(e)),
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    let mut builder = http1::Builder::new();
    // Request header names go out in the client's case (hyper uses the case map the
    // session forwards in the request's extensions). Response header names are not
    // recorded: they reach the client in lower case, as HAProxy sends them, which
    // spares a case-map lookup per header on every response.
    builder.max_buf_size(max_header_size.max(8192));
    let (sender, conn) = builder.handshake(TokioIo::new(stream)).await.map_err(ConnectError::Handshake)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(%addr, "upstream connection ended: {e}");
        }
    });
    Ok(sender)
}
