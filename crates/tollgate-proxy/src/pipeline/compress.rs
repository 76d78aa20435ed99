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
    let sends_body = req.method() != "HEAD";
    negotiate_fields(cfg, req, (resp.status, sends_body), content_length, &mut resp.fields)
}

/// [`negotiate`] for a response of `status` with `fields` and a body of
/// `content_length` bytes (when known): a server's, or one Tollgate makes (a
/// static file's, pipeline/files.rs); an encoder only when `sends_body` (not
/// for a HEAD request's response, nor a 304 that says what a 200 would).
pub(crate) fn negotiate_fields(
    cfg: &Compression,
    req: &RequestHead,
    (status, sends_body): (u16, bool),
    content_length: Option<u64>,
    fields: &mut Fields,
) -> Option<Box<Encoder>> {
    if !cfg.enabled {
        return None;
    }
    let facts = Response {
        status,
        content_encoding: fields.get(b"content-encoding"),
        content_type: fields.get(b"content-type"),
        content_length,
        no_transform: CacheControl::parse(fields.get_all(b"cache-control")).no_transform(),
        ranged: fields.get(b"content-range").is_some(),
    };
    if cfg.decompress
        && let Some(coding) = facts.content_encoding.and_then(coding_of).filter(|c| cfg.codings.contains(c))
    {
        let whole_200 = facts.status == 200 && !facts.no_transform && !facts.ranged;
        return decode_on_the_way(req, (whole_200, sends_body), coding, fields);
    }
    if !encoding::compressible(&facts, &cfg.types, cfg.min_size) {
        return None;
    }
    vary_on_accept_encoding(fields);
    let accept: Vec<&[u8]> = req.fields.get_all(b"accept-encoding").collect();
    let accepted = (!accept.is_empty()).then(|| encoding::parse_accept(&accept));
    let coding = encoding::choose(accepted.as_deref(), &cfg.codings)?;
    fields.remove(b"content-length");
    fields.append(b"content-encoding", coding.token().as_bytes());
    if let Some(etag) = fields.get(b"etag").map(encoding::weaken_etag) {
        fields.remove(b"etag");
        fields.append(b"etag", &etag);
    }
    sends_body.then(|| Box::new(Encoder::new(coding, cfg)))
}

