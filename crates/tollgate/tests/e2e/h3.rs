//! HTTP/3 to clients (`h3 = true` on a TLS bind): a real QUIC client (quinn
//! with the h3 crate) gets proxied responses, request bodies, static files
//! and errors over the same pipeline as TCP, on the bind's UDP port; and a
//! client that resets a stream mid-body leaves the connection and the proxy
//! serving.

use crate::harness::*;
use crate::tls::Pki;
use bytes::{Buf, Bytes};
use http::{Request, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// An HTTP/3 connection to `addr`, trusting `pki`'s CA, as `name` (SNI).
struct H3 {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    conn: quinn::Connection,
    _driver: tokio::task::JoinHandle<()>,
    _endpoint: quinn::Endpoint,
}

impl H3 {
    async fn connect(addr: SocketAddr, name: &str, pki: &Pki) -> H3 {
        H3::try_connect(addr, name, pki).await.expect("QUIC handshake")
    }

    async fn try_connect(addr: SocketAddr, name: &str, pki: &Pki) -> Result<H3, quinn::ConnectionError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca_der().into()).unwrap();
        let provider = Arc::new(tollgate_config::tls_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let conn =
            tokio::time::timeout(WAIT, endpoint.connect(addr, name).unwrap()).await.expect("QUIC handshake in time")?;
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await.unwrap();
        let driver = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok(H3 { send, conn, _driver: driver, _endpoint: endpoint })
    }

    /// How the proxy closed the connection, waited for at most `WAIT`.
    async fn closed(&self) -> quinn::ConnectionError {
        tokio::time::timeout(WAIT, self.conn.closed()).await.expect("the proxy closes the connection in time")
    }

    /// One request (with `body`), its whole response.
    async fn request(&mut self, req: Request<()>, body: Option<Bytes>) -> (StatusCode, http::HeaderMap, Vec<u8>) {
        let mut stream = self.send.send_request(req).await.unwrap();
        if let Some(b) = body {
            stream.send_data(b).await.unwrap();
        }
        stream.finish().await.unwrap();
        let resp = tokio::time::timeout(WAIT, stream.recv_response()).await.expect("response in time").unwrap();
        let mut got = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.unwrap() {
            while chunk.has_remaining() {
                let c = chunk.chunk();
                got.extend_from_slice(c);
                let n = c.len();
                chunk.advance(n);
            }
        }
        (resp.status(), resp.headers().clone(), got)
    }

    async fn get(&mut self, path: &str) -> (StatusCode, http::HeaderMap, Vec<u8>) {
        self.request(Request::get(format!("https://h3.test{path}")).body(()).unwrap(), None).await
    }
}

const WAIT: Duration = Duration::from_secs(10);

fn config(cert: &str, origin: SocketAddr, root: &Path) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", tls = {{ certs = [{cert:?}] }}, h3 = true }}]\n\
         default_backend = \"app\"\n\
           [[frontend.rule]]\n  when = {{ path_prefix = \"/files/\" }}\n  backend = \"files\"\n\
         [[backend]]\nname = \"app\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{origin}\"\n\
         [[backend]]\nname = \"files\"\nstatic = {{ root = {:?} }}\n",
        root.display().to_string()
    )
}

use std::path::Path;

