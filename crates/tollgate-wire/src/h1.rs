//! HTTP/1.1 on the wire: message heads, framing (RFC 9112) and chunked bodies.
//!
//! Pure code: bytes in, values or bytes out, no I/O, so it is unit-tested here and
//! fuzzed (fuzz/fuzz_targets/h1_*.rs).
//!
//! Why Tollgate has its own HTTP/1 layer rather than hyper's: a proxy needs only
//! the framing fields, a few routing fields and a handful of edits, and must copy
//! everything else as it came. hyper builds a `HeaderMap` (and a header-case map)
//! for every message on both sides, and its client runs every upstream connection
//! as a task of its own, reached through channels: four task hand-offs and two
//! header maps per proxied request. That was most of the CPU Tollgate spent above
//! HAProxy per request (docs/benchmarks.md). Parsing itself stays with `httparse`,
//! the parser under hyper; what is written here is what a proxy adds on top:
//! RFC 9112's framing rules, the smuggling checks, field edits and serialization.
//!
//! A message head is kept as the bytes that arrived plus a list of field spans
//! into them ([`Fields`]); edits mark fields dead or append new ones, and the head
//! that goes out is written from the live spans: header names keep their case,
//! values their bytes, and nothing is allocated per field.

use std::mem::MaybeUninit;
use tollgate_config::is_tchar;

#[path = "h1_body.rs"]
mod body;
pub use body::{BodyCursor, ChunkError, Chunked, MAX_TRAILERS};

/// Most header fields parsed on the stack; a config allowing more uses the heap.
const STACK_FIELDS: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Span {
    off: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: Span,
    value: Span,
    live: bool,
}

/// The header fields of one message: raw bytes and spans into them.
#[derive(Debug, Default)]
pub struct Fields {
    raw: Vec<u8>,
    list: Vec<Field>,
    /// Which of the fields the proxy itself reads are present ([`K_HOST`] ...):
    /// one pass at parse time spares a scan of every field for each of them.
    known: u8,
    /// For each of those (by bit position): the index of its first field, and
    /// how many there are (2 = more than one).
    first: [u16; 6],
    count: [u8; 6],
    /// Some field's name passes for a framing one ([`lookalike_framing`]);
    /// set as a request is checked.
    lookalike: bool,
}

const K_HOST: u8 = 1;
const K_CONTENT_LENGTH: u8 = 2;
const K_TRANSFER_ENCODING: u8 = 4;
const K_CONNECTION: u8 = 8;
const K_EXPECT: u8 = 16;
const K_DATE: u8 = 32;

fn known_bit(name: &[u8]) -> u8 {
    match name.len() {
        4 if name.eq_ignore_ascii_case(b"host") => K_HOST,
        4 if name.eq_ignore_ascii_case(b"date") => K_DATE,
        6 if name.eq_ignore_ascii_case(b"expect") => K_EXPECT,
        10 if name.eq_ignore_ascii_case(b"connection") => K_CONNECTION,
        14 if name.eq_ignore_ascii_case(b"content-length") => K_CONTENT_LENGTH,
        17 if name.eq_ignore_ascii_case(b"transfer-encoding") => K_TRANSFER_ENCODING,
        _ => 0,
    }
}

/// The field names a look-alike may pass for: the framing ones, and those
/// that route or end a connection.
const FRAMING: [&[u8]; 6] =
    [b"content-length", b"transfer-encoding", b"host", b"connection", b"upgrade", b"keep-alive"];

/// Whether `name` may pass for a framing one ([`lookalike_framing`]), by
/// the cheapest test that tells: most names are let go on their length or
/// first letter.
fn lookalike_name(name: &[u8]) -> bool {
    match name.len() {
        // A framing name's length: one of them with `_` for a `-`.
        4 | 7 | 10 | 14 | 17 if underscored_framing(name) => true,
        // One or two more: a `-` doubled, leading or trailing (`Host-`).
        5 | 6 | 8 | 9 | 11 | 12 | 13 | 15 | 16 | 17 | 18 | 19 => {
            matches!(name[0] | 0x20, b'c' | b't' | b'h' | b'u' | b'k' | b'-' | 0x7f) // 0x7f: `_`
                && lookalike_framing(name)
        }
        _ => false,
    }
}

/// Whether `name` is one of [`FRAMING`] with at least one `_` for a `-`.
fn underscored_framing(name: &[u8]) -> bool {
    FRAMING.iter().any(|f| {
        let mut underscore = false;
        f.len() == name.len()
            && name.iter().zip(f.iter()).all(|(&a, &b)| {
                underscore |= a == b'_';
                a.to_ascii_lowercase() == b || (a == b'_' && b == b'-')
            })
            && underscore
    })
}

/// Whether `name` is not one of [`FRAMING`] but reads as one once each `_`
/// is read as `-` and a run of `-` as one (`Content_Length`,
/// `transfer--encoding`, `Host_`): what CGI, PHP, some WSGI servers and
/// frameworks do to names, so that a server behind could take it for the
/// framing Tollgate did not see (nginx drops names with `_` by default,
/// `underscores_in_headers off`).
pub fn lookalike_framing(name: &[u8]) -> bool {
    let mut prev = 0;
    let odd = name.iter().any(|&b| {
        let odd = b == b'_' || (b == b'-' && prev == b'-');
        prev = b;
        odd
    });
    if !odd && name.first() != Some(&b'-') && name.last() != Some(&b'-') {
        return false;
    }
    let mut folded = [0u8; 24];
    let mut n = 0;
    for &b in name {
        let b = if b == b'_' { b'-' } else { b.to_ascii_lowercase() };
        if b == b'-' && (n == 0 || folded[n - 1] == b'-') {
            continue;
        }
        if n == folded.len() {
            return false;
        }
        folded[n] = b;
        n += 1;
    }
    while n > 0 && folded[n - 1] == b'-' {
        n -= 1;
    }
    FRAMING.iter().any(|f| *f == &folded[..n])
}

impl Fields {
    fn bytes(&self, s: Span) -> &[u8] {
        &self.raw[s.off as usize..(s.off + s.len) as usize]
    }

    fn push_bytes(&mut self, b: &[u8]) -> Span {
        let off = self.raw.len() as u32;
        self.raw.extend_from_slice(b);
        Span { off, len: b.len() as u32 }
    }

