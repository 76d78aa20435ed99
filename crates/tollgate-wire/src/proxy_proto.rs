//! The PROXY protocol (HAProxy's spec, versions 1 and 2): a header a proxy sends
//! first on a connection to tell the next hop the original client and
//! destination addresses. Pure: encoding into a buffer, decoding from bytes.
//!
//! Written here rather than taken from a crate: the two formats are small and
//! fixed, the decoder must be strict and bounded (it reads untrusted bytes
//! before anything else on a connection), and it works on the connection's own
//! read buffer without copies.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which version to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The v2 signature: the 12 bytes every v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 header is at most 107 bytes, CRLF included.
pub const V1_MAX: usize = 107;

/// Both addresses in the same family (an IPv4-mapped IPv6 address counts as
/// IPv4), as both formats require; `None` when they cannot be.
fn same_family(src: SocketAddr, dst: SocketAddr) -> Option<(SocketAddr, SocketAddr)> {
    let canon = |a: SocketAddr| match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    };
    let (s, d) = (canon(src), canon(dst));
    match (s.ip(), d.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => Some((s, d)),
        // Mixed families: send the IPv4 one as mapped IPv6.
        (IpAddr::V4(v4), IpAddr::V6(_)) => Some((SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), s.port()), d)),
        (IpAddr::V6(_), IpAddr::V4(v4)) => Some((s, SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), d.port()))),
    }
}

/// Appends the header that says the connection came from `src` to `dst`.
pub fn encode(version: Version, src: SocketAddr, dst: SocketAddr, out: &mut Vec<u8>) {
    let (src, dst) = same_family(src, dst).unwrap_or((src, dst));
    match version {
        Version::V1 => {
            use std::io::Write;
            let fam = if src.is_ipv4() { "TCP4" } else { "TCP6" };
            let _ = write!(out, "PROXY {fam} {} {} {} {}\r\n", src.ip(), dst.ip(), src.port(), dst.port());
        }
        Version::V2 => {
            out.extend_from_slice(&V2_SIGNATURE);
            out.push(0x21); // version 2, PROXY command
            match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    out.push(0x11); // AF_INET, STREAM
                    out.extend_from_slice(&12u16.to_be_bytes());
                    out.extend_from_slice(&s.octets());
                    out.extend_from_slice(&d.octets());
                }
                (s, d) => {
                    let v6 = |a: IpAddr| match a {
                        IpAddr::V6(v) => v,
                        IpAddr::V4(v) => v.to_ipv6_mapped(),
                    };
                    out.push(0x21); // AF_INET6, STREAM
                    out.extend_from_slice(&36u16.to_be_bytes());
                    out.extend_from_slice(&v6(s).octets());
                    out.extend_from_slice(&v6(d).octets());
                }
            }
            out.extend_from_slice(&src.port().to_be_bytes());
            out.extend_from_slice(&dst.port().to_be_bytes());
        }
    }
}

/// Appends a header that carries no addresses: v1 `UNKNOWN`, v2 `LOCAL`, which
/// the spec reserves for connections the proxy makes on its own (health checks).
pub fn encode_local(version: Version, out: &mut Vec<u8>) {
    match version {
        Version::V1 => out.extend_from_slice(b"PROXY UNKNOWN\r\n"),
        Version::V2 => {
            out.extend_from_slice(&V2_SIGNATURE);
            out.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
        }
    }
}

/// The version a config names.
pub fn version_of(p: tollgate_config::ProxyProtocol) -> Version {
    match p {
        tollgate_config::ProxyProtocol::V1 => Version::V1,
        tollgate_config::ProxyProtocol::V2 => Version::V2,
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes the header took at the start of the buffer.
    pub len: usize,
    /// The original client and destination; `None` for v1 `UNKNOWN` and v2
    /// `LOCAL` or an unspecified family (the connection's own addresses apply).
    pub addrs: Option<(SocketAddr, SocketAddr)>,
}

/// What [`decode`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    Complete(Header),
    /// More bytes are needed (never more than 16 + 65535 in all).
    Partial,
}

