//! Active health checks: a probe every `interval`, with HAProxy's semantics
//! (the state they feed, and passive checks, are lb/health.rs).
//!
//! [`Checker`] runs the probes on a thread of its own (a current-thread tokio
//! runtime), so checks keep their rhythm whatever the workers do. It starts with
//! one round of checks of every checked server that has no result yet, at once,
//! whose results alone decide each server's first state, before any worker
//! accepts a connection (or, after a reload, before the new servers get traffic).
//! A probe is a TCP connect or an HTTP exchange (over TLS or HTTP/2 where the
//! server speaks it); a check this process could not make (out of descriptors)
//! counts neither way.

use crate::io::limits::{Shortage, Throttle};
use crate::lb::health::CheckResult;
use crate::lb::{BackendRt, ServerRt};
use crate::upstream::{self, Dialed};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tollgate_config::units::format_duration as fmt_duration;
use tollgate_config::{CheckKind, HealthCheck, HttpCheck, Proto};
use tollgate_wire::hash::hash_bytes;

/// Largest response head an HTTP check reads.
const MAX_HEAD: usize = 16 * 1024;
/// Largest part of a response body searched for `expect_body`.
const MAX_BODY: usize = 64 * 1024;

/// One checked server, with what its probe sends.
struct Target {
    server: Arc<ServerRt>,
    check: HealthCheck,
    addr: SocketAddr,
    /// The HTTP request (empty for TCP checks), after the PROXY header
    /// (`proxy_len` bytes) of a `send_proxy` server.
    request: Vec<u8>,
    proxy_len: usize,
    /// Offset of this server's checks within the interval.
    jitter: Duration,
    /// Checks failing locally are logged at most this often.
    local_warn: Throttle,
}

impl Target {
    fn new(backend: &BackendRt, check: &HealthCheck, server: &Arc<ServerRt>) -> Self {
        let addr = check.addr(&server.cfg);
        let mut proxy_len = 0;
        let request = match &check.kind {
            CheckKind::Tcp => Vec::new(),
            CheckKind::Http(h) => {
                // A server that expects the PROXY protocol gets a LOCAL header
                // first on checks of its own port, as the spec has health checks do.
                let mut r = Vec::new();
                if let Some(v) = server.cfg.send_proxy.filter(|_| addr == server.addr()) {
                    tollgate_wire::proxy_proto::encode_local(tollgate_wire::proxy_proto::version_of(v), &mut r);
                }
                proxy_len = r.len();
                r.extend_from_slice(&http_request(h, &server.addr().to_string()));
                r
            }
        };
        // Deterministic, per server: a little spread so checks do not all fire at once.
        let key = format!("{}/{}", backend.name(), server.cfg.name);
        let spread = (check.interval / 8).as_millis() as u64;
        let jitter = Duration::from_millis(if spread == 0 { 0 } else { hash_bytes(key.as_bytes()) % spread });
        Target {
            server: server.clone(),
            check: check.clone(),
            addr,
            request,
            proxy_len,
            jitter,
            local_warn: Throttle::new(),
        }
    }

    async fn run(&self) -> CheckResult {
        let cfg = &self.server.cfg;
        let r = if cfg.tls.is_none() && cfg.proto == Proto::H1 {
            run_check(&self.check, self.addr, &self.request).await
        } else {
            let start = Instant::now();
            let outcome = tokio::time::timeout(self.check.timeout, self.probe_over_transport()).await;
            result(self.check.timeout, start, outcome)
        };
        if r.local
            && let Some(held) = self.local_warn.ready()
        {
            let (backend, name) = (self.server.health.backend(), &self.server.cfg.name);
            tracing::warn!(
                backend = %backend,
                server = %name,
                "health check of {backend}/{name} not counted: {} ({held} more since the last such message)",
                r.text
            );
        }
        r
    }

