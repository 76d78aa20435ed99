//! What the multiplexed client sessions share: HTTP/2 streams (h2conn.rs)
//! and HTTP/3 streams (h3conn.rs) send a server's response body the same way,
//! each through its own [`BodySink`].

use crate::io::buf::BUF_SIZE;
use crate::net::tls::TlsInfo;
use crate::observe::access_log::{AccessLog, Detail, LogRecord};
use crate::observe::termination::Termination;
use crate::pipeline::compress::Encoder;
use crate::pipeline::exchange::{self, IoFail, read_until};
use crate::pipeline::rescue::{ProxyError, Reply};
use crate::pipeline::serve::{Answer, CachePlan};
use crate::upstream::Upstream;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use std::time::Duration;
use tollgate_wire::h1::{self, BodyCursor, Framing, RequestHead};

/// The read buffer of a server connection streaming a body larger than one
/// [`BUF_SIZE`] block (as conn.rs's).
const BODY_BUF_SIZE: usize = 64 * 1024;

/// Where a stream's response body goes.
#[allow(async_fn_in_trait)]
pub(crate) trait BodySink {
    /// Sends `data` (ending the stream when `end`), waiting at most `idle`
    /// for the client's flow control at a time.
    async fn data(&mut self, data: Bytes, end: bool, idle: Duration) -> Result<(), Termination>;
    /// Ends the stream with trailer fields.
    async fn trailers(&mut self, trailers: http::HeaderMap) -> Result<(), Termination>;
    /// Resolves when the client has reset the stream (never, where the
    /// protocol says so only on the next send).
    async fn reset(&mut self);
}

/// Streams a response body from the server to a stream of the client's
/// (`send`: as its flow control allows), de-chunked, the last bytes ending
/// the stream. `server_idle`:
/// the longest the server may stay silent; `client_idle`: the longest the
/// client's window may stay shut. With a cache plan (and the request it
/// answers), the body is also kept for the store (cache hook 3) and stored as
/// soon as it is complete (hook 4).
pub(crate) async fn send_body(
    send: &mut impl BodySink,
    up: &mut Upstream,
    rbody: &mut BodyCursor,
    (server_idle, client_idle): (Duration, Duration),
    mut tee: Option<(&mut CachePlan, &RequestHead)>,
    mut enc: Option<(&mut Encoder, &mut u64)>,
) -> Result<(), Termination> {
    let chunked = rbody.framing == Framing::Chunked;
    if chunked {
        rbody.chunked.keep_trailers();
    }
    let mut dechunked = Vec::new();
    let mut big = matches!(rbody.framing, Framing::Length(_)) && rbody.left > BUF_SIZE as u64;
    loop {
        if !up.buf.is_empty() {
            dechunked.clear();
            let n = rbody
                .take(up.buf.data(), chunked.then_some(&mut dechunked))
                .map_err(|_| Termination::ServerBadChunk)?;
            let data = if chunked { &dechunked[..] } else { &up.buf.data()[..n] };
            // Compressed on its way (pipeline/compress.rs): the encoded bytes
            // go to the client and to the store.
            let data = match enc.as_mut() {
                Some((e, sent)) => {
                    let mut coded = Vec::new();
                    e.push(data, &mut coded).map_err(|_| Termination::ServerAborted)?;
                    if rbody.done {
                        e.finish(&mut coded).map_err(|_| Termination::ServerAborted)?;
                    }
                    **sent += coded.len() as u64;
                    Bytes::from(coded)
                }
                None => Bytes::copy_from_slice(data),
            };
            // -- cache hook 3 (pipeline/serve.rs): the body kept for the store.
            if let Some((plan, head)) = tee.as_mut() {
                plan.tee(if enc.is_some() { &data } else { &up.buf.data()[..n] });
                if rbody.done {
                    plan.finish(head);
                }
            }
            up.buf.consume(n);
            if big {
                up.buf.reserve_total(BODY_BUF_SIZE);
            }
            if !data.is_empty() || rbody.done {
                // The chunked body's trailers (gRPC's status) end the stream as HTTP/2 trailers.
                let trailers = if rbody.done { trailer_map(&rbody.chunked) } else { None };
                send.data(data, rbody.done && trailers.is_none(), client_idle).await?;
                if let Some(t) = trailers {
                    send.trailers(t).await?;
                }
            }
        }
        if rbody.done {
            return Ok(());
        }
        let r = tokio::select! {
            biased;
            _ = send.reset() => return Err(Termination::ClientAborted),
            r = read_until(&mut up.stream, &mut up.buf, exchange::deadline(server_idle)) => r,
        };
        match r {
            Ok(n) => big |= n >= BUF_SIZE,
            Err(IoFail::Closed) if rbody.framing == Framing::UntilClose => {
                rbody.done = true;
                let mut last = Vec::new();
                if let Some((e, sent)) = enc.as_mut() {
                    e.finish(&mut last).map_err(|_| Termination::ServerAborted)?;
                    **sent += last.len() as u64;
                }
                if let Some((plan, head)) = tee.as_mut() {
                    plan.tee(&last);
                    plan.finish(head);
                }
                send.data(Bytes::from(last), true, client_idle).await?;
                return Ok(());
            }
            Err(IoFail::Timeout) => return Err(Termination::ServerTimeout),
            Err(_) => return Err(Termination::ServerAborted),
        }
    }
}

