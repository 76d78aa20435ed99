//! Unit tests of the RFC 9111 policy, one or more per rule, named by section.

use super::*;
use crate::cache::head::fmt_date;

/// Header fields for a test: (name, value) pairs.
use crate::cache::testing::H;

/// The time the tests' responses arrive.
const T: Time = 1_700_000_000;

fn opts() -> Options {
    Options::default()
}

fn get(h: &H) -> RequestFacts<'_> {
    RequestFacts::new("GET", h)
}

/// Stores `resp` for a plain GET received at `T` (sent at `T`).
fn store(status: u16, resp: &H) -> Result<StoreMeta, NotStorable> {
    let req = H::new(&[]);
    storable(&get(&req), status, resp, T, T, &opts())
}

fn meta(resp: &H) -> EntryMeta {
    store(200, resp).expect("storable").meta
}

/// A response with `Date: T` and the given fields.
fn dated(list: &[(&str, &str)]) -> H {
    H::new(list).with("Date", &fmt_date(T))
}

fn decide(req: &H, m: &EntryMeta, now: Time) -> Decision {
    lookup_decision(&get(req), Some(m), now)
}

// -- Section 3: storing

#[test]
fn rfc9111_3_only_responses_to_get_are_stored() {
    let resp = dated(&[("Cache-Control", "max-age=60")]);
    let req = H::new(&[]);
    for method in ["HEAD", "POST", "PUT", "OPTIONS"] {
        assert_eq!(storable(&RequestFacts::new(method, &req), 200, &resp, T, T, &opts()), Err(NotStorable::Method));
    }
    assert!(store(200, &resp).is_ok());
}

#[test]
fn rfc9111_3_only_final_statuses_and_not_206_or_304() {
    let resp = dated(&[("Cache-Control", "max-age=60")]);
    for status in [100, 103, 206, 304] {
        assert_eq!(store(status, &resp), Err(NotStorable::Status), "{status}");
    }
}

#[test]
fn rfc9111_3_any_final_status_with_explicit_freshness_is_stored() {
    let resp = dated(&[("Cache-Control", "max-age=60")]);
    for status in [200, 203, 204, 299, 301, 302, 303, 307, 308, 400, 404, 410, 499, 500, 502, 503, 504, 599] {
        assert!(store(status, &resp).is_ok(), "{status}");
    }
    let resp = dated(&[("Expires", &fmt_date(T + 60))]);
    assert!(store(302, &resp).is_ok());
}

#[test]
fn rfc9110_15_1_heuristically_cacheable_statuses() {
    let resp = dated(&[("Last-Modified", &fmt_date(T - 1000))]);
    for status in [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
        let m = store(status, &resp).unwrap_or_else(|e| panic!("{status}: {e:?}")).meta;
        assert!(m.heuristic);
        assert_eq!(m.freshness_lifetime, 100, "{status}");
    }
    for status in [201, 302, 303, 307, 400, 500, 503] {
        assert_eq!(store(status, &resp), Err(NotStorable::NotCacheable), "{status}");
    }
}

#[test]
fn rfc9111_5_2_2_9_public_makes_any_final_status_storable() {
    let resp = dated(&[("Cache-Control", "public"), ("Last-Modified", &fmt_date(T - 1000))]);
    let m = store(302, &resp).unwrap().meta;
    // Section 4.2.2: heuristics also apply to responses marked public.
    assert_eq!((m.freshness_lifetime, m.heuristic), (100, true));
}

#[test]
fn rfc9111_5_2_2_5_no_store_is_not_stored() {
    for cc in ["no-store", "No-StOrE", "max-age=10000, no-store", "public, no-store"] {
        let resp = dated(&[("Cache-Control", cc), ("Expires", &fmt_date(T + 10000))]);
        assert_eq!(store(200, &resp), Err(NotStorable::NoStore), "{cc}");
    }
}

#[test]
fn rfc9111_5_2_1_5_request_no_store_is_not_stored() {
    let req = H::new(&[("Cache-Control", "no-store")]);
    let resp = dated(&[("Cache-Control", "max-age=60")]);
    assert_eq!(storable(&get(&req), 200, &resp, T, T, &opts()), Err(NotStorable::RequestNoStore));
}

#[test]
fn rfc9111_5_2_2_7_shared_cache_does_not_store_private() {
    let resp = dated(&[("Cache-Control", "private, max-age=3600")]);
    assert_eq!(store(200, &resp), Err(NotStorable::Private));
    // Qualified: stored without the listed fields.
    let resp = dated(&[("Cache-Control", "private=\"X-User\", max-age=3600"), ("X-User", "bob")]);
    let m = store(200, &resp).unwrap();
    assert_eq!(m.omit, [Box::from("x-user")]);
    let head = StoredHead::new(200, b"OK", resp.iter(), &m.omit, T);
    assert_eq!(head.get(b"x-user"), None);
}

#[test]
fn rfc9111_5_2_2_4_qualified_no_cache_omits_the_fields_and_stays_fresh() {
    let resp = dated(&[
        ("Cache-Control", "no-cache=\"a, b\""),
        ("Cache-Control", "max-age=3600"),
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
    ]);
    let m = store(200, &resp).unwrap();
    assert_eq!(m.omit, [Box::from("a"), Box::from("b")]);
    assert!(!m.meta.no_cache());
    assert_eq!(decide(&H::new(&[]), &m.meta, T + 10), Decision::Fresh);
    let head = StoredHead::new(200, b"OK", resp.iter(), &m.omit, T);
    assert_eq!(head.iter().filter(|(n, _)| n.len() == 1).collect::<Vec<_>>(), [(&b"c"[..], &b"3"[..])]);
}

#[test]
fn rfc9111_3_5_authorization_needs_public_s_maxage_or_must_revalidate() {
    let req = H::new(&[("Authorization", "Basic eDp5")]);
    let r = get(&req);
    let plain = dated(&[("Cache-Control", "max-age=60")]);
    assert_eq!(storable(&r, 200, &plain, T, T, &opts()), Err(NotStorable::Authorization));
    for cc in ["public, max-age=60", "s-maxage=60", "max-age=60, must-revalidate"] {
        let resp = dated(&[("Cache-Control", cc)]);
        assert!(storable(&r, 200, &resp, T, T, &opts()).is_ok(), "{cc}");
    }
}

