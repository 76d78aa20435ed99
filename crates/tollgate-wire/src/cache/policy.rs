//! RFC 9111 for a shared cache: the pure decisions, with no I/O and no clock.
//!
//! Times are Unix seconds ([`Time`]); the caller passes `now`, the time a
//! request went to the origin (`request_time`) and the time its response head
//! came back (`response_time`), as section 4.2.3 names them.
//!
//! The order a data path asks in (cache/mod.rs draws it): [`RequestFacts::new`]
//! once per request; [`RequestFacts::bypass`]; the store's lookup, then
//! [`lookup_decision`]; on a revalidation [`conditional_headers`], then either
//! [`select_for_304`] and [`revalidated`] for a 304, or [`storable`] for a full
//! response; [`client_wants_304`] before answering from the cache; [`age_header`]
//! for the `Age` sent; [`invalidations`] after an unsafe method.

use super::control::CacheControl;
use super::head::{self, StoredHead, parse_date};
use super::vary::{self, Vary};
use tollgate_config::HeaderLookup;

/// Unix seconds.
pub type Time = u64;

/// The largest `Age` sent (RFC 9111 section 1.2.2: 2^31 on overflow).
pub const AGE_MAX: u64 = 1 << 31;

/// Choices RFC 9111 leaves to the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Heuristic freshness as a share of the time since `Last-Modified`, in
    /// percent (section 4.2.2: "a typical setting of this fraction might be 10%").
    pub heuristic_percent: u64,
    /// The most heuristic freshness given, in seconds. One day, as Traffic
    /// Server's `heuristic_max_lifetime`: a file untouched for ten years is not
    /// thereby fresh for a year.
    pub heuristic_max: u64,
    /// Store responses carrying `Set-Cookie`. RFC 9111 allows storing them (a
    /// cookie is not a reason not to store, RFC 6265 section 7.2 leaves it to
    /// `Cache-Control`), but an application that sets a session cookie on a
    /// page it also marks cacheable hands one user's session to the next
    /// (issue 33). Default: off, as nginx (`proxy_cache` skips responses with
    /// `Set-Cookie`) and Varnish's builtin VCL: such a response is forwarded
    /// unstored (`detail=set-cookie`). On: the response is stored, but never its
    /// `Set-Cookie` lines (nor those of a 304 that freshens it): only the client
    /// whose request reached the origin gets them. `no-cache="set-cookie"` or
    /// `private="set-cookie"` from the origin let the response be stored without
    /// the cookie either way.
    pub store_set_cookie: bool,
    /// The targeted cache-control field this cache heeds (RFC 9213), lower
    /// case: `cdn-cache-control` unless the zone names another or none. When
    /// a response has it with a valid, non-empty value, its directives are
    /// this cache's and `Cache-Control` and `Expires` are ignored
    /// ([`response_directives`]).
    pub targeted: Option<Box<str>>,
    /// The zone's `stale-if-error` window in seconds, for stored responses
    /// that give none (RFC 5861 section 4 lets a cache be configured so;
    /// RFC 9111 section 4.2.4 allows a stale response "in accordance with an
    /// out-of-band contract"). 0: none ([`stale_if_error`]).
    pub stale_if_error: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            heuristic_percent: 10,
            heuristic_max: 86_400,
            store_set_cookie: false,
            targeted: Some(tollgate_config::CacheZone::DEFAULT_TARGETED.into()),
            stale_if_error: 0,
        }
    }
}

/// The response directives this cache goes by: those of the targeted field
/// ([`Options::targeted`], RFC 9213 section 2.2) when the response has it
/// valid and non-empty (targeted.rs), else `Cache-Control`'s.
pub fn response_directives(resp: &dyn HeaderLookup, opts: &Options) -> CacheControl {
    opts.targeted
        .as_deref()
        .and_then(|name| super::targeted::directives(resp, name))
        .unwrap_or_else(|| CacheControl::of(resp))
}

// ---------------------------------------------------------------------------
// Requests

/// What a request asks of the cache, read once per request.
pub struct RequestFacts<'a> {
    pub method: &'a str,
    pub headers: &'a dyn HeaderLookup,
    pub cc: CacheControl,
    /// `Pragma: no-cache` in a request without `Cache-Control`: treated as
    /// `Cache-Control: no-cache` (RFC 9111 section 5.4 deprecates Pragma; HTTP/1.0
    /// clients still send it, and honouring it only costs a revalidation).
    pragma_no_cache: bool,
}

/// Why a request goes to the origin without looking in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bypass {
    /// Only GET and HEAD are answered from the cache (section 4: "the request
    /// method ... allows it to be used"); HEAD from a stored GET.
    Method,
    /// `If-Match` / `If-Unmodified-Since`: preconditions meant for the origin
    /// (section 4.3.2: a cache must not evaluate those it cannot).
    Precondition,
}

