//! Static files, the pure part: a request's path turned into a path under the
//! served directory (every way out refused), the validators a file gets, the
//! request's preconditions against them, and content types.
//!
//! The path is only the first of two guards: the proxy also opens the file
//! with `openat2(RESOLVE_BENEATH)` from the root's descriptor, so that a
//! symbolic link inside the root cannot lead out of it either.

use crate::cache::head::parse_date;
use crate::cache::policy::{self, EntryMeta, RequestFacts, first, has, list_members, strong_eq};
use std::borrow::Cow;

/// Why a request's path names no file under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not an origin-form path (`*`, or not starting with `/`).
    NotAPath,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A NUL byte (`%00`): no file name holds one.
    Nul,
    /// `%2F`: a slash inside a segment would make two.
    EncodedSlash,
    /// More `..` segments than there are segments before them.
    AboveRoot,
}

impl PathError {
    pub fn as_str(self) -> &'static str {
        match self {
            PathError::NotAPath => "not a path",
            PathError::BadEscape => "a bad percent-escape in the path",
            PathError::Nul => "a NUL in the path",
            PathError::EncodedSlash => "an encoded slash in the path",
            PathError::AboveRoot => "a path above the root",
        }
    }
}

/// A request path as a file's path relative to the served directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePath {
    /// Decoded segments joined with `/`: no empty, `.` or `..` segment, no
    /// leading `/`, no NUL. Empty for the root itself.
    pub rel: Vec<u8>,
    /// The request named a directory (its path ends with `/`, or with a `.`
    /// or `..` segment): its index file is looked for.
    pub dir: bool,
}

/// The most segments a path may have (more is answered as above the root).
const MAX_SEGMENTS: usize = 256;

/// Turns the path of a request target (no query) into a [`FilePath`]:
/// percent-decoded segment by segment (RFC 3986 section 2.1), so that `%2e%2e`
/// is the `..` it stands for (section 6.2.2.2) and is resolved as one
/// (section 5.2.4), and `%2F` is refused rather than taken for a separator.
pub fn file_path(path: &[u8]) -> Result<FilePath, PathError> {
    let Some(rest) = path.strip_prefix(b"/") else { return Err(PathError::NotAPath) };
    let mut segments: Vec<Vec<u8>> = Vec::new();
    let mut dir = true;
    for raw in rest.split(|b| *b == b'/') {
        let seg = decode(raw)?;
        dir = matches!(seg.as_slice(), b"" | b"." | b"..");
        match seg.as_slice() {
            b"" | b"." => {}
            b".." => {
                segments.pop().ok_or(PathError::AboveRoot)?;
            }
            _ if segments.len() >= MAX_SEGMENTS => return Err(PathError::AboveRoot),
            _ => segments.push(seg),
        }
    }
    Ok(FilePath { rel: segments.join(&b'/'), dir })
}

/// One segment, percent-decoded.
fn decode(raw: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let escaped = raw[i] == b'%';
        let b = match raw[i] {
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                let (Some(h), Some(l)) = (raw.get(i + 1).and_then(|c| hex(*c)), raw.get(i + 2).and_then(|c| hex(*c)))
                else {
                    return Err(PathError::BadEscape);
                };
                i += 2;
                (h * 16 + l) as u8
            }
            b => b,
        };
        match b {
            0 => return Err(PathError::Nul),
            b'/' if escaped => return Err(PathError::EncodedSlash),
            _ => out.push(b),
        }
        i += 1;
    }
    Ok(out)
}

/// A file's entity tag, as nginx makes it: its modification time (Unix
/// seconds) and size in hex, strong (the same bytes while both hold).
pub fn etag(mtime: u64, len: u64) -> String {
    format!("\"{mtime:x}-{len:x}\"")
}

/// What the precondition fields of a request (RFC 9110 section 13.2.2) make of
/// a file with `etag` and modification time `mtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Send the file (or its range).
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// The validators of a file as the cache policy's conditional rules take them.
pub fn file_meta(etag: &str, mtime: u64) -> EntryMeta {
    EntryMeta {
        status: 200,
        date: mtime,
        etag: Some(etag.into()),
        last_modified: Some((crate::clock::http_date(mtime).into(), mtime)),
        ..EntryMeta::default()
    }
}