#[test]
fn rfc9111_5_2_2_3_must_understand_overrides_no_store_for_understood_statuses() {
    let resp = dated(&[("Cache-Control", "must-understand, no-store, max-age=60")]);
    assert!(store(200, &resp).is_ok());
    assert_eq!(store(299, &resp), Err(NotStorable::MustUnderstand));
    assert_eq!(store(599, &resp), Err(NotStorable::MustUnderstand));
}

#[test]
fn rfc9111_4_1_vary_star_is_not_stored() {
    let resp = dated(&[("Cache-Control", "max-age=60"), ("Vary", "*")]);
    assert_eq!(store(200, &resp), Err(NotStorable::VaryStar));
    let resp = dated(&[("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")]);
    assert!(matches!(store(200, &resp).unwrap().vary, Vary::Fields(_)));
}

#[test]
fn set_cookie_responses_are_not_stored_unless_the_zone_allows() {
    let resp = dated(&[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")]);
    // By default (as nginx and Varnish): not stored at all.
    assert_eq!(store(200, &resp), Err(NotStorable::SetCookie));
    let req = H::new(&[]);
    // The origin keeping the cookie out of the store is enough.
    let kept_out = dated(&[("Cache-Control", "max-age=60, no-cache=\"Set-Cookie\""), ("Set-Cookie", "a=b")]);
    assert!(storable(&get(&req), 200, &kept_out, T, T, &opts()).is_ok());
    // With store_set_cookie the response is stored, but never its cookie:
    // one client's session must not be handed to the next.
    let allow = Options { store_set_cookie: true, ..opts() };
    let m = storable(&get(&req), 200, &resp, T, T, &allow).expect("storable");
    assert!(m.omit.iter().any(|o| &**o == "set-cookie"), "{:?}", m.omit);
    let head = StoredHead::new(200, b"OK", resp.iter(), &m.omit, T);
    assert_eq!(head.get(b"set-cookie"), None);
}

#[test]
fn responses_that_could_never_be_served_are_not_stored() {
    // No freshness, no validator, no stale-if-error.
    assert_eq!(store(200, &dated(&[])), Err(NotStorable::Useless));
    assert_eq!(store(200, &dated(&[("Cache-Control", "max-age=0")])), Err(NotStorable::Useless));
    // A validator makes it worth a revalidation.
    let m = meta(&dated(&[("ETag", "\"a\""), ("Cache-Control", "no-cache")]));
    assert_eq!(m.freshness_lifetime, 0);
    assert!(m.no_cache());
    assert!(store(200, &dated(&[("Cache-Control", "max-age=0, stale-if-error=60")])).is_ok());
}

#[test]
fn rfc9111_3_3_only_complete_bodies_are_stored() {
    use crate::h1::Framing;
    assert!(body_complete(Framing::Length(10), 10, true));
    assert!(!body_complete(Framing::Length(10), 9, true));
    assert!(body_complete(Framing::Chunked, 5, true));
    assert!(!body_complete(Framing::Chunked, 5, false));
    assert!(!body_complete(Framing::UntilClose, 5, false));
    assert!(body_complete(Framing::Empty, 0, false));
}

// -- Section 4.2: freshness

#[test]
fn rfc9111_4_2_1_s_maxage_beats_max_age_beats_expires() {
    let exp = fmt_date(T + 30);
    assert_eq!(meta(&dated(&[("Cache-Control", "max-age=20, s-maxage=10"), ("Expires", &exp)])).freshness_lifetime, 10);
    assert_eq!(meta(&dated(&[("Cache-Control", "max-age=20"), ("Expires", &exp)])).freshness_lifetime, 20);
    assert_eq!(meta(&dated(&[("Expires", &exp)])).freshness_lifetime, 30);
    // A past Expires does not undo max-age.
    let past = fmt_date(T - 10_000);
    assert_eq!(meta(&dated(&[("Cache-Control", "max-age=3600"), ("Expires", &past)])).freshness_lifetime, 3600);
}

#[test]
fn rfc9111_4_2_1_expires_is_relative_to_date() {
    // Expires - Date, not Expires - now: a Date an hour ago and Expires two hours
    // after it leave a lifetime of two hours (and an apparent age of one).
    let resp = H::new(&[("Date", &fmt_date(T - 3600)), ("Expires", &fmt_date(T + 3600))]);
    let m = meta(&resp);
    assert_eq!(m.freshness_lifetime, 7200);
    assert_eq!(current_age(&m, T), 3600);
    // Expires before Date: stale at once.
    let resp = H::new(&[("Date", &fmt_date(T)), ("Expires", &fmt_date(T - 100)), ("ETag", "\"x\"")]);
    assert_eq!(meta(&resp).freshness_lifetime, 0);
}

#[test]
fn rfc9111_5_3_invalid_expires_is_in_the_past() {
    for bad in ["0", "-1", "soon", "Thu, 32 Foo 2050 02:01:18 GMT"] {
        let resp = dated(&[("Expires", bad), ("ETag", "\"x\"")]);
        let m = meta(&resp);
        assert_eq!((m.freshness_lifetime, m.heuristic), (0, false), "{bad}");
    }
    // Of two Expires lines the first counts (section 4.2.1).
    let resp = dated(&[("Expires", &fmt_date(T + 10)), ("Expires", &fmt_date(T + 999))]);
    assert_eq!(meta(&resp).freshness_lifetime, 10);
}

#[test]
fn rfc9110_6_6_1_missing_or_invalid_date_is_the_time_received() {
    let resp = H::new(&[("Expires", &fmt_date(T + 50))]);
    let m = meta(&resp);
    assert_eq!((m.date, m.freshness_lifetime), (T, 50));
    let resp = H::new(&[("Date", "yesterday"), ("Cache-Control", "max-age=50")]);
    assert_eq!(meta(&resp).date, T);
}

#[test]
fn rfc9111_4_2_2_heuristic_is_ten_percent_of_last_modified_capped_at_a_day() {
    let m = meta(&dated(&[("Last-Modified", &fmt_date(T - 3600))]));
    assert_eq!((m.freshness_lifetime, m.heuristic), (360, true));
    let m = meta(&dated(&[("Last-Modified", &fmt_date(T - 100 * 86_400))]));
    assert_eq!(m.freshness_lifetime, 86_400);
    // A Last-Modified after Date gives nothing.
    let m = meta(&dated(&[("Last-Modified", &fmt_date(T + 100)), ("ETag", "\"e\"")]));
    assert_eq!(m.freshness_lifetime, 0);
    // Configurable share and cap.
    let o = Options { heuristic_percent: 50, heuristic_max: 1000, ..opts() };
    let req = H::new(&[]);
    let resp = dated(&[("Last-Modified", &fmt_date(T - 600))]);
    assert_eq!(storable(&get(&req), 200, &resp, T, T, &o).unwrap().meta.freshness_lifetime, 300);
}

#[test]
fn rfc9111_4_2_2_no_heuristic_when_explicit_expiration_is_present() {
    let lm = fmt_date(T - 100_000);
    let m = meta(&dated(&[("Last-Modified", &lm), ("Cache-Control", "max-age=5")]));
    assert_eq!((m.freshness_lifetime, m.heuristic), (5, false));
    let m = meta(&dated(&[("Last-Modified", &lm), ("Expires", "0")]));
    assert_eq!((m.freshness_lifetime, m.heuristic), (0, false));
}

#[test]
fn rfc9111_4_2_3_age_calculation() {
    // Sent at T-10, received at T, Date T-30 (apparent age 30), Age 15 (+10
    // response delay = 25): the corrected initial age is max(30, 25) = 30.
    let req = H::new(&[]);
    let resp = H::new(&[("Date", &fmt_date(T - 30)), ("Age", "15"), ("Cache-Control", "max-age=100")]);
    let m = storable(&get(&req), 200, &resp, T - 10, T, &opts()).unwrap().meta;
    assert_eq!(m.corrected_initial_age, 30);
    assert_eq!(current_age(&m, T + 5), 35);
    // Age dominating: Date = T (apparent age 0), Age 50 + delay 10.
    let resp = H::new(&[("Date", &fmt_date(T)), ("Age", "50"), ("Cache-Control", "max-age=100")]);
    let m = storable(&get(&req), 200, &resp, T - 10, T, &opts()).unwrap().meta;
    assert_eq!(m.corrected_initial_age, 60);
    assert_eq!(age_header(&m, T + 40), 100);
    assert!(!is_fresh(&m, T + 40));
    assert!(is_fresh(&m, T + 39));
    assert_eq!(ttl(&m, T + 45), -5);
    // A Date in the future (clock skew) gives no negative age.
    let resp = H::new(&[("Date", &fmt_date(T + 500)), ("Cache-Control", "max-age=100")]);
    assert_eq!(meta(&resp).corrected_initial_age, 0);
}

#[test]
fn rfc9111_4_2_a_response_is_fresh_while_lifetime_exceeds_age() {
    let m = meta(&dated(&[("Cache-Control", "max-age=10")]));
    assert_eq!(decide(&H::new(&[]), &m, T + 9), Decision::Fresh);
    assert_eq!(decide(&H::new(&[]), &m, T + 10), Decision::Revalidate(Why::Stale));
    let m = meta(&dated(&[("Cache-Control", "max-age=10"), ("Age", "15"), ("ETag", "\"x\"")]));
    assert_eq!(decide(&H::new(&[]), &m, T), Decision::Revalidate(Why::Stale));
}

#[test]
fn rfc9111_5_1_age_field_parsing() {
    let age = |v: &[&str]| age_value(&H(v.iter().map(|v| ("Age".to_string(), v.to_string())).collect()));
    assert_eq!(age(&["15"]), 15);
    assert_eq!(age(&["0, 7200"]), 0);
    assert_eq!(age(&["7200", "0"]), 7200);
    // Invalid: ignored (section 5.1 "SHOULD ignore the field").
    for bad in ["abc", "-7200", "7200.0", "old, 0", ""] {
        assert_eq!(age(&[bad]), 0, "{bad}");
    }
    assert_eq!(age(&[]), 0);
}

#[test]
fn rfc9111_1_2_2_age_sent_is_capped_at_2_pow_31() {
    let m = meta(&dated(&[("Age", "99999999999999"), ("Cache-Control", "max-age=1"), ("ETag", "\"x\"")]));
    assert_eq!(age_header(&m, T + 1_000_000_000), AGE_MAX);
}

// -- Sections 4 and 5.2.1: using a stored response

#[test]
fn rfc9111_4_nothing_stored_is_a_miss() {
    let req = H::new(&[]);
    assert_eq!(lookup_decision(&get(&req), None, T), Decision::Miss);
}

#[test]
fn rfc9111_5_2_1_7_only_if_cached() {
    let req = H::new(&[("Cache-Control", "only-if-cached")]);
    assert_eq!(lookup_decision(&get(&req), None, T), Decision::GatewayTimeout);
    let m = meta(&dated(&[("Cache-Control", "max-age=10"), ("ETag", "\"x\"")]));
    assert_eq!(decide(&req, &m, T + 5), Decision::Fresh);
    assert_eq!(decide(&req, &m, T + 50), Decision::GatewayTimeout);
    let req = H::new(&[("Cache-Control", "only-if-cached, max-stale")]);
    assert_eq!(decide(&req, &m, T + 50), Decision::StaleAllowed);
}

#[test]
fn rfc9111_5_2_1_4_request_no_cache_revalidates() {
    let m = meta(&dated(&[("Cache-Control", "max-age=3600")]));
    let req = H::new(&[("Cache-Control", "no-cache")]);
    assert_eq!(decide(&req, &m, T), Decision::Revalidate(Why::RequestNoCache));
}

#[test]
fn rfc9111_5_4_pragma_no_cache_without_cache_control() {
    let m = meta(&dated(&[("Cache-Control", "max-age=3600")]));
    let req = H::new(&[("Pragma", "no-cache")]);
    assert_eq!(decide(&req, &m, T), Decision::Revalidate(Why::RequestNoCache));
    // Cache-Control present: Pragma is ignored.
    let req = H::new(&[("Pragma", "no-cache"), ("Cache-Control", "max-stale=1")]);
    assert_eq!(decide(&req, &m, T), Decision::Fresh);
}

#[test]
fn rfc9111_5_2_2_4_response_no_cache_revalidates_even_when_fresh() {
    let m = meta(&dated(&[("Cache-Control", "max-age=10000, No-CaChE"), ("ETag", "\"abcd\"")]));
    assert_eq!(decide(&H::new(&[]), &m, T), Decision::Revalidate(Why::ResponseNoCache));
    // Not even max-stale serves it.
    let req = H::new(&[("Cache-Control", "max-stale")]);
    assert_eq!(decide(&req, &m, T), Decision::Revalidate(Why::ResponseNoCache));
}

#[test]
fn rfc9111_5_2_1_1_request_max_age() {
    let m = meta(&dated(&[("Cache-Control", "max-age=3600")]));
    let req = H::new(&[("Cache-Control", "max-age=0")]);
    assert_eq!(decide(&req, &m, T + 1), Decision::Revalidate(Why::RequestMaxAge));
    let req = H::new(&[("Cache-Control", "max-age=60")]);
    assert_eq!(decide(&req, &m, T + 60), Decision::Fresh);
    assert_eq!(decide(&req, &m, T + 61), Decision::Revalidate(Why::RequestMaxAge));
    // An invalid request max-age is 0: revalidate.
    let req = H::new(&[("Cache-Control", "max-age=x")]);
    assert_eq!(decide(&req, &m, T + 1), Decision::Revalidate(Why::RequestMaxAge));
}

#[test]
fn rfc9111_5_2_1_3_min_fresh() {
    let m = meta(&dated(&[("Cache-Control", "max-age=100")]));
    let req = H::new(&[("Cache-Control", "min-fresh=30")]);
    assert_eq!(decide(&req, &m, T + 70), Decision::Fresh);
    assert_eq!(decide(&req, &m, T + 71), Decision::Revalidate(Why::MinFresh));
}

#[test]
fn rfc9111_5_2_1_2_max_stale_with_and_without_limit() {
    let m = meta(&dated(&[("Cache-Control", "max-age=10"), ("ETag", "\"x\"")]));
    let any = H::new(&[("Cache-Control", "max-stale")]);
    assert_eq!(decide(&any, &m, T + 100_000), Decision::StaleAllowed);
    let limited = H::new(&[("Cache-Control", "max-stale=20")]);
    assert_eq!(decide(&limited, &m, T + 30), Decision::StaleAllowed);
    assert_eq!(decide(&limited, &m, T + 31), Decision::Revalidate(Why::Stale));
}

#[test]
fn rfc9111_4_2_4_must_revalidate_proxy_revalidate_s_maxage_forbid_stale() {
    for cc in ["max-age=10, must-revalidate", "max-age=10, proxy-revalidate", "s-maxage=10"] {
        let m = meta(&dated(&[("Cache-Control", &format!("{cc}, stale-while-revalidate=100")), ("ETag", "\"x\"")]));
        assert!(m.no_stale(), "{cc}");
        assert_eq!(decide(&H::new(&[("Cache-Control", "max-stale")]), &m, T + 20), Decision::Revalidate(Why::Stale));
        assert_eq!(decide(&H::new(&[]), &m, T + 5), Decision::Fresh, "{cc}");
    }
}

#[test]
fn rfc5861_3_stale_while_revalidate_window() {
    let m = meta(&dated(&[("Cache-Control", "max-age=10, stale-while-revalidate=30"), ("ETag", "\"x\"")]));
    let req = H::new(&[]);
    assert_eq!(decide(&req, &m, T + 5), Decision::Fresh);
    assert_eq!(decide(&req, &m, T + 40), Decision::StaleWhileRevalidate);
    assert_eq!(decide(&req, &m, T + 41), Decision::Revalidate(Why::Stale));
    // The client's no-cache still wins.
    assert_eq!(
        decide(&H::new(&[("Cache-Control", "no-cache")]), &m, T + 20),
        Decision::Revalidate(Why::RequestNoCache)
    );
}

#[test]
fn rfc5861_4_stale_if_error_window_from_response_or_request() {
    let m = meta(&dated(&[("Cache-Control", "max-age=10, stale-if-error=30"), ("ETag", "\"x\"")]));
    let req = H::new(&[]);
    assert!(stale_if_error(&get(&req), &m, T + 40, &opts()));
    assert!(!stale_if_error(&get(&req), &m, T + 41, &opts()));
    let req = H::new(&[("Cache-Control", "stale-if-error=100")]);
    assert!(stale_if_error(&get(&req), &m, T + 100, &opts()));
    let plain = meta(&dated(&[("Cache-Control", "max-age=10"), ("ETag", "\"x\"")]));
    assert!(!stale_if_error(&get(&H::new(&[])), &plain, T + 11, &opts()));
    assert!(stale_if_error(&get(&req), &plain, T + 11, &opts()));
    // must-revalidate: never.
    let strict = meta(&dated(&[("Cache-Control", "max-age=10, must-revalidate, stale-if-error=30")]));
    assert!(!stale_if_error(&get(&H::new(&[])), &strict, T + 11, &opts()));
    assert!(is_error_status(503) && is_error_status(500) && !is_error_status(404) && !is_error_status(501));
}

#[test]
fn rfc5861_4_the_zones_stale_if_error_for_responses_that_give_none() {
    let zone = Options { stale_if_error: 60, ..opts() };
    let none = H::new(&[]);
    // No stale-if-error in the response: the zone's window.
    let plain = meta(&dated(&[("Cache-Control", "max-age=10"), ("ETag", "\"x\"")]));
    assert!(!stale_if_error(&get(&none), &plain, T + 11, &opts()), "none by default");
    assert!(stale_if_error(&get(&none), &plain, T + 70, &zone));
    assert!(!stale_if_error(&get(&none), &plain, T + 71, &zone));
    // The response's own window wins, shorter or longer.
    let short = meta(&dated(&[("Cache-Control", "max-age=10, stale-if-error=5"), ("ETag", "\"x\"")]));
    assert!(stale_if_error(&get(&none), &short, T + 15, &zone) && !stale_if_error(&get(&none), &short, T + 16, &zone));
    let long = meta(&dated(&[("Cache-Control", "max-age=10, stale-if-error=600"), ("ETag", "\"x\"")]));
    assert!(stale_if_error(&get(&none), &long, T + 600, &zone));
    // The request's may widen it.
    let asks = H::new(&[("Cache-Control", "stale-if-error=120")]);
    assert!(stale_if_error(&get(&asks), &plain, T + 130, &zone));
    // Never against must-revalidate, proxy-revalidate, s-maxage, no-cache.
    for cc in ["max-age=10, must-revalidate", "max-age=10, proxy-revalidate", "s-maxage=10", "max-age=10, no-cache"] {
        let m = meta(&dated(&[("Cache-Control", cc), ("ETag", "\"x\"")]));
        assert!(!stale_if_error(&get(&asks), &m, T + 11, &zone), "{cc}");
    }
}

#[test]
fn rfc9110_12_5_3_stored_gzip_is_not_served_to_a_client_that_refuses_gzip() {
    let m = meta(&dated(&[("Cache-Control", "max-age=60"), ("Content-Encoding", "GZIP")]));
    assert!(acceptable_coding(&get(&H::new(&[("Accept-Encoding", "gzip, br")])), &m));
    assert!(!acceptable_coding(&get(&H::new(&[("Accept-Encoding", "br")])), &m));
    assert!(!acceptable_coding(&get(&H::new(&[("Accept-Encoding", "*, gzip;q=0")])), &m));
    // No Accept-Encoding: any coding is acceptable (issue 33: this was refused).
    assert!(acceptable_coding(&get(&H::new(&[])), &m));
    let plain = meta(&dated(&[("Cache-Control", "max-age=60")]));
    assert!(acceptable_coding(&get(&H::new(&[])), &plain));
    assert!(!acceptable_coding(&get(&H::new(&[("Accept-Encoding", "identity;q=0, *;q=0")])), &plain));
}

#[test]
fn rfc9111_4_requests_the_cache_does_not_answer() {
    let h = H::new(&[]);
    assert_eq!(RequestFacts::new("POST", &h).bypass(), Some(Bypass::Method));
    assert_eq!(RequestFacts::new("GET", &h).bypass(), None);
    assert_eq!(RequestFacts::new("HEAD", &h).bypass(), None);
    // RFC 9110 section 14: ranges are cut from a stored full response (range.rs).
    assert_eq!(get(&H::new(&[("Range", "bytes=0-1"), ("If-Range", "\"a\"")])).bypass(), None);
    assert_eq!(get(&H::new(&[("If-Match", "\"a\"")])).bypass(), Some(Bypass::Precondition));
    assert_eq!(get(&H::new(&[("If-Unmodified-Since", &fmt_date(T))])).bypass(), Some(Bypass::Precondition));
}

// -- Section 4.3: validation

#[test]
fn rfc9111_4_3_1_conditional_headers() {
    let lm = fmt_date(T - 1000);
    let one = meta(&dated(&[("ETag", "\"a\""), ("Last-Modified", &lm)]));
    let c = conditional_headers(&[&one]);
    assert_eq!(c.if_none_match.as_deref(), Some("\"a\""));
    assert_eq!(c.if_modified_since.as_deref(), Some(lm.as_str()));
    // Several stored responses: all their tags, no If-Modified-Since.
    let two = meta(&dated(&[("ETag", "W/\"b\""), ("Last-Modified", &lm)]));
    let c = conditional_headers(&[&one, &two, &one]);
    assert_eq!(c.if_none_match.as_deref(), Some("\"a\", W/\"b\""));
    assert_eq!(c.if_modified_since, None);
    let none = meta(&dated(&[("Cache-Control", "max-age=1")]));
    assert!(conditional_headers(&[&none]).is_empty());
}

#[test]
fn rfc9111_4_3_1_conditional_headers_replace_the_clients() {
    let mut req = crate::h1::RequestHead::default();
    let raw = b"GET /x HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"client\"\r\nIf-Modified-Since: x\r\n\r\n";
    assert!(matches!(crate::h1::parse_request(raw, &mut req, 100, 8192, 8192), Ok(crate::h1::Parsed::Complete(..))));
    let c = Conditional { if_none_match: Some("\"a\"".into()), if_modified_since: None };
    c.apply(&mut req.fields);
    assert_eq!(req.fields.get_all(b"if-none-match").collect::<Vec<_>>(), [&b"\"a\""[..]]);
    assert_eq!(req.fields.get(b"if-modified-since"), None);
}

#[test]
fn rfc9111_4_3_4_strong_validator_selects_every_match_or_none() {
    let a1 = meta(&dated(&[("ETag", "\"a\"")]));
    let a2 = meta(&dated(&[("ETag", "\"a\""), ("X", "2")]));
    let b = meta(&dated(&[("ETag", "\"b\"")]));
    let weak_a = meta(&dated(&[("ETag", "W/\"a\"")]));
    let r304 = H::new(&[("ETag", "\"a\"")]);
    assert_eq!(select_for_304(&r304, &[&a1, &b, &a2, &weak_a]), vec![0, 2]);
    assert_eq!(select_for_304(&H::new(&[("ETag", "\"z\"")]), &[&a1, &b]), Vec::<usize>::new());
}

#[test]
fn rfc9111_4_3_4_weak_validator_selects_the_most_recent_match() {
    let old = meta(&H::new(&[("Date", &fmt_date(T - 100)), ("ETag", "W/\"a\"")]));
    let new = meta(&H::new(&[("Date", &fmt_date(T - 10)), ("ETag", "\"a\"")]));
    let other = meta(&dated(&[("ETag", "W/\"b\"")]));
    assert_eq!(select_for_304(&H::new(&[("ETag", "W/\"a\"")]), &[&old, &new, &other]), vec![1]);
    // Last-Modified as the validator.
    let lm = fmt_date(T - 5000);
    let x = meta(&dated(&[("Last-Modified", &lm)]));
    let y = meta(&dated(&[("Last-Modified", &fmt_date(T - 6000))]));
    assert_eq!(select_for_304(&H::new(&[("Last-Modified", &lm)]), &[&y, &x]), vec![1]);
}

#[test]
fn rfc9111_4_3_4_a_304_whose_validator_matches_nothing_selects_nothing() {
    let lm = fmt_date(T - 5000);
    let tagged = meta(&dated(&[("ETag", "\"a\""), ("Last-Modified", &lm)]));
    let none = Vec::<usize>::new();
    // Another tag, strong or weak: no update, even with the same Last-Modified.
    for other in ["\"b\"", "W/\"b\""] {
        let r304 = H::new(&[("ETag", other), ("Last-Modified", &lm)]);
        assert_eq!(select_for_304(&r304, &[&tagged]), none, "{other}");
    }
    // An ETag field that is not one entity tag is not "no validator": it
    // matches nothing (it used to select the lone response, whose ETag the
    // merge then overwrote).
    for bad in ["b", "w/\"b\"", "\"a\", \"b\"", "\"a", ""] {
        assert_eq!(select_for_304(&H::new(&[("ETag", bad)]), &[&tagged]), none, "{bad:?}");
    }
    let two = H::new(&[("ETag", "\"a\""), ("ETag", "\"b\"")]);
    assert_eq!(select_for_304(&two, &[&tagged]), none, "two ETag lines that differ");
    let same_twice = H::new(&[("ETag", "\"a\""), ("ETag", " \"a\"")]);
    assert_eq!(select_for_304(&same_twice, &[&tagged]), vec![0], "the same tag twice");
    // Without ETag, Last-Modified decides: another date, or one that is not a date.
    let dated_only = meta(&dated(&[("Last-Modified", &lm)]));
    for other in [fmt_date(T - 4000), "yesterday".to_string()] {
        assert_eq!(select_for_304(&H::new(&[("Last-Modified", &other)]), &[&dated_only]), none, "{other}");
    }
    // The stored ETag stays what it was when the caller heeds this: a 304
    // that does select keeps it, as the merge takes the 304's own.
    let stored = dated(&[("Cache-Control", "max-age=1"), ("ETag", "\"a\"")]);
    let head = StoredHead::new(200, b"OK", stored.iter(), &[], T);
    let (merged, m) = revalidated(&head, H::new(&[("ETag", "\"a\"")]).iter(), T, T, &opts());
    assert_eq!((merged.get(b"etag"), m.etag.as_deref()), (Some(&b"\"a\""[..]), Some("\"a\"")));
}

#[test]
fn rfc9111_4_3_4_no_validator_selects_a_lone_response() {
    let x = meta(&dated(&[("Cache-Control", "max-age=1"), ("X", "1")]));
    let y = meta(&dated(&[("Cache-Control", "max-age=1"), ("Y", "1")]));
    assert_eq!(select_for_304(&H::new(&[]), &[&x]), vec![0]);
    assert_eq!(select_for_304(&H::new(&[]), &[&x, &y]), Vec::<usize>::new());
    // A 304 without validator answering the validation of one response with an
    // ETag: the single candidate (see select_for_304's doc).
    let tagged = meta(&dated(&[("ETag", "\"t\"")]));
    assert_eq!(select_for_304(&H::new(&[("Date", &fmt_date(T))]), &[&tagged]), vec![0]);
}

#[test]
fn rfc9111_3_2_a_304_updates_stored_fields_but_not_content_length() {
    let lm = fmt_date(T - 86_400);
    let stored_fields = H::new(&[
        ("Date", &fmt_date(T)),
        ("Cache-Control", "max-age=1"),
        ("Last-Modified", &lm),
        ("Test-Header", "A"),
        ("Content-Type", "text/plain"),
        ("Set-Cookie", "a=b"),
        ("Content-Length", "5"),
        ("Kept", "1"),
    ]);
    let head = StoredHead::new(200, b"OK", stored_fields.iter(), &[], T);
    let later = T + 100;
    let r304 = H::new(&[
        ("Date", &fmt_date(later)),
        ("Cache-Control", "max-age=3600"),
        ("Last-Modified", &lm),
        ("Test-Header", "B"),
        ("Content-Type", "text/plain;charset=utf-8"),
        ("Set-Cookie", "a=c"),
        ("Content-Length", "0"),
        ("Connection", "X-Hop"),
        ("X-Hop", "1"),
        ("New", "n"),
        ("Age", "7"),
    ]);
    let (merged, m) = revalidated(&head, r304.iter(), later - 1, later, &opts());
    assert_eq!(merged.status, 200);
    assert_eq!(merged.reason(), b"OK");
    assert_eq!(merged.get(b"test-header"), Some(&b"B"[..]));
    assert_eq!(merged.get(b"content-type"), Some(&b"text/plain;charset=utf-8"[..]));
    // Set-Cookie is for the client that made the validation, never stored.
    assert_eq!(merged.get(b"set-cookie"), None);
    assert_eq!(merged.get(b"kept"), Some(&b"1"[..]));
    assert_eq!(merged.get(b"new"), Some(&b"n"[..]));
    assert_eq!(merged.get(b"content-length"), None);
    assert_eq!(merged.get(b"x-hop"), None);
    assert_eq!(merged.get(b"age"), None);
    assert_eq!(merged.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"date")).count(), 1);
    // Freshness and age come from the validation.
    assert_eq!((m.freshness_lifetime, m.response_time, m.date), (3600, later, later));
    assert_eq!(m.corrected_initial_age, 8);
    assert_eq!(decide(&H::new(&[]), &m, later + 10), Decision::Fresh);
}