/// Decodes a PROXY header (v1 or v2) at the start of `buf`. Anything else, or a
/// header that breaks the spec, is an error naming why.
pub fn decode(buf: &[u8]) -> Result<Decoded, &'static str> {
    if buf.is_empty() {
        return Ok(Decoded::Partial);
    }
    let sig = &V2_SIGNATURE[..buf.len().min(12)];
    if buf[..sig.len()] == *sig {
        return if buf.len() < 16 { Ok(Decoded::Partial) } else { decode_v2(buf) };
    }
    let v1 = b"PROXY ";
    if buf[..buf.len().min(6)] == v1[..buf.len().min(6)] {
        return decode_v1(buf);
    }
    Err("not-a-proxy-header")
}

fn decode_v1(buf: &[u8]) -> Result<Decoded, &'static str> {
    let Some(end) = buf.iter().take(V1_MAX).position(|b| *b == b'\n') else {
        return if buf.len() >= V1_MAX { Err("proxy-v1-too-long") } else { Ok(Decoded::Partial) };
    };
    if end == 0 || buf[end - 1] != b'\r' {
        return Err("proxy-v1-bad-line-end");
    }
    let line = std::str::from_utf8(&buf[..end - 1]).map_err(|_| "proxy-v1-not-ascii")?;
    let mut parts = line.split(' ');
    let (Some("PROXY"), Some(fam)) = (parts.next(), parts.next()) else {
        return Err("proxy-v1-malformed");
    };
    let len = end + 1;
    if fam == "UNKNOWN" {
        // The rest of the line is to be ignored.
        return Ok(Decoded::Complete(Header { len, addrs: None }));
    }
    let fields: Vec<&str> = parts.collect();
    let [s, d, sp, dp] = fields[..] else { return Err("proxy-v1-malformed") };
    let ip = |t: &str| -> Result<IpAddr, &'static str> {
        match fam {
            "TCP4" => t.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| "proxy-v1-bad-address"),
            "TCP6" => t.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| "proxy-v1-bad-address"),
            _ => Err("proxy-v1-bad-family"),
        }
    };
    // Ports: decimal, no sign, no leading zeros (the spec's "0" or 1..65535).
    let port = |t: &str| -> Result<u16, &'static str> {
        if t.is_empty() || (t.len() > 1 && t.starts_with('0')) || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err("proxy-v1-bad-port");
        }
        t.parse().map_err(|_| "proxy-v1-bad-port")
    };
    let src = SocketAddr::new(ip(s)?, port(sp)?);
    let dst = SocketAddr::new(ip(d)?, port(dp)?);
    Ok(Decoded::Complete(Header { len, addrs: Some((src, dst)) }))
}

