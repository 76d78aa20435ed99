//! Routing rules: host, path, method, header and source conditions; backend,
//! redirect, deny and header edits.

use crate::harness::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_route_redirect_deny_and_edit_headers() {
    let app = echo().await;
    let tus = echo().await;
    let toml = format!(
        r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:0"]
default_backend = "app"
  [[frontend.rule]]
  when = {{ path_prefix = "/admin", not = {{ src = "10.0.0.0/8" }} }}
  deny = {{ status = 403, body = "no admin for you" }}
  [[frontend.rule]]
  when = {{ path = "/old" }}
  redirect = {{ prefix = "https://new.example.com", code = 301 }}
  [[frontend.rule]]
  set_request_headers = {{ "X-Env" = "test" }}
  delete_request_headers = ["X-Drop"]
  set_response_headers = {{ "X-Served-By" = "tollgate" }}
  delete_response_headers = ["X-Origin"]
  [[frontend.rule]]
  when = {{ any = [{{ host = "*.tus.example.com" }}, {{ header = {{ name = "X-Tus", equals = "1" }} }}], method = ["GET", "POST"] }}
  backend = "tus"

[[backend]]
name = "app"
  [[backend.server]]
  name = "a1"
  addr = "{}"
[[backend]]
name = "tus"
  [[backend.server]]
  name = "t1"
  addr = "{}"
"#,
        app.addr, tus.addr
    );
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();

    let reply =
        raw(addr, b"GET /admin/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 403);
    assert!(reply.ends_with("no admin for you"), "{reply}");

    let reply =
        raw(addr, b"GET /old?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 301);
    assert!(reply.to_ascii_lowercase().contains("location: https://new.example.com/old?x=1\r\n"), "{reply}");

    let mut c = Client::connect(addr).await;
    let req = http::Request::get("/up")
        .header("host", "files.tus.example.com")
        .header("x-drop", "1")
        .body(Default::default())
        .unwrap();
    let (status, headers, body) = c.send(req).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-served-by"], "tollgate");
    assert!(headers.get("x-origin").is_none());
    let v = json(&body);
    assert_eq!(echoed_header(&v, "x-env").as_deref(), Some("test"));
    assert_eq!(echoed_header(&v, "x-drop"), None);
    assert_eq!(tus.hits.load(std::sync::atomic::Ordering::Relaxed), 1, "host wildcard routed to tus");

    let req = http::Request::get("/").header("host", "other").header("x-tus", "1").body(Default::default()).unwrap();
    c.send(req).await;
    assert_eq!(tus.hits.load(std::sync::atomic::Ordering::Relaxed), 2, "header condition routed to tus");
    let req = http::Request::delete("/").header("host", "other").header("x-tus", "1").body(Default::default()).unwrap();
    c.send(req).await;
    assert_eq!(tus.hits.load(std::sync::atomic::Ordering::Relaxed), 2, "DELETE is not in the method list");
    assert_eq!(app.hits.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn example_configs_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // tls.toml, tus.toml and grpc.toml need certificates in examples/certs/,
        // which the repository does not hold: tollgate-config's
        // `example_tls_config_loads`, auth.rs's
        // `the_tus_example_offloads_tls_and_asks_for_a_password` and
        // backend_tls.rs's `the_grpc_example_routes_calls_to_h2c_and_tls_h2_servers`
        // make them and load those.
        let needs_certs = ["tls.toml", "tus.toml", "grpc.toml"].iter().any(|f| path.ends_with(f));
        if path.extension().is_some_and(|e| e == "toml") && !needs_certs {
            tollgate_config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 1, "no example configs in {}", dir.display());
}
