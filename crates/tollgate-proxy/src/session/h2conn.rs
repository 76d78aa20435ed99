//! HTTP/2 with clients (RFC 9113): ALPN `h2` on TLS binds, and h2c with prior
//! knowledge on plain binds that enable it. Each stream is proxied to an
//! HTTP/1.1 server exactly as an HTTP/1.1 request is (exchange.rs): the same
//! checks, rules, cache (pipeline/serve.rs: its answers are written here as
//! HTTP/2 responses), persistence, balancing, queue, retries, health
//! observation, error pages, access log line and counters.
//!
//! Why the `h2` crate directly rather than hyper's HTTP/2 server: the data path
//! has its own HTTP/1.1 codec and upstream pool, so hyper's service and body
//! layers would only convert in between; the `h2` connection, driven here, gives
//! the accept loop, every SETTINGS value and abuse limit (pending-accept resets,
//! local error resets, header list size) one by one, and a GOAWAY with the
//! reason chosen (ENHANCE_YOUR_CALM on abuse, NO_ERROR on stop).
//!
//! One task per connection drives the `h2` connection (all frame I/O) and
//! accepts streams; each stream is a task of its own, on the same worker thread
//! (the upstream pool is per thread), aborted when the connection ends. A
//! stream's request head is loaded from its fields (`:authority` becomes Host,
//! Cookie fields are joined, a body without Content-Length goes chunked) and
//! checked by the HTTP/1.1 parser's own rules (tollgate-wire's
//! `request_from_fields`), with no HTTP/1.1 text written or parsed. Bodies
//! stream both ways under HTTP/2 flow control: request DATA is released to the
//! client's window only once written to the server, and response bytes are
//! sent only as the client's window grants capacity, so no body is held whole.
//!
//! Abuse: rapid reset (CVE-2023-44487) is bounded twice: `h2` answers GOAWAY
//! ENHANCE_YOUR_CALM when more than [`PENDING_ACCEPT_RESETS`] streams are reset
//! before they are accepted, and Tollgate counts the streams a client resets
//! after that (`h2.max_resets` per `h2.reset_window`) and sends the same GOAWAY
//! past the limit. CONTINUATION floods and HPACK bombs are bounded by
//! `h2.max_header_list_size` (h2 >= 0.4.4 stops buffering a header block past
//! it; a list too large gets 431), and too many stream errors caused by the
//! client by [`LOCAL_ERROR_RESETS`].

use crate::io::h2io::send_all;
use crate::io::idle_poll;
use crate::io::reclaim::{Registration, Wait};
use crate::lb::shutdown::Watcher;
use crate::lb::track::Tracked;
use crate::net::tls::{ClientStream, TlsInfo};
use crate::observe::termination::Termination;
use crate::pipeline::exchange::drain;
use crate::pipeline::exchange::{self, Fail, IoFail, LogSlot};
use crate::pipeline::rescue::{self, ProxyError};
use crate::pipeline::serve::{Answer, CachePlan};
use crate::pipeline::snapshot::Snapshot;
use crate::pipeline::{self, ClientSide, Exchange, Proxied, Ready};
use crate::session::mux::{self, BodySink, header_value, send_body};
use crate::upstream::Upstream;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tollgate_config::{Action, Frontend, H2};
use tollgate_wire::h1::{self, BodyCursor, Framing, RequestHead, ResponseHead};

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Streams a client may reset before Tollgate has accepted them, at once: one
/// more is a GOAWAY ENHANCE_YOUR_CALM (h2's `max_pending_accept_reset_streams`,
/// its default; the fix for CVE-2023-44487 in h2 0.3.22).
pub const PENDING_ACCEPT_RESETS: usize = 20;
/// Streams Tollgate may reset for the client's protocol errors on one
/// connection: one more is a GOAWAY ENHANCE_YOUR_CALM (h2's
/// `max_local_error_reset_streams`).
pub const LOCAL_ERROR_RESETS: usize = 1024;
/// Response bytes queued per stream beyond what the client's window allows.
const SEND_BUFFER: usize = 256 * 1024;
/// How long a GOAWAY for a connection with no request may take to go out
/// before the connection is dropped.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);

/// What a connection on a plain bind with h2c starts with.
pub enum Sniffed {
    /// The HTTP/2 preface: HTTP/2 with prior knowledge.
    H2(Vec<u8>),
    /// Anything that may be HTTP/1.1: the bytes read, to be served first, and
    /// when the first of them came (the start of the request, for its
    /// `timeout.http_request`).
    H1(Vec<u8>, Instant),
    /// Neither: a first line that does not end in `HTTP/1.x`, or nothing at all.
    /// The connection closes without an answer, as an HTTP/2 server closes on
    /// a bad preface (RFC 9113 section 3.4).
    Neither,
}

/// How much of a connection's start [`sniff`] reads at most.
const SNIFF_MAX: usize = 8192;

/// Reads the start of a connection on a plain bind with h2c, enough to tell
/// the HTTP/2 preface from an HTTP/1.1 request line: the preface's 24 bytes,
/// or a first line. A line longer than [`SNIFF_MAX`], or a client that stops
/// sending before `deadline`, is left to the HTTP/1.1 checks (414, 408), whose
/// request timer runs from the first byte read here, as on any plain bind.
pub async fn sniff(stream: &mut (impl AsyncRead + Unpin), deadline: tokio::time::Instant) -> Sniffed {
    let mut buf = vec![0u8; SNIFF_MAX];
    let mut n = 0;
    let mut first = None;
    let read = async {
        loop {
            let m = stream.read(&mut buf[n..]).await?;
            if m == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            first.get_or_insert_with(Instant::now);
            n += m;
            let k = n.min(PREFACE.len());
            if buf[..k] == PREFACE[..k] {
                if k == PREFACE.len() {
                    return Ok(true);
                }
                continue;
            }
            // RFC 9112 section 2.2: empty lines before the request line are ignored.
            let start = tollgate_wire::h1::leading_empty_lines(&buf[..n]);
            if let Some(eol) = buf[start..n].iter().position(|b| *b == b'\n').map(|e| start + e) {
                let line = buf[start..eol].strip_suffix(b"\r").unwrap_or(&buf[start..eol]);
                let version = line.rsplit(|b| *b == b' ').next().unwrap_or_default();
                return if version.starts_with(b"HTTP/1.") {
                    Ok(false)
                } else {
                    Err(io::ErrorKind::InvalidData.into())
                };
            }
            if n == buf.len() {
                return Ok::<bool, io::Error>(false);
            }
        }
    };
    let r = tokio::time::timeout_at(deadline, read).await;
    buf.truncate(n);
    match (r, first) {
        (Ok(Ok(true)), _) => Sniffed::H2(buf),
        (Ok(Err(e)), _) if e.kind() == io::ErrorKind::InvalidData => Sniffed::Neither,
        (_, Some(first)) if n > 0 => Sniffed::H1(buf, first),
        _ => Sniffed::Neither,
    }
}

