//! Static files: a backend's `static` (docs/configuration.md) answers from a
//! directory instead of servers, at the point of the request phase where a
//! server would be chosen (pipeline/mod.rs).
//!
//! What a request gets:
//! - its path made a path under the root by tollgate-wire's `files` (decoded,
//!   dot-segments resolved, `..` above the root, `%2F` and NUL refused: 400);
//! - the file opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//!   from the root's descriptor, held since load: a symbolic link that leads
//!   out of the root (absolute, or `..` past it) fails to open (`EXDEV`) and
//!   is answered as no file; one that stays inside is followed. Only regular
//!   files are served (`O_NONBLOCK`, so a FIFO cannot block the worker);
//! - a directory: its first `index` file, or a 301 to the path with a `/`
//!   added when the request had none (as nginx);
//! - no file: the `fallback` backend when there is one (nginx's `try_files
//!   $uri $uri/ @app`), else 404; a method other than GET and HEAD goes to the
//!   fallback too, else 405;
//! - `precompressed` siblings (`F.br`, `F.zst`, `F.gz`) for a client that
//!   takes their coding (q-values, the configured order breaking ties), with
//!   `Vary: Accept-Encoding`; else, under `compression`, the file compressed
//!   on its way as a server's response would be (pipeline/compress.rs);
//! - `Last-Modified`, a strong `ETag` (nginx's form), `Accept-Ranges`; the
//!   preconditions (304, 412) and one range (206, 416) as the cache answers
//!   them (tollgate-wire `cache::range`);
//! - the content type by extension: the backend's `types`, then the
//!   built-in table, then `default_type`.
//!
//! The opens and reads are system calls on the worker thread, as nginx makes
//! them without `aio`: a file in the page cache costs microseconds, and a
//! thread hop per request would cost more. The body is sent by the session
//! (session/file.rs): `sendfile(2)` on plain TCP, reads of the file on TLS and
//! HTTP/2.

use crate::pipeline::compress::{self, Encoder};
use crate::pipeline::rescue::ProxyError;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;
use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use tollgate_config::{Coding, Compression, Config, StaticFiles};
use tollgate_wire::cache::policy::RequestFacts;
use tollgate_wire::cache::range::{self, RangeAnswer};
use tollgate_wire::clock::http_date;
use tollgate_wire::encoding;
use tollgate_wire::files::{self as wire, Precondition};
use tollgate_wire::h1::{Fields, RequestHead};

/// A `static` backend at run time: its settings and its root, open.
pub struct FilesRt {
    pub cfg: Arc<StaticFiles>,
    /// The root directory (`O_PATH`), every open's starting point.
    root: OwnedFd,
}