/// Adds `Vary: Accept-Encoding` unless a `Vary` names it (or `*`) already.
fn vary_on_accept_encoding(fields: &mut Fields) {
    let varies = fields.get_all(b"vary").any(|v| {
        v.split(|b| *b == b',').any(|t| {
            let t = t.trim_ascii();
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !varies {
        fields.append(b"vary", b"Accept-Encoding");
    }
}

/// A `Content-Encoding` value that is one coding Tollgate knows.
fn coding_of(v: &[u8]) -> Option<Coding> {
    std::str::from_utf8(v).ok().and_then(|v| Coding::from_token(v.trim().to_ascii_lowercase().as_str()))
}

/// `compression.decompress`: a response the server encoded with `coding`,
/// for a client that does not take it (no `Accept-Encoding`, or one that
/// refuses it), decoded on its way: a whole 200 only, not `no-transform`.
/// The head says so (no `Content-Encoding` or length, a weak `ETag`, `Vary`).
fn decode_on_the_way(
    req: &RequestHead,
    (whole_200, sends_body): (bool, bool),
    coding: Coding,
    fields: &mut Fields,
) -> Option<Box<Encoder>> {
    if !whole_200 {
        return None;
    }
    let accept: Vec<&[u8]> = req.fields.get_all(b"accept-encoding").collect();
    let accepted = (!accept.is_empty()).then(|| encoding::parse_accept(&accept));
    vary_on_accept_encoding(fields);
    if encoding::choose(accepted.as_deref(), &[coding]).is_some() {
        return None;
    }
    fields.remove(b"content-encoding");
    fields.remove(b"content-length");
    if let Some(etag) = fields.get(b"etag").map(encoding::weaken_etag) {
        fields.remove(b"etag");
        fields.append(b"etag", &etag);
    }
    sends_body.then(|| Box::new(Encoder::decoder(coding)))
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
    let coding = head.get(b"content-encoding").and_then(coding_of).filter(|c| cfg.codings.contains(c));
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
        Coding::Gzip => flate2::read::MultiGzDecoder::new(encoded).take(limit).read_to_end(&mut out),
        Coding::Br => brotli::Decompressor::new(encoded, 4096).take(limit).read_to_end(&mut out),
        Coding::Zstd => {
            let mut d = zstd::stream::read::Decoder::new(encoded).ok()?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX).ok()?;
            d.take(limit).read_to_end(&mut out)
        }
    };
    (read.is_ok() && out.len() as u64 <= MAX_DECODED).then_some(out)
}

/// A body's encoder (or decoder, [`Encoder::decoder`]): bytes in, encoded
/// (decoded) bytes out, flushed at each piece so that what the server sent
/// reaches the client without waiting for more.
pub(crate) struct Encoder {
    inner: Inner,
}

enum Inner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Gunzip(flate2::write::MultiGzDecoder<Bounded>),
    Unbr(Box<brotli::DecompressorWriter<Bounded>>),
    Unzstd(zstd::stream::write::Decoder<'static, Bounded>),
    /// Finished.
    Done,
}

/// The most one piece of a server's body (one read, at most 64 KiB) may
/// decode to: 256 times its size. A piece that decodes to more (a
/// compression bomb) ends the response rather than the proxy's memory.
const MAX_DECODED_PIECE: usize = 16 * 1024 * 1024;

/// A decoder's output, refusing to grow past [`MAX_DECODED_PIECE`] between
/// two takes.
#[derive(Default)]
pub(crate) struct Bounded(Vec<u8>);

impl Write for Bounded {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.0.len() + data.len() > MAX_DECODED_PIECE {
            return Err(io::Error::other("a piece of the body decodes to more than 16 MiB"));
        }
        self.0.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The largest zstd window a server's body may ask the decoder for: 8 MiB,
/// the most RFC 8878 section 3 lets a `zstd` content coding use (zstd's own
/// default would let one response make the proxy allocate 128 MiB).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

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

    /// A decoder of `coding` (`compression.decompress`).
    pub(crate) fn decoder(coding: Coding) -> Self {
        let inner = match coding {
            // Gzip members one after another are one body (RFC 1952 section 2.2).
            Coding::Gzip => Inner::Gunzip(flate2::write::MultiGzDecoder::new(Bounded::default())),
            Coding::Br => Inner::Unbr(Box::new(brotli::DecompressorWriter::new(Bounded::default(), BR_BUFFER))),
            Coding::Zstd => {
                let decoder = zstd::stream::write::Decoder::new(Bounded::default())
                    .and_then(|mut d| d.window_log_max(ZSTD_WINDOW_LOG_MAX).map(|()| d));
                match decoder {
                    Ok(d) => Inner::Unzstd(d),
                    // Only an allocation failure in the C library: the response fails.
                    Err(_) => Inner::Done,
                }
            }
        };
        Encoder { inner }
    }

    /// Encodes (decodes) `input`, flushed, appending the output to `out`.
    pub(crate) fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match &mut self.inner {
            Inner::Gunzip(d) => {
                d.write_all(input)?;
                d.flush()?;
                out.append(&mut d.get_mut().0);
            }
            Inner::Unbr(d) => {
                d.write_all(input)?;
                d.flush()?;
                out.append(&mut d.get_mut().0);
            }
            Inner::Unzstd(d) => {
                d.write_all(input)?;
                d.flush()?;
                out.append(&mut d.get_mut().0);
            }
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
            Inner::Gunzip(d) => out.append(&mut d.finish()?.0),
            Inner::Unbr(d) => {
                out.append(&mut d.into_inner().map_err(|_| io::Error::other("a truncated brotli body"))?.0)
            }
            // A body that stops inside a frame is an error, not a shorter body.
            Inner::Unzstd(d) => out.append(&mut d.finish()?.0),
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

    fn encode(coding: Coding, plain: &[u8]) -> Vec<u8> {
        let mut e = Encoder::new(coding, &Compression::defaults());
        let mut out = Vec::new();
        e.push(plain, &mut out).unwrap();
        e.finish(&mut out).unwrap();
        out
    }

    #[test]
    fn decoders_undo_each_coding_piece_by_piece_and_stop_a_bomb() {
        let text: Vec<u8> = (0..20_000).flat_map(|i| format!("line {i} of the page\n").into_bytes()).collect();
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let coded = encode(coding, &text);
            let mut d = Encoder::decoder(coding);
            let mut out = Vec::new();
            for piece in coded.chunks(1_000) {
                d.push(piece, &mut out).unwrap();
            }
            d.finish(&mut out).unwrap();
            assert_eq!(out, text, "{coding:?}");
            // 64 MiB of zeros in one piece of a few KiB: refused, not decoded.
            let bomb = encode(coding, &vec![0u8; 64 << 20]);
            assert!(bomb.len() < 256 * 1024, "{coding:?}: {} bytes", bomb.len());
            let mut d = Encoder::decoder(coding);
            let mut out = Vec::new();
            assert!(d.push(&bomb, &mut out).is_err(), "{coding:?}");
            assert!(out.len() <= MAX_DECODED_PIECE, "{coding:?}");
        }
    }

    #[test]
    fn decoders_refuse_a_cut_body_and_a_large_zstd_window_and_take_gzip_members() {
        let text: Vec<u8> = (0..5_000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let coded = encode(coding, &text);
            let mut d = Encoder::decoder(coding);
            let mut out = Vec::new();
            d.push(&coded[..coded.len() - 8], &mut out).unwrap();
            assert!(d.finish(&mut out).is_err(), "{coding:?}: a body cut short is an error");
            assert!(super::decode(coding, &coded[..coded.len() - 8]).is_none(), "{coding:?}");
        }
        // Two gzip members make one body.
        let mut two = encode(Coding::Gzip, b"first ");
        two.extend_from_slice(&encode(Coding::Gzip, b"second"));
        let mut d = Encoder::decoder(Coding::Gzip);
        let mut out = Vec::new();
        d.push(&two, &mut out).unwrap();
        d.finish(&mut out).unwrap();
        assert_eq!(out, b"first second");
        assert_eq!(super::decode(Coding::Gzip, &two).as_deref(), Some(&b"first second"[..]));
        // A zstd frame asking for a 32 MiB window: refused (at most 8 MiB).
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        e.window_log(25).unwrap();
        e.write_all(&text).unwrap();
        let wide = e.finish().unwrap();
        let mut d = Encoder::decoder(Coding::Zstd);
        let mut out = Vec::new();
        let pushed = d.push(&wide, &mut out).and_then(|()| d.finish(&mut out));
        assert!(pushed.is_err() && out.is_empty(), "{} bytes out", out.len());
        assert!(super::decode(Coding::Zstd, &wide).is_none());
        // The same text with zstd's usual window decodes.
        assert_eq!(super::decode(Coding::Zstd, &encode(Coding::Zstd, &text)), Some(text));
    }

    #[test]
    fn decompress_decodes_for_a_client_that_does_not_take_the_coding() {
        let cfg = Compression { decompress: true, ..Compression::defaults() };
        let gz = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: 500\r\nETag: \"v1\"\r\n\r\n";
        for accept in ["", "Accept-Encoding: identity\r\n", "Accept-Encoding: br, gzip;q=0\r\n"] {
            let (req, mut resp) = head(&format!("GET / HTTP/1.1\r\nHost: a\r\n{accept}\r\n"), gz);
            assert!(negotiate(&cfg, &req, &mut resp).is_some(), "{accept}");
            let f = &resp.fields;
            assert_eq!((f.get(b"content-encoding"), f.get(b"content-length")), (None, None), "{accept}");
            assert_eq!((f.get(b"etag"), f.get(b"vary")), (Some(&b"W/\"v1\""[..]), Some(&b"Accept-Encoding"[..])));
        }
        // A client that takes gzip gets it as it is; so does one without
        // decompress, or a range, or no-transform.
        let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n", gz);
        assert!(negotiate(&cfg, &req, &mut resp).is_none());
        assert_eq!(resp.fields.get(b"content-encoding"), Some(&b"gzip"[..]));
        let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n", gz);
        assert!(negotiate(&Compression::defaults(), &req, &mut resp).is_none());
        assert_eq!(resp.fields.get(b"content-encoding"), Some(&b"gzip"[..]));
        let nt =
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nCache-Control: no-transform\r\nContent-Length: 5\r\n\r\n";
        let (req, mut resp) = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n", nt);
        assert!(negotiate(&cfg, &req, &mut resp).is_none());
        assert_eq!(resp.fields.get(b"content-encoding"), Some(&b"gzip"[..]));
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
