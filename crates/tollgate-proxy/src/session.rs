//! One client connection's requests, through the phases of the request path:
//!
//! check -> route (rules) -> balance (queue) -> upstream (pool, connect, retry)
//! -> response (header edits) -> log (when the body is done, see body.rs).
//!
//! Every failure is a [`ProxyError`] turned into a response by [`crate::rescue`].

use crate::access_log::{AccessLog, LogRecord};
use crate::body::{BodyError, Exchange, Progress, ReqBody, RespBody};
use crate::headers::{add_forwarded, canonical_ip, chunked_count, routing_host, strip_hop_by_hop, valid_host};
use crate::io::ConnShared;
use crate::lb::{BackendRt, Pick, SelectInput, Slot};
use crate::pool::{self, Sender};
use crate::rescue::{self, ProxyError};
use crate::snapshot::Snapshot;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version, header};
use http_body::Body;
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tollgate_config::{Action, Frontend, HeaderEdits, Redirect, RedirectTarget, RequestFacts};

type LogSlot = Option<(Arc<AccessLog>, LogRecord)>;

/// A client connection, as its requests see it.
pub struct Session {
    pub snap: Arc<Snapshot>,
    pub frontend: usize,
    pub peer: SocketAddr,
    /// The port the client connected to (X-Forwarded-Port).
    pub local_port: u16,
    pub shared: Arc<ConnShared>,
}

impl Session {
    fn fe(&self) -> &Frontend {
        &self.snap.config.frontends[self.frontend]
    }

    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<RespBody> {
        let start = self.shared.begin_request();
        let mut log: LogSlot = self.snap.access_log.as_ref().map(|sink| {
            let mut r = LogRecord::new(start, Instant::now(), self.peer, &self.fe().name);
            r.method = req.method().as_str().to_string();
            r.uri = req.uri().to_string();
            r.version = version_str(req.version());
            (sink.clone(), r)
        });
        match self.forward(req, &mut log).await {
            Ok(resp) => resp,
            Err(e) => self.error_response(e, log),
        }
    }

    fn error_response(&self, e: ProxyError, mut log: LogSlot) -> Response<RespBody> {
        let (head, body) = rescue::respond(&e, self.fe());
        if let Some((_, r)) = log.as_mut() {
            r.status = head.status().as_u16();
            r.termination = Some(e.reason());
        }
        if head.status().is_server_error() {
            tracing::debug!(client = %self.peer, frontend = %self.fe().name, "{}: {}", head.status(), e.reason());
        }
        let (parts, ()) = head.into_parts();
        Response::from_parts(parts, RespBody::full(body, Exchange::new(self.shared.clone(), log)))
    }

    async fn forward(&self, req: Request<Incoming>, log: &mut LogSlot) -> Result<Response<RespBody>, ProxyError> {
        let fe = self.fe();
        let (mut parts, body) = req.into_parts();

        // -- check: what hyper's parser accepts but Tollgate refuses.
        if parts.method == Method::CONNECT {
            return Err(ProxyError::MethodNotAllowed);
        }
        if target_len(&parts.uri) > fe.limits.max_uri_size {
            return Err(ProxyError::UriTooLong);
        }
        if chunked_count(&parts.headers) > 1 {
            return Err(ProxyError::BadRequest("chunked-twice"));
        }
        let host = self.request_host(&mut parts)?;
        if let (Some(limit), Some(len)) = (fe.limits.max_request_body, body.size_hint().exact())
            && len > limit
        {
            return Err(ProxyError::BodyTooLarge);
        }

        // -- route: rules in order; header edits accumulate, the first action wins.
        let src = canonical_ip(self.peer.ip());
        let mut backend = fe.default_backend;
        let mut req_edits: Vec<&HeaderEdits> = Vec::new();
        let mut resp_edits: Vec<&HeaderEdits> = Vec::new();
        if !fe.rules.is_empty() {
            let facts = RequestFacts {
                host: &host,
                path: parts.uri.path(),
                method: &parts.method,
                headers: &parts.headers,
                src,
            };
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
                match &rule.action {
                    None => continue,
                    Some(Action::Backend(i)) => {
                        backend = Some(*i);
                        break;
                    }
                    Some(Action::Redirect(r)) => return Ok(self.redirect(r, &parts.uri, log)),
                    Some(Action::Deny { status, body }) => {
                        return Err(ProxyError::Denied { status: *status, body: body.clone() });
                    }
                }
            }
        }
        let be = self.snap.backends[backend.ok_or(ProxyError::NoBackend)?].clone();
        if let Some((_, r)) = log.as_mut() {
            r.backend = Some(be.name().to_string());
        }

