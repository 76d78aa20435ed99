//! The PROXY protocol decoder on arbitrary bytes: no panic; a complete header
//! never claims more bytes than it was given; every prefix of a complete header
//! is partial; and what it decodes re-encodes to a header that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_proxy::proxy_proto::{Decoded, Version, decode, encode};

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
            assert_eq!(again.addrs, Some((src, dst)));
        }
    }
});
