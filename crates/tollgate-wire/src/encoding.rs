//! Content codings for response compression (RFC 9110 section 8.4 and
//! 12.5.3): which coding a client accepts best, and whether a response may be
//! compressed at all. Pure: the data path asks, with the fields it has.

pub use tollgate_config::Coding;

/// The most `Accept-Encoding` members read; the rest are ignored (a huge
/// field costs no more than this).
pub const MAX_MEMBERS: usize = 32;

/// Reads `Accept-Encoding` field values (each a comma-separated list) into
/// its members: a coding (lower case; `*` and `identity` included) and its
/// weight in thousandths (RFC 9110 section 12.4.2). Members with a malformed
/// weight are dropped; at most [`MAX_MEMBERS`] are kept.
pub fn parse_accept(values: &[&[u8]]) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for v in values {
        let Ok(v) = std::str::from_utf8(v) else { continue };
        for member in v.split(',') {
            if out.len() == MAX_MEMBERS {
                return out;
            }
            let mut parts = member.split(';');
            let name = parts.next().unwrap_or("").trim();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                continue;
            }
            let mut q = Some(1000);
            for p in parts {
                let (k, val) = p.split_once('=').unwrap_or((p, ""));
                if k.trim().eq_ignore_ascii_case("q") {
                    q = parse_q(val.trim());
                }
            }
            if let Some(q) = q {
                out.push((name.to_ascii_lowercase(), q));
            }
        }
    }
    out
}

/// RFC 9110 section 12.4.2's `qvalue`: `0[.ddd]` or `1[.000]`, in thousandths.
fn parse_q(s: &str) -> Option<u16> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The coding to answer with, of those `offered` (in the server's order of
/// preference), for a client that sent `accept` (none: the field absent).
/// The highest weight wins, the server's order breaks ties; a coding with
/// q=0, or not listed while `*` has q=0 or is absent, is not acceptable
/// (section 12.5.3). No field: no compression (a client that sends none may
/// take anything, but many then mishandle it; nginx and HAProxy do not either).
pub fn choose(accept: Option<&[(String, u16)]>, offered: &[Coding]) -> Option<Coding> {
    let accept = accept?;
    let star = accept.iter().find(|(c, _)| c == "*").map(|(_, q)| *q);
    let weight = |coding: Coding| {
        let named = accept.iter().filter(|(c, _)| Coding::from_token(c) == Some(coding)).map(|(_, q)| *q).max();
        named.or(star).unwrap_or(0)
    };
    let mut best: Option<(Coding, u16)> = None;
    for c in offered {
        let q = weight(*c);
        if q > 0 && best.is_none_or(|(_, bq)| q > bq) {
            best = Some((*c, q));
        }
    }
    best.map(|(c, _)| c)
}

/// What decides whether a response is compressed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Response<'a> {
    pub status: u16,
    /// `Content-Encoding`, if any (other than `identity`, the body is encoded).
    pub content_encoding: Option<&'a [u8]>,
    pub content_type: Option<&'a [u8]>,
    /// The body's length when the head says it.
    pub content_length: Option<u64>,
    /// `Cache-Control: no-transform`.
    pub no_transform: bool,
    /// The response is to a range request, or is a `Content-Range`.
    pub ranged: bool,
}

/// Whether `r` may be compressed under `types` (media types, `text/*`
/// style prefixes allowed) and `min_size`: a 200 with a body, not already
/// encoded, not ranged, not `no-transform`, of a listed type, at least
/// `min_size` bytes when its length is known.
pub fn compressible(r: &Response<'_>, types: &[String], min_size: u64) -> bool {
    if r.status != 200 || r.ranged || r.no_transform {
        return false;
    }
    if r.content_encoding.is_some_and(|e| !e.trim_ascii().eq_ignore_ascii_case(b"identity")) {
        return false;
    }
    if r.content_length.is_some_and(|n| n < min_size) {
        return false;
    }
    let Some(ct) = r.content_type else { return false };
    let essence = ct.split(|b| *b == b';').next().unwrap_or(b"").trim_ascii();
    let Ok(essence) = std::str::from_utf8(essence) else { return false };
    let essence = essence.to_ascii_lowercase();
    types.iter().any(|t| match t.strip_suffix("/*") {
        Some(prefix) => essence.split_once('/').is_some_and(|(top, _)| top == prefix),
        None => *t == essence,
    })
}

