//! Security issue 33 G: a host rule matches a Host (or `:authority`) with a
//! trailing dot. Requests are written raw.

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
