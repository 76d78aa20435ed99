//! HTTP/1.1 semantics on the data path: forwarding headers, framing, streaming,
//! pipelining, keep-alive, graceful stop.

use crate::harness::*;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cfg_for(origin: std::net::SocketAddr, extra_frontend: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n{extra_frontend}\n\
         [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"o\"\naddr = \"{origin}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_host_and_header_case() {
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let addr = p.addr("web").unwrap();
    let reply = raw(
        addr,
        b"GET /path?q=1 HTTP/1.1\r\nHost: App.Example.com\r\nX-Forwarded-For: 203.0.113.7\r\nX-Mixed-CASE: v\r\n\
          Connection: close, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    let body = reply.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["uri"], "/path?q=1");
    assert_eq!(echoed_header(&v, "host").as_deref(), Some("App.Example.com"), "Host is preserved");
    assert_eq!(echoed_header(&v, "x-forwarded-for").as_deref(), Some("203.0.113.7, 127.0.0.1"));
    assert_eq!(echoed_header(&v, "x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(echoed_header(&v, "x-forwarded-port").map(|p| p.parse::<u16>().unwrap()), Some(addr.port()));
    assert_eq!(echoed_header(&v, "x-forwarded-host").as_deref(), Some("App.Example.com"));
    for hop in ["x-hop", "keep-alive", "te"] {
        assert_eq!(echoed_header(&v, hop), None, "{hop} is hop-by-hop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_name_case_reaches_the_server_as_the_client_wrote_it() {
    let mut o = raw_origin().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let reply = raw(
        p.addr("web").unwrap(),
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Mixed-CASE: v\r\nx-lower: w\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    let head = o.heads.recv().await.unwrap();
    assert!(head.starts_with("GET / HTTP/1.1\r\n"), "{head}");
    assert!(head.contains("\r\nHost: a\r\n"), "{head}");
    assert!(head.contains("\r\nX-Mixed-CASE: v\r\n"), "{head}");
    assert!(head.contains("\r\nx-lower: w\r\n"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_for_can_be_turned_off_and_absolute_form_sets_host() {
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, "forward_for = false"));
    let reply = raw(
        p.addr("web").unwrap(),
        b"GET http://other.example:81/x HTTP/1.1\r\nHost: ignored\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(v["uri"], "/x", "origin-form to the server");
    assert_eq!(echoed_header(&v, "host").as_deref(), Some("other.example:81"));
    assert_eq!(echoed_header(&v, "x-forwarded-for"), None);
}

/// `forwarded = true` adds RFC 7239 `Forwarded` after the earlier hops';
/// `request_id` gives each request a new id unless its client is trusted,
/// in the header configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc7239_forwarded_and_request_ids() {
    let o = echo().await;
    let ask = |addr, extra: &'static str| async move {
        let req = format!(
            "GET / HTTP/1.1\r\nHost: app.test:8080\r\nForwarded: for=192.0.2.60;proto=https\r\n{extra}Connection: close\r\n\r\n"
        );
        let reply = raw(addr, req.as_bytes(), Duration::from_secs(5)).await;
        serde_json::from_str::<serde_json::Value>(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap()
    };
    let p = proxy(&cfg_for(o.addr, "forwarded = true\nrequest_id = true"));
    let v = ask(p.addr("web").unwrap(), "X-Request-Id: from-the-client\r\n").await;
    assert_eq!(
        echoed_header(&v, "forwarded").as_deref(),
        Some("for=192.0.2.60;proto=https, for=127.0.0.1;proto=http;host=\"app.test:8080\"")
    );
    let id = echoed_header(&v, "x-request-id").unwrap();
    assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "a new id, the client's untrusted: {id}");
    let again = echoed_header(&ask(p.addr("web").unwrap(), "").await, "x-request-id").unwrap();
    assert_ne!(id, again, "one per request");

    let p = proxy(&cfg_for(o.addr, "request_id = { header = \"X-Trace\", trust = [\"127.0.0.0/8\"] }"));
    let v = ask(p.addr("web").unwrap(), "X-Trace: abc-123\r\n").await;
    assert_eq!(echoed_header(&v, "x-trace").as_deref(), Some("abc-123"), "a trusted client's id is kept");
    assert_eq!(echoed_header(&v, "forwarded").as_deref(), Some("for=192.0.2.60;proto=https"), "off by default");
}

/// Variables in header rule values: filled in per request, on the way to the
/// server and on the way back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_rule_values_fill_in_their_variables() {
    let o = echo().await;
    let rules = "request_id = true\n\
        \x20 [[frontend.rule]]\n\
        \x20 set_request_headers = { \"X-Client\" = \"${client_ip}:${client_port}\", \"X-Via\" = \"${frontend} ${scheme}://${host}${path} ${method}\", \"X-Cost\" = \"$5 $${x}\" }\n\
        \x20 set_response_headers = { \"X-Request\" = \"${request_id}\" }\n";
    let p = proxy(&cfg_for(o.addr, rules));
    let mut s = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    let port = s.local_addr().unwrap().port();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /a/b?q=1 HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut reply)).await.unwrap().unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(echoed_header(&v, "x-client"), Some(format!("127.0.0.1:{port}")));
    assert_eq!(echoed_header(&v, "x-via").as_deref(), Some("web http://app.test/a/b GET"));
    assert_eq!(echoed_header(&v, "x-cost").as_deref(), Some("$5 ${x}"), "no variable, as written");
    let id = echoed_header(&v, "x-request-id").unwrap();
    assert!(head.to_ascii_lowercase().contains(&format!("\r\nx-request: {id}")), "the id the server saw: {head}");
}

/// `rewrite_path`: the path the server gets, from the path in normal form,
/// with the query as sent; captures; over HTTP/1.1 and HTTP/2 alike; rules
/// that do not match leave it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_path_changes_the_path_the_server_gets() {
    let o = echo().await;
    let rules = "h2c = true\n\
        [[frontend.rule]]\nwhen = { path_prefix = \"/api/\" }\nrewrite_path = { regex = \"^/api/\", to = \"/\" }\nbackend = \"b\"\n\
        [[frontend.rule]]\nwhen = { path_prefix = \"/v1/\" }\nrewrite_path = { regex = '^/v1/(?P<rest>.*)$', to = \"/legacy/${rest}/x\" }\n";
    let p = proxy(&cfg_for(o.addr, rules));
    let addr = p.addr("web").unwrap();
    let uri_of = |reply: &str| -> String {
        let body = reply.split("\r\n\r\n").nth(1).unwrap();
        serde_json::from_str::<serde_json::Value>(body).unwrap()["uri"].as_str().unwrap().to_string()
    };
    for (target, want) in [
        ("/api/users?id=7&x=%2F", "/users?id=7&x=%2F"),
        ("/api/./a/../users/%7e1", "/users/~1"),
        ("/v1/orders/5", "/legacy/orders/5/x"),
        ("/other/api/x?q", "/other/api/x?q"),
    ] {
        let req = format!("GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let reply = raw(addr, req.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(status_of(&reply), 200, "{reply}");
        assert_eq!(uri_of(&reply), want, "{target}");
    }
    // HTTP/2: the same rewrite of :path.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    let driver = tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let req = http::Request::get("http://a/api/h2?z=1").body(()).unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(json(&Bytes::from(got))["uri"], "/h2?z=1");
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let reply = raw(
        p.addr("web").unwrap(),
        b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    let uris: Vec<&str> = reply.match_indices("\"uri\":\"/").map(|(i, _)| &reply[i + 7..i + 9]).collect();
    assert_eq!(uris, ["/1", "/2", "/3"], "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_upload_streams_and_head_has_no_body() {
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let addr = p.addr("web").unwrap();
    let reply = raw(
        addr,
        b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.contains("\"body_len\":11"), "{reply}");
    let reply = raw(addr, b"HEAD / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 200);
    assert!(reply.ends_with("\r\n\r\n"), "HEAD response has no body: {reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_gets_continue_then_response() {
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let mut s = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    s.write_all(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 100 Continue"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    s.write_all(b"data").await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("200 OK") && rest.contains("\"body_len\":4"), "{rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_dechunked_and_closed() {
    // RFC 9112 section 6.3: Transfer-Encoding wins, Content-Length is dropped, and
    // the connection closes after the response.
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let reply = raw(
        p.addr("web").unwrap(),
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(reply.contains("\"body_len\":3"), "{reply}");
    assert!(!reply.contains("smuggled"), "the connection must close after the first response: {reply}");
    assert_eq!(o.hits.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_body_streams_through_with_flat_memory() {
    let o = echo().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let before = rss_kib();
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 1600; // 100 MiB + a bit
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    let stream = futures_stream(chunk, CHUNKS);
    let body = StreamBody::new(stream).boxed();
    let stream = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("/big").header("host", "a").body(body).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    let v = json(&got);
    assert_eq!(v["body_len"], (CHUNK * CHUNKS) as u64);
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 40 * 1024, "RSS grew by {grown} KiB while streaming 100 MiB");
}

fn futures_stream(
    chunk: Bytes,
    n: usize,
) -> impl futures_core::Stream<Item = Result<http_body::Frame<Bytes>, std::convert::Infallible>> + Send + 'static {
    struct S {
        chunk: Bytes,
        left: usize,
    }
    impl futures_core::Stream for S {
        type Item = Result<http_body::Frame<Bytes>, std::convert::Infallible>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            if self.left == 0 {
                return std::task::Poll::Ready(None);
            }
            self.left -= 1;
            std::task::Poll::Ready(Some(Ok(http_body::Frame::data(self.chunk.clone()))))
        }
    }
    S { chunk, left: n }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_lets_the_request_in_flight_finish() {
    let s1 = tollgate::demo::spawn("127.0.0.1:0".parse().unwrap(), "s1").await.unwrap();
    let mut c = Client::connect(s1.addr()).await;
    let req = http::Request::post("/delay").header("host", "s1").body(r#"{"delay": 300}"#.into()).unwrap();
    assert_eq!(c.send(req).await.0, 200);
    let p = proxy(&cfg_for(s1.addr(), ""));
    let addr = p.addr("web").unwrap();
    let mut client = Client::connect(addr).await;
    let inflight = tokio::spawn(async move { client.get("/").await.0 });
    // Wait until the request is at the server, then stop the proxy.
    while s1.app.hits.load(std::sync::atomic::Ordering::Relaxed) < 2 {
        tokio::task::yield_now().await;
    }
    p.stop();
    assert_eq!(inflight.await.unwrap(), 200, "in-flight request finishes");
    tokio::task::spawn_blocking(move || p.join()).await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "listener closed after stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_0_without_host_gets_one_and_a_servers_100_is_absorbed_but_its_103_forwarded() {
    let mut o = raw_origin().await;
    let p = proxy(&cfg_for(o.addr, ""));
    let reply = raw(p.addr("web").unwrap(), b"GET /old HTTP/1.0\r\n\r\n", Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    let head = o.heads.recv().await.unwrap();
    assert!(head.starts_with("GET /old HTTP/1.1\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains(&format!("\r\nhost: {}\r\n", o.addr)), "{head}");

    // A server that sends 100 Continue and 103 Early Hints before its answer.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await.unwrap();
        s.write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        let _ = s.read(&mut buf).await;
    });
    let p = proxy(&cfg_for(origin, ""));
    let reply =
        raw(p.addr("web").unwrap(), b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", Duration::from_secs(5))
            .await;
    // The 100 answered an expectation the proxy never forwards; the 103 is the client's.
    assert!(reply.starts_with("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"), "{reply}");
    assert_eq!(reply.matches("HTTP/1.1 200 OK\r\n").count(), 1, "{reply}");
    assert!(!reply.contains("100 Continue"), "{reply}");
    assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_client_abandons_is_read_to_the_end_and_its_connection_reused() {
    use std::sync::atomic::Ordering;
    // Origin: /slow sends half a chunked body, waits for the test's go, then ends
    // it; anything else gets a small answer. Counts its connections.
    let (origin, conns, go_tx) = gated_origin(|mut s, mut go| async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok(n) = s.read(&mut buf).await else { return };
            if n == 0 {
                return;
            }
            if buf[..n].starts_with(b"GET /slow") {
                let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
                s.write_all(head).await.unwrap();
                let _ = go.wait_for(|g| *g).await;
                s.write_all(b"0\r\n\r\n").await.unwrap();
            } else {
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.unwrap();
            }
        }
    })
    .await;
    let p = proxy(&cfg_for(origin, ""));
    let addr = p.addr("web").unwrap();

    // A client that reads the start of /slow and leaves.
    leave_mid_response(&p, "/slow", |got| String::from_utf8_lossy(got).contains("hello"), &go_tx).await;
    // The next request reuses that connection.
    assert_eq!(get(addr, "/fast").await.0, 200);
    assert_eq!(conns.load(Ordering::Relaxed), 1, "no new upstream connection");
}

/// `timeout.server_keep_alive`: an idle upstream connection is closed once idle
/// that long (by the worker's sweep, within a second more), and the next
/// request opens a new one; a backend with a longer time reuses its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_close_after_their_backends_server_keep_alive() {
    use std::sync::atomic::Ordering;
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (mut quick, mut long) = (raw_origin_answering(OK).await, raw_origin_answering(OK).await);
    let p = proxy(&format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"long\"\n\
           [[frontend.rule]]\n  when = {{ path_prefix = \"/quick\" }}\n  backend = \"quick\"\n\
         [[backend]]\nname = \"quick\"\ntimeout = {{ server_keep_alive = \"100ms\" }}\n\
           [[backend.server]]\n  name = \"q\"\n  addr = \"{}\"\n\
         [[backend]]\nname = \"long\"\ntimeout = {{ server_keep_alive = \"1h\" }}\n\
           [[backend.server]]\n  name = \"l\"\n  addr = \"{}\"\n",
        quick.addr, long.addr
    ));
    let addr = p.addr("web").unwrap();
    assert_eq!(get(addr, "/quick/1").await.0, 200);
    assert_eq!(get(addr, "/long/1").await.0, 200);
    // The proxy closes the quick backend's idle connection by itself, within
    // 100 ms and a sweep (1 s): well before the default 4 s would.
    tokio::time::timeout(Duration::from_secs(3), quick.closed.recv())
        .await
        .expect("the idle connection to `quick` closed")
        .unwrap();
    assert_eq!(get(addr, "/quick/2").await.0, 200);
    assert_eq!(get(addr, "/long/2").await.0, 200);
    assert_eq!(quick.connections.load(Ordering::Relaxed), 2, "a new connection after the old one closed");
    assert_eq!(long.connections.load(Ordering::Relaxed), 1, "the long-lived one reused");
    assert!(long.closed.try_recv().is_err(), "the long-lived one still open");
}

/// `global.idle_poll` on: the workers poll after work instead of sleeping at
/// once, and serve exactly as they do without it (keep-alive, new connections,
/// pipelining, a streamed body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_idle_poll_on_the_data_path_serves_as_without() {
    let o = echo().await;
    let p = proxy(&format!("[global]\nworkers = 2\nidle_poll = \"2ms\"\n{}", cfg_for(o.addr, "")));
    let addr = p.addr("web").unwrap();
    let mut c = Client::connect(addr).await;
    for i in 0..50 {
        let (status, _, body) = c.get(&format!("/ka/{i}")).await;
        assert_eq!(status, 200);
        assert_eq!(json(&body)["uri"], format!("/ka/{i}"));
    }
    for i in 0..20 {
        let (status, _, body) = get(addr, &format!("/new/{i}")).await;
        assert_eq!(status, 200);
        assert_eq!(json(&body)["uri"], format!("/new/{i}"));
    }
    let reply = raw(
        addr,
        b"GET /p1 HTTP/1.1\r\nHost: a\r\n\r\nGET /p2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    let (first, second) = (reply.find("/p1").expect("first answered"), reply.find("/p2").expect("second answered"));
    assert!(first < second, "pipelined answers in order: {reply}");
    let big = vec![b'x'; 1 << 20];
    let req = http::Request::post("/big").header("host", "a").body(http_body_util::Full::from(big)).unwrap();
    let (status, _, body) = c.send(req).await;
    assert_eq!(status, 200);
    assert_eq!(json(&body)["body_len"], 1 << 20);
}

/// A raw origin on port 0 that counts the connections it accepts and runs
/// `conn` on each, with a signal the test raises to let paced answers go on.
async fn gated_origin<F, Fut>(
    conn: F,
) -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU64>, tokio::sync::watch::Sender<bool>)
where
    F: Fn(tokio::net::TcpStream, tokio::sync::watch::Receiver<bool>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let c = conns.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(conn(s, go_rx.clone()));
        }
    });
    (origin, conns, go_tx)
}

/// A client of frontend `web` (backend `b`, server `o`) that sends `GET path`,
/// reads until `enough` says so and leaves; then the origin is let go on
/// (`go`), and this waits until the proxy has read the rest of the response and
/// kept the server connection.
async fn leave_mid_response(
    p: &tollgate_proxy::Server,
    path: &str,
    enough: impl Fn(&[u8]) -> bool,
    go: &tokio::sync::watch::Sender<bool>,
) {
    let mut s = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes()).await.unwrap();
    let mut got = Vec::new();
    while !enough(&got) {
        let mut b = [0u8; 16 * 1024];
        let n = s.read(&mut b).await.unwrap();
        assert!(n > 0, "proxy closed early");
        got.extend_from_slice(&b[..n]);
    }
    drop(s);
    // The proxy logs the abort when it notices the close; let the origin finish.
    let snap = p.snapshot();
    let server = snap.backend("b").unwrap().server("o").unwrap().clone();
    go.send(true).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.stats.connections_saved.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "the abandoned response's connection was not kept");
        tokio::task::yield_now().await;
    }
}

/// The end of the first `\r\n\r\n` in `b`, or panics.
fn head_end(b: &[u8]) -> usize {
    b.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4
}

/// `global.splice`: a body larger than the read that brought its head goes from
/// the server's socket to the client's through a pipe. Three pipelined 1 MiB
/// responses arrive whole and in order on one connection, and their bytes are
/// counted as spliced; with `splice = false` the same bytes come copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_spliced_whole_and_in_order() {
    const LEN: usize = 1 << 20;
    let body = Bytes::from((0..LEN as u32).map(|i| (i ^ (i >> 9)) as u8).collect::<Vec<u8>>());
    let b = body.clone();
    let o = serve(move |req| {
        // The first byte names the request, to tell the responses apart.
        let mut v = b.to_vec();
        v[0] = req.uri().path().as_bytes()[1];
        async move { http::Response::new(http_body_util::Full::new(Bytes::from(v))) }
    })
    .await;
    for splice in [true, false] {
        let p = proxy(&format!("[global]\nworkers = 1\nsplice = {splice}\n{}", cfg_for(o.addr, "")));
        let before = tollgate_proxy::io::splice::spliced_bytes();
        let mut s = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
        s.write_all(
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let mut all = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut all)).await.unwrap().unwrap();
        let mut rest = &all[..];
        for tag in [b'a', b'b', b'c'] {
            let end = head_end(rest);
            let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200") && head.contains(&format!("content-length: {LEN}")), "{head}");
            assert!(rest.len() >= end + LEN, "splice = {splice}: response {} cut short", tag as char);
            let got = &rest[end..end + LEN];
            assert_eq!(got[0], tag, "splice = {splice}: responses out of order");
            assert!(got[1..] == body[1..], "splice = {splice}: response {} altered", tag as char);
            rest = &rest[end + LEN..];
        }
        assert!(rest.is_empty(), "splice = {splice}: {} bytes after the last response", rest.len());
        if splice {
            let spliced = tollgate_proxy::io::splice::spliced_bytes() - before;
            assert!(spliced >= 3 * (LEN as u64 - 16 * 1024), "only {spliced} bytes spliced");
        }
    }
}