    /// A check of a server reached over TLS or HTTP/2: the connection is
    /// opened as for requests (TCP, the PROXY header, the TLS handshake, the
    /// HTTP/2 preface); a TCP check passes once it is open, an HTTP check
    /// sends its request over it.
    async fn probe_over_transport(&self) -> Result<String, Failed> {
        let cfg = &self.server.cfg;
        let http = match &self.check.kind {
            CheckKind::Http(h) => Some(h),
            CheckKind::Tcp => None,
        };
        let (proxy, request) = self.request.split_at(self.proxy_len);
        let proxy = (!proxy.is_empty()).then_some(proxy);
        let dialed = upstream::dial(cfg, self.addr, proxy, self.check.timeout).await.map_err(|e| match e {
            upstream::ConnectError::Io(e) => io_failed(&e),
            e => Failed::Server(e.to_string()),
        })?;
        let verdict = match (http, dialed) {
            (None, Dialed::H1(_)) if cfg.tls.is_some() => Ok("TLS handshake ok".into()),
            (None, Dialed::H1(_)) => Ok("TCP connect ok".into()),
            (None, Dialed::H2(_)) => Ok("HTTP/2 handshake ok".into()),
            (Some(h), Dialed::H1(mut stream)) => http_exchange(&mut stream, h, request).await,
            (Some(h), Dialed::H2(session)) => {
                let authority = h.host.clone().unwrap_or_else(|| self.server.addr().to_string());
                let want = h.expect_body.is_some();
                let (status, body) =
                    upstream::h2::probe(&session, &h.method, &authority, &h.path, MAX_BODY, want).await?;
                verdict(h, status, &body)
            }
        };
        Ok(verdict?)
    }
}

/// The request line and headers of an HTTP check; `default_host` names the server.
pub fn http_request(h: &HttpCheck, default_host: &str) -> Vec<u8> {
    let host = h.host.as_deref().unwrap_or(default_host);
    format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tollgate-health\r\nConnection: close\r\n\r\n",
        h.method, h.path
    )
    .into_bytes()
}