impl<'a> RequestFacts<'a> {
    pub fn new(method: &'a str, headers: &'a dyn HeaderLookup) -> Self {
        let cc = CacheControl::of(headers);
        let mut has_cc = false;
        headers.any_value("cache-control", &mut |_| {
            has_cc = true;
            true
        });
        let mut pragma_no_cache = false;
        if !has_cc {
            headers.any_value("pragma", &mut |v| {
                pragma_no_cache |= v.split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"no-cache"));
                pragma_no_cache
            });
        }
        RequestFacts { method, headers, cc, pragma_no_cache }
    }

    /// Request `no-cache` (section 5.2.1.4): a stored response must be validated.
    pub fn no_cache(&self) -> bool {
        self.cc.no_cache() || self.pragma_no_cache
    }

    pub fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// Whether the request must skip the cache, and why.
    pub fn bypass(&self) -> Option<Bypass> {
        if self.method != "GET" && self.method != "HEAD" {
            return Some(Bypass::Method);
        }
        if has(self.headers, "if-match") || has(self.headers, "if-unmodified-since") {
            return Some(Bypass::Precondition);
        }
        None
    }
}

pub(crate) fn has(h: &dyn HeaderLookup, name: &str) -> bool {
    h.any_value(name, &mut |_| true)
}

pub(crate) fn first(h: &dyn HeaderLookup, name: &str) -> Option<Vec<u8>> {
    let mut out = None;
    h.any_value(name, &mut |v| {
        out = Some(v.to_vec());
        true
    });
    out
}

// ---------------------------------------------------------------------------
// Storing (section 3)

/// What is kept beside a stored response: everything the hit path needs without
/// reading header fields again. Recomputed after each 304 ([`revalidated`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntryMeta {
    pub status: u16,
    /// Section 4.2.3: when the request that got this response was sent, and
    /// when its response arrived (the last validation's, after a 304).
    pub request_time: Time,
    pub response_time: Time,
    /// `Date`, or `response_time` when it has none or an invalid one (RFC 9110
    /// section 6.6.1).
    pub date: Time,
    /// Section 4.2.3's `corrected_initial_age`.
    pub corrected_initial_age: u64,
    /// Section 4.2.1.
    pub freshness_lifetime: u64,
    /// The lifetime is a heuristic one (section 4.2.2).
    pub heuristic: bool,
    /// `META_*` bits (the disk tier stores them as they are).
    pub flags: u8,
    /// RFC 5861 windows, in seconds past freshness (0: none).
    pub stale_while_revalidate: u32,
    pub stale_if_error: u32,
    /// The `ETag` value as received (`"x"` or `W/"x"`).
    pub etag: Option<Box<str>>,
    /// The `Last-Modified` value as received, when it is a valid date, and that date.
    pub last_modified: Option<(Box<str>, Time)>,
    /// `Content-Encoding` (lower case), for the Accept-Encoding check.
    pub content_encoding: Option<Box<str>>,
}

/// Stale responses must not be served without validation: must-revalidate
/// (section 5.2.2.2), proxy-revalidate (5.2.2.8), s-maxage (5.2.2.10).
const META_NO_STALE: u8 = 1;
/// Unqualified response no-cache (section 5.2.2.4): validate on every use.
const META_NO_CACHE: u8 = 2;
/// `immutable` (RFC 8246).
const META_IMMUTABLE: u8 = 4;

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStorable {
    /// Only responses to GET are stored (section 3: the method must be
    /// understood and cacheable; HEAD is answered from a stored GET).
    Method,
    /// 1xx (not final), 304 (updates, section 4.3.4), 206 (ranges are not
    /// combined or served yet, sections 3.3 and 3.4).
    Status,
    /// Response `no-store` (section 5.2.2.5).
    NoStore,
    /// Request `no-store` (section 5.2.1.5).
    RequestNoStore,
    /// Unqualified `private` (section 5.2.2.7): a shared cache must not store.
    Private,
    /// A request with `Authorization` and a response without `public`,
    /// `s-maxage` or `must-revalidate` (section 3.5).
    Authorization,
    /// `must-understand` with a status this cache does not implement (section 5.2.2.3).
    MustUnderstand,
    /// `Vary: *` can never be selected (section 4.1).
    VaryStar,
    /// No explicit freshness, no `public` and a status not heuristically
    /// cacheable (section 3, last bullet).
    NotCacheable,
    /// Nothing would ever be served: stale at once, no validator to revalidate
    /// with, no `stale-if-error`.
    Useless,
    /// `Set-Cookie` with [`Options::store_set_cookie`] off.
    SetCookie,
}

impl NotStorable {
    /// A word for logs and Cache-Status `detail`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::NoStore => "no-store",
            NotStorable::RequestNoStore => "request-no-store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::MustUnderstand => "must-understand",
            NotStorable::VaryStar => "vary-star",
            NotStorable::NotCacheable => "not-cacheable",
            NotStorable::Useless => "no-freshness-no-validator",
            NotStorable::SetCookie => "set-cookie",
        }
    }
}

/// What [`storable`] found: the metadata, the response's `Vary`, and the fields
/// not to store (qualified `no-cache` and `private`, sections 5.2.2.4 and 5.2.2.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreMeta {
    pub meta: EntryMeta,
    pub vary: Vary,
    pub omit: Vec<Box<str>>,
}

/// Status codes heuristically cacheable (RFC 9110 section 15.1), but 206:
/// Tollgate does not store partial content yet.
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(status, 200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501)
}

/// Status codes whose caching requirements this cache implements, for
/// `must-understand` (section 5.2.2.3): the final codes RFC 9110 section 15
/// defines, but 206 (ranges) and 304 (never stored).
pub fn understood(status: u16) -> bool {
    matches!(status, 200..=205 | 300..=303 | 305 | 307 | 308 | 400..=418 | 421 | 422 | 426 | 500..=505)
}