impl FilesRt {
    /// Opens the root of `cfg`, and checks that the kernel has `openat2`
    /// (Linux 5.6), without which no path could be held beneath it.
    pub fn open(cfg: &Arc<StaticFiles>) -> Result<Self, String> {
        let what = |e: Errno| format!("static root `{}`: {e}", cfg.root.display());
        let root = rustix::fs::open(&cfg.root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(what)?;
        match rustix::fs::openat2(&root, ".", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty(), beneath()) {
            Ok(_) => Ok(FilesRt { cfg: cfg.clone(), root }),
            Err(Errno::NOSYS) => Err(format!(
                "static root `{}`: this kernel has no openat2 (Linux 5.6 or later is needed to keep paths beneath the root)",
                cfg.root.display()
            )),
            Err(e) => Err(what(e)),
        }
    }

    /// `rel` (a path from tollgate-wire's `file_path`; empty: the root) opened
    /// beneath the root, and its status.
    fn open_beneath(&self, rel: &[u8]) -> Result<(OwnedFd, Stat), Errno> {
        let path = OsStr::from_bytes(if rel.is_empty() { b"." } else { rel });
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = rustix::fs::openat2(&self.root, path, flags, Mode::empty(), beneath())?;
        let st = rustix::fs::fstat(&fd)?;
        Ok((fd, st))
    }

    /// A regular file at `rel`, `None` when there is none (or it leads out).
    fn regular(&self, rel: &[u8]) -> Result<Option<(OwnedFd, Stat)>, ProxyError> {
        match self.open_beneath(rel) {
            Ok((fd, st)) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => Ok(Some((fd, st))),
            Ok(_) => Ok(None),
            Err(e) => gone(e).map(|()| None),
        }
    }
}

/// Every open stays beneath the root: no `..` past it, no absolute symbolic
/// link, no `/proc` magic link.
fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// An open that failed: `Ok` when that means no such file (missing, a
/// directory where a name was expected, a link out of the root or a loop),
/// else the error to answer.
fn gone(e: Errno) -> Result<(), ProxyError> {
    match e {
        Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV | Errno::NAMETOOLONG | Errno::ISDIR => Ok(()),
        Errno::ACCESS | Errno::PERM => Err(ProxyError::FileForbidden),
        e => {
            tracing::warn!("static file: {e}");
            Err(ProxyError::FileFailed)
        }
    }
}

/// The root of every `static` backend of `config`, in the order of its
/// backends (`None` for the others).
pub fn open_roots(config: &Config) -> Result<Vec<Option<Arc<FilesRt>>>, String> {
    config.backends.iter().map(|b| b.files.as_ref().map(|f| FilesRt::open(f).map(Arc::new)).transpose()).collect()
}

/// What a `static` backend makes of a request.
pub(crate) enum Outcome {
    Answer(Box<FileAnswer>),
    /// 301 to this location (a directory asked without its `/`).
    Redirect(String),
    /// No file answers: the fallback backend's, else 404 (or 405).
    Miss,
}

/// A response made from a file.
pub(crate) struct FileAnswer {
    pub(crate) status: u16,
    /// Every field but the framing ones (`Content-Length`, `Transfer-Encoding`).
    pub(crate) fields: Fields,
    /// The body's length: its `Content-Length` (a HEAD request's says what a
    /// GET would get); `None` when compressed on its way (chunked).
    pub(crate) length: Option<u64>,
    /// The bytes to send: none to HEAD and for 304, 412 and 416.
    pub(crate) body: Option<FileBody>,
    /// The body is compressed on its way; the fields say so already.
    pub(crate) encoder: Option<Box<Encoder>>,
}

/// The part of an open file a response sends.
pub(crate) struct FileBody {
    pub(crate) fd: OwnedFd,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// The most read from a file at once (for TLS, HTTP/2 and compression).
pub(crate) const PIECE: usize = 64 * 1024;

impl FileBody {
    /// Reads the next piece into `buf` (cleared first): at most [`PIECE`]
    /// bytes, none once the body is all read. A file that shrank under the
    /// response is an error (its `Content-Length` already went out).
    pub(crate) fn read_piece(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        let want = self.len.min(PIECE as u64) as usize;
        buf.clear();
        buf.resize(want, 0);
        let mut got = 0;
        while got < want {
            let n = rustix::io::pread(&self.fd, &mut buf[got..], self.offset + got as u64)?;
            if n == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file shrank"));
            }
            got += n;
        }
        self.offset += want as u64;
        self.len -= want as u64;
        Ok(want)
    }
}

/// Answers `head` from the files of `rt` (see the module's doc). `compression`
/// is the backend's or frontend's, for a file with no precompressed sibling.
pub(crate) fn serve(
    rt: &FilesRt,
    head: &RequestHead,
    compression: Option<&Compression>,
) -> Result<Outcome, ProxyError> {
    let cfg = &*rt.cfg;
    let method = head.method();
    if method != "GET" && method != "HEAD" {
        return if cfg.fallback.is_some() { Ok(Outcome::Miss) } else { Err(ProxyError::FileMethod) };
    }
    let path = wire::file_path(head.path_bytes()).map_err(|e| ProxyError::FilePath(e.as_str()))?;
    let Some((mut name, mut fd, mut st)) = rt
        .open_beneath(&path.rel)
        .map_or_else(|e| gone(e).map(|()| None), |(fd, st)| Ok(Some((path.rel.clone(), fd, st))))?
    else {
        return Ok(Outcome::Miss);
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory if !path.dir => {
            // The location is made of the path as resolved, never of the
            // request's own (`//evil.example/../dir` would send a browser to
            // another host).
            let query = head.target().split_once('?').map(|(_, q)| q);
            let mut location = format!("/{}/", encode_path(&path.rel));
            if location == "//" {
                location.pop();
            }
            if let Some(q) = query {
                location.push('?');
                location.push_str(q);
            }
            return Ok(Outcome::Redirect(location));
        }
        FileType::Directory => {
            let mut found = None;
            for index in &cfg.index {
                let mut rel = path.rel.clone();
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                rel.extend_from_slice(index.as_bytes());
                if let Some((f, s)) = rt.regular(&rel)? {
                    found = Some((rel, f, s));
                    break;
                }
            }
            let Some(f) = found else { return Ok(Outcome::Miss) };
            (name, fd, st) = f;
        }
        // "/a.html/" names a directory that is a file: none (as nginx).
        FileType::RegularFile if !path.dir => {}
        _ => return Ok(Outcome::Miss),
    }

    let mut fields = Fields::default();
    fields.append(b"content-type", content_type(cfg, &name).as_bytes());

    // -- a precompressed sibling, by the client's Accept-Encoding.
    let mut coded = None;
    if !cfg.precompressed.is_empty() {
        fields.append(b"vary", b"Accept-Encoding");
        let accept: Vec<&[u8]> = head.fields.get_all(b"accept-encoding").collect();
        let accepted = (!accept.is_empty()).then(|| encoding::parse_accept(&accept));
        let mut offered: Vec<Coding> = cfg.precompressed.clone();
        while let Some(c) = encoding::choose(accepted.as_deref(), &offered) {
            let mut sibling = name.clone();
            sibling.extend_from_slice(suffix(c).as_bytes());
            if let Some((f, s)) = rt.regular(&sibling)? {
                (fd, st) = (f, s);
                coded = Some(c);
                fields.append(b"content-encoding", c.token().as_bytes());
                break;
            }
            offered.retain(|o| *o != c);
        }
    }

    // -- validators, preconditions, range.
    let len = st.st_size.max(0) as u64;
    let mtime = st.st_mtime.max(0) as u64;
    let etag = wire::etag(mtime, len);
    fields.append(b"last-modified", http_date(mtime).as_bytes());
    fields.append(b"etag", etag.as_bytes());
    fields.append(b"accept-ranges", b"bytes");
    let meta = wire::file_meta(&etag, mtime);
    let req = RequestFacts::new(method, &head.fields);
    let is_head = method == "HEAD";
    let (status, offset, body_len) = match wire::precondition(&req, &meta) {
        Precondition::NotModified => (304, 0, 0),
        Precondition::Failed => (412, 0, 0),
        Precondition::Proceed => match range::answer(&req, &meta, len) {
            RangeAnswer::Full => (200, 0, len),
            RangeAnswer::Partial { first, last } => {
                fields.append(
                    b"content-range",
                    RangeAnswer::Partial { first, last }.content_range(len).unwrap_or_default().as_bytes(),
                );
                (206, first, last - first + 1)
            }
            r @ RangeAnswer::Unsatisfiable => {
                fields.append(b"content-range", r.content_range(len).unwrap_or_default().as_bytes());
                (416, 0, 0)
            }
        },
    };

    // -- compressed on its way, when no sibling was and the config says so.
    // A 304 says what the 200 would have (its weak ETag and Vary).
    let mut length = Some(body_len);
    let mut encoder = None;
    if coded.is_none()
        && matches!(status, 200 | 304)
        && len > 0
        && let Some(c) = compression
    {
        let sends_body = status == 200 && !is_head;
        encoder = compress::negotiate_fields(c, head, (200, sends_body), Some(len), &mut fields);
        if fields.get(b"content-encoding").is_some() {
            length = None;
        }
    }
    if matches!(status, 304 | 412 | 416) {
        length = Some(0);
        if status == 304 {
            // RFC 9110 section 15.4.5: a 304 has the validators, not the
            // representation's own metadata.
            for name in [&b"content-type"[..], b"content-encoding", b"accept-ranges"] {
                fields.remove(name);
            }
            length = None;
        }
    }
    let body =
        (!is_head && body_len > 0 && matches!(status, 200 | 206)).then_some(FileBody { fd, offset, len: body_len });
    Ok(Outcome::Answer(Box::new(FileAnswer { status, fields, length, body, encoder })))
}

/// `rel` as a URI path: every byte but unreserved ones, sub-delims, `:`,
/// `@` and `/` percent-encoded (RFC 3986 section 3.3).
fn encode_path(rel: &[u8]) -> String {
    let mut out = String::with_capacity(rel.len());
    for &b in rel {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The file name suffix of a precompressed sibling.
fn suffix(c: Coding) -> &'static str {
    match c {
        Coding::Br => ".br",
        Coding::Zstd => ".zst",
        Coding::Gzip => ".gz",
    }
}

/// The content type of the file `name`: the backend's `types` by extension,
/// the built-in table, `default_type`.
fn content_type<'a>(cfg: &'a StaticFiles, name: &[u8]) -> Cow<'a, str> {
    let ext = wire::extension(name);
    if let Some(t) = ext.as_deref().and_then(|e| cfg.types.get(e)) {
        return Cow::Borrowed(t);
    }
    ext.as_deref().and_then(wire::type_of_extension).unwrap_or(Cow::Borrowed(&cfg.default_type))
}
