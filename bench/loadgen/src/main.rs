//! Load generators for the benchmarks in bench/ (driven by bench/edge_bench.py),
//! and the WebSocket echo server they talk to through each proxy.
//!
//! - `loadgen tls`: N TLS connections, C at a time, each a full handshake (or a
//!   resumed one with `--resume`) followed by one HTTP/1.1 request; reports the
//!   handshake latency, how many handshakes were resumed, and errors.
//! - `loadgen ws`: N WebSocket connections (plain or TLS), C at a time, each a
//!   handshake, one echoed message and a close; reports the handshake and
//!   message latency means and the total time (the seed's WebSocket benchmark).
//! - `loadgen probe`: one established WebSocket connection that sends a
//!   message at a steady pace and times each echo, for a bounded time; run
//!   beside a `tls` flood, it shows what the handshakes cost the traffic already
//!   there.
//! - `loadgen ws-echo`: a WebSocket echo server (the backend of `ws`).
//! - `loadgen h3`: HTTP/3 requests (quinn and the h3 crate): `--c`
//!   connections, each with `--m` requests in flight, until `--n` are done or
//!   `--max-seconds` pass; reports requests done, errors and the time taken
//!   (h2load, which measures HTTP/2 beside it, has no QUIC in Debian's build).
//!
//! Every run is bounded by its count and by `--max-seconds`; results are one
//! JSON object on stdout. One thread: the tool is pinned to its own core.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use futures_util::stream::FuturesUnordered;
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

#[derive(Parser)]
#[command(name = "loadgen", about = "Tollgate benchmark load generators")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where to connect and how: TCP address, and TLS when a CA is given.
#[derive(clap::Args, Clone)]
struct Endpoint {
    /// host:port to connect to.
    #[arg(long)]
    addr: SocketAddr,
    /// PEM file of the CA (or self-signed certificate) to trust: turns TLS on.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Server name for SNI, certificate verification and the Host header.
    #[arg(long, default_value = "bench.test")]
    name: String,
}

/// An endpoint, and how many connections to make to it.
#[derive(clap::Args, Clone)]
struct Target {
    #[command(flatten)]
    to: Endpoint,
    /// Connections in all.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// Connections in flight at once.
    #[arg(long, default_value_t = 100)]
    c: usize,
    /// Stop starting connections after this long, whatever `n` says.
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// TLS handshakes, each followed by one HTTP/1.1 request.
    Tls {
        #[command(flatten)]
        target: Target,
        /// Resume sessions (TLS 1.3 tickets / 1.2 session IDs) after the first.
        #[arg(long)]
        resume: bool,
        /// Request path.
        #[arg(long, default_value = "/")]
        path: String,
    },
    /// WebSocket connections with one echoed message each.
    Ws {
        #[command(flatten)]
        target: Target,
        /// Request path of the upgrade.
        #[arg(long, default_value = "/echo")]
        path: String,
        /// Size of the text message in bytes.
        #[arg(long, default_value_t = 32)]
        message: usize,
    },
    /// One WebSocket connection sending a message every `--interval-ms` and
    /// timing each echo, for `--seconds` after `--settle-ms`.
    Probe {
        #[command(flatten)]
        to: Endpoint,
        /// Request path of the upgrade.
        #[arg(long, default_value = "/echo")]
        path: String,
        /// Time between the start of one message and the next.
        #[arg(long, default_value_t = 5)]
        interval_ms: u64,
        /// Wait this long after the upgrade before timing (for the load beside
        /// it to get going).
        #[arg(long, default_value_t = 500)]
        settle_ms: u64,
        /// Time messages for this long.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
    },
    /// HTTP/3 GET requests on `--c` connections with `--m` streams each.
    H3 {
        #[command(flatten)]
        target: Target,
        /// Requests in flight per connection.
        #[arg(long, default_value_t = 10)]
        m: usize,
        /// Request path.
        #[arg(long, default_value = "/")]
        path: String,
    },
    /// A WebSocket echo server; runs until stopped.
    WsEcho {
        #[arg(long)]
        listen: SocketAddr,
    },
}