/// Section 3: whether a response may be stored, and with what.
///
/// `complete` bodies only: the caller stores after the whole body arrived
/// (section 3.3: an incomplete response is not a full response; see
/// [`body_complete`]).
pub fn storable(
    req: &RequestFacts<'_>,
    status: u16,
    resp: &dyn HeaderLookup,
    request_time: Time,
    response_time: Time,
    opts: &Options,
) -> Result<StoreMeta, NotStorable> {
    // Section 3: "the request method is understood by the cache" and cacheable;
    // only GET is stored (section 9.3.1 of RFC 9110 defines GET responses as
    // cacheable; HEAD responses update stored GETs, section 4.3.5).
    if req.method != "GET" {
        return Err(NotStorable::Method);
    }
    // Section 3: "the response status code is final"; 206 and 304 need the cache
    // to understand them (and 304 is never stored, it updates).
    if status < 200 || status == 206 || status == 304 {
        return Err(NotStorable::Status);
    }
    let cc = response_directives(resp, opts);
    // Section 5.2.1.5: request no-store.
    if req.cc.no_store() {
        return Err(NotStorable::RequestNoStore);
    }
    // Section 5.2.2.3: must-understand limits storing to caches that implement
    // the status code, and then no-store is to be ignored.
    if cc.must_understand() {
        if !understood(status) {
            return Err(NotStorable::MustUnderstand);
        }
    } else if cc.no_store() {
        // Section 5.2.2.5.
        return Err(NotStorable::NoStore);
    }
    // Section 5.2.2.7: a shared cache must not store a private response.
    if cc.private_unqualified() {
        return Err(NotStorable::Private);
    }
    // Section 3.5: Authorization.
    if has(req.headers, "authorization") && !(cc.public() || cc.s_maxage.is_some() || cc.must_revalidate()) {
        return Err(NotStorable::Authorization);
    }
    let vary = Vary::of(resp);
    if vary == Vary::Star {
        return Err(NotStorable::VaryStar);
    }
    // Section 3, last bullet: explicit freshness (Expires, max-age, s-maxage),
    // public, or a heuristically cacheable status. (Qualified `private` does not
    // make a response cacheable for a shared cache.)
    // RFC 9213 section 2.2: with a targeted field, Expires is ignored too.
    let explicit = cc.s_maxage.is_some() || cc.max_age.is_some() || (!cc.targeted && has(resp, "expires"));
    if !(explicit || cc.public() || heuristically_cacheable(status)) {
        return Err(NotStorable::NotCacheable);
    }
    let mut omit: Vec<Box<str>> = cc.no_cache_fields.clone();
    for f in &cc.private_fields {
        if !omit.contains(f) {
            omit.push(f.clone());
        }
    }
    if has(resp, "set-cookie") && !omit.iter().any(|o| &**o == "set-cookie") {
        if !opts.store_set_cookie {
            return Err(NotStorable::SetCookie);
        }
        // Stored, but the cookie is this client's alone.
        omit.push("set-cookie".into());
    }
    let meta = EntryMeta::compute(status, resp, &cc, age_value(resp), request_time, response_time, opts);
    if meta.freshness_lifetime == 0
        && meta.etag.is_none()
        && meta.last_modified.is_none()
        && meta.stale_if_error == 0
        && meta.stale_while_revalidate == 0
    {
        return Err(NotStorable::Useless);
    }
    Ok(StoreMeta { meta, vary, omit })
}

/// Section 3.3: whether a received body is the whole response body. A body
/// delimited by the connection closing counts as complete only when it closed
/// cleanly; a chunked one when its last chunk came; one with a length when
/// that many bytes came.
pub fn body_complete(framing: crate::h1::Framing, received: u64, ended: bool) -> bool {
    use crate::h1::Framing;
    match framing {
        Framing::Empty => true,
        Framing::Length(n) => received == n,
        Framing::Chunked | Framing::UntilClose => ended,
    }
}

/// Section 5.1: the `Age` of a response: the first member of the first line;
/// anything but 1*DIGIT is ignored (0). Values past 2^31 are 2^31.
pub fn age_value(resp: &dyn HeaderLookup) -> u64 {
    first(resp, "age").map_or(0, |v| age_of_value(&v))
}

fn age_of_value(v: &[u8]) -> u64 {
    let member = v.split(|b| *b == b',').next().unwrap_or_default().trim_ascii();
    super::control::delta_seconds(member).map_or(0, u64::from)
}