/// A client that leaves in the middle of a spliced body: the rest of the
/// response is read from the server and the connection kept for the next
/// request; a server that closes in the middle of one: the client's
/// connection is closed after the bytes that came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spliced_bodies_cut_short_by_either_side() {
    use std::sync::atomic::Ordering;
    const LEN: usize = 200 * 1024;
    let (origin, conns, go_tx) = gated_origin(|mut s, mut go| async move {
        let mut buf = vec![0u8; 4096];
        let body = vec![b'z'; LEN];
        while let Ok(n @ 1..) = s.read(&mut buf).await {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n");
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(&body[..LEN / 2]).await.unwrap();
            if buf[..n].starts_with(b"GET /cut") {
                return; // closes half way
            }
            if buf[..n].starts_with(b"GET /paced") {
                let _ = go.wait_for(|g| *g).await;
            }
            s.write_all(&body[LEN / 2..]).await.unwrap();
        }
    })
    .await;
    let p = proxy(&cfg_for(origin, ""));
    let addr = p.addr("web").unwrap();

    // The client reads part of the body, then leaves.
    leave_mid_response(&p, "/paced", |got| got.len() >= 64 * 1024, &go_tx).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /whole HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all)).await.unwrap().unwrap();
    let end = head_end(&all);
    assert!(all[end..].len() == LEN && all[end..].iter().all(|&b| b == b'z'), "{} body bytes", all.len() - end);
    assert_eq!(conns.load(Ordering::Relaxed), 1, "no new upstream connection");

    // The server closes half way: the client gets that half, then the close.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /cut HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all)).await.unwrap().unwrap();
    let end = head_end(&all);
    assert_eq!(all.len() - end, LEN / 2, "the bytes sent before the close");
    // And the proxy goes on serving.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /again HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all)).await.unwrap().unwrap();
    assert_eq!(all.len() - head_end(&all), LEN);
}

