//! The admin listener's JSON API (docs/admin.md): listing, setting a server's
//! state and weight, reloading, the token, read-only mode, and the counters the
//! data path keeps.

use crate::harness::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use std::net::SocketAddr;
use std::path::PathBuf;
use tollgate_proxy::Server;

/// A config file of its own for a test that reloads from disk.
fn config_file(tag: &str, toml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-admin-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn start(path: &std::path::Path) -> Server {
    let cfg = tollgate_config::load(path).unwrap_or_else(|e| panic!("{e}"));
    Server::start(cfg).expect("proxy starts")
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
    let mut req = Request::builder().method(method).uri(path).header("host", "admin");
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
        ("DELETE", "/api/backends/b/servers/s1", "", StatusCode::METHOD_NOT_ALLOWED, "not allowed"),
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