/// The trailer fields of a chunked body that HTTP/2 allows (RFC 9113 section
/// 8.1: no pseudo-header and no connection-specific field), if there are any.
pub(crate) fn trailer_map(chunked: &h1::Chunked) -> Option<http::HeaderMap> {
    let mut map = http::HeaderMap::new();
    for (name, value) in chunked.trailers() {
        if h1::is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"content-length") {
            continue;
        }
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    (!map.is_empty()).then_some(map)
}

/// A response of the proxy's own on a stream: the status, `cache-control:
/// no-cache`, HSTS on a TLS bind that sets it, `date`.
pub(crate) fn local_response(status: u16, hsts: Option<&HeaderValue>) -> Response<()> {
    let mut r = Response::new(());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(hsts) = hsts {
        h.insert(http::header::STRICT_TRANSPORT_SECURITY, hsts.clone());
    }
    let mut date = Vec::with_capacity(29);
    tollgate_wire::clock::write_http_date(&mut date);
    h.insert(http::header::DATE, header_value(&date));
    r
}

/// The head and body of an answer of the cache (pipeline/serve.rs) for a
/// stream, and why the log says it ended (`stale-if-error`), if it says.
pub(crate) fn cached_parts(
    answer: Answer,
    head_request: bool,
    hsts: Option<&HeaderValue>,
) -> Result<(Response<()>, crate::cache::Body, Option<Termination>), ProxyError> {
    Ok(match answer {
        Answer::Local { status, cache_status, text } => {
            let mut r = local_response(status, hsts);
            let h = r.headers_mut();
            for (name, value) in Answer::local_fields(cache_status) {
                h.insert(HeaderName::from_static(name), header_value(value));
            }
            h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(text.len()));
            let body = if head_request { Vec::new() } else { vec![Bytes::from(text)] };
            (r, crate::cache::Body::new(body), None)
        }
        Answer::Stored(s) => {
            let mut r = Response::new(());
            *r.status_mut() = StatusCode::from_u16(s.head.status).map_err(|_| ProxyError::BadGateway)?;
            let h = r.headers_mut();
            s.each_field(|name, value| {
                if let (false, Ok(n), Ok(v)) =
                    (h1::is_hop_by_hop(name), HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
                {
                    h.append(n, v);
                }
            });
            (r, s.body.unwrap_or_default(), s.termination)
        }
    })
}

/// The head of an error page (rescue.rs) for a stream.
pub(crate) fn error_response(reply: &Reply, hsts: Option<&HeaderValue>) -> Response<()> {
    let mut r = local_response(reply.status, hsts);
    let h = r.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(reply.body.len()));
    if let Some(allow) = reply.allow {
        h.insert(http::header::ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(challenge) = reply.www_authenticate.as_deref().and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(http::header::WWW_AUTHENTICATE, challenge);
    }
    if let Some(challenge) = reply.proxy_authenticate.as_deref().and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(http::header::PROXY_AUTHENTICATE, challenge);
    }
    if let Some(secs) = reply.retry_after {
        h.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// A header value from bytes that are known to be valid (ours).
pub(crate) fn header_value(v: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(v).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A stream's access log record (its `version`, `HTTP/2.0` or `HTTP/3.0`),
/// when the config has an access log.
pub(crate) fn log_record(
    sink: Option<&std::sync::Arc<AccessLog>>,
    start: std::time::Instant,
    (peer, frontend): (std::net::SocketAddr, &str),
    tls: Option<&TlsInfo>,
    parts: &http::request::Parts,
    version: &'static str,
) -> crate::pipeline::exchange::LogSlot {
    let sink = sink?;
    let mut r = LogRecord::new(start, start, peer, frontend);
    r.tls = tls.map(|t| (t.version, t.cipher));
    r.method = parts.method.to_string();
    r.uri = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    r.version = version;
    if sink.wants_detail() {
        let field =
            |name| parts.headers.get(name).map(|v: &HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned());
        r.detail = Some(Box::new(Detail {
            sni: tls.filter(|t| !t.sni.is_empty()).map(|t| t.sni.clone()),
            host: parts.uri.authority().map(|a| a.as_str().to_string()).or_else(|| field(http::header::HOST)),
            user_agent: field(http::header::USER_AGENT),
            referer: field(http::header::REFERER),
            cache: None,
        }));
    }
    Some((sink.clone(), r))
}
