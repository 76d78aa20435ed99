//! One client connection, one task: read a request head, route, balance, send it
//! on a pooled server connection, stream the bodies both ways, log, and go again.
//!
//! The phases of one exchange, in order (docs/architecture.md): head (timers:
//! `http_request`, `keep_alive`) -> check (tollgate-wire's h1) -> the request
//! phase, the same for HTTP/2 streams (pipeline.rs: route, auth, cache,
//! balance, connect, request body, response head; [`H1Client`] is this
//! connection's side of it) -> the response written here (a redirect, a
//! cached answer, or the server's, streamed) -> log.
//!
//! The task drives both sockets itself; the server connection is borrowed from
//! the worker's pool for the exchange and returned when its response is complete.
//! Every failure is a [`ProxyError`] turned into a response by [`crate::pipeline::rescue`]
//! while nothing of the response has gone out, or a closed connection after.

use crate::io::buf::{BUF_SIZE, Buf};
use crate::io::lazy_tcp::LazyTcp;
use crate::io::reclaim::{Registration, Wait};
use crate::io::splice::Pipe;
use crate::lb::ServerRt;
use crate::lb::shutdown::Watcher;
use crate::lb::track::Tracked;
use crate::net::tls::{ClientStream, TlsInfo};
use crate::observe::access_log::{Detail, LogRecord};
use crate::observe::counters::SessionGuard;
use crate::observe::termination::Termination;
use crate::pipeline::compress::Encoder;
use crate::pipeline::exchange::{self, Fail, IoFail, LogSlot};
use crate::pipeline::exchange::{deadline, drain, read_until, within};
use crate::pipeline::rescue::{self, ProxyError};
use crate::pipeline::serve::{Answer, CachePlan};
use crate::pipeline::snapshot::Snapshot;
use crate::pipeline::{self, ClientSide, Exchange, Proxied, Ready};
use crate::session::tcp::relay::{End, Idle, Moved, Side, relay};
use crate::upstream::Upstream;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::sleep_until;
use tollgate_config::Frontend;
use tollgate_wire::h1::{self, BodyCursor, Framing, Parsed, RequestHead, ResponseHead};

/// The read buffer of a server connection streaming a body larger than one
/// [`BUF_SIZE`] block: on 160 KiB responses 64 KiB reads took 1/4 of the
/// system calls of 16 KiB ones (docs/benchmarks.md).
const BODY_BUF_SIZE: usize = 64 * 1024;
/// A stored body up to this size goes out in the same write as its head.
const INLINE_BODY: u64 = 64 * 1024;
/// How long a TLS connection's close_notify alert may take to go out.
const CLOSE_NOTIFY_WAIT: Duration = Duration::from_secs(1);
/// When the server stops (a graceful stop, a hot binary upgrade), how long an
/// idle connection waits for one more request before it closes: a keep-alive
/// client may be sending it right then, and closing under it would fail that
/// request (HAProxy's `idle-close-on-response`). That request is answered
/// with `Connection: close`.
const LAST_REQUEST_WAIT: Duration = Duration::from_secs(1);
/// How long a client that may still be sending is read from before its
/// connection closes (`ClientStream::close`), as nginx's `lingering_timeout`.
const LINGER: Duration = Duration::from_secs(5);

/// A client connection.
pub struct Conn {
    snap: Arc<Snapshot>,
    fi: usize,
    peer: SocketAddr,
    /// The port the client connected to (X-Forwarded-Port).
    local_port: u16,
    stream: ClientStream,
    /// The TLS session, on a TLS bind.
    tls: Option<Box<TlsInfo>>,
    buf: Buf,
    out: Vec<u8>,
    head: RequestHead,
    resp: ResponseHead,
    served: u32,
    stop: watch::Receiver<bool>,
    /// The status and size of the response to the current request, once sent
    /// (0: none yet), for the frontend's counters.
    sent_status: u16,
    sent_bytes: u64,
    /// Counts this connection in its frontend's current sessions.
    _session: SessionGuard,
    /// A connection to a `send_proxy` server, kept for this client alone (its
    /// PROXY header names this client), as HAProxy keeps such connections private.
    private: Option<Upstream>,
    /// The address the client connected to, when a PROXY header said it.
    destination: Option<SocketAddr>,
    /// The cache's plan for the exchange in progress (pipeline/serve.rs).
    cache: Option<Box<CachePlan>>,
    /// This connection's entry for `shutdown sessions server` (lb/shutdown.rs).
    watcher: Watcher,
    /// When the first of the bytes given to [`Self::with_bytes`] came: the
    /// start of the first request, for its `timeout.http_request`.
    first_byte: Option<Instant>,
    /// The client may still be sending: the last request, or its body, was not
    /// read to its end (an early answer, a refused head). Its connection then
    /// closes with a linger.
    unread: bool,
    /// A rule's `silent_drop`: the connection closes without telling the client.
    silent: bool,
    /// The connection's entry for taking slots back at `max_connections`
    /// (io/reclaim.rs): waiting between requests or for a head, or busy.
    slot: Registration,
}

/// The log's reason for a partial head whose slot was taken back.
const SLOT_RECLAIMED: &str = "slot-reclaimed";

enum HeadWait {
    /// A complete request head of this many bytes, whose first byte came at `.1`.
    Ready(usize, Instant),
    /// The connection ends quietly (peer closed, keep-alive expired, stopping).
    Closed,
    /// The head is refused (or too slow: 408); answer and close.
    Refused(ProxyError, Instant),
}