/// A CA and a certificate for `h3.test` (the file's path), and a directory
/// whose `files/` holds `files` (name, content) for the `files` backend.
fn site(name: &str, files: &[(&str, &[u8])]) -> (Pki, String, tempfile::TempDir) {
    let pki = Pki::new(name);
    let (_, cert) = pki.leaf("h3.pem", &["h3.test"], false);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    for (file, content) in files {
        std::fs::write(root.join(file), content).unwrap();
    }
    (pki, cert, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_bodies_files_and_errors_over_http3() {
    let big: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 253) as u8).collect();
    let (pki, cert, dir) = site("h3", &[("big.bin", &big)]);
    let origin = echo().await;
    let p = proxy(&config(&cert, origin.addr, dir.path()));
    let addr = p.addr("web").unwrap();
    // Over TCP (HTTPS, HTTP/1.1), every response advertises HTTP/3 on the port.
    let (cfg, _) = crate::tls::client(crate::tls::BOTH, Some(&pki), None);
    let mut https = crate::tls::Https::connect(addr, "h3.test", &cfg).await;
    for path in ["/tcp", "/files/big.bin"] {
        let (s, h, _) = https.get("h3.test", path).await;
        let want = format!("h3=\":{}\"; ma=86400", addr.port());
        assert_eq!((s, h.get("alt-svc").map(|v| v.to_str().unwrap())), (StatusCode::OK, Some(want.as_str())), "{path}");
    }
    let mut c = H3::connect(addr, "h3.test", &pki).await;

    // Proxied, to an HTTP/1.1 server: the request as the server sees it.
    let (s, h, body) = c.get("/hello?x=1").await;
    assert_eq!((s, h.get("x-origin").map(|v| v.to_str().unwrap())), (StatusCode::OK, Some("echo")));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((v["method"].as_str(), v["uri"].as_str()), (Some("GET"), Some("/hello?x=1")));
    assert_eq!(echoed_header(&v, "host").as_deref(), Some("h3.test"));
    assert_eq!(echoed_header(&v, "x-forwarded-proto").as_deref(), Some("https"));

    // A request body, with a length and without.
    let upload = Bytes::from(vec![b'u'; 100_000]);
    let req = Request::post("https://h3.test/up").header("content-length", "100000").body(()).unwrap();
    let (s, _, body) = c.request(req, Some(upload.clone())).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((s, v["body_len"].as_u64()), (StatusCode::OK, Some(100_000)));
    let req = Request::post("https://h3.test/up").body(()).unwrap();
    let (s, _, body) = c.request(req, Some(upload)).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((s, v["body_len"].as_u64()), (StatusCode::OK, Some(100_000)), "chunked to the server");

    // A body that does not add up to its Content-Length (RFC 9114 section
    // 4.1.2): the stream fails, the server never sees a byte past the length
    // (its request counts one body of at most 10 bytes, or none), and the
    // connection goes on.
    let before = origin.hits.load(std::sync::atomic::Ordering::SeqCst);
    for (declared, sent) in [("10", 100usize), ("100", 10)] {
        let req = Request::post("https://h3.test/up").header("content-length", declared).body(()).unwrap();
        let mut stream = c.send.send_request(req).await.unwrap();
        let _ = stream.send_data(Bytes::from(vec![b'x'; sent])).await;
        let _ = stream.finish().await;
        let answered = tokio::time::timeout(WAIT, stream.recv_response()).await.expect("an end in time");
        assert!(answered.is_err() || answered.unwrap().status() != StatusCode::OK, "{declared} / {sent}");
    }
    let after = origin.hits.load(std::sync::atomic::Ordering::SeqCst);
    assert!(after - before <= 2, "at most the two heads reached the server");

    // A static file, a missing one, a refused path.
    let (s, h, body) = c.get("/files/big.bin").await;
    assert_eq!((s, h.get("content-length").map(|v| v.to_str().unwrap())), (StatusCode::OK, Some("307200")));
    assert!(body == big, "{} bytes", body.len());
    let (s, _, _) = c.get("/files/missing").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = c.get("/files/a%2f..%2fx").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // The same connection, many streams at once.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let mut send = c.send.clone();
        tasks.push(tokio::spawn(async move {
            let req = Request::get(format!("https://h3.test/n/{i}")).body(()).unwrap();
            let mut stream = send.send_request(req).await.unwrap();
            stream.finish().await.unwrap();
            stream.recv_response().await.unwrap().status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    // 2 requests over TCP, 28 over HTTP/3.
    until_counted(&p, "web", 30).await;
    let h3 = p.snapshot().frontend_stats[0].h3_requests.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(h3, 28, "the HTTP/3 requests are counted as such");
}

/// A client that stops reading a large body and resets its stream: the
/// connection goes on with other streams, and so does the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_mid_body_leaves_the_connection_serving() {
    let (pki, cert, dir) = site("h3-reset", &[("huge.bin", &vec![7u8; 16 << 20]), ("small.txt", b"small")]);
    let origin = echo().await;
    let p = proxy(&config(&cert, origin.addr, dir.path()));
    let addr = p.addr("web").unwrap();
    let mut c = H3::connect(addr, "h3.test", &pki).await;
    for _ in 0..3 {
        let req = Request::get("https://h3.test/files/huge.bin").body(()).unwrap();
        let mut stream = c.send.send_request(req).await.unwrap();
        stream.finish().await.unwrap();
        let resp = stream.recv_response().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let first = stream.recv_data().await.unwrap().expect("some of the body");
        assert!(first.remaining() > 0);
        stream.stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
        drop(stream);
        let (s, _, body) = c.get("/files/small.txt").await;
        assert_eq!((s, &body[..]), (StatusCode::OK, &b"small"[..]));
    }
    // A new connection is served too.
    let mut c2 = H3::connect(addr, "h3.test", &pki).await;
    let (s, _, _) = c2.get("/x").await;
    assert_eq!(s, StatusCode::OK);
}

/// A stop while a large response is on its way: the response ends whole, then
/// the connection closes with H3_NO_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_a_response_finish_then_closes_with_no_error() {
    let (pki, cert, dir) = site("h3-stop", &[("huge.bin", &vec![7u8; 16 << 20])]);
    let origin = echo().await;
    let p = proxy(&config(&cert, origin.addr, dir.path()));
    let addr = p.addr("web").unwrap();
    let c = H3::connect(addr, "h3.test", &pki).await;
    let idle = H3::connect(addr, "h3.test", &pki).await;
    let mut send = c.send.clone();
    let mut stream = send.send_request(Request::get("https://h3.test/files/huge.bin").body(()).unwrap()).await.unwrap();
    stream.finish().await.unwrap();
    assert_eq!(stream.recv_response().await.unwrap().status(), StatusCode::OK);
    let mut got = stream.recv_data().await.unwrap().expect("some of the body").remaining();
    p.stop();
    while let Some(chunk) = tokio::time::timeout(WAIT, stream.recv_data()).await.expect("body in time").unwrap() {
        got += chunk.remaining();
    }
    assert_eq!(got, 16 << 20, "the whole body");
    for conn in [&c, &idle] {
        let e = conn.closed().await;
        let code = quinn::VarInt::from_u32(0x100);
        assert!(matches!(&e, quinn::ConnectionError::ApplicationClosed(a) if a.error_code == code), "{e:?}");
    }
}

/// A server that answers before the request body is in: the answer reaches
/// the client, whose upload is stopped, and the connection goes on (a read
/// of the body was under way: h3-quinn would panic on a stop then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_during_an_upload_reaches_the_client() {
    let (pki, cert, dir) = site("h3-early", &[]);
    let origin = raw_origin_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly").await;
    let p = proxy(&config(&cert, origin.addr, dir.path()));
    let addr = p.addr("web").unwrap();
    let mut c = H3::connect(addr, "h3.test", &pki).await;
    for _ in 0..3 {
        let req = Request::post("https://h3.test/up").header("content-length", "100000").body(()).unwrap();
        let mut stream = c.send.send_request(req).await.unwrap();
        stream.send_data(Bytes::from(vec![b'x'; 1000])).await.unwrap();
        let resp = tokio::time::timeout(WAIT, stream.recv_response()).await.expect("an answer in time").unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = tokio::time::timeout(WAIT, stream.recv_data()).await.expect("body in time").unwrap();
        assert_eq!(body.map(|b| b.chunk().to_vec()).as_deref(), Some(&b"early"[..]));
    }
    assert_eq!(c.get("/after").await.0, StatusCode::OK);
    // Each stream ran to its end (counted and logged; a panic would not be).
    until_counted(&p, "web", 4).await;
}

