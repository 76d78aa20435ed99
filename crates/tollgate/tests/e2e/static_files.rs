//! Static files (`static = { root = ... }` on a backend): files, index files
//! and the directory redirect, validators, conditional and range requests,
//! precompressed siblings, compression on the way, the fallback backend, the
//! body over plain TCP (sendfile), TLS and HTTP/2; and every way out of the
//! root refused: `..`, encoded dots and slashes, NUL, symbolic links out.

use crate::cache::{field, origin, req, resp};
use crate::h2::H2Client;
use crate::harness::*;
use crate::tls::{BOTH, Https, Pki, client, tls_bind};
use http::{Request, StatusCode};
use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);
const SECRET: &str = "TOP SECRET, outside the root";

/// A served tree under `base/root`, with `base/outside/secret.txt` beside it.
fn tree(base: &Path) -> (String, Vec<u8>, String) {
    let root = base.join("root");
    let outside = base.join("outside");
    for d in [&root, &outside, &root.join("docs"), &root.join("empty"), &root.join("sub")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::write(root.join("hello.txt"), "hello, files\n").unwrap();
    std::fs::write(root.join("index.html"), "<h1>home</h1>\n").unwrap();
    std::fs::write(root.join("docs/index.html"), "<h1>docs</h1>\n").unwrap();
    std::fs::write(root.join("sub/a b.css"), "body { color: red }\n").unwrap();
    let big: Vec<u8> = (0..160 * 1024u32).map(|i| (i % 251) as u8 ^ (i >> 9) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let page: String = (0..3000).map(|i| format!("<p>line {i} of a page that compresses</p>\n")).collect();
    std::fs::write(root.join("page.html"), &page).unwrap();
    std::fs::write(root.join("app.js"), "console.log('plain');\n".repeat(100)).unwrap();
    std::fs::write(root.join("app.js.br"), "BROTLI BYTES").unwrap();
    std::fs::write(root.join("app.js.gz"), "GZIP BYTES").unwrap();
    std::fs::write(root.join("empty.css"), "").unwrap();
    // Links: one inside (followed), three that lead out (refused).
    symlink("hello.txt", root.join("link-in")).unwrap();
    symlink(outside.join("secret.txt"), root.join("link-abs")).unwrap();
    symlink("../outside/secret.txt", root.join("link-up")).unwrap();
    symlink("../outside", root.join("dir-out")).unwrap();
    let fifo = root.join("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
        .unwrap();
    (root.display().to_string(), big, page)
}

fn config(root: &str, files_extra: &str, backend_extra: &str, rest: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", h2c = true }}]\ndefault_backend = \"files\"\n\
         [[backend]]\nname = \"files\"\nstatic = {{ root = {root:?}{files_extra} }}\n{backend_extra}\n{rest}"
    )
}

async fn get(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)]) -> crate::cache::Reply {
    req(addr, "GET", path, headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_index_redirects_validators_and_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let (root, big, _) = tree(dir.path());
    let p = proxy(&config(&root, "", "", ""));
    let web = p.addr("web").unwrap();

    let (s, h, body) = get(web, "/hello.txt", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(&body[..], b"hello, files\n");
    assert_eq!(field(&h, "content-type"), "text/plain; charset=utf-8");
    assert_eq!(field(&h, "content-length"), "13");
    assert_eq!(field(&h, "accept-ranges"), "bytes");
    let etag = field(&h, "etag").to_string();
    let lm = field(&h, "last-modified").to_string();
    assert!(etag.starts_with('"') && etag.ends_with("-d\""), "{etag}");
    assert!(httpdate::parse_http_date(&lm).is_ok(), "{lm}");
    assert!(h.get("date").is_some() && h.get("vary").is_none(), "{h:?}");

    // HEAD: the same head, no body.
    let (s, h, body) = req(web, "HEAD", "/hello.txt", &[]).await;
    assert_eq!((s, field(&h, "content-length"), body.len()), (StatusCode::OK, "13", 0));

    // Index files, the directory redirect (query kept), an encoded name.
    let (s, _, body) = get(web, "/", &[]).await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"<h1>home</h1>\n"[..]));
    let (s, h, _) = get(web, "/docs?x=1", &[]).await;
    assert_eq!((s, field(&h, "location")), (StatusCode::MOVED_PERMANENTLY, "/docs/?x=1"));
    // The location is the path as resolved: never another host.
    for target in ["//evil.example/../docs", "/\\evil.example/../docs", "/sub/../docs"] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let reply = raw(web, request.as_bytes(), WAIT).await;
        assert!(reply.starts_with("HTTP/1.1 301") && reply.contains("\r\nlocation: /docs/\r\n"), "{target}: {reply}");
    }
    let (s, h, body) = get(web, "/docs/", &[]).await;
    assert_eq!(
        (s, field(&h, "content-type"), &body[..]),
        (StatusCode::OK, "text/html; charset=utf-8", &b"<h1>docs</h1>\n"[..])
    );
    let (s, h, _) = get(web, "/sub/a%20b.css", &[]).await;
    assert_eq!((s, field(&h, "content-type")), (StatusCode::OK, "text/css; charset=utf-8"));

    // Nothing there: 404, and the connection stays usable; other methods: 405.
    for path in ["/missing.txt", "/empty/", "/hello.txt/", "/fifo"] {
        let (s, _, _) = get(web, path, &[]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
    }
    let (s, h, _) = req(web, "POST", "/hello.txt", &[]).await;
    assert_eq!((s, field(&h, "allow")), (StatusCode::METHOD_NOT_ALLOWED, "GET, HEAD"));
    let reply = raw(
        web,
        b"GET /missing HTTP/1.1\r\nHost: a\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 404") && reply.contains("\r\n\r\nhello, files\n"), "{reply}");

    // Conditional requests (RFC 9110 section 13).
    for (name, value, want) in [
        ("if-none-match", etag.as_str(), StatusCode::NOT_MODIFIED),
        ("if-none-match", "\"other\"", StatusCode::OK),
        ("if-modified-since", lm.as_str(), StatusCode::NOT_MODIFIED),
        ("if-modified-since", "Thu, 01 Jan 1970 00:00:01 GMT", StatusCode::OK),
        ("if-match", "\"other\"", StatusCode::PRECONDITION_FAILED),
        ("if-match", etag.as_str(), StatusCode::OK),
        ("if-unmodified-since", "Thu, 01 Jan 1970 00:00:01 GMT", StatusCode::PRECONDITION_FAILED),
    ] {
        let (s, h, body) = get(web, "/hello.txt", &[(name, value)]).await;
        assert_eq!(s, want, "{name}: {value}");
        if s == StatusCode::NOT_MODIFIED {
            assert!(body.is_empty() && field(&h, "etag") == etag && h.get("content-type").is_none(), "{h:?}");
        }
    }

    // Ranges: one range, a suffix, If-Range, unsatisfiable.
    let (s, h, body) = get(web, "/big.bin", &[("range", "bytes=100-199")]).await;
    assert_eq!((s, field(&h, "content-range")), (StatusCode::PARTIAL_CONTENT, "bytes 100-199/163840"));
    assert_eq!(&body[..], &big[100..200]);
    let (s, _, body) = get(web, "/big.bin", &[("range", "bytes=-70000")]).await;
    assert_eq!((s, &body[..]), (StatusCode::PARTIAL_CONTENT, &big[big.len() - 70000..]));
    let (s, _, body) = get(web, "/big.bin", &[("range", "bytes=0-9"), ("if-range", "\"stale\"")]).await;
    assert_eq!((s, body.len()), (StatusCode::OK, big.len()));
    let (s, h, _) = get(web, "/big.bin", &[("range", "bytes=999999-")]).await;
    assert_eq!((s, field(&h, "content-range")), (StatusCode::RANGE_NOT_SATISFIABLE, "bytes */163840"));

    // The whole large file: sendfile over plain TCP, pieces over HTTP/2.
    let (s, h, body) = get(web, "/big.bin", &[]).await;
    assert_eq!((s, field(&h, "content-type")), (StatusCode::OK, "application/octet-stream"));
    assert!(body == big, "sendfile body: {} bytes", body.len());
    let mut h2 = H2Client::plain(web).await;
    let (s, h, body) = h2.get(&format!("http://{web}/big.bin")).await;
    assert_eq!((s, field(&h, "content-length")), (StatusCode::OK, "163840"));
    assert!(body == big, "HTTP/2 body: {} bytes", body.len());
    let (s, _, body) = h2.get(&format!("http://{web}/docs/")).await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"<h1>docs</h1>\n"[..]));
    let (s, _, _) = h2.get(&format!("http://{web}/missing")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Every way out of the root, on the wire as a client can send it: refused
/// (400 for a path that cannot be under the root, 404 for a link that leads
/// out), and the secret beside the root never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_path_escapes_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let (root, _, _) = tree(dir.path());
    let p = proxy(&config(&root, "", "", ""));
    let web = p.addr("web").unwrap();
    for (target, want) in [
        ("/../outside/secret.txt", 400),
        ("/docs/../../outside/secret.txt", 400),
        ("/%2e%2e/outside/secret.txt", 400),
        ("/.%2E/outside/secret.txt", 400),
        ("/%2e%2e%2foutside%2fsecret.txt", 400),
        ("/..%2Foutside/secret.txt", 400),
        ("/docs%2f..%2f..%2foutside/secret.txt", 400),
        ("/hello.txt%00.html", 400),
        ("/link-abs", 404),
        ("/link-up", 404),
        ("/dir-out/secret.txt", 404),
        ("/dir-out/", 404),
        ("http://a/../outside/secret.txt", 400),
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let reply = raw(web, request.as_bytes(), WAIT).await;
        assert_eq!(status_of(&reply), want, "{target}: {reply}");
        assert!(!reply.contains(SECRET), "{target} escaped: {reply}");
    }
    // A link that stays inside is followed.
    let (s, _, body) = get(web, "/link-in", &[]).await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"hello, files\n"[..]));
    // Over HTTP/2 too.
    let mut h2 = H2Client::plain(web).await;
    for path in ["/%2e%2e/outside/secret.txt", "/link-up", "/dir-out/secret.txt"] {
        let (s, _, body) = h2.get(&format!("http://{web}{path}")).await;
        assert!(s == StatusCode::BAD_REQUEST || s == StatusCode::NOT_FOUND, "{path}: {s}");
        assert!(!String::from_utf8_lossy(&body).contains(SECRET), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precompressed_siblings_and_compression_on_the_way() {
    let dir = tempfile::tempdir().unwrap();
    let (root, _, page) = tree(dir.path());
    let p = proxy(&config(&root, ", precompressed = true", "compression = true", ""));
    let web = p.addr("web").unwrap();
    let plain = "console.log('plain');\n".repeat(100);
    for (accept, coding, body) in [
        ("gzip, br", "br", "BROTLI BYTES"),
        ("gzip", "gzip", "GZIP BYTES"),
        ("br;q=0, gzip", "gzip", "GZIP BYTES"),
        ("zstd", "zstd", ""),
        ("identity", "", plain.as_str()),
    ] {
        let (s, h, got) = get(web, "/app.js", &[("accept-encoding", accept)]).await;
        assert_eq!(s, StatusCode::OK, "{accept}");
        assert_eq!(field(&h, "content-encoding"), coding, "{accept}");
        assert!(field(&h, "vary").contains("Accept-Encoding"), "{accept}: {h:?}");
        assert!(field(&h, "content-type").contains("javascript"), "{h:?}");
        if coding == "zstd" {
            // No .zst sibling: compressed on its way (chunked), as a server's response.
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(&got[..]).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, plain.as_bytes());
        } else {
            assert_eq!(&got[..], body.as_bytes(), "{accept}");
        }
    }
    // A page compressed on its way, over HTTP/1.1 and HTTP/2; a HEAD says so.
    let (s, h, got) = get(web, "/page.html", &[("accept-encoding", "gzip")]).await;
    assert_eq!((s, field(&h, "content-encoding")), (StatusCode::OK, "gzip"));
    assert!(field(&h, "etag").starts_with("W/"), "{h:?}");
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&got[..]).read_to_end(&mut out).unwrap();
    assert_eq!(out, page.as_bytes());
    let (s, h, got) = req(web, "HEAD", "/page.html", &[("accept-encoding", "gzip")]).await;
    assert_eq!((s, field(&h, "content-encoding"), got.len()), (StatusCode::OK, "gzip", 0));
    // Revalidated with that weak ETag: a 304 with the same ETag and Vary, no body.
    let etag = field(&h, "etag").to_string();
    let (s, h304, got) = get(web, "/page.html", &[("accept-encoding", "gzip"), ("if-none-match", &etag)]).await;
    assert_eq!((s, field(&h304, "etag"), got.len()), (StatusCode::NOT_MODIFIED, etag.as_str(), 0), "{h304:?}");
    assert!(field(&h304, "vary").contains("Accept-Encoding") && field(&h304, "content-encoding").is_empty());
    let mut h2 = H2Client::plain(web).await;
    let r = Request::get(format!("http://{web}/page.html")).header("accept-encoding", "br").body(()).unwrap();
    let (s, h, got) = h2.send(r, None).await;
    assert_eq!((s, field(&h, "content-encoding")), (StatusCode::OK, "br"));
    let mut out = Vec::new();
    brotli::Decompressor::new(&got[..], 4096).read_to_end(&mut out).unwrap();
    assert_eq!(out, page.as_bytes());
    // An empty file is not compressed (min_size 0 too): a plain, empty 200.
    let p0 = proxy(&config(&root, "", "compression = { min_size = \"0\" }", ""));
    let web0 = p0.addr("web").unwrap();
    let reply =
        raw(web0, b"GET /empty.css HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n", WAIT)
            .await;
    assert!(reply.contains("content-length: 0\r\n") && !reply.contains("content-encoding"), "{reply}");
    // HTTP/1.0: close-delimited.
    let reply = raw(web, b"GET /page.html HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n", WAIT).await;
    assert!(reply.contains("content-encoding: gzip") && !reply.contains("transfer-encoding"), "{}", &reply[..300]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_no_file_answers_goes_to_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let (root, _, _) = tree(dir.path());
    let (o, hits) =
        origin(|parts, _| resp(200, &[("content-type", "text/plain")], &format!("app {}", parts.uri.path()))).await;
    let rest = format!("[[backend]]\nname = \"app\"\n  [[backend.server]]\n  name = \"a1\"\n  addr = \"{}\"\n", o.addr);
    let p = proxy(&config(&root, ", fallback = \"app\"", "", &rest));
    let web = p.addr("web").unwrap();
    let (s, _, body) = get(web, "/hello.txt", &[]).await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"hello, files\n"[..]));
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    for (method, path) in [("GET", "/api/users"), ("POST", "/hello.txt"), ("GET", "/empty/")] {
        let (s, _, body) = req(web, method, path, &[]).await;
        assert_eq!((s, String::from_utf8_lossy(&body).into_owned()), (StatusCode::OK, format!("app {path}")));
    }
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 3);
    // A path that cannot be under the root is refused, not passed on.
    let (s, _, _) = get(web, "/%2e%2e/x", &[]).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (root, big, _) = tree(dir.path());
    let pki = Pki::new("static-files");
    let (_, cert) = pki.leaf("files.pem", &["files.test"], false);
    let toml = format!(
        "[[frontend]]\nname = \"web\"\nbind = [{}]\ndefault_backend = \"files\"\n\
         [[backend]]\nname = \"files\"\nstatic = {{ root = {root:?}, types = {{ bin = \"application/x-test\" }} }}\n",
        tls_bind(1, &[&cert], "")
    );
    let p = proxy(&toml);
    let (cfg, _) = client(BOTH, Some(&pki), None);
    let mut c = Https::connect(p.addrs()[0].1, "files.test", &cfg).await;
    let (s, h, body) = c.get("files.test", "/big.bin").await;
    assert_eq!((s, field(&h, "content-type")), (StatusCode::OK, "application/x-test"));
    assert!(body == big, "TLS body: {} bytes", body.len());
    let (s, _, body) = c.get("files.test", "/hello.txt").await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"hello, files\n"[..]));
}

