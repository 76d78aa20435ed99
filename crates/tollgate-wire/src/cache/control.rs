//! `Cache-Control` (RFC 9111 section 5.2), parsed strictly and without
//! allocating unless a directive lists field names.
//!
//! Grammar (section 5.2, with RFC 9110 section 5.6.1 lists):
//! `Cache-Control = #( token [ "=" ( token / quoted-string ) ] )`. Every field
//! line is one list; empty list members are skipped. Directive names are
//! compared case-insensitively (section 5.2). An argument may be a token or a
//! quoted-string whatever the directive (section 5.2: "recipients ought to
//! accept both forms").
//!
//! What is done with faults, each the most restrictive reading RFC 9111 allows:
//! - a member that does not follow the grammar (`max-age =5`, `max-age= 5`,
//!   `max-age='5'`, an unterminated quote) is skipped to the next comma outside a
//!   quoted string; if its name is one of the directives below, the directive is
//!   present with an invalid argument;
//! - the same directive twice: the first occurrence counts (section 4.2.1: "either
//!   the first occurrence should be used or the response should be considered
//!   stale"); a flag is present if it appears anywhere;
//! - delta-seconds (section 1.2.2) larger than 2^31 become 2^31; an invalid one
//!   (not 1*DIGIT: `-1`, `3600.0`, `a1`, empty) makes `max-age` and `s-maxage`
//!   0 (stale: the restrictive choice, and what the cache-tests suite checks with
//!   `max-age='3600'`), a request's `max-age` 0 (revalidate), and the other
//!   directives (`max-stale`, `min-fresh`, `stale-while-revalidate`,
//!   `stale-if-error`) absent, since each of those only widens what may be served.
//!   `max-stale` with no argument means any staleness (section 5.2.1.2).

use tollgate_config::is_tchar;

/// Largest delta-seconds value kept (RFC 9111 section 1.2.2).
pub const DELTA_MAX: u32 = 1 << 31;

/// The directives of one message's `Cache-Control` field lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    flags: u32,
    /// `max-age` (response: section 5.2.2.1; request: section 5.2.1.1).
    pub max_age: Option<u32>,
    /// `s-maxage` (section 5.2.2.10).
    pub s_maxage: Option<u32>,
    /// `max-stale=N` (section 5.2.1.2); see [`CacheControl::max_stale_any`].
    pub max_stale: Option<u32>,
    /// `min-fresh` (section 5.2.1.3).
    pub min_fresh: Option<u32>,
    /// `stale-while-revalidate` (RFC 5861 section 3).
    pub stale_while_revalidate: Option<u32>,
    /// `stale-if-error` (RFC 5861 section 4).
    pub stale_if_error: Option<u32>,
    /// Field names of the qualified `no-cache="a, b"` (section 5.2.2.4), lower case.
    pub no_cache_fields: Vec<Box<str>>,
    /// Field names of the qualified `private="a, b"` (section 5.2.2.7), lower case.
    pub private_fields: Vec<Box<str>>,
    /// The directives came from a targeted field (RFC 9213, targeted.rs), not
    /// `Cache-Control`: `Expires` is then ignored too (section 2.2).
    pub targeted: bool,
}

const NO_STORE: u32 = 1;
const NO_CACHE: u32 = 1 << 1;
const PRIVATE: u32 = 1 << 2;
const PUBLIC: u32 = 1 << 3;
const MUST_REVALIDATE: u32 = 1 << 4;
const PROXY_REVALIDATE: u32 = 1 << 5;
const MUST_UNDERSTAND: u32 = 1 << 6;
const ONLY_IF_CACHED: u32 = 1 << 7;
const NO_TRANSFORM: u32 = 1 << 8;
const IMMUTABLE: u32 = 1 << 9;
const MAX_STALE_ANY: u32 = 1 << 10;
/// `no-cache` / `private` without field names somewhere in the message.
const NO_CACHE_ALL: u32 = 1 << 11;
const PRIVATE_ALL: u32 = 1 << 12;
/// Seen at least once: for "first occurrence wins".
const SEEN_MAX_AGE: u32 = 1 << 16;
const SEEN_S_MAXAGE: u32 = 1 << 17;
const SEEN_MAX_STALE: u32 = 1 << 18;
const SEEN_MIN_FRESH: u32 = 1 << 19;
const SEEN_SWR: u32 = 1 << 20;
const SEEN_SIE: u32 = 1 << 21;

