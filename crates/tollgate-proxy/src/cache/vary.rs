//! `Vary` (RFC 9110 section 12.5.5) and the secondary cache key (RFC 9111
//! section 4.1).
//!
//! A stored response is selected for a request only when every field its `Vary`
//! names has, in the request, the same value as in the request that got it
//! stored, after normalisation. The secondary key is that list of normalised
//! values, one per name, computed once when storing (from the original request)
//! and once per lookup (from the new request).
//!
//! Normalisation (section 4.1 allows "adding or removing whitespace, combining
//! multiple field lines with the same name, normalizing both values in a way
//! that is known to have identical semantics"):
//! - every field line of the name is split into list members, each trimmed of
//!   whitespace, and the members joined with ", " (so `1,2`, ` 1, 2 ` and two
//!   lines `1` and `2` are one value);
//! - `Accept-Language` is also lowercased (language ranges are
//!   case-insensitive, RFC 9110 section 12.5.4);
//! - `Accept-Encoding` becomes the set of content codings Tollgate may store
//!   variants for that the client accepts (q > 0, or `*`): `br`, `deflate`,
//!   `gzip`, `zstd` in that order. Two clients accepting the same codings get the
//!   same variant, and a client that does not accept gzip never matches a
//!   variant stored for one that did (the nginx failure in the seed);
//! - a field absent from the request is not the same as a field present and
//!   empty (section 4.1: absent only matches absent).

use tollgate_config::HeaderLookup;

/// The `Vary` of a stored response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Vary {
    /// No `Vary`: the response matches every request for its URI.
    #[default]
    None,
    /// `Vary: *`: never matches (section 4.1); not worth storing.
    Star,
    /// The field names, lower case, sorted, without duplicates.
    Fields(Box<[Box<str>]>),
}

impl Vary {
    /// The `Vary` of a response (every field line, case-insensitive names).
    pub fn of(resp: &dyn HeaderLookup) -> Vary {
        let mut names: Vec<Box<str>> = Vec::new();
        let mut star = false;
        resp.any_value("vary", &mut |v| {
            for n in v.split(|b| *b == b',') {
                let n = n.trim_ascii();
                if n.is_empty() {
                    continue;
                }
                if n == b"*" || !n.iter().all(|b| super::control::is_tchar(*b)) {
                    // A member that is not a field name cannot be matched: as `*`.
                    star = true;
                } else {
                    names.push(String::from_utf8_lossy(n).to_ascii_lowercase().into_boxed_str());
                }
            }
            false
        });
        if star {
            return Vary::Star;
        }
        if names.is_empty() {
            return Vary::None;
        }
        names.sort_unstable();
        names.dedup();
        Vary::Fields(names.into_boxed_slice())
    }

    /// Whether a response stored with this `Vary` and `secondary` key is
    /// selected for a request with headers `req` (RFC 9111 section 4.1).
    pub fn selects(&self, secondary: &[u8], req: &dyn HeaderLookup) -> bool {
        match self {
            Vary::None => true,
            v => v.key(req).is_some_and(|k| *k == *secondary),
        }
    }

    /// The secondary key of `req` for this `Vary` (`None` for `Vary: *`, which
    /// matches nothing). Empty without `Vary`.
    pub fn key(&self, req: &dyn HeaderLookup) -> Option<Box<[u8]>> {
        match self {
            Vary::None => Some(Box::default()),
            Vary::Star => None,
            Vary::Fields(names) => {
                let mut key = Vec::new();
                for name in names.iter() {
                    push_value(&mut key, name, req);
                }
                Some(key.into_boxed_slice())
            }
        }
    }
}

/// Marks in a secondary key. Field values cannot hold these bytes (RFC 9110
/// section 5.5: no CTLs but HTAB), so no two distinct keys encode alike.
const ABSENT: u8 = 0x01;
const END: u8 = 0x00;

fn push_value(key: &mut Vec<u8>, name: &str, req: &dyn HeaderLookup) {
    if name == "accept-encoding" {
        let mut any = false;
        let mut set = Codings::default();
        req.any_value(name, &mut |v| {
            any = true;
            set.add(v);
            false
        });
        if !any {
            key.push(ABSENT);
        } else {
            key.extend_from_slice(set.canonical().as_bytes());
        }
        key.push(END);
        return;
    }
    // RFC 9110 section 12.5.4: language ranges (RFC 4647 section 2) and the
    // `q` parameter are case-insensitive, so `en-US` and `en-us` select alike.
    let lowercase = name == "accept-language";
    let start = key.len();
    let mut any = false;
    req.any_value(name, &mut |v| {
        any = true;
        for m in v.split(|b| *b == b',') {
            let m = m.trim_ascii();
            if m.is_empty() {
                continue;
            }
            if key.len() > start {
                key.extend_from_slice(b", ");
            }
            if lowercase {
                key.extend(m.iter().map(u8::to_ascii_lowercase));
            } else {
                key.extend_from_slice(m);
            }
        }
        false
    });
    if !any {
        key.push(ABSENT);
    }
    key.push(END);
}

