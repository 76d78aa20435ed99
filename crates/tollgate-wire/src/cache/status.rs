//! The `Cache-Status` response field (RFC 9211): what the cache did with a
//! request, as one list member named `tollgate` (RFC 9211 section 2: each cache
//! appends its member; the data path appends this one to any the origin's
//! response already carries).
//!
//! Examples: `tollgate; hit; ttl=376`, `tollgate; fwd=uri-miss; stored`,
//! `tollgate; fwd=stale; fwd-status=304; ttl=60`, `tollgate; hit; ttl=-5;
//! detail=stale-while-revalidate`, `tollgate; fwd=request`,
//! `tollgate; fwd=bypass; detail=method`.

use std::fmt::Write;

/// RFC 9211 section 2.2: why the request went forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Not looked up at all (method, ranges, preconditions).
    Bypass,
    /// The method is one the cache does not serve.
    Method,
    /// Nothing stored for the URI.
    UriMiss,
    /// Something stored for the URI, but no variant for this request's `Vary` fields.
    VaryMiss,
    /// Looked up and missed, without finer detail.
    Miss,
    /// The request asked for it (`no-cache`, `max-age=0`, `min-fresh`).
    Request,
    /// The stored response was stale (a revalidation).
    Stale,
}

impl Fwd {
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::Method => "method",
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Miss => "miss",
            Fwd::Request => "request",
            Fwd::Stale => "stale",
        }
    }
}

impl From<super::policy::Why> for Fwd {
    /// What a revalidation is called: `request` when the client asked for it,
    /// `stale` when the stored response needed it (RFC 9211 section 2.2).
    fn from(why: super::policy::Why) -> Fwd {
        use super::policy::Why;
        match why {
            Why::RequestNoCache | Why::RequestMaxAge | Why::MinFresh => Fwd::Request,
            Why::Stale | Why::ResponseNoCache => Fwd::Stale,
        }
    }
}

/// One `Cache-Status` member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// Served from the cache without going forward (RFC 9211 section 2.1).
    pub hit: bool,
    pub fwd: Option<Fwd>,
    /// The status the origin answered the forwarded request with (section 2.3).
    pub fwd_status: Option<u16>,
    /// The response was stored (section 2.5).
    pub stored: bool,
    /// Served from another request's origin response (coalescing, section 2.6).
    pub collapsed: bool,
    /// Freshness left in seconds, negative when stale (section 2.4).
    pub ttl: Option<i64>,
    /// Tollgate's reason, a token (section 2.8).
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    pub fn hit(ttl: i64) -> Self {
        CacheStatus { hit: true, ttl: Some(ttl), ..Default::default() }
    }

    pub fn forward(fwd: Fwd) -> Self {
        CacheStatus { fwd: Some(fwd), ..Default::default() }
    }

    /// The member, e.g. `tollgate; fwd=miss; stored`.
    pub fn value(&self) -> String {
        let mut out = String::from("tollgate");
        if self.hit {
            out.push_str("; hit");
        }
        if let Some(f) = self.fwd {
            let _ = write!(out, "; fwd={}", f.as_str());
        }
        if let Some(s) = self.fwd_status {
            let _ = write!(out, "; fwd-status={s}");
        }
        if self.stored {
            out.push_str("; stored");
        }
        if self.collapsed {
            out.push_str("; collapsed");
        }
        if let Some(t) = self.ttl {
            let _ = write!(out, "; ttl={t}");
        }
        if let Some(d) = self.detail {
            // RFC 9211 section 2.8: a token or a string; these are tokens.
            let _ = write!(out, "; detail={d}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9211_2_1_hit_with_ttl() {
        assert_eq!(CacheStatus::hit(376).value(), "tollgate; hit; ttl=376");
        let stale = CacheStatus { detail: Some("stale-while-revalidate"), ..CacheStatus::hit(-5) };
        assert_eq!(stale.value(), "tollgate; hit; ttl=-5; detail=stale-while-revalidate");
    }

    #[test]
    fn rfc9211_2_2_revalidations_are_request_or_stale() {
        use crate::cache::policy::Why;
        assert_eq!(Fwd::from(Why::RequestNoCache), Fwd::Request);
        assert_eq!(Fwd::from(Why::RequestMaxAge), Fwd::Request);
        assert_eq!(Fwd::from(Why::MinFresh), Fwd::Request);
        assert_eq!(Fwd::from(Why::Stale), Fwd::Stale);
        assert_eq!(Fwd::from(Why::ResponseNoCache), Fwd::Stale);
    }

    #[test]
    fn rfc9211_2_2_forward_reasons_and_stored() {
        let s = CacheStatus { stored: true, ..CacheStatus::forward(Fwd::UriMiss) };
        assert_eq!(s.value(), "tollgate; fwd=uri-miss; stored");
        assert_eq!(CacheStatus::forward(Fwd::VaryMiss).value(), "tollgate; fwd=vary-miss");
        assert_eq!(CacheStatus::forward(Fwd::Request).value(), "tollgate; fwd=request");
        let s = CacheStatus { fwd_status: Some(304), ttl: Some(60), ..CacheStatus::forward(Fwd::Stale) };
        assert_eq!(s.value(), "tollgate; fwd=stale; fwd-status=304; ttl=60");
        let s = CacheStatus { detail: Some("method"), ..CacheStatus::forward(Fwd::Bypass) };
        assert_eq!(s.value(), "tollgate; fwd=bypass; detail=method");
        let s = CacheStatus { collapsed: true, ..CacheStatus::forward(Fwd::Miss) };
        assert_eq!(s.value(), "tollgate; fwd=miss; collapsed");
    }
}
