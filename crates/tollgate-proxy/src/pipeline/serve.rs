//! The cache on the request path, whatever protocol the client speaks: the
//! HTTP/1.1 connection (conn.rs) and HTTP/2 streams (h2conn.rs) call it at the
//! same four hook points, between routing (with Basic auth) and balancing, in
//! the order cache/mod.rs draws. What the cache answers comes back as an
//! [`Answer`], which each protocol writes in its own framing.
//! 1. [`lookup`], once routing chose the backend, Basic auth passed and the
//!    request edits are applied: PURGE; the lookup; answers from the store
//!    (fresh, stale the client allows, stale-while-revalidate with one refresh
//!    in the background, 304 to a conditional request, HEAD from a stored GET,
//!    504 to `only-if-cached`); a wait behind another request's miss; else a
//!    [`CachePlan`] for the forward, with the validators of a revalidation set
//!    on the request.
//! 2. [`response_head`], when the response head has arrived: invalidation
//!    after an unsafe method, a 304 merged into the stored response and
//!    answered from it, `stale-if-error` for a 5xx, else whether to store, and
//!    the `Cache-Status` field.
//! 3. [`CachePlan::tee`], as the body streams to the client: the body kept, up
//!    to the zone's `max_object` (past it the response goes on unstored).
//! 4. When the exchange is over: [`CachePlan::finish`] stores a response that
//!    went out whole and hands it to the requests that waited for it;
//!    [`CachePlan::failed`] answers with the stale response (`stale-if-error`)
//!    when the origin could not be reached at all.
//!
//! Times are Unix seconds, as the policy takes them.

use crate::cache::coalesce::{Leader, Role};
use crate::cache::tier;
use crate::cache::zone::ZoneStats;
use crate::cache::{Body, Lookup, Object, Zone};
use crate::lb::{AdminState, BackendRt, SelectInput, ServerRt};
use crate::net::tls::TlsInfo;
use crate::observe::termination::Termination;
use crate::pipeline::exchange::{self, ClientEnds, Fail, IoFail, PickState, Reach, deadline, drain, read_until};
use crate::pipeline::rescue::{ProxyError, Side};
use crate::pipeline::snapshot::Snapshot;
use crate::upstream::Upstream;
use bytes::Bytes;
use http::StatusCode;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tollgate_config::tier::{CachePeers, PEER_HEADER};
use tollgate_config::{CacheUse, HeaderEdits, HeaderLookup};
use tollgate_wire::cache::head::has_length;
use tollgate_wire::cache::policy::{self, Decision, EntryMeta, HeadUpdate, RequestFacts, StoreMeta, Time};
use tollgate_wire::cache::range::{self, RangeAnswer};
use tollgate_wire::cache::{CacheStatus, Fwd, StoredHead, primary_key};
use tollgate_wire::clock::unix_now;
use tollgate_wire::h1::{self, BodyCursor, Chunked, Fields, Framing, RequestHead, ResponseHead};
use tollgate_wire::headers::{Vars, apply_edits, canonical_ip};

/// The largest response head a background refresh reads.
const MAX_HEAD: usize = 64 * 1024;

/// The client side of an exchange, as the cache needs it.
pub(crate) struct Client<'a> {
    pub(crate) peer: SocketAddr,
    /// The TLS session: the key's scheme is `https`, and answers get HSTS.
    pub(crate) tls: Option<&'a TlsInfo>,
    /// The address the client reached, looked up only for a background
    /// refresh (a `send_proxy` server gets it in the PROXY header).
    pub(crate) local: &'a (dyn Fn() -> SocketAddr + Sync),
    /// The request came from a cache tier member ([`peer_hop`]).
    pub(crate) hop: Option<&'a Hop>,
}

impl Client<'_> {
    /// The scheme of the cache key (RFC 9111 section 2: the target URI): the
    /// one the member's client used, for a request a member passed on.
    fn scheme(&self) -> &'static str {
        match self.hop {
            Some(h) if h.https => "https",
            Some(_) => "http",
            None => cache_scheme(self.tls),
        }
    }
}

/// A request a cache tier member passed on (cache/tier.rs), as its
/// `Tollgate-Peer` field says: the member routed, checked and prepared it;
/// this instance looks it up in `zone` and fetches it from `backend`.
pub(crate) struct Hop {
    pub(crate) backend: usize,
    pub(crate) zone: usize,
    /// The member's client used TLS (the key's scheme).
    pub(crate) https: bool,
}

/// The tier's field of `head` (removed, whoever sent it) when it comes from
/// a member of the zone it names: `<member>;backend=<name>;zone=<name>;proto=<http|https>`.
/// Nothing to do (not even a look at the head) without a tier.
pub(crate) fn peer_hop(snap: &Snapshot, peer: SocketAddr, head: &mut RequestHead) -> Option<Hop> {
    if !snap.caches.iter().any(|z| z.cfg.peers.is_some()) {
        return None;
    }
    let value = head.fields.get(PEER_HEADER.as_bytes()).map(<[u8]>::to_vec)?;
    head.fields.remove(PEER_HEADER.as_bytes());
    let value = std::str::from_utf8(&value).ok()?;
    let (mut backend, mut zone, mut https) = (None, None, false);
    for part in value.split(';').skip(1) {
        match part.trim().split_once('=') {
            Some(("backend", b)) => backend = snap.backends.iter().position(|x| x.name() == b),
            Some(("zone", z)) => zone = snap.caches.iter().position(|x| x.cfg.name == z),
            Some(("proto", p)) => https = p == "https",
            _ => {}
        }
    }
    let (backend, zone) = (backend?, zone?);
    let peers = snap.caches[zone].cfg.peers.as_ref()?;
    is_member(snap, peers, canonical_ip(peer.ip())).then_some(Hop { backend, zone, https })
}