impl Conn {
    pub fn new(
        snap: Arc<Snapshot>,
        fi: usize,
        stream: ClientStream,
        tls: Option<TlsInfo>,
        peer: SocketAddr,
        local_port: u16,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let _session = snap.frontend_stats[fi].open_session();
        Conn {
            destination: None,
            private: None,
            _session,
            sent_status: 0,
            sent_bytes: 0,
            snap,
            fi,
            peer,
            local_port,
            stream,
            tls: tls.map(Box::new),
            buf: Buf::new(),
            out: Vec::with_capacity(1024),
            head: RequestHead::default(),
            resp: ResponseHead::default(),
            served: 0,
            stop,
            cache: None,
            watcher: Watcher::new(),
            first_byte: None,
            unread: false,
            silent: false,
            slot: Registration::new(Wait::Head, Instant::now()),
        }
    }

    /// The address the client connected to, as a PROXY header gave it (the
    /// header's source address is `peer`).
    pub fn with_destination(mut self, dst: Option<SocketAddr>) -> Self {
        self.destination = dst;
        self
    }

    /// Bytes already read from the client (a plain bind with h2c found no
    /// HTTP/2 preface in them), the first at `first_byte`: the start of its
    /// first request, whose `timeout.http_request` runs from then.
    pub fn with_bytes(mut self, bytes: &[u8], first_byte: Instant) -> Self {
        self.buf.spare()[..bytes.len()].copy_from_slice(bytes);
        self.buf.commit(bytes.len());
        self.first_byte = Some(first_byte);
        self
    }

    fn fe(&self) -> &Frontend {
        &self.snap.config.frontends[self.fi]
    }

    /// Serves requests until the connection ends.
    pub async fn serve(mut self) {
        loop {
            let (len, start) = match self.read_head().await {
                HeadWait::Ready(len, start) => (len, start),
                HeadWait::Closed => break,
                HeadWait::Refused(e, start) => {
                    // A refused head leaves the client's bytes unread: the
                    // close lingers so the answer is not lost to a reset. Not
                    // for a slot taken back: the slot is for another client now.
                    self.unread = !matches!(e, ProxyError::Refused { reason: SLOT_RECLAIMED, .. });
                    let log = self.log_record(start, None);
                    self.sent_status = 0;
                    self.respond_error(e, log).await;
                    let stats = &self.snap.frontend_stats[self.fi];
                    stats.request_errors.fetch_add(1, Ordering::Relaxed);
                    stats.count_exchange(self.sent_status, self.buf.len() as u64, self.sent_bytes, start.elapsed());
                    break;
                }
            };
            let keep = self.exchange(len, start).await;
            self.served += 1;
            // A response sent once the server was stopping said `Connection:
            // close` (not keep); one sent just before did not, and its client
            // may be sending the next request: read_head waits for it.
            if !keep {
                break;
            }
        }
        if self.silent {
            self.stream.drop_silently();
            return;
        }
        self.stream.close(CLOSE_NOTIFY_WAIT, self.unread.then_some(LINGER)).await;
    }

    /// Waits for a complete request head, with the client-side timers:
    /// `http_request` from the first byte of a request (or from accept, for the
    /// first request) to the end of its head, 408 when it passes with a partial
    /// head; `keep_alive` for the next request to start (a quiet close).
    async fn read_head(&mut self) -> HeadWait {
        let fe = &self.snap.config.frontends[self.fi];
        let (limits, timeouts) = (fe.limits, fe.timeouts);
        let idle_from = Instant::now();
        let given = self.first_byte.take();
        let mut first_byte = (!self.buf.is_empty()).then(|| given.unwrap_or(idle_from));
        // Set when the server stops while the connection is idle, or has
        // stopped before it got here (after a keep-alive response, or before
        // a new connection's first request): it waits until then for one more
        // request (answered with `Connection: close`) rather than closing at
        // once, when the client may be sending it.
        let mut stop_by = (*self.stop.borrow()).then(|| Instant::now() + LAST_REQUEST_WAIT);
        let between = self.served > 0 && first_byte.is_none();
        self.slot.set(if between { Wait::Idle } else { Wait::Head }, idle_from);
        loop {
            if !self.buf.is_empty() {
                let max_head = limits.max_header_size;
                match h1::parse_request(
                    self.buf.data(),
                    &mut self.head,
                    limits.max_headers,
                    max_head,
                    limits.max_uri_size,
                ) {
                    Ok(Parsed::Complete((), len)) => {
                        self.slot.busy();
                        return HeadWait::Ready(len, first_byte.unwrap_or(idle_from));
                    }
                    Ok(Parsed::Partial) => {
                        if self.buf.is_full() && !self.buf.grow(max_head + 1) {
                            return HeadWait::Refused(ProxyError::HeadersTooLarge, first_byte.unwrap_or(idle_from));
                        }
                    }
                    Err(r) => {
                        let e = ProxyError::Refused { status: r.status, reason: r.reason };
                        return HeadWait::Refused(e, first_byte.unwrap_or(idle_from));
                    }
                }
            }
            let mut wait = match first_byte {
                Some(t) => t + timeouts.http_request,
                None if self.served > 0 => idle_from + timeouts.keep_alive,
                None => idle_from + timeouts.http_request,
            };
            let idle = first_byte.is_none();
            if idle && let Some(by) = stop_by {
                wait = wait.min(by);
            }
            let r = tokio::select! {
                biased;
                r = self.stream.read(self.buf.spare()) => r,
                _ = sleep_until(wait.into()) => {
                    return match first_byte {
                        Some(t) => HeadWait::Refused(ProxyError::RequestTimeout, t),
                        None => HeadWait::Closed,
                    };
                }
                _ = self.stop.changed(), if idle && stop_by.is_none() => {
                    stop_by = Some(Instant::now() + LAST_REQUEST_WAIT);
                    continue;
                }
                // Every slot is held and a client waits: this connection was
                // the one to give way (io/reclaim.rs).
                _ = self.slot.taken() => {
                    return match first_byte {
                        Some(t) => HeadWait::Refused(ProxyError::Refused { status: 408, reason: SLOT_RECLAIMED }, t),
                        None => HeadWait::Closed,
                    };
                }
            };
            match r {
                Ok(0) | Err(_) => return HeadWait::Closed,
                Ok(n) => {
                    self.buf.commit(n);
                    if first_byte.is_none() {
                        let now = Instant::now();
                        first_byte = Some(now);
                        // A keep-alive connection's next head: timed from its first byte.
                        if between {
                            self.slot.set(Wait::Head, now);
                        }
                    }
                }
            }
        }
    }

