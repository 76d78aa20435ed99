//! In-process test harness: real Tollgate listeners and real origins on 127.0.0.1
//! port 0, and real HTTP clients (hyper) or raw sockets for malformed input.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_proxy::Server;

/// A running Tollgate, started as the binary starts it (the server, then its
/// admin interfaces): the tollgate crate's `Running`.
pub use tollgate::{Running as Proxy, StartFailed, start as start_proxy};

/// Starts Tollgate with `toml` (one worker unless the config says otherwise).
pub fn proxy(toml: &str) -> Proxy {
    let toml = if toml.contains("[global]") { toml.to_string() } else { format!("[global]\nworkers = 1\n{toml}") };
    let cfg =
        tollgate_config::parse(&toml, Path::new("test.toml")).unwrap_or_else(|e| panic!("test config: {e}\n{toml}"));
    start_proxy(cfg).expect("proxy starts")
}

/// A frontend `web` on port 0 with default backend `b` over `servers` (name, addr).
pub fn simple_config(balance: &str, servers: &[(&str, SocketAddr, u32)], extra_backend: &str) -> String {
    let mut s = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\n[[backend]]\nname = \"b\"\nbalance = \"{balance}\"\n{extra_backend}\n"
    );
    for (name, addr, weight) in servers {
        s.push_str(&format!("  [[backend.server]]\n  name = \"{name}\"\n  addr = \"{addr}\"\n  weight = {weight}\n"));
    }
    s
}

/// An address where nothing listens (bound, then closed).
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// An HTTP/1.1 origin on 127.0.0.1 port 0 that answers each request with
/// `handler`; it stops when dropped.
pub struct Origin {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve<F, Fut>(handler: F) -> Origin
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let answer = handler(req);
                    async move { Ok::<_, Infallible>(answer.await) }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Origin { addr, task }
}

/// An origin that answers every request with a JSON echo of what it received:
/// method, target, version, headers (in order, original case) and the body length.
pub struct Echo {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn echo() -> Echo {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let connections = Arc::new(AtomicU64::new(0));
    let (h, c) = (hits.clone(), connections.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            c.fetch_add(1, Ordering::Relaxed);
            let h = h.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let h = h.clone();
                    async move { Ok::<_, Infallible>(echo_handle(req, &h).await) }
                });
                let mut b = http1::Builder::new();
                b.preserve_header_case(true);
                let _ = b.serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Echo { addr, hits, task }
}

async fn echo_handle(req: Request<Incoming>, hits: &AtomicU64) -> Response<Full<Bytes>> {
    hits.fetch_add(1, Ordering::Relaxed);
    let (parts, mut body) = req.into_parts();
    // Count the body without keeping it: the 100 MB test must stay flat.
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => len += f.data_ref().map_or(0, |d| d.len() as u64),
            Err(_) => break,
        }
    }
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let j = serde_json::json!({
        "method": parts.method.as_str(),
        "uri": parts.uri.to_string(),
        "version": format!("{:?}", parts.version),
        "headers": headers,
        "body_len": len,
    });
    let mut resp = Response::new(Full::new(Bytes::from(j.to_string())));
    resp.headers_mut().insert("content-type", "application/json".parse().unwrap());
    resp.headers_mut().insert("x-origin", "echo".parse().unwrap());
    resp
}

/// A keep-alive HTTP/1.1 client connection.
pub struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Client { sender }
    }

    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> (StatusCode, http::HeaderMap, Bytes) {
        self.sender.ready().await.expect("connection ready");
        let resp = self.sender.send_request(req).await.expect("response");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        (parts.status, parts.headers, body)
    }

    pub async fn get(&mut self, path: &str) -> (StatusCode, http::HeaderMap, Bytes) {
        self.send(Request::get(path).header("host", "test.local").body(Full::default()).unwrap()).await
    }
}