/// A client stream with the bytes already read from it (h2c sniffing) served
/// first.
pub struct H2Io {
    prefix: Vec<u8>,
    at: usize,
    inner: ClientStream,
}

impl H2Io {
    pub fn new(inner: ClientStream, prefix: Vec<u8>) -> Self {
        H2Io { prefix, at: 0, inner }
    }
}

impl AsyncRead for H2Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.at < me.prefix.len() {
            let n = (me.prefix.len() - me.at).min(buf.remaining());
            buf.put_slice(&me.prefix[me.at..me.at + n]);
            me.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Client resets of accepted streams in a fixed window.
struct ResetMeter {
    max: u32,
    window: Duration,
    state: parking_lot::Mutex<(Instant, u32)>,
}

impl ResetMeter {
    fn new(h2: &H2) -> Self {
        ResetMeter { max: h2.max_resets, window: h2.reset_window, state: parking_lot::Mutex::new((Instant::now(), 0)) }
    }

    /// Counts one reset; true when that is more than the window allows.
    fn hit(&self) -> bool {
        let mut s = self.state.lock();
        let now = Instant::now();
        if now.duration_since(s.0) > self.window {
            *s = (now, 0);
        }
        s.1 += 1;
        s.1 > self.max
    }
}

/// What every stream of a connection shares.
struct Shared {
    snap: Arc<Snapshot>,
    fi: usize,
    peer: SocketAddr,
    /// The address the client reached (the PROXY header's destination).
    local: SocketAddr,
    local_port: u16,
    tls: Option<TlsInfo>,
    resets: ResetMeter,
    /// Signalled when a client passes `max_resets`, or a rule's
    /// `silent_drop` (then `silent` is set): the connection ends.
    abuse: Notify,
    silent: AtomicBool,
}

impl Shared {
    fn fe(&self) -> &Frontend {
        &self.snap.config.frontends[self.fi]
    }
}

/// The `h2` server settings of a frontend.
fn builder(h2: &H2) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(h2.max_concurrent_streams)
        .initial_window_size(h2.initial_window_size)
        .initial_connection_window_size(h2.connection_window_size)
        .max_frame_size(h2.max_frame_size)
        .max_header_list_size(h2.max_header_list_size)
        .header_table_size(h2.header_table_size)
        .max_pending_accept_reset_streams(PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(LOCAL_ERROR_RESETS))
        .max_send_buffer_size(SEND_BUFFER)
        .enable_connect_protocol();
    b
}

