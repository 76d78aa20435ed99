//! TLS and HTTP/2 to servers: a server's `tls` (CA, SNI, client certificate,
//! `verify = "none"`), `proto = "h2"` / `"h2c"` with one multiplexed
//! connection per worker, gRPC (unary and server streaming, trailers) from an
//! HTTP/2 client and trailers to HTTP/1.1 clients, health checks over TLS and
//! HTTP/2. The servers are written here: rustls + hyper for HTTP/1.1 over TLS,
//! the `h2` crate for HTTP/2, each counting the connections it accepts.

use crate::harness::*;
use crate::tls::Pki;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use h2::RecvStream;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tollgate_proxy::lb::health::{self, Health};

const WAIT: Duration = Duration::from_secs(10);

/// A server under test: its address and the connections it accepted.
struct Backend {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The rustls config of a test server: the leaf `file` (for `names`) of
/// `pki`, ALPN `alpn`, and with `client_ca` a client certificate required.
fn server_tls(pki: &Pki, file: &str, names: &[&str], alpn: &[&[u8]], client_ca: Option<&Pki>) -> Arc<ServerConfig> {
    let (_, path) = pki.leaf(file, names, false);
    let pem = std::fs::read(&path).unwrap();
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&pem).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(rustls::pki_types::CertificateDer::from(ca.ca_der())).unwrap();
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(chain, key).unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// Accepts connections (TLS with `tls`), counts them and hands each to `serve`.
async fn listen<F, Fut>(tls: Option<Arc<ServerConfig>>, serve: F) -> Backend
where
    F: Fn(Conn) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let conn = match &tls {
                None => Conn::Plain(tcp),
                Some(cfg) => match tokio_rustls::TlsAcceptor::from(cfg.clone()).accept(tcp).await {
                    Ok(s) => Conn::Tls(Box::new(s)),
                    Err(_) => continue,
                },
            };
            tokio::spawn(serve(conn));
        }
    });
    Backend { addr, accepted, task }
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// An HTTP/1.1 server (over TLS when the connection is) answering `200 tls-ok`.
async fn h1_ok(conn: Conn) {
    let svc = service_fn(|_req| async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("tls-ok")))) });
    let _ = match conn {
        Conn::Plain(s) => http1::Builder::new().serve_connection(TokioIo::new(s), svc).await,
        Conn::Tls(s) => http1::Builder::new().serve_connection(TokioIo::new(s), svc).await,
    };
}

/// An HTTP/2 server: each stream is answered by `answer` (in a task of its own).
async fn h2_serve<F, Fut>(conn: Conn, answer: F)
where
    F: Fn(Request<RecvStream>, h2::server::SendResponse<Bytes>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    async fn run<T, F, Fut>(io: T, answer: F)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        F: Fn(Request<RecvStream>, h2::server::SendResponse<Bytes>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Ok(mut conn) = h2::server::Builder::new().max_concurrent_streams(100).handshake(io).await else { return };
        while let Some(Ok((req, respond))) = conn.accept().await {
            tokio::spawn(answer(req, respond));
        }
    }
    match conn {
        Conn::Plain(s) => run(s, answer).await,
        Conn::Tls(s) => run(s, answer).await,
    }
}

/// A gRPC message frame: the compressed flag, the length, the message.
fn grpc_frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + msg.len());
    b.put_u8(0);
    b.put_u32(msg.len() as u32);
    b.put_slice(msg);
    b.freeze()
}

/// The messages of a gRPC body.
fn grpc_messages(mut body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        out.push(String::from_utf8(body[5..5 + len].to_vec()).unwrap());
        body = &body[5 + len..];
    }
    out
}

