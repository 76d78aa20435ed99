//! Persistence, replaying the lab: cookie insert/indirect/nocache, prefix and
//! rewrite modes, the stick table, and how DRAIN, MAINT and READY treat bound
//! clients.

use crate::harness::*;
use bytes::Bytes;
use http_body_util::Full;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use tollgate::demo::{self, DemoHandle};
use tollgate_proxy::lb::AdminState;

fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A keep-alive client with a cookie jar (name -> value).
struct Browser {
    conn: Client,
    jar: BTreeMap<String, String>,
}

impl Browser {
    async fn new(addr: SocketAddr) -> Browser {
        Browser { conn: Client::connect(addr).await, jar: BTreeMap::new() }
    }

    /// GET / ; returns the demo's JSON answer and the response headers.
    async fn get(&mut self) -> (serde_json::Value, http::HeaderMap) {
        let mut req = http::Request::get("/").header("host", "lab.local");
        if !self.jar.is_empty() {
            let cookie: Vec<String> = self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
            req = req.header("cookie", cookie.join("; "));
        }
        let (status, headers, body) = self.conn.send(req.body(Full::<Bytes>::default()).unwrap()).await;
        assert_eq!(status, 200);
        for sc in headers.get_all("set-cookie") {
            let pair = sc.to_str().unwrap().split(';').next().unwrap();
            let (k, v) = pair.split_once('=').unwrap();
            self.jar.insert(k.trim().to_string(), v.trim().to_string());
        }
        (json(&body), headers)
    }
}

/// The Set-Cookie value that sets `name`, among all of a response's.
fn set_cookie<'a>(h: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).find(|v| v.starts_with(&format!("{name}=")))
}

async fn lab() -> (DemoHandle, DemoHandle) {
    (demo::spawn(local0(), "s1").await.unwrap(), demo::spawn(local0(), "s2").await.unwrap())
}

fn config(s1: &DemoHandle, s2: &DemoHandle, backend_extra: &str) -> String {
    simple_config("roundrobin", &[("s1", s1.addr(), 1), ("s2", s2.addr(), 1)], backend_extra)
}

