//! Response heads as a server may send them, and the head written to the client.
//! No panic; what goes to the client (an interim head too) parses again with
//! the same status. (The check parses with httparse itself and room for more
//! fields than Tollgate reads, since the client head adds Date and Connection.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_wire::h1::{self, Parsed, ResponseHead};

/// The status of `out`, which must be one complete head and nothing more.
fn reparse(out: &[u8]) -> u16 {
    let mut fields = [httparse::EMPTY_HEADER; 512];
    let mut resp = httparse::Response::new(&mut fields);
    match resp.parse(out) {
        Ok(httparse::Status::Complete(n)) if n == out.len() => resp.code.unwrap_or_default(),
        other => panic!("the head sent on does not parse: {other:?}\n{}", String::from_utf8_lossy(out)),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut head = ResponseHead::default();
    let Ok(Parsed::Complete((), _)) = h1::parse_response(data, &mut head, 64 * 1024) else { return };
    if head.is_interim() {
        let mut out = Vec::new();
        head.write_interim(&mut out);
        assert_eq!(reparse(&out), head.status);
    }
    for is_head in [false, true] {
        let framing = head.framing(is_head);
        for close in [false, true] {
            let mut out = Vec::new();
            head.write_client(&mut out, framing, close, false);
            assert_eq!(reparse(&out), head.status);
        }
    }
});
