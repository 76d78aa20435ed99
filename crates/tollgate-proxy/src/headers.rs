//! Pure header work on the request path: framing checks hyper leaves to us,
//! hop-by-hop removal (RFC 9110 section 7.6.1) and X-Forwarded-*.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

/// How many times `chunked` is named across every Transfer-Encoding line.
/// RFC 9112 section 6.1: a sender must not apply chunked more than once; hyper
/// only checks that it comes last, so this is checked here (400 when > 1).
pub fn chunked_count(headers: &HeaderMap) -> usize {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .map(|v| v.as_bytes().split(|b| *b == b',').filter(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked")).count())
        .sum()
}

const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// Removes hop-by-hop fields: the fixed list and every field the Connection header
/// names (except Host, which a client must not be able to strip this way).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names (standard names compare as small integers) is much
    // cheaper than seven hashed removals, and most messages carry none of them.
    let mut present: [Option<&HeaderName>; 7] = [None; 7];
    let mut n = 0;
    for name in headers.keys() {
        if n < present.len() && is_hop_by_hop(name) && !present[..n].contains(&Some(name)) {
            present[n] = Some(name);
            n += 1;
        }
    }
    if n == 0 {
        return;
    }
    let present: [Option<HeaderName>; 7] = present.map(|p| p.cloned());
    if let Some(conn) = headers.get(header::CONNECTION) {
        let named: Vec<HeaderName> = conn
            .as_bytes()
            .split(|b| *b == b',')
            .filter_map(|t| HeaderName::from_bytes(t.trim_ascii()).ok())
            .filter(|n| *n != header::HOST)
            .collect();
        for n in named {
            headers.remove(n);
        }
    }
    for name in present.into_iter().flatten() {
        headers.remove(name);
    }
}

/// Bytes of a reg-name: unreserved, `%` of pct-encoded, sub-delims (RFC 3986).
const REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric();
        i += 1;
    }
    let extra = b"-._~%!$&'()*+,;=";
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
};

/// Whether a Host value is `uri-host [":" port]` (RFC 9112 section 3.2, RFC 3986
/// section 3.2.2): a reg-name (unreserved, pct-encoded, sub-delims) or a bracketed
/// IP literal, then an optional all-digit port. No userinfo, nothing else.
pub fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if value.first() == Some(&b'[') {
        let Some(end) = value.iter().position(|b| *b == b']') else { return false };
        let literal = &value[1..end];
        if literal.is_empty() || !literal.iter().all(|b| b.is_ascii_hexdigit() || b":.".contains(b)) {
            return false;
        }
        (&value[..=end], &value[end + 1..])
    } else {
        match value.iter().position(|b| *b == b':') {
            Some(i) => (&value[..i], &value[i..]),
            None => (value, &value[value.len()..]),
        }
    };
    let reg_name_ok = host.first() == Some(&b'[') || (!host.is_empty() && host.iter().all(|b| REG_NAME[*b as usize]));
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    reg_name_ok && port_ok
}

/// The request's host for routing: lower-case, without port. `None` when the
/// value is not a valid Host (see [`valid_host`]).
pub fn routing_host(value: &[u8]) -> Option<String> {
    if !valid_host(value) {
        return None;
    }
    let host = match value.first() {
        Some(b'[') => &value[..=value.iter().position(|b| *b == b']')?],
        _ => value.split(|b| *b == b':').next().unwrap_or(value),
    };
    Some(String::from_utf8_lossy(host).to_ascii_lowercase())
}

/// The client address as it should appear in headers and rules (IPv4-mapped IPv6
/// addresses shown as IPv4).
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// X-Forwarded-For (appended to what came in), -Proto, -Port and -Host (set).
pub fn add_forwarded(headers: &mut HeaderMap, client: IpAddr, local_port: u16, proto: &'static str) {
    let ip = client.to_string();
    let xff = HeaderName::from_static("x-forwarded-for");
    let combined = match headers.get(&xff).and_then(|v| v.to_str().ok()) {
        Some(prev) if headers.get_all(&xff).iter().count() == 1 => format!("{prev}, {ip}"),
        _ => {
            // Several lines: fold them into one list, in order.
            let mut parts: Vec<&str> = headers.get_all(&xff).iter().filter_map(|v| v.to_str().ok()).collect();
            parts.push(&ip);
            parts.join(", ")
        }
    };
    if let Ok(v) = HeaderValue::from_str(&combined) {
        headers.insert(xff, v);
    }
    headers.insert(HeaderName::from_static("x-forwarded-proto"), HeaderValue::from_static(proto));
    headers.insert(HeaderName::from_static("x-forwarded-port"), HeaderValue::from(local_port));
    if let Some(host) = headers.get(header::HOST).cloned() {
        headers.insert(HeaderName::from_static("x-forwarded-host"), host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn chunked_counted_across_lines() {
        assert_eq!(chunked_count(&map(&[("transfer-encoding", "chunked")])), 1);
        assert_eq!(chunked_count(&map(&[("transfer-encoding", "gzip, chunked")])), 1);
        assert_eq!(chunked_count(&map(&[("transfer-encoding", "chunked, chunked")])), 2);
        assert_eq!(chunked_count(&map(&[("transfer-encoding", "chunked"), ("transfer-encoding", "CHUNKED")])), 2);
    }

    #[test]
    fn hop_by_hop_removed_with_connection_listed() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret, host"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("host", "a"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("x-kept", "1"),
        ]);
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["host", "x-kept"]);
    }

    #[test]
    fn host_for_routing() {
        assert_eq!(routing_host(b"Example.COM:8080").as_deref(), Some("example.com"));
        assert_eq!(routing_host(b"[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(routing_host(b"[::1]").as_deref(), Some("[::1]"));
        assert_eq!(routing_host(b"10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(routing_host(b"a%41b.example").as_deref(), Some("a%41b.example"));
        for bad in [
            &b"user@evil.com"[..],
            b"a b",
            b"",
            b":80",
            b"a:80:81",
            b"a:8o",
            b"a:123456",
            b"[::1",
            b"[]:80",
            b"[::1]x",
            b"a/b",
            b"a\\b",
            b"a?b",
            b"a#b",
        ] {
            assert_eq!(routing_host(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn forwarded_headers() {
        let mut h = map(&[("host", "app.example.com"), ("x-forwarded-for", "1.1.1.1"), ("x-forwarded-proto", "https")]);
        add_forwarded(&mut h, "::ffff:10.0.0.9".parse::<IpAddr>().map(canonical_ip).unwrap(), 8080, "http");
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 10.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-port"], "8080");
        assert_eq!(h["x-forwarded-host"], "app.example.com");
        let mut h = map(&[("x-forwarded-for", "1.1.1.1"), ("x-forwarded-for", "2.2.2.2")]);
        add_forwarded(&mut h, "3.3.3.3".parse().unwrap(), 80, "http");
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 3.3.3.3");
    }
}
