//! Traffic control (issue 30, 1): `[[table]]`s of counters tracked by a
//! frontend, rules that act on them (a rate limit's 429 with Retry-After, a
//! tarpit, a silent drop), connection rules (a per-client connection limit),
//! the tables in the admin API and on the command socket, a table at its
//! size bound under 10,000 distinct keys, and a table kept across a reload.

use crate::h2::H2Client;
use crate::harness::*;
use http::{Request, StatusCode};
use http_body_util::Full;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

const WAIT: Duration = Duration::from_secs(10);

fn socket_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tg-traffic-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tg.sock")
}

async fn cmd(path: &Path, line: &str) -> String {
    let mut s = UnixStream::connect(path).await.unwrap();
    s.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(WAIT, s.read_to_string(&mut out)).await.expect("an answer").unwrap();
    out
}

/// A frontend `web` over `origin` with `tables`, `track` and `rules` (TOML
/// lines inside the frontend), an admin listener and a command socket.
fn config(origin: SocketAddr, sock: &Path, tables: &str, frontend: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[admin]\nbind = \"127.0.0.1:0\"\nsocket = \"{}\"\n{tables}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nh2c = true\ndefault_backend = \"app\"\n{frontend}\n\
         [[backend]]\nname = \"app\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{origin}\"\n",
        sock.display()
    )
}

const PER_IP: &str = "[[table]]\nname = \"per_ip\"\nkey = \"src\"\nsize = 1000\nexpire = \"60s\"\nperiod = \"10s\"\n";

