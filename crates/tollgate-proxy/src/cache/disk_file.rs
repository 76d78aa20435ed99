//! The file of one stored response in the disk tier: pure encoding and
//! decoding (bytes in, bytes out; disk.rs does the I/O).
//!
//! ```text
//! offset  size  field
//! 0       4     magic "TGC1"
//! 4       4     header length H (u32, little-endian, as every number here)
//! 8       8     body length B
//! 16      4     CRC-32 of the header
//! 20      4     CRC-32 of the body
//! 24      H     header: stored_at u64; key; secondary key; Vary; the stored
//!               head (status u16, fields_at u32, wire); the metadata (RFC 9111
//!               section 4.2.3's request_time, response_time, Date,
//!               corrected_initial_age, the freshness lifetime and the rest of
//!               `EntryMeta`)
//! 24+H    B     body
//! ```
//! Strings and byte strings are a u32 length then the bytes; an optional one
//! a byte 0/1 first. A file is whole when its length is 24 + H + B and both
//! checksums match; anything else (a torn write, a truncated file, a flipped
//! bit) is refused with [`Corrupt`] and never served. At start the index is
//! rebuilt from the headers alone ([`decode_header`]: the header's checksum
//! and the file's length); the body's checksum is checked on every read.

use super::store::{Body, Object};
use bytes::Bytes;
use tollgate_wire::cache::head::StoredHead;
use tollgate_wire::cache::policy::EntryMeta;
use tollgate_wire::cache::vary::Vary;

pub const MAGIC: [u8; 4] = *b"TGC1";
/// The fixed part before the header.
pub const PREFIX: usize = 24;

/// Why a file is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corrupt {
    /// Not a Tollgate cache file (or another format version).
    Magic,
    /// Shorter or longer than its lengths say (a torn or truncated write).
    Length,
    /// A checksum does not match.
    Checksum,
    /// The header does not decode.
    Header,
}

/// What the index keeps of a file, from its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// When it was written (Unix seconds): the eviction order after a restart.
    pub stored_at: u64,
    pub key: String,
    pub vary: Vary,
    pub secondary: Box<[u8]>,
    /// `Date` and `response_time`: the most recent variant wins a lookup.
    pub date: u64,
    pub response_time: u64,
    /// `Content-Encoding`, for the `Accept-Encoding` match (vary.rs).
    pub content_encoding: Option<Box<str>>,
    /// The whole file's length.
    pub file_len: u64,
}

/// The header and prefix of `obj` stored under `key` (the body follows, as
/// the object's segments); `stored_at` in Unix seconds.
pub fn encode_head(key: &str, obj: &Object, stored_at: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(256 + obj.head.len() + key.len());
    put_u64(&mut h, stored_at);
    put_bytes(&mut h, key.as_bytes());
    put_bytes(&mut h, obj.secondary());
    match &obj.vary {
        Vary::Fields(names) => {
            h.push(1);
            put_u32(&mut h, names.len() as u32);
            for n in names.iter() {
                put_bytes(&mut h, n.as_bytes());
            }
        }
        // `Vary: *` is never stored.
        Vary::None | Vary::Star => h.push(0),
    }
    put_u16(&mut h, obj.head.status);
    put_u32(&mut h, obj.head.fields_at());
    put_bytes(&mut h, obj.head.wire());
    let m = &obj.meta;
    put_u16(&mut h, m.status);
    for n in [m.request_time, m.response_time, m.date, m.corrected_initial_age, m.freshness_lifetime] {
        put_u64(&mut h, n);
    }
    h.push(u8::from(m.heuristic));
    h.push(m.flags);
    put_u32(&mut h, m.stale_while_revalidate);
    put_u32(&mut h, m.stale_if_error);
    put_opt(&mut h, m.etag.as_deref().map(str::as_bytes));
    put_opt(&mut h, m.last_modified.as_ref().map(|l| l.0.as_bytes()));
    if let Some((_, t)) = &m.last_modified {
        put_u64(&mut h, *t);
    }
    put_opt(&mut h, m.content_encoding.as_deref().map(str::as_bytes));

    let mut crc = crc32fast::Hasher::new();
    for s in obj.body.segments() {
        crc.update(s);
    }
    let mut out = Vec::with_capacity(PREFIX + h.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    out.extend_from_slice(&obj.body.len().to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&h).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&h);
    out
}

