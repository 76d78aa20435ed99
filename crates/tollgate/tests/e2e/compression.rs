//! Response compression (`compression = true`): gzip, brotli and zstd chosen
//! by the client's Accept-Encoding, streamed over HTTP/1.1 (chunked, or
//! close-delimited to HTTP/1.0) and HTTP/2, `Vary` and weak ETags, the
//! responses left alone, and the cache storing the encoded variants.

use crate::cache::{cache_status, fetch, field, origin, resp};
use crate::h2::H2Client;
use crate::harness::*;
use http::{Request, StatusCode};
use std::io::Read;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn page() -> String {
    (0..4000).map(|i| format!("<p>paragraph {i} of a page that compresses well</p>\n")).collect()
}

fn decode(coding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap(),
        "br" => brotli::Decompressor::new(body, 4096).read_to_end(&mut out).unwrap(),
        "zstd" => zstd::stream::read::Decoder::new(body).unwrap().read_to_end(&mut out).unwrap(),
        other => panic!("coding {other}"),
    };
    out
}

fn config(addr: std::net::SocketAddr, extra_backend: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", h2c = true }}]\ndefault_backend = \"b\"\n\
         compression = true\n\
         [[backend]]\nname = \"b\"\n{extra_backend}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{addr}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_coding_by_accept_encoding_and_what_is_left_alone() {
    let body = page();
    let b = body.clone();
    let (o, _) = origin(move |parts, _| match parts.uri.path() {
        "/png" => resp(200, &[("content-type", "image/png")], &b),
        "/small" => resp(200, &[("content-type", "text/html")], "tiny"),
        "/encoded" => resp(200, &[("content-type", "text/html"), ("content-encoding", "gzip")], &b),
        "/no-transform" => resp(200, &[("content-type", "text/html"), ("cache-control", "no-transform")], &b),
        _ => resp(200, &[("content-type", "text/html; charset=utf-8"), ("etag", "\"v1\"")], &b),
    })
    .await;
    let p = proxy(&config(o.addr, ""));
    let web = p.addr("web").unwrap();
    for (accept, coding) in
        [("gzip", "gzip"), ("br", "br"), ("zstd", "zstd"), ("gzip, br, zstd", "zstd"), ("gzip, br;q=0.9", "gzip")]
    {
        let (s, h, got) = fetch(web, "/", &[("accept-encoding", accept)]).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(field(&h, "content-encoding"), coding, "{accept}");
        assert_eq!(field(&h, "vary"), "Accept-Encoding");
        assert_eq!(field(&h, "etag"), "W/\"v1\"");
        assert!(h.get("content-length").is_none(), "{h:?}");
        assert!(got.len() * 5 < body.len(), "{coding}: {} bytes", got.len());
        assert_eq!(decode(coding, &got), body.as_bytes(), "{accept}");
    }
    // Not accepted: as it is, but it varies.
    let huge = "x-unknown;q=0.5, ".repeat(2_000) + "gzip";
    for headers in [&[][..], &[("accept-encoding", "gzip;q=0, br;q=0")][..], &[("accept-encoding", huge.as_str())][..]]
    {
        let (s, h, got) = fetch(web, "/", headers).await;
        assert_eq!(s, StatusCode::OK);
        assert!(h.get("content-encoding").is_none(), "{headers:?}: {h:?}");
        assert_eq!(field(&h, "vary"), "Accept-Encoding");
        assert_eq!(field(&h, "etag"), "\"v1\"");
        assert_eq!(got, body.as_bytes());
    }
    // Left alone: other types, small bodies, encoded ones, no-transform.
    for path in ["/png", "/small", "/encoded", "/no-transform"] {
        let (s, h, got) = fetch(web, path, &[("accept-encoding", "gzip, br, zstd")]).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            h.get("content-encoding").map(|v| v.to_str().unwrap()),
            (path == "/encoded").then_some("gzip"),
            "{path}"
        );
        assert!(h.get("vary").is_none(), "{path}");
        assert_eq!(got.len(), if path == "/small" { 4 } else { body.len() }, "{path}");
    }
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_and_http10_clients_and_a_chunked_origin() {
    let body = page();
    let raw = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let raw: &'static [u8] = Box::leak(raw.into_bytes().into_boxed_slice());
    let o = raw_origin_answering(raw).await;
    let p = proxy(&config(o.addr, ""));
    let web = p.addr("web").unwrap();

    // HTTP/2: the encoded body in DATA frames.
    let mut h2 = H2Client::plain(web).await;
    let req = Request::get("http://a/").header("accept-encoding", "br").body(()).unwrap();
    let (s, h, got) = h2.send(req, None).await;
    assert_eq!((s, field(&h, "content-encoding")), (StatusCode::OK, "br"));
    assert_eq!(decode("br", &got), body.as_bytes());

    // HTTP/1.0: no chunked framing; the connection closes after the body.
    let mut c = tokio::net::TcpStream::connect(web).await.unwrap();
    c.write_all(b"GET / HTTP/1.0\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n").await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut all)).await.unwrap().unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&all[..split]).to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip") && head.contains("connection: close"), "{head}");
    assert!(!head.contains("transfer-encoding") && !head.contains("content-length"), "{head}");
    assert_eq!(decode("gzip", &all[split + 4..]), body.as_bytes());
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_keeps_each_encoding_as_a_variant() {
    let body = page();
    let b = body.clone();
    let (o, hits) =
        origin(move |_, _| resp(200, &[("content-type", "text/html"), ("cache-control", "max-age=60")], &b)).await;
    let toml = config(o.addr, "cache = { zone = \"main\" }") + "[[cache]]\nname = \"main\"\nmemory = \"8MiB\"\n";
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    for round in 0..2 {
        for coding in ["gzip", "zstd"] {
            let (s, h, got) = fetch(web, "/page", &[("accept-encoding", coding)]).await;
            assert_eq!((s, field(&h, "content-encoding")), (StatusCode::OK, coding));
            assert_eq!(decode(coding, &got), body.as_bytes(), "{coding} round {round}");
            let status = cache_status(&h);
            assert!(status.contains(if round == 0 { "fwd=" } else { "hit" }), "{coding} round {round}: {status}");
            if round == 1 {
                assert!(h.get("content-length").is_some(), "a stored variant has its length: {h:?}");
            }
        }
    }
    assert_eq!(hits.load(SeqCst), 2, "one origin fetch per encoding");
    // A client that sends no Accept-Encoding may take any coding (RFC 9110
    // section 12.5.3), and the zone answers from a stored variant: decoded
    // for it, with its length.
    let (s, h, got) = fetch(web, "/page", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(cache_status(&h).contains("hit"), "{h:?}");
    assert!(h.get("content-encoding").is_none(), "{h:?}");
    assert_eq!(field(&h, "content-length"), body.len().to_string());
    assert_eq!(got, body.as_bytes());
    assert_eq!(hits.load(SeqCst), 2);
    // A client that takes no coding gets neither stored variant: the plain
    // response, fetched and stored beside them.
    for _ in 0..2 {
        let (_, h, got) = fetch(web, "/page", &[("accept-encoding", "identity")]).await;
        assert!(h.get("content-encoding").is_none());
        assert_eq!(got, body.as_bytes());
    }
    assert_eq!(hits.load(SeqCst), 3);
    p.stop();
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// `compression = { decompress = true }`: a server's gzip response decoded on
/// its way to a client that does not take gzip, streamed, over HTTP/1.1 and
/// HTTP/2; as it is to one that does; and a compression bomb cut, not decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decompress_decodes_a_servers_encoding_for_clients_that_do_not_take_it() {
    let body = page();
    let (gz, bomb) = (gzip(body.as_bytes()), gzip(&vec![0u8; 64 << 20]));
    let gz2 = gz.clone();
    let (o, _) = origin(move |parts, _| {
        let data = if parts.uri.path() == "/bomb" { bomb.clone() } else { gz2.clone() };
        http::Response::builder()
            .header("content-type", "text/html")
            .header("content-encoding", "gzip")
            .header("etag", "\"v1\"")
            .body(http_body_util::Full::new(bytes::Bytes::from(data)))
            .unwrap()
    })
    .await;
    let p = proxy(&config(o.addr, "compression = { decompress = true }"));
    let web = p.addr("web").unwrap();
    for accept in [None, Some("identity"), Some("br")] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("accept-encoding", *a)).collect();
        let (s, h, got) = fetch(web, "/", &headers).await;
        assert_eq!(s, StatusCode::OK);
        assert!(h.get("content-encoding").is_none() && h.get("content-length").is_none(), "{accept:?}: {h:?}");
        assert_eq!((field(&h, "etag"), field(&h, "vary")), ("W/\"v1\"", "Accept-Encoding"));
        assert_eq!(got, body.as_bytes(), "{accept:?}");
    }
    let (s, h, got) = fetch(web, "/", &[("accept-encoding", "gzip")]).await;
    assert_eq!((s, field(&h, "content-encoding"), field(&h, "etag")), (StatusCode::OK, "gzip", "\"v1\""));
    assert_eq!(got, gz);
    let mut h2 = H2Client::plain(web).await;
    let (s, h, got) = h2.get(&format!("http://{web}/")).await;
    assert_eq!((s, h.get("content-encoding")), (StatusCode::OK, None));
    assert_eq!(got, body.as_bytes());
    // A bomb: 64 MiB of zeros in ~64 KiB of gzip; the response is cut.
    let reply = raw(web, b"GET /bomb HTTP/1.1\r\nHost: a\r\n\r\n", Duration::from_secs(10)).await;
    assert!(reply.starts_with("HTTP/1.1 200") && reply.contains("transfer-encoding: chunked"), "{}", &reply[..200]);
    assert!(!reply.ends_with("\r\n0\r\n\r\n") && reply.len() < 32 << 20, "{} bytes", reply.len());
    let (s, _, got) = fetch(web, "/", &[]).await;
    assert_eq!((s, got.len()), (StatusCode::OK, body.len()), "served on after the bomb");
}