/// One parsed argument.
pub(super) enum Arg<'a> {
    None,
    Token(&'a [u8]),
    Quoted(&'a [u8]),
    /// Grammar broken after the name.
    Invalid,
}

impl CacheControl {
    /// Parses every value of `Cache-Control` the iterator yields, in order.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut cc = CacheControl::default();
        for v in values {
            cc.parse_line(v);
        }
        cc
    }

    /// Parses the `Cache-Control` field lines of a header lookup.
    pub fn of(headers: &dyn tollgate_config::HeaderLookup) -> Self {
        let mut cc = CacheControl::default();
        headers.any_value("cache-control", &mut |v| {
            cc.parse_line(v);
            false
        });
        cc
    }

    pub fn no_store(&self) -> bool {
        self.flags & NO_STORE != 0
    }
    /// `no-cache`, qualified or not.
    pub fn no_cache(&self) -> bool {
        self.flags & NO_CACHE != 0
    }
    /// `no-cache` without field names (section 5.2.2.4): every reuse needs validation.
    pub fn no_cache_unqualified(&self) -> bool {
        self.flags & NO_CACHE_ALL != 0
    }
    pub fn private(&self) -> bool {
        self.flags & PRIVATE != 0
    }
    /// `private` without field names (section 5.2.2.7): a shared cache must not store.
    pub fn private_unqualified(&self) -> bool {
        self.flags & PRIVATE_ALL != 0
    }
    pub fn public(&self) -> bool {
        self.flags & PUBLIC != 0
    }
    pub fn must_revalidate(&self) -> bool {
        self.flags & MUST_REVALIDATE != 0
    }
    pub fn proxy_revalidate(&self) -> bool {
        self.flags & PROXY_REVALIDATE != 0
    }
    pub fn must_understand(&self) -> bool {
        self.flags & MUST_UNDERSTAND != 0
    }
    pub fn only_if_cached(&self) -> bool {
        self.flags & ONLY_IF_CACHED != 0
    }
    pub fn no_transform(&self) -> bool {
        self.flags & NO_TRANSFORM != 0
    }
    /// `immutable` (RFC 8246).
    pub fn immutable(&self) -> bool {
        self.flags & IMMUTABLE != 0
    }
    /// `max-stale` without an argument: any staleness is accepted (section 5.2.1.2).
    pub fn max_stale_any(&self) -> bool {
        self.flags & MAX_STALE_ANY != 0
    }
    /// Whether the message had any directive this parser knows.
    pub fn is_empty(&self) -> bool {
        // Every known directive sets a flag or a "seen" bit.
        self.flags == 0
    }

    fn parse_line(&mut self, v: &[u8]) {
        let mut i = 0;
        while i < v.len() {
            // OWS and empty list members.
            while i < v.len() && matches!(v[i], b' ' | b'\t' | b',') {
                i += 1;
            }
            if i >= v.len() {
                break;
            }
            let start = i;
            while i < v.len() && is_tchar(v[i]) {
                i += 1;
            }
            let name = &v[start..i];
            let mut arg = if name.is_empty() { Arg::Invalid } else { Arg::None };
            if !name.is_empty() && i < v.len() && v[i] == b'=' {
                i += 1;
                if i < v.len() && v[i] == b'"' {
                    match quoted_end(v, i) {
                        Some(end) => {
                            arg = Arg::Quoted(&v[i + 1..end]);
                            i = end + 1;
                        }
                        None => {
                            arg = Arg::Invalid;
                            i = v.len();
                        }
                    }
                } else {
                    let s = i;
                    while i < v.len() && is_tchar(v[i]) {
                        i += 1;
                    }
                    arg = if i > s { Arg::Token(&v[s..i]) } else { Arg::Invalid };
                }
            }
            // After the member: OWS, then a comma or the end.
            while i < v.len() && matches!(v[i], b' ' | b'\t') {
                i += 1;
            }
            if i < v.len() && v[i] != b',' {
                arg = Arg::Invalid;
                i = skip_member(v, i);
            }
            if !name.is_empty() {
                self.apply(name, arg);
            }
        }
    }

    /// Marks `bit` seen; whether it was not before.
    fn first(&mut self, bit: u32) -> bool {
        let first = self.flags & bit == 0;
        self.flags |= bit;
        first
    }

    pub(super) fn apply(&mut self, name: &[u8], arg: Arg<'_>) {
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        // Directives with delta-seconds: the first occurrence counts (the guard
        // marks it seen), later ones fall through to the last arm.
        match name.len() {
            7 if is("max-age") && self.first(SEEN_MAX_AGE) => {
                // Invalid or missing: 0 (see the module doc).
                self.max_age = Some(arg_delta(&arg).unwrap_or(0));
            }
            8 if is("s-maxage") && self.first(SEEN_S_MAXAGE) => {
                self.s_maxage = Some(arg_delta(&arg).unwrap_or(0));
            }
            9 if is("max-stale") && self.first(SEEN_MAX_STALE) => match arg {
                Arg::None => self.flags |= MAX_STALE_ANY,
                a => self.max_stale = arg_delta(&a),
            },
            9 if is("min-fresh") && self.first(SEEN_MIN_FRESH) => self.min_fresh = arg_delta(&arg),
            22 if is("stale-while-revalidate") && self.first(SEEN_SWR) => {
                self.stale_while_revalidate = arg_delta(&arg);
            }
            14 if is("stale-if-error") && self.first(SEEN_SIE) => self.stale_if_error = arg_delta(&arg),
            8 if is("no-store") => self.flags |= NO_STORE,
            8 if is("no-cache") => {
                self.flags |= NO_CACHE;
                if !field_names(&arg, &mut self.no_cache_fields) {
                    self.flags |= NO_CACHE_ALL;
                }
            }
            7 if is("private") => {
                self.flags |= PRIVATE;
                if !field_names(&arg, &mut self.private_fields) {
                    self.flags |= PRIVATE_ALL;
                }
            }
            6 if is("public") => self.flags |= PUBLIC,
            15 if is("must-revalidate") => self.flags |= MUST_REVALIDATE,
            16 if is("proxy-revalidate") => self.flags |= PROXY_REVALIDATE,
            15 if is("must-understand") => self.flags |= MUST_UNDERSTAND,
            14 if is("only-if-cached") => self.flags |= ONLY_IF_CACHED,
            12 if is("no-transform") => self.flags |= NO_TRANSFORM,
            9 if is("immutable") => self.flags |= IMMUTABLE,
            // Unknown extensions are ignored (section 5.2.3).
            _ => {}
        }
    }
}