const INSERT: &str = "cookie = { name = \"SERVERID\", mode = \"insert\", indirect = true, nocache = true }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_with_cookies_stay_on_their_server_for_1000_requests() {
    let (s1, s2) = lab().await;
    let p = proxy(&config(&s1, &s2, INSERT));
    let addr = p.addr("web").unwrap();
    let mut a = Browser::new(addr).await;
    let mut b = Browser::new(addr).await;
    let (first_a, h) = a.get().await;
    assert_eq!(h["cache-control"], "private", "nocache: the response that sets the cookie is private");
    let (first_b, _) = b.get().await;
    assert_ne!(first_a["tag"], first_b["tag"], "round robin put them on different servers");
    assert_eq!(a.jar["SERVERID"], first_a["tag"].as_str().unwrap());
    for i in 2..=1000u64 {
        for (c, tag) in [(&mut a, &first_a["tag"]), (&mut b, &first_b["tag"])] {
            let (v, h) = c.get().await;
            assert_eq!(&v["tag"], tag, "request {i} left its server");
            assert_eq!(v["sessionViews"], i, "the app's session goes on");
            assert_eq!(set_cookie(&h, "SERVERID"), None, "a valid cookie is not set again");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indirect_hides_the_cookie_from_the_server() {
    let o = echo().await;
    let p = proxy(&simple_config("roundrobin", &[("o", o.addr, 1)], INSERT));
    let mut c = Client::connect(p.addr("web").unwrap()).await;
    let req = http::Request::get("/").header("host", "a").header("cookie", "SERVERID=o; app=1");
    let (_, headers, body) = c.send(req.body(Full::default()).unwrap()).await;
    assert!(headers.get("set-cookie").is_none());
    assert_eq!(echoed_header(&json(&body), "cookie").as_deref(), Some("app=1"));
    let req = http::Request::get("/").header("host", "a").header("cookie", "SERVERID=o");
    let (_, _, body) = c.send(req.body(Full::default()).unwrap()).await;
    assert_eq!(echoed_header(&json(&body), "cookie"), None, "a Cookie field left empty is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_keeps_bound_clients_maint_moves_them_ready_balances_again() {
    let (s1, s2) = lab().await;
    let p = proxy(&config(&s1, &s2, INSERT));
    let addr = p.addr("web").unwrap();
    let snap = p.snapshot();
    let srv = |name: &str| snap.backend("b").unwrap().server(name).unwrap().clone();

    // A client bound to s1.
    let mut bound = Browser::new(addr).await;
    while bound.get().await.0["tag"] != "s1" {
        bound.jar.clear();
    }

    srv("s1").set_admin(AdminState::Drain);
    for _ in 0..50 {
        assert_eq!(bound.get().await.0["tag"], "s1", "DRAIN: a bound client stays");
    }
    for _ in 0..50 {
        let mut fresh = Browser::new(addr).await;
        assert_eq!(fresh.get().await.0["tag"], "s2", "DRAIN: new clients never reach s1");
    }

    srv("s1").set_admin(AdminState::Maint);
    let (v, h) = bound.get().await;
    assert_eq!(v["tag"], "s2", "MAINT: nobody reaches s1, its clients are redispatched");
    assert!(set_cookie(&h, "SERVERID").unwrap().starts_with("SERVERID=s2;"), "and bound to the new server");
    for _ in 0..20 {
        assert_eq!(bound.get().await.0["tag"], "s2");
    }
    assert_eq!(srv("s1").stats.requests.load(std::sync::atomic::Ordering::Relaxed), 51);

    srv("s1").set_admin(AdminState::Ready);
    let mut tags: HashMap<String, usize> = HashMap::new();
    for _ in 0..100 {
        let mut fresh = Browser::new(addr).await;
        *tags.entry(fresh.get().await.0["tag"].as_str().unwrap().to_string()).or_default() += 1;
    }
    assert_eq!((tags["s1"], tags["s2"]), (50, 50), "READY: round robin again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_mode_rides_on_the_apps_session_cookie() {
    let (s1, s2) = lab().await;
    let p = proxy(&config(&s1, &s2, "cookie = { name = \"NODESESSID\", mode = \"prefix\" }"));
    let mut c = Browser::new(p.addr("web").unwrap()).await;
    let (first, _) = c.get().await;
    let tag = first["tag"].as_str().unwrap().to_string();
    let cookie = c.jar["NODESESSID"].clone();
    assert_eq!(cookie, format!("{tag}~{}", first["id"].as_str().unwrap()), "server~session id");
    for i in 2..=20u64 {
        let (v, _) = c.get().await;
        assert_eq!(v["tag"], tag);
        assert_eq!(v["sessionViews"], i, "the app got its own session id back, unprefixed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_mode_replaces_the_apps_cookie_value() {
    let (s1, s2) = lab().await;
    let p = proxy(&config(&s1, &s2, "cookie = { name = \"NODESESSID\", mode = \"rewrite\" }"));
    let mut c = Browser::new(p.addr("web").unwrap()).await;
    let (first, _) = c.get().await;
    let tag = first["tag"].as_str().unwrap();
    assert_eq!(c.jar["NODESESSID"], tag, "the app's value is replaced by the server's cookie");
    for _ in 0..10 {
        assert_eq!(c.get().await.0["tag"], tag);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stick_table_binds_a_source_address_across_server_changes() {
    let (s1, s2) = lab().await;
    let p = proxy(&config(&s1, &s2, "stick = { on = \"source\", expire = \"10m\" }"));
    let addr = p.addr("web").unwrap();
    let first = get(addr, "/").await;
    let tag = json(&first.2)["tag"].as_str().unwrap().to_string();
    for _ in 0..20 {
        assert_eq!(json(&get(addr, "/").await.2)["tag"], tag.as_str(), "new connections, same client address");
    }
    let snap = p.snapshot();
    let server = snap.backend("b").unwrap().server(&tag).unwrap().clone();
    server.set_admin(AdminState::Maint);
    let moved = json(&get(addr, "/").await.2)["tag"].as_str().unwrap().to_string();
    assert_ne!(moved, tag, "MAINT: the client moves");
    server.set_admin(AdminState::Ready);
    for _ in 0..10 {
        assert_eq!(json(&get(addr, "/").await.2)["tag"], moved.as_str(), "and stays where it moved");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dated_cookies_expire() {
    let (s1, s2) = lab().await;
    let p = proxy(&config(&s1, &s2, "cookie = { name = \"SERVERID\", max_idle = \"1h\", max_life = \"1d\" }"));
    let addr = p.addr("web").unwrap();
    let mut c = Browser::new(addr).await;
    let (first, _) = c.get().await;
    let value = c.jar["SERVERID"].clone();
    let parts: Vec<&str> = value.split('|').collect();
    assert_eq!(parts.len(), 3, "{value}");
    assert_eq!(parts[0], first["tag"].as_str().unwrap());
    // The same cookie, last seen two hours ago: ignored, replaced.
    let now: u64 = parts[1].parse().unwrap();
    let stale = format!("{}|{}|{}", parts[0], now - 7200, now - 7200);
    let mut fresh_pick = Browser::new(addr).await;
    fresh_pick.jar.insert("SERVERID".into(), stale);
    let (_, h) = fresh_pick.get().await;
    let set = set_cookie(&h, "SERVERID").expect("a new cookie replaces the stale one");
    assert!(!set.contains(&format!("|{}|", now - 7200)), "{set}");
}