/// The scheme of the target URI a request on a connection with (or without)
/// TLS has.
pub(crate) fn cache_scheme(tls: Option<&TlsInfo>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

/// What every response the cache gives gets on its way out, as a forwarded
/// one does: the zone's targeted cache-control field removed
/// ([`stripped_field`]), the rules' response edits and, on TLS, HSTS.
struct Dress<'a> {
    strip: Option<&'a str>,
    edits: &'a [&'a HeaderEdits],
    /// What the edits' variables stand for in this request.
    vars: Option<&'a Vars>,
    hsts: Option<&'a [u8]>,
    alt_svc: Option<&'a [u8]>,
}

impl<'a> Dress<'a> {
    fn new(zone: &'a Zone, edits: &'a [&'a HeaderEdits], vars: Option<&'a Vars>, tls: Option<&'a TlsInfo>) -> Self {
        let hsts = tls.and_then(|t| t.hsts.as_ref()).map(|v| v.as_bytes());
        let alt_svc = tls.and_then(|t| t.alt_svc.as_ref()).map(|v| v.as_bytes());
        Dress { strip: stripped_field(zone), edits, vars, hsts, alt_svc }
    }

    /// The stored head with the edits applied.
    fn head(&self, head: &StoredHead) -> StoredHead {
        let strip = self.strip.filter(|name| head.get(name.as_bytes()).is_some());
        if self.edits.is_empty() && self.hsts.is_none() && self.alt_svc.is_none() && strip.is_none() {
            return head.clone();
        }
        let mut f = Fields::default();
        for (n, v) in head.iter() {
            f.append(n, v);
        }
        if let Some(name) = strip {
            f.remove(name.as_bytes());
        }
        for e in self.edits {
            apply_edits(e, &mut f, self.vars);
        }
        if let Some(hsts) = self.hsts {
            f.set(b"strict-transport-security", hsts);
        }
        if let Some(alt) = self.alt_svc {
            f.set(b"alt-svc", alt);
        }
        head.with_fields(f.iter())
    }
}

/// A response the cache gives in place of the origin's.
pub(crate) enum Answer {
    /// A stored response, or a 304 made from one.
    Stored(Box<Served>),
    /// One of the cache's own: PURGE's result, 504 to `only-if-cached`.
    Local { status: u16, cache_status: &'static str, text: String },
}

/// A response from the store, ready to go out.
pub(crate) struct Served {
    /// The head as it goes out (the edits applied).
    pub(crate) head: StoredHead,
    /// The `Age` (RFC 9111 section 5.1).
    pub(crate) age: u64,
    /// The stored body's length: the `Content-Length` (a HEAD gets the GET's).
    pub(crate) length: u64,
    /// The body to send: none to HEAD, and on 304, 204 and 1xx.
    pub(crate) body: Option<Body>,
    pub(crate) cache_status: String,
    /// Why the access log says it ended (`stale-if-error`), if it says.
    pub(crate) termination: Option<Termination>,
}

impl Served {
    /// Every field of the response (HTTP/2 writes them one by one): the
    /// stored ones, `age`, `content-length` where a body may be, `cache-status`.
    pub(crate) fn each_field(&self, mut f: impl FnMut(&[u8], &[u8])) {
        for (n, v) in self.head.iter() {
            f(n, v);
        }
        f(b"age", self.age.to_string().as_bytes());
        if has_length(self.head.status) {
            f(b"content-length", self.length.to_string().as_bytes());
        }
        f(b"cache-status", self.cache_status.as_bytes());
    }

    /// The HTTP/1.1 head, `connection` as given.
    pub(crate) fn write_h1(&self, out: &mut Vec<u8>, connection: Option<&str>) {
        self.head.write_response(out, self.age, self.length, Some(&self.cache_status), connection);
    }

    /// Body bytes sent.
    pub(crate) fn body_len(&self) -> u64 {
        self.body.as_ref().map_or(0, Body::len)
    }
}

impl Answer {
    /// Its `Cache-Status` member.
    pub(crate) fn cache_status(&self) -> &str {
        match self {
            Answer::Stored(s) => &s.cache_status,
            Answer::Local { cache_status, .. } => cache_status,
        }
    }

    /// The fields of a [`Answer::Local`] besides its length and date.
    /// The fields of a local answer; no Cache-Status when `cache_status` is
    /// empty (an answer that is not the cache's: an ACME challenge).
    pub(crate) fn local_fields(cache_status: &str) -> Vec<(&'static str, &[u8])> {
        let mut fields: Vec<(&'static str, &[u8])> =
            vec![("content-type", b"text/plain; charset=utf-8"), ("cache-control", b"no-store")];
        if !cache_status.is_empty() {
            fields.push(("cache-status", cache_status.as_bytes()));
        }
        fields
    }
}

/// What the cache does with one forwarded request: made by hook 1, kept with
/// the exchange until hook 4.
pub(crate) struct CachePlan {
    zone: Arc<Zone>,
    key: String,
    /// The host part of the key (invalidation makes keys of the same origin).
    host: String,
    scheme: &'static str,
    /// RFC 9111 section 4.2.3's `request_time`: when the request went forward.
    sent: Time,
    kind: Kind,
    /// The `Cache-Status` member so far.
    status: CacheStatus,
    /// This request fetches for the others that missed on its key.
    leader: Option<Leader<Arc<Object>>>,
    /// The response body being kept for the store.
    tee: Option<Tee>,
    /// The rules' response edits, for a stale response served at hook 4
    /// (the others are served where the edits are at hand), and what their
    /// variables stand for.
    edits: Vec<HeaderEdits>,
    vars: Option<Vars>,
}

impl CachePlan {
    /// The `Cache-Status` member of the forwarded response.
    pub(crate) fn status_value(&self) -> String {
        self.status.value()
    }
}

enum Kind {
    /// Not looked up; still invalidates after an unsafe method.
    Bypass,
    /// Nothing usable stored.
    Miss,
    /// Validating `obj`: its validators replaced the client's conditional
    /// fields (`client`, put back when the response comes).
    Revalidate { obj: Arc<Object>, client: Vec<(Vec<u8>, Vec<u8>)> },
    /// A revalidation answered with a full response: stored as a miss's.
    Replaced,
}

impl CachePlan {
    /// Whether the body being forwarded is kept for the store (then it must
    /// pass through [`CachePlan::tee`]).
    pub(crate) fn keeps_body(&self) -> bool {
        self.tee.is_some()
    }

