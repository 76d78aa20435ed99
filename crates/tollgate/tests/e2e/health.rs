//! Active and passive health checks against real origins: first check at start,
//! fall and rise, a server killed and restarted under load, passive verdicts.
//! Checks run every 100-200 ms here; every wait polls a condition with a deadline.

use crate::harness::*;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate_proxy::Server;
use tollgate_proxy::lb::ServerRt;
use tollgate_proxy::lb::health::Health;

/// An origin whose answers can be switched: `status` for proxied requests,
/// `check_status` for health checks (User-Agent `tollgate-health`). The body is
/// `"<tag> ready"`. `kill` closes the listener and every connection.
struct Origin {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
    check_status: Arc<AtomicU16>,
    /// Proxied requests (health checks not counted).
    hits: Arc<AtomicU64>,
    checks: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Origin {
    async fn start(addr: SocketAddr, tag: &'static str) -> Origin {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let status = Arc::new(AtomicU16::new(200));
        let check_status = Arc::new(AtomicU16::new(200));
        let hits = Arc::new(AtomicU64::new(0));
        let checks = Arc::new(AtomicU64::new(0));
        let (stop, mut stop_rx) = oneshot::channel::<()>();
        let shared = (status.clone(), check_status.clone(), hits.clone(), checks.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stop_rx => break,
                    r = listener.accept() => {
                        let Ok((stream, _)) = r else { continue };
                        let (status, check_status, hits, checks) = shared.clone();
                        conns.spawn(async move {
                            let svc = service_fn(move |req: Request<Incoming>| {
                                let is_check = req.headers().get("user-agent").is_some_and(|v| v == "tollgate-health");
                                let code = if is_check {
                                    checks.fetch_add(1, Ordering::Relaxed);
                                    check_status.load(Ordering::Relaxed)
                                } else {
                                    hits.fetch_add(1, Ordering::Relaxed);
                                    status.load(Ordering::Relaxed)
                                };
                                let mut resp = Response::new(Full::new(Bytes::from(format!("{tag} ready"))));
                                *resp.status_mut() = http::StatusCode::from_u16(code).unwrap();
                                async move { Ok::<_, Infallible>(resp) }
                            });
                            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
            // Abort every connection and wait until they are gone.
            conns.shutdown().await;
        });
        Origin { addr, status, check_status, hits, checks, stop: Some(stop), task }
    }

    /// Stops listening and closes every connection, then returns.
    async fn kill(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A frontend `web` and a backend `b` over `servers` (name, addr, extra keys).
fn cfg(backend_extra: &str, servers: &[(&str, SocketAddr, &str)]) -> String {
    let mut s = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n{backend_extra}\n"
    );
    for (name, addr, extra) in servers {
        s.push_str(&format!("[[backend.server]]\nname = \"{name}\"\naddr = \"{addr}\"\n{extra}\n"));
    }
    s
}

fn server(p: &Server, name: &str) -> Arc<ServerRt> {
    p.snapshot().backend("b").unwrap().server(name).unwrap().clone()
}

/// Polls `cond` every 10 ms until it holds; panics after `limit`. Returns the time
/// it took.
async fn wait_for(what: &str, limit: Duration, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    for _ in 0..=limit.as_millis() / 10 {
        if cond() {
            return start.elapsed();
        }
        if start.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within {limit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_check_at_start_decides_and_a_down_server_gets_no_request() {
    let dead = dead_addr().await;
    let good = Origin::start(local0(), "good").await;
    let wrong = Origin::start(local0(), "wrong").await;
    let check = "check = { type = \"http\", method = \"GET\", path = \"/health\", interval = \"200ms\", \
                 timeout = \"150ms\", fall = 3, rise = 2, expect_body = \"good\" }\nretries = 3";
    let p = proxy(&cfg(check, &[("dead", dead, ""), ("good", good.addr, ""), ("wrong", wrong.addr, "")]));
    // Server::start returned: the first round is over, and decided alone.
    let (d, g, w) = (server(&p, "dead"), server(&p, "good"), server(&p, "wrong"));
    assert!(!d.is_up(), "a dead server starts DOWN");
    assert!(g.is_up());
    assert!(!w.is_up(), "a body without the expected text fails the check");
    let st = d.check_status();
    assert_eq!(st.health, Health::Down);
    assert_eq!(st.last.as_ref().map(|r| r.text.as_str()), Some("connection refused"), "{st:?}");
    assert!(st.checks >= 1 && st.downs == 1, "{st:?}");
    let text = w.check_status().last.unwrap().text;
    assert_eq!(text, "HTTP status 200, body lacks \"good\"");
    assert_eq!(g.check_status().last.unwrap().text, "HTTP status 200, body matches");

    let addr = p.addr("web").unwrap();
    let mut c = Client::connect(addr).await;
    for _ in 0..20 {
        let (status, _, body) = c.get("/").await;
        assert_eq!((status.as_u16(), &body[..]), (200, &b"good ready"[..]));
    }
    assert_eq!(d.stats.requests.load(Ordering::Relaxed), 0, "the dead server is never chosen");
    assert_eq!(d.stats.connect_errors.load(Ordering::Relaxed), 0, "not even tried");
    assert_eq!(wrong.hits.load(Ordering::Relaxed), 0);
    assert_eq!(good.hits.load(Ordering::Relaxed), 20);
    assert!(good.checks.load(Ordering::Relaxed) >= 1, "checks are told apart from traffic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_503_takes_a_server_down_after_fall_checks_and_200_brings_it_back_after_rise() {
    let o = Origin::start(local0(), "s1").await;
    let check = "check = { type = \"http\", interval = \"100ms\", fall = 3, rise = 2 }";
    let p = proxy(&cfg(check, &[("s1", o.addr, "")]));
    let s = server(&p, "s1");
    let addr = p.addr("web").unwrap();
    assert!(s.is_up());
    assert_eq!(get(addr, "/").await.0, 200);

    o.check_status.store(503, Ordering::Relaxed);
    let checks_before = s.check_status().checks;
    wait_for("DOWN after 503s", Duration::from_secs(5), || !s.is_up()).await;
    let st = s.check_status();
    assert!(st.checks - checks_before >= 3, "at least `fall` checks: {st:?}");
    assert!(st.consecutive_failures >= 3, "{st:?}");
    assert_eq!(st.last.as_ref().map(|r| r.text.as_str()), Some("HTTP status 503"));
    assert_eq!(get(addr, "/").await.0, 503, "no server left");

    o.check_status.store(200, Ordering::Relaxed);
    let checks_before = s.check_status().checks;
    wait_for("UP after 200s", Duration::from_secs(5), || s.is_up()).await;
    let st = s.check_status();
    assert!(st.checks - checks_before >= 2, "at least `rise` checks: {st:?}");
    assert!(st.consecutive_successes >= 2, "{st:?}");
    assert_eq!((st.health, st.downs), (Health::Up, 1));
    assert!(st.since_change < Duration::from_secs(5));
    assert_eq!(get(addr, "/").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_leaves_without_a_failed_request_and_returns_when_restarted() {
    let s1 = Origin::start(local0(), "s1").await;
    let s2 = Origin::start(local0(), "s2").await;
    let s1_addr = s1.addr;
    let (interval, fall) = (Duration::from_millis(100), 2u32);
    let check = "check = { type = \"http\", interval = \"100ms\", fall = 2, rise = 2 }\nretries = 3\nredispatch = true";
    let p = proxy(&cfg(check, &[("s1", s1.addr, ""), ("s2", s2.addr, "")]));
    let srv = server(&p, "s1");
    let mut c = Client::connect(p.addr("web").unwrap()).await;
    let mut sent = 0u32;
    let mut request = async || {
        let (status, _, body) = c.get("/").await;
        assert_eq!(status, 200, "request {sent} failed: {}", String::from_utf8_lossy(&body));
        sent += 1;
        body
    };
    for _ in 0..20 {
        request().await;
    }
    assert!(s1.hits.load(Ordering::Relaxed) >= 5, "s1 takes its share before the kill");

    // Kill s1 between two requests, then keep the requests going until it is out.
    s1.kill().await;
    let killed_at = Instant::now();
    // Bounded by time: 2,000 requests can go in less than the checks take (154 ms seen).
    for _ in 0..1_000_000 {
        if !srv.is_up() || killed_at.elapsed() > Duration::from_secs(5) {
            break;
        }
        request().await;
    }
    let out_after = killed_at.elapsed();
    assert!(!srv.is_up(), "s1 still UP {out_after:?} after it died");
    assert!(out_after < interval * (fall + 1) + Duration::from_millis(500), "out after {out_after:?}");
    assert_eq!(srv.check_status().last.unwrap().text, "connection refused");
    assert!(
        srv.stats.connect_errors.load(Ordering::Relaxed) >= 1,
        "requests met the dead s1 before it was out, and were redispatched"
    );
    for _ in 0..20 {
        assert_eq!(&request().await[..], b"s2 ready");
    }

    // Restart it on the same port: back after `rise` passed checks.
    let s1 = Origin::start(s1_addr, "s1").await;
    let checks_before = srv.check_status().checks;
    for _ in 0..1_000_000 {
        if srv.is_up() && s1.hits.load(Ordering::Relaxed) > 0 {
            break;
        }
        if killed_at.elapsed() > Duration::from_secs(10) {
            panic!("s1 not back in service: {:?}", srv.check_status());
        }
        request().await;
    }
    assert!(srv.is_up(), "{:?}", srv.check_status());
    assert!(srv.check_status().checks - checks_before >= 2, "{:?}", srv.check_status());
    assert!(s1.hits.load(Ordering::Relaxed) > 0, "the restarted s1 takes requests again");
    assert!(sent >= 40, "{sent} requests, none failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_5xx_takes_a_server_down_until_checks_bring_it_back() {
    let o = Origin::start(local0(), "s1").await;
    let other = Origin::start(local0(), "s2").await;
    let check = "check = { type = \"http\", path = \"/health\", interval = \"200ms\", fall = 3, rise = 2 }\n\
                 observe = { errors = 3 }";
    let p = proxy(&cfg(check, &[("s1", o.addr, ""), ("s2", other.addr, "backup = true")]));
    let s = server(&p, "s1");
    let addr = p.addr("web").unwrap();
    let mut c = Client::connect(addr).await;
    assert_eq!(c.get("/").await.0, 200);

    // Proxied requests fail while the health endpoint still answers 200.
    o.status.store(500, Ordering::Relaxed);
    assert_eq!(c.get("/").await.0, 500);
    assert_eq!(c.get("/").await.0, 500);
    assert!(s.is_up(), "2 errors are not 3");
    assert_eq!(s.check_status().passive_errors, 2);
    assert_eq!(c.get("/").await.0, 500);
    // The verdict is taken as the third response arrives: no wait needed.
    assert!(!s.is_up(), "3 consecutive 5xx: DOWN");
    let st = s.check_status();
    assert_eq!((st.health, st.downs, st.observed), (Health::Down, 1, true));
    let (status, _, body) = c.get("/").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"s2 ready"[..]), "the backup serves");

    // Active checks (still passing) bring it back after `rise` of them.
    o.status.store(200, Ordering::Relaxed);
    let checks_before = st.checks;
    wait_for("UP again through active checks", Duration::from_secs(5), || s.is_up()).await;
    assert!(s.check_status().checks - checks_before >= 2, "{:?}", s.check_status());
    let (status, _, body) = c.get("/").await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"s1 ready"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_connection_errors_count_and_check_port_is_used() {
    // Traffic goes to a dead port; checks go to a live one (check_port).
    let dead = dead_addr().await;
    let health = Origin::start(local0(), "health").await;
    let check = "check = { type = \"tcp\", interval = \"200ms\" }\nobserve = { errors = 2 }\nretries = 0";
    let extra = format!("check_port = {}", health.addr.port());
    let p = proxy(&cfg(check, &[("s1", dead, &extra)]));
    let s = server(&p, "s1");
    assert!(s.is_up(), "the check port answers");
    assert_eq!(s.check_status().last.unwrap().text, "TCP connect ok");
    let addr = p.addr("web").unwrap();
    assert_eq!(get(addr, "/").await.0, 502);
    assert!(s.is_up());
    assert_eq!(get(addr, "/").await.0, 502);
    assert!(!s.is_up(), "2 consecutive connection errors: DOWN");
    assert_eq!(get(addr, "/").await.0, 503, "no server UP");
    assert_eq!(s.stats.connect_errors.load(Ordering::Relaxed), 2, "the DOWN server is not tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_check_request_is_exactly_what_the_docs_say() {
    let mut o = raw_origin().await;
    let check = "check = { type = \"http\", path = \"/ping?x=1\", host = \"app.internal\", interval = \"200ms\" }";
    let p = proxy(&cfg(check, &[("s1", o.addr, "")]));
    assert!(server(&p, "s1").is_up());
    let head = tokio::time::timeout(Duration::from_secs(5), o.heads.recv()).await.unwrap().unwrap();
    assert_eq!(
        head,
        "HEAD /ping?x=1 HTTP/1.1\r\nHost: app.internal\r\nUser-Agent: tollgate-health\r\nConnection: close\r\n\r\n"
    );
    // Stopping the server stops the checks.
    p.stop();
    drop(p);
    while o.heads.try_recv().is_ok() {}
    let silence = tokio::time::timeout(Duration::from_millis(600), o.heads.recv()).await;
    assert!(silence.is_err(), "a check after stop: {silence:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_config_checks_the_demo_apps() {
    let s1 = tollgate::demo::spawn(local0(), "s1").await.unwrap();
    let toml = include_str!("../../../../examples/demo.toml");
    let mut cfg = tollgate_config::parse(toml, std::path::Path::new("examples/demo.toml")).unwrap();
    cfg.global.workers = 1;
    cfg.global.access_log = tollgate_config::AccessLogTarget::Off;
    cfg.frontends[0].binds = vec![local0().into()];
    let admin = cfg.admin.as_mut().expect("the demo has an admin listener");
    (admin.bind, admin.sockets) = (Some(local0()), Vec::new());
    let b = Arc::make_mut(&mut cfg.backends[0]);
    b.servers[0].addr = s1.addr();
    b.servers[1].addr = dead_addr().await;
    let p = start_proxy(cfg).unwrap();
    let nodes = p.snapshot().backend("nodes").unwrap().clone();
    assert!(nodes.server("s1").unwrap().is_up(), "HEAD / on the demo app passes");
    assert!(!nodes.server("s2").unwrap().is_up());
    let (status, _, body) = get(p.addr("web").unwrap(), "/").await;
    assert_eq!(status, 200);
    assert_eq!(json(&body)["tag"], "s1");
    let (status, _, body) = admin_get(p.admin_addr().unwrap(), "/api/backends/nodes").await;
    assert_eq!(status, 200);
    let nodes = json(&body);
    assert_eq!((&nodes["servers"][0]["status"], &nodes["servers"][1]["status"]), (&"UP".into(), &"DOWN".into()));
}
