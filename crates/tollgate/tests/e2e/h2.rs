//! HTTP/2 from clients: ALPN `h2` on TLS binds and h2c with prior knowledge on
//! plain binds, each stream proxied to HTTP/1.1 origins with the same balancing,
//! rules, persistence and errors as HTTP/1.1; flow control on large bodies both
//! ways; the stream limit; rapid-reset protection; GOAWAY on stop; WebSocket
//! over extended CONNECT (RFC 8441). Clients are the `h2` crate's.

use crate::harness::*;
use crate::tls::{BOTH, Pki, client, tls_bind};
use bytes::Bytes;
use h2::client::SendRequest;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(10);

/// An HTTP/2 client connection; its driver runs as a task whose outcome (how
/// the connection ended) the tests can read.
pub(crate) struct H2Client {
    send: SendRequest<Bytes>,
    conn: JoinHandle<Result<(), h2::Error>>,
}

impl H2Client {
    /// h2c with prior knowledge.
    pub(crate) async fn plain(addr: SocketAddr) -> H2Client {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
        H2Client { send, conn: tokio::spawn(conn) }
    }

    /// Over TLS, offering `h2` and `http/1.1` by ALPN as browsers do; returns
    /// the client and the protocol the server chose.
    async fn tls(addr: SocketAddr, pki: &Pki) -> (H2Client, Option<Vec<u8>>) {
        let (cfg, _) = client(BOTH, Some(pki), None);
        let mut cfg = (*cfg).clone();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("h2.test").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.expect("TLS handshake");
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let (send, conn) = h2::client::handshake(tls).await.expect("h2 handshake");
        (H2Client { send, conn: tokio::spawn(conn) }, alpn)
    }

    /// Sends a request with `body` (none: END_STREAM on HEADERS) and reads the
    /// whole response.
    pub(crate) async fn send(&mut self, req: Request<()>, body: Option<Bytes>) -> (StatusCode, HeaderMap, Bytes) {
        send_on(self.sender(), req, body).await
    }

    /// The connection's request handle, for streams sent side by side.
    pub(crate) fn sender(&self) -> SendRequest<Bytes> {
        self.send.clone()
    }

    pub(crate) async fn get(&mut self, uri: &str) -> (StatusCode, HeaderMap, Bytes) {
        self.send(Request::get(uri).body(()).unwrap(), None).await
    }
}

/// Sends a request with `body` (none: END_STREAM on HEADERS) on `send`'s
/// connection and reads the whole response.
pub(crate) async fn send_on(
    send: SendRequest<Bytes>,
    req: Request<()>,
    body: Option<Bytes>,
) -> (StatusCode, HeaderMap, Bytes) {
    let mut send = send.ready().await.expect("connection ready");
    let (resp, stream) = send.send_request(req, body.is_none()).expect("request sent");
    if let Some(b) = body {
        send_body(stream, b).await;
    }
    let resp = tokio::time::timeout(WAIT, resp).await.expect("response in time").expect("response");
    let (parts, body) = resp.into_parts();
    (parts.status, parts.headers, read_body(body).await)
}

/// Sends `data` as the server's window allows, then END_STREAM.
async fn send_body(mut stream: SendStream<Bytes>, mut data: Bytes) {
    while !data.is_empty() {
        stream.reserve_capacity(data.len().min(64 * 1024));
        let n = std::future::poll_fn(|cx| stream.poll_capacity(cx)).await.expect("capacity").expect("stream open");
        let chunk = data.split_to(n.min(data.len()));
        stream.send_data(chunk, false).unwrap();
    }
    stream.send_data(Bytes::new(), true).unwrap();
}