/// Fields of an HTTP/1.1 connection are refused (RFC 9114 section 4.2), and
/// a body comes through on any method, with or without a length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_fields_are_refused_and_any_method_carries_a_body() {
    let (pki, cert, dir) = site("h3-fields", &[]);
    let origin = echo().await;
    let p = proxy(&config(&cert, origin.addr, dir.path()));
    let addr = p.addr("web").unwrap();
    let mut c = H3::connect(addr, "h3.test", &pki).await;
    let before = origin.hits.load(std::sync::atomic::Ordering::SeqCst);
    for (name, value) in [
        ("connection", "close"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("te", "gzip"),
    ] {
        // The proxy stops reading the stream (H3_MESSAGE_ERROR) and answers 400.
        let req = Request::get("https://h3.test/f").header(name, value).body(()).unwrap();
        let mut stream = c.send.send_request(req).await.unwrap();
        let _ = stream.finish().await;
        let resp = tokio::time::timeout(WAIT, stream.recv_response()).await.expect("an answer in time").unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{name}: {value}");
    }
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), before, "none reached the server");
    let req = Request::get("https://h3.test/f").header("te", "trailers").body(()).unwrap();
    assert_eq!(c.request(req, None).await.0, StatusCode::OK, "TE: trailers is allowed");
    // A GET or DELETE with a body and no length: the body reaches the server
    // (chunked); without one, nothing is framed as a body.
    for (method, body) in [("GET", Some("a body on a GET")), ("DELETE", Some("x")), ("DELETE", None), ("GET", None)] {
        let req = Request::builder().method(method).uri("https://h3.test/b").body(()).unwrap();
        let (s, _, got) = c.request(req, body.map(|b| Bytes::from_static(b.as_bytes()))).await;
        let v: serde_json::Value = serde_json::from_slice(&got).unwrap();
        let len = body.map_or(0, |b| b.len() as u64);
        assert_eq!((s, v["method"].as_str(), v["body_len"].as_u64()), (StatusCode::OK, Some(method), Some(len)));
        let te = echoed_header(&v, "transfer-encoding");
        assert_eq!(te.as_deref(), body.map(|_| "chunked"), "{method} {body:?}");
    }
}