/// One request on a new connection.
pub async fn get(addr: SocketAddr, path: &str) -> (StatusCode, http::HeaderMap, Bytes) {
    Client::connect(addr).await.get(path).await
}

/// A request to the admin listener at `addr` with the Host it answers to (its
/// own address; see "Security" in docs/admin.md). State changes also need
/// [`admin_change`]'s JSON content type.
pub fn admin_request(method: &str, addr: SocketAddr, path: &str) -> http::request::Builder {
    Request::builder().method(method).uri(path).header("host", addr.to_string())
}

/// A state change for the admin listener at `addr`: its Host and
/// `Content-Type: application/json`, which the listener requires of a change
/// made without the bearer token.
pub fn admin_change(method: &str, addr: SocketAddr, path: &str) -> http::request::Builder {
    admin_request(method, addr, path).header("content-type", "application/json")
}

/// `GET path` on the admin listener at `addr`, on a new connection.
pub async fn admin_get(addr: SocketAddr, path: &str) -> (StatusCode, http::HeaderMap, Bytes) {
    Client::connect(addr).await.send(admin_request("GET", addr, path).body(Full::default()).unwrap()).await
}

pub fn json(b: &Bytes) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

/// The value of header `name` in an echo response (first one, case-insensitive).
pub fn echoed_header(v: &serde_json::Value, name: &str) -> Option<String> {
    v["headers"]
        .as_array()?
        .iter()
        .find(|p| p[0].as_str().is_some_and(|k| k.eq_ignore_ascii_case(name)))
        .map(|p| p[1].as_str().unwrap_or_default().to_string())
}

/// Writes `bytes` on a new connection and reads until the server closes it (or
/// `limit` passes); returns everything read.
pub async fn raw(addr: SocketAddr, bytes: &[u8], limit: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of the first response in a raw reply.
pub fn status_of(reply: &str) -> u16 {
    reply.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {reply:?}"))
}

/// An origin that records the raw bytes of each request head it receives and
/// answers `200` with an empty body. For checks hyper's types cannot show (the
/// exact header-name case on the wire). It counts the connections it accepts
/// and says when one ends.
pub struct RawOrigin {
    pub addr: SocketAddr,
    pub heads: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Connections accepted so far.
    pub connections: Arc<AtomicU64>,
    /// One message each time a connection ends (the proxy closed it, or it failed).
    pub closed: tokio::sync::mpsc::UnboundedReceiver<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn raw_origin() -> RawOrigin {
    raw_origin_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await
}

/// A [`RawOrigin`] that answers every request with `response`, as it is (so
/// that it can send fields hyper would not).
pub async fn raw_origin_answering(response: &'static [u8]) -> RawOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, heads) = tokio::sync::mpsc::unbounded_channel();
    let (closed_tx, closed) = tokio::sync::mpsc::unbounded_channel();
    let connections = Arc::new(AtomicU64::new(0));
    let c = connections.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            c.fetch_add(1, Ordering::Relaxed);
            let (tx, closed_tx) = (tx.clone(), closed_tx.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut chunk).await {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                        if s.write_all(response).await.is_err() {
                            let _ = closed_tx.send(());
                            return;
                        }
                    }
                }
                let _ = closed_tx.send(());
            });
        }
    });
    RawOrigin { addr, heads, connections, closed, task }
}

/// This process's resident memory, in KiB.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap()))
        .unwrap()
}

/// Waits until frontend `name` of `p` has counted `n` requests (panics after
/// 5 s). A request is counted once its response has been written, so a client
/// can read the response a moment before the count moves: tests that check
/// the counters right after their requests wait for them first.
pub async fn until_counted(p: &Server, name: &str, n: u64) {
    let snap = p.snapshot();
    let fi = snap.config.frontends.iter().position(|f| f.name == name).expect("no such frontend");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while snap.frontend_stats[fi].requests.load(Ordering::Relaxed) < n {
        assert!(std::time::Instant::now() < deadline, "{name} never counted {n} requests");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