        // -- prepare the upstream request.
        strip_hop_by_hop(&mut parts.headers);
        if parts.headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue")) {
            // hyper answers 100 Continue itself when the body is first read, which
            // is once the server connection is ready to take it.
            parts.headers.remove(header::EXPECT);
        }
        if fe.forward_for {
            add_forwarded(&mut parts.headers, src, self.local_port, "http");
        }
        for e in req_edits {
            e.apply(&mut parts.headers);
        }
        parts.uri = origin_form(&parts.uri);
        parts.version = Version::HTTP_11;

        // -- balance and connect, with retries on connection failures.
        let timeouts = be.cfg.timeouts;
        let queued_at = Instant::now();
        let mut tried: Vec<usize> = Vec::new();
        let mut attempts = 0u32;
        let input = SelectInput { src, path: parts.uri.path(), headers: &parts.headers };
        // Without redispatch a failed connection is retried on the same server, as
        // HAProxy does; with it, the retry goes to another server when there is one.
        let mut pinned: Option<Arc<crate::lb::ServerRt>> = None;
        let (slot, mut sender, mut reused) = loop {
            let slot = match pinned.take() {
                Some(server) => be.take_slot(&server),
                None => acquire(&be, &input, &mut tried, timeouts.queue).await?,
            };
            let addr = slot.server.addr();
            if let Some((_, r)) = log.as_mut() {
                r.tw.get_or_insert(queued_at.elapsed());
                r.server = Some(slot.server.cfg.name.clone());
            }
            if let Some(s) = pool::checkout(addr) {
                break (slot, s, true);
            }
            match self.connect(&slot.server, &timeouts, log).await {
                Ok(s) => break (slot, s, false),
                Err(()) => {
                    attempts += 1;
                    if let Some((_, r)) = log.as_mut() {
                        r.retries = attempts.min(be.cfg.retries);
                    }
                    if attempts > be.cfg.retries {
                        return Err(ProxyError::ConnectFailed);
                    }
                    if be.cfg.redispatch {
                        tried.push(slot.server.index);
                    } else {
                        pinned = Some(slot.server.clone());
                    }
                }
            }
        };
        let server = slot.server.clone();
        let addr = server.addr();
        if !parts.headers.contains_key(header::HOST) {
            // An HTTP/1.0 request may come without Host; HTTP/1.1 to the server needs
            // one (RFC 9112 section 3.2): name the server, as nginx does by default.
            if let Ok(v) = HeaderValue::from_str(&addr.to_string()) {
                parts.headers.insert(header::HOST, v);
            }
        }

        // -- send, and wait for the response head.
        let req_body = if body.is_end_stream() {
            ReqBody::empty()
        } else {
            ReqBody::streaming(body, fe.limits.max_request_body, fe.timeouts.client)
        };
        let progress = req_body.progress();
        let mut req = Request::from_parts(parts, req_body);
        let sent_at = Instant::now();
        let resp = loop {
            if reused && sender.ready().await.is_err() {
                // The pooled connection died while idle: take another.
                (sender, reused) = self.fresh_sender(&server, &timeouts, log).await?;
                continue;
            }
            match send_with_timeout(&mut sender, req, timeouts.server, progress.as_deref()).await {
                Ok(resp) => break resp,
                Err(SendFailure::NotSent(r)) if reused => {
                    req = *r;
                    (sender, reused) = self.fresh_sender(&server, &timeouts, log).await?;
                }
                Err(SendFailure::NotSent(_)) => return Err(ProxyError::BadGateway),
                Err(SendFailure::Timeout) => return Err(ProxyError::ServerTimeout),
                Err(SendFailure::Failed(e)) => return Err(classify(&e)),
            }
        };

        // -- response.
        let (mut rparts, rbody) = resp.into_parts();
        let class = (rparts.status.as_u16() / 100) as usize;
        server.observe(class != 5);
        server.stats.responses[if (1..=5).contains(&class) { class } else { 0 }].fetch_add(1, Ordering::Relaxed);
        strip_hop_by_hop(&mut rparts.headers);
        for e in resp_edits {
            e.apply(&mut rparts.headers);
        }
        rparts.version = Version::HTTP_11;
        if let Some((_, r)) = log.as_mut() {
            r.status = rparts.status.as_u16();
            r.tr = Some(sent_at.elapsed());
        }
        let mut ex = Exchange::new(self.shared.clone(), log.take());
        ex.slot = Some(slot);
        ex.upstream = Some((addr, sender));
        ex.upload = progress;
        Ok(Response::from_parts(rparts, RespBody::upstream(rbody, timeouts.server, ex)))
    }

    /// Opens a connection to `server`, counting it (or its failure) in the server's
    /// stats and its time in the access log. A failure is logged here; retrying is
    /// the caller's decision.
    async fn connect(
        &self,
        server: &crate::lb::ServerRt,
        timeouts: &tollgate_config::Timeouts,
        log: &mut LogSlot,
    ) -> Result<Sender, ()> {
        let t = Instant::now();
        match pool::connect(server.addr(), timeouts.connect, self.fe().limits.max_header_size).await {
            Ok(s) => {
                server.stats.connections_opened.fetch_add(1, Ordering::Relaxed);
                if let Some((_, r)) = log.as_mut() {
                    r.tc = Some(t.elapsed());
                }
                Ok(s)
            }
            Err(e) => {
                server.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                server.observe(false);
                tracing::warn!(server = %server.cfg.name, addr = %server.addr(), "{e}");
                Err(())
            }
        }
    }

    /// Another connection to the same server after a pooled one failed before use:
    /// an idle one if there is one, else a new one (a failure here is a 502).
    async fn fresh_sender(
        &self,
        server: &crate::lb::ServerRt,
        timeouts: &tollgate_config::Timeouts,
        log: &mut LogSlot,
    ) -> Result<(Sender, bool), ProxyError> {
        if let Some(s) = pool::checkout(server.addr()) {
            return Ok((s, true));
        }
        let s = self.connect(server, timeouts, log).await.map_err(|()| ProxyError::ConnectFailed)?;
        Ok((s, false))
    }

    /// Validates Host (RFC 9112 section 3.2) and returns the routing host (computed
    /// only when the frontend has rules to match it). With an absolute-form target,
    /// its authority wins and becomes the Host sent on.
    fn request_host(&self, parts: &mut http::request::Parts) -> Result<String, ProxyError> {
        let need = !self.fe().rules.is_empty();
        let host_of = |v: &[u8]| -> Result<String, ProxyError> {
            if !need {
                return if valid_host(v) { Ok(String::new()) } else { Err(ProxyError::BadRequest("bad-host")) };
            }
            routing_host(v).ok_or(ProxyError::BadRequest("bad-host"))
        };
        if let Some(auth) = parts.uri.authority() {
            if !matches!(parts.uri.scheme_str(), Some("http") | Some("https")) {
                return Err(ProxyError::BadRequest("bad-scheme"));
            }
            let host = host_of(auth.as_str().as_bytes())?;
            let value = HeaderValue::from_str(auth.as_str()).map_err(|_| ProxyError::BadRequest("bad-host"))?;
            parts.headers.insert(header::HOST, value);
            return Ok(host);
        }
        let mut hosts = parts.headers.get_all(header::HOST).iter();
        match (hosts.next(), hosts.next()) {
            (Some(h), None) => host_of(h.as_bytes()),
            (Some(_), Some(_)) => Err(ProxyError::BadRequest("duplicate-host")),
            (None, _) if parts.version == Version::HTTP_11 => Err(ProxyError::BadRequest("missing-host")),
            (None, _) => Ok(String::new()),
        }
    }

    fn redirect(&self, r: &Redirect, uri: &Uri, log: &mut LogSlot) -> Response<RespBody> {
        let location = match &r.target {
            RedirectTarget::Location(l) => HeaderValue::from_str(l),
            RedirectTarget::Prefix(p) => {
                let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
                HeaderValue::from_str(&format!("{p}{pq}"))
            }
        };
        let mut resp = Response::new(());
        *resp.status_mut() = r.code;
        match location {
            Ok(l) => {
                resp.headers_mut().insert(header::LOCATION, l);
            }
            // The config checked the prefix; only an unusual path gets here.
            Err(_) => *resp.status_mut() = StatusCode::BAD_REQUEST,
        }
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if let Some((_, rec)) = log.as_mut() {
            rec.status = resp.status().as_u16();
            rec.termination = Some("redirect");
        }
        let (parts, ()) = resp.into_parts();
        Response::from_parts(parts, RespBody::full(Bytes::new(), Exchange::new(self.shared.clone(), log.take())))
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
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        match be.select(input, tried) {
            Pick::Server(s) => return Ok(s),
            Pick::NoServer if !tried.is_empty() => {
                // Every server was tried: try them again (attempts stay bounded).
                tried.clear();
            }
            Pick::NoServer => return Err(ProxyError::NoServer),
            Pick::Full => {
                let d = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + queue_timeout);
                if tokio::time::timeout_at(d, be.slot_freed()).await.is_err() {
                    return Err(ProxyError::QueueTimeout);
                }
            }
        }
    }
}