impl EntryMeta {
    /// Computes the metadata of a response (or of a stored response updated by
    /// a 304: its merged fields, the 304's `Age` and the validation's times).
    pub fn compute(
        status: u16,
        resp: &dyn HeaderLookup,
        cc: &CacheControl,
        age_value: u64,
        request_time: Time,
        response_time: Time,
        opts: &Options,
    ) -> EntryMeta {
        // RFC 9110 section 6.6.1: no (valid) Date -> the time received.
        let date = first(resp, "date").and_then(|d| parse_date(&d)).unwrap_or(response_time);
        // Section 4.2.3.
        let apparent_age = response_time.saturating_sub(date);
        let response_delay = response_time.saturating_sub(request_time);
        let corrected_age_value = age_value.saturating_add(response_delay);
        let corrected_initial_age = apparent_age.max(corrected_age_value).min(AGE_MAX);
        let last_modified = first(resp, "last-modified").and_then(|v| {
            let t = parse_date(&v)?;
            Some((String::from_utf8_lossy(&v).trim().into(), t))
        });
        let (freshness_lifetime, heuristic) =
            freshness_lifetime(status, cc, resp, date, last_modified.as_ref().map(|l| l.1), opts);
        let mut flags = 0;
        // Section 5.2.2.10: s-maxage also implies proxy-revalidate.
        if cc.must_revalidate() || cc.proxy_revalidate() || cc.s_maxage.is_some() {
            flags |= META_NO_STALE;
        }
        if cc.no_cache_unqualified() {
            flags |= META_NO_CACHE;
        }
        if cc.immutable() {
            flags |= META_IMMUTABLE;
        }
        let etag = first(resp, "etag").and_then(|v| {
            let v = v.trim_ascii();
            parse_etag(v).map(|_| String::from_utf8_lossy(v).into())
        });
        let content_encoding = first(resp, "content-encoding").map(|v| {
            let v = String::from_utf8_lossy(v.trim_ascii()).to_ascii_lowercase();
            v.into_boxed_str()
        });
        EntryMeta {
            status,
            request_time,
            response_time,
            date,
            corrected_initial_age,
            freshness_lifetime,
            heuristic,
            flags,
            stale_while_revalidate: cc.stale_while_revalidate.unwrap_or(0),
            stale_if_error: cc.stale_if_error.unwrap_or(0),
            etag,
            last_modified,
            content_encoding,
        }
    }

    /// must-revalidate, proxy-revalidate or s-maxage: never served stale.
    pub fn no_stale(&self) -> bool {
        self.flags & META_NO_STALE != 0
    }
    /// Unqualified response `no-cache`: validated before every use.
    pub fn no_cache(&self) -> bool {
        self.flags & META_NO_CACHE != 0
    }
    pub fn immutable(&self) -> bool {
        self.flags & META_IMMUTABLE != 0
    }
}

/// Section 4.2.1: the freshness lifetime of a shared cache, and whether it is a
/// heuristic one: `s-maxage`, else `max-age`, else `Expires` - `Date`, else
/// (section 4.2.2) a share of the time since `Last-Modified` when the status is
/// heuristically cacheable or the response is `public`.
pub fn freshness_lifetime(
    status: u16,
    cc: &CacheControl,
    resp: &dyn HeaderLookup,
    date: Time,
    last_modified: Option<Time>,
    opts: &Options,
) -> (u64, bool) {
    if let Some(s) = cc.s_maxage {
        return (s as u64, false);
    }
    if let Some(m) = cc.max_age {
        return (m as u64, false);
    }
    // Section 4.2.1: of several Expires lines, the first; section 5.3: an invalid
    // date (notably "0") is in the past. Not with a targeted field (RFC 9213
    // section 2.2).
    if let Some(e) = first(resp, "expires").filter(|_| !cc.targeted) {
        return (parse_date(&e).map_or(0, |t| t.saturating_sub(date)), false);
    }
    // Section 4.2.2: heuristics only without explicit expiration, and only for
    // heuristically cacheable statuses or public responses.
    if heuristically_cacheable(status) || cc.public() {
        if let Some(lm) = last_modified.filter(|lm| *lm <= date) {
            return (((date - lm).saturating_mul(opts.heuristic_percent) / 100).min(opts.heuristic_max), true);
        }
        return (0, true);
    }
    (0, false)
}

/// Section 4.2.3: `current_age` at `now`.
pub fn current_age(meta: &EntryMeta, now: Time) -> u64 {
    let resident_time = now.saturating_sub(meta.response_time);
    meta.corrected_initial_age.saturating_add(resident_time)
}

/// Section 5.1: the `Age` value to send with a stored response at `now`
/// (at most 2^31, section 1.2.2).
pub fn age_header(meta: &EntryMeta, now: Time) -> u64 {
    current_age(meta, now).min(AGE_MAX)
}

/// Freshness left at `now` in seconds; negative once stale (Cache-Status `ttl`,
/// RFC 9211 section 2.6).
pub fn ttl(meta: &EntryMeta, now: Time) -> i64 {
    meta.freshness_lifetime as i64 - current_age(meta, now) as i64
}

/// Section 4.2: fresh when the lifetime exceeds the current age.
pub fn is_fresh(meta: &EntryMeta, now: Time) -> bool {
    meta.freshness_lifetime > current_age(meta, now)
}

// ---------------------------------------------------------------------------
// Serving (section 4)

/// What to do with a request, given what the store found for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing stored matches: forward (and maybe store the response).
    Miss,
    /// Serve the stored response: fresh and acceptable to the request.
    Fresh,
    /// Serve the stored response though stale: the client allowed it with
    /// `max-stale` (section 5.2.1.2).
    StaleAllowed,
    /// Serve the stale response now and revalidate it in the background, once
    /// (RFC 5861 section 3).
    StaleWhileRevalidate,
    /// Validate with the origin first (section 4.3.1), with
    /// [`conditional_headers`]. If the origin fails, [`stale_if_error`] says
    /// whether the stored response may still be served.
    Revalidate(Why),
    /// `only-if-cached` and nothing servable: 504 (section 5.2.1.7).
    GatewayTimeout,
}

