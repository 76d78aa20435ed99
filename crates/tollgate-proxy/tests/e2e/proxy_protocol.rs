//! `send_proxy = "v1" | "v2"` on a server: every connection to it starts with a
//! PROXY header naming the client; such connections serve only that client (as
//! HAProxy keeps them private); health checks send a LOCAL header.

use crate::harness::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tollgate_proxy::proxy_proto::{Decoded, decode};

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