    fn log_record(&self, start: Instant, head: Option<&RequestHead>) -> LogSlot {
        let sink = self.snap.access_log.as_ref()?;
        let mut r = LogRecord::new(start, Instant::now(), self.peer, &self.fe().name);
        r.tls = self.tls.as_ref().map(|t| (t.version, t.cipher));
        let mut detail = sink.wants_detail().then(Box::<Detail>::default);
        if let Some(d) = detail.as_mut() {
            d.sni = self.tls.as_ref().filter(|t| !t.sni.is_empty()).map(|t| t.sni.clone());
        }
        match head {
            Some(h) => {
                r.method = h.method().to_string();
                r.uri = h.raw_target().to_string();
                r.version = h.version_str();
                if let Some(d) = detail.as_mut() {
                    let field = |name: &[u8]| h.fields.get(name).map(|v| String::from_utf8_lossy(v).into_owned());
                    d.host = field(b"host");
                    d.user_agent = field(b"user-agent");
                    d.referer = field(b"referer");
                }
            }
            None => {
                r.method = "-".into();
                r.uri = "-".into();
            }
        }
        r.detail = detail;
        Some((sink.clone(), r))
    }

    /// One request and its response. Returns whether the connection stays open.
    async fn exchange(&mut self, head_len: usize, start: Instant) -> bool {
        self.buf.consume(head_len);
        self.sent_status = 0;
        self.sent_bytes = 0;
        let mut log = self.log_record(start, Some(&self.head));
        let mut body = BodyCursor::new(self.head.framing());
        body.chunked.refuse_framing_trailers();
        let mut tracked = Tracked::default();
        // The request phase (pipeline.rs), awaited here rather than in a
        // function of its own between them: each async layer is one more state
        // machine to build, move into its caller and poll.
        let snap = self.snap.clone();
        let x = Exchange {
            snap: &snap,
            fi: self.fi,
            peer: self.peer,
            tls: self.tls.as_deref(),
            local_port: self.local_port,
            head: &mut self.head,
            resp: &mut self.resp,
            cache: &mut self.cache,
            private: &mut self.private,
            out: &mut self.out,
            log: &mut log,
            watch: self.watcher.id(),
            tracked: &mut tracked,
        };
        let mut client = H1Client {
            stream: &mut self.stream,
            buf: &mut self.buf,
            body: &mut body,
            fe: &snap.config.frontends[self.fi],
            splice: snap.config.global.splice,
            destination: self.destination,
            local_port: self.local_port,
        };
        let result = match pipeline::request(x, &mut client).await {
            Ok(Ready::Redirect { code, location }) => self.redirect(code, &location, &mut log, &body).await,
            Ok(Ready::Cached(answer)) => self.send_cached(answer, &mut log, &body).await,
            Ok(Ready::Proxied(p)) => self.respond(p, &mut log, &body).await,
            Ok(Ready::File(f)) => self.send_file(*f, &mut log, &body).await,
            Err(e) => Err(e),
        };
        // -- cache hook 4 (pipeline/serve.rs): the response stored, or stale-if-error.
        let result = match (self.cache.take(), result) {
            (Some(mut plan), Ok(keep)) => {
                plan.finish(&self.head);
                Ok(keep)
            }
            (Some(plan), Err(Fail::Respond(e))) => match plan.failed(&mut self.head, &e, self.tls.as_deref()) {
                Some(answer) => self.send_cached(answer, &mut log, &body).await,
                None => Err(Fail::Respond(e)),
            },
            (_, result) => result,
        };
        let keep = match result {
            Ok(keep) => keep,
            Err(Fail::Respond(e)) => {
                // A request body not read to its end leaves the connection
                // unusable; so do the bytes behind a refused CONNECT's head,
                // which were meant for the tunnel.
                let keep = body.done && !e.closes() && !self.head.close && !self.is_connect();
                if let Some((_, r)) = log.as_mut() {
                    r.termination = Some(e.reason());
                }
                self.respond_error(e, log.take()).await && keep
            }
            Err(Fail::Abort(why)) => {
                if let Some((_, r)) = log.as_mut() {
                    r.termination.get_or_insert(why.as_str());
                }
                self.silent = why == Termination::SilentDrop;
                false
            }
        };
        if let Some((sink, rec)) = log {
            sink.write(&rec);
        }
        let bytes_in = head_len as u64 + body.data;
        self.snap.frontend_stats[self.fi].count_exchange(self.sent_status, bytes_in, self.sent_bytes, start.elapsed());
        tracked.finish(self.sent_status, bytes_in, self.sent_bytes);
        self.unread = !body.done;
        keep
    }

    /// The request is a CONNECT (authority-form).
    fn is_connect(&self) -> bool {
        self.head.form == Some(h1::TargetForm::Authority)
    }

