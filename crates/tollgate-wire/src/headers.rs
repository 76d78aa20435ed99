//! Pure header work on the request path: the Host rules route by,
//! X-Forwarded-*, and the rules' header edits. (Framing fields and hop-by-hop
//! removal are in h1.rs.)

use crate::h1::{Fields, valid_host};
use std::fmt::Write as _;
use std::io::Write;
use std::net::IpAddr;
use tollgate_config::{HeaderEdits, ValuePart, Var};

/// The request's host for routing: lower-case, without port. `None` when the
/// value is not a valid Host (see [`valid_host`]).
pub fn routing_host(value: &[u8]) -> Option<String> {
    if !valid_host(value) {
        return None;
    }
    let host = match value.first() {
        Some(b'[') => &value[..=value.iter().position(|b| *b == b']')?],
        _ => value.split(|b| *b == b':').next().unwrap_or(value),
    };
    Some(String::from_utf8_lossy(host).to_ascii_lowercase())
}

/// The client address as it should appear in headers and rules (IPv4-mapped IPv6
/// addresses shown as IPv4).
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// X-Forwarded-For (appended to what came in, several lines folded into one
/// list), -Proto, -Port and -Host (set).
pub fn add_forwarded(fields: &mut Fields, client: IpAddr, local_port: u16, proto: &'static str) {
    let mut xff = Vec::with_capacity(64);
    for v in fields.get_all(b"x-forwarded-for") {
        xff.extend_from_slice(v);
        xff.extend_from_slice(b", ");
    }
    let _ = write!(xff, "{client}");
    fields.set(b"x-forwarded-for", &xff);
    fields.set(b"x-forwarded-proto", proto.as_bytes());
    xff.clear();
    let _ = write!(xff, "{local_port}");
    fields.set(b"x-forwarded-port", &xff);
    if let Some(host) = fields.get(b"host").map(<[u8]>::to_vec) {
        fields.set(b"x-forwarded-host", &host);
    }
}

/// Appends this hop's element to RFC 7239 `Forwarded` (the earlier hops'
/// elements kept before it, in one field): `for` the client (an IPv6 address
/// bracketed and quoted, section 6), `proto`, and `host` the request's Host
/// (quoted when it is not a token, as `host:port` is not).
pub fn add_rfc7239(fields: &mut Fields, client: IpAddr, proto: &'static str) {
    let mut v = Vec::with_capacity(64);
    for old in fields.get_all(b"forwarded") {
        v.extend_from_slice(old);
        v.extend_from_slice(b", ");
    }
    let _ = match client {
        IpAddr::V4(ip) => write!(v, "for={ip}"),
        IpAddr::V6(ip) => write!(v, "for=\"[{ip}]\""),
    };
    let _ = write!(v, ";proto={proto}");
    if let Some(host) = fields.get(b"host").filter(|h| !h.is_empty()).map(<[u8]>::to_vec) {
        v.extend_from_slice(b";host=");
        if host.iter().all(|b| tollgate_config::is_tchar(*b)) {
            v.extend_from_slice(&host);
        } else {
            v.push(b'"');
            for b in host {
                if b == b'"' || b == b'\\' {
                    v.push(b'\\');
                }
                v.push(b);
            }
            v.push(b'"');
        }
    }
    fields.set(b"forwarded", &v);
}

/// The `Location` of a `redirect = { scheme = ... }` rule (HAProxy's `redirect
/// scheme`): the scheme, the request's Host, then its path and query (`/` for
/// `*`). The Host's port is kept unless it is the default port of the request's
/// own scheme (443 on TLS, else 80), so `http://a:80/x` goes to `https://a/x`
/// and `http://a:8080/x` to `https://a:8080/x`; `port` replaces it, written
/// only when it is not the new scheme's default. `host` is a valid Host (h1.rs
/// checked it) or empty.
pub fn scheme_location(scheme: &str, port: Option<u16>, host: &[u8], target: &str, tls: bool) -> String {
    let host = std::str::from_utf8(host).unwrap_or_default();
    let split = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => i,
        _ => host.len(),
    };
    let (name, host_port) = (&host[..split], host[split..].strip_prefix(':'));
    let default = |scheme: &str| if scheme == "https" { 443 } else { 80 };
    let port = match port {
        Some(p) => (p != default(scheme)).then_some(p),
        None => host_port.and_then(|p| p.parse::<u16>().ok()).filter(|p| *p != if tls { 443 } else { 80 }),
    };
    let target = if target.starts_with('/') { target } else { "/" };
    let mut out = format!("{scheme}://{name}");
    if let Some(p) = port {
        let _ = write!(out, ":{p}");
    }
    out.push_str(target);
    out
}