#[test]
fn rfc9111_4_3_4_a_304_without_date_does_not_age_the_response() {
    let stored = H::new(&[("Date", &fmt_date(T - 7200)), ("Cache-Control", "max-age=60"), ("ETag", "\"e\"")]);
    let head = StoredHead::new(200, b"OK", stored.iter(), &[], T - 7200);
    let (merged, m) = revalidated(&head, H::new(&[("ETag", "\"e\"")]).iter(), T, T, &opts());
    assert_eq!(merged.get(b"date"), Some(fmt_date(T).as_bytes()));
    assert_eq!(m.corrected_initial_age, 0);
    assert_eq!(decide(&H::new(&[]), &m, T + 30), Decision::Fresh);
}

#[test]
fn rfc9111_4_3_4_a_304_listing_fields_under_no_cache_drops_them() {
    let stored = H::new(&[("Date", &fmt_date(T)), ("Cache-Control", "max-age=1"), ("A", "1"), ("B", "2")]);
    let head = StoredHead::new(200, b"OK", stored.iter(), &[], T);
    let r304 = H::new(&[("Cache-Control", "max-age=60, no-cache=\"a\"")]);
    let (merged, m) = revalidated(&head, r304.iter(), T, T, &opts());
    assert_eq!(merged.get(b"a"), None);
    assert_eq!(merged.get(b"b"), Some(&b"2"[..]));
    assert_eq!(m.freshness_lifetime, 60);
}