fn decode_v2(buf: &[u8]) -> Result<Decoded, &'static str> {
    let ver_cmd = buf[12];
    if ver_cmd >> 4 != 2 {
        return Err("proxy-v2-bad-version");
    }
    let fam = buf[13];
    let body_len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    let len = 16 + body_len;
    if buf.len() < len {
        return Ok(Decoded::Partial);
    }
    let body = &buf[16..len];
    match ver_cmd & 0x0f {
        // LOCAL: health checks and the like; the connection's own addresses apply.
        0x0 => return Ok(Decoded::Complete(Header { len, addrs: None })),
        0x1 => {}
        _ => return Err("proxy-v2-bad-command"),
    }
    let addrs = match fam {
        0x00 => None,
        0x11 => {
            if body.len() < 12 {
                return Err("proxy-v2-short-address");
            }
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(body[o], body[o + 1], body[o + 2], body[o + 3]));
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            Some((SocketAddr::new(ip(0), port(8)), SocketAddr::new(ip(4), port(10))))
        }
        0x21 => {
            if body.len() < 36 {
                return Err("proxy-v2-short-address");
            }
            let ip = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            Some((SocketAddr::new(ip(0), port(32)), SocketAddr::new(ip(16), port(34))))
        }
        // UDP, Unix sockets: not for an HTTP proxy.
        _ => return Err("proxy-v2-unsupported-family"),
    };
    Ok(Decoded::Complete(Header { len, addrs }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_encodes_as_the_spec_shows() {
        let mut out = Vec::new();
        encode(Version::V1, sa("192.168.0.1:56324"), sa("192.168.0.11:443"), &mut out);
        assert_eq!(out, b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
        out.clear();
        encode(Version::V1, sa("[2001:db8::1]:5000"), sa("[::1]:80"), &mut out);
        assert_eq!(out, b"PROXY TCP6 2001:db8::1 ::1 5000 80\r\n");
        // An IPv4-mapped client on an IPv4 listener is sent as IPv4.
        out.clear();
        encode(Version::V1, sa("[::ffff:10.0.0.1]:1"), sa("10.0.0.2:2"), &mut out);
        assert_eq!(out, b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n");
    }

    #[test]
    fn encode_then_decode_gives_the_addresses_back() {
        for v in [Version::V1, Version::V2] {
            for (s, d) in [("1.2.3.4:5", "6.7.8.9:10"), ("[2001:db8::7]:65535", "[2001:db8::8]:0")] {
                let mut out = Vec::new();
                encode(v, sa(s), sa(d), &mut out);
                out.extend_from_slice(b"GET / HTTP/1.1\r\n");
                let Ok(Decoded::Complete(h)) = decode(&out) else { panic!("{v:?} {s}") };
                assert_eq!(h.addrs, Some((sa(s), sa(d))));
                assert_eq!(&out[h.len..], b"GET / HTTP/1.1\r\n");
                // Every prefix is partial, never an error.
                for cut in 0..h.len {
                    assert_eq!(decode(&out[..cut]), Ok(Decoded::Partial), "{v:?} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn v2_local_unknown_and_tlvs() {
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
        assert_eq!(decode(&local), Ok(Decoded::Complete(Header { len: 16, addrs: None })));
        // TLVs after the addresses are skipped with the declared length.
        let mut out = Vec::new();
        encode(Version::V2, sa("1.1.1.1:1"), sa("2.2.2.2:2"), &mut out);
        out[15] = 12 + 5;
        out.extend_from_slice(&[0x04, 0x00, 0x02, 0xaa, 0xbb]);
        let Ok(Decoded::Complete(h)) = decode(&out) else { panic!() };
        assert_eq!((h.len, h.addrs.unwrap().0), (33, sa("1.1.1.1:1")));
        assert_eq!(decode(b"PROXY UNKNOWN whatever\r\n"), Ok(Decoded::Complete(Header { len: 24, addrs: None })));
    }

    #[test]
    fn local_headers_decode_without_addresses() {
        for v in [Version::V1, Version::V2] {
            let mut out = Vec::new();
            encode_local(v, &mut out);
            let Ok(Decoded::Complete(h)) = decode(&out) else { panic!("{v:?}") };
            assert_eq!((h.len, h.addrs), (out.len(), None));
        }
    }

    #[test]
    fn malformed_headers_are_refused_with_a_reason() {
        let cases: [(&[u8], &str); 10] = [
            (b"GET / HTTP/1.1\r\n", "not-a-proxy-header"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "proxy-v1-bad-line-end"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "proxy-v1-malformed"),
            (b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", "proxy-v1-bad-address"),
            (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "proxy-v1-bad-family"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "proxy-v1-bad-port"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "proxy-v1-bad-port"),
            (b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "proxy-v1-malformed"),
            (b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0c", "proxy-v2-bad-version"),
            (b"\r\n\r\n\0\r\nQUIT\n\x22\x11\x00\x00", "proxy-v2-bad-command"),
        ];
        for (bytes, why) in cases {
            assert_eq!(decode(bytes), Err(why), "{}", String::from_utf8_lossy(bytes));
        }
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
        assert_eq!(decode(&long), Err("proxy-v1-too-long"));
        let mut short = V2_SIGNATURE.to_vec();
        short.extend_from_slice(&[0x21, 0x11, 0x00, 0x04, 1, 2, 3, 4]);
        assert_eq!(decode(&short), Err("proxy-v2-short-address"));
        let mut unix = V2_SIGNATURE.to_vec();
        unix.extend_from_slice(&[0x21, 0x31, 0x00, 0x00]);
        assert_eq!(decode(&unix), Err("proxy-v2-unsupported-family"));
    }
}