/// The codings of an `Accept-Encoding` a variant may be stored under.
const CODINGS: [&str; 4] = ["br", "deflate", "gzip", "zstd"];

/// Which of [`CODINGS`] a client accepts (RFC 9110 section 12.5.3): listed with
/// q > 0, or covered by `*` with q > 0 and not listed with q=0.
#[derive(Debug, Default, Clone, Copy)]
struct Codings {
    /// Bit i: coding i listed with q > 0.
    yes: u8,
    /// Bit i: coding i listed with q = 0.
    no: u8,
    star: bool,
}

impl Codings {
    fn add(&mut self, v: &[u8]) {
        for (coding, q_zero) in codings(v) {
            let coding = if coding.eq_ignore_ascii_case(b"x-gzip") { &b"gzip"[..] } else { coding };
            if coding == b"*" {
                self.star = !q_zero;
                continue;
            }
            if let Some(i) = CODINGS.iter().position(|c| c.as_bytes().eq_ignore_ascii_case(coding)) {
                if q_zero {
                    self.no |= 1 << i;
                } else {
                    self.yes |= 1 << i;
                }
            }
        }
    }

    fn accepts(&self, i: usize) -> bool {
        let bit = 1 << i;
        // An explicit q=0 wins over the same coding listed with q > 0 elsewhere:
        // the restrictive reading of a contradictory field.
        self.no & bit == 0 && (self.yes & bit != 0 || self.star)
    }

    fn canonical(&self) -> String {
        let mut out = String::new();
        for (i, c) in CODINGS.iter().enumerate() {
            if self.accepts(i) {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(c);
            }
        }
        out
    }
}

/// The members of an `Accept-Encoding` value: (coding, its qvalue is 0).
fn codings(v: &[u8]) -> impl Iterator<Item = (&[u8], bool)> {
    v.split(|b| *b == b',').filter_map(|member| {
        let mut parts = member.split(|b| *b == b';');
        let coding = parts.next().unwrap_or_default().trim_ascii();
        let mut q_zero = false;
        for p in parts {
            let p = p.trim_ascii();
            if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                q_zero = qvalue_is_zero(p[2..].trim_ascii());
            }
        }
        (!coding.is_empty()).then_some((coding, q_zero))
    })
}

/// Whether a qvalue (RFC 9110 section 12.4.2) is zero: `0`, `0.`, `0.000`. An
/// invalid qvalue counts as 1 (the member stays accepted, as without a weight).
fn qvalue_is_zero(q: &[u8]) -> bool {
    match q {
        [b'0'] => true,
        [b'0', b'.', rest @ ..] => rest.len() <= 3 && rest.iter().all(|b| *b == b'0'),
        _ => false,
    }
}

