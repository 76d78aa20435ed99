//! One client connection, one task: read a request head, route, balance, send it
//! on a pooled server connection, stream the bodies both ways, log, and go again.
//!
//! The phases of one exchange, in order (docs/architecture.md):
//! head (timers: `http_request`, `keep_alive`) -> check (h1.rs) -> route (rules)
//! -> balance (queue) -> upstream (pool, connect, retry) -> request body
//! (`timeout.client`, size limit) -> response head (`timeout.server`) -> response
//! body -> log.
//!
//! The task drives both sockets itself; the server connection is borrowed from
//! the worker's pool for the exchange and returned when its response is complete.
//! Every failure is a [`ProxyError`] turned into a response by [`crate::rescue`]
//! while nothing of the response has gone out, or a closed connection after.

use crate::access_log::{AccessLog, LogRecord};
use crate::buf::{BUF_SIZE, Buf};
use crate::h1::{self, Chunked, Framing, Parsed, RequestHead, ResponseHead};
use crate::headers::{add_forwarded, apply_edits, canonical_ip, routing_host};
use crate::lb::{BackendRt, Pick, SelectInput, ServerRt, Slot};
use crate::rescue::{self, ProxyError};
use crate::snapshot::Snapshot;
use crate::stats::SessionGuard;
use crate::sticky;
use crate::upstream::{self, Upstream};
use http::Method;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::sleep_until;
use tollgate_config::{Action, CookieMode, CookiePolicy, Frontend, HeaderEdits, RedirectTarget, RequestFacts};

type LogSlot = Option<(Arc<AccessLog>, LogRecord)>;

// The cache's hook points (a child module: it uses this file's pieces).
#[path = "cache/serve.rs"]
mod cache_serve;

/// The most of a response its client abandoned that is still read, so that its
/// server connection can serve another request rather than be closed.
const DRAIN_MAX_BYTES: u64 = 256 * 1024;
/// How long that read may take.
const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);
/// The read buffer of a server connection streaming a body larger than one
/// [`BUF_SIZE`] block: on 160 KiB responses 64 KiB reads took 1/4 of the
/// system calls of 16 KiB ones (docs/benchmarks.md).
const BODY_BUF_SIZE: usize = 64 * 1024;

/// A client connection.
pub struct Conn {
    snap: Arc<Snapshot>,
    fi: usize,
    peer: SocketAddr,
    /// The port the client connected to (X-Forwarded-Port).
    local_port: u16,
    stream: TcpStream,
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
    /// The cache's plan for the exchange in progress (cache/serve.rs).
    cache: Option<Box<cache_serve::CachePlan>>,
}

enum HeadWait {
    /// A complete request head of this many bytes, whose first byte came at `.1`.
    Ready(usize, Instant),
    /// The connection ends quietly (peer closed, keep-alive expired, stopping).
    Closed,
    /// The head is refused (or too slow: 408); answer and close.
    Refused(ProxyError, Instant),
}

/// How an exchange went wrong.
enum Fail {
    /// Before anything of the response went out: the client gets an error response.
    Respond(ProxyError),
    /// After: the client connection is closed; the reason goes to the log.
    Abort(&'static str),
}

impl From<ProxyError> for Fail {
    fn from(e: ProxyError) -> Self {
        Fail::Respond(e)
    }
}

/// Why a read or write on one side stopped.
enum IoFail {
    Timeout,
    Closed,
    Error,
}

async fn read_until(stream: &mut TcpStream, buf: &mut Buf, deadline: tokio::time::Instant) -> Result<usize, IoFail> {
    tokio::select! {
        biased;
        r = stream.read(buf.spare()) => match r {
            Ok(0) => Err(IoFail::Closed),
            Ok(n) => {
                buf.commit(n);
                Ok(n)
            }
            Err(_) => Err(IoFail::Error),
        },
        _ = sleep_until(deadline) => Err(IoFail::Timeout),
    }
}

async fn write_within(stream: &mut TcpStream, data: &[u8], idle: Duration) -> Result<(), IoFail> {
    tokio::select! {
        biased;
        r = stream.write_all(data) => r.map_err(|_| IoFail::Error),
        _ = tokio::time::sleep(idle) => Err(IoFail::Timeout),
    }
}

fn deadline(idle: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + idle
}

/// Where a body stands: how much is left, by its framing.
struct BodyCursor {
    framing: Framing,
    left: u64,
    chunked: Chunked,
    done: bool,
    /// Payload bytes seen (chunk data, for chunked bodies).
    data: u64,
}

impl BodyCursor {
    fn new(framing: Framing) -> Self {
        let left = if let Framing::Length(n) = framing { n } else { 0 };
        BodyCursor { framing, left, chunked: Chunked::new(), done: framing == Framing::Empty, data: 0 }
    }