fn main() {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let code = rt.block_on(async {
        match cli.cmd {
            Cmd::Tls { target, resume, path } => run_tls(target, resume, path).await,
            Cmd::Ws { target, path, message } => run_ws(target, path, message).await,
            Cmd::Probe { to, path, interval_ms, settle_ms, seconds } => {
                let pace = Pace {
                    interval: Duration::from_millis(interval_ms.max(1)),
                    settle: Duration::from_millis(settle_ms),
                    measure: Duration::from_secs(seconds),
                };
                match run_probe(to, path, pace).await {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("loadgen probe: {e}");
                        1
                    }
                }
            }
            Cmd::WsEcho { listen } => ws_echo(listen).await,
            Cmd::H3 { target, m, path } => match run_h3(target, m, path).await {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("loadgen h3: {e}");
                    1
                }
            },
        }
    });
    std::process::exit(code);
}

/// A client TLS config trusting `ca`, offering http/1.1, resuming or not.
fn tls_config(ca: &PathBuf, resume: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots.add(cert).map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    // X25519 only: every server under test then does the same key exchange
    // (OpenSSL 3.0 has no ML-KEM, which rustls would otherwise prefer).
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    let provider = Arc::new(provider);
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = if resume {
        rustls::client::Resumption::store(Arc::new(Tickets::default()))
    } else {
        rustls::client::Resumption::disabled()
    };
    Ok(Arc::new(cfg))
}

/// The client's session store, for one server. rustls' own keeps at most 8
/// TLS 1.3 tickets per server, fewer than the connections a run has in flight:
/// the resumption rate would then measure that cache, not the server. This one
/// keeps up to 4096 (each used once, newest first, as the trait requires).
#[derive(Debug, Default)]
struct Tickets {
    tls13: Mutex<std::collections::VecDeque<rustls::client::Tls13ClientSessionValue>>,
    tls12: Mutex<Option<rustls::client::Tls12ClientSessionValue>>,
    kx: Mutex<Option<rustls::NamedGroup>>,
}

impl rustls::client::ClientSessionStore for Tickets {
    fn set_kx_hint(&self, _: ServerName<'static>, group: rustls::NamedGroup) {
        *lock(&self.kx) = Some(group);
    }

    fn kx_hint(&self, _: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        *lock(&self.kx)
    }

    fn set_tls12_session(&self, _: ServerName<'static>, value: rustls::client::Tls12ClientSessionValue) {
        *lock(&self.tls12) = Some(value);
    }

    fn tls12_session(&self, _: &ServerName<'_>) -> Option<rustls::client::Tls12ClientSessionValue> {
        lock(&self.tls12).clone()
    }

    fn remove_tls12_session(&self, _: &ServerName<'static>) {
        *lock(&self.tls12) = None;
    }

    fn insert_tls13_ticket(&self, _: ServerName<'static>, value: rustls::client::Tls13ClientSessionValue) {
        let mut q = lock(&self.tls13);
        if q.len() == 4096 {
            q.pop_front();
        }
        q.push_back(value);
    }

    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<rustls::client::Tls13ClientSessionValue> {
        lock(&self.tls13).pop_back()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Latencies in microseconds, summarised.
#[derive(Default)]
struct Samples(Vec<u64>);

impl Samples {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_micros() as u64);
    }

    /// `"key_mean_ms": .., "key_p50_ms": .., "key_p99_ms": .., "key_max_ms": ..`
    fn json(&mut self, key: &str) -> String {
        self.0.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        let mean = if self.0.is_empty() { 0.0 } else { ms(self.0.iter().sum::<u64>()) / self.0.len() as f64 };
        let pct = |p: f64| self.0.get(((self.0.len() as f64 * p) as usize).min(self.0.len().saturating_sub(1)));
        format!(
            "\"{key}_mean_ms\": {mean:.3}, \"{key}_p50_ms\": {:.3}, \"{key}_p99_ms\": {:.3}, \"{key}_max_ms\": {:.3}",
            pct(0.5).map_or(0.0, |&u| ms(u)),
            pct(0.99).map_or(0.0, |&u| ms(u)),
            self.0.last().map_or(0.0, |&u| ms(u))
        )
    }
}

