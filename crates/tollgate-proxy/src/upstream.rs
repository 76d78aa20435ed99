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
//! each exchange is a stream of it that looks to the data path like an HTTP/1.1
//! connection ([`crate::upstream_h2`]).

use crate::buf::Buf;
use crate::upstream_h2::{self, Session};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::net::TcpStream;
use tollgate_config::{Proto, Server};

/// How often each worker closes the idle connections past their keep-alive
/// time ([`sweep`]), so one is closed at most this long after it.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Idle connections kept per server per worker.
const MAX_IDLE_PER_SERVER: usize = 1024;

/// What the pool tells connections apart by: the server's address and how it
/// is reached ([`Server::transport_key`]: plain, TLS with given settings, h2c).
pub type PoolKey = (SocketAddr, u64);

/// A connection to a server.
pub struct Upstream {
    pub stream: UpStream,
    pub buf: Buf,
    pub addr: SocketAddr,
    pub key: PoolKey,
    /// Served a request before (a failure before any response byte may then be
    /// the server closing an idle connection, and the request can be retried).
    pub reused: bool,
    /// When its last exchange ended (when it was opened, before any).
    since: Instant,
    /// How long it may stay idle ([`Server::keep_alive`]), set when it is.
    keep_alive: Duration,
}

impl Upstream {
    fn new(stream: UpStream, key: PoolKey, reused: bool) -> Self {
        Upstream {
            stream,
            buf: Buf::new(),
            addr: key.0,
            key,
            reused,
            since: Instant::now(),
            keep_alive: Duration::ZERO,
        }
    }

    /// Whether it has been idle for longer than its keep-alive time at `now`.
    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) > self.keep_alive
    }
}

/// The byte stream to a server: plain TCP, TLS, or one HTTP/2 stream (an
/// exchange translated to and from HTTP/1.1 by a task of its own). Its methods
/// are those the data path calls on a `TcpStream`; on TLS a write also flushes
/// (rustls may keep records the socket did not take).
pub struct UpStream {
    io: Io,
    /// Bytes [`UpStream::readable`] read ahead (TLS and HTTP/2 streams, whose
    /// readiness is known only by reading), served first.
    ahead: Vec<u8>,
    ahead_eof: bool,
}

enum Io {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    H2(DuplexStream),
}

impl UpStream {
    fn new(io: Io) -> Self {
        UpStream { io, ahead: Vec::new(), ahead_eof: false }
    }

    pub(crate) fn h2(io: DuplexStream) -> Self {
        UpStream::new(Io::H2(io))
    }

    /// The TCP connection itself, for a plain one (TCP mode relays its bytes
    /// directly); `None` for TLS and HTTP/2.
    pub(crate) fn into_tcp(self) -> Option<TcpStream> {
        match self.io {
            Io::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// The TCP connection of a plain one, to move bytes with `splice`
    /// (splice.rs); `None` for TLS and HTTP/2. (Nothing is ever read ahead on
    /// a plain one: [`UpStream::readable`] waits on the socket itself.)
    pub(crate) fn plain_tcp(&mut self) -> Option<&mut TcpStream> {
        match &mut self.io {
            Io::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is a stream of a multiplexed HTTP/2 connection (never pooled).
    pub fn is_h2(&self) -> bool {
        matches!(self.io, Io::H2(_))
    }

    fn take_ahead(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.ahead.is_empty() {
            return self.ahead_eof.then_some(0);
        }
        let n = self.ahead.len().min(buf.len());
        buf[..n].copy_from_slice(&self.ahead[..n]);
        self.ahead.drain(..n);
        Some(n)
    }

    fn poll_io_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::new(buf);
        let r = match &mut self.io {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, &mut rb),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, &mut rb),
            Io::H2(s) => Pin::new(s).poll_read(cx, &mut rb),
        };
        r.map_ok(|()| rb.filled().len())
    }

    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(n) = self.take_ahead(buf) {
            return Ok(n);
        }
        std::future::poll_fn(|cx| self.poll_io_read(cx, buf)).await
    }

