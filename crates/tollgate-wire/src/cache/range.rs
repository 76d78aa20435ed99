//! Range requests answered from a stored full response (RFC 9110 section 14;
//! RFC 9111 section 3.4 leaves combining partial responses to the cache, and
//! Tollgate stores full 200 responses only, so every range is cut from one).
//!
//! Pure: the request's fields, the stored response's metadata and its length in,
//! what to answer out. The choices RFC 9110 leaves to a server:
//! - one satisfiable range: 206 with `Content-Range` (section 14.4);
//! - several satisfiable ranges: the full 200 (section 14.2: "a server MAY
//!   ignore the Range header field"); a multipart/byteranges body would cost a
//!   copy of the parts and a boundary for what browsers and download tools
//!   rarely ask, and a client must accept a 200 anyway;
//! - an invalid `Range` or one in another unit: ignored, the full 200
//!   (section 14.2);
//! - none satisfiable: 416 with `Content-Range: bytes */LEN` (section 15.5.17).

use super::head::parse_date;
use super::policy::{EntryMeta, RequestFacts, strong_eq};

/// What to answer a request from a stored response of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// The whole stored response (no `Range`, or one ignored).
    Full,
    /// 206 with bytes `first..=last` of the body.
    Partial { first: u64, last: u64 },
    /// 416: no range of the request overlaps the body.
    Unsatisfiable,
}

impl RangeAnswer {
    /// The `Content-Range` value for a body of `len` bytes (RFC 9110 section
    /// 14.4), `None` for [`RangeAnswer::Full`].
    pub fn content_range(&self, len: u64) -> Option<String> {
        match self {
            RangeAnswer::Full => None,
            RangeAnswer::Partial { first, last } => Some(format!("bytes {first}-{last}/{len}")),
            RangeAnswer::Unsatisfiable => Some(format!("bytes */{len}")),
        }
    }
}

/// The most range specs read from one `Range` (a longer list is answered
/// with the full response, as any list of several ranges is).
const MAX_SPECS: usize = 64;

/// Section 14.2: how to answer `req` from a stored response with `meta` and a
/// body of `len` bytes.
pub fn answer(req: &RequestFacts<'_>, meta: &EntryMeta, len: u64) -> RangeAnswer {
    // Section 14.2: range handling is defined for GET only; other methods ignore
    // Range. A 206 is made from a 200 only (section 15.3.7: the 200 response
    // the request would otherwise get).
    if req.method != "GET" || meta.status != 200 {
        return RangeAnswer::Full;
    }
    let mut lines = 0;
    let mut value = Vec::new();
    req.headers.any_value("range", &mut |v| {
        lines += 1;
        value = v.to_vec();
        false
    });
    // Section 5.3: Range is a singleton field; two lines are invalid: ignored.
    if lines != 1 {
        return RangeAnswer::Full;
    }
    if !if_range_holds(req, meta) {
        return RangeAnswer::Full;
    }
    let Some(specs) = parse(&value) else { return RangeAnswer::Full };
    let mut satisfiable = specs.iter().filter_map(|s| s.resolve(len));
    match (satisfiable.next(), satisfiable.next()) {
        (None, _) if len == 0 && specs.iter().any(|s| matches!(s, Spec::Suffix(n) if *n > 0)) => {
            // Section 14.1.1: on an empty body a non-empty suffix is satisfiable,
            // but no 206 can carry zero bytes of it: the (empty) full response.
            RangeAnswer::Full
        }
        (None, _) => RangeAnswer::Unsatisfiable,
        (Some((first, last)), None) => RangeAnswer::Partial { first, last },
        (Some(_), Some(_)) => RangeAnswer::Full,
    }
}

/// Section 13.1.5: `If-Range` (when present) must match the stored response,
/// else the Range is ignored: an entity tag by strong comparison with the
/// stored `ETag` (a weak tag never matches), an HTTP-date exactly equal to the
/// stored `Last-Modified`. A value that is neither does not match.
fn if_range_holds(req: &RequestFacts<'_>, meta: &EntryMeta) -> bool {
    let mut lines = 0;
    let mut value = Vec::new();
    req.headers.any_value("if-range", &mut |v| {
        lines += 1;
        value = v.trim_ascii().to_vec();
        false
    });
    match lines {
        0 => true,
        1 if value.first() == Some(&b'"') || value.starts_with(b"W/") => {
            meta.etag.as_deref().is_some_and(|t| strong_eq(t, &value))
        }
        1 => parse_date(&value).is_some_and(|d| meta.last_modified.as_ref().is_some_and(|l| l.1 == d)),
        _ => false,
    }
}