/// Whether a client accepts `coding` as a content coding of a stored response
/// (`identity` and no `Content-Encoding` are always acceptable here).
pub fn accepts_coding(req: &dyn HeaderLookup, coding: &[u8]) -> bool {
    if coding.is_empty() || coding.eq_ignore_ascii_case(b"identity") {
        return true;
    }
    let Some(i) = CODINGS.iter().position(|c| c.as_bytes().eq_ignore_ascii_case(coding)) else {
        // A coding outside the known set: only when listed by name with q > 0.
        let mut named = false;
        req.any_value("accept-encoding", &mut |v| {
            named |= codings(v).any(|(c, q_zero)| c.eq_ignore_ascii_case(coding) && !q_zero);
            named
        });
        return named;
    };
    let mut set = Codings::default();
    req.any_value("accept-encoding", &mut |v| {
        set.add(v);
        false
    });
    set.accepts(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cache::testing::H;

    fn vary(v: &'static str) -> Vary {
        Vary::of(&H::new(&[("Vary", v)]))
    }

    #[test]
    fn rfc9110_12_5_5_vary_names_are_case_insensitive_and_sorted() {
        assert_eq!(vary("Foo, bar, FOO"), Vary::Fields(vec![Box::from("bar"), Box::from("foo")].into()));
        assert_eq!(Vary::of(&H::new(&[])), Vary::None);
        assert_eq!(vary(" , "), Vary::None);
        assert_eq!(vary("foo, *"), Vary::Star);
        assert_eq!(vary("foo, b@d"), Vary::Star);
    }

    #[test]
    fn rfc9111_4_1_vary_star_never_matches() {
        assert_eq!(vary("*").key(&H::new(&[("Foo", "1")])), None);
    }

    #[test]
    fn rfc9111_4_1_matching_values_and_order_of_other_fields() {
        let v = vary("Foo, Bar");
        let a = v.key(&H::new(&[("Foo", "1"), ("Bar", "abc"), ("Other", "x")])).unwrap();
        let b = v.key(&H::new(&[("bar", "abc"), ("foo", "1"), ("Other", "y")])).unwrap();
        assert_eq!(a, b);
        let c = v.key(&H::new(&[("Foo", "2"), ("Bar", "abc")])).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn rfc9111_4_1_absent_only_matches_absent() {
        let v = vary("Foo, Bar");
        let omitted = v.key(&H::new(&[("Foo", "1")])).unwrap();
        assert_eq!(omitted, v.key(&H::new(&[("Foo", "1")])).unwrap());
        assert_ne!(omitted, v.key(&H::new(&[("Foo", "1"), ("Bar", "")])).unwrap());
        assert_ne!(omitted, v.key(&H::new(&[("Foo", "1"), ("Bar", "x")])).unwrap());
    }

    #[test]
    fn rfc9111_4_1_normalises_whitespace_and_combines_lines() {
        let v = vary("Foo");
        let one = v.key(&H::new(&[("Foo", "1,2")])).unwrap();
        assert_eq!(one, v.key(&H::new(&[("Foo", " 1, 2 ")])).unwrap());
        assert_eq!(one, v.key(&H::new(&[("Foo", "1"), ("Foo", "2")])).unwrap());
        assert_ne!(one, v.key(&H::new(&[("Foo", "2, 1")])).unwrap());
    }

    #[test]
    fn rfc9110_12_5_4_accept_language_ranges_are_case_insensitive() {
        let v = vary("Accept-Language");
        let one = v.key(&H::new(&[("Accept-Language", "en-US, de;q=0.5")])).unwrap();
        assert_eq!(one, v.key(&H::new(&[("Accept-Language", "EN-us, De;Q=0.5")])).unwrap());
        // Order still counts: it is not known to mean the same to every origin.
        assert_ne!(one, v.key(&H::new(&[("Accept-Language", "de;q=0.5, en-US")])).unwrap());
        // Other fields keep their case (their values may be case-sensitive).
        let foo = vary("Foo");
        assert_ne!(foo.key(&H::new(&[("Foo", "a")])).unwrap(), foo.key(&H::new(&[("Foo", "A")])).unwrap());
    }

    #[test]
    fn rfc9110_12_5_3_accept_encoding_is_a_canonical_set() {
        let v = vary("Accept-Encoding");
        let k = |ae: &'static str| v.key(&H::new(&[("Accept-Encoding", ae)])).unwrap();
        assert_eq!(k("gzip, deflate, br"), k("br;q=0.5, GZIP, deflate"));
        assert_eq!(k("gzip"), k("x-gzip;q=1"));
        assert_eq!(k("identity"), k("compress"));
        assert_ne!(k("gzip"), k("identity"));
        assert_ne!(k("gzip"), k("gzip;q=0"));
        assert_eq!(k("gzip;q=0"), k("identity"));
        assert_eq!(k("*"), k("br, deflate, gzip, zstd"));
        assert_eq!(k("*, gzip;q=0"), k("br, deflate, zstd"));
        assert_eq!(k("gzip;q=0.000"), k(""));
        // Absent is not "accepts nothing": both mean identity only, but RFC 9111
        // section 4.1 keeps absent apart.
        assert_ne!(v.key(&H::new(&[])).unwrap(), k(""));
    }

    #[test]
    fn rfc9110_12_5_3_gzip_never_goes_to_a_client_that_did_not_ask() {
        assert!(accepts_coding(&H::new(&[("Accept-Encoding", "gzip, br")]), b"gzip"));
        assert!(!accepts_coding(&H::new(&[]), b"gzip"));
        assert!(!accepts_coding(&H::new(&[("Accept-Encoding", "br")]), b"gzip"));
        assert!(!accepts_coding(&H::new(&[("Accept-Encoding", "gzip;q=0")]), b"gzip"));
        assert!(accepts_coding(&H::new(&[("Accept-Encoding", "*")]), b"GZIP"));
        assert!(accepts_coding(&H::new(&[]), b"identity"));
        assert!(accepts_coding(&H::new(&[("Accept-Encoding", "exi")]), b"exi"));
        assert!(!accepts_coding(&H::new(&[("Accept-Encoding", "exi;q=0")]), b"exi"));
        assert!(!accepts_coding(&H::new(&[("Accept-Encoding", "*")]), b"exi"));
    }
}
