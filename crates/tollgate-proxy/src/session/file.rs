//! A static file's response (pipeline/files.rs) written to the client, in
//! each protocol's framing:
//! - HTTP/1.1 over plain TCP: the head sent with `MSG_MORE` (held by the
//!   kernel until the body joins it in the same segments) and the body with
//!   `sendfile(2)`, from the page cache to the socket with no copy through the
//!   process; a file of one page or less is read and goes out in the head's
//!   write;
//! - HTTP/1.1 over TLS, HTTP/2 and HTTP/3: the body read a piece at a time
//!   and written as records or DATA frames (on HTTP/1.1, the first piece in
//!   the head's write);
//! - compressed on its way (`compression`): pieces through the encoder, as
//!   chunks to HTTP/1.1, close-delimited to HTTP/1.0, DATA frames to HTTP/2
//!   and HTTP/3.

use crate::net::tls::ClientStream;
use crate::observe::termination::Termination;
use crate::pipeline::exchange::{IoFail, within};
use crate::pipeline::files::{FileAnswer, FileBody};
use crate::session::mux::BodySink;
use bytes::Bytes;
use h2::server::SendResponse;
use http::{HeaderName, HeaderValue, Response};
use rustix::net::SendFlags;
use std::io;
use std::time::Duration;
use tollgate_wire::h1::{self, Framing};

/// A body up to this size is read and sent in the head's write, even where
/// `sendfile` could send it: one page, where the two system calls of a read
/// and a vectored write cost no more than a send and a sendfile.
const INLINE: u64 = 4096;

/// How a file answer went out on HTTP/1.1.
pub(crate) struct Sent {
    /// Bytes written (head and body).
    pub(crate) bytes: u64,
    /// Body bytes written (encoded, when compressed).
    pub(crate) body: u64,
    /// The connection must close after it (a compressed body to HTTP/1.0 ends
    /// with the close).
    pub(crate) close: bool,
    pub(crate) result: Result<(), IoFail>,
}

/// Writes `a` to an HTTP/1.1 client (`minor`: its version's), closing after
/// it when `close`. Each write may wait `idle` for the client.
pub(crate) async fn send_h1(
    stream: &mut ClientStream,
    out: &mut Vec<u8>,
    mut a: FileAnswer,
    minor: u8,
    mut close: bool,
    idle: Duration,
) -> Sent {
    let framing = match a.length {
        Some(n) => Framing::Length(n),
        None if a.status == 304 => Framing::Empty,
        None if minor == 0 => {
            close = true;
            Framing::UntilClose
        }
        None => Framing::Chunked,
    };
    out.clear();
    h1::write_made_head(out, a.status, &a.fields, framing, close, !close && minor == 0);
    let head = out.len() as u64;
    let mut sent = Sent { bytes: head, body: 0, close, result: Ok(()) };
    let Some(mut body) = a.body.take() else {
        sent.result = within(stream.write_all_flushed(out), idle).await;
        return sent;
    };
    if let Some(enc) = a.encoder.as_mut() {
        sent.result = encoded(stream, out, &mut body, enc, framing == Framing::Chunked, idle, &mut sent.body).await;
        sent.bytes += sent.body;
        return sent;
    }
    let len = body.len;
    if let ClientStream::Plain(tcp) = stream
        && len > INLINE
    {
        sent.result = sendfile(tcp, out, &mut body, idle).await;
        sent.body = len - body.len;
        sent.bytes += sent.body;
        return sent;
    }
    // Pieces read from the file, the first behind the head.
    let mut piece = Vec::new();
    loop {
        match body.read_piece(&mut piece) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&piece);
                sent.result = within(stream.write_all_flushed(out), idle).await;
                out.clear();
                sent.body += n as u64;
                sent.bytes += n as u64;
                if sent.result.is_err() {
                    return sent;
                }
            }
            Err(e) => {
                tracing::warn!("static file: {e}");
                sent.result = Err(IoFail::Error);
                return sent;
            }
        }
    }
    if !out.is_empty() {
        sent.result = within(stream.write_all_flushed(out), idle).await;
    }
    sent
}

/// The head in `out`, then the body with `sendfile(2)`.
async fn sendfile(
    tcp: &mut crate::io::lazy_tcp::LazyTcp,
    out: &[u8],
    body: &mut FileBody,
    idle: Duration,
) -> Result<(), IoFail> {
    let mut at = 0;
    while at < out.len() {
        let send = std::future::poll_fn(|cx| {
            tcp.poll_write_by(cx, &mut |fd| {
                rustix::net::send(fd, &out[at..], SendFlags::MORE | SendFlags::NOSIGNAL).map_err(io::Error::from)
            })
        });
        at += within_n(send, idle).await?;
    }
    while body.len > 0 {
        let (fd, mut offset, want) = (&body.fd, body.offset, body.len.min(1 << 30) as usize);
        let send = std::future::poll_fn(|cx| {
            tcp.poll_write_by(cx, &mut |sock| {
                rustix::fs::sendfile(sock, fd, Some(&mut offset), want).map_err(io::Error::from)
            })
        });
        let n = within_n(send, idle).await? as u64;
        if n == 0 {
            // The file shrank under the response: its length went out already.
            tracing::warn!("static file: shorter than when it was opened");
            return Err(IoFail::Error);
        }
        body.offset += n;
        body.len -= n;
    }
    Ok(())
}