/// A strong `ETag` made weak (`W/"..."`): the encoded body is not the same
/// bytes (RFC 9110 section 8.8.1); a weak one stays as it is.
pub fn weaken_etag(etag: &[u8]) -> Vec<u8> {
    if etag.starts_with(b"W/") {
        return etag.to_vec();
    }
    let mut out = b"W/".to_vec();
    out.extend_from_slice(etag);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(s: &str) -> Vec<(String, u16)> {
        parse_accept(&[s.as_bytes()])
    }

    #[test]
    fn q_values_as_rfc_9110_reads_them() {
        assert_eq!(accept("gzip, br;q=0.8, zstd;q=0"), [("gzip".into(), 1000), ("br".into(), 800), ("zstd".into(), 0)]);
        assert_eq!(accept("GZIP;Q=0.5"), [("gzip".into(), 500)]);
        // Malformed weights drop the member; empty members are skipped.
        assert_eq!(accept("gzip;q=2, br;q=0.1234, zstd;q=abc, , deflate;q=1.000"), [("deflate".into(), 1000)]);
        assert_eq!(accept("br ; q = 0.5"), [("br".into(), 500)]);
        let huge = "x,".repeat(10_000) + "gzip";
        assert_eq!(accept(&huge).len(), MAX_MEMBERS, "bounded");
    }

    #[test]
    fn the_best_acceptable_coding_in_the_servers_order() {
        let all = [Coding::Zstd, Coding::Br, Coding::Gzip];
        let pick = |s: &str| choose(Some(&accept(s)), &all);
        assert_eq!(pick("gzip, br, zstd"), Some(Coding::Zstd), "ties: the server's order");
        assert_eq!(pick("gzip, br;q=0.9"), Some(Coding::Gzip));
        assert_eq!(pick("gzip;q=0, br;q=0"), None);
        assert_eq!(pick("identity"), None);
        assert_eq!(pick("*"), Some(Coding::Zstd));
        assert_eq!(pick("*;q=0, gzip"), Some(Coding::Gzip));
        assert_eq!(pick("*, zstd;q=0"), Some(Coding::Br), "a q=0 names what is refused");
        assert_eq!(pick("x-gzip"), Some(Coding::Gzip));
        assert_eq!(pick(""), None);
        assert_eq!(choose(None, &all), None, "no field: nothing");
        assert_eq!(choose(Some(&accept("br")), &[Coding::Gzip]), None, "only what is offered");
    }

    #[test]
    fn only_whole_plain_listed_responses_of_some_size() {
        let types = tollgate_config::Compression::defaults().types;
        let ok = Response {
            status: 200,
            content_type: Some(b"text/html; charset=utf-8"),
            content_length: Some(5000),
            ..Default::default()
        };
        assert!(compressible(&ok, &types, 1024));
        assert!(compressible(&Response { content_length: None, ..ok }, &types, 1024), "length unknown: chunked");
        assert!(!compressible(&Response { content_length: Some(100), ..ok }, &types, 1024));
        assert!(!compressible(&Response { status: 206, ..ok }, &types, 0));
        assert!(!compressible(&Response { status: 304, ..ok }, &types, 0));
        assert!(!compressible(&Response { ranged: true, ..ok }, &types, 0));
        assert!(!compressible(&Response { no_transform: true, ..ok }, &types, 0));
        assert!(!compressible(&Response { content_encoding: Some(b"gzip"), ..ok }, &types, 0));
        assert!(compressible(&Response { content_encoding: Some(b" Identity "), ..ok }, &types, 0));
        assert!(!compressible(&Response { content_type: Some(b"image/png"), ..ok }, &types, 0));
        assert!(!compressible(&Response { content_type: None, ..ok }, &types, 0));
        assert!(compressible(&Response { content_type: Some(b"Application/JSON"), ..ok }, &types, 0));
        assert!(compressible(&Response { content_type: Some(b"image/svg+xml"), ..ok }, &types, 0));
    }

    #[test]
    fn etags_are_weakened_once() {
        assert_eq!(weaken_etag(b"\"abc\""), b"W/\"abc\"");
        assert_eq!(weaken_etag(b"W/\"abc\""), b"W/\"abc\"");
    }
}