    /// Live fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.list.iter().filter(|f| f.live).map(|f| (self.bytes(f.name), self.bytes(f.value)))
    }

    /// Every value of `name` (any case), in order.
    pub fn get_all<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// The first value of `name`.
    pub fn get<'a>(&'a self, name: &'a [u8]) -> Option<&'a [u8]> {
        self.get_all(name).next()
    }

    fn has(&self, bit: u8) -> bool {
        self.known & bit != 0
    }

    /// Whether some field's name passes for a framing one ([`lookalike_framing`]).
    pub fn has_lookalikes(&self) -> bool {
        self.lookalike
    }

    /// Removes the fields whose names pass for framing ones; returns how many.
    pub fn drop_lookalikes(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.list.len() {
            let f = self.list[i];
            if f.live && lookalike_framing(self.bytes(f.name)) {
                self.list[i].live = false;
                n += 1;
            }
        }
        self.lookalike = false;
        if n > 0 {
            self.reindex();
        }
        n
    }

    /// The value of a known field when the message has exactly one of it.
    fn single(&self, bit: u8) -> Option<&[u8]> {
        let k = bit.trailing_zeros() as usize;
        (self.count[k] == 1).then(|| self.bytes(self.list[self.first[k] as usize].value))
    }

    fn note(&mut self, name: &[u8], index: usize) {
        self.note_bit(known_bit(name), index);
    }

    fn note_bit(&mut self, bit: u8, index: usize) {
        if bit != 0 {
            let k = bit.trailing_zeros() as usize;
            if self.known & bit == 0 {
                self.first[k] = index as u16;
                self.count[k] = 1;
            } else {
                self.count[k] = 2;
            }
            self.known |= bit;
        }
    }

    fn reindex(&mut self) {
        self.known = 0;
        for i in 0..self.list.len() {
            let f = self.list[i];
            if f.live {
                self.note_bit(known_bit(self.bytes(f.name)), i);
            }
        }
    }

    /// Removes every field called `name`; returns how many there were.
    pub fn remove(&mut self, name: &[u8]) -> usize {
        let mut n = 0;
        for i in 0..self.list.len() {
            let f = self.list[i];
            if f.live && self.bytes(f.name).eq_ignore_ascii_case(name) {
                self.list[i].live = false;
                n += 1;
            }
        }
        if n > 0 && known_bit(name) != 0 {
            self.reindex();
        }
        n
    }

    pub fn append(&mut self, name: &[u8], value: &[u8]) {
        self.note(name, self.list.len());
        let name = self.push_bytes(name);
        let value = self.push_bytes(value);
        self.list.push(Field { name, value, live: true });
    }

    /// Edits the values of every field called `name`, in place: `f` returns
    /// `None` to keep a value, an empty value to remove the field, or the new value.
    pub fn map_values(&mut self, name: &[u8], mut f: impl FnMut(&[u8]) -> Option<Vec<u8>>) {
        for i in 0..self.list.len() {
            let fl = self.list[i];
            if !fl.live || !self.bytes(fl.name).eq_ignore_ascii_case(name) {
                continue;
            }
            match f(self.bytes(fl.value)) {
                None => {}
                Some(v) if v.is_empty() => self.list[i].live = false,
                Some(v) => self.list[i].value = self.push_bytes(&v),
            }
        }
    }

    /// Replaces every field called `name` by one with `value`.
    pub fn set(&mut self, name: &[u8], value: &[u8]) {
        self.remove(name);
        self.append(name, value);
    }

    /// Writes the live fields as `name: value\r\n` lines, skipping those `skip` refuses.
    pub fn write(&self, out: &mut Vec<u8>, mut skip: impl FnMut(&[u8]) -> bool) {
        for (name, value) in self.iter() {
            if skip(name) {
                continue;
            }
            push_field(out, name, value);
        }
    }

    /// Removes the fields the Connection header names (RFC 9110 section 7.6.1),
    /// except the hop-by-hop ones, which are never written on anyway and of
    /// which `Upgrade` is still read.
    fn drop_listed(&mut self, tokens: &Tokens) {
        if !tokens.names_fields {
            return;
        }
        let mut dropped = false;
        for i in 0..self.list.len() {
            let f = self.list[i];
            if !f.live {
                continue;
            }
            let name = self.bytes(f.name);
            if !is_hop_by_hop(name) && tokens.names(self).any(|t| t.eq_ignore_ascii_case(name)) {
                self.list[i].live = false;
                dropped = true;
            }
        }
        if dropped {
            self.reindex();
        }
    }

    fn clear(&mut self) {
        self.raw.clear();
        self.list.clear();
        self.known = 0;
        self.lookalike = false;
    }

    /// Takes the fields httparse found in `buf` (which the head was parsed from).
    fn load(&mut self, buf: &[u8], headers: &[httparse::Header<'_>]) {
        self.clear();
        self.raw.extend_from_slice(buf);
        let base = buf.as_ptr() as usize;
        for h in headers {
            let name = Span { off: (h.name.as_ptr() as usize - base) as u32, len: h.name.len() as u32 };
            let value = Span { off: (h.value.as_ptr() as usize - base) as u32, len: h.value.len() as u32 };
            self.note(h.name.as_bytes(), self.list.len());
            self.list.push(Field { name, value, live: true });
        }
    }
}

impl tollgate_config::HeaderLookup for Fields {
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.get_all(name.as_bytes()).any(f)
    }
}

/// How a message body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// No body.
    #[default]
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection (responses only).
    UntilClose,
}

impl Framing {
    /// No body bytes follow: no body, or `Content-Length: 0` (which a
    /// response head keeps as `Length(0)`).
    pub fn is_empty(self) -> bool {
        matches!(self, Framing::Empty | Framing::Length(0))
    }
}

/// Why a request head is refused: the status the client gets and the log's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    pub status: u16,
    pub reason: &'static str,
}

const fn reject(status: u16, reason: &'static str) -> Reject {
    Reject { status, reason }
}

/// The outcome of parsing what a connection has buffered so far.
#[derive(Debug)]
pub enum Parsed<T> {
    /// A complete head of this many bytes.
    Complete(T, usize),
    /// More bytes needed.
    Partial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query`
    Origin,
    /// `http://authority/path?query`: the authority became the Host field.
    Absolute,
    /// `*` (OPTIONS only)
    Asterisk,
    /// `host:port` (CONNECT only, RFC 9112 section 3.2.3): the authority
    /// became the Host field; the target stays as written.
    Authority,
}

