//! Security issue 33 G: a path rule matches the path in normal form (so the
//! spellings of `/admin/` a server reads as `/admin/` are denied too), the
//! request goes to the server with its own bytes, `%00` in a path is refused,
//! and a host rule matches a Host (or `:authority`) with a trailing dot.
//! Requests are written raw: an HTTP client would normalise the paths first.

use crate::h2::H2Client;
use crate::harness::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// `deny` for `/admin/`, `/api/` to backend `api`, the rest to `app`; `h2c`
/// on, so the same rules can be tried over HTTP/2. Only keys older than
/// path normalisation, so the test shows what the defaults do.
fn config(app: &Echo, api: &Echo) -> String {
    format!(
        r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:0"]
default_backend = "app"
h2c = true
  [[frontend.rule]]
  when = {{ path_prefix = "/admin/" }}
  deny = {{ status = 403, body = "denied" }}
  [[frontend.rule]]
  when = {{ path_prefix = "/api/" }}
  backend = "api"
  [[frontend.rule]]
  when = {{ host = ["example.com", "*.example.com"] }}
  backend = "api"

[[backend]]
name = "app"
  [[backend.server]]
  name = "a1"
  addr = "{}"
[[backend]]
name = "api"
  [[backend.server]]
  name = "p1"
  addr = "{}"
"#,
        app.addr, api.addr
    )
}

async fn get_raw(addr: std::net::SocketAddr, target: &str, host: &str) -> String {
    let req = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    raw(addr, req.as_bytes(), WAIT).await
}

