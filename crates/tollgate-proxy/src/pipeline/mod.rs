//! Layer 7, the pipeline: the request phase of an exchange, once for both
//! client protocols (here), and what it is made of: the steps (`exchange`),
//! Basic auth, the cache's hooks (`serve`), errors as responses (`rescue`),
//! and the config's runtime form (`snapshot`). The request phase goes from a
//! checked request head to the server's final response head (or an answer of
//! the proxy's own), in this order:
//!
//! ```text
//! an ACME HTTP-01 challenge -> limits -> track (counters) -> route (rules: deny, tarpit, silent drop)
//!   -> Basic auth -> prepare (X-Forwarded-*, edits)
//!   -> cache hook 1 (answered from the store, forwarded with a plan, or sent
//!      to the tier member that owns the key: cache/tier.rs)
//!   -> persistence (cookie, stick table) -> balance and connect (retries)
//!   -> send the head (with the body bytes already here)
//!   -> the request body and interim heads, until the final response head
//!   -> cache hook 2 (a 304 or an error answered from the store)
//!   -> response_arrived (persistence cookie, response edits, passive health)
//! ```
//!
//! What differs between an HTTP/1.1 connection (conn.rs) and an HTTP/2 stream
//! (h2conn.rs) is how the client's bytes come and go: [`ClientSide`] is that
//! part, and each session implements it. What the phase ends with, [`Ready`],
//! each session then writes in its own framing: a redirect, a cached answer,
//! or the proxied response streamed from [`Proxied::up`].

pub mod auth;
pub(crate) mod compress;
pub(crate) mod exchange;
pub mod files;
pub(crate) mod forward;
pub mod rescue;
pub(crate) mod serve;
pub mod snapshot;
pub mod start_error;

use crate::lb::{SelectInput, Slot};
use crate::net::tls::TlsInfo;
use crate::observe::termination::Termination;
use crate::pipeline::exchange::{ClientEnds, Fail, LogSlot, PickState, Reach, Routed, idempotent};
use crate::pipeline::rescue::ProxyError;
use crate::pipeline::serve::{self as cache, Answer, CachePlan, Looked};
use crate::pipeline::snapshot::Snapshot;
use crate::upstream::Upstream;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tollgate_config::Lookalikes;
use tollgate_config::tier::PEER_HEADER;
use tollgate_wire::clock::unix_now;
use tollgate_wire::h1::{Framing, RequestHead, ResponseHead, TargetForm};
use tollgate_wire::headers::canonical_ip;

/// What the request phase of one exchange works on: the client and its
/// frontend, the request head (checked), and where the response head goes.
pub(crate) struct Exchange<'a> {
    pub(crate) snap: &'a Snapshot,
    pub(crate) fi: usize,
    pub(crate) peer: SocketAddr,
    pub(crate) tls: Option<&'a TlsInfo>,
    /// The port the client connected to (X-Forwarded-Port).
    pub(crate) local_port: u16,
    pub(crate) head: &'a mut RequestHead,
    pub(crate) resp: &'a mut ResponseHead,
    /// The cache's plan for the exchange, set by hook 1.
    pub(crate) cache: &'a mut Option<Box<CachePlan>>,
    /// A server connection kept for this client alone (HTTP/1.1 to a
    /// `send_proxy` server), reused and parked here.
    pub(crate) private: &'a mut Option<Upstream>,
    /// Where the request goes out for the server.
    pub(crate) out: &'a mut Vec<u8>,
    pub(crate) log: &'a mut LogSlot,
    /// The connection's entry for `shutdown sessions server` (lb/shutdown.rs).
    pub(crate) watch: crate::lb::shutdown::WatchId,
    /// The table entries the request counts in (lb/track.rs); the session
    /// counts its response there when it is sent.
    pub(crate) tracked: &'a mut crate::lb::track::Tracked,
}