#[test]
fn rfc9110_13_1_2_if_none_match_answered_from_cache_with_weak_comparison() {
    let m = meta(&dated(&[("Cache-Control", "max-age=60"), ("ETag", "\"abc\"")]));
    let wants = |v: &str| client_wants_304(&get(&H::new(&[("If-None-Match", v)])), &m);
    assert!(wants("\"abc\""));
    assert!(wants("W/\"abc\""));
    assert!(wants("\"x\", \"abc\""));
    assert!(wants("*"));
    assert!(!wants("\"abcd\""));
    assert!(!wants("abc"));
    // If-None-Match present: If-Modified-Since is not looked at (section 13.1.3).
    let req = H::new(&[("If-None-Match", "\"nope\""), ("If-Modified-Since", &fmt_date(T + 10))]);
    assert!(!client_wants_304(&get(&req), &m));
    // No stored ETag: only "*" matches.
    let untagged = meta(&dated(&[("Cache-Control", "max-age=60")]));
    assert!(!client_wants_304(&get(&H::new(&[("If-None-Match", "\"abc\"")])), &untagged));
}

#[test]
fn rfc9110_13_1_3_if_modified_since_answered_from_cache() {
    let lm = T - 1000;
    let m = meta(&dated(&[("Cache-Control", "max-age=60"), ("Last-Modified", &fmt_date(lm))]));
    let wants = |v: &str| client_wants_304(&get(&H::new(&[("If-Modified-Since", v)])), &m);
    assert!(wants(&fmt_date(lm)));
    assert!(wants(&fmt_date(lm + 1)));
    assert!(!wants(&fmt_date(lm - 1)));
    assert!(!wants("not a date"));
    // Without Last-Modified, the stored Date (RFC 9111 section 4.3.2).
    let undated = meta(&dated(&[("Cache-Control", "max-age=60")]));
    assert!(client_wants_304(&get(&H::new(&[("If-Modified-Since", &fmt_date(T))])), &undated));
    assert!(!client_wants_304(&get(&H::new(&[("If-Modified-Since", &fmt_date(T - 1))])), &undated));
    // Only GET and HEAD.
    let h = H::new(&[("If-Modified-Since", &fmt_date(lm))]);
    assert!(client_wants_304(&RequestFacts::new("HEAD", &h), &m));
    assert!(!client_wants_304(&RequestFacts::new("DELETE", &h), &m));
}