/// A parsed and checked request head.
#[derive(Debug, Default)]
pub struct RequestHead {
    pub fields: Fields,
    method: Span,
    /// The target as sent to servers: origin-form.
    target: Span,
    /// The target as the client wrote it (for the log).
    raw_target: Span,
    pub form: Option<TargetForm>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub framing: Option<Framing>,
    tokens: Tokens,
    /// The client's connection must close after this exchange (Connection: close,
    /// HTTP/1.0 without keep-alive, or a CL+TE request).
    pub close: bool,
    pub expect_continue: bool,
    /// The client asks to switch protocols (RFC 9110 section 7.8: `Connection:
    /// upgrade` and an `Upgrade` field, HTTP/1.1, no body), e.g. to WebSocket
    /// (RFC 6455): both fields go to the server, and a 101 answer turns the
    /// connection into a tunnel.
    pub upgrade: bool,
    /// Its Content-Length came as a list or repeats of one value, now one field.
    pub length_merged: bool,
    /// Its target named the `https` scheme: an absolute-form `https://...`,
    /// or an HTTP/2 or HTTP/3 `:scheme` (set by the session that loads it).
    pub https: bool,
}

impl RequestHead {
    pub fn method(&self) -> &str {
        // Method bytes are a token (checked by httparse): ASCII.
        std::str::from_utf8(self.fields.bytes(self.method)).unwrap_or("")
    }
    /// Origin-form target: path and query.
    pub fn target(&self) -> &str {
        std::str::from_utf8(self.fields.bytes(self.target)).unwrap_or("/")
    }
    /// The target up to its query (`?`). (A byte search: the generic `char`
    /// searcher of `split_once('?')` cost about 200 instructions a request.)
    pub fn path(&self) -> &str {
        let t = self.target();
        t.as_bytes().iter().position(|&b| b == b'?').map_or(t, |i| &t[..i])
    }
    /// [`RequestHead::path`] as bytes, without the UTF-8 check (the parser
    /// let only visible ASCII into the target).
    pub fn path_bytes(&self) -> &[u8] {
        let t = self.fields.bytes(self.target);
        &t[..t.iter().position(|&b| b == b'?').unwrap_or(t.len())]
    }
    /// Replaces the path of the target sent to the server, keeping its query
    /// (`rewrite_path`). `path` must be a valid origin-form path.
    pub fn set_path(&mut self, path: &str) {
        let t = self.fields.bytes(self.target);
        let query = t.iter().position(|&b| b == b'?').map(|i| t[i..].to_vec()).unwrap_or_default();
        let p = self.fields.push_bytes(path.as_bytes());
        self.target = match query.is_empty() {
            true => p,
            false => Span { len: p.len + self.fields.push_bytes(&query).len, ..p },
        };
    }
    pub fn raw_target(&self) -> &str {
        std::str::from_utf8(self.fields.bytes(self.raw_target)).unwrap_or("")
    }
    pub fn framing(&self) -> Framing {
        self.framing.unwrap_or(Framing::Empty)
    }
    pub fn version_str(&self) -> &'static str {
        if self.minor == 0 { "HTTP/1.0" } else { "HTTP/1.1" }
    }

    /// Keeps, of the protocols an upgrade request offers in `Upgrade`, those
    /// `allowed` takes (a frontend's `upgrades`); a request left offering none
    /// is not an upgrade, and goes on as a plain request without `Upgrade`
    /// (RFC 9110 section 7.8 lets a server ignore it). Otherwise a request
    /// could switch the connection to any protocol and have its later bytes
    /// relayed past every rule.
    pub fn keep_upgrades(&mut self, allowed: impl Fn(&[u8]) -> bool) {
        if !self.upgrade {
            return;
        }
        let mut any = false;
        self.fields.map_values(b"upgrade", |v| {
            let offers = || v.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|p| !p.is_empty());
            if offers().next().is_none() {
                return Some(Vec::new());
            }
            if offers().all(&allowed) {
                any = true;
                return None;
            }
            let kept = offers().filter(|p| allowed(p)).collect::<Vec<_>>().join(&b", "[..]);
            any |= !kept.is_empty();
            Some(kept)
        });
        self.upgrade = any;
    }

    /// Writes the request line and fields for a server: HTTP/1.1, origin-form,
    /// hop-by-hop fields removed (RFC 9110 section 7.6.1), the framing field that
    /// matches the body, and a Host when the request had none.
    pub fn write_upstream(&self, out: &mut Vec<u8>, default_host: std::net::SocketAddr) {
        out.extend_from_slice(self.fields.bytes(self.method));
        out.push(b' ');
        out.extend_from_slice(self.fields.bytes(self.target));
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let chunked = self.framing() == Framing::Chunked;
        let upgrade = self.upgrade;
        self.fields.write(out, |name| {
            if upgrade && name.eq_ignore_ascii_case(b"upgrade") {
                return false;
            }
            is_hop_by_hop(name)
                || (chunked && name.eq_ignore_ascii_case(b"content-length"))
                || (self.expect_continue && name.eq_ignore_ascii_case(b"expect"))
        });
        if chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        if upgrade {
            out.extend_from_slice(b"connection: upgrade\r\n");
        }
        if !self.fields.has(K_HOST) {
            // RFC 9112 section 3.2: HTTP/1.1 needs a Host; name the server, as
            // nginx does by default.
            use std::io::Write;
            let _ = write!(out, "host: {default_host}\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The size of the request line and fields as HTTP/1.1 text (about what
    /// [`Self::write_upstream`] writes), for the byte counters of a request
    /// that goes out as HTTP/2 fields instead.
    pub fn text_size(&self) -> usize {
        let line = self.fields.bytes(self.method).len() + self.fields.bytes(self.target).len() + 12;
        self.fields.iter().fold(line + 2, |n, (name, value)| n + name.len() + value.len() + 4)
    }
}

/// Fields that belong to one connection and are never forwarded.
const HOP_BY_HOP: [&[u8]; 7] =
    [b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"];

pub fn is_hop_by_hop(name: &[u8]) -> bool {
    // Most names are longer than any of these: one length test rejects them.
    name.len() <= 17 && HOP_BY_HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Fields that frame a message or name its target. A `Connection` header may
/// not remove them: dropping Content-Length while the body still follows would
/// let the next hop read that body as another message (request smuggling).
fn is_framing(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"transfer-encoding")
        || name.eq_ignore_ascii_case(b"host")
}

/// The tokens of every Connection field (`close`, `keep-alive`, `upgrade`, and
/// names of further hop-by-hop fields), as spans into the fields' bytes. Taken
/// once, when the head is parsed, and the fields they name are removed then
/// ([`Fields::drop_listed`]): before any rule edits the message or the proxy
/// adds its own fields (X-Forwarded-*, Date), so a Connection header can remove
/// only what the peer itself sent.
#[derive(Debug, Default)]
struct Tokens {
    /// The first few tokens inline (a response usually has one: `keep-alive`),
    /// any more in `more`: no allocation per message.
    inline: [Span; 4],
    count: usize,
    more: Vec<Span>,
    /// Some token names a field (not just `close` / `keep-alive`).
    names_fields: bool,
    /// Some token names a framing field ([`is_framing`]); such a token is not
    /// kept, and a request carrying one is refused.
    names_framing: bool,
}

impl Tokens {
    fn names<'a>(&'a self, f: &'a Fields) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.inline[..self.count.min(4)].iter().chain(self.more.iter()).map(|s| f.bytes(*s))
    }

    fn push(&mut self, s: Span) {
        if self.count < 4 {
            self.inline[self.count] = s;
        } else {
            self.more.push(s);
        }
        self.count += 1;
    }
    fn has(&self, f: &Fields, token: &[u8]) -> bool {
        self.names(f).any(|n| n.eq_ignore_ascii_case(token))
    }
}

fn connection_tokens(f: &Fields) -> Tokens {
    let mut t = Tokens::default();
    if !f.has(K_CONNECTION) {
        return t;
    }
    let k = K_CONNECTION.trailing_zeros() as usize;
    let one = (f.count[k] == 1).then(|| f.list[f.first[k] as usize]);
    let all = one
        .is_none()
        .then(|| f.list.iter().filter(|fl| fl.live && f.bytes(fl.name).eq_ignore_ascii_case(b"connection")).copied());
    for fl in one.into_iter().chain(all.into_iter().flatten()) {
        let bytes = f.bytes(fl.value);
        for tok in bytes.split(|b| *b == b',') {
            let tok = tok.trim_ascii();
            if tok.is_empty() {
                continue;
            }
            if is_framing(tok) {
                t.names_framing = true;
                continue;
            }
            let off = fl.value.off + (tok.as_ptr() as usize - bytes.as_ptr() as usize) as u32;
            t.names_fields |= !tok.eq_ignore_ascii_case(b"close") && !tok.eq_ignore_ascii_case(b"keep-alive");
            t.push(Span { off, len: tok.len() as u32 });
        }
    }
    t
}

/// How many bytes of empty lines (CRLF, or a bare LF) `buf` starts with: RFC
/// 9112 section 2.2 has a server ignore them before a request line (httparse
/// skips them too).
pub fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut i = 0;
    loop {
        match &buf[i..] {
            [b'\r', b'\n', ..] => i += 2,
            [b'\n', ..] => i += 1,
            _ => return i,
        }
    }
}

/// Request-target bytes allowed: visible ASCII except `#` (no fragment in a
/// request, RFC 9112 section 3.2). Anything else is a 400.
fn target_byte_ok(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'#'
}

/// Parses and checks a request head at the start of `buf` into `head` (reused
/// between requests so a keep-alive connection allocates nothing per request).
///
/// The checks, beyond httparse's syntax (tokens, field values without CTLs, no
/// obs-fold): request-target form (RFC 9112 section 3.2), Host (section 3.2),
/// Content-Length (RFC 9110 section 8.6), Transfer-Encoding (RFC 9112 section
/// 6.1; `chunked` once and last), both at once (section 6.3: TE wins, the
/// connection closes after), and the size limits (414, 431).
pub fn parse_request(
    buf: &[u8],
    head: &mut RequestHead,
    max_headers: usize,
    max_head: usize,
    max_uri: usize,
) -> Result<Parsed<()>, Reject> {
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if max_headers <= STACK_FIELDS {
        &mut stack[..max_headers]
    } else {
        heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut req = httparse::Request::new(&mut []);
    let status = req.parse_with_uninit_headers(buf, slots);
    let len = match status {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max_head {
                // No end of line yet: the request line itself is too long.
                let line_done = buf.iter().take(max_head).any(|b| *b == b'\n');
                return Err(if line_done { reject(431, "headers-too-large") } else { reject(414, "uri-too-long") });
            }
            return Ok(Parsed::Partial);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(reject(431, "too-many-headers")),
        Err(_) => return Err(reject(400, "bad-request")),
    };
    if len > max_head {
        return Err(reject(431, "headers-too-large"));
    }
    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(reject(400, "bad-request"));
    };
    head.fields.load(&buf[..len], req.headers);
    let base = buf.as_ptr() as usize;
    let span_of = |s: &[u8]| Span { off: (s.as_ptr() as usize - base) as u32, len: s.len() as u32 };
    head.method = span_of(method.as_bytes());
    head.raw_target = span_of(path.as_bytes());
    head.minor = minor;
    check_request(head, max_uri)?;
    Ok(Parsed::Complete((), len))
}

/// A request head from the fields of an HTTP/2 request, loaded as
/// [`parse_request`] loads what it parsed, and checked by the same rules
/// ([`check_request`]), without writing HTTP/1.1 text to parse again: the
/// method, the target (the path and query, or `*`), then the fields in order,
/// `Host` among them (from `:authority`). HTTP/2 has no `Transfer-Encoding`:
/// a body without a length is announced as `chunked`, which is how it goes on
/// to an HTTP/1.1 server. The same limits hold: more than `max_headers`
/// fields or a head larger than `max_head` (counted as its HTTP/1.1 text would
/// be) is a 431; a method or a field name that is not a token, or a value with
/// a control character, a 400, as httparse refuses them in a head. Returns the
/// head's size as HTTP/1.1 text, for the counters.
pub fn request_from_fields<'a>(
    head: &mut RequestHead,
    method: &[u8],
    target: &[u8],
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    limits: (usize, usize, usize),
) -> Result<usize, Reject> {
    load_request(head, 1, method, target, fields, limits)
}