/// Serves an HTTP/2 connection until it ends: the preface, and the head of a
/// first request, by `head_by` (`timeout.http_request` after the connection
/// came, on h2c, or after the TLS handshake; else GOAWAY and the connection
/// closes), then streams until the client closes, the connection stays without
/// a stream for `timeout.keep_alive` (GOAWAY), the server stops (GOAWAY, then
/// the streams in flight finish) or the client abuses it (GOAWAY
/// ENHANCE_YOUR_CALM). After a GOAWAY, a client that does not end the
/// connection within `timeout.client` of its last stream is dropped.
pub async fn serve(
    snap: Arc<Snapshot>,
    fi: usize,
    io: H2Io,
    tls: Option<TlsInfo>,
    ends: (SocketAddr, u16, Option<SocketAddr>),
    head_by: tokio::time::Instant,
    mut stop: watch::Receiver<bool>,
) {
    let (peer, local_port, dst) = ends;
    let fe = &snap.config.frontends[fi];
    let _session = snap.frontend_stats[fi].open_session();
    let (h2cfg, timeouts) = (fe.h2, fe.timeouts);
    let local =
        dst.unwrap_or_else(|| io.inner.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], local_port))));
    // A rule's `silent_drop` closes the socket under the h2 connection: a
    // second descriptor of it, taken only where a rule may need it.
    let silent_fd = fe.rules.iter().any(|r| matches!(r.action, Some(Action::SilentDrop))).then(|| {
        use std::os::fd::BorrowedFd;
        io.inner.fd().and_then(|fd: BorrowedFd<'_>| fd.try_clone_to_owned().ok())
    });
    let silent_fd = silent_fd.flatten();
    let mut conn = match tokio::time::timeout_at(head_by, builder(&h2cfg).handshake(io)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(client = %peer, "HTTP/2 handshake failed: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!(client = %peer, "HTTP/2 handshake timed out");
            return;
        }
    };
    let shared = Arc::new(Shared {
        snap: snap.clone(),
        fi,
        peer,
        local,
        local_port,
        tls,
        resets: ResetMeter::new(&h2cfg),
        abuse: Notify::new(),
        silent: AtomicBool::new(false),
    });
    let mut streams = JoinSet::new();
    let mut closing = false;
    // Idle (or before its first request) the connection may give its slot
    // back at `max_connections` (io/reclaim.rs).
    let slot = Registration::new(Wait::Head, tokio::time::Instant::now().into_std());
    let idle = tokio::time::sleep(timeouts.keep_alive);
    tokio::pin!(idle);
    // After a graceful GOAWAY the h2 crate waits for the client to answer its
    // PING before it ends the connection: a client that never answers would
    // hold it (and its descriptor) for good. Once no stream is left, the
    // client has `timeout.client` to end it; then it is dropped. After the
    // GOAWAY for a late first request, only the GOAWAY's flush.
    let close_by = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(close_by);
    let mut close_armed = false;
    // Until a first request head is in: `head_by`.
    let (mut first_request, mut head_late) = (false, false);
    let head_timer = tokio::time::sleep_until(head_by);
    tokio::pin!(head_timer);
    loop {
        if *stop.borrow() && !closing {
            conn.graceful_shutdown();
            closing = true;
        }
        if closing && !close_armed {
            close_by.as_mut().reset(tokio::time::Instant::now() + timeouts.client);
            close_armed = true;
        }
        tokio::select! {
            r = conn.accept() => match r {
                Some(Ok((req, respond))) => {
                    first_request = true;
                    slot.busy();
                    streams.spawn(idle_poll::counted(stream(shared.clone(), req, respond)));
                }
                Some(Err(e)) => {
                    if !e.is_io() {
                        tracing::debug!(client = %peer, "HTTP/2 connection error: {e}");
                    }
                    break;
                }
                None => break,
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {
                if streams.is_empty() {
                    let now = tokio::time::Instant::now();
                    slot.set(Wait::Idle, now.into_std());
                    idle.as_mut().reset(now + timeouts.keep_alive);
                    if closing {
                        close_by.as_mut().reset(now + timeouts.client);
                    }
                }
            }
            _ = &mut close_by, if close_armed && streams.is_empty() => {
                tracing::debug!(client = %peer, "HTTP/2: the client did not end the connection after GOAWAY");
                break;
            }
            _ = &mut head_timer, if !first_request && !head_late => {
                tracing::debug!(client = %peer, "HTTP/2: no request head within timeout.http_request");
                conn.abrupt_shutdown(Reason::NO_ERROR);
                (closing, head_late, close_armed) = (true, true, true);
                close_by.as_mut().reset(tokio::time::Instant::now() + GOAWAY_FLUSH);
            }
            _ = slot.taken(), if streams.is_empty() && !closing => {
                tracing::debug!(client = %peer, "HTTP/2: idle at max_connections with a client waiting, closing");
                conn.abrupt_shutdown(Reason::NO_ERROR);
                (closing, head_late, close_armed) = (true, true, true);
                close_by.as_mut().reset(tokio::time::Instant::now() + GOAWAY_FLUSH);
            }
            _ = &mut idle, if streams.is_empty() && !closing => {
                conn.graceful_shutdown();
                closing = true;
            }
            _ = shared.abuse.notified() => {
                if shared.silent.load(Ordering::Relaxed) {
                    if let Some(fd) = &silent_fd {
                        crate::io::sockopt::silent_close(fd.as_fd());
                    }
                    break;
                }
                tracing::info!(client = %peer, frontend = %fe.name, "HTTP/2: too many streams reset by the client, closing");
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            }
            r = stop.changed(), if !closing => if r.is_err() {
                conn.graceful_shutdown();
                closing = true;
            },
        }
    }
    // The connection is gone: the streams still running can send nothing more.
    streams.abort_all();
    while streams.join_next().await.is_some() {}
}

/// Whether the client reset the stream (RST_STREAM) before Tollgate was done.
fn reset_by_client(poll: impl FnOnce(&mut Context<'_>) -> Poll<Result<Reason, h2::Error>>) -> bool {
    matches!(poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(Ok(_)))
}

/// One stream: its request and response heads, counters and log line.
struct Stream {
    sh: Arc<Shared>,
    head: RequestHead,
    resp: ResponseHead,
    /// The size of the request head, as the HTTP/1.1 text it stands for.
    head_len: u64,
    /// Request body bytes passed on.
    body_in: u64,
    status: u16,
    bytes_out: u64,
    log: LogSlot,
    /// The client asked for `websocket` by extended CONNECT (RFC 8441).
    websocket: bool,
    /// The cache's plan for the exchange (pipeline/serve.rs).
    cache: Option<Box<CachePlan>>,
    /// A server connection kept for this client alone (pipeline.rs).
    private: Option<Upstream>,
    /// This stream's entry for `shutdown sessions server` (lb/shutdown.rs).
    watcher: Watcher,
    /// The table entries the request counts in (lb/track.rs).
    tracked: Tracked,
}

/// Serves one stream, from its request to its log line.
async fn stream(sh: Arc<Shared>, req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
    let start = Instant::now();
    let (parts, mut body) = req.into_parts();
    let mut s = Stream {
        sh: sh.clone(),
        head: RequestHead::default(),
        resp: ResponseHead::default(),
        head_len: 0,
        body_in: 0,
        status: 0,
        bytes_out: 0,
        log: None,
        websocket: false,
        cache: None,
        private: None,
        watcher: Watcher::new(),
        tracked: Tracked::default(),
    };
    let ends = (sh.peer, sh.fe().name.as_str());
    s.log = mux::log_record(sh.snap.access_log.as_ref(), start, ends, sh.tls.as_ref(), &parts, "HTTP/2.0");
    let result = s.run(&parts, &mut body, &mut respond).await;
    let stats = &sh.snap.frontend_stats[sh.fi];
    match result {
        Ok(()) => {}
        Err(Fail::Respond(e)) => {
            if matches!(e, ProxyError::Refused { .. }) {
                stats.request_errors.fetch_add(1, Ordering::Relaxed);
            }
            s.respond_error(&mut respond, e, parts.method == http::Method::HEAD).await;
        }
        Err(Fail::Abort(why)) => {
            let why = if reset_by_client(|cx| respond.poll_reset(cx)) { Termination::ClientReset } else { why };
            if why == Termination::SilentDrop {
                // The whole connection goes, without a word (as HAProxy's silent-drop).
                sh.silent.store(true, Ordering::Relaxed);
                sh.abuse.notify_one();
            }
            s.abort(why);
        }
    }
    stats.h2_requests.fetch_add(1, Ordering::Relaxed);
    stats.count_exchange(s.status, s.head_len + s.body_in, s.bytes_out, start.elapsed());
    s.tracked.finish(s.status, s.head_len + s.body_in, s.bytes_out);
    if let Some((sink, rec)) = s.log.take() {
        sink.write(&rec);
    }
}

impl Stream {
    fn fe(&self) -> &Frontend {
        self.sh.fe()
    }

    /// The exchange: the request phase (watching for the client's reset), then
    /// the response.
    async fn run(
        &mut self,
        parts: &http::request::Parts,
        body: &mut RecvStream,
        respond: &mut SendResponse<Bytes>,
    ) -> Result<(), Fail> {
        // A client waiting for 100 (Continue) before its body gets it now
        // (RFC 9110 section 10.1.1 lets an intermediary answer it).
        let expects =
            parts.headers.get(http::header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if expects && !body.is_end_stream() {
            let _ = respond.send_informational(Response::builder().status(100).body(()).unwrap_or_default());
        }
        // The request phase sends interim heads on the stream while this
        // watches it for a reset: both reach it through the lock, one at a time.
        let shared = parking_lot::Mutex::new(&mut *respond);
        let ready = tokio::select! {
            biased;
            r = self.request(parts, body, &shared) => r,
            _ = std::future::poll_fn(|cx| shared.lock().poll_reset(cx)) => return Err(Fail::Abort(Termination::ClientReset)),
        };
        // -- cache hook 4 (pipeline/serve.rs), the origin failed: stale-if-error.
        let ready = match ready {
            Err(Fail::Respond(e)) => {
                let tls = self.sh.tls.as_ref();
                match self.cache.take().and_then(|plan| plan.failed(&mut self.head, &e, tls)) {
                    Some(answer) => Ready::Cached(answer),
                    None => return Err(Fail::Respond(e)),
                }
            }
            r => r?,
        };
        match ready {
            Ready::Redirect { code, location } => {
                let mut r = self.local_response(code);
                r.headers_mut().insert(http::header::LOCATION, header_value(location.as_bytes()));
                r.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("0"));
                if let Some((_, rec)) = self.log.as_mut() {
                    rec.status = code;
                    rec.termination = Some(Termination::Redirect.as_str());
                }
                self.status = code;
                respond.send_response(r, true).map_err(|_| Fail::Abort(Termination::ClientAborted))?;
                Ok(())
            }
            Ready::Cached(answer) => self.send_cached(respond, answer).await,
            Ready::File(f) => {
                // A static file (session/file.rs).
                self.status = f.status;
                let (sent, result) = crate::session::file::send_h2(respond, *f, self.fe().timeouts.client).await;
                self.bytes_out = sent;
                if let Some((_, rec)) = self.log.as_mut() {
                    rec.status = self.status;
                    rec.bytes = sent;
                }
                result.map_err(Fail::Abort)
            }
            Ready::Proxied(p) => {
                self.response(p, body, respond).await?;
                // -- cache hook 4 (pipeline/serve.rs): the response went out
                // whole: stored, if its end did not store it already.
                if let Some(mut plan) = self.cache.take() {
                    plan.finish(&self.head);
                }
                Ok(())
            }
        }
    }

    /// From the request head to the server's response head: the stream's
    /// fields become a request head, checked as an HTTP/1.1 one is, then the
    /// request phase every exchange runs (pipeline.rs).
    async fn request(
        &mut self,
        parts: &http::request::Parts,
        body: &mut RecvStream,
        respond: &parking_lot::Mutex<&mut SendResponse<Bytes>>,
    ) -> Result<Ready, Fail> {
        let sh = self.sh.clone();
        let snap = &sh.snap;
        let fe = sh.fe();
        let has_body = !body.is_end_stream();
        self.websocket = parts.method == http::Method::CONNECT
            && parts
                .extensions
                .get::<h2::ext::Protocol>()
                .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
            && fe.allows_upgrade(b"websocket");
        // A plain CONNECT (RFC 9113 section 8.5) names a destination for a
        // forward proxy (pipeline/forward.rs; 405 on other backends): its
        // DATA frames are the tunnel's bytes, not a body.
        let connect = parts.method == http::Method::CONNECT && !self.websocket;
        let has_body = has_body && !connect;
        // RFC 9113 section 8.3.1: `:scheme` names a scheme appropriate to the
        // target; the servers here speak HTTP, so only http and https are
        // (as in an absolute-form HTTP/1.1 target, h1.rs). The h2 crate has
        // seen to it that only a plain CONNECT goes without one.
        if let Some(scheme) = parts.uri.scheme_str()
            && !scheme.eq_ignore_ascii_case("http")
            && !scheme.eq_ignore_ascii_case("https")
        {
            return Err(ProxyError::Refused { status: 400, reason: "bad-scheme" }.into());
        }
        let key = self.websocket.then(websocket_key);
        let limits = (fe.limits.max_headers, fe.limits.max_header_size, fe.limits.max_uri_size);
        self.head_len = load_head(&mut self.head, parts, has_body, key.as_deref(), limits)
            .map_err(|r| ProxyError::Refused { status: r.status, reason: r.reason })? as u64;
        let framing = self.head.framing();
        let x = Exchange {
            snap,
            fi: sh.fi,
            peer: sh.peer,
            tls: sh.tls.as_ref(),
            local_port: sh.local_port,
            head: &mut self.head,
            resp: &mut self.resp,
            cache: &mut self.cache,
            private: &mut self.private,
            out: &mut Vec::with_capacity(1024),
            log: &mut self.log,
            watch: self.watcher.id(),
            tracked: &mut self.tracked,
        };
        let mut client = H2Client {
            body,
            respond,
            body_in: &mut self.body_in,
            fe,
            local: sh.local,
            chunked: framing == Framing::Chunked,
            complete: framing == Framing::Empty,
        };
        pipeline::request(x, &mut client).await
    }

    /// Sends the server's response head, then its body (or, for a WebSocket,
    /// becomes a tunnel).
    async fn response(
        &mut self,
        mut p: Proxied,
        body: &mut RecvStream,
        respond: &mut SendResponse<Bytes>,
    ) -> Result<(), Fail> {
        let server = p.slot.server.clone();
        let (server_idle, tunnel_idle) = (p.server_idle, p.tunnel_idle);
        let status = self.resp.status;
        let switched = status == 101 || p.connect;
        let is_head = self.head.method() == "HEAD";
        let framing = if switched { Framing::Empty } else { self.resp.framing(is_head) };
        let mut r = Response::new(());
        *r.status_mut() = if switched {
            StatusCode::OK
        } else {
            StatusCode::from_u16(status).map_err(|_| Fail::Respond(ProxyError::BadGateway))?
        };
        let headers = r.headers_mut();
        self.resp.h2_fields(switched, |name, value| {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
                headers.append(n, v);
            }
        });
        let end = framing.is_empty() && !switched;
        self.status = if switched { 200 } else { status };
        self.bytes_out = self.head_len;
        // -- cache hook 4 (pipeline/serve.rs): an empty body is complete now.
        if end && let Some(plan) = self.cache.as_deref_mut() {
            plan.finish(&self.head);
        }
        let mut send = match respond.send_response(r, end) {
            Ok(s) => s,
            Err(_) => return Err(Fail::Abort(Termination::ClientAborted)),
        };
        if switched {
            let watch = self.watcher.id();
            let why = {
                let tunnel = std::pin::pin!(self.tunnel(&mut p.up, &mut send, body, tunnel_idle));
                server.unless_shut(tunnel, watch).await.unwrap_or_else(|killed| killed)
            };
            if why == Termination::Killed {
                send.send_reset(Reason::CANCEL);
            }
            if let Some((_, r)) = self.log.as_mut() {
                r.termination = Some(why.as_str());
            }
            return Ok(());
        }
        let mut rbody = BodyCursor::new(framing);
        let client_idle = self.fe().timeouts.client;
        // Body bytes sent to the client: the encoded ones when compressed.
        let mut sent = 0u64;
        let outcome = if end {
            Ok(())
        } else {
            let tee = self.cache.as_deref_mut().map(|plan| (plan, &self.head));
            let watch = self.watcher.id();
            let enc = p.encoder.as_deref_mut().map(|e| (e, &mut sent));
            let relay =
                std::pin::pin!(send_body(&mut send, &mut p.up, &mut rbody, (server_idle, client_idle), tee, enc));
            server.unless_shut(relay, watch).await.unwrap_or_else(Err)
        };
        let to_client = if p.encoder.is_some() { sent } else { rbody.data };
        self.bytes_out += to_client;
        server.stats.bytes_out.fetch_add(rbody.data, Ordering::Relaxed);
        if let Some((_, r)) = self.log.as_mut() {
            r.bytes = to_client;
        }
        let reusable = !self.resp.server_closes && p.upload_done && framing != Framing::UntilClose;
        let mut private = None;
        match outcome {
            Ok(()) => {
                if reusable && p.up.buf.is_empty() {
                    exchange::park(&mut private, p.up, &server);
                }
                if !p.upload_done {
                    discard_rest(body, client_idle).await;
                }
                Ok(())
            }
            Err(why @ (Termination::ClientAborted | Termination::ClientTimeout)) => {
                let why = if reset_by_client(|cx| send.poll_reset(cx)) { Termination::ClientReset } else { why };
                send.send_reset(Reason::CANCEL);
                if reusable && drain(&mut p.up, &mut rbody).await {
                    exchange::park(&mut private, p.up, &server);
                    server.stats.connections_saved.fetch_add(1, Ordering::Relaxed);
                }
                Err(Fail::Abort(why))
            }
            Err(why) => {
                send.send_reset(Reason::INTERNAL_ERROR);
                Err(Fail::Abort(why))
            }
        }
    }

    /// After a server's 101 to an extended CONNECT (RFC 8441): the stream's DATA
    /// frames and the server connection's bytes relayed both ways, each side's
    /// end (END_STREAM, FIN) passed on, until both ended or neither sent
    /// anything for `idle` (`timeout.tunnel`). Returns why it ended.
    async fn tunnel(
        &mut self,
        up: &mut Upstream,
        send: &mut SendStream<Bytes>,
        body: &mut RecvStream,
        idle: Duration,
    ) -> Termination {
        let (mut client_open, mut server_open) = (true, true);
        let mut down = up.buf.len() as u64;
        if !up.buf.is_empty() {
            let first = Bytes::copy_from_slice(up.buf.data());
            up.buf.consume(up.buf.len());
            if send_all(send, first, false, idle).await.is_err() {
                return Termination::ClientAborted;
            }
        }
        let mut why = Termination::TunnelClosed;
        while client_open || server_open {
            tokio::select! {
                d = body.data(), if client_open => match d {
                    Some(Ok(data)) => {
                        self.body_in += data.len() as u64;
                        if exchange::within(up.stream.write_all(&data), idle).await.is_err() {
                            why = Termination::TunnelServerError;
                            break;
                        }
                        let _ = body.flow_control().release_capacity(data.len());
                    }
                    Some(Err(_)) => {
                        why = Termination::ClientAborted;
                        break;
                    }
                    None => {
                        client_open = false;
                        let _ = up.stream.shutdown().await;
                    }
                },
                r = up.stream.read(up.buf.spare()), if server_open => match r {
                    Ok(n) if n > 0 => {
                        down += n as u64;
                        up.buf.commit(n);
                        let data = Bytes::copy_from_slice(up.buf.data());
                        up.buf.consume(n);
                        if send_all(send, data, false, idle).await.is_err() {
                            why = Termination::ClientAborted;
                            break;
                        }
                    }
                    Ok(_) => {
                        server_open = false;
                        let _ = send.send_data(Bytes::new(), true);
                    }
                    Err(_) => {
                        why = Termination::TunnelServerError;
                        break;
                    }
                },
                _ = tokio::time::sleep(idle) => {
                    why = Termination::TunnelTimeout;
                    break;
                }
            }
        }
        // RFC 9113 section 8.5: a broken connection to the server is a
        // CONNECT_ERROR on the stream.
        match why {
            Termination::TunnelClosed => {}
            Termination::TunnelServerError => send.send_reset(Reason::CONNECT_ERROR),
            _ => send.send_reset(Reason::CANCEL),
        }
        self.bytes_out += down;
        if let Some((_, r)) = self.log.as_mut() {
            r.bytes = down;
        }
        why
    }

    /// A response of Tollgate's own, with `cache-control: no-cache` and HSTS.
    fn local_response(&self, status: u16) -> Response<()> {
        mux::local_response(status, self.sh.tls.as_ref().and_then(|t| t.hsts.as_ref()))
    }

    /// Sends a response the cache gave (pipeline/serve.rs): a stored one, its
    /// body as the client's window allows, or one of the cache's own.
    async fn send_cached(&mut self, respond: &mut SendResponse<Bytes>, answer: Answer) -> Result<(), Fail> {
        let head_request = self.head.method() == "HEAD";
        if let Some((_, rec)) = self.log.as_mut() {
            rec.set_cache(answer.cache_status());
        }
        let hsts = self.sh.tls.as_ref().and_then(|t| t.hsts.as_ref());
        let (r, body, termination) = mux::cached_parts(answer, head_request, hsts)?;
        self.status = r.status().as_u16();
        self.bytes_out = body.len();
        if let Some((_, rec)) = self.log.as_mut() {
            rec.status = self.status;
            rec.bytes = body.len();
            if termination.is_some() {
                rec.termination = termination.map(Termination::as_str);
            }
        }
        let mut send =
            respond.send_response(r, body.is_empty()).map_err(|_| Fail::Abort(Termination::ClientAborted))?;
        let (idle, last) = (self.fe().timeouts.client, body.segments().len());
        for (i, segment) in body.segments().iter().enumerate() {
            if let Err(why) = send_all(&mut send, segment.clone(), i + 1 == last, idle).await {
                send.send_reset(Reason::CANCEL);
                return Err(Fail::Abort(why));
            }
        }
        Ok(())
    }

    /// Answers with the error page of `e` (rescue.rs).
    async fn respond_error(&mut self, respond: &mut SendResponse<Bytes>, e: ProxyError, head_request: bool) {
        let fe = self.fe();
        let reply = rescue::respond(&e, fe);
        if reply.status >= 500 {
            tracing::debug!(client = %self.sh.peer, frontend = %fe.name, "{}: {}", reply.status, e.reason());
        }
        let r = mux::error_response(&reply, self.sh.tls.as_ref().and_then(|t| t.hsts.as_ref()));
        let client_idle = fe.timeouts.client;
        self.status = reply.status;
        if let Some((_, rec)) = self.log.as_mut() {
            rec.status = reply.status;
            rec.bytes = reply.body.len() as u64;
            rec.termination.get_or_insert(e.reason());
        }
        let empty = head_request || reply.body.is_empty();
        let Ok(mut send) = respond.send_response(r, empty) else { return };
        if !empty && send_all(&mut send, Bytes::from(reply.body.into_owned()), true, client_idle).await.is_ok() {
            self.bytes_out = self.bytes_out.max(1);
        }
    }

    /// The exchange ended early: the log says why, and a client reset counts
    /// toward `h2.max_resets`.
    fn abort(&mut self, why: Termination) {
        if let Some((_, r)) = self.log.as_mut() {
            r.termination.get_or_insert(why.as_str());
        }
        if why == Termination::ClientReset && self.sh.resets.hit() {
            self.sh.abuse.notify_one();
        }
    }
}

/// The most of a request body read and dropped after the server answered
/// before its end.
const DISCARD_LIMIT: u64 = 256 * 1024;

/// The client's side of an HTTP/2 exchange (the request phase, pipeline.rs):
/// the stream's request body and its response handle, through which interim
/// heads go (shared with the watch for the client's reset).
struct H2Client<'a, 'r> {
    body: &'a mut RecvStream,
    respond: &'a parking_lot::Mutex<&'r mut SendResponse<Bytes>>,
    /// Request body bytes passed on.
    body_in: &'a mut u64,
    fe: &'a Frontend,
    local: SocketAddr,
    /// The body goes to the server chunk-framed (the request gave no length).
    chunked: bool,
    /// The request has no body.
    complete: bool,
}

impl ClientSide for H2Client<'_, '_> {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The body comes as DATA frames, none of them read yet.
    fn take_early(&mut self) -> Result<usize, Fail> {
        Ok(0)
    }

    fn early(&self, _: usize) -> &[u8] {
        &[]
    }

    fn body_done(&self) -> bool {
        self.complete
    }

    fn body_bytes(&self) -> u64 {
        *self.body_in
    }

    fn takes_interims(&self, _: &RequestHead) -> bool {
        true
    }

    /// (A `100 Continue` went before the request phase.)
    async fn head_sent(&mut self, _: usize, _: &RequestHead) {}

    async fn interim(&mut self, resp: &ResponseHead) -> Result<(), Fail> {
        let mut r = Response::new(());
        *r.status_mut() = StatusCode::from_u16(resp.status).map_err(|_| ProxyError::BadGateway)?;
        let headers = r.headers_mut();
        resp.h2_interim_fields(|name, value| {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
                headers.append(n, v);
            }
        });
        self.respond.lock().send_informational(r).map_err(|_| Fail::Abort(Termination::ClientAborted))
    }

    /// Streams the request body to the server: each DATA frame is written, then
    /// released to the client's window; chunk-framed when the request had no
    /// Content-Length. Returns whether it all went: false when the server
    /// answered before the end (its response is then read).
    async fn upload(&mut self, up: &mut Upstream, server_idle: Duration) -> Result<bool, Fail> {
        let (body, chunked) = (&mut *self.body, self.chunked);
        let limit = self.fe.limits.max_request_body;
        let client_idle = self.fe.timeouts.client;
        let mut frame = Vec::new();
        loop {
            let data = tokio::select! {
                biased;
                d = tokio::time::timeout(client_idle, body.data()) => d,
                _ = up.stream.readable() => {
                    // The server speaks before the body is complete: an early answer.
                    if exchange::early_answer(up)? {
                        return Ok(false);
                    }
                    continue;
                }
            };
            let data = match data {
                Err(_) => return Err(ProxyError::ClientTimeout.into()),
                Ok(None) => break,
                Ok(Some(Err(_))) => return Err(Fail::Abort(Termination::ClientAborted)),
                Ok(Some(Ok(d))) => d,
            };
            if data.is_empty() {
                continue;
            }
            *self.body_in += data.len() as u64;
            if limit.is_some_and(|l| *self.body_in > l) {
                return Err(ProxyError::BodyTooLarge.into());
            }
            let bytes: &[u8] = if chunked {
                frame.clear();
                frame.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                frame.extend_from_slice(&data);
                frame.extend_from_slice(b"\r\n");
                &frame
            } else {
                &data
            };
            match exchange::within(up.stream.write_all(bytes), server_idle).await {
                Ok(()) => {
                    let _ = body.flow_control().release_capacity(data.len());
                }
                Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
                // The server stopped reading: perhaps it answered; read that.
                Err(_) => return Ok(false),
            }
        }
        if chunked {
            match exchange::within(up.stream.write_all(b"0\r\n\r\n"), server_idle).await {
                Ok(()) => {}
                Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
                Err(_) => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// The server answered before the request body ended: reads what the client
/// goes on sending (up to [`DISCARD_LIMIT`], each frame within `idle`) and drops
/// it, as HAProxy drains a request after an early response. The stream thus
/// stays open to the body's end, so a malformed one (DATA beyond its
/// Content-Length) still gets the stream error RFC 9113 section 8.1.1 asks for
/// rather than being hidden by the early answer; past the limit the client is
/// asked to stop (RST_STREAM NO_ERROR, section 8.1).
async fn discard_rest(body: &mut RecvStream, idle: Duration) {
    let mut read = 0u64;
    while read <= DISCARD_LIMIT {
        match tokio::time::timeout(idle, body.data()).await {
            Ok(Some(Ok(d))) => {
                read += d.len() as u64;
                let _ = body.flow_control().release_capacity(d.len());
            }
            _ => return,
        }
    }
}

/// An HTTP/2 stream's DATA frames, sent as the client's window allows.
impl BodySink for SendStream<Bytes> {
    async fn data(&mut self, data: Bytes, end: bool, idle: Duration) -> Result<(), Termination> {
        send_all(self, data, end, idle).await
    }

    async fn trailers(&mut self, trailers: http::HeaderMap) -> Result<(), Termination> {
        self.send_trailers(trailers).map_err(|_| Termination::ClientAborted)
    }

    async fn reset(&mut self) {
        let _ = std::future::poll_fn(|cx| self.poll_reset(cx)).await;
    }
}

/// A Sec-WebSocket-Key (RFC 6455 section 4.1: 16 random bytes, base64) for the
/// HTTP/1.1 handshake an extended CONNECT becomes.
fn websocket_key() -> String {
    use base64::Engine;
    use std::hash::BuildHasher;
    let seed = std::collections::hash_map::RandomState::new();
    let a = seed.hash_one(Instant::now());
    let b = seed.hash_one(a);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The request head an HTTP/2 request stands for, loaded from its fields
/// (tollgate-wire's `request_from_fields`, the HTTP/1.1 parser's checks):
/// `:authority` as Host (a Host field beside it is dropped), the cookie
/// fields joined into one (RFC 9113 section 8.2.3), `Transfer-Encoding:
/// chunked` for a body without a length (how it goes on to an HTTP/1.1
/// server), and for an extended CONNECT (RFC 8441) the WebSocket handshake
/// of HTTP/1.1 with `key`. Returns the head's size as HTTP/1.1 text.
pub(crate) fn load_head(
    head: &mut RequestHead,
    parts: &http::request::Parts,
    has_body: bool,
    key: Option<&str>,
    limits: (usize, usize, usize),
) -> Result<usize, h1::Reject> {
    let method = if key.is_some() { "GET" } else { parts.method.as_str() };
    let target = match parts.uri.path_and_query() {
        Some(p) => p.as_str(),
        // A plain CONNECT has :authority alone (RFC 9113 section 8.5).
        None if parts.method == http::Method::CONNECT => parts.uri.authority().map_or("", |a| a.as_str()),
        None => "/",
    };
    let authority = parts.uri.authority();
    let mut cookies: Option<Vec<u8>> = None;
    for value in parts.headers.get_all(http::header::COOKIE) {
        let c = cookies.get_or_insert_with(Vec::new);
        if !c.is_empty() {
            c.extend_from_slice(b"; ");
        }
        c.extend_from_slice(value.as_bytes());
    }
    let mut fields: Vec<(&[u8], &[u8])> = Vec::with_capacity(parts.headers.len() + 4);
    if let Some(a) = authority {
        // RFC 9113 section 8.3.1: a Host naming another authority than
        // :authority is malformed; the server would see one, the rules the other.
        if parts
            .headers
            .get_all(http::header::HOST)
            .iter()
            .any(|h| !h.as_bytes().eq_ignore_ascii_case(a.as_str().as_bytes()))
        {
            return Err(h1::Reject { status: 400, reason: "host-authority-mismatch" });
        }
        fields.push((b"host", a.as_str().as_bytes()));
    }
    for (name, value) in &parts.headers {
        if (name == http::header::HOST && authority.is_some()) || name == http::header::COOKIE {
            continue;
        }
        fields.push((name.as_str().as_bytes(), value.as_bytes()));
    }
    if let Some(c) = &cookies {
        fields.push((b"cookie", c));
    }
    if has_body && key.is_none() && !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        fields.push((b"transfer-encoding", b"chunked"));
    }
    if let Some(key) = key {
        fields.push((b"connection", b"upgrade"));
        fields.push((b"upgrade", b"websocket"));
        fields.push((b"sec-websocket-key", key.as_bytes()));
    }
    let size = h1::request_from_fields(head, method.as_bytes(), target.as_bytes(), fields, limits)?;
    head.https = parts.uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_wire::h1::Parsed;

    /// RFC 9113 section 8.3.1: a Host that names another authority than
    /// :authority is refused; the same one (any case) is not.
    #[test]
    fn a_host_other_than_the_authority_is_refused() {
        let limits = (100, 65536, 8192);
        let req = |host: &str| parts(http::Request::get("https://a.example/x").header("host", host).body(()).unwrap());
        let mut head = RequestHead::default();
        let r = load_head(&mut head, &req("b.example"), false, None, limits);
        assert_eq!(r.err().map(|r| r.reason), Some("host-authority-mismatch"));
        assert!(load_head(&mut head, &req("A.Example"), false, None, limits).is_ok());
        assert_eq!(head.fields.get(b"host"), Some(&b"a.example"[..]));
    }

    fn parts(req: http::Request<()>) -> http::request::Parts {
        req.into_parts().0
    }

    /// The head `req` stands for, loaded from its fields, and the head the
    /// HTTP/1.1 parser makes of `text`: the same method, target, fields,
    /// framing and upgrade, and the size of `text`.
    fn same_as_text(req: http::Request<()>, has_body: bool, key: Option<&str>, text: &str) -> RequestHead {
        let mut from_fields = RequestHead::default();
        let size = load_head(&mut from_fields, &parts(req), has_body, key, (100, 65536, 8192)).expect("accepted");
        let mut parsed = RequestHead::default();
        assert!(matches!(h1::parse_request(text.as_bytes(), &mut parsed, 100, 65536, 8192), Ok(Parsed::Complete(..))));
        assert_eq!(size, text.len(), "{text}");
        assert_eq!((from_fields.method(), from_fields.target()), (parsed.method(), parsed.target()));
        assert!(from_fields.fields.iter().eq(parsed.fields.iter()), "{text}");
        assert_eq!((from_fields.framing(), from_fields.upgrade), (parsed.framing(), parsed.upgrade));
        from_fields
    }

    #[test]
    fn an_h2_request_is_the_head_its_http11_text_would_be() {
        let req = http::Request::post("https://example.com:8443/up?x=1")
            .header("host", "Example.com:8443")
            .header("cookie", "a=1")
            .header("x-trace", "t")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let text = "POST /up?x=1 HTTP/1.1\r\nhost: example.com:8443\r\nx-trace: t\r\ncookie: a=1; b=2\r\n\
                    transfer-encoding: chunked\r\n\r\n";
        let head = same_as_text(req, true, None, text);
        assert_eq!(head.framing(), Framing::Chunked);
        assert_eq!(head.fields.get(b"host"), Some(&b"example.com:8443"[..]));

        let req = http::Request::put("https://e.test/a").header("content-length", "5").body(()).unwrap();
        let head = same_as_text(req, true, None, "PUT /a HTTP/1.1\r\nhost: e.test\r\ncontent-length: 5\r\n\r\n");
        assert_eq!(head.framing(), Framing::Length(5), "the length is kept");
        let req = http::Request::get("https://e.test/").body(()).unwrap();
        let head = same_as_text(req, false, None, "GET / HTTP/1.1\r\nhost: e.test\r\n\r\n");
        assert_eq!(head.framing(), Framing::Empty, "no body, no framing");
    }

    #[test]
    fn an_extended_connect_becomes_a_websocket_upgrade() {
        let req = http::Request::connect("https://e.test/chat")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        let key = websocket_key();
        assert_eq!(key.len(), 24);
        assert_ne!(key, websocket_key(), "a new key each time");
        let text = format!(
            "GET /chat HTTP/1.1\r\nhost: e.test\r\nsec-websocket-version: 13\r\nsec-websocket-protocol: chat\r\n\
             connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-key: {key}\r\n\r\n"
        );
        let head = same_as_text(req, true, Some(&key), &text);
        assert_eq!((head.method(), head.target()), ("GET", "/chat"));
        assert!(head.upgrade);
        assert_eq!(head.fields.get(b"sec-websocket-key"), Some(key.as_bytes()));
    }

    /// What the HTTP/1.1 parser refuses in a head, the fields path refuses too:
    /// framing the proxy cannot pass on, a Host beside an absolute target, too
    /// many fields or too many bytes.
    #[test]
    fn an_h2_request_is_refused_where_its_http11_text_would_be() {
        let refused = |req: http::Request<()>, limits| {
            let mut head = RequestHead::default();
            load_head(&mut head, &parts(req), true, None, limits).map(|_| ()).map_err(|r| (r.status, r.reason))
        };
        let req =
            |name: &str, value: &str| http::Request::post("https://e.test/").header(name, value).body(()).unwrap();
        let big = (100, 65536, 8192);
        assert_eq!(refused(req("content-length", "5, 6"), big), Err((400, "differing-content-length")));
        assert_eq!(refused(req("connection", "content-length"), big), Err((400, "connection-lists-framing")));
        assert_eq!(refused(req("expect", "nothing"), big), Err((417, "expectation-failed")));
        assert_eq!(refused(req("x", "y"), (2, 65536, 8192)), Err((431, "too-many-headers")));
        assert_eq!(refused(req("x", &"y".repeat(100)), (100, 64, 8192)), Err((431, "headers-too-large")));
        let long = http::Request::get(format!("https://e.test/{}", "a".repeat(100))).body(()).unwrap();
        assert_eq!(refused(long, (100, 65536, 50)), Err((414, "uri-too-long")));
        assert_eq!(refused(req("x", "ok"), big), Ok(()));
    }

    #[test]
    fn resets_are_counted_in_a_window() {
        let m = ResetMeter::new(&H2 { max_resets: 3, reset_window: Duration::from_millis(200), ..H2::default() });
        assert!(!m.hit() && !m.hit() && !m.hit());
        assert!(m.hit(), "the fourth in the window is one too many");
        std::thread::sleep(Duration::from_millis(250));
        assert!(!m.hit(), "a new window");
    }
}
