//! An HTTP/2 request's head is loaded from its fields (`request_from_fields`)
//! rather than parsed from text: for every head that HTTP/1.1 text can carry,
//! both paths must accept or refuse it alike, and an accepted one must be the
//! same head (method, target, fields, framing, upgrade, Expect, close), so no
//! request passes the checks on one path that the other would refuse.
//!
//! Input: lines; the first is the method, the second the target, each other
//! line with a `:` a field (name before it, value after). Inputs that text
//! cannot carry (a space or CR in the method or target, a name that is empty
//! or holds whitespace or CR, a CR in a value) are left out.
#![no_main]

mod field_lines;

use libfuzzer_sys::fuzz_target;
use tollgate_wire::h1::{self, Parsed, RequestHead};

const LIMITS: (usize, usize, usize) = (50, 4096, 2048);

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let (Some(method), Some(target)) = (lines.next(), lines.next()) else { return };
    if method.iter().chain(target).any(|b| matches!(b, b' ' | b'\r' | b'\t')) {
        return;
    }
    let Some(fields) = field_lines::fields(lines) else { return };
    let mut text = Vec::new();
    text.extend_from_slice(method);
    text.push(b' ');
    text.extend_from_slice(target);
    text.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &fields {
        h1::push_field(&mut text, name, value);
    }
    text.extend_from_slice(b"\r\n");

    let (max_headers, max_head, max_uri) = LIMITS;
    let mut parsed = RequestHead::default();
    let by_text = h1::parse_request(&text, &mut parsed, max_headers, max_head, max_uri);
    let mut loaded = RequestHead::default();
    let by_fields = h1::request_from_fields(&mut loaded, method, target, fields.iter().copied(), LIMITS);
    match (&by_text, &by_fields) {
        (Ok(Parsed::Complete((), n)), Ok(size)) => {
            assert_eq!(*n, text.len());
            assert_eq!(*size, text.len());
            assert_eq!((loaded.method(), loaded.target()), (parsed.method(), parsed.target()));
            assert!(loaded.fields.iter().eq(parsed.fields.iter()), "{}", String::from_utf8_lossy(&text));
            assert_eq!(
                (loaded.framing(), loaded.upgrade, loaded.expect_continue, loaded.close),
                (parsed.framing(), parsed.upgrade, parsed.expect_continue, parsed.close)
            );
        }
        (Err(_), Err(_)) => {}
        // A head the text does not hold whole (a partial parse) cannot be.
        _ => panic!("text: {:?}, fields: {:?}\n{}", by_text.as_ref().map(|_| ()), by_fields.map(|_| ()), String::from_utf8_lossy(&text)),
    }
});