/// The client's side of an exchange: what the request phase asks of the
/// session that carries it.
#[allow(async_fn_in_trait)]
pub(crate) trait ClientSide: Sync {
    /// The address the client connected to (on HTTP/1.1 a system call, so it
    /// is asked only when a rule, header or PROXY header needs it).
    fn local_addr(&self) -> SocketAddr;
    /// Takes the request body bytes that came with the head, to go out behind
    /// it: their count.
    fn take_early(&mut self) -> Result<usize, Fail>;
    /// The first `n` bytes of the request body (after [`Self::take_early`]).
    fn early(&self, n: usize) -> &[u8];
    /// Whether the whole request body has been taken.
    fn body_done(&self) -> bool;
    /// Request body bytes taken so far.
    fn body_bytes(&self) -> u64;
    /// Whether interim responses (1xx) go on to this client.
    fn takes_interims(&self, head: &RequestHead) -> bool;
    /// The head and the first `early` body bytes went to the server.
    async fn head_sent(&mut self, early: usize, head: &RequestHead);
    /// Sends an interim response head to the client.
    async fn interim(&mut self, resp: &ResponseHead) -> Result<(), Fail>;
    /// Streams the rest of the request body to the server. Returns whether it
    /// all went; false when the server answered before the end (its response
    /// is then read).
    async fn upload(&mut self, up: &mut Upstream, server_idle: Duration) -> Result<bool, Fail>;
}

/// A response head from the server, with what streaming it needs.
pub(crate) struct Proxied {
    pub(crate) slot: Slot,
    pub(crate) up: Upstream,
    /// The whole request body went to the server.
    pub(crate) upload_done: bool,
    /// The backend's `timeout.server`: how long the server may stay silent.
    pub(crate) server_idle: Duration,
    /// The backend's `timeout.tunnel`, for a response that switches protocols.
    pub(crate) tunnel_idle: Duration,
    /// The body is compressed on its way (compress.rs); the head says so already.
    pub(crate) encoder: Option<Box<compress::Encoder>>,
    /// A forward proxy's `CONNECT` (forward.rs): `up` is a new connection to
    /// the destination; the client gets 200 and the rest is a tunnel.
    pub(crate) connect: bool,
}

/// What the request phase ends with. Not boxed: one lives per exchange, on
/// its way from the request phase to the response, and a box would be an
/// allocation per proxied request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Ready {
    Redirect {
        code: u16,
        location: String,
    },
    /// Answered by the cache (pipeline/serve.rs).
    Cached(Answer),
    /// The server's final response head is in the exchange's `resp`.
    Proxied(Proxied),
    /// A file of a `static` backend (files.rs).
    File(Box<files::FileAnswer>),
}