    /// Writes all of `data` (and, on TLS, flushes it out).
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.write_all(data).await,
            Io::Tls(s) => {
                s.write_all(data).await?;
                s.flush().await
            }
            Io::H2(s) => s.write_all(data).await,
        }
    }

    /// Shuts the write side down (on TLS, with close_notify).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.shutdown().await,
            Io::Tls(s) => s.shutdown().await,
            Io::H2(s) => s.shutdown().await,
        }
    }

    /// Waits until the server has sent something (or closed): then
    /// [`UpStream::try_read`] does not block.
    pub async fn readable(&mut self) -> io::Result<()> {
        if let Io::Tcp(s) = &self.io {
            return s.readable().await;
        }
        if !self.ahead.is_empty() || self.ahead_eof {
            return Ok(());
        }
        // The chunk lives on the stack of one poll, not in the future: a future
        // that held it across the await made every connection's task 4 KiB larger.
        std::future::poll_fn(|cx| {
            let mut chunk = [0u8; 4096];
            let n = std::task::ready!(self.poll_io_read(cx, &mut chunk))?;
            self.ahead.extend_from_slice(&chunk[..n]);
            self.ahead_eof = n == 0;
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Reads what is there without waiting (`WouldBlock` when nothing is).
    pub fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Io::Tcp(s) = &self.io {
            return s.try_read(buf);
        }
        if let Some(n) = self.take_ahead(buf) {
            return Ok(n);
        }
        match self.poll_io_read(&mut Context::from_waker(Waker::noop()), buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// The TCP connection under it (none for an HTTP/2 stream).
    fn tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Tcp(s) => Some(s),
            Io::Tls(s) => Some(s.get_ref().0),
            Io::H2(_) => None,
        }
    }
}

/// A map keyed by server, per worker (this pool; HTTP/2 sessions in upstream_h2.rs).
pub(crate) type PerServer<V> = HashMap<PoolKey, V, BuildHasherDefault<AddrHasher>>;

thread_local! {
    static POOL: RefCell<PerServer<Vec<Upstream>>> = RefCell::new(HashMap::default());
}

/// FNV-1a for the pool's keys: the keys are our own server addresses (no
/// attacker-chosen keys, so no need for SipHash's flood resistance).
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

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
        && let Some(up) = upstream_h2::checkout(key)
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
/// checks out again stays open until the server closes it.
pub fn sweep(live: &HashSet<PoolKey>) {
    let now = Instant::now();
    POOL.with(|p| {
        p.borrow_mut().retain(|key, list| {
            list.retain(|up| !up.expired(now));
            live.contains(key)
        })
    });
    upstream_h2::sweep(live);
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
    upstream_h2::forget(key);
}

#[derive(Debug)]
pub enum ConnectError {
    Timeout,
    Io(std::io::Error),
    /// The TLS handshake failed (a certificate not trusted, a name that does
    /// not match, a client certificate refused, ...).
    Tls(std::io::Error),
    /// The HTTP/2 connection preface and SETTINGS exchange failed.
    H2(h2::Error),
}

impl ConnectError {
    /// The connection could not be opened for a reason of this process's own
    /// (out of descriptors, memory or local ports): not the server's failure.
    pub fn shortage(&self) -> Option<crate::limits::Shortage> {
        match self {
            ConnectError::Io(e) => crate::limits::Shortage::of(e),
            _ => None,
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Timeout => write!(f, "connect timeout"),
            ConnectError::Io(e) => write!(f, "connect: {e}"),
            ConnectError::Tls(e) => write!(f, "TLS handshake: {e}"),
            ConnectError::H2(e) => write!(f, "HTTP/2 handshake: {e}"),
        }
    }
}

/// A connection just opened, before any request.
pub enum Dialed {
    /// HTTP/1.1, on TCP or TLS.
    H1(UpStream),
    /// HTTP/2: the handle to send requests on; the connection itself is a
    /// task of the current runtime.
    H2(Session),
}

/// Opens a connection to `addr` the way `server` is reached: TCP, then
/// `proxy_header` (send_proxy), then the TLS handshake (SNI, ALPN) when the
/// server has `tls`, then the HTTP/2 handshake when the protocol is HTTP/2
/// (`proto`, or the server's choice by ALPN). All within `timeout`.
pub async fn dial(
    server: &Server,
    addr: SocketAddr,
    proxy_header: Option<&[u8]>,
    timeout: Duration,
) -> Result<Dialed, ConnectError> {
    let opening = async {
        let mut tcp = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
        let _ = tcp.set_nodelay(true);
        if let Some(header) = proxy_header {
            tcp.write_all(header)
                .await
                .map_err(|_| ConnectError::Io(io::Error::other("the PROXY header could not be sent")))?;
        }
        let Some(tls) = &server.tls else {
            return match server.proto {
                Proto::H2c => upstream_h2::handshake(UpStream::new(Io::Tcp(tcp)), "http").await.map(Dialed::H2),
                _ => Ok(Dialed::H1(UpStream::new(Io::Tcp(tcp)))),
            };
        };
        let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
        // Boxed: the handshake's state (1.6 KiB) would otherwise be part of
        // every client connection's task, whether it ever opens one or not.
        let stream = Box::pin(connector.connect(tls.server_name.clone(), tcp)).await.map_err(ConnectError::Tls)?;
        let h2 = match stream.get_ref().1.alpn_protocol() {
            Some(p) => p == b"h2",
            None => server.proto == Proto::H2,
        };
        let stream = UpStream::new(Io::Tls(Box::new(stream)));
        if h2 { upstream_h2::handshake(stream, "https").await.map(Dialed::H2) } else { Ok(Dialed::H1(stream)) }
    };
    match tokio::time::timeout(timeout, opening).await {
        Err(_) => Err(ConnectError::Timeout),
        Ok(r) => r,
    }
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
        return upstream_h2::connect(server, key, timeout).await;
    }
    match dial(server, server.addr, proxy_header, timeout).await? {
        Dialed::H1(stream) => Ok(Upstream::new(stream, key, false)),
        Dialed::H2(_) => Err(ConnectError::Io(io::Error::other("HTTP/2 where HTTP/1.1 was expected"))),
    }
}