#[test]
fn rfc9110_13_2_1_conditions_apply_only_to_2xx_responses() {
    let req = H::new(&[("If-None-Match", "*")]);
    let resp = dated(&[("Cache-Control", "max-age=60"), ("ETag", "\"a\"")]);
    let not_found = store(404, &resp).unwrap().meta;
    assert!(!client_wants_304(&get(&req), &not_found));
    let redirect = store(301, &resp).unwrap().meta;
    assert!(!client_wants_304(&get(&req), &redirect));
    assert!(client_wants_304(&get(&req), &store(203, &resp).unwrap().meta));
}

#[test]
fn rfc9111_4_3_5_a_head_response_updates_or_invalidates_the_stored_get() {
    let lm = fmt_date(T - 500);
    let m = meta(&dated(&[("Cache-Control", "max-age=60"), ("ETag", "\"a\""), ("Last-Modified", &lm)]));
    let same = H::new(&[("ETag", "\"a\""), ("Last-Modified", &lm), ("Content-Length", "10")]);
    assert_eq!(head_update(&same, &m, 10), HeadUpdate::Update);
    assert_eq!(head_update(&H::new(&[("X", "1")]), &m, 10), HeadUpdate::Update);
    assert_eq!(head_update(&H::new(&[("ETag", "\"b\"")]), &m, 10), HeadUpdate::Invalidate);
    assert_eq!(head_update(&H::new(&[("ETag", "W/\"a\"")]), &m, 10), HeadUpdate::Invalidate);
    assert_eq!(head_update(&H::new(&[("Last-Modified", &fmt_date(T))]), &m, 10), HeadUpdate::Invalidate);
    assert_eq!(head_update(&H::new(&[("Content-Length", "11")]), &m, 10), HeadUpdate::Invalidate);
    let untagged = meta(&dated(&[("Cache-Control", "max-age=60")]));
    assert_eq!(head_update(&H::new(&[("ETag", "\"a\"")]), &untagged, 0), HeadUpdate::Invalidate);
}

