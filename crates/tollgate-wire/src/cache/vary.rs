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
//!
//! `Accept-Encoding` is also matched by what it means (RFC 9110 section
//! 12.5.3), with the stored response's `Content-Encoding` at hand
//! ([`Vary::selects`]): a request that leaves the coding to the server (no
//! `Accept-Encoding`: "any content coding is acceptable"; or `*` with q > 0)
//! selects a stored variant whatever set of codings its request had, when it
//! accepts that variant's coding (identity included; `gzip;q=0`,
//! `identity;q=0` and `*;q=0` exclude as they say). Such a client has no
//! preference the origin could have served better, so any variant it accepts
//! is one the origin could have sent it. A request that lists codings keeps
//! the set match (its preferences may have made the origin choose another
//! coding). Either way a variant whose coding the request refuses is never
//! selected.

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
                if n == b"*" || !n.iter().all(|b| tollgate_config::is_tchar(*b)) {
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

    /// Whether a response stored with this `Vary`, `secondary` key and
    /// `Content-Encoding` `coding` is selected for a request with headers `req`
    /// (RFC 9111 section 4.1): every named field's normalised value the same,
    /// `Accept-Encoding` by meaning (the module doc).
    pub fn selects(&self, secondary: &[u8], coding: Option<&str>, req: &dyn HeaderLookup) -> bool {
        let names = match self {
            Vary::None => return true,
            Vary::Star => return false,
            Vary::Fields(names) => names,
        };
        let mut rest = secondary;
        let mut mine = Vec::new();
        for name in names.iter() {
            mine.clear();
            push_value(&mut mine, name, req);
            let ae = &**name == "accept-encoding";
            if let Some(tail) = rest.strip_prefix(&mine[..]) {
                rest = tail;
            } else if ae && leaves_coding_open(req) {
                // The stored value is this module's own (codings or ABSENT), to its END.
                let Some(end) = rest.iter().position(|b| *b == END) else { return false };
                rest = &rest[end + 1..];
            } else {
                return false;
            }
            if ae && !accepts_coding(req, coding.unwrap_or_default().as_bytes()) {
                return false;
            }
        }
        rest.is_empty()
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
    /// `*` listed with q > 0, and with q = 0.
    star_yes: bool,
    star_no: bool,
}

impl Codings {
    fn add(&mut self, v: &[u8]) {
        for (coding, q_zero) in codings(v) {
            let coding = alias(coding);
            if coding == b"*" {
                self.star_yes |= !q_zero;
                self.star_no |= q_zero;
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
        self.no & bit == 0 && (self.yes & bit != 0 || self.star())
    }

    /// `*` with q > 0 (and never with q=0: the restrictive reading again).
    fn star(&self) -> bool {
        self.star_yes && !self.star_no
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

/// The registered aliases (RFC 9110 section 8.4.1): `x-gzip` is `gzip`,
/// `x-compress` is `compress`.
fn alias(coding: &[u8]) -> &[u8] {
    if coding.eq_ignore_ascii_case(b"x-gzip") {
        b"gzip"
    } else if coding.eq_ignore_ascii_case(b"x-compress") {
        b"compress"
    } else {
        coding
    }
}

/// Whether a request leaves the content coding to the server (RFC 9110
/// section 12.5.3): no `Accept-Encoding` at all, or `*` with q > 0 in it.
pub fn leaves_coding_open(req: &dyn HeaderLookup) -> bool {
    let mut present = false;
    let mut set = Codings::default();
    req.any_value("accept-encoding", &mut |v| {
        present = true;
        set.add(v);
        false
    });
    !present || set.star()
}

/// Whether a request accepts a response with `Content-Encoding:
/// content_encoding` (empty: none, identity), by RFC 9110 section 12.5.3:
/// - no `Accept-Encoding`: any coding;
/// - a coding listed by name (or alias) is acceptable when its q > 0, and not
///   when any listing of it says q=0;
/// - one not listed is acceptable when `*` is listed with q > 0 (any coding,
///   known to Tollgate or not);
/// - identity (no `Content-Encoding`), unless listed with q=0 or excluded by
///   `*;q=0` without a listing of its own; an empty `Accept-Encoding` thus
///   accepts identity only.
///
/// Several codings applied (`Content-Encoding: gzip, br`) must each be acceptable.
pub fn accepts_coding(req: &dyn HeaderLookup, content_encoding: &[u8]) -> bool {
    let mut applied = content_encoding
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity"))
        .peekable();
    if applied.peek().is_none() {
        return accepts_one(req, b"identity");
    }
    applied.all(|c| accepts_one(req, c))
}

fn accepts_one(req: &dyn HeaderLookup, coding: &[u8]) -> bool {
    let coding = alias(coding);
    // One pass over the field: this coding's listings, and `*`'s.
    let (mut present, mut yes, mut no, mut star_yes, mut star_no) = (false, false, false, false, false);
    req.any_value("accept-encoding", &mut |v| {
        present = true;
        for (c, q_zero) in codings(v) {
            let c = alias(c);
            if c == b"*" {
                star_yes |= !q_zero;
                star_no |= q_zero;
            } else if c.eq_ignore_ascii_case(coding) {
                no |= q_zero;
                yes |= !q_zero;
            }
        }
        false
    });
    if !present {
        return true;
    }
    if no || yes {
        return !no;
    }
    if star_yes || star_no {
        // As Codings::star: never with a `*;q=0` anywhere.
        return star_yes && !star_no;
    }
    coding.eq_ignore_ascii_case(b"identity")
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
    fn rfc9110_12_5_3_gzip_never_goes_to_a_client_that_refuses_it() {
        let ae = |v: &'static str| H::new(&[("Accept-Encoding", v)]);
        assert!(accepts_coding(&ae("gzip, br"), b"gzip"));
        assert!(accepts_coding(&ae("x-gzip"), b"gzip"));
        assert!(!accepts_coding(&ae("br"), b"gzip"));
        assert!(!accepts_coding(&ae("gzip;q=0"), b"gzip"));
        assert!(!accepts_coding(&ae("gzip;q=0.000, *"), b"gzip"), "a q=0 listing beats `*`");
        assert!(!accepts_coding(&ae("gzip, gzip;q=0"), b"gzip"), "contradictions read restrictively");
        assert!(accepts_coding(&ae("*"), b"GZIP"));
        assert!(accepts_coding(&ae("exi"), b"exi"));
        assert!(!accepts_coding(&ae("exi;q=0"), b"exi"));
        // An empty field: identity only.
        assert!(!accepts_coding(&ae(""), b"gzip") && accepts_coding(&ae(""), b""));
        // Several codings applied: each must be acceptable.
        assert!(accepts_coding(&ae("gzip, br"), b"gzip, br") && !accepts_coding(&ae("gzip"), b"gzip, br"));
    }

    #[test]
    fn rfc9110_12_5_3_no_accept_encoding_or_a_star_accepts_any_coding() {
        let ae = |v: &'static str| H::new(&[("Accept-Encoding", v)]);
        // "If no Accept-Encoding header field is in the request, any content
        // coding is considered acceptable by the user agent."
        for c in ["gzip", "br", "zstd", "exi", "gzip, br", "identity", ""] {
            assert!(accepts_coding(&H::new(&[]), c.as_bytes()), "{c}");
            assert!(accepts_coding(&ae("*"), c.as_bytes()), "* takes {c}");
        }
        assert!(leaves_coding_open(&H::new(&[])) && leaves_coding_open(&ae("*")));
        assert!(leaves_coding_open(&ae("gzip;q=0, *;q=0.5")));
        assert!(!leaves_coding_open(&ae("gzip")) && !leaves_coding_open(&ae("*;q=0")) && !leaves_coding_open(&ae("")));
        // `*` never overrides a coding's own q=0.
        assert!(!accepts_coding(&ae("*, br;q=0"), b"br") && accepts_coding(&ae("*, br;q=0"), b"gzip"));
    }

    #[test]
    fn rfc9110_12_5_3_identity_is_acceptable_unless_excluded() {
        let ae = |v: &'static str| H::new(&[("Accept-Encoding", v)]);
        for v in ["gzip", "br, gzip;q=0.5", "identity", "*"] {
            assert!(accepts_coding(&ae(v), b""), "{v}");
            assert!(accepts_coding(&ae(v), b"identity"), "{v}");
        }
        // "identity;q=0" or "*;q=0" without a more specific entry for identity.
        assert!(!accepts_coding(&ae("gzip, identity;q=0"), b""));
        assert!(!accepts_coding(&ae("gzip, *;q=0"), b""));
        assert!(accepts_coding(&ae("*;q=0, identity"), b""));
        // Nothing at all is acceptable.
        let nothing = ae("identity;q=0, *;q=0");
        assert!(
            !accepts_coding(&nothing, b"") && !accepts_coding(&nothing, b"gzip") && !accepts_coding(&nothing, b"exi")
        );
    }

    #[test]
    fn rfc9110_12_5_3_a_request_without_preference_selects_any_variant_it_accepts() {
        let v = vary("Accept-Encoding");
        let ae = |s: &'static str| H::new(&[("Accept-Encoding", s)]);
        let gzip = v.key(&ae("gzip, deflate, br")).unwrap();
        let plain = v.key(&ae("identity")).unwrap();
        let absent = v.key(&H::new(&[])).unwrap();
        // Stored gzip for a gzip client, or identity for any: a request without
        // Accept-Encoding, or with `*`, selects either (these were vary-misses).
        for req in [H::new(&[]), ae("*"), ae("*;q=0.5"), ae("gzip;q=0.5, *")] {
            assert!(v.selects(&gzip, Some("gzip"), &req), "{:?}", req.0);
            assert!(v.selects(&plain, None, &req), "{:?}", req.0);
            assert!(v.selects(&absent, Some("br"), &req), "{:?}", req.0);
        }
        // q=0 exclusions stand.
        assert!(!v.selects(&gzip, Some("gzip"), &ae("*, gzip;q=0")));
        assert!(v.selects(&absent, Some("br"), &ae("*, gzip;q=0")));
        assert!(!v.selects(&plain, None, &ae("*, identity;q=0")));
        for stored in [(&gzip, Some("gzip")), (&plain, None), (&absent, Some("exi"))] {
            assert!(!v.selects(stored.0, stored.1, &ae("identity;q=0, *;q=0")));
        }
        // A request that lists codings keeps the set match ...
        assert!(v.selects(&gzip, Some("gzip"), &ae("br, GZIP, deflate")));
        assert!(!v.selects(&gzip, Some("gzip"), &ae("gzip")));
        assert!(!v.selects(&absent, Some("gzip"), &ae("gzip")));
        // ... and even a set match never hands out a coding the request refuses.
        let odd = v.key(&ae("gzip, identity;q=0")).unwrap();
        assert!(v.selects(&odd, Some("gzip"), &ae("gzip, identity;q=0")));
        assert!(!v.selects(&odd, None, &ae("gzip, identity;q=0")));
        // The other fields named by Vary still match exactly (absent only absent).
        let both = vary("Accept-Encoding, Accept-Language");
        let fr = both.key(&H::new(&[("Accept-Encoding", "gzip"), ("Accept-Language", "fr")])).unwrap();
        assert!(both.selects(&fr, Some("gzip"), &H::new(&[("Accept-Language", "FR")])));
        assert!(!both.selects(&fr, Some("gzip"), &H::new(&[("Accept-Language", "en")])));
        assert!(!both.selects(&fr, Some("gzip"), &H::new(&[])));
        assert!(!both.selects(&fr, Some("gzip"), &H::new(&[("Accept-Encoding", "*"), ("Accept-Language", "en")])));
        // A key cut short or with more after it never matches.
        assert!(!v.selects(&gzip[..gzip.len() - 1], Some("gzip"), &H::new(&[])));
        assert!(!v.selects(&[&gzip[..], b"x\0"].concat(), Some("gzip"), &H::new(&[])));
    }
}
