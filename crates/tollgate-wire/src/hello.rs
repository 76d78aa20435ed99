//! The server name (SNI) of a TLS ClientHello, read from the bytes a client
//! sends first, without taking part in the handshake: a tcp frontend routes by
//! it and then forwards the same bytes to the server it chose. Pure: bytes in,
//! a verdict out.
//!
//! Strict, as the PROXY header decoder is: it reads untrusted bytes before
//! anything else on a connection. Handshake records only (RFC 8446 section
//! 5.1: version 3.x, 1..=2^14 bytes each), the ClientHello possibly spread over
//! several of them and ending with the last; every length inside within its
//! parent's; no extension twice; one `host_name` in the server_name extension
//! (RFC 6066 section 3), an ASCII DNS name without a trailing dot and not an IP
//! literal. Anything else is an error naming why, and the caller routes as for
//! a client that sent no name.

use std::borrow::Cow;

/// The most bytes read from a connection's start while looking for a
/// ClientHello (HAProxy reads it within one 16 KiB buffer, `tune.bufsize`).
pub const MAX_PEEK: usize = 16 * 1024;

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const MAX_RECORD: usize = 1 << 14;
const SERVER_NAME: u16 = 0;
const HOST_NAME: u8 = 0;

/// What [`parse`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// A whole ClientHello in the first `len` bytes, asking for `sni`
    /// (lower-case; `None`: the client named no server).
    Complete { len: usize, sni: Option<String> },
    /// A ClientHello so far: more bytes are needed.
    Partial,
}

/// Reads the ClientHello at the start of `buf`: its server name once it is
/// complete, [`Hello::Partial`] while every byte so far may begin one, or why
/// it is not one.
pub fn parse(buf: &[u8]) -> Result<Hello, &'static str> {
    let mut message: Cow<'_, [u8]> = Cow::Borrowed(&[]);
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        match rest.first() {
            None => return Ok(Hello::Partial),
            Some(&HANDSHAKE) => {}
            Some(_) if pos == 0 => return Err("not-tls"),
            Some(_) => return Err("hello-interrupted"),
        }
        if rest.get(1).is_some_and(|v| *v != 3) || rest.get(2).is_some_and(|v| *v > 4) {
            return Err("bad-record-version");
        }
        let Some(len) = rest.get(3..5).map(|l| u16::from_be_bytes([l[0], l[1]]) as usize) else {
            return Ok(Hello::Partial);
        };
        if len == 0 || len > MAX_RECORD {
            return Err("bad-record-length");
        }
        let Some(fragment) = rest.get(5..5 + len) else { return Ok(Hello::Partial) };
        pos += 5 + len;
        message = match message {
            Cow::Borrowed([]) => Cow::Borrowed(fragment),
            m => Cow::Owned([&m[..], fragment].concat()),
        };
        let Some(head) = message.get(..4) else { continue };
        if head[0] != CLIENT_HELLO {
            return Err("not-a-client-hello");
        }
        let body_len = u32::from_be_bytes([0, head[1], head[2], head[3]]) as usize;
        match (message.len() - 4).cmp(&body_len) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Greater => return Err("data-after-hello"),
            std::cmp::Ordering::Equal => {
                let sni = client_hello(&message[4..])?;
                return Ok(Hello::Complete { len: pos, sni });
            }
        }
    }
}

/// A cursor over a message whose every length must fit in what holds it.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, why: &'static str) -> Result<&'a [u8], &'static str> {
        let Some((head, tail)) = self.0.split_at_checked(n) else { return Err(why) };
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self, why: &'static str) -> Result<u8, &'static str> {
        Ok(self.take(1, why)?[0])
    }

    fn u16(&mut self, why: &'static str) -> Result<u16, &'static str> {
        let b = self.take(2, why)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self, why: &'static str) -> Result<&'a [u8], &'static str> {
        let n = self.u8(why)? as usize;
        self.take(n, why)
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self, why: &'static str) -> Result<&'a [u8], &'static str> {
        let n = self.u16(why)? as usize;
        self.take(n, why)
    }
}

/// The body of a ClientHello (RFC 8446 section 4.1.2; RFC 5246 section
/// 7.4.1.2 for hellos without extensions).
fn client_hello(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader(body);
    if r.u16("short-hello")? >> 8 != 3 {
        return Err("bad-client-version");
    }
    r.take(32, "short-hello")?;
    if r.vec8("bad-session-id")?.len() > 32 {
        return Err("bad-session-id");
    }
    let suites = r.vec16("bad-cipher-suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err("bad-cipher-suites");
    }
    if r.vec8("bad-compression-methods")?.is_empty() {
        return Err("bad-compression-methods");
    }
    if r.0.is_empty() {
        return Ok(None);
    }
    let mut exts = Reader(r.vec16("bad-extensions")?);
    if !r.0.is_empty() {
        return Err("data-after-extensions");
    }
    let mut seen = Vec::new();
    let mut sni = None;
    while !exts.0.is_empty() {
        let kind = exts.u16("bad-extension")?;
        let data = exts.vec16("bad-extension")?;
        seen.push(kind);
        if kind == SERVER_NAME {
            sni = server_name(data)?;
        }
    }
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err("duplicate-extension");
    }
    Ok(sni)
}

