//! Health checks: active (a probe every `interval`) and passive (the data path
//! reports each request's outcome), with HAProxy's semantics.
//!
//! - [`HealthState`] is the pure state machine of one server: consecutive passed and
//!   failed checks against `rise` and `fall`, UP or DOWN, the last result and when
//!   the state last changed. It returns a [`Transition`] when the state flips.
//! - [`PassiveCounter`] counts consecutive failed requests (connection errors,
//!   5xx); reaching `observe.errors` takes the server DOWN, and only active checks
//!   bring it back (`rise` passed checks).
//! - [`Checker`] runs the probes on a thread of its own (a current-thread tokio
//!   runtime), so checks keep their rhythm whatever the workers do. It starts with
//!   one round of checks of every checked server that has no result yet, at once,
//!   whose results alone decide each server's first state, before any worker
//!   accepts a connection (or, after a reload, before the new servers get traffic).
//!
//! A server's `up` flag (lb.rs) is what selection reads; it is written only here,
//! under the server's health lock, so that active and passive verdicts apply in
//! order.

use crate::lb::{BackendRt, ServerRt};
use crate::limits::{Shortage, Throttle};
use crate::upstream::{self, Dialed};
use crate::upstream_h2;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tollgate_config::units::format_duration as fmt_duration;
use tollgate_config::{Backend, CheckKind, HealthCheck, HttpCheck, Proto, Server};
use tollgate_wire::hash::hash_bytes;

/// Largest response head an HTTP check reads.
const MAX_HEAD: usize = 16 * 1024;
/// Largest part of a response body searched for `expect_body`.
const MAX_BODY: usize = 64 * 1024;

/// UP takes traffic; DOWN does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    Down,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Up => "UP",
            Health::Down => "DOWN",
        }
    }
}

/// The result of one active check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub ok: bool,
    /// What was seen: "HTTP status 200", "TCP connect ok", "connection refused",
    /// "timeout after 1s", ...
    pub text: String,
    pub duration: Duration,
    /// The check could not be made for a reason of Tollgate's own (out of file
    /// descriptors, memory or local ports: limits.rs): it says nothing about
    /// the server, and [`HealthState::record`] counts it neither way.
    pub local: bool,
}

/// A change of a server's state, to be logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub to: Health,
    /// Why: the deciding check's text, or the passive count.
    pub reason: String,
    /// The deciding check's duration (`None` for a passive verdict).
    pub duration: Option<Duration>,
}

/// One server's health, as a pure state machine (no I/O, no clock of its own).
#[derive(Debug, Clone)]
pub struct HealthState {
    fall: u32,
    rise: u32,
    health: Health,
    /// No check result yet: the first one alone decides the state.
    initial: bool,
    successes: u32,
    failures: u32,
    last: Option<CheckResult>,
    changed_at: Instant,
    checks: u64,
    failed_checks: u64,
    downs: u64,
}

impl HealthState {
    /// A server not checked yet: UP until its first result says otherwise.
    pub fn new(fall: u32, rise: u32, now: Instant) -> Self {
        HealthState {
            fall: fall.max(1),
            rise: rise.max(1),
            health: Health::Up,
            initial: true,
            successes: 0,
            failures: 0,
            last: None,
            changed_at: now,
            checks: 0,
            failed_checks: 0,
            downs: 0,
        }
    }

    /// Takes one active check's result. The first result sets the state by itself;
    /// after that an UP server goes DOWN after `fall` consecutive failures, a DOWN
    /// one UP after `rise` consecutive successes. A check that failed locally
    /// ([`CheckResult::local`]) changes nothing: neither count, nor the state,
    /// nor whether the next result is the first; it is only shown as the last.
    pub fn record(&mut self, result: CheckResult, now: Instant) -> Option<Transition> {
        if result.local {
            self.last = Some(result);
            return None;
        }
        self.checks += 1;
        if result.ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failed_checks += 1;
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let target = if std::mem::take(&mut self.initial) {
            if result.ok { Health::Up } else { Health::Down }
        } else {
            match self.health {
                Health::Up if self.failures >= self.fall => Health::Down,
                Health::Down if self.successes >= self.rise => Health::Up,
                h => h,
            }
        };
        let transition = (target != self.health).then(|| Transition {
            to: target,
            reason: result.text.clone(),
            duration: Some(result.duration),
        });
        self.last = Some(result);
        if transition.is_some() {
            self.flip(target, now);
        }
        transition
    }