/// What one connection of a run reports.
enum Outcome {
    Tls { handshake: Duration, resumed: bool },
    Ws { handshake: Duration, message: Duration },
}

/// Runs `one` `n` times with `c` in flight, until done or `max_seconds` passed
/// (each connection gets 30 s); returns the outcomes, the first few error
/// messages, the error count and the elapsed time.
async fn drive<F, Fut>(t: &Target, one: F) -> (Vec<Outcome>, Vec<String>, usize, Duration)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Outcome, String>>,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(t.max_seconds);
    let (mut outcomes, mut errors, mut error_count) = (Vec::with_capacity(t.n), Vec::new(), 0usize);
    let mut in_flight = FuturesUnordered::new();
    let mut begun = 0;
    let mut more = |in_flight: &mut FuturesUnordered<_>| {
        if begun < t.n && Instant::now() < deadline {
            begun += 1;
            in_flight.push(tokio::time::timeout(Duration::from_secs(30), one()));
        }
    };
    for _ in 0..t.c {
        more(&mut in_flight);
    }
    while let Some(r) = in_flight.next().await {
        match r {
            Ok(Ok(o)) => outcomes.push(o),
            Ok(Err(e)) => {
                error_count += 1;
                if errors.len() < 5 {
                    errors.push(e);
                }
            }
            Err(_) => {
                error_count += 1;
                if errors.len() < 5 {
                    errors.push("no answer within 30 s".to_string());
                }
            }
        }
        more(&mut in_flight);
    }
    (outcomes, errors, error_count, started.elapsed())
}

/// Opens the TCP connection (and TLS when configured): the stream, and whether
/// the TLS session was resumed.
async fn open(
    addr: SocketAddr,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
) -> Result<(Box<dyn Io>, bool), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Ok((Box::new(tcp), false)),
        Some((connector, name)) => {
            let s = connector.connect(name, tcp).await.map_err(|e| format!("TLS: {e}"))?;
            let resumed = s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            Ok((Box::new(s), resumed))
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

fn connector(e: &Endpoint, resume: bool) -> Result<Option<(tokio_rustls::TlsConnector, ServerName<'static>)>, String> {
    let Some(ca) = &e.ca else { return Ok(None) };
    let name = ServerName::try_from(e.name.clone()).map_err(|e| format!("--name: {e}"))?;
    Ok(Some((tokio_rustls::TlsConnector::from(tls_config(ca, resume)?), name)))
}

async fn run_tls(t: Target, resume: bool, path: String) -> i32 {
    let tls = match connector(&t.to, resume) {
        Ok(Some(c)) => c,
        Ok(None) => {
            eprintln!("loadgen tls: --ca is required");
            return 2;
        }
        Err(e) => {
            eprintln!("loadgen tls: {e}");
            return 2;
        }
    };
    let request: Arc<[u8]> =
        format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", t.to.name).into_bytes().into();
    let addr = t.to.addr;
    let (outcomes, errors, error_count, elapsed) = drive(&t, || {
        let (tls, request) = (tls.clone(), request.clone());
        async move {
            let start = Instant::now();
            let (mut s, resumed) = open(addr, Some(tls)).await?;
            let handshake = start.elapsed();
            s.write_all(&request).await.map_err(|e| format!("write: {e}"))?;
            // rustls may hold the record if the socket was not writable: send it.
            s.flush().await.map_err(|e| format!("write: {e}"))?;
            let mut reply = Vec::with_capacity(1024);
            s.read_to_end(&mut reply).await.map_err(|e| format!("read: {e}"))?;
            if !reply.starts_with(b"HTTP/1.1 200") {
                let line = reply.split(|&b| b == b'\r').next().unwrap_or_default();
                return Err(format!("status line: {}", String::from_utf8_lossy(line)));
            }
            Ok(Outcome::Tls { handshake, resumed })
        }
    })
    .await;
    let mut hs = Samples::default();
    let mut resumed = 0;
    for o in &outcomes {
        if let Outcome::Tls { handshake, resumed: r } = o {
            hs.push(*handshake);
            resumed += usize::from(*r);
        }
    }
    println!(
        "{{\"ok\": {}, \"errors\": {error_count}, \"error_samples\": {:?}, \"resumed\": {resumed}, \"seconds\": {:.3}, {}}}",
        outcomes.len(),
        errors,
        elapsed.as_secs_f64(),
        hs.json("handshake")
    );
    0
}

async fn run_ws(t: Target, path: String, size: usize) -> i32 {
    let tls = match connector(&t.to, false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loadgen ws: {e}");
            return 2;
        }
    };
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let url = format!("{scheme}://{}{path}", t.to.name);
    if let Err(e) = url.as_str().into_client_request() {
        eprintln!("loadgen ws: {url}: {e}");
        return 2;
    }
    let text: String = "x".repeat(size);
    let addr = t.to.addr;
    let (outcomes, errors, error_count, elapsed) = drive(&t, || {
        let (tls, url, text) = (tls.clone(), url.clone(), text.clone());
        async move {
            let start = Instant::now();
            let (s, _) = open(addr, tls).await?;
            let request = url.as_str().into_client_request().map_err(|e| e.to_string())?;
            let (mut ws, _) = tokio_tungstenite::client_async(request, s).await.map_err(|e| format!("upgrade: {e}"))?;
            let handshake = start.elapsed();
            let sent = Instant::now();
            ws.send(Message::text(text.clone())).await.map_err(|e| format!("send: {e}"))?;
            let echoed = echo(&mut ws).await?;
            let message = sent.elapsed();
            if echoed.as_str() != text {
                return Err("the echo differs from the message".into());
            }
            let _ = ws.close(None).await;
            // Read the server's close frame so the connection ends cleanly.
            while let Some(Ok(_)) = ws.next().await {}
            Ok(Outcome::Ws { handshake, message })
        }
    })
    .await;
    let (mut hs, mut msg) = (Samples::default(), Samples::default());
    for o in &outcomes {
        if let Outcome::Ws { handshake, message } = o {
            hs.push(*handshake);
            msg.push(*message);
        }
    }
    println!(
        "{{\"ok\": {}, \"errors\": {error_count}, \"error_samples\": {:?}, \"seconds\": {:.3}, {}, {}}}",
        outcomes.len(),
        errors,
        elapsed.as_secs_f64(),
        hs.json("handshake"),
        msg.json("message")
    );
    0
}