/// RFC 9110 section 13.2.2, in its order: `If-Match` (strong comparison; `*`
/// matches the file, which exists), else `If-Unmodified-Since`; then
/// `If-None-Match` (weak comparison), else `If-Modified-Since` (GET and HEAD
/// only), as [`policy::client_wants_304`] reads them. A GET or HEAD that the
/// second step fails gets a 304, another method a 412.
pub fn precondition(req: &RequestFacts<'_>, meta: &EntryMeta) -> Precondition {
    let etag = meta.etag.as_deref().unwrap_or("");
    if has(req.headers, "if-match") {
        let mut any = false;
        req.headers.any_value("if-match", &mut |v| {
            any = list_members(v).any(|m| m == b"*" || strong_eq(etag, m));
            any
        });
        if !any {
            return Precondition::Failed;
        }
    } else if let Some(date) = first(req.headers, "if-unmodified-since").and_then(|v| parse_date(&v)) {
        let modified = meta.last_modified.as_ref().map_or(u64::MAX, |l| l.1);
        if modified > date {
            return Precondition::Failed;
        }
    }
    if policy::client_wants_304(req, meta) {
        return Precondition::NotModified;
    }
    Precondition::Proceed
}

/// The content type of a file named `name` (by its extension, the built-in
/// table of common types), with `; charset=utf-8` on text; `None` when the
/// extension is unknown.
pub fn content_type(name: &[u8]) -> Option<Cow<'static, str>> {
    type_of_extension(&extension(name)?)
}

/// [`content_type`] for an extension already taken from the name ([`extension`]).
pub fn type_of_extension(ext: &str) -> Option<Cow<'static, str>> {
    let t: &'static str = mime_guess::from_ext(ext).first_raw()?;
    Some(if t.starts_with("text/") { Cow::Owned(format!("{t}; charset=utf-8")) } else { Cow::Borrowed(t) })
}

