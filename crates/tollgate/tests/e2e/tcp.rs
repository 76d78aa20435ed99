//! TCP mode end to end: tcp frontends and backends relay connections to raw
//! TCP servers, balanced (roundrobin, leastconn), retried past a dead server,
//! health-checked, drained from the admin API, with the PROXY protocol in and
//! out, TLS terminated on a bind, routed by the SNI of a ClientHello Tollgate
//! does not terminate, across reloads, with half-closes passed on, counted and
//! logged. Every wait polls a condition with a deadline.

use crate::harness::*;
use crate::tls::{BOTH, Pki, client, handshake};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tollgate_proxy::Server;
use tollgate_wire::proxy_proto::{Decoded, decode};

const WAIT: Duration = Duration::from_secs(5);

/// A raw TCP server: it greets each connection with `<name>\n`, echoes what it
/// reads, and when the client has sent its FIN writes `bye <name>\n` and
/// closes (so a half-closed client still gets an answer). With `proxied`,
/// every connection must start with a PROXY header, whose source address it
/// greets with instead (`<name> <src>\n`).
struct TcpOrigin {
    addr: SocketAddr,
    /// Connections accepted.
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tcp_origin(name: &'static str) -> TcpOrigin {
    origin_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), name, false)
}

/// Serves every connection `listener` accepts with `conversation`, counting them.
fn serve_each<F, Fut>(listener: TcpListener, conversation: F) -> TcpOrigin
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(conversation(s));
        }
    });
    TcpOrigin { addr, accepted, task }
}

fn origin_on(listener: TcpListener, name: &'static str, proxied: bool) -> TcpOrigin {
    serve_each(listener, move |mut s| async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut have = 0;
        let greeting = if proxied {
            let src = loop {
                match decode(&buf[..have]) {
                    Ok(Decoded::Complete(h)) => {
                        buf.copy_within(h.len..have, 0);
                        have -= h.len;
                        break h.addrs.map_or("local".to_string(), |(src, _)| src.to_string());
                    }
                    Ok(Decoded::Partial) => {}
                    Err(_) => return,
                }
                match s.read(&mut buf[have..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => have += n,
                }
            };
            format!("{name} {src}\n")
        } else {
            format!("{name}\n")
        };
        if s.write_all(greeting.as_bytes()).await.is_err() || s.write_all(&buf[..have]).await.is_err() {
            return;
        }
        if echo_until_fin(&mut s, &mut buf).await {
            let _ = s.write_all(format!("bye {name}\n").as_bytes()).await;
            let _ = s.shutdown().await;
        }
    })
}

/// Echoes what `s` sends until its FIN (true) or a failure (false).
async fn echo_until_fin<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, buf: &mut [u8]) -> bool {
    loop {
        match s.read(buf).await {
            Ok(0) => return true,
            Ok(n) if s.write_all(&buf[..n]).await.is_ok() => {}
            _ => return false,
        }
    }
}

/// Reads one line (up to `\n`) from `s`.
async fn line<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while tokio::time::timeout(WAIT, s.read_exact(&mut b)).await.expect("a line in time").is_ok() {
        if b[0] == b'\n' {
            break;
        }
        out.push(b[0]);
    }
    String::from_utf8(out).unwrap()
}