/// A gRPC service by hand: `/echo.Echo/Unary` answers "hello <name>",
/// `/echo.Echo/Stream` sends "<name> 0" .. "<name> 2", `/echo.Echo/Fail`
/// answers with a status only (trailers-only); each ends with the
/// `grpc-status` and `grpc-message` trailers. It answers only requests with
/// `te: trailers` and `content-type: application/grpc`, as gRPC servers do.
async fn grpc(req: Request<RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
    let (parts, mut body) = req.into_parts();
    let grpc_ok = parts.headers.get("te").is_some_and(|v| v == "trailers")
        && parts.headers.get("content-type").is_some_and(|v| v == "application/grpc");
    let mut input = Vec::new();
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
        input.extend_from_slice(&d);
    }
    let name = grpc_messages(&input).pop().unwrap_or_default();
    let head = |status: &str| {
        Response::builder().status(200).header("content-type", "application/grpc").header("x-path", status)
    };
    if !grpc_ok {
        let _ = respond.send_response(Response::builder().status(415).body(()).unwrap(), true);
        return;
    }
    let trailers = |code: &str, msg: &str| {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", code.parse().unwrap());
        t.insert("grpc-message", msg.parse().unwrap());
        t
    };
    match parts.uri.path() {
        "/echo.Echo/Fail" => {
            let r = head("fail").header("grpc-status", "5").header("grpc-message", "no such thing").body(()).unwrap();
            let _ = respond.send_response(r, true);
        }
        path => {
            let Ok(mut send) = respond.send_response(head(path).body(()).unwrap(), false) else { return };
            let msgs: Vec<String> = if path == "/echo.Echo/Stream" {
                (0..3).map(|i| format!("{name} {i}")).collect()
            } else {
                vec![format!("hello {name}")]
            };
            for m in msgs {
                send.reserve_capacity(m.len() + 5);
                let _ = send.send_data(grpc_frame(m.as_bytes()), false);
            }
            let _ = send.send_trailers(trailers("0", "all good"));
        }
    }
}

/// An h2c client connection to Tollgate.
async fn h2c_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    tokio::spawn(conn);
    send
}

/// One gRPC call over `client`: the status, the messages and the trailers.
async fn grpc_call(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    name: &str,
) -> (StatusCode, HeaderMap, Vec<String>, Option<HeaderMap>) {
    let req = Request::post(format!("http://grpc.test{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut send = client.clone().ready().await.unwrap();
    let (resp, mut stream) = send.send_request(req, false).unwrap();
    stream.send_data(grpc_frame(name.as_bytes()), true).unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.expect("in time").expect("response");
    let (parts, mut body) = resp.into_parts();
    let mut data = Vec::new();
    while let Some(d) = tokio::time::timeout(WAIT, body.data()).await.expect("body in time") {
        let d = d.expect("body");
        let _ = body.flow_control().release_capacity(d.len());
        data.extend_from_slice(&d);
    }
    let trailers = tokio::time::timeout(WAIT, body.trailers()).await.expect("in time").expect("trailers");
    (parts.status, parts.headers, grpc_messages(&data), trailers)
}

fn config(frontend_bind: &str, backend: &str, server: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [{frontend_bind}]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n{backend}\n[[backend.server]]\nname = \"s\"\n{server}\n"
    )
}

const PLAIN: &str = "\"127.0.0.1:0\"";
const H2C: &str = "{ addr = \"127.0.0.1:0\", h2c = true }";

fn state(p: &tollgate_proxy::Server) -> health::CheckStatus {
    p.snapshot().backend("b").unwrap().server("s").unwrap().check_status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_backend_checks_its_certificate_by_the_ca_and_name_and_presents_a_client_certificate() {
    let pki = Pki::new("backend-ca");
    let (_, client_pem) = pki.leaf("client.pem", &["tollgate.client"], false);
    let ca = pki.dir.join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let tls = server_tls(&pki, "backend.pem", &["backend.test"], &[b"http/1.1"], Some(&pki));
    let b = listen(Some(tls), h1_ok).await;
    // With the client certificate, the right name and an HTTP check over TLS: UP, 200.
    let server = format!(
        "addr = \"{}\"\ntls = {{ ca = \"{}\", sni = \"backend.test\", cert = \"{client_pem}\" }}",
        b.addr,
        ca.display()
    );
    let p = proxy(&config(PLAIN, "check = { type = \"http\", interval = \"1h\" }", &server));
    assert_eq!(state(&p).health, Health::Up, "{}", state(&p).last_text());
    let front = p.addr("web").unwrap();
    let (status, _, body) = get(front, "/").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"tls-ok"[..]));
    let (status, _, _) = get(front, "/again").await;
    assert_eq!(status, StatusCode::OK);
    let accepted = b.accepted.load(Ordering::SeqCst);
    assert_eq!(accepted, 2, "one for the check, one pooled TLS connection for both requests");

    // The name in the certificate is checked: another SNI fails the handshake (502).
    let p2 = proxy(&config(PLAIN, "", &server.replace("backend.test", "other.test")));
    let (status, _, _) = get(p2.addr("web").unwrap(), "/").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    // No client certificate: the server refuses the handshake (502).
    let no_cert = format!("addr = \"{}\"\ntls = {{ ca = \"{}\", sni = \"backend.test\" }}", b.addr, ca.display());
    let p3 = proxy(&config(PLAIN, "", &no_cert));
    let (status, _, _) = get(p3.addr("web").unwrap(), "/").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_signed_by_another_ca_gets_502_and_is_marked_down_while_verify_none_accepts_it() {
    let pki = Pki::new("backend-wrong-ca");
    let other = Pki::new("backend-other-ca");
    let ca = pki.dir.join("other-ca.pem");
    std::fs::write(&ca, other.ca_pem()).unwrap();
    let b = listen(Some(server_tls(&pki, "backend.pem", &["backend.test"], &[], None)), h1_ok).await;
    let server = format!("addr = \"{}\"\ntls = {{ ca = \"{}\", sni = \"backend.test\" }}", b.addr, ca.display());
    let p = proxy(&config(PLAIN, "", &server));
    let (status, _, _) = get(p.addr("web").unwrap(), "/").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(p.snapshot().backend("b").unwrap().server("s").unwrap().stats.connect_errors.load(Ordering::Relaxed) >= 1);

    // With checks, the failed handshakes take it DOWN: a check's reason says why.
    let checked = config(PLAIN, "check = { type = \"tcp\", interval = \"1h\" }", &server);
    let p = proxy(&checked);
    let st = state(&p);
    assert_eq!(st.health, Health::Down);
    assert!(st.last_text().contains("TLS handshake"), "{}", st.last_text());
    assert_eq!(get(p.addr("web").unwrap(), "/").await.0, StatusCode::SERVICE_UNAVAILABLE);

    // verify = "none" takes any certificate.
    let none = format!("addr = \"{}\"\ntls = {{ verify = \"none\" }}", b.addr);
    let p = proxy(&config(PLAIN, "check = { type = \"tcp\", interval = \"1h\" }", &none));
    assert_eq!(state(&p).health, Health::Up, "{}", state(&p).last_text());
    let (status, _, body) = get(p.addr("web").unwrap(), "/").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"tls-ok"[..]));
}

