//! The admin listener's JSON API (docs/admin.md): listing, setting a server's
//! state and weight, reloading, the token, read-only mode, the counters the
//! data path keeps, and its defences against DNS rebinding and cross-site
//! requests (the Host check, the JSON-or-bearer rule for changes, Origin).

use crate::harness::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tollgate_proxy::Server;

/// A config file of its own for a test that reloads from disk.
fn config_file(tag: &str, toml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-admin-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn start(path: &std::path::Path) -> Proxy {
    let cfg = tollgate_config::load(path).unwrap_or_else(|e| panic!("{e}"));
    start_proxy(cfg).expect("proxy starts")
}

fn config(servers: &[(&str, SocketAddr)], admin: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n\n[admin]\nbind = \"127.0.0.1:0\"\n{admin}\n\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\n[[backend]]\nname = \"b\"\n"
    );
    for (name, addr) in servers {
        s.push_str(&format!("  [[backend.server]]\n  name = \"{name}\"\n  addr = \"{addr}\"\n"));
    }
    s
}

async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (StatusCode, http::HeaderMap, Bytes) {
    // The listener's own address as Host, and JSON for a change, as a script
    // or the stats page sends them.
    let mut req = if method == "GET" { admin_request(method, addr, path) } else { admin_change(method, addr, path) };
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    Client::connect(addr).await.send(req.body(Full::new(Bytes::from(body.to_string()))).unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_backends_and_sets_state_and_weight() {
    let (a, b) = (echo().await, echo().await);
    let path = config_file("list", &config(&[("s1", a.addr), ("s2", b.addr)], ""));
    let p = start(&path);
    let web = p.addr("web").unwrap();
    let admin = p.admin_addr().expect("admin listener");
    for _ in 0..10 {
        assert_eq!(get(web, "/").await.0, StatusCode::OK);
    }
    until_counted(&p, "web", 10).await;

    let (st, h, body) = call(admin, "GET", "/api/backends", None, "").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(h["content-type"], "application/json");
    let v = json(&body);
    let be = &v[0];
    assert_eq!(be["name"], "b");
    assert_eq!(be["status"], "UP");
    assert_eq!(be["servers"][0]["name"], "s1");
    assert_eq!(be["servers"][0]["state"], "ready");
    assert_eq!(be["servers"][0]["status"], "no check");
    assert_eq!(be["sessions_total"], 10);
    assert_eq!(be["responses"]["2xx"], 10);
    let per_server: u64 = (0..2).map(|i| be["servers"][i]["sessions_total"].as_u64().unwrap()).sum();
    assert_eq!(per_server, 10);
    assert!(be["servers"][0]["bytes_out"].as_u64().unwrap() > 0);

    let (_, _, body) = call(admin, "GET", "/api/frontends", None, "").await;
    let fe = &json(&body)[0];
    assert_eq!(fe["name"], "web");
    assert_eq!(fe["requests_total"], 10);
    assert_eq!(fe["sessions_total"], 10);
    assert_eq!(fe["responses"]["2xx"], 10);

    // DRAIN s1 and weight 3 on s2, through the API.
    let (st, _, body) = call(admin, "PUT", "/api/backends/b/servers/s1", None, r#"{"state": "drain"}"#).await;
    assert_eq!(st, StatusCode::OK, "{body:?}");
    assert_eq!(json(&body)["status"], "DRAIN");
    let (st, _, body) = call(admin, "PUT", "/api/backends/b/servers/s2", None, r#"{"weight": 3}"#).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(json(&body)["weight"], 3);
    let before = a.hits.load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..10 {
        assert_eq!(get(web, "/").await.0, StatusCode::OK);
    }
    assert_eq!(a.hits.load(std::sync::atomic::Ordering::Relaxed), before, "a drained server gets no new client");
    let (_, _, body) = call(admin, "GET", "/api/backends/b/servers/s1", None, "").await;
    assert_eq!(json(&body)["state"], "drain");

    // Bad input: a clear error each.
    let cases = [
        ("PUT", "/api/backends/b/servers/s1", r#"{"state": "sleep"}"#, StatusCode::BAD_REQUEST, "invalid state"),
        ("PUT", "/api/backends/b/servers/s1", r#"{"weight": 300}"#, StatusCode::BAD_REQUEST, "invalid weight"),
        ("PUT", "/api/backends/b/servers/s1", "{}", StatusCode::BAD_REQUEST, "nothing to change"),
        ("PUT", "/api/backends/b/servers/s1", "drain", StatusCode::BAD_REQUEST, "must be JSON"),
        ("PUT", "/api/backends/b/servers/s9", r#"{"state": "maint"}"#, StatusCode::NOT_FOUND, "no such server: b/s9"),
        ("PUT", "/api/backends/x/servers/s1", r#"{"state": "maint"}"#, StatusCode::NOT_FOUND, "no such backend: x"),
        ("POST", "/api/backends/b/servers/s1", "", StatusCode::METHOD_NOT_ALLOWED, "not allowed"),
        ("DELETE", "/api/backends/b/servers/s1", "", StatusCode::CONFLICT, "only a server in maintenance"),
        ("GET", "/api/nothing", "", StatusCode::NOT_FOUND, "no such endpoint"),
    ];
    for (method, path, body, want, text) in cases {
        let (st, _, got) = call(admin, method, path, None, body).await;
        assert_eq!(st, want, "{method} {path} {body}");
        let msg = json(&got)["error"].as_str().unwrap().to_string();
        assert!(msg.contains(text), "{method} {path}: {msg}");
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_required_as_bearer_or_basic_password() {
    let a = echo().await;
    let path = config_file("token", &config(&[("s1", a.addr)], "token = \"s3cret\""));
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    let (st, h, _) = call(admin, "GET", "/api/backends", None, "").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert!(h["www-authenticate"].to_str().unwrap().starts_with("Basic realm="));
    assert_eq!(call(admin, "GET", "/api/backends", Some("Bearer wrong"), "").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(admin, "GET", "/api/backends", Some("Bearer s3cret"), "").await.0, StatusCode::OK);
    // "admin:s3cret" in base64.
    assert_eq!(call(admin, "GET", "/api/backends", Some("Basic YWRtaW46czNjcmV0"), "").await.0, StatusCode::OK);
    let (st, _, _) = call(admin, "PUT", "/api/backends/b/servers/s1", None, r#"{"state": "maint"}"#).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert_eq!(p.snapshot().backends[0].servers[0].admin(), tollgate_proxy::lb::AdminState::Ready);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_refuses_changes() {
    let a = echo().await;
    let path = config_file("ro", &config(&[("s1", a.addr)], "read_only = true"));
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    assert_eq!(call(admin, "GET", "/api/backends", None, "").await.0, StatusCode::OK);
    let (st, _, body) = call(admin, "PUT", "/api/backends/b/servers/s1", None, r#"{"state": "maint"}"#).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert!(json(&body)["error"].as_str().unwrap().contains("read-only"));
    assert_eq!(call(admin, "POST", "/api/reload", None, "").await.0, StatusCode::FORBIDDEN);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_through_the_api_rereads_the_file() {
    let (a, b) = (echo().await, echo().await);
    let path = config_file("reload", &config(&[("s1", a.addr)], ""));
    let p = start(&path);
    let web = p.addr("web").unwrap();
    let admin = p.admin_addr().unwrap();
    call(admin, "PUT", "/api/backends/b/servers/s1", None, r#"{"weight": 5}"#).await;

    // A broken file is refused with its errors; the running config keeps serving.
    std::fs::write(
        &path,
        config(&[("s1", a.addr)], "").replace("name = \"b\"\n", "name = \"b\"\nbalance = \"fastest\"\n"),
    )
    .unwrap();
    let (st, _, body) = call(admin, "POST", "/api/reload", None, "").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    let msg = json(&body)["error"].as_str().unwrap().to_string();
    assert!(msg.contains("balance") && msg.contains("tollgate.toml:"), "{msg}");
    assert_eq!(get(web, "/").await.0, StatusCode::OK);

    // A good one adds s2; s1 keeps its weight set at run time.
    std::fs::write(&path, config(&[("s1", a.addr), ("s2", b.addr)], "")).unwrap();
    let (st, _, body) = call(admin, "POST", "/api/reload", None, "").await;
    assert_eq!(st, StatusCode::OK, "{body:?}");
    let v = json(&body);
    assert_eq!(v["reloaded"], true);
    assert!(v["summary"].as_str().unwrap().contains("b/s2"), "{v}");
    let (_, _, body) = call(admin, "GET", "/api/backends/b", None, "").await;
    let be = json(&body);
    assert_eq!(be["servers"].as_array().unwrap().len(), 2);
    assert_eq!(be["servers"][0]["weight"], 5);
    let (_, _, body) = call(admin, "GET", "/api/info", None, "").await;
    assert_eq!(json(&body)["reloads"], 1);
    for _ in 0..6 {
        assert_eq!(get(web, "/").await.0, StatusCode::OK);
    }
    assert!(b.hits.load(std::sync::atomic::Ordering::Relaxed) > 0, "the new server takes traffic");
    p.stop();
}

/// One request with exactly `headers` (no Host unless given), on a new connection.
async fn send_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, http::HeaderMap, Bytes) {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    Client::connect(addr).await.send(req.body(Full::new(Bytes::from(body.to_string()))).unwrap()).await
}

fn s1_state(p: &Server) -> (tollgate_proxy::lb::AdminState, u32) {
    let s = &p.snapshot().backends[0].servers[0];
    (s.admin(), s.weight())
}

fn reloads(p: &Server) -> u64 {
    p.control().report().unwrap().info.reloads
}

/// The error message of a JSON error answer.
fn error_of(body: &Bytes) -> String {
    json(body)["error"].as_str().unwrap_or_else(|| panic!("no error in {body:?}")).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_the_listener_does_not_answer_to_is_refused() {
    use tollgate_proxy::lb::AdminState;
    let a = echo().await;
    let path = config_file("host", &config(&[("s1", a.addr)], ""));
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    let port = admin.port();
    let change = r#"{"state": "maint"}"#;
    let json_type = ("content-type", "application/json");

    // DNS rebinding: a name of the attacker's, resolving to 127.0.0.1. Refused
    // for reading and for changing, whatever the port; so are the listener's
    // own names with another port (none means 80).
    for host in [
        format!("evil.example:{port}"),
        "evil.example".into(),
        format!("127.0.0.2:{port}"),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        "127.0.0.1".into(),
        "localhost".into(),
    ] {
        let (st, _, body) = send_raw(admin, "GET", "/api/backends", &[("host", &host)], "").await;
        assert_eq!(st, StatusCode::MISDIRECTED_REQUEST, "GET with Host {host}");
        assert!(error_of(&body).contains("admin.allowed_hosts"), "{host}: {body:?}");
        let (st, _, _) = send_raw(admin, "GET", "/", &[("host", &host)], "").await;
        assert_eq!(st, StatusCode::MISDIRECTED_REQUEST, "the stats page with Host {host}");
        let (st, _, _) =
            send_raw(admin, "PUT", "/api/backends/b/servers/s1", &[("host", &host), json_type], change).await;
        assert_eq!(st, StatusCode::MISDIRECTED_REQUEST, "PUT with Host {host}");
        let (st, _, _) = send_raw(admin, "POST", "/api/reload", &[("host", &host), json_type], "").await;
        assert_eq!(st, StatusCode::MISDIRECTED_REQUEST, "POST with Host {host}");
    }
    assert_eq!(s1_state(&p).0, AdminState::Ready, "nothing changed");
    assert_eq!(reloads(&p), 0, "nothing reloaded");
    // An absolute-form target names the host instead of the Host header.
    let target = format!("http://evil.example:{port}/api/backends");
    let (st, _, _) = send_raw(admin, "GET", &target, &[("host", &admin.to_string())], "").await;
    assert_eq!(st, StatusCode::MISDIRECTED_REQUEST);

    // HTTP/1.1 without Host, or with two, is a bad request (RFC 9112, 3.2).
    let reply = raw(admin, b"GET /api/info HTTP/1.1\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 400, "{reply}");
    let two = format!("GET /api/info HTTP/1.1\r\nHost: {admin}\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    assert_eq!(status_of(&raw(admin, two.as_bytes(), Duration::from_secs(5)).await), 400);

    // The bind address, and localhost and [::1] on a loopback bind, with the
    // listener's port, are accepted.
    for host in [admin.to_string(), format!("localhost:{port}"), format!("LocalHost.:{port}"), format!("[::1]:{port}")]
    {
        let (st, _, body) = send_raw(admin, "GET", "/api/info", &[("host", &host)], "").await;
        assert_eq!(st, StatusCode::OK, "Host {host}: {body:?}");
    }
    let host = format!("localhost:{port}");
    let (st, _, body) =
        send_raw(admin, "PUT", "/api/backends/b/servers/s1", &[("host", &host), json_type], change).await;
    assert_eq!(st, StatusCode::OK, "{body:?}");
    assert_eq!(s1_state(&p).0, AdminState::Maint);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_entries_are_accepted() {
    let a = echo().await;
    let toml = config(&[("s1", a.addr)], "allowed_hosts = [\"stats.example.com\", \"203.0.113.9\"]");
    let path = config_file("allowed", &toml);
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    for host in ["stats.example.com", "Stats.Example.COM:8404", "stats.example.com.", "203.0.113.9:80"] {
        let (st, _, body) = send_raw(admin, "GET", "/api/info", &[("host", host)], "").await;
        assert_eq!(st, StatusCode::OK, "Host {host}: {body:?}");
    }
    for host in ["other.example.com", "example.com", "x.stats.example.com", "203.0.113.10"] {
        let (st, _, _) = send_raw(admin, "GET", "/api/info", &[("host", host)], "").await;
        assert_eq!(st, StatusCode::MISDIRECTED_REQUEST, "Host {host}");
    }
    // Bound to 0.0.0.0 the listener also takes any IP literal (a unit test in
    // admin/http.rs: a test listens on loopback only).
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_encoded_changes_without_the_token_are_refused() {
    use tollgate_proxy::lb::AdminState;
    let a = echo().await;
    let path = config_file("csrf", &config(&[("s1", a.addr)], ""));
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    let host = admin.to_string();
    let h = host.as_str();

    // What a cross-site HTML form can send: POST with a form or text/plain
    // body. Refused with 415 and a JSON error; nothing reloads.
    for ct in ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"] {
        let (st, hd, body) = send_raw(admin, "POST", "/api/reload", &[("host", h), ("content-type", ct)], "a=b").await;
        assert_eq!(st, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}");
        assert_eq!(hd["content-type"], "application/json");
        assert!(error_of(&body).contains("application/json"), "{body:?}");
    }
    let (st, _, _) = send_raw(admin, "POST", "/api/reload", &[("host", h)], "").await;
    assert_eq!(st, StatusCode::UNSUPPORTED_MEDIA_TYPE, "no content type at all");
    let (st, _, _) = send_raw(
        admin,
        "PUT",
        "/api/backends/b/servers/s1",
        &[("host", h), ("content-type", "text/plain")],
        r#"{"state": "maint"}"#,
    )
    .await;
    assert_eq!(st, StatusCode::UNSUPPORTED_MEDIA_TYPE, "a JSON body sent as text/plain");
    let (st, _, _) = send_raw(admin, "PATCH", "/api/backends/b/servers/s1", &[("host", h)], r#"{"weight": 9}"#).await;
    assert_eq!(st, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(reloads(&p), 0, "no reload happened");
    assert_eq!(s1_state(&p), (AdminState::Ready, 1), "the server is unchanged");

    // JSON is accepted (with parameters, any case).
    let ct = ("content-type", "Application/JSON; charset=utf-8");
    let (st, _, body) = send_raw(admin, "POST", "/api/reload", &[("host", h), ct], "").await;
    assert_eq!(st, StatusCode::OK, "{body:?}");
    assert_eq!(reloads(&p), 1);
    let (st, _, body) =
        send_raw(admin, "PATCH", "/api/backends/b/servers/s1", &[("host", h), ct], r#"{"weight": 9}"#).await;
    assert_eq!(st, StatusCode::OK, "{body:?}");
    assert_eq!(s1_state(&p), (AdminState::Ready, 9));
    p.stop();

    // With a token: the bearer token is enough (a browser never adds it by
    // itself), basic auth is not (a browser resends it on a cross-site form
    // post), so basic auth needs JSON too.
    let path = config_file("csrf-token", &config(&[("s1", a.addr)], "token = \"s3cret\""));
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    let host = admin.to_string();
    let h = host.as_str();
    let form = ("content-type", "application/x-www-form-urlencoded");
    let basic = ("authorization", "Basic YWRtaW46czNjcmV0");
    let (st, _, _) = send_raw(admin, "POST", "/api/reload", &[("host", h), form], "a=b").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "no token at all");
    let (st, _, _) = send_raw(admin, "POST", "/api/reload", &[("host", h), form, basic], "a=b").await;
    assert_eq!(st, StatusCode::UNSUPPORTED_MEDIA_TYPE, "basic auth on a form post");
    assert_eq!(reloads(&p), 0);
    let (st, _, _) =
        send_raw(admin, "POST", "/api/reload", &[("host", h), basic, ("content-type", "application/json")], "").await;
    assert_eq!(st, StatusCode::OK);
    let (st, _, body) =
        send_raw(admin, "POST", "/api/reload", &[("host", h), ("authorization", "Bearer s3cret")], "").await;
    assert_eq!(st, StatusCode::OK, "bearer, no content type: {body:?}");
    assert_eq!(reloads(&p), 2);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_origins_are_refused_and_preflights_get_no_cors() {
    use tollgate_proxy::lb::AdminState;
    let a = echo().await;
    let path = config_file("origin", &config(&[("s1", a.addr)], ""));
    let p = start(&path);
    let admin = p.admin_addr().unwrap();
    let host = admin.to_string();
    let h = host.as_str();
    let put = |headers: Vec<(&'static str, String)>| {
        let host = host.clone();
        async move {
            let mut all: Vec<(&str, &str)> = vec![("host", host.as_str()), ("content-type", "application/json")];
            all.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
            send_raw(admin, "PUT", "/api/backends/b/servers/s1", &all, r#"{"state": "drain"}"#).await
        }
    };
    let port = admin.port();
    for origin in [
        "http://evil.example".to_string(),
        format!("http://evil.example:{port}"),
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        "http://127.0.0.1".into(),
        "null".into(),
    ] {
        let (st, _, body) = put(vec![("origin", origin.clone())]).await;
        assert_eq!(st, StatusCode::FORBIDDEN, "Origin {origin}");
        assert!(error_of(&body).contains("Origin"), "{body:?}");
    }
    let (st, _, body) = put(vec![("sec-fetch-site", "cross-site".into())]).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert!(error_of(&body).contains("cross-site"), "{body:?}");
    assert_eq!(s1_state(&p).0, AdminState::Ready, "nothing changed");
    // A GET from another site is still answered (reads change nothing; the
    // browser keeps the answer from the other site's script, as no CORS header allows it).
    let (st, hd, _) = send_raw(admin, "GET", "/api/info", &[("host", h), ("origin", "http://evil.example")], "").await;
    assert_eq!(st, StatusCode::OK);
    assert!(hd.get("access-control-allow-origin").is_none());

    // The page's own origin, as a browser sends it with a same-origin fetch.
    let (st, _, body) =
        put(vec![("origin", format!("http://{admin}")), ("sec-fetch-site", "same-origin".into())]).await;
    assert_eq!(st, StatusCode::OK, "{body:?}");
    assert_eq!(s1_state(&p).0, AdminState::Drain);

    // A CORS preflight is never granted.
    let preflight = [
        ("host", h),
        ("origin", "http://evil.example"),
        ("access-control-request-method", "PUT"),
        ("access-control-request-headers", "content-type"),
    ];
    let (st, hd, _) = send_raw(admin, "OPTIONS", "/api/backends/b/servers/s1", &preflight, "").await;
    assert!(!st.is_success(), "{st}");
    assert!(hd.keys().all(|k| !k.as_str().starts_with("access-control-")), "{hd:?}");
    p.stop();
}