/// A whole conversation on a new connection: the greeting, an echo of `msg`,
/// then after the client's FIN the server's goodbye and its close.
async fn converse(addr: SocketAddr, msg: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let greeting = line(&mut s).await;
    s.write_all(msg.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut rest = String::new();
    tokio::time::timeout(WAIT, s.read_to_string(&mut rest)).await.expect("closed in time").unwrap();
    let name = greeting.split(' ').next().unwrap();
    assert_eq!(rest, format!("{msg}bye {name}\n"), "echo then goodbye after the half-close");
    greeting
}

/// A tcp frontend `name` on `ip` port 0, with `default` backend and `extra` keys and tables.
fn tcp_frontend(name: &str, ip: &str, default: &str, extra: &str) -> String {
    format!(
        "[[frontend]]\nname = \"{name}\"\nmode = \"tcp\"\nbind = [\"{ip}:0\"]\ndefault_backend = \"{default}\"\n{extra}\n"
    )
}

/// A tcp backend `name` with `extra` keys and `servers` (name, address, keys).
fn tcp_backend(name: &str, extra: &str, servers: &[(&str, SocketAddr, &str)]) -> String {
    let mut s = format!("[[backend]]\nname = \"{name}\"\nmode = \"tcp\"\n{extra}\n");
    for (server, addr, keys) in servers {
        s.push_str(&format!("  [[backend.server]]\n  name = \"{server}\"\n  addr = \"{addr}\"\n  {keys}\n"));
    }
    s
}

/// A tcp frontend `front` on port 0 over tcp backend `b` with `servers`.
fn tcp_config(balance: &str, servers: &[(&str, SocketAddr)], frontend_extra: &str, backend_extra: &str) -> String {
    let servers: Vec<_> = servers.iter().map(|(n, a)| (*n, *a, "")).collect();
    tcp_frontend("front", "127.0.0.1", "b", frontend_extra)
        + &tcp_backend("b", &format!("balance = \"{balance}\"\n{backend_extra}"), &servers)
}

/// Waits (bounded) until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn inflight(p: &Server, server: usize) -> u32 {
    p.snapshot().backends[0].servers[server].inflight()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_relays_both_ways_and_counts_and_logs_each_session() {
    let (a, b) = (tcp_origin("s1").await, tcp_origin("s2").await);
    let dir = std::env::temp_dir().join(format!("tollgate-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[global]\nworkers = 1\naccess_log = {:?}\n{}",
        log.display().to_string(),
        tcp_config("roundrobin", &[("s1", a.addr), ("s2", b.addr)], "", "")
    );
    let p = proxy(&toml);
    let front = p.addr("front").unwrap();
    let mut names = Vec::new();
    for i in 0..4 {
        names.push(converse(front, &format!("hello {i}\n")).await);
    }
    assert_eq!(names, ["s1", "s2", "s1", "s2"]);
    // More than the relay's buffers, both ways at once.
    let mut s = TcpStream::connect(front).await.unwrap();
    assert_eq!(line(&mut s).await, "s1");
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut r, mut w) = s.split();
    let send = async {
        w.write_all(&big).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut back = Vec::new();
    let (_, got) = tokio::join!(send, r.read_to_end(&mut back));
    got.unwrap();
    assert_eq!(&back[..big.len()], &big[..]);
    assert_eq!(&back[big.len()..], b"bye s1\n");

    // Sessions and bytes, per frontend, backend and server.
    until("the sessions end", || inflight(&p, 0) + inflight(&p, 1) == 0).await;
    let report = p.control().report().unwrap();
    let (fe, be) = (&report.frontends[0], &report.backends[0]);
    assert_eq!((fe.mode, be.mode), ("tcp", "tcp"));
    assert_eq!((fe.sessions_total, fe.requests_total), (5, 0));
    assert_eq!((be.sessions_total, be.servers[0].sessions_total, be.servers[1].sessions_total), (5, 3, 2));
    let sent: u64 = (0..4).map(|i| format!("hello {i}\n").len() as u64).sum::<u64>() + 1_000_000;
    assert_eq!((fe.bytes_in, be.bytes_in), (sent, sent));
    let greeted: u64 = 5 * 3 + 5 * 7;
    assert_eq!((fe.bytes_out, be.bytes_out), (sent + greeted, sent + greeted));

    // One log line per session.
    let mut lines = Vec::new();
    until("five log lines", || {
        lines = std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_string).collect();
        lines.len() == 5
    })
    .await;
    for (l, server) in lines.iter().zip(["s1", "s2", "s1", "s2", "s1"]) {
        assert!(l.contains(&format!(" front b/{server} tcp ")), "{l}");
        assert!(l.contains(" retries=0 -"), "ended by both sides closing: {l}");
    }
    assert!(lines[4].contains(" tcp 1000000 1000010 "), "{}", lines[4]);
    p.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leastconn_sends_new_connections_to_the_least_busy_server() {
    let (a, b) = (tcp_origin("s1").await, tcp_origin("s2").await);
    let p = proxy(&tcp_config("leastconn", &[("s1", a.addr), ("s2", b.addr)], "", ""));
    let front = p.addr("front").unwrap();
    // One long session on the first server chosen...
    let mut held = TcpStream::connect(front).await.unwrap();
    let busy = line(&mut held).await;
    let idle = if busy == "s1" { "s2" } else { "s1" };
    // ...and every connection after it goes to the other one, as long as it is held.
    for i in 0..4 {
        assert_eq!(converse(front, &format!("m{i}")).await, idle, "connection {i}");
        until("the session ends", || inflight(&p, 0) + inflight(&p, 1) == 1).await;
    }
    held.write_all(b"still here").await.unwrap();
    let mut echo = [0u8; 10];
    held.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"still here");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxconn_counts_open_connections_and_queues_the_next() {
    let a = tcp_origin("s1").await;
    let toml = tcp_config("roundrobin", &[("s1", a.addr)], "", "timeout = { queue = \"300ms\" }")
        .replace("addr = \"", "maxconn = 1\n  addr = \"");
    let p = proxy(&toml);
    let front = p.addr("front").unwrap();
    let mut first = TcpStream::connect(front).await.unwrap();
    assert_eq!(line(&mut first).await, "s1");
    // The second waits for the first's slot.
    let waiting = tokio::spawn(converse(front, "queued"));
    until("one connection in the queue", || p.snapshot().backends[0].queue.cur.load(Ordering::Relaxed) == 1).await;
    first.shutdown().await.unwrap();
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).await.unwrap();
    assert_eq!(waiting.await.unwrap(), "s1", "served once the slot is free");
    assert_eq!(a.accepted.load(Ordering::Relaxed), 2);
    // A connection that waits longer than timeout.queue is closed unanswered.
    let mut held = TcpStream::connect(front).await.unwrap();
    assert_eq!(line(&mut held).await, "s1");
    let mut late = TcpStream::connect(front).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, late.read_to_end(&mut got)).await.expect("closed").unwrap();
    assert!(got.is_empty());
    assert_eq!(a.accepted.load(Ordering::Relaxed), 3);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_retried_past_and_health_checks_take_it_out_and_back() {
    let b = tcp_origin("s2").await;
    let dead = dead_addr().await;
    // Without checks: every connection that lands on s1 is redispatched to s2.
    let p = proxy(&tcp_config("roundrobin", &[("s1", dead), ("s2", b.addr)], "", "retries = 2"));
    let front = p.addr("front").unwrap();
    for i in 0..4 {
        assert_eq!(converse(front, &format!("m{i}")).await, "s2");
    }
    let s1 = p.snapshot().backends[0].servers[0].clone();
    assert!(s1.stats.connect_errors.load(Ordering::Relaxed) >= 2);
    p.stop();

    // With checks: s1 is DOWN from the first round, and UP once it listens.
    let check = "check = { type = \"tcp\", interval = \"100ms\", fall = 1, rise = 1 }";
    let p = proxy(&tcp_config("roundrobin", &[("s1", dead), ("s2", b.addr)], "", check));
    let front = p.addr("front").unwrap();
    let s1 = p.snapshot().backends[0].servers[0].clone();
    assert!(!s1.is_up(), "DOWN before the first connection");
    for i in 0..3 {
        assert_eq!(converse(front, &format!("m{i}")).await, "s2");
    }
    assert_eq!(s1.stats.connect_errors.load(Ordering::Relaxed), 0, "never tried");
    let revived = origin_on(TcpListener::bind(dead).await.unwrap(), "s1", false);
    until("s1 is UP again", || s1.is_up()).await;
    let talks = (0..4).map(|i| async move { converse(front, &format!("n{i}")).await });
    let names: Vec<String> = futures_util::future::join_all(talks).await;
    assert!(names.contains(&"s1".to_string()), "{names:?}");
    assert!(revived.accepted.load(Ordering::Relaxed) >= 1);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_from_the_admin_api_stops_new_connections_and_keeps_open_ones() {
    let (a, b) = (tcp_origin("s1").await, tcp_origin("s2").await);
    let toml = format!(
        "[admin]\nbind = \"127.0.0.1:0\"\n{}",
        tcp_config("roundrobin", &[("s1", a.addr), ("s2", b.addr)], "", "")
    );
    let p = proxy(&toml);
    let (front, admin) = (p.addr("front").unwrap(), p.admin_addr().unwrap());
    let mut open = TcpStream::connect(front).await.unwrap();
    assert_eq!(line(&mut open).await, "s1");
    let req = admin_change("PUT", admin, "/api/backends/b/servers/s1")
        .body(http_body_util::Full::new(bytes::Bytes::from(r#"{"state": "drain"}"#)))
        .unwrap();
    let (status, _, body) = Client::connect(admin).await.send(req).await;
    assert_eq!(status, 200, "{body:?}");
    for i in 0..4 {
        assert_eq!(converse(front, &format!("m{i}")).await, "s2");
    }
    assert_eq!(a.accepted.load(Ordering::Relaxed), 1);
    // The session opened before goes on.
    open.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    open.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping");
    let (_, _, body) = admin_get(admin, "/api/backends").await;
    let be = &json(&body)[0];
    assert_eq!((&be["mode"], &be["servers"][0]["status"]), (&"tcp".into(), &"DRAIN".into()));
    assert_eq!(be["servers"][0]["sessions_cur"], 1);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_proxy_in_and_send_proxy_out() {
    for version in ["v1", "v2"] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = origin_on(listener, "s1", true);
        let other = tcp_origin("s2").await;
        let rule = "  [[frontend.rule]]\n  when = { src = \"198.51.100.0/24\" }\n  backend = \"other\"";
        let send_proxy = format!("send_proxy = \"{version}\"");
        let toml = tcp_frontend("front", "127.0.0.1", "b", rule)
            .replace("bind = [\"127.0.0.1:0\"]", "bind = [{ addr = \"127.0.0.1:0\", accept_proxy = true }]")
            + &tcp_backend("b", "", &[("s1", origin.addr, &send_proxy)])
            + &tcp_backend("other", "", &[("s2", other.addr, "")]);
        let p = proxy(&toml);
        let front = p.addr("front").unwrap();
        // The client's header names 203.0.113.7:4000: the server is told that.
        let mut s = TcpStream::connect(front).await.unwrap();
        s.write_all(format!("PROXY TCP4 203.0.113.7 {} 4000 {}\r\nhi", front.ip(), front.port()).as_bytes())
            .await
            .unwrap();
        assert_eq!(line(&mut s).await, "s1 203.0.113.7:4000", "{version}");
        let mut hi = [0u8; 2];
        s.read_exact(&mut hi).await.unwrap();
        assert_eq!(&hi, b"hi", "what followed the header goes on");
        // Rules see the header's source address.
        let mut s = TcpStream::connect(front).await.unwrap();
        s.write_all(b"PROXY TCP4 198.51.100.9 127.0.0.1 5000 80\r\n").await.unwrap();
        assert_eq!(line(&mut s).await, "s2");
        // No header: closed, and counted as an error.
        let mut s = TcpStream::connect(front).await.unwrap();
        s.write_all(b"hello, this is no PROXY header\r\n").await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut rest)).await.expect("closed").unwrap_or_default();
        assert!(rest.is_empty());
        assert_eq!(origin.accepted.load(Ordering::Relaxed), 1, "{version}");
        until("the error is counted", || p.snapshot().frontend_stats[0].request_errors.load(Ordering::Relaxed) == 1)
            .await;
        p.stop();
    }
}

/// A TLS server with the certificate of `pem` (chain and key) that answers
/// every connection with `<name>\n` once the handshake is done, then echoes.
async fn tls_origin(name: &'static str, pem: &str) -> TcpOrigin {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(pem).unwrap().collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(pem).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(tollgate_config::tls_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    serve_each(TcpListener::bind("127.0.0.1:0").await.unwrap(), move |s| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(mut tls) = acceptor.accept(s).await else { return };
            let _ = tls.write_all(format!("{name}\n").as_bytes()).await;
            if echo_until_fin(&mut tls, &mut [0u8; 4096]).await {
                let _ = tls.shutdown().await;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_routes_to_tls_servers_without_terminating() {
    let pki = Pki::new("tcp-sni");
    let (a_cert, a_pem) = pki.leaf("a.pem", &["a.example.com"], false);
    let (b_cert, b_pem) = pki.leaf("b.pem", &["*.b.example.com"], false);
    let (d_cert, d_pem) = pki.leaf("d.pem", &["default.example.com"], false);
    let (a, b, d) = (tls_origin("A", &a_pem).await, tls_origin("B", &b_pem).await, tls_origin("D", &d_pem).await);
    let plain = tcp_origin("plain").await;
    let timeout = "timeout = { client = \"500ms\" }\n";
    let rule_a = "[[frontend.rule]]\nwhen = { sni = \"a.example.com\" }\nbackend = \"a\"\n";
    let rule_b = "[[frontend.rule]]\nwhen = { sni = \"*.b.example.com\" }\nbackend = \"b\"\n";
    let toml = [
        tcp_frontend("front", "127.0.0.1", "d", &format!("{timeout}{rule_a}{rule_b}")),
        tcp_frontend("other", "127.0.0.2", "plain", &format!("{timeout}{rule_a}")),
        tcp_backend("a", "", &[("a1", a.addr, "")]),
        tcp_backend("b", "", &[("b1", b.addr, "")]),
        tcp_backend("d", "", &[("d1", d.addr, "")]),
        tcp_backend("plain", "", &[("p1", plain.addr, "")]),
    ]
    .concat();
    let p = proxy(&toml);
    let (front, other) = (p.addr("front").unwrap(), p.addr("other").unwrap());
    for (sni, want_name, want_cert, check) in [
        ("a.example.com", "A", &a_cert, true),
        ("x.b.example.com", "B", &b_cert, true),
        // `*.` rules match names of any depth; the certificate covers one label.
        ("y.x.b.example.com", "B", &b_cert, false),
        ("default.example.com", "D", &d_cert, true),
    ] {
        // The client checks the chain and the name: the handshake is the server's own.
        let (cfg, seen) = client(BOTH, check.then_some(&pki), None);
        let mut tls = handshake(front, sni, &cfg).await.unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(&seen.lock()[0].0, want_cert, "{sni}");
        assert_eq!(line(&mut tls).await, want_name, "{sni}");
        tls.write_all(b"over tls").await.unwrap();
        let mut echo = [0u8; 8];
        tls.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"over tls");
    }
    assert_eq!(b.accepted.load(Ordering::Relaxed), 2);
    // A name no rule has, and no name at all (an IP address): the default backend.
    for sni in ["b.example.com", "127.0.0.1"] {
        let (cfg, seen) = client(BOTH, None, None);
        let mut tls = handshake(front, sni, &cfg).await.unwrap();
        assert_eq!(&seen.lock()[0].0, &d_cert, "{sni}");
        assert_eq!(line(&mut tls).await, "D", "{sni}");
    }
    // Not TLS at all: no name, so the default; the bytes read while looking
    // for a ClientHello reach the server unchanged.
    assert_eq!(converse(other, "GET / HTTP/1.0\r\n\r\n").await, "plain");
    // A client that sends nothing: routed without a name once timeout.client passes.
    let started = Instant::now();
    let mut silent = TcpStream::connect(other).await.unwrap();
    assert_eq!(line(&mut silent).await, "plain");
    assert!(started.elapsed() >= Duration::from_millis(450), "{:?}", started.elapsed());
    // Each session's log line would name the SNI; the counters count them.
    let report = p.control().report().unwrap();
    assert_eq!(report.frontends[0].sessions_total, 6);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_terminated_on_a_tcp_bind_reaches_the_server_in_plain_text() {
    let pki = Pki::new("tcp-term");
    let (cert, pem) = pki.leaf("t.pem", &["t.example.com"], false);
    let origin = tcp_origin("s1").await;
    let toml = tcp_config("roundrobin", &[("s1", origin.addr)], "", "").replace(
        "bind = [\"127.0.0.1:0\"]",
        &format!("bind = [{{ addr = \"127.0.0.1:0\", tls = {{ certs = [{pem:?}] }} }}]"),
    );
    let p = proxy(&toml);
    let (cfg, seen) = client(BOTH, Some(&pki), None);
    let mut tls = handshake(p.addr("front").unwrap(), "t.example.com", &cfg).await.unwrap();
    assert_eq!(&seen.lock()[0].0, &cert);
    assert_eq!(tls.get_ref().1.alpn_protocol(), None, "no ALPN unless tls.alpn says so");
    assert_eq!(line(&mut tls).await, "s1");
    tls.write_all(b"secret\n").await.unwrap();
    // close_notify from the client: the server gets its FIN and says goodbye.
    tls.shutdown().await.unwrap();
    let mut rest = String::new();
    tokio::time::timeout(WAIT, tls.read_to_string(&mut rest)).await.expect("closed").unwrap();
    assert_eq!(rest, "secret\nbye s1\n");
    p.stop();
}

/// A server that speaks first and closes its side at once, then reads what
/// the client still sends and reports it.
async fn closing_origin() -> (SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                s.write_all(b"early bye").await.unwrap();
                s.shutdown().await.unwrap();
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got).await;
                let _ = tx.send(got);
            });
        }
    });
    (addr, rx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_close_by_the_server_lets_the_client_go_on_sending() {
    let (addr, mut got, task) = closing_origin().await;
    let p = proxy(&tcp_config("roundrobin", &[("s1", addr)], "", ""));
    let mut s = TcpStream::connect(p.addr("front").unwrap()).await.unwrap();
    let mut first = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut first)).await.expect("the server's FIN").unwrap();
    assert_eq!(first, b"early bye");
    s.write_all(b"after your FIN").await.unwrap();
    s.shutdown().await.unwrap();
    let received = tokio::time::timeout(WAIT, got.recv()).await.unwrap().unwrap();
    assert_eq!(received, b"after your FIN");
    task.abort();
    p.stop();
}

