//! The ClientHello reader of tcp frontends (SNI routing) on arbitrary bytes:
//! no panic; a complete hello never claims more bytes than it was given, and
//! every prefix of it is partial; what follows it changes nothing; a server
//! name it returns is a lower-case DNS name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_wire::hello::{Hello, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(Hello::Complete { len, sni }) = parse(data) else { return };
    assert!(len <= data.len());
    for cut in 0..len {
        assert_eq!(parse(&data[..cut]), Ok(Hello::Partial));
    }
    assert_eq!(parse(&data[..len]), Ok(Hello::Complete { len, sni: sni.clone() }));
    if let Some(name) = sni {
        assert!(!name.is_empty() && name.len() <= 253 && !name.ends_with('.'));
        assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)));
    }
});