enum SendFailure {
    /// The request came back unsent (boxed: it is large and this path is rare).
    NotSent(Box<Request<ReqBody>>),
    Timeout,
    Failed(hyper::Error),
}

/// Sends a request and waits for the response head: `timeout` is the longest
/// silence allowed, counted from the end (or the last progress) of the request body.
async fn send_with_timeout(
    sender: &mut Sender,
    req: Request<ReqBody>,
    timeout: Duration,
    progress: Option<&Progress>,
) -> Result<Response<Incoming>, SendFailure> {
    let start = Instant::now();
    let send = sender.try_send_request(req);
    tokio::pin!(send);
    let result = loop {
        let from = progress.map_or(start, |p| p.last().max(start));
        match tokio::time::timeout_at((from + timeout).into(), &mut send).await {
            Ok(r) => break r,
            // The body moved since the timer was set: wait again from there.
            Err(_) if progress.is_some_and(|p| p.last() > from) => continue,
            Err(_) => return Err(SendFailure::Timeout),
        }
    };
    match result {
        Ok(resp) => Ok(resp),
        Err(mut e) => match e.take_message() {
            Some(req) => Err(SendFailure::NotSent(Box::new(req))),
            None => Err(SendFailure::Failed(e.into_error())),
        },
    }
}

/// Maps a failed exchange to the status the client gets: a failure of the client's
/// own body is the client's (413/408/400), anything else is the server's (502).
fn classify(e: &hyper::Error) -> ProxyError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = src {
        if let Some(b) = err.downcast_ref::<BodyError>() {
            return match b {
                BodyError::TooLarge => ProxyError::BodyTooLarge,
                BodyError::ClientTimeout => ProxyError::ClientTimeout,
                _ => ProxyError::BadRequest("client-body-error"),
            };
        }
        src = err.source();
    }
    if e.is_timeout() { ProxyError::ServerTimeout } else { ProxyError::BadGateway }
}

fn target_len(uri: &Uri) -> usize {
    uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(0, |pq| pq.as_str().len())
}

/// The request target as sent to a server: path and query only.
fn origin_form(uri: &Uri) -> Uri {
    if uri.scheme().is_none() && uri.authority().is_none() {
        return uri.clone();
    }
    let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
    pq.parse().unwrap_or_else(|_| Uri::from_static("/"))
}

fn version_str(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}