/// Why a stored response needs validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Past its freshness lifetime (section 4.2).
    Stale,
    /// Request `no-cache` or `Pragma: no-cache` (sections 5.2.1.4, 5.4).
    RequestNoCache,
    /// Response `no-cache` (section 5.2.2.4).
    ResponseNoCache,
    /// Older than the request's `max-age` (section 5.2.1.1).
    RequestMaxAge,
    /// Fresh for less than the request's `min-fresh` (section 5.2.1.3).
    MinFresh,
}

/// Section 4: how to answer `req` with `entry`, the stored response the store
/// selected for it (or none).
pub fn lookup_decision(req: &RequestFacts<'_>, entry: Option<&EntryMeta>, now: Time) -> Decision {
    // Section 5.2.1.7: only-if-cached -> a stored response or 504.
    let forward = |d: Decision| if req.cc.only_if_cached() { Decision::GatewayTimeout } else { d };
    let Some(meta) = entry else { return forward(Decision::Miss) };
    // Section 4, bullet 4 and 5: no-cache in the request or the stored response
    // -> only after validation.
    if req.no_cache() {
        return forward(Decision::Revalidate(Why::RequestNoCache));
    }
    if meta.no_cache() {
        return forward(Decision::Revalidate(Why::ResponseNoCache));
    }
    let age = current_age(meta, now);
    let lifetime = meta.freshness_lifetime;
    // Section 5.2.1.1: the client does not accept a response older than max-age.
    if req.cc.max_age.is_some_and(|m| age > m as u64) {
        return forward(Decision::Revalidate(Why::RequestMaxAge));
    }
    if lifetime > age {
        // Section 5.2.1.3: fresh for at least min-fresh more seconds.
        if req.cc.min_fresh.is_some_and(|m| lifetime - age < m as u64) {
            return forward(Decision::Revalidate(Why::MinFresh));
        }
        return Decision::Fresh;
    }
    // Stale. Section 4.2.4: never served stale against must-revalidate,
    // proxy-revalidate or s-maxage (sections 5.2.2.2, 5.2.2.8, 5.2.2.10).
    let staleness = age - lifetime;
    if !meta.no_stale() {
        // Section 5.2.1.2: max-stale, with or without a limit.
        if req.cc.max_stale_any() || req.cc.max_stale.is_some_and(|m| staleness <= m as u64) {
            return Decision::StaleAllowed;
        }
        // RFC 5861 section 3: within stale-while-revalidate.
        if staleness <= meta.stale_while_revalidate as u64 && meta.stale_while_revalidate > 0 {
            return Decision::StaleWhileRevalidate;
        }
    }
    forward(Decision::Revalidate(Why::Stale))
}

/// RFC 5861 section 4: whether the stored response may be served when the
/// origin could not be reached, closed the connection or timed out without
/// answering, or answered 500, 502, 503 or 504: within the response's
/// `stale-if-error` window (the zone's, [`Options::stale_if_error`], when the
/// response gives none), or the request's when longer. Never against
/// must-revalidate, proxy-revalidate, s-maxage or response no-cache (RFC 9111
/// section 4.2.4), whatever the windows.
pub fn stale_if_error(req: &RequestFacts<'_>, meta: &EntryMeta, now: Time, opts: &Options) -> bool {
    if meta.no_stale() || meta.no_cache() {
        return false;
    }
    let staleness = current_age(meta, now).saturating_sub(meta.freshness_lifetime);
    let response = match meta.stale_if_error {
        0 => opts.stale_if_error,
        w => u64::from(w),
    };
    let window = response.max(u64::from(req.cc.stale_if_error.unwrap_or(0)));
    window > 0 && staleness <= window
}

/// RFC 5861 section 4: the origin statuses that count as errors.
pub fn is_error_status(status: u16) -> bool {
    matches!(status, 500 | 502 | 503 | 504)
}

/// Whether a stored response's content coding suits the client (RFC 9110
/// section 12.5.3, [`vary::accepts_coding`]), whatever the origin's `Vary`
/// said: a response stored `Content-Encoding: gzip` is never sent to a client
/// whose `Accept-Encoding` refuses gzip (the seed's nginx failure: an origin
/// that compresses on request but forgets `Vary`), nor one without coding to
/// a client that refuses identity. A request without `Accept-Encoding`
/// accepts any coding.
pub fn acceptable_coding(req: &RequestFacts<'_>, meta: &EntryMeta) -> bool {
    vary::accepts_coding(req.headers, meta.content_encoding.as_deref().unwrap_or_default().as_bytes())
}

// ---------------------------------------------------------------------------
// Validation (section 4.3)

/// The validators to send when revalidating (section 4.3.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditional {
    /// `If-None-Match`: the entity tags of every response being validated.
    pub if_none_match: Option<String>,
    /// `If-Modified-Since`: the `Last-Modified` of the response being
    /// validated, when it is the only one.
    pub if_modified_since: Option<String>,
}

