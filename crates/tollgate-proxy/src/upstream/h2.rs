//! HTTP/2 to servers (`proto = "h2"` over TLS, `"h2c"` over TCP, or ALPN's
//! choice): one multiplexed connection per server per worker, shared by every
//! exchange of that worker, whatever protocol its client speaks.
//!
//! Each exchange is an [`Exchange`]: the data path hands it the request head
//! as it is ([`Exchange::start`]: a stream's HEADERS are made from the head's
//! fields, no HTTP/1.1 text in between), and takes the response heads from it
//! as they come ([`Exchange::next_head`]: interim ones, then the final one,
//! loaded into a `ResponseHead` from the stream's fields). The bodies go as
//! bytes through an in-memory pipe, in the framing the data path uses for any
//! server: a task of the exchange's own ([`relay`]) sends what the data path
//! writes as DATA (de-chunked when the head announced `chunked`), END_STREAM at
//! its end, and writes the response's DATA back as it comes, chunk-framed when
//! the server gave no length, its trailers in the chunked trailer section, so
//! gRPC's `grpc-status` reaches HTTP/2 clients as trailers and HTTP/1.1 clients
//! in the chunked body. So the rules, retries, passive health, access log and
//! the clients' body loops stay what they are for HTTP/1.1 servers, and flow
//! control holds end to end: the pipe is small, and the stream's window is
//! released only as the data path takes the bytes.
//!
//! The connection: opened by the first exchange that needs it (others wait
//! for it rather than open their own: the pool's gates, mod.rs), its frame I/O a task of the worker's
//! runtime, and kept while it is alive; the server's SETTINGS_MAX_CONCURRENT_
//! STREAMS bounds the streams in flight (more wait for a free one). A stream
//! refused or a connection gone before the response (GOAWAY, a restart) ends
//! the exchange with no head, which is retried like a request on a dead pooled
//! HTTP/1.1 connection.

use crate::io::idle_poll;
use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use http::StatusCode;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tollgate_wire::h1::{self, BodyCursor, Framing, RequestHead, ResponseHead};

/// Bytes in flight in each direction of the pipe between the data path and a
/// stream's task.
const PIPE: usize = 64 * 1024;
/// The receive windows asked of servers: a stream's, and the connection's (all
/// streams together). The data path takes bytes as its client does.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// How long a request body may wait for the server's flow-control window.
const WINDOW_WAIT: Duration = Duration::from_secs(3600);

/// A live HTTP/2 connection to a server: requests go out on clones of `send`.
#[derive(Clone)]
pub struct Session {
    pub(crate) send: SendRequest<Bytes>,
    /// Set when the connection's task ended (closed, failed, GOAWAY done).
    closed: Arc<AtomicBool>,
    /// `:scheme` of requests: "https" over TLS, "http" for h2c.
    scheme: &'static str,
    /// For the first WebSocket handshake on the connection: a PING whose
    /// answer tells that the server's SETTINGS (sent before it) have been read
    /// (see [`extended_connect`]). `None` once that is known.
    settings_ping: Arc<tokio::sync::Mutex<Option<h2::PingPong>>>,
}

impl Session {
    pub fn is_open(&self) -> bool {
        !self.closed.load(Ordering::Relaxed)
    }
}

/// The HTTP/2 handshake on a connection just opened (TCP or TLS); its frame
/// I/O becomes a task of the current runtime.
pub(crate) async fn handshake<T>(io: T, scheme: &'static str) -> Result<Session, h2::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, mut conn) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .enable_push(false)
        .handshake::<_, Bytes>(io)
        .await?;
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    let settings_ping = Arc::new(tokio::sync::Mutex::new(conn.ping_pong()));
    tokio::spawn(idle_poll::counted(async move {
        if let Err(e) = conn.await {
            tracing::debug!("HTTP/2 connection to a server ended: {e}");
        }
        flag.store(true, Ordering::Relaxed);
    }));
    Ok(Session { send, closed, scheme, settings_ping })
}

