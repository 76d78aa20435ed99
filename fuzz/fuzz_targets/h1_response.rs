//! Response heads as a server may send them, and the head written to the client.
//! No panic; what goes to the client parses again with the same status.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_proxy::h1::{self, Parsed, ResponseHead};

fuzz_target!(|data: &[u8]| {
    let mut head = ResponseHead::default();
    let Ok(Parsed::Complete((), _)) = h1::parse_response(data, &mut head, 64 * 1024) else { return };
    for is_head in [false, true] {
        let framing = head.framing(is_head);
        for close in [false, true] {
            let mut out = Vec::new();
            head.write_client(&mut out, framing, close, false);
            let mut again = ResponseHead::default();
            match h1::parse_response(&out, &mut again, 128 * 1024) {
                Ok(Parsed::Complete((), n)) => assert_eq!(n, out.len()),
                other => panic!("the client head does not parse: {other:?}\n{}", String::from_utf8_lossy(&out)),
            }
            assert_eq!(again.status, head.status);
        }
    }
});