/// Adds the field names a qualified `no-cache` or `private` lists to `out`;
/// false when the directive is unqualified (or its argument is broken, read as
/// unqualified: the more restrictive form). The unqualified form anywhere in a
/// message wins over qualified ones.
fn field_names(arg: &Arg<'_>, out: &mut Vec<Box<str>>) -> bool {
    let list = match arg {
        Arg::Token(t) | Arg::Quoted(t) => *t,
        Arg::None | Arg::Invalid => return false,
    };
    for name in list.split(|b| *b == b',') {
        let name = name.trim_ascii();
        if !name.is_empty() && name.iter().all(|b| is_tchar(*b)) {
            // Token bytes are ASCII.
            let s = String::from_utf8_lossy(name).to_ascii_lowercase();
            if !out.iter().any(|n| **n == *s) {
                out.push(s.into_boxed_str());
            }
        }
    }
    true
}

/// The delta-seconds of an argument; `None` when missing or invalid.
fn arg_delta(arg: &Arg<'_>) -> Option<u32> {
    match arg {
        Arg::Token(t) | Arg::Quoted(t) => delta_seconds(t),
        Arg::None | Arg::Invalid => None,
    }
}

/// Parses delta-seconds (RFC 9111 section 1.2.2): 1*DIGIT, saturating at 2^31.
pub fn delta_seconds(t: &[u8]) -> Option<u32> {
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for d in t {
        n = (n * 10 + (d - b'0') as u64).min(DELTA_MAX as u64);
    }
    Some(n as u32)
}