    /// Writes an error response. Returns whether the write went through.
    async fn respond_error(&mut self, e: ProxyError, log: LogSlot) -> bool {
        let fe = &self.snap.config.frontends[self.fi];
        let mut r = rescue::respond(&e, fe);
        r.closes |= self.is_connect();
        if r.status >= 500 {
            tracing::debug!(client = %self.peer, frontend = %fe.name, "{}: {}", r.status, e.reason());
        } else if e.closes() {
            tracing::info!(client = %self.peer, frontend = %fe.name, status = r.status, "rejected request: {}", e.reason());
        }
        self.out.clear();
        let mut fields: Vec<(&str, &[u8])> =
            vec![("content-type", r.content_type.as_bytes()), ("cache-control", b"no-cache")];
        if let Some(allow) = r.allow {
            fields.push(("allow", allow.as_bytes()));
        }
        if let Some(challenge) = &r.www_authenticate {
            fields.push(("www-authenticate", challenge.as_bytes()));
        }
        if let Some(challenge) = &r.proxy_authenticate {
            fields.push(("proxy-authenticate", challenge.as_bytes()));
        }
        let retry_after = r.retry_after.map(|s| s.to_string());
        if let Some(secs) = &retry_after {
            fields.push(("retry-after", secs.as_bytes()));
        }
        if let Some(hsts) = hsts(&self.tls) {
            fields.push(("strict-transport-security", hsts));
        }
        h1::write_local_response(&mut self.out, r.status, &fields, &r.body, r.closes);
        if self.head.method() == "HEAD" {
            // The length of the body a GET would get, and no body (RFC 9110 9.3.2).
            self.out.truncate(self.out.len() - r.body.len());
        }
        let idle = fe.timeouts.client;
        let ok = within(self.stream.write_all_flushed(&self.out), idle).await.is_ok();
        self.sent_status = r.status;
        self.sent_bytes = self.out.len() as u64;
        if let Some((sink, mut rec)) = log {
            rec.status = r.status;
            rec.bytes = r.body.len() as u64;
            rec.termination.get_or_insert(e.reason());
            sink.write(&rec);
        }
        ok
    }

    /// Writes the server's response head (in `self.resp`) and streams its
    /// body, or becomes a tunnel after a 101. Returns whether the connection
    /// stays open.
    async fn respond(&mut self, p: Proxied, log: &mut LogSlot, body: &BodyCursor) -> Result<bool, Fail> {
        let Proxied { slot, mut up, upload_done, server_idle, tunnel_idle, encoder, connect } = p;
        let server = &slot.server;
        let client_idle = self.fe().timeouts.client;
        // -- response head.
        let status = self.resp.status;
        let is_head = self.head.method() == "HEAD";
        let framing_in = self.resp.framing(is_head);
        if status == 101 || connect {
            // Switching protocols (WebSocket), or a forward proxy's CONNECT:
            // the rest is a tunnel. The server slot stays taken for as long
            // as it lasts.
            let why = self.tunnel(up, server, tunnel_idle, log).await;
            if let Some((_, r)) = log.as_mut() {
                r.termination = Some(why.as_str());
            }
            return Ok(false);
        }
        if let Some(mut enc) = encoder {
            let ends = (upload_done, body.done, server_idle, client_idle);
            return self.respond_compressed(slot, up, &mut enc, framing_in, ends, log).await;
        }
        let client_10 = self.head.minor == 0;
        let dechunk = client_10 && framing_in == Framing::Chunked;
        let framing_out = if dechunk { Framing::UntilClose } else { framing_in };
        let close =
            self.head.close || !upload_done || framing_out == Framing::UntilClose || *self.stop.borrow() || !body.done;
        self.out.clear();
        self.resp.write_client(&mut self.out, framing_out, close, client_10 && !close);
        let head_bytes = self.out.len() as u64;

        // -- response body: what came with the head goes out in the same write.
        let mut rbody = BodyCursor::new(framing_in);
        let mut dechunked = Vec::new();
        let first = rbody.take(up.buf.data(), dechunk.then_some(&mut dechunked)).map_err(|_| ProxyError::BadGateway)?;
        // -- cache hook 3 (pipeline/serve.rs): the body kept for the store.
        if let Some(c) = self.cache.as_mut() {
            c.tee(&up.buf.data()[..first]);
            if rbody.done {
                c.finish(&self.head);
            }
        }
        // Body bytes that stay where they were read go out beside the head in
        // one `writev` rather than being copied behind it (at 8-160 KiB, that
        // copy was 7% of the proxy's CPU).
        let behind: &[u8] = if dechunk {
            self.out.extend_from_slice(&dechunked);
            &[]
        } else {
            &up.buf.data()[..first]
        };
        self.sent_status = status;
        let sent = within(self.stream.write_pair_flushed(&self.out, behind), client_idle).await;
        up.buf.consume(first);
        let mut bytes = rbody.data;
        let outcome = match sent {
            Ok(()) => {
                let watch = self.watcher.id();
                let relay =
                    std::pin::pin!(self.stream_response(&mut up, &mut rbody, dechunk, server_idle, client_idle));
                server.unless_shut(relay, watch).await.unwrap_or_else(Err)
            }
            Err(_) => Err(Termination::ClientAborted),
        };
        bytes = bytes.max(rbody.data);
        server.stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        self.sent_bytes = head_bytes + bytes;
        if let Some((_, r)) = log.as_mut() {
            r.bytes = bytes;
        }
        let reusable = !self.resp.server_closes && upload_done && framing_in != Framing::UntilClose;
        match outcome {
            Ok(()) => {
                if reusable && up.buf.is_empty() {
                    self.park(up, server);
                }
                drop(slot);
                Ok(!close)
            }
            Err(Termination::ClientAborted) => {
                if reusable && drain(&mut up, &mut rbody).await {
                    self.park(up, server);
                    server.stats.connections_saved.fetch_add(1, Ordering::Relaxed);
                }
                Err(Fail::Abort(Termination::ClientAborted))
            }
            Err(why) => Err(Fail::Abort(why)),
        }
    }