    /// The body will come to hook 3 as plain bytes, not in the server's
    /// framing: it is compressed on its way (pipeline/compress.rs), and the
    /// store keeps the encoded body.
    pub(crate) fn plain_body(&mut self) {
        if let Some(t) = &mut self.tee {
            t.chunked = None;
        }
    }

    /// Hook 3: `raw` is the next piece of the response body as it came from
    /// the server (chunked framing included), or as it goes to the client
    /// when it is compressed ([`CachePlan::plain_body`]).
    pub(crate) fn tee(&mut self, raw: &[u8]) {
        if let Some(t) = &mut self.tee
            && !t.push(raw)
        {
            self.tee = None;
            // Those waiting for it go to the origin now, not after the download.
            if let Some(l) = self.leader.take() {
                l.not_stored();
            }
        }
    }

    /// Hook 4, the response body is complete: stores the body the tee kept (and
    /// hands the object to the requests that waited for it). Called as soon as
    /// the server's last body bytes are read, before they go to the client, so
    /// that a request the client sends once it has the response (a PURGE, a
    /// fetch expecting a hit) finds the object stored; and again at the end of
    /// the exchange (a body that ends with the connection), where a plan
    /// already stored does nothing.
    pub(crate) fn finish(&mut self, head: &RequestHead) {
        let Some(tee) = self.tee.take() else { return };
        let put = self.zone.shared.put(&self.key, &head.fields, tee.head, Body::new(tee.segments), tee.meta);
        match (put, self.leader.take()) {
            (Ok(obj), Some(l)) => l.stored(obj),
            (Err(_), Some(l)) => l.not_stored(),
            (_, None) => {}
        }
    }

    /// Hook 4, the exchange failed with `e` before any response went out: a
    /// revalidation whose origin could not be reached is answered with the
    /// stale response when `stale-if-error` allows (RFC 5861 section 4).
    pub(crate) fn failed(self, head: &mut RequestHead, e: &ProxyError, tls: Option<&TlsInfo>) -> Option<Answer> {
        if !origin_failed(e) {
            return None;
        }
        let Kind::Revalidate { obj, client } = self.kind else { return None };
        restore_conditionals(&mut head.fields, client);
        if !stale_ok(head, &obj.meta, &self.zone.opts) {
            return None;
        }
        let edits: Vec<&HeaderEdits> = self.edits.iter().collect();
        Some(stale(head, &self.zone, &obj, self.status, &Dress::new(&self.zone, &edits, self.vars.as_ref(), tls)))
    }
}

/// What [`join`] made of a request.
enum Joined {
    /// Go to the origin; leading the flight, or not (a follower let down, HEAD).
    Lead(Option<Leader<Arc<Object>>>),
    /// Answered with another request's response.
    Served(Answer),
}

/// A response body on its way into the store.
struct Tee {
    head: StoredHead,
    meta: StoreMeta,
    /// The decoder of a chunked body (its own: the data path's only counts).
    chunked: Option<Chunked>,
    segments: Vec<Bytes>,
    len: u64,
    limit: u64,
}

impl Tee {
    fn new(head: StoredHead, meta: StoreMeta, framing: Framing, limit: u64) -> Tee {
        let chunked = (framing == Framing::Chunked).then(Chunked::new);
        Tee { head, meta, chunked, segments: Vec::new(), len: 0, limit }
    }