impl Conditional {
    /// Sets these on the request sent to the origin, in place of the client's
    /// own `If-None-Match` and `If-Modified-Since` (the client's conditions are
    /// then evaluated by the cache against the validated response, section 4.3.2).
    pub fn apply(&self, fields: &mut crate::h1::Fields) {
        fields.remove(b"if-none-match");
        fields.remove(b"if-modified-since");
        if let Some(v) = &self.if_none_match {
            fields.append(b"if-none-match", v.as_bytes());
        }
        if let Some(v) = &self.if_modified_since {
            fields.append(b"if-modified-since", v.as_bytes());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.if_none_match.is_none() && self.if_modified_since.is_none()
    }
}

/// Section 4.3.1: the conditional request fields for validating `stored` (one
/// or several stored responses of the same URI): the entity tags of all of
/// them (MUST), and `If-Modified-Since` from `Last-Modified` when there is
/// exactly one and it has one (SHOULD). Empty when none has a validator: the
/// request then goes out unconditional.
pub fn conditional_headers(stored: &[&EntryMeta]) -> Conditional {
    let mut tags: Vec<&str> = Vec::new();
    for m in stored {
        if let Some(t) = m.etag.as_deref().filter(|t| !tags.contains(t)) {
            tags.push(t);
        }
    }
    let if_none_match = (!tags.is_empty()).then(|| tags.join(", "));
    let if_modified_since = match stored {
        [one] => one.last_modified.as_ref().map(|l| l.0.to_string()),
        _ => None,
    };
    Conditional { if_none_match, if_modified_since }
}

/// An entity tag (RFC 9110 section 8.8.3): `(weak, opaque)`, opaque with quotes.
fn parse_etag(v: &[u8]) -> Option<(bool, &[u8])> {
    let (weak, rest) = match v.strip_prefix(b"W/") {
        Some(r) => (true, r),
        None => (false, v),
    };
    let ok = rest.len() >= 2
        && rest[0] == b'"'
        && rest[rest.len() - 1] == b'"'
        && rest[1..rest.len() - 1].iter().all(|b| *b == 0x21 || (0x23..=0x7e).contains(b) || *b >= 0x80);
    ok.then_some((weak, rest))
}

/// RFC 9110 section 8.8.3.2: strong comparison.
pub(crate) fn strong_eq(a: &str, b: &[u8]) -> bool {
    matches!((parse_etag(a.as_bytes()), parse_etag(b)), (Some((false, x)), Some((false, y))) if x == y)
}

/// RFC 9110 section 8.8.3.2: weak comparison.
fn weak_eq(a: &str, b: &[u8]) -> bool {
    matches!((parse_etag(a.as_bytes()), parse_etag(b)), (Some((_, x)), Some((_, y))) if x == y)
}

/// Section 4.3.4: which of `candidates` (the stored responses that were being
/// validated) a 304 `resp` updates, by index:
/// - a strong `ETag` in the 304: every candidate with that strong tag, and none
///   if no candidate has it (the 304 must then not update anything);
/// - else a weak `ETag`: the most recent candidate that matches it by weak
///   comparison, none if none does;
/// - else (no `ETag`) a `Last-Modified`: the most recent candidate with the
///   same date, none if none has it;
/// - else, no validator at all: the only candidate.
///
/// A validator field that is there but unusable (an `ETag` that is not one
/// entity tag: `b` without quotes, `w/"b"`, `"a", "b"`, two lines that differ;
/// a `Last-Modified` that is not a date) matches nothing: the 304 selects none.
/// Read as "no validator" it would select the lone candidate and
/// [`revalidated`] would copy the bad value over the stored one (issue 33).
///
/// One addition the section does not spell out: a 304 with no validator that
/// answers the validation of one single candidate selects it, even when that
/// candidate has validators (the section asks that it have none). That 304
/// answers a request that named only that response's validators, so nothing
/// else can be meant; origins that omit `ETag` from 304s (against RFC 9110
/// section 15.4.5) would otherwise cost a second, unconditional request.
///
/// An empty result means the 304 cannot be used: nothing is updated, and the
/// caller repeats the request without the cache's conditions (section 4.3.3
/// with 4.3.4; RFC 7234 section 4.3.3 and RFC 2616 section 10.3.5 said so
/// outright), as the request-path and the background refresh do.
pub fn select_for_304(resp: &dyn HeaderLookup, candidates: &[&EntryMeta]) -> Vec<usize> {
    let most_recent = |matches: &dyn Fn(&EntryMeta) -> bool| -> Vec<usize> {
        let best = (0..candidates.len())
            .filter(|i| matches(candidates[*i]))
            .max_by_key(|i| (candidates[*i].date, candidates[*i].response_time));
        best.into_iter().collect()
    };
    match single_value(resp, "etag") {
        Single::Invalid => return Vec::new(),
        Single::Value(t) => {
            let t = t.trim_ascii();
            return match parse_etag(t) {
                None => Vec::new(),
                Some((false, _)) => (0..candidates.len())
                    .filter(|i| candidates[*i].etag.as_deref().is_some_and(|s| strong_eq(s, t)))
                    .collect(),
                Some((true, _)) => most_recent(&|m| m.etag.as_deref().is_some_and(|s| weak_eq(s, t))),
            };
        }
        Single::Absent => {}
    }
    match single_value(resp, "last-modified") {
        Single::Invalid => Vec::new(),
        Single::Value(v) => match parse_date(&v) {
            Some(lm) => most_recent(&|m| m.last_modified.as_ref().is_some_and(|l| l.1 == lm)),
            None => Vec::new(),
        },
        Single::Absent => match candidates {
            [_] => vec![0],
            _ => Vec::new(),
        },
    }
}

/// A singleton field (`ETag`, `Last-Modified`) as received.
enum Single {
    Absent,
    /// One value (or several lines, all the same).
    Value(Vec<u8>),
    /// Lines that differ.
    Invalid,
}

fn single_value(h: &dyn HeaderLookup, name: &str) -> Single {
    let mut out = Single::Absent;
    h.any_value(name, &mut |v| {
        let v = v.trim_ascii();
        out = match &out {
            Single::Absent => Single::Value(v.to_vec()),
            Single::Value(first) if first[..] == *v => return false,
            _ => Single::Invalid,
        };
        matches!(out, Single::Invalid)
    });
    out
}

/// Section 4.3.4 with section 3.2: a stored response freshened by a 304. Every
/// field of the 304 replaces all fields of that name in the stored head, and
/// fields new in the 304 are added, except those never stored
/// ([`StoredHead::new`]'s list, `Content-Length` among them), those the
/// 304's `Connection` names and `Set-Cookie` (the cookie is for the client
/// whose request made the validation, never for the store: see
/// [`Options::store_set_cookie`]); fields the merged `Cache-Control` lists under
/// qualified `no-cache` / `private` are dropped. The metadata is computed again
/// from the merged head, with the 304's `Age` and the validation's times.
pub fn revalidated<'a>(
    stored: &StoredHead,
    resp: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    request_time: Time,
    response_time: Time,
    opts: &Options,
) -> (StoredHead, EntryMeta) {
    let resp_age = resp.clone().find(|(n, _)| n.eq_ignore_ascii_case(b"age")).map(|(_, v)| v.to_vec());
    let listed = head::connection_listed(resp.clone());
    let mut new: Vec<(&[u8], &[u8])> =
        resp.filter(|(n, _)| head::keep(n, &listed, &[]) && !n.eq_ignore_ascii_case(b"set-cookie")).collect();
    // RFC 9110 section 6.6.1: a 304 without Date was generated when received;
    // the stored Date (of the old response) must not make the result look old.
    let received = head::fmt_date(response_time);
    if !new.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"date")) {
        new.push((b"date", received.as_bytes()));
    }
    let replaced = |name: &[u8]| new.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    // A head stored before Set-Cookie was kept out of the store (on disk)
    // loses its cookie here too.
    let merged_all: Vec<(&[u8], &[u8])> = stored
        .iter()
        .filter(|(n, _)| !replaced(n) && !n.eq_ignore_ascii_case(b"set-cookie"))
        .chain(new.iter().copied())
        .collect();
    let merged = stored.with_fields(merged_all.iter().copied());
    let cc = response_directives(&merged, opts);
    let mut omit = cc.no_cache_fields.clone();
    omit.extend(cc.private_fields.iter().cloned());
    let merged = if omit.is_empty() {
        merged
    } else {
        stored.with_fields(merged_all.iter().copied().filter(|(n, _)| head::keep(n, &[], &omit)))
    };
    let age = resp_age.map_or(0, |v| age_of_value(&v));
    let meta = EntryMeta::compute(stored.status, &merged, &cc, age, request_time, response_time, opts);
    (merged, meta)
}

