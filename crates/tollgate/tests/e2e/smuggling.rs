//! Framing that a client or a server could bend: request smuggling through
//! `Connection`, status lines a server may send, repeated lengths, transfer
//! codings, and the request-line forms RFC 9112 allows. Each test here failed
//! before its fix.

use crate::harness::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(5);

/// A frontend with a deny rule for `/admin/` in front of `origin`.
fn guarded(origin: std::net::SocketAddr) -> String {
    format!(
        r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:0"]
default_backend = "b"
  [[frontend.rule]]
  when = {{ path_prefix = "/admin/" }}
  deny = {{ status = 403 }}

[[backend]]
name = "b"
  [[backend.server]]
  name = "s1"
  addr = "{origin}"
"#
    )
}

/// The heads an origin has received so far.
fn heads_seen(o: &mut RawOrigin) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(h) = o.heads.try_recv() {
        out.push(h);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_naming_content_length_cannot_smuggle_a_request_past_a_deny_rule() {
    let mut o = raw_origin().await;
    let p = proxy(&guarded(o.addr));
    let addr = p.addr("web").unwrap();
    let smuggled = "GET /admin/secret HTTP/1.1\r\nHost: a\r\n\r\n";
    for conn in ["Content-Length", "close, content-length", "Transfer-Encoding", "Host"] {
        let req = format!(
            "POST /public HTTP/1.1\r\nHost: a\r\nConnection: {conn}\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        );
        let reply = raw(addr, req.as_bytes(), LIMIT).await;
        assert_eq!(status_of(&reply), 400, "Connection: {conn}: {reply}");
        assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "one answer, then the connection closes: {reply}");
    }
    // The deny rule still answers a plain request, and nothing reached the origin.
    assert_eq!(status_of(&raw(addr, smuggled.as_bytes(), LIMIT).await), 403);
    assert_eq!(heads_seen(&mut o), Vec::<String>::new());
}

/// The same smuggling attempt on a TLS bind, and in front of a cache: refused
/// with 400 before anything reaches the origin, so no smuggled response can
/// be stored under the page another client asks for next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_naming_content_length_smuggles_nothing_over_tls_or_into_the_cache() {
    use crate::tls::{BOTH, Pki, client, handshake, tls_bind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut o = raw_origin().await;
    let pki = Pki::new("smuggling");
    let (_, cert) = pki.leaf("site.pem", &["site.test"], false);
    let toml = crate::cache::cfg(o.addr, "")
        .replace("bind = [\"127.0.0.1:0\"]", &format!("bind = [\"127.0.0.1:0\", {}]", tls_bind(2, &[&cert], "")));
    let p = proxy(&toml);
    let (plain, tls) = (p.listening()[0].1, p.listening()[1].1);
    let smuggled = "GET /page HTTP/1.1\r\nHost: test.local\r\n\r\n";
    let attack = format!(
        "POST /other HTTP/1.1\r\nHost: test.local\r\nConnection: Content-Length\r\nContent-Length: {}\r\n\r\n{smuggled}",
        smuggled.len()
    );
    // Over TLS.
    let (cfg, _) = client(BOTH, Some(&pki), None);
    let mut s = handshake(tls, "site.test", &cfg).await.expect("TLS handshake");
    s.write_all(attack.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    let reply = String::from_utf8_lossy(&out);
    assert_eq!(status_of(&reply), 400, "{reply}");
    assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "one answer, then the connection closes: {reply}");
    // In plain HTTP, in front of the cache.
    let reply = raw(plain, attack.as_bytes(), LIMIT).await;
    assert_eq!(status_of(&reply), 400, "{reply}");
    assert_eq!(heads_seen(&mut o), Vec::<String>::new(), "nothing reached the origin");
    // The page is fetched from the origin by the next client, not served from
    // anything stored under it.
    let reply = raw(plain, b"GET /page HTTP/1.1\r\nHost: test.local\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(reply.to_ascii_lowercase().contains("cache-status: tollgate; fwd=uri-miss"), "{reply}");
    let heads = heads_seen(&mut o);
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("GET /page HTTP/1.1"), "{heads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_line_without_a_reason_phrase_is_relayed_and_the_proxy_lives_on() {
    let o = raw_origin_answering(b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok").await;
    let p = proxy(&simple_config("roundrobin", &[("s1", o.addr, 1)], ""));
    let addr = p.addr("web").unwrap();
    let mut c = Client::connect(addr).await;
    for _ in 0..3 {
        let (status, _, body) = c.get("/").await;
        assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
    }
    let o404 = raw_origin_answering(b"HTTP/1.0 404\r\nContent-Length: 0\r\n\r\n").await;
    let p404 = proxy(&simple_config("roundrobin", &[("s1", o404.addr, 1)], ""));
    assert_eq!(get(p404.addr("web").unwrap(), "/").await.0, 404);
    // The first proxy still answers.
    assert_eq!(get(addr, "/").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connection_header_cannot_remove_what_the_proxy_adds() {
    let o = echo().await;
    let toml = simple_config("roundrobin", &[("s1", o.addr, 1)], "").replace(
        "default_backend = \"b\"",
        "default_backend = \"b\"\n  [[frontend.rule]]\n  set_request_headers = { \"X-Rule\" = \"set\" }",
    );
    let p = proxy(&toml);
    let req = "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Forwarded-For, X-Forwarded-Proto, X-Rule\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";
    let reply = raw(p.addr("web").unwrap(), req.as_bytes(), Duration::from_millis(500)).await;
    let body = &reply[reply.find("\r\n\r\n").expect("a response") + 4..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {reply}"));
    assert_eq!(echoed_header(&v, "x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(echoed_header(&v, "x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(echoed_header(&v, "x-rule").as_deref(), Some("set"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_connection_header_naming_content_length_keeps_the_framing() {
    let o =
        raw_origin_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: Content-Length\r\n\r\nhello").await;
    let p = proxy(&simple_config("roundrobin", &[("s1", o.addr, 1)], ""));
    let mut c = Client::connect(p.addr("web").unwrap()).await;
    for _ in 0..3 {
        let (status, headers, body) = c.get("/").await;
        assert_eq!((status.as_u16(), &body[..]), (200, &b"hello"[..]));
        assert_eq!(headers.get("content-length").map(|v| v.as_bytes()), Some(&b"5"[..]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_content_length_goes_on_as_one_value() {
    let mut o = raw_origin().await;
    let p = proxy(&simple_config("roundrobin", &[("s1", o.addr, 1)], ""));
    let addr = p.addr("web").unwrap();
    for cl in ["Content-Length: 5,5", "Content-Length: 5\r\nContent-Length: 5"] {
        let req = format!("POST / HTTP/1.1\r\nHost: a\r\n{cl}\r\nConnection: close\r\n\r\nhello");
        assert_eq!(status_of(&raw(addr, req.as_bytes(), LIMIT).await), 200, "{cl}");
        let head = o.heads.recv().await.unwrap().to_ascii_lowercase();
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
        assert!(head.contains("content-length: 5\r\n"), "{head}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_coding_other_than_chunked_is_501_and_never_forwarded() {
    let mut o = raw_origin().await;
    let p = proxy(&simple_config("roundrobin", &[("s1", o.addr, 1)], ""));
    let addr = p.addr("web").unwrap();
    for te in ["gzip, chunked", "foo, chunked", "gzip\r\nTransfer-Encoding: chunked"] {
        let req = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {te}\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(status_of(&raw(addr, req.as_bytes(), LIMIT).await), 501, "{te}");
    }
    assert_eq!(heads_seen(&mut o), Vec::<String>::new());
}

/// A chunk extension goes to the server as the client sent it, so one off
/// its grammar is refused: with a quote left open, a server that reads a
/// quoted string on to the next quote would take the rest of the body and the
/// next request for the extension, and answer something else than we framed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_extension_off_its_grammar_is_400_and_goes_no_further() {
    let mut o = raw_origin().await;
    let p = proxy(&guarded(o.addr));
    let addr = p.addr("web").unwrap();
    let next = "GET /admin/secret HTTP/1.1\r\nHost: a\r\n\r\n";
    for ext in [";a=\"", ";a=\"b\\\"", " 2", ";a b", ";"] {
        let req = format!(
            "POST /public HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1{ext}\r\nx\r\n0\r\n\r\n{next}"
        );
        let reply = raw(addr, req.as_bytes(), LIMIT).await;
        assert_eq!(status_of(&reply), 400, "{ext}: {reply}");
        assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "one answer, then the connection closes: {reply}");
    }
    // In its grammar, the same body goes through.
    let req = "POST /public HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1 ; a = \"b;\\\"c\"\r\nx\r\n0\r\n\r\n";
    assert_eq!(status_of(&raw(addr, req.as_bytes(), LIMIT).await), 200);
    assert!(heads_seen(&mut o).iter().all(|h| !h.contains("/admin/")));
}

/// A request's trailers go to the server as they came, so one naming a field
/// the request was framed or routed by (a server folding trailers into the
/// head would see another Host than the rules saw) is refused; others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_trailer_naming_a_framing_or_routing_field_is_400() {
    let o = raw_origin().await;
    let p = proxy(&guarded(o.addr));
    let addr = p.addr("web").unwrap();
    for trailer in ["Host: admin.internal", "content-length: 99", "Transfer-Encoding: chunked"] {
        let req = format!(
            "POST /public HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n{trailer}\r\n\r\n"
        );
        let reply = raw(addr, req.as_bytes(), LIMIT).await;
        assert_eq!(status_of(&reply), 400, "{trailer}: {reply}");
    }
    let req = "POST /public HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\nX-Checksum: 1\r\n\r\n";
    assert_eq!(status_of(&raw(addr, req.as_bytes(), LIMIT).await), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_without_a_path_and_a_leading_empty_line() {
    let mut o = raw_origin().await;
    let p = proxy(&simple_config("roundrobin", &[("s1", o.addr, 1)], ""));
    let addr = p.addr("web").unwrap();
    let reply = raw(addr, b"GET http://a.example?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert_eq!(status_of(&reply), 200);
    let head = o.heads.recv().await.unwrap();
    assert!(head.starts_with("GET /?x=1 HTTP/1.1\r\n"), "{head}");
    // RFC 9112 section 2.2: an empty line before the request line is ignored.
    let reply = raw(addr, b"\r\nGET /after HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", LIMIT).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(o.heads.recv().await.unwrap().starts_with("GET /after HTTP/1.1\r\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leading_empty_line_on_an_h2c_bind_is_ignored_too() {
    let mut o = raw_origin().await;
    let toml = simple_config("roundrobin", &[("s1", o.addr, 1)], "")
        .replace(r#"bind = ["127.0.0.1:0"]"#, r#"bind = [{ addr = "127.0.0.1:0", h2c = true }]"#);
    let p = proxy(&toml);
    for start in ["\r\n", "\n", "\r\n\r\n"] {
        let req = format!("{start}GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let reply = raw(p.addr("web").unwrap(), req.as_bytes(), LIMIT).await;
        assert_eq!(status_of(&reply), 200, "{start:?}: {reply}");
        assert!(o.heads.recv().await.unwrap().starts_with("GET /x HTTP/1.1\r\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_to_a_protocol_not_allowed_cannot_tunnel_past_the_rules() {
    // An origin that switches to whatever it is asked for.
    let answer = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\n";
    let mut o = raw_origin_answering(answer).await;
    let p = proxy(&guarded(o.addr));
    let smuggled = "GET /admin/secret HTTP/1.1\r\nHost: a\r\n\r\n";
    let req = format!("GET /public HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: foo\r\n\r\n{smuggled}");
    let reply = raw(p.addr("web").unwrap(), req.as_bytes(), LIMIT).await;
    // The server got a plain request (no Upgrade), so its 101 is a bad answer.
    assert_eq!(status_of(&reply), 502, "{reply}");
    let heads = heads_seen(&mut o);
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("GET /public ") && !heads[0].to_ascii_lowercase().contains("upgrade"), "{heads:?}");

    // Allowed by `upgrades`: the offer goes on and the connection switches.
    let toml = guarded(o.addr)
        .replace("default_backend = \"b\"", "default_backend = \"b\"\nupgrades = [\"websocket\", \"foo\"]");
    let p = proxy(&toml);
    let req = "GET /public HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: foo\r\n\r\n";
    let reply = raw(p.addr("web").unwrap(), req.as_bytes(), Duration::from_millis(300)).await;
    assert_eq!(status_of(&reply), 101, "{reply}");
    let heads = heads_seen(&mut o);
    assert!(heads[0].to_ascii_lowercase().contains("\r\nupgrade: foo\r\n"), "{heads:?}");
}

/// A frontend over `origin` with `limits` (TOML inside the frontend's `limits`), h2c on.
fn with_limits(origin: std::net::SocketAddr, limits: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nh2c = true\ndefault_backend = \"b\"\nlimits = {{ {limits} }}\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{origin}\"\n"
    )
}

/// Names that pass for framing ones (`Content_Length`, `transfer--encoding`)
/// never reach a server that might fold them into the real ones: dropped by
/// default, refused or kept by config; a repeated Content-Length refused on
/// demand; the same over HTTP/2, where a Host other than :authority is
/// refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookalike_framing_names_and_repeated_lengths_are_normalised() {
    let req = "POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 60\r\ntransfer--encoding: chunked\r\nX_Ok: 1\r\n\
               Content-Length: 5\r\nConnection: close\r\n\r\nhello";
    let mut o = raw_origin().await;
    let p = proxy(&with_limits(o.addr, ""));
    let addr = p.addr("web").unwrap();
    assert_eq!(status_of(&raw(addr, req.as_bytes(), LIMIT).await), 200);
    let head = o.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(!head.contains("content_length") && !head.contains("transfer--encoding"), "{head}");
    assert!(head.contains("x_ok: 1\r\n") && head.contains("content-length: 5\r\n"), "{head}");
    // Over HTTP/2 as well.
    let mut h2 = crate::h2::H2Client::plain(addr).await;
    let r = http::Request::post(format!("http://{addr}/")).header("content_length", "60").body(()).unwrap();
    let (s, _, _) = h2.send(r, Some(bytes::Bytes::from_static(b"hello"))).await;
    assert_eq!(s, http::StatusCode::OK);
    let head = o.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(!head.contains("content_length"), "{head}");
    let r = http::Request::get(format!("http://{addr}/")).header("host", "elsewhere.example").body(()).unwrap();
    assert_eq!(h2.send(r, None).await.0, http::StatusCode::BAD_REQUEST, "Host other than :authority");

    // Refused, or kept, by config (a new origin: the first took the HTTP/2
    // request's chunked body for a head too).
    let mut o = raw_origin().await;
    let p = proxy(&with_limits(o.addr, "lookalike_headers = \"refuse\", repeated_content_length = \"refuse\""));
    let addr = p.addr("web").unwrap();
    let reply = raw(addr, req.as_bytes(), LIMIT).await;
    assert_eq!(status_of(&reply), 400, "{reply}");
    let repeated = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\nConnection: close\r\n\r\nhello";
    assert_eq!(status_of(&raw(addr, repeated.as_bytes(), LIMIT).await), 400);
    assert_eq!(heads_seen(&mut o), Vec::<String>::new(), "nothing reached the server");
    let p = proxy(&with_limits(o.addr, "lookalike_headers = \"keep\""));
    assert_eq!(status_of(&raw(p.addr("web").unwrap(), req.as_bytes(), LIMIT).await), 200);
    let head = o.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.contains("content_length: 60\r\n"), "{head}");
}