/// A request of the proxy's own to a server (the cache's background
/// revalidation), made from one a client sent as HTTP/1.`minor` (an HTTP/1.0
/// one may have no Host: the server is then named, as for the client's own),
/// loaded and checked as [`request_from_fields`] does, without its limits.
pub fn own_request<'a>(
    head: &mut RequestHead,
    minor: u8,
    method: &[u8],
    target: &[u8],
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<usize, Reject> {
    load_request(head, minor, method, target, fields, (usize::MAX, usize::MAX, usize::MAX))
}

fn load_request<'a>(
    head: &mut RequestHead,
    minor: u8,
    method: &[u8],
    target: &[u8],
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    (max_headers, max_head, max_uri): (usize, usize, usize),
) -> Result<usize, Reject> {
    if method.is_empty() || !method.iter().all(|b| is_tchar(*b)) || target.is_empty() {
        return Err(reject(400, "bad-request"));
    }
    head.fields.clear();
    head.method = head.fields.push_bytes(method);
    head.raw_target = head.fields.push_bytes(target);
    // "METHOD TARGET HTTP/1.1\r\n", each "name: value\r\n", the final "\r\n".
    let mut size = method.len() + target.len() + 12;
    let mut count = 0;
    for (name, value) in fields {
        count += 1;
        if count > max_headers {
            return Err(reject(431, "too-many-headers"));
        }
        size += name.len() + value.len() + 4;
        if size + 2 > max_head {
            return Err(reject(431, "headers-too-large"));
        }
        // httparse trims the whitespace around a value (SP and HTAB: OWS); a
        // field value has none of its own (RFC 9110 section 5.5).
        let value = trim_ows(value);
        if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) || !value.iter().all(|b| field_value_byte_ok(*b)) {
            return Err(reject(400, "bad-request"));
        }
        head.fields.append(name, value);
    }
    head.minor = minor;
    check_request(head, max_uri)?;
    Ok(size + 2)
}

