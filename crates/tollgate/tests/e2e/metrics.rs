//! `GET /metrics` on the admin listener after real traffic: the exposition's
//! media type, its values, and that docs/admin.md lists exactly the families it
//! has.

use crate::harness::*;
use std::collections::{BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};
use tollgate_admin::ServerChange;
use tollgate_proxy::lb::AdminState;

/// Sample lines as series -> value, and the families named by `# TYPE`.
fn scrape_text(text: &str) -> (HashMap<String, f64>, BTreeSet<String>) {
    let mut samples = HashMap::new();
    let mut families = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split(' ').next().unwrap().to_string());
        } else if !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {line:?}"));
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
            assert!(samples.insert(series.to_string(), v).is_none(), "series twice: {series}");
        }
    }
    (samples, families)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_real_traffic() {
    let (a, b) = (echo().await, echo().await);
    let dead = dead_addr().await;
    let backend = "check = { type = \"tcp\", interval = \"100ms\", fall = 1, rise = 1 }";
    let toml = format!(
        "[admin]\nbind = \"127.0.0.1:0\"\n\n{}",
        simple_config("roundrobin", &[("s1", a.addr, 1), ("s2", b.addr, 2), ("s3", dead, 1)], backend)
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    let admin = p.admin_addr().unwrap();
    for _ in 0..12 {
        assert_eq!(get(web, "/").await.0, 200);
    }
    p.control()
        .set_server("b", "s2", ServerChange { state: Some(AdminState::Drain), weight: Some(5) })
        .expect("change");
    // The clients have gone; wait until the proxy has seen each of them close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while p.control().report().unwrap().frontends[0].sessions_cur > 0 {
        assert!(std::time::Instant::now() < deadline, "client connections still open");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    let (status, headers, body) = admin_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    let text = String::from_utf8(body.to_vec()).unwrap();
    let (m, families) = scrape_text(&text);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));

    assert_eq!(get(&format!("tollgate_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))), 1.0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let started = get("tollgate_process_start_time_seconds");
    assert!(started <= now && started > now - 120.0, "start time {started}, now {now}");
    assert_eq!(get("tollgate_workers"), 1.0);
    assert_eq!(get("tollgate_reloads_total"), 0.0);

    let fe = "frontend=\"web\"";
    assert_eq!(get(&format!("tollgate_frontend_requests_total{{{fe}}}")), 12.0);
    assert_eq!(get(&format!("tollgate_frontend_connections_total{{{fe}}}")), 12.0);
    assert_eq!(get(&format!("tollgate_frontend_current_connections{{{fe}}}")), 0.0);
    assert_eq!(get(&format!("tollgate_frontend_http_responses_total{{{fe},code=\"2xx\"}}")), 12.0);
    assert_eq!(get(&format!("tollgate_frontend_http_responses_total{{{fe},code=\"5xx\"}}")), 0.0);
    assert!(get(&format!("tollgate_frontend_request_bytes_total{{{fe}}}")) > 12.0 * 16.0);
    assert!(get(&format!("tollgate_frontend_response_bytes_total{{{fe}}}")) > 12.0 * 100.0);
    // Each request timed once, in cumulative buckets; loopback answers come in well under 10 s.
    let d = "tollgate_frontend_request_duration_seconds";
    assert_eq!(get(&format!("{d}_count{{{fe}}}")), 12.0);
    assert_eq!(get(&format!("{d}_bucket{{{fe},le=\"+Inf\"}}")), 12.0);
    assert_eq!(get(&format!("{d}_bucket{{{fe},le=\"10\"}}")), 12.0);
    assert!(get(&format!("{d}_sum{{{fe}}}")) > 0.0);
    let r = "tollgate_backend_response_duration_seconds";
    assert_eq!(get(&format!("{r}_count{{backend=\"b\"}}")), 12.0);
    // Two connections (s1 and s2, reused by the pool after), each timed; s3 refused its connect.
    assert!(get("tollgate_backend_connect_duration_seconds_count{backend=\"b\"}") >= 2.0);
    assert!(get("process_resident_memory_bytes") > 1e6);
    assert!(get("process_open_fds") > 3.0);

    let be = "backend=\"b\"";
    assert_eq!(get(&format!("tollgate_backend_sessions_total{{{be}}}")), 12.0);
    assert_eq!(get(&format!("tollgate_backend_http_responses_total{{{be},code=\"2xx\"}}")), 12.0);
    assert_eq!(get(&format!("tollgate_backend_servers{{{be}}}")), 3.0);
    assert_eq!(get(&format!("tollgate_backend_active_servers{{{be}}}")), 1.0, "s2 drains, s3 is down");
    assert_eq!(get(&format!("tollgate_backend_up{{{be}}}")), 1.0);

    let s = |name: &str| format!("backend=\"b\",server=\"{name}\"");
    let per_server: f64 =
        ["s1", "s2", "s3"].iter().map(|n| get(&format!("tollgate_server_sessions_total{{{}}}", s(n)))).sum();
    assert_eq!(per_server, 12.0);
    assert_eq!(get(&format!("tollgate_server_sessions_total{{{}}}", s("s3"))), 0.0, "a dead server got none");
    assert_eq!(get(&format!("tollgate_server_up{{{}}}", s("s1"))), 1.0);
    assert_eq!(get(&format!("tollgate_server_up{{{}}}", s("s2"))), 1.0, "draining is an admin state, not health");
    assert_eq!(get(&format!("tollgate_server_up{{{}}}", s("s3"))), 0.0);
    assert_eq!(get(&format!("tollgate_server_state{{{},state=\"drain\"}}", s("s2"))), 1.0);
    assert_eq!(get(&format!("tollgate_server_state{{{},state=\"ready\"}}", s("s2"))), 0.0);
    assert_eq!(get(&format!("tollgate_server_state{{{},state=\"ready\"}}", s("s1"))), 1.0);
    assert_eq!(get(&format!("tollgate_server_weight{{{}}}", s("s2"))), 5.0);
    assert_eq!(get(&format!("tollgate_server_weight{{{}}}", s("s1"))), 1.0);
    assert!(get(&format!("tollgate_server_check_failures_total{{{}}}", s("s3"))) >= 1.0);
    assert_eq!(get(&format!("tollgate_server_check_failures_total{{{}}}", s("s1"))), 0.0);
    assert!(get(&format!("tollgate_server_checks_total{{{}}}", s("s1"))) >= 1.0);
    assert_eq!(get(&format!("tollgate_server_downs_total{{{}}}", s("s3"))), 1.0);
    assert_eq!(get(&format!("tollgate_server_connect_errors_total{{{}}}", s("s3"))), 0.0, "checks are not traffic");
    assert!(m.contains_key(&format!("tollgate_server_last_check_duration_seconds{{{}}}", s("s1"))));

    // docs/admin.md lists every family, and no other.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/admin.md")).unwrap();
    let section = doc.split("## Prometheus metrics").nth(1).expect("docs/admin.md has a metrics section");
    let section = section.split("\n## ").next().unwrap();
    let documented: BTreeSet<String> = section
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .filter(|w| (w.starts_with("tollgate_") || w.starts_with("process_")) && !w.ends_with('_'))
        .filter(|w| !w.ends_with("_bucket"))
        .map(str::to_string)
        .collect();
    assert_eq!(documented, families, "docs/admin.md and /metrics disagree");
    p.stop();
}
