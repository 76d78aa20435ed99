//! Request heads as a client may send them: the parser's checks, the header edits
//! and X-Forwarded-*, and the head sent to a server. No panic; an accepted head
//! goes out with no hop-by-hop field, and what goes out parses again as the same
//! request: the same framing, one Content-Length at most, and an Upgrade only
//! to an allowed protocol.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_wire::h1::{self, Parsed, RequestHead};
use tollgate_wire::headers;

fuzz_target!(|data: &[u8]| {
    let mut head = RequestHead::default();
    let Ok(Parsed::Complete((), len)) = h1::parse_request(data, &mut head, 100, 64 * 1024, 8 * 1024) else { return };
    assert!(len <= data.len());
    let _ = headers::routing_host(head.fields.get(b"host").unwrap_or(b""));
    headers::add_forwarded(&mut head.fields, "192.0.2.1".parse().unwrap(), 8080, "http");
    head.keep_upgrades(|p| p.eq_ignore_ascii_case(b"websocket"));
    let mut out = Vec::new();
    head.write_upstream(&mut out, "127.0.0.1:80".parse().unwrap());
    let mut again = RequestHead::default();
    match h1::parse_request(&out, &mut again, 200, 128 * 1024, 16 * 1024) {
        Ok(Parsed::Complete((), n)) => assert_eq!(n, out.len()),
        other => panic!("the head sent on does not parse: {other:?}\n{}", String::from_utf8_lossy(&out)),
    }
    assert_eq!(again.method(), head.method());
    assert_eq!(again.target(), head.target());
    assert_eq!(again.framing(), head.framing());
    assert!(again.fields.get_all(b"content-length").count() <= 1, "{}", String::from_utf8_lossy(&out));
    assert_eq!(again.upgrade, head.upgrade);
    if again.upgrade {
        let offered = again.fields.get_all(b"upgrade").flat_map(|v| v.split(|&b| b == b','));
        let mut offered = offered.map(<[u8]>::trim_ascii).filter(|p| !p.is_empty());
        assert!(offered.all(|p| p.eq_ignore_ascii_case(b"websocket")), "{}", String::from_utf8_lossy(&out));
    }
    for (name, _) in again.fields.iter() {
        let upgrade = head.upgrade && (name.eq_ignore_ascii_case(b"upgrade") || name == b"connection");
        assert!(
            !h1::is_hop_by_hop(name)
                || (head.framing() == h1::Framing::Chunked && name == b"transfer-encoding")
                || upgrade,
            "{} survived",
            String::from_utf8_lossy(name)
        );
    }
});