    /// Keeps the body bytes of `raw`; false once the body is over the limit
    /// (or its chunked framing is broken, which the data path reports itself).
    fn push(&mut self, raw: &[u8]) -> bool {
        let data = match &mut self.chunked {
            None => Bytes::copy_from_slice(raw),
            Some(c) => {
                let mut out = Vec::new();
                if c.feed(raw, |r| out.extend_from_slice(&raw[r])).is_err() {
                    return false;
                }
                Bytes::from(out)
            }
        };
        self.len += data.len() as u64;
        if !data.is_empty() {
            self.segments.push(data);
        }
        self.len <= self.limit
    }
}

/// Why a request is not looked up: the `Cache-Status` it gets.
fn bypass_reason(req: &RequestFacts<'_>, head: &RequestHead) -> Option<(Fwd, Option<&'static str>)> {
    use tollgate_wire::cache::policy::Bypass;
    match req.bypass() {
        Some(Bypass::Method) => Some((Fwd::Method, None)),
        Some(Bypass::Precondition) => Some((Fwd::Bypass, Some("precondition"))),
        None if head.framing() != Framing::Empty => Some((Fwd::Bypass, Some("request-body"))),
        None if head.upgrade => Some((Fwd::Bypass, Some("upgrade"))),
        None => None,
    }
}

/// The client's `If-None-Match` and `If-Modified-Since` (a revalidation sends
/// the cache's own validators instead).
fn take_conditionals(fields: &Fields) -> Vec<(Vec<u8>, Vec<u8>)> {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"if-none-match") || n.eq_ignore_ascii_case(b"if-modified-since"))
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
}

fn restore_conditionals(fields: &mut Fields, client: Vec<(Vec<u8>, Vec<u8>)>) {
    fields.remove(b"if-none-match");
    fields.remove(b"if-modified-since");
    for (n, v) in client {
        fields.append(&n, &v);
    }
}

/// Failures of the origin side, for `stale-if-error` (RFC 5861 section 4).
fn origin_failed(e: &ProxyError) -> bool {
    e.side() == Side::Server || e.unsent()
}

fn host_of(head: &RequestHead) -> String {
    head.fields.get(b"host").map(|h| String::from_utf8_lossy(h).into_owned()).unwrap_or_default()
}

/// What hook 1 made of a request.
pub(crate) enum Looked {
    /// Answered by the cache: the exchange ends with this.
    Answer(Answer),
    /// To the origin, with the cache's plan when the request goes through a zone.
    Forward(Option<Box<CachePlan>>),
    /// To the tier member that owns the key (cache/tier.rs): `server` of
    /// backend `backend`, the request marked with `mark` ([`peer_hop`]).
    Peer { backend: usize, server: Arc<ServerRt>, mark: String },
}

/// Hook 1: the zone of the request (the first matching rule's `cache`, else
/// the backend's), then PURGE, the lookup, and an answer from the store or
/// the plan for the forward. `edits`: the rules' response edits.
pub(crate) async fn lookup(
    snap: &Snapshot,
    be: &Arc<BackendRt>,
    rule: Option<CacheUse>,
    head: &mut RequestHead,
    client: &Client<'_>,
    edits: &[&HeaderEdits],
    vars: Option<&Vars>,
) -> Result<Looked, ProxyError> {
    let zone = match rule {
        Some(CacheUse::Off) => None,
        Some(CacheUse::Zone(i)) => Some(i),
        None => be.cfg.cache,
    };
    let Some(zone) = zone.and_then(|i| snap.caches.get(i)).cloned() else { return Ok(Looked::Forward(None)) };
    let dress = Dress::new(&zone, edits, vars, client.tls);
    let host = host_of(head);
    let key = primary_key(client.scheme(), &host, head.target());
    let purging = head.method() == "PURGE";
    let bypass = if purging { None } else { bypass_reason(&RequestFacts::new(head.method(), &head.fields), head) };
    // A tier across instances: a key another member owns goes to it, once
    // (a request a member passed on is never sent on), unless nothing of it
    // would be stored (a POST, a request with credentials...).
    if let (Some(peers), None, None) = (&zone.cfg.peers, client.hop, &bypass)
        && let Some(server) = owner_elsewhere(snap, peers, &key)
    {
        if purging && !zone.allows_purge(client.peer.ip()) {
            return purge(&zone, &key, client.peer, false).map(Looked::Answer);
        }
        let mark = format!("{};backend={};zone={};proto={}", peers.me, be.name(), zone.cfg.name, client.scheme());
        return Ok(Looked::Peer { backend: peers.backend, server, mark });
    }
    if purging {
        return purge(&zone, &key, client.peer, client.hop.is_some()).map(Looked::Answer);
    }
    let now = unix_now();
    let looked = match bypass {
        Some(why) => Err(why),
        None => {
            let found = zone.shared.get(&key, &head.fields).await;
            let req = RequestFacts::new(head.method(), &head.fields);
            let (obj, vary_miss) = match found {
                Lookup::Hit(o) if policy::acceptable_coding(&req, &o.meta) => (Some(o), false),
                Lookup::Hit(_) | Lookup::VaryMiss => (None, true),
                Lookup::UriMiss => (None, false),
            };
            Ok((policy::lookup_decision(&req, obj.as_deref().map(|o| &o.meta), now), obj, vary_miss))
        }
    };
    let stats = &zone.shared.stats;
    let mut plan = CachePlan {
        zone: zone.clone(),
        key,
        host,
        scheme: client.scheme(),
        sent: now,
        kind: Kind::Bypass,
        status: CacheStatus::default(),
        leader: None,
        tee: None,
        edits: Vec::new(),
        vars: None,
    };
    let (decision, obj, vary_miss) = match looked {
        Ok(found) => found,
        Err((fwd, detail)) => {
            ZoneStats::bump(&stats.bypass);
            plan.status = CacheStatus { detail, ..CacheStatus::forward(fwd) };
            return Ok(Looked::Forward(Some(Box::new(plan))));
        }
    };
    let wait = be.cfg.timeouts.server;
    match (decision, obj) {
        (Decision::Fresh | Decision::StaleAllowed | Decision::StaleWhileRevalidate, Some(obj)) => {
            ZoneStats::bump(&stats.hits);
            let mut cs = CacheStatus::hit(policy::ttl(&obj.meta, now));
            if decision == Decision::StaleAllowed {
                ZoneStats::bump(&stats.stale);
                cs.detail = Some("max-stale");
            } else if decision == Decision::StaleWhileRevalidate {
                ZoneStats::bump(&stats.stale);
                cs.detail = Some("stale-while-revalidate");
                refresh_in_background(&zone, be, &plan.key, &obj, head, client);
            }
            Ok(Looked::Answer(serve(head, &obj.head, &obj.body, &obj.meta, &cs, &dress)))
        }
        (Decision::GatewayTimeout, _) => {
            ZoneStats::bump(&stats.only_if_cached_misses);
            let text = "Not in the cache, and the request said only-if-cached.\n".to_string();
            Ok(Looked::Answer(Answer::Local { status: 504, cache_status: "tollgate; detail=only-if-cached", text }))
        }
        (Decision::Revalidate(why), Some(obj)) => {
            // One validation for concurrent requests that find the same
            // stale response; the others take its result when usable.
            match join(&zone, &plan.key, Fwd::from(why), wait, head, &dress).await {
                Joined::Served(a) => return Ok(Looked::Answer(a)),
                Joined::Lead(l) => plan.leader = l,
            }
            ZoneStats::bump(&stats.revalidations);
            let client = take_conditionals(&head.fields);
            policy::conditional_headers(&[&obj.meta]).apply(&mut head.fields);
            plan.status = CacheStatus::forward(Fwd::from(why));
            plan.edits = edits.iter().map(|e| (*e).clone()).collect();
            plan.vars = vars.cloned();
            plan.kind = Kind::Revalidate { obj, client };
            plan.sent = unix_now();
            Ok(Looked::Forward(Some(Box::new(plan))))
        }
        // A miss (the other decisions always come with a stored response).
        (_, _) => {
            let fwd = if vary_miss { Fwd::VaryMiss } else { Fwd::UriMiss };
            plan.kind = Kind::Miss;
            plan.status = CacheStatus::forward(fwd);
            match join(&zone, &plan.key, fwd, wait, head, &dress).await {
                Joined::Served(a) => return Ok(Looked::Answer(a)),
                Joined::Lead(l) => plan.leader = l,
            }
            ZoneStats::bump(&stats.misses);
            plan.sent = unix_now();
            Ok(Looked::Forward(Some(Box::new(plan))))
        }
    }
}

/// Coalescing (GET only: HEAD responses are not stored): the first request
/// for `key` leads the flight and fetches; the others wait for it (at most
/// `wait`) and are answered with what it stored when that suits them, else
/// go on without leading.
async fn join(zone: &Zone, key: &str, fwd: Fwd, wait: Duration, head: &RequestHead, dress: &Dress<'_>) -> Joined {
    // A Range request goes forward as it is, alone: what it gets (often a 206,
    // never stored) is no answer for the others.
    if head.method() != "GET" || head.fields.get(b"range").is_some() {
        return Joined::Lead(None);
    }
    let f = match zone.shared.flights.join(key) {
        Role::Leader(l) => return Joined::Lead(Some(l)),
        Role::Follower(f) => f,
    };
    ZoneStats::bump(&zone.shared.stats.coalesced);
    let Ok(obj) = f.wait(wait).await else { return Joined::Lead(None) };
    let Some(ttl) = usable(head, &obj) else { return Joined::Lead(None) };
    ZoneStats::bump(&zone.shared.stats.hits);
    let cs = CacheStatus { collapsed: true, ttl: Some(ttl), ..CacheStatus::forward(fwd) };
    Joined::Served(serve(head, &obj.head, &obj.body, &obj.meta, &cs, dress))
}

/// Whether an object another request stored may answer this one (the
/// variant, the coding and freshness as for any lookup); its ttl if so.
fn usable(head: &RequestHead, obj: &Object) -> Option<i64> {
    let now = unix_now();
    let req = RequestFacts::new(head.method(), &head.fields);
    let ok = obj.matches(&head.fields)
        && policy::acceptable_coding(&req, &obj.meta)
        && matches!(policy::lookup_decision(&req, Some(&obj.meta), now), Decision::Fresh | Decision::StaleAllowed);
    ok.then(|| policy::ttl(&obj.meta, now))
}

/// Answers the request from a stored response: a 304 when the client's own
/// conditions hold (RFC 9111 section 4.3.2), the head alone for HEAD, a 206
/// or 416 for a `Range` (range.rs), else the head with `Age` and the stored
/// body.
fn serve(
    head: &RequestHead,
    stored: &StoredHead,
    body: &Body,
    meta: &EntryMeta,
    cs: &CacheStatus,
    dress: &Dress<'_>,
) -> Answer {
    let now = unix_now();
    let (not_modified, is_head, range) = {
        let req = RequestFacts::new(head.method(), &head.fields);
        let not_modified = policy::client_wants_304(&req, meta);
        // RFC 9110 section 13.2.2: If-None-Match and If-Modified-Since come
        // before If-Range and Range.
        let range = if not_modified { RangeAnswer::Full } else { range::answer(&req, meta, body.len()) };
        (not_modified, req.is_head(), range)
    };
    let out = if not_modified { dress.head(&policy::not_modified_head(stored, now)) } else { dress.head(stored) };
    let content_range = range.content_range(body.len());
    let (out, length, body) = match (range, content_range) {
        (RangeAnswer::Partial { first, last }, Some(cr)) => {
            // RFC 9110 section 15.3.7: the 200's fields, and Content-Range.
            let out = out.with_status(206, b"Partial Content", &[(b"content-range", cr.as_bytes())]);
            (out, last - first + 1, Some(body.slice(first, last + 1)))
        }
        (RangeAnswer::Unsatisfiable, Some(cr)) => {
            // RFC 9110 section 15.5.17: Content-Range with the length.
            let fields = [(&b"content-range"[..], cr.as_bytes())];
            let out = dress.head(&StoredHead::new(416, b"Range Not Satisfiable", fields.into_iter(), &[], now));
            (out, 0, None)
        }
        _ => {
            let with_body = !(not_modified || is_head) && has_length(out.status) && out.status != 304;
            let length = body.len();
            (out, length, with_body.then(|| body.clone()))
        }
    };
    Answer::Stored(Box::new(Served {
        head: out,
        age: policy::age_header(meta, now),
        length,
        body,
        cache_status: cs.value(),
        termination: None,
    }))
}

/// `PURGE`: drops every stored variant of the target URI; 200 when there
/// was one, 404 when not; 403 from an address not in `purge_from`.
/// The member of `peers` that owns `key`, when it is not this instance
/// (members down or in maintenance own nothing).
fn owner_elsewhere(snap: &Snapshot, peers: &CachePeers, key: &str) -> Option<Arc<ServerRt>> {
    let be = snap.backends.get(peers.backend)?;
    let up = be.servers.iter().enumerate().filter(|(_, s)| s.is_up() && s.admin() != AdminState::Maint);
    let o = tier::owner(key.as_bytes(), peers.me, up.map(|(i, s)| (i, s.addr())))?;
    be.servers.get(o).cloned()
}

/// Whether `ip` is a member's of `peers` (this one's, or a server's of their backend).
fn is_member(snap: &Snapshot, peers: &CachePeers, ip: IpAddr) -> bool {
    peers.me.ip() == ip
        || snap.backends.get(peers.backend).is_some_and(|b| b.servers.iter().any(|s| s.addr().ip() == ip))
}

/// PURGE: from the zone's `purge_from` addresses, or from a tier member that
/// passes one on (`member`).
fn purge(zone: &Zone, key: &str, peer: SocketAddr, member: bool) -> Result<Answer, ProxyError> {
    if !member && !zone.allows_purge(peer.ip()) {
        let body = Some("PURGE is not allowed from this address.\n".to_string());
        return Err(ProxyError::Denied { status: StatusCode::FORBIDDEN, body, retry_after: None });
    }
    let cache_status = "tollgate; detail=purge";
    Ok(match zone.shared.purge(key) {
        0 => Answer::Local { status: 404, cache_status, text: "Nothing stored for this URI.\n".into() },
        n => Answer::Local { status: 200, cache_status, text: format!("Purged {n} stored response(s).\n") },
    })
}

/// Stale-while-revalidate (RFC 5861 section 3): one refresh of `obj` in the
/// background, on this worker, unless one is in flight already.
fn refresh_in_background(
    zone: &Arc<Zone>,
    be: &Arc<BackendRt>,
    key: &str,
    obj: &Arc<Object>,
    head: &RequestHead,
    client: &Client<'_>,
) {
    let Role::Leader(leader) = zone.shared.flights.join(key) else { return };
    let ends = (canonical_ip(client.peer.ip()), client.peer, (client.local)());
    let Some(req) = Refetch::of(head, &obj.meta, ends) else { return };
    tokio::spawn(refresh(zone.clone(), be.clone(), key.to_owned(), obj.clone(), req, leader));
}

/// Section 4.4: an unsafe method's success drops the stored responses of
/// its target URI (and of `Location` / `Content-Location` on the same origin).
fn invalidate(plan: &CachePlan, head: &RequestHead, resp: &ResponseHead) {
    let method = head.method();
    if !policy::is_unsafe(method) {
        return;
    }
    let keys = policy::invalidations(method, resp.status, plan.scheme, &plan.host, head.target(), &resp.fields);
    let n: usize = keys.iter().map(|k| plan.zone.shared.purge(k)).sum();
    plan.zone.shared.stats.invalidated.fetch_add(n as u64, Relaxed);
}

/// The server side of an exchange at hook 2.
pub(crate) struct Origin<'a> {
    pub(crate) up: &'a mut Upstream,
    pub(crate) server: &'a ServerRt,
    /// `timeout.server`.
    pub(crate) idle: Duration,
    /// The largest response head read.
    pub(crate) max_head: usize,
}

