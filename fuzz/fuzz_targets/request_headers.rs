//! The header rules Tollgate applies itself (hyper parses the request): Host
//! validation, Transfer-Encoding counting, hop-by-hop removal and X-Forwarded-*,
//! on arbitrary header lines. No panic; hop-by-hop fields never survive.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use tollgate_proxy::headers;

fuzz_target!(|data: &[u8]| {
    let mut map = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(line[colon + 1..].trim_ascii()))
        else {
            continue;
        };
        map.append(name, value);
    }
    let _ = headers::routing_host(data);
    let _ = headers::chunked_count(&map);
    headers::strip_hop_by_hop(&mut map);
    for h in ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"] {
        assert!(!map.contains_key(h), "{h} survived");
    }
    headers::add_forwarded(&mut map, "192.0.2.1".parse().unwrap(), 8080, "http");
    assert!(map.contains_key("x-forwarded-for"));
});
