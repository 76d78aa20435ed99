//! The head of a stored response, kept as the bytes a hit writes.
//!
//! `wire` is the status line and the stored fields, each `name: value\r\n`,
//! without the blank line: on a hit the data path writes it, then `age`,
//! `content-length` (of the stored body), `connection` as needed and the blank
//! line (RFC 9111 section 4: a response from cache carries Age, section 5.1).
//!
//! What is not stored (RFC 9111 section 3.1; the RFC 9110 section 7.6.1
//! connection fields): hop-by-hop fields and those the `Connection` field names,
//! fields a qualified `no-cache` or `private` lists (sections 5.2.2.4 and
//! 5.2.2.7, given by the caller), `Content-Length` and `Transfer-Encoding`
//! (framing is the data path's, from the stored body), and `Age` (recomputed for
//! every response, section 4.2.3). A response without `Date` gets one: the time
//! it was received (RFC 9110 section 6.6.1).

use crate::h1::push_field;
use bytes::Bytes;

/// Whether a response with `status` carries `Content-Length` (RFC 9110
/// section 8.6: not 1xx, 204 or 304).
pub fn has_length(status: u16) -> bool {
    !(status < 200 || status == 204 || status == 304)
}

/// A stored response's status and header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHead {
    pub status: u16,
    wire: Bytes,
    /// Where the fields start in `wire` (after the status line).
    fields_at: u32,
}

impl StoredHead {
    /// Builds the stored head from a response's status, reason phrase and
    /// fields. `omit` are lower-case names not to store; `received` is the time
    /// the response arrived (Unix seconds), for a missing `Date`.
    pub fn new<'a>(
        status: u16,
        reason: &[u8],
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
        omit: &[Box<str>],
        received: u64,
    ) -> StoredHead {
        let mut wire = Vec::with_capacity(256);
        // A reason phrase is optional (RFC 9112 section 4); keep what came.
        let fields_at = push_status_line(&mut wire, status, reason);
        let listed = connection_listed(fields.clone());
        let mut date = false;
        for (name, value) in fields {
            if !keep(name, &listed, omit) {
                continue;
            }
            date |= name.eq_ignore_ascii_case(b"date");
            push_field(&mut wire, name, value);
        }
        if !date {
            push_field(&mut wire, b"date", fmt_date(received).as_bytes());
        }
        StoredHead { status, wire: Bytes::from(wire), fields_at }
    }

    /// The status line and fields, as written on a hit (no blank line).
    pub fn wire(&self) -> &Bytes {
        &self.wire
    }

    /// Writes the whole head of a response from the cache: the stored lines,
    /// `age` (RFC 9111 section 5.1), `content-length` of the stored body
    /// (RFC 9110 section 8.6: none on 1xx, 204 and 304; a HEAD gets the GET's),
    /// a `cache-status` member (RFC 9211), `connection` (`close` when the client
    /// connection ends after it, `keep-alive` for an HTTP/1.0 client kept open),
    /// and the blank line.
    pub fn write_response(
        &self,
        out: &mut Vec<u8>,
        age: u64,
        body_len: u64,
        cache_status: Option<&str>,
        connection: Option<&str>,
    ) {
        out.extend_from_slice(&self.wire);
        out.extend_from_slice(b"age: ");
        out.extend_from_slice(age.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        if has_length(self.status) {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(body_len.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let Some(cs) = cache_status {
            push_field(out, b"cache-status", cs.as_bytes());
        }
        if let Some(c) = connection {
            push_field(out, b"connection", c.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Where the fields start in [`StoredHead::wire`].
    pub fn fields_at(&self) -> u32 {
        self.fields_at
    }

    /// A head from what [`StoredHead::wire`] and [`StoredHead::fields_at`]
    /// gave (the disk tier reads them back): `None` unless the status line is
    /// `HTTP/1.1 <status> ...` ending where the fields start.
    pub fn from_wire(status: u16, wire: Bytes, fields_at: u32) -> Option<StoredHead> {
        let line = wire.get(..fields_at as usize)?;
        let mut expect = b"HTTP/1.1 ".to_vec();
        push_status(&mut expect, status);
        let ok = (100..=999).contains(&status) && line.starts_with(&expect) && line.ends_with(b"\r\n");
        ok.then_some(StoredHead { status, wire, fields_at })
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.wire.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wire.is_empty()
    }

    /// The reason phrase.
    pub fn reason(&self) -> &[u8] {
        // "HTTP/1.1 200 " is 13 bytes; the line ends with CRLF.
        self.wire.get(13..self.fields_at as usize - 2).unwrap_or_default()
    }

    /// The stored fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        // Every line was written by `push_field`: `name: value\r\n`, and values
        // hold no CR or LF (RFC 9110 section 5.5; httparse refuses them).
        self.wire[self.fields_at as usize..].split(|b| *b == b'\n').filter_map(|line| {
            let line = line.strip_suffix(b"\r")?;
            let colon = line.iter().position(|b| *b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii_start()))
        })
    }

    /// The first value of `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// Builds a head with the same status line and the given fields (already
    /// filtered by the caller).
    pub fn with_fields<'a>(&self, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> StoredHead {
        let mut wire = Vec::with_capacity(self.wire.len() + 64);
        wire.extend_from_slice(&self.wire[..self.fields_at as usize]);
        for (name, value) in fields {
            push_field(&mut wire, name, value);
        }
        StoredHead { status: self.status, wire: Bytes::from(wire), fields_at: self.fields_at }
    }
}

impl StoredHead {
    /// The same fields under another status line, with `extra` fields added
    /// (a 206 cut from a stored 200: its fields and `Content-Range`).
    pub fn with_status(&self, status: u16, reason: &[u8], extra: &[(&[u8], &[u8])]) -> StoredHead {
        let mut wire = Vec::with_capacity(self.wire.len() + 64);
        let fields_at = push_status_line(&mut wire, status, reason);
        wire.extend_from_slice(&self.wire[self.fields_at as usize..]);
        for (name, value) in extra {
            push_field(&mut wire, name, value);
        }
        StoredHead { status, wire: Bytes::from(wire), fields_at }
    }
}

impl tollgate_config::HeaderLookup for StoredHead {
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).any(|(_, v)| f(v))
    }
}

