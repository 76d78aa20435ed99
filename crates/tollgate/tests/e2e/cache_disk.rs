//! The cache's disk tier against a real origin: objects kept across a
//! restart of Tollgate (with their Age bookkeeping), the directory bounded by
//! its size, objects too large for memory served from disk, purges reaching
//! the disk, ranges cut from a response read from disk.

use crate::cache::{age, cache_status, fetch, field, origin, req, resp, text};
use crate::harness::*;
use http::StatusCode;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;
use tollgate_proxy::Server;

/// Frontend `web` -> backend `b` (zone `main`: `memory`, a disk tier of
/// `disk_size` at `dir`, `max_object`) -> `addr`; an admin listener.
fn disk_cfg(addr: SocketAddr, dir: &Path, memory: &str, disk_size: &str, max_object: &str) -> String {
    format!(
        "[admin]\nbind = \"127.0.0.1:0\"\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\ncache = {{ zone = \"main\" }}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{addr}\"\n\
         [[cache]]\nname = \"main\"\nmemory = \"{memory}\"\nmax_object = \"{max_object}\"\n\
         disk = {{ path = \"{}\", size = \"{disk_size}\" }}\n",
        dir.display()
    )
}

/// Waits until the zone's disk tier has written `n` files (a response is
/// stored just after its last byte went out, and written in the background).
async fn written(p: &Server, n: u64) {
    let zone = p.snapshot().caches[0].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while zone.report().disk.map_or(0, |d| d.writes) < n {
        assert!(std::time::Instant::now() < deadline, "{n} files were not written");
        tokio::task::yield_now().await;
    }
}

/// Stops a server and waits for its workers (and its disk writes).
async fn restart_point(p: Proxy) {
    p.stop();
    tokio::task::spawn_blocking(move || p.join()).await.unwrap();
}

/// Starts Tollgate on `toml` and waits until its disk tier has indexed the
/// files it found.
async fn start(toml: &str) -> Proxy {
    let p = proxy(toml);
    p.snapshot().caches[0].disk_loaded().await;
    p
}

fn zone_report(p: &Server) -> serde_json::Value {
    serde_json::to_value(p.snapshot().caches[0].report()).unwrap()
}

#[tokio::test]
async fn rfc9111_4_2_3_a_restart_keeps_the_stored_responses_and_their_age() {
    let dir = tempfile::tempdir().unwrap();
    let (o, hits) = origin(|_, n| {
        resp(200, &[("cache-control", "max-age=600"), ("age", "5"), ("vary", "accept-language")], &format!("v{n}"))
    })
    .await;
    let toml = disk_cfg(o.addr, dir.path(), "1MiB", "16MiB", "64KiB");
    let p = start(&toml).await;
    let web = p.addr("web").unwrap();
    let (_, h, b) = fetch(web, "/a", &[("accept-language", "fr")]).await;
    assert_eq!((text(&b), cache_status(&h).as_str()), ("v1", "tollgate; fwd=uri-miss; stored"));
    fetch(web, "/a", &[("accept-language", "de")]).await;
    let (_, h, _) = fetch(web, "/a", &[("accept-language", "fr")]).await;
    let before = age(&h);
    written(&p, 2).await;
    restart_point(p).await;

    // Time passes while Tollgate is down: the Age grows by it (RFC 9111
    // section 4.2.3: resident time counts from the stored response_time).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let p = start(&toml).await;
    let web = p.addr("web").unwrap();
    let r = zone_report(&p);
    assert_eq!((r["objects"].as_u64(), r["disk"]["objects"].as_u64()), (Some(0), Some(2)), "{r}");
    let (s, h, b) = fetch(web, "/a", &[("accept-language", "fr")]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "v1"), "the French variant, from disk");
    assert!(cache_status(&h).starts_with("tollgate; hit; ttl="), "{}", cache_status(&h));
    let after = age(&h);
    assert!(after > before && after >= 6, "Age grew across the restart: {before} then {after}");
    let (_, _, b) = fetch(web, "/a", &[("accept-language", "de")]).await;
    assert_eq!(text(&b), "v2", "the other variant too");
    let r = zone_report(&p);
    assert_eq!(r["disk"]["hits"].as_u64(), Some(2), "{r}");
    assert_eq!(r["objects"].as_u64(), Some(2), "disk hits are put back in memory: {r}");
    assert!(cache_status(&fetch(web, "/a", &[("accept-language", "de")]).await.1).contains("hit"));
    assert_eq!(zone_report(&p)["disk"]["hits"].as_u64(), Some(2), "from memory now");
    assert!(cache_status(&fetch(web, "/a", &[("accept-language", "en")]).await.1).contains("fwd=vary-miss"));
    assert_eq!(hits.load(SeqCst), 3, "only the new variant reached the origin");
    // The metrics show both tiers.
    let (_, _, m) = admin_get(p.admin_addr().unwrap(), "/metrics").await;
    let m = text(&m);
    assert!(m.contains("tollgate_cache_disk_hits_total{zone=\"main\"} 2\n"), "{m}");
    assert!(m.contains("tollgate_cache_objects{zone=\"main\",tier=\"disk\"}"), "{m}");
    assert!(m.contains("tollgate_cache_limit_bytes{zone=\"main\",tier=\"disk\"} 16777216\n"), "{m}");
}