#[test]
fn rfc9110_15_4_5_a_304_from_cache_keeps_validators_and_cache_fields() {
    let fields = dated(&[
        ("Cache-Control", "max-age=60"),
        ("ETag", "\"a\""),
        ("Vary", "Accept-Encoding"),
        ("Content-Location", "/x"),
        ("Expires", &fmt_date(T + 60)),
        ("Content-Type", "text/html"),
        ("Content-Encoding", "gzip"),
        ("X-Custom", "1"),
    ]);
    let head = StoredHead::new(200, b"OK", fields.iter(), &[], T);
    let nm = not_modified_head(&head, T);
    assert_eq!(nm.status, 304);
    assert!(nm.wire().starts_with(b"HTTP/1.1 304 Not Modified\r\n"));
    for kept in [&b"cache-control"[..], b"etag", b"vary", b"content-location", b"expires", b"date", b"x-custom"] {
        assert!(nm.get(kept).is_some(), "{}", String::from_utf8_lossy(kept));
    }
    assert_eq!(nm.get(b"content-type"), None);
    assert_eq!(nm.get(b"content-encoding"), None);
}

// -- Section 4.4: invalidation

#[test]
fn rfc9111_4_4_unsafe_methods_invalidate_the_target() {
    let none = H::new(&[]);
    assert_eq!(invalidations("POST", 200, "http", "Example.com", "/a?b", &none), ["http://example.com/a?b"]);
    assert_eq!(invalidations("DELETE", 302, "http", "example.com:80", "/a", &none), ["http://example.com/a"]);
    // Methods of unknown safety are unsafe.
    assert_eq!(invalidations("M-SEARCH", 204, "http", "h", "/", &none), ["http://h/"]);
    // Errors and safe methods invalidate nothing.
    assert!(invalidations("POST", 500, "http", "h", "/", &none).is_empty());
    assert!(invalidations("POST", 404, "http", "h", "/", &none).is_empty());
    for safe in ["GET", "HEAD", "OPTIONS", "TRACE"] {
        assert!(invalidations(safe, 200, "http", "h", "/", &none).is_empty());
    }
}

