//! HTTP/3 to clients: a TLS bind's `h3 = true` serves QUIC (quinn) on the
//! same port over UDP, with the bind's certificates (chosen by SNI as on TCP),
//! ALPN `h3` and 0-RTT off. Each request stream runs the same request phase as
//! an HTTP/1.1 request or an HTTP/2 stream (pipeline::request: rules, auth,
//! cache, static files, balancing), and its response goes out as HTTP/3
//! frames; a server's body through the same code as HTTP/2's (mux.rs).
//!
//! Limits as for HTTP/2: the frontend's `h2.max_concurrent_streams` bidirectional
//! streams at once, `h2.max_header_list_size` for a field section,
//! `timeout.http_request` for the handshake and a first request,
//! `timeout.keep_alive` for a connection without a stream, `timeout.client`
//! for each wait on the client (and as QUIC's idle timeout); a connection
//! holds a `global.max_connections` permit as a TCP one does.

use crate::lb::shutdown::Watcher;
use crate::lb::track::{self, Admit, Tracked};
use crate::net::tls::{TlsEndpoint, TlsInfo};
use crate::observe::termination::Termination;
use crate::pipeline::exchange::{self, Fail, IoFail, LogSlot, drain};
use crate::pipeline::rescue::{self, ProxyError};
use crate::pipeline::serve::{Answer, CachePlan};
use crate::pipeline::snapshot::Snapshot;
use crate::pipeline::{self, ClientSide, Exchange, Proxied, Ready};
use crate::session::mux::{self, BodySink, header_value, send_body};
use crate::upstream::Upstream;
use arc_swap::ArcSwap;
use bytes::{Buf, Bytes};
use h3::server::RequestStream;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tollgate_config::Frontend;
use tollgate_wire::h1::{BodyCursor, Framing, RequestHead, ResponseHead};

type SendHalf = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = RequestStream<h3_quinn::RecvStream, Bytes>;

/// The QUIC server config of a TLS bind: its rustls config (certificates,
/// resolver, session resumption), ALPN `h3`, no early data, and the
/// frontend's limits.
pub fn quic_config(tls: &TlsEndpoint, fe: &Frontend) -> Result<quinn::ServerConfig, String> {
    let mut rustls = (*tls.config).clone();
    rustls.alpn_protocols = vec![b"h3".to_vec()];
    rustls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(rustls).map_err(|e| e.to_string())?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(fe.h2.max_concurrent_streams.into());
    transport.max_concurrent_uni_streams(8u32.into());
    // QUIC's idle timeout finds a client that is gone: no packet within
    // `timeout.client`. A live one answers the PINGs sent meanwhile, so a
    // stream waiting on a slow server is not cut; an idle connection is
    // ended by `timeout.keep_alive` (GOAWAY), see `connection`.
    let client = fe.timeouts.client;
    transport.max_idle_timeout(client.try_into().ok());
    transport.keep_alive_interval(Some(client / 3));
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

/// One `h3` bind's endpoint: serves it until the server stops, taking each
/// new snapshot's certificates for the handshakes after it.
pub async fn serve(
    endpoint: quinn::Endpoint,
    snap: Arc<ArcSwap<Snapshot>>,
    (frontend, bind): (String, SocketAddr),
    local: SocketAddr,
    permits: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let mut current = snap.load_full();
    let mut conns = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                follow(&endpoint, &snap, &mut current, &frontend, bind);
                let Some(fi) = current.config.frontends.iter().position(|f| f.name == frontend) else {
                    incoming.refuse();
                    continue;
                };
                // A QUIC connection counts toward `global.max_connections` as
                // a TCP one does; past it, the client is refused (and goes on
                // over TCP, where the accept waits).
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::debug!(frontend, "HTTP/3 on {bind}: max_connections reached, refusing a connection");
                    incoming.refuse();
                    continue;
                };
                // The frontend's `src` tables and connection rules, as on TCP.
                let src = tollgate_wire::headers::canonical_ip(incoming.remote_address().ip());
                let tracked = match track::admit(&current.tables, &current.config.frontends[fi], src) {
                    Admit::Go(t) => t,
                    refused => {
                        current.frontend_stats[fi].denied_connections.fetch_add(1, Ordering::Relaxed);
                        match refused {
                            // No answer at all: the client's handshake times out.
                            Admit::SilentDrop => incoming.ignore(),
                            _ => incoming.refuse(),
                        }
                        continue;
                    }
                };
                let hsts = current.tls_endpoint(fi, bind).and_then(|e| e.hsts.clone());
                let held = (permit, tracked);
                conns.spawn(connection(incoming, (current.clone(), fi), local, hsts, held, stop.clone()));
            }
            _ = tick.tick() => follow(&endpoint, &snap, &mut current, &frontend, bind),
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            r = stop.changed() => if r.is_err() || *stop.borrow() { break },
        }
    }
    // Stopping: no new connection; those open finish their streams (they
    // watch the stop themselves and send GOAWAY) within `grace_period`, as
    // the workers' connections do; then the endpoint closes what is left.
    endpoint.set_server_config(None);
    let grace = snap.load().config.global.grace_period;
    let finished = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if finished.is_err() {
        conns.abort_all();
    }
    endpoint.close(H3_NO_ERROR, b"stopping");
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
}

