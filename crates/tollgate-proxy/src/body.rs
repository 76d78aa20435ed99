//! Bodies that cross the proxy, streamed frame by frame (never buffered whole).
//!
//! - [`ReqBody`]: the client's request body on its way to a server, with the size
//!   limit (`limits.max_request_body`, 413) and the client idle timer
//!   (`timeout.client`, 408).
//! - [`RespBody`]: what goes back to the client: a server's streamed body with the
//!   server idle timer (`timeout.server`), or a small complete body made here. It
//!   carries the [`Exchange`] guard, which on completion returns the upstream
//!   connection to the pool, frees the server slot, marks the client connection
//!   idle and writes the access log line.

use crate::access_log::{AccessLog, LogRecord};
use crate::io::ConnShared;
use crate::lb::{ServerRt, Slot};
use crate::pool::{self, Sender};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::time::Sleep;

/// Why a streamed body stopped.
#[derive(Debug)]
pub enum BodyError {
    /// The request body went past `limits.max_request_body`.
    TooLarge,
    /// The client sent nothing for `timeout.client`.
    ClientTimeout,
    /// The server sent nothing for `timeout.server`.
    ServerTimeout,
    /// The peer's stream failed (reset, malformed chunk, early close).
    Peer(hyper::Error),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge => write!(f, "request body too large"),
            BodyError::ClientTimeout => write!(f, "client body timeout"),
            BodyError::ServerTimeout => write!(f, "server body timeout"),
            BodyError::Peer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::Peer(e) => Some(e),
            _ => None,
        }
    }
}