#[test]
fn rfc9111_4_4_location_and_content_location_on_the_same_origin_only() {
    let resp = H::new(&[("Location", "/other"), ("Content-Location", "http://h:80/cl#frag")]);
    assert_eq!(
        invalidations("PUT", 201, "http", "h", "/dir/x", &resp),
        ["http://h/dir/x", "http://h/other", "http://h/cl"]
    );
    let resp = H::new(&[("Location", "sibling?q=1"), ("Content-Location", "//h/net")]);
    assert_eq!(
        invalidations("POST", 200, "http", "h", "/dir/x", &resp),
        ["http://h/dir/x", "http://h/dir/sibling?q=1", "http://h/net"]
    );
    let resp = H::new(&[("Location", "http://evil.example/x"), ("Content-Location", "https://h/x")]);
    assert_eq!(invalidations("POST", 200, "http", "h", "/x", &resp), ["http://h/x"]);
    let resp = H::new(&[("Location", "//evil.example/x"), ("Content-Location", "?q")]);
    assert_eq!(invalidations("POST", 200, "http", "h", "/x?old", &resp), ["http://h/x?old", "http://h/x?q"]);
}

// -- RFC 9213: targeted cache-control fields (CDN-Cache-Control)

#[test]
fn rfc9213_2_2_a_valid_targeted_field_replaces_cache_control_and_expires() {
    let far = fmt_date(T + 86_400);
    // The RFC's example: stored by the CDN for 600 s, by no other cache.
    let m = store(200, &dated(&[("CDN-Cache-Control", "max-age=600"), ("Cache-Control", "no-store")])).unwrap();
    assert_eq!(m.meta.freshness_lifetime, 600);
    // ... and the other way round.
    let resp = dated(&[("CDN-Cache-Control", "no-store"), ("Cache-Control", "public, max-age=60")]);
    assert_eq!(store(200, &resp), Err(NotStorable::NoStore));
    let resp = dated(&[("CDN-Cache-Control", "private"), ("Cache-Control", "public, max-age=60")]);
    assert_eq!(store(200, &resp), Err(NotStorable::Private));
    // Expires is ignored with it: no explicit freshness left, so heuristics.
    let lm = fmt_date(T - 10_000);
    let resp = dated(&[("CDN-Cache-Control", "public"), ("Expires", &far), ("Last-Modified", &lm)]);
    let m = store(200, &resp).unwrap().meta;
    assert_eq!((m.freshness_lifetime, m.heuristic), (1000, true));
    let resp = dated(&[("CDN-Cache-Control", "max-age=5"), ("Expires", &far)]);
    assert_eq!(meta(&resp).freshness_lifetime, 5);
    // Without it, Cache-Control (and Expires) as ever.
    assert_eq!(meta(&dated(&[("Expires", &far)])).freshness_lifetime, 86_400);
}