/// `v` without the SP and HTAB at either end.
fn trim_ows(v: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = v.iter().position(|b| !ows(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &v[start..end]
}

/// Field value bytes httparse accepts: HTAB, SP, visible ASCII and obs-text.
fn field_value_byte_ok(b: u8) -> bool {
    b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80
}

/// The checks of a request head, whatever it came from ([`parse_request`],
/// [`request_from_fields`]): the target's form, Host, framing, Connection,
/// upgrades and Expect.
fn check_request(head: &mut RequestHead, max_uri: usize) -> Result<(), Reject> {
    let minor = head.minor;
    let (is_connect, is_options) = {
        let m = head.fields.bytes(head.method);
        (m == b"CONNECT", m == b"OPTIONS")
    };
    head.close = false;
    head.expect_continue = false;
    head.upgrade = false;
    head.framing = None;
    head.form = None;
    head.https = false;

    // -- request target
    let form = {
        let t = head.fields.bytes(head.raw_target);
        if t.len() > max_uri {
            return Err(reject(414, "uri-too-long"));
        }
        if t.is_empty() || !t.iter().all(|b| target_byte_ok(*b)) {
            return Err(reject(400, "bad-target"));
        }
        if is_connect {
            // authority-form: a host and a port, nothing else (no userinfo).
            let port = t.iter().rposition(|b| *b == b':').map(|i| &t[i + 1..]);
            if !valid_host(t) || port.is_none_or(|p| p.is_empty() || p.iter().any(|b| !b.is_ascii_digit())) {
                return Err(reject(400, "bad-target"));
            }
            TargetForm::Authority
        } else {
            match t {
                [b'/', ..] => TargetForm::Origin,
                b"*" if is_options => TargetForm::Asterisk,
                b"*" => return Err(reject(400, "bad-target")),
                _ => TargetForm::Absolute,
            }
        }
    };
    if form == TargetForm::Authority {
        // CONNECT names its destination in the target: that is the Host.
        let authority = head.fields.bytes(head.raw_target).to_vec();
        head.fields.set(b"host", &authority);
        head.form = Some(form);
        head.target = head.raw_target;
    } else if form != TargetForm::Absolute {
        head.form = Some(form);
        head.target = head.raw_target;
    } else {
        // absolute-form: its authority is the Host (RFC 9112 section 3.2.2).
        let uri = http::Uri::try_from(head.fields.bytes(head.raw_target)).map_err(|_| reject(400, "bad-target"))?;
        if !matches!(uri.scheme_str(), Some("http") | Some("https")) {
            return Err(reject(400, "bad-scheme"));
        }
        head.https = uri.scheme_str() == Some("https");
        let Some(auth) = uri.authority() else { return Err(reject(400, "bad-target")) };
        if !valid_host(auth.as_str().as_bytes()) {
            return Err(reject(400, "bad-host"));
        }
        // RFC 9112 section 3.2.1: an empty path becomes "/", also before a query.
        let pq = uri.path_and_query().map_or("", |pq| pq.as_str());
        head.fields.set(b"host", auth.as_str().as_bytes());
        head.target = if pq.starts_with('/') {
            head.fields.push_bytes(pq.as_bytes())
        } else {
            let t = head.fields.push_bytes(b"/");
            Span { len: t.len + head.fields.push_bytes(pq.as_bytes()).len, ..t }
        };
        head.form = Some(TargetForm::Absolute);
    }
    // `%00` in the path (not the query) is refused, as nginx does: a server
    // that decodes it ends a C string, and a file name, early.
    if tollgate_config::path::has_encoded_nul(head.path_bytes()) {
        return Err(reject(400, "bad-target"));
    }

    // -- Host: exactly one, valid (absolute-form and authority-form set it above).
    if !matches!(head.form, Some(TargetForm::Absolute | TargetForm::Authority)) {
        let mut hosts = head.fields.get_all(b"host");
        match (hosts.next(), hosts.next()) {
            (Some(h), None) => {
                if !valid_host(h) {
                    return Err(reject(400, "bad-host"));
                }
            }
            (Some(_), Some(_)) => return Err(reject(400, "duplicate-host")),
            (None, _) if minor == 1 => return Err(reject(400, "missing-host")),
            (None, _) => {}
        }
    }

    // -- names that pass for framing ones (dropped or refused by the frontend)
    let lookalike = head.fields.iter().any(|(n, _)| lookalike_name(n));
    head.fields.lookalike = lookalike;

    // -- framing
    head.length_merged = false;
    let te = transfer_coding(&head.fields).map_err(|why| reject(400, why))?;
    let cl = content_length(&head.fields).map_err(|why| reject(400, why))?;
    head.tokens = connection_tokens(&head.fields);
    if head.tokens.names_framing {
        return Err(reject(400, "connection-lists-framing"));
    }
    head.fields.drop_listed(&head.tokens);
    let conn = &head.tokens;
    head.close = if minor == 0 { !conn.has(&head.fields, b"keep-alive") } else { conn.has(&head.fields, b"close") };
    head.framing = Some(match (te, cl) {
        (Some(TeFinal::Chunked), cl) => {
            if minor == 0 {
                // RFC 9112 section 6.1: Transfer-Encoding in HTTP/1.0 is faulty framing.
                return Err(reject(400, "te-in-http-1.0"));
            }
            if cl.is_some() {
                // RFC 9112 section 6.3 (3): TE overrides CL, which is removed; the
                // connection closes after the response.
                head.fields.remove(b"content-length");
                head.close = true;
            }
            Framing::Chunked
        }
        (Some(TeFinal::Other), _) => return Err(reject(400, "te-not-chunked")),
        // RFC 9112 section 6.1: a transfer coding the proxy does not understand
        // (anything but chunked) gets 501; forwarding the body as chunked alone
        // would hand the server coded bytes as content.
        (Some(TeFinal::ChunkedAfterOthers), _) => return Err(reject(501, "unknown-transfer-coding")),
        (None, Some(n)) => {
            head.length_merged = one_content_length(&mut head.fields, n);
            if n == 0 { Framing::Empty } else { Framing::Length(n) }
        }
        (None, None) => Framing::Empty,
    });
    // RFC 9110 section 9.3.6: a CONNECT request has no content; bytes after
    // its head belong to the tunnel, so framing there would be ambiguous.
    if is_connect && head.framing() != Framing::Empty {
        return Err(reject(400, "connect-with-body"));
    }
    head.upgrade = minor == 1
        && !is_connect
        && head.framing() == Framing::Empty
        && head.tokens.has(&head.fields, b"upgrade")
        && head.fields.get(b"upgrade").is_some_and(|v| !v.trim_ascii().is_empty());
    if let Some(e) = head.fields.get(b"expect").filter(|_| head.fields.has(K_EXPECT)) {
        if e.eq_ignore_ascii_case(b"100-continue") {
            head.expect_continue = head.framing() != Framing::Empty && minor == 1;
        } else {
            return Err(reject(417, "expectation-failed"));
        }
    }
    Ok(())
}

enum TeFinal {
    /// `chunked` alone.
    Chunked,
    /// `chunked` last, after other codings (`gzip, chunked`).
    ChunkedAfterOthers,
    /// Something else last.
    Other,
}

/// The final transfer coding, if the message has Transfer-Encoding; an error when
/// `chunked` is named more than once (across lines too) or the field is empty.
fn transfer_coding(f: &Fields) -> Result<Option<TeFinal>, &'static str> {
    if !f.has(K_TRANSFER_ENCODING) {
        return Ok(None);
    }
    let mut last: Option<&[u8]> = None;
    let mut chunked = 0;
    let mut codings = 0;
    let one = f.single(K_TRANSFER_ENCODING);
    let all = one.is_none().then(|| f.get_all(b"transfer-encoding"));
    for v in one.into_iter().chain(all.into_iter().flatten()) {
        for tok in v.split(|b| *b == b',') {
            let tok = tok.trim_ascii();
            if tok.is_empty() {
                continue;
            }
            if tok.eq_ignore_ascii_case(b"chunked") {
                chunked += 1;
            }
            codings += 1;
            last = Some(tok);
        }
        if last.is_none() {
            return Err("bad-transfer-encoding");
        }
    }
    if chunked > 1 {
        return Err("chunked-twice");
    }
    Ok(last.map(|t| match t.eq_ignore_ascii_case(b"chunked") {
        true if codings == 1 => TeFinal::Chunked,
        true => TeFinal::ChunkedAfterOthers,
        false => TeFinal::Other,
    }))
}

/// RFC 9110 section 8.6: a Content-Length sent as a list of one repeated value
/// (`5, 5`) or on several lines is replaced by one field with that value, so
/// that the next hop, whatever it makes of lists, reads the same length.
fn one_content_length(f: &mut Fields, n: u64) -> bool {
    let k = K_CONTENT_LENGTH.trailing_zeros() as usize;
    let repeated = f.count[k] > 1 || f.single(K_CONTENT_LENGTH).is_some_and(|v| v.contains(&b','));
    if repeated {
        f.set(b"content-length", n.to_string().as_bytes());
    }
    repeated
}

/// Content-Length: every value (and list member) the same run of digits.
fn content_length(f: &Fields) -> Result<Option<u64>, &'static str> {
    if !f.has(K_CONTENT_LENGTH) {
        return Ok(None);
    }
    let mut found: Option<u64> = None;
    let one = f.single(K_CONTENT_LENGTH);
    let all = one.is_none().then(|| f.get_all(b"content-length"));
    for v in one.into_iter().chain(all.into_iter().flatten()) {
        for tok in v.split(|b| *b == b',') {
            let tok = tok.trim_ascii();
            if tok.is_empty() || tok.len() > 18 || !tok.iter().all(u8::is_ascii_digit) {
                return Err("bad-content-length");
            }
            let n = tok.iter().fold(0u64, |n, d| n * 10 + (d - b'0') as u64);
            if found.is_some_and(|f| f != n) {
                return Err("differing-content-length");
            }
            found = Some(n);
        }
    }
    Ok(found)
}