/// The active checks of a running server. Dropping it stops them.
pub struct Checker {
    stop: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl Checker {
    /// Checks every checked server of `backends` that has no result yet (all of
    /// them at start; after a reload, only the servers new to the config) once,
    /// all at once, sets each UP or DOWN from that first result, and returns once
    /// that round is over (each check is bounded by its timeout); checks of every
    /// checked server then go on every `interval` on a thread of their own until
    /// [`Checker::stop`]. Without checked servers no thread is started.
    pub fn start(backends: &[Arc<BackendRt>]) -> std::io::Result<Checker> {
        let mut targets = Vec::new();
        for b in backends {
            if let Some(check) = &b.cfg.check {
                // A server without an address (its name does not resolve) is not checked.
                for s in b.servers.iter().filter(|s| s.cfg.check && s.cfg.unresolved.is_none()) {
                    targets.push(Target::new(b, check, s));
                }
            }
        }
        if targets.is_empty() {
            return Ok(Checker { stop: None, thread: None });
        }
        let longest = targets.iter().map(|t| t.check.timeout).max().unwrap_or_default();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop, mut stop_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new().name("tollgate-health".into()).spawn(move || {
            rt.block_on(async move {
                let targets: Vec<Arc<Target>> = targets.into_iter().map(Arc::new).collect();
                let mut first = tokio::task::JoinSet::new();
                for t in targets.iter().filter(|t| t.server.health.needs_first_check()) {
                    let t = t.clone();
                    first.spawn(async move {
                        let r = t.run().await;
                        t.server.apply_check(r);
                    });
                }
                while first.join_next().await.is_some() {}
                let _ = ready_tx.send(());
                for t in targets {
                    tokio::spawn(check_loop(t));
                }
                let _ = stop_rx.wait_for(|stopped| *stopped).await;
            });
            // Dropping the runtime here cancels every check in progress.
        })?;
        // The first round is bounded by the longest check timeout; the margin only
        // covers scheduling. A thread that died early ends the wait too.
        let _ = ready_rx.recv_timeout(longest + Duration::from_secs(1));
        Ok(Checker { stop: Some(stop), thread: Some(thread) })
    }

    /// Stops the checks (servers keep their last state).
    pub fn stop(&self) {
        if let Some(s) = &self.stop {
            let _ = s.send(true);
        }
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn check_loop(t: Arc<Target>) {
    let start = tokio::time::Instant::now() + t.check.interval + t.jitter;
    let mut tick = tokio::time::interval_at(start, t.check.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let r = t.run().await;
        t.server.apply_check(r);
    }
}

/// One check of `addr`, bounded by the check's timeout as a whole.
pub async fn run_check(check: &HealthCheck, addr: SocketAddr, request: &[u8]) -> CheckResult {
    let start = Instant::now();
    let outcome = tokio::time::timeout(check.timeout, probe(&check.kind, addr, request)).await;
    result(check.timeout, start, outcome)
}

/// Why a probe failed.
#[derive(Debug, PartialEq, Eq)]
enum Failed {
    /// The server's doing (refused, reset, a wrong answer): the text says what.
    Server(String),
    /// Tollgate's own: the probe could not be made (limits.rs).
    Local(Shortage),
}

impl From<String> for Failed {
    fn from(text: String) -> Self {
        Failed::Server(text)
    }
}

/// A socket error of a probe: a shortage of Tollgate's own, else the server's.
fn io_failed(e: &std::io::Error) -> Failed {
    match Shortage::of(e) {
        Some(s) => Failed::Local(s),
        None => Failed::Server(io_text(e)),
    }
}

/// A check's result from how its probe ended.
fn result<E>(timeout: Duration, start: Instant, outcome: Result<Result<String, Failed>, E>) -> CheckResult {
    let duration = start.elapsed();
    let (ok, text, local) = match outcome {
        Ok(Ok(text)) => (true, text, false),
        Ok(Err(Failed::Server(text))) => (false, text, false),
        Ok(Err(Failed::Local(s))) => (false, format!("not run: {s}"), true),
        Err(_) => (false, format!("timeout after {}", fmt_duration(timeout)), false),
    };
    CheckResult { ok, text, duration, local }
}

async fn probe(kind: &CheckKind, addr: SocketAddr, request: &[u8]) -> Result<String, Failed> {
    // Opening the socket and connecting are where the process's own limits
    // show (EMFILE, EADDRNOTAVAIL, ...); later errors are the server's.
    let mut stream = TcpStream::connect(addr).await.map_err(|e| io_failed(&e))?;
    let http = match kind {
        CheckKind::Tcp => return Ok("TCP connect ok".into()),
        CheckKind::Http(h) => h,
    };
    let _ = stream.set_nodelay(true);
    Ok(http_exchange(&mut stream, http, request).await?)
}

/// Sends an HTTP/1.1 check's request on `stream` and judges the response.
async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    http: &HttpCheck,
    request: &[u8],
) -> Result<String, String> {
    stream.write_all(request).await.map_err(|e| io_text(&e))?;
    stream.flush().await.map_err(|e| io_text(&e))?;

    let mut buf = Vec::with_capacity(1024);
    let (status, framing) = loop {
        match parse_head(&buf, &http.method)? {
            Head::Partial if buf.len() >= MAX_HEAD => {
                return Err(format!("response head larger than {} KiB", MAX_HEAD / 1024));
            }
            Head::Partial => {
                if read_some(stream, &mut buf).await? == 0 {
                    return Err("connection closed before the response head".into());
                }
            }
            Head::Interim(len) => {
                buf.drain(..len);
            }
            Head::Final { status, len, framing } => {
                buf.drain(..len);
                break (status, framing);
            }
        }
    };
    if !http.expect_status.contains(status) || http.expect_body.is_none() {
        return verdict(http, status, &[]);
    }
    // `buf` now holds the start of the body.
    loop {
        let (body, complete) = decode_body(&buf, framing)?;
        if complete || body.len() >= MAX_BODY || buf.len() >= MAX_BODY + MAX_HEAD {
            break;
        }
        if read_some(stream, &mut buf).await? == 0 {
            break;
        }
    }
    let (mut body, _) = decode_body(&buf, framing)?;
    body.truncate(MAX_BODY);
    verdict(http, status, &body)
}

/// Whether a response passes: its status, then (with `expect_body`) its body.
fn verdict(http: &HttpCheck, status: u16, body: &[u8]) -> Result<String, String> {
    if !http.expect_status.contains(status) {
        return Err(format!("HTTP status {status}"));
    }
    let Some(needle) = &http.expect_body else {
        return Ok(format!("HTTP status {status}"));
    };
    if contains(body, needle.as_bytes()) {
        Ok(format!("HTTP status {status}, body matches"))
    } else {
        Err(format!("HTTP status {status}, body lacks \"{needle}\""))
    }
}

async fn read_some<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Result<usize, String> {
    let mut chunk = [0u8; 4096];
    let n = stream.read(&mut chunk).await.map_err(|e| io_text(&e))?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

#[derive(Debug, PartialEq, Eq)]
enum Head {
    Partial,
    /// A 1xx response head of `len` bytes, to skip.
    Interim(usize),
    Final {
        status: u16,
        len: usize,
        framing: Framing,
    },
}

/// Parses a response head at the start of `buf` (RFC 9112 section 6.3 for framing).
fn parse_head(buf: &[u8], method: &http::Method) -> Result<Head, String> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Head::Partial),
        Err(e) => return Err(format!("invalid HTTP response ({e})")),
    };
    let status = resp.code.unwrap_or(0);
    if (100..200).contains(&status) && status != 101 {
        return Ok(Head::Interim(len));
    }
    let framing = if *method == http::Method::HEAD || status == 204 || status == 304 || status == 101 {
        Framing::None
    } else if let Some(te) = resp.headers.iter().rev().find(|h| h.name.eq_ignore_ascii_case("transfer-encoding")) {
        let last = te.value.rsplit(|b| *b == b',').next().unwrap_or_default();
        if last.trim_ascii().eq_ignore_ascii_case(b"chunked") { Framing::Chunked } else { Framing::UntilClose }
    } else if let Some(cl) = resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length")) {
        let n = std::str::from_utf8(cl.value).ok().and_then(|s| s.trim().parse::<u64>().ok());
        Framing::Length(n.ok_or("invalid HTTP response (bad Content-Length)")?)
    } else {
        Framing::UntilClose
    };
    Ok(Head::Final { status, len, framing })
}