/// The whole file (tests; the writer writes the head and then each segment).
pub fn encode(key: &str, obj: &Object, stored_at: u64) -> Vec<u8> {
    let mut out = encode_head(key, obj, stored_at);
    for s in obj.body.segments() {
        out.extend_from_slice(s);
    }
    out
}

/// The header length a file's first [`PREFIX`] bytes announce, to read that
/// much more.
pub fn header_len(prefix: &[u8]) -> Result<usize, Corrupt> {
    if prefix.len() < PREFIX || prefix[..4] != MAGIC {
        return Err(Corrupt::Magic);
    }
    Ok(u32::from_le_bytes(prefix[4..8].try_into().unwrap_or_default()) as usize)
}

/// Reads the index's part of a file from its first `PREFIX + H` bytes and
/// the file's length: the header's checksum and the length are checked, not
/// the body's.
pub fn decode_header(start: &[u8], file_len: u64) -> Result<Header, Corrupt> {
    let (h, body_len, _) = split(start)?;
    if file_len != (PREFIX + h.len()) as u64 + body_len {
        return Err(Corrupt::Length);
    }
    let mut r = Reader(h);
    let (stored_at, key, secondary, vary) = r.lead()?;
    let _head = (r.u16()?, r.u32()?, r.bytes()?);
    let meta = read_meta(&mut r)?;
    let (date, response_time, content_encoding) = (meta.date, meta.response_time, meta.content_encoding);
    Ok(Header { stored_at, key, vary, secondary, date, response_time, content_encoding, file_len })
}

/// The stored response's metadata, as [`encode`] writes it after the head;
/// nothing may follow it.
fn read_meta(r: &mut Reader<'_>) -> Result<EntryMeta, Corrupt> {
    let mut meta = EntryMeta { status: r.u16()?, ..EntryMeta::default() };
    meta.request_time = r.u64()?;
    meta.response_time = r.u64()?;
    meta.date = r.u64()?;
    meta.corrected_initial_age = r.u64()?;
    meta.freshness_lifetime = r.u64()?;
    meta.heuristic = r.u8()? != 0;
    meta.flags = r.u8()?;
    meta.stale_while_revalidate = r.u32()?;
    meta.stale_if_error = r.u32()?;
    meta.etag = r.opt_str()?;
    if let Some(v) = r.opt_str()? {
        meta.last_modified = Some((v, r.u64()?));
    }
    meta.content_encoding = r.opt_str()?;
    if !r.0.is_empty() {
        return Err(Corrupt::Header);
    }
    Ok(meta)
}

/// Decodes a whole file into the object it holds and its key, checking both
/// checksums and the lengths. The body shares `file`'s allocation.
pub fn decode(file: Bytes) -> Result<(String, Object), Corrupt> {
    let (h, body_len, body_crc) = split(&file)?;
    let body_at = PREFIX + h.len();
    if file.len() as u64 != body_at as u64 + body_len {
        return Err(Corrupt::Length);
    }
    if crc32fast::hash(&file[body_at..]) != body_crc {
        return Err(Corrupt::Checksum);
    }
    let mut r = Reader(h);
    let (_stored_at, key, secondary, vary) = r.lead()?;
    let status = r.u16()?;
    let fields_at = r.u32()?;
    let wire = Bytes::copy_from_slice(r.bytes()?);
    let mut head = StoredHead::from_wire(status, wire, fields_at).ok_or(Corrupt::Header)?;
    // Files written before `Set-Cookie` was kept out of the store (issue 33)
    // may hold one client's cookie: it is never served to another.
    if head.get(b"set-cookie").is_some() {
        head = head.with_fields(head.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"set-cookie")));
    }
    let meta = read_meta(&mut r)?;
    let body = if body_len == 0 { Body::default() } else { Body::new(vec![file.slice(body_at..)]) };
    Ok((key, Object::new(head, body, meta, vary, secondary)))
}

