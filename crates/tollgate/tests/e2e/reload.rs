//! Reloading the configuration of a running proxy: no request fails, requests in
//! flight finish, live server state carries over, listeners follow the config,
//! and a config that cannot apply changes nothing. Every wait polls a condition
//! with a deadline.

use crate::harness::*;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tollgate_config::Config;
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::{ReloadError, ReloadReport, Server};

/// Parses `toml` as the harness's `proxy` does (one worker unless it says otherwise).
fn parse(toml: &str) -> Config {
    let toml = if toml.contains("[global]") { toml.to_string() } else { format!("[global]\nworkers = 1\n{toml}") };
    tollgate_config::parse(&toml, Path::new("test.toml")).unwrap_or_else(|e| panic!("test config: {e}\n{toml}"))
}

/// Reloads `p` with `config` (the call blocks: it may run a first round of checks).
fn reload_with(p: &Server, config: Config) -> Result<ReloadReport, ReloadError> {
    tokio::task::block_in_place(|| p.reload(config))
}

fn reload(p: &Server, toml: &str) -> ReloadReport {
    reload_with(p, parse(toml)).unwrap_or_else(|e| panic!("reload refused: {e}\n{toml}"))
}

/// Polls `cond` every 5 ms until it holds; panics after `limit`.
async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    for _ in 0..=limit.as_millis() / 5 {
        if cond() {
            return;
        }
        if start.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what}: not within {limit:?}");
}

/// A frontend `web` (plus `extra_frontends`) and a backend `b` over `servers`
/// (name, addr, extra keys).
fn cfg(global: &str, backend_extra: &str, servers: &[(&str, SocketAddr, &str)], extra_frontends: &str) -> String {
    let mut s = format!(
        "{global}[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n{extra_frontends}\n\
         [[backend]]\nname = \"b\"\n{backend_extra}\n"
    );
    for (name, addr, extra) in servers {
        s.push_str(&format!("[[backend.server]]\nname = \"{name}\"\naddr = \"{addr}\"\n{extra}\n"));
    }
    s
}