/// The body of a raw reply (after the head).
fn body_of(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_denied_prefix_is_denied() {
    let (app, api) = (echo().await, echo().await);
    let p = proxy(&config(&app, &api));
    let addr = p.addr("web").unwrap();

    for target in [
        "/admin/",
        "/%61dmin/",
        "/%61DMIN/x",
        "/ADMIN/",
        "/Admin/users",
        "/admin;x/",
        "/admin;jsessionid=0/x",
        "/%2e/admin/",
        "/%2E%2E/admin/",
        "/./admin/",
        "/x/../admin/",
        "/x/..;/admin/",
        "/x/%2e%2e/admin/",
        "//admin/",
        "/..//admin/",
        "/../admin/",
        "/api/../admin/?q=1",
    ] {
        let reply = get_raw(addr, target, "a").await;
        assert_eq!(status_of(&reply), 403, "{target}: {reply}");
        assert_eq!(body_of(&reply), "denied", "{target}");
    }
    assert_eq!(app.hits.load(Ordering::Relaxed) + api.hits.load(Ordering::Relaxed), 0, "none got through");

    // The paths that are not /admin/ still route, and the server gets the
    // request's own bytes (only the matching is on the normal form).
    for (target, to_api) in [
        ("/", false),
        ("/administrator/", false),
        ("/admin", false),
        ("/x/admin/", false),
        ("/admin%2Fx", false),
        ("/api/v1", true),
        ("//api/./v1;v=2/%7Euser", true),
        ("/API/v1", false),
    ] {
        let before = api.hits.load(Ordering::Relaxed);
        let reply = get_raw(addr, target, "a").await;
        assert_eq!(status_of(&reply), 200, "{target}: {reply}");
        let v: serde_json::Value = serde_json::from_str(body_of(&reply)).unwrap();
        assert_eq!(v["uri"], target, "sent on as it came");
        assert_eq!(api.hits.load(Ordering::Relaxed) - before, u64::from(to_api), "{target}");
    }

    // The same over HTTP/2 (the h2 crate keeps the path's bytes).
    let mut c = H2Client::plain(addr).await;
    for path in ["/%61dmin/", "/ADMIN/", "/admin;x/", "/./admin/", "/x/../admin/", "//admin/"] {
        let (status, _, _) = c.get(&format!("http://a{path}")).await;
        assert_eq!(status, 403, "h2 {path}");
    }
    let (status, _, _) = c.get("http://a/x/../api/v1").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoded_nul_in_the_path_gets_400() {
    let (app, api) = (echo().await, echo().await);
    let p = proxy(&config(&app, &api));
    let addr = p.addr("web").unwrap();
    for target in ["/a%00.png", "/admin%00/", "/%00/../admin/"] {
        let reply = get_raw(addr, target, "a").await;
        assert_eq!(status_of(&reply), 400, "{target}: {reply}");
    }
    let reply = get_raw(addr, "/search?q=%00", "a").await;
    assert_eq!(status_of(&reply), 200, "a query may carry it: {reply}");
    assert_eq!(app.hits.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rules_match_a_host_with_a_trailing_dot() {
    let (app, api) = (echo().await, echo().await);
    let p = proxy(&config(&app, &api));
    let addr = p.addr("web").unwrap();
    let mut want_api = 0;
    for (host, to_api) in [
        ("example.com", true),
        ("example.com.", true),
        ("EXAMPLE.com.", true),
        ("example.com.:8080", true),
        ("www.example.com.", true),
        ("www.example.com.:80", true),
        ("example.com..", false),
        ("example.org.", false),
    ] {
        let reply = get_raw(addr, "/", host).await;
        assert_eq!(status_of(&reply), 200, "{host}: {reply}");
        want_api += u64::from(to_api);
        assert_eq!(api.hits.load(Ordering::Relaxed), want_api, "{host}");
    }
    // An absolute-form target's authority is the Host.
    let reply = raw(addr, b"GET http://example.com./ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", WAIT).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    want_api += 1;
    assert_eq!(api.hits.load(Ordering::Relaxed), want_api, "absolute-form");
    // HTTP/2's :authority.
    let mut c = H2Client::plain(addr).await;
    for uri in ["http://example.com./", "http://www.example.com.:8080/"] {
        let (status, _, _) = c.get(uri).await;
        assert_eq!(status, 200, "{uri}");
        want_api += 1;
        assert_eq!(api.hits.load(Ordering::Relaxed), want_api, "h2 {uri}");
    }
}

/// The new keys: `path_normalize = false` matches the raw path again (so only
/// the exact spelling and its case are denied), and `path_case_insensitive`
/// turns folding off on a deny rule and on on a routing rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_normalize_and_path_case_insensitive_are_followed() {
    let (app, api) = (echo().await, echo().await);
    let backends = format!(
        r#"
[[backend]]
name = "app"
  [[backend.server]]
  name = "a1"
  addr = "{}"
[[backend]]
name = "api"
  [[backend.server]]
  name = "p1"
  addr = "{}"
"#,
        app.addr, api.addr
    );
    let raw_proxy = proxy(&format!(
        r#"
[[frontend]]
name = "raw"
bind = ["127.0.0.1:0"]
default_backend = "app"
path_normalize = false
  [[frontend.rule]]
  when = {{ path_prefix = "/admin/" }}
  deny = 403
{backends}"#
    ));
    let cased_proxy = proxy(&format!(
        r#"
[[frontend]]
name = "cased"
bind = ["127.0.0.1:0"]
default_backend = "app"
  [[frontend.rule]]
  when = {{ path_prefix = "/admin/" }}
  deny = 403
  path_case_insensitive = false
  [[frontend.rule]]
  when = {{ path_prefix = "/Api/" }}
  backend = "api"
  path_case_insensitive = true
{backends}"#
    ));
    let raw_fe = raw_proxy.addr("raw").unwrap();
    let cased = cased_proxy.addr("cased").unwrap();
    for (addr, target, status) in [
        (raw_fe, "/admin/", 403),
        (raw_fe, "/ADMIN/", 403),
        (raw_fe, "/./admin/", 200),
        (raw_fe, "/%61dmin/", 200),
        (cased, "/./admin/", 403),
        (cased, "/ADMIN/", 200),
    ] {
        let reply = get_raw(addr, target, "a").await;
        assert_eq!(status_of(&reply), status, "{target}: {reply}");
    }
    for target in ["/api/x", "/API/x", "/./aPi/x"] {
        let before = api.hits.load(Ordering::Relaxed);
        let reply = get_raw(cased, target, "a").await;
        assert_eq!(status_of(&reply), 200, "{target}: {reply}");
        assert_eq!(api.hits.load(Ordering::Relaxed), before + 1, "{target}");
    }
}