/// RFC 9110 section 13.2.2, for a request answered from the cache (section
/// 4.3.2): whether its own conditions make the answer a 304. Only GET and HEAD
/// get here ([`RequestFacts::bypass`] sends the other methods and the
/// `If-Match` / `If-Unmodified-Since` preconditions to the origin).
/// - `If-None-Match` (section 13.1.2): `*`, or a tag equal to the stored `ETag`
///   by weak comparison -> 304;
/// - else `If-Modified-Since` (section 13.1.3), a valid date: the stored
///   `Last-Modified` (or, without one, its `Date`, as RFC 9111 section 4.3.2
///   says) not later than it -> 304.
pub fn client_wants_304(req: &RequestFacts<'_>, meta: &EntryMeta) -> bool {
    // RFC 9110 section 13.2.1: conditions are evaluated only when the response
    // would otherwise be 2xx.
    if (req.method != "GET" && req.method != "HEAD") || !(200..300).contains(&meta.status) {
        return false;
    }
    if has(req.headers, "if-none-match") {
        let mut hit = false;
        req.headers.any_value("if-none-match", &mut |v| {
            hit = list_members(v).any(|m| m == b"*" || meta.etag.as_deref().is_some_and(|t| weak_eq(t, m)));
            hit
        });
        return hit;
    }
    let Some(ims) = first(req.headers, "if-modified-since").and_then(|v| parse_date(&v)) else { return false };
    let modified = meta.last_modified.as_ref().map_or(meta.date, |l| l.1);
    modified <= ims
}

/// What a 200 response to a HEAD request does to the stored GET response the
/// same request would have selected (section 4.3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadUpdate {
    /// The validators (and `Content-Length`, when sent) agree: update the stored
    /// response's fields as for a 304 ([`revalidated`]).
    Update,
    /// They differ: the stored response is no longer current; drop it.
    Invalidate,
}

