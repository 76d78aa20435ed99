//! `CDN-Cache-Control` field lines (RFC 9213; split at each `\n` of the
//! input) and the cache policy reading them: no panic, arguments within
//! delta-seconds' range, listed field names lower-case tokens, every line
//! parsed or the whole field ignored (several lines mean their join with
//! ", "), and a valid field always wins over `Cache-Control`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_config::HeaderLookup;
use tollgate_wire::cache::control::DELTA_MAX;
use tollgate_wire::cache::policy::{self, Options, RequestFacts};
use tollgate_wire::cache::targeted;

/// The input's lines as `CDN-Cache-Control`, beside `Cache-Control: no-store`.
struct Lines<'a>(Vec<&'a [u8]>);

impl HeaderLookup for Lines<'_> {
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        if name.eq_ignore_ascii_case("cache-control") {
            return f(b"no-store");
        }
        name.eq_ignore_ascii_case("cdn-cache-control") && self.0.iter().any(|v| f(v))
    }
}

/// A request without fields.
struct NoFields;

impl HeaderLookup for NoFields {
    fn any_value(&self, _: &str, _: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        false
    }
}

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let h = Lines(lines.clone());
    let got = targeted::directives(&h, "cdn-cache-control");
    if let Some(cc) = &got {
        assert!(cc.targeted);
        for v in [cc.max_age, cc.s_maxage, cc.stale_while_revalidate, cc.stale_if_error] {
            assert!(v.is_none_or(|v| v <= DELTA_MAX));
        }
        for name in cc.no_cache_fields.iter().chain(cc.private_fields.iter()) {
            assert!(!name.is_empty() && !name.bytes().any(|b| b.is_ascii_uppercase() || b == b',' || b == b' '));
        }
    }
    // Field lines are joined with ", " (RFC 8941 section 4.2).
    let joined = lines.join(&b", "[..]);
    assert_eq!(targeted::directives(&Lines(vec![&joined[..]]), "cdn-cache-control"), got);
    // The policy goes by it when valid (no-store in Cache-Control is then
    // ignored), by Cache-Control's no-store when not.
    let req = RequestFacts::new("GET", &NoFields);
    let stored = policy::storable(&req, 200, &h, 1_000, 1_001, &Options::default());
    if got.is_none() {
        assert_eq!(stored.as_ref().err(), Some(&policy::NotStorable::NoStore));
    }
    assert_eq!(policy::response_directives(&h, &Options::default()).targeted, got.is_some());
    if let Ok(m) = stored {
        let _ = policy::lookup_decision(&req, Some(&m.meta), 1_000 + m.meta.freshness_lifetime);
    }
});
