//! The client socket as hyper sees it, with the client-side timers.
//!
//! hyper's own header-read timeout closes the connection silently and cannot tell a
//! keep-alive wait from a half-sent request, so Tollgate keeps these timers here,
//! where every read and write passes, as HAProxy does:
//! - `http_request`: from the first byte of a request to the end of its head. On
//!   expiry the client gets `408 Request Timeout` and the connection closes.
//! - `keep_alive`: how long an idle connection may wait for the next request to
//!   start (before the first request, `http_request` applies). Expiry closes it
//!   quietly, as a browser's idle preconnect deserves no error.
//! - `client`: how long a write to the client may stay blocked (a client that does
//!   not read its response).
//!
//! The session marks the connection busy when a request head has arrived and idle
//! again when its response is complete, through [`ConnShared`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

const RESPONSE_408: &[u8] = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/html\r\ncontent-length: 109\r\nconnection: close\r\ncache-control: no-cache\r\n\r\n<html><body><h1>408 Request Timeout</h1>\nYour browser didn't send a complete request in time.\n</body></html>\n";

/// State shared between a connection's IO wrapper and its session.
#[derive(Debug)]
pub struct ConnShared {
    start: Instant,
    busy: AtomicBool,
    /// Bumped at each busy/idle change so the IO wrapper re-arms its timer.
    epoch: AtomicU32,
    /// Requests completed on this connection.
    served: AtomicU32,
    /// Nanoseconds since `start` at which the connection last became idle.
    idle_since: AtomicU64,
    /// Nanoseconds since `start` of the first byte of the pending request; 0 = none.
    first_byte: AtomicU64,
    /// Set when the IO wrapper answered 408 itself.
    timed_out_408: AtomicBool,
}

impl ConnShared {
    pub fn new() -> Self {
        ConnShared {
            start: Instant::now(),
            busy: AtomicBool::new(false),
            epoch: AtomicU32::new(0),
            served: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
            timed_out_408: AtomicBool::new(false),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_nanos().max(1) as u64
    }

    /// A request head has arrived. Returns when its first byte was read (the
    /// access log's request time starts there).
    pub fn begin_request(&self) -> Instant {
        self.busy.store(true, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Release);
        match self.first_byte.swap(0, Ordering::Relaxed) {
            0 => Instant::now(),
            n => self.start + Duration::from_nanos(n),
        }
    }

    /// The response to the current request is complete.
    pub fn end_request(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
        self.idle_since.store(self.nanos(Instant::now()), Ordering::Relaxed);
        self.busy.store(false, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    pub fn requests_served(&self) -> u32 {
        self.served.load(Ordering::Relaxed)
    }

    pub fn timed_out_408(&self) -> bool {
        self.timed_out_408.load(Ordering::Relaxed)
    }
}

impl Default for ConnShared {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ClientTimers {
    pub http_request: Duration,
    pub keep_alive: Duration,
    pub client: Duration,
}

/// A client socket with Tollgate's client-side timers.
pub struct ClientIo {
    inner: TcpStream,
    shared: std::sync::Arc<ConnShared>,
    timers: ClientTimers,
    read_timer: Option<Pin<Box<Sleep>>>,
    /// (epoch, saw first byte) the read timer was armed for.
    armed_for: Option<(u32, bool)>,
    write_timer: Option<Pin<Box<Sleep>>>,
    write_blocked: bool,
}

impl ClientIo {
    pub fn new(inner: TcpStream, shared: std::sync::Arc<ConnShared>, timers: ClientTimers) -> Self {
        ClientIo { inner, shared, timers, read_timer: None, armed_for: None, write_timer: None, write_blocked: false }
    }

    /// While idle, the deadline for the pending wait, and whether it is a partial
    /// request (408) rather than a quiet keep-alive wait.
    fn idle_deadline(&self) -> (Instant, bool) {
        let s = &self.shared;
        let first = s.first_byte.load(Ordering::Relaxed);
        if first != 0 {
            return (s.start + Duration::from_nanos(first) + self.timers.http_request, true);
        }
        let since = s.start + Duration::from_nanos(s.idle_since.load(Ordering::Relaxed));
        let wait = if s.served.load(Ordering::Relaxed) > 0 { self.timers.keep_alive } else { self.timers.http_request };
        (since + wait, false)
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before
                    && !this.shared.busy.load(Ordering::Relaxed)
                    && this.shared.first_byte.load(Ordering::Relaxed) == 0
                {
                    let now = this.shared.nanos(Instant::now());
                    this.shared.first_byte.store(now, Ordering::Relaxed);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if this.shared.busy.load(Ordering::Relaxed) {
                    // Request bodies carry their own idle timer (see body.rs).
                    return Poll::Pending;
                }
                let key =
                    (this.shared.epoch.load(Ordering::Acquire), this.shared.first_byte.load(Ordering::Relaxed) != 0);
                let (deadline, partial) = this.idle_deadline();
                if this.armed_for != Some(key) {
                    let deadline = tokio::time::Instant::from_std(deadline);
                    match &mut this.read_timer {
                        Some(t) => t.as_mut().reset(deadline),
                        None => this.read_timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    this.armed_for = Some(key);
                }
                let timer = this.read_timer.as_mut().expect("armed above");
                ready!(timer.as_mut().poll(cx));
                if partial {
                    // Best effort: the socket is idle, its send buffer empty.
                    let _ = Pin::new(&mut this.inner).poll_write(cx, RESPONSE_408);
                    this.shared.timed_out_408.store(true, Ordering::Relaxed);
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request head timeout")))
                } else {
                    // Quiet close: report EOF.
                    Poll::Ready(Ok(()))
                }
            }
        }
    }
}

impl ClientIo {
    fn write_blocked(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if !self.write_blocked {
            self.write_blocked = true;
            let deadline = tokio::time::Instant::now() + self.timers.client;
            match &mut self.write_timer {
                Some(t) => t.as_mut().reset(deadline),
                None => self.write_timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        let timer = self.write_timer.as_mut().expect("armed above");
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, "client did not read its response in time"))
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.write_blocked(cx).map(Err),
            other => {
                this.write_blocked = false;
                other
            }
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.write_blocked(cx).map(Err),
            other => {
                this.write_blocked = false;
                other
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