/// A parsed response head from a server.
#[derive(Debug, Default)]
pub struct ResponseHead {
    pub fields: Fields,
    pub status: u16,
    reason: Span,
    pub minor: u8,
    /// The server will close (or, for HTTP/1.0, did not offer keep-alive).
    pub server_closes: bool,
    /// The response had both Content-Length and Transfer-Encoding (TE won).
    pub both_lengths: bool,
    /// How its body would be delimited if it has one (RFC 9112 section 6.3,
    /// rules 3-7), found at parse time.
    body: Framing,
    tokens: Tokens,
}

impl ResponseHead {
    /// The body's framing for a response to a HEAD request or not (RFC 9112
    /// section 6.3: HEAD, 1xx, 204 and 304 have none).
    pub fn framing(&self, head_request: bool) -> Framing {
        if head_request || (100..200).contains(&self.status) || self.status == 204 || self.status == 304 {
            return Framing::Empty;
        }
        self.body
    }

    /// Whether the server's Content-Length goes no further, to any client:
    /// Transfer-Encoding overrode it, or the response is a 204 (RFC 9110
    /// section 8.6: a 204 has none; an HTTP/1.1 client that believed one would
    /// read the next response as body, and nghttp2 refuses such a stream).
    fn drops_length(&self) -> bool {
        self.both_lengths || self.status == 204
    }

