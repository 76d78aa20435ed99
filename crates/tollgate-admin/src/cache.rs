//! Purging a cache zone from the admin API (docs/admin.md):
//! `DELETE /api/cache/{zone}?url=URL` drops every stored variant of one URL,
//! `DELETE /api/cache/{zone}?prefix=PREFIX` every URL that starts with PREFIX.
//!
//! URLs are absolute (`http://host/path?query`), as the cache keys them
//! (RFC 9111 section 2: the target URI): the scheme and host are compared
//! without case and without the scheme's default port. A prefix with a path
//! is compared the same way (`http://Example.com/img/` purges
//! `http://example.com/img/a.png`); one without (`http://example.com`, or
//! `http://` for every URL) is compared as written, in lower case. In the query,
//! `%XX` escapes are decoded (write `&` as `%26`).

use super::reply::{Reply, json_reply};
use super::{Control, ControlError};
use http::StatusCode;
use serde_json::json;
use tollgate_wire::cache::primary_key;

/// What to purge, from the query string.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// The key of one URL.
    Url(String),
    /// A key prefix.
    Prefix(String),
}

/// Why a purge request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum PurgeError {
    Control(ControlError),
    NoZone(String),
    /// The query is not `url=...` or `prefix=...`, or names no absolute URL.
    BadQuery(String),
}

impl From<ControlError> for PurgeError {
    fn from(e: ControlError) -> Self {
        PurgeError::Control(e)
    }
}

/// Purges in zone `zone` what `query` names. Returns the JSON answer's status and body.
pub(crate) fn purge(control: &Control, zone: &str, query: Option<&str>) -> Result<Reply, PurgeError> {
    if control.read_only() {
        return Err(ControlError::ReadOnly.into());
    }
    let target = parse_query(query.unwrap_or(""))?;
    let snap = control.snapshot()?;
    let z = snap.caches.iter().find(|z| z.cfg.name == zone).ok_or_else(|| PurgeError::NoZone(zone.into()))?;
    let store = &z.shared;
    let (status, body) = match &target {
        Target::Url(key) => {
            let n = store.purge(key);
            let status = if n > 0 { StatusCode::OK } else { StatusCode::NOT_FOUND };
            (status, json!({ "zone": zone, "url": key, "purged": n }))
        }
        Target::Prefix(p) => (StatusCode::OK, json!({ "zone": zone, "prefix": p, "purged": store.purge_prefix(p) })),
    };
    tracing::info!(zone, "cache purged by the admin API: {body}");
    Ok(json_reply(status, &body))
}

/// `url=...` or `prefix=...`, exactly one.
pub fn parse_query(query: &str) -> Result<Target, PurgeError> {
    let mut found = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v).ok_or_else(|| PurgeError::BadQuery(format!("`{v}` has a bad %-escape")))?;
        let t = match k {
            "url" => Target::Url(url_key(&v).ok_or_else(|| not_absolute(&v))?),
            "prefix" => Target::Prefix(prefix_key(&v).ok_or_else(|| not_absolute(&v))?),
            other => return Err(PurgeError::BadQuery(format!("unknown parameter `{other}`: give `url` or `prefix`"))),
        };
        if found.replace(t).is_some() {
            return Err(PurgeError::BadQuery("give one `url` or one `prefix`, not several".into()));
        }
    }
    found.ok_or_else(|| PurgeError::BadQuery("give `url=http://host/path` or `prefix=http://host/path`".into()))
}

fn not_absolute(v: &str) -> PurgeError {
    PurgeError::BadQuery(format!("`{v}` is not an absolute http:// or https:// URL"))
}

/// Scheme, authority and the rest of an absolute http(s) URL.
fn split_url(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    Some((scheme, &rest[..end], &rest[end..]))
}

fn url_key(url: &str) -> Option<String> {
    let (scheme, host, target) = split_url(url)?;
    (!host.is_empty()).then(|| primary_key(scheme, host, target))
}

fn prefix_key(prefix: &str) -> Option<String> {
    let (scheme, host, path) = split_url(prefix)?;
    if path.is_empty() {
        return Some(format!("{}://{}", scheme.to_ascii_lowercase(), host.to_ascii_lowercase()));
    }
    (!host.is_empty()).then(|| primary_key(scheme, host, path))
}

/// `%XX` escapes decoded; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_cache_keys() {
        assert_eq!(parse_query("url=http://Example.COM:80/a?b=1"), Ok(Target::Url("http://example.com/a?b=1".into())));
        assert_eq!(parse_query("url=https://a.test"), Ok(Target::Url("https://a.test/".into())));
        assert_eq!(parse_query("url=http%3A%2F%2Fa.test%2Fx%26y"), Ok(Target::Url("http://a.test/x&y".into())));
        assert_eq!(parse_query("prefix=http://A.test/img/"), Ok(Target::Prefix("http://a.test/img/".into())));
        assert_eq!(parse_query("prefix=http://A.te"), Ok(Target::Prefix("http://a.te".into())));
        assert_eq!(parse_query("prefix=http://"), Ok(Target::Prefix("http://".into())));
    }

    #[test]
    fn bad_queries_are_refused() {
        for q in
            ["", "url=/relative", "url=ftp://a/b", "url=http:///x", "url=%zz", "zone=a", "url=http://a/&url=http://b/"]
        {
            assert!(matches!(parse_query(q), Err(PurgeError::BadQuery(_))), "{q}");
        }
    }
}
