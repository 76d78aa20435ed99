//! The byte stream to a server and a connection over it: plain TCP, TLS, or
//! one exchange of an HTTP/2 connection (h2.rs: its heads go as fields, its
//! bodies through a pipe), behind the calls the data path makes on a
//! `TcpStream`; what the pool keys connections by; why a connection could not
//! be opened.

use super::h2::Exchange;
use crate::io::buf::Buf;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// What the pool tells connections apart by: the server's address and how it
/// is reached (`Server::transport_key`: plain, TLS with given settings, h2c).
pub type PoolKey = (SocketAddr, u64);

/// A connection to a server, boxed: it moves between the pool, the request
/// phase and the response several times per request, and a box moves as one
/// pointer (the connection itself is some 200 bytes); the allocation is made
/// once per connection.
pub type Upstream = Box<Connection>;

/// What [`Upstream`] holds.
pub struct Connection {
    pub stream: UpStream,
    pub buf: Buf,
    pub addr: SocketAddr,
    pub key: PoolKey,
    /// Served a request before (a failure before any response byte may then be
    /// the server closing an idle connection, and the request can be retried).
    pub reused: bool,
    /// When its last exchange ended (when it was opened, before any).
    pub(super) since: Instant,
    /// How long it may stay idle ([`Server::keep_alive`]), set when it is.
    pub(super) keep_alive: Duration,
}

impl Connection {
    pub(super) fn new(stream: UpStream, key: PoolKey, reused: bool) -> Upstream {
        Box::new(Connection {
            stream,
            buf: Buf::new(),
            addr: key.0,
            key,
            reused,
            since: Instant::now(),
            keep_alive: Duration::ZERO,
        })
    }

    /// Whether it has been idle for longer than its keep-alive time at `now`.
    pub(super) fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) > self.keep_alive
    }
}

/// The byte stream to a server: plain TCP, TLS, or one HTTP/2 exchange (its
/// body bytes; its heads go through [`UpStream::h2_mut`]). Its methods are
/// those the data path calls on a `TcpStream`; on TLS a write also flushes
/// (rustls may keep records the socket did not take).
pub struct UpStream {
    io: Io,
    /// Bytes [`UpStream::readable`] read ahead (TLS, whose readiness is known
    /// only by reading), served first.
    ahead: Vec<u8>,
    ahead_eof: bool,
}

pub(super) enum Io {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    H2(Box<Exchange>),
}

impl UpStream {
    pub(super) fn new(io: Io) -> Self {
        UpStream { io, ahead: Vec::new(), ahead_eof: false }
    }

    pub(crate) fn h2(exchange: Exchange) -> Self {
        UpStream::new(Io::H2(Box::new(exchange)))
    }

    /// The HTTP/2 exchange this is, if it is one: the request head goes to it,
    /// the response heads come from it.
    pub(crate) fn h2_mut(&mut self) -> Option<&mut Exchange> {
        match &mut self.io {
            Io::H2(x) => Some(x),
            _ => None,
        }
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

    /// Whether this is an exchange of a multiplexed HTTP/2 connection (never pooled).
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
            Io::H2(x) => match x.pipe() {
                Ok(s) => Pin::new(s).poll_read(cx, &mut rb),
                Err(e) => Poll::Ready(Err(e)),
            },
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
            Io::H2(x) => x.pipe()?.write_all(data).await,
        }
    }

    /// Shuts the write side down (on TLS, with close_notify).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.shutdown().await,
            Io::Tls(s) => s.shutdown().await,
            Io::H2(x) => x.pipe()?.shutdown().await,
        }
    }

    /// Waits until the server has sent something (or closed): then
    /// [`UpStream::try_read`] does not block. For an HTTP/2 exchange, until its
    /// response head has come or it ended without one ([`Exchange::answer`]).
    pub async fn readable(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => return s.readable().await,
            Io::H2(x) => {
                x.answered().await;
                return Ok(());
            }
            Io::Tls(_) => {}
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
    pub(super) fn tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Tcp(s) => Some(s),
            Io::Tls(s) => Some(s.get_ref().0),
            Io::H2(_) => None,
        }
    }
}

/// A map keyed by server, per worker (the pool's idle connections and HTTP/2 gates).
pub(crate) type PerServer<V> = HashMap<PoolKey, V, BuildHasherDefault<AddrHasher>>;

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
    pub fn shortage(&self) -> Option<crate::io::limits::Shortage> {
        match self {
            ConnectError::Io(e) => crate::io::limits::Shortage::of(e),
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
            Io::H2(x) => match x.pipe() {
                Ok(s) => Pin::new(s).poll_write(cx, buf),
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Io::H2(x) => match x.pipe() {
                Ok(s) => Pin::new(s).poll_flush(cx),
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Io::H2(x) => match x.pipe() {
                Ok(s) => Pin::new(s).poll_shutdown(cx),
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}
