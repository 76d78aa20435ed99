//! The steps one proxied exchange takes whatever protocol the client speaks,
//! which the request phase (pipeline.rs) runs in order for the HTTP/1.1
//! connection (conn.rs) and HTTP/2 streams (h2conn.rs) alike:
//!
//! Route (rules) -> prepare (X-Forwarded-*, header edits) -> the cache
//! (pipeline/serve.rs: answered from the store, or forwarded with a plan) ->
//! persistence (cookie, stick table) -> pick and connect (balance, queue,
//! pool, retries) -> response head (`timeout.server`; interim 1xx heads go on
//! to the client as they come) -> response edits (rules, cookies, HSTS, stick
//! table). The body loops stay with each protocol: they differ in how the
//! client side reads and writes, not in what they do to the server side.

use crate::io::buf::Buf;
use crate::io::limits::Throttle;
use crate::lb::track::{RequestKeys, Tracked};
use crate::lb::{BackendRt, Pick, SelectInput, ServerRt, Slot};
use crate::net::tls::TlsInfo;
use crate::observe::access_log::{AccessLog, LogRecord};
use crate::observe::counters::Histogram;
use crate::observe::termination::Termination;
use crate::pipeline::rescue::ProxyError;
use crate::pipeline::snapshot::Snapshot;
use crate::upstream::{self, UpStream, Upstream};
use http::Method;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::time::sleep_until;
use tollgate_config::{
    Action, AuthPolicy, CacheUse, CookieMode, CookiePolicy, Frontend, HeaderEdits, PathRewrite, RedirectTarget,
    RequestFacts, Timeouts, path::match_form,
};
use tollgate_wire::cookie;
use tollgate_wire::h1::{self, BodyCursor, Framing, Parsed, RequestHead, ResponseHead};
use tollgate_wire::headers::{Vars, add_forwarded, add_rfc7239, apply_edits, canonical_ip, scheme_location};

pub(crate) type LogSlot = Option<(Arc<AccessLog>, LogRecord)>;

/// The most of a response its client abandoned that is still read, so that its
/// server connection can serve another request rather than be closed.
pub(crate) const DRAIN_MAX_BYTES: u64 = 256 * 1024;
/// How long that read may take.
pub(crate) const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

/// How an exchange went wrong.
pub(crate) enum Fail {
    /// Before anything of the response went out: the client gets an error response.
    Respond(ProxyError),
    /// After: the client connection is closed; the reason goes to the log.
    Abort(Termination),
}

impl From<ProxyError> for Fail {
    fn from(e: ProxyError) -> Self {
        Fail::Respond(e)
    }
}

/// Why a read or write on one side stopped.
pub(crate) enum IoFail {
    Timeout,
    Closed,
    Error,
}