    /// Writes the response head for the client. `framing` is what the client
    /// gets (a chunked body to an HTTP/1.0 client goes out de-chunked and
    /// close-delimited); `close` says whether the client connection closes after.
    #[inline]
    pub fn write_client(&self, out: &mut Vec<u8>, framing: Framing, close: bool, keep_alive_10: bool) {
        out.extend_from_slice(b"HTTP/1.1 ");
        push_status(out, self.status);
        out.push(b' ');
        out.extend_from_slice(self.fields.bytes(self.reason));
        out.extend_from_slice(b"\r\n");
        let chunked = framing == Framing::Chunked && self.body == Framing::Chunked;
        self.fields.write(out, |name| {
            (is_hop_by_hop(name) && !(chunked && name.eq_ignore_ascii_case(b"transfer-encoding")))
                || ((self.drops_length() || framing == Framing::UntilClose)
                    && name.eq_ignore_ascii_case(b"content-length"))
        });
        if !self.fields.has(K_DATE) {
            push_date(out);
        }
        push_end(out, close, keep_alive_10);
    }
}

impl ResponseHead {
    /// The reason phrase as the server sent it (the cache stores it).
    pub fn reason(&self) -> &[u8] {
        self.fields.bytes(self.reason)
    }

    /// Whether this is an interim response the client gets before the final
    /// one (RFC 9110 section 15.2): 102 (Processing), 103 (Early Hints) and
    /// the unassigned 1xx codes. 100 (Continue) answers an expectation the
    /// proxy answers itself (it never forwards `Expect`), and a 101 ends the
    /// exchange's HTTP, so neither is one.
    pub fn is_interim(&self) -> bool {
        (102..=199).contains(&self.status)
    }

    /// Writes an interim (1xx) head for an HTTP/1.1 client: the status line
    /// and the server's end-to-end fields, as they came (no Date: RFC 9110
    /// section 6.6.1 asks it of final responses).
    pub fn write_interim(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"HTTP/1.1 ");
        push_status(out, self.status);
        out.push(b' ');
        out.extend_from_slice(self.fields.bytes(self.reason));
        out.extend_from_slice(b"\r\n");
        self.fields.write(out, is_framing_or_hop_by_hop);
        out.extend_from_slice(b"\r\n");
    }

    /// The fields of an interim (1xx) head for an HTTP/2 client: the
    /// end-to-end ones, without framing (a 1xx has no content).
    pub fn h2_interim_fields(&self, mut field: impl FnMut(&[u8], &[u8])) {
        for (name, value) in self.fields.iter() {
            if !is_framing_or_hop_by_hop(name) {
                field(name, value);
            }
        }
    }

    /// Whether this is a 101 that switches to a protocol (it names one in Upgrade).
    pub fn switches_protocols(&self) -> bool {
        self.status == 101 && self.fields.get(b"upgrade").is_some_and(|v| !v.trim_ascii().is_empty())
    }

    /// Writes a 101 (Switching Protocols) head for the client: the server's
    /// fields without the hop-by-hop ones except Upgrade, and `Connection: upgrade`.
    pub fn write_switching(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"HTTP/1.1 101 ");
        out.extend_from_slice(self.fields.bytes(self.reason));
        out.extend_from_slice(b"\r\n");
        self.fields.write(out, |name| !name.eq_ignore_ascii_case(b"upgrade") && is_hop_by_hop(name));
        out.extend_from_slice(b"connection: upgrade\r\n\r\n");
    }

    /// The fields an HTTP/2 client gets (RFC 9113 section 8.2.2: no
    /// connection-specific field): the end-to-end ones, without a
    /// Content-Length that [`ResponseHead::drops_length`]; with `switched` (a 101 that becomes
    /// a 200 to an extended CONNECT, RFC 8441) also without the WebSocket
    /// handshake's answer, which belongs to HTTP/1.1. A Date is added if the
    /// server sent none.
    pub fn h2_fields(&self, switched: bool, mut field: impl FnMut(&[u8], &[u8])) {
        for (name, value) in self.fields.iter() {
            if is_hop_by_hop(name)
                || (self.drops_length() && name.eq_ignore_ascii_case(b"content-length"))
                || (switched && name.eq_ignore_ascii_case(b"sec-websocket-accept"))
            {
                continue;
            }
            field(name, value);
        }
        if !self.fields.has(K_DATE) {
            let mut date = Vec::with_capacity(29);
            crate::clock::write_http_date(&mut date);
            field(b"date", &date);
        }
    }
}

/// A field an interim (1xx) response does not pass on: hop-by-hop, or
/// framing, which a response without content has no use for.
fn is_framing_or_hop_by_hop(name: &[u8]) -> bool {
    is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"content-length")
}

/// Parses a response head from a server at the start of `buf` into `head`.
pub fn parse_response(buf: &[u8], head: &mut ResponseHead, max_head: usize) -> Result<Parsed<()>, &'static str> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= max_head => return Err("response-head-too-large"),
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(_) => return Err("bad-response"),
    };
    if len > max_head {
        return Err("response-head-too-large");
    }
    let (Some(code), Some(minor)) = (resp.code, resp.version) else { return Err("bad-response") };
    if !(100..=999).contains(&code) {
        return Err("bad-response");
    }
    head.fields.load(&buf[..len], resp.headers);
    // RFC 9112 section 4: the reason phrase may be empty, and a server may leave
    // out the space before it too (`HTTP/1.1 200\r\n`); httparse then hands back
    // a slice that is not inside `buf`, so its span is taken only when it is.
    head.reason = resp.reason.and_then(|r| span_within(buf, r.as_bytes())).unwrap_or_default();
    head.status = code;
    head.minor = minor;
    check_response(head)?;
    Ok(Parsed::Complete((), len))
}