/// Hook 2, `resp` holding the response head, `plan` what hook 1 made. Returns
/// `Some((answer, reusable))` when the client is to be answered from the store
/// (the response was read to its end, and its connection can be `reusable`d
/// or not); else the plan stays for hooks 3 and 4, and `resp` has its
/// `Cache-Status`.
pub(crate) async fn response_head(
    plan: &mut Option<Box<CachePlan>>,
    head: &mut RequestHead,
    resp: &mut ResponseHead,
    origin: Origin<'_>,
    tls: Option<&TlsInfo>,
    edits: &[&HeaderEdits],
    vars: Option<&Vars>,
) -> Result<Option<(Answer, bool)>, Fail> {
    let Some(mut p) = plan.take() else { return Ok(None) };
    let t1 = unix_now();
    let zone = p.zone.clone();
    let dress = Dress::new(&zone, edits, vars, tls);
    invalidate(&p, head, resp);
    if matches!(p.kind, Kind::Revalidate { .. })
        && let Kind::Revalidate { obj, client } = std::mem::replace(&mut p.kind, Kind::Replaced)
    {
        restore_conditionals(&mut head.fields, client);
        let status = resp.status;
        p.status.fwd_status = Some(status);
        if status == 304 && !policy::select_for_304(&resp.fields, &[&obj.meta]).is_empty() {
            ZoneStats::bump(&zone.shared.stats.not_modified);
            count_response(origin.server, status);
            let (new_head, meta) = policy::revalidated(&obj.head, resp.fields.iter(), p.sent, t1, &zone.opts);
            let reusable = !resp.server_closes && origin.up.buf.is_empty();
            let cs = CacheStatus { ttl: Some(policy::ttl(&meta, t1)), ..p.status };
            let updated = zone.shared.update(&p.key, &obj, new_head.clone(), meta.clone());
            if let (Some(o), Some(l)) = (&updated, p.leader.take()) {
                l.stored(o.clone());
            }
            let mut answer = match updated {
                Some(o) => serve(head, &o.head, &o.body, &o.meta, &cs, &dress),
                None => serve(head, &new_head, &obj.body, &meta, &cs, &dress),
            };
            give_cookies(&mut answer, &resp.fields);
            return Ok(Some((answer, reusable)));
        }
        if status == 304 {
            // Section 4.3.3: a 304 that selects no stored response; the
            // request again, with the client's own conditions.
            count_response(origin.server, status);
            if let Err(e) = resend(head, resp, origin.up, origin.idle, origin.max_head).await {
                // The origin closed (or broke) the connection after that 304:
                // a failing origin, as at hook 4 (RFC 5861 section 4).
                if matches!(&e, Fail::Respond(pe) if origin_failed(pe)) && stale_ok(head, &obj.meta, &zone.opts) {
                    return Ok(Some((stale(head, &zone, &obj, p.status, &dress), false)));
                }
                return Err(e);
            }
            // RFC 9211 section 2.3: the status of the response forwarded on.
            p.status.fwd_status = Some(resp.status);
        } else if policy::is_error_status(status) && stale_ok(head, &obj.meta, &zone.opts) {
            count_response(origin.server, status);
            let mut rest = BodyCursor::new(resp.framing(head.method() == "HEAD"));
            let reusable = !resp.server_closes && drain(origin.up, &mut rest).await;
            return Ok(Some((stale(head, &zone, &obj, p.status, &dress), reusable)));
        }
    }
    if !matches!(p.kind, Kind::Bypass) {
        decide(&mut p, head, resp, t1);
    }
    if p.tee.is_none()
        && let Some(l) = p.leader.take()
    {
        l.not_stored();
    }
    // After the store decision: the stored head keeps it (a 304 merge needs it).
    if let Some(name) = stripped_field(&zone) {
        resp.fields.remove(name.as_bytes());
    }
    resp.fields.append(b"cache-status", p.status.value().as_bytes());
    *plan = Some(p);
    Ok(None)
}

