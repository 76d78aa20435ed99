//! WebSocket (RFC 6455) over HTTP/1.1 Upgrade: the handshake goes to a server
//! chosen like any request's, its 101 turns the connection into a tunnel, and
//! messages flow both ways. Balancing, persistence, DRAIN, reloads and
//! `timeout.tunnel` apply.

use crate::harness::*;
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tollgate_proxy::lb::AdminState;

/// A WebSocket echo server that prefixes each echo with its name.
pub(crate) struct WsOrigin {
    pub(crate) addr: SocketAddr,
    /// Handshakes accepted.
    pub(crate) accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WsOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn ws_origin(name: &'static str) -> WsOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(stream).await else { return };
                count.fetch_add(1, Ordering::Relaxed);
                ws_echo(ws, name).await;
            });
        }
    });
    WsOrigin { addr, accepted, task }
}

/// Echoes messages until the close: text prefixed with `name` and a colon,
/// binary as it came.
pub(crate) async fn ws_echo<S>(mut ws: tokio_tungstenite::WebSocketStream<S>, name: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(msg)) = ws.next().await {
        let reply = match msg {
            Message::Text(t) => Message::text(format!("{name}:{t}")),
            Message::Binary(b) => Message::binary(b),
            Message::Close(_) => break,
            _ => continue,
        };
        if ws.send(reply).await.is_err() {
            break;
        }
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn ws_connect(proxy: SocketAddr) -> Ws {
    let (ws, resp) = tokio_tungstenite::connect_async(format!("ws://{proxy}/chat")).await.expect("handshake");
    assert_eq!(resp.status(), 101);
    ws
}

/// Sends `text`, returns the echo.
async fn roundtrip(ws: &mut Ws, text: &str) -> String {
    ws.send(Message::text(text)).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => t.to_string(),
        other => panic!("no echo for {text:?}: {other:?}"),
    }
}

