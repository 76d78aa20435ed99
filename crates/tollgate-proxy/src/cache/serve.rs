//! The cache on the request path: what conn.rs calls at its hook points, in
//! the order cache/mod.rs draws.
//!
//! This file is a child module of `conn` (declared there with `#[path]`), so
//! it works with the connection's own pieces (its socket writes, body cursors,
//! upstream reads, the pool) rather than copies of them. The hook points:
//! 1. [`Conn::cache_request`], in `forward` once routing chose the backend and
//!    the request edits are applied: PURGE; the lookup; answers from the store
//!    (fresh, stale the client allows, stale-while-revalidate with one refresh
//!    in the background, 304 to a conditional request, HEAD from a stored GET,
//!    504 to `only-if-cached`); a wait behind another request's miss; else a
//!    [`CachePlan`] for the forward, with the validators of a revalidation set
//!    on the request.
//! 2. [`Conn::cache_response_head`], when the response head has arrived:
//!    invalidation after an unsafe method, a 304 merged into the stored
//!    response and answered from it, `stale-if-error` for a 5xx, else whether
//!    to store, and the `Cache-Status` field.
//! 3. [`CachePlan::tee`], as the body streams to the client: the body kept, up
//!    to the zone's `max_object` (past it the response goes on unstored).
//! 4. [`Conn::cache_finish`], when the exchange is over: the response stored
//!    and handed to the requests that waited for it, or `stale-if-error` when
//!    the origin could not be reached at all.
//!
//! Times are Unix seconds, as the policy takes them.

use super::{
    BodyCursor, Conn, Fail, IoFail, LogSlot, RespFail, acquire, deadline, drain, read_until, unix_now, write_within,
};
use crate::cache::coalesce::{Leader, Role};
use crate::cache::policy::{self, Decision, EntryMeta, HeadUpdate, RequestFacts, StoreMeta, Time};
use crate::cache::zone::ZoneStats;
use crate::cache::{Body, CacheStatus, Fwd, Lookup, Object, StoredHead, Zone, primary_key};
use crate::h1::{self, Chunked, Fields, Framing, Parsed, RequestHead, ResponseHead};
use crate::headers::{apply_edits, canonical_ip};
use crate::lb::{BackendRt, SelectInput, ServerRt};
use crate::rescue::ProxyError;
use crate::snapshot::Snapshot;
use crate::upstream::{self, Upstream};
use bytes::Bytes;
use http::StatusCode;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tollgate_config::{CacheUse, HeaderEdits, HeaderLookup, Timeouts};

/// A stored body up to this size goes out in the same write as its head.
const INLINE_BODY: u64 = 64 * 1024;
/// The largest response head a background refresh reads.
const MAX_HEAD: usize = 64 * 1024;

/// What the cache does with one forwarded request: made by hook 1, kept on the
/// connection until hook 4.
pub(super) struct CachePlan {
    zone: Arc<Zone>,
    key: String,
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
    /// (the others are served where the edits are at hand).
    edits: Vec<HeaderEdits>,
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
    /// Hook 3: `raw` is the next piece of the response body as it came from
    /// the server (chunked framing included).
    pub(super) fn tee(&mut self, raw: &[u8]) {
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
}

/// What [`Conn::cache_join`] made of a request.
enum Joined {
    /// Go to the origin; leading the flight, or not (a follower let down, HEAD).
    Lead(Option<Leader<Arc<Object>>>),
    /// Answered with another request's response.
    Served(Result<bool, Fail>),
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
    use crate::cache::policy::Bypass;
    match req.bypass() {
        Some(Bypass::Method) => Some((Fwd::Method, None)),
        Some(Bypass::Range) => Some((Fwd::Bypass, Some("range"))),
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

/// The stored head with the rules' response edits applied (as a forwarded
/// response gets them).
fn edited<'a>(head: &StoredHead, edits: impl Iterator<Item = &'a HeaderEdits>) -> StoredHead {
    let mut f = Fields::default();
    for (n, v) in head.iter() {
        f.append(n, v);
    }
    for e in edits {
        apply_edits(e, &mut f);
    }
    head.with_fields(f.iter())
}

/// Failures of the origin side, for `stale-if-error` (RFC 5861 section 4).
fn origin_failed(e: &ProxyError) -> bool {
    matches!(
        e,
        ProxyError::ConnectFailed
            | ProxyError::BadGateway
            | ProxyError::ServerTimeout
            | ProxyError::NoServer
            | ProxyError::QueueTimeout
    )
}

impl Conn {
    /// The scheme of the cache key (RFC 9111 section 2: the target URI).
    fn cache_scheme(&self) -> &'static str {
        "http"
    }

