//! A forward proxy (issue 30, 5): a backend with `forward` sends absolute-form
//! requests to the host they name and opens CONNECT tunnels, over HTTP/1.1
//! and HTTP/2, within its lists: private networks refused by default, ports
//! and names not allowed refused, each with 403 and a log line; proxy
//! authentication (407); a request that loops back through the proxy (508);
//! CONNECT elsewhere still 405.

use crate::h2::H2Client;
use crate::harness::*;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(10);

/// A TCP server that sends back what it reads, on each connection; it counts them.
struct TcpEcho {
    addr: SocketAddr,
    connections: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tcp_echo() -> TcpEcho {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = connections.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { continue };
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    TcpEcho { addr, connections, task }
}

/// A frontend `px` (HTTP/1.1 and h2c) whose default backend `egress` is a
/// forward proxy with `forward` (the inside of its table), and `extra` TOML.
fn config(forward: &str, extra: &str, log: Option<&std::path::Path>) -> String {
    let log = log.map(|l| format!("access_log = \"{}\"\n", l.display())).unwrap_or_default();
    format!(
        "[global]\nworkers = 1\n{log}\
         [[frontend]]\nname = \"px\"\nbind = [{{ addr = \"127.0.0.1:0\", h2c = true }}]\ndefault_backend = \"egress\"\n\
         [[backend]]\nname = \"egress\"\nforward = {{ {forward} }}\n{extra}"
    )
}

/// Reads a response head (up to the blank line) from `s`.
async fn head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(WAIT, s.read(&mut b)).await.expect("a response head in time") {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A response with its body (Content-Length), from a keep-alive connection.
async fn response(s: &mut TcpStream) -> (u16, String, String) {
    let h = head(s).await;
    let len: usize = h
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    tokio::time::timeout(WAIT, s.read_exact(&mut body)).await.expect("the body in time").unwrap();
    (status_of(&h), h, String::from_utf8_lossy(&body).into_owned())
}

/// Waits (bounded) until the log file holds a line with `needle`.
async fn log_line(path: &std::path::Path, needle: &str) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains(needle)) {
            return l.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no log line with {needle:?} in {text:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn log_path(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tg-forward-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("access.log")
}

/// Absolute-form requests go to the host and port they name, in origin-form,
/// with Via and without the proxy's own fields, on a keep-alive connection;
/// the server connection is reused for the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_goes_to_the_host_it_names() {
    let origin = echo().await;
    let port = origin.addr.port();
    let p = proxy(&config(&format!("ports = [{port}], allow_networks = [\"127.0.0.0/8\"]"), "", None));
    let px = p.addr("px").unwrap();
    let mut s = TcpStream::connect(px).await.unwrap();
    for i in 0..2 {
        let req = format!(
            "GET http://127.0.0.1:{port}/x?n={i} HTTP/1.1\r\nHost: ignored.test\r\nProxy-Connection: keep-alive\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let (status, _, body) = response(&mut s).await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["uri"], format!("/x?n={i}"));
        assert_eq!(echoed_header(&v, "host").as_deref(), Some(format!("127.0.0.1:{port}").as_str()));
        assert!(echoed_header(&v, "via").is_some_and(|via| via.starts_with("1.1 tollgate-")), "{v}");
        assert_eq!(echoed_header(&v, "proxy-connection"), None);
    }
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 2);
    // A name is looked up (here in /etc/hosts) and its address checked.
    let req = format!("GET http://localhost:{port}/named HTTP/1.1\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let (status, _, body) = response(&mut s).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"/named\""), "{body}");
    // Over HTTP/2 the destination is the :authority; `https` would go out
    // in clear: refused.
    let mut h2 = H2Client::plain(px).await;
    let (status, _, body) = h2.get(&format!("http://127.0.0.1:{port}/over-h2")).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["uri"], "/over-h2");
    assert_eq!(h2.get(&format!("https://127.0.0.1:{port}/over-h2")).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 4);
}

/// CONNECT answers 200 and relays bytes both ways, those sent right behind
/// the request head first; over HTTP/2 (RFC 9113 section 8.5) too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_opens_a_tunnel_over_h1_and_h2() {
    let dest = tcp_echo().await;
    let port = dest.addr.port();
    let p = proxy(&config(&format!("connect_ports = [{port}], allow_networks = [\"127.0.0.0/8\"]"), "", None));
    let px = p.addr("px").unwrap();

    let mut s = TcpStream::connect(px).await.unwrap();
    let req = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\nearly ");
    s.write_all(req.as_bytes()).await.unwrap();
    let h = head(&mut s).await;
    assert_eq!(h, "HTTP/1.1 200 Connection established\r\n\r\n");
    s.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 10];
    tokio::time::timeout(WAIT, s.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"early ping");
    // The client's half-close reaches the server, whose close ends the tunnel.
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut rest)).await.unwrap().unwrap();
    assert!(rest.is_empty());

    let h2 = H2Client::plain(px).await;
    let req = Request::builder().method(Method::CONNECT).uri(format!("127.0.0.1:{port}")).body(()).unwrap();
    let (resp, mut send) = h2.sender().send_request(req, false).unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    send.send_data(Bytes::from_static(b"over h2"), false).unwrap();
    let data = tokio::time::timeout(WAIT, body.data()).await.unwrap().unwrap().unwrap();
    assert_eq!(&data[..], b"over h2");
    send.send_data(Bytes::new(), true).unwrap();
    assert_eq!(dest.connections.load(std::sync::atomic::Ordering::Relaxed), 2);
}