/// A write that reports a count, within `idle`.
async fn within_n(op: impl Future<Output = io::Result<usize>>, idle: Duration) -> Result<usize, IoFail> {
    tokio::select! {
        biased;
        r = op => match r {
            Ok(0) => Err(IoFail::Closed),
            Ok(n) => Ok(n),
            Err(_) => Err(IoFail::Error),
        },
        _ = tokio::time::sleep(idle) => Err(IoFail::Timeout),
    }
}

/// The body through the encoder, a piece at a time, chunked or not.
async fn encoded(
    stream: &mut ClientStream,
    out: &mut Vec<u8>,
    body: &mut FileBody,
    enc: &mut crate::pipeline::compress::Encoder,
    chunked: bool,
    idle: Duration,
    body_sent: &mut u64,
) -> Result<(), IoFail> {
    let mut piece = Vec::new();
    let mut coded = Vec::new();
    loop {
        let n = body.read_piece(&mut piece).map_err(|e| {
            tracing::warn!("static file: {e}");
            IoFail::Error
        })?;
        coded.clear();
        let pushed = if n > 0 { enc.push(&piece, &mut coded) } else { enc.finish(&mut coded) };
        pushed.map_err(|_| IoFail::Error)?;
        *body_sent += coded.len() as u64;
        if chunked && !coded.is_empty() {
            out.extend_from_slice(format!("{:x}\r\n", coded.len()).as_bytes());
            out.extend_from_slice(&coded);
            out.extend_from_slice(b"\r\n");
        } else {
            out.extend_from_slice(&coded);
        }
        if n == 0 && chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        within(stream.write_all_flushed(out), idle).await?;
        out.clear();
        if n == 0 {
            return Ok(());
        }
    }
}

/// Writes `a` on an HTTP/2 stream. Returns the body bytes sent.
pub(crate) async fn send_h2(
    respond: &mut SendResponse<Bytes>,
    mut a: FileAnswer,
    idle: Duration,
) -> (u64, Result<(), Termination>) {
    let r = response_head(&a);
    let Some(body) = a.body.take() else {
        let sent = respond.send_response(r, true).map(drop).map_err(|_| Termination::ClientAborted);
        return (0, sent);
    };
    let Ok(mut send) = respond.send_response(r, false) else { return (0, Err(Termination::ClientAborted)) };
    let (sent, result) = send_pieces(&mut send, body, a.encoder.as_deref_mut(), idle).await;
    if result.is_err() {
        send.send_reset(h2::Reason::CANCEL);
    }
    (sent, result)
}

/// The head of `a` for a multiplexed stream (HTTP/2, HTTP/3): its status,
/// `date`, its fields (HSTS among them, when the bind sets it) and its
/// `Content-Length`, when it has one.
pub(crate) fn response_head(a: &FileAnswer) -> Response<()> {
    let mut r = crate::session::mux::local_response(a.status, None);
    r.headers_mut().remove(http::header::CACHE_CONTROL);
    let h = r.headers_mut();
    for (name, value) in a.fields.iter() {
        if let (false, Ok(n), Ok(v)) =
            (h1::is_hop_by_hop(name), HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            h.append(n, v);
        }
    }
    if let Some(n) = a.length {
        h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    r
}

/// A file's body on a multiplexed stream, a piece at a time (through the
/// encoder, when there is one), the last piece ending the stream. Returns the
/// bytes sent.
pub(crate) async fn send_pieces(
    send: &mut impl BodySink,
    mut body: FileBody,
    mut encoder: Option<&mut crate::pipeline::compress::Encoder>,
    idle: Duration,
) -> (u64, Result<(), Termination>) {
    let mut sent = 0;
    let mut piece = Vec::new();
    loop {
        let n = match body.read_piece(&mut piece) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("static file: {e}");
                return (sent, Err(Termination::ServerAborted));
            }
        };
        let last = body.len == 0;
        let data = match encoder.as_mut() {
            Some(enc) => {
                let mut coded = Vec::new();
                let mut pushed = enc.push(&piece[..n], &mut coded);
                if last && pushed.is_ok() {
                    pushed = enc.finish(&mut coded);
                }
                if pushed.is_err() {
                    return (sent, Err(Termination::ServerAborted));
                }
                Bytes::from(coded)
            }
            None => Bytes::from(std::mem::take(&mut piece)),
        };
        sent += data.len() as u64;
        if let Err(why) = send.data(data, last, idle).await {
            return (sent, Err(why));
        }
        if last {
            return (sent, Ok(()));
        }
    }
}
