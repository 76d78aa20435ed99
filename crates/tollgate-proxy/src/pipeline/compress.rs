//! Response compression (docs/configuration.md, `compression`): whether a
//! response is compressed and with what (tollgate_wire::encoding decides, from
//! the request's `Accept-Encoding` and the response head), the head's edits
//! (`Content-Encoding`, `Vary`, a weak `ETag`, no `Content-Length`), and the
//! [`Encoder`] the body streams through, a piece at a time: nothing is held
//! back but what the codec keeps for its window.
//!
//! The decision is made on the response head before the cache sees it, so a
//! zone stores the encoded variant under `Vary: Accept-Encoding` and a hit
//! costs no compression.

use crate::cache::Body;
use std::io::{self, Write};
use tollgate_config::{Coding, Compression};
use tollgate_wire::cache::StoredHead;
use tollgate_wire::cache::control::CacheControl;
use tollgate_wire::encoding::{self, Response};
use tollgate_wire::h1::{Fields, Framing, RequestHead, ResponseHead};

/// Decides for one response: edits `resp`'s head when it is compressible (a
/// `Vary: Accept-Encoding` whatever this client accepts; the encoding's fields
/// when it accepts one) and returns the encoder its body goes through; none
/// for a response sent as it is, and for a HEAD request's (its head says what
/// a GET would get).
pub(crate) fn negotiate(cfg: &Compression, req: &RequestHead, resp: &mut ResponseHead) -> Option<Box<Encoder>> {
    // The length the parser read and checked, as the body is framed.
    let content_length = match resp.framing(false) {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    negotiate_fields(cfg, req, resp.status, content_length, &mut resp.fields)
}

/// [`negotiate`] for a response of `status` with `fields` and a body of
/// `content_length` bytes (when known): a server's, or one Tollgate makes (a
/// static file's, pipeline/files.rs).
pub(crate) fn negotiate_fields(
    cfg: &Compression,
    req: &RequestHead,
    status: u16,
    content_length: Option<u64>,
    fields: &mut Fields,
) -> Option<Box<Encoder>> {
    if !cfg.enabled {
        return None;
    }
    let is_head = req.method() == "HEAD";
    let facts = Response {
        status,
        content_encoding: fields.get(b"content-encoding"),
        content_type: fields.get(b"content-type"),
        content_length,
        no_transform: CacheControl::parse(fields.get_all(b"cache-control")).no_transform(),
        ranged: fields.get(b"content-range").is_some(),
    };
    if !encoding::compressible(&facts, &cfg.types, cfg.min_size) {
        return None;
    }
    let varies = fields.get_all(b"vary").any(|v| {
        v.split(|b| *b == b',').any(|t| {
            let t = t.trim_ascii();
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !varies {
        fields.append(b"vary", b"Accept-Encoding");
    }
    let accept: Vec<&[u8]> = req.fields.get_all(b"accept-encoding").collect();
    let accepted = (!accept.is_empty()).then(|| encoding::parse_accept(&accept));
    let coding = encoding::choose(accepted.as_deref(), &cfg.codings)?;
    fields.remove(b"content-length");
    fields.append(b"content-encoding", coding.token().as_bytes());
    if let Some(etag) = fields.get(b"etag").map(encoding::weaken_etag) {
        fields.remove(b"etag");
        fields.append(b"etag", &etag);
    }
    if is_head {
        return None;
    }
    Some(Box::new(Encoder::new(coding, cfg)))
}

/// The most bytes a stored body is decoded to for a client that takes no
/// coding (a larger one goes as it is stored, which RFC 9110 section 12.5.3
/// allows: a request without `Accept-Encoding` accepts any coding).
const MAX_DECODED: u64 = 64 * 1024 * 1024;

/// A stored response for a request without `Accept-Encoding`, where the zone
/// holds an encoded variant (compressed here for another client): decoded
/// back to the plain body, as Varnish does for clients without gzip, so that
/// `curl` without `--compressed` does not print compressed bytes. Only
/// codings `cfg` compresses with, and for a request with a body to send (a
/// HEAD's answer keeps the stored head).
pub(crate) fn decode_stored(
    cfg: Option<&Compression>,
    req: &RequestHead,
    head: &mut StoredHead,
    length: &mut u64,
    body: &mut Option<Body>,
) {
    let Some(cfg) = cfg.filter(|c| c.enabled) else { return };
    // A whole body only: a range of an encoded one does not decode alone.
    if req.fields.get(b"accept-encoding").is_some() || head.status != 200 {
        return;
    }
    let coding = head
        .get(b"content-encoding")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| Coding::from_token(v.trim().to_ascii_lowercase().as_str()))
        .filter(|c| cfg.codings.contains(c));
    let (Some(coding), Some(stored)) = (coding, body.as_ref()) else { return };
    let mut encoded = Vec::with_capacity(stored.len() as usize);
    stored.segments().iter().for_each(|seg| encoded.extend_from_slice(seg));
    let Some(plain) = decode(coding, &encoded) else { return };
    let fields = head.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-encoding"));
    *head = StoredHead::new(head.status, head.reason(), fields, &[], tollgate_wire::clock::unix_now());
    *length = plain.len() as u64;
    *body = Some(Body::new(vec![plain.into()]));
}

/// `encoded` decoded, if it decodes within [`MAX_DECODED`] bytes.
fn decode(coding: Coding, encoded: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    let limit = MAX_DECODED + 1;
    let read = match coding {
        Coding::Gzip => flate2::read::GzDecoder::new(encoded).take(limit).read_to_end(&mut out),
        Coding::Br => brotli::Decompressor::new(encoded, 4096).take(limit).read_to_end(&mut out),
        Coding::Zstd => zstd::stream::read::Decoder::new(encoded).ok()?.take(limit).read_to_end(&mut out),
    };
    (read.is_ok() && out.len() as u64 <= MAX_DECODED).then_some(out)
}

/// A body's encoder: bytes in, encoded bytes out, flushed at each piece so
/// that what the server sent reaches the client without waiting for more.
pub(crate) struct Encoder {
    inner: Inner,
}

enum Inner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    /// Finished.
    Done,
}

/// brotli's window (22: 4 MiB, its default) and input buffer.
const BR_WINDOW: u32 = 22;
const BR_BUFFER: usize = 16 * 1024;

impl Encoder {
    pub(crate) fn new(coding: Coding, cfg: &Compression) -> Self {
        let inner = match coding {
            Coding::Gzip => {
                Inner::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(cfg.gzip_level)))
            }
            Coding::Br => {
                Inner::Br(Box::new(brotli::CompressorWriter::new(Vec::new(), BR_BUFFER, cfg.br_level, BR_WINDOW)))
            }
            Coding::Zstd => match zstd::stream::write::Encoder::new(Vec::new(), cfg.zstd_level) {
                Ok(e) => Inner::Zstd(e),
                // Only an allocation failure in the C library: gzip then.
                Err(_) => Inner::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())),
            },
        };
        Encoder { inner }
    }

    /// Encodes `input`, flushed, appending the encoded bytes to `out`.
    pub(crate) fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.inner {
            Inner::Gzip(e) => {
                e.write_all(input)?;
                e.flush()?;
                out.append(e.get_mut());
            }
            Inner::Br(e) => {
                e.write_all(input)?;
                e.flush()?;
                out.append(e.get_mut());
            }
            Inner::Zstd(e) => {
                e.write_all(input)?;
                e.flush()?;
                out.append(e.get_mut());
            }
            Inner::Done => return Err(io::Error::other("the encoder has finished")),
        }
        Ok(())
    }

    /// Ends the encoded stream, appending its last bytes to `out`.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match std::mem::replace(&mut self.inner, Inner::Done) {
            Inner::Gzip(e) => out.append(&mut e.finish()?),
            Inner::Br(e) => out.append(&mut e.into_inner()),
            Inner::Zstd(e) => out.append(&mut e.finish()?),
            Inner::Done => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn head(req: &str, resp: &str) -> (RequestHead, ResponseHead) {
        use tollgate_wire::h1::{Parsed, parse_request, parse_response};
        let mut rq = RequestHead::default();
        let parsed = parse_request(req.as_bytes(), &mut rq, 100, 65536, 8192);
        assert!(matches!(parsed, Ok(Parsed::Complete((), _))), "{req}");
        let mut rs = ResponseHead::default();
        let parsed = parse_response(resp.as_bytes(), &mut rs, 65536);
        assert!(matches!(parsed, Ok(Parsed::Complete((), _))), "{resp}");
        (rq, rs)
    }

    const HTML: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\nETag: \"v1\"\r\n\r\n";

    fn decode(coding: Coding, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap(),
            Coding::Br => brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out).unwrap(),
            Coding::Zstd => zstd::stream::read::Decoder::new(bytes).unwrap().read_to_end(&mut out).unwrap(),
        };
        out
    }

    #[test]
    fn each_coding_round_trips_piece_by_piece() {
        let cfg = Compression::defaults();
        let text: Vec<u8> = (0..20_000).flat_map(|i| format!("line {i} of the page\n").into_bytes()).collect();
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let mut e = Encoder::new(coding, &cfg);
            let mut out = Vec::new();
            let mut seen = 0;
            for piece in text.chunks(7_000) {
                e.push(piece, &mut out).unwrap();
                assert!(out.len() > seen, "{coding:?}: each piece flushed something");
                seen = out.len();
            }
            e.finish(&mut out).unwrap();
            assert!(out.len() * 5 < text.len(), "{coding:?}: {} bytes from {}", out.len(), text.len());
            assert_eq!(decode(coding, &out), text, "{coding:?}");
            assert!(e.push(b"more", &mut out).is_err(), "finished");
        }
    }

    #[test]
    fn the_head_says_the_encoding_and_what_varies() {
        let cfg = Compression::defaults();
        let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip, br;q=0.5\r\n\r\n", HTML);
        assert!(negotiate(&cfg, &req, &mut resp).is_some());
        let f = &resp.fields;
        assert_eq!(f.get(b"content-encoding"), Some(&b"gzip"[..]));
        assert_eq!(f.get(b"content-length"), None);
        assert_eq!(f.get(b"etag"), Some(&b"W/\"v1\""[..]));
        assert_eq!(f.get(b"vary"), Some(&b"Accept-Encoding"[..]));

        // A client that accepts none: the response as it is, but it varies.
        let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip;q=0\r\n\r\n", HTML);
        assert!(negotiate(&cfg, &req, &mut resp).is_none());
        assert_eq!(
            (resp.fields.get(b"content-encoding"), resp.fields.get(b"vary")),
            (None, Some(&b"Accept-Encoding"[..]))
        );
        assert_eq!(resp.fields.get(b"content-length"), Some(&b"5000"[..]));

        // Not compressible: nothing changes.
        for resp_text in [
            "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: br\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, No-Transform\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 206 Partial Content\r\nContent-Type: text/html\r\nContent-Range: bytes 0-9/5000\r\nContent-Length: 10\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n\r\n",
        ] {
            let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n", resp_text);
            let before: Vec<(Vec<u8>, Vec<u8>)> = resp.fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            assert!(negotiate(&cfg, &req, &mut resp).is_none(), "{resp_text}");
            let after: Vec<(Vec<u8>, Vec<u8>)> = resp.fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            assert_eq!(after, before, "{resp_text}");
        }
        // A Vary that names it already is left alone; HEAD gets the head only.
        let with_vary = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nVary: Accept-Encoding, Cookie\r\n\r\n";
        let (req, mut resp) = head("HEAD / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: zstd\r\n\r\n", with_vary);
        assert!(negotiate(&cfg, &req, &mut resp).is_none());
        assert_eq!(resp.fields.get_all(b"vary").count(), 1);
        assert_eq!(resp.fields.get(b"content-encoding"), Some(&b"zstd"[..]));
        let off = Compression { enabled: false, ..Compression::defaults() };
        let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n", HTML);
        assert!(negotiate(&off, &req, &mut resp).is_none());
    }
}