    /// A response compressed on its way (pipeline/compress.rs, which edited
    /// the head): sent without a length, chunked to an HTTP/1.1 client, closed
    /// after to an HTTP/1.0 one; the body through the encoder a piece at a time.
    async fn respond_compressed(
        &mut self,
        slot: crate::lb::Slot,
        mut up: Upstream,
        enc: &mut Encoder,
        framing_in: Framing,
        (upload_done, request_done, server_idle, client_idle): (bool, bool, Duration, Duration),
        log: &mut LogSlot,
    ) -> Result<bool, Fail> {
        let server = &slot.server;
        let client_10 = self.head.minor == 0;
        let close = self.head.close || !upload_done || client_10 || *self.stop.borrow() || !request_done;
        self.out.clear();
        // Written as for a close-delimited body (no length, no framing field
        // of the server's), then chunked added before the head's empty line.
        self.resp.write_client(&mut self.out, Framing::UntilClose, close, false);
        if !client_10 {
            self.out.truncate(self.out.len() - 2);
            self.out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
        }
        let head_bytes = self.out.len() as u64;
        self.sent_status = self.resp.status;
        let watch = self.watcher.id();
        let outcome = {
            let relay =
                std::pin::pin!(self.stream_compressed(&mut up, enc, framing_in, !client_10, server_idle, client_idle));
            server.unless_shut(relay, watch).await.unwrap_or_else(Err)
        };
        let (plain, sent) = match outcome {
            Ok(counts) => counts,
            Err(why) => return Err(Fail::Abort(why)),
        };
        server.stats.bytes_out.fetch_add(plain, Ordering::Relaxed);
        self.sent_bytes = head_bytes + sent;
        if let Some((_, r)) = log.as_mut() {
            r.bytes = sent;
        }
        if !self.resp.server_closes && upload_done && framing_in != Framing::UntilClose && up.buf.is_empty() {
            self.park(up, server);
        }
        drop(slot);
        Ok(!close)
    }

    /// The body of a compressed response: read from the server in its
    /// framing, encoded and flushed piece by piece, sent as chunks (or as they
    /// are, before a close). The head waits in `self.out` and goes with the
    /// first piece. Returns the body bytes read and sent.
    async fn stream_compressed(
        &mut self,
        up: &mut Upstream,
        enc: &mut Encoder,
        framing_in: Framing,
        chunked: bool,
        server_idle: Duration,
        client_idle: Duration,
    ) -> Result<(u64, u64), Termination> {
        let mut rbody = BodyCursor::new(framing_in);
        let (mut plain, mut coded) = (Vec::new(), Vec::new());
        let mut sent = 0u64;
        loop {
            if !up.buf.is_empty() && !rbody.done {
                plain.clear();
                let n = rbody.take(up.buf.data(), Some(&mut plain)).map_err(|_| Termination::ServerBadChunk)?;
                let data = if framing_in == Framing::Chunked { &plain[..] } else { &up.buf.data()[..n] };
                enc.push(data, &mut coded).map_err(|_| Termination::ServerAborted)?;
                up.buf.consume(n);
            }
            if rbody.done {
                enc.finish(&mut coded).map_err(|_| Termination::ServerAborted)?;
            }
            if !coded.is_empty() || rbody.done || !self.out.is_empty() {
                if chunked && !coded.is_empty() {
                    self.out.extend_from_slice(format!("{:x}\r\n", coded.len()).as_bytes());
                    self.out.extend_from_slice(&coded);
                    self.out.extend_from_slice(b"\r\n");
                } else if !chunked {
                    self.out.extend_from_slice(&coded);
                }
                if chunked && rbody.done {
                    self.out.extend_from_slice(b"0\r\n\r\n");
                }
                // -- cache hook 3 (pipeline/serve.rs): the encoded body kept for the store.
                if let Some(c) = self.cache.as_mut() {
                    c.tee(&coded);
                    if rbody.done {
                        c.finish(&self.head);
                    }
                }
                sent += coded.len() as u64;
                coded.clear();
                match within(self.stream.write_all_flushed(&self.out), client_idle).await {
                    Ok(()) => self.out.clear(),
                    Err(IoFail::Timeout) => return Err(Termination::ClientTimeout),
                    Err(_) => return Err(Termination::ClientAborted),
                }
            }
            if rbody.done {
                return Ok((rbody.data, sent));
            }
            match read_until(&mut up.stream, &mut up.buf, deadline(server_idle)).await {
                Ok(_) => {}
                Err(IoFail::Closed) if framing_in == Framing::UntilClose => rbody.done = true,
                Err(IoFail::Timeout) => return Err(Termination::ServerTimeout),
                Err(_) => return Err(Termination::ServerAborted),
            }
        }
    }

    /// Keeps a connection whose exchange is complete for the next request.
    fn park(&mut self, up: Upstream, server: &ServerRt) {
        exchange::park(&mut self.private, up, server);
    }