#[test]
fn rfc9213_2_2_the_targeted_directives_mean_what_they_mean_in_cache_control() {
    // s-maxage over max-age, and it forbids serving stale (as proxy-revalidate).
    let m = meta(&dated(&[("CDN-Cache-Control", "max-age=10, s-maxage=60"), ("Cache-Control", "max-age=1")]));
    assert!(m.freshness_lifetime == 60 && m.no_stale());
    // Stale windows from the targeted field; Cache-Control's are ignored.
    let resp = dated(&[
        ("CDN-Cache-Control", "max-age=10, stale-while-revalidate=30"),
        ("Cache-Control", "max-age=10, must-revalidate, stale-if-error=99"),
    ]);
    let m = meta(&resp);
    assert_eq!((m.stale_while_revalidate, m.stale_if_error, m.no_stale()), (30, 0, false));
    assert_eq!(decide(&H::new(&[]), &m, T + 20), Decision::StaleWhileRevalidate);
    // no-cache: validated on every use; immutable kept.
    let m = meta(&dated(&[("CDN-Cache-Control", "max-age=60, no-cache, immutable"), ("ETag", "\"e\"")]));
    assert!(m.no_cache() && m.immutable());
    assert_eq!(decide(&H::new(&[]), &m, T), Decision::Revalidate(Why::ResponseNoCache));
    // public lets a response to a request with Authorization be stored; the
    // Cache-Control public beside it does not count.
    let auth = H::new(&[("Authorization", "Bearer x")]);
    let resp = dated(&[("CDN-Cache-Control", "public, max-age=60"), ("Cache-Control", "private")]);
    assert!(storable(&get(&auth), 200, &resp, T, T, &opts()).is_ok());
    let resp = dated(&[("CDN-Cache-Control", "max-age=60"), ("Cache-Control", "public")]);
    assert_eq!(storable(&get(&auth), 200, &resp, T, T, &opts()), Err(NotStorable::Authorization));
    // A qualified no-cache keeps a field out of the store, Set-Cookie too.
    let resp = dated(&[("CDN-Cache-Control", "max-age=60, no-cache=\"set-cookie\""), ("Set-Cookie", "s=1")]);
    assert!(store(200, &resp).is_ok_and(|m| m.omit.iter().any(|o| &**o == "set-cookie")));
    // must-understand: no-store is then ignored for an understood status.
    let resp = dated(&[("CDN-Cache-Control", "must-understand, no-store, max-age=60")]);
    assert!(store(200, &resp).is_ok());
}

#[test]
fn rfc9213_2_1_an_invalid_or_empty_targeted_field_falls_back_to_cache_control() {
    for bad in ["", "Max-Age=600", "max-age=600,", "max-age=600 no-store"] {
        let m = meta(&dated(&[("CDN-Cache-Control", bad), ("Cache-Control", "max-age=60")]));
        assert_eq!(m.freshness_lifetime, 60, "{bad:?}");
    }
    // A valid field with no directive this cache knows still replaces Cache-Control.
    let resp = dated(&[("CDN-Cache-Control", "none"), ("Cache-Control", "no-store"), ("ETag", "\"e\"")]);
    let m = store(200, &resp).unwrap().meta;
    assert_eq!(m.freshness_lifetime, 0, "stored, validated on each use");
}

#[test]
fn rfc9213_2_2_the_target_list_is_the_zones() {
    let resp = dated(&[
        ("CDN-Cache-Control", "max-age=600"),
        ("Tollgate-Cache-Control", "max-age=30"),
        ("Cache-Control", "max-age=60"),
    ]);
    let req = H::new(&[]);
    let with = |targeted: Option<&str>| {
        let o = Options { targeted: targeted.map(Box::from), ..opts() };
        storable(&get(&req), 200, &resp, T, T, &o).unwrap().meta.freshness_lifetime
    };
    assert_eq!(with(Some("cdn-cache-control")), 600, "the default");
    assert_eq!(with(Some("tollgate-cache-control")), 30, "another name: CDN-Cache-Control is not ours then");
    assert_eq!(with(None), 60, "turned off: Cache-Control");
}

#[test]
fn rfc9213_2_2_a_304_merge_goes_by_the_merged_targeted_field() {
    let stored = dated(&[("CDN-Cache-Control", "max-age=600"), ("Cache-Control", "max-age=1"), ("ETag", "\"e\"")]);
    let head = StoredHead::new(200, b"OK", stored.iter(), &[], T);
    // A 304 without it: the stored one still governs, whatever Cache-Control says.
    let (_, m) = revalidated(&head, H::new(&[("ETag", "\"e\""), ("Cache-Control", "max-age=5")]).iter(), T, T, &opts());
    assert_eq!(m.freshness_lifetime, 600);
    // A 304 with a new one replaces it.
    let r304 = H::new(&[("ETag", "\"e\""), ("CDN-Cache-Control", "max-age=120")]);
    let (merged, m) = revalidated(&head, r304.iter(), T, T, &opts());
    assert_eq!((m.freshness_lifetime, merged.get(b"cdn-cache-control")), (120, Some(&b"max-age=120"[..])));
}