/// Reads a response body to its end, giving the window back as it goes.
async fn read_body(mut body: RecvStream) -> Bytes {
    let mut out = Vec::new();
    while let Some(chunk) = tokio::time::timeout(WAIT, body.data()).await.expect("body in time") {
        let chunk = chunk.expect("body data");
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    Bytes::from(out)
}

/// A frontend `web` with `binds`, `frontend` extra lines, and backend `b`
/// (`balance`, `backend` extra lines) over `servers`.
fn cfg(binds: &str, frontend: &str, backend: &str, servers: &[SocketAddr]) -> String {
    let mut s = format!(
        "[[frontend]]\nname = \"web\"\nbind = [{binds}]\ndefault_backend = \"b\"\n{frontend}\n\
         [[backend]]\nname = \"b\"\n{backend}\n"
    );
    for (i, a) in servers.iter().enumerate() {
        s.push_str(&format!("[[backend.server]]\nname = \"s{i}\"\naddr = \"{a}\"\n"));
    }
    s
}

const H2C: &str = "{ addr = \"127.0.0.1:0\", h2c = true }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_negotiates_h2_by_alpn_forwards_https_and_drops_hop_by_hop_fields() {
    let pki = Pki::new("h2-alpn");
    let (_, file) = pki.leaf("h2.pem", &["h2.test"], false);
    let origin = echo().await;
    let p = proxy(&cfg(&tls_bind(1, &[&file], ""), "", "", &[origin.addr]));
    let addr = p.addr("web").unwrap();
    let (mut c, alpn) = H2Client::tls(addr, &pki).await;
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "h2 is offered first by default");

    let req =
        Request::get("https://h2.test/path?q=1").header("cookie", "a=1").header("cookie", "b=2").body(()).unwrap();
    let (status, headers, body) = c.send(req, None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-origin"], "echo");
    let v = json(&body);
    assert_eq!(v["uri"], "/path?q=1");
    assert_eq!(v["version"], "HTTP/1.1", "the origin speaks HTTP/1.1");
    assert_eq!(echoed_header(&v, "host").as_deref(), Some("h2.test"), ":authority becomes Host");
    assert_eq!(echoed_header(&v, "x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(echoed_header(&v, "x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(echoed_header(&v, "cookie").as_deref(), Some("a=1; b=2"), "cookie crumbs joined (RFC 9113 8.2.3)");

    let post = Request::post("https://h2.test/up").header("content-length", "11").body(()).unwrap();
    let (status, _, body) = c.send(post, Some(Bytes::from_static(b"hello world"))).await;
    assert_eq!((status, json(&body)["body_len"].as_u64()), (StatusCode::OK, Some(11)));

    // A response with connection-specific fields: they must not reach an HTTP/2
    // client (the h2 client refuses such a response as malformed), and its
    // chunked body arrives de-chunked.
    let raw = raw_origin_answering(
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nX-Kept: 2\r\n\
          Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    )
    .await;
    let p2 = proxy(&cfg(&tls_bind(2, &[&file], ""), "", "", &[raw.addr]));
    let (mut c2, _) = H2Client::tls(p2.addr("web").unwrap(), &pki).await;
    for _ in 0..2 {
        let (status, headers, body) = c2.get("https://h2.test/").await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello world"[..]));
        assert_eq!(headers["x-kept"], "2");
        for hop in ["connection", "keep-alive", "x-hop", "transfer-encoding"] {
            assert!(!headers.contains_key(hop), "{hop} in {headers:?}");
        }
        assert!(headers.contains_key("date"));
    }
    until_counted(&p, "web", 2).await;
    let stats = &p.snapshot().frontend_stats[0];
    assert_eq!(stats.h2_requests.load(Ordering::Relaxed), 2);
    assert_eq!(stats.requests.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_streams_large_bodies_both_ways_and_http11_still_works() {
    const BIG: usize = 4 * 1024 * 1024;
    let origin = echo().await;
    let big = serve(|_req| async { Response::new(Full::new(Bytes::from(vec![b'x'; BIG]))) }).await;
    let p = proxy(&cfg(H2C, "", "", &[origin.addr]));
    let addr = p.addr("web").unwrap();
    let mut c = H2Client::plain(addr).await;
    let (status, _, body) = c.get("http://test.local/").await;
    assert_eq!((status, json(&body)["version"].as_str()), (StatusCode::OK, Some("HTTP/1.1")));

    // 4 MiB up, chunked to the origin (no Content-Length), through 256 KiB windows.
    let payload = Bytes::from(vec![7u8; BIG]);
    let (status, _, body) = c.send(Request::put("http://test.local/big").body(()).unwrap(), Some(payload)).await;
    assert_eq!(status, 200);
    assert_eq!(json(&body)["body_len"].as_u64(), Some(BIG as u64));
    let v = json(&body);
    assert_eq!(echoed_header(&v, "transfer-encoding").as_deref(), Some("chunked"));
    assert_eq!(echoed_header(&v, "x-forwarded-proto").as_deref(), Some("http"));

    // The same plain bind still serves HTTP/1.1.
    assert_eq!(get(addr, "/").await.0, 200);

    // 4 MiB down from another origin.
    let p2 = proxy(&cfg(H2C, "", "", &[big.addr]));
    let mut c2 = H2Client::plain(p2.addr("web").unwrap()).await;
    let (status, headers, body) = c2.get("http://test.local/").await;
    assert_eq!((status, body.len()), (StatusCode::OK, BIG));
    assert_eq!(headers["content-length"], BIG.to_string());
    assert!(body.iter().all(|b| *b == b'x'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_on_one_connection_are_balanced_round_robin() {
    let (a, b) = (echo().await, echo().await);
    let p = proxy(&cfg(H2C, "", "balance = \"roundrobin\"", &[a.addr, b.addr]));
    let c = H2Client::plain(p.addr("web").unwrap()).await;
    let mut tasks = Vec::new();
    for i in 0..100 {
        let mut send = c.send.clone();
        tasks.push(tokio::spawn(async move {
            send = send.ready().await.unwrap();
            let req = Request::get(format!("http://test.local/{i}")).body(()).unwrap();
            let (resp, _) = send.send_request(req, true).unwrap();
            let resp = resp.await.unwrap();
            let status = resp.status();
            let body = read_body(resp.into_body()).await;
            (status, json(&body)["uri"].as_str().unwrap().to_string())
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), (StatusCode::OK, format!("/{i}")));
    }
    assert_eq!((a.hits.load(Ordering::Relaxed), b.hits.load(Ordering::Relaxed)), (50, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_redirects_and_denials_answer_the_stream() {
    let dead = dead_addr().await;
    let slow = slow_origin(Duration::from_secs(2)).await;
    let rules = "[[frontend.rule]]\nwhen = { path_prefix = \"/old/\" }\nredirect = { prefix = \"https://new.test\", code = 301 }\n\
                 [[frontend.rule]]\nwhen = { path = \"/secret\" }\ndeny = { status = 403, body = \"no\" }\n\
                 [[frontend.rule]]\nwhen = { path = \"/slow\" }\nbackend = \"slow\"\n\
                 [[frontend.rule]]\nwhen = { path = \"/none\" }\nbackend = \"none\"\n";
    let mut toml = cfg(H2C, rules, "retries = 1", &[dead]);
    toml.push_str(&format!(
        "[[backend]]\nname = \"slow\"\ntimeout = {{ server = \"200ms\" }}\n[[backend.server]]\nname = \"s\"\naddr = \"{}\"\n\
         [[backend]]\nname = \"none\"\n[[backend.server]]\nname = \"m\"\naddr = \"{}\"\n",
        slow.addr, dead
    ));
    let p = proxy(&toml);
    p.snapshot().backend("none").unwrap().server("m").unwrap().set_admin(tollgate_proxy::lb::AdminState::Maint);
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;

    let (status, headers, _) = c.get("http://test.local/old/page?x=1").await;
    assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers["location"], "https://new.test/old/page?x=1");
    let (status, _, body) = c.get("http://test.local/secret").await;
    assert_eq!((status, &body[..]), (StatusCode::FORBIDDEN, &b"no"[..]));
    let (status, headers, body) = c.get("http://test.local/").await;
    assert_eq!(status, 502, "the only server is dead");
    assert_eq!(headers["content-type"], "text/html");
    assert!(String::from_utf8_lossy(&body).contains("502 Bad Gateway"));
    assert_eq!(c.get("http://test.local/none").await.0, 503, "no usable server");
    assert_eq!(c.get("http://test.local/slow").await.0, 504);
    // A plain CONNECT (no :protocol) is not proxied.
    let (status, headers, _) = c.send(Request::connect("test.local:443").body(()).unwrap(), None).await;
    assert_eq!(status, 405);
    assert!(headers.contains_key("allow"));
    // The connection served all of these.
    assert!(!c.conn.is_finished());
    let stats = &p.snapshot().frontend_stats[0];
    assert_eq!(stats.denied.load(Ordering::Relaxed), 1);
    assert_eq!(stats.h2_requests.load(Ordering::Relaxed), 6);
}

/// RFC 9113 section 8.3.1: `:scheme` must suit the target; the origins speak
/// HTTP, so a stream with `:scheme ftp` (or any other but http and https) gets
/// 400 and reaches no server; the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheme_other_than_http_or_https_is_refused() {
    let origin = echo().await;
    let p = proxy(&cfg(H2C, "", "", &[origin.addr]));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    for uri in ["ftp://test.local/file", "gopher://test.local/", "ws://test.local/", "foo+bar://test.local/x"] {
        let (status, _, _) = c.get(uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
    }
    // A request with a body: the 400 may come (and the stream be reset) before
    // the body goes, so its sending may fail.
    let post = Request::post("ftp://test.local/up").body(()).unwrap();
    let (resp, mut body) = c.sender().ready().await.unwrap().send_request(post, false).unwrap();
    let _ = body.send_data(Bytes::from_static(b"data"), true);
    let resp = tokio::time::timeout(WAIT, resp).await.expect("in time").expect("a response");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(origin.hits.load(Ordering::Relaxed), 0, "no server saw them");
    for uri in ["http://test.local/", "https://test.local/"] {
        assert_eq!(c.get(uri).await.0, StatusCode::OK, "{uri}");
    }
    assert_eq!(origin.hits.load(Ordering::Relaxed), 2);
    assert!(!c.conn.is_finished());
    assert_eq!(p.snapshot().frontend_stats[0].request_errors.load(Ordering::Relaxed), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_persistence_binds_streams_to_a_server() {
    let (a, b) = (echo().await, echo().await);
    let p = proxy(&cfg(H2C, "", "cookie = { name = \"SRV\" }", &[a.addr, b.addr]));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    let (_, headers, _) = c.get("http://test.local/").await;
    let set = headers["set-cookie"].to_str().unwrap().to_string();
    let cookie = set.split(';').next().unwrap().to_string();
    assert!(cookie.starts_with("SRV="), "{set}");
    let before = (a.hits.load(Ordering::Relaxed), b.hits.load(Ordering::Relaxed));
    for _ in 0..6 {
        let req = Request::get("http://test.local/").header("cookie", &cookie).body(()).unwrap();
        let (status, headers, _) = c.send(req, None).await;
        assert_eq!(status, 200);
        assert!(!headers.contains_key("set-cookie"), "the client is already bound");
    }
    let after = (a.hits.load(Ordering::Relaxed), b.hits.load(Ordering::Relaxed));
    let moved = (after.0 - before.0, after.1 - before.1);
    assert!(moved == (6, 0) || moved == (0, 6), "all to one server: {moved:?}");
}

/// An origin that holds each request `delay`, counting requests and the most
/// in flight at once.
struct Slow {
    addr: SocketAddr,
    hits: Arc<AtomicU64>,
    peak: Arc<AtomicU64>,
    _origin: Origin,
}

async fn slow_origin(delay: Duration) -> Slow {
    let (hits, peak, now) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (h, pk, n) = (hits.clone(), peak.clone(), now.clone());
    let origin = serve(move |_req| {
        let (h, pk, n) = (h.clone(), pk.clone(), n.clone());
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            let cur = n.fetch_add(1, Ordering::SeqCst) + 1;
            pk.fetch_max(cur, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            n.fetch_sub(1, Ordering::SeqCst);
            Response::new(Full::new(Bytes::from_static(b"slow")))
        }
    })
    .await;
    Slow { addr: origin.addr, hits, peak, _origin: origin }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_streams_holds_the_client_to_its_limit() {
    let slow = slow_origin(Duration::from_millis(300)).await;
    let p = proxy(&cfg(H2C, "h2 = { max_concurrent_streams = 2 }", "", &[slow.addr]));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    // One exchange first, so that the client has Tollgate's SETTINGS: streams
    // opened before it would be refused past the limit (REFUSED_STREAM, as
    // h2spec's case 5.1.2 checks).
    assert_eq!(c.get("http://test.local/").await.0, 200);
    slow.peak.store(0, Ordering::SeqCst);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let mut c = H2Client { send: c.send.clone(), conn: tokio::spawn(async { Ok(()) }) };
        tasks.push(tokio::spawn(async move { c.get("http://test.local/").await.0 }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(slow.peak.load(Ordering::SeqCst), 2, "never more than 2 streams at once");
    assert!(t.elapsed() >= Duration::from_millis(850), "6 requests, 2 at a time, 300 ms each: {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resetting_streams_past_the_limit_gets_goaway_enhance_your_calm() {
    let slow = slow_origin(Duration::from_secs(5)).await;
    let p = proxy(&cfg(H2C, "h2 = { max_resets = 10, reset_window = \"1m\" }", "", &[slow.addr]));
    let c = H2Client::plain(p.addr("web").unwrap()).await;
    let mut send = c.send.clone();
    let mut refused = None;
    for i in 0..30u64 {
        send = match send.ready().await {
            Ok(s) => s,
            Err(e) => {
                refused = Some(e);
                break;
            }
        };
        let (resp, mut stream) = match send.send_request(Request::get("http://test.local/").body(()).unwrap(), true) {
            Ok(x) => x,
            Err(e) => {
                refused = Some(e);
                break;
            }
        };
        // Reset only once Tollgate has the request going to the server.
        let deadline = Instant::now() + WAIT;
        while slow.hits.load(Ordering::SeqCst) <= i && Instant::now() < deadline && !c.conn.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stream.send_reset(Reason::CANCEL);
        drop(resp);
    }
    let ended = tokio::time::timeout(WAIT, c.conn).await.expect("the connection ends").unwrap();
    let e = ended.expect_err("closed with an error");
    assert!(e.is_go_away() && e.is_remote(), "{e:?}");
    assert_eq!(e.reason(), Some(Reason::ENHANCE_YOUR_CALM), "{e:?} (refused: {refused:?})");
    let hits = slow.hits.load(Ordering::SeqCst);
    assert!((11..=12).contains(&hits), "the 11th reset ends the connection: {hits}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_sends_goaway_and_lets_streams_in_flight_finish() {
    let slow = slow_origin(Duration::from_millis(500)).await;
    let p = proxy(&cfg(H2C, "", "", &[slow.addr]));
    let mut c = H2Client::plain(p.addr("web").unwrap()).await;
    let mut send = c.send.clone();
    let in_flight = tokio::spawn(async move {
        send = send.ready().await.unwrap();
        let (resp, _) = send.send_request(Request::get("http://test.local/").body(()).unwrap(), true).unwrap();
        let resp = resp.await.unwrap();
        (resp.status(), read_body(resp.into_body()).await)
    });
    let deadline = Instant::now() + WAIT;
    while slow.hits.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the slow request never reached the origin");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    p.stop();
    let (status, body) = tokio::time::timeout(WAIT, in_flight).await.unwrap().unwrap();
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"slow"[..]), "the stream in flight finished");
    let ended = tokio::time::timeout(WAIT, &mut c.conn).await.expect("the connection closes").unwrap();
    assert!(ended.is_ok(), "a graceful GOAWAY (NO_ERROR): {ended:?}");
    p.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_h2_extended_connect_reaches_an_http11_websocket_server() {
    let ws = crate::websocket::ws_origin("w").await;
    let p = proxy(&cfg(H2C, "", "", &[ws.addr]));
    let c = H2Client::plain(p.addr("web").unwrap()).await;
    let deadline = Instant::now() + WAIT;
    while !c.send.is_extended_connect_protocol_enabled() {
        assert!(Instant::now() < deadline, "no SETTINGS_ENABLE_CONNECT_PROTOCOL from the server");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut req = Request::connect("http://test.local/chat").header("sec-websocket-version", "13").body(()).unwrap();
    req.extensions_mut().insert(h2::ext::Protocol::from("websocket"));
    let mut send = c.send.clone().ready().await.unwrap();
    let (resp, mut up) = send.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200, "RFC 8441: 200 for the server's 101");
    assert!(!resp.headers().contains_key("sec-websocket-accept") && !resp.headers().contains_key("upgrade"));
    let mut down = resp.into_body();
    for msg in ["hello", "again"] {
        // A masked text frame (RFC 6455 section 5.2).
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | msg.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(msg.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        up.send_data(Bytes::from(frame), false).unwrap();
        let want = format!("w:{msg}");
        let mut got = Vec::new();
        while got.len() < 2 + want.len() {
            let chunk = tokio::time::timeout(WAIT, down.data()).await.unwrap().unwrap().unwrap();
            let _ = down.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        assert_eq!(&got[..2], &[0x81, want.len() as u8]);
        assert_eq!(&got[2..], want.as_bytes());
    }
    assert_eq!(ws.accepted.load(Ordering::Relaxed), 1);
    // The client ends its side: the server sees the close and ends too.
    up.send_data(Bytes::from_static(&[0x88, 0x80, 0, 0, 0, 0]), true).unwrap();
    let rest = read_body(down).await;
    assert!(rest.is_empty() || rest[0] == 0x88, "at most a close frame, then END_STREAM: {rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_gets_http2_over_tls() {
    let Some(browser) = crate::cdp::Browser::launch().await else { return };
    browser.ignore_certificate_errors().await.unwrap();
    let pki = Pki::new("h2-browser");
    let (_, file) = pki.leaf("browser.pem", &["localhost"], false);
    let origin = echo().await;
    let p = proxy(&cfg(&tls_bind(1, &[&file], ""), "", "", &[origin.addr]));
    let addr = p.addr("web").unwrap();
    let page = browser.new_page(&format!("https://{addr}/page")).await.unwrap();
    let proto = page.eval("performance.getEntriesByType('navigation')[0].nextHopProtocol").await.unwrap();
    assert_eq!(proto, "h2", "the browser's protocol to Tollgate");
    let seen = page.eval("document.body.innerText").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(seen.as_str().unwrap()).unwrap();
    assert_eq!(v["uri"], "/page");
    assert_eq!(echoed_header(&v, "x-forwarded-proto").as_deref(), Some("https"));
    assert!(p.snapshot().frontend_stats[0].h2_requests.load(Ordering::Relaxed) >= 1);
}

/// A server that answers before the request body ends: the stream stays open to
/// read the rest, so DATA beyond the request's Content-Length still gets the
/// stream error PROTOCOL_ERROR (RFC 9113 8.1.1), not a quiet NO_ERROR reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_longer_than_its_content_length_is_a_protocol_error_even_after_an_early_answer() {
    let origin = serve(|_req| async { http::Response::new(Full::new(Bytes::from_static(b"early\n"))) }).await;
    let p = proxy(&cfg(H2C, "", "", &[origin.addr]));
    let c = H2Client::plain(p.addr("web").unwrap()).await;
    let mut send = c.send.clone().ready().await.unwrap();
    let req = Request::post("http://t/up").header("content-length", "4").body(()).unwrap();
    let (resp, mut stream) = send.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.expect("the early answer").unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(&read_body(resp.into_body()).await[..], b"early\n");
    // Without END_STREAM: the client's side stays open to hear the reset. (Had the
    // proxy dropped the stream already, this fails and the reset says NO_ERROR.)
    let _ = stream.send_data(Bytes::from_static(b"ten bytes!"), false);
    let reason = tokio::time::timeout(WAIT, std::future::poll_fn(|cx| stream.poll_reset(cx)))
        .await
        .expect("the stream is reset")
        .expect("a reset reason");
    assert_eq!(reason, Reason::PROTOCOL_ERROR);
}

/// `curl --http2 https://...` negotiates h2 by ALPN and gets the origin's answer
/// (curl built with nghttp2, as Debian's is). Skipped without curl, except under
/// CI, where .ci/run installs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_http2_negotiates_h2_by_alpn() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        assert!(!crate::cdp::in_ci(), "curl not found, and CI is set: .ci/run installs it");
        eprintln!("curl not installed: skipped");
        return;
    }
    let pki = Pki::new("h2-curl");
    let (_, file) = pki.leaf("h2.pem", &["h2.test"], false);
    let ca = pki.dir.join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let origin = echo().await;
    let p = proxy(&cfg(&tls_bind(1, &[&file], ""), "", "", &[origin.addr]));
    let addr = p.addr("web").unwrap();
    let args = [
        "--http2".to_string(),
        "-sS".into(),
        "--max-time".into(),
        "10".into(),
        "--cacert".into(),
        ca.display().to_string(),
        "--resolve".into(),
        format!("h2.test:{}:{}", addr.port(), addr.ip()),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_version} %{http_code}".into(),
        format!("https://h2.test:{}/curl", addr.port()),
    ];
    let out = tokio::task::spawn_blocking(move || std::process::Command::new("curl").args(&args).output())
        .await
        .unwrap()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "curl failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text, "2 200", "HTTP/2 by ALPN, and the origin's 200");
    assert_eq!(origin.hits.load(Ordering::Relaxed), 1);
}

/// On an h2c bind, one `timeout.http_request` (600 ms) covers telling HTTP/2
/// from HTTP/1.1 and the request head, as on a plain bind: a half-sent
/// HTTP/1.1 request line gets 408, and an HTTP/2 preface (raw, or a client's
/// whole handshake) with no request after it is closed (GOAWAY), each
/// not before the setting and well before twice it (the sniffing's timer and
/// the head's followed each other). A connection that sent a request is not
/// held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_binds_time_the_request_head_once() {
    let limit = Duration::from_millis(600);
    let origin = echo().await;
    let plain = "{ addr = \"127.0.0.2:0\", h2c = false }";
    let timeout = "timeout = { http_request = \"600ms\", keep_alive = \"10s\" }";
    let p = proxy(&cfg(&format!("{H2C}, {plain}"), timeout, "", &[origin.addr]));
    let (h2c, plain) = (p.addrs()[0].1, p.addrs()[1].1);
    let within = |took: Duration, what: &str| {
        assert!(took >= limit && took < limit * 3 / 2, "{what}: {took:?}, for a timeout of {limit:?}");
    };
    for (addr, bytes) in [(h2c, &b"GET / HT"[..]), (plain, b"GET / HT"), (h2c, b"GET / HTTP/1.1\r\nHost: a\r\n")] {
        let t = Instant::now();
        let reply = raw(addr, bytes, Duration::from_secs(5)).await;
        within(t.elapsed(), &format!("{addr} {:?}", String::from_utf8_lossy(bytes)));
        assert_eq!(status_of(&reply), 408, "{reply}");
    }
    let t = Instant::now();
    let reply = raw(h2c, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Duration::from_secs(5)).await;
    within(t.elapsed(), "the preface alone");
    assert!(reply.as_bytes().windows(2).any(|w| w == [0, 0]), "the server's SETTINGS at least: {reply:?}");

    let t = Instant::now();
    let c = H2Client::plain(h2c).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), c.conn).await.expect("the connection ended");
    within(t.elapsed(), "a handshake and no request");
    assert!(ended.unwrap().is_ok(), "closed with GOAWAY NO_ERROR");

    let mut c = H2Client::plain(h2c).await;
    assert_eq!(c.get("http://test.local/").await.0, StatusCode::OK);
    tokio::time::sleep(limit * 3 / 2).await;
    assert_eq!(c.get("http://test.local/").await.0, StatusCode::OK, "past the head timer, within keep_alive");
    assert_eq!(origin.hits.load(Ordering::Relaxed), 2);
}

/// The frames in `bytes` as (type, stream id), up to the last whole one.
fn frames(mut bytes: &[u8]) -> Vec<(u8, u32)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
        if bytes.len() < 9 + len {
            break;
        }
        out.push((bytes[3], stream));
        bytes = &bytes[9 + len..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_answers_the_goaway_is_dropped_after_timeout_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = echo().await;
    let timeout = "timeout = { keep_alive = \"300ms\", client = \"500ms\" }";
    let p = proxy(&cfg(H2C, timeout, "", &[origin.addr]));
    let mut s = TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    // The preface, an empty SETTINGS and one GET on stream 1 (HPACK: :method
    // GET, :scheme http, :path /, :authority a); then only reads: no SETTINGS
    // ack and no PING answer, ever.
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    let block = [0x82, 0x86, 0x84, 0x41, 0x01, b'a'];
    out.extend_from_slice(&[0, 0, block.len() as u8, 0x1, 0x5, 0, 0, 0, 1]);
    out.extend_from_slice(&block);
    s.write_all(&out).await.unwrap();
    let start = Instant::now();
    let (mut got, mut buf) = (Vec::new(), vec![0u8; 64 * 1024]);
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("still open 10 s after the request: {:?}", frames(&got)),
        }
    }
    let took = start.elapsed();
    let f = frames(&got);
    assert!(f.contains(&(0x1, 1)), "the response HEADERS: {f:?}");
    assert!(f.contains(&(0x7, 0)), "a GOAWAY: {f:?}");
    // keep_alive (300 ms) after the response, then client (500 ms) for an answer.
    assert!(took >= Duration::from_millis(800) && took < Duration::from_secs(3), "closed after {took:?}");
}