/// How long a stopping endpoint waits for its closing connections to tell
/// their clients.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// After a reload, the new snapshot's certificates for the next handshakes.
fn follow(
    endpoint: &quinn::Endpoint,
    snap: &ArcSwap<Snapshot>,
    current: &mut Arc<Snapshot>,
    frontend: &str,
    bind: SocketAddr,
) {
    let now = snap.load_full();
    if Arc::ptr_eq(&now, current) {
        return;
    }
    *current = now;
    let Some(fi) = current.config.frontends.iter().position(|f| f.name == frontend) else { return };
    if let Some(tls) = current.tls_endpoint(fi, bind) {
        match quic_config(tls, &current.config.frontends[fi]) {
            Ok(cfg) => endpoint.set_server_config(Some(cfg)),
            Err(e) => tracing::warn!(frontend, "HTTP/3 on {bind}: the reloaded TLS config does not fit QUIC: {e}"),
        }
    }
}

/// What the streams of one connection share.
struct Shared {
    snap: Arc<Snapshot>,
    fi: usize,
    peer: SocketAddr,
    local: SocketAddr,
    tls: TlsInfo,
    quic: quinn::Connection,
}

impl Shared {
    fn fe(&self) -> &Frontend {
        &self.snap.config.frontends[self.fi]
    }
}