/// An idle timer re-armed on each frame: fires when a stream stalls for `idle`.
struct IdleTimer {
    idle: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl IdleTimer {
    fn new(idle: Duration) -> Self {
        IdleTimer { idle, sleep: None, armed: false }
    }
    /// Call when the stream is pending; true when the stall has lasted too long.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.armed {
            let deadline = tokio::time::Instant::now() + self.idle;
            match &mut self.sleep {
                Some(s) => s.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        self.sleep.as_mut().expect("armed").as_mut().poll(cx).is_ready()
    }
    fn progress(&mut self) {
        self.armed = false;
    }
}

/// When a streamed request body last moved. `timeout.server` counts from there
/// (as HAProxy's, it is an inactivity timeout), so a long upload that keeps
/// moving is not taken for a silent server.
#[derive(Debug)]
pub struct Progress {
    origin: Instant,
    /// Nanoseconds since `origin`.
    last: AtomicU64,
    /// The whole body has gone to the server connection.
    finished: AtomicBool,
}

impl Progress {
    fn new() -> Arc<Self> {
        Arc::new(Progress { origin: Instant::now(), last: AtomicU64::new(0), finished: AtomicBool::new(false) })
    }
    fn touch(&self) {
        self.last.store(self.origin.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Relaxed)
    }
    pub fn last(&self) -> Instant {
        self.origin + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

/// A request body sent upstream.
pub struct ReqBody {
    inner: Option<Incoming>,
    limit: Option<u64>,
    seen: u64,
    timer: IdleTimer,
    progress: Option<Arc<Progress>>,
}

impl ReqBody {
    pub fn empty() -> Self {
        ReqBody { inner: None, limit: None, seen: 0, timer: IdleTimer::new(Duration::from_secs(1)), progress: None }
    }
    pub fn streaming(inner: Incoming, limit: Option<u64>, idle: Duration) -> Self {
        let progress = Some(Progress::new());
        ReqBody { inner: Some(inner), limit, seen: 0, timer: IdleTimer::new(idle), progress }
    }
    /// Progress of a streamed body (`None` for an empty one).
    pub fn progress(&self) -> Option<Arc<Progress>> {
        self.progress.clone()
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Pending => {
                if this.timer.poll_expired(cx) {
                    return Poll::Ready(Some(Err(BodyError::ClientTimeout)));
                }
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => {
                this.timer.progress();
                if let Some(p) = &this.progress {
                    p.touch();
                }
                if let Some(data) = frame.data_ref() {
                    this.seen += data.len() as u64;
                    if this.limit.is_some_and(|l| this.seen > l) {
                        return Poll::Ready(Some(Err(BodyError::TooLarge)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Peer(e)))),
            Poll::Ready(None) => {
                if let Some(p) = &this.progress {
                    p.touch();
                    p.finished.store(true, Ordering::Relaxed);
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

/// Everything to settle when a response is over.
pub struct Exchange {
    pub conn: Arc<ConnShared>,
    pub log: Option<(Arc<AccessLog>, LogRecord)>,
    pub slot: Option<Slot>,
    pub upstream: Option<(SocketAddr, Sender)>,
    /// The request body's progress, when it had one: a connection still sending
    /// it (the server answered early) is not reused, or the next request on it
    /// would wait behind another client's upload.
    pub upload: Option<Arc<Progress>>,
    pub bytes: u64,
}

impl Exchange {
    pub fn new(conn: Arc<ConnShared>, log: Option<(Arc<AccessLog>, LogRecord)>) -> Self {
        Exchange { conn, log, slot: None, upstream: None, upload: None, bytes: 0 }
    }

    /// `complete`: the whole body went through, so the upstream connection is reusable.
    fn finish(mut self: Box<Self>, complete: bool, termination: Option<&'static str>) {
        if let Some((addr, sender)) = self.upstream.take()
            && complete
            && self.upload.as_ref().is_none_or(|p| p.finished())
        {
            pool::checkin(addr, sender);
        }
        if let Some(slot) = self.slot.take() {
            slot.server.stats.bytes_out.fetch_add(self.bytes, Ordering::Relaxed);
        }
        self.conn.end_request();
        if let Some((sink, mut rec)) = self.log.take() {
            rec.bytes = self.bytes;
            if rec.termination.is_none() {
                rec.termination = termination;
            }
            sink.write(&rec);
        }
    }
}

enum RespInner {
    Full(Option<Bytes>),
    Upstream { body: Incoming, timer: IdleTimer },
}

/// A response body going to the client.
pub struct RespBody {
    inner: RespInner,
    done: Option<Box<Exchange>>,
}

impl RespBody {
    pub fn full(data: Bytes, done: Exchange) -> Self {
        let mut done = Box::new(done);
        done.bytes = data.len() as u64;
        RespBody { inner: RespInner::Full(Some(data).filter(|d| !d.is_empty())), done: Some(done) }
    }

    pub fn upstream(body: Incoming, server_idle: Duration, done: Exchange) -> Self {
        RespBody { inner: RespInner::Upstream { body, timer: IdleTimer::new(server_idle) }, done: Some(Box::new(done)) }
    }

    fn settle(&mut self, complete: bool, termination: Option<&'static str>) {
        if let Some(done) = self.done.take() {
            done.finish(complete, termination);
        }
    }
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        match &mut this.inner {
            RespInner::Full(data) => {
                let frame = data.take().map(|d| Ok(Frame::data(d)));
                if frame.is_none() {
                    this.settle(true, None);
                }
                Poll::Ready(frame)
            }
            RespInner::Upstream { body, timer } => match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => {
                    if timer.poll_expired(cx) {
                        this.settle(false, Some("server-timeout"));
                        return Poll::Ready(Some(Err(BodyError::ServerTimeout)));
                    }
                    Poll::Pending
                }
                Poll::Ready(Some(Ok(frame))) => {
                    timer.progress();
                    let end = body.is_end_stream();
                    if let (Some(data), Some(done)) = (frame.data_ref(), this.done.as_mut()) {
                        done.bytes += data.len() as u64;
                    }
                    if end {
                        this.settle(true, None);
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => {
                    this.settle(false, Some("server-aborted"));
                    Poll::Ready(Some(Err(BodyError::Peer(e))))
                }
                Poll::Ready(None) => {
                    this.settle(true, None);
                    Poll::Ready(None)
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            RespInner::Full(d) => d.is_none(),
            RespInner::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            RespInner::Full(d) => SizeHint::with_exact(d.as_ref().map_or(0, |d| d.len() as u64)),
            RespInner::Upstream { body, .. } => body.size_hint(),
        }
    }
}

/// The most of an abandoned response Tollgate still reads to keep its connection.
const DRAIN_MAX_BYTES: u64 = 256 * 1024;
/// How long that read may take.
const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

impl Drop for RespBody {
    fn drop(&mut self) {
        // Bodies that hyper never needed to poll (HEAD, 204, 304, empty) are complete.
        if self.is_end_stream() {
            self.settle(true, None);
            return;
        }
        // The client went away mid-response. Like HAProxy and nginx, read the rest of
        // a small response so its server connection can serve the next request,
        // instead of closing it (at 500 clients that churn was ~500 new connections
        // every time a load generator stopped).
        let drainable = matches!(&self.inner, RespInner::Upstream { body, .. }
            if body.size_hint().upper().is_none_or(|u| u <= DRAIN_MAX_BYTES));
        let upstream = if drainable { self.done.as_mut().and_then(|d| d.upstream.take()) } else { None };
        let server = self.done.as_ref().and_then(|d| d.slot.as_ref()).map(|s| s.server.clone());
        let upload = self.done.as_mut().and_then(|d| d.upload.take());
        self.settle(false, Some("client-aborted"));
        if let (Some(upstream), Some(server), Ok(rt)) = (upstream, server, tokio::runtime::Handle::try_current())
            && let RespInner::Upstream { body, .. } = std::mem::replace(&mut self.inner, RespInner::Full(None))
        {
            // Spawned on this worker's runtime, so the connection returns to this
            // worker's pool.
            rt.spawn(drain_then_pool(body, upstream, server, upload));
        }
    }
}

async fn drain_then_pool(
    mut body: Incoming,
    (addr, sender): (SocketAddr, Sender),
    server: Arc<ServerRt>,
    upload: Option<Arc<Progress>>,
) {
    use http_body_util::BodyExt;
    let drained = tokio::time::timeout(DRAIN_MAX_TIME, async {
        let mut read = 0u64;
        while let Some(frame) = body.frame().await {
            read += frame.ok()?.data_ref().map_or(0, |d| d.len() as u64);
            if read > DRAIN_MAX_BYTES {
                return None;
            }
        }
        Some(())
    })
    .await;
    if let Ok(Some(())) = drained
        && upload.is_none_or(|p| p.finished())
    {
        pool::checkin(addr, sender);
        server.stats.connections_saved.fetch_add(1, Ordering::Relaxed);
    }
}