/// The server_name extension of a ClientHello (RFC 6066 section 3): its one
/// `host_name`, lower-case. Entries of other name types are passed over.
fn server_name(data: &[u8]) -> Result<Option<String>, &'static str> {
    let mut ext = Reader(data);
    let mut list = Reader(ext.vec16("bad-server-name-list")?);
    if !ext.0.is_empty() || list.0.is_empty() {
        return Err("bad-server-name-list");
    }
    let mut host = None;
    while !list.0.is_empty() {
        let kind = list.u8("bad-server-name-list")?;
        let name = list.vec16("bad-server-name-list")?;
        if kind != HOST_NAME {
            continue;
        }
        if host.is_some() {
            return Err("two-host-names");
        }
        if !valid_host_name(name) {
            return Err("bad-host-name");
        }
        host = Some(name.to_ascii_lowercase());
    }
    // Checked ASCII just above.
    Ok(host.map(|h| String::from_utf8(h).unwrap_or_default()))
}

/// An ASCII DNS name: 1..=253 bytes, dot-separated labels of 1..=63 letters,
/// digits, `-` (not first or last) or `_`, no trailing dot, not an IPv4 literal.
fn valid_host_name(name: &[u8]) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    let labels_ok = name.split(|b| *b == b'.').all(|label| {
        (1..=63).contains(&label.len())
            && label.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            && label.first() != Some(&b'-')
            && label.last() != Some(&b'-')
    });
    let ipv4 = std::str::from_utf8(name).is_ok_and(|s| s.parse::<std::net::Ipv4Addr>().is_ok());
    labels_ok && !ipv4
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use std::sync::Arc;

    /// The first bytes a rustls client sends for `name` (a DNS name, or an IP
    /// address, for which it sends no SNI), offering `versions`.
    fn rustls_hello(name: &str, versions: &[&'static rustls::SupportedProtocolVersion]) -> Vec<u8> {
        let provider = Arc::new(tollgate_config::tls_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut conn =
            rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from(name.to_string()).unwrap()).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    /// `hello` (one record) as records of at most `size` bytes of the message each.
    fn refragment(hello: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in hello[5..].chunks(size) {
            out.extend_from_slice(&[HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    fn with_len16(body: &[u8]) -> Vec<u8> {
        [&(body.len() as u16).to_be_bytes()[..], body].concat()
    }

    /// A ClientHello record with `extensions` (type, data); `None`: no
    /// extensions block at all.
    fn hello(extensions: Option<&[(u16, Vec<u8>)]>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        if let Some(exts) = extensions {
            let mut all = Vec::new();
            for (kind, data) in exts {
                all.extend_from_slice(&kind.to_be_bytes());
                all.extend_from_slice(&with_len16(data));
            }
            body.extend_from_slice(&with_len16(&all));
        }
        let mut msg = vec![CLIENT_HELLO, 0];
        msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
        msg.extend_from_slice(&body);
        [&[HANDSHAKE, 3, 1][..], &with_len16(&msg)].concat()
    }

    /// A server_name extension's data listing `names` (type, name).
    fn sni_ext(names: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (kind, name) in names {
            list.push(*kind);
            list.extend_from_slice(&with_len16(name));
        }
        with_len16(&list)
    }

    fn sni_of(bytes: &[u8]) -> Result<Option<String>, &'static str> {
        match parse(bytes)? {
            Hello::Complete { len, sni } => {
                assert_eq!(len, bytes.len());
                Ok(sni)
            }
            Hello::Partial => panic!("partial"),
        }
    }

    #[test]
    fn rustls_hellos_tls13_and_tls12_name_their_server() {
        for versions in [rustls::ALL_VERSIONS, &[&rustls::version::TLS12]] {
            let bytes = rustls_hello("Db.Example.com", versions);
            assert_eq!(sni_of(&bytes), Ok(Some("db.example.com".into())));
            assert_eq!(sni_of(&rustls_hello("127.0.0.1", versions)), Ok(None), "an IP address sends no SNI");
        }
    }

    #[test]
    fn every_prefix_is_partial_and_what_follows_is_not_read() {
        let bytes = rustls_hello("a.example.com", rustls::ALL_VERSIONS);
        for cut in 0..bytes.len() {
            assert_eq!(parse(&bytes[..cut]), Ok(Hello::Partial), "cut at {cut}");
        }
        let mut more = bytes.clone();
        more.extend_from_slice(b"\x17\x03\x03\x00\x05early");
        assert_eq!(parse(&more), Ok(Hello::Complete { len: bytes.len(), sni: Some("a.example.com".into()) }));
    }

    #[test]
    fn a_hello_over_several_records_is_reassembled() {
        let bytes = rustls_hello("split.example.com", rustls::ALL_VERSIONS);
        for size in [1, 3, 100, 1000] {
            let split = refragment(&bytes, size);
            assert_eq!(sni_of(&split), Ok(Some("split.example.com".into())), "records of {size}");
            assert_eq!(parse(&split[..split.len() - 1]), Ok(Hello::Partial));
        }
    }

    #[test]
    fn hand_made_hellos() {
        assert_eq!(sni_of(&hello(None)), Ok(None), "no extensions (TLS 1.2 and before)");
        assert_eq!(sni_of(&hello(Some(&[]))), Ok(None));
        let one = sni_ext(&[(0, b"WWW.Example.ORG")]);
        assert_eq!(
            sni_of(&hello(Some(&[(10, vec![0, 2, 0, 29]), (0, one.clone())]))),
            Ok(Some("www.example.org".into()))
        );
        let other_type = sni_ext(&[(7, b"whatever"), (0, b"x_y.test")]);
        assert_eq!(sni_of(&hello(Some(&[(0, other_type)]))), Ok(Some("x_y.test".into())));
        assert_eq!(sni_of(&hello(Some(&[(0, sni_ext(&[(7, b"only")]))]))), Ok(None));
    }

    #[test]
    fn strict_about_names_and_lengths() {
        let bad = |exts: &[(u16, Vec<u8>)]| sni_of(&hello(Some(exts))).unwrap_err();
        let one = |name: &[u8]| vec![(0u16, sni_ext(&[(0, name)]))];
        for name in
            [&b"example.com."[..], b"", b"-a.example", b"a-.example", b"a..b", b"10.0.0.1", b"a b", b"caf\xc3\xa9"]
        {
            assert_eq!(bad(&one(name)), "bad-host-name", "{:?}", String::from_utf8_lossy(name));
        }
        assert_eq!(bad(&one(&[b'a'; 254])), "bad-host-name");
        let long_label = [[b'a'; 64].as_slice(), b".com"].concat();
        assert_eq!(bad(&one(&long_label)), "bad-host-name");
        assert_eq!(bad(&[(0, sni_ext(&[(0, b"a.test"), (0, b"b.test")]))]), "two-host-names");
        assert_eq!(bad(&[(0, sni_ext(&[(0, b"a.test")])), (0, sni_ext(&[(0, b"a.test")]))]), "duplicate-extension");
        assert_eq!(bad(&[(0, vec![])]), "bad-server-name-list", "empty extension");
        assert_eq!(bad(&[(0, vec![0, 0])]), "bad-server-name-list", "empty list");
        let mut trailing = sni_ext(&[(0, b"a.test")]);
        trailing.push(0);
        assert_eq!(bad(&[(0, trailing)]), "bad-server-name-list");
        assert_eq!(bad(&[(0, vec![0, 9, 0, 0, 6, b'a'])]), "bad-server-name-list", "list longer than its extension");
    }

    #[test]
    fn garbage_and_truncation() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Err("not-tls"));
        assert_eq!(parse(b"SSH-2.0-OpenSSH_9.6\r\n"), Err("not-tls"));
        assert_eq!(parse(&[0x80, 0x2e, 0x01, 0x03, 0x01]), Err("not-tls"), "an SSLv2 hello");
        assert_eq!(parse(&[HANDSHAKE, 2]), Err("bad-record-version"));
        assert_eq!(parse(&[HANDSHAKE, 3, 9]), Err("bad-record-version"));
        assert_eq!(parse(&[HANDSHAKE, 3, 1, 0, 0]), Err("bad-record-length"));
        assert_eq!(parse(&[HANDSHAKE, 3, 1, 0x40, 1]), Err("bad-record-length"));
        assert_eq!(parse(&[HANDSHAKE, 3, 1, 0, 4, 2, 0, 0, 0]), Err("not-a-client-hello"));
        assert_eq!(parse(&[HANDSHAKE, 3, 1, 0, 5, 1, 0, 0, 0, 9]), Err("data-after-hello"));
        assert_eq!(parse(&[HANDSHAKE, 3, 1, 0, 4, 1, 0, 0, 0]), Err("short-hello"));
        let h = hello(None);
        // The hello's length says 3 more bytes: a record of another type interrupts it.
        let mut cut = h.clone();
        cut[8] += 3;
        assert_eq!(parse(&cut), Ok(Hello::Partial));
        cut.extend_from_slice(&[21, 3, 3, 0, 2, 2, 40]);
        assert_eq!(parse(&cut), Err("hello-interrupted"));
        let mut body_version = h.clone();
        body_version[9] = 2;
        assert_eq!(parse(&body_version), Err("bad-client-version"));
        let mut long_session = h.clone();
        long_session[43] = 33;
        assert_eq!(parse(&long_session), Err("bad-session-id"));
        let mut trailing = hello(Some(&[]));
        trailing.push(0);
        trailing[4] += 1;
        trailing[8] += 1;
        assert_eq!(parse(&trailing), Err("data-after-extensions"));
        let bytes = rustls_hello("a.example.com", rustls::ALL_VERSIONS);
        for i in 0..bytes.len() {
            // Any single byte changed: no panic, and a name only if a valid one.
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            if let Ok(Hello::Complete { sni: Some(s), .. }) = parse(&b) {
                assert!(valid_host_name(s.as_bytes()) && s == s.to_ascii_lowercase(), "byte {i}: {s}");
            }
        }
    }
}