/// One QUIC connection, holding a `global.max_connections` permit: the
/// handshake and the HTTP/3 setup by `head_by` (`timeout.http_request` after
/// the first packet), a first request stream by the same deadline, then its
/// streams, each a task, until the client closes, the connection stays
/// without a stream for `timeout.keep_alive` (GOAWAY), the server stops
/// (GOAWAY, then the streams in flight finish) or its idle timeout ends it.
/// After a GOAWAY and the last stream, the connection closes (H3_NO_ERROR)
/// once the ends of the responses have had time to be acknowledged.
async fn connection(
    incoming: quinn::Incoming,
    (snap, fi): (Arc<Snapshot>, usize),
    local: SocketAddr,
    hsts: Option<HeaderValue>,
    _held: (OwnedSemaphorePermit, Tracked),
    mut stop: watch::Receiver<bool>,
) {
    let fe = &snap.config.frontends[fi];
    let timeouts = fe.timeouts;
    let _session = snap.frontend_stats[fi].open_session();
    let head_by = tokio::time::Instant::now() + timeouts.http_request;
    let conn = match tokio::time::timeout_at(head_by, incoming).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!("HTTP/3 handshake failed: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("HTTP/3 handshake timed out");
            return;
        }
    };
    let peer = conn.remote_address();
    let sni = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name)
        .map(|n| crate::net::tls::sni_name(&n))
        .unwrap_or_default();
    let client = conn
        .peer_identity()
        .and_then(|i| i.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
        .and_then(|certs| certs.first().map(|c| Arc::new(crate::net::tls::client_cert(c))));
    let tls = TlsInfo { sni, version: "TLSv1.3", cipher: "-", hsts, alt_svc: None, client };
    let quic = conn.clone();
    let mut builder = h3::server::builder();
    builder.max_field_section_size(fe.h2.max_header_list_size.into());
    // The setup opens the control stream: a client that gives no stream
    // credit would hold it for good.
    let mut h3 = match tokio::time::timeout_at(head_by, builder.build(h3_quinn::Connection::new(conn))).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(client = %peer, "HTTP/3 connection failed: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!(client = %peer, "HTTP/3: no stream credit for the control stream within timeout.http_request");
            quic.close(H3_NO_ERROR, b"");
            return;
        }
    };
    let shared = Arc::new(Shared { snap: snap.clone(), fi, peer, local, tls, quic: quic.clone() });
    let mut streams = JoinSet::new();
    let mut closing = false;
    let idle = tokio::time::sleep(timeouts.keep_alive);
    tokio::pin!(idle);
    // Armed by a GOAWAY: once no stream is left, the close waits for the
    // ends of the responses (and of the GOAWAY) to be acknowledged.
    let close_by = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(close_by);
    let head_timer = tokio::time::sleep_until(head_by);
    tokio::pin!(head_timer);
    let mut first_request = false;
    loop {
        if *stop.borrow() && !closing {
            let _ = h3.shutdown(1).await;
            closing = true;
            close_by.as_mut().reset(tokio::time::Instant::now() + settle(&quic, timeouts.client));
        }
        tokio::select! {
            r = h3.accept() => match r {
                Ok(Some(resolver)) => {
                    first_request = true;
                    let sh = shared.clone();
                    streams.spawn(async move {
                        let within = sh.fe().timeouts.http_request;
                        match tokio::time::timeout(within, resolver.resolve_request()).await {
                            Ok(Ok((req, stream))) => self::stream(sh, req, stream).await,
                            Ok(Err(e)) => tracing::debug!(client = %sh.peer, "HTTP/3 request stream: {e}"),
                            Err(_) => tracing::debug!(client = %sh.peer, "HTTP/3: no request head within timeout.http_request"),
                        }
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(client = %peer, "HTTP/3 connection ended: {e}");
                    break;
                }
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {
                if streams.is_empty() {
                    let now = tokio::time::Instant::now();
                    idle.as_mut().reset(now + timeouts.keep_alive);
                    if closing {
                        close_by.as_mut().reset(now + settle(&quic, timeouts.client));
                    }
                }
            }
            _ = &mut close_by, if closing && streams.is_empty() => break,
            _ = &mut head_timer, if !first_request && !closing => {
                tracing::debug!(client = %peer, "HTTP/3: no request within timeout.http_request");
                break;
            }
            _ = &mut idle, if streams.is_empty() && !closing => {
                let _ = h3.shutdown(0).await;
                closing = true;
                close_by.as_mut().reset(tokio::time::Instant::now() + settle(&quic, timeouts.client));
            }
            r = stop.changed(), if !closing => if r.is_err() {
                let _ = h3.shutdown(1).await;
                closing = true;
                close_by.as_mut().reset(tokio::time::Instant::now() + settle(&quic, timeouts.client));
            },
        }
    }
    // The connection is gone or closing: the streams still running can send
    // nothing more. Dropping `h3` closes the connection with H3_NO_ERROR.
    streams.abort_all();
    while streams.join_next().await.is_some() {}
    drop(h3);
    quic.close(H3_NO_ERROR, b"");
}

/// HTTP/3's H3_NO_ERROR (RFC 9114 section 8.1), as a QUIC close code.
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);

/// How long a closing connection waits after what it last sent before it
/// closes: closing sooner would drop a response's last packets not yet
/// acknowledged (QUIC discards them; quinn does not say, through h3, when a
/// stream's data is), the client seeing a stream cut short. Four round trips
/// and the peer's largest ack delay (25 ms by default), at least 250 ms (a
/// busy machine's loopback), at most `timeout.client` or two seconds. A
/// client that closes first ends the wait.
fn settle(quic: &quinn::Connection, client: Duration) -> Duration {
    let wait = quic.rtt() * 4 + Duration::from_millis(25);
    let most = client.min(Duration::from_secs(2));
    wait.max(SETTLE_LEAST).min(most.max(SETTLE_LEAST))
}

const SETTLE_LEAST: Duration = Duration::from_millis(250);

/// One request stream, from its head to its log line.
struct Stream {
    sh: Arc<Shared>,
    head: RequestHead,
    resp: ResponseHead,
    head_len: u64,
    body_in: u64,
    status: u16,
    bytes_out: u64,
    log: LogSlot,
    cache: Option<Box<CachePlan>>,
    private: Option<Upstream>,
    watcher: Watcher,
    /// A read of the request body was cut short (a timeout, the server's
    /// early answer) and is still under way inside h3-quinn: its stream is
    /// taken meanwhile, and `stop_sending` would panic there (h3-quinn
    /// 0.0.10 unwraps it). Dropping the stream stops it then.
    read_pending: bool,
    /// The table entries the request counts in (lb/track.rs).
    tracked: Tracked,
}

async fn stream(sh: Arc<Shared>, req: http::Request<()>, stream: RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>) {
    let start = Instant::now();
    let (parts, ()) = req.into_parts();
    let (mut send, mut recv) = stream.split();
    let mut s = Stream {
        sh: sh.clone(),
        head: RequestHead::default(),
        resp: ResponseHead::default(),
        head_len: 0,
        body_in: 0,
        status: 0,
        bytes_out: 0,
        log: None,
        cache: None,
        private: None,
        watcher: Watcher::new(),
        read_pending: false,
        tracked: Tracked::default(),
    };
    let ends = (sh.peer, sh.fe().name.as_str());
    s.log = mux::log_record(sh.snap.access_log.as_ref(), start, ends, Some(&sh.tls), &parts, "HTTP/3.0");
    let result = s.run(&parts, &mut recv, &mut send).await;
    let stats = &sh.snap.frontend_stats[sh.fi];
    match result {
        Ok(()) => {}
        Err(Fail::Respond(e)) => {
            if matches!(e, ProxyError::Refused { .. }) {
                stats.request_errors.fetch_add(1, Ordering::Relaxed);
            }
            s.respond_error(&mut send, e, parts.method == http::Method::HEAD).await;
        }
        Err(Fail::Abort(why)) => {
            send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
            if let Some((_, r)) = s.log.as_mut() {
                r.termination.get_or_insert(why.as_str());
            }
            // A rule's `silent_drop`: the whole connection goes (QUIC has no
            // quiet close: the client is told, with no reason given).
            if why == Termination::SilentDrop {
                sh.quic.close(H3_NO_ERROR, b"");
            }
        }
    }
    stats.h3_requests.fetch_add(1, Ordering::Relaxed);
    stats.count_exchange(s.status, s.head_len + s.body_in, s.bytes_out, start.elapsed());
    s.tracked.finish(s.status, s.head_len + s.body_in, s.bytes_out);
    if let Some((sink, rec)) = s.log.take() {
        sink.write(&rec);
    }
}

impl Stream {
    fn fe(&self) -> &Frontend {
        self.sh.fe()
    }

    async fn run(
        &mut self,
        parts: &http::request::Parts,
        recv: &mut RecvHalf,
        send: &mut SendHalf,
    ) -> Result<(), Fail> {
        let ready = match self.request(parts, recv).await {
            // -- cache hook 4 (pipeline/serve.rs), the origin failed: stale-if-error.
            Err(Fail::Respond(e)) => {
                match self.cache.take().and_then(|p| p.failed(&mut self.head, &e, Some(&self.sh.tls))) {
                    Some(answer) => Ready::Cached(answer),
                    None => return Err(Fail::Respond(e)),
                }
            }
            r => r?,
        };
        match ready {
            Ready::Redirect { code, location } => {
                let mut r = self.local_response(code);
                r.headers_mut().insert(http::header::LOCATION, header_value(location.as_bytes()));
                r.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("0"));
                if let Some((_, rec)) = self.log.as_mut() {
                    rec.status = code;
                    rec.termination = Some(Termination::Redirect.as_str());
                }
                self.status = code;
                send.send_response(r).await.map_err(|_| Fail::Abort(Termination::ClientAborted))?;
                send.finish().await.map_err(|_| Fail::Abort(Termination::ClientAborted))
            }
            Ready::Cached(answer) => self.send_cached(send, answer).await,
            Ready::File(mut f) => {
                self.status = f.status;
                let r = crate::session::file::response_head(&f);
                send.send_response(r).await.map_err(|_| Fail::Abort(Termination::ClientAborted))?;
                let idle = self.fe().timeouts.client;
                let (sent, result) = match f.body.take() {
                    Some(body) => {
                        let mut sink = H3Sink(send);
                        crate::session::file::send_pieces(&mut sink, body, f.encoder.as_deref_mut(), idle).await
                    }
                    None => (0, send.finish().await.map_err(|_| Termination::ClientAborted)),
                };
                self.bytes_out = sent;
                if let Some((_, rec)) = self.log.as_mut() {
                    rec.status = self.status;
                    rec.bytes = sent;
                }
                result.map_err(Fail::Abort)
            }
            Ready::Proxied(p) => {
                self.response(p, recv, send).await?;
                if let Some(mut plan) = self.cache.take() {
                    plan.finish(&self.head);
                }
                Ok(())
            }
        }
    }

    /// The request head from the stream's fields (checked as an HTTP/1.1 one
    /// is), then the request phase.
    async fn request(&mut self, parts: &http::request::Parts, recv: &mut RecvHalf) -> Result<Ready, Fail> {
        let sh = self.sh.clone();
        let fe = sh.fe();
        if parts.method == http::Method::CONNECT {
            return Err(ProxyError::Refused { status: 405, reason: "method-not-allowed" }.into());
        }
        if let Some(scheme) = parts.uri.scheme_str()
            && !scheme.eq_ignore_ascii_case("https")
        {
            return Err(ProxyError::Refused { status: 400, reason: "bad-scheme" }.into());
        }
        if let Some(name) = connection_specific(&parts.headers) {
            // Malformed (RFC 9114 section 4.2): a 400, and the rest of the
            // stream is not read.
            recv.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
            tracing::debug!(client = %sh.peer, "HTTP/3 request with the connection-specific field {name}");
            return Err(ProxyError::Refused { status: 400, reason: "connection-specific-field" }.into());
        }
        // HTTP/3 says whether a body follows only with the stream: a request
        // with a length has one (unless it is 0); one without, that usually
        // carries one, goes on chunked; any other has one when DATA comes
        // before the stream's end.
        let length = parts.headers.get(http::header::CONTENT_LENGTH);
        let mut first = None;
        let has_body = match length {
            Some(v) => v.as_bytes() != b"0",
            None if matches!(parts.method, http::Method::POST | http::Method::PUT | http::Method::PATCH) => true,
            None => match tokio::time::timeout(fe.timeouts.client, recv.recv_data()).await {
                Err(_) => {
                    self.read_pending = true;
                    return Err(ProxyError::ClientTimeout.into());
                }
                Ok(Err(_)) => return Err(Fail::Abort(Termination::ClientAborted)),
                Ok(Ok(None)) => false,
                Ok(Ok(Some(mut d))) => {
                    first = Some(d.copy_to_bytes(d.remaining()));
                    true
                }
            },
        };
        let limits = (fe.limits.max_headers, fe.limits.max_header_size, fe.limits.max_uri_size);
        self.head_len = crate::session::h2conn::load_head(&mut self.head, parts, has_body, None, limits)
            .map_err(|r| ProxyError::Refused { status: r.status, reason: r.reason })? as u64;
        let framing = self.head.framing();
        let x = Exchange {
            snap: &sh.snap,
            fi: sh.fi,
            peer: sh.peer,
            tls: Some(&sh.tls),
            local_port: sh.local.port(),
            head: &mut self.head,
            resp: &mut self.resp,
            cache: &mut self.cache,
            private: &mut self.private,
            out: &mut Vec::with_capacity(1024),
            log: &mut self.log,
            watch: self.watcher.id(),
            tracked: &mut self.tracked,
        };
        let mut client = H3Client {
            recv,
            first,
            body_in: &mut self.body_in,
            read_pending: &mut self.read_pending,
            fe,
            local: sh.local,
            chunked: framing == Framing::Chunked,
            complete: framing == Framing::Empty,
            length: match framing {
                Framing::Length(n) => Some(n),
                _ => None,
            },
        };
        pipeline::request(x, &mut client).await
    }

    /// The server's response head, then its body (mux.rs).
    async fn response(&mut self, mut p: Proxied, recv: &mut RecvHalf, send: &mut SendHalf) -> Result<(), Fail> {
        let server = p.slot.server.clone();
        let status = self.resp.status;
        if status == 101 {
            // No extended CONNECT over HTTP/3 here: an upgrade cannot be asked for.
            return Err(ProxyError::BadGateway.into());
        }
        let is_head = self.head.method() == "HEAD";
        let framing = self.resp.framing(is_head);
        let mut r = Response::new(());
        *r.status_mut() = StatusCode::from_u16(status).map_err(|_| Fail::Respond(ProxyError::BadGateway))?;
        let headers = r.headers_mut();
        self.resp.h2_fields(false, |name, value| {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
                headers.append(n, v);
            }
        });
        let end = framing.is_empty();
        self.status = status;
        self.bytes_out = self.head_len;
        if end && let Some(plan) = self.cache.as_deref_mut() {
            plan.finish(&self.head);
        }
        send.send_response(r).await.map_err(|_| Fail::Abort(Termination::ClientAborted))?;
        let mut rbody = BodyCursor::new(framing);
        let (server_idle, client_idle) = (p.server_idle, self.fe().timeouts.client);
        let mut sent = 0u64;
        let outcome = if end {
            send.finish().await.map_err(|_| Termination::ClientAborted)
        } else {
            let tee = self.cache.as_deref_mut().map(|plan| (plan, &self.head));
            let watch = self.watcher.id();
            let enc = p.encoder.as_deref_mut().map(|e| (e, &mut sent));
            let mut sink = H3Sink(send);
            let relay =
                std::pin::pin!(send_body(&mut sink, &mut p.up, &mut rbody, (server_idle, client_idle), tee, enc));
            server.unless_shut(relay, watch).await.unwrap_or_else(Err)
        };
        let to_client = if p.encoder.is_some() { sent } else { rbody.data };
        self.bytes_out += to_client;
        server.stats.bytes_out.fetch_add(rbody.data, Ordering::Relaxed);
        if let Some((_, r)) = self.log.as_mut() {
            r.bytes = to_client;
        }
        let reusable = !self.resp.server_closes && p.upload_done && framing != Framing::UntilClose;
        let mut private = None;
        match outcome {
            Ok(()) => {
                if reusable && p.up.buf.is_empty() {
                    exchange::park(&mut private, p.up, &server);
                }
                if !p.upload_done && !self.read_pending {
                    recv.stop_sending(h3::error::Code::H3_NO_ERROR);
                }
                Ok(())
            }
            Err(why @ (Termination::ClientAborted | Termination::ClientTimeout)) => {
                if reusable && drain(&mut p.up, &mut rbody).await {
                    exchange::park(&mut private, p.up, &server);
                    server.stats.connections_saved.fetch_add(1, Ordering::Relaxed);
                }
                Err(Fail::Abort(why))
            }
            Err(why) => Err(Fail::Abort(why)),
        }
    }

    fn local_response(&self, status: u16) -> Response<()> {
        mux::local_response(status, self.sh.tls.hsts.as_ref())
    }

    /// A response the cache gave (pipeline/serve.rs).
    async fn send_cached(&mut self, send: &mut SendHalf, answer: Answer) -> Result<(), Fail> {
        let head_request = self.head.method() == "HEAD";
        if let Some((_, rec)) = self.log.as_mut() {
            rec.set_cache(answer.cache_status());
        }
        let (r, body, termination) = mux::cached_parts(answer, head_request, self.sh.tls.hsts.as_ref())?;
        self.status = r.status().as_u16();
        self.bytes_out = body.len();
        if let Some((_, rec)) = self.log.as_mut() {
            rec.status = self.status;
            rec.bytes = body.len();
            if termination.is_some() {
                rec.termination = termination.map(Termination::as_str);
            }
        }
        send.send_response(r).await.map_err(|_| Fail::Abort(Termination::ClientAborted))?;
        let idle = self.fe().timeouts.client;
        let mut sink = H3Sink(send);
        let last = body.segments().len();
        if last == 0 {
            return sink.data(Bytes::new(), true, idle).await.map_err(Fail::Abort);
        }
        for (i, segment) in body.segments().iter().enumerate() {
            sink.data(segment.clone(), i + 1 == last, idle).await.map_err(Fail::Abort)?;
        }
        Ok(())
    }

    /// Answers with the error page of `e` (rescue.rs).
    async fn respond_error(&mut self, send: &mut SendHalf, e: ProxyError, head_request: bool) {
        let fe = self.fe();
        let reply = rescue::respond(&e, fe);
        if reply.status >= 500 {
            tracing::debug!(client = %self.sh.peer, frontend = %fe.name, "{}: {}", reply.status, e.reason());
        }
        let r = mux::error_response(&reply, self.sh.tls.hsts.as_ref());
        let idle = fe.timeouts.client;
        self.status = reply.status;
        if let Some((_, rec)) = self.log.as_mut() {
            rec.status = reply.status;
            rec.bytes = reply.body.len() as u64;
            rec.termination.get_or_insert(e.reason());
        }
        if send.send_response(r).await.is_err() {
            return;
        }
        let body = if head_request { Bytes::new() } else { Bytes::from(reply.body.into_owned()) };
        self.bytes_out = body.len() as u64;
        let _ = H3Sink(send).data(body, true, idle).await;
    }
}