/// The targeted cache-control field (RFC 9213) the zone heeds, when it is to
/// be removed from what clients get (`strip_targeted_cache_control`,
/// default): it speaks to this cache, and section 3 lets a CDN remove it.
/// Stored responses keep it; every response of a request that went through
/// the zone loses it, forwarded or from the store.
fn stripped_field(zone: &Zone) -> Option<&str> {
    zone.cfg.strip_targeted_cache_control.then_some(zone.cfg.targeted_cache_control.as_deref()).flatten()
}

/// The `Set-Cookie` lines of the 304 that validated a stored response go to
/// the client whose request made the validation (they are its own), though
/// they are never stored ([`policy::revalidated`]).
fn give_cookies(answer: &mut Answer, resp: &Fields) {
    let Answer::Stored(s) = answer else { return };
    if resp.get(b"set-cookie").is_none() {
        return;
    }
    let cookies = resp.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"set-cookie"));
    s.head = s.head.with_fields(s.head.iter().chain(cookies));
}

/// Whether (and how) the forwarded response is stored: a GET's by
/// [`policy::storable`] and the zone's `max_object`; a HEAD's 200 updates
/// or drops the stored GET response (RFC 9111 section 4.3.5).
fn decide(plan: &mut CachePlan, head: &RequestHead, resp: &ResponseHead, t1: Time) {
    let status = resp.status;
    let zone = &plan.zone;
    if head.method() == "HEAD" {
        if status != 200 {
            return;
        }
        let shared = &zone.shared;
        let Lookup::Hit(obj) = shared.store.get(&plan.key, &head.fields) else { return };
        match policy::head_update(&resp.fields, &obj.meta, obj.body.len()) {
            HeadUpdate::Update => {
                let (new_head, meta) = policy::revalidated(&obj.head, resp.fields.iter(), plan.sent, t1, &zone.opts);
                shared.update(&plan.key, &obj, new_head, meta);
            }
            HeadUpdate::Invalidate => {
                shared.purge(&plan.key);
            }
        }
        return;
    }
    let decision = {
        let req = RequestFacts::new(head.method(), &head.fields);
        policy::storable(&req, status, &resp.fields, plan.sent, t1, &zone.opts)
    };
    let framing = resp.framing(false);
    match decision {
        Ok(_) if matches!(framing, Framing::Length(n) if n > zone.cfg.max_object) => {
            plan.status.detail = Some("too-large");
        }
        Ok(m) => {
            let stored = StoredHead::new(status, resp.reason(), resp.fields.iter(), &m.omit, t1);
            plan.tee = Some(Tee::new(stored, m, framing, zone.cfg.max_object));
            plan.status.stored = true;
        }
        Err(e) => plan.status.detail = Some(e.as_str()),
    }
}