    /// A passive verdict: the server goes DOWN now and needs `rise` passed checks
    /// to come back. Nothing happens to a server already DOWN.
    pub fn mark_down(&mut self, reason: String, now: Instant) -> Option<Transition> {
        if self.health == Health::Down {
            return None;
        }
        self.successes = 0;
        self.flip(Health::Down, now);
        Some(Transition { to: Health::Down, reason, duration: None })
    }

    /// The same state under new `fall` and `rise` (a reload that changed them):
    /// the consecutive counts carry on and are judged by the new thresholds at the
    /// next check.
    pub fn with_thresholds(mut self, fall: u32, rise: u32) -> Self {
        self.fall = fall.max(1);
        self.rise = rise.max(1);
        self
    }

    /// No check result yet: the next one alone decides the state.
    pub fn is_initial(&self) -> bool {
        self.initial
    }

    fn flip(&mut self, to: Health, now: Instant) {
        self.health = to;
        self.changed_at = now;
        if to == Health::Down {
            self.downs += 1;
        }
    }

    pub fn health(&self) -> Health {
        self.health
    }
    pub fn last(&self) -> Option<&CheckResult> {
        self.last.as_ref()
    }
    pub fn changed_at(&self) -> Instant {
        self.changed_at
    }
    pub fn consecutive_successes(&self) -> u32 {
        self.successes
    }
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }
}

/// Consecutive failed requests to one server (passive checks). Relaxed atomics:
/// every worker reports into it, and a success costs one load when the count is 0.
#[derive(Debug)]
pub struct PassiveCounter {
    errors: AtomicU32,
    limit: u32,
}

impl PassiveCounter {
    pub fn new(limit: u32) -> Self {
        PassiveCounter { errors: AtomicU32::new(0), limit: limit.max(1) }
    }

