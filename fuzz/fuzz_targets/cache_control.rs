//! `Cache-Control` field lines (split at each `\n` of the input) and the cache
//! policy reading them: no panic, arguments within delta-seconds' range, listed
//! field names lower-case tokens, and the same directives whether the members
//! come on one line or several.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_config::HeaderLookup;
use tollgate_wire::cache::control::{CacheControl, DELTA_MAX};
use tollgate_wire::cache::policy::{self, Options, RequestFacts};

struct Lines<'a>(Vec<&'a [u8]>);

impl HeaderLookup for Lines<'_> {
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        name.eq_ignore_ascii_case("cache-control") && self.0.iter().any(|v| f(v))
    }
}

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let cc = CacheControl::parse(lines.iter().copied());
    for v in [cc.max_age, cc.s_maxage, cc.max_stale, cc.min_fresh, cc.stale_while_revalidate, cc.stale_if_error] {
        assert!(v.is_none_or(|v| v <= DELTA_MAX));
    }
    for name in cc.no_cache_fields.iter().chain(cc.private_fields.iter()) {
        assert!(!name.is_empty() && !name.bytes().any(|b| b.is_ascii_uppercase() || b == b',' || b == b' '));
    }
    assert!(!cc.no_cache_unqualified() || cc.no_cache());
    assert!(!cc.private_unqualified() || cc.private());
    // Lines are lists: joined with a comma they mean the same, unless a line
    // leaves a quoted string open (it would swallow the next line).
    if lines.iter().all(|l| !l.contains(&b'"') && !l.contains(&b'\\')) {
        let joined = lines.join(&b","[..]);
        assert_eq!(CacheControl::parse([&joined[..]]), cc);
    }
    // The same lines as a request's and a response's Cache-Control.
    let h = Lines(lines);
    let req = RequestFacts::new("GET", &h);
    if let Ok(m) = policy::storable(&req, 200, &h, 1_000, 1_001, &Options::default()) {
        let now = 1_000 + u64::from(cc.max_age.unwrap_or(0));
        let _ = policy::lookup_decision(&req, Some(&m.meta), now);
        let _ = policy::stale_if_error(&req, &m.meta, now, &Options::default());
        assert!(policy::age_header(&m.meta, u64::MAX) <= policy::AGE_MAX);
    }
});
