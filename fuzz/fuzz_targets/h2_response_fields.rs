//! An HTTP/2 server's response head is loaded from its fields
//! (`response_from_fields`) rather than parsed from text: for every head that
//! HTTP/1.1 text can carry, both paths must accept or refuse it alike, and an
//! accepted one must be the same head (status, fields, framing, keep-alive,
//! 101), the text holding the framing field the loader adds (`chunked`, or
//! `content-length: 0` for a body that ended with the head).
//!
//! Input: lines; the first is the status (three digits), the second says
//! whether the stream ended with the head (`e`), each other line with a `:` a
//! field (name before it, value after). Inputs that text cannot carry (a name
//! that is empty or holds whitespace or CR, a CR in a value) are left out.
#![no_main]

mod field_lines;

use libfuzzer_sys::fuzz_target;
use tollgate_wire::h1::{self, Parsed, ResponseHead};

const MAX_HEAD: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let (Some(status), Some(end)) = (lines.next(), lines.next()) else { return };
    let ([a, b, c], true) = (status, status.iter().all(u8::is_ascii_digit)) else { return };
    let status = [a, b, c].iter().fold(0u16, |n, d| n * 10 + u16::from(*d - b'0'));
    let end_stream = end == b"e";
    let Some(fields) = field_lines::fields(lines) else { return };
    let mut text = format!("HTTP/1.1 {status} OK\r\n").into_bytes();
    for (name, value) in &fields {
        h1::push_field(&mut text, name, value);
    }
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    if !bodiless && !fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"content-length")) {
        let added: &[u8] = if end_stream { b"content-length: 0\r\n" } else { b"transfer-encoding: chunked\r\n" };
        text.extend_from_slice(added);
    }
    text.extend_from_slice(b"\r\n");

    let mut parsed = ResponseHead::default();
    let by_text = h1::parse_response(&text, &mut parsed, MAX_HEAD);
    let mut loaded = ResponseHead::default();
    let by_fields = h1::response_from_fields(&mut loaded, status, b"OK", fields.iter().copied(), end_stream, MAX_HEAD);
    match (&by_text, &by_fields) {
        (Ok(Parsed::Complete((), n)), Ok(())) => {
            assert_eq!(*n, text.len());
            assert_eq!((loaded.status, loaded.reason()), (parsed.status, parsed.reason()));
            assert!(loaded.fields.iter().eq(parsed.fields.iter()), "{}", String::from_utf8_lossy(&text));
            for head_request in [false, true] {
                assert_eq!(loaded.framing(head_request), parsed.framing(head_request));
            }
            assert_eq!(
                (loaded.server_closes, loaded.both_lengths, loaded.switches_protocols(), loaded.is_interim()),
                (parsed.server_closes, parsed.both_lengths, parsed.switches_protocols(), parsed.is_interim())
            );
        }
        (Err(_), Err(_)) => {}
        _ => panic!("text: {:?}, fields: {:?}\n{}", by_text.map(|_| ()), by_fields, String::from_utf8_lossy(&text)),
    }
});