pub(crate) async fn read_until(
    stream: &mut UpStream,
    buf: &mut Buf,
    deadline: tokio::time::Instant,
) -> Result<usize, IoFail> {
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

/// Completes `write` unless `idle` passes first. Client writes are
/// `ClientStream::write_all_flushed` (TLS may hold records back), server ones
/// `write_all`.
pub(crate) async fn within(write: impl Future<Output = io::Result<()>>, idle: Duration) -> Result<(), IoFail> {
    tokio::select! {
        biased;
        r = write => r.map_err(|_| IoFail::Error),
        _ = tokio::time::sleep(idle) => Err(IoFail::Timeout),
    }
}

pub(crate) fn deadline(idle: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + idle
}

pub(crate) fn idempotent(m: &str) -> bool {
    matches!(m, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// Where a client is bound (persistence), as found in its request.
#[derive(Default)]
pub(crate) struct Bound {
    pub(crate) server: Option<Arc<ServerRt>>,
    /// The insert-mode cookie it presented, if valid.
    pub(crate) presented: Option<cookie::Presented>,
}

/// Where a request's search for a server stands, across connection failures.
pub(crate) struct PickState {
    pub(crate) queued_at: Instant,
    /// Servers whose connection failed (redispatch skips them).
    pub(crate) tried: Vec<usize>,
    pub(crate) attempts: u32,
    /// The server to use next, bypassing the balancer: the one the client is
    /// bound to, or, without redispatch, the one to try again.
    pub(crate) pinned: Option<Arc<ServerRt>>,
}

impl PickState {
    /// A connection to `server` failed: go on (another server with redispatch,
    /// the same without) while `retries` allow.
    pub(crate) fn failed(&mut self, be: &BackendRt, server: &Arc<ServerRt>) -> Result<(), ProxyError> {
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
pub(crate) enum RespFail {
    Timeout,
    /// The connection closed before any byte of a response.
    Closed,
    /// A malformed response, or one cut short.
    Bad,
}

impl RespFail {
    pub(crate) fn into_fail(self) -> Fail {
        match self {
            RespFail::Timeout => Fail::Respond(ProxyError::ServerTimeout),
            RespFail::Closed | RespFail::Bad => Fail::Respond(ProxyError::BadGateway),
        }
    }
}

/// Reads the rest of a response whose client left, so its connection can be
/// reused: at most [`DRAIN_MAX_BYTES`] within [`DRAIN_MAX_TIME`].
pub(crate) async fn drain(up: &mut Upstream, rbody: &mut BodyCursor) -> bool {
    if rbody.framing == Framing::UntilClose || up.stream.is_h2() {
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
pub(crate) async fn acquire_on(
    be: &Arc<BackendRt>,
    server: &Arc<ServerRt>,
    queue_timeout: Duration,
) -> Result<Slot, ProxyError> {
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
pub(crate) async fn acquire(
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

impl PickState {
    /// A new search, from now; `bound`: the server the client is bound to.
    pub(crate) fn new(bound: Option<Arc<ServerRt>>) -> Self {
        PickState { queued_at: Instant::now(), tried: Vec::new(), attempts: 0, pinned: bound }
    }
}

/// Where the rules send a request that goes to a backend.
pub(crate) struct Route<'a> {
    /// Index into the snapshot's backends.
    pub(crate) backend: usize,
    pub(crate) req_edits: Vec<&'a HeaderEdits>,
    pub(crate) resp_edits: Vec<&'a HeaderEdits>,
    /// The Basic auth policies of the rules that matched (auth.rs).
    pub(crate) auth: Vec<&'a AuthPolicy>,
    /// The first matching rule's `cache` (over the backend's zone).
    pub(crate) cache: Option<CacheUse>,
    /// The matching rules' `early_hints`: `Link` values for a 103.
    pub(crate) early_hints: Vec<&'a http::HeaderValue>,
    /// The matching rules' `rewrite_path`s, applied in order.
    pub(crate) rewrites: Vec<&'a PathRewrite>,
}

/// What the rules decided.
pub(crate) enum Routed<'a> {
    Backend(Route<'a>),
    Redirect {
        code: u16,
        location: String,
    },
    /// Hold the request for `delay`, then answer `status` and close.
    Tarpit {
        delay: Duration,
        status: http::StatusCode,
    },
    /// Close the client connection without a response.
    SilentDrop,
}

/// Runs frontend `fi`'s rules in order over a request, once it is counted in
/// the tables the frontend tracks (`tracked`): header edits accumulate, the
/// first action wins (backend, redirect, deny, tarpit, silent drop). A deny
/// is counted and returned as [`ProxyError::Denied`]; no backend at all as
/// [`ProxyError::NoBackend`].
pub(crate) fn route<'a>(
    snap: &'a Snapshot,
    fi: usize,
    head: &RequestHead,
    (src, tls): (IpAddr, Option<&TlsInfo>),
    tracked: &mut Tracked,
) -> Result<Routed<'a>, ProxyError> {
    let fe = &snap.config.frontends[fi];
    if !fe.track.is_empty() {
        let keys = RequestKeys { src, head };
        tracked.request(&snap.tables, &fe.track, &keys);
    }
    let mut backend = fe.default_backend;
    let mut req_edits: Vec<&HeaderEdits> = Vec::new();
    let mut resp_edits: Vec<&HeaderEdits> = Vec::new();
    let mut auth: Vec<&AuthPolicy> = Vec::new();
    let mut cache = None;
    let mut early_hints = Vec::new();
    let mut rewrites = Vec::new();
    if !fe.rules.is_empty() {
        // Only the facts some rule tests are made ready (config `Reads`).
        let reads = fe.rule_reads;
        let host = match reads.host {
            true => head.fields.get(b"host").and_then(tollgate_wire::headers::routing_host).unwrap_or_default(),
            false => String::new(),
        };
        let method = match reads.method {
            true => Method::from_bytes(head.method().as_bytes()).unwrap_or(Method::GET),
            false => Method::GET,
        };
        // Rules match the path in normal form (path_normalize), folded for a
        // case-insensitive rule; the request goes on with its own bytes.
        let path = match reads.path {
            true => match_form(head.path(), fe.path_normalize, false),
            false => std::borrow::Cow::Borrowed(""),
        };
        let folded = std::cell::OnceCell::new();
        let folded = || folded.get_or_init(|| match_form(&path, false, true)).as_ref();
        let facts = RequestFacts {
            host: &host,
            path: &path,
            method: &method,
            headers: &head.fields,
            src,
            tls: tls.is_some(),
            sni: tls.map_or("", |t| t.sni.as_str()),
            counters: &*tracked,
            client_cert: tls.and_then(|t| t.client.as_deref()),
        };
        for rule in &fe.rules {
            if !rule.matches(&facts, folded) {
                continue;
            }
            if !rule.request_headers.is_empty() {
                req_edits.push(&rule.request_headers);
            }
            if !rule.response_headers.is_empty() {
                resp_edits.push(&rule.response_headers);
            }
            auth.extend(&rule.auth);
            cache = cache.or(rule.cache);
            early_hints.extend(&rule.early_hints);
            rewrites.extend(&rule.rewrite_path);
            match &rule.action {
                None => continue,
                Some(Action::Backend(i)) => {
                    backend = Some(*i);
                    break;
                }
                Some(Action::Redirect(r)) => {
                    let location = match &r.target {
                        RedirectTarget::Location(l) => l.clone(),
                        RedirectTarget::Prefix(p) => format!("{p}{}", head.target()),
                        RedirectTarget::Scheme { scheme, port } => scheme_location(
                            scheme,
                            *port,
                            head.fields.get(b"host").unwrap_or_default(),
                            head.target(),
                            tls.is_some(),
                        ),
                    };
                    return Ok(Routed::Redirect { code: r.code.as_u16(), location });
                }
                Some(Action::Deny { status, body, retry_after }) => {
                    snap.frontend_stats[fi].denied.fetch_add(1, Ordering::Relaxed);
                    return Err(ProxyError::Denied { status: *status, body: body.clone(), retry_after: *retry_after });
                }
                Some(Action::Tarpit { delay, status }) => {
                    snap.frontend_stats[fi].denied.fetch_add(1, Ordering::Relaxed);
                    return Ok(Routed::Tarpit { delay: *delay, status: *status });
                }
                Some(Action::SilentDrop) => {
                    snap.frontend_stats[fi].denied.fetch_add(1, Ordering::Relaxed);
                    return Ok(Routed::SilentDrop);
                }
            }
        }
    }
    let backend = backend.ok_or(ProxyError::NoBackend)?;
    Ok(Routed::Backend(Route { backend, req_edits, resp_edits, auth, cache, early_hints, rewrites }))
}

/// The request as the server gets it: an `Upgrade` only to the frontend's
/// `upgrades`, X-Forwarded-* and RFC 7239 `Forwarded` (when the frontend adds
/// them), its request id (`request_id`: a new one unless a trusted client sent
/// one), and the rules' request header edits. Returns what the edits'
/// variables stand for, when some edit (request or response) has them.
pub(crate) fn prepare(
    fe: &Frontend,
    head: &mut RequestHead,
    peer: SocketAddr,
    local_port: u16,
    tls_info: Option<&TlsInfo>,
    route: &Route,
) -> Option<Box<Vars>> {
    let tls = tls_info.is_some();
    let src = canonical_ip(peer.ip());
    head.keep_upgrades(|p| fe.allows_upgrade(p));
    let proto = if tls { "https" } else { "http" };
    if fe.forward_for {
        add_forwarded(&mut head.fields, src, local_port, proto);
    }
    if fe.forwarded {
        add_rfc7239(&mut head.fields, src, proto);
    }
    if let Some(rid) = &fe.request_id {
        let name = rid.header.as_bytes();
        let kept = rid.trusts(src) && head.fields.get(name).is_some_and(|v| !v.is_empty());
        if !kept {
            head.fields.set(name, &request_id());
        }
    }
    let has_vars = route.req_edits.iter().chain(&route.resp_edits).any(|e| e.has_vars());
    // Boxed: it lives across the request phase's awaits, and most requests
    // have no variables to fill in (a larger future costs every one of them).
    let vars = has_vars.then(|| {
        let cert = tls_info.and_then(|t| t.client.as_deref());
        Box::new(Vars::of(head, peer, (tls, cert), fe.request_id.as_ref().map(|r| r.header.as_str()), &fe.name))
    });
    for e in &route.req_edits {
        apply_edits(e, &mut head.fields, vars.as_deref());
    }
    if !route.rewrites.is_empty() {
        // On the path in the form the rules matched (normal form unless
        // path_normalize is off), as nginx rewrites its normalized URI.
        let mut path = match_form(head.path(), fe.path_normalize, false).into_owned();
        for rw in &route.rewrites {
            path = rw.apply(&path);
        }
        head.set_path(&path);
    }
    vars
}

/// A new request id: 32 hex digits (128 bits, as nginx's `$request_id`), from
/// a per-thread generator (the balancer's, [`crate::lb::next_rand`]) seeded
/// from the standard library's random keys: an id for telling requests apart
/// in logs, not a secret.
fn request_id() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Write as _;
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id() as u64);
            // xorshift's state must not be 0.
            h.finish() | 1
        });
    }
    let next = || {
        STATE.with(|s| {
            let mut state = s.get();
            let x = crate::lb::next_rand(&mut state);
            s.set(state);
            x
        })
    };
    let (hi, lo) = (next(), next());
    let mut out = [0u8; 32];
    let _ = write!(&mut out[..], "{hi:016x}{lo:016x}");
    out
}

/// The server a request's cookie (or, without one, the stick table) binds it
/// to, if that server may still take it (up, not in MAINT); the cookie edits
/// on the way in (`indirect`, prefix removal).
pub(crate) fn bound_server(be: &BackendRt, head: &mut RequestHead, src: IpAddr, now: u64) -> Bound {
    let mut bound = Bound::default();
    if let Some(p) = &be.cfg.cookie {
        let name = p.name.as_bytes();
        match p.mode {
            CookieMode::Insert => {
                let presented = head
                    .fields
                    .get_all(b"cookie")
                    .find_map(|f| cookie::find(f, name))
                    .map(cookie::parse_inserted)
                    .filter(|c| cookie::still_valid(p, c, now));
                if let Some(c) = presented {
                    bound.server = be.server_by_cookie(&c.server).cloned();
                    bound.presented = Some(c);
                }
                if p.indirect {
                    head.fields.map_values(b"cookie", |f| {
                        cookie::find(f, name).map(|_| cookie::without(f, name).unwrap_or_default())
                    });
                }
            }
            CookieMode::Prefix => {
                let mut server = None;
                head.fields.map_values(b"cookie", |f| {
                    cookie::find(f, name)?;
                    let (v, s) = cookie::unprefix(f, name);
                    server = server.take().or(s);
                    Some(v)
                });
                bound.server = server.and_then(|s| be.server_by_cookie(&s).cloned());
            }
            CookieMode::Rewrite => {
                let value = head.fields.get_all(b"cookie").find_map(|f| cookie::find(f, name));
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
pub(crate) fn cookie_response(resp: &mut ResponseHead, p: &CookiePolicy, server: &ServerRt, bound: &Bound, now: u64) {
    let value = &server.cfg.cookie;
    match p.mode {
        CookieMode::Insert => {
            let same = bound.presented.as_ref().filter(|c| c.server == value.as_bytes());
            if same.is_some_and(|c| !cookie::needs_refresh(p, c, now)) {
                return;
            }
            let first = same.and_then(|c| c.first);
            resp.fields.append(b"set-cookie", &cookie::set_cookie(p, value, first, now));
            if p.nocache {
                resp.fields.set(b"cache-control", b"private");
            }
        }
        mode => {
            let name = p.name.as_bytes();
            resp.fields.map_values(b"set-cookie", |f| cookie::rewrite_set_cookie(f, name, mode, value));
        }
    }
}

/// A response head has come from `server`: passive health, the server's
/// counters, then what the proxy does to the head (the rules' edits, the
/// persistence cookie, HSTS on TLS) and the stick table entry.
#[allow(clippy::too_many_arguments)]
pub(crate) fn response_arrived(
    resp: &mut ResponseHead,
    be: &BackendRt,
    server: &ServerRt,
    route: &Route,
    bound: &Bound,
    now_unix: u64,
    src: IpAddr,
    tls: Option<&TlsInfo>,
    vars: Option<&Vars>,
) {
    let status = resp.status;
    server.observe(status / 100 != 5);
    crate::observe::counters::count_status(&server.stats.responses, status);
    for e in &route.resp_edits {
        apply_edits(e, &mut resp.fields, vars);
    }
    if let Some(policy) = &be.cfg.cookie {
        cookie_response(resp, policy, server, bound, now_unix);
    }
    if let Some(hsts) = tls.and_then(|t| t.hsts.as_ref()) {
        resp.fields.set(b"strict-transport-security", hsts.as_bytes());
    }
    if let Some(alt) = tls.and_then(|t| t.alt_svc.as_ref()) {
        resp.fields.set(b"alt-svc", alt.as_bytes());
    }
    if let Some(table) = &be.stick {
        table.put(src, server.index, Instant::now());
    }
}

/// Who a server connection is opened for: the client's address and the
/// address it reached (the PROXY header's source and destination). The
/// latter is looked up only for `send_proxy` servers.
pub(crate) struct ClientEnds<F: Fn() -> SocketAddr> {
    pub(crate) peer: SocketAddr,
    pub(crate) local: F,
}

/// Takes a server slot and a connection to it: a pooled one (or, for a
/// `send_proxy` server, `private`), or a new one, retrying connection failures
/// (`retries`; on another server with `redispatch`, else on the same one, as
/// HAProxy does).
pub(crate) async fn pick_and_connect<F: Fn() -> SocketAddr>(
    be: &Arc<BackendRt>,
    input: &SelectInput<'_>,
    timeouts: &Timeouts,
    log: &mut LogSlot,
    pick: &mut PickState,
    private: &mut Option<Upstream>,
    ends: &ClientEnds<F>,
) -> Result<(Slot, Upstream), ProxyError> {
    loop {
        let slot = next_slot(be, input, pick, timeouts.queue).await?;
        if let Some((_, r)) = log.as_mut() {
            r.tw.get_or_insert(pick.queued_at.elapsed());
            r.server = Some(slot.server.cfg.name.clone());
            r.retries = pick.attempts.min(be.cfg.retries);
        }
        if let Some(up) = reuse(private, &slot.server) {
            return Ok((slot, up));
        }
        match connect(&slot.server, timeouts, log, ends, &be.connect_time).await? {
            Some(up) => return Ok((slot, up)),
            None => pick.failed(be, &slot.server)?,
        }
    }
}

/// The next server slot of a search: on the server it is pinned to (a bound
/// client, a retry without redispatch), else the balancer's choice.
pub(crate) async fn next_slot(
    be: &Arc<BackendRt>,
    input: &SelectInput<'_>,
    pick: &mut PickState,
    queue_timeout: Duration,
) -> Result<Slot, ProxyError> {
    match pick.pinned.take() {
        Some(server) => acquire_on(be, &server, queue_timeout).await,
        None => acquire(be, input, &mut pick.tried, queue_timeout).await,
    }
}

/// An idle connection to `server`: from the worker's pool, or for a
/// `send_proxy` server the one this client used last, if still good.
pub(crate) fn reuse(private: &mut Option<Upstream>, server: &ServerRt) -> Option<Upstream> {
    if server.cfg.send_proxy.is_none() {
        return upstream::checkout(&server.cfg);
    }
    private.take().filter(|up| up.addr == server.addr() && upstream::reusable(up))
}

/// Keeps a connection whose exchange is complete for the next request: in
/// the worker's pool, or for a `send_proxy` server for this client only.
pub(crate) fn park(private: &mut Option<Upstream>, mut up: Upstream, server: &ServerRt) {
    if server.cfg.send_proxy.is_none() {
        upstream::checkin(up, server.cfg.keep_alive);
    } else {
        upstream::idle(&mut up, server.cfg.keep_alive);
        *private = Some(up);
    }
}

/// Opens a connection to `server`, counting it (or its failure) in the server's
/// stats and its time in the access log. A `send_proxy` server gets the PROXY
/// header first. `Ok(None)`: the server could not be reached (counted against
/// it: `connect_errors`, passive checks; the caller may retry). A failure of
/// Tollgate's own (out of descriptors, memory or local ports, limits.rs) is
/// not the server's: it counts nothing, is not retried and answers 503
/// ([`ProxyError::Local`]).
pub(crate) async fn connect<F: Fn() -> SocketAddr>(
    server: &ServerRt,
    timeouts: &Timeouts,
    log: &mut LogSlot,
    ends: &ClientEnds<F>,
    timing: &Histogram,
) -> Result<Option<Upstream>, ProxyError> {
    let t = Instant::now();
    let header = server.cfg.send_proxy.map(|version| {
        let mut header = Vec::with_capacity(64);
        tollgate_wire::proxy_proto::encode(
            tollgate_wire::proxy_proto::version_of(version),
            ends.peer,
            (ends.local)(),
            &mut header,
        );
        header
    });
    let connected = upstream::connect(&server.cfg, header.as_deref(), timeouts.connect).await;
    match connected {
        Ok(up) => {
            server.stats.connections_opened.fetch_add(1, Ordering::Relaxed);
            let took = t.elapsed();
            timing.observe(took);
            if let Some((_, r)) = log.as_mut() {
                r.tc = Some(took);
            }
            Ok(Some(up))
        }
        Err(e) => match e.shortage() {
            Some(shortage) => {
                static WARN: Throttle = Throttle::new();
                if let Some(held) = WARN.ready() {
                    tracing::warn!(
                        server = %server.cfg.name,
                        addr = %server.addr(),
                        "cannot connect to a server: {shortage}; answering 503 ({}), not counted against the server \
                         ({held} more since the last such message)",
                        shortage.reason()
                    );
                }
                Err(ProxyError::Local(shortage))
            }
            None => {
                server.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                server.observe(false);
                tracing::warn!(server = %server.cfg.name, addr = %server.addr(), "{e}");
                Ok(None)
            }
        },
    }
}

/// Reads the server's response head into `resp`. With `interims`, an interim
/// head ([`ResponseHead::is_interim`]: 102, 103 ...) is returned too, for the
/// caller to forward to its client and then read on (RFC 9110 section 15.2);
/// without (an HTTP/1.0 client, a request of the proxy's own), and always for
/// a 100, it is skipped. A 101 only answers an `upgrade` request. `idle`
/// (`timeout.server`) is the longest silence allowed.
pub(crate) async fn read_response_head(
    up: &mut Upstream,
    resp: &mut ResponseHead,
    upgrade: bool,
    interims: bool,
    max_head: usize,
    idle: Duration,
) -> Result<(), RespFail> {
    let mut got_any = !up.buf.is_empty();
    loop {
        next_head(up, resp, max_head, idle, &mut got_any).await?;
        match resp.status {
            // A 101 is only valid as the answer to an upgrade request.
            101 if upgrade && resp.switches_protocols() => return Ok(()),
            101 => return Err(RespFail::Bad),
            _ if interims && resp.is_interim() => return Ok(()),
            100..=199 => continue,
            _ => return Ok(()),
        }
    }
}

/// The server's next response head, interim or final, into `resp`: parsed
/// from the connection's bytes, or, from an HTTP/2 server, loaded from the
/// stream's fields. `got_any`: something of a response has come (a close is
/// then a bad response, not a dead connection).
async fn next_head(
    up: &mut Upstream,
    resp: &mut ResponseHead,
    max_head: usize,
    idle: Duration,
    got_any: &mut bool,
) -> Result<(), RespFail> {
    if let Some(x) = up.stream.h2_mut() {
        return match tokio::time::timeout(idle, x.next_head(resp, max_head)).await {
            Err(_) => Err(RespFail::Timeout),
            Ok(None) if !*got_any => Err(RespFail::Closed),
            Ok(None) | Ok(Some(Err(_))) => Err(RespFail::Bad),
            Ok(Some(Ok(()))) => {
                *got_any = true;
                Ok(())
            }
        };
    }
    loop {
        if !up.buf.is_empty() {
            match h1::parse_response(up.buf.data(), resp, max_head) {
                Ok(Parsed::Complete((), len)) => {
                    up.buf.consume(len);
                    return Ok(());
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
            Ok(_) => *got_any = true,
            Err(IoFail::Timeout) => return Err(RespFail::Timeout),
            Err(_) if !*got_any => return Err(RespFail::Closed),
            Err(_) => return Err(RespFail::Bad),
        }
    }
}

/// Starts a request on `up` with its head and the body bytes already here
/// (`early`): returns the bytes to write, and the head's size for the
/// counters. To an HTTP/1.1 server the bytes are the head as text, made in
/// `out`, then `early` (a request without Host names the server); an HTTP/2
/// exchange takes the head as its fields (h2.rs), and the bytes are `early`
/// alone, for its pipe.
pub(crate) fn request_bytes<'a>(
    up: &mut Upstream,
    head: &RequestHead,
    early: &'a [u8],
    out: &'a mut Vec<u8>,
) -> (&'a [u8], u64) {
    if let Some(x) = up.stream.h2_mut() {
        x.start(head);
        return (early, head.text_size() as u64);
    }
    out.clear();
    head.write_upstream(out, up.addr);
    let size = out.len() as u64;
    out.extend_from_slice(early);
    (out, size)
}

/// Writes `bytes` to the server unless there are none ([`request_bytes`]).
pub(crate) async fn write_request(up: &mut Upstream, bytes: &[u8], idle: Duration) -> Result<(), IoFail> {
    if bytes.is_empty() {
        return Ok(());
    }
    within(up.stream.write_all(bytes), idle).await
}

/// What finding and reaching a server for one request takes: the backend, the
/// request's balancing input, the client's ends (PROXY header), the client's
/// private connection (`send_proxy` servers) and the search so far.
pub(crate) struct Reach<'a, F: Fn() -> SocketAddr> {
    pub(crate) be: &'a Arc<BackendRt>,
    pub(crate) input: SelectInput<'a>,
    pub(crate) timeouts: Timeouts,
    pub(crate) ends: ClientEnds<F>,
    pub(crate) private: &'a mut Option<Upstream>,
    pub(crate) pick: PickState,
}

impl<F: Fn() -> SocketAddr> Reach<'_, F> {
    /// A server slot and a connection to it ([`pick_and_connect`]).
    pub(crate) async fn pick_and_connect(&mut self, log: &mut LogSlot) -> Result<(Slot, Upstream), ProxyError> {
        pick_and_connect(self.be, &self.input, &self.timeouts, log, &mut self.pick, self.private, &self.ends).await
    }

    /// Sends a request on `up`: `head`, then `early`, the body bytes already
    /// here ([`request_bytes`], HTTP/1.1 text made in `out`). When that is the whole
    /// request (`complete`), also reads the response head
    /// into `resp` ([`read_response_head`], which may return an interim head
    /// when `interims`). A pooled connection may have been closed by the server as
    /// the request went out: then a complete request of an idempotent method
    /// (`retryable`) goes again on a new connection (RFC 9110 section 9.2.2),
    /// on another server if that connect fails and `retries` allow. Returns when
    /// the request went out, and the length of its head.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send(
        &mut self,
        slot: &mut Slot,
        up: &mut Upstream,
        (head, early, out): (&RequestHead, &[u8], &mut Vec<u8>),
        complete: bool,
        retryable: bool,
        resp: &mut ResponseHead,
        upgrade: bool,
        interims: bool,
        max_head: usize,
        log: &mut LogSlot,
    ) -> Result<(Instant, u64), Fail> {
        let timeouts = self.timeouts;
        loop {
            let server = slot.server.clone();
            let retry = up.reused && complete && retryable;
            let sent_at = Instant::now();
            let (bytes, head_out) = request_bytes(up, head, early, out);
            match write_request(up, bytes, timeouts.server).await {
                Ok(()) if !complete => return Ok((sent_at, head_out)),
                Ok(()) => match read_response_head(up, resp, upgrade, interims, max_head, timeouts.server).await {
                    Ok(()) => return Ok((sent_at, head_out)),
                    Err(RespFail::Closed) if retry => {}
                    Err(e) => {
                        server.observe(false);
                        return Err(e.into_fail());
                    }
                },
                Err(IoFail::Timeout) => {
                    server.observe(false);
                    return Err(ProxyError::ServerTimeout.into());
                }
                Err(_) if retry => {}
                Err(_) => return Err(ProxyError::BadGateway.into()),
            }
            // The server's other idle connections are likely dead too (a restart).
            upstream::forget(up.key);
            *up = match connect(&server, &timeouts, log, &self.ends, &self.be.connect_time).await? {
                Some(fresh) => fresh,
                None => {
                    self.pick.failed(self.be, &server)?;
                    let (s, u) = self.pick_and_connect(log).await?;
                    *slot = s;
                    u
                }
            };
        }
    }
}

/// The server became readable while the request body was still going out:
/// true when it answered early (the bytes wait in `up.buf` for the response
/// read; an HTTP/2 server's head waits in its exchange), false when nothing
/// was there after all. A close is a 502.
pub(crate) fn early_answer(up: &mut Upstream) -> Result<bool, Fail> {
    if let Some(x) = up.stream.h2_mut() {
        return match x.answer() {
            Some(true) => Ok(true),
            Some(false) => Err(ProxyError::BadGateway.into()),
            None => Ok(false),
        };
    }
    early_bytes(up.stream.try_read(up.buf.spare()), &mut up.buf)
}

/// [`early_answer`] from the read it made into `buf`'s spare room.
pub(crate) fn early_bytes(read: io::Result<usize>, buf: &mut Buf) -> Result<bool, Fail> {
    match read {
        Ok(0) => Err(ProxyError::BadGateway.into()),
        Ok(n) => {
            buf.commit(n);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(_) => Err(ProxyError::BadGateway.into()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_32_hex_digits_and_differ() {
        let ids: std::collections::HashSet<[u8; 32]> = (0..1000).map(|_| super::request_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.iter().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())));
    }
}