/// A response head from a stream, or the relay's own answer to a request
/// HTTP/2 cannot carry; `end_stream`: no body follows it.
struct Head {
    parts: http::response::Parts,
    end_stream: bool,
}

/// One exchange on an HTTP/2 connection, as the data path sees it: the
/// request head goes in whole, the response heads come out whole, the bodies
/// go through the pipe (see the module's doc).
pub struct Exchange {
    session: Session,
    /// `:authority` of a request without Host.
    server: SocketAddr,
    /// The data path's end of the body pipe, once a request is started.
    pipe: Option<DuplexStream>,
    heads: Option<mpsc::Receiver<Head>>,
    /// A head [`Exchange::answered`] saw come, not yet taken.
    waiting: Option<Head>,
    /// The stream's task has ended, with no head still to come.
    ended: bool,
}

impl Exchange {
    pub(crate) fn new(session: &Session, server: SocketAddr) -> Self {
        Exchange { session: session.clone(), server, pipe: None, heads: None, waiting: None, ended: false }
    }

    /// Sends `head` on a new stream (what it replaces, if a request went
    /// before, is reset). Its body is what is then written to the pipe.
    pub(crate) fn start(&mut self, head: &RequestHead) {
        let (near, far) = tokio::io::duplex(PIPE);
        let (tx, rx) = mpsc::channel(1);
        let plan = plan(head, self.session.scheme, self.server);
        tokio::spawn(idle_poll::counted(relay(self.session.clone(), plan, far, tx)));
        (self.pipe, self.heads, self.waiting, self.ended) = (Some(near), Some(rx), None, false);
    }

    /// Waits until a response head has come, or the stream ended without
    /// one: [`Exchange::answer`] then says which.
    pub(crate) async fn answered(&mut self) {
        if self.waiting.is_some() || self.ended {
            return;
        }
        match self.heads.as_mut() {
            Some(heads) => match heads.recv().await {
                Some(head) => self.waiting = Some(head),
                None => self.ended = true,
            },
            None => std::future::pending().await,
        }
    }

    /// `Some(true)` when a response head has come, `Some(false)` when the
    /// stream ended without one, `None` while neither.
    pub(crate) fn answer(&self) -> Option<bool> {
        if self.waiting.is_some() { Some(true) } else { self.ended.then_some(false) }
    }

    /// Loads the next response head into `resp` (interim ones first). `None`
    /// when the stream ended with no head (the connection went, the stream was
    /// refused or reset); an error for a head an HTTP/1.1 head could not be.
    pub(crate) async fn next_head(
        &mut self,
        resp: &mut ResponseHead,
        max_head: usize,
    ) -> Option<Result<(), &'static str>> {
        self.answered().await;
        let head = self.waiting.take()?;
        let status = head.parts.status;
        let reason = status.canonical_reason().unwrap_or("Status").as_bytes();
        let fields = head.parts.headers.iter().map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
        Some(h1::response_from_fields(resp, status.as_u16(), reason, fields, head.end_stream, max_head))
    }

    /// The data path's end of the body pipe (none before [`Exchange::start`]).
    pub(crate) fn pipe(&mut self) -> std::io::Result<&mut DuplexStream> {
        self.pipe.as_mut().ok_or_else(|| std::io::ErrorKind::NotConnected.into())
    }
}

/// What a request head becomes on the connection.
enum Plan {
    Request {
        req: http::Request<()>,
        framing: Framing,
        head_request: bool,
    },
    /// A WebSocket handshake ([`websocket`]), with the Sec-WebSocket-Accept
    /// that answers its key.
    WebSocket {
        req: http::Request<()>,
        accept: String,
    },
    /// A request HTTP/2 cannot carry, answered by the proxy: an upgrade to
    /// anything but WebSocket (501), a Host that is not a valid authority (400).
    Refuse(StatusCode),
}