    /// After a 101 (or a forward proxy's CONNECT: 200): sends the head to
    /// the client, then relays bytes both ways
    /// (tcp/relay.rs) until both sides have closed, or one of them stayed idle
    /// for `idle` (`timeout.tunnel`). A side that closes has its peer's write
    /// side shut down, and the other direction goes on (half-close). Neither
    /// read buffer is kept: the relay takes a block only while bytes move, so
    /// a quiet tunnel (an idle WebSocket) holds none. Returns why it ended.
    async fn tunnel(&mut self, mut up: Upstream, server: &ServerRt, idle: Duration, log: &mut LogSlot) -> Termination {
        self.out.clear();
        if self.resp.status == 101 {
            self.resp.write_switching(&mut self.out);
        } else {
            // RFC 9110 section 9.3.6: no framing fields in a 2xx to CONNECT.
            self.out.extend_from_slice(b"HTTP/1.1 200 Connection established\r\n\r\n");
        }
        let head = self.out.len() as u64;
        // What the server sent right after its head goes first to the client,
        // and what the client sent right after its request first to the server.
        self.out.extend_from_slice(up.buf.data());
        let early_down = up.buf.len() as u64;
        let early_up = self.buf.data().to_vec();
        (up.buf, self.buf) = (Buf::none(), Buf::none());
        self.sent_status = self.resp.status;
        let (why, moved) = if within(self.stream.write_all_flushed(&self.out), idle).await.is_err() {
            (Termination::ClientAborted, Moved::default())
        } else {
            self.out = Vec::new();
            let idle = Idle { client: idle, server: idle };
            let splice = self.snap.config.global.splice;
            let watch = self.watcher.id();
            let relay =
                std::pin::pin!(relay(&mut self.stream, &mut up.stream, (early_up, false), splice, idle, |_, _| {}));
            let (end, moved) = match server.unless_shut(relay, watch).await {
                Ok(ended) => ended,
                Err(_) => (End::Killed, Moved::default()),
            };
            let why = match end {
                End::Killed => Termination::Killed,
                End::Closed => Termination::TunnelClosed,
                End::Timeout(_) => Termination::TunnelTimeout,
                End::Error(Side::Client) => Termination::ClientAborted,
                End::Error(Side::Server) => Termination::TunnelServerError,
            };
            (why, moved)
        };
        let down = early_down + moved.down;
        server.stats.bytes_out.fetch_add(down, Ordering::Relaxed);
        server.stats.bytes_in.fetch_add(moved.up, Ordering::Relaxed);
        self.sent_bytes = head + down;
        if let Some((_, r)) = log.as_mut() {
            r.bytes = down;
        }
        why
    }

    /// Streams the rest of a response body to the client. While it waits for the
    /// server it also watches the client, to notice one that left.
    async fn stream_response(
        &mut self,
        up: &mut Upstream,
        rbody: &mut BodyCursor,
        dechunk: bool,
        server_idle: Duration,
        client_idle: Duration,
    ) -> Result<(), Termination> {
        let mut dechunked = Vec::new();
        let mut watch_client = !self.buf.is_full();
        // A body that does not fit in one block streams through a larger one
        // (a chunked or close-delimited one once a read fills a whole block).
        let mut big = matches!(rbody.framing, Framing::Length(_)) && rbody.left > BUF_SIZE as u64;
        // Or, on plain TCP both ways and when the cache keeps none of it,
        // goes from socket to socket through a pipe (splice.rs).
        if big
            && !self.cache.as_ref().is_some_and(|c| c.keeps_body())
            && up.buf.is_empty()
            && self.snap.config.global.splice
            && let (ClientStream::Plain(client), Some(from)) = (&mut self.stream, up.stream.plain_tcp())
            && let Some(mut pipe) = Pipe::take()
        {
            let moved = splice_body(client, &mut self.buf, from, &mut pipe, rbody, server_idle, client_idle).await;
            pipe.give();
            return moved;
        }
        while !rbody.done {
            let wait = deadline(server_idle);
            let r = tokio::select! {
                biased;
                // The client first: when it has left, the rest of the response
                // is read (drained) rather than sent, and the connection kept.
                r = std::future::poll_fn(|cx| self.stream.poll_read_some(cx, self.buf.spare())), if watch_client => {
                    watch_client = client_spoke(r, &mut self.buf)?;
                    continue;
                }
                r = read_until(&mut up.stream, &mut up.buf, wait) => r,
            };
            match r {
                Ok(n) => big |= n >= BUF_SIZE,
                Err(IoFail::Closed) if rbody.framing == Framing::UntilClose => {
                    rbody.done = true;
                    break;
                }
                Err(IoFail::Timeout) => return Err(Termination::ServerTimeout),
                Err(_) => return Err(Termination::ServerAborted),
            }
            dechunked.clear();
            let n = rbody
                .take(up.buf.data(), dechunk.then_some(&mut dechunked))
                .map_err(|_| Termination::ServerBadChunk)?;
            // -- cache hook 3 (pipeline/serve.rs): the body kept for the store.
            if let Some(c) = self.cache.as_mut() {
                c.tee(&up.buf.data()[..n]);
                if rbody.done {
                    c.finish(&self.head);
                }
            }
            let data = if dechunk { &dechunked[..] } else { &up.buf.data()[..n] };
            match within(self.stream.write_all_flushed(data), client_idle).await {
                Ok(()) => {
                    up.buf.consume(n);
                    if big {
                        up.buf.reserve_total(BODY_BUF_SIZE);
                    }
                }
                Err(IoFail::Timeout) => return Err(Termination::ClientTimeout),
                Err(_) => {
                    up.buf.consume(n);
                    return Err(Termination::ClientAborted);
                }
            }
        }
        Ok(())
    }

