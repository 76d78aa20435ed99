//! The cache against a real origin (RFC 9111, RFC 5861, RFC 9211): one test or
//! more per rule, named by section. The origin counts the requests that reach
//! it and answers what each test tells it to.

use crate::h2::{H2Client, send_on};
use crate::harness::*;
use base64::Engine;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

type Answer = Arc<dyn Fn(&Parts, u64) -> Response<Full<Bytes>> + Send + Sync>;

/// An origin answering with `answer(request, n)` (n: 1 for the first request
/// it gets) after `delay`; returns it and its request count.
async fn origin_slow(
    delay: Duration,
    answer: impl Fn(&Parts, u64) -> Response<Full<Bytes>> + Send + Sync + 'static,
) -> (Origin, Arc<AtomicU64>) {
    let hits = Arc::new(AtomicU64::new(0));
    let answer: Answer = Arc::new(answer);
    let h = hits.clone();
    let o = serve(move |req: Request<Incoming>| {
        let (answer, h) = (answer.clone(), h.clone());
        async move {
            let n = h.fetch_add(1, SeqCst) + 1;
            let (parts, body) = req.into_parts();
            let _ = body.collect().await;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            answer(&parts, n)
        }
    })
    .await;
    (o, hits)
}

pub(crate) async fn origin(
    answer: impl Fn(&Parts, u64) -> Response<Full<Bytes>> + Send + Sync + 'static,
) -> (Origin, Arc<AtomicU64>) {
    origin_slow(Duration::ZERO, answer).await
}

pub(crate) fn resp(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(status);
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    r.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

pub(crate) fn header<'a>(p: &'a Parts, name: &str) -> Option<&'a str> {
    p.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Frontend `web` -> backend `b` (zone `main`) -> `addr`; `zone` adds keys to the zone.
pub(crate) fn cfg(addr: SocketAddr, zone: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\ncache = {{ zone = \"main\" }}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{addr}\"\n\
         [[cache]]\nname = \"main\"\nmemory = \"8MiB\"\n{zone}"
    )
}

pub(crate) type Reply = (StatusCode, HeaderMap, Bytes);

pub(crate) async fn req(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut r = Request::builder().method(method).uri(path).header("host", "test.local");
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    Client::connect(addr).await.send(r.body(Full::default()).unwrap()).await
}

pub(crate) async fn fetch(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    req(addr, "GET", path, headers).await
}

/// Every Cache-Status line, joined.
pub(crate) fn cache_status(h: &HeaderMap) -> String {
    h.get_all("cache-status").iter().map(|v| v.to_str().unwrap()).collect::<Vec<_>>().join(", ")
}

/// A field's value as text ("" when absent).
pub(crate) fn field<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).map_or("", |v| v.to_str().unwrap())
}

pub(crate) fn age(h: &HeaderMap) -> u64 {
    h.get("age").expect("an Age field").to_str().unwrap().parse().unwrap()
}

pub(crate) fn text(b: &Bytes) -> &str {
    std::str::from_utf8(b).unwrap()
}