/// The first field of `headers` HTTP/3 forbids (RFC 9114 section 4.2): those
/// of an HTTP/1.1 connection, and `TE` other than `trailers`.
fn connection_specific(headers: &http::HeaderMap) -> Option<&'static str> {
    let named = ["connection", "transfer-encoding", "upgrade", "keep-alive", "proxy-connection"];
    if let Some(name) = named.into_iter().find(|n| headers.contains_key(*n)) {
        return Some(name);
    }
    headers.get_all(http::header::TE).iter().any(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers")).then_some("te")
}

/// An HTTP/3 stream's DATA frames (quinn's flow control inside `send_data`).
struct H3Sink<'a>(&'a mut SendHalf);

impl BodySink for H3Sink<'_> {
    async fn data(&mut self, data: Bytes, end: bool, idle: Duration) -> Result<(), Termination> {
        if !data.is_empty() {
            match tokio::time::timeout(idle, self.0.send_data(data)).await {
                Err(_) => return Err(Termination::ClientTimeout),
                Ok(Err(_)) => return Err(Termination::ClientAborted),
                Ok(Ok(())) => {}
            }
        }
        if end {
            return self.0.finish().await.map_err(|_| Termination::ClientAborted);
        }
        Ok(())
    }

    async fn trailers(&mut self, trailers: http::HeaderMap) -> Result<(), Termination> {
        self.0.send_trailers(trailers).await.map_err(|_| Termination::ClientAborted)?;
        self.0.finish().await.map_err(|_| Termination::ClientAborted)
    }

    /// A client's reset shows on the next send.
    async fn reset(&mut self) {
        std::future::pending::<()>().await
    }
}