    /// Writes a response the cache gave (pipeline/serve.rs): a stored one with its
    /// body (in the head's write when small), or one of the cache's own.
    async fn send_cached(&mut self, answer: Answer, log: &mut LogSlot, body: &BodyCursor) -> Result<bool, Fail> {
        let close = self.head.close || !body.done || *self.stop.borrow();
        let idle = self.fe().timeouts.client;
        self.out.clear();
        if let Some((_, rec)) = log.as_mut() {
            rec.set_cache(answer.cache_status());
        }
        let (status, body_bytes, termination, sent) = match answer {
            Answer::Local { status, cache_status, text } => {
                let mut fields = Answer::local_fields(cache_status);
                if let Some(hsts) = hsts(&self.tls) {
                    fields.push(("strict-transport-security", hsts));
                }
                h1::write_local_response(&mut self.out, status, &fields, text.as_bytes(), close);
                let mut len = text.len() as u64;
                if self.head.method() == "HEAD" {
                    self.out.truncate(self.out.len() - text.len());
                    len = 0;
                }
                self.sent_bytes = self.out.len() as u64;
                (status, len, None, within(self.stream.write_all_flushed(&self.out), idle).await)
            }
            Answer::Stored(s) => {
                let connection = match (close, self.head.minor) {
                    (true, _) => Some("close"),
                    (false, 0) => Some("keep-alive"),
                    (false, _) => None,
                };
                s.write_h1(&mut self.out, connection);
                let segments = s.body.as_ref().map_or(&[][..], |b| b.segments());
                let inline = s.body_len() <= INLINE_BODY;
                if inline {
                    segments.iter().for_each(|seg| self.out.extend_from_slice(seg));
                }
                let mut sent = within(self.stream.write_all_flushed(&self.out), idle).await;
                for seg in segments.iter().filter(|_| !inline) {
                    if sent.is_err() {
                        break;
                    }
                    sent = within(self.stream.write_all_flushed(seg), idle).await;
                }
                let head_bytes = if inline { self.out.len() as u64 - s.body_len() } else { self.out.len() as u64 };
                self.sent_bytes = head_bytes + s.body_len();
                (s.head.status, s.body_len(), s.termination, sent)
            }
        };
        self.sent_status = status;
        if let Some((_, r)) = log.as_mut() {
            r.status = status;
            r.bytes = body_bytes;
            if termination.is_some() {
                r.termination = termination.map(Termination::as_str);
            }
        }
        match sent {
            Ok(()) => Ok(!close),
            Err(IoFail::Timeout) => Err(Fail::Abort(Termination::ClientTimeout)),
            Err(_) => Err(Fail::Abort(Termination::ClientAborted)),
        }
    }

    /// Writes a static file's response (session/file.rs).
    async fn send_file(
        &mut self,
        f: crate::pipeline::files::FileAnswer,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        let close = self.head.close || !body.done || *self.stop.borrow();
        let (status, idle) = (f.status, self.fe().timeouts.client);
        let sent =
            crate::session::file::send_h1(&mut self.stream, &mut self.out, f, self.head.minor, close, idle).await;
        self.sent_status = status;
        self.sent_bytes = sent.bytes;
        if let Some((_, r)) = log.as_mut() {
            r.status = status;
            r.bytes = sent.body;
        }
        match sent.result {
            Ok(()) => Ok(!sent.close),
            Err(IoFail::Timeout) => Err(Fail::Abort(Termination::ClientTimeout)),
            Err(_) => Err(Fail::Abort(Termination::ClientAborted)),
        }
    }

    async fn redirect(
        &mut self,
        code: u16,
        location: &str,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        // After a CONNECT, what follows its head was meant for a tunnel.
        let close = self.head.close || !body.done || self.is_connect();
        self.out.clear();
        let mut fields: Vec<(&str, &[u8])> = vec![("location", location.as_bytes()), ("cache-control", b"no-cache")];
        if let Some(hsts) = hsts(&self.tls) {
            fields.push(("strict-transport-security", hsts));
        }
        h1::write_local_response(&mut self.out, code, &fields, b"", close);
        if let Some((_, rec)) = log.as_mut() {
            rec.status = code;
            rec.termination = Some(Termination::Redirect.as_str());
        }
        let idle = self.fe().timeouts.client;
        self.sent_status = code;
        self.sent_bytes = self.out.len() as u64;
        match within(self.stream.write_all_flushed(&self.out), idle).await {
            Ok(()) => Ok(!close),
            Err(_) => Err(Fail::Abort(Termination::ClientAborted)),
        }
    }
}

/// The client's side of an HTTP/1.1 exchange (the request phase,
/// pipeline.rs): the connection's socket and read buffer, and the request
/// body's cursor.
struct H1Client<'a> {
    stream: &'a mut ClientStream,
    buf: &'a mut Buf,
    body: &'a mut BodyCursor,
    fe: &'a Frontend,
    /// `global.splice`: large bodies with a length go through a pipe.
    splice: bool,
    /// The address the client connected to, when a PROXY header said it.
    destination: Option<SocketAddr>,
    local_port: u16,
}