/// The request phase of one exchange (see the module's doc).
pub(crate) async fn request(x: Exchange<'_>, client: &mut impl ClientSide) -> Result<Ready, Fail> {
    let snap = x.snap;
    let fe = &snap.config.frontends[x.fi];
    // -- an ACME HTTP-01 challenge being validated (net/acme.rs): before
    // every rule, which might redirect it or ask for a password.
    if snap.acme.challenges.http01_pending()
        && let Some(text) = snap.acme.challenges.http01(x.head.path())
    {
        return Ok(Ready::Cached(Answer::Local { status: 200, cache_status: "", text }));
    }
    if let (Some(limit), Framing::Length(n)) = (fe.limits.max_request_body, x.head.framing())
        && n > limit
    {
        return Err(ProxyError::BodyTooLarge.into());
    }

    // -- normalise: names that pass for framing ones (h1.rs
    // lookalike_framing), a repeated Content-Length (merged by the parser).
    if x.head.fields.has_lookalikes() {
        match fe.limits.lookalike_headers {
            Lookalikes::Drop => {
                x.head.fields.drop_lookalikes();
            }
            Lookalikes::Refuse => return Err(ProxyError::Refused { status: 400, reason: "lookalike-header" }.into()),
            Lookalikes::Keep => {}
        }
    }
    if x.head.length_merged && fe.limits.refuse_repeated_length {
        return Err(ProxyError::Refused { status: 400, reason: "repeated-content-length" }.into());
    }

    // -- a request a cache tier member passed on (serve.rs peer_hop): the
    // member tracked, routed, checked and prepared it; here it goes to the
    // zone and backend it names, as it is.
    let hop = cache::peer_hop(snap, x.peer, x.head);
    // -- track (lb/track.rs), then route: rules in order; header edits
    // accumulate, the first action wins.
    let src = canonical_ip(x.peer.ip());
    let route = match &hop {
        Some(h) => exchange::Route {
            backend: h.backend,
            req_edits: Vec::new(),
            resp_edits: Vec::new(),
            auth: Vec::new(),
            cache: Some(tollgate_config::CacheUse::Zone(h.zone)),
            early_hints: Vec::new(),
            rewrites: Vec::new(),
        },
        None => match exchange::route(snap, x.fi, x.head, (src, x.tls), x.tracked)? {
            Routed::Backend(route) => route,
            Routed::Redirect { code, location } => return Ok(Ready::Redirect { code, location }),
            Routed::Tarpit { delay, status } => {
                tokio::time::sleep(delay).await;
                return Err(ProxyError::Tarpitted(status).into());
            }
            Routed::SilentDrop => return Err(Fail::Abort(Termination::SilentDrop)),
        },
    };
    let mut be = &snap.backends[route.backend];
    if let Some((_, r)) = x.log.as_mut() {
        r.backend = Some(be.name().to_string());
    }
    // -- a forward proxy (forward.rs): where the request asks to go, if it may.
    let forward = match be.cfg.forward.as_deref() {
        Some(fwd) => Some((fwd, forward::admit(&snap.auth, fe, fwd, x.head, x.peer).await?)),
        None if x.head.form == Some(TargetForm::Authority) => {
            return Err(ProxyError::Refused { status: 405, reason: "method-not-allowed" }.into());
        }
        None => None,
    };
    // -- Basic auth: the frontend's, the matched rules' and the backend's (auth.rs).
    if hop.is_none() {
        auth::check(&snap.auth, fe, &route.auth, &be.cfg, &mut x.head.fields, x.peer).await?;
    }
    if let Some((fwd, dest)) = forward.as_ref().filter(|(_, d)| d.connect) {
        return forward_connect(x, be, fwd, dest).await;
    }

    // -- prepare the upstream request (a member's was prepared there).
    let vars = match hop {
        None => exchange::prepare(fe, x.head, x.peer, x.local_port, x.tls, &route),
        Some(_) => None,
    };
    if let (Some(rid), Some((_, r))) = (&fe.request_id, x.log.as_mut()) {
        r.request_id = x.head.fields.get(rid.header.as_bytes()).map(|v| String::from_utf8_lossy(v).into_owned());
    }

    // -- a `static` backend (files.rs): a file answers, or the request goes
    // on to the backend's fallback (its Basic auth checked too).
    if let Some(files) = &snap.files[route.backend] {
        let compression = be.cfg.compression.as_deref().or(fe.compression.as_deref());
        match files::serve(files, x.head, compression)? {
            files::Outcome::Answer(mut answer) => {
                for e in &route.resp_edits {
                    tollgate_wire::headers::apply_edits(e, &mut answer.fields, vars.as_deref());
                }
                if let Some(hsts) = x.tls.and_then(|t| t.hsts.as_ref()) {
                    answer.fields.set(b"strict-transport-security", hsts.as_bytes());
                }
                if let Some(alt) = x.tls.and_then(|t| t.alt_svc.as_ref()) {
                    answer.fields.set(b"alt-svc", alt.as_bytes());
                }
                return Ok(Ready::File(answer));
            }
            files::Outcome::Redirect(location) => return Ok(Ready::Redirect { code: 301, location }),
            files::Outcome::Miss => {
                let Some(fallback) = files.cfg.fallback else { return Err(ProxyError::FileMissing.into()) };
                be = &snap.backends[fallback];
                if let Some((_, r)) = x.log.as_mut() {
                    r.backend = Some(be.name().to_string());
                }
                auth::check(&snap.auth, fe, &route.auth, &be.cfg, &mut x.head.fields, x.peer).await?;
            }
        }
    }

    // -- cache hook 1 (pipeline/serve.rs): answered from the store, forwarded
    // with a plan, or sent to the tier member that owns the key.
    let mut peer: Option<std::sync::Arc<crate::lb::ServerRt>> = None;
    let origin_be = be;
    {
        let local = || client.local_addr();
        let ends = cache::Client { peer: x.peer, tls: x.tls, local: &local, hop: hop.as_ref() };
        match cache::lookup(snap, be, route.cache, x.head, &ends, &route.resp_edits, vars.as_deref()).await? {
            Looked::Answer(mut answer) => {
                // A client that takes no coding gets a stored encoded variant decoded (compress.rs).
                if let Answer::Stored(s) = &mut answer {
                    let cfg = be.cfg.compression.as_deref().or(fe.compression.as_deref());
                    compress::decode_stored(cfg, x.head, &mut s.head, &mut s.length, &mut s.body);
                }
                return Ok(Ready::Cached(answer));
            }
            Looked::Forward(plan) => *x.cache = plan,
            // A tier member owns the key: the request goes there, marked, and
            // what comes back passes through unstored.
            Looked::Peer { backend, server, mark } => {
                be = &snap.backends[backend];
                if let Some((_, r)) = x.log.as_mut() {
                    r.backend = Some(be.name().to_string());
                }
                x.head.fields.append(PEER_HEADER.as_bytes(), mark.as_bytes());
                peer = Some(server);
            }
        }
    }

    // -- 103 Early Hints from the rules (`early_hints`), before a server is
    // chosen: the client fetches what they name while the server works.
    if !route.early_hints.is_empty() && client.takes_interims(x.head) {
        let mut hints = ResponseHead::default();
        hints.status = 103;
        for link in &route.early_hints {
            hints.fields.append(b"link", link.as_bytes());
        }
        client.interim(&hints).await?;
    }

    // -- persistence: a server this client is bound to (cookie, stick table);
    // for a forward proxy, the destination's address.
    let now_unix = unix_now();
    let bound = match &forward {
        None if peer.is_some() => exchange::Bound { server: peer.clone(), presented: None },
        None => exchange::bound_server(be, x.head, src, now_unix),
        Some((fwd, dest)) => {
            let addr =
                forward::address(fe, fwd, dest, &snap.config.global.dns, be.cfg.timeouts.connect, x.peer).await?;
            forward::prepare(x.head);
            exchange::Bound { server: Some(forward::server(&be.cfg, dest, addr)), presented: None }
        }
    };

    // -- the body bytes that came with the head, held to the size limit
    // before a server is taken for them.
    let early = client.take_early()?;

    // -- balance and connect, with retries on connection failures.
    let local = || client.local_addr();
    let mut reach = Reach {
        be,
        input: SelectInput { src, path: x.head.path(), headers: &x.head.fields },
        timeouts: be.cfg.timeouts,
        ends: ClientEnds { peer: x.peer, local },
        private: x.private,
        pick: PickState::new(bound.server.clone()),
    };
    let connected = reach.pick_and_connect(x.log).await;
    let (mut slot, mut up) = match (connected, peer) {
        (Ok(c), _) => c,
        // No tier member answers for the key: it is taken out of the tier
        // until its check passes again, and this instance fetches the key
        // from its own backend (unstored: the owner stores it).
        (Err(e), Some(owner)) => {
            owner.mark_down("the cache tier member did not connect");
            // A PURGE is the owner's to do: none here.
            if x.head.method() == "PURGE" {
                return Err(e.into());
            }
            drop(reach);
            be = origin_be;
            x.head.fields.remove(PEER_HEADER.as_bytes());
            if let Some((_, r)) = x.log.as_mut() {
                r.backend = Some(be.name().to_string());
            }
            let pinned = exchange::bound_server(be, x.head, src, now_unix).server;
            reach = Reach {
                be,
                input: SelectInput { src, path: x.head.path(), headers: &x.head.fields },
                timeouts: be.cfg.timeouts,
                ends: ClientEnds { peer: x.peer, local },
                private: x.private,
                pick: PickState::new(pinned),
            };
            reach.pick_and_connect(x.log).await?
        }
        (Err(e), None) => return Err(e.into()),
    };
    let timeouts = reach.timeouts;

    // -- send the head, with as much of the body as is already here; then,
    // when that was the whole request, wait for the response head.
    let complete = client.body_done();
    let (head, early_bytes) = (&*x.head, client.early(early));
    let max_head = fe.limits.max_header_size.max(8192);
    let (upgrade, retryable, interims) = (head.upgrade, idempotent(head.method()), client.takes_interims(head));
    let request = (head, early_bytes, &mut *x.out);
    // `shutdown sessions server` ends the wait for the head (lb/shutdown.rs).
    let server_id = slot.server.id;
    let (sent_at, head_out) = {
        let send = std::pin::pin!(
            reach.send(&mut slot, &mut up, request, complete, retryable, x.resp, upgrade, interims, max_head, x.log)
        );
        crate::lb::shutdown::UnlessShut::new(send, x.watch, server_id).await.map_err(Fail::Abort)??
    };
    drop(reach);
    let server = slot.server.clone();
    client.head_sent(early, x.head).await;

    // -- the rest of the request body, unless the server answers early, and
    // the final response head. Interim heads (102, 103) go on to the client as
    // they come (RFC 9110 section 15.2); after one that came early, the body
    // goes on.
    let mut upload_done = complete;
    let mut have_head = complete;
    loop {
        if have_head {
            if !x.resp.is_interim() {
                break;
            }
            crate::observe::counters::count_status(&server.stats.responses, x.resp.status);
            client.interim(x.resp).await?;
        }
        // (What the server sent after an interim head is read first.)
        // `shutdown sessions server` ends the wait (unless_shut).
        if !upload_done && up.buf.is_empty() {
            let upload = std::pin::pin!(client.upload(&mut up, timeouts.server));
            upload_done = server.unless_shut(upload, x.watch).await.map_err(Fail::Abort)??;
        }
        let head = {
            let read = std::pin::pin!(exchange::read_response_head(
                &mut up,
                x.resp,
                upgrade,
                interims,
                max_head,
                timeouts.server
            ));
            server.unless_shut(read, x.watch).await.map_err(Fail::Abort)?
        };
        if let Err(e) = head {
            server.observe(false);
            return Err(e.into_fail());
        }
        have_head = true;
    }
    server.stats.bytes_in.fetch_add(head_out + client.body_bytes(), Ordering::Relaxed);

    // -- compression (compress.rs), decided on the head before the cache sees it.
    let compression = be.cfg.compression.as_deref().or(fe.compression.as_deref());
    let encoder = compression.and_then(|c| compress::negotiate(c, x.head, x.resp));

    // -- cache hook 2 (pipeline/serve.rs): a 304 or an error answered from the store, or what to store.
    let origin = cache::Origin { up: &mut up, server: &server, idle: timeouts.server, max_head };
    if let Some((answer, reusable)) =
        cache::response_head(x.cache, x.head, x.resp, origin, x.tls, &route.resp_edits, vars.as_deref()).await?
    {
        if reusable {
            exchange::park(x.private, up, &server);
        }
        return Ok(Ready::Cached(answer));
    }

    // -- the response head: persistence cookie, response edits, passive health.
    exchange::response_arrived(x.resp, be, &server, &route, &bound, now_unix, src, x.tls, vars.as_deref());
    let tr = sent_at.elapsed();
    be.response_time.observe(tr);
    if let Some((_, r)) = x.log.as_mut() {
        r.status = x.resp.status;
        r.tr = Some(tr);
        if let Some(plan) = x.cache.as_ref() {
            r.set_cache(&plan.status_value());
        }
    }
    if encoder.is_some()
        && let Some(plan) = x.cache.as_mut()
    {
        plan.plain_body();
    }
    let (server_idle, tunnel_idle) = (timeouts.server, timeouts.tunnel);
    Ok(Ready::Proxied(Proxied { slot, up, upload_done, server_idle, tunnel_idle, encoder, connect: false }))
}