/// Without `allow_networks`, loopback (like every private range) is refused:
/// 403 for a CONNECT and for a plain request, a log line naming why, and no
/// connection to the destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_networks_are_refused_by_default() {
    let dest = tcp_echo().await;
    let origin = echo().await;
    let log = log_path("private");
    let (cport, port) = (dest.addr.port(), origin.addr.port());
    let p = proxy(&config(&format!("connect_ports = [{cport}], ports = [{port}]"), "", Some(&log)));
    let px = p.addr("px").unwrap();
    let reply = raw(px, format!("CONNECT 127.0.0.1:{cport} HTTP/1.1\r\n\r\n").as_bytes(), WAIT).await;
    assert_eq!(status_of(&reply), 403, "{reply}");
    assert!(reply.contains("does not go to the destination"), "{reply}");
    let reply =
        raw(px, format!("GET http://localhost:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(), WAIT).await;
    assert_eq!(status_of(&reply), 403, "{reply}");
    let line = log_line(&log, "forward-network-denied").await;
    assert!(line.contains(" 403 "), "{line}");
    assert_eq!(dest.connections.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// A port or a host outside the lists: 403, nothing looked up or opened. A
/// CONNECT to a port only `ports` has (not `connect_ports`) is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_and_ports_outside_the_lists_are_refused() {
    let origin = echo().await;
    let port = origin.addr.port();
    let log = log_path("lists");
    let fwd = format!(
        "ports = [{port}], allow_hosts = [\"localhost\", \"*.example.test\"], allow_networks = [\"127.0.0.0/8\"]"
    );
    let p = proxy(&config(&fwd, "", Some(&log)));
    let px = p.addr("px").unwrap();
    let get = |target: String| async move {
        let reply = raw(px, format!("GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(), WAIT).await;
        status_of(&reply)
    };
    assert_eq!(get(format!("http://localhost:{port}/")).await, 200);
    assert_eq!(get(format!("http://127.0.0.1:{port}/")).await, 403, "an address is not a listed name");
    assert_eq!(get(format!("http://localhost:{}/", port ^ 1)).await, 403, "another port");
    assert_eq!(get(format!("http://example.test:{port}/")).await, 403, "*. is for names under it");
    let reply = raw(px, format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes(), WAIT).await;
    assert_eq!(status_of(&reply), 403, "CONNECT goes to connect_ports (443) only: {reply}");
    log_line(&log, "forward-host-denied").await;
    log_line(&log, "forward-port-denied").await;
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 1);
    // An https URL must come as a tunnel.
    assert_eq!(get(format!("https://localhost:{port}/")).await, 400);
}

/// `auth`: no Proxy-Authorization or a wrong one gets 407 with
/// Proxy-Authenticate; the right one passes, and the server never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_authentication_answers_407_until_it_passes() {
    let origin = echo().await;
    let port = origin.addr.port();
    let fwd = format!(
        "ports = [{port}], allow_networks = [\"127.0.0.0/8\"], auth = {{ userlist = \"staff\", realm = \"egress\" }}"
    );
    let users = "[[userlist]]\nname = \"staff\"\nfailure_delay = \"10ms\"\n\
                 users = [{ name = \"ann\", insecure_password = \"s3cret\" }]\n";
    let p = proxy(&config(&fwd, users, None));
    let px = p.addr("px").unwrap();
    let mut s = TcpStream::connect(px).await.unwrap();
    let target = format!("http://127.0.0.1:{port}/private");
    let send = |auth: Option<&str>| {
        let auth = auth.map(|a| format!("Proxy-Authorization: Basic {a}\r\n")).unwrap_or_default();
        format!("GET {target} HTTP/1.1\r\n{auth}\r\n")
    };
    s.write_all(send(None).as_bytes()).await.unwrap();
    let (status, h, _) = response(&mut s).await;
    assert_eq!(status, 407);
    assert!(h.to_ascii_lowercase().contains("proxy-authenticate: basic realm=\"egress\""), "{h}");
    // ann:wrong, then ann:s3cret, on the same connection.
    s.write_all(send(Some("YW5uOndyb25n")).as_bytes()).await.unwrap();
    assert_eq!(response(&mut s).await.0, 407);
    s.write_all(send(Some("YW5uOnMzY3JldA==")).as_bytes()).await.unwrap();
    let (status, _, body) = response(&mut s).await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echoed_header(&v, "proxy-authorization"), None);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// A request the proxy would send to itself comes back with its Via: 508,
/// after one turn rather than until the descriptors run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_looping_through_the_proxy_is_508() {
    // The proxy's own port is known once it runs: bind the listener first.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let toml = config(&format!("ports = [{port}], allow_networks = [\"127.0.0.0/8\"]"), "", None)
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    let p = proxy(&toml);
    let px = p.addr("px").unwrap();
    assert_eq!(px.port(), port);
    let reply =
        raw(px, format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(), WAIT).await;
    assert_eq!(status_of(&reply), 508, "{reply}");
}

/// A backend that is not a forward proxy answers CONNECT 405, as before; a
/// CONNECT a rule redirects is answered and the connection closes (the
/// bytes behind its head are not read as a request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_another_backend_is_405() {
    let origin = echo().await;
    let toml = simple_config("roundrobin", &[("s1", origin.addr, 1)], "").replace(
        "default_backend = \"b\"\n",
        "default_backend = \"b\"\n  [[frontend.rule]]\n  when = { host = \"moved.test\" }\n  redirect = { location = \"http://elsewhere.test/\" }\n",
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let reply = raw(web, format!("CONNECT {} HTTP/1.1\r\n\r\n", origin.addr).as_bytes(), WAIT).await;
    assert_eq!(status_of(&reply), 405, "{reply}");
    let smuggled = "CONNECT moved.test:443 HTTP/1.1\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let reply = raw(web, smuggled.as_bytes(), WAIT).await;
    assert_eq!(status_of(&reply), 302, "{reply}");
    assert_eq!(reply.matches("HTTP/1.1").count(), 1, "one response, then the close: {reply}");
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// curl as a proxy's client: `-x` (absolute-form), `-p -x` (CONNECT, then
/// the request inside the tunnel), with `--proxy-user`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_uses_it_as_its_proxy() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        assert!(!crate::cdp::in_ci(), "curl not found, and CI is set: .ci/run installs it");
        eprintln!("curl not installed: skipped");
        return;
    }
    let origin = echo().await;
    let port = origin.addr.port();
    let fwd = format!(
        "ports = [{port}], connect_ports = [{port}], allow_networks = [\"127.0.0.0/8\"], auth = {{ userlist = \"staff\" }}"
    );
    let users = "[[userlist]]\nname = \"staff\"\nusers = [{ name = \"ann\", insecure_password = \"s3cret\" }]\n";
    let p = proxy(&config(&fwd, users, None));
    let px = p.addr("px").unwrap();
    let curl = |tunnel: bool, user: &'static str| {
        let mut args = vec!["-s".to_string(), "-m".into(), "10".into(), "-o".into(), "/dev/null".into()];
        args.extend(["-w".into(), "%{http_code}".into(), "-x".into(), format!("http://{px}")]);
        args.extend(["--proxy-user".into(), user.into()]);
        if tunnel {
            args.push("-p".into());
        }
        args.push(format!("http://127.0.0.1:{port}/via-curl"));
        async move {
            let out = tokio::task::spawn_blocking(move || std::process::Command::new("curl").args(&args).output())
                .await
                .unwrap()
                .expect("curl runs");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    assert_eq!(curl(false, "ann:s3cret").await, "200");
    assert_eq!(curl(true, "ann:s3cret").await, "200", "through a CONNECT tunnel");
    assert_eq!(curl(false, "ann:nope").await, "407");
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 2);
}