/// One range-spec (section 14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `first-` or `first-last`.
    Int { first: u64, last: Option<u64> },
    /// `-suffix`: the last `suffix` bytes.
    Suffix(u64),
}

impl Spec {
    /// Section 14.1.1: the bytes it selects of a body of `len`, inclusive, or
    /// `None` when unsatisfiable.
    fn resolve(&self, len: u64) -> Option<(u64, u64)> {
        match *self {
            Spec::Int { first, last } => (first < len).then(|| (first, last.map_or(len - 1, |l| l.min(len - 1)))),
            Spec::Suffix(n) => (n > 0 && len > 0).then(|| (len.saturating_sub(n), len - 1)),
        }
    }
}

/// Section 14.1.2: `bytes=` followed by a list of range-specs (the unit is
/// case-insensitive, whitespace around members allowed). `None`: another unit,
/// a syntax error, `first > last`, or more than [`MAX_SPECS`] members.
fn parse(v: &[u8]) -> Option<Vec<Spec>> {
    let v = v.trim_ascii();
    let eq = v.iter().position(|b| *b == b'=')?;
    if !v[..eq].eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let mut specs = Vec::new();
    for member in v[eq + 1..].split(|b| *b == b',') {
        let m = member.trim_ascii();
        if m.is_empty() {
            // Section 5.6.1: empty list members are allowed and not counted.
            continue;
        }
        if specs.len() == MAX_SPECS {
            return None;
        }
        let dash = m.iter().position(|b| *b == b'-')?;
        let (a, b) = (&m[..dash], &m[dash + 1..]);
        let spec = match (a.is_empty(), b.is_empty()) {
            (true, true) => return None,
            (true, false) => Spec::Suffix(digits(b)?),
            (false, true) => Spec::Int { first: digits(a)?, last: None },
            (false, false) => {
                let (first, last) = (digits(a)?, digits(b)?);
                // Section 14.1.1: a last-pos below first-pos is invalid.
                if last < first {
                    return None;
                }
                Spec::Int { first, last: Some(last) }
            }
        };
        specs.push(spec);
    }
    (!specs.is_empty()).then_some(specs)
}