/// The client's side of an HTTP/3 exchange, for the request phase.
struct H3Client<'a> {
    recv: &'a mut RecvHalf,
    /// The body's first DATA, read to learn whether there is a body.
    first: Option<Bytes>,
    body_in: &'a mut u64,
    /// See [`Stream::read_pending`].
    read_pending: &'a mut bool,
    fe: &'a Frontend,
    local: SocketAddr,
    chunked: bool,
    complete: bool,
    /// The request's `Content-Length`: its DATA must add up to it (RFC 9114
    /// section 4.1.2), or the server would read the next request's bytes as
    /// this body's, or wait for bytes that never come.
    length: Option<u64>,
}

impl ClientSide for H3Client<'_> {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn take_early(&mut self) -> Result<usize, Fail> {
        Ok(0)
    }

    fn early(&self, _: usize) -> &[u8] {
        &[]
    }

    fn body_done(&self) -> bool {
        self.complete
    }

    fn body_bytes(&self) -> u64 {
        *self.body_in
    }

    /// Interim responses are not passed on over HTTP/3 here.
    fn takes_interims(&self, _: &RequestHead) -> bool {
        false
    }

    async fn head_sent(&mut self, _: usize, _: &RequestHead) {}

    async fn interim(&mut self, _: &ResponseHead) -> Result<(), Fail> {
        Ok(())
    }

    /// The request body's DATA frames to the server, chunk-framed when the
    /// request had no length; false when the server answered first.
    async fn upload(&mut self, up: &mut Upstream, server_idle: Duration) -> Result<bool, Fail> {
        let limit = self.fe.limits.max_request_body;
        let client_idle = self.fe.timeouts.client;
        let mut frame = Vec::new();
        loop {
            let data = match self.first.take() {
                Some(first) => Ok(Ok(Some(first))),
                None => {
                    *self.read_pending = true;
                    let d = tokio::select! {
                        biased;
                        d = tokio::time::timeout(client_idle, self.recv.recv_data()) => {
                            d.map(|r| r.map(|o| o.map(|mut b| b.copy_to_bytes(b.remaining()))))
                        }
                        _ = up.stream.readable() => {
                            if exchange::early_answer(up)? {
                                return Ok(false);
                            }
                            continue;
                        }
                    };
                    *self.read_pending = d.is_err();
                    d
                }
            };
            let data = match data {
                Err(_) => return Err(ProxyError::ClientTimeout.into()),
                // Fewer bytes than the length said: malformed (a stream error).
                Ok(Ok(None)) if self.length.is_some_and(|n| *self.body_in < n) => {
                    self.recv.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
                    return Err(Fail::Abort(Termination::ClientAborted));
                }
                Ok(Ok(None)) => break,
                Ok(Err(_)) => return Err(Fail::Abort(Termination::ClientAborted)),
                Ok(Ok(Some(d))) => d,
            };
            if data.is_empty() {
                continue;
            }
            let n = data.len();
            *self.body_in += n as u64;
            if limit.is_some_and(|l| *self.body_in > l) {
                return Err(ProxyError::BodyTooLarge.into());
            }
            // More bytes than the length said: malformed, and not one of
            // them beyond the length goes to the server.
            if self.length.is_some_and(|len| *self.body_in > len) {
                self.recv.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
                return Err(Fail::Abort(Termination::ClientAborted));
            }
            frame.clear();
            if self.chunked {
                frame.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            }
            frame.extend_from_slice(&data);
            if self.chunked {
                frame.extend_from_slice(b"\r\n");
            }
            match exchange::within(up.stream.write_all(&frame), server_idle).await {
                Ok(()) => {}
                Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
                Err(_) => return Ok(false),
            }
        }
        if self.chunked {
            match exchange::within(up.stream.write_all(b"0\r\n\r\n"), server_idle).await {
                Ok(()) => {}
                Err(IoFail::Timeout) => return Err(ProxyError::ServerTimeout.into()),
                Err(_) => return Ok(false),
            }
        }
        Ok(true)
    }
}
