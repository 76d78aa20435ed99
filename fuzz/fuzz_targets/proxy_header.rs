//! The PROXY protocol decoder on arbitrary bytes: no panic; a complete header
//! never claims more bytes than it was given; every prefix of a complete header
//! is partial; and what it decodes re-encodes to a header that decodes the same
//! (IPv4-mapped IPv6 addresses may come back as IPv4: the encoder writes a pair
//! of them as TCP4).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use tollgate_wire::proxy_proto::{Decoded, Version, decode, encode};

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

fuzz_target!(|data: &[u8]| {
    let Ok(Decoded::Complete(h)) = decode(data) else { return };
    assert!(h.len <= data.len());
    for cut in 0..h.len {
        assert_eq!(decode(&data[..cut]), Ok(Decoded::Partial));
    }
    if let Some((src, dst)) = h.addrs {
        for v in [Version::V1, Version::V2] {
            let mut out = Vec::new();
            encode(v, src, dst, &mut out);
            let Ok(Decoded::Complete(again)) = decode(&out) else { panic!("re-encoded header does not decode") };
            assert_eq!(again.len, out.len());
            let (s, d) = again.addrs.expect("addresses");
            assert_eq!((canonical(s), canonical(d)), (canonical(src), canonical(dst)));
        }
    }
});