    /// Counts one request's outcome; true when this failure reaches the limit (the
    /// count then starts again from 0).
    pub fn observe(&self, ok: bool) -> bool {
        if ok {
            if self.errors.load(Ordering::Relaxed) != 0 {
                self.errors.store(0, Ordering::Relaxed);
            }
            return false;
        }
        let n = self.errors.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if n >= self.limit {
            self.errors.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Consecutive failures counted so far.
    pub fn errors(&self) -> u32 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    fn reset(&self) {
        self.errors.store(0, Ordering::Relaxed);
    }
}

/// The health part of a [`ServerRt`].
#[derive(Debug)]
pub struct ServerHealth {
    backend: String,
    /// Active checks run for this server.
    checked: bool,
    state: Mutex<HealthState>,
    passive: Option<PassiveCounter>,
}

impl ServerHealth {
    pub fn new(server: &Server, backend: &Backend) -> Self {
        let checked = server.check && backend.check.is_some();
        let (fall, rise) = backend.check.as_ref().map_or((1, 1), |c| (c.fall, c.rise));
        ServerHealth {
            backend: backend.name.clone(),
            checked,
            state: Mutex::new(HealthState::new(fall, rise, Instant::now())),
            // A server without active checks could never come back: no passive ones.
            passive: backend.observe.filter(|_| checked).map(|o| PassiveCounter::new(o.errors)),
        }
    }

    /// The health of a server kept across a reload: the running server's state
    /// (UP or DOWN, counts, last check) under the new config's `fall` and `rise`.
    /// The passive count starts again from 0.
    pub fn carried(server: &Server, backend: &Backend, old: &ServerHealth) -> Self {
        let fresh = ServerHealth::new(server, backend);
        let (fall, rise) = backend.check.as_ref().map_or((1, 1), |c| (c.fall, c.rise));
        let state = old.state.lock().clone().with_thresholds(fall, rise);
        ServerHealth { state: Mutex::new(state), ..fresh }
    }

    /// Active checks run for this server.
    pub fn checked(&self) -> bool {
        self.checked
    }

    /// A checked server with no check result yet: the checker's first round decides it.
    pub fn needs_first_check(&self) -> bool {
        self.checked && self.state.lock().is_initial()
    }
}

/// What the admin API and the stats page show about a server's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckStatus {
    /// Active checks run for this server.
    pub checked: bool,
    /// Passive checks (`observe`) apply to this server.
    pub observed: bool,
    pub health: Health,
    /// The last active check, if any ran.
    pub last: Option<CheckResult>,
    /// Time since the last change of state (or since start).
    pub since_change: Duration,
    pub consecutive_successes: u32,
    pub consecutive_failures: u32,
    /// Active checks run, and how many of them failed.
    pub checks: u64,
    pub failed_checks: u64,
    /// Times the server went DOWN (checks or passive).
    pub downs: u64,
    /// Consecutive failed requests counted by passive checks.
    pub passive_errors: u32,
}

impl CheckStatus {
    /// The last check as one line: "HTTP status 503 in 2 ms", or "-".
    pub fn last_text(&self) -> String {
        match &self.last {
            Some(r) => format!("{} in {} ms", r.text, r.duration.as_millis()),
            None => "-".into(),
        }
    }
}

/// A server's health as [`ServerRt::check_status`] reports it.
pub fn status(server: &ServerRt) -> CheckStatus {
    let h = &server.health;
    let st = h.state.lock();
    CheckStatus {
        checked: h.checked,
        observed: h.passive.is_some(),
        health: st.health,
        last: st.last.clone(),
        since_change: st.changed_at.elapsed(),
        consecutive_successes: st.successes,
        consecutive_failures: st.failures,
        checks: st.checks,
        failed_checks: st.failed_checks,
        downs: st.downs,
        passive_errors: h.passive.as_ref().map_or(0, PassiveCounter::errors),
    }
}

/// Passive checks: the data path reports each request to `server` here; `ok` is
/// false for a connection error or a 5xx response. Enough consecutive failures
/// take the server DOWN (see [`PassiveCounter`]).
pub fn observe(server: &ServerRt, ok: bool) {
    let Some(p) = &server.health.passive else { return };
    if !p.observe(ok) {
        return;
    }
    let reason = format!("{} consecutive errors (passive)", p.limit());
    let mut st = server.health.state.lock();
    if let Some(t) = st.mark_down(reason, Instant::now()) {
        server.set_up(false);
        drop(st);
        log_transition(server, &t);
    }
}

/// Applies an active check's result to `server`.
pub(crate) fn apply(server: &ServerRt, result: CheckResult) {
    let mut st = server.health.state.lock();
    let t = st.record(result, Instant::now());
    if let Some(t) = &t {
        server.set_up(t.to == Health::Up);
        if t.to == Health::Up
            && let Some(p) = &server.health.passive
        {
            p.reset();
        }
    }
    drop(st);
    if let Some(t) = t {
        log_transition(server, &t);
    }
}

fn log_transition(server: &ServerRt, t: &Transition) {
    let backend = &server.health.backend;
    let name = &server.cfg.name;
    let took = t.duration.map_or_else(String::new, |d| format!(" (check took {} ms)", d.as_millis()));
    match t.to {
        Health::Down => tracing::warn!(
            backend = %backend,
            server = %name,
            reason = %t.reason,
            "server {backend}/{name} is DOWN: {}{took}",
            t.reason
        ),
        Health::Up => {
            tracing::info!(backend = %backend, server = %name, reason = %t.reason, "server {backend}/{name} is UP: {}{took}", t.reason)
        }
    }
}

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
            let (backend, name) = (&self.server.health.backend, &self.server.cfg.name);
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
                    upstream_h2::probe(&session, &h.method, &authority, &h.path, MAX_BODY, want).await?;
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
                for s in b.servers.iter().filter(|s| s.cfg.check) {
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
                        apply(&t.server, r);
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
        apply(&t.server, r);
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

    fn ok(text: &str) -> CheckResult {
        CheckResult { ok: true, text: text.into(), duration: Duration::from_millis(3), local: false }
    }
    fn fail(text: &str) -> CheckResult {
        CheckResult { ok: false, text: text.into(), duration: Duration::from_millis(5), local: false }
    }
    fn local() -> CheckResult {
        let outcome: Result<Result<String, Failed>, ()> =
            Ok(Err(io_failed(&std::io::Error::from_raw_os_error(libc::EMFILE))));
        result(Duration::from_secs(1), Instant::now(), outcome)
    }

    /// A check this process could not make (EMFILE) is neither a pass nor a
    /// failure: with fall = 1, as many as come leave an UP server UP, do not
    /// break a run of failures or successes, and a first result that is local
    /// leaves the next one to decide.
    #[test]
    fn checks_failing_locally_count_neither_way() {
        let r = local();
        assert!(!r.ok && r.local, "{r:?}");
        assert_eq!(r.text, "not run: this process is out of file descriptors (EMFILE)");

        let t0 = Instant::now();
        let mut first = HealthState::new(1, 1, t0);
        assert_eq!(first.record(local(), t0), None);
        assert!(first.is_initial(), "still waiting for a result that says something");
        assert_eq!(first.health(), Health::Up);

        let mut s = HealthState::new(1, 2, t0);
        s.record(ok("up"), t0);
        for _ in 0..10 {
            assert_eq!(s.record(local(), t0), None);
        }
        assert_eq!(
            (s.health(), s.consecutive_failures(), s.checks, s.failed_checks, s.downs),
            (Health::Up, 0, 1, 0, 0)
        );
        assert!(s.last().is_some_and(|r| r.local), "shown as the last check");
        // A real failure still counts, and a local one between two successes
        // does not break the run of `rise`.
        assert_eq!(s.record(fail("connection refused"), t0).map(|t| t.to), Some(Health::Down));
        assert_eq!(s.record(ok("up"), t0), None);
        assert_eq!(s.record(local(), t0), None);
        assert_eq!(s.record(ok("up"), t0).map(|t| t.to), Some(Health::Up));
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
    fn first_result_alone_decides() {
        let t0 = Instant::now();
        let mut up = HealthState::new(3, 2, t0);
        assert_eq!(up.record(ok("HTTP status 200"), t0), None, "starts UP: no change");
        assert_eq!(up.health(), Health::Up);

        let mut down = HealthState::new(3, 2, t0);
        let t = down.record(fail("connection refused"), t0).expect("one failure is enough at start");
        assert_eq!(t.to, Health::Down);
        assert_eq!(t.reason, "connection refused");
        assert_eq!(t.duration, Some(Duration::from_millis(5)));
        // Then `rise` passed checks are needed, as for any DOWN server.
        assert_eq!(down.record(ok("HTTP status 200"), t0), None);
        assert_eq!(down.record(ok("HTTP status 200"), t0).map(|t| t.to), Some(Health::Up));
    }

    #[test]
    fn fall_and_rise_count_consecutive_results() {
        let t0 = Instant::now();
        let mut s = HealthState::new(3, 2, t0);
        s.record(ok("up"), t0);
        // Two failures, a success: the count starts again.
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        assert_eq!(s.consecutive_failures(), 2);
        assert_eq!(s.record(ok("HTTP status 200"), t0), None);
        assert_eq!(s.consecutive_failures(), 0);
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        assert_eq!(s.record(fail("HTTP status 503"), t0), None);
        let t1 = t0 + Duration::from_secs(7);
        let t = s.record(fail("timeout after 1s"), t1).expect("third consecutive failure");
        assert_eq!((t.to, t.reason.as_str()), (Health::Down, "timeout after 1s"));
        assert_eq!(s.changed_at(), t1);
        // Further failures change nothing.
        assert_eq!(s.record(fail("timeout after 1s"), t1), None);
        // One success, one failure, then two successes: UP on the second of those.
        assert_eq!(s.record(ok("HTTP status 200"), t1), None);
        assert_eq!(s.record(fail("HTTP status 500"), t1), None);
        assert_eq!(s.record(ok("HTTP status 200"), t1), None);
        let t2 = t1 + Duration::from_secs(4);
        assert_eq!(s.record(ok("HTTP status 200"), t2).map(|t| t.to), Some(Health::Up));
        assert_eq!(s.changed_at(), t2);
        assert_eq!(s.last().map(|r| r.text.as_str()), Some("HTTP status 200"));
        assert_eq!((s.checks, s.failed_checks, s.downs), (12, 7, 1));
    }

    #[test]
    fn fall_and_rise_of_one_flip_at_once() {
        let t0 = Instant::now();
        let mut s = HealthState::new(1, 1, t0);
        s.record(ok("a"), t0);
        assert_eq!(s.record(fail("b"), t0).map(|t| t.to), Some(Health::Down));
        assert_eq!(s.record(ok("c"), t0).map(|t| t.to), Some(Health::Up));
    }

    #[test]
    fn passive_down_needs_rise_checks_to_come_back() {
        let t0 = Instant::now();
        let mut s = HealthState::new(3, 2, t0);
        for _ in 0..5 {
            s.record(ok("HTTP status 200"), t0);
        }
        let t = s.mark_down("3 consecutive errors (passive)".into(), t0).expect("UP server goes DOWN");
        assert_eq!((t.to, t.duration), (Health::Down, None));
        assert_eq!(s.mark_down("again".into(), t0), None, "already DOWN");
        // The successes before the verdict do not count towards rise.
        assert_eq!(s.record(ok("HTTP status 200"), t0), None);
        assert_eq!(s.record(ok("HTTP status 200"), t0).map(|t| t.to), Some(Health::Up));
    }

    #[test]
    fn passive_counter_counts_consecutive_failures() {
        let p = PassiveCounter::new(3);
        assert!(!p.observe(false));
        assert!(!p.observe(false));
        assert!(!p.observe(true), "a success starts the count again");
        assert_eq!(p.errors(), 0);
        assert!(!p.observe(false));
        assert!(!p.observe(false));
        assert!(p.observe(false), "third in a row");
        assert_eq!(p.errors(), 0, "the count restarts after a verdict");
        assert!(!p.observe(false));
    }

    fn backend(toml_server_extra: &str, check: &str, observe: &str) -> Arc<BackendRt> {
        let src = format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n[[backend]]\nname = \"b\"\n{check}\n{observe}\n\
             [[backend.server]]\nname = \"s1\"\naddr = \"127.0.0.1:1\"\n{toml_server_extra}\n"
        );
        let c = tollgate_config::parse(&src, std::path::Path::new("t.toml")).unwrap();
        BackendRt::new(c.backends[0].clone())
    }

    #[test]
    fn observe_takes_a_checked_server_down_and_checks_bring_it_back() {
        let b = backend("", "check = { type = \"tcp\", fall = 3, rise = 2 }", "observe = { errors = 2 }");
        let s = &b.servers[0];
        apply(s, ok("TCP connect ok"));
        assert!(s.is_up());
        s.observe(false);
        assert!(s.is_up());
        s.observe(false);
        assert!(!s.is_up(), "2 consecutive errors");
        let st = s.check_status();
        assert_eq!((st.health, st.downs, st.checked, st.observed), (Health::Down, 1, true, true));
        apply(s, ok("TCP connect ok"));
        assert!(!s.is_up());
        apply(s, ok("TCP connect ok"));
        assert!(s.is_up(), "rise = 2");
        assert_eq!(s.check_status().last_text(), "TCP connect ok in 3 ms");

        // No passive checks without `observe`, nor for a server with check = false.
        let b = backend("", "check = { type = \"tcp\" }", "");
        for _ in 0..10 {
            b.servers[0].observe(false);
        }
        assert!(b.servers[0].is_up());
        let b = backend("check = false", "check = { type = \"tcp\" }", "observe = { errors = 1 }");
        b.servers[0].observe(false);
        assert!(b.servers[0].is_up());
        assert!(!b.servers[0].check_status().checked);
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