/// The extension of the last segment of `name`, lower case, without its dot
/// (none for `.profile` or a name without one).
pub fn extension(name: &[u8]) -> Option<String> {
    let base = name.rsplit(|b| *b == b'/').next()?;
    let dot = base.iter().rposition(|b| *b == b'.').filter(|i| *i > 0)?;
    std::str::from_utf8(&base[dot + 1..]).ok().filter(|e| !e.is_empty()).map(str::to_ascii_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::Fields;

    fn ok(path: &str) -> (String, bool) {
        let p = file_path(path.as_bytes()).unwrap_or_else(|e| panic!("{path}: {e:?}"));
        (String::from_utf8(p.rel).unwrap(), p.dir)
    }

    #[test]
    fn paths_resolve_under_the_root() {
        assert_eq!(ok("/"), ("".into(), true));
        assert_eq!(ok("/index.html"), ("index.html".into(), false));
        assert_eq!(ok("/a/b/"), ("a/b".into(), true));
        assert_eq!(ok("//a//b"), ("a/b".into(), false));
        assert_eq!(ok("/a/./b"), ("a/b".into(), false));
        assert_eq!(ok("/a/../b"), ("b".into(), false));
        assert_eq!(ok("/a/b/.."), ("a".into(), true));
        assert_eq!(ok("/a/%2e%2E/b"), ("b".into(), false), "an encoded dot-segment is one");
        assert_eq!(ok("/hello%20world.txt"), ("hello world.txt".into(), false));
        assert_eq!(ok("/caf%C3%A9"), ("café".into(), false));
        assert_eq!(ok("/a.b./..c"), ("a.b./..c".into(), false), "dots in a name are not segments");
    }

    #[test]
    fn every_way_out_is_refused() {
        for (path, why) in [
            ("/..", PathError::AboveRoot),
            ("/../etc/passwd", PathError::AboveRoot),
            ("/a/../../etc/passwd", PathError::AboveRoot),
            ("/%2e%2e/etc/passwd", PathError::AboveRoot),
            ("/.%2E/etc/passwd", PathError::AboveRoot),
            ("/..%2fetc/passwd", PathError::EncodedSlash),
            ("/%2e%2e%2fetc%2fpasswd", PathError::EncodedSlash),
            ("/a%00.html", PathError::Nul),
            ("/a%0", PathError::BadEscape),
            ("/a%zz", PathError::BadEscape),
            ("*", PathError::NotAPath),
            ("etc/passwd", PathError::NotAPath),
        ] {
            assert_eq!(file_path(path.as_bytes()), Err(why), "{path}");
        }
        let deep = "/a".repeat(MAX_SEGMENTS + 1);
        assert_eq!(file_path(deep.as_bytes()), Err(PathError::AboveRoot));
        // A raw backslash is a name byte on Linux, never a separator.
        assert_eq!(ok("/a\\b"), ("a\\b".into(), false));
        assert_eq!(ok("/a%5c..%5c..%5cetc"), ("a\\..\\..\\etc".into(), false));
    }

    fn facts<'a>(method: &'a str, f: &'a Fields) -> RequestFacts<'a> {
        RequestFacts::new(method, f)
    }

    #[test]
    fn preconditions_in_the_rfcs_order() {
        let tag = etag(1_700_000_000, 811);
        assert_eq!(tag, "\"6553f100-32b\"");
        let meta = file_meta(&tag, 1_700_000_000);
        let lm = crate::clock::http_date(1_700_000_000);
        let later = crate::clock::http_date(1_700_000_100);
        let earlier = crate::clock::http_date(1_600_000_000);
        let check = |method: &str, fields: &[(&str, &str)]| {
            let mut f = Fields::default();
            for (n, v) in fields {
                f.append(n.as_bytes(), v.as_bytes());
            }
            precondition(&facts(method, &f), &meta)
        };
        use Precondition::*;
        assert_eq!(check("GET", &[]), Proceed);
        assert_eq!(check("GET", &[("if-none-match", &tag)]), NotModified);
        assert_eq!(check("GET", &[("if-none-match", &format!("W/{tag}"))]), NotModified, "weak comparison");
        assert_eq!(check("GET", &[("if-none-match", "\"other\", *")]), NotModified);
        assert_eq!(check("GET", &[("if-none-match", "\"other\"")]), Proceed);
        assert_eq!(check("GET", &[("if-modified-since", &lm)]), NotModified);
        assert_eq!(check("GET", &[("if-modified-since", &earlier)]), Proceed);
        assert_eq!(check("GET", &[("if-none-match", "\"other\""), ("if-modified-since", &later)]), Proceed);
        assert_eq!(check("GET", &[("if-match", &tag)]), Proceed);
        assert_eq!(check("GET", &[("if-match", "*")]), Proceed);
        assert_eq!(check("GET", &[("if-match", &format!("W/{tag}"))]), Failed, "strong comparison");
        assert_eq!(check("GET", &[("if-unmodified-since", &earlier)]), Failed);
        assert_eq!(check("GET", &[("if-unmodified-since", &lm)]), Proceed);
        assert_eq!(check("GET", &[("if-match", &tag), ("if-unmodified-since", &earlier)]), Proceed);
        assert_eq!(check("HEAD", &[("if-none-match", &tag)]), NotModified);
    }

    #[test]
    fn types_by_extension() {
        assert_eq!(content_type(b"a/index.html").as_deref(), Some("text/html; charset=utf-8"));
        assert_eq!(content_type(b"x.CSS").as_deref(), Some("text/css; charset=utf-8"));
        assert_eq!(content_type(b"logo.png").as_deref(), Some("image/png"));
        assert_eq!(content_type(b"f.woff2").as_deref(), Some("font/woff2"));
        assert_eq!(content_type(b"m.wasm").as_deref(), Some("application/wasm"));
        assert_eq!(content_type(b"README"), None);
        assert_eq!(content_type(b".profile"), None);
        assert_eq!(content_type(b"dir.d/file"), None);
        assert_eq!(extension(b"a/b.tar.GZ").as_deref(), Some("gz"));
    }
}