#[tokio::test]
async fn the_disk_tier_stays_within_its_size_and_keeps_objects_too_large_for_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (o, hits) = origin(|p, _| {
        let size = if p.uri.path().starts_with("/big") { 200_000 } else { 50_000 };
        resp(200, &[("cache-control", "max-age=600")], &"x".repeat(size))
    })
    .await;
    let toml = disk_cfg(o.addr, dir.path(), "64KiB", "1MiB", "256KiB");
    let p = start(&toml).await;
    let web = p.addr("web").unwrap();
    for i in 0..40 {
        let (s, _, b) = fetch(web, &format!("/o/{i}"), &[]).await;
        assert_eq!((s, b.len()), (StatusCode::OK, 50_000));
        written(&p, i + 1).await;
    }
    let r = zone_report(&p);
    let disk = &r["disk"];
    assert!(disk["bytes"].as_u64().unwrap() <= 1 << 20, "{r}");
    assert!(disk["evictions"].as_u64().unwrap() >= 20, "{r}");
    assert_eq!(disk["objects"].as_u64().unwrap() + disk["evictions"].as_u64().unwrap(), 40, "{r}");
    let on_disk: u64 = walk(dir.path()).iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(on_disk <= 1 << 20, "{on_disk} bytes of files");
    // The newest is still there, the oldest was evicted from both tiers.
    assert!(cache_status(&fetch(web, "/o/39", &[]).await.1).contains("hit"));
    assert!(cache_status(&fetch(web, "/o/0", &[]).await.1).contains("uri-miss"));
    // 200 kB: more than the 64 KiB memory tier holds, kept on disk alone.
    let (_, h, _) = fetch(web, "/big", &[]).await;
    assert_eq!(cache_status(&h), "tollgate; fwd=uri-miss; stored");
    written(&p, 42).await;
    let before = hits.load(SeqCst);
    for _ in 0..2 {
        let (s, h, b) = fetch(web, "/big", &[]).await;
        assert_eq!((s, b.len()), (StatusCode::OK, 200_000));
        assert!(cache_status(&h).contains("hit"), "{}", cache_status(&h));
    }
    // A range of it, cut from the file read back.
    let (s, h, b) = fetch(web, "/big", &[("range", "bytes=199990-")]).await;
    assert_eq!(
        (s, text(&b), field(&h, "content-range")),
        (StatusCode::PARTIAL_CONTENT, "xxxxxxxxxx", "bytes 199990-199999/200000")
    );
    assert_eq!(hits.load(SeqCst), before, "served from disk");
    assert_eq!(zone_report(&p)["disk"]["errors"].as_u64(), Some(0));
}