/// Fields never stored and never taken from a 304: framing and `Age` (see the
/// module doc), plus the hop-by-hop ones.
pub(crate) fn never_stored(name: &[u8]) -> bool {
    crate::h1::is_hop_by_hop(name)
        || name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"age")
        // RFC 9111 section 3.1: Proxy-Authentication-Info belongs to one hop too.
        || name.eq_ignore_ascii_case(b"proxy-authentication-info")
}

/// Whether a field is stored: not `never_stored`, not named by `Connection`,
/// not in `omit`.
pub(crate) fn keep(name: &[u8], listed: &[Vec<u8>], omit: &[Box<str>]) -> bool {
    !never_stored(name)
        && !listed.iter().any(|l| l.eq_ignore_ascii_case(name))
        && !omit.iter().any(|o| o.as_bytes().eq_ignore_ascii_case(name))
}

/// The field names the `Connection` fields list (RFC 9110 section 7.6.1).
pub(crate) fn connection_listed<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"connection") {
            for tok in value.split(|b| *b == b',') {
                let tok = tok.trim_ascii();
                if !tok.is_empty() {
                    out.push(tok.to_vec());
                }
            }
        }
    }
    out
}

/// `HTTP/1.1 <status> <reason>\r\n`; returns where the fields start.
fn push_status_line(out: &mut Vec<u8>, status: u16, reason: &[u8]) -> u32 {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, status);
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
    out.len() as u32
}

fn push_status(out: &mut Vec<u8>, code: u16) {
    let code = code.min(999);
    out.extend_from_slice(&[b'0' + (code / 100) as u8, b'0' + (code / 10 % 10) as u8, b'0' + (code % 10) as u8]);
}