/// A rule's header edits, in a fixed order: delete, then set (replace), then add.
pub fn apply_edits(e: &HeaderEdits, fields: &mut Fields, vars: Option<&Vars>) {
    for name in &e.delete {
        fields.remove(name.as_str().as_bytes());
    }
    let mut filled = Vec::new();
    for (set, list) in [(true, &e.set), (false, &e.add)] {
        for (name, value) in list {
            let bytes = match value.literal() {
                Some(l) => l,
                None => {
                    filled.clear();
                    for part in &value.parts {
                        match (part, vars) {
                            (ValuePart::Text(t), _) => filled.extend_from_slice(t),
                            (ValuePart::Var(v), Some(vars)) => vars.write(*v, &mut filled),
                            (ValuePart::Var(_), None) => {}
                        }
                    }
                    &filled[..]
                }
            };
            let name = name.as_str().as_bytes();
            if set { fields.set(name, bytes) } else { fields.append(name, bytes) }
        }
    }
}

/// What the variables of header rule values (`${client_ip}` ...) stand for in
/// one request, gathered before the edits (only when one has variables).
/// Every value comes from a checked head or the connection, so none holds a
/// byte a header cannot carry.
#[derive(Debug, Clone)]
pub struct Vars {
    pub client: IpAddr,
    pub client_port: u16,
    pub scheme: &'static str,
    pub host: Vec<u8>,
    pub method: Vec<u8>,
    pub path: Vec<u8>,
    pub request_id: Vec<u8>,
    pub frontend: String,
    /// The client's certificate (mutual TLS), if it presented one.
    pub client_cert: Option<tollgate_config::ClientCert>,
}

impl Vars {
    /// The variables of `head`, from `client` on a connection with TLS or
    /// not; `request_id`: the header the frontend's request id is in.
    pub fn of(
        head: &crate::h1::RequestHead,
        client: std::net::SocketAddr,
        (tls, client_cert): (bool, Option<&tollgate_config::ClientCert>),
        request_id: Option<&str>,
        frontend: &str,
    ) -> Vars {
        Vars {
            client: canonical_ip(client.ip()),
            client_port: client.port(),
            scheme: if tls { "https" } else { "http" },
            host: head.fields.get(b"host").unwrap_or_default().to_vec(),
            method: head.method().as_bytes().to_vec(),
            path: head.path_bytes().to_vec(),
            request_id: request_id.and_then(|h| head.fields.get(h.as_bytes())).unwrap_or_default().to_vec(),
            frontend: frontend.to_string(),
            client_cert: client_cert.cloned(),
        }
    }