    fn cache_host(&self) -> String {
        self.head.fields.get(b"host").map(|h| String::from_utf8_lossy(h).into_owned()).unwrap_or_default()
    }

    /// Hook 1. Returns `Some(keep)` when the request was answered here.
    pub(super) async fn cache_request(
        &mut self,
        snap: &Snapshot,
        be: &Arc<BackendRt>,
        rule: Option<CacheUse>,
        edits: &[&HeaderEdits],
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<Option<bool>, Fail> {
        let zone = match rule {
            Some(CacheUse::Off) => None,
            Some(CacheUse::Zone(i)) => Some(i),
            None => be.cfg.cache,
        };
        let Some(zone) = zone.and_then(|i| snap.caches.get(i)).cloned() else { return Ok(None) };
        let key = primary_key(self.cache_scheme(), &self.cache_host(), self.head.target());
        if self.head.method() == "PURGE" {
            return self.cache_purge(&zone, &key, log, body).await.map(Some);
        }
        let now = unix_now();
        let looked = {
            let req = RequestFacts::new(self.head.method(), &self.head.fields);
            match bypass_reason(&req, &self.head) {
                Some(why) => Err(why),
                None => {
                    let (obj, vary_miss) = match zone.shared.store.get(&key, &self.head.fields) {
                        Lookup::Hit(o) if policy::acceptable_coding(&req, &o.meta) => (Some(o), false),
                        Lookup::Hit(_) | Lookup::VaryMiss => (None, true),
                        Lookup::UriMiss => (None, false),
                    };
                    Ok((policy::lookup_decision(&req, obj.as_deref().map(|o| &o.meta), now), obj, vary_miss))
                }
            }
        };
        let stats = &zone.shared.stats;
        let mut plan = CachePlan {
            zone: zone.clone(),
            key,
            sent: now,
            kind: Kind::Bypass,
            status: CacheStatus::default(),
            leader: None,
            tee: None,
            edits: Vec::new(),
        };
        let (decision, obj, vary_miss) = match looked {
            Ok(found) => found,
            Err((fwd, detail)) => {
                ZoneStats::bump(&stats.bypass);
                plan.status = CacheStatus { detail, ..CacheStatus::forward(fwd) };
                self.cache = Some(Box::new(plan));
                return Ok(None);
            }
        };
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
                    self.cache_refresh(&zone, be, &plan.key, &obj);
                }
                self.cache_serve(&obj.head, &obj.body, &obj.meta, &cs, edits.iter().copied(), log, body).await.map(Some)
            }
            (Decision::GatewayTimeout, _) => {
                ZoneStats::bump(&stats.only_if_cached_misses);
                let text = b"Not in the cache, and the request said only-if-cached.\n";
                self.cache_local(504, "tollgate; detail=only-if-cached", text, log, body).await.map(Some)
            }
            (Decision::Revalidate(why), Some(obj)) => {
                // One validation for concurrent requests that find the same
                // stale response; the others take its result when usable.
                let wait = be.cfg.timeouts.server;
                match self.cache_join(&zone, &plan.key, Fwd::from(why), wait, edits, log, body).await {
                    Joined::Served(r) => return r.map(Some),
                    Joined::Lead(l) => plan.leader = l,
                }
                ZoneStats::bump(&stats.revalidations);
                let client = take_conditionals(&self.head.fields);
                policy::conditional_headers(&[&obj.meta]).apply(&mut self.head.fields);
                plan.status = CacheStatus::forward(Fwd::from(why));
                plan.edits = edits.iter().map(|e| (*e).clone()).collect();
                plan.kind = Kind::Revalidate { obj, client };
                plan.sent = unix_now();
                self.cache = Some(Box::new(plan));
                Ok(None)
            }
            // A miss (the other decisions always come with a stored response).
            (_, _) => {
                let fwd = if vary_miss { Fwd::VaryMiss } else { Fwd::UriMiss };
                plan.kind = Kind::Miss;
                plan.status = CacheStatus::forward(fwd);
                match self.cache_join(&zone, &plan.key, fwd, be.cfg.timeouts.server, edits, log, body).await {
                    Joined::Served(r) => return r.map(Some),
                    Joined::Lead(l) => plan.leader = l,
                }
                ZoneStats::bump(&stats.misses);
                plan.sent = unix_now();
                self.cache = Some(Box::new(plan));
                Ok(None)
            }
        }
    }

    /// Coalescing (GET only: HEAD responses are not stored): the first request
    /// for `key` leads the flight and fetches; the others wait for it (at most
    /// `wait`) and are answered with what it stored when that suits them, else
    /// go on without leading.
    #[allow(clippy::too_many_arguments)]
    async fn cache_join(
        &mut self,
        zone: &Zone,
        key: &str,
        fwd: Fwd,
        wait: Duration,
        edits: &[&HeaderEdits],
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Joined {
        if self.head.method() != "GET" {
            return Joined::Lead(None);
        }
        let f = match zone.shared.flights.join(key) {
            Role::Leader(l) => return Joined::Lead(Some(l)),
            Role::Follower(f) => f,
        };
        ZoneStats::bump(&zone.shared.stats.coalesced);
        let Ok(obj) = f.wait(wait).await else { return Joined::Lead(None) };
        let Some(ttl) = self.cache_usable(&obj) else { return Joined::Lead(None) };
        ZoneStats::bump(&zone.shared.stats.hits);
        let cs = CacheStatus { collapsed: true, ttl: Some(ttl), ..CacheStatus::forward(fwd) };
        Joined::Served(self.cache_serve(&obj.head, &obj.body, &obj.meta, &cs, edits.iter().copied(), log, body).await)
    }

    /// Whether an object another request stored may answer this one (the
    /// variant, the coding and freshness as for any lookup); its ttl if so.
    fn cache_usable(&self, obj: &Object) -> Option<i64> {
        let now = unix_now();
        let req = RequestFacts::new(self.head.method(), &self.head.fields);
        let ok = obj.matches(&self.head.fields)
            && policy::acceptable_coding(&req, &obj.meta)
            && matches!(policy::lookup_decision(&req, Some(&obj.meta), now), Decision::Fresh | Decision::StaleAllowed);
        ok.then(|| policy::ttl(&obj.meta, now))
    }

    /// Answers the request from a stored response: a 304 when the client's own
    /// conditions hold (RFC 9111 section 4.3.2), the head alone for HEAD, else
    /// the head with `Age` and the stored body.
    #[allow(clippy::too_many_arguments)]
    async fn cache_serve<'e>(
        &mut self,
        head: &StoredHead,
        stored: &Body,
        meta: &EntryMeta,
        cs: &CacheStatus,
        edits: impl Iterator<Item = &'e HeaderEdits> + Clone,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        let now = unix_now();
        let (not_modified, is_head) = {
            let req = RequestFacts::new(self.head.method(), &self.head.fields);
            (policy::client_wants_304(&req, meta), req.is_head())
        };
        let close = self.head.close || !body.done || *self.stop.borrow();
        let connection = if close {
            Some("close")
        } else if self.head.minor == 0 {
            Some("keep-alive")
        } else {
            None
        };
        let nm;
        let head = if not_modified {
            nm = policy::not_modified_head(head, now);
            &nm
        } else {
            head
        };
        let ed;
        let head = if edits.clone().next().is_none() {
            head
        } else {
            ed = edited(head, edits);
            &ed
        };
        let status = head.status;
        self.out.clear();
        head.write_response(&mut self.out, policy::age_header(meta, now), stored.len(), Some(&cs.value()), connection);
        let head_bytes = self.out.len() as u64;
        let with_body = !(not_modified || is_head || status < 200 || status == 204 || status == 304);
        let idle = self.fe().timeouts.client;
        let mut sent;
        if with_body && stored.len() <= INLINE_BODY {
            for s in stored.segments() {
                self.out.extend_from_slice(s);
            }
            sent = write_within(&mut self.stream, &self.out, idle).await;
        } else {
            sent = write_within(&mut self.stream, &self.out, idle).await;
            for s in stored.segments().iter().filter(|_| with_body) {
                if sent.is_err() {
                    break;
                }
                sent = write_within(&mut self.stream, s, idle).await;
            }
        }
        let body_bytes = if with_body { stored.len() } else { 0 };
        self.sent_status = status;
        self.sent_bytes = head_bytes + body_bytes;
        if let Some((_, r)) = log.as_mut() {
            r.status = status;
            r.bytes = body_bytes;
        }
        match sent {
            Ok(()) => Ok(!close),
            Err(IoFail::Timeout) => Err(Fail::Abort("client-timeout")),
            Err(_) => Err(Fail::Abort("client-aborted")),
        }
    }

    /// A short response made by the cache itself (PURGE, 504 to only-if-cached).
    async fn cache_local(
        &mut self,
        status: u16,
        cache_status: &str,
        text: &[u8],
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        let close = self.head.close || !body.done;
        self.out.clear();
        let fields: [(&str, &[u8]); 3] = [
            ("content-type", b"text/plain; charset=utf-8"),
            ("cache-control", b"no-store"),
            ("cache-status", cache_status.as_bytes()),
        ];
        h1::write_local_response(&mut self.out, status, &fields, text, close);
        self.sent_status = status;
        self.sent_bytes = self.out.len() as u64;
        if let Some((_, r)) = log.as_mut() {
            r.status = status;
            r.bytes = text.len() as u64;
        }
        let idle = self.fe().timeouts.client;
        match write_within(&mut self.stream, &self.out, idle).await {
            Ok(()) => Ok(!close),
            Err(_) => Err(Fail::Abort("client-aborted")),
        }
    }

    /// `PURGE`: drops every stored variant of the target URI; 200 when there
    /// was one, 404 when not; 403 from an address not in `purge_from`.
    async fn cache_purge(
        &mut self,
        zone: &Zone,
        key: &str,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        if !zone.allows_purge(self.peer.ip()) {
            let body = Some("PURGE is not allowed from this address.\n".to_string());
            return Err(ProxyError::Denied { status: StatusCode::FORBIDDEN, body }.into());
        }
        match zone.shared.store.purge(key) {
            0 => self.cache_local(404, "tollgate; detail=purge", b"Nothing stored for this URI.\n", log, body).await,
            n => {
                let text = format!("Purged {n} stored response(s).\n");
                self.cache_local(200, "tollgate; detail=purge", text.as_bytes(), log, body).await
            }
        }
    }

    /// Stale-while-revalidate (RFC 5861 section 3): one refresh of `obj` in the
    /// background, on this worker, unless one is in flight already.
    fn cache_refresh(&self, zone: &Arc<Zone>, be: &Arc<BackendRt>, key: &str, obj: &Arc<Object>) {
        let Role::Leader(leader) = zone.shared.flights.join(key) else { return };
        let req = Refetch::of(&self.head, &obj.meta);
        let src = canonical_ip(self.peer.ip());
        tokio::spawn(refresh(zone.clone(), be.clone(), key.to_owned(), obj.clone(), req, src, leader));
    }

    /// Section 4.4: an unsafe method's success drops the stored responses of
    /// its target URI (and of `Location` / `Content-Location` on the same origin).
    fn cache_invalidate(&self, zone: &Zone) {
        let method = self.head.method();
        if !policy::is_unsafe(method) {
            return;
        }
        let host = self.cache_host();
        let keys = policy::invalidations(
            method,
            self.resp.status,
            self.cache_scheme(),
            &host,
            self.head.target(),
            &self.resp.fields,
        );
        let n: usize = keys.iter().map(|k| zone.shared.store.purge(k)).sum();
        zone.shared.stats.invalidated.fetch_add(n as u64, Relaxed);
    }

    /// Hook 2, `self.resp` holding the response head. Returns `Some((keep,
    /// reusable))` when the client was answered from the store (the response
    /// was read to its end, and its connection can be `reusable`d or not).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn cache_response_head(
        &mut self,
        up: &mut Upstream,
        server: &ServerRt,
        timeouts: &Timeouts,
        edits: &[&HeaderEdits],
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<Option<(bool, bool)>, Fail> {
        let Some(mut plan) = self.cache.take() else { return Ok(None) };
        let t1 = unix_now();
        let zone = plan.zone.clone();
        self.cache_invalidate(&zone);
        if matches!(plan.kind, Kind::Revalidate { .. })
            && let Kind::Revalidate { obj, client } = std::mem::replace(&mut plan.kind, Kind::Replaced)
        {
            restore_conditionals(&mut self.head.fields, client);
            let status = self.resp.status;
            plan.status.fwd_status = Some(status);
            if status == 304 && !policy::select_for_304(&self.resp.fields, &[&obj.meta]).is_empty() {
                ZoneStats::bump(&zone.shared.stats.not_modified);
                count_response(server, status);
                let (head, meta) = policy::revalidated(&obj.head, self.resp.fields.iter(), plan.sent, t1, &zone.opts);
                let reusable = !self.resp.server_closes && up.buf.is_empty();
                let cs = CacheStatus { ttl: Some(policy::ttl(&meta, t1)), ..plan.status };
                let updated = zone.shared.store.update(&plan.key, &obj, head.clone(), meta.clone());
                if let (Some(o), Some(l)) = (&updated, plan.leader.take()) {
                    l.stored(o.clone());
                }
                let keep = match updated {
                    Some(o) => self.cache_serve(&o.head, &o.body, &o.meta, &cs, edits.iter().copied(), log, body).await,
                    None => self.cache_serve(&head, &obj.body, &meta, &cs, edits.iter().copied(), log, body).await,
                }?;
                return Ok(Some((keep, reusable)));
            }
            if status == 304 {
                // Section 4.3.3: a 304 that selects no stored response; the
                // request again, with the client's own conditions.
                count_response(server, status);
                self.cache_resend(up, server, timeouts).await?;
            } else if policy::is_error_status(status) && self.cache_stale_ok(&obj.meta) {
                count_response(server, status);
                let mut rest = BodyCursor::new(self.resp.framing(self.head.method() == "HEAD"));
                let reusable = !self.resp.server_closes && drain(up, &mut rest).await;
                let keep = self.cache_stale(&zone, &obj, plan.status, edits.iter().copied(), log, body).await?;
                return Ok(Some((keep, reusable)));
            }
        }
        if !matches!(plan.kind, Kind::Bypass) {
            self.cache_decide(&mut plan, t1);
        }
        if plan.tee.is_none()
            && let Some(l) = plan.leader.take()
        {
            l.not_stored();
        }
        self.resp.fields.append(b"cache-status", plan.status.value().as_bytes());
        self.cache = Some(plan);
        Ok(None)
    }

    /// Whether (and how) the forwarded response is stored: a GET's by
    /// [`policy::storable`] and the zone's `max_object`; a HEAD's 200 updates
    /// or drops the stored GET response (RFC 9111 section 4.3.5).
    fn cache_decide(&mut self, plan: &mut CachePlan, t1: Time) {
        let status = self.resp.status;
        let zone = &plan.zone;
        if self.head.method() == "HEAD" {
            if status != 200 {
                return;
            }
            let store = &zone.shared.store;
            let Lookup::Hit(obj) = store.get(&plan.key, &self.head.fields) else { return };
            match policy::head_update(&self.resp.fields, &obj.meta, obj.body.len()) {
                HeadUpdate::Update => {
                    let (head, meta) =
                        policy::revalidated(&obj.head, self.resp.fields.iter(), plan.sent, t1, &zone.opts);
                    store.update(&plan.key, &obj, head, meta);
                }
                HeadUpdate::Invalidate => {
                    store.purge(&plan.key);
                }
            }
            return;
        }
        let decision = {
            let req = RequestFacts::new(self.head.method(), &self.head.fields);
            policy::storable(&req, status, &self.resp.fields, plan.sent, t1, &zone.opts)
        };
        let framing = self.resp.framing(false);
        match decision {
            Ok(_) if matches!(framing, Framing::Length(n) if n > zone.cfg.max_object) => {
                plan.status.detail = Some("too-large");
            }
            Ok(m) => {
                let head = StoredHead::new(status, self.resp.reason(), self.resp.fields.iter(), &m.omit, t1);
                plan.tee = Some(Tee::new(head, m, framing, zone.cfg.max_object));
                plan.status.stored = true;
            }
            Err(e) => plan.status.detail = Some(e.as_str()),
        }
    }

    /// Sends the request again on the same connection (after a 304 that
    /// cannot be used) and reads the new response head.
    async fn cache_resend(&mut self, up: &mut Upstream, server: &ServerRt, timeouts: &Timeouts) -> Result<(), Fail> {
        if self.resp.server_closes || !up.buf.is_empty() {
            return Err(ProxyError::BadGateway.into());
        }
        self.out.clear();
        self.head.write_upstream(&mut self.out, server.addr());
        if write_within(&mut up.stream, &self.out, timeouts.server).await.is_err() {
            return Err(ProxyError::BadGateway.into());
        }
        self.read_response_head(up, timeouts.server).await.map_err(RespFail::into_fail)
    }

    fn cache_stale_ok(&self, meta: &EntryMeta) -> bool {
        let req = RequestFacts::new(self.head.method(), &self.head.fields);
        policy::stale_if_error(&req, meta, unix_now())
    }

    /// RFC 5861 section 4: the stored response, stale, in place of an error.
    async fn cache_stale<'e>(
        &mut self,
        zone: &Zone,
        obj: &Object,
        status: CacheStatus,
        edits: impl Iterator<Item = &'e HeaderEdits> + Clone,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        ZoneStats::bump(&zone.shared.stats.stale);
        let cs = CacheStatus {
            fwd: Some(Fwd::Stale),
            ttl: Some(policy::ttl(&obj.meta, unix_now())),
            detail: Some("stale-if-error"),
            ..status
        };
        if let Some((_, r)) = log.as_mut() {
            r.termination = Some("stale-if-error");
        }
        self.cache_serve(&obj.head, &obj.body, &obj.meta, &cs, edits, log, body).await
    }

    /// Hook 4, with what `forward` returned: stores a complete response kept
    /// by the tee (and hands it to the requests that waited), or answers a
    /// revalidation whose origin could not be reached with the stale response
    /// when `stale-if-error` allows.
    pub(super) async fn cache_finish(
        &mut self,
        result: Result<bool, Fail>,
        log: &mut LogSlot,
        body: &BodyCursor,
    ) -> Result<bool, Fail> {
        let Some(mut plan) = self.cache.take() else { return result };
        match result {
            Ok(keep) => {
                if let Some(tee) = plan.tee.take() {
                    let store = &plan.zone.shared.store;
                    let put = store.put(&plan.key, &self.head.fields, tee.head, Body::new(tee.segments), tee.meta);
                    match (put, plan.leader.take()) {
                        (Ok(obj), Some(l)) => l.stored(obj),
                        (Err(_), Some(l)) => l.not_stored(),
                        (_, None) => {}
                    }
                }
                Ok(keep)
            }
            Err(Fail::Respond(e)) if origin_failed(&e) => {
                if let Kind::Revalidate { obj, client } = plan.kind {
                    restore_conditionals(&mut self.head.fields, client);
                    if self.cache_stale_ok(&obj.meta) {
                        let zone = plan.zone.clone();
                        return self.cache_stale(&zone, &obj, plan.status, plan.edits.iter(), log, body).await;
                    }
                }
                Err(Fail::Respond(e))
            }
            Err(e) => Err(e),
        }
    }
}