fn config(servers: &[(&str, SocketAddr)], backend_extra: &str) -> String {
    let list: Vec<(&str, SocketAddr, u32)> = servers.iter().map(|(n, a)| (*n, *a, 1)).collect();
    simple_config("roundrobin", &list, backend_extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_flow_both_ways_through_the_tunnel() {
    let o = ws_origin("s1").await;
    let p = proxy(&config(&[("s1", o.addr)], ""));
    let mut ws = ws_connect(p.addr("web").unwrap()).await;
    for i in 0..200 {
        assert_eq!(roundtrip(&mut ws, &format!("m{i}")).await, format!("s1:m{i}"));
    }
    // A message larger than one read buffer, both ways.
    let big = vec![7u8; 200_000];
    ws.send(Message::binary(big.clone())).await.unwrap();
    match ws.next().await {
        Some(Ok(Message::Binary(b))) => assert_eq!(&b[..], &big[..]),
        other => panic!("{other:?}"),
    }
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    drop(ws);
    // The tunnel's bytes are counted when it ends.
    let server = p.snapshot().backends[0].servers[0].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.stats.bytes_out.load(Ordering::Relaxed) < 200_000 {
        assert!(std::time::Instant::now() < deadline, "tunnel bytes not counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_are_balanced_and_drain_keeps_open_ones() {
    let (a, b) = (ws_origin("s1").await, ws_origin("s2").await);
    let p = proxy(&config(&[("s1", a.addr), ("s2", b.addr)], ""));
    let web = p.addr("web").unwrap();
    let mut socks = Vec::new();
    for _ in 0..4 {
        socks.push(ws_connect(web).await);
    }
    assert_eq!((a.accepted.load(Ordering::Relaxed), b.accepted.load(Ordering::Relaxed)), (2, 2));
    // Which ones went to s1?
    let mut on_s1 = Vec::new();
    for (i, ws) in socks.iter_mut().enumerate() {
        if roundtrip(ws, "who").await == "s1:who" {
            on_s1.push(i);
        }
    }
    assert_eq!(on_s1.len(), 2);
    // While open, each tunnel counts as a session on its server.
    assert_eq!(p.snapshot().backends[0].servers[0].inflight(), 2);

    // DRAIN s1: its open tunnels go on; new ones go to s2.
    p.snapshot().backends[0].servers[0].set_admin(AdminState::Drain);
    for i in &on_s1 {
        assert_eq!(roundtrip(&mut socks[*i], "still").await, "s1:still");
    }
    for _ in 0..3 {
        let mut ws = ws_connect(web).await;
        assert_eq!(roundtrip(&mut ws, "new").await, "s2:new");
    }
    assert_eq!(a.accepted.load(Ordering::Relaxed), 2);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_does_not_cut_an_open_websocket() {
    let (a, b) = (ws_origin("s1").await, ws_origin("s2").await);
    let p = proxy(&config(&[("s1", a.addr)], ""));
    let mut ws = ws_connect(p.addr("web").unwrap()).await;
    assert_eq!(roundtrip(&mut ws, "before").await, "s1:before");
    for i in 0..5 {
        let toml =
            if i % 2 == 0 { config(&[("s2", b.addr)], "") } else { config(&[("s1", a.addr), ("s2", b.addr)], "") };
        let cfg =
            tollgate_config::parse(&format!("[global]\nworkers = 1\n{toml}"), std::path::Path::new("t.toml")).unwrap();
        tokio::task::block_in_place(|| p.reload(cfg)).expect("reload");
        assert_eq!(roundtrip(&mut ws, &format!("during{i}")).await, format!("s1:during{i}"));
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_after_timeout_tunnel() {
    let o = ws_origin("s1").await;
    let p = proxy(&config(&[("s1", o.addr)], "timeout = { tunnel = \"300ms\" }"));
    let mut ws = ws_connect(p.addr("web").unwrap()).await;
    assert_eq!(roundtrip(&mut ws, "hi").await, "s1:hi");
    let started = std::time::Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.expect("closed by the proxy");
    assert!(!matches!(end, Some(Ok(Message::Text(_)))), "{end:?}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    // The slot is free again.
    let s = p.snapshot().backends[0].servers[0].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while s.inflight() > 0 {
        assert!(std::time::Instant::now() < deadline, "slot still taken");
        tokio::task::yield_now().await;
    }
    p.stop();
}

/// A raw upgrade request, so the test sees exactly what the proxy writes.
fn upgrade_request(extra: &str) -> String {
    format!(
        "GET /chat HTTP/1.1\r\nHost: t\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n{extra}\r\n",
        generate_key()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_carries_persistence_and_a_refused_upgrade_is_a_normal_response() {
    let o = ws_origin("s1").await;
    let cookie = "cookie = { name = \"SERVERID\", mode = \"insert\", indirect = true }";
    let p = proxy(&config(&[("s1", o.addr)], cookie));
    let web = p.addr("web").unwrap();
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(upgrade_request("").as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    assert!(head.contains("upgrade: websocket") && head.contains("connection: upgrade"), "{head}");
    assert!(head.contains("sec-websocket-accept:"), "{head}");
    assert!(head.contains("set-cookie: serverid=s1"), "sticky cookie on the handshake: {head}");

    // An origin that does not upgrade: its answer is an ordinary response.
    let e = echo().await;
    let p2 = proxy(&config(&[("s1", e.addr)], ""));
    let reply =
        raw(p2.addr("web").unwrap(), upgrade_request("Connection: close\r\n").as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 200);
    let body = reply.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(echoed_header(&v, "upgrade").as_deref(), Some("websocket"), "Upgrade reaches the server");
    assert_eq!(echoed_header(&v, "connection").as_deref(), Some("upgrade"));
    p.stop();
    p2.stop();
}

/// WebSocket over TLS (wss://): Tollgate terminates TLS and tunnels the upgraded
/// connection to a plain WebSocket server; messages flow both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_over_tls_are_tunnelled_to_a_plain_server() {
    use crate::tls::{BOTH, Pki, client, tls_bind};
    let pki = Pki::new("wss");
    let (_, file) = pki.leaf("wss.pem", &["wss.test"], false);
    let origin = ws_origin("w").await;
    let toml = config(&[("w", origin.addr)], "")
        .replace("bind = [\"127.0.0.1:0\"]", &format!("bind = [{}]", tls_bind(1, &[&file], "")));
    let p = proxy(&toml);
    let (cfg, _) = client(BOTH, Some(&pki), None);
    let tcp = TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("wss.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await.expect("TLS handshake");
    let (mut ws, resp) = tokio_tungstenite::client_async("wss://wss.test/chat", tls).await.expect("handshake");
    assert_eq!(resp.status(), 101);
    for i in 0..3 {
        ws.send(Message::text(format!("m{i}"))).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => assert_eq!(t.as_str(), format!("w:m{i}")),
            other => panic!("no echo: {other:?}"),
        }
    }
    ws.close(None).await.unwrap();
    assert_eq!(origin.accepted.load(Ordering::Relaxed), 1);
    p.stop();
}