/// How a probe paces and bounds its messages.
struct Pace {
    interval: Duration,
    settle: Duration,
    measure: Duration,
}

/// Waits for the echo of the message just sent (pings and pongs aside).
async fn echo<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Result<Utf8Bytes, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => return Ok(t),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(m)) => return Err(format!("unexpected message: {m:?}")),
            Some(Err(e)) => return Err(format!("receive: {e}")),
            None => return Err("closed before the echo".into()),
        }
    }
}

async fn run_probe(to: Endpoint, path: String, pace: Pace) -> Result<(), String> {
    let tls = connector(&to, false)?;
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let request = format!("{scheme}://{}{path}", to.name).into_client_request().map_err(|e| e.to_string())?;
    let (s, _) = tokio::time::timeout(Duration::from_secs(30), open(to.addr, tls))
        .await
        .map_err(|_| "no connection within 30 s".to_string())??;
    let (mut ws, _) = tokio::time::timeout(Duration::from_secs(30), tokio_tungstenite::client_async(request, s))
        .await
        .map_err(|_| "no upgrade within 30 s".to_string())?
        .map_err(|e| format!("upgrade: {e}"))?;
    tokio::time::sleep(pace.settle).await;
    let mut ticks = tokio::time::interval(pace.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (started, mut latency, mut seq) = (Instant::now(), Samples::default(), 0u64);
    while started.elapsed() < pace.measure {
        ticks.tick().await;
        seq += 1;
        let text = format!("probe {seq:>10}");
        let sent = Instant::now();
        ws.send(Message::text(text.clone())).await.map_err(|e| format!("send: {e}"))?;
        let echoed = tokio::time::timeout(Duration::from_secs(30), echo(&mut ws))
            .await
            .map_err(|_| "no echo within 30 s".to_string())??;
        latency.push(sent.elapsed());
        if echoed.as_str() != text {
            return Err("the echo differs from the message".into());
        }
    }
    let _ = ws.close(None).await;
    println!(
        "{{\"ok\": {}, \"errors\": 0, \"seconds\": {:.3}, {}}}",
        latency.0.len(),
        started.elapsed().as_secs_f64(),
        latency.json("message")
    );
    Ok(())
}

async fn ws_echo(listen: SocketAddr) -> i32 {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("loadgen ws-echo: bind {listen}: {e}");
            return 1;
        }
    };
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { return };
            while let Some(Ok(m)) = ws.next().await {
                let echo = match m {
                    Message::Text(_) | Message::Binary(_) => m,
                    Message::Close(_) => return,
                    _ => continue,
                };
                if ws.send(echo).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// `loadgen h3`: `target.c` QUIC connections, each keeping `m` requests in
/// flight, `target.n` requests in all (or until `max_seconds`).
async fn run_h3(target: Target, m: usize, path: String) -> Result<(), String> {
    let ca = target.to.ca.as_ref().ok_or("--ca is needed: HTTP/3 is TLS")?;
    let mut tls = (*tls_config(ca, false)?).clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(|e| e.to_string())?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(target.n));
    let deadline = Instant::now() + Duration::from_secs(target.max_seconds);
    let uri: http::Uri = format!("https://{}{path}", target.to.name).parse().map_err(|e| format!("{e}"))?;
    let start = Instant::now();
    let mut conns = FuturesUnordered::new();
    for _ in 0..target.c {
        let connecting = endpoint.connect(target.to.addr, &target.to.name).map_err(|e| e.to_string())?;
        let (left, uri) = (left.clone(), uri.clone());
        conns.push(async move {
            let conn = connecting.await.map_err(|e| e.to_string())?;
            let (mut driver, send) =
                h3::client::new(h3_quinn::Connection::new(conn)).await.map_err(|e| e.to_string())?;
            let drive = tokio::spawn(async move {
                let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            });
            let mut streams = FuturesUnordered::new();
            for _ in 0..m {
                let (mut send, left, uri) = (send.clone(), left.clone(), uri.clone());
                streams.push(async move {
                    let (mut done, mut errors) = (0u64, 0u64);
                    while Instant::now() < deadline
                        && left
                            .fetch_update(
                                std::sync::atomic::Ordering::Relaxed,
                                std::sync::atomic::Ordering::Relaxed,
                                |n| n.checked_sub(1),
                            )
                            .is_ok()
                    {
                        match h3_get(&mut send, &uri).await {
                            Ok(()) => done += 1,
                            Err(_) => errors += 1,
                        }
                    }
                    (done, errors)
                });
            }
            let (mut done, mut errors) = (0, 0);
            while let Some((d, e)) = streams.next().await {
                done += d;
                errors += e;
            }
            drive.abort();
            Ok::<_, String>((done, errors))
        });
    }
    let (mut done, mut errors, mut failed_conns) = (0u64, 0u64, 0u64);
    while let Some(r) = conns.next().await {
        match r {
            Ok((d, e)) => {
                done += d;
                errors += e;
            }
            Err(e) => {
                if failed_conns == 0 {
                    eprintln!("loadgen h3: a connection failed: {e}");
                }
                failed_conns += 1;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    endpoint.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    println!(
        "{{\"requests\": {done}, \"errors\": {errors}, \"failed_connections\": {failed_conns}, \"seconds\": {secs:.3}}}"
    );
    Ok(())
}

/// One GET on an HTTP/3 connection, its body read to the end.
async fn h3_get(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>,
    uri: &http::Uri,
) -> Result<(), String> {
    use bytes::Buf;
    let req = http::Request::get(uri.clone()).body(()).map_err(|e| e.to_string())?;
    let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
    stream.finish().await.map_err(|e| e.to_string())?;
    let resp = stream.recv_response().await.map_err(|e| e.to_string())?;
    while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
        chunk.advance(chunk.remaining());
    }
    if resp.status() == http::StatusCode::OK { Ok(()) } else { Err(format!("status {}", resp.status())) }
}