/// Sends the request again on the same connection (after a 304 that cannot
/// be used; to an HTTP/2 server, on a new stream) and reads the new response
/// head into `resp`.
async fn resend(
    head: &RequestHead,
    resp: &mut ResponseHead,
    up: &mut Upstream,
    idle: Duration,
    max_head: usize,
) -> Result<(), Fail> {
    if resp.server_closes || !up.buf.is_empty() {
        return Err(ProxyError::BadGateway.into());
    }
    let mut out = Vec::with_capacity(512);
    let (bytes, _) = exchange::request_bytes(up, head, &[], &mut out);
    if exchange::write_request(up, bytes, idle).await.is_err() {
        return Err(ProxyError::BadGateway.into());
    }
    // This second request is the cache's own doing: interim heads to it are skipped.
    exchange::read_response_head(up, resp, head.upgrade, false, max_head, idle).await.map_err(|e| e.into_fail())
}

fn stale_ok(head: &RequestHead, meta: &EntryMeta, opts: &policy::Options) -> bool {
    let req = RequestFacts::new(head.method(), &head.fields);
    policy::stale_if_error(&req, meta, unix_now(), opts)
}

/// RFC 5861 section 4: the stored response, stale, in place of an error.
fn stale(head: &RequestHead, zone: &Zone, obj: &Object, status: CacheStatus, dress: &Dress<'_>) -> Answer {
    ZoneStats::bump(&zone.shared.stats.stale);
    let cs = CacheStatus {
        fwd: Some(Fwd::Stale),
        ttl: Some(policy::ttl(&obj.meta, unix_now())),
        detail: Some("stale-if-error"),
        ..status
    };
    let mut answer = serve(head, &obj.head, &obj.body, &obj.meta, &cs, dress);
    if let Answer::Stored(s) = &mut answer {
        s.termination = Some(Termination::StaleIfError);
    }
    answer
}

/// Counts a response the cache consumed in the server's statistics (the data
/// path counts those it forwards).
fn count_response(server: &ServerRt, status: u16) {
    server.observe(status / 100 != 5);
    crate::observe::counters::count_status(&server.stats.responses, status);
}

// ---------------------------------------------------------------------------
// The background refresh (stale-while-revalidate)

/// One field line, owned.
type Field = (Box<[u8]>, Box<[u8]>);

/// Request fields kept for a request sent after its client was answered.
struct OwnedFields(Vec<Field>);

impl HeaderLookup for OwnedFields {
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).any(|(_, v)| f(v))
    }
}

/// Fields a refresh does not send: the client's conditions and ranges (the
/// cache sends its own validators) and the framing of a body it does not have.
const NOT_REFETCHED: [&[u8]; 8] = [
    b"if-none-match",
    b"if-modified-since",
    b"if-match",
    b"if-unmodified-since",
    b"if-range",
    b"range",
    b"content-length",
    b"expect",
];