/// A new exchange's view of a connection just dialed (ALPN chose HTTP/1.1
/// where HTTP/2 was possible).
pub(crate) fn h1(stream: UpStream, key: PoolKey) -> Upstream {
    Upstream::new(stream, key, false)
}

/// An exchange on a stream of an HTTP/2 connection (`reused`: one that
/// served requests before).
pub(crate) fn on_stream(stream: UpStream, key: PoolKey, reused: bool) -> Upstream {
    Upstream::new(stream, key, reused)
}

impl AsyncRead for UpStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(n) = me.take_ahead(buf.initialize_unfilled()) {
            buf.advance(n);
            return Poll::Ready(Ok(()));
        }
        let n = std::task::ready!(me.poll_io_read(cx, buf.initialize_unfilled()))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for UpStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Io::H2(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Io::H2(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Io::H2(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    const KEEP: Duration = Duration::from_secs(4);

    /// A connection to `l` pooled for `keep_alive`, and the server's end.
    async fn pool_one(l: &tokio::net::TcpListener, keep_alive: Duration) -> (PoolKey, TcpStream) {
        let key = (l.local_addr().unwrap(), 0);
        let client = TcpStream::connect(key.0).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        checkin(Upstream::new(UpStream::new(Io::Tcp(client)), key, false), keep_alive);
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
        sweep(&HashSet::from([kept, old]));
        assert!(closed(&mut old_end).await);
        assert_eq!((pooled_count(kept), pooled_count(old)), (1, 0));
        // A reload removed the server: its connection closes, young as it is.
        sweep(&HashSet::from([old]));
        assert!(closed(&mut kept_end).await);
        assert_eq!(pooled_count(kept), 0);
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
        sweep(&HashSet::from([key]));
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