/// An IMF-fixdate for Unix seconds.
pub fn fmt_date(secs: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Parses an HTTP-date (RFC 9110 section 5.6.7: IMF-fixdate, and the obsolete
/// RFC 850 and asctime forms a recipient must accept) into Unix seconds.
pub fn parse_date(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let t = httpdate::parse_http_date(s).ok()?;
    t.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&'static str, &'static str)]) -> Vec<(&'static [u8], &'static [u8])> {
        list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect()
    }

    #[test]
    fn rfc9111_3_1_hop_by_hop_and_connection_listed_fields_are_not_stored() {
        let f = fields(&[
            ("Connection", "a, B"),
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("Keep-Alive", "x"),
            ("Transfer-Encoding", "chunked"),
            ("Content-Length", "5"),
            ("Age", "10"),
            ("Date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("Content-Type", "text/plain"),
        ]);
        let h = StoredHead::new(200, b"OK", f.iter().copied(), &[], 0);
        let s = String::from_utf8(h.wire().to_vec()).unwrap();
        assert_eq!(s, "HTTP/1.1 200 OK\r\nc: 3\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: text/plain\r\n");
        assert_eq!(h.reason(), b"OK");
        assert_eq!(h.get(b"content-type"), Some(&b"text/plain"[..]));
    }

    #[test]
    fn rfc9111_5_2_2_4_listed_fields_are_omitted() {
        let f = fields(&[("Set-Cookie", "a=b"), ("X-A", "1"), ("X-B", "2"), ("Date", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        let h = StoredHead::new(200, b"", f.iter().copied(), &[Box::from("set-cookie"), Box::from("x-a")], 0);
        assert_eq!(h.iter().map(|(n, _)| n).collect::<Vec<_>>(), [&b"X-B"[..], b"Date"]);
        assert_eq!(h.reason(), b"");
    }

    #[test]
    fn rfc9111_5_1_a_hit_carries_age_and_its_framing() {
        let f = fields(&[("Date", "Sun, 06 Nov 1994 08:49:37 GMT"), ("Content-Length", "999")]);
        let h = StoredHead::new(200, b"OK", f.iter().copied(), &[], 0);
        let mut out = Vec::new();
        h.write_response(&mut out, 7, 12, Some("tollgate; hit; ttl=5"), Some("close"));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nage: 7\r\ncontent-length: 12\r\n\
             cache-status: tollgate; hit; ttl=5\r\nconnection: close\r\n\r\n"
        );
        // What goes out parses as a response with the stored body's length.
        let mut parsed = crate::h1::ResponseHead::default();
        let mut out = Vec::new();
        h.write_response(&mut out, 0, 12, None, None);
        assert!(matches!(crate::h1::parse_response(&out, &mut parsed, 8192), Ok(crate::h1::Parsed::Complete(..))));
        assert_eq!(parsed.framing(false), crate::h1::Framing::Length(12));
        let nc = StoredHead::new(204, b"No Content", f.iter().copied(), &[], 0);
        let mut out = Vec::new();
        nc.write_response(&mut out, 0, 0, None, Some("keep-alive"));
        let nc = String::from_utf8(out).unwrap();
        assert!(!nc.contains("content-length") && nc.ends_with("connection: keep-alive\r\n\r\n"), "{nc}");
    }

    #[test]
    fn rfc9110_6_6_1_missing_date_is_the_time_received() {
        let h = StoredHead::new(404, b"Not Found", std::iter::empty(), &[], 784111777);
        assert_eq!(h.get(b"date"), Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..]));
        assert_eq!(parse_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784111777));
        // The obsolete forms a recipient must accept.
        assert_eq!(parse_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(784111777));
        assert_eq!(parse_date(b"Sun Nov  6 08:49:37 1994"), Some(784111777));
        assert_eq!(parse_date(b"0"), None);
    }
}