fn plan(head: &RequestHead, scheme: &'static str, server: SocketAddr) -> Plan {
    if head.upgrade {
        let to_websocket = head.fields.get(b"upgrade").is_some_and(upgrades_to_websocket);
        let client_key = head.fields.get(b"sec-websocket-key").filter(|k| !k.is_empty());
        let (true, Some(client_key)) = (to_websocket, client_key) else {
            return Plan::Refuse(StatusCode::NOT_IMPLEMENTED);
        };
        return match connect_request(head, scheme, server) {
            Some(req) => Plan::WebSocket { req, accept: websocket_accept(client_key) },
            None => Plan::Refuse(StatusCode::BAD_REQUEST),
        };
    }
    match request(head, scheme, server) {
        Some(req) => Plan::Request { head_request: req.method() == http::Method::HEAD, framing: head.framing(), req },
        None => Plan::Refuse(StatusCode::BAD_REQUEST),
    }
}

/// One exchange's stream: the request goes out, its body from the pipe; the
/// response heads go back to the data path as they come, the body through the
/// pipe. Ends when the response is all written, or the data path has gone
/// (dropping the stream resets it). A connection gone or a stream refused
/// before the response ends it with no head at all, which the data path takes
/// for a dead connection.
async fn relay(session: Session, plan: Plan, pipe: DuplexStream, heads: mpsc::Sender<Head>) {
    let (mut rd, mut wr) = tokio::io::split(pipe);
    let (req, framing, head_request) = match plan {
        Plan::Request { req, framing, head_request } => (req, framing, head_request),
        Plan::WebSocket { req, accept } => return websocket(&session, req, &accept, rd, wr, &heads).await,
        Plan::Refuse(status) => {
            let _ = heads.send(own(status)).await;
            return;
        }
    };
    let Ok(mut send) = session.send.ready().await else { return };
    let Ok((response, stream)) = send.send_request(req, framing == Framing::Empty) else { return };
    tokio::select! {
        _ = download(response, &mut wr, &heads, head_request) => {}
        _ = upload(&mut rd, framing, stream) => {}
    }
}

/// An answer of the proxy's own, with no body.
fn own(status: StatusCode) -> Head {
    let mut resp = http::Response::new(());
    *resp.status_mut() = status;
    let fields = resp.headers_mut();
    fields.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("0"));
    fields.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    Head { parts: resp.into_parts().0, end_stream: true }
}

/// How long a WebSocket handshake waits for the server's SETTINGS on a
/// connection just opened (see [`extended_connect`]).
const SETTINGS_WAIT: Duration = Duration::from_secs(5);
/// While the client's side of a WebSocket tunnel is closed and the server's
/// is not, how often the stream's task looks whether the data path is still
/// there (see [`ws_tunnel`]).
const GONE_CHECK: Duration = Duration::from_secs(1);

