//! Interim (1xx) responses: a server's 102 and 103 reach HTTP/1.1 and HTTP/2
//! clients as they come, before the final response (RFC 9110 section 15.2),
//! but not HTTP/1.0 clients; an early one does not stop the request body;
//! the cache never stores one. Each test here failed when 1xx were skipped.

use crate::cache::cfg as cache_cfg;
use crate::h2::H2Client;
use crate::harness::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(5);

const HINTED: &[u8] = b"HTTP/1.1 102 Processing\r\n\r\n\
    HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n\
    HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// Frontends `web` (HTTP/1.1) and `h2` (h2c) in front of `origin`.
fn two_fronts(origin: std::net::SocketAddr) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[frontend]]\nname = \"h2\"\nbind = [{{ addr = \"127.0.0.2:0\", h2c = true }}]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{origin}\"\n"
    )
}

/// The position of `needle` in `hay`, which must hold it.
fn at(hay: &str, needle: &str) -> usize {
    hay.find(needle).unwrap_or_else(|| panic!("no {needle:?} in {hay:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_102_and_103_reach_http11_clients_in_order_but_not_http10_ones() {
    let origin = raw_origin_answering(HINTED).await;
    let p = proxy(&two_fronts(origin.addr));
    let addr = p.addr("web").unwrap();

    let reply = raw(addr, b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert!(reply.starts_with("HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\n"), "{reply:?}");
    let (hint, fin) = (at(&reply, "Link: </style.css>; rel=preload\r\n\r\n"), at(&reply, "HTTP/1.1 200 OK"));
    assert!(hint < fin, "{reply:?}");
    assert!(reply.ends_with("\r\n\r\nok"), "{reply:?}");

    // HTTP/1.0 has no interim responses: only the final one goes.
    let reply = raw(addr, b"GET / HTTP/1.0\r\nHost: a\r\n\r\n", LIMIT).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply:?}");
    assert!(!reply.contains("103") && !reply.contains("Link"), "{reply:?}");

    // Keep-alive goes on after them: the next request on the connection is answered.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let first = read_until(&mut s, "\r\n\r\nok").await;
    s.write_all(b"GET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut rest)).await;
    let rest = String::from_utf8_lossy(&rest);
    assert!(first.contains("103 Early Hints") && rest.contains("103 Early Hints"), "{first:?} {rest:?}");
    assert!(rest.ends_with("\r\n\r\nok"), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_103_reaches_an_http2_client_as_an_informational_head() {
    let origin = raw_origin_answering(HINTED).await;
    let p = proxy(&two_fronts(origin.addr));
    let c = H2Client::plain(p.addr("h2").unwrap()).await;
    let mut send = c.sender().ready().await.unwrap();
    let req = http::Request::get("http://a/").body(()).unwrap();
    let (mut resp, _) = send.send_request(req, true).unwrap();
    let mut interims = Vec::new();
    while let Some(r) =
        tokio::time::timeout(LIMIT, std::future::poll_fn(|cx| resp.poll_informational(cx))).await.expect("in time")
    {
        let r = r.expect("an informational head");
        interims.push((r.status().as_u16(), r.headers().get("link").map(|v| v.to_str().unwrap().to_string())));
    }
    assert_eq!(interims, [(102, None), (103, Some("</style.css>; rel=preload".to_string()))]);
    let resp = tokio::time::timeout(LIMIT, resp).await.expect("in time").expect("the final response");
    assert_eq!(resp.status(), 200);
}

/// Reads from `s` until what came ends with `end`.
async fn read_until(s: &mut TcpStream, end: &str) -> String {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(end.as_bytes()) {
        let n = tokio::time::timeout(LIMIT, s.read(&mut chunk)).await.expect("in time").unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_103_sent_before_the_body_is_read_reaches_the_client_and_the_body_still_goes() {
    // The origin answers 103 as soon as it has the head, then reads the body
    // (which the client sends only once it has the 103) and echoes its length.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = read_until(&mut s, "\r\n\r\n").await;
        s.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a.js>; rel=preload\r\n\r\n").await.unwrap();
        while got.len() - at(&got, "\r\n\r\n") - 4 < 10 {
            let mut chunk = [0u8; 64];
            let n = tokio::time::timeout(LIMIT, s.read(&mut chunk)).await.expect("body in time").unwrap();
            assert!(n > 0, "the body never came: {got:?}");
            got.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngot!").await.unwrap();
        got
    });
    let p = proxy(&two_fronts(origin));
    let mut c = TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    c.write_all(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nConnection: close\r\n\r\n").await.unwrap();
    let hint = read_until(&mut c, "\r\n\r\n").await;
    assert!(hint.starts_with("HTTP/1.1 103 Early Hints\r\n") && hint.contains("</a.js>"), "{hint:?}");
    c.write_all(b"0123456789").await.unwrap();
    let reply = read_until(&mut c, "got!").await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply:?}");
    let seen = task.await.unwrap();
    assert!(seen.ends_with("\r\n\r\n0123456789"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_stores_the_final_response_without_its_interim_heads() {
    let origin = raw_origin_answering(
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n\
          HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 2\r\n\r\nok",
    )
    .await;
    let p = proxy(&cache_cfg(origin.addr, ""));
    let addr = p.addr("web").unwrap();
    let first = raw(addr, b"GET /page HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert!(first.starts_with("HTTP/1.1 103 Early Hints\r\n"), "{first:?}");
    let second = raw(addr, b"GET /page HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert!(second.starts_with("HTTP/1.1 200 OK\r\n"), "{second:?}");
    assert!(!second.contains("Link") && !second.contains("link:"), "{second:?}");
    assert!(second.to_ascii_lowercase().contains("cache-status: tollgate; hit"), "{second:?}");
    assert_eq!(origin.connections.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// A rule's `early_hints`: a 103 with its `Link` values goes to HTTP/1.1 and
/// HTTP/2 clients before the server is even asked (the origin here answers
/// only once the test has seen the hint), not to HTTP/1.0 ones, and not for
/// requests no rule with hints matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_early_hints_go_before_the_server_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    let (go, mut gate) = tokio::sync::mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let mut gate_open = false;
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            if String::from_utf8_lossy(&got).contains("/page") && !gate_open {
                gate_open = gate.recv().await.is_some();
            }
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
        }
    });
    let rules = "  [[frontend.rule]]\n  when = { path_prefix = \"/page\" }\n  \
                 early_hints = [\"</app.css>; rel=preload; as=style\", \"</app.js>; rel=preload; as=script\"]\n";
    let toml = two_fronts(origin)
        .replace(
            "default_backend = \"b\"\n[[frontend]]\nname = \"h2\"",
            &format!("default_backend = \"b\"\n{rules}[[frontend]]\nname = \"h2\""),
        )
        .replace(
            "h2c = true }]\ndefault_backend = \"b\"\n",
            &format!("h2c = true }}]\ndefault_backend = \"b\"\n{rules}"),
        );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();

    // HTTP/1.1: the hint arrives while the origin still holds its answer.
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(b"GET /page HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let hint = read_until(&mut s, "\r\n\r\n").await;
    assert_eq!(
        hint,
        "HTTP/1.1 103 \r\nlink: </app.css>; rel=preload; as=style\r\nlink: </app.js>; rel=preload; as=script\r\n\r\n"
    );
    go.send(()).unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut rest)).await;
    assert!(String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 200 OK"), "{rest:?}");

    // HTTP/1.0 clients, and paths no rule hints for: the final response only.
    let reply = raw(web, b"GET /page HTTP/1.0\r\nHost: a\r\n\r\n", LIMIT).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK") && !reply.contains("103"), "{reply:?}");
    let reply = raw(web, b"GET /other HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK") && !reply.contains("103"), "{reply:?}");

    // HTTP/2: an informational head with both links.
    let c = H2Client::plain(p.addr("h2").unwrap()).await;
    let mut send = c.sender().ready().await.unwrap();
    let (mut resp, _) = send.send_request(http::Request::get("http://a/page").body(()).unwrap(), true).unwrap();
    let r = tokio::time::timeout(LIMIT, std::future::poll_fn(|cx| resp.poll_informational(cx)))
        .await
        .expect("in time")
        .expect("an informational head")
        .expect("well formed");
    assert_eq!(r.status(), 103);
    let links: Vec<&str> = r.headers().get_all("link").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(links, ["</app.css>; rel=preload; as=style", "</app.js>; rel=preload; as=script"]);
    let resp = tokio::time::timeout(LIMIT, resp).await.expect("in time").expect("the final response");
    assert_eq!(resp.status(), 200);
}
