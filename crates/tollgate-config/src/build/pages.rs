//! Error pages: a file's bytes as the body of the responses Tollgate makes for
//! a status. A file in HAProxy's `errorfile` form (a status line and header
//! fields, then the body) is read as one: its body is sent, with its
//! Content-Type.

use crate::model::ErrorPage;
use std::path::Path;

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

pub(super) fn page(file: &Path, bytes: Vec<u8>) -> ErrorPage {
    if let Some((content_type, body)) = haproxy_form(&bytes) {
        return ErrorPage { content_type, body: body.into() };
    }
    let ext = file.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let content_type = match ext.as_deref() {
        Some("html") | Some("htm") => HTML,
        Some("json") => JSON,
        _ => TEXT,
    };
    ErrorPage { content_type, body: bytes.into() }
}

/// `HTTP/1.x <status> ...`, fields, an empty line, the body: the body and the
/// content type its `Content-Type` names (HTML when it names none, or another).
fn haproxy_form(bytes: &[u8]) -> Option<(&'static str, &[u8])> {
    if !bytes.starts_with(b"HTTP/1.") {
        return None;
    }
    let (head_len, sep) = match (find(bytes, b"\r\n\r\n"), find(bytes, b"\n\n")) {
        (Some(a), Some(b)) if b < a => (b, 2),
        (Some(a), _) => (a, 4),
        (None, Some(b)) => (b, 2),
        (None, None) => return None,
    };
    let head = String::from_utf8_lossy(&bytes[..head_len]);
    let content_type = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_ascii_lowercase());
    let content_type = match content_type.as_deref() {
        Some(t) if t.starts_with("application/json") => JSON,
        Some(t) if t.starts_with("text/plain") => TEXT,
        _ => HTML,
    };
    Some((content_type, &bytes[head_len + sep..]))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_files_and_haproxy_errorfiles() {
        let p = page(Path::new("e/503.html"), b"<h1>down</h1>".to_vec());
        assert_eq!((p.content_type, &p.body[..]), (HTML, &b"<h1>down</h1>"[..]));
        let p = page(Path::new("e/503.json"), b"{}".to_vec());
        assert_eq!(p.content_type, JSON);
        let f = b"HTTP/1.0 503 Service Unavailable\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: text/html\r\n\r\n<html><body><h1>503</h1></body></html>\n";
        let p = page(Path::new("/etc/haproxy/errors/503.http"), f.to_vec());
        assert_eq!((p.content_type, &p.body[..]), (HTML, &b"<html><body><h1>503</h1></body></html>\n"[..]));
        let p = page(Path::new("m.http"), b"HTTP/1.1 503 X\nContent-Type: application/json\n\n{\"down\":1}".to_vec());
        assert_eq!((p.content_type, &p.body[..]), (JSON, &b"{\"down\":1}"[..]));
        // A status line without the end of a head: the file as it is.
        let p = page(Path::new("x.txt"), b"HTTP/1.1 oops".to_vec());
        assert_eq!((p.content_type, &p.body[..]), (TEXT, &b"HTTP/1.1 oops"[..]));
    }
}
