//! Basic auth end to end: userlists with bcrypt, SHA-512 / SHA-256 crypt and
//! insecure passwords; `auth` on a frontend, a rule and a backend; 401 with the
//! realm; remembered passwords; the TUS example (TLS offload, redirect to
//! HTTPS, Host rule, health checks, basic auth).

use crate::harness::*;
use crate::tls::{BOTH, Https, Pki, client};
use base64::Engine;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use sha_crypt::{CustomizedPasswordHasher, Params, ShaCrypt};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tollgate_proxy::Server;

/// A userlist `team`: alice (bcrypt `$2y$`), bob (SHA-512 crypt), dave (SHA-256
/// crypt), all made here by the crates, and carol (insecure).
fn team() -> String {
    let alice = bcrypt::hash_with_salt("alice's secret", 4, *b"tollgate-e2e-sal")
        .unwrap()
        .format_for_version(bcrypt::Version::TwoY);
    let sha = |alg: ShaCrypt, pw: &str| {
        alg.hash_password_customized(pw.as_bytes(), b"e2esalt", None, None, Params::new(1000).unwrap())
            .unwrap()
            .as_str()
            .to_string()
    };
    let bob = sha(ShaCrypt::SHA512, "bob's secret");
    let dave = sha(ShaCrypt::SHA256, "dave's secret");
    assert!(alice.starts_with("$2y$04$") && bob.starts_with("$6$") && dave.starts_with("$5$"));
    format!(
        "[[userlist]]\nname = \"team\"\nusers = [\n  {{ name = \"alice\", password = \"{alice}\" }},\n  \
         {{ name = \"bob\", password = \"{bob}\" }},\n  {{ name = \"dave\", password = \"{dave}\" }},\n  \
         {{ name = \"carol\", insecure_password = \"carol's secret\" }},\n]\n"
    )
}