async fn closed_within<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, limit: Duration) -> bool {
    let mut b = [0u8; 64];
    loop {
        match tokio::time::timeout(limit, s.read(&mut b)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_end_after_timeout_client_or_timeout_tunnel() {
    let origin = tcp_origin("s1").await;
    for (frontend, backend, why) in [
        ("timeout = { client = \"300ms\" }", "", "client-timeout"),
        ("", "timeout = { server = \"300ms\" }", "server-timeout"),
        ("timeout = { client = \"1h\" }", "timeout = { server = \"1h\", tunnel = \"300ms\" }", "tunnel-timeout"),
    ] {
        let p = proxy(&tcp_config("roundrobin", &[("s1", origin.addr)], frontend, backend));
        let started = Instant::now();
        let mut s = TcpStream::connect(p.addr("front").unwrap()).await.unwrap();
        assert_eq!(line(&mut s).await, "s1");
        assert!(closed_within(&mut s, WAIT).await, "{why}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(290) && took < Duration::from_secs(3), "{why}: {took:?}");
        until("the slot is free", || inflight(&p, 0) == 0).await;
        p.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_open_sessions_on_the_old_config() {
    let (a, b) = (tcp_origin("s1").await, tcp_origin("s2").await);
    let p = proxy(&tcp_config("roundrobin", &[("s1", a.addr)], "", ""));
    let front = p.addr("front").unwrap();
    let mut open = TcpStream::connect(front).await.unwrap();
    assert_eq!(line(&mut open).await, "s1");
    let next = format!("[global]\nworkers = 1\n{}", tcp_config("roundrobin", &[("s2", b.addr)], "", ""));
    let cfg = tollgate_config::parse(&next, Path::new("t.toml")).unwrap();
    let report = tokio::task::block_in_place(|| p.reload(cfg)).expect("reload");
    assert_eq!(report.servers_removed, ["b/s1"]);
    assert_eq!(converse(front, "new").await, "s2", "new connections: the new config");
    open.write_all(b"old").await.unwrap();
    let mut echo = [0u8; 3];
    open.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"old", "the open session goes on to s1");

    // A code-built config whose tcp frontend names an http backend is refused.
    let mut bad = tollgate_config::parse(&next, Path::new("t.toml")).unwrap();
    Arc::make_mut(&mut bad.backends[0]).mode = tollgate_config::Mode::Http;
    let err = tokio::task::block_in_place(|| p.reload(bad)).unwrap_err().to_string();
    assert!(err.contains("`front` (mode tcp) uses backend `b` (mode http)"), "{err}");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_name_the_http_only_keys() {
    let rule = "forward_for = true\n  [[frontend.rule]]\n  when = { path = \"/x\" }\n  backend = \"b\"";
    let toml = tcp_config("uri", &[("s1", "127.0.0.1:1".parse().unwrap())], rule, "");
    let errs = tollgate_config::parse(&toml, Path::new("t.toml")).unwrap_err().to_string();
    for want in [
        "t.toml:6:15: frontend[0].forward_for: `forward_for` is for HTTP: frontend `front` is in mode \"tcp\"",
        "backend[0].balance: `uri` hashes the request path",
        "frontend[0].rule[0].when.path: `path` tests HTTP requests",
    ] {
        assert!(errs.contains(want), "{want}\nnot in:\n{errs}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_example_runs() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tcp.toml");
    let mut cfg = tollgate_config::load(&example).unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (tcp_origin("pg1").await, tcp_origin("pg2").await);
    // Its addresses on port 0 and its servers here, the rest as written.
    cfg.global.workers = 1;
    cfg.global.access_log = tollgate_config::AccessLogTarget::Off;
    cfg.admin = None;
    for fe in &mut cfg.frontends {
        for bind in &mut fe.binds {
            bind.addr.set_port(0);
        }
    }
    let be = cfg.backends.iter_mut().find(|b| b.name == "postgres").expect("a backend `postgres`");
    let be = Arc::make_mut(be);
    for (s, o) in be.servers.iter_mut().zip([&a, &b]) {
        s.addr = o.addr;
    }
    let p = start_proxy(cfg).expect("starts");
    let front = p.addr("postgres").expect("a frontend `postgres`");
    let names = [converse(front, "q1").await, converse(front, "q2").await];
    assert!(names.iter().all(|n| n == "pg1" || n == "pg2"), "{names:?}");
    p.stop();
}
