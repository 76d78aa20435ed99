//! `send_proxy = "v1" | "v2"` on a server: every connection to it starts with a
//! PROXY header naming the client; such connections serve only that client (as
//! HAProxy keeps them private); health checks send a LOCAL header. And
//! `accept_proxy = true` on a bind: the header's addresses stand for the client's.

use crate::harness::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tollgate_wire::proxy_proto::{Decoded, decode};

/// What the origin saw on one connection: the PROXY addresses (None: LOCAL or
/// UNKNOWN), and how many requests came on it (reported per request).
#[derive(Debug)]
struct Seen {
    conn: usize,
    addrs: Option<(SocketAddr, SocketAddr)>,
    head: String,
}

/// An origin that requires a PROXY header on every connection (as nginx's
/// `listen ... proxy_protocol` does) and answers each request with the client
/// address it was told, or 400 and a close when the header is missing.
async fn proxy_origin() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut conns = 0;
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            conns += 1;
            let (tx, conn) = (tx.clone(), conns);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let addrs = loop {
                    match decode(&buf) {
                        Ok(Decoded::Complete(h)) => {
                            buf.drain(..h.len);
                            break h.addrs;
                        }
                        Ok(Decoded::Partial) => {}
                        Err(_) => {
                            let _ = s
                                .write_all(
                                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                                )
                                .await;
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf.drain(..end + 4).collect::<Vec<_>>()).into_owned();
                        let body = addrs.map_or("local".to_string(), |(src, _)| src.to_string());
                        let _ = tx.send(Seen { conn, addrs, head });
                        let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, rx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_version_names_the_client_and_connections_stay_private() {
    for version in ["v1", "v2"] {
        let (origin, mut seen, task) = proxy_origin().await;
        let p = proxy(
            &simple_config("roundrobin", &[("s1", origin, 1)], "")
                .replace("  weight = 1\n", &format!("  weight = 1\n  send_proxy = \"{version}\"\n")),
        );
        let web = p.addr("web").unwrap();

        // Two requests on one client connection: one server connection, one header.
        let stream = tokio::net::TcpStream::connect(web).await.unwrap();
        let me = stream.local_addr().unwrap();
        drop(stream);
        let mut a = Client::connect(web).await;
        let (st, _, body) = a.get("/one").await;
        assert_eq!(st, 200, "{version}");
        let client_addr: SocketAddr = String::from_utf8_lossy(&body).parse().expect("the origin was told an address");
        assert_eq!(client_addr.ip(), me.ip());
        assert_ne!(client_addr.port(), me.port(), "the header names the connection that sent the request");
        let (_, _, body2) = a.get("/two").await;
        assert_eq!(body, body2, "{version}: same client, same server connection");
        let first = seen.recv().await.unwrap();
        let second = seen.recv().await.unwrap();
        assert_eq!(first.conn, second.conn, "{version}: kept for that client");
        let (src, dst) = first.addrs.unwrap();
        assert_eq!((src, dst), (client_addr, web), "{version}: the destination is the proxy's listener");
        assert!(first.head.starts_with("GET /one HTTP/1.1\r\n"), "{}", first.head);

        // Another client never gets that connection, even once the first is idle.
        let (_, _, other) = get(web, "/three").await;
        assert_ne!(other, body, "{version}: another client, its own header");
        let third = seen.recv().await.unwrap();
        assert_ne!(third.conn, first.conn, "{version}: a private connection is not shared");
        p.stop();
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_send_a_local_header() {
    let (origin, mut seen, task) = proxy_origin().await;
    let extra = "check = { type = \"http\", path = \"/health\", interval = \"100ms\" }";
    let p = proxy(
        &simple_config("roundrobin", &[("s1", origin, 1)], extra)
            .replace("  weight = 1\n", "  weight = 1\n  send_proxy = \"v2\"\n"),
    );
    assert!(p.snapshot().backends[0].servers[0].is_up(), "the check passed: the origin accepted its header");
    let check = tokio::time::timeout(Duration::from_secs(5), seen.recv()).await.unwrap().unwrap();
    assert!(check.head.starts_with("HEAD /health "), "{}", check.head);
    assert_eq!(check.addrs, None, "LOCAL: no client addresses");
    p.stop();
    task.abort();
}

fn accepting(backend: &[(&str, SocketAddr, u32)], rules: &str) -> String {
    simple_config("roundrobin", backend, "")
        .replace("bind = [\"127.0.0.1:0\"]", "bind = [{ addr = \"127.0.0.1:0\", accept_proxy = true }]")
        .replace("default_backend = \"b\"\n", &format!("default_backend = \"b\"\n{rules}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_proxy_takes_the_client_address_from_the_header() {
    let e = echo().await;
    let rule = "  [[frontend.rule]]\n  when = { src = [\"198.51.100.0/24\"] }\n  deny = 403\n";
    let p = proxy(&accepting(&[("s1", e.addr, 1)], rule));
    let web = p.addr("web").unwrap();
    let request = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    for v in [tollgate_wire::proxy_proto::Version::V1, tollgate_wire::proxy_proto::Version::V2] {
        let mut bytes = Vec::new();
        let src: SocketAddr = "203.0.113.7:4444".parse().unwrap();
        let dst: SocketAddr = "192.0.2.1:8443".parse().unwrap();
        tollgate_wire::proxy_proto::encode(v, src, dst, &mut bytes);
        bytes.extend_from_slice(request);
        let reply = raw(web, &bytes, Duration::from_secs(5)).await;
        assert_eq!(status_of(&reply), 200, "{v:?}: {reply}");
        let body: serde_json::Value = serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(echoed_header(&body, "x-forwarded-for").as_deref(), Some("203.0.113.7"), "{v:?}");
        assert_eq!(echoed_header(&body, "x-forwarded-port").as_deref(), Some("8443"), "{v:?}");

        // Source rules see the header's address too.
        let mut denied = Vec::new();
        tollgate_wire::proxy_proto::encode(v, "198.51.100.9:1".parse().unwrap(), dst, &mut denied);
        denied.extend_from_slice(request);
        assert_eq!(status_of(&raw(web, &denied, Duration::from_secs(5)).await), 403, "{v:?}");
    }
    // LOCAL / UNKNOWN: the connection's own address applies.
    let reply = raw(web, &[b"PROXY UNKNOWN\r\n".as_slice(), request].concat(), Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 200);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_a_valid_header_is_closed_unanswered() {
    let e = echo().await;
    let p = proxy(&accepting(&[("s1", e.addr, 1)], ""));
    let web = p.addr("web").unwrap();
    for bytes in [
        &b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x21\x31\x00\x00GET / HTTP/1.1\r\n\r\n",
    ] {
        let reply = raw(web, bytes, Duration::from_secs(5)).await;
        assert_eq!(reply, "", "refused without an answer: {}", String::from_utf8_lossy(bytes));
    }
    assert_eq!(e.hits.load(std::sync::atomic::Ordering::Relaxed), 0, "nothing reached the server");
    let errors = p.control().report().unwrap().frontends[0].request_errors;
    assert_eq!(errors, 3);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tollgates_chained_by_the_proxy_protocol_keep_the_client_address() {
    let e = echo().await;
    let inner = proxy(&accepting(&[("s1", e.addr, 1)], ""));
    let outer = proxy(
        &simple_config("roundrobin", &[("inner", inner.addr("web").unwrap(), 1)], "")
            .replace("  weight = 1\n", "  weight = 1\n  send_proxy = \"v2\"\n"),
    );
    let outer_addr = outer.addr("web").unwrap();
    let stream = tokio::net::TcpStream::connect(outer_addr).await.unwrap();
    let me = stream.local_addr().unwrap();
    drop(stream);
    let (st, _, body) = get(outer_addr, "/").await;
    assert_eq!(st, 200);
    let v = json(&body);
    // The outer proxy adds X-Forwarded-For itself; the inner one appends the
    // address the PROXY header gave it, which is the client's, not the outer proxy's port.
    let xff = echoed_header(&v, "x-forwarded-for").unwrap();
    assert_eq!(xff, format!("{0}, {0}", me.ip()), "{v}");
    assert_eq!(echoed_header(&v, "x-forwarded-port").as_deref(), Some(outer_addr.port().to_string().as_str()));
    outer.stop();
    inner.stop();
}

/// A PROXY header, then HTTP/2 with prior knowledge: each stream's server
/// connection carries the header's source and destination, not the proxy's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_after_a_proxy_header_passes_its_addresses_on() {
    let (origin, mut seen, task) = proxy_origin().await;
    let cfg = accepting(&[("s1", origin, 1)], "")
        .replace("accept_proxy = true }", "accept_proxy = true, h2c = true }")
        .replace("  weight = 1\n", "  weight = 1\n  send_proxy = \"v2\"\n");
    let p = proxy(&cfg);
    let web = p.addr("web").unwrap();
    let src: SocketAddr = "203.0.113.7:4444".parse().unwrap();
    let dst: SocketAddr = "192.0.2.1:8443".parse().unwrap();
    let mut tcp = tokio::net::TcpStream::connect(web).await.unwrap();
    let mut header = Vec::new();
    tollgate_wire::proxy_proto::encode(tollgate_wire::proxy_proto::Version::V2, src, dst, &mut header);
    tcp.write_all(&header).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2c handshake after the PROXY header");
    let driver = tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let req = http::Request::get("http://t/h2").body(()).unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(String::from_utf8_lossy(&got), src.to_string());
    let first = seen.recv().await.unwrap();
    assert_eq!(first.addrs, Some((src, dst)), "the server is told the header's addresses");
    drop(send);
    driver.abort();
    p.stop();
    task.abort();
}