/// More than 5 requests in 10 s from one address: 429 with `Retry-After:
/// 10`, over HTTP/1.1 and HTTP/2; the table shows the client in the admin
/// API and on the socket; `clear table` lets it in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_answers_429_with_retry_after_and_shows_in_the_table() {
    let origin = echo().await;
    let sock = socket_path("rate");
    let frontend = "track = [\"per_ip\"]\n  [[frontend.rule]]\n  \
                    when = { counter = { table = \"per_ip\", name = \"http_req_rate\", above = 5 } }\n  deny = 429\n";
    let p = proxy(&config(origin.addr, &sock, PER_IP, frontend));
    let web = p.addr("web").unwrap();
    let mut c = Client::connect(web).await;
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let (s, h, _) = c.get("/").await;
        if s == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(h.get("retry-after").map(|v| v.to_str().unwrap()), Some("10"));
        }
        statuses.push(s.as_u16());
    }
    assert_eq!(statuses, vec![200, 200, 200, 200, 200, 429, 429, 429]);
    // HTTP/2 from the same address counts in the same entry.
    let mut h2 = H2Client::plain(web).await;
    let (s, h, _) = h2.send(Request::get(format!("http://{web}/")).body(()).unwrap(), None).await;
    assert_eq!((s, h.get("retry-after").map(|v| v.to_str().unwrap())), (StatusCode::TOO_MANY_REQUESTS, Some("10")));

    // The admin API: the table, and the client's entry with its counters.
    let admin = p.admin_addr().unwrap();
    let (s, _, body) = admin_get(admin, "/api/tables").await;
    let v = json(&body);
    assert_eq!((s, v[0]["name"].as_str(), v[0]["type"].as_str()), (StatusCode::OK, Some("per_ip"), Some("ip")));
    assert_eq!((v[0]["used"].as_u64(), v[0]["size"].as_u64()), (Some(1), Some(1000)));
    let (_, _, body) = admin_get(admin, "/api/tables/per_ip").await;
    let v = json(&body);
    let e = &v["entries"][0];
    assert_eq!(e["key"].as_str(), Some("127.0.0.1"));
    let counter = |name: &str| {
        e["counters"].as_array().unwrap().iter().find(|c| c[0] == name).and_then(|c| c[1].as_u64()).unwrap()
    };
    assert_eq!((counter("http_req_cnt"), counter("http_err_cnt")), (9, 4), "{e}");
    assert_eq!(counter("conn_cnt"), 2, "two connections");
    assert_eq!(admin_get(admin, "/api/tables/nope").await.0, StatusCode::NOT_FOUND);

    // The command socket: HAProxy's format.
    let out = cmd(&sock, "show table").await;
    assert_eq!(out, "# table: per_ip, type: ip, size:1000, used:1\n\n\n");
    let out = cmd(&sock, "show table per_ip").await;
    assert!(out.contains("key=127.0.0.1 ") && out.contains(" http_req_cnt=9 http_req_rate(10000)=9 "), "{out}");
    // Cleared: the client starts again from zero (the connections it holds
    // keep their entry, so use new ones).
    drop((c, h2));
    // (Their entry is held until the proxy sees the two connections close.)
    let deadline = Instant::now() + WAIT;
    while !cmd(&sock, "show table per_ip").await.contains(" conn_cur=0 ") {
        assert!(Instant::now() < deadline, "the connections never closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(cmd(&sock, "clear table per_ip").await, "\n");
    assert_eq!(get(web, "/").await.0, StatusCode::OK);
}

/// A per-client connection limit: a third connection from one address is
/// closed at once while two are open; when one closes, a new one is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_rule_limits_connections_per_client() {
    let origin = echo().await;
    let sock = socket_path("conn");
    let frontend = "track = [\"per_ip\"]\n  [[frontend.connection_rule]]\n  \
                    when = { counter = { table = \"per_ip\", name = \"conn_cur\", above = 2 } }\n  reject = true\n";
    let p = proxy(&config(origin.addr, &sock, PER_IP, frontend));
    let web = p.addr("web").unwrap();
    let mut a = Client::connect(web).await;
    let mut b = Client::connect(web).await;
    assert_eq!(a.get("/").await.0, StatusCode::OK);
    assert_eq!(b.get("/").await.0, StatusCode::OK);
    // The third: closed without a response.
    let mut third = TcpStream::connect(web).await.unwrap();
    let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(WAIT, third.read(&mut buf)).await.expect("closed in time");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    let report = p.control().report().unwrap();
    assert_eq!(report.frontends[0].denied_connections, 1);
    // One of the two goes: a new connection is served (bounded wait for the
    // proxy to see the close).
    drop(a);
    let deadline = Instant::now() + WAIT;
    loop {
        let out = cmd(&sock, "show table per_ip").await;
        if out.contains(" conn_cur=1 ") {
            break;
        }
        assert!(Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(get(web, "/").await.0, StatusCode::OK);
    assert_eq!(b.get("/").await.0, StatusCode::OK);
}

/// `tarpit` holds the request, then answers its status and closes;
/// `silent_drop` closes with no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tarpit_holds_and_silent_drop_says_nothing() {
    let origin = echo().await;
    let sock = socket_path("tarpit");
    let frontend = "  [[frontend.rule]]\n  when = { path_prefix = \"/tar\" }\n  tarpit = { delay = \"300ms\", status = 429 }\n\
                    \n  [[frontend.rule]]\n  when = { path_prefix = \"/drop\" }\n  silent_drop = true\n";
    let p = proxy(&config(origin.addr, &sock, "", frontend));
    let web = p.addr("web").unwrap();
    let t0 = Instant::now();
    let reply = raw(web, b"GET /tar HTTP/1.1\r\nHost: a\r\n\r\n", WAIT).await;
    assert!(t0.elapsed() >= Duration::from_millis(300), "{:?}", t0.elapsed());
    assert!(reply.starts_with("HTTP/1.1 429 ") && reply.contains("connection: close\r\n"), "{reply}");
    let reply = raw(web, b"GET /drop HTTP/1.1\r\nHost: a\r\n\r\n", WAIT).await;
    assert_eq!(reply, "", "no byte comes back");
    // Over HTTP/2, the whole connection goes.
    let h2 = H2Client::plain(web).await;
    let mut send = h2.sender().ready().await.expect("connection ready");
    let (resp, _) = send.send_request(Request::get(format!("http://{web}/drop")).body(()).unwrap(), true).unwrap();
    let got = tokio::time::timeout(WAIT, resp).await.expect("an end in time");
    assert!(got.is_err(), "{got:?}");
    let report = p.control().report().unwrap();
    assert_eq!(report.frontends[0].denied, 3);
    assert_eq!(get(web, "/fine").await.0, StatusCode::OK);
}

/// 10,000 distinct API keys through a table of 1,000: it stays at its size,
/// the proxy keeps serving, and the key over its limit is refused while a
/// new one is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_at_its_size_bound_under_ten_thousand_keys() {
    let origin = echo().await;
    let sock = socket_path("keys");
    let tables =
        "[[table]]\nname = \"per_key\"\nkey = \"header:x-api-key\"\nsize = 1000\nperiod = \"60s\"\nexpire = \"120s\"\n";
    let frontend = "track = [\"per_key\"]\n  [[frontend.rule]]\n  \
                    when = { counter = { table = \"per_key\", name = \"http_req_cnt\", above = 3 } }\n  deny = 429\n";
    let p = proxy(&config(origin.addr, &sock, tables, frontend));
    let web = p.addr("web").unwrap();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(Client::connect(web).await);
    }
    let req =
        |key: String| Request::get("/").header("host", "a").header("x-api-key", key).body(Full::default()).unwrap();
    let mut tasks = Vec::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for n in (i..10_000).step_by(4) {
                let (s, _, _) = c.send(req(format!("key-{n}"))).await;
                assert_eq!(s, StatusCode::OK, "key-{n}");
            }
            c
        }));
    }
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.unwrap());
    }
    let (_, _, body) = admin_get(p.admin_addr().unwrap(), "/api/tables").await;
    let used = json(&body)[0]["used"].as_u64().unwrap();
    assert!((900..=1000).contains(&used), "{used}");
    // A key sent 4 times: the 4th is over the limit.
    let c = &mut clients[0];
    for n in 1..=4 {
        let want = if n <= 3 { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
        assert_eq!(c.send(req("heavy".into())).await.0, want, "request {n}");
    }
    assert_eq!(c.send(req("light".into())).await.0, StatusCode::OK);
    // Without the header: not tracked, not limited.
    for _ in 0..5 {
        assert_eq!(c.get("/").await.0, StatusCode::OK);
    }
}

/// A reload that keeps the table (same name and policy) keeps its counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_a_table_that_did_not_change() {
    let origin = echo().await;
    let sock = socket_path("reload");
    let frontend = "track = [\"per_ip\"]\n  [[frontend.rule]]\n  \
                    when = { counter = { table = \"per_ip\", name = \"http_req_cnt\", above = 3 } }\n  deny = 429\n";
    let toml = config(origin.addr, &sock, PER_IP, frontend);
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    for _ in 0..3 {
        assert_eq!(get(web, "/").await.0, StatusCode::OK);
    }
    let same = toml.replace("name = \"s1\"", "name = \"s1\"\n  weight = 2");
    let cfg = tollgate_config::parse(&same, Path::new("test.toml")).unwrap();
    p.reload(cfg).expect("reloaded");
    assert_eq!(get(p.addr("web").unwrap(), "/").await.0, StatusCode::TOO_MANY_REQUESTS, "the 4th, after the reload");
    // A changed policy starts the table again.
    let changed = same.replace("size = 1000", "size = 2000");
    p.reload(tollgate_config::parse(&changed, Path::new("test.toml")).unwrap()).expect("reloaded");
    assert_eq!(get(p.addr("web").unwrap(), "/").await.0, StatusCode::OK);
}