/// The body bytes found in `raw` (at most [`MAX_BODY`] of them), and whether the
/// body is complete.
fn decode_body(raw: &[u8], framing: Framing) -> Result<(Vec<u8>, bool), String> {
    match framing {
        Framing::None => Ok((Vec::new(), true)),
        Framing::Length(n) => {
            let have = raw.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            Ok((raw[..have.min(MAX_BODY)].to_vec(), have as u64 >= n))
        }
        Framing::UntilClose => Ok((raw[..raw.len().min(MAX_BODY)].to_vec(), false)),
        Framing::Chunked => dechunk(raw),
    }
}

/// Decodes a chunked body as far as `raw` goes; a truncated chunk gives what it has.
fn dechunk(mut raw: &[u8]) -> Result<(Vec<u8>, bool), String> {
    let bad = || "invalid chunked body".to_string();
    let mut out = Vec::new();
    loop {
        let (used, size) = match httparse::parse_chunk_size(raw) {
            Ok(httparse::Status::Complete(x)) => x,
            Ok(httparse::Status::Partial) => return Ok((out, false)),
            Err(_) => return Err(bad()),
        };
        if size == 0 {
            return Ok((out, true));
        }
        raw = &raw[used..];
        let take = usize::try_from(size).unwrap_or(usize::MAX).min(raw.len());
        out.extend_from_slice(&raw[..take]);
        if out.len() >= MAX_BODY || (take as u64) < size {
            out.truncate(MAX_BODY);
            let full = out.len() >= MAX_BODY;
            return Ok((out, full));
        }
        raw = &raw[take..];
        match raw {
            [b'\r', b'\n', rest @ ..] => raw = rest,
            [] | [b'\r'] => return Ok((out, false)),
            _ => return Err(bad()),
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// A socket error as a short reason: "connection refused", not "Connection
/// refused (os error 111)".
fn io_text(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "connection refused".into(),
        ConnectionReset => "connection reset".into(),
        ConnectionAborted => "connection aborted".into(),
        BrokenPipe => "connection closed while sending the check".into(),
        TimedOut => "connect timed out".into(),
        HostUnreachable => "host unreachable".into(),
        NetworkUnreachable => "network unreachable".into(),
        AddrNotAvailable => "address not available".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_lowercase(),
                None => s,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> CheckResult {
        let outcome: Result<Result<String, Failed>, ()> =
            Ok(Err(io_failed(&std::io::Error::from_raw_os_error(libc::EMFILE))));
        result(Duration::from_secs(1), Instant::now(), outcome)
    }

    /// A check this process could not make (EMFILE) is a local result, which
    /// the health state counts neither way (lb/health.rs).
    #[test]
    fn checks_failing_locally_are_local() {
        let r = local();
        assert!(!r.ok && r.local, "{r:?}");
        assert_eq!(r.text, "not run: this process is out of file descriptors (EMFILE)");
    }

    /// Only the process's own shortages are local; refusals and resets are the server's.
    #[test]
    fn probe_errors_are_told_apart() {
        let os = std::io::Error::from_raw_os_error;
        assert_eq!(io_failed(&os(libc::EMFILE)), Failed::Local(Shortage::ProcessFds));
        assert_eq!(io_failed(&os(libc::ENFILE)), Failed::Local(Shortage::SystemFds));
        assert_eq!(io_failed(&os(libc::EADDRNOTAVAIL)), Failed::Local(Shortage::Ports));
        assert_eq!(io_failed(&os(libc::ECONNREFUSED)), Failed::Server("connection refused".into()));
        assert_eq!(io_failed(&os(libc::ECONNRESET)), Failed::Server("connection reset".into()));
    }

    #[test]
    fn http_request_and_head_parsing() {
        let h = HttpCheck {
            method: http::Method::HEAD,
            path: "/health?full=1".into(),
            host: None,
            expect_status: tollgate_config::StatusRange { min: 200, max: 399 },
            expect_body: None,
        };
        assert_eq!(
            http_request(&h, "10.0.0.1:80"),
            b"HEAD /health?full=1 HTTP/1.1\r\nHost: 10.0.0.1:80\r\nUser-Agent: tollgate-health\r\nConnection: close\r\n\r\n"
        );
        let get = http::Method::GET;
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le", &get), Ok(Head::Partial));
        assert_eq!(parse_head(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", &get), Ok(Head::Interim(25)));
        assert_eq!(
            parse_head(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", &get),
            Ok(Head::Final { status: 503, len: 40, framing: Framing::Length(4) })
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", &get),
            Ok(Head::Final { status: 200, len: 53, framing: Framing::Chunked })
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", &http::Method::HEAD),
            Ok(Head::Final { status: 200, len: 38, framing: Framing::None })
        );
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\n\r\n", &get),
            Ok(Head::Final { framing: Framing::UntilClose, .. })
        ));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n", &get).unwrap_err().starts_with("invalid HTTP response"));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", &get).is_err());
    }

    #[test]
    fn bodies_are_decoded_as_far_as_they_go() {
        assert_eq!(dechunk(b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n"), Ok((b"Wikipedia".to_vec(), true)));
        assert_eq!(dechunk(b"4\r\nWiki\r\n5\r\nped"), Ok((b"Wikiped".to_vec(), false)));
        assert_eq!(dechunk(b"4\r\nWiki\r"), Ok((b"Wiki".to_vec(), false)));
        assert!(dechunk(b"zz\r\n").is_err());
        assert!(dechunk(b"4\r\nWikiXX").is_err());
        assert_eq!(decode_body(b"abc", Framing::Length(5)), Ok((b"abc".to_vec(), false)));
        assert_eq!(decode_body(b"abcde", Framing::Length(5)), Ok((b"abcde".to_vec(), true)));
        assert_eq!(decode_body(b"abc", Framing::UntilClose), Ok((b"abc".to_vec(), false)));
        assert!(contains(b"status: ready", b"ready"));
        assert!(!contains(b"status: rea", b"ready"));
    }

    #[test]
    fn reasons_read_well() {
        assert_eq!(io_text(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)), "connection refused");
    }
}