    fn write(&self, v: Var, out: &mut Vec<u8>) {
        let _ = match v {
            Var::ClientIp => write!(out, "{}", self.client),
            Var::ClientPort => write!(out, "{}", self.client_port),
            Var::Scheme => out.write_all(self.scheme.as_bytes()),
            Var::Host => out.write_all(&self.host),
            Var::Method => out.write_all(&self.method),
            Var::Path => out.write_all(&self.path),
            Var::RequestId => out.write_all(&self.request_id),
            Var::Frontend => out.write_all(self.frontend.as_bytes()),
            Var::SslClientSDn => out.write_all(self.client_cert.as_ref().map_or(&b""[..], |c| c.subject.as_bytes())),
            Var::SslClientIDn => out.write_all(self.client_cert.as_ref().map_or(&b""[..], |c| c.issuer.as_bytes())),
            Var::SslClientSerial => out.write_all(self.client_cert.as_ref().map_or(&b""[..], |c| c.serial.as_bytes())),
            Var::SslClientFingerprint => {
                out.write_all(self.client_cert.as_ref().map_or(&b""[..], |c| c.fingerprint.as_bytes()))
            }
            Var::SslClientVerify => out.write_all(if self.client_cert.is_some() { b"SUCCESS" } else { b"NONE" }),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_for_routing() {
        assert_eq!(routing_host(b"Example.COM:8080").as_deref(), Some("example.com"));
        assert_eq!(routing_host(b"[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(routing_host(b"[::1]").as_deref(), Some("[::1]"));
        assert_eq!(routing_host(b"10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(routing_host(b"a%41b.example").as_deref(), Some("a%41b.example"));
        for bad in [
            &b"user@evil.com"[..],
            b"a b",
            b"",
            b":80",
            b"a:80:81",
            b"a:8o",
            b"a:123456",
            b"[::1",
            b"[]:80",
            b"[::1]x",
            b"a/b",
            b"a\\b",
            b"a?b",
            b"a#b",
        ] {
            assert_eq!(routing_host(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn fields(head: &str) -> Fields {
        let mut h = crate::h1::RequestHead::default();
        let raw = format!("GET / HTTP/1.1\r\n{head}\r\n");
        crate::h1::parse_request(raw.as_bytes(), &mut h, 100, 65536, 8192).unwrap();
        h.fields
    }

    #[test]
    fn scheme_redirects_keep_host_and_path() {
        let loc = |port, host: &str, target, tls| scheme_location("https", port, host.as_bytes(), target, tls);
        assert_eq!(loc(None, "a.example.com", "/x?y=1", false), "https://a.example.com/x?y=1");
        assert_eq!(loc(None, "a.example.com:80", "/", false), "https://a.example.com/");
        assert_eq!(loc(None, "a.example.com:8080", "/p", false), "https://a.example.com:8080/p");
        assert_eq!(loc(None, "a.example.com:443", "/p", true), "https://a.example.com/p");
        assert_eq!(loc(Some(8443), "a.example.com:8080", "/p", false), "https://a.example.com:8443/p");
        assert_eq!(loc(Some(443), "a.example.com:8080", "/p", false), "https://a.example.com/p");
        assert_eq!(loc(None, "[::1]:80", "/", false), "https://[::1]/");
        assert_eq!(loc(None, "[::1]", "/", false), "https://[::1]/");
        assert_eq!(loc(None, "[::1]:81", "*", false), "https://[::1]:81/");
        assert_eq!(loc(None, "", "/p", false), "https:///p");
        assert_eq!(scheme_location("http", None, b"a:443", "/", true), "http://a/");
        assert_eq!(scheme_location("http", Some(80), b"a:443", "/", true), "http://a/");
    }

    #[test]
    fn forwarded_headers() {
        let mut h = fields("host: app.example.com\r\nx-forwarded-for: 1.1.1.1\r\nx-forwarded-proto: https\r\n");
        add_forwarded(&mut h, "::ffff:10.0.0.9".parse::<IpAddr>().map(canonical_ip).unwrap(), 8080, "http");
        assert_eq!(h.get(b"x-forwarded-for"), Some(&b"1.1.1.1, 10.0.0.9"[..]));
        assert_eq!(h.get(b"x-forwarded-proto"), Some(&b"http"[..]));
        assert_eq!(h.get(b"x-forwarded-port"), Some(&b"8080"[..]));
        assert_eq!(h.get(b"x-forwarded-host"), Some(&b"app.example.com"[..]));
        let mut h = fields("host: a\r\nx-forwarded-for: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n");
        add_forwarded(&mut h, "3.3.3.3".parse().unwrap(), 80, "http");
        assert_eq!(h.get_all(b"x-forwarded-for").collect::<Vec<_>>(), [&b"1.1.1.1, 2.2.2.2, 3.3.3.3"[..]]);
    }

    /// RFC 7239 section 4 and 6: elements after the earlier hops', an IPv6
    /// node bracketed and quoted, a Host with a port quoted (`:` is no tchar).
    #[test]
    fn rfc7239_forwarded() {
        let mut h = fields("host: app.example.com\r\nforwarded: for=192.0.2.60;proto=http\r\n");
        add_rfc7239(&mut h, "10.0.0.9".parse().unwrap(), "https");
        assert_eq!(
            h.get(b"forwarded"),
            Some(&b"for=192.0.2.60;proto=http, for=10.0.0.9;proto=https;host=app.example.com"[..])
        );
        let mut h = fields("host: a.test:8080\r\n");
        add_rfc7239(&mut h, "2001:db8:cafe::17".parse().unwrap(), "http");
        assert_eq!(h.get(b"forwarded"), Some(&b"for=\"[2001:db8:cafe::17]\";proto=http;host=\"a.test:8080\""[..]));
        let mut h = fields("host: a\r\n");
        h.remove(b"host");
        add_rfc7239(&mut h, "10.1.1.1".parse().unwrap(), "http");
        assert_eq!(h.get(b"forwarded"), Some(&b"for=10.1.1.1;proto=http"[..]));
    }
}