/// Section 4.3.5: compares a HEAD 200 `resp` with the stored response `meta`
/// whose body is `body_len` bytes: `ETag` and `Last-Modified`, when the HEAD
/// response has them, must equal the stored ones, and so must `Content-Length`.
pub fn head_update(resp: &dyn HeaderLookup, meta: &EntryMeta, body_len: u64) -> HeadUpdate {
    let same_tag =
        first(resp, "etag").is_none_or(|t| meta.etag.as_deref().is_some_and(|s| s.as_bytes() == t.trim_ascii()));
    let same_lm = first(resp, "last-modified")
        .is_none_or(|v| parse_date(&v).is_some_and(|t| meta.last_modified.as_ref().is_some_and(|l| l.1 == t)));
    let same_len = first(resp, "content-length")
        .is_none_or(|v| std::str::from_utf8(&v).ok().and_then(|v| v.trim().parse::<u64>().ok()) == Some(body_len));
    if same_tag && same_lm && same_len { HeadUpdate::Update } else { HeadUpdate::Invalidate }
}

/// The members of a list field value, trimmed; commas inside quoted strings
/// (entity tags cannot hold any) are not special-cased.
pub(crate) fn list_members(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',').map(<[u8]>::trim_ascii).filter(|m| !m.is_empty())
}

/// RFC 9110 section 15.4.5: the head of a 304 answered from `stored`. It has
/// the fields a 200 would have had but the representation metadata that
/// describes the content itself (`Content-Type`, `Content-Encoding`,
/// `Content-Language`, `Content-Range`, `Content-Length`): `Cache-Control`,
/// `Content-Location`, `Date`, `ETag`, `Expires`, `Vary`, `Last-Modified` and the
/// others stay, so the client's cache can update its copy. The caller adds
/// `Age` as for any response from the cache.
pub fn not_modified_head(stored: &StoredHead, received: Time) -> StoredHead {
    const DROP: [&[u8]; 4] = [b"content-type", b"content-encoding", b"content-language", b"content-range"];
    let fields = stored.iter().filter(|(n, _)| !DROP.iter().any(|d| d.eq_ignore_ascii_case(n)));
    StoredHead::new(304, b"Not Modified", fields, &[], received)
}

// ---------------------------------------------------------------------------
// Invalidation (section 4.4)

/// RFC 9110 section 9.2.1: GET, HEAD, OPTIONS and TRACE are safe; every other
/// method, known or not, is unsafe for section 4.4.
pub fn is_unsafe(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

/// Section 4.4: the primary keys to invalidate after a response to `method` on
/// `scheme://host target`: none unless the method is unsafe and the status is
/// not an error (2xx, 3xx); then the target URI, and the URIs in `Location` and
/// `Content-Location` when they are on the same origin (section 4.4: never
/// another host, which would let one origin purge another's objects).
pub fn invalidations(
    method: &str,
    status: u16,
    scheme: &str,
    host: &str,
    target: &str,
    resp: &dyn HeaderLookup,
) -> Vec<String> {
    if !is_unsafe(method) || !(200..400).contains(&status) {
        return Vec::new();
    }
    let own = super::key::primary_key(scheme, host, target);
    let mut out = vec![own];
    for name in ["location", "content-location"] {
        let Some(v) = first(resp, name) else { continue };
        let Ok(v) = std::str::from_utf8(&v) else { continue };
        if let Some(key) = resolve_same_origin(scheme, host, target, v.trim()).filter(|k| !out.contains(k)) {
            out.push(key);
        }
    }
    out
}

/// Resolves a URI reference (RFC 3986 section 5.2, without dot-segment
/// removal) against `scheme://host target`; `None` when it names another origin.
fn resolve_same_origin(scheme: &str, host: &str, target: &str, r: &str) -> Option<String> {
    if r.is_empty() || r.starts_with('#') {
        return None;
    }
    let r = r.split('#').next().unwrap_or(r);
    let (r_scheme, rest) = match r.split_once("://") {
        Some((s, rest)) if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) => (Some(s), Some(rest)),
        _ => (None, None),
    };
    let (auth_path, path) = if let (Some(s), Some(rest)) = (r_scheme, rest) {
        if !s.eq_ignore_ascii_case(scheme) {
            return None;
        }
        let slash = rest.find(['/', '?']).unwrap_or(rest.len());
        (Some(&rest[..slash]), rest[slash..].to_string())
    } else if let Some(rest) = r.strip_prefix("//") {
        let slash = rest.find(['/', '?']).unwrap_or(rest.len());
        (Some(&rest[..slash]), rest[slash..].to_string())
    } else if r.starts_with('/') {
        (None, r.to_string())
    } else if r.starts_with('?') {
        (None, format!("{}{r}", target.split('?').next().unwrap_or("/")))
    } else {
        let base = target.split('?').next().unwrap_or("/");
        let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
        (None, format!("{}{r}", if dir.is_empty() { "/" } else { dir }))
    };
    if let Some(a) = auth_path {
        let ours = super::key::primary_key(scheme, host, "/");
        let theirs = super::key::primary_key(scheme, a, "/");
        if ours != theirs {
            return None;
        }
    }
    let path = if path.is_empty() || path.starts_with('?') { format!("/{path}") } else { path };
    Some(super::key::primary_key(scheme, host, &path))
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