/// The header (checked), the body's length and checksum.
fn split(file: &[u8]) -> Result<(&[u8], u64, u32), Corrupt> {
    let hlen = header_len(file)?;
    let body_len = u64::from_le_bytes(file[8..16].try_into().unwrap_or_default());
    let header_crc = u32::from_le_bytes(file[16..20].try_into().unwrap_or_default());
    let body_crc = u32::from_le_bytes(file[20..24].try_into().unwrap_or_default());
    let h = file.get(PREFIX..PREFIX + hlen).ok_or(Corrupt::Length)?;
    if crc32fast::hash(h) != header_crc {
        return Err(Corrupt::Checksum);
    }
    Ok((h, body_len, body_crc))
}

fn put_u16(out: &mut Vec<u8>, n: u16) {
    out.extend_from_slice(&n.to_le_bytes());
}
fn put_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&n.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_le_bytes());
}
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}
fn put_opt(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            out.push(1);
            put_bytes(out, b);
        }
        None => out.push(0),
    }
}

/// What every header starts with: stored_at, the key, the secondary key, `Vary`.
type Lead = (u64, String, Box<[u8]>, Vary);

/// Reads what the `put_*` functions wrote; any shortfall is [`Corrupt::Header`].
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if self.0.len() < n {
            return Err(Corrupt::Header);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Corrupt> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Corrupt> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().map_err(|_| Corrupt::Header)?))
    }
    fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| Corrupt::Header)?))
    }
    fn u64(&mut self) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| Corrupt::Header)?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], Corrupt> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Result<Box<str>, Corrupt> {
        let b = self.bytes()?;
        Ok(std::str::from_utf8(b).map_err(|_| Corrupt::Header)?.into())
    }
    fn opt_str(&mut self) -> Result<Option<Box<str>>, Corrupt> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.str()?)),
            _ => Err(Corrupt::Header),
        }
    }
    /// What every header starts with: stored_at, the key, the secondary key, `Vary`.
    fn lead(&mut self) -> Result<Lead, Corrupt> {
        let stored_at = self.u64()?;
        let key = String::from_utf8(self.bytes()?.to_vec()).map_err(|_| Corrupt::Header)?;
        let secondary: Box<[u8]> = self.bytes()?.into();
        Ok((stored_at, key, secondary, self.vary()?))
    }

    fn vary(&mut self) -> Result<Vary, Corrupt> {
        match self.u8()? {
            0 => Ok(Vary::None),
            1 => {
                let n = self.u32()? as usize;
                if n == 0 || n > 1024 {
                    return Err(Corrupt::Header);
                }
                let names: Result<Vec<Box<str>>, Corrupt> = (0..n).map(|_| self.str()).collect();
                Ok(Vary::Fields(names?.into_boxed_slice()))
            }
            _ => Err(Corrupt::Header),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_wire::cache::head::fmt_date;
    use tollgate_wire::cache::policy::{Options, RequestFacts, storable};
    use tollgate_wire::cache::testing::H;

    const T: u64 = 1_700_000_000;

    /// A stored response with every kind of metadata: Vary, ETag,
    /// Last-Modified, Content-Encoding, stale directives, an Age received.
    fn sample(body: &[&'static [u8]]) -> Object {
        let resp = H::new(&[
            ("Date", &fmt_date(T - 5)),
            ("Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=90, must-revalidate"),
            ("ETag", "\"v1\""),
            ("Last-Modified", &fmt_date(T - 3600)),
            ("Content-Encoding", "gzip"),
            ("Vary", "Accept-Encoding, Accept-Language"),
            ("Age", "3"),
            ("X-Custom", "kept"),
        ]);
        let req = H::new(&[("Accept-Encoding", "gzip"), ("Accept-Language", "fr")]);
        let m = storable(&RequestFacts::new("GET", &req), 200, &resp, T - 1, T, &Options::default()).unwrap();
        let head = StoredHead::new(200, b"OK", resp.iter(), &m.omit, T);
        let body = Body::new(body.iter().map(|b| Bytes::from_static(b)).collect());
        Object::new(head, body, m.meta, m.vary.clone(), m.vary.key(&req).unwrap())
    }

    #[test]
    fn rfc9111_4_2_3_a_stored_response_comes_back_whole_with_its_age_bookkeeping() {
        let obj = sample(&[b"hello ", b"world"]);
        let file = encode("http://a/x", &obj, T + 7);
        let (key, back) = decode(Bytes::from(file.clone())).unwrap();
        assert_eq!(key, "http://a/x");
        assert_eq!(back.head, obj.head, "status line and fields byte for byte");
        assert_eq!(back.meta, obj.meta, "request_time, response_time, date, corrected_initial_age, flags...");
        assert_eq!(back.meta.corrected_initial_age, 5, "apparent age 5 beats Age 3 + the 1 s delay");
        assert!(back.same_variant(&obj), "Vary and the secondary key (RFC 9111 section 4.1)");
        assert_eq!(back.body.len(), 11);
        assert_eq!(&back.body.segments()[0][..], b"hello world");
        let header_bytes = PREFIX + header_len(&file).unwrap();
        let h = decode_header(&file[..header_bytes], file.len() as u64).unwrap();
        assert_eq!((h.key.as_str(), h.stored_at, h.date, h.response_time), ("http://a/x", T + 7, T - 5, T));
        assert_eq!((h.vary, h.secondary, h.file_len), (obj.vary.clone(), obj.secondary().into(), file.len() as u64));
        assert_eq!(h.content_encoding.as_deref(), Some("gzip"), "for the Accept-Encoding match");
    }

    #[test]
    fn an_empty_body_and_no_vary_round_trip() {
        let head = StoredHead::new(204, b"No Content", std::iter::empty(), &[], T);
        let resp = H::new(&[("Cache-Control", "max-age=5")]);
        let req = H::new(&[]);
        let m = storable(&RequestFacts::new("GET", &req), 204, &resp, T, T, &Options::default()).unwrap();
        let obj = Object::new(head, Body::default(), m.meta, Vary::None, Box::default());
        let (_, back) = decode(Bytes::from(encode("k", &obj, T))).unwrap();
        assert_eq!((back.head.status, back.body.len(), back.vary), (204, 0, Vary::None));
    }

    #[test]
    fn a_cookie_stored_by_an_older_version_is_never_read_back() {
        // Before issue 33 a zone stored `Set-Cookie` with the response; such a
        // file must not replay one client's session to the next after an upgrade.
        let obj = sample(&[b"x"]);
        let fields: Vec<(&[u8], &[u8])> =
            obj.head.iter().chain([(&b"Set-Cookie"[..], &b"session=alice"[..])]).collect();
        let head = obj.head.with_fields(fields.into_iter());
        let old = Object::new(head, obj.body.clone(), obj.meta.clone(), obj.vary.clone(), obj.secondary().into());
        assert!(old.head.get(b"set-cookie").is_some());
        let (_, back) = decode(Bytes::from(encode("k", &old, T))).unwrap();
        assert_eq!(back.head.get(b"set-cookie"), None);
        assert_eq!(back.head, obj.head, "every other field as it was");
    }

    #[test]
    fn corrupt_and_truncated_files_are_refused() {
        let file = encode("http://a/x", &sample(&[b"0123456789"]), T);
        let body_at = file.len() - 10;
        // A flipped bit in the body: found by the read.
        let mut bad = file.clone();
        bad[body_at + 3] ^= 1;
        assert_eq!(decode(Bytes::from(bad.clone())).err(), Some(Corrupt::Checksum));
        assert!(decode_header(&bad[..body_at], bad.len() as u64).is_ok(), "the index does not read bodies");
        // A flipped bit in the header: found at start too.
        let mut bad = file.clone();
        bad[PREFIX + 12] ^= 0x40;
        assert_eq!(decode(Bytes::from(bad.clone())).err(), Some(Corrupt::Checksum));
        assert_eq!(decode_header(&bad[..body_at], bad.len() as u64).err(), Some(Corrupt::Checksum));
        // Truncated (a torn write): the lengths disagree.
        for cut in [body_at + 5, body_at, PREFIX + 3, 10] {
            let short = &file[..cut];
            assert!(decode(Bytes::copy_from_slice(short)).is_err(), "cut at {cut}");
            assert!(decode_header(&file[..body_at.min(cut)], cut as u64).is_err(), "cut at {cut}");
        }
        let mut long = file.clone();
        long.push(0);
        assert_eq!(decode(Bytes::from(long)).err(), Some(Corrupt::Length));
        let mut other = file.clone();
        other[3] = b'9';
        assert_eq!(decode(Bytes::from(other)).err(), Some(Corrupt::Magic), "another format version");
        assert_eq!(decode(Bytes::from(file)).map(|(k, _)| k), Ok("http://a/x".to_string()));
    }
}