/// A WebSocket handshake (RFC 6455 section 4.1) to an HTTP/2 server becomes an
/// extended CONNECT (RFC 8441 section 5), as HAProxy does: `:protocol
/// websocket`, `:scheme`, `:authority` and `:path` from the request, its other
/// fields but the HTTP/1.1 handshake's own (Connection, Upgrade,
/// Sec-WebSocket-Key). A 2xx answer goes back to the data path as the `101`
/// an HTTP/1.1 server would have sent, with the Sec-WebSocket-Accept that
/// answers the client's key, and the stream's DATA frames then carry the
/// tunnel's bytes both ways. Any other answer goes back as a response. A
/// server that has not enabled extended CONNECT (SETTINGS_ENABLE_CONNECT_
/// PROTOCOL) cannot take the handshake: `501`, as for an upgrade to anything
/// but WebSocket.
async fn websocket(
    session: &Session,
    req: http::Request<()>,
    accept: &str,
    rd: ReadHalf<DuplexStream>,
    mut wr: WriteHalf<DuplexStream>,
    heads: &mpsc::Sender<Head>,
) {
    if !extended_connect(session).await {
        let _ = heads.send(own(StatusCode::NOT_IMPLEMENTED)).await;
        return;
    }
    // As for any request: a connection gone before the answer ends the
    // exchange with no head (the data path retries a GET elsewhere).
    let Ok(mut send) = session.send.clone().ready().await else { return };
    let Ok((response, stream)) = send.send_request(req, false) else { return };
    let Ok(resp) = response.await else { return };
    if !resp.status().is_success() {
        return write_response(resp, &mut wr, heads, false).await;
    }
    let (parts, body) = resp.into_parts();
    let mut switching = http::Response::new(());
    *switching.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let fields = switching.headers_mut();
    fields.insert(http::header::CONNECTION, http::HeaderValue::from_static("upgrade"));
    fields.insert(http::header::UPGRADE, http::HeaderValue::from_static("websocket"));
    if let Ok(accept) = http::HeaderValue::from_str(accept) {
        fields.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    for (name, value) in &parts.headers {
        if !h1::is_hop_by_hop(name.as_str().as_bytes())
            && name != http::header::SEC_WEBSOCKET_ACCEPT
            && name != http::header::CONTENT_LENGTH
        {
            fields.append(name, value.clone());
        }
    }
    let head = Head { parts: switching.into_parts().0, end_stream: false };
    if heads.send(head).await.is_ok() {
        ws_tunnel(stream, body, rd, wr).await;
    }
}

/// Whether an Upgrade field offers WebSocket (RFC 9110 section 7.8: a list of
/// `protocol[/version]`, case-insensitive).
fn upgrades_to_websocket(upgrade: &[u8]) -> bool {
    upgrade.split(|b| *b == b',').any(|p| {
        let name = p.trim_ascii().split(|b| *b == b'/').next().unwrap_or_default();
        name.eq_ignore_ascii_case(b"websocket")
    })
}

/// Whether the server takes extended CONNECT. Its SETTINGS frame, the first
/// it sends, may still be unread on a connection just opened; the answer to a
/// PING comes after it, so the first handshake on a connection that does not
/// (yet) show the setting waits for one (at most [`SETTINGS_WAIT`]). Later
/// handshakes read the setting as it is.
async fn extended_connect(session: &Session) -> bool {
    if session.send.is_extended_connect_protocol_enabled() {
        return true;
    }
    let mut ping = session.settings_ping.lock().await;
    if let Some(mut pong) = ping.take() {
        let answered = tokio::time::timeout(SETTINGS_WAIT, pong.ping(h2::Ping::opaque())).await;
        if !matches!(answered, Ok(Ok(_))) {
            *ping = Some(pong);
        }
    }
    session.send.is_extended_connect_protocol_enabled()
}

/// The extended CONNECT an HTTP/1.1 WebSocket handshake stands for.
fn connect_request(head: &RequestHead, scheme: &'static str, server: SocketAddr) -> Option<http::Request<()>> {
    let mut req = request(head, scheme, server)?;
    *req.method_mut() = http::Method::CONNECT;
    req.headers_mut().remove("sec-websocket-key");
    req.extensions_mut().insert(h2::ext::Protocol::from_static("websocket"));
    Some(req)
}

/// Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 section 4.2.2): the
/// base64 of the SHA-1 of the key and the protocol's GUID.
fn websocket_accept(client_key: &[u8]) -> String {
    use base64::Engine;
    use sha1::Digest;
    let mut sha = sha1::Sha1::new();
    sha.update(client_key);
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// The tunnel after a WebSocket handshake: what the data path writes goes out
/// as DATA (first what the client sent right after its handshake),
/// the server's DATA comes back as bytes, each direction under its flow
/// control. A side that ends its direction (END_STREAM; the pipe's EOF) has
/// the other one's ended (half-close), and the other direction goes on, as the
/// data path's own tunnel does. Ends when both have ended, when the server
/// resets the stream, or when the data path has gone: with the client's side
/// ended the pipe's read side says nothing more, so an empty write (which
/// fails once the data path has dropped its end) looks every [`GONE_CHECK`].
async fn ws_tunnel(
    mut stream: SendStream<Bytes>,
    mut body: RecvStream,
    mut rd: ReadHalf<DuplexStream>,
    mut wr: WriteHalf<DuplexStream>,
) {
    let up_ended = AtomicBool::new(false);
    let up = async {
        let mut pending = Vec::new();
        loop {
            if !pending.is_empty()
                && crate::io::h2io::send_all(&mut stream, Bytes::from(std::mem::take(&mut pending)), false, WINDOW_WAIT)
                    .await
                    .is_err()
            {
                return;
            }
            if read_more(&mut rd, &mut pending).await == 0 {
                let _ = stream.send_data(Bytes::new(), true);
                up_ended.store(true, Ordering::Relaxed);
                return;
            }
        }
    };
    // True when the server ended its direction (END_STREAM).
    let down = async {
        let mut check = tokio::time::interval(GONE_CHECK);
        loop {
            tokio::select! {
                data = body.data() => match data {
                    Some(Ok(data)) => {
                        let n = data.len();
                        if wr.write_all(&data).await.is_err() {
                            return false;
                        }
                        let _ = body.flow_control().release_capacity(n);
                    }
                    Some(Err(_)) => return false,
                    None => {
                        let _ = wr.shutdown().await;
                        return true;
                    }
                },
                _ = check.tick(), if up_ended.load(Ordering::Relaxed) => {
                    if wr.write(&[]).await.is_err() {
                        return false;
                    }
                }
            }
        }
    };
    tokio::pin!(up, down);
    tokio::select! {
        ended = &mut down => if ended { up.await },
        () = &mut up => { down.await; }
    }
}

async fn read_more(rd: &mut ReadHalf<DuplexStream>, buf: &mut Vec<u8>) -> usize {
    buf.reserve(8192);
    rd.read_buf(buf).await.unwrap_or(0)
}

/// The HTTP/2 request a request head (as it goes to a server) stands for: `:authority` from Host (else the server's address),
/// connection-specific fields left out, `te: trailers` (Tollgate passes
/// trailers on, and gRPC servers look for it).
fn request(head: &RequestHead, scheme: &'static str, server: SocketAddr) -> Option<http::Request<()>> {
    let authority = match head.fields.get(b"host") {
        Some(h) => std::str::from_utf8(h).ok()?.to_string(),
        None => server.to_string(),
    };
    let uri = http::Uri::builder().scheme(scheme).authority(authority).path_and_query(head.target()).build().ok()?;
    let mut req = http::Request::builder().method(head.method()).uri(uri).version(http::Version::HTTP_2);
    for (name, value) in head.fields.iter() {
        if h1::is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"host") {
            continue;
        }
        req = req.header(name, value);
    }
    req.header("te", "trailers").body(()).ok()
}

/// The request body, from the pipe to the stream (de-chunked), ending it
/// with END_STREAM; then waits for the data path to go. Returns when it has
/// gone (the pipe closed): the exchange is over.
async fn upload(rd: &mut ReadHalf<DuplexStream>, framing: Framing, stream: SendStream<Bytes>) {
    let mut pending = Vec::new();
    let mut stream = (framing != Framing::Empty).then_some(stream);
    let mut body = BodyCursor::new(framing);
    let chunked = framing == Framing::Chunked;
    let mut data = Vec::new();
    loop {
        if !body.done && !pending.is_empty() {
            data.clear();
            let Ok(n) = body.take(&pending, chunked.then_some(&mut data)) else { return };
            // Handed over, not copied: what follows the body in `pending` (nothing
            // the exchange sends) is dropped below in any case.
            let piece = if chunked {
                Bytes::from(std::mem::take(&mut data))
            } else {
                pending.truncate(n);
                Bytes::from(std::mem::take(&mut pending))
            };
            if let Some(s) = stream.as_mut()
                && crate::io::h2io::send_all(s, piece, body.done, WINDOW_WAIT).await.is_err()
            {
                // The server no longer reads it (it answered, or reset the
                // stream): the rest of the body is read and dropped.
                stream = None;
            }
        }
        pending.clear();
        if read_more(rd, &mut pending).await == 0 {
            return;
        }
    }
}

/// The response: interim (1xx) heads as they come, the final head, then the
/// body as it comes (chunk-framed when the server gave no length), then the
/// trailers (in the chunked trailer section).
async fn download(
    mut response: ResponseFuture,
    wr: &mut WriteHalf<DuplexStream>,
    heads: &mpsc::Sender<Head>,
    head_request: bool,
) {
    while let Some(interim) = std::future::poll_fn(|cx| response.poll_informational(cx)).await {
        let Ok(interim) = interim else { return };
        if heads.send(Head { parts: interim.into_parts().0, end_stream: false }).await.is_err() {
            return;
        }
    }
    if let Ok(resp) = response.await {
        write_response(resp, wr, heads, head_request).await;
    }
}

/// A final response: its head to the data path, its body to the pipe (see
/// [`download`]). The body is chunk-framed exactly when the head loaded from
/// the fields says so ([`h1::response_from_fields`]): no length, not ended
/// with the head, a status that has content.
async fn write_response(
    resp: http::Response<RecvStream>,
    wr: &mut WriteHalf<DuplexStream>,
    heads: &mpsc::Sender<Head>,
    head_request: bool,
) {
    let (parts, mut body) = resp.into_parts();
    let status = parts.status.as_u16();
    let bodiless = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let length = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let end_stream = body.is_end_stream();
    let chunked = !bodiless && !length && !end_stream;
    if heads.send(Head { parts, end_stream }).await.is_err() || bodiless {
        return;
    }
    let mut out = Vec::new();
    while let Some(data) = body.data().await {
        let Ok(data) = data else { return };
        let n = data.len();
        out.clear();
        if chunked {
            let _ = write!(out, "{n:x}\r\n");
        }
        let sent = if chunked && n > 0 {
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\r\n");
            wr.write_all(&out).await
        } else if chunked {
            Ok(())
        } else {
            wr.write_all(&data).await
        };
        if sent.is_err() {
            return;
        }
        let _ = body.flow_control().release_capacity(n);
    }
    if !chunked {
        return;
    }
    let Ok(trailers) = body.trailers().await else { return };
    out.clear();
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.iter().flatten() {
        h1::push_field(&mut out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    let _ = wr.write_all(&out).await;
}

/// The status and body of one request to an HTTP/2 server (health checks):
/// the body read up to `max_body` bytes.
pub(crate) async fn probe(
    session: &Session,
    method: &http::Method,
    authority: &str,
    path: &str,
    max_body: usize,
    want_body: bool,
) -> Result<(u16, Vec<u8>), String> {
    let uri = http::Uri::builder()
        .scheme(session.scheme)
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|e| format!("bad check request: {e}"))?;
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("user-agent", "tollgate-health")
        .body(())
        .map_err(|e| format!("bad check request: {e}"))?;
    let mut send = session.send.clone().ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let (response, _stream) = send.send_request(req, true).map_err(|e| format!("HTTP/2: {e}"))?;
    let resp: http::Response<RecvStream> = response.await.map_err(|e| format!("HTTP/2: {e}"))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while want_body && out.len() < max_body {
        match body.data().await {
            Some(Ok(d)) => {
                let _ = body.flow_control().release_capacity(d.len());
                out.extend_from_slice(&d);
            }
            Some(Err(e)) => return Err(format!("HTTP/2: {e}")),
            None => break,
        }
    }
    Ok((status, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_answers_the_key_as_rfc_6455_shows() {
        // RFC 6455 section 1.3.
        assert_eq!(websocket_accept(b"dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn websocket_is_found_among_the_upgrade_tokens() {
        for yes in [&b"websocket"[..], b"WebSocket", b"h2c, websocket", b" websocket/13 "] {
            assert!(upgrades_to_websocket(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [&b"h2c"[..], b"websockets", b"", b"tls/1.0, x-websocket"] {
            assert!(!upgrades_to_websocket(no), "{}", String::from_utf8_lossy(no));
        }
    }
}