/// A response head from the fields of an HTTP/2 response, loaded as
/// [`parse_response`] loads what it parsed, and checked by the same rules
/// ([`check_response`]), without writing HTTP/1.1 text to parse again: the
/// status, `reason` (HTTP/2 has none: the caller names the status's usual
/// one), then the fields in order. HTTP/2 has no `Transfer-Encoding`: a body
/// without a length is framed as `chunked` (its trailers then go in the
/// chunked trailer section), and one that ended with the head (`end_stream`)
/// as `content-length: 0`, which is how whoever reads the body bytes takes
/// them. A head larger than `max_head` (counted as its HTTP/1.1 text would
/// be) or of more than [`STACK_FIELDS`] fields, a field name that is not a
/// token or a value with a control character is refused, as the text path
/// refuses them.
pub fn response_from_fields<'a>(
    head: &mut ResponseHead,
    status: u16,
    reason: &[u8],
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    end_stream: bool,
    max_head: usize,
) -> Result<(), &'static str> {
    if !(100..=999).contains(&status) || !reason.iter().all(|b| field_value_byte_ok(*b)) {
        return Err("bad-response");
    }
    head.fields.clear();
    head.reason = head.fields.push_bytes(reason);
    head.status = status;
    head.minor = 1;
    // "HTTP/1.1 NNN REASON\r\n", each "name: value\r\n", the final "\r\n".
    let mut size = reason.len() + 15;
    let mut count = 0;
    for (name, value) in fields {
        // As many fields as the text path parses ([`STACK_FIELDS`]), the
        // framing field added below among them.
        count += 1;
        if count > STACK_FIELDS {
            return Err("bad-response");
        }
        size += name.len() + value.len() + 4;
        if size + 2 > max_head {
            return Err("response-head-too-large");
        }
        let value = trim_ows(value);
        if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) || !value.iter().all(|b| field_value_byte_ok(*b)) {
            return Err("bad-response");
        }
        head.fields.append(name, value);
    }
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    if !bodiless && !head.fields.has(K_CONTENT_LENGTH) {
        let (name, value): (&[u8], &[u8]) =
            if end_stream { (b"content-length", b"0") } else { (b"transfer-encoding", b"chunked") };
        if count == STACK_FIELDS {
            return Err("bad-response");
        }
        if size + name.len() + value.len() + 6 > max_head {
            return Err("response-head-too-large");
        }
        head.fields.append(name, value);
    }
    check_response(head)
}

/// The checks of a response head, whatever it came from ([`parse_response`],
/// [`response_from_fields`]): Connection, keep-alive, and the body's framing.
fn check_response(head: &mut ResponseHead) -> Result<(), &'static str> {
    let minor = head.minor;
    // A server's Connection header may name Content-Length too: the token is
    // ignored (the framing stays), as RFC 9110 section 7.6.1 lets a proxy do.
    head.tokens = connection_tokens(&head.fields);
    head.fields.drop_listed(&head.tokens);
    let conn = &head.tokens;
    head.server_closes =
        if minor == 0 { !conn.has(&head.fields, b"keep-alive") } else { conn.has(&head.fields, b"close") };
    let te = transfer_coding(&head.fields)?;
    head.both_lengths = te.is_some() && head.fields.has(K_CONTENT_LENGTH);
    if head.both_lengths {
        // RFC 9112 section 6.3 (3): the connection is not reused after this.
        head.server_closes = true;
    }
    head.body = match te {
        Some(TeFinal::Chunked) => Framing::Chunked,
        // A coding under chunked: passed on as chunked alone, the client (or the
        // cache) would take the coded bytes as content.
        Some(TeFinal::ChunkedAfterOthers) => return Err("unknown-transfer-coding"),
        // Another coding last: RFC 9112 section 6.3 would read to the close,
        // but the coded bytes would reach the client as content all the same.
        Some(TeFinal::Other) => return Err("unknown-transfer-coding"),
        None => match content_length(&head.fields)? {
            Some(n) => {
                one_content_length(&mut head.fields, n);
                Framing::Length(n)
            }
            None => Framing::UntilClose,
        },
    };
    Ok(())
}

/// Where `part` lies inside `buf`, or `None` when it is empty or elsewhere.
fn span_within(buf: &[u8], part: &[u8]) -> Option<Span> {
    let off = (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
    (!part.is_empty() && off + part.len() <= buf.len()).then_some(Span { off: off as u32, len: part.len() as u32 })
}

fn push_status(out: &mut Vec<u8>, code: u16) {
    out.extend_from_slice(&[b'0' + (code / 100) as u8, b'0' + (code / 10 % 10) as u8, b'0' + (code % 10) as u8]);
}

/// Writes the head of a response Tollgate makes itself from `fields` (a
/// static file's): `framing` says how its body is delimited (a length, even
/// for a HEAD request's; chunked; or, for an HTTP/1.0 client, the close),
/// `close` whether the connection closes after, `keep_alive_10` whether an
/// HTTP/1.0 client is told it stays open.
pub fn write_made_head(
    out: &mut Vec<u8>,
    status: u16,
    fields: &Fields,
    framing: Framing,
    close: bool,
    keep_alive_10: bool,
) {
    push_status_line(out, status);
    fields.write(out, |name| is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"content-length"));
    match framing {
        Framing::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::Empty | Framing::UntilClose => {}
    }
    push_date(out);
    push_end(out, close, keep_alive_10);
}

/// `HTTP/1.1 <status> <its reason>` and the line's end.
fn push_status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, status);
    out.push(b' ');
    out.extend_from_slice(
        http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("").as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
}

/// A `date` field line, now.
fn push_date(out: &mut Vec<u8>) {
    out.extend_from_slice(b"date: ");
    crate::clock::write_http_date(out);
    out.extend_from_slice(b"\r\n");
}

/// The `connection` field a client is told (close, or keep-alive to an
/// HTTP/1.0 client that stays), and the end of the head.
fn push_end(out: &mut Vec<u8>, close: bool, keep_alive_10: bool) {
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if keep_alive_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A response made by Tollgate itself (errors, redirects).
pub fn write_local_response(out: &mut Vec<u8>, status: u16, fields: &[(&str, &[u8])], body: &[u8], close: bool) {
    push_status_line(out, status);
    for (n, v) in fields {
        push_field(out, n.as_bytes(), v);
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    push_date(out);
    push_end(out, close, false);
    out.extend_from_slice(body);
}

/// Writes one `name: value\r\n` field line.
pub fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Bytes of a reg-name: unreserved, `%` of pct-encoded, sub-delims (RFC 3986).
const REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric();
        i += 1;
    }
    let extra = b"-._~%!$&'()*+,;=";
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
};

/// Whether a Host value is `uri-host [":" port]` (RFC 9112 section 3.2, RFC 3986
/// section 3.2.2): a reg-name (unreserved, pct-encoded, sub-delims) or a bracketed
/// IP literal, then an optional all-digit port. No userinfo, nothing else.
pub fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if value.first() == Some(&b'[') {
        let Some(end) = value.iter().position(|b| *b == b']') else { return false };
        let literal = &value[1..end];
        if literal.is_empty() || !literal.iter().all(|b| b.is_ascii_hexdigit() || b":.".contains(b)) {
            return false;
        }
        (&value[..=end], &value[end + 1..])
    } else {
        match value.iter().position(|b| *b == b':') {
            Some(i) => (&value[..i], &value[i..]),
            None => (value, &value[value.len()..]),
        }
    };
    let reg_name_ok = host.first() == Some(&b'[') || (!host.is_empty() && host.iter().all(|b| REG_NAME[*b as usize]));
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    reg_name_ok && port_ok
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