#[tokio::test]
async fn purge_and_the_admin_api_purge_the_disk_tier() {
    let dir = tempfile::tempdir().unwrap();
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=600")], &format!("v{n}"))).await;
    let toml = disk_cfg(o.addr, dir.path(), "1MiB", "16MiB", "64KiB");
    let p = start(&toml).await;
    let web = p.addr("web").unwrap();
    for path in ["/p/1", "/p/2", "/q/1", "/q/2"] {
        fetch(web, path, &[]).await;
    }
    written(&p, 4).await;
    restart_point(p).await;
    // After a restart the memory tier is empty: what is purged is on disk.
    let p = start(&toml).await;
    let (web, admin) = (p.addr("web").unwrap(), p.admin_addr().unwrap());
    assert_eq!(zone_report(&p)["disk"]["objects"].as_u64(), Some(4));
    let (s, _, b) = req(web, "PURGE", "/p/1", &[]).await;
    assert_eq!((s, text(&b)), (StatusCode::OK, "Purged 1 stored response(s).\n"));
    assert_eq!(req(web, "PURGE", "/p/1", &[]).await.0, StatusCode::NOT_FOUND);
    let r = admin_change("DELETE", admin, "/api/cache/main?prefix=http://test.local/q/");
    let (s, _, b) = Client::connect(admin).await.send(r.body(Default::default()).unwrap()).await;
    assert_eq!((s, json(&b)["purged"].as_u64()), (StatusCode::OK, Some(2)));
    p.snapshot().caches[0].disk_flush().await;
    assert_eq!(walk(dir.path()).len(), 1, "the purged files are deleted");
    let before = hits.load(SeqCst);
    assert!(cache_status(&fetch(web, "/p/2", &[]).await.1).contains("hit"), "the rest stays");
    for path in ["/p/1", "/q/1", "/q/2"] {
        assert!(cache_status(&fetch(web, path, &[]).await.1).contains("uri-miss"), "{path}");
    }
    assert_eq!(hits.load(SeqCst), before + 3);
}

#[tokio::test]
async fn a_reload_keeps_the_disk_tier_and_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    let (o, hits) = origin(|_, n| resp(200, &[("cache-control", "max-age=600")], &format!("v{n}"))).await;
    let toml = disk_cfg(o.addr, dir.path(), "1MiB", "16MiB", "64KiB");
    let p = start(&toml).await;
    let web = p.addr("web").unwrap();
    fetch(web, "/k", &[]).await;
    written(&p, 1).await;
    let disk = p.snapshot().caches[0].shared.disk.clone().unwrap();
    // A new memory size empties the memory tier; the disk tier stays, resized.
    let bigger = disk_cfg(o.addr, dir.path(), "2MiB", "32MiB", "64KiB");
    let parse = |t: &str| tollgate_config::parse(&format!("[global]\nworkers = 1\n{t}"), Path::new("t.toml")).unwrap();
    let report = p.reload(parse(&bigger)).unwrap();
    assert_eq!(report.caches_emptied, ["main"]);
    let zone = p.snapshot().caches[0].clone();
    assert!(std::sync::Arc::ptr_eq(zone.shared.disk.as_ref().unwrap(), &disk), "the same disk tier");
    assert_eq!(zone.report().objects, 0);
    let (_, h, b) = fetch(web, "/k", &[]).await;
    assert_eq!(text(&b), "v1");
    assert!(cache_status(&h).contains("hit"), "from disk: {}", cache_status(&h));
    zone.disk_flush().await;
    assert_eq!(zone.report().disk.unwrap().limit, 32 << 20);
    assert_eq!(hits.load(SeqCst), 1);
}

/// Every file under the zone's directory.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if sub.path().is_dir() {
            out.extend(std::fs::read_dir(sub.path()).unwrap().flatten().map(|e| e.path()));
        }
    }
    out
}