fn hits(e: &Echo) -> u64 {
    e.hits.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_reloads_under_load_fail_no_request() {
    let (s1, s2) = (echo().await, echo().await);
    let global = "[global]\nworkers = 2\n";
    let configs = [
        cfg(global, "", &[("s1", s1.addr, ""), ("s2", s2.addr, "")], ""),
        cfg(global, "", &[("s1", s1.addr, "weight = 3"), ("s2", s2.addr, "maxconn = 50")], ""),
        cfg(
            global,
            "balance = \"leastconn\"",
            &[("s2", s2.addr, ""), ("s1", s1.addr, "")],
            "[[frontend.rule]]\nset_response_headers = { \"X-Gen\" = \"3\" }\n",
        ),
    ];
    let p = Arc::new(proxy(&configs[0]));
    let addr = p.addr("web").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for keep_alive in [true, true, true, false, false] {
        let (done, served) = (done.clone(), served.clone());
        clients.spawn(async move {
            let mut c = if keep_alive { Some(Client::connect(addr).await) } else { None };
            for i in 0..1_000_000u32 {
                if done.load(Ordering::Relaxed) {
                    return i;
                }
                let (status, _, body) = match &mut c {
                    Some(c) => c.get("/").await,
                    None => get(addr, "/").await,
                };
                assert!(status.is_success(), "request {i} failed: {status} {}", String::from_utf8_lossy(&body));
                served.fetch_add(1, Ordering::Relaxed);
            }
            panic!("the test did not end");
        });
    }
    for i in 0..20 {
        let before = served.load(Ordering::Relaxed);
        let report = reload(&p, &configs[(i + 1) % configs.len()]);
        assert_eq!(report.binds_kept, 1, "{report}");
        assert!(report.binds_added.is_empty() && report.binds_removed.is_empty(), "{report}");
        assert_eq!(p.addr("web"), Some(addr), "the listener stays");
        // Let traffic run on the new config before the next reload.
        wait_for("requests after a reload", Duration::from_secs(10), || served.load(Ordering::Relaxed) >= before + 20)
            .await;
    }
    done.store(true, Ordering::Relaxed);
    let mut per_client = Vec::new();
    while let Some(r) = clients.join_next().await {
        per_client.push(r.expect("a client saw a failed request"));
    }
    assert!(per_client.iter().all(|n| *n > 0), "every client made requests: {per_client:?}");
    assert!(served.load(Ordering::Relaxed) >= 400);
    assert!(hits(&s1) > 0 && hits(&s2) > 0);
}

/// An origin whose `/slow` answers after `delay`; `started` counts requests received.
struct Slow {
    addr: SocketAddr,
    started: Arc<AtomicU64>,
    _origin: Origin,
}

async fn slow_origin(delay: Duration) -> Slow {
    let started = Arc::new(AtomicU64::new(0));
    let s = started.clone();
    let origin = serve(move |req: Request<Incoming>| {
        let s = s.clone();
        async move {
            if req.uri().path() == "/slow" {
                s.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
            }
            Response::new(Full::new(Bytes::from_static(b"slow done")))
        }
    })
    .await;
    Slow { addr: origin.addr, started, _origin: origin }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_survives_a_reload() {
    let o = slow_origin(Duration::from_millis(800)).await;
    let other = echo().await;
    let p = proxy(&cfg("", "", &[("s1", o.addr, "")], ""));
    let addr = p.addr("web").unwrap();
    let slow = tokio::spawn(async move { get(addr, "/slow").await });
    wait_for("the slow request reaches the origin", Duration::from_secs(5), || o.started.load(Ordering::Relaxed) == 1)
        .await;
    // s1 leaves the config entirely; the request in flight keeps its snapshot.
    let report = reload(&p, &cfg("", "", &[("s2", other.addr, "")], ""));
    assert_eq!(report.servers_removed, ["b/s1"]);
    assert!(!slow.is_finished(), "the request was still in flight during the reload");
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), slow).await.unwrap().unwrap();
    assert_eq!((status.as_u16(), &body[..]), (200, &b"slow done"[..]));
    // New requests go to the new config.
    assert_eq!(get(addr, "/").await.0, 200);
    assert_eq!(hits(&other), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_server_state_carries_over_and_servers_follow_the_config() {
    let (s1, s2, s3, s4) = (echo().await, echo().await, echo().await, echo().await);
    let dead = dead_addr().await;
    let check = "check = { type = \"tcp\", interval = \"100ms\", fall = 2, rise = 2 }";
    let p = proxy(&cfg(
        "",
        check,
        &[("s1", s1.addr, ""), ("s2", s2.addr, ""), ("s3", s3.addr, ""), ("dead", dead, "")],
        "",
    ));
    let old = p.snapshot();
    let b = old.backend("b").unwrap();
    let (o1, o2, od) =
        (b.server("s1").unwrap().clone(), b.server("s2").unwrap().clone(), b.server("dead").unwrap().clone());
    assert!(!od.is_up(), "the first check found it dead");
    for _ in 0..9 {
        assert_eq!(get(p.addr("web").unwrap(), "/").await.0, 200);
    }
    o1.set_admin(AdminState::Maint);
    o2.set_weight(3);
    let s2_requests = o2.stats.requests.load(Ordering::Relaxed);
    assert!(s2_requests > 0);
    let s2_checks = o2.check_status().checks;

    // s1 unchanged, s2 given a maxconn (its config changes), s3 removed, s4 added.
    let report = reload(
        &p,
        &cfg(
            "",
            check,
            &[("s1", s1.addr, ""), ("s2", s2.addr, "maxconn = 100"), ("s4", s4.addr, ""), ("dead", dead, "")],
            "",
        ),
    );
    assert_eq!(report.servers_added, ["b/s4"]);
    assert_eq!(report.servers_removed, ["b/s3"]);
    assert_eq!(report.servers_changed, ["b/s2"]);
    assert_eq!(report.servers_kept, 2, "s1 and dead: {report}");

    let snap = p.snapshot();
    let b = snap.backend("b").unwrap();
    let (n1, n2, n4, nd) =
        (b.server("s1").unwrap(), b.server("s2").unwrap(), b.server("s4").unwrap(), b.server("dead").unwrap());
    assert!(Arc::ptr_eq(n1, &o1), "an unchanged server is kept as it is");
    assert_eq!(n1.admin(), AdminState::Maint);
    assert!(!Arc::ptr_eq(n2, &o2));
    assert_eq!((n2.weight(), n2.cfg.maxconn), (3, Some(100)), "the run-time weight wins");
    assert!(n2.stats.requests.load(Ordering::Relaxed) >= s2_requests, "counters carry over");
    assert!(n2.check_status().checks >= s2_checks, "health counters carry over");
    assert!(!nd.is_up(), "a DOWN server stays DOWN");
    assert_eq!(nd.check_status().downs, 1, "no new first check for a kept server");
    assert!(n4.check_status().checks >= 1, "a new server is checked before it takes traffic");
    assert!(n4.is_up());

    let (h1, h2, h3, h4) = (hits(&s1), hits(&s2), hits(&s3), hits(&s4));
    let addr = p.addr("web").unwrap();
    for _ in 0..40 {
        assert_eq!(get(addr, "/").await.0, 200);
    }
    assert_eq!(hits(&s1), h1, "MAINT kept: no traffic");
    assert_eq!(hits(&s3), h3, "removed: no traffic");
    let (d2, d4) = (hits(&s2) - h2, hits(&s4) - h4);
    assert_eq!(d2 + d4, 40);
    assert_eq!((d2, d4), (30, 10), "weights 3 (kept from run time) and 1");

    // The checker follows: the removed server is no longer checked, the new one is.
    let n4c = n4.check_status().checks;
    let o3 = old.backend("b").unwrap().server("s3").unwrap().clone();
    let o3c = o3.check_status().checks;
    // Two more rounds of the new checker (interval 100 ms) leave time for a stray one.
    wait_for("s4 checked twice more", Duration::from_secs(5), || n4.check_status().checks >= n4c + 2).await;
    assert_eq!(o3.check_status().checks, o3c, "a removed server is not checked any more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_follow_the_config() {
    let s1 = echo().await;
    let base = cfg("", "", &[("s1", s1.addr, "")], "");
    let admin = "[[frontend]]\nname = \"admin\"\nbind = [\"127.0.0.2:0\"]\n[[frontend.rule]]\ndeny = 403\n";
    let p = proxy(&base);
    let web = p.addr("web").unwrap();
    assert_eq!(p.addr("admin"), None);

    let with_admin = format!("{admin}{base}");
    let report = reload(&p, &with_admin);
    assert_eq!(report.frontends_added, ["admin"]);
    assert_eq!((report.binds_added.len(), report.binds_kept), (1, 1), "{report}");
    let admin_addr = p.addr("admin").unwrap();
    assert_eq!(report.binds_added[0], ("admin".to_string(), admin_addr));
    assert_eq!(p.addr("web"), Some(web));
    // The frontends are now in another order: each listener still finds its own.
    let mut held = Client::connect(admin_addr).await;
    assert_eq!(held.get("/").await.0, 403);
    assert_eq!(get(web, "/").await.0, 200);

    let report = reload(&p, &base);
    assert_eq!(report.frontends_removed, ["admin"]);
    assert_eq!(report.binds_removed, [("admin".to_string(), admin_addr)]);
    assert_eq!(p.addr("admin"), None);
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(admin_addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "a removed bind refuses new connections");
    assert_eq!(held.get("/").await.0, 403, "a connection already open keeps its config");
    assert_eq!(get(web, "/").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_cannot_apply_changes_nothing() {
    let s1 = echo().await;
    let base = cfg("", "", &[("s1", s1.addr, "")], "");
    let p = proxy(&base);
    let web = p.addr("web").unwrap();
    let before = p.snapshot();

    // A value the model cannot hold.
    let mut bad = parse(&base);
    bad.frontends[0].default_backend = Some(5);
    let err = reload_with(&p, bad).unwrap_err();
    assert!(matches!(&err, ReloadError::Invalid(p) if p[0].contains("default backend out of range")), "{err}");
    assert!(Arc::ptr_eq(&before, &p.snapshot()), "the running snapshot is untouched");

    // A bind that is taken (by a socket without SO_REUSEPORT): nothing changes either.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let busy = format!(
        "[[frontend]]\nname = \"other\"\nbind = [\"{taken_addr}\"]\n[[frontend.rule]]\ndeny = 403\n{}",
        cfg("", "", &[("s2", s1.addr, "")], "")
    );
    let err = reload_with(&p, parse(&busy)).unwrap_err();
    assert!(matches!(&err, ReloadError::Bind { frontend, .. } if frontend == "other"), "{err}");
    assert!(Arc::ptr_eq(&before, &p.snapshot()));
    assert_eq!(p.addrs(), vec![("web".to_string(), web)]);
    assert_eq!(get(web, "/").await.0, 200, "the old config keeps serving");

    // Settings that need a restart: the rest applies, the report says so.
    let report = reload(&p, &format!("[global]\nworkers = 3\n{}", cfg("", "", &[("s2", s1.addr, "")], "")));
    assert_eq!(report.needs_restart.len(), 1, "{report}");
    assert!(report.needs_restart[0].starts_with("global.workers 1 -> 3"), "{report}");
    assert_eq!(p.snapshot().config.global.workers, 1, "the running value stays in force");
    assert_eq!(report.servers_added, ["b/s2"]);
    assert_eq!(get(web, "/").await.0, 200);
}

/// A second server on an address the first listens on does not start (with
/// SO_REUSEPORT it would, and take half the connections): its error names
/// the address. The first keeps every connection. Rebinding that address
/// inside the first process (a bind written out, moved to another frontend,
/// `defer_accept` changed) is a reload, and works, on two workers' sockets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_on_the_same_address_is_refused() {
    let s1 = echo().await;
    let global = "[global]\nworkers = 2\n";
    let first = proxy(&cfg(global, "", &[("s1", s1.addr, "")], ""));
    let web = first.addr("web").unwrap();

    let on_web = cfg(global, "", &[("s1", s1.addr, "")], "").replace("127.0.0.1:0", &web.to_string());
    let err = tokio::task::block_in_place(|| start_proxy(parse(&on_web))).err().expect("the second start fails");
    let text = err.to_string();
    assert!(text.contains(&format!("{web} is already in use (another tollgate running?)")), "{text}");
    assert!(matches!(err, StartFailed::Server(tollgate_proxy::StartError::Bind { .. })), "{text}");

    // Every connection still reaches the first one.
    let before = hits(&s1);
    for _ in 0..20 {
        assert_eq!(get(web, "/").await.0, 200);
    }
    assert_eq!(hits(&s1), before + 20);

    // The first one rebinds its own address: the bind written out (a new
    // listener on the same port, beside the old until the swap) ...
    let report = reload(&first, &on_web);
    assert_eq!(report.binds_added, [("web".to_string(), web)], "{report}");
    assert_eq!(report.binds_removed, [("web".to_string(), web)], "{report}");
    assert_eq!(get(web, "/").await.0, 200);
    // ... `defer_accept` changed on it ...
    let undeferred = on_web.replace(&format!("\"{web}\""), &format!("{{ addr = \"{web}\", defer_accept = false }}"));
    let report = reload(&first, &undeferred);
    assert_eq!(report.binds_added, [("web".to_string(), web)], "{report}");
    assert_eq!(get(web, "/").await.0, 200);
    // ... and moved to another frontend.
    let moved = undeferred.replace("name = \"web\"", "name = \"www\"");
    let report = reload(&first, &moved);
    assert_eq!(report.binds_added, [("www".to_string(), web)], "{report}");
    for _ in 0..20 {
        assert_eq!(get(web, "/").await.0, 200);
    }
    // Still refused to another instance.
    let err = tokio::task::block_in_place(|| start_proxy(parse(&on_web))).err().expect("refused");
    assert!(err.to_string().contains("is already in use"), "{err}");

    // max_connections: left out in both files, derived at start and kept;
    // written, it needs a restart like `workers`.
    let running = first.snapshot().config.global.max_connections;
    assert!(!first.snapshot().config.global.max_connections_set && running >= 1);
    let report = reload(&first, &moved.replace("workers = 2\n", "workers = 2\nmax_connections = 77\n"));
    assert_eq!(report.needs_restart.len(), 1, "{report}");
    assert!(report.needs_restart[0].starts_with(&format!("global.max_connections {running} -> 77")), "{report}");
    assert_eq!(first.snapshot().config.global.max_connections, running);
    let report = reload(&first, &moved);
    assert!(report.needs_restart.is_empty(), "{report}");
}
