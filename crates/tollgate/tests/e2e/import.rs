//! `tollgate import`: the configs of the seeds (the corpus keeps them as
//! written), translated, loaded and run, with addresses moved to loopback:
//! the TUS upload server (https redirect, basic auth, Host routing), the
//! load-balancing lab (cookie stickiness, DRAIN and MAINT from the command
//! socket, the stats page) and the TLS offload tier (TLS on one frontend,
//! PROXY protocol v2 to the routing frontend), all HAProxy; nginx's default
//! server of the HTTP/2 push page-load test (files over TLS, `ssl on`).

use crate::acme::free_port;
use crate::harness::*;
use crate::tls::{BOTH, Https, Pki, client};
use base64::Engine;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::demo;

fn corpus(name: &str) -> String {
    let format = if name.ends_with(".conf") { "nginx" } else { "haproxy" };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tollgate-import/tests/corpus").join(format).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Translates `cfg` (written into `dir`) and loads the result as `tollgate run` would.
fn import(dir: &Path, cfg: &str) -> (tollgate_config::Config, String) {
    let nginx = cfg.contains("server {");
    let file = dir.join(if nginx { "nginx.conf" } else { "haproxy.cfg" });
    std::fs::write(&file, cfg).unwrap();
    // Absolute paths (/etc/nginx/mime.types) are not this machine's.
    let root = dir.join("no-such-root");
    let imported = tollgate_import::import_file_with(&file, None, Some(&root), &|_| None).unwrap();
    let format = if nginx { tollgate_import::Format::Nginx } else { tollgate_import::Format::Haproxy };
    assert_eq!(imported.format, format);
    assert!(imported.usable);
    let toml_file = dir.join("tollgate.toml");
    std::fs::write(&toml_file, &imported.toml).unwrap();
    let config = tollgate_config::load(&toml_file).unwrap_or_else(|e| panic!("{e}\n{}", imported.toml));
    (config, imported.toml)
}

/// Lines of the seed that name this machine's users and syslog, which the
/// test process cannot use: the rest is translated as written.
fn without(cfg: &str, prefixes: &[&str]) -> String {
    cfg.lines().filter(|l| !prefixes.iter().any(|p| l.trim_start().starts_with(p))).collect::<Vec<_>>().join("\n")
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

fn req(method: &str, host: &str, authorization: Option<&str>) -> Request<Full<Bytes>> {
    let mut r = Request::builder().method(method).uri("/files/").header("host", host);
    if let Some(a) = authorization {
        r = r.header("authorization", a);
    }
    r.body(Full::default()).unwrap()
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tg-import-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_tus_haproxy_config_redirects_asks_for_the_password_and_routes_by_host() {
    let pki = Pki::new("import-tus");
    let (_, cert) = pki.leaf("tus.pem", &["tusdserver.example.com"], false);
    let tusd = echo().await;
    let sock = pki.dir.join("admin.sock");
    let cfg = without(&corpus("01-tus-upload-basic-auth.cfg"), &["log ", "user haproxy", "group haproxy"])
        .replace("bind *:80", "bind 127.0.0.1:0")
        .replace("bind *:443 ssl crt /etc/ssl/my_certs/my_cert.pem", &format!("bind 127.0.0.2:0 ssl crt {cert}"))
        .replace("localhost:1080", &tusd.addr.to_string())
        .replace("/run/haproxy/admin.sock", &sock.display().to_string());
    let (config, toml) = import(&pki.dir, &cfg);
    assert!(toml.contains("auth = { userlist = \"UL1\", realm = \"UserAuth\" }"), "{toml}");
    let p = start_proxy(config).unwrap();
    let (plain, tls) = (p.addrs()[0].1, p.addrs()[1].1);

    // redirect scheme https if !{ ssl_fc } (HAProxy's default code, 302).
    let reply = raw(
        plain,
        b"PATCH /files/1 HTTP/1.1\r\nHost: tusdserver.example.com\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 302, "{reply}");
    assert!(reply.contains("\r\nlocation: https://tusdserver.example.com/files/1\r\n"), "{reply}");

    let (tls_cfg, _) = client(BOTH, Some(&pki), None);
    let mut c = Https::connect(tls, "tusdserver.example.com", &tls_cfg).await;
    let host = "tusdserver.example.com";
    let (status, headers, _) = c.send(req("POST", host, None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], r#"Basic realm="UserAuth", charset="UTF-8""#);
    let wrong = basic("httpuser", "nope");
    assert_eq!(c.send(req("POST", host, Some(&wrong))).await.0, StatusCode::UNAUTHORIZED);
    let (status, _, body) = c.send(req("POST", host, Some(&basic("httpuser", "abcdefghijklmnop")))).await;
    assert_eq!(status, StatusCode::OK);
    let j = json(&body);
    // The two headers the backend sets, and no others of X-Forwarded-*: HAProxy
    // adds them only with option forwardfor, which this config has not.
    assert_eq!(echoed_header(&j, "x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(echoed_header(&j, "x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(echoed_header(&j, "x-forwarded-port"), None);
    // use_backend ... if tusdsvr: other hosts have no backend.
    let (status, _, _) = c.send(req("POST", "other.example.com", Some(&basic("httpuser", "abcdefghijklmnop")))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(tusd.hits.load(Ordering::Relaxed), 1);
    // The stats socket of global is the command socket.
    assert!(cmd(&sock, "show servers state").await.contains("tus-backend"), "the command socket answers");
}

async fn cmd(path: &Path, line: &str) -> String {
    let mut s = tokio::net::UnixStream::connect(path).await.expect("the command socket accepts");
    s.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await.unwrap().unwrap();
    out
}

/// A browser's cookies (name -> value).
type Jar = std::collections::BTreeMap<String, String>;

/// GET / with the cookie jar of one browser; returns the node's tag.
async fn visit(c: &mut Client, jar: &mut Jar) -> String {
    let mut r = Request::get("/").header("host", "192.168.42.42");
    if !jar.is_empty() {
        let cookie: Vec<String> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
        r = r.header("cookie", cookie.join("; "));
    }
    let (status, headers, body) = c.send(r.body(Full::default()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    for sc in headers.get_all("set-cookie") {
        let (k, v) = sc.to_str().unwrap().split(';').next().unwrap().split_once('=').unwrap();
        jar.insert(k.trim().to_string(), v.trim().to_string());
    }
    json(&body)["tag"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_haproxy_config_keeps_sessions_on_their_node_through_drain_and_maint() {
    let dir = scratch("lab");
    let s1 = demo::spawn("127.0.0.1:0".parse().unwrap(), "s1").await.unwrap();
    let s2 = demo::spawn("127.0.0.1:0".parse().unwrap(), "s2").await.unwrap();
    let sock = dir.join("haproxy.sock");
    let cfg = without(&corpus("03-lb-lab-cookie-stats.cfg"), &["log "])
        .replace("bind *:80", "bind 127.0.0.1:0")
        .replace("bind *:1936", "bind 127.0.0.1:0")
        .replace("192.168.42.11:3000", &s1.addr().to_string())
        .replace("192.168.42.22:3000", &s2.addr().to_string())
        .replace("/var/run/haproxy.sock", &sock.display().to_string());
    let (config, _) = import(&dir, &cfg);
    let p = start_proxy(config).unwrap();
    let web = p.addrs()[0].1;

    // Round robin without a cookie; SERVERID then keeps each browser on its node.
    let (mut a, mut b) = (Jar::new(), Jar::new());
    let (mut ca, mut cb) = (Client::connect(web).await, Client::connect(web).await);
    let node_a = visit(&mut ca, &mut a).await;
    let node_b = visit(&mut cb, &mut b).await;
    assert_ne!(node_a, node_b);
    assert_eq!(a["SERVERID"], node_a);
    for _ in 0..20 {
        assert_eq!(visit(&mut ca, &mut a).await, node_a);
        assert_eq!(visit(&mut cb, &mut b).await, node_b);
    }

    // The lab's steps, on the command socket: DRAIN keeps the bound browser...
    let (bound, jar) = if node_a == "s2" { (&mut ca, &mut a) } else { (&mut cb, &mut b) };
    assert_eq!(cmd(&sock, "set server nodes/s2 state drain").await.trim(), "");
    for _ in 0..10 {
        assert_eq!(visit(bound, jar).await, "s2", "DRAIN: a bound browser stays");
    }
    for _ in 0..10 {
        let mut fresh = Client::connect(web).await;
        assert_eq!(visit(&mut fresh, &mut Jar::new()).await, "s1", "DRAIN: new browsers go to s1");
    }
    // ... MAINT moves it to s1, READY balances again.
    cmd(&sock, "set server nodes/s2 state maint").await;
    assert_eq!(visit(bound, jar).await, "s1", "MAINT: redispatched");
    assert_eq!(jar["SERVERID"], "s1", "and bound to it");
    cmd(&sock, "set server nodes/s2 state ready").await;
    let mut tags = Vec::new();
    for _ in 0..4 {
        let mut fresh = Client::connect(web).await;
        tags.push(visit(&mut fresh, &mut Jar::new()).await);
    }
    assert_eq!(tags.iter().filter(|t| *t == "s2").count(), 2, "READY: round robin again: {tags:?}");

    // listen stats: the admin listener, with the password of `stats auth`.
    let admin = p.admin_addr().expect("the stats listen became [admin]");
    let mut c = Client::connect(admin).await;
    let r = Request::get("/").header("host", admin.to_string());
    assert_eq!(c.send(r.body(Full::default()).unwrap()).await.0, StatusCode::UNAUTHORIZED);
    let r = Request::get("/").header("host", admin.to_string()).header("authorization", basic("admin", "admin"));
    let (status, _, body) = c.send(r.body(Full::default()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("nodes"), "the stats page lists the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_offload_haproxy_config_terminates_tls_and_passes_the_client_by_proxy_protocol() {
    let pki = Pki::new("import-offload");
    std::fs::create_dir_all(pki.dir.join("services")).unwrap();
    pki.leaf("services/site.pem", &["myhost.mydomain.tld"], true);
    let nginx = echo().await;
    let routing = free_port();
    let cfg = without(
        &corpus("02-tls-offload-multiprocess.cfg"),
        &["log ", "user haproxy", "group haproxy", "stats socket", "bind :::", "level operator"],
    )
    .replace("bind 0.0.0.0:443", "bind 127.0.0.1:0")
    .replace("/etc/ssl/services/", &format!("{}/", pki.dir.join("services").display()))
    .replace("bind 0.0.0.0:80", "bind 127.0.0.2:0")
    .replace("127.0.0.1:84", &format!("127.0.0.3:{routing}"))
    .replace("127.0.0.1:81", &nginx.addr.to_string())
    .replace("nbproc 7", "nbproc 2");
    let (config, toml) = import(&pki.dir, &cfg);
    assert_eq!(toml.matches("addr = \"127.0.0.1:0\"").count(), 1, "six binds of one address are one listener");
    let p = start_proxy(config).unwrap();
    let tls = p.addr("ssl").unwrap();

    let (tls_cfg, _) = client(BOTH, Some(&pki), None);
    let mut c = Https::connect(tls, "myhost.mydomain.tld", &tls_cfg).await;
    let r = Request::get("/").header("host", "myhost.mydomain.tld").body(Full::default()).unwrap();
    let (status, _, body) = c.send(r).await;
    assert_eq!(status, StatusCode::OK);
    // Through the TLS tier and the routing tier: the client's address came by
    // PROXY v2, and option forwardfor wrote it.
    assert_eq!(echoed_header(&json(&body), "x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(nginx.hits.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn the_nginx_push_test_server_serves_its_files_over_tls() {
    let pki = Pki::new("import-nginx");
    let (_, pem) = pki.leaf("site.pem", &["www.mkcl.org"], false);
    let www = pki.dir.join("www");
    std::fs::create_dir_all(www.join("css")).unwrap();
    std::fs::write(www.join("index.html"), "<link rel=stylesheet href=/css/style.css>hello\n").unwrap();
    std::fs::write(www.join("css/style.css"), "body{}\n").unwrap();
    let cfg = without(&corpus("01-mkcl-default-server.conf"), &["user ", "pid ", "access_log ", "listen [::]"])
        .replace("listen 80 default_server", "listen 127.0.0.1:0 default_server")
        .replace("listen 443 ssl http2 default_server", "listen 127.0.0.2:0 ssl http2 default_server")
        .replace("/etc/nginx/ssl/star_mkcl_org.crt", &pem)
        .replace("/etc/nginx/ssl/mkcl-org.key", &pem)
        .replace("/var/www/html", &www.display().to_string());
    let (config, toml) = import(&pki.dir, &cfg);
    assert!(toml.contains("early_hints = [\"</css/style.css>; rel=preload; as=style\"]"), "{toml}");
    let p = start_proxy(config).unwrap();
    let (tls_cfg, _) = client(BOTH, Some(&pki), None);
    // `ssl on`: both listeners speak TLS, at most 1.2 (ssl_protocols).
    for (_, addr) in p.addrs() {
        let mut c = Https::connect(addr, "www.mkcl.org", &tls_cfg).await;
        let r = Request::get("/index.html").header("host", "www.mkcl.org").body(Full::default()).unwrap();
        let (status, headers, body) = c.send(r).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-type"], "text/html; charset=utf-8");
        assert!(body.ends_with(b"hello\n"));
        // index: / is index.html; try_files ... =404.
        let r = Request::get("/").header("host", "x").body(Full::default()).unwrap();
        assert_eq!(c.send(r).await.0, StatusCode::OK);
        let r = Request::get("/missing.html").header("host", "x").body(Full::default()).unwrap();
        assert_eq!(c.send(r).await.0, StatusCode::NOT_FOUND);
    }
}