/// A client that reads nothing of a large file: the write waits, the
/// client's timeout ends it, and the worker goes on serving others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_hold_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let (root, _, _) = tree(base);
    let huge = Path::new(&root).join("huge.bin");
    let mut f = std::fs::File::create(&huge).unwrap();
    for _ in 0..64 {
        f.write_all(&[7u8; 1 << 20]).unwrap();
    }
    drop(f);
    let p = proxy(
        &config(&root, "", "", "")
            .replace("default_backend = \"files\"\n", "default_backend = \"files\"\ntimeout = { client = \"1s\" }\n"),
    );
    let web = p.addr("web").unwrap();
    let mut stalled = tokio::net::TcpStream::connect(web).await.unwrap();
    use tokio::io::AsyncWriteExt;
    stalled.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    for _ in 0..3 {
        let (s, _, body) = tokio::time::timeout(Duration::from_secs(5), get(web, "/hello.txt", &[])).await.unwrap();
        assert_eq!((s, &body[..]), (StatusCode::OK, &b"hello, files\n"[..]));
    }
    drop(stalled);
}

/// examples/static.toml as written (its root, examples/www, relative to it),
/// on port 0 and in front of a test origin as its app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_example_serves_its_site_and_passes_the_rest_to_the_app() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/static.toml");
    let (o, _) = origin(|parts, _| resp(200, &[], &format!("app {}", parts.uri.path()))).await;
    let text = std::fs::read_to_string(&example)
        .unwrap()
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:3001", &o.addr.to_string())
        .replace("workers = 0", "workers = 1")
        .replace("access_log = \"stdout\"", "");
    let cfg = tollgate_config::parse(&text, &example).unwrap_or_else(|e| panic!("{e}"));
    let p = start_proxy(cfg).expect("proxy starts");
    let web = p.addr("web").unwrap();
    let (s, h, body) = get(web, "/", &[]).await;
    assert_eq!((s, field(&h, "content-type")), (StatusCode::OK, "text/html; charset=utf-8"));
    assert!(String::from_utf8_lossy(&body).contains("Served by Tollgate"));
    let (s, h, body) = get(web, "/css/site.css", &[("accept-encoding", "gzip")]).await;
    assert_eq!((s, field(&h, "content-encoding")), (StatusCode::OK, "gzip"));
    assert_eq!(field(&h, "cache-control"), "public, max-age=31536000, immutable");
    let mut css = String::new();
    flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut css).unwrap();
    assert!(css.starts_with("body {"), "{css}");
    let (s, _, body) = get(web, "/api/hello", &[]).await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"app /api/hello"[..]));
}

/// The rule docs/configuration.md gives to keep hidden files from being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_keeps_hidden_files_from_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let (root, _, _) = tree(dir.path());
    std::fs::create_dir(Path::new(&root).join(".git")).unwrap();
    std::fs::write(Path::new(&root).join(".git/config"), SECRET).unwrap();
    std::fs::write(Path::new(&root).join(".env"), SECRET).unwrap();
    let toml = config(&root, "", "", "").replace(
        "default_backend = \"files\"\n",
        "default_backend = \"files\"\n  [[frontend.rule]]\n  when = { path_regex = \"/\\\\.\" }\n  deny = 404\n",
    );
    let p = proxy(&toml);
    let web = p.addr("web").unwrap();
    for path in ["/.env", "/.git/config", "/docs/../.env", "/%2egit/config"] {
        let (s, _, body) = get(web, path, &[]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert!(!String::from_utf8_lossy(&body).contains(SECRET), "{path}");
    }
    let (s, _, _) = get(web, "/hello.txt", &[]).await;
    assert_eq!(s, StatusCode::OK);
}