/// A forward proxy's `CONNECT`: a new connection to the destination (never a
/// pooled one: it becomes the tunnel), retried within the backend's
/// `retries`; the client is answered 200 and the session relays bytes.
async fn forward_connect(
    x: Exchange<'_>,
    be: &std::sync::Arc<crate::lb::BackendRt>,
    fwd: &tollgate_config::Forward,
    dest: &forward::Destination,
) -> Result<Ready, Fail> {
    let fe = &x.snap.config.frontends[x.fi];
    let timeouts = be.cfg.timeouts;
    let addr = forward::address(fe, fwd, dest, &x.snap.config.global.dns, timeouts.connect, x.peer).await?;
    let server = forward::server(&be.cfg, dest, addr);
    let slot = be.take_slot(&server);
    let ends = ClientEnds { peer: x.peer, local: || x.peer };
    if let Some((_, r)) = x.log.as_mut() {
        r.server = Some(server.cfg.name.clone());
    }
    let mut attempts = 0;
    let up = loop {
        match exchange::connect(&server, &timeouts, x.log, &ends, &be.connect_time).await? {
            Some(up) => break up,
            None if attempts < be.cfg.retries => attempts += 1,
            None => return Err(ProxyError::ConnectFailed.into()),
        }
    };
    *x.resp = ResponseHead::default();
    x.resp.status = 200;
    if let Some((_, r)) = x.log.as_mut() {
        r.status = 200;
    }
    let (server_idle, tunnel_idle) = (timeouts.server, timeouts.tunnel);
    Ok(Ready::Proxied(Proxied { slot, up, upload_done: true, server_idle, tunnel_idle, encoder: None, connect: true }))
}