    /// How many of `avail` bytes belong to the body (the rest is the next message).
    /// With `dechunk`, the chunk data is also copied there.
    fn take(&mut self, avail: &[u8], mut dechunk: Option<&mut Vec<u8>>) -> Result<usize, h1::ChunkError> {
        if self.done {
            return Ok(0);
        }
        match self.framing {
            Framing::Empty => Ok(0),
            Framing::Length(_) => {
                let n = (avail.len() as u64).min(self.left) as usize;
                self.left -= n as u64;
                self.data += n as u64;
                self.done = self.left == 0;
                Ok(n)
            }
            Framing::UntilClose => {
                self.data += avail.len() as u64;
                Ok(avail.len())
            }
            Framing::Chunked => {
                let mut data = 0u64;
                let n = self.chunked.feed(avail, |r| {
                    data += r.len() as u64;
                    if let Some(out) = dechunk.as_deref_mut() {
                        out.extend_from_slice(&avail[r]);
                    }
                })?;
                self.data += data;
                self.done = self.chunked.is_done();
                Ok(n)
            }
        }
    }
}

fn idempotent(m: &str) -> bool {
    matches!(m, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

impl Conn {
    pub fn new(
        snap: Arc<Snapshot>,
        fi: usize,
        stream: TcpStream,
        peer: SocketAddr,
        local_port: u16,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let _session = snap.frontend_stats[fi].open_session();
        Conn {
            _session,
            sent_status: 0,
            sent_bytes: 0,
            snap,
            fi,
            peer,
            local_port,
            stream,
            buf: Buf::new(),
            out: Vec::with_capacity(1024),
            head: RequestHead::default(),
            resp: ResponseHead::default(),
            served: 0,
            stop,
            cache: None,
        }
    }

    fn fe(&self) -> &Frontend {
        &self.snap.config.frontends[self.fi]
    }

    /// Serves requests until the connection ends.
    pub async fn serve(mut self) {
        loop {
            let (len, start) = match self.read_head().await {
                HeadWait::Ready(len, start) => (len, start),
                HeadWait::Closed => return,
                HeadWait::Refused(e, start) => {
                    let log = self.log_record(start, None);
                    self.sent_status = 0;
                    self.respond_error(e, log).await;
                    let stats = &self.snap.frontend_stats[self.fi];
                    stats.request_errors.fetch_add(1, Ordering::Relaxed);
                    stats.count_exchange(self.sent_status, self.buf.len() as u64, self.sent_bytes);
                    return;
                }
            };
            let keep = self.exchange(len, start).await;
            self.served += 1;
            if !keep || *self.stop.borrow() {
                return;
            }
        }
    }

    /// Waits for a complete request head, with the client-side timers:
    /// `http_request` from the first byte of a request (or from accept, for the
    /// first request) to the end of its head, 408 when it passes with a partial
    /// head; `keep_alive` for the next request to start (a quiet close).
    async fn read_head(&mut self) -> HeadWait {
        let fe = &self.snap.config.frontends[self.fi];
        let (limits, timeouts) = (fe.limits, fe.timeouts);
        let idle_from = Instant::now();
        let mut first_byte = (!self.buf.is_empty()).then_some(idle_from);
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
                    Ok(Parsed::Complete((), len)) => return HeadWait::Ready(len, first_byte.unwrap_or(idle_from)),
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
            let wait = match first_byte {
                Some(t) => t + timeouts.http_request,
                None if self.served > 0 => idle_from + timeouts.keep_alive,
                None => idle_from + timeouts.http_request,
            };
            let idle = first_byte.is_none();
            let r = tokio::select! {
                biased;
                r = self.stream.read(self.buf.spare()) => r,
                _ = sleep_until(wait.into()) => {
                    return match first_byte {
                        Some(t) => HeadWait::Refused(ProxyError::RequestTimeout, t),
                        None => HeadWait::Closed,
                    };
                }
                _ = self.stop.changed(), if idle => return HeadWait::Closed,
            };
            match r {
                Ok(0) | Err(_) => return HeadWait::Closed,
                Ok(n) => {
                    self.buf.commit(n);
                    first_byte.get_or_insert_with(Instant::now);
                }
            }
        }
    }

    fn log_record(&self, start: Instant, head: Option<&RequestHead>) -> LogSlot {
        let sink = self.snap.access_log.as_ref()?;
        let mut r = LogRecord::new(start, Instant::now(), self.peer, &self.fe().name);
        match head {
            Some(h) => {
                r.method = h.method().to_string();
                r.uri = h.raw_target().to_string();
                r.version = h.version_str();
            }
            None => {
                r.method = "-".into();
                r.uri = "-".into();
            }
        }
        Some((sink.clone(), r))
    }

    /// One request and its response. Returns whether the connection stays open.
    async fn exchange(&mut self, head_len: usize, start: Instant) -> bool {
        self.buf.consume(head_len);
        self.sent_status = 0;
        self.sent_bytes = 0;
        let mut log = self.log_record(start, Some(&self.head));
        let mut body = BodyCursor::new(self.head.framing());
        let result = self.forward(&mut log, &mut body).await;
        // -- cache hook 4 (cache/serve.rs): the response stored, or stale-if-error.
        let result = self.cache_finish(result, &mut log, &body).await;
        let keep = match result {
            Ok(keep) => keep,
            Err(Fail::Respond(e)) => {
                // A request body not read to its end leaves the connection unusable.
                let keep = body.done && !e.closes() && !self.head.close;
                if let Some((_, r)) = log.as_mut() {
                    r.termination = Some(e.reason());
                }
                self.respond_error(e, log.take()).await && keep
            }
            Err(Fail::Abort(why)) => {
                if let Some((_, r)) = log.as_mut() {
                    r.termination.get_or_insert(why);
                }
                false
            }
        };
        if let Some((sink, rec)) = log {
            sink.write(&rec);
        }
        self.snap.frontend_stats[self.fi].count_exchange(
            self.sent_status,
            head_len as u64 + body.data,
            self.sent_bytes,
        );
        keep
    }

    /// Writes an error response. Returns whether the write went through.
    async fn respond_error(&mut self, e: ProxyError, log: LogSlot) -> bool {
        let fe = &self.snap.config.frontends[self.fi];
        let r = rescue::respond(&e, fe);
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
        h1::write_local_response(&mut self.out, r.status, &fields, &r.body, r.closes);
        let idle = fe.timeouts.client;
        let ok = write_within(&mut self.stream, &self.out, idle).await.is_ok();
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

    async fn forward(&mut self, log: &mut LogSlot, body: &mut BodyCursor) -> Result<bool, Fail> {
        let snap = self.snap.clone();
        let fe = &snap.config.frontends[self.fi];

        if let (Some(limit), Framing::Length(n)) = (fe.limits.max_request_body, self.head.framing())
            && n > limit
        {
            return Err(ProxyError::BodyTooLarge.into());
        }

        // -- route: rules in order; header edits accumulate, the first action wins.
        let src = canonical_ip(self.peer.ip());
        let mut backend = fe.default_backend;
        let mut req_edits: Vec<&HeaderEdits> = Vec::new();
        let mut resp_edits: Vec<&HeaderEdits> = Vec::new();
        let mut cache_rule = None;
        if !fe.rules.is_empty() {
            let host = self.head.fields.get(b"host").and_then(routing_host).unwrap_or_default();
            let method = Method::from_bytes(self.head.method().as_bytes()).unwrap_or(Method::GET);
            let facts =
                RequestFacts { host: &host, path: self.head.path(), method: &method, headers: &self.head.fields, src };
            for rule in &fe.rules {
                if !rule.when.matches(&facts) {
                    continue;
                }
                if !rule.request_headers.is_empty() {
                    req_edits.push(&rule.request_headers);
                }
                if !rule.response_headers.is_empty() {
                    resp_edits.push(&rule.response_headers);
                }
                cache_rule = cache_rule.or(rule.cache);
                match &rule.action {
                    None => continue,
                    Some(Action::Backend(i)) => {
                        backend = Some(*i);
                        break;
                    }
                    Some(Action::Redirect(r)) => {
                        let location = match &r.target {
                            RedirectTarget::Location(l) => l.clone(),
                            RedirectTarget::Prefix(p) => format!("{p}{}", self.head.target()),
                        };
                        return self.redirect(r.code.as_u16(), &location, log, body).await;
                    }
                    Some(Action::Deny { status, body }) => {
                        snap.frontend_stats[self.fi].denied.fetch_add(1, Ordering::Relaxed);
                        return Err(ProxyError::Denied { status: *status, body: body.clone() }.into());
                    }
                }
            }
        }
        let be = &snap.backends[backend.ok_or(ProxyError::NoBackend)?];
        if let Some((_, r)) = log.as_mut() {
            r.backend = Some(be.name().to_string());
        }

        // -- prepare the upstream request.
        if fe.forward_for {
            add_forwarded(&mut self.head.fields, src, self.local_port, "http");
        }
        for e in req_edits {
            apply_edits(e, &mut self.head.fields);
        }

        // -- cache hook 1 (cache/serve.rs): answered from the store, or forwarded with a plan.
        if let Some(keep) = self.cache_request(&snap, be, cache_rule, &resp_edits, log, body).await? {
            return Ok(keep);
        }

        // -- persistence: a server this client is bound to (cookie, stick table).
        let now_unix = unix_now();
        let bound = self.bound_server(be, src, now_unix);

        // -- balance and connect, with retries on connection failures.
        let timeouts = be.cfg.timeouts;
        let mut pick =
            PickState { queued_at: Instant::now(), tried: Vec::new(), attempts: 0, pinned: bound.server.clone() };
        let (mut slot, mut up) = self.pick_and_connect(be, src, &timeouts, log, &mut pick).await?;

        // -- send the head, with as much of the body as is already here; then,
        // when that was the whole request, wait for the response head.
        let early = body.take(self.buf.data(), None).map_err(|_| ProxyError::BadRequest("bad-chunk"))?;
        if let Some(limit) = fe.limits.max_request_body
            && body.data > limit
        {
            return Err(ProxyError::BodyTooLarge.into());
        }
        let method_retryable = idempotent(self.head.method());
        let mut sent_at;
        let mut written_for: Option<usize> = None;
        let mut head_out = 0;
        loop {
            let server = slot.server.clone();
            if written_for != Some(server.index) {
                // The Host a request without one gets names the server.
                self.out.clear();
                self.head.write_upstream(&mut self.out, server.addr());
                head_out = self.out.len() as u64;
                self.out.extend_from_slice(&self.buf.data()[..early]);
                written_for = Some(server.index);
            }
            // A pooled connection may have been closed by the server as the request
            // went out: then a complete idempotent request goes again on a new one.
            let retryable = up.reused && body.done && method_retryable;
            sent_at = Instant::now();
            match write_within(&mut up.stream, &self.out, timeouts.server).await {
                Ok(()) if !body.done => break,
                Ok(()) => match self.read_response_head(&mut up, timeouts.server).await {
                    Ok(()) => break,
                    Err(RespFail::Closed) if retryable => {}
                    Err(e) => {
                        server.observe(false);
                        return Err(e.into_fail());
                    }
                },
                Err(IoFail::Timeout) => {
                    server.observe(false);
                    return Err(ProxyError::ServerTimeout.into());
                }
                Err(_) if retryable => {}
                Err(_) => return Err(ProxyError::BadGateway.into()),
            }
            // The server's other idle connections are likely dead too (a restart).
            upstream::forget(up.addr);
            up = match self.connect(&server, &timeouts, log).await {
                Some(fresh) => fresh,
                None => {
                    pick.failed(be, &server)?;
                    let (s, u) = self.pick_and_connect(be, src, &timeouts, log, &mut pick).await?;
                    slot = s;
                    u
                }
            };
        }
        let server = &slot.server;
        self.buf.consume(early);

        // -- the rest of the request body, unless the server answered early.
        let mut upload_done = body.done;
        if !body.done {
            if self.head.expect_continue && early == 0 {
                let _ = write_within(&mut self.stream, b"HTTP/1.1 100 Continue\r\n\r\n", fe.timeouts.client).await;
            }
            upload_done = self.upload(&mut up, body, fe, timeouts.server).await?;
            if let Err(e) = self.read_response_head(&mut up, timeouts.server).await {
                server.observe(false);
                return Err(e.into_fail());
            }
        }

        // -- cache hook 2 (cache/serve.rs): a 304 or an error answered from the store, or what to store.
        if let Some((keep, reusable)) =
            self.cache_response_head(&mut up, server, &timeouts, &resp_edits, log, body).await?
        {
            if reusable {
                upstream::checkin(up);
            }
            return Ok(keep);
        }

        // -- response head.
        let status = self.resp.status;
        server.observe(status / 100 != 5);
        crate::stats::count_status(&server.stats.responses, status);
        server.stats.bytes_in.fetch_add(head_out + body.data, Ordering::Relaxed);
        let is_head = self.head.method() == "HEAD";
        let framing_in = self.resp.framing(is_head);
        for e in resp_edits {
            apply_edits(e, &mut self.resp.fields);
        }
        if let Some(policy) = &be.cfg.cookie {
            self.cookie_response(policy, server, &bound, now_unix);
        }
        if let Some(table) = &be.stick {
            table.put(src, server.index, Instant::now());
        }
        if status == 101 {
            // Switching protocols (WebSocket): the rest is a tunnel. The server
            // slot stays taken for as long as it lasts.
            if let Some((_, r)) = log.as_mut() {
                r.status = status;
                r.tr = Some(sent_at.elapsed());
            }
            let why = self.tunnel(up, server, timeouts.tunnel, log).await;
            if let Some((_, r)) = log.as_mut() {
                r.termination = Some(why);
            }
            return Ok(false);
        }
        let client_10 = self.head.minor == 0;
        let dechunk = client_10 && framing_in == Framing::Chunked;
        let framing_out = if dechunk { Framing::UntilClose } else { framing_in };
        let close =
            self.head.close || !upload_done || framing_out == Framing::UntilClose || *self.stop.borrow() || !body.done;
        if let Some((_, r)) = log.as_mut() {
            r.status = status;
            r.tr = Some(sent_at.elapsed());
        }
        self.out.clear();
        self.resp.write_client(&mut self.out, framing_out, close, client_10 && !close);
        let head_bytes = self.out.len() as u64;

        // -- response body: what came with the head goes out in the same write.
        let mut rbody = BodyCursor::new(framing_in);
        let mut dechunked = Vec::new();
        let first = rbody.take(up.buf.data(), dechunk.then_some(&mut dechunked)).map_err(|_| ProxyError::BadGateway)?;
        // -- cache hook 3 (cache/serve.rs): the body kept for the store.
        if let Some(c) = self.cache.as_mut() {
            c.tee(&up.buf.data()[..first]);
        }
        if dechunk {
            self.out.extend_from_slice(&dechunked);
        } else {
            self.out.extend_from_slice(&up.buf.data()[..first]);
        }
        up.buf.consume(first);
        let client_idle = fe.timeouts.client;
        self.sent_status = status;
        let sent = write_within(&mut self.stream, &self.out, client_idle).await;
        let mut bytes = rbody.data;
        let outcome = match sent {
            Ok(()) => self.stream_response(&mut up, &mut rbody, dechunk, timeouts.server, client_idle).await,
            Err(_) => Err("client-aborted"),
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
                    upstream::checkin(up);
                }
                drop(slot);
                Ok(!close)
            }
            Err("client-aborted") => {
                if reusable && drain(&mut up, &mut rbody).await {
                    upstream::checkin(up);
                    server.stats.connections_saved.fetch_add(1, Ordering::Relaxed);
                }
                Err(Fail::Abort("client-aborted"))
            }
            Err(why) => Err(Fail::Abort(why)),
        }
    }

    /// Takes a server slot and a connection to it: a pooled one, or a new one,
    /// retrying connection failures (`retries`; on another server with
    /// `redispatch`, else on the same one, as HAProxy does).
    async fn pick_and_connect(
        &mut self,
        be: &Arc<BackendRt>,
        src: std::net::IpAddr,
        timeouts: &tollgate_config::Timeouts,
        log: &mut LogSlot,
        pick: &mut PickState,
    ) -> Result<(Slot, Upstream), ProxyError> {
        loop {
            let slot = match pick.pinned.take() {
                Some(server) => acquire_on(be, &server, timeouts.queue).await?,
                None => {
                    let input = SelectInput { src, path: self.head.path(), headers: &self.head.fields };
                    acquire(be, &input, &mut pick.tried, timeouts.queue).await?
                }
            };
            if let Some((_, r)) = log.as_mut() {
                r.tw.get_or_insert(pick.queued_at.elapsed());
                r.server = Some(slot.server.cfg.name.clone());
                r.retries = pick.attempts.min(be.cfg.retries);
            }
            if let Some(up) = upstream::checkout(slot.server.addr()) {
                return Ok((slot, up));
            }
            match self.connect(&slot.server, timeouts, log).await {
                Some(up) => return Ok((slot, up)),
                None => pick.failed(be, &slot.server)?,
            }
        }
    }

    /// Opens a connection to `server`, counting it (or its failure) in the server's
    /// stats and its time in the access log.
    async fn connect(
        &self,
        server: &ServerRt,
        timeouts: &tollgate_config::Timeouts,
        log: &mut LogSlot,
    ) -> Option<Upstream> {
        let t = Instant::now();
        match upstream::connect(server.addr(), timeouts.connect).await {
            Ok(up) => {
                server.stats.connections_opened.fetch_add(1, Ordering::Relaxed);
                if let Some((_, r)) = log.as_mut() {
                    r.tc = Some(t.elapsed());
                }
                Some(up)
            }
            Err(e) => {
                server.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                server.observe(false);
                tracing::warn!(server = %server.cfg.name, addr = %server.addr(), "{e}");
                None
            }
        }
    }

    /// Streams the rest of the request body to the server. Returns whether all of
    /// it went; false when the server answered before the end (its response is
    /// then read, and both connections close after it).
    async fn upload(
        &mut self,
        up: &mut Upstream,
        body: &mut BodyCursor,
        fe: &Frontend,
        server_idle: Duration,
    ) -> Result<bool, Fail> {
        let limit = fe.limits.max_request_body;
        let client_idle = fe.timeouts.client;
        while !body.done {
            let wait = deadline(client_idle);
            let r = tokio::select! {
                biased;
                r = self.stream.read(self.buf.spare()) => r,
                _ = up.stream.readable() => {
                    // The server speaks before the body is complete: an early answer
                    // (or a close, which the response read reports).
                    match up.stream.try_read(up.buf.spare()) {
                        Ok(0) => return Err(ProxyError::BadGateway.into()),
                        Ok(n) => {
                            up.buf.commit(n);
                            return Ok(false);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(_) => return Err(ProxyError::BadGateway.into()),
                    }
                }
                _ = sleep_until(wait) => return Err(ProxyError::ClientTimeout.into()),
            };
            match r {
                Ok(0) | Err(_) => return Err(Fail::Abort("client-aborted")),
                Ok(n) => self.buf.commit(n),
            }
            let n = body.take(self.buf.data(), None).map_err(|_| ProxyError::BadRequest("bad-chunk"))?;
            if limit.is_some_and(|l| body.data > l) {
                return Err(ProxyError::BodyTooLarge.into());
            }
            match write_within(&mut up.stream, &self.buf.data()[..n], server_idle).await {
                Ok(()) => self.buf.consume(n),
                Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
                // The server stopped reading: perhaps it answered; read that.
                Err(_) => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Reads the server's response head into `self.resp`, skipping interim (1xx)
    /// responses. `timeout.server` is the longest silence allowed.
    async fn read_response_head(&mut self, up: &mut Upstream, idle: Duration) -> Result<(), RespFail> {
        let max_head = self.fe().limits.max_header_size.max(8192);
        let mut got_any = !up.buf.is_empty();
        loop {
            if !up.buf.is_empty() {
                match h1::parse_response(up.buf.data(), &mut self.resp, max_head) {
                    Ok(Parsed::Complete((), len)) => {
                        up.buf.consume(len);
                        match self.resp.status {
                            // A 101 is only valid as the answer to an upgrade request.
                            101 if self.head.upgrade && self.resp.switches_protocols() => return Ok(()),
                            101 => return Err(RespFail::Bad),
                            100..=199 => continue,
                            _ => return Ok(()),
                        }
                    }
                    Ok(Parsed::Partial) => {
                        if up.buf.is_full() && !up.buf.grow(max_head + 1) {
                            return Err(RespFail::Bad);
                        }
                    }
                    Err(_) => return Err(RespFail::Bad),
                }
            }
            match read_until(&mut up.stream, &mut up.buf, deadline(idle)).await {
                Ok(_) => got_any = true,
                Err(IoFail::Timeout) => return Err(RespFail::Timeout),
                Err(_) if !got_any => return Err(RespFail::Closed),
                Err(_) => return Err(RespFail::Bad),
            }
        }
    }

    /// After a 101: sends the head to the client, then relays bytes both ways
    /// until both sides have closed, or neither sent anything for `idle`
    /// (`timeout.tunnel`). A side that closes has its peer's write side shut
    /// down, and the other direction goes on (half-close). Returns why it ended.
    async fn tunnel(&mut self, mut up: Upstream, server: &ServerRt, idle: Duration, log: &mut LogSlot) -> &'static str {
        self.out.clear();
        self.resp.write_switching(&mut self.out);
        let head = self.out.len() as u64;
        // What the server sent right after its head, and what the client sent
        // right after its request, go first.
        self.out.extend_from_slice(up.buf.data());
        let (mut down, mut upward) = (up.buf.len() as u64, 0u64);
        up.buf.consume(up.buf.len());
        self.sent_status = 101;
        let mut why = "tunnel-closed";
        if write_within(&mut self.stream, &self.out, idle).await.is_err() {
            why = "client-aborted";
        } else if !self.buf.is_empty() {
            upward += self.buf.len() as u64;
            if write_within(&mut up.stream, self.buf.data(), idle).await.is_err() {
                why = "tunnel-server-error";
            }
            self.buf.consume(self.buf.len());
        }
        let (mut client_open, mut server_open) = (why == "tunnel-closed", why == "tunnel-closed");
        while client_open || server_open {
            let wait = deadline(idle);
            tokio::select! {
                r = self.stream.read(self.buf.spare()), if client_open => match r {
                    Ok(n) if n > 0 => {
                        self.buf.commit(n);
                        upward += n as u64;
                        let sent = write_within(&mut up.stream, self.buf.data(), idle).await;
                        self.buf.consume(n);
                        if sent.is_err() {
                            why = "tunnel-server-error";
                            break;
                        }
                    }
                    _ => {
                        client_open = false;
                        let _ = up.stream.shutdown().await;
                    }
                },
                r = up.stream.read(up.buf.spare()), if server_open => match r {
                    Ok(n) if n > 0 => {
                        up.buf.commit(n);
                        down += n as u64;
                        let sent = write_within(&mut self.stream, up.buf.data(), idle).await;
                        up.buf.consume(n);
                        if sent.is_err() {
                            why = "client-aborted";
                            break;
                        }
                    }
                    _ => {
                        server_open = false;
                        let _ = self.stream.shutdown().await;
                    }
                },
                _ = sleep_until(wait) => {
                    why = "tunnel-timeout";
                    break;
                }
            }
        }
        server.stats.bytes_out.fetch_add(down, Ordering::Relaxed);
        server.stats.bytes_in.fetch_add(upward, Ordering::Relaxed);
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
    ) -> Result<(), &'static str> {
        let mut dechunked = Vec::new();
        let mut watch_client = !self.buf.is_full();
        // A body that does not fit in one block streams through a larger one
        // (a chunked or close-delimited one once a read fills a whole block).
        let mut big = matches!(rbody.framing, Framing::Length(_)) && rbody.left > BUF_SIZE as u64;
        while !rbody.done {
            let wait = deadline(server_idle);
            let r = tokio::select! {
                biased;
                // The client first: when it has left, the rest of the response
                // is read (drained) rather than sent, and the connection kept.
                r = self.stream.readable(), if watch_client => {
                    if r.is_err() {
                        return Err("client-aborted");
                    }
                    match self.stream.try_read(self.buf.spare()) {
                        Ok(0) => return Err("client-aborted"),
                        // Pipelined bytes: keep them for the next request.
                        Ok(n) => {
                            self.buf.commit(n);
                            watch_client = !self.buf.is_full();
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => return Err("client-aborted"),
                    }
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
                Err(IoFail::Timeout) => return Err("server-timeout"),
                Err(_) => return Err("server-aborted"),
            }
            dechunked.clear();
            let n = rbody.take(up.buf.data(), dechunk.then_some(&mut dechunked)).map_err(|_| "server-bad-chunk")?;
            // -- cache hook 3 (cache/serve.rs): the body kept for the store.
            if let Some(c) = self.cache.as_mut() {
                c.tee(&up.buf.data()[..n]);
            }
            let data = if dechunk { &dechunked[..] } else { &up.buf.data()[..n] };
            match write_within(&mut self.stream, data, client_idle).await {
                Ok(()) => {
                    up.buf.consume(n);
                    if big {
                        up.buf.reserve_total(BODY_BUF_SIZE);
                    }
                }
                Err(IoFail::Timeout) => return Err("client-timeout"),
                Err(_) => {
                    up.buf.consume(n);
                    return Err("client-aborted");
                }
            }
        }
        Ok(())
    }

    /// The server a request's cookie (or, without one, the stick table) binds it
    /// to, if that server may still take it (up, not in MAINT); the cookie edits
    /// on the way in (`indirect`, prefix removal).
    fn bound_server(&mut self, be: &BackendRt, src: std::net::IpAddr, now: u64) -> Bound {
        let mut bound = Bound::default();
        if let Some(p) = &be.cfg.cookie {
            let name = p.name.as_bytes();
            match p.mode {
                CookieMode::Insert => {
                    let presented = self
                        .head
                        .fields
                        .get_all(b"cookie")
                        .find_map(|f| sticky::find(f, name))
                        .map(sticky::parse_inserted)
                        .filter(|c| sticky::still_valid(p, c, now));
                    if let Some(c) = presented {
                        bound.server = be.server_by_cookie(&c.server).cloned();
                        bound.presented = Some(c);
                    }
                    if p.indirect {
                        self.head.fields.map_values(b"cookie", |f| {
                            sticky::find(f, name).map(|_| sticky::without(f, name).unwrap_or_default())
                        });
                    }
                }
                CookieMode::Prefix => {
                    let mut server = None;
                    self.head.fields.map_values(b"cookie", |f| {
                        sticky::find(f, name)?;
                        let (v, s) = sticky::unprefix(f, name);
                        server = server.take().or(s);
                        Some(v)
                    });
                    bound.server = server.and_then(|s| be.server_by_cookie(&s).cloned());
                }
                CookieMode::Rewrite => {
                    let value = self.head.fields.get_all(b"cookie").find_map(|f| sticky::find(f, name));
                    bound.server = value.and_then(|v| be.server_by_cookie(v).cloned());
                }
            }
        }
        if bound.server.is_none()
            && let Some(table) = &be.stick
        {
            bound.server = table.get(src, Instant::now()).and_then(|i| be.servers.get(i).cloned());
        }
        bound.server = bound.server.filter(|s| s.accepts_sticky());
        bound
    }

    /// The cookie edits on the way out: insert (when the client's cookie does not
    /// already name this server, or its dates need refreshing), prefix, rewrite.
    fn cookie_response(&mut self, p: &CookiePolicy, server: &ServerRt, bound: &Bound, now: u64) {
        let value = &server.cfg.cookie;
        match p.mode {
            CookieMode::Insert => {
                let same = bound.presented.as_ref().filter(|c| c.server == value.as_bytes());
                if same.is_some_and(|c| !sticky::needs_refresh(p, c, now)) {
                    return;
                }
                let first = same.and_then(|c| c.first);
                self.resp.fields.append(b"set-cookie", &sticky::set_cookie(p, value, first, now));
                if p.nocache {
                    self.resp.fields.set(b"cache-control", b"private");
                }
            }
            mode => {
                let name = p.name.as_bytes();
                self.resp.fields.map_values(b"set-cookie", |f| sticky::rewrite_set_cookie(f, name, mode, value));
            }
        }
    }

    async fn redirect(
        &mut self,
        code: u16,
        location: &str,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        let close = self.head.close || !body.done;
        self.out.clear();
        let fields: [(&str, &[u8]); 2] = [("location", location.as_bytes()), ("cache-control", b"no-cache")];
        h1::write_local_response(&mut self.out, code, &fields, b"", close);
        if let Some((_, rec)) = log.as_mut() {
            rec.status = code;
            rec.termination = Some("redirect");
        }
        let idle = self.fe().timeouts.client;
        self.sent_status = code;
        self.sent_bytes = self.out.len() as u64;
        match write_within(&mut self.stream, &self.out, idle).await {
            Ok(()) => Ok(!close),
            Err(_) => Err(Fail::Abort("client-aborted")),
        }
    }
}

/// Where a client is bound (persistence), as found in its request.
#[derive(Default)]
struct Bound {
    server: Option<Arc<ServerRt>>,
    /// The insert-mode cookie it presented, if valid.
    presented: Option<sticky::Presented>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Where a request's search for a server stands, across connection failures.
struct PickState {
    queued_at: Instant,
    /// Servers whose connection failed (redispatch skips them).
    tried: Vec<usize>,
    attempts: u32,
    /// The server to use next, bypassing the balancer: the one the client is
    /// bound to, or, without redispatch, the one to try again.
    pinned: Option<Arc<ServerRt>>,
}

impl PickState {
    /// A connection to `server` failed: go on (another server with redispatch,
    /// the same without) while `retries` allow.
    fn failed(&mut self, be: &BackendRt, server: &Arc<ServerRt>) -> Result<(), ProxyError> {
        self.attempts += 1;
        if self.attempts > be.cfg.retries {
            return Err(ProxyError::ConnectFailed);
        }
        if be.cfg.redispatch {
            self.tried.push(server.index);
        } else {
            self.pinned = Some(server.clone());
        }
        Ok(())
    }
}

/// Why reading a response head failed.
enum RespFail {
    Timeout,
    /// The connection closed before any byte of a response.
    Closed,
    /// A malformed response, or one cut short.
    Bad,
}

impl RespFail {
    fn into_fail(self) -> Fail {
        match self {
            RespFail::Timeout => Fail::Respond(ProxyError::ServerTimeout),
            RespFail::Closed | RespFail::Bad => Fail::Respond(ProxyError::BadGateway),
        }
    }
}

/// Reads the rest of a response whose client left, so its connection can be
/// reused: at most [`DRAIN_MAX_BYTES`] within [`DRAIN_MAX_TIME`].
async fn drain(up: &mut Upstream, rbody: &mut BodyCursor) -> bool {
    if rbody.framing == Framing::UntilClose {
        return false;
    }
    let until = deadline(DRAIN_MAX_TIME);
    let mut read = 0u64;
    loop {
        let n = match rbody.take(up.buf.data(), None) {
            Ok(n) => n,
            Err(_) => return false,
        };
        up.buf.consume(n);
        read += n as u64;
        if rbody.done {
            return up.buf.is_empty();
        }
        if read > DRAIN_MAX_BYTES || read_until(&mut up.stream, &mut up.buf, until).await.is_err() {
            return false;
        }
    }
}

/// Takes a slot on one given server (a bound client, or a retry without
/// redispatch), waiting while it is at its `maxconn`, for at most `queue_timeout`.
async fn acquire_on(be: &Arc<BackendRt>, server: &Arc<ServerRt>, queue_timeout: Duration) -> Result<Slot, ProxyError> {
    let until = deadline(queue_timeout);
    let mut _queued = None;
    loop {
        if let Some(slot) = be.try_take(server) {
            return Ok(slot);
        }
        _queued.get_or_insert_with(|| be.queue.enter());
        if tokio::time::timeout_at(until, be.slot_freed()).await.is_err() {
            return Err(ProxyError::QueueTimeout);
        }
    }
}

/// Takes a server slot, waiting in the backend queue while every usable server is
/// at its `maxconn`, for at most `queue_timeout`.
async fn acquire(
    be: &Arc<BackendRt>,
    input: &SelectInput<'_>,
    tried: &mut Vec<usize>,
    queue_timeout: Duration,
) -> Result<Slot, ProxyError> {
    let mut until: Option<tokio::time::Instant> = None;
    let mut _queued = None;
    loop {
        match be.select(input, tried) {
            Pick::Server(s) => return Ok(s),
            Pick::NoServer if !tried.is_empty() => {
                // Every server was tried: try them again (attempts stay bounded).
                tried.clear();
            }
            Pick::NoServer => return Err(ProxyError::NoServer),
            Pick::Full => {
                _queued.get_or_insert_with(|| be.queue.enter());
                let d = *until.get_or_insert_with(|| deadline(queue_timeout));
                if tokio::time::timeout_at(d, be.slot_freed()).await.is_err() {
                    return Err(ProxyError::QueueTimeout);
                }
            }
        }
    }
}
