//! The persistence cookie codec: keeping a client on the server that holds its
//! session with HAProxy's semantics (`cookie NAME insert|prefix|rewrite`):
//! - insert: Tollgate sets `NAME=<server cookie>` on a response when the client did
//!   not present a valid one; `indirect` removes it from requests before the server
//!   sees it; with `max_idle` / `max_life` the value carries dates
//!   (`<server>|<last seen>|<first seen>`, Unix seconds) and an expired cookie is
//!   ignored and replaced.
//! - prefix: the application's own cookie NAME goes out as `<server>~<value>`, and
//!   the prefix is removed from requests.
//! - rewrite: the application sets NAME itself; its value is replaced by the
//!   server's cookie on the way out.
//!
//! The functions here are pure (field values and `now` in, values out); the
//! proxy's exchange applies them to the message heads.

use tollgate_config::{CookieMode, CookiePolicy};

/// The `name=value` pairs of a Cookie field value (RFC 6265 section 5.4: `; `
/// separated), as (name, value, the pair's byte range).
fn pairs(v: &[u8]) -> impl Iterator<Item = (&[u8], &[u8], std::ops::Range<usize>)> {
    let mut start = 0;
    v.split(|b| *b == b';').map(move |part| {
        let begin = start;
        start += part.len() + 1;
        let trimmed = part.trim_ascii();
        let (name, value) = match trimmed.iter().position(|b| *b == b'=') {
            Some(i) => (trimmed[..i].trim_ascii(), trimmed[i + 1..].trim_ascii()),
            None => (trimmed, &b""[..]),
        };
        (name, value, begin..begin + part.len())
    })
}

/// The value of cookie `name` in a Cookie field value.
pub fn find<'a>(field: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    pairs(field).find(|(n, _, _)| *n == name).map(|(_, v, _)| v)
}

/// A Cookie field value with cookie `name` removed (`None` when nothing is left).
pub fn without(field: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let kept: Vec<&[u8]> =
        pairs(field).filter(|(n, _, _)| *n != name && !n.is_empty()).map(|(_, _, r)| field[r].trim_ascii()).collect();
    (!kept.is_empty()).then(|| kept.join(&b"; "[..]))
}

/// A Cookie field value with `name=<server>~<value>` turned back into
/// `name=<value>` (prefix mode), and the server part.
pub fn unprefix(field: &[u8], name: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut server = None;
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (n, v, r) in pairs(field) {
        if n == name
            && let Some(i) = v.iter().position(|b| *b == b'~')
        {
            server = Some(v[..i].to_vec());
            let mut p = n.to_vec();
            p.push(b'=');
            p.extend_from_slice(&v[i + 1..]);
            out.push(p);
        } else if !n.is_empty() {
            out.push(field[r].trim_ascii().to_vec());
        }
    }
    (out.join(&b"; "[..]), server)
}

/// What an insert-mode cookie says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presented {
    pub server: Vec<u8>,
    /// Unix seconds, when the value carries dates.
    pub last: Option<u64>,
    pub first: Option<u64>,
}

pub fn parse_inserted(v: &[u8]) -> Presented {
    let mut parts = v.split(|b| *b == b'|');
    let server = parts.next().unwrap_or_default().to_vec();
    let num = |p: Option<&[u8]>| p.and_then(|p| std::str::from_utf8(p).ok()?.parse().ok());
    let last = num(parts.next());
    let first = num(parts.next());
    Presented { server, last, first }
}

/// Whether the policy puts dates in the cookie.
fn dated(p: &CookiePolicy) -> bool {
    p.max_idle.is_some() || p.max_life.is_some()
}

/// Whether a presented insert-mode cookie is still good at `now` (Unix seconds).
/// A dated policy refuses an undated cookie (it cannot be checked).
pub fn still_valid(p: &CookiePolicy, c: &Presented, now: u64) -> bool {
    if !dated(p) {
        return true;
    }
    let (Some(last), Some(first)) = (c.last, c.first) else { return false };
    let fresh_idle = p.max_idle.is_none_or(|d| now.saturating_sub(last) <= d.as_secs());
    let fresh_life = p.max_life.is_none_or(|d| now.saturating_sub(first) <= d.as_secs());
    fresh_idle && fresh_life && last <= now + 86_400 && first <= last
}

/// Whether a valid dated cookie should be sent again with a newer "last seen"
/// (once a quarter of `max_idle` has passed, so active clients never expire).
pub fn needs_refresh(p: &CookiePolicy, c: &Presented, now: u64) -> bool {
    match (p.max_idle, c.last) {
        (Some(idle), Some(last)) => now.saturating_sub(last) >= (idle.as_secs() / 4).max(1),
        _ => false,
    }
}