/// `userlists`, then a frontend `web` (with `frontend_extra`: its `auth`,
/// `error_pages`, rules) whose default backend `b` is `origin`.
fn one_backend(userlists: &str, frontend_extra: &str, origin: SocketAddr) -> String {
    format!(
        "{userlists}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         {frontend_extra}\n[[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s1\"\naddr = \"{origin}\"\n"
    )
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

fn req(method: &str, path: &str, host: &str, authorization: Option<&str>) -> Request<Full<Bytes>> {
    let mut r = Request::builder().method(method).uri(path).header("host", host);
    if let Some(a) = authorization {
        r = r.header("authorization", a);
    }
    r.body(Full::default()).unwrap()
}

/// The number of bcrypt / SHA-crypt checks userlist `name` has run.
fn hash_checks(p: &Server, name: &str) -> u64 {
    p.snapshot().auth.userlist(name).unwrap().hash_checks()
}

const CHALLENGE: &str = r#"Basic realm="Team \"A\"", charset="UTF-8""#;

#[tokio::test]
async fn frontend_auth_answers_401_with_the_realm_and_passes_each_kind_of_password() {
    let origin = echo().await;
    let dir = std::env::temp_dir().join(format!("tollgate-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("401.html");
    std::fs::write(&page, "<p>who are you?</p>\n").unwrap();
    let frontend = format!(
        "auth = {{ userlist = \"team\", realm = 'Team \"A\"' }}\nerror_pages = {{ 401 = {:?} }}",
        page.display().to_string()
    );
    let toml = one_backend(&team(), &frontend, origin.addr);
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();

    // One keep-alive connection: no credentials, wrong ones, then the right ones.
    let mut c = Client::connect(addr).await;
    let (status, headers, body) = c.send(req("GET", "/", "a.test", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], CHALLENGE);
    assert_eq!(&body[..], b"<p>who are you?</p>\n", "the frontend's error page for 401");
    for wrong in [basic("alice", "alice's secreT"), basic("mallory", "alice's secret"), "Bearer abc".into()] {
        let (status, headers, _) = c.send(req("GET", "/", "a.test", Some(&wrong))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}");
        assert_eq!(headers["www-authenticate"], CHALLENGE);
    }
    assert_eq!(origin.hits.load(Ordering::Relaxed), 0, "nothing reached the server");
    let alice = basic("alice", "alice's secret");
    let (status, _, body) = c.send(req("GET", "/in", "a.test", Some(&alice))).await;
    assert_eq!(status, StatusCode::OK, "the connection stayed open after the 401s");
    // Forwarded as HAProxy does.
    assert_eq!(echoed_header(&json(&body), "authorization"), Some(alice.clone()));

    for (user, password) in [("bob", "bob's secret"), ("dave", "dave's secret"), ("carol", "carol's secret")] {
        let mut c = Client::connect(addr).await;
        let (status, _, _) = c.send(req("GET", "/", "a.test", Some(&basic(user, password)))).await;
        assert_eq!(status, StatusCode::OK, "{user}");
        let (status, _, _) = c.send(req("GET", "/", "a.test", Some(&basic(user, "nope")))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{user}");
    }
    assert_eq!(origin.hits.load(Ordering::Relaxed), 4);
}

/// A password that passed is remembered: a keep-alive client (or another
/// connection) sending it again costs no second bcrypt; wrong ones always do.
#[tokio::test]
async fn a_password_that_passed_is_checked_once() {
    let origin = echo().await;
    let toml = one_backend(&team(), "auth = { userlist = \"team\" }", origin.addr);
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();
    let alice = basic("alice", "alice's secret");
    let mut c = Client::connect(addr).await;
    for _ in 0..5 {
        assert_eq!(c.send(req("GET", "/", "a.test", Some(&alice))).await.0, StatusCode::OK);
    }
    assert_eq!(Client::connect(addr).await.send(req("GET", "/", "a", Some(&alice))).await.0, StatusCode::OK);
    assert_eq!(hash_checks(&p, "team"), 1, "six requests, one bcrypt");
    for n in 2..=4 {
        let wrong = basic("alice", "guess");
        assert_eq!(c.send(req("GET", "/", "a.test", Some(&wrong))).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(hash_checks(&p, "team"), n, "a failed check is not remembered");
    }
    assert_eq!(c.send(req("GET", "/", "a.test", Some(&alice))).await.0, StatusCode::OK);
    assert_eq!(hash_checks(&p, "team"), 4);
    // A reload that leaves the userlist as it is keeps what it remembers.
    let cfg = tollgate_config::parse(&format!("[global]\nworkers = 1\n{toml}"), Path::new("test.toml")).unwrap();
    p.reload(cfg).unwrap();
    let mut c = Client::connect(addr).await;
    assert_eq!(c.send(req("GET", "/", "a.test", Some(&alice))).await.0, StatusCode::OK);
    assert_eq!(hash_checks(&p, "team"), 4);
}

/// The seed's case: only the upload path asks for a password.
#[tokio::test]
async fn rule_auth_guards_only_the_paths_it_matches() {
    let origin = echo().await;
    let rule = "[[frontend.rule]]\nwhen = { path_prefix = \"/files/\" }\nauth = { userlist = \"team\" }";
    let toml = one_backend(&team(), rule, origin.addr);
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();
    let mut c = Client::connect(addr).await;
    assert_eq!(c.send(req("GET", "/", "tus.test", None)).await.0, StatusCode::OK);
    assert_eq!(c.send(req("OPTIONS", "/files", "tus.test", None)).await.0, StatusCode::OK);
    let (status, headers, _) = c.send(req("HEAD", "/files/abc", "tus.test", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], r#"Basic realm="web", charset="UTF-8""#, "the frontend's name");
    // An upload without credentials is answered before its body is read: no
    // 100 Continue, and the server never sees it.
    let reply = raw(
        addr,
        b"PATCH /files/abc HTTP/1.1\r\nHost: tus.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 401, "{reply}");
    assert!(!reply.contains("100 Continue"), "{reply}");
    assert_eq!(origin.hits.load(Ordering::Relaxed), 2);
    let bob = basic("bob", "bob's secret");
    let mut up = req("PATCH", "/files/abc", "tus.test", Some(&bob));
    *up.body_mut() = Full::new(Bytes::from_static(b"hello"));
    let (status, _, body) = c.send(up).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["body_len"], 5);
}

/// `auth` on a backend applies to whatever is routed there; `strip` keeps the
/// credentials from its servers.
#[tokio::test]
async fn backend_auth_applies_to_requests_routed_there_and_strip_removes_the_credentials() {
    let (app, tus) = (echo().await, echo().await);
    let toml = format!(
        "{}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
         [[frontend.rule]]\nwhen = {{ host = \"tus.test\" }}\nbackend = \"tus\"\n\
         [[backend]]\nname = \"app\"\n[[backend.server]]\nname = \"a1\"\naddr = \"{}\"\n\
         [[backend]]\nname = \"tus\"\nauth = {{ userlist = \"team\", strip = true }}\n\
         [[backend.server]]\nname = \"t1\"\naddr = \"{}\"\n",
        team(),
        app.addr,
        tus.addr
    );
    let p = proxy(&toml);
    let mut c = Client::connect(p.addr("web").unwrap()).await;
    let carol = basic("carol", "carol's secret");
    let (status, _, body) = c.send(req("GET", "/", "app.test", Some("Basic whatever"))).await;
    assert_eq!(status, StatusCode::OK, "no auth on app");
    assert_eq!(echoed_header(&json(&body), "authorization").as_deref(), Some("Basic whatever"));
    let (status, headers, _) = c.send(req("GET", "/", "tus.test", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], r#"Basic realm="tus", charset="UTF-8""#, "the backend's name");
    let (status, _, body) = c.send(req("GET", "/", "tus.test", Some(&carol))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(echoed_header(&json(&body), "authorization"), None, "stripped");
    assert_eq!(tus.hits.load(Ordering::Relaxed), 1);
}

/// examples/tus.toml as written, with its certificate made into certs/, its
/// listeners moved to free ports and tusd played by the echo origin.
#[tokio::test]
async fn the_tus_example_offloads_tls_and_asks_for_a_password() {
    let pki = Pki::new("tus-example");
    let origin = echo().await;
    std::fs::create_dir_all(pki.dir.join("certs")).unwrap();
    pki.leaf("certs/tusdserver.example.com.pem", &["tusdserver.example.com"], false);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tus.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let text = text
        .replace("bind = [\":80\", { addr = \":443\",", "bind = [\"127.0.0.1:0\", { addr = \"127.0.0.2:0\",")
        .replace("addr = \"127.0.0.1:1080\"", &format!("addr = \"{}\"", origin.addr))
        .replace("access_log = \"stdout\"", "workers = 1");
    let file = pki.dir.join("tus.toml");
    std::fs::write(&file, &text).unwrap();
    let cfg = tollgate_config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let check = cfg.backends[0].check.as_ref().unwrap();
    assert_eq!((check.fall, check.rise), (3, 2));
    let p = start_proxy(cfg).unwrap();
    let (plain, tls) = (p.addrs()[0].1, p.addrs()[1].1);

    // redirect scheme https if !{ ssl_fc }: before any password is asked for.
    let reply = raw(
        plain,
        b"PATCH /files/1 HTTP/1.1\r\nHost: tusdserver.example.com\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 301, "{reply}");
    assert!(reply.contains("\r\nlocation: https://tusdserver.example.com/files/1\r\n"), "{reply}");

    let (cfg, _) = client(BOTH, Some(&pki), None);
    let mut c = Https::connect(tls, "tusdserver.example.com", &cfg).await;
    let host = "tusdserver.example.com";
    let (status, headers, _) = c.send(req("POST", "/files/", host, None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], r#"Basic realm="UserAuth", charset="UTF-8""#);
    let (status, _, body) = c.send(req("POST", "/files/", host, Some(&basic("httpuser", "abcdefghijklmnop")))).await;
    assert_eq!(status, StatusCode::OK);
    let j = json(&body);
    assert_eq!(echoed_header(&j, "x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(echoed_header(&j, "x-forwarded-for").as_deref(), Some("127.0.0.1"));
    let uploader = basic("uploader", "correct horse battery staple");
    assert_eq!(c.send(req("HEAD", "/files/1", host, Some(&uploader))).await.0, StatusCode::OK);
    // Other hosts never reach tusd, with or without a password.
    let (status, _, body) = c.send(req("GET", "/files/", "other.example.com", Some(&uploader))).await;
    assert_eq!((status, &body[..]), (StatusCode::NOT_FOUND, &b"not found\n"[..]));
    assert_eq!(origin.hits.load(Ordering::Relaxed), 2);
}

/// A bcrypt check runs off the worker's event loop: while one takes its time,
/// the same (single) worker answers other requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_checks_do_not_block_the_worker() {
    let origin = echo().await;
    let slow =
        bcrypt::hash_with_salt("slow", 12, *b"tollgate-e2e-slo").unwrap().format_for_version(bcrypt::Version::TwoB);
    let toml = one_backend(
        &format!("[[userlist]]\nname = \"slow\"\nusers = [{{ name = \"u\", password = \"{slow}\" }}]\n"),
        "[[frontend.rule]]\nwhen = { path_prefix = \"/private/\" }\nauth = { userlist = \"slow\" }",
        origin.addr,
    );
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();
    let started = std::time::Instant::now();
    let private = tokio::spawn(async move {
        let mut c = Client::connect(addr).await;
        let status = c.send(req("GET", "/private/x", "a", Some(&basic("u", "slow")))).await.0;
        (status, started.elapsed())
    });
    // Once the check has started, an open request is served meanwhile.
    let deadline = Instant::now() + Duration::from_secs(10);
    while hash_checks(&p, "slow") == 0 {
        assert!(Instant::now() < deadline, "the slow password was never checked");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let open = {
        let mut c = Client::connect(addr).await;
        assert_eq!(c.send(req("GET", "/open", "a", None)).await.0, StatusCode::OK);
        started.elapsed()
    };
    let (status, checked) = private.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(open < checked, "the open request ({open:?}) waited for the check ({checked:?})");
}

/// HTTP/2 streams get the same checks: 401 with the challenge (a HEAD's without
/// a body), then the request with the right password goes through.
#[tokio::test]
async fn http2_streams_are_asked_for_a_password_too() {
    let origin = echo().await;
    let frontend = "h2c = true\nauth = { userlist = \"team\", realm = 'Team \"A\"' }";
    let p = proxy(&one_backend(&team(), frontend, origin.addr));
    let tcp = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    let driver = tokio::spawn(conn);
    let alice = basic("alice", "alice's secret");
    for (method, authorization, want) in [
        ("GET", None, StatusCode::UNAUTHORIZED),
        ("HEAD", None, StatusCode::UNAUTHORIZED),
        ("GET", Some(basic("alice", "wrong")), StatusCode::UNAUTHORIZED),
        ("GET", Some(alice.clone()), StatusCode::OK),
    ] {
        let mut r = Request::builder().method(method).uri("http://a.test/h2");
        if let Some(a) = &authorization {
            r = r.header("authorization", a.as_str());
        }
        let mut send = send.clone().ready().await.unwrap();
        let (resp, _) = send.send_request(r.body(()).unwrap(), true).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), resp).await.unwrap().unwrap();
        assert_eq!(resp.status(), want, "{method} {authorization:?}");
        if want == StatusCode::UNAUTHORIZED {
            assert_eq!(resp.headers()["www-authenticate"], CHALLENGE);
        }
        let mut body = resp.into_body();
        let mut got = Vec::new();
        while let Some(chunk) = body.data().await {
            got.extend_from_slice(&chunk.unwrap());
        }
        if method == "HEAD" {
            assert!(got.is_empty(), "no body on HEAD");
        } else if want == StatusCode::OK {
            assert_eq!(echoed_header(&json(&Bytes::from(got)), "authorization"), Some(alice.clone()));
        }
    }
    assert_eq!(origin.hits.load(Ordering::Relaxed), 1, "only the signed-in stream reached the server");
    drop(send);
    driver.abort();
    p.stop();
}

/// A failed attempt gets its 401 no sooner than the userlist's `failure_delay`
/// (here 300 ms) after its check began, whatever the failure: a wrong bcrypt
/// password, a wrong insecure one, an unknown name, on HTTP/1.1 and HTTP/2. The
/// delay is a timer: the (single) worker serves a signed-in request meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_answered_after_the_failure_delay() {
    let delay = Duration::from_millis(300);
    let origin = echo().await;
    let users = team().replacen("name = \"team\"\n", "name = \"team\"\nfailure_delay = \"300ms\"\n", 1);
    let p = proxy(&one_backend(&users, "h2c = true\nauth = { userlist = \"team\" }", origin.addr));
    let addr = p.addr("web").unwrap();
    let mut c = Client::connect(addr).await;
    for wrong in [basic("alice", "nope"), basic("carol", "nope"), basic("mallory", "alice's secret")] {
        let t = Instant::now();
        assert_eq!(c.send(req("GET", "/", "a.test", Some(&wrong))).await.0, StatusCode::UNAUTHORIZED);
        assert!(t.elapsed() >= delay, "{wrong}: {:?}", t.elapsed());
    }

    // While a failed attempt waits, another connection is served. (The
    // count is read before the attempt starts: its check may be over before
    // this task runs again.)
    let checks = hash_checks(&p, "team");
    let started = Instant::now();
    let failed = tokio::spawn(async move {
        let status = Client::connect(addr).await.send(req("GET", "/", "a", Some(&basic("bob", "nope")))).await.0;
        (status, started.elapsed())
    });
    while hash_checks(&p, "team") == checks {
        assert!(started.elapsed() < Duration::from_secs(10), "bob's password was never checked");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let carol = basic("carol", "carol's secret");
    assert_eq!(Client::connect(addr).await.send(req("GET", "/", "a", Some(&carol))).await.0, StatusCode::OK);
    let served = started.elapsed();
    let (status, answered) = failed.await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(answered >= delay, "{answered:?}");
    assert!(served < answered, "the signed-in request ({served:?}) waited for the failed one ({answered:?})");

    // An HTTP/2 stream.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    let driver = tokio::spawn(conn);
    let r = Request::builder().uri("http://a.test/").header("authorization", basic("dave", "nope")).body(()).unwrap();
    let t = Instant::now();
    let (resp, _) = send.ready().await.unwrap().send_request(r, true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(t.elapsed() >= delay, "{:?}", t.elapsed());
    driver.abort();
    assert_eq!(origin.hits.load(Ordering::Relaxed), 1);
}
