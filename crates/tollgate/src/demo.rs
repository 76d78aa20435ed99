//! The demo app servers behind `tollgate demo`, modelled on the load-balancing lab's
//! node app:
//! - `GET /` answers `{"hello":"world!","ip":…,"host":…,"tag":"s1","sessionViews":N,"id":…}`
//!   and sets a `NODESESSID` cookie when the request carries none it knows;
//!   `sessionViews` counts the requests of that session.
//! - `POST /delay` with `{"delay": 250}` makes every later answer that many ms late
//!   (`{"delay": 0}` undoes it).
//! - `HEAD /` answers 200 without touching sessions (for health checks).
//! - `GET /static/<name>` answers a small text page cacheable for 60 s
//!   (`Cache-Control: public, max-age=60`, an `ETag`), naming the server and
//!   the time it was made, so a response from Tollgate's cache is told apart.
//!
//! Tests use it as a real backend too.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One demo app server's state.
pub struct DemoApp {
    tag: String,
    addr: SocketAddr,
    host: String,
    delay_ms: AtomicU64,
    sessions: Mutex<HashMap<String, u64>>,
    /// Requests served (any method), for tests.
    pub hits: AtomicU64,
    /// TCP connections accepted, for tests of connection reuse.
    pub connections: AtomicU64,
}

/// A running demo app; aborting the handle stops it.
pub struct DemoHandle {
    pub app: Arc<DemoApp>,
    pub task: JoinHandle<()>,
}

impl DemoHandle {
    pub fn addr(&self) -> SocketAddr {
        self.app.addr
    }
}

impl Drop for DemoHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

fn session_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(32);
    while out.len() < 32 {
        let mut r = RandomState::new().build_hasher().finish();
        for _ in 0..8 {
            out.push(ALPHABET[(r & 63) as usize] as char);
            r >>= 6;
        }
    }
    out
}

/// Starts a demo app on `addr` (port 0 picks one) on the current tokio runtime.
pub async fn spawn(addr: SocketAddr, tag: &str) -> std::io::Result<DemoHandle> {
    let listener = TcpListener::bind(addr).await?;
    let app = Arc::new(DemoApp {
        tag: tag.to_string(),
        addr: listener.local_addr()?,
        host: hostname(),
        delay_ms: AtomicU64::new(0),
        sessions: Mutex::new(HashMap::new()),
        hits: AtomicU64::new(0),
        connections: AtomicU64::new(0),
    });
    let a = app.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            a.connections.fetch_add(1, Ordering::Relaxed);
            let a = a.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let a = a.clone();
                    async move { Ok::<_, Infallible>(a.handle(req).await) }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(DemoHandle { app, task })
}

impl DemoApp {
    pub fn tag(&self) -> &str {
        &self.tag
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        self.hits.fetch_add(1, Ordering::Relaxed);
        match (req.method(), req.uri().path()) {
            (&Method::POST, "/delay") => self.set_delay(req).await,
            (&Method::HEAD, _) => json(StatusCode::OK, String::new(), None),
            (&Method::GET, path) if path.starts_with("/static/") => self.static_page(path),
            (&Method::GET, "/") => {
                let delay = self.delay_ms.load(Ordering::Relaxed);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                self.hello(&req)
            }
            _ => json(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#.into(), None),
        }
    }

    fn hello(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let presented = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix("NODESESSID="))
            .map(str::to_string)
            .next();
        let (id, views, new) = {
            let mut sessions = self.sessions.lock();
            match presented.filter(|id| sessions.contains_key(id)) {
                Some(id) => {
                    let v = sessions.get_mut(&id).expect("checked");
                    *v += 1;
                    (id, *v, false)
                }
                None => {
                    let id = session_id();
                    sessions.insert(id.clone(), 1);
                    (id, 1, true)
                }
            }
        };
        // Field order as the lab's app writes it (serde_json's map would sort them).
        let q = |s: &str| serde_json::Value::from(s).to_string();
        let body = format!(
            r#"{{"hello":"world!","ip":{},"host":{},"tag":{},"sessionViews":{views},"id":{}}}"#,
            q(&self.addr.ip().to_string()),
            q(&self.host),
            q(&self.tag),
            q(&id)
        );
        let cookie = new.then(|| format!("NODESESSID={id}; Path=/; HttpOnly"));
        json(StatusCode::OK, body, cookie)
    }

    /// A page the cache may keep for a minute (RFC 9111 section 5.2.2.1).
    fn static_page(&self, path: &str) -> Response<Full<Bytes>> {
        let now = std::time::SystemTime::now();
        let secs = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let body = format!("{path} from {} at {}\n", self.tag, httpdate::fmt_http_date(now));
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
        h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("public, max-age=60"));
        if let Ok(etag) = header::HeaderValue::from_str(&format!("\"{}-{secs}\"", self.tag)) {
            h.insert(header::ETAG, etag);
        }
        resp
    }

    async fn set_delay(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let body = match Limited::new(req.into_body(), 4096).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return json(StatusCode::BAD_REQUEST, r#"{"error":"body too large"}"#.into(), None),
        };
        let delay = serde_json::from_slice::<serde_json::Value>(&body).ok().and_then(|v| v.get("delay")?.as_u64());
        match delay {
            Some(ms) => {
                self.delay_ms.store(ms, Ordering::Relaxed);
                json(StatusCode::OK, format!(r#"{{"message": "New timeout of {ms}ms configured."}}"#), None)
            }
            None => json(StatusCode::BAD_REQUEST, r#"{"error":"expected {\"delay\": <ms>}"}"#.into(), None),
        }
    }
}

fn json(status: StatusCode, body: String, cookie: Option<String>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json; charset=utf-8"));
    if let Some(c) = cookie.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}