impl ClientSide for H1Client<'_> {
    fn local_addr(&self) -> SocketAddr {
        self.destination.unwrap_or_else(|| local_addr(self.stream, self.local_port))
    }

    fn take_early(&mut self) -> Result<usize, Fail> {
        let n = self.body.take(self.buf.data(), None).map_err(|_| ProxyError::BadRequest("bad-chunk"))?;
        if let Some(limit) = self.fe.limits.max_request_body
            && self.body.data > limit
        {
            return Err(ProxyError::BodyTooLarge.into());
        }
        Ok(n)
    }

    fn early(&self, n: usize) -> &[u8] {
        &self.buf.data()[..n]
    }

    fn body_done(&self) -> bool {
        self.body.done
    }

    fn body_bytes(&self) -> u64 {
        self.body.data
    }

    /// Interim responses go to HTTP/1.1 clients only (RFC 9110 section 15.2).
    fn takes_interims(&self, head: &RequestHead) -> bool {
        head.minor >= 1
    }

    /// The early bytes leave the buffer; a client that waits for `100
    /// Continue` before its body gets it now.
    async fn head_sent(&mut self, early: usize, head: &RequestHead) {
        self.buf.consume(early);
        if !self.body.done && head.expect_continue && early == 0 {
            let _ =
                within(self.stream.write_all_flushed(b"HTTP/1.1 100 Continue\r\n\r\n"), self.fe.timeouts.client).await;
        }
    }

    async fn interim(&mut self, resp: &ResponseHead) -> Result<(), Fail> {
        let mut out = Vec::with_capacity(256);
        resp.write_interim(&mut out);
        within(self.stream.write_all_flushed(&out), self.fe.timeouts.client)
            .await
            .map_err(|_| Fail::Abort(Termination::ClientAborted))
    }

    /// Streams the rest of the request body to the server. Returns whether all of
    /// it went; false when the server answered before the end (its response is
    /// then read, and both connections close after it).
    async fn upload(&mut self, up: &mut Upstream, server_idle: Duration) -> Result<bool, Fail> {
        let body = &mut *self.body;
        let limit = self.fe.limits.max_request_body;
        let client_idle = self.fe.timeouts.client;
        // A large body with a length (within the limit: checked with the
        // head) goes from socket to socket through a pipe, on plain TCP both
        // ways (splice.rs).
        if matches!(body.framing, Framing::Length(_))
            && body.left > BUF_SIZE as u64
            && self.buf.is_empty()
            && self.splice
            && let (ClientStream::Plain(client), Some(to)) = (&mut *self.stream, up.stream.plain_tcp())
            && let Some(mut pipe) = Pipe::take()
        {
            let sent = splice_upload(client, to, &mut up.buf, &mut pipe, body, client_idle, server_idle).await;
            pipe.give();
            return sent;
        }
        while !body.done {
            let wait = deadline(client_idle);
            let r = tokio::select! {
                biased;
                r = self.stream.read(self.buf.spare()) => r,
                _ = up.stream.readable() => {
                    // The server speaks before the body is complete: an early answer.
                    if exchange::early_answer(up)? {
                        return Ok(false);
                    }
                    continue;
                }
                _ = sleep_until(wait) => return Err(ProxyError::ClientTimeout.into()),
            };
            match r {
                Ok(0) | Err(_) => return Err(Fail::Abort(Termination::ClientAborted)),
                Ok(n) => self.buf.commit(n),
            }
            let n = body.take(self.buf.data(), None).map_err(|_| ProxyError::BadRequest("bad-chunk"))?;
            if limit.is_some_and(|l| body.data > l) {
                return Err(ProxyError::BodyTooLarge.into());
            }
            match within(up.stream.write_all(&self.buf.data()[..n]), server_idle).await {
                Ok(()) => self.buf.consume(n),
                Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
                // The server stopped reading: perhaps it answered; read that.
                Err(_) => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// What the client sent while its response streams (`r`, a read into the
/// spare room of `pipelined`): pipelined bytes are kept for the next request;
/// a close or an error is the client leaving. Returns whether to go on
/// watching it (not once `pipelined` is full).
fn client_spoke(r: io::Result<usize>, pipelined: &mut Buf) -> Result<bool, Termination> {
    match r {
        Ok(0) => return Err(Termination::ClientAborted),
        Ok(n) => pipelined.commit(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(_) => return Err(Termination::ClientAborted),
    }
    Ok(!pipelined.is_full())
}

/// [`Conn::stream_response`] for a body moved with `splice`: fills the pipe
/// from the server (watching the client meanwhile, as the copying loop does),
/// empties it to the client, until the body's length has gone.
async fn splice_body(
    client: &mut LazyTcp,
    pipelined: &mut Buf,
    from: &mut TcpStream,
    pipe: &mut Pipe,
    rbody: &mut BodyCursor,
    server_idle: Duration,
    client_idle: Duration,
) -> Result<(), Termination> {
    let mut watch_client = !pipelined.is_full();
    while !rbody.done {
        let wait = deadline(server_idle);
        let filled = loop {
            tokio::select! {
                biased;
                r = std::future::poll_fn(|cx| client.poll_read_some(cx, pipelined.spare())), if watch_client => {
                    watch_client = client_spoke(r, pipelined)?;
                }
                r = std::future::poll_fn(|cx| pipe.poll_fill(cx, from, rbody.left)) => break r,
                _ = sleep_until(wait) => return Err(Termination::ServerTimeout),
            }
        };
        match filled {
            Ok(n) if n > 0 => rbody.moved(n),
            _ => return Err(Termination::ServerAborted),
        };
        match within(std::future::poll_fn(|cx| pipe.poll_drain(cx, client)), client_idle).await {
            Ok(()) => {}
            Err(IoFail::Timeout) => return Err(Termination::ClientTimeout),
            Err(_) => return Err(Termination::ClientAborted),
        }
    }
    Ok(())
}

/// [`Conn::upload`] for a body moved with `splice`: fills the pipe from the
/// client (watching the server meanwhile for an early answer, which goes to
/// `answer`, as the copying loop does), empties it to the server, until the
/// body's length has gone. Returns whether all of it went.
async fn splice_upload(
    client: &mut LazyTcp,
    to: &mut TcpStream,
    answer: &mut Buf,
    pipe: &mut Pipe,
    body: &mut BodyCursor,
    client_idle: Duration,
    server_idle: Duration,
) -> Result<bool, Fail> {
    while !body.done {
        let wait = deadline(client_idle);
        let filled = loop {
            tokio::select! {
                biased;
                r = std::future::poll_fn(|cx| pipe.poll_fill(cx, client, body.left)) => break r,
                _ = to.readable() => {
                    // The server speaks before the body is complete: an early answer.
                    if exchange::early_bytes(to.try_read(answer.spare()), answer)? {
                        return Ok(false);
                    }
                }
                _ = sleep_until(wait) => return Err(ProxyError::ClientTimeout.into()),
            }
        };
        match filled {
            Ok(n) if n > 0 => body.moved(n),
            _ => return Err(Fail::Abort(Termination::ClientAborted)),
        };
        match within(std::future::poll_fn(|cx| pipe.poll_drain(cx, to)), server_idle).await {
            Ok(()) => {}
            Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
            // The server stopped reading: perhaps it answered; read that.
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}

/// The `Strict-Transport-Security` value for responses on a connection: only on
/// TLS, and only when its bind has one.
fn hsts(tls: &Option<Box<TlsInfo>>) -> Option<&[u8]> {
    tls.as_ref()?.hsts.as_ref().map(|v| v.as_bytes())
}

/// The address a client reached: its connection's local address, else the
/// listener's port on the unspecified address.
fn local_addr(stream: &ClientStream, port: u16) -> SocketAddr {
    stream.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], port)))
}