/// An HTTP/2 server whose streams wait until `n` requests are in, then answer
/// each with its path.
async fn h2_barrier(tls: Option<Arc<ServerConfig>>, n: usize) -> Backend {
    let barrier = Arc::new(Barrier::new(n));
    listen(tls, move |conn| {
        let barrier = barrier.clone();
        h2_serve(conn, move |req, mut respond| {
            let barrier = barrier.clone();
            async move {
                if req.uri().path() != "/health" {
                    barrier.wait().await;
                }
                let body = Bytes::from(format!("{} {}", req.method(), req.uri().path()));
                let r = Response::builder().header("content-length", body.len()).body(()).unwrap();
                if let Ok(mut send) = respond.send_response(r, false) {
                    let _ = send.send_data(body, true);
                }
            }
        })
    })
    .await
}

/// `n` HTTP/1.1 requests at once, each on its own client connection.
async fn concurrent_gets(front: SocketAddr, n: usize, what: &'static str) -> Vec<(StatusCode, Bytes)> {
    let all: Vec<_> = (0..n)
        .map(|i| {
            tokio::spawn(async move {
                let (s, _, b) = tokio::time::timeout(WAIT, get(front, &format!("/r{i}"))).await.expect(what);
                (s, b)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in all {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_and_h2_backends_multiplex_concurrent_requests_on_one_connection() {
    const N: usize = 8;
    // h2c, with an HTTP check over HTTP/2.
    let b = h2_barrier(None, N).await;
    let server = format!("addr = \"{}\"\nproto = \"h2c\"", b.addr);
    let p = proxy(&config(PLAIN, "check = { type = \"http\", path = \"/health\", interval = \"1h\" }", &server));
    assert_eq!(state(&p).health, Health::Up, "{}", state(&p).last_text());
    let checks = b.accepted.load(Ordering::SeqCst);
    let got = concurrent_gets(p.addr("web").unwrap(), N, "h2c").await;
    for (i, (s, body)) in got.iter().enumerate() {
        assert_eq!((*s, &body[..]), (StatusCode::OK, format!("GET /r{i}").as_bytes()));
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst) - checks, 1, "all {N} requests on one upstream connection");

    // h2 over TLS (ALPN h2), set for the backend's servers.
    let pki = Pki::new("backend-h2");
    let ca = pki.dir.join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let b = h2_barrier(Some(server_tls(&pki, "h2.pem", &["h2.test"], &[b"h2"], None)), N).await;
    let backend = format!("proto = \"h2\"\ntls = {{ ca = \"{}\", sni = \"h2.test\" }}", ca.display());
    let p = proxy(&config(PLAIN, &backend, &format!("addr = \"{}\"", b.addr)));
    let got = concurrent_gets(p.addr("web").unwrap(), N, "h2").await;
    assert!(got.iter().all(|(s, _)| *s == StatusCode::OK), "{got:?}");
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1, "all {N} requests on one upstream connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_drops_an_h2_server_closes_the_connection_to_it() {
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
    let b = listen(None, move |conn| {
        let ended = ended_tx.clone();
        async move {
            h2_serve(conn, |_req, mut respond| async move {
                let r = Response::builder().header("content-length", 2).body(()).unwrap();
                if let Ok(mut send) = respond.send_response(r, false) {
                    let _ = send.send_data(Bytes::from("ok"), true);
                }
            })
            .await;
            let _ = ended.send(());
        }
    })
    .await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let (s, _, body) = tokio::time::timeout(WAIT, get(p.addr("web").unwrap(), "/")).await.expect("in time");
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"ok"[..]));
    // The server leaves the config: the worker's HTTP/2 connection to it is
    // closed at its next pool sweep (every second), not kept until the server
    // closes it.
    let other = listen(None, h1_ok).await;
    let toml = format!("[global]\nworkers = 1\n{}", config(PLAIN, "", &format!("addr = \"{}\"", other.addr)));
    let cfg = tollgate_config::parse(&toml, std::path::Path::new("test.toml")).unwrap();
    tokio::task::block_in_place(|| p.reload(cfg)).expect("reload");
    tokio::time::timeout(Duration::from_secs(15), ended.recv()).await.expect("the connection closed after the reload");
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_unary_and_server_streaming_pass_trailers_from_an_h2_client_to_an_h2c_server() {
    let b = listen(None, |conn| h2_serve(conn, grpc)).await;
    let p = proxy(&config(H2C, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let client = h2c_client(p.addr("web").unwrap()).await;

    let (status, headers, msgs, trailers) = grpc_call(&client, "/echo.Echo/Unary", "ada").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/grpc");
    assert_eq!(msgs, ["hello ada"]);
    let t = trailers.expect("trailers");
    assert_eq!((&t["grpc-status"], &t["grpc-message"]), (&"0".parse().unwrap(), &"all good".parse().unwrap()));

    let (status, _, msgs, trailers) = grpc_call(&client, "/echo.Echo/Stream", "bob").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(msgs, ["bob 0", "bob 1", "bob 2"]);
    assert_eq!(trailers.expect("trailers")["grpc-status"], "0");

    // Trailers-only: the status in the response head.
    let (status, headers, msgs, trailers) = grpc_call(&client, "/echo.Echo/Fail", "x").await;
    assert_eq!((status, msgs.len(), trailers), (StatusCode::OK, 0, None));
    assert_eq!(
        (&headers["grpc-status"], &headers["grpc-message"]),
        (&"5".parse().unwrap(), &"no such thing".parse().unwrap())
    );
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1, "three calls on one upstream connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http11_client_gets_an_h2_servers_trailers_in_its_chunked_body() {
    let b = listen(None, |conn| h2_serve(conn, grpc)).await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let mut req = b"POST /echo.Echo/Stream HTTP/1.1\r\nhost: grpc.test\r\ncontent-type: application/grpc\r\n\
                    te: trailers\r\nconnection: close\r\ncontent-length: 8\r\n\r\n"
        .to_vec();
    req.extend_from_slice(&grpc_frame(b"h1c"));
    let reply = raw(p.addr("web").unwrap(), &req, WAIT).await;
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(reply.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{reply}");
    assert!(reply.contains("h1c 0") && reply.contains("h1c 2"), "{reply}");
    assert!(reply.ends_with("0\r\ngrpc-status: 0\r\ngrpc-message: all good\r\n\r\n"), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_client_gets_an_http11_servers_chunked_trailers_as_http2_trailers() {
    let origin = raw_origin_answering(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\r\n\
          5\r\nhello\r\n0\r\ngrpc-status: 0\r\nx-checksum: abc\r\n\r\n",
    )
    .await;
    let p = proxy(&config(H2C, "", &format!("addr = \"{}\"", origin.addr)));
    let client = h2c_client(p.addr("web").unwrap()).await;
    let mut send = client.ready().await.unwrap();
    let (resp, _) = send.send_request(Request::get("http://t.test/").body(()).unwrap(), true).unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(d) = body.data().await {
        data.extend_from_slice(&d.unwrap());
    }
    assert_eq!(data, b"hello");
    let t = body.trailers().await.unwrap().expect("trailers");
    assert_eq!((&t["grpc-status"], &t["x-checksum"]), (&"0".parse().unwrap(), &"abc".parse().unwrap()));
}

/// examples/grpc.toml as written, its certificates made into certs/, its
/// listener on a free port and its servers played by the gRPC service above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_example_routes_calls_to_h2c_and_tls_h2_servers() {
    let pki = Pki::new("grpc-example");
    std::fs::create_dir_all(pki.dir.join("certs")).unwrap();
    std::fs::write(pki.dir.join("certs/billing-ca.pem"), pki.ca_pem()).unwrap();
    pki.leaf("certs/tollgate-client.pem", &["tollgate"], false);
    let g1 = listen(None, |conn| h2_serve(conn, grpc)).await;
    let g2 = listen(None, |conn| h2_serve(conn, grpc)).await;
    let tls = server_tls(&pki, "billing.pem", &["billing.internal"], &[b"h2"], Some(&pki));
    let b1 = listen(Some(tls), |conn| h2_serve(conn, grpc)).await;
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grpc.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let text = text
        .replace("addr = \":8080\"", "addr = \"127.0.0.1:0\"")
        .replace("127.0.0.1:50051", &g1.addr.to_string())
        .replace("127.0.0.1:50052", &g2.addr.to_string())
        .replace("127.0.0.1:50443", &b1.addr.to_string())
        .replace("access_log = \"stdout\"", "workers = 1");
    let file = pki.dir.join("grpc.toml");
    std::fs::write(&file, &text).unwrap();
    let cfg = tollgate_config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let p = start_proxy(cfg).unwrap();
    let client = h2c_client(p.addrs()[0].1).await;
    for name in ["a", "b"] {
        let (status, _, msgs, trailers) = grpc_call(&client, "/greeter.Greeter/SayHello", name).await;
        assert_eq!((status, msgs), (StatusCode::OK, vec![format!("hello {name}")]));
        assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
    }
    let (status, _, msgs, trailers) = grpc_call(&client, "/billing.Billing/Charge", "c").await;
    assert_eq!((status, msgs), (StatusCode::OK, vec!["hello c".to_string()]));
    assert_eq!(trailers.expect("trailers")["grpc-message"], "all good");
    let accepted = |b: &Backend| b.accepted.load(Ordering::SeqCst);
    assert!(accepted(&g1) >= 2 && accepted(&g2) >= 2, "a check and a call each (round robin)");
    assert!(accepted(&b1) >= 2, "a check and the call, over TLS with the client certificate");
}

/// The cache in front of an HTTP/2 server: the first GET is stored, the second
/// is a hit (with Age and Cache-Status) that never reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_from_an_h2c_server_are_cached() {
    let streams = Arc::new(AtomicUsize::new(0));
    let seen = streams.clone();
    let b = listen(None, move |conn| {
        let seen = seen.clone();
        h2_serve(conn, move |_req, mut respond| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move {
                let resp = Response::builder().header("cache-control", "max-age=60").body(()).unwrap();
                if let Ok(mut send) = respond.send_response(resp, false) {
                    let _ = send.send_data(Bytes::from_static(b"from h2"), true);
                }
            }
        })
    })
    .await;
    let toml = format!(
        "[[cache]]\nname = \"main\"\nmemory = \"1MiB\"\n{}",
        config(PLAIN, "cache = { zone = \"main\" }", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr))
    );
    let p = proxy(&toml);
    let addr = p.addr("web").unwrap();
    let (st, h, body) = get(addr, "/page").await;
    assert_eq!((st.as_u16(), &body[..]), (200, &b"from h2"[..]));
    assert!(h["cache-status"].to_str().unwrap().contains("stored"), "{h:?}");
    let (st, h, body) = get(addr, "/page").await;
    assert_eq!((st.as_u16(), &body[..]), (200, &b"from h2"[..]));
    assert!(h["cache-status"].to_str().unwrap().contains("hit"), "{h:?}");
    assert!(h.contains_key("age"));
    assert_eq!(streams.load(Ordering::SeqCst), 1, "the hit never reached the server");
}

/// A WebSocket echo server over HTTP/2 (RFC 8441), with `extended` its
/// SETTINGS_ENABLE_CONNECT_PROTOCOL: each extended CONNECT for `websocket` is
/// answered 200 (with `sec-websocket-protocol: chat` when asked for it, and
/// the `:path` it got in `x-path`), its DATA frames carried over a pipe to a
/// tungstenite server that echoes text prefixed with "h2:". Anything else
/// gets 400.
async fn h2_websocket_server(extended: bool) -> Backend {
    listen(None, move |conn| async move {
        let Conn::Plain(tcp) = conn else { return };
        let mut builder = h2::server::Builder::new();
        if extended {
            builder.enable_connect_protocol();
        }
        let Ok(mut conn) = builder.handshake::<_, Bytes>(tcp).await else { return };
        while let Some(Ok((req, mut respond))) = conn.accept().await {
            tokio::spawn(async move {
                let websocket = req.method() == http::Method::CONNECT
                    && req.extensions().get::<h2::ext::Protocol>().is_some_and(|p| p.as_str() == "websocket")
                    && !req.headers().contains_key("sec-websocket-key");
                if !websocket {
                    let r = Response::builder().status(400).body(()).unwrap();
                    let _ = respond.send_response(r, true);
                    return;
                }
                let mut r = Response::builder().header("x-path", req.uri().path());
                if req.headers().get("sec-websocket-protocol").is_some_and(|v| v.as_bytes().starts_with(b"chat")) {
                    r = r.header("sec-websocket-protocol", "chat");
                }
                let Ok(mut down) = respond.send_response(r.body(()).unwrap(), false) else { return };
                let mut up = req.into_body();
                let (near, far) = tokio::io::duplex(64 * 1024);
                let (mut rd, mut wr) = tokio::io::split(near);
                tokio::spawn(async move {
                    while let Some(Ok(d)) = up.data().await {
                        let _ = up.flow_control().release_capacity(d.len());
                        if wr.write_all(&d).await.is_err() {
                            return;
                        }
                    }
                    let _ = wr.shutdown().await;
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = rd.read(&mut buf).await.unwrap_or(0);
                        // h2 queues what the window does not yet take.
                        if down.send_data(Bytes::copy_from_slice(&buf[..n]), n == 0).is_err() || n == 0 {
                            return;
                        }
                    }
                });
                use tokio_tungstenite::tungstenite::protocol::Role;
                let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(far, Role::Server, None).await;
                crate::websocket::ws_echo(ws, "h2").await;
            });
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_reaches_an_h2_server_over_extended_connect() {
    let b = h2_websocket_server(true).await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let web = p.addr("web").unwrap();
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{web}/chat?room=1").into_client_request().unwrap();
    req.headers_mut().insert("sec-websocket-protocol", "chat".parse().unwrap());
    // tungstenite checks Sec-WebSocket-Accept against its key: Tollgate makes
    // it, the HTTP/2 server never sees the key.
    let (mut ws, resp) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req)).await.unwrap().unwrap();
    assert_eq!(resp.status(), 101);
    assert_eq!(resp.headers().get("sec-websocket-protocol").unwrap(), "chat");
    assert_eq!(resp.headers().get("x-path").unwrap(), "/chat");
    for i in 0..50 {
        ws.send(Message::text(format!("m{i}"))).await.unwrap();
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => assert_eq!(t.as_str(), format!("h2:m{i}")),
            other => panic!("no echo of m{i}: {other:?}"),
        }
    }
    // Larger than both sides' first flow-control windows (64 KiB).
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    match tokio::time::timeout(WAIT, ws.next()).await {
        Ok(Some(Ok(Message::Binary(got)))) => assert!(got[..] == big[..], "the echo differs"),
        other => panic!("no echo of the large message: {other:?}"),
    }
    // A second WebSocket: another stream on the same connection.
    let (mut ws2, _) = tokio_tungstenite::connect_async(format!("ws://{web}/two")).await.unwrap();
    ws2.send(Message::text("x")).await.unwrap();
    assert!(matches!(ws2.next().await, Some(Ok(Message::Text(t))) if t.as_str() == "h2:x"));
    // Closing handshakes go through, then both tunnels end.
    for mut w in [ws, ws2] {
        w.close(None).await.unwrap();
        let end = tokio::time::timeout(WAIT, async { while let Some(Ok(_)) = w.next().await {} }).await;
        assert!(end.is_ok(), "the tunnel did not end after the close");
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1, "both WebSockets on one upstream connection");
    // A plain request still goes to the same server (and gets its 400).
    let (s, _, _) = tokio::time::timeout(WAIT, get(web, "/")).await.unwrap();
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_to_an_h2_server_without_extended_connect_gets_501() {
    let b = h2_websocket_server(false).await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let web = p.addr("web").unwrap();
    for _ in 0..2 {
        // The first on a connection just opened, then one on it.
        let err = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(format!("ws://{web}/chat")))
            .await
            .unwrap()
            .expect_err("no WebSocket without RFC 8441");
        match err {
            tokio_tungstenite::tungstenite::Error::Http(resp) => assert_eq!(resp.status(), 501),
            other => panic!("{other:?}"),
        }
    }
    // An upgrade to a protocol the frontend's `upgrades` leave out is not one:
    // the server gets a plain GET (and this one answers those 400).
    let upgrade = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n";
    let head_of = async |addr| {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(upgrade).await.unwrap();
        let mut head = [0u8; 12];
        tokio::time::timeout(WAIT, tcp.read_exact(&mut head)).await.unwrap().unwrap();
        head
    };
    assert_eq!(&head_of(web).await, b"HTTP/1.1 400");
    // Allowed there, an upgrade to anything but WebSocket gets 501 from HTTP/2.
    let toml = config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr))
        .replace("default_backend = \"b\"", "default_backend = \"b\"\nupgrades = [\"websocket\", \"h2c\"]");
    let p = proxy(&toml);
    assert_eq!(&head_of(p.addr("web").unwrap()).await, b"HTTP/1.1 501");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc_8441_on_both_sides_an_h2_clients_websocket_reaches_an_h2_server() {
    let b = h2_websocket_server(true).await;
    let p = proxy(&config(H2C, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let client = h2c_client(p.addr("web").unwrap()).await;
    // Tollgate offers extended CONNECT in its SETTINGS; they come before the
    // answer to the first request, so wait for one.
    let (resp, _) = client
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(Request::get("http://ws.test/").body(()).unwrap(), true)
        .unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "the server's answer to a plain GET");
    assert!(client.is_extended_connect_protocol_enabled());
    let mut req = Request::connect("http://ws.test/chat").header("sec-websocket-version", "13").body(()).unwrap();
    req.extensions_mut().insert(h2::ext::Protocol::from("websocket"));
    let (resp, mut up) = client.clone().ready().await.unwrap().send_request(req, false).unwrap();
    let resp = tokio::time::timeout(WAIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("x-path").unwrap(), "/chat");
    let mut down = resp.into_body();
    // A masked text frame (RFC 6455 section 5.2), and its echo.
    let mask = [9u8, 8, 7, 6];
    let mut frame = vec![0x81, 0x80 | 5];
    frame.extend_from_slice(&mask);
    frame.extend(b"hello".iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    up.send_data(Bytes::from(frame), false).unwrap();
    let mut got = Vec::new();
    while got.len() < 2 + 8 {
        let chunk = tokio::time::timeout(WAIT, down.data()).await.unwrap().unwrap().unwrap();
        let _ = down.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    assert_eq!(&got[..], b"\x81\x08h2:hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_servers_103_reaches_http11_and_http2_clients() {
    let b = listen(None, |conn| {
        h2_serve(conn, |_req, mut respond| async move {
            let hint = Response::builder().status(103).header("link", "</s.css>; rel=preload").body(()).unwrap();
            respond.send_informational(hint).unwrap();
            let mut send = respond.send_response(Response::builder().status(200).body(()).unwrap(), false).unwrap();
            send.send_data(Bytes::from_static(b"ok"), true).unwrap();
        })
    })
    .await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let reply = raw(p.addr("web").unwrap(), b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", WAIT).await;
    assert!(reply.starts_with("HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n"), "{reply:?}");
    assert!(reply.contains("HTTP/1.1 200 OK\r\n") && reply.ends_with("2\r\nok\r\n0\r\n\r\n"), "{reply:?}");

    let p = proxy(&config(H2C, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let mut send = h2c_client(p.addr("web").unwrap()).await.ready().await.unwrap();
    let (mut resp, _) = send.send_request(Request::get("http://a/").body(()).unwrap(), true).unwrap();
    let hint = std::future::poll_fn(|cx| resp.poll_informational(cx)).await.expect("a 103").unwrap();
    assert_eq!((hint.status().as_u16(), hint.headers()["link"].to_str().unwrap()), (103, "</s.css>; rel=preload"));
    assert_eq!(tokio::time::timeout(WAIT, resp).await.unwrap().unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_servers_answer_before_the_request_body_ends_reaches_the_client() {
    // The server refuses the upload from its head, never reading the body.
    let b = listen(None, |conn| {
        h2_serve(conn, |_req, mut respond| async move {
            let head = Response::builder().status(413).header("content-length", "4").body(()).unwrap();
            let mut send = respond.send_response(head, false).unwrap();
            send.send_data(Bytes::from_static(b"big!"), true).unwrap();
        })
    })
    .await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    let client = TcpStream::connect(p.addr("web").unwrap()).await.unwrap();
    let (mut rd, mut wr) = client.into_split();
    // 64 MiB, more than every window and buffer between the client and the
    // server, sent while the answer is read: the proxy answers with the body
    // unread, then reads and drops what still comes until the client is done
    // (a lingering close: closing at once would reset the connection, and the
    // client could lose the answer).
    let upload = tokio::spawn(async move {
        let total = 64 << 20;
        let head = format!("POST /upload HTTP/1.1\r\nhost: a\r\ncontent-length: {total}\r\n\r\n");
        wr.write_all(head.as_bytes()).await.unwrap();
        let piece = vec![b'u'; 64 * 1024];
        for _ in 0..total / piece.len() {
            if wr.write_all(&piece).await.is_err() {
                break;
            }
        }
    });
    let mut reply = Vec::new();
    tokio::time::timeout(WAIT, rd.read_to_end(&mut reply)).await.expect("an answer in time").unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 413 Payload Too Large\r\n") && reply.ends_with("\r\n\r\nbig!"), "{reply:?}");
    upload.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_after_the_h2_server_closed_its_connection_goes_on_a_new_one() {
    // Each connection serves one stream, then the server closes it (GOAWAY).
    let b = listen(None, |conn| async move {
        let Conn::Plain(tcp) = conn else { return };
        let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
        if let Some(Ok((_req, mut respond))) = conn.accept().await {
            let head = Response::builder().status(200).header("content-length", "2").body(()).unwrap();
            let mut send = respond.send_response(head, false).unwrap();
            send.send_data(Bytes::from_static(b"ok"), true).unwrap();
            conn.graceful_shutdown();
            let _ = tokio::time::timeout(WAIT, std::future::poll_fn(|cx| conn.poll_closed(cx))).await;
        }
    })
    .await;
    let p = proxy(&config(PLAIN, "", &format!("addr = \"{}\"\nproto = \"h2c\"", b.addr)));
    for _ in 0..3 {
        let (status, _, body) = get(p.addr("web").unwrap(), "/").await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst), 3);
}
