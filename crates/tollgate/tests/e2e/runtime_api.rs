//! The wider runtime API (docs/admin.md): servers added, moved and deleted
//! without a reload, their sessions shut down, on the command socket in
//! HAProxy's words and on the JSON API; a TCP command socket at a level.

use crate::harness::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

fn socket_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tg-rtapi-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tg.sock")
}

/// One line, then everything until the socket closes.
async fn say(mut s: impl AsyncRead + AsyncWrite + Unpin, line: &str) -> String {
    s.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await.expect("an answer").unwrap();
    out
}

async fn cmd(path: &Path, line: &str) -> String {
    say(UnixStream::connect(path).await.unwrap(), line).await
}

/// The `status` column of `show stat` for b/`server`, if it has a row.
async fn status(path: &Path, server: &str) -> Option<String> {
    let out = cmd(path, "show stat").await;
    let header: Vec<&str> = out.lines().next()?.trim_start_matches("# ").split(',').collect();
    let col = header.iter().position(|h| *h == "status")?;
    out.lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f[0] == "b" && f[1] == server)
        .map(|f| f[col].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_added_moved_and_deleted_without_a_reload() {
    let (o1, o2, o3) = (echo().await, echo().await, echo().await);
    let sock = socket_path("add");
    let toml = format!(
        "[global]\nworkers = 1\n[admin]\nsocket = \"{}\"\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n",
        sock.display(),
        o1.addr
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let spread = async |n: usize| {
        for _ in 0..n {
            assert_eq!(get(web, "/").await.0, http::StatusCode::OK);
        }
    };

    // Added in maintenance, as HAProxy does: no traffic until enabled.
    assert_eq!(cmd(&sock, &format!("add server b/s2 {} weight 1", o2.addr)).await, "New server registered.\n\n");
    assert_eq!(status(&sock, "s2").await.as_deref(), Some("MAINT"));
    spread(4).await;
    assert_eq!(o2.hits.load(Ordering::Relaxed), 0);
    assert_eq!(cmd(&sock, "enable server b/s2").await, "\n");
    spread(4).await;
    assert_eq!(o2.hits.load(Ordering::Relaxed), 2, "roundrobin over s1 and s2");

    // Moved: the new address takes its requests; state and weight kept.
    let port = o3.addr.port();
    assert_eq!(
        cmd(&sock, &format!("set server b/s2 addr 127.0.0.1 port {port}")).await,
        format!(
            "IP changed from '127.0.0.1' to '127.0.0.1', port changed from '{}' to '{port}' by 'stats socket command'\n\n",
            o2.addr.port()
        )
    );
    spread(4).await;
    assert_eq!((o2.hits.load(Ordering::Relaxed), o3.hits.load(Ordering::Relaxed)), (2, 2));
    assert_eq!(p.snapshot().backend("b").unwrap().server("s2").unwrap().addr(), o3.addr);

    // Deleted: only in maintenance.
    assert_eq!(cmd(&sock, "del server b/s2").await, "Only servers in maintenance mode can be deleted.\n\n");
    assert_eq!(cmd(&sock, "disable server b/s2").await, "\n");
    assert_eq!(cmd(&sock, "del server b/s2").await, "Server deleted.\n\n");
    assert_eq!(status(&sock, "s2").await, None);
    let before = o1.hits.load(Ordering::Relaxed);
    spread(3).await;
    assert_eq!(o1.hits.load(Ordering::Relaxed), before + 3);
    assert_eq!(p.control().report().unwrap().info.reloads, 0, "no reload was counted");
    p.stop();
}

/// Reads from `s` until it closes (or 5 s pass): whether it closed.
async fn closes(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            _ => {}
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sessions_ends_a_slow_response_and_a_tcp_session() {
    // A response that starts and never ends; a TCP server that never speaks.
    let mut slow = raw_origin_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nstart").await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let sock = socket_path("shut");
    let toml = format!(
        "[global]\nworkers = 1\n[admin]\nsocket = \"{}\"\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[frontend]]\nname = \"db\"\nmode = \"tcp\"\nbind = [\"127.0.0.3:0\"]\ndefault_backend = \"t\"\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n\
         [[backend]]\nname = \"t\"\nmode = \"tcp\"\n  [[backend.server]]\n  name = \"t1\"\n  addr = \"{silent_addr}\"\n",
        sock.display(),
        slow.addr
    );
    let p = proxy(&toml);
    let mut client = TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    client.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut head = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut head)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"), "the response started");
    let mut tcp = TcpStream::connect(p.addr("db").unwrap()).await.unwrap();
    let (_held, _) = silent.accept().await.unwrap();
    let b = p.snapshot().backend("b").unwrap().clone();
    assert_eq!(b.server("s1").unwrap().inflight(), 1);

    assert_eq!(cmd(&sock, "shutdown sessions server b/s1").await, "\n");
    assert!(closes(&mut client).await, "the client's response is cut");
    assert!(
        tokio::time::timeout(Duration::from_secs(5), slow.closed.recv()).await.is_ok(),
        "and the server's connection"
    );
    assert_eq!(b.server("s1").unwrap().inflight(), 0);
    assert!(!closes_within(&mut tcp, Duration::from_millis(200)).await, "the other server's session goes on");
    assert_eq!(cmd(&sock, "shutdown sessions server t/t1").await, "\n");
    assert!(closes(&mut tcp).await, "the tcp session is cut");
    assert_eq!(cmd(&sock, "shutdown sessions server b/nope").await, "No such server.\n\n");
    p.stop();
}

async fn closes_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(tokio::time::timeout(limit, s.read(&mut buf)).await, Ok(Ok(0)) | Ok(Err(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_socket_at_operator_level_reads_but_cannot_change() {
    let o = echo().await;
    let sock = socket_path("levels");
    let toml = format!(
        "[global]\nworkers = 1\n[admin]\nsocket = [{{ addr = \"127.0.0.1:0\" }}, {{ path = \"{}\", mode = 0o660, level = \"user\" }}]\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\nstick = {{ on = \"source\" }}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n",
        sock.display(),
        o.addr
    );
    let p = proxy(&toml);
    let tcp: SocketAddr = p.socket_addrs()[0];
    let at_tcp = async |line: &str| say(TcpStream::connect(tcp).await.unwrap(), line).await;
    assert!(at_tcp("show stat").await.starts_with("# pxname,"));
    assert_eq!(at_tcp("set server b/s1 state drain").await, "Permission denied\n\n");
    assert_eq!(at_tcp("show table").await, "# table: b, type: ip, size:100000, used:0\n\n\n");
    assert_eq!(cmd(&sock, "show table").await, "Permission denied\n\n", "level user");
    assert!(cmd(&sock, "show info").await.contains("Name: tollgate"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o660);
    assert_eq!(p.snapshot().backend("b").unwrap().server("s1").unwrap().admin(), tollgate_proxy::lb::AdminState::Ready);
    p.stop();
}

async fn api(addr: SocketAddr, method: &str, path: &str, body: &str) -> (http::StatusCode, serde_json::Value) {
    let req = if method == "GET" { admin_request(method, addr, path) } else { admin_change(method, addr, path) };
    let body = http_body_util::Full::new(bytes::Bytes::from(body.to_string()));
    let (status, _, b) = Client::connect(addr).await.send(req.body(body).unwrap()).await;
    (status, serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_api_adds_moves_deletes_and_shuts_down() {
    use http::StatusCode;
    let (o1, o2, o3) = (echo().await, echo().await, echo().await);
    let toml = format!(
        "[global]\nworkers = 1\n[admin]\nbind = \"127.0.0.1:0\"\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\nstick = {{ on = \"source\" }}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n",
        o1.addr
    );
    let p = proxy(&toml);
    let (admin, web) = (p.admin_addr().unwrap(), p.addr("web").unwrap());
    let add = format!(r#"{{"name": "s2", "addr": "{}", "state": "ready", "weight": 3}}"#, o2.addr);
    let (status, s2) = api(admin, "POST", "/api/backends/b/servers", &add).await;
    assert_eq!(status, StatusCode::CREATED, "{s2}");
    assert_eq!((&s2["name"], &s2["state"], &s2["weight"]), (&"s2".into(), &"ready".into(), &3.into()));
    assert_eq!(api(admin, "POST", "/api/backends/b/servers", &add).await.0, StatusCode::CONFLICT);
    let (status, e) = api(admin, "POST", "/api/backends/b/servers", r#"{"name": "s3", "addr": "app:80"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(e["error"].as_str().unwrap().contains("is not an IP:port"), "{e}");
    assert_eq!(api(admin, "POST", "/api/backends/nope/servers", &add).await.0, StatusCode::NOT_FOUND);

    // Its stick table entry: the client sent there.
    assert_eq!(get(web, "/").await.0, StatusCode::OK);
    let (status, table) = api(admin, "GET", "/api/backends/b/table", "").await;
    assert_eq!(status, StatusCode::OK, "{table}");
    assert_eq!(table["entries"][0]["key"], "127.0.0.1");
    assert!(table["entries"][0]["expire_ms"].as_u64().unwrap() > 0);

    let moved = format!(r#"{{"addr": "{}"}}"#, o3.addr);
    let (status, s2) = api(admin, "PATCH", "/api/backends/b/servers/s2", &moved).await;
    assert_eq!((status, &s2["addr"]), (StatusCode::OK, &o3.addr.to_string().into()));
    assert_eq!(s2["weight"], 3, "the weight kept");

    assert_eq!(api(admin, "DELETE", "/api/backends/b/servers/s2", "").await.0, StatusCode::CONFLICT);
    assert_eq!(api(admin, "PATCH", "/api/backends/b/servers/s2", r#"{"state": "maint"}"#).await.0, StatusCode::OK);
    let (status, gone) = api(admin, "DELETE", "/api/backends/b/servers/s2", "").await;
    assert_eq!((status, &gone["deleted"]), (StatusCode::OK, &"b/s2".into()));
    assert_eq!(api(admin, "GET", "/api/backends/b/servers/s2", "").await.0, StatusCode::NOT_FOUND);

    let (status, shut) = api(admin, "POST", "/api/backends/b/servers/s1/shutdown-sessions", "").await;
    assert_eq!((status, &shut["shut_down"]), (StatusCode::OK, &0.into()));
    assert_eq!(api(admin, "PUT", "/api/backends/b/servers", "{}").await.0, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get(web, "/").await.0, StatusCode::OK, "still serving");
    p.stop();
}

/// Requests still waiting for the server's response head end too, over
/// HTTP/1.1 (the connection closed, no response) and HTTP/2 (the stream reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sessions_ends_requests_waiting_for_a_head() {
    // Reads requests, never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            conns.push(s);
        }
    });
    let sock = socket_path("head");
    let toml = format!(
        "[global]\nworkers = 1\n[admin]\nsocket = \"{}\"\n\
         [[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", h2c = true }}]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\ntimeout = {{ server = \"60s\" }}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{silent_addr}\"\n",
        sock.display()
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let mut h1 = TcpStream::connect(web).await.unwrap();
    h1.write_all(b"GET /wait HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let h2c = crate::h2::H2Client::plain(web).await;
    let mut sender = h2c.sender().ready().await.unwrap();
    let (resp, _) = sender.send_request(http::Request::get("http://a/wait").body(()).unwrap(), true).unwrap();
    let s1 = p.snapshot().backend("b").unwrap().server("s1").unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(5);
    while s1.inflight() < 2 {
        assert!(Instant::now() < deadline, "both requests reach the server");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    assert_eq!(cmd(&sock, "shutdown sessions server b/s1").await, "\n");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), h1.read_to_end(&mut got)).await;
    assert!(read.is_ok() && got.is_empty(), "closed without a response: {:?}", String::from_utf8_lossy(&got));
    let h2 = tokio::time::timeout(Duration::from_secs(5), resp).await.expect("the stream ends");
    assert!(h2.is_err(), "the stream is reset: {h2:?}");
    assert_eq!(s1.inflight(), 0);
    held.abort();
    p.stop();
}