#[tokio::test]
async fn rfc9111_4_a_fresh_response_is_served_without_the_origin() {
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=60")], &format!("v{n}"))).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let (s, h, b) = fetch(web, "/a", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
    assert_eq!(cache_status(&h), "tollgate; fwd=uri-miss; stored");
    for _ in 0..3 {
        let (s, h, b) = fetch(web, "/a", &[]).await;
        assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
        let cs = cache_status(&h);
        assert!(cs.starts_with("tollgate; hit; ttl="), "{cs}");
        assert!(age(&h) <= 1);
        assert_eq!(h["content-length"], "2");
    }
    assert_eq!(hits.load(SeqCst), 1, "hits never reach the origin");
    // Another URI is another key (section 2).
    fetch(web, "/a?x", &[]).await;
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn rfc9111_4_2_3_age_grows_from_the_age_received() {
    let (o, _hits) = origin(|_, _| resp(200, &[("cache-control", "max-age=100"), ("age", "10")], "x")).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/", &[]).await;
    let (_, h, _) = fetch(web, "/", &[]).await;
    let first = age(&h);
    assert!((10..=11).contains(&first), "Age starts from the origin's: {first}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, h, _) = fetch(web, "/", &[]).await;
    let later = age(&h);
    assert!(later >= first + 2, "Age grows while stored: {later} after {first}");
    assert!(cache_status(&h).ends_with(&format!("ttl={}", 100 - later)), "{}", cache_status(&h));
}

#[tokio::test]
async fn rfc9111_4_2_1_s_maxage_then_max_age_then_expires() {
    let (o, hits) = origin(|p, n| {
        let now = SystemTime::now();
        let date = httpdate::fmt_http_date(now);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(60));
        match p.uri.path() {
            // s-maxage wins over max-age for a shared cache.
            "/s" => resp(200, &[("cache-control", "max-age=0, s-maxage=60")], &format!("s{n}")),
            // Expires - Date without max-age.
            "/e" => resp(200, &[("date", &date), ("expires", &later)], &format!("e{n}")),
            // max-age wins over Expires.
            "/m" => resp(200, &[("cache-control", "max-age=1"), ("expires", &later)], &format!("m{n}")),
            _ => resp(404, &[], ""),
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    for path in ["/s", "/e", "/m"] {
        fetch(web, path, &[]).await;
        let (_, h, _) = fetch(web, path, &[]).await;
        assert!(cache_status(&h).contains("hit"), "{path}: {}", cache_status(&h));
    }
    assert_eq!(hits.load(SeqCst), 3);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, h, b) = fetch(web, "/m", &[]).await;
    assert!(text(&b).starts_with('m') && text(&b) != "m3", "max-age=1 has run out: {}", text(&b));
    assert!(cache_status(&h).contains("fwd=stale"), "{}", cache_status(&h));
    let (_, h, _) = fetch(web, "/s", &[]).await;
    assert!(cache_status(&h).contains("hit"), "s-maxage=60 still fresh");
    assert_eq!(hits.load(SeqCst), 4);
}

#[tokio::test]
async fn rfc9111_5_2_2_5_no_store_and_5_2_2_7_private_are_not_stored() {
    let (o, hits) = origin(|p, _| match p.uri.path() {
        "/no-store" => resp(200, &[("cache-control", "no-store, max-age=60")], "n"),
        "/private" => resp(200, &[("cache-control", "private, max-age=60")], "p"),
        _ => resp(200, &[("cache-control", "max-age=60"), ("set-cookie", "a=b")], "c"),
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    for (path, why) in [("/no-store", "detail=no-store"), ("/private", "detail=private")] {
        for _ in 0..2 {
            let (s, h, _) = fetch(web, path, &[]).await;
            assert_eq!(s, 200);
            assert!(cache_status(&h).contains(why), "{path}: {}", cache_status(&h));
        }
    }
    assert_eq!(hits.load(SeqCst), 4);
    // Set-Cookie: not stored by default (issue 33: one client's session was
    // replayed to another; nginx and Varnish do not store them either).
    for _ in 0..2 {
        let (_, h, _) = fetch(web, "/cookie", &[]).await;
        assert!(cache_status(&h).contains("detail=set-cookie"), "{}", cache_status(&h));
        assert_eq!(h["set-cookie"], "a=b", "the client that asked gets its cookie");
    }
    assert_eq!(hits.load(SeqCst), 6);
}

#[tokio::test]
async fn store_set_cookie_stores_the_response_but_never_replays_the_cookie() {
    let (o, hits) = origin(|p, n| {
        let cookie = format!("session={n}");
        if header(p, "if-none-match") == Some("\"v\"") {
            return resp(304, &[("cache-control", "max-age=0"), ("etag", "\"v\""), ("set-cookie", &cookie)], "");
        }
        resp(200, &[("cache-control", "max-age=0"), ("etag", "\"v\""), ("set-cookie", &cookie)], "body")
    })
    .await;
    let p = proxy(&cfg(o.addr, "store_set_cookie = true\n"));
    let web = p.addr("web").unwrap();
    let (_, h, _) = fetch(web, "/", &[]).await;
    assert_eq!(cache_status(&h), "tollgate; fwd=uri-miss; stored");
    assert_eq!(h["set-cookie"], "session=1", "the first client gets its own cookie");
    // Stale at once: validated, and the 304's cookie goes to this client only.
    let (s, h, b) = fetch(web, "/", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "body"));
    assert!(cache_status(&h).contains("fwd-status=304"), "{}", cache_status(&h));
    assert_eq!(field(&h, "set-cookie"), "session=2", "the validating client's cookie");
    assert_eq!(h.get_all("set-cookie").iter().count(), 1, "not session=1 too: {h:?}");
    assert_eq!(hits.load(SeqCst), 2);
    // A fresh hit (max-stale) carries no cookie at all.
    let (_, h, _) = fetch(web, "/", &[("cache-control", "max-stale")]).await;
    assert!(cache_status(&h).contains("hit"), "{}", cache_status(&h));
    assert!(h.get("set-cookie").is_none(), "{h:?}");
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn rfc9213_cdn_cache_control_governs_this_cache_and_is_stripped() {
    let (o, hits) = origin(|p, n| {
        let body = format!("{}{n}", p.uri.path());
        let no_store = ("cache-control", "no-store");
        match p.uri.path() {
            // The RFC's example: a CDN stores it for 600 s, no other cache at all.
            "/cdn" => resp(200, &[("cdn-cache-control", "max-age=600"), no_store], &body),
            // An invalid targeted field is ignored: Cache-Control decides.
            "/bad" => resp(200, &[("cdn-cache-control", "Max-Age=600"), no_store], &body),
            // Ours is another name: CDN-Cache-Control is then someone else's.
            _ => resp(
                200,
                &[("tollgate-cache-control", "max-age=600"), ("cdn-cache-control", "no-store"), no_store],
                &body,
            ),
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    for i in 0..2 {
        let (s, h, b) = fetch(web, "/cdn", &[]).await;
        assert_eq!((s, text(&b)), (StatusCode::OK, "/cdn1"));
        let want = if i == 0 { "tollgate; fwd=uri-miss; stored" } else { "tollgate; hit; ttl=" };
        assert!(cache_status(&h).starts_with(want), "{}", cache_status(&h));
        assert!(h.get("cdn-cache-control").is_none(), "stripped by default: {h:?}");
        assert_eq!(h["cache-control"], "no-store", "Cache-Control goes on, for the caches after this one");
    }
    for _ in 0..2 {
        let (_, h, _) = fetch(web, "/bad", &[]).await;
        assert!(cache_status(&h).contains("detail=no-store"), "{}", cache_status(&h));
        assert!(h.get("cdn-cache-control").is_none());
    }
    assert_eq!(hits.load(SeqCst), 3);

    // A zone that heeds its own field and keeps it on the way out.
    let own = "targeted_cache_control = \"Tollgate-Cache-Control\"\nstrip_targeted_cache_control = false\n";
    let p2 = proxy(&cfg(o.addr, own));
    let web2 = p2.addr("web").unwrap();
    fetch(web2, "/own", &[]).await;
    let (_, h, b) = fetch(web2, "/own", &[]).await;
    assert_eq!(text(&b), "/own4");
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    assert_eq!(
        (h["tollgate-cache-control"].to_str().unwrap(), h["cdn-cache-control"].to_str().unwrap()),
        ("max-age=600", "no-store")
    );
    // A zone that heeds none: Cache-Control only.
    let p3 = proxy(&cfg(o.addr, "targeted_cache_control = \"\"\n"));
    let (_, h, _) = fetch(p3.addr("web").unwrap(), "/cdn", &[]).await;
    assert!(cache_status(&h).contains("detail=no-store"), "{}", cache_status(&h));
    assert_eq!(h["cdn-cache-control"], "max-age=600", "not ours: passed through");
    assert_eq!(hits.load(SeqCst), 5);
}

#[tokio::test]
async fn rfc9111_3_5_a_request_with_authorization_is_stored_only_when_the_response_allows() {
    let (o, hits) = origin(|p, n| match p.uri.path() {
        "/public" => resp(200, &[("cache-control", "public, max-age=60")], &format!("pub{n}")),
        _ => resp(200, &[("cache-control", "max-age=60")], &format!("priv{n}")),
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let auth = [("authorization", "Bearer secret")];
    let (_, h, _) = fetch(web, "/mine", &auth).await;
    assert!(cache_status(&h).contains("detail=authorization"), "{}", cache_status(&h));
    let (_, _, b) = fetch(web, "/mine", &[]).await;
    assert_eq!(text(&b), "priv2", "another client does not get the first one's response");
    fetch(web, "/public", &auth).await;
    let (_, h, b) = fetch(web, "/public", &auth).await;
    assert_eq!(text(&b), "pub3");
    assert!(cache_status(&h).contains("hit"));
    assert_eq!(hits.load(SeqCst), 3);
}

#[tokio::test]
async fn basic_auth_is_checked_before_a_stored_response_is_served() {
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "public, max-age=60")], &format!("v{n}"))).await;
    let users = "[[userlist]]\nname = \"team\"\nusers = [{ name = \"carol\", insecure_password = \"secret\" }]\n";
    let zone = "cache = { zone = \"main\" }";
    let toml =
        format!("{users}{}", cfg_h2c(o.addr, "").replace(zone, &format!("{zone}\nauth = {{ userlist = \"team\" }}")));
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let basic = |pw: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("carol:{pw}")));
    let (good, bad) = (basic("secret"), basic("wrong"));
    let (s, h, b) = fetch(web, "/a", &[("authorization", &good)]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
    assert!(cache_status(&h).contains("stored"), "{}", cache_status(&h));
    // Stored, yet no request without the credentials gets it, nor learns it is there.
    for headers in [&[][..], &[("authorization", bad.as_str())], &[("cache-control", "only-if-cached")]] {
        for method in ["GET", "HEAD"] {
            let (s, h, b) = req(web, method, "/a", headers).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {headers:?}");
            assert!(h.contains_key("www-authenticate") && !h.contains_key("cache-status"), "{h:?}");
            assert!(!text(&b).contains("v1"));
        }
    }
    let (s, h, b) = fetch(web, "/a", &[("authorization", &good)]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    // The same over HTTP/2.
    let mut c = H2Client::plain(web).await;
    let (s, h, b) = c.get("http://test.local/a").await;
    assert_eq!((s, h.contains_key("cache-status"), text(&b).contains("v1")), (StatusCode::UNAUTHORIZED, false, false));
    let with = Request::get("http://test.local/a").header("authorization", &good).body(()).unwrap();
    let (s, h, b) = c.send(with, None).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 1);
}

#[tokio::test]
async fn rfc9111_2_a_request_over_tls_is_keyed_https() {
    use crate::tls::{BOTH, Https, Pki, client, tls_bind};
    let pki = Pki::new("cache-https");
    let (_, file) = pki.leaf("c.pem", &["test.local"], false);
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=60")], &format!("v{n}"))).await;
    let binds = format!("bind = [\"127.0.0.1:0\", {}]", tls_bind(2, &[&file], ""));
    let p = proxy(&cfg(o.addr, "").replace("bind = [\"127.0.0.1:0\"]", &binds));
    let (plain, tls) = (p.addrs()[0].1, p.addrs()[1].1);
    let (cfg, _) = client(BOTH, Some(&pki), None);
    let mut https = Https::connect(tls, "test.local", &cfg).await;
    assert_eq!(text(&fetch(plain, "/k", &[]).await.2), "v1");
    let (_, h, b) = https.get("test.local", "/k").await;
    assert_eq!((text(&b), cache_status(&h).as_str()), ("v2", "tollgate; fwd=uri-miss; stored"), "another key");
    let (_, h, b) = https.get("test.local", "/k").await;
    assert!(text(&b) == "v2" && cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    // PURGE over TLS drops the https key only.
    let purge = Request::builder().method("PURGE").uri("/k").header("host", "test.local");
    assert_eq!(https.send(purge.body(Full::default()).unwrap()).await.0, StatusCode::OK);
    assert_eq!(text(&https.get("test.local", "/k").await.2), "v3");
    let (_, h, b) = fetch(plain, "/k", &[]).await;
    assert!(text(&b) == "v1" && cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 3);
}

#[tokio::test]
async fn rfc9111_4_1_vary_keeps_one_variant_per_value_and_vary_star_is_never_served() {
    let (o, hits) = origin(|p, n| match p.uri.path() {
        "/star" => resp(200, &[("cache-control", "max-age=60"), ("vary", "*")], &format!("star{n}")),
        _ => {
            let lang = header(p, "accept-language").unwrap_or("none").to_string();
            resp(200, &[("cache-control", "max-age=60"), ("vary", "Accept-Language")], &format!("{lang}{n}"))
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let en = [("accept-language", "en")];
    let fr = [("accept-language", "fr")];
    assert_eq!(text(&fetch(web, "/v", &en).await.2), "en1");
    let (_, h, b) = fetch(web, "/v", &fr).await;
    assert_eq!(text(&b), "fr2");
    assert!(cache_status(&h).contains("fwd=vary-miss"), "{}", cache_status(&h));
    for _ in 0..2 {
        assert_eq!(text(&fetch(web, "/v", &en).await.2), "en1");
        assert_eq!(text(&fetch(web, "/v", &fr).await.2), "fr2");
    }
    // Absent matches only absent.
    assert_eq!(text(&fetch(web, "/v", &[]).await.2), "none3");
    assert_eq!(hits.load(SeqCst), 3);
    let (_, h, _) = fetch(web, "/star", &[]).await;
    assert!(cache_status(&h).contains("detail=vary-star"), "{}", cache_status(&h));
    fetch(web, "/star", &[]).await;
    assert_eq!(hits.load(SeqCst), 5, "Vary: * is never served from the cache");
}

#[tokio::test]
async fn rfc9110_12_5_4_accept_language_selects_a_variant_without_regard_to_case() {
    let (o, hits) = origin(|p, n| {
        let lang = header(p, "accept-language").unwrap_or("none").to_string();
        resp(200, &[("cache-control", "max-age=60"), ("vary", "Accept-Language")], &format!("{lang}/{n}"))
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    assert_eq!(text(&fetch(web, "/l", &[("accept-language", "en-US, de")]).await.2), "en-US, de/1");
    let (_, h, b) = fetch(web, "/l", &[("accept-language", "EN-us, De")]).await;
    assert_eq!(text(&b), "en-US, de/1");
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    // Another order is another variant.
    assert_eq!(text(&fetch(web, "/l", &[("accept-language", "de, en-US")]).await.2), "de, en-US/2");
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn rfc9110_12_5_3_gzip_never_goes_to_a_client_that_did_not_accept_it() {
    // An origin that compresses when asked but forgets Vary: the seed's nginx case.
    let (o, hits) = origin(|p, n| {
        let gz = header(p, "accept-encoding").is_some_and(|a| a.contains("gzip"));
        if gz {
            resp(200, &[("cache-control", "max-age=60"), ("content-encoding", "gzip")], &format!("GZ{n}"))
        } else {
            resp(200, &[("cache-control", "max-age=60")], &format!("plain{n}"))
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let gzip = [("accept-encoding", "gzip, br")];
    assert_eq!(text(&fetch(web, "/z", &gzip).await.2), "GZ1");
    assert_eq!(text(&fetch(web, "/z", &gzip).await.2), "GZ1", "a gzip client gets the stored gzip");
    // A client without Accept-Encoding accepts any coding (RFC 9110 section
    // 12.5.3): it may get the stored gzip.
    let (_, h, b) = fetch(web, "/z", &[]).await;
    assert_eq!((field(&h, "content-encoding"), text(&b)), ("gzip", "GZ1"));
    assert_eq!(hits.load(SeqCst), 1);
    for ae in ["br", "gzip;q=0, br", "*, gzip;q=0", "identity"] {
        let (_, h, b) = fetch(web, "/z", &[("accept-encoding", ae)]).await;
        assert!(h.get("content-encoding").is_none() && text(&b).starts_with("plain"), "{ae:?}: {}", text(&b));
    }
    assert!(hits.load(SeqCst) >= 2);
}

#[tokio::test]
async fn rfc9110_12_5_3_no_accept_encoding_or_a_star_selects_a_stored_compressed_variant() {
    // An origin that negotiates (Vary: Accept-Encoding): gzip to those who
    // take it, identity to the others.
    let (o, hits) = origin(|p, n| {
        let ae = header(p, "accept-encoding").unwrap_or("").to_string();
        let vary = ("vary", "Accept-Encoding");
        if ae.contains("gzip") && !ae.contains("gzip;q=0") {
            resp(200, &[("cache-control", "max-age=60"), ("content-encoding", "gzip"), vary], &format!("GZ{n}"))
        } else {
            resp(200, &[("cache-control", "max-age=60"), vary], &format!("plain{n}"))
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    assert_eq!(text(&fetch(web, "/v", &[("accept-encoding", "gzip, deflate, br")]).await.2), "GZ1");
    // Both were vary-misses: absent means any coding is acceptable, and `*`
    // takes any coding not excluded.
    for ae in [&[][..], &[("accept-encoding", "*")][..], &[("accept-encoding", "br;q=0.5, *")][..]] {
        let (_, h, b) = fetch(web, "/v", ae).await;
        assert_eq!((field(&h, "content-encoding"), text(&b)), ("gzip", "GZ1"), "{ae:?}");
        assert!(cache_status(&h).starts_with("tollgate; hit"), "{ae:?}: {}", cache_status(&h));
    }
    assert_eq!(hits.load(SeqCst), 1);
    // A q=0 exclusion still keeps gzip away, and a request that lists its
    // codings still matches by the set it lists.
    for (ae, want) in [("*, gzip;q=0", "plain2"), ("gzip", "GZ3"), ("identity;q=0, *;q=0", "plain4")] {
        let (_, h, b) = fetch(web, "/v", &[("accept-encoding", ae)]).await;
        assert_eq!(text(&b), want, "{ae}");
        assert!(cache_status(&h).contains("fwd=vary-miss"), "{ae}: {}", cache_status(&h));
    }
    assert_eq!(hits.load(SeqCst), 4);
}

/// An origin with ETag "v1" whose 304s carry new fields.
async fn validating_origin(seen: Arc<Mutex<Vec<Option<String>>>>) -> (Origin, Arc<AtomicU64>) {
    origin(move |p, n| {
        let inm = header(p, "if-none-match").map(str::to_string);
        seen.lock().unwrap().push(inm.clone());
        if inm.as_deref() == Some("\"v1\"") {
            let version = n.to_string();
            resp(304, &[("etag", "\"v1\""), ("cache-control", "max-age=60"), ("x-version", &version)], "")
        } else {
            resp(200, &[("etag", "\"v1\""), ("cache-control", "max-age=0"), ("x-version", "1")], "body-v1")
        }
    })
    .await
}

#[tokio::test]
async fn rfc9111_4_3_4_a_304_freshens_the_stored_response_which_is_served() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (o, hits) = validating_origin(seen.clone()).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let (_, h, b) = fetch(web, "/r", &[]).await;
    assert_eq!((text(&b), h["x-version"].to_str().unwrap()), ("body-v1", "1"));
    // Stale at once (max-age=0), so validated: If-None-Match goes to the origin.
    let (s, h, b) = fetch(web, "/r", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "body-v1"));
    assert_eq!(h["x-version"], "2", "the 304's fields replace the stored ones");
    assert!(cache_status(&h).starts_with("tollgate; fwd=stale; fwd-status=304; ttl="), "{}", cache_status(&h));
    assert_eq!(seen.lock().unwrap()[1].as_deref(), Some("\"v1\""));
    // Now fresh for 60 s (the 304's Cache-Control).
    let (_, h, b) = fetch(web, "/r", &[]).await;
    assert_eq!((text(&b), h["x-version"].to_str().unwrap()), ("body-v1", "2"));
    assert!(cache_status(&h).contains("hit"));
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn rfc9111_4_3_4_a_304_that_selects_nothing_updates_nothing_and_the_request_goes_again() {
    // The stored response has ETag "a"; the 304s to its validations carry
    // another tag: `b` (not an entity tag: it used to count as no validator,
    // select the stored response and overwrite its ETag) or "b" (strong, another).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (o, hits) = origin({
        let seen = seen.clone();
        move |p, n| {
            let inm = header(p, "if-none-match").map(str::to_string);
            seen.lock().unwrap().push((p.uri.path().to_string(), inm.clone()));
            let other = if p.uri.path() == "/bad" { "b" } else { "\"b\"" };
            match inm.as_deref() {
                Some("\"a\"") => resp(304, &[("etag", other), ("cache-control", "max-age=60"), ("x-from", "304")], ""),
                _ => resp(200, &[("etag", "\"a\""), ("cache-control", "max-age=0")], &format!("v{n}")),
            }
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    for path in ["/bad", "/strong"] {
        seen.lock().unwrap().clear();
        let before = hits.load(SeqCst);
        let (_, _, b) = fetch(web, path, &[]).await;
        assert_eq!(text(&b), format!("v{}", before + 1));
        // Stale (max-age=0): validated; the 304 selects nothing, so the request
        // goes again without the cache's conditions and its 200 is served and stored.
        let (s, h, b) = fetch(web, path, &[]).await;
        assert_eq!((s, text(&b)), (StatusCode::OK, format!("v{}", before + 3).as_str()), "{path}");
        assert_eq!(h["etag"], "\"a\"", "{path}: the stored ETag was not replaced");
        assert!(h.get("x-from").is_none(), "{path}: nothing of the 304 was merged: {h:?}");
        assert_eq!(cache_status(&h), "tollgate; fwd=stale; fwd-status=200; stored", "{path}");
        // The next validation still names "a": the store kept its validator.
        fetch(web, path, &[]).await;
        let seen = seen.lock().unwrap().clone();
        let inm: Vec<Option<&str>> = seen.iter().map(|(_, v)| v.as_deref()).collect();
        assert_eq!(inm, [None, Some("\"a\""), None, Some("\"a\""), None], "{path}");
    }
}

#[tokio::test]
async fn rfc9111_4_3_4_a_304_that_selects_nothing_then_a_closed_connection_serves_stale_if_allowed() {
    // The 304 names another tag and closes the connection: the request
    // cannot go again on it, so the origin has failed (RFC 5861 section 4).
    let (o, hits) = origin(|p, n| match header(p, "if-none-match") {
        Some(_) => resp(304, &[("etag", "\"b\""), ("connection", "close")], ""),
        None => {
            let cc = if p.uri.path() == "/sie" { "max-age=0, stale-if-error=60" } else { "max-age=0" };
            resp(200, &[("etag", "\"a\""), ("cache-control", cc)], &format!("v{n}"))
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    for path in ["/sie", "/plain"] {
        fetch(web, path, &[]).await;
    }
    let (s, h, b) = fetch(web, "/sie", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"), "was a 502");
    assert!(cache_status(&h).contains("detail=stale-if-error"), "{}", cache_status(&h));
    assert_eq!(fetch(web, "/plain", &[]).await.0, StatusCode::BAD_GATEWAY, "nothing allows stale");
    assert_eq!(hits.load(SeqCst), 4);
}

#[tokio::test]
async fn rfc9111_4_3_2_a_conditional_request_is_answered_304_from_the_cache() {
    let (o, hits) = origin(|_, _| {
        resp(200, &[("etag", "\"v1\""), ("cache-control", "max-age=60"), ("content-type", "text/plain")], "body")
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/c", &[]).await;
    let (s, h, b) = fetch(web, "/c", &[("if-none-match", "\"v0\", W/\"v1\"")]).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    assert!(b.is_empty() && h.get("content-type").is_none() && h["etag"] == "\"v1\"", "{h:?}");
    let (s, _, b) = fetch(web, "/c", &[("if-none-match", "\"other\"")]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "body"));
    let future = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3600));
    let (s, _, _) = fetch(web, "/c", &[("if-modified-since", &future)]).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED, "If-Modified-Since against the stored Date");
    assert_eq!(hits.load(SeqCst), 1);
}

#[tokio::test]
async fn rfc9111_5_2_1_4_request_no_cache_and_5_2_1_1_max_age_revalidate() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (o, hits) = origin({
        let seen = seen.clone();
        move |p, _| {
            seen.lock().unwrap().push(header(p, "if-none-match").map(str::to_string));
            if header(p, "if-none-match").is_some() {
                resp(304, &[("etag", "\"v1\"")], "")
            } else {
                // Two seconds old when it arrives.
                resp(200, &[("etag", "\"v1\""), ("cache-control", "max-age=60"), ("age", "2")], "fresh")
            }
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/n", &[]).await;
    // max-age=1 first: older than that (section 5.2.1.1); the 304 then makes it new.
    for h in [[("cache-control", "max-age=1")], [("cache-control", "no-cache")], [("pragma", "no-cache")]] {
        let (s, rh, b) = fetch(web, "/n", &h).await;
        assert_eq!((s, text(&b)), (StatusCode::OK, "fresh"));
        assert!(cache_status(&rh).starts_with("tollgate; fwd=request; fwd-status=304"), "{h:?}: {}", cache_status(&rh));
    }
    assert_eq!(hits.load(SeqCst), 4);
    assert!(seen.lock().unwrap()[1..].iter().all(|t| t.as_deref() == Some("\"v1\"")));
    // Without them: a plain hit.
    assert!(cache_status(&fetch(web, "/n", &[]).await.1).contains("hit"));
    assert_eq!(hits.load(SeqCst), 4);
}

#[tokio::test]
async fn rfc9111_5_2_1_7_only_if_cached_gets_504_when_nothing_is_stored() {
    let (o, hits) = origin(|_, _| resp(200, &[("cache-control", "max-age=60")], "x")).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let oic = [("cache-control", "only-if-cached")];
    let (s, h, _) = fetch(web, "/o", &oic).await;
    assert_eq!(s, StatusCode::GATEWAY_TIMEOUT);
    assert!(cache_status(&h).contains("only-if-cached"));
    assert_eq!(hits.load(SeqCst), 0);
    fetch(web, "/o", &[]).await;
    let (s, _, b) = fetch(web, "/o", &oic).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "x"));
    assert_eq!(hits.load(SeqCst), 1);
}

#[tokio::test]
async fn rfc5861_3_stale_while_revalidate_serves_stale_and_refreshes_once() {
    // The origin is slow, so every request of the burst finds the response stale.
    let (o, hits) = origin_slow(Duration::from_millis(800), |_, n| {
        let cc = if n == 1 { "max-age=1, stale-while-revalidate=60" } else { "max-age=60" };
        resp(200, &[("cache-control", cc)], &format!("v{n}"))
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/w", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for _ in 0..4 {
        let (s, h, b) = fetch(web, "/w", &[]).await;
        assert_eq!((s, text(&b)), (StatusCode::OK, "v1"), "served stale at once");
        assert!(cache_status(&h).contains("hit") && cache_status(&h).contains("detail=stale-while-revalidate"));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hits.load(SeqCst), 2, "one refresh for the whole burst");
    let (_, h, b) = fetch(web, "/w", &[]).await;
    assert_eq!(text(&b), "v2", "the refresh was stored");
    assert!(cache_status(&h).starts_with("tollgate; hit"));
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn rfc5861_4_stale_if_error_on_a_5xx_and_on_a_dead_origin() {
    let (o, hits) = origin(|_, n| {
        if n == 1 {
            resp(200, &[("cache-control", "max-age=1, stale-if-error=60"), ("etag", "\"a\"")], "good")
        } else {
            resp(503, &[], "down")
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/e", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (s, h, b) = fetch(web, "/e", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "good"));
    assert!(cache_status(&h).contains("fwd-status=503") && cache_status(&h).contains("detail=stale-if-error"));
    assert_eq!(hits.load(SeqCst), 2);
    // The server moves to where nothing listens (the zone, unchanged, keeps its store).
    let dead = cfg(dead_addr().await, "");
    p.reload(
        tollgate_config::parse(&format!("[global]\nworkers = 1\n{dead}"), std::path::Path::new("t.toml")).unwrap(),
    )
    .unwrap();
    let (s, h, b) = fetch(web, "/e", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "good"), "connection refused: still the stale response");
    assert!(cache_status(&h).contains("detail=stale-if-error"), "{}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 2);
    // Without stale-if-error an error goes through.
    let (o, _) =
        origin(|_, n| if n == 1 { resp(200, &[("cache-control", "max-age=1")], "ok") } else { resp(500, &[], "") })
            .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/e", &[]).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(fetch(web, "/e", &[]).await.0, 500);
}

#[tokio::test]
async fn rfc9111_4_4_a_successful_post_invalidates_the_uri() {
    let (o, hits) = origin(|p, n| match p.method.as_str() {
        "POST" => resp(201, &[("location", "/other")], ""),
        _ => resp(200, &[("cache-control", "max-age=60")], &format!("v{n}")),
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/item", &[]).await;
    fetch(web, "/other", &[]).await;
    assert!(cache_status(&fetch(web, "/item", &[]).await.1).contains("hit"));
    let (s, h, _) = req(web, "POST", "/item", &[]).await;
    assert_eq!(s, 201);
    assert_eq!(cache_status(&h), "tollgate; fwd=method");
    let (_, h, b) = fetch(web, "/item", &[]).await;
    assert_eq!(text(&b), "v4", "the POST dropped the stored response");
    assert!(cache_status(&h).contains("fwd=uri-miss"));
    assert!(cache_status(&fetch(web, "/other", &[]).await.1).contains("fwd=uri-miss"), "and Location's");
    assert_eq!(hits.load(SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coalescing_20_concurrent_misses_make_one_origin_request() {
    let (o, hits) = origin_slow(Duration::from_millis(300), |_, n| {
        resp(200, &[("cache-control", "max-age=60")], &format!("only{n}"))
    })
    .await;
    let p = proxy(&format!("[global]\nworkers = 2\n{}", cfg(o.addr, "")));
    let web = p.addr("web").unwrap();
    let tasks: Vec<_> = (0..20).map(|_| tokio::spawn(fetch(web, "/hot", &[]))).collect();
    let mut collapsed = 0;
    for t in tasks {
        let (s, h, b) = t.await.unwrap();
        assert_eq!((s, text(&b)), (StatusCode::OK, "only1"));
        collapsed += usize::from(cache_status(&h).contains("collapsed"));
    }
    assert_eq!(hits.load(SeqCst), 1, "one origin request for 20 misses");
    assert!(collapsed >= 15, "{collapsed} were handed the leader's response");
    let report = p.control().report().unwrap();
    assert!(report.caches[0].coalesced >= 15, "{:?}", report.caches[0]);
    // Concurrent requests that find one stale response make one validation.
    let (o, hits) = origin_slow(Duration::from_millis(300), |p, _| {
        if header(p, "if-none-match").is_some() {
            resp(304, &[("etag", "\"v1\""), ("cache-control", "max-age=60")], "")
        } else {
            resp(200, &[("etag", "\"v1\""), ("cache-control", "max-age=0")], "stale")
        }
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/hot", &[]).await;
    let tasks: Vec<_> = (0..10).map(|_| tokio::spawn(fetch(web, "/hot", &[]))).collect();
    for t in tasks {
        let (s, _, b) = t.await.unwrap();
        assert_eq!((s, text(&b)), (StatusCode::OK, "stale"));
    }
    assert_eq!(hits.load(SeqCst), 2, "one conditional request for ten stale hits");
    // A response that is not stored sends the followers to the origin.
    let (o, hits) =
        origin_slow(Duration::from_millis(300), |_, _| resp(200, &[("cache-control", "no-store")], "x")).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    let tasks: Vec<_> = (0..5).map(|_| tokio::spawn(fetch(web, "/cold", &[]))).collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().0, 200);
    }
    assert_eq!(hits.load(SeqCst), 5);
}

#[tokio::test]
async fn purge_method_and_admin_purge() {
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=60")], &format!("v{n}"))).await;
    let toml = format!("[admin]\nbind = \"127.0.0.1:0\"\n{}", cfg(o.addr, ""));
    let p = proxy(&toml);
    let (web, admin) = (p.addr("web").unwrap(), p.admin_addr().unwrap());
    for path in ["/a", "/img/1", "/img/2", "/keep"] {
        fetch(web, path, &[]).await;
    }
    assert_eq!(hits.load(SeqCst), 4);
    let (s, _, b) = req(web, "PURGE", "/a", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "Purged 1 stored response(s).\n"));
    assert_eq!(req(web, "PURGE", "/a", &[]).await.0, 404);
    assert!(cache_status(&fetch(web, "/a", &[]).await.1).contains("fwd=uri-miss"));
    assert_eq!(hits.load(SeqCst), 5);

    let purge = |q: &str| {
        let q = q.to_string();
        async move {
            let r = admin_change("DELETE", admin, &format!("/api/cache/main?{q}")).body(Full::default());
            let r = r.unwrap();
            Client::connect(admin).await.send(r).await
        }
    };
    let (s, _, b) = purge("url=http://TEST.local:80/a").await;
    assert_eq!(s, 200);
    assert_eq!(json(&b)["purged"], 1);
    let (s, _, b) = purge("prefix=http://test.local/img/").await;
    assert_eq!((s, json(&b)["purged"].as_u64()), (StatusCode::OK, Some(2)));
    assert_eq!(purge("url=http://test.local/a").await.0, 404);
    assert_eq!(purge("path=/a").await.0, 400);
    let r = admin_change("DELETE", admin, "/api/cache/nope?url=http://a/").body(Full::default()).unwrap();
    assert_eq!(Client::connect(admin).await.send(r).await.0, 404);
    assert!(cache_status(&fetch(web, "/keep", &[]).await.1).contains("hit"), "the rest stays");
    for path in ["/a", "/img/1", "/img/2"] {
        assert!(cache_status(&fetch(web, path, &[]).await.1).contains("uri-miss"), "{path}");
    }
    let (s, _, b) = admin_get(admin, "/api/cache").await;
    assert_eq!(s, 200);
    assert_eq!(json(&b)[0]["name"], "main");
    assert!(json(&b)[0]["purged"].as_u64().unwrap() >= 4);

    // PURGE from an address not in purge_from.
    let p = proxy(&cfg(o.addr, "purge_from = [\"10.0.0.0/8\"]\n"));
    let (s, _, _) = req(p.addr("web").unwrap(), "PURGE", "/a", &[]).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
}

/// `cfg` with the bind speaking h2c (HTTP/2 with prior knowledge) besides HTTP/1.1.
fn cfg_h2c(addr: SocketAddr, zone: &str) -> String {
    cfg(addr, zone).replace("bind = [\"127.0.0.1:0\"]", "bind = [{ addr = \"127.0.0.1:0\", h2c = true }]")
}

#[tokio::test]
async fn http2_a_miss_then_a_hit_with_age_head_from_get_purge_and_invalidation() {
    let (o, hits) = origin(|p, n| {
        let body = format!("v{n}");
        match p.method.as_str() {
            "POST" => resp(204, &[], ""),
            _ => resp(200, &[("cache-control", "max-age=100"), ("age", "10"), ("x-origin", "yes")], &body),
        }
    })
    .await;
    let p = proxy(&cfg_h2c(o.addr, ""));
    let web = p.addr("web").unwrap();
    let mut c = H2Client::plain(web).await;
    let (s, h, b) = c.get("http://test.local/a").await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
    assert_eq!(cache_status(&h), "tollgate; fwd=uri-miss; stored");
    for _ in 0..2 {
        let (s, h, b) = c.get("http://test.local/a").await;
        assert_eq!((s, text(&b)), (StatusCode::OK, "v1"));
        assert!(cache_status(&h).starts_with("tollgate; hit; ttl="), "{}", cache_status(&h));
        assert!((10..=11).contains(&age(&h)), "Age from the origin's 10: {}", age(&h));
        assert_eq!((&h["content-length"], &h["x-origin"]), (&"2".parse().unwrap(), &"yes".parse().unwrap()));
        assert!(!h.contains_key("connection"));
    }
    // HEAD from the stored GET: the GET's length, no body.
    let (s, h, b) = c.send(Request::head("http://test.local/a").body(()).unwrap(), None).await;
    assert_eq!((s, b.len(), &h["content-length"]), (StatusCode::OK, 0, &"2".parse().unwrap()));
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    // One store for both protocols.
    let (_, h, b) = fetch(web, "/a", &[]).await;
    assert!(text(&b) == "v1" && cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 1, "hits never reach the origin");

    let purge = Request::builder().method("PURGE").uri("http://test.local/a").body(()).unwrap();
    let (s, h, b) = c.send(purge, None).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "Purged 1 stored response(s).\n"));
    assert_eq!(cache_status(&h), "tollgate; detail=purge");
    let (_, h, b) = c.get("http://test.local/a").await;
    assert_eq!((text(&b), cache_status(&h).as_str()), ("v2", "tollgate; fwd=uri-miss; stored"));
    // A successful POST drops the stored response (RFC 9111 section 4.4).
    let post = Request::post("http://test.local/a").body(()).unwrap();
    assert_eq!(c.send(post, Some(Bytes::from_static(b"form"))).await.0, StatusCode::NO_CONTENT);
    let (_, h, b) = c.get("http://test.local/a").await;
    assert_eq!((text(&b), cache_status(&h).as_str()), ("v4", "tollgate; fwd=uri-miss; stored"));
    assert_eq!(hits.load(SeqCst), 4);
}

#[tokio::test]
async fn http2_revalidation_then_a_304_from_the_cache() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (o, hits) = validating_origin(seen.clone()).await;
    let p = proxy(&cfg_h2c(o.addr, ""));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    let (_, h, b) = c.get("http://test.local/r").await;
    assert_eq!((text(&b), h["x-version"].to_str().unwrap()), ("body-v1", "1"));
    // Stale at once (max-age=0): validated with the stored ETag, the 304 merged.
    let (s, h, b) = c.get("http://test.local/r").await;
    assert_eq!((s, text(&b), h["x-version"].to_str().unwrap()), (StatusCode::OK, "body-v1", "2"));
    assert!(cache_status(&h).starts_with("tollgate; fwd=stale; fwd-status=304; ttl="), "{}", cache_status(&h));
    assert_eq!(seen.lock().unwrap()[1].as_deref(), Some("\"v1\""));
    // Fresh now: the client's own condition is answered 304 by the cache.
    let cond = Request::get("http://test.local/r").header("if-none-match", "\"v1\"").body(()).unwrap();
    let (s, h, b) = c.send(cond, None).await;
    assert_eq!((s, b.len()), (StatusCode::NOT_MODIFIED, 0));
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    assert_eq!((&h["etag"], age(&h) <= 1), (&"\"v1\"".parse().unwrap(), true));
    assert!(!h.contains_key("content-length"));
    let cond = Request::get("http://test.local/r").header("if-none-match", "\"other\"").body(()).unwrap();
    let (s, _, b) = c.send(cond, None).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "body-v1"), "a condition that does not hold gets the body");
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn http2_stale_if_error_on_a_5xx_and_on_a_dead_origin() {
    let (o, hits) = origin(|_, n| match n {
        1 => resp(200, &[("cache-control", "max-age=0, stale-if-error=60"), ("etag", "\"a\"")], "good"),
        _ => resp(503, &[], "down"),
    })
    .await;
    let p = proxy(&cfg_h2c(o.addr, ""));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    c.get("http://test.local/e").await;
    let (s, h, b) = c.get("http://test.local/e").await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "good"));
    assert!(cache_status(&h).contains("fwd-status=503; ttl="), "{}", cache_status(&h));
    assert!(cache_status(&h).ends_with("detail=stale-if-error"), "{}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 2);
    // The server moves to where nothing listens (the zone, unchanged, keeps its
    // store); a new connection has the new configuration.
    let dead = cfg_h2c(dead_addr().await, "");
    p.reload(tollgate_config::parse(&dead, std::path::Path::new("t.toml")).unwrap()).unwrap();
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    let (s, h, b) = c.get("http://test.local/e").await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "good"), "connection refused: still the stale response");
    assert!(cache_status(&h).ends_with("detail=stale-if-error"), "{}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn http2_concurrent_streams_that_miss_make_one_origin_request() {
    let (o, hits) = origin_slow(Duration::from_millis(300), |_, n| {
        resp(200, &[("cache-control", "max-age=60")], &format!("only{n}"))
    })
    .await;
    let p = proxy(&cfg_h2c(o.addr, ""));
    let c = H2Client::plain(p.addr("web").unwrap()).await;
    let get = || Request::get("http://test.local/hot").body(()).unwrap();
    let tasks: Vec<_> = (0..10).map(|_| tokio::spawn(send_on(c.sender(), get(), None))).collect();
    let mut collapsed = 0;
    for t in tasks {
        let (s, h, b) = t.await.unwrap();
        assert_eq!((s, text(&b)), (StatusCode::OK, "only1"));
        collapsed += usize::from(cache_status(&h).contains("collapsed"));
    }
    assert_eq!((hits.load(SeqCst), collapsed), (1, 9), "one stream led, the nine others were handed its response");
}

#[tokio::test]
async fn rfc9111_4_3_5_head_is_answered_from_a_stored_get() {
    let (o, hits) = origin(|_, _| resp(200, &[("cache-control", "max-age=60")], "twelve bytes")).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/h", &[]).await;
    let reply =
        raw(web, b"HEAD /h HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(reply.contains("content-length: 12\r\n") && reply.ends_with("\r\n\r\n"), "{reply}");
    assert!(reply.contains("cache-status: tollgate; hit"), "{reply}");
    assert_eq!(hits.load(SeqCst), 1);
    // A HEAD miss goes to the origin and stores nothing.
    raw(web, b"HEAD /h2 HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
    fetch(web, "/h2", &[]).await;
    assert_eq!(hits.load(SeqCst), 3);
}

#[tokio::test]
async fn rfc9111_4_3_5_a_head_200_with_another_etag_drops_the_stored_get() {
    let (o, hits) = origin(|_, n| {
        let tag = if n == 1 { "\"v1\"" } else { "\"v2\"" };
        resp(200, &[("etag", tag), ("cache-control", "max-age=0")], "body")
    })
    .await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/h", &[]).await;
    // Stale at once: the HEAD is validated, and the origin's 200 names another ETag.
    let (s, h, _) = req(web, "HEAD", "/h", &[]).await;
    assert_eq!((s, h["etag"].to_str().unwrap()), (StatusCode::OK, "\"v2\""));
    let (_, h, _) = fetch(web, "/h", &[]).await;
    assert!(cache_status(&h).contains("fwd=uri-miss"), "the stored GET is gone: {}", cache_status(&h));
    assert_eq!(hits.load(SeqCst), 3);
}

#[tokio::test]
async fn a_hit_gets_the_rules_response_edits() {
    let (o, hits) = origin(|_, _| resp(200, &[("cache-control", "max-age=60"), ("x-internal", "1")], "x")).await;
    let edits = "  [[frontend.rule]]\n  set_response_headers = { \"X-Frame-Options\" = \"DENY\" }\n  \
                 delete_response_headers = [\"x-internal\"]\n";
    let toml = cfg(o.addr, "").replacen("[[backend]]", &format!("{edits}[[backend]]"), 1);
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    for _ in 0..2 {
        let (_, h, _) = fetch(web, "/x", &[]).await;
        assert_eq!(h["x-frame-options"], "DENY");
        assert!(h.get("x-internal").is_none());
    }
    assert_eq!(hits.load(SeqCst), 1);
    // The stored response is the origin's: the edits apply on the way out.
    let (_, h, _) = fetch(web, "/x", &[]).await;
    assert!(cache_status(&h).contains("hit") && h.get("x-internal").is_none());
}

#[tokio::test]
async fn responses_over_max_object_stream_through_unstored() {
    let big = "b".repeat(200 * 1024);
    let body = big.clone();
    let (o, hits) = origin(move |_, _| resp(200, &[("cache-control", "max-age=60")], &body)).await;
    let p = proxy(&cfg(o.addr, "max_object = \"64KiB\"\n"));
    let web = p.addr("web").unwrap();
    for _ in 0..2 {
        let (s, h, b) = fetch(web, "/big", &[]).await;
        assert_eq!((s, b.len()), (StatusCode::OK, big.len()));
        assert!(cache_status(&h).contains("detail=too-large"), "{}", cache_status(&h));
    }
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn a_chunked_response_is_stored_whole_and_one_over_max_object_is_not() {
    let o = chunked_origin(&[&b"hello "[..], b"chunked ", b"world"], 0).await;
    let p = proxy(&cfg(o.addr, "max_object = \"64KiB\"\n"));
    let web = p.addr("web").unwrap();
    let (_, h, b) = fetch(web, "/c", &[]).await;
    assert_eq!(text(&b), "hello chunked world");
    assert!(cache_status(&h).contains("stored"));
    let (_, h, b) = fetch(web, "/c", &[]).await;
    assert_eq!(text(&b), "hello chunked world");
    assert!(cache_status(&h).contains("hit") && h["content-length"] == "19");
    assert_eq!(o.hits.load(SeqCst), 1);
    // 100 KiB in chunks: past max_object on the way, so streamed and dropped.
    let chunk = [b'x'; 10 * 1024];
    let o = chunked_origin(&[&chunk[..]; 10], 0).await;
    let p = proxy(&cfg(o.addr, "max_object = \"64KiB\"\n"));
    let web = p.addr("web").unwrap();
    for _ in 0..2 {
        assert_eq!(fetch(web, "/c", &[]).await.2.len(), 100 * 1024);
    }
    assert_eq!(o.hits.load(SeqCst), 2);
}

/// An origin that answers every request with a chunked, cacheable body: the
/// `chunks`, then `repeat` more copies of a 64 KiB chunk (written from one
/// buffer: the origin itself keeps no body).
struct ChunkedOrigin {
    addr: SocketAddr,
    hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChunkedOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chunked_origin(chunks: &[&[u8]], repeat: usize) -> ChunkedOrigin {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let chunks: Arc<Vec<Vec<u8>>> = Arc::new(chunks.iter().map(|c| c.to_vec()).collect());
    let h = hits.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            let (chunks, h) = (chunks.clone(), h.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        h.fetch_add(1, SeqCst);
                        let head = "HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ntransfer-encoding: chunked\r\n\r\n";
                        if s.write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                        let big = vec![b'y'; 64 * 1024];
                        let all = chunks.iter().map(|c| &c[..]).chain(std::iter::repeat_n(&big[..], repeat));
                        for c in all {
                            let mut piece = format!("{:x}\r\n", c.len()).into_bytes();
                            piece.extend_from_slice(c);
                            piece.extend_from_slice(b"\r\n");
                            if s.write_all(&piece).await.is_err() {
                                return;
                            }
                        }
                        if s.write_all(b"0\r\n\r\n").await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
            });
        }
    });
    ChunkedOrigin { addr, hits, task }
}

/// Runs [`flat_memory_in_a_process_of_its_own`] alone in a new process of
/// this test binary: RSS is a process's, and the other tests running beside it
/// (their threads spread allocations over malloc arenas) would blur it.
#[test]
fn a_100_mb_body_through_a_cached_backend_keeps_memory_flat() {
    let name = "cache::flat_memory_in_a_process_of_its_own";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--test-threads=1", "--nocapture"])
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("1 passed"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run alone, in a process of its own, by a_100_mb_body_through_a_cached_backend_keeps_memory_flat"]
async fn flat_memory_in_a_process_of_its_own() {
    // Cacheable, chunked, 100 MiB: the cache keeps it until max_object, then
    // lets go and streams the rest.
    let o = chunked_origin(&[], 1600).await;
    let p = proxy(&cfg(o.addr, "max_object = \"4MiB\"\n"));
    let before = rss_kib();
    let stream = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let r = Request::get("/huge").header("host", "test.local").body(Full::<Bytes>::default()).unwrap();
    let resp = sender.send_request(r).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        len += frame.unwrap().data_ref().map_or(0, |d| d.len());
    }
    assert_eq!(len, 1600 * 64 * 1024);
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 40 * 1024, "RSS grew by {grown} KiB while streaming 100 MiB through the cache");
    assert_eq!(p.control().report().unwrap().caches[0].objects, 0);
}

#[tokio::test]
async fn rules_choose_the_zone_or_turn_the_cache_off() {
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=60")], &format!("v{n}"))).await;
    let toml = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
           [[frontend.rule]]\n  when = {{ path_prefix = \"/live/\" }}\n  cache = false\n\
           [[frontend.rule]]\n  when = {{ path_prefix = \"/\" }}\n  cache = {{ zone = \"main\" }}\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n\
         [[cache]]\nname = \"main\"\n",
        o.addr
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    for _ in 0..2 {
        let (_, h, _) = fetch(web, "/live/x", &[]).await;
        assert!(h.get("cache-status").is_none(), "not a cached request");
    }
    fetch(web, "/page", &[]).await;
    assert!(cache_status(&fetch(web, "/page", &[]).await.1).contains("hit"));
    assert_eq!(hits.load(SeqCst), 3);
}

#[tokio::test]
async fn bypassed_requests_say_why_and_reach_the_origin() {
    let (o, hits) = origin(|_, _| resp(200, &[("cache-control", "max-age=60")], "x")).await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    fetch(web, "/b", &[]).await;
    let (_, h, _) = fetch(web, "/b", &[("if-match", "\"x\"")]).await;
    assert_eq!(cache_status(&h), "tollgate; fwd=bypass; detail=precondition");
    let (_, h, _) = req(web, "OPTIONS", "/b", &[]).await;
    assert_eq!(cache_status(&h), "tollgate; fwd=method");
    assert_eq!(hits.load(SeqCst), 3);
}

#[tokio::test]
async fn a_reload_keeps_an_unchanged_zone_warm() {
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=60")], &format!("v{n}"))).await;
    let toml = cfg(o.addr, "");
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    fetch(web, "/k", &[]).await;
    let parse = |t: &str| {
        tollgate_config::parse(&format!("[global]\nworkers = 1\n{t}"), std::path::Path::new("t.toml")).unwrap()
    };
    let report = p.reload(parse(&toml)).unwrap();
    assert!(report.caches_emptied.is_empty());
    assert!(cache_status(&fetch(web, "/k", &[]).await.1).contains("hit"), "still stored after the reload");
    let report = p.reload(parse(&toml.replace("memory = \"8MiB\"", "memory = \"16MiB\""))).unwrap();
    assert_eq!(report.caches_emptied, ["main"]);
    assert!(cache_status(&fetch(web, "/k", &[]).await.1).contains("uri-miss"), "a resized zone starts empty");
    assert_eq!(hits.load(SeqCst), 2);
}

#[tokio::test]
async fn cache_counters_reach_the_report_and_metrics() {
    let (o, _) = origin(|_, _| resp(200, &[("cache-control", "max-age=60")], "x")).await;
    let p = proxy(&format!("[admin]\nbind = \"127.0.0.1:0\"\n{}", cfg(o.addr, "")));
    let web = p.addr("web").unwrap();
    for _ in 0..3 {
        fetch(web, "/m", &[]).await;
    }
    req(web, "POST", "/m", &[]).await;
    let c = &p.control().report().unwrap().caches[0];
    assert_eq!((c.hits, c.misses, c.stores, c.bypass, c.objects, c.invalidated), (2, 1, 1, 1, 0, 1));
    let (_, _, b) = admin_get(p.admin_addr().unwrap(), "/metrics").await;
    let text = String::from_utf8(b.to_vec()).unwrap();
    assert!(text.contains("tollgate_cache_hits_total{zone=\"main\"} 2\n"), "{text}");
    assert!(text.contains("tollgate_cache_objects{zone=\"main\",tier=\"memory\"} 0\n"), "{text}");
    let (_, _, b) = admin_get(p.admin_addr().unwrap(), "/").await;
    assert!(String::from_utf8_lossy(&b).contains("data-cache=\"main\""), "the stats page has the zone");
}

#[test]
fn the_cache_example_loads() {
    // Copied to a temporary directory: its disk tier's relative path is made there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.toml");
    std::fs::write(&path, include_str!("../../../../examples/cache.toml")).unwrap();
    let cfg = tollgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!cfg.caches.is_empty());
    assert!(cfg.backends.iter().any(|b| b.cache.is_some()));
    let disk = cfg.caches[0].disk.as_ref().expect("the example has a disk tier");
    assert_eq!(disk.path, dir.path().canonicalize().unwrap().join("cache-main"));
    assert!(disk.path.is_dir() && disk.size == 2 << 30);
    let z = &cfg.caches[0];
    assert_eq!(
        (z.targeted_cache_control.as_deref(), z.strip_targeted_cache_control),
        (Some("cdn-cache-control"), true)
    );
}

/// An origin with one 26-byte resource (ETag "v1", a Last-Modified) that
/// answers ranges itself as 206 (so a forwarded range is told apart); its
/// request count, and the Last-Modified value.
async fn range_origin() -> (Origin, Arc<AtomicU64>, String) {
    let lm = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3600));
    let lm2 = lm.clone();
    let (o, hits) = origin(move |p, _| {
        let fields = [("cache-control", "max-age=60"), ("etag", "\"v1\""), ("last-modified", lm2.as_str())];
        match header(p, "range") {
            Some(_) => {
                let mut f = fields.to_vec();
                f.push(("content-range", "bytes 0-0/26"));
                resp(206, &f, "a")
            }
            None => resp(200, &fields, "abcdefghijklmnopqrstuvwxyz"),
        }
    })
    .await;
    (o, hits, lm)
}

#[tokio::test]
async fn rfc9110_14_ranges_are_cut_from_a_stored_full_response_over_http1() {
    let (o, hits, lm) = range_origin().await;
    let p = proxy(&cfg(o.addr, ""));
    let web = p.addr("web").unwrap();
    // A Range request on a miss goes to the origin as it is; its 206 is not stored.
    let (s, h, b) = fetch(web, "/r", &[("range", "bytes=0-0")]).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "a"));
    assert!(cache_status(&h).contains("fwd=uri-miss; detail=status"), "{}", cache_status(&h));
    let (s, h, b) = fetch(web, "/r", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "abcdefghijklmnopqrstuvwxyz"), "the 206 was not stored as the whole");
    assert_eq!(cache_status(&h), "tollgate; fwd=uri-miss; stored");
    assert_eq!(hits.load(SeqCst), 2);
    // Section 14.4: one range, 206 with Content-Range, from the store.
    let (s, h, b) = fetch(web, "/r", &[("range", "bytes=2-4")]).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "cde"));
    assert_eq!((field(&h, "content-range"), field(&h, "content-length")), ("bytes 2-4/26", "3"));
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    assert!(h.contains_key("age") && h["etag"] == "\"v1\"", "{h:?}");
    let (s, h, b) = fetch(web, "/r", &[("range", "bytes=-3")]).await;
    assert_eq!((s, text(&b), field(&h, "content-range")), (StatusCode::PARTIAL_CONTENT, "xyz", "bytes 23-25/26"));
    // Section 15.5.17: nothing satisfiable: 416 with the length.
    let (s, h, b) = fetch(web, "/r", &[("range", "bytes=26-")]).await;
    assert_eq!((s, text(&b), field(&h, "content-range")), (StatusCode::RANGE_NOT_SATISFIABLE, "", "bytes */26"));
    // Section 14.2: several ranges: the full 200.
    let (s, _, b) = fetch(web, "/r", &[("range", "bytes=0-1,4-5")]).await;
    assert_eq!((s, b.len()), (StatusCode::OK, 26));
    // Section 13.1.5: If-Range with the strong ETag or the Last-Modified date.
    let (s, _, b) = fetch(web, "/r", &[("range", "bytes=0-1"), ("if-range", "\"v1\"")]).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "ab"));
    let (s, _, b) = fetch(web, "/r", &[("range", "bytes=0-1"), ("if-range", &lm)]).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "ab"));
    let (s, h, b) = fetch(web, "/r", &[("range", "bytes=0-1"), ("if-range", "\"v0\"")]).await;
    assert_eq!((s, b.len()), (StatusCode::OK, 26), "another tag: the whole response");
    assert!(!h.contains_key("content-range"));
    let (s, _, b) = fetch(web, "/r", &[("range", "bytes=0-1"), ("if-range", "W/\"v1\"")]).await;
    assert_eq!((s, b.len()), (StatusCode::OK, 26), "a weak tag never matches");
    // Section 13.2.2: If-None-Match first.
    let (s, _, _) = fetch(web, "/r", &[("range", "bytes=0-1"), ("if-none-match", "\"v1\"")]).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    // HEAD ignores Range.
    let (s, h, _) = req(web, "HEAD", "/r", &[("range", "bytes=0-1")]).await;
    assert_eq!((s, field(&h, "content-length")), (StatusCode::OK, "26"));
    assert_eq!(hits.load(SeqCst), 2, "every range above came from the store");
}

#[tokio::test]
async fn rfc9110_14_ranges_are_cut_from_a_stored_full_response_over_http2() {
    let (o, hits, lm) = range_origin().await;
    let p = proxy(&cfg_h2c(o.addr, ""));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    let ranged = |range: &str, if_range: Option<&str>| {
        let mut r = Request::get("http://test.local/r").header("range", range);
        if let Some(v) = if_range {
            r = r.header("if-range", v);
        }
        r.body(()).unwrap()
    };
    let (s, _, b) = c.send(ranged("bytes=0-0", None), None).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "a"), "a miss: forwarded as is");
    let (s, _, b) = c.get("http://test.local/r").await;
    assert_eq!((s, b.len()), (StatusCode::OK, 26));
    let (s, h, b) = c.send(ranged("bytes=10-12", None), None).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "klm"));
    assert_eq!((field(&h, "content-range"), field(&h, "content-length")), ("bytes 10-12/26", "3"));
    assert!(cache_status(&h).starts_with("tollgate; hit"), "{}", cache_status(&h));
    let (s, h, b) = c.send(ranged("bytes=99-", None), None).await;
    assert_eq!((s, b.len(), field(&h, "content-range")), (StatusCode::RANGE_NOT_SATISFIABLE, 0, "bytes */26"));
    let (s, _, b) = c.send(ranged("bytes=0-1", Some(&lm)), None).await;
    assert_eq!((s, text(&b)), (StatusCode::PARTIAL_CONTENT, "ab"));
    let (s, _, b) = c.send(ranged("bytes=0-1", Some("\"other\"")), None).await;
    assert_eq!((s, b.len()), (StatusCode::OK, 26));
    assert_eq!(hits.load(SeqCst), 2);
}

/// `tollgate demo`'s config (examples/demo.toml) in front of the demo app
/// servers, on port 0: a /static/ page is a HIT the second time.
#[tokio::test]
async fn the_demo_answers_its_static_pages_from_the_cache() {
    let s1 = tollgate::demo::spawn("127.0.0.1:0".parse().unwrap(), "s1").await.unwrap();
    let s2 = tollgate::demo::spawn("127.0.0.1:0".parse().unwrap(), "s2").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("demo.sock");
    let text = include_str!("../../../../examples/demo.toml");
    // No health checks: the apps count only the requests sent here.
    let check = "check = { type = \"http\", method = \"HEAD\", path = \"/\", interval = \"2s\", fall = 3, rise = 2 }";
    assert!(text.contains(check));
    let demo = text
        .replace(check, "")
        .replace("workers = 0", "workers = 1")
        .replace("access_log = \"stdout\"", "")
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:8404", "127.0.0.1:0")
        .replace("/tmp/tollgate-demo.sock", &sock.display().to_string())
        .replace("127.0.0.1:3001", &s1.addr().to_string())
        .replace("127.0.0.1:3002", &s2.addr().to_string());
    let p = proxy(&demo);
    let web = p.addr("web").unwrap();
    let (s, h, first) = fetch(web, "/static/hello.txt", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(cache_status(&h), "tollgate; fwd=uri-miss; stored");
    let (s, h, again) = fetch(web, "/static/hello.txt", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(cache_status(&h).starts_with("tollgate; hit; ttl="), "{}", cache_status(&h));
    assert!(age(&h) <= 1 && h.get("set-cookie").is_none(), "{h:?}");
    assert_eq!(first, again, "the stored page");
    assert_eq!(s1.app.hits.load(SeqCst) + s2.app.hits.load(SeqCst), 1, "a hit never reaches the apps");
    // The rest of the demo is not cached.
    let (_, h, _) = fetch(web, "/", &[]).await;
    assert!(h.get("cache-status").is_none());
}

/// An origin that answers the first request for each path with
/// `first(path)` (a whole HTTP/1.1 response, then it closes) and closes
/// every later connection after reading the request, without answering.
/// Returns it and the number of requests it read.
async fn closing_origin(first: fn(&str) -> String) -> (tokio::task::JoinHandle<()>, SocketAddr, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let count = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            let (count, answered) = (count.clone(), answered.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(n @ 1..) => buf.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
                count.fetch_add(1, SeqCst);
                let head = String::from_utf8_lossy(&buf).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                if answered.lock().unwrap().insert(path.clone()) {
                    let _ = s.write_all(first(&path).as_bytes()).await;
                }
                // Closing with nothing (more) said.
            });
        }
    });
    (task, addr, seen)
}

fn close_after(cc: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncache-control: {cc}\r\netag: \"e\"\r\ncontent-length: 5\r\nconnection: close\r\n\r\nstale"
    )
}

#[tokio::test]
async fn rfc5861_4_a_stale_response_when_the_server_closes_without_answering() {
    let (task, addr, seen) = closing_origin(|path| match path {
        "/sie" => close_after("max-age=0, stale-if-error=60"),
        p if p.starts_with("/must") => close_after("max-age=0, must-revalidate"),
        _ => close_after("max-age=0"),
    })
    .await;
    // Stores each path's response (stale at once: max-age=0); every later
    // request for it is validated, and the server closes without a word.
    async fn first(web: SocketAddr, path: &str) {
        let (s, h, b) = fetch(web, path, &[]).await;
        assert_eq!((s, text(&b)), (StatusCode::OK, "stale"), "{path}");
        assert!(cache_status(&h).ends_with("stored"), "{path}: {}", cache_status(&h));
    }
    let stale_served = |h: &HeaderMap| {
        let cs = cache_status(h);
        assert!(cs.starts_with("tollgate; fwd=stale") && cs.contains("detail=stale-if-error"), "{cs}");
    };

    // Without a zone window: the response's stale-if-error allows it, nothing else does.
    let p = proxy(&cfg(addr, ""));
    let web = p.addr("web").unwrap();
    for path in ["/sie", "/must", "/plain"] {
        first(web, path).await;
    }
    let (s, h, b) = fetch(web, "/sie", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "stale"));
    stale_served(&h);
    assert_eq!(fetch(web, "/plain", &[]).await.0, StatusCode::BAD_GATEWAY, "nothing allows it");
    assert_eq!(fetch(web, "/must", &[]).await.0, StatusCode::BAD_GATEWAY);

    // The zone's stale_if_error stands in for the response's: over HTTP/1.1
    // and HTTP/2 alike, but never against must-revalidate.
    let p = proxy(&cfg_h2c(addr, "stale_if_error = \"1m\"\n"));
    let web = p.addr("web").unwrap();
    for path in ["/plain2", "/must2"] {
        first(web, path).await;
    }
    let (s, h, b) = fetch(web, "/plain2", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "stale"), "was a 502");
    stale_served(&h);
    let (s, h, b) = H2Client::plain(web).await.get("http://test.local/plain2").await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "stale"));
    stale_served(&h);
    assert_eq!(fetch(web, "/must2", &[]).await.0, StatusCode::BAD_GATEWAY, "must-revalidate forbids it");
    assert!(seen.load(SeqCst) >= 11);
    task.abort();
}