/// The index of the closing quote of the quoted-string opening at `open`.
fn quoted_end(v: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    while i < v.len() {
        match v[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// From inside a malformed member: the index of the comma ending it (outside
/// quoted strings), or the end.
fn skip_member(v: &[u8], mut i: usize) -> usize {
    while i < v.len() {
        match v[i] {
            b',' => return i,
            b'"' => match quoted_end(v, i) {
                Some(end) => i = end + 1,
                None => return v.len(),
            },
            _ => i += 1,
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(lines: &[&str]) -> CacheControl {
        CacheControl::parse(lines.iter().map(|l| l.as_bytes()))
    }

    #[test]
    fn rfc9111_5_2_names_are_case_insensitive() {
        let c = cc(&["No-StOrE, MAX-AGE=10, Public"]);
        assert!(c.no_store() && c.public());
        assert_eq!(c.max_age, Some(10));
    }

    #[test]
    fn rfc9111_5_2_arguments_as_token_or_quoted_string() {
        assert_eq!(cc(&["max-age=\"3600\""]).max_age, Some(3600));
        assert_eq!(cc(&["s-maxage=\"7\""]).s_maxage, Some(7));
        // Leading zeros are digits like any other.
        assert_eq!(cc(&["max-age=003600"]).max_age, Some(3600));
    }

    #[test]
    fn rfc9111_5_2_quoted_strings_hide_directives() {
        let c = cc(&["extension=\"max-age=3600, no-store\", max-age=1"]);
        assert_eq!(c.max_age, Some(1));
        assert!(!c.no_store());
        let c = cc(&["max-age=1, extension=\"max-age=3600\""]);
        assert_eq!(c.max_age, Some(1));
        let c = cc(&["x=\"a\\\"b, no-store\", private"]);
        assert!(!c.no_store() && c.private());
    }

    #[test]
    fn rfc9111_4_2_1_first_occurrence_of_a_directive_counts() {
        assert_eq!(cc(&["max-age=1800, max-age=1"]).max_age, Some(1800));
        assert_eq!(cc(&["max-age=1", "max-age=1800"]).max_age, Some(1));
        assert_eq!(cc(&["s-maxage=5", "s-maxage=50"]).s_maxage, Some(5));
    }

    #[test]
    fn rfc9111_1_2_2_invalid_delta_seconds_make_freshness_zero() {
        for bad in ["max-age='3600'", "max-age=-1", "max-age=3600.0", "max-age=a1", "max-age=1a", "max-age="] {
            assert_eq!(cc(&[bad]).max_age, Some(0), "{bad}");
        }
        // Whitespace around '=' is not in the grammar.
        assert_eq!(cc(&["max-age =3600"]).max_age, Some(0));
        assert_eq!(cc(&["max-age= 3600"]).max_age, Some(0));
        // A directive missing its argument.
        assert_eq!(cc(&["max-age"]).max_age, Some(0));
        // Invalid widening directives are absent.
        let c = cc(&["stale-while-revalidate=x, stale-if-error=-1, min-fresh=1.5, max-stale=z"]);
        assert_eq!((c.stale_while_revalidate, c.stale_if_error, c.min_fresh, c.max_stale), (None, None, None, None));
        assert!(!c.max_stale_any());
    }

    #[test]
    fn rfc9111_1_2_2_delta_seconds_saturate_at_2_pow_31() {
        assert_eq!(cc(&["max-age=99999999999999999999999"]).max_age, Some(DELTA_MAX));
        assert_eq!(delta_seconds(b"2147483648"), Some(DELTA_MAX));
        assert_eq!(delta_seconds(b"2147483647"), Some(DELTA_MAX - 1));
    }

    #[test]
    fn rfc9111_5_2_1_2_max_stale_with_and_without_value() {
        let c = cc(&["max-stale"]);
        assert!(c.max_stale_any());
        assert_eq!(c.max_stale, None);
        let c = cc(&["max-stale=30"]);
        assert!(!c.max_stale_any());
        assert_eq!(c.max_stale, Some(30));
    }

    #[test]
    fn rfc9111_5_2_2_4_qualified_no_cache_and_private_list_fields() {
        let c = cc(&["no-cache=\"Set-Cookie, X-A\", private=x-b"]);
        assert!(c.no_cache() && !c.no_cache_unqualified());
        assert_eq!(c.no_cache_fields, [Box::from("set-cookie"), Box::from("x-a")]);
        assert!(c.private() && !c.private_unqualified());
        assert_eq!(c.private_fields, [Box::from("x-b")]);
        // The unqualified form anywhere wins.
        let c = cc(&["no-cache=\"a\"", "no-cache"]);
        assert!(c.no_cache_unqualified());
        let c = cc(&["private", "private=\"a\""]);
        assert!(c.private_unqualified());
    }

    #[test]
    fn rfc9110_5_6_1_empty_members_and_whitespace() {
        let c = cc(&[" , ,no-store ,\t, must-revalidate,"]);
        assert!(c.no_store() && c.must_revalidate());
        assert!(cc(&[""]).is_empty());
        assert!(cc(&[",,,"]).is_empty());
    }

    #[test]
    fn rfc9111_5_2_malformed_members_are_skipped_to_the_next_comma() {
        let c = cc(&["foo bar baz, no-store"]);
        assert!(c.no_store());
        let c = cc(&["x=\"unterminated, no-store"]);
        assert!(!c.no_store());
        let c = cc(&["=5, public"]);
        assert!(c.public());
    }

    #[test]
    fn rfc9111_5_2_all_flags() {
        let c = cc(&[
            "must-revalidate, proxy-revalidate, must-understand, only-if-cached, no-transform, immutable, stale-while-revalidate=5, stale-if-error=6, min-fresh=7",
        ]);
        assert!(c.must_revalidate() && c.proxy_revalidate() && c.must_understand());
        assert!(c.only_if_cached() && c.no_transform() && c.immutable());
        assert_eq!((c.stale_while_revalidate, c.stale_if_error, c.min_fresh), (Some(5), Some(6), Some(7)));
    }
}