/// examples/forward.toml as written: sign-in first (407), the rules' denied
/// hosts (403), loopback out of reach (403); with loopback and the test
/// origin's port allowed, the example's user passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forward_example_runs() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/forward.toml");
    let cfg = tollgate_config::load(&example).unwrap_or_else(|e| panic!("{e}"));
    let origin = echo().await;
    let port = origin.addr.port();
    let start = |mut cfg: tollgate_config::Config| {
        cfg.global.workers = 1;
        cfg.global.access_log = tollgate_config::AccessLogTarget::Off;
        for bind in &mut cfg.frontends[0].binds {
            bind.addr.set_port(0);
        }
        start_proxy(cfg).expect("starts")
    };
    let ask = |px: SocketAddr, target: String, auth: bool| async move {
        // build:change me
        let auth = if auth { "Proxy-Authorization: Basic YnVpbGQ6Y2hhbmdlIG1l\r\n" } else { "" };
        let req = format!("GET {target} HTTP/1.1\r\n{auth}Connection: close\r\n\r\n");
        status_of(&raw(px, req.as_bytes(), WAIT).await)
    };
    let p = start(cfg.clone());
    let px = p.addr("egress").unwrap();
    let target = format!("http://127.0.0.1:{port}/");
    assert_eq!(ask(px, target.clone(), false).await, 407);
    assert_eq!(ask(px, "http://ads.example/".into(), true).await, 403, "a rule's deny");
    assert_eq!(ask(px, target.clone(), true).await, 403, "loopback is private: refused by default");
    p.stop();

    let mut open = cfg;
    let be = std::sync::Arc::make_mut(&mut open.backends[0]);
    let mut fwd = (**be.forward.as_ref().unwrap()).clone();
    fwd.allow_networks = Some(vec!["127.0.0.0/8".parse().unwrap()]);
    fwd.ports.push(port);
    be.forward = Some(std::sync::Arc::new(fwd));
    let p = start(open);
    let px = p.addr("egress").unwrap();
    assert_eq!(ask(px, target, true).await, 200);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::Relaxed), 1);
    p.stop();
}
