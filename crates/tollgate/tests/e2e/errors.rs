//! Each error status, and malformed requests that must never reach a server.

use crate::harness::*;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tollgate::demo;

fn cfg(servers: &[std::net::SocketAddr], backend_extra: &str, frontend_extra: &str) -> String {
    let mut s = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n{frontend_extra}\n\
         [[backend]]\nname = \"b\"\n{backend_extra}\n"
    );
    for (i, a) in servers.iter().enumerate() {
        s.push_str(&format!("[[backend.server]]\nname = \"s{i}\"\naddr = \"{a}\"\n"));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_server_is_retried_on_another_with_redispatch() {
    let dead = dead_addr().await;
    let o = echo().await;
    let p = proxy(&cfg(&[dead, o.addr], "retries = 3\nredispatch = true", ""));
    let addr = p.addr("web").unwrap();
    for _ in 0..20 {
        assert_eq!(get(addr, "/").await.0, 200, "no failed request while a server is dead");
    }
    let snap = p.snapshot();
    let s0 = snap.backend("b").unwrap().server("s0").unwrap();
    assert!(s0.stats.connect_errors.load(Ordering::Relaxed) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failure_everywhere_is_502_and_no_server_is_503() {
    let dead = dead_addr().await;
    let p = proxy(&cfg(&[dead], "retries = 2", ""));
    let addr = p.addr("web").unwrap();
    let (status, _, body) = get(addr, "/").await;
    assert_eq!(status, 502);
    assert!(String::from_utf8_lossy(&body).contains("502 Bad Gateway"));
    let snap = p.snapshot();
    assert_eq!(
        snap.backend("b").unwrap().server("s0").unwrap().stats.connect_errors.load(Ordering::Relaxed),
        3,
        "1 try + 2 retries"
    );

    // A backend whose only server is in maintenance: 503.
    snap.backend("b").unwrap().server("s0").unwrap().set_admin(tollgate_proxy::lb::AdminState::Maint);
    assert_eq!(get(addr, "/").await.0, 503);

    // A frontend with no backend for the request: 503.
    let p = proxy("[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n");
    assert_eq!(get(p.addr("web").unwrap(), "/").await.0, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_server_is_504() {
    let s1 = demo::spawn("127.0.0.1:0".parse().unwrap(), "s1").await.unwrap();
    let mut c = Client::connect(s1.addr()).await;
    let req = http::Request::post("/delay").header("host", "s1").body(r#"{"delay": 2000}"#.into()).unwrap();
    assert_eq!(c.send(req).await.0, 200);
    let p = proxy(&cfg(&[s1.addr()], "timeout = { server = \"150ms\" }", ""));
    let (status, _, _) = get(p.addr("web").unwrap(), "/").await;
    assert_eq!(status, 504);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_head_gets_408_idle_connection_closes_quietly() {
    let o = echo().await;
    // 1 s, not less: a loaded machine may take a few hundred ms between this
    // test's connect and its first byte, which must not pass for a silent client.
    let p = proxy(&cfg(&[o.addr], "", "timeout = { http_request = \"1s\", keep_alive = \"1s\" }"));
    let addr = p.addr("web").unwrap();
    let reply = raw(addr, b"GET / HTTP/1.1\r\nHost: a\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 408, "{reply}");
    // Nothing sent at all: closed without an error response.
    let reply = raw(addr, b"", Duration::from_secs(5)).await;
    assert_eq!(reply, "");
    // After a complete exchange, the keep-alive wait ends quietly too.
    let reply = raw(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 200);
    assert_eq!(reply.matches("HTTP/1.1 200 OK").count(), 1, "{reply}");
    // The status line, not a bare "408": the echoed body carries random ports.
    assert!(!reply.contains("HTTP/1.1 408"), "{reply}");
    assert_eq!(o.hits.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_give_413_414_431() {
    let o = echo().await;
    let p = proxy(&cfg(
        &[o.addr],
        "",
        "limits = { max_request_body = \"1KiB\", max_uri_size = 100, max_header_size = \"8KiB\" }",
    ));
    let addr = p.addr("web").unwrap();
    let big = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n{}", "x".repeat(2000));
    assert_eq!(status_of(&raw(addr, big.as_bytes(), Duration::from_secs(5)).await), 413);
    let chunked = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n{}\r\n0\r\n\r\n",
        "x".repeat(2000)
    );
    assert_eq!(status_of(&raw(addr, chunked.as_bytes(), Duration::from_secs(5)).await), 413);
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(200));
    assert_eq!(status_of(&raw(addr, long.as_bytes(), Duration::from_secs(5)).await), 414);
    let huge = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "b".repeat(20_000));
    assert_eq!(status_of(&raw(addr, huge.as_bytes(), Duration::from_secs(5)).await), 431);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_400_and_never_reach_the_server() {
    let o = echo().await;
    let p = proxy(&cfg(&[o.addr], "", ""));
    let addr = p.addr("web").unwrap();
    let cases: &[(&str, &[u8])] = &[
        (
            "chunked twice, two lines",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "chunked twice, one line",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        ),
        ("final coding not chunked", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        ("differing content-length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
        ("invalid header name", b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n"),
        ("space before colon", b"GET / HTTP/1.1\r\nHost: a\r\nX-A : x\r\n\r\n"),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n"),
        ("NUL in value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n"),
        ("bare CR in value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n"),
        ("space in target", b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("relative target", b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("missing host", b"GET / HTTP/1.1\r\n\r\n"),
        ("two hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ("userinfo in host", b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"),
        ("bad version", b"GET / HTTP/1.2\r\nHost: a\r\n\r\n"),
        ("non-http absolute target", b"GET ftp://a/x HTTP/1.1\r\nHost: a\r\n\r\n"),
    ];
    for (name, bytes) in cases {
        let reply = raw(addr, bytes, Duration::from_secs(5)).await;
        assert_eq!(status_of(&reply), 400, "{name}: {reply}");
    }
    assert_eq!(o.hits.load(Ordering::Relaxed), 0, "nothing malformed was forwarded");
    let reply = raw(addr, b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_pages_and_access_log_lines() {
    let dir = std::env::temp_dir().join(format!("tollgate-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("503.html"), "<h1>we are down</h1>").unwrap();
    let log = dir.join("access.log");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[global]\nworkers = 1\naccess_log = \"{}\"\naccess_log_format = \"json\"\n\
         [defaults]\nerror_pages = {{ 503 = \"{}\" }}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n",
        log.display(),
        dir.join("503.html").display()
    );
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();
    let (status, headers, body) = get(addr, "/x").await;
    assert_eq!(status, 503);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(&body[..], b"<h1>we are down</h1>");
    let _ = raw(addr, b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", Duration::from_secs(5)).await;
    // Each line is written before the response completes or the connection ends;
    // wait (bounded) for the second one.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if lines.len() >= 2 || std::time::Instant::now() > deadline {
            break lines;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["status"], 503);
    assert_eq!(lines[0]["uri"], "/x");
    assert_eq!(lines[0]["termination"], "no-backend");
    assert_eq!(lines[1]["status"], 400);
    assert_eq!(lines[1]["termination"], "bad-request");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_that_keeps_moving_is_not_a_server_timeout_but_a_stalled_one_is_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let o = echo().await;
    // timeout.client well below timeout.server: the stalled upload below must be
    // the client's fault (408), not the server's (504).
    // The margins are wide (pauses of 250 ms against 1 s) so that a loaded
    // machine delaying this task does not pass for a stalled client.
    let p = proxy(&cfg(&[o.addr], "timeout = { server = \"2s\" }", "timeout = { client = \"1s\" }"));
    let addr = p.addr("web").unwrap();

    // 10 chunks, 250 ms apart: 2.5 s in all, more than timeout.server.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut pace = tokio::time::interval(Duration::from_millis(250));
    for _ in 0..10 {
        pace.tick().await;
        s.write_all(b"4\r\nabcd\r\n").await.unwrap();
    }
    s.write_all(b"0\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(reply.contains("\"body_len\":40"), "{reply}");

    // A body that stops moving: 408 once timeout.client passes.
    let reply = raw(addr, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nab", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 408, "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redispatch_retries_stay_on_the_same_server() {
    let dead = dead_addr().await;
    let o = echo().await;
    // roundrobin: the first request goes to s0 (dead); its retries must stay there.
    let p = proxy(&cfg(&[dead, o.addr], "retries = 2\nredispatch = false", ""));
    assert_eq!(get(p.addr("web").unwrap(), "/").await.0, 502);
    let snap = p.snapshot();
    let s0 = snap.backend("b").unwrap().server("s0").unwrap();
    assert_eq!(s0.stats.connect_errors.load(Ordering::Relaxed), 3);
    assert_eq!(o.hits.load(Ordering::Relaxed), 0);
}

/// Tollgate's own error responses to HEAD carry the length of the body a GET
/// would get and no body, so the connection stays usable.
#[tokio::test]
async fn an_error_response_to_head_has_no_body_and_keeps_the_connection() {
    let p = proxy(&cfg(&[dead_addr().await], "retries = 0", ""));
    let addr = p.addr("web").unwrap();
    let reply = raw(
        addr,
        b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    let (first, second) = reply.split_at(reply.find("\r\n\r\n").unwrap() + 4);
    assert_eq!(status_of(first), 502, "{reply}");
    let length: usize = first
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{reply}"));
    assert!(length > 0, "{reply}");
    assert!(second.starts_with("HTTP/1.1 502 "), "the next response follows the head at once: {reply}");
    assert_eq!(second.len() - second.find("\r\n\r\n").unwrap() - 4, length, "{reply}");
}

/// A graceful stop that comes while a keep-alive response is on its way (its
/// head said keep-alive): the client's next request, sent at once, is still
/// answered, with `Connection: close`, rather than finding the connection
/// closed under it (a hot upgrade under load lost such requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_keep_alive_response_still_answers_the_next_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let (release, mut released) = tokio::sync::mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let mut served = 0;
            loop {
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                if got.is_empty() {
                    break;
                }
                // The first response's body is held back until the test says.
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").await;
                if first && served == 0 {
                    first = false;
                    let _ = released.recv().await;
                }
                let _ = s.write_all(b"cde").await;
                served += 1;
            }
        }
    });
    let p = proxy(&cfg(&[origin], "", ""));
    let mut c = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    c.write_all(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await.unwrap().unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&got).to_ascii_lowercase().contains("connection: close"));
    p.stop();
    release.send(()).unwrap();
    while !got.ends_with(b"abcde") {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "the first response ends whole");
        got.extend_from_slice(&buf[..n]);
    }
    c.write_all(b"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest)).await.unwrap().unwrap();
    let rest = String::from_utf8_lossy(&rest).to_ascii_lowercase();
    assert!(rest.starts_with("http/1.1 200 ok") && rest.contains("connection: close"), "{rest:?}");
    assert!(rest.ends_with("abcde"), "{rest:?}");
}