/// The Set-Cookie value for insert mode.
pub fn set_cookie(p: &CookiePolicy, server: &str, first: Option<u64>, now: u64) -> Vec<u8> {
    let mut v = format!("{}={server}", p.name);
    if dated(p) {
        v.push_str(&format!("|{now}|{}", first.unwrap_or(now)));
    }
    v.push_str("; path=");
    v.push_str(&p.path);
    if let Some(d) = &p.domain {
        v.push_str("; domain=");
        v.push_str(d);
    }
    if p.httponly {
        v.push_str("; HttpOnly");
    }
    if p.secure {
        v.push_str("; Secure");
    }
    v.into_bytes()
}

/// A server's Set-Cookie value for cookie `name` rewritten for prefix or rewrite
/// mode; `None` when the field sets another cookie.
pub fn rewrite_set_cookie(field: &[u8], name: &[u8], mode: CookieMode, server: &str) -> Option<Vec<u8>> {
    let eq = field.iter().position(|b| *b == b'=')?;
    if field[..eq].trim_ascii() != name {
        return None;
    }
    let rest = &field[eq + 1..];
    let end = rest.iter().position(|b| *b == b';').unwrap_or(rest.len());
    let mut out = field[..=eq].to_vec();
    match mode {
        CookieMode::Prefix => {
            out.extend_from_slice(server.as_bytes());
            out.push(b'~');
            out.extend_from_slice(rest[..end].trim_ascii());
        }
        CookieMode::Rewrite => out.extend_from_slice(server.as_bytes()),
        CookieMode::Insert => return None,
    }
    out.extend_from_slice(&rest[end..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(mode: CookieMode) -> CookiePolicy {
        CookiePolicy {
            name: "SERVERID".into(),
            mode,
            indirect: false,
            nocache: false,
            httponly: false,
            secure: false,
            max_idle: None,
            max_life: None,
            domain: None,
            path: "/".into(),
        }
    }

    #[test]
    fn cookie_header_parsing_and_stripping() {
        let v = b"NODESESSID=abc; SERVERID=s1;x=1";
        assert_eq!(find(v, b"SERVERID"), Some(&b"s1"[..]));
        assert_eq!(find(v, b"x"), Some(&b"1"[..]));
        assert_eq!(find(v, b"SERVER"), None);
        assert_eq!(without(v, b"SERVERID").unwrap(), b"NODESESSID=abc; x=1");
        assert_eq!(without(b"SERVERID=s1", b"SERVERID"), None);
    }

    #[test]
    fn prefix_mode_both_ways() {
        let (v, s) = unprefix(b"a=1; NODESESSID=s2~xyz", b"NODESESSID");
        assert_eq!(v, b"a=1; NODESESSID=xyz");
        assert_eq!(s.as_deref(), Some(&b"s2"[..]));
        let (v, s) = unprefix(b"NODESESSID=plain", b"NODESESSID");
        assert_eq!((v.as_slice(), s), (&b"NODESESSID=plain"[..], None));
        let out = rewrite_set_cookie(b"NODESESSID=xyz; Path=/; HttpOnly", b"NODESESSID", CookieMode::Prefix, "s2");
        assert_eq!(out.unwrap(), b"NODESESSID=s2~xyz; Path=/; HttpOnly");
        assert_eq!(rewrite_set_cookie(b"OTHER=1", b"NODESESSID", CookieMode::Prefix, "s2"), None);
        let out = rewrite_set_cookie(b"SERVERID=app-chose; Path=/", b"SERVERID", CookieMode::Rewrite, "s1");
        assert_eq!(out.unwrap(), b"SERVERID=s1; Path=/");
    }

    #[test]
    fn insert_cookie_attributes() {
        let mut p = policy(CookieMode::Insert);
        assert_eq!(set_cookie(&p, "s1", None, 100), b"SERVERID=s1; path=/");
        p.httponly = true;
        p.secure = true;
        p.domain = Some("example.com".into());
        assert_eq!(set_cookie(&p, "s1", None, 100), b"SERVERID=s1; path=/; domain=example.com; HttpOnly; Secure");
    }

    #[test]
    fn dated_cookies_expire_by_idle_and_life() {
        let mut p = policy(CookieMode::Insert);
        p.max_idle = Some(Duration::from_secs(60));
        p.max_life = Some(Duration::from_secs(3600));
        let v = set_cookie(&p, "s1", None, 1000);
        let value = find(&v, b"SERVERID").unwrap();
        let c = parse_inserted(value);
        assert_eq!(c, Presented { server: b"s1".to_vec(), last: Some(1000), first: Some(1000) });
        assert!(still_valid(&p, &c, 1059));
        assert!(!still_valid(&p, &c, 1061), "idle too long");
        assert!(!needs_refresh(&p, &c, 1010));
        assert!(needs_refresh(&p, &c, 1015));
        let old = Presented { server: b"s1".to_vec(), last: Some(4600), first: Some(1000) };
        assert!(still_valid(&p, &old, 4600));
        assert!(!still_valid(&p, &old, 4601), "too old");
        assert!(!still_valid(&p, &parse_inserted(b"s1"), 1000), "a dated policy needs dates");
        assert!(still_valid(&policy(CookieMode::Insert), &parse_inserted(b"s1"), 1000));
    }
}