/// Counts a response the cache consumed in the server's statistics (the data
/// path counts those it forwards).
fn count_response(server: &ServerRt, status: u16) {
    server.observe(status / 100 != 5);
    crate::stats::count_status(&server.stats.responses, status);
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
    fields: OwnedFields,
    target: String,
    path: String,
    cond: policy::Conditional,
}

impl Refetch {
    fn of(head: &RequestHead, meta: &EntryMeta) -> Refetch {
        let kept = head
            .fields
            .iter()
            .filter(|(n, _)| !h1::is_hop_by_hop(n) && !NOT_REFETCHED.iter().any(|x| x.eq_ignore_ascii_case(n)));
        Refetch {
            fields: OwnedFields(kept.map(|(n, v)| (Box::from(n), Box::from(v))).collect()),
            target: head.target().to_owned(),
            path: head.path().to_owned(),
            cond: policy::conditional_headers(&[meta]),
        }
    }

    fn write(&self, out: &mut Vec<u8>, server: SocketAddr) {
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let mut host = false;
        let cond = [("if-none-match", &self.cond.if_none_match), ("if-modified-since", &self.cond.if_modified_since)];
        let cond = cond.iter().filter_map(|(n, v)| Some((n.as_bytes(), v.as_deref()?.as_bytes())));
        for (n, v) in self.fields.0.iter().map(|(n, v)| (&n[..], &v[..])).chain(cond) {
            host |= n.eq_ignore_ascii_case(b"host");
            for part in [n, b": ", v, b"\r\n"] {
                out.extend_from_slice(part);
            }
        }
        if !host {
            out.extend_from_slice(format!("host: {server}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
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
    src: IpAddr,
    leader: Leader<Arc<Object>>,
) {
    let stats = &zone.shared.stats;
    let store = &zone.shared.store;
    ZoneStats::bump(&stats.revalidations);
    let t0 = unix_now();
    let Some(got) = fetch(&be, &req, src, zone.cfg.max_object).await else {
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

/// Sends `req` to a server of `be` (balanced as any request, through the
/// worker's pool) and reads the response, keeping a body of at most `max_body`.
async fn fetch(be: &Arc<BackendRt>, req: &Refetch, src: IpAddr, max_body: u64) -> Option<Fetched> {
    let t = be.cfg.timeouts;
    let input = SelectInput { src, path: &req.path, headers: &req.fields };
    let slot = acquire(be, &input, &mut Vec::new(), t.queue).await.ok()?;
    let server = slot.server.clone();
    let mut out = Vec::with_capacity(512);
    req.write(&mut out, server.addr());
    let mut head = ResponseHead::default();
    let mut pooled = upstream::checkout(server.addr());
    let mut up = loop {
        let reused = pooled.is_some();
        let mut up = match pooled.take() {
            Some(up) => up,
            None => match upstream::connect(server.addr(), t.connect).await {
                Ok(up) => {
                    server.stats.connections_opened.fetch_add(1, Relaxed);
                    up
                }
                Err(_) => {
                    server.stats.connect_errors.fetch_add(1, Relaxed);
                    server.observe(false);
                    return None;
                }
            },
        };
        match send_for_head(&mut up, &out, &mut head, t.server).await {
            Some(()) => break up,
            // A pooled connection the server closed meanwhile: once more, on a new one.
            None if reused => upstream::forget(server.addr()),
            None => {
                server.observe(false);
                return None;
            }
        }
    };
    count_response(&server, head.status);
    server.stats.bytes_in.fetch_add(out.len() as u64, Relaxed);
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
        upstream::checkin(up);
    }
    drop(slot);
    Some(Fetched { head, body: Body::new(kept) })
}

/// Writes `request` and reads the final response head into `head`; `None` on
/// any failure (the caller decides whether to try again).
async fn send_for_head(up: &mut Upstream, request: &[u8], head: &mut ResponseHead, idle: Duration) -> Option<()> {
    write_within(&mut up.stream, request, idle).await.ok()?;
    loop {
        if !up.buf.is_empty() {
            match h1::parse_response(up.buf.data(), head, MAX_HEAD).ok()? {
                Parsed::Complete((), len) => {
                    up.buf.consume(len);
                    if head.status >= 200 {
                        return Some(());
                    }
                    continue;
                }
                Parsed::Partial if up.buf.is_full() && !up.buf.grow(MAX_HEAD + 1) => return None,
                Parsed::Partial => {}
            }
        }
        read_until(&mut up.stream, &mut up.buf, deadline(idle)).await.ok()?;
    }
}