/// A request body larger than the read that brought its head goes to the
/// server through a pipe too (an upload). A 1 MiB POST arrives whole at the
/// server, and the request pipelined behind it is not taken for body bytes;
/// with `splice = false` the same bytes come copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_uploads_are_spliced_whole_and_a_pipelined_request_follows() {
    const LEN: usize = 1 << 20;
    let body: Vec<u8> = (0..LEN as u32).map(|i| (i ^ (i >> 7)) as u8).collect();
    let expected = body.clone();
    let o = serve(move |req| {
        let expected = expected.clone();
        async move {
            let path = req.uri().path().to_string();
            let got = req.into_body().collect().await.unwrap().to_bytes();
            let verdict = if path == "/up" { got[..] == expected[..] } else { got.is_empty() };
            http::Response::new(http_body_util::Full::new(Bytes::from(format!("{path} {} {verdict}", got.len()))))
        }
    })
    .await;
    for splice in [true, false] {
        let p = proxy(&format!("[global]\nworkers = 1\nsplice = {splice}\n{}", cfg_for(o.addr, "")));
        let before = tollgate_proxy::io::splice::spliced_bytes();
        let mut s = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
        let (mut rd, mut wr) = s.split();
        let send = async {
            wr.write_all(format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {LEN}\r\n\r\n").as_bytes())
                .await
                .unwrap();
            // In pieces, so that most of the body comes after the head's read.
            for piece in body.chunks(64 * 1024) {
                wr.write_all(piece).await.unwrap();
            }
            wr.write_all(b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        };
        let mut all = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut all));
        let ((), got) = tokio::join!(send, read);
        got.unwrap().unwrap();
        let all = String::from_utf8_lossy(&all);
        assert!(all.contains(&format!("/up {LEN} true")), "splice = {splice}: {all}");
        assert!(all.contains("/next 0 true"), "splice = {splice}: {all}");
        if splice {
            let spliced = tollgate_proxy::io::splice::spliced_bytes() - before;
            assert!(spliced >= LEN as u64 - 64 * 1024, "only {spliced} bytes spliced");
        }
    }
}

/// A server that answers before a spliced upload is complete (here 413 after
/// the head; the body, over 16 KiB on plain TCP, takes the pipe as `splice`
/// is on by default): the answer reaches the client, which has sent only part
/// of the body, and the connection closes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_to_a_spliced_upload_reaches_the_client() {
    let (origin, _, _go) = gated_origin(|mut s, _| async move {
        let mut head = Vec::new();
        let mut b = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(n @ 1..) => head.extend_from_slice(&b[..n]),
                _ => return,
            }
        }
        let answer = "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big\n";
        s.write_all(answer.as_bytes()).await.unwrap();
        // Keep reading what comes, as a server that drains before closing.
        while let Ok(1..) = s.read(&mut b).await {}
    })
    .await;
    let p = proxy(&cfg_for(origin, ""));
    let mut s = tokio::net::TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n").await.unwrap();
    s.write_all(&[b'u'; 200 * 1024]).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut reply)).await.unwrap().unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 413") && reply.ends_with("too big\n"), "{reply}");
}