/// 1*DIGIT; values past u64 saturate (a position past any body).
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::head::fmt_date;
    use crate::cache::policy::{Options, storable};
    use crate::cache::testing::H;

    const T: u64 = 1_700_000_000;

    fn meta(status: u16, fields: &[(&str, &str)]) -> EntryMeta {
        let resp = H::new(fields).with("Date", &fmt_date(T)).with("Cache-Control", "max-age=60");
        let req = H::new(&[]);
        storable(&RequestFacts::new("GET", &req), status, &resp, T, T, &Options::default()).unwrap().meta
    }

    fn ask(req: &[(&str, &str)], m: &EntryMeta, len: u64) -> RangeAnswer {
        let h = H::new(req);
        answer(&RequestFacts::new("GET", &h), m, len)
    }

    fn part(first: u64, last: u64) -> RangeAnswer {
        RangeAnswer::Partial { first, last }
    }

    #[test]
    fn rfc9110_14_1_2_byte_ranges_first_last_open_and_suffix() {
        let m = meta(200, &[]);
        assert_eq!(ask(&[("Range", "bytes=0-499")], &m, 1000), part(0, 499));
        assert_eq!(ask(&[("Range", "bytes=500-999")], &m, 1000), part(500, 999));
        assert_eq!(ask(&[("Range", "bytes=9500-")], &m, 10000), part(9500, 9999));
        assert_eq!(ask(&[("Range", "bytes=-500")], &m, 10000), part(9500, 9999));
        assert_eq!(ask(&[("Range", "Bytes = 0-0")], &m, 10), RangeAnswer::Full, "no space before =");
        assert_eq!(ask(&[("Range", "BYTES=0-0")], &m, 10), part(0, 0), "the unit is case-insensitive");
        assert_eq!(ask(&[("Range", "bytes= 2-3 ,")], &m, 10), part(2, 3), "whitespace and empty members");
    }

    #[test]
    fn rfc9110_14_1_1_last_pos_past_the_end_and_long_suffixes_are_clamped() {
        let m = meta(200, &[]);
        assert_eq!(ask(&[("Range", "bytes=5-100")], &m, 10), part(5, 9));
        assert_eq!(ask(&[("Range", "bytes=-100")], &m, 10), part(0, 9), "suffix longer than the body: all of it");
        assert_eq!(ask(&[("Range", "bytes=0-99999999999999999999999")], &m, 10), part(0, 9), "saturates");
    }

    #[test]
    fn rfc9110_15_5_17_no_satisfiable_range_is_416() {
        let m = meta(200, &[]);
        assert_eq!(ask(&[("Range", "bytes=10-20")], &m, 10), RangeAnswer::Unsatisfiable);
        assert_eq!(ask(&[("Range", "bytes=-0")], &m, 10), RangeAnswer::Unsatisfiable, "an empty suffix");
        assert_eq!(ask(&[("Range", "bytes=10-, 20-30")], &m, 10), RangeAnswer::Unsatisfiable);
        assert_eq!(RangeAnswer::Unsatisfiable.content_range(10).unwrap(), "bytes */10");
        assert_eq!(part(0, 4).content_range(10).unwrap(), "bytes 0-4/10");
        assert_eq!(ask(&[("Range", "bytes=0-5")], &m, 0), RangeAnswer::Unsatisfiable, "nothing in an empty body");
        assert_eq!(ask(&[("Range", "bytes=-5")], &m, 0), RangeAnswer::Full, "a suffix of an empty body");
    }

    #[test]
    fn rfc9110_14_2_several_ranges_get_the_full_response_and_one_satisfiable_a_206() {
        let m = meta(200, &[]);
        assert_eq!(ask(&[("Range", "bytes=0-1, 5-6")], &m, 10), RangeAnswer::Full);
        assert_eq!(ask(&[("Range", "bytes=0-1, 50-60")], &m, 10), part(0, 1), "the unsatisfiable one is left out");
        let many = format!("bytes={}", vec!["0-0"; 65].join(","));
        assert_eq!(ask(&[("Range", &many)], &m, 10), RangeAnswer::Full);
    }

    #[test]
    fn rfc9110_14_2_invalid_or_other_units_are_ignored() {
        let m = meta(200, &[]);
        for bad in ["items=0-1", "bytes=5-1", "bytes=a-b", "bytes=-", "bytes=", "bytes 0-1", "bytes=1"] {
            assert_eq!(ask(&[("Range", bad)], &m, 10), RangeAnswer::Full, "{bad}");
        }
        let two = [("Range", "bytes=0-1"), ("Range", "bytes=2-3")];
        assert_eq!(ask(&two, &m, 10), RangeAnswer::Full, "section 5.3: two Range lines are invalid");
    }

    #[test]
    fn rfc9110_14_2_only_get_and_only_from_a_200() {
        let m = meta(200, &[]);
        let h = H::new(&[("Range", "bytes=0-1")]);
        assert_eq!(answer(&RequestFacts::new("HEAD", &h), &m, 10), RangeAnswer::Full);
        let not_found = meta(404, &[]);
        assert_eq!(ask(&[("Range", "bytes=0-1")], &not_found, 10), RangeAnswer::Full);
    }

    #[test]
    fn rfc9110_13_1_5_if_range_with_a_strong_etag_or_the_exact_last_modified() {
        let lm = fmt_date(T - 3600);
        let m = meta(200, &[("ETag", "\"v1\""), ("Last-Modified", &lm)]);
        let r = ("Range", "bytes=0-1");
        assert_eq!(ask(&[r, ("If-Range", "\"v1\"")], &m, 10), part(0, 1));
        assert_eq!(ask(&[r, ("If-Range", "\"v2\"")], &m, 10), RangeAnswer::Full, "another tag: the whole");
        assert_eq!(ask(&[r, ("If-Range", "W/\"v1\"")], &m, 10), RangeAnswer::Full, "weak tags never match");
        assert_eq!(ask(&[r, ("If-Range", &lm)], &m, 10), part(0, 1));
        assert_eq!(ask(&[r, ("If-Range", &fmt_date(T))], &m, 10), RangeAnswer::Full, "not the same date");
        assert_eq!(ask(&[r, ("If-Range", "yesterday")], &m, 10), RangeAnswer::Full);
        let weak = meta(200, &[("ETag", "W/\"v1\"")]);
        assert_eq!(ask(&[r, ("If-Range", "W/\"v1\"")], &weak, 10), RangeAnswer::Full);
        assert_eq!(ask(&[r, ("If-Range", "\"v1\"")], &weak, 10), RangeAnswer::Full, "stored tag weak");
        let none = meta(200, &[]);
        assert_eq!(ask(&[r, ("If-Range", &lm)], &none, 10), RangeAnswer::Full, "no Last-Modified stored");
        assert_eq!(ask(&[("If-Range", "\"v1\"")], &m, 10), RangeAnswer::Full, "If-Range alone does nothing");
    }
}