/// A connection that sends no request within `timeout.http_request`, or stays
/// without a stream for `timeout.keep_alive`, is closed with H3_NO_ERROR; a
/// QUIC connection holds a `max_connections` permit, and past the limit one
/// is refused until a permit is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_end_on_their_timers_and_count_toward_max_connections() {
    let (pki, cert, dir) = site("h3-timers", &[]);
    let origin = echo().await;
    let cfg = config(&cert, origin.addr, dir.path()).replace(
        "default_backend = \"app\"\n",
        "default_backend = \"app\"\ntimeout = { http_request = \"400ms\", keep_alive = \"600ms\" }\n",
    );
    // One worker, waiting on its one TCP listener, holds one permit (for the
    // connection it accepts next): two are left for QUIC.
    let p = proxy(&format!("[global]\nworkers = 1\nmax_connections = 3\n{cfg}"));
    let addr = p.addr("web").unwrap();
    let no_error = |e: &quinn::ConnectionError| matches!(e, quinn::ConnectionError::ApplicationClosed(c) if c.error_code == quinn::VarInt::from_u32(0x100));

    // Two connections take the two permits: a third is refused.
    let t0 = std::time::Instant::now();
    let mut a = H3::connect(addr, "h3.test", &pki).await;
    let b = H3::connect(addr, "h3.test", &pki).await;
    assert!(H3::try_connect(addr, "h3.test", &pki).await.is_err(), "past max_connections");
    // `a` makes a request, then stays idle: closed after keep_alive.
    assert_eq!(a.get("/one").await.0, StatusCode::OK);
    let after_request = std::time::Instant::now();
    // `b` never makes one: closed after http_request.
    let e = b.closed().await;
    assert!(no_error(&e), "{e:?}");
    assert!(t0.elapsed() >= Duration::from_millis(350), "{:?}", t0.elapsed());
    let e = a.closed().await;
    assert!(no_error(&e), "{e:?}");
    assert!(after_request.elapsed() >= Duration::from_millis(550), "{:?}", after_request.elapsed());
    // Their permits are back: a new connection is served (each try bounded).
    let mut served = None;
    for _ in 0..50 {
        if let Ok(c) = H3::try_connect(addr, "h3.test", &pki).await {
            served = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c = served.expect("a permit came back");
    assert_eq!(c.get("/two").await.0, StatusCode::OK);
}

/// `h3` needs TLS, TLS 1.3 and HTTP mode: each mistake at its key.
#[test]
fn h3_is_refused_where_it_cannot_be() {
    let pki = Pki::new("h3-config");
    let (_, cert) = pki.leaf("c.pem", &["h3.test"], false);
    for (bind, want) in [
        ("{ addr = \"127.0.0.1:0\", h3 = true }".to_string(), "`h3` needs `tls` on the bind"),
        (
            format!("{{ addr = \"127.0.0.1:0\", tls = {{ certs = [{cert:?}], max_version = \"1.2\" }}, h3 = true }}"),
            "HTTP/3 needs TLS 1.3",
        ),
        (
            format!("{{ addr = \"127.0.0.1:0\", tls = {{ certs = [{cert:?}] }}, accept_proxy = true, h3 = true }}"),
            "not with `accept_proxy`",
        ),
    ] {
        let toml = format!("[[frontend]]\nname = \"web\"\nbind = [{bind}]\n");
        let e = tollgate_config::parse(&toml, Path::new("t.toml")).unwrap_err().to_string();
        assert!(e.contains("frontend[0].bind[0].h3") && e.contains(want), "{want}: {e}");
    }
}