/// A conditional GET for a stored response, made from the request that found
/// it stale.
struct Refetch {
    /// The request's fields but the hop-by-hop ones and [`NOT_REFETCHED`]
    /// (what the new response is stored under, for Vary).
    fields: OwnedFields,
    /// The request sent: those fields and the stored response's validators.
    head: RequestHead,
    /// The client's address as balancing sees it (canonical).
    src: IpAddr,
    /// The client's ends, for a `send_proxy` server's PROXY header.
    peer: SocketAddr,
    local: SocketAddr,
}

impl Refetch {
    /// `None` for a request whose head the checks would now refuse (it passed
    /// them as the client sent it: not expected).
    fn of(
        head: &RequestHead,
        meta: &EntryMeta,
        (src, peer, local): (IpAddr, SocketAddr, SocketAddr),
    ) -> Option<Refetch> {
        let kept = head
            .fields
            .iter()
            .filter(|(n, _)| !h1::is_hop_by_hop(n) && !NOT_REFETCHED.iter().any(|x| x.eq_ignore_ascii_case(n)));
        let fields = OwnedFields(kept.map(|(n, v)| (Box::from(n), Box::from(v))).collect());
        let validators = policy::conditional_headers(&[meta]);
        let cond = [("if-none-match", &validators.if_none_match), ("if-modified-since", &validators.if_modified_since)];
        let cond = cond.iter().filter_map(|(n, v)| Some((n.as_bytes(), v.as_deref()?.as_bytes())));
        let sent = fields.0.iter().map(|(n, v)| (&n[..], &v[..])).chain(cond);
        let mut get = RequestHead::default();
        h1::own_request(&mut get, head.minor, b"GET", head.target().as_bytes(), sent).ok()?;
        Some(Refetch { fields, head: get, src, peer, local })
    }
}

/// A response fetched in the background, whole.
struct Fetched {
    head: ResponseHead,
    body: Body,
}

/// Refreshes `obj` (stored under `key`) from the origin, then tells those
/// waiting on the key.
async fn refresh(
    zone: Arc<Zone>,
    be: Arc<BackendRt>,
    key: String,
    obj: Arc<Object>,
    req: Refetch,
    leader: Leader<Arc<Object>>,
) {
    let stats = &zone.shared.stats;
    let store = &zone.shared;
    ZoneStats::bump(&stats.revalidations);
    let t0 = unix_now();
    let Some(got) = fetch(&be, &req, zone.cfg.max_object).await else {
        leader.failed();
        return;
    };
    let t1 = unix_now();
    let status = got.head.status;
    if status == 304 && !policy::select_for_304(&got.head.fields, &[&obj.meta]).is_empty() {
        ZoneStats::bump(&stats.not_modified);
        let (head, meta) = policy::revalidated(&obj.head, got.head.fields.iter(), t0, t1, &zone.opts);
        match store.update(&key, &obj, head, meta) {
            Some(o) => leader.stored(o),
            None => leader.not_stored(),
        }
        return;
    }
    // RFC 5861 section 4: an error keeps the stale response in use.
    if policy::is_error_status(status) {
        leader.failed();
        return;
    }
    let facts = RequestFacts::new("GET", &req.fields);
    let stored = policy::storable(&facts, status, &got.head.fields, t0, t1, &zone.opts).ok().and_then(|m| {
        let head = StoredHead::new(status, got.head.reason(), got.head.fields.iter(), &m.omit, t1);
        store.put(&key, &req.fields, head, got.body, m).ok()
    });
    match stored {
        Some(o) => leader.stored(o),
        None => leader.not_stored(),
    }
}

/// Sends `req` to a server of `be`, balanced, connected and retried as any
/// request (exchange.rs: the worker's pool, PROXY headers), and reads the
/// response, keeping a body of at most `max_body`.
async fn fetch(be: &Arc<BackendRt>, req: &Refetch, max_body: u64) -> Option<Fetched> {
    let (mut private, mut log) = (None, None);
    let local = req.local;
    let mut reach = Reach {
        be,
        input: SelectInput { src: req.src, path: req.head.path(), headers: &req.head.fields },
        timeouts: be.cfg.timeouts,
        ends: ClientEnds { peer: req.peer, local: move || local },
        private: &mut private,
        pick: PickState::new(None),
    };
    let t = reach.timeouts;
    let (mut slot, mut up) = reach.pick_and_connect(&mut log).await.ok()?;
    let (mut out, mut head) = (Vec::with_capacity(512), ResponseHead::default());
    let request = (&req.head, &[][..], &mut out);
    let (_, head_out) =
        reach.send(&mut slot, &mut up, request, true, true, &mut head, false, false, MAX_HEAD, &mut log).await.ok()?;
    let server = slot.server.clone();
    count_response(&server, head.status);
    server.stats.bytes_in.fetch_add(head_out, Relaxed);
    let mut rbody = BodyCursor::new(head.framing(false));
    let mut kept = Vec::new();
    let mut len = 0u64;
    loop {
        let mut piece = Vec::new();
        let chunked = rbody.framing == Framing::Chunked;
        let n = rbody.take(up.buf.data(), chunked.then_some(&mut piece)).ok()?;
        if !chunked {
            piece.extend_from_slice(&up.buf.data()[..n]);
        }
        up.buf.consume(n);
        len += piece.len() as u64;
        if len > max_body {
            // Not storable: not worth reading in the background.
            return None;
        }
        if !piece.is_empty() {
            kept.push(Bytes::from(piece));
        }
        if rbody.done {
            break;
        }
        match read_until(&mut up.stream, &mut up.buf, deadline(t.server)).await {
            Ok(_) => {}
            Err(IoFail::Closed) if rbody.framing == Framing::UntilClose => break,
            Err(_) => return None,
        }
    }
    server.stats.bytes_out.fetch_add(len, Relaxed);
    if !head.server_closes && rbody.framing != Framing::UntilClose && up.buf.is_empty() {
        exchange::park(&mut None, up, &server);
    }
    drop(slot);
    Some(Fetched { head, body: Body::new(kept) })
}
