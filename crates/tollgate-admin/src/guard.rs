//! The admin listener's defences against what a browser can be made to send it
//! from another site (docs/admin.md, "Security"):
//!
//! - **DNS rebinding**: a page of `evil.example` whose name then resolves to
//!   the listener's address reaches it as its own origin, reads and changes
//!   alike. Its requests carry `Host: evil.example`, so [`check_host`] takes
//!   only the hosts the listener answers to: its own address, `localhost` and
//!   the loopback addresses when it listens on loopback, any IP address when it
//!   listens on a wildcard address (always with its port), and the names of
//!   `admin.allowed_hosts`. Every request, reads included.
//! - **Cross-site requests** (CSRF): a page of another site can make a browser
//!   send a form (`application/x-www-form-urlencoded`, `multipart/form-data`,
//!   `text/plain`) to the listener without asking anyone. Anything else needs a
//!   CORS pre-flight, which the listener never grants (it sends no CORS header
//!   at all). So [`check_change`] takes a change (any method but GET, HEAD and
//!   OPTIONS) only with `Content-Type: application/json` or with the token as
//!   `Authorization: Bearer` (which a browser never adds by itself; basic-auth
//!   credentials it does resend, so they do not count), and refuses a change
//!   whose `Origin` is not the listener or which a browser marks
//!   `Sec-Fetch-Site: cross-site`.
//!
//! Pure functions over the request head; http.rs turns a [`Refusal`] into the
//! answer and logs it.

use http::{HeaderMap, Method, Request, StatusCode, Version, header};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tollgate_config::{HostName, HostPort};

/// A refused request: the status and the message for the client (and the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Refusal { status, message: message.into() }
    }
}

/// The listener: its address (the actual port when the config said 0) and
/// `admin.allowed_hosts`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listener<'a> {
    pub addr: SocketAddr,
    pub allowed: &'a [HostPort],
}

impl Listener<'_> {
    /// Whether `h` names this listener; a host without a port means
    /// `default_port` (80 for `http`, 443 for `https`).
    pub fn answers_to(&self, h: &HostPort, default_port: u16) -> bool {
        let port = h.port.unwrap_or(default_port);
        if self.allowed.iter().any(|a| a.host == h.host && a.port.is_none_or(|p| p == port)) {
            return true;
        }
        if port != self.addr.port() {
            return false;
        }
        let bind = self.addr.ip();
        match &h.host {
            HostName::Ip(ip) => {
                *ip == bind
                    || bind.is_unspecified()
                    || (bind.is_loopback()
                        && matches!(ip, IpAddr::V4(Ipv4Addr::LOCALHOST) | IpAddr::V6(Ipv6Addr::LOCALHOST)))
            }
            HostName::Name(n) => n == "localhost" && (bind.is_loopback() || bind.is_unspecified()),
        }
    }

    /// How to reach the listener, for messages.
    fn address_hint(&self) -> String {
        let (ip, port) = (self.addr.ip(), self.addr.port());
        if ip.is_unspecified() {
            format!("an IP address of this machine, or localhost, with port {port}")
        } else if ip.is_loopback() {
            format!("{}, or localhost:{port}", self.addr)
        } else {
            self.addr.to_string()
        }
    }
}

/// Whether `method` may change something: anything but GET, HEAD and OPTIONS.
pub(crate) fn is_change(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A header value as it may be shown: printable ASCII, escaped, at most 100 bytes.
fn shown(value: &[u8]) -> String {
    let cut = &value[..value.len().min(100)];
    let mut s = cut.escape_ascii().to_string();
    if cut.len() < value.len() {
        s.push_str("...");
    }
    s
}

/// The request's host (the target's authority in absolute form, else `Host`),
/// the default port of its scheme, and the raw value; `None` for an HTTP/1.0
/// request without either (no browser sends one).
fn request_host<B>(req: &Request<B>) -> Result<Option<(HostPort, u16, String)>, Refusal> {
    if let Some(authority) = req.uri().authority() {
        // RFC 9112 section 3.2.2: an absolute-form target's authority replaces Host.
        let default = if req.uri().scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https")) { 443 } else { 80 };
        let text = shown(authority.as_str().as_bytes());
        let h = HostPort::parse(authority.as_str())
            .ok_or_else(|| Refusal::new(StatusCode::BAD_REQUEST, format!("`{text}` is not a valid host")))?;
        return Ok(Some((h, default, text)));
    }
    let mut values = req.headers().get_all(header::HOST).iter();
    match (values.next(), values.next()) {
        (None, _) if req.version() <= Version::HTTP_10 => Ok(None),
        (None, _) => Err(Refusal::new(StatusCode::BAD_REQUEST, "an HTTP/1.1 request needs a Host header")),
        (Some(_), Some(_)) => {
            Err(Refusal::new(StatusCode::BAD_REQUEST, "a request takes one Host header, not several"))
        }
        (Some(v), None) => {
            let text = shown(v.as_bytes());
            let h =
                v.to_str().ok().and_then(HostPort::parse).ok_or_else(|| {
                    Refusal::new(StatusCode::BAD_REQUEST, format!("`{text}` is not a valid Host header"))
                })?;
            Ok(Some((h, 80, text)))
        }
    }
}

/// Refuses a request for a host the listener does not answer to (421).
pub(crate) fn check_host<B>(req: &Request<B>, l: &Listener) -> Result<(), Refusal> {
    match request_host(req)? {
        Some((h, default, _)) if l.answers_to(&h, default) => Ok(()),
        None => Ok(()),
        Some((_, _, text)) => Err(Refusal::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this admin listener does not answer to the host `{text}` (a DNS-rebinding defence): \
                 reach it as {}, or list the name in admin.allowed_hosts",
                l.address_hint()
            ),
        )),
    }
}

/// Refuses a change a browser may have been made to send from another site:
/// an `Origin` that is not the listener, or `Sec-Fetch-Site: cross-site` (403);
/// then, unless it carries `token` as a bearer token (`bearer`), anything but
/// `Content-Type: application/json` (415). Reads pass.
pub(crate) fn check_change<B>(req: &Request<B>, l: &Listener, token_set: bool, bearer: bool) -> Result<(), Refusal> {
    if !is_change(req.method()) {
        return Ok(());
    }
    let headers = req.headers();
    for origin in headers.get_all(header::ORIGIN) {
        let ok = origin.to_str().ok().and_then(origin_host).is_some_and(|(h, default)| l.answers_to(&h, default));
        if !ok {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "cross-site request refused: Origin `{}` is not this admin listener \
                     (if its page is served under that name, list it in admin.allowed_hosts)",
                    shown(origin.as_bytes())
                ),
            ));
        }
    }
    if headers.get_all("sec-fetch-site").iter().any(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site")) {
        return Err(Refusal::new(StatusCode::FORBIDDEN, "cross-site request refused (Sec-Fetch-Site: cross-site)"));
    }
    if bearer || is_json(headers) {
        return Ok(());
    }
    let got = match headers.get(header::CONTENT_TYPE) {
        None => "no Content-Type".to_string(),
        Some(v) => format!("`Content-Type: {}`", shown(v.as_bytes())),
    };
    let or_token = if token_set { " or the token as `Authorization: Bearer <token>`" } else { "" };
    Err(Refusal::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "a change needs `Content-Type: application/json` (with a JSON body, or none){or_token}; \
             this request has {got}"
        ),
    ))
}

/// Exactly one `Content-Type`, `application/json` (any case, any parameters).
fn is_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => v
            .to_str()
            .is_ok_and(|v| v.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json")),
        _ => false,
    }
}

/// An `Origin`'s host and its scheme's default port: `http://host[:port]` or
/// `https://host[:port]`; `None` for anything else, `null` included.
fn origin_host(origin: &str) -> Option<(HostPort, u16)> {
    let (scheme, rest) = origin.split_once("://")?;
    let default = if scheme.eq_ignore_ascii_case("http") {
        80
    } else if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        return None;
    };
    Some((HostPort::parse(rest)?, default))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener<'a>(addr: &str, allowed: &'a [HostPort]) -> Listener<'a> {
        Listener { addr: addr.parse().unwrap(), allowed }
    }

    fn answers(l: &Listener, host: &str) -> bool {
        l.answers_to(&HostPort::parse(host).unwrap_or_else(|| panic!("{host}")), 80)
    }

    #[test]
    fn a_loopback_listener_answers_to_its_address_and_localhost_with_its_port() {
        let l = listener("127.0.0.1:8404", &[]);
        for ok in ["127.0.0.1:8404", "localhost:8404", "LocalHost.:8404", "[::1]:8404"] {
            assert!(answers(&l, ok), "{ok}");
        }
        for no in ["127.0.0.1", "localhost", "127.0.0.1:8405", "127.0.0.2:8404", "evil.example:8404", "10.0.0.1:8404"] {
            assert!(!answers(&l, no), "{no}");
        }
        // On port 80, a host without a port means it.
        let l = listener("127.0.0.1:80", &[]);
        for ok in ["127.0.0.1", "localhost", "127.0.0.1:80", "[::1]"] {
            assert!(answers(&l, ok), "{ok}");
        }
        assert!(!answers(&l, "evil.example"));
        let l = listener("[::1]:8404", &[]);
        assert!(answers(&l, "[::1]:8404") && answers(&l, "localhost:8404") && answers(&l, "127.0.0.1:8404"));
    }

    #[test]
    fn a_listener_on_one_address_answers_to_that_address_only() {
        let l = listener("10.0.0.5:8404", &[]);
        assert!(answers(&l, "10.0.0.5:8404"));
        for no in ["10.0.0.5", "10.0.0.6:8404", "localhost:8404", "127.0.0.1:8404", "evil.example:8404"] {
            assert!(!answers(&l, no), "{no}");
        }
        let l = listener("[fd00::5]:8404", &[]);
        assert!(answers(&l, "[fd00::5]:8404") && answers(&l, "[FD00:0::5]:8404"));
        assert!(!answers(&l, "[fd00::6]:8404"));
    }

    #[test]
    fn a_wildcard_listener_answers_to_any_ip_address_with_its_port() {
        for bind in ["0.0.0.0:8404", "[::]:8404"] {
            let l = listener(bind, &[]);
            for ok in ["10.1.2.3:8404", "192.0.2.7:8404", "[fd00::1]:8404", "127.0.0.1:8404", "localhost:8404"] {
                assert!(answers(&l, ok), "{bind} {ok}");
            }
            for no in ["10.1.2.3", "10.1.2.3:8405", "evil.example:8404", "stats.example.com:8404"] {
                assert!(!answers(&l, no), "{bind} {no}");
            }
        }
    }

    #[test]
    fn allowed_hosts_add_names_with_any_port_or_the_one_given() {
        let allowed: Vec<HostPort> = ["stats.example.com", "vpn-stats:9000", "203.0.113.9"]
            .iter()
            .map(|h| HostPort::parse(h).unwrap())
            .collect();
        let l = listener("127.0.0.1:8404", &allowed);
        for ok in
            ["stats.example.com", "Stats.Example.com.:443", "vpn-stats:9000", "203.0.113.9:8404", "localhost:8404"]
        {
            assert!(answers(&l, ok), "{ok}");
        }
        for no in ["vpn-stats", "vpn-stats:8404", "x.stats.example.com", "example.com", "203.0.113.10"] {
            assert!(!answers(&l, no), "{no}");
        }
    }

    fn req(method: &str, target: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut r = Request::builder().method(method).uri(target);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).unwrap()
    }

    #[test]
    fn check_host_reads_host_or_the_absolute_target() {
        let l = listener("127.0.0.1:8404", &[]);
        let status = |r: Request<()>| check_host(&r, &l).err().map(|e| e.status);
        assert_eq!(status(req("GET", "/", &[("host", "127.0.0.1:8404")])), None);
        let refused = status(req("GET", "/", &[("host", "evil.example:8404")]));
        assert_eq!(refused, Some(StatusCode::MISDIRECTED_REQUEST));
        let e = check_host(&req("GET", "/", &[("host", "evil.example:8404")]), &l).unwrap_err();
        assert!(e.message.contains("`evil.example:8404`") && e.message.contains("admin.allowed_hosts"), "{e:?}");
        assert!(e.message.contains("127.0.0.1:8404, or localhost:8404"), "{e:?}");
        // The authority of an absolute-form target, not Host.
        let r = req("GET", "http://evil.example:8404/api", &[("host", "127.0.0.1:8404")]);
        assert_eq!(status(r), Some(StatusCode::MISDIRECTED_REQUEST));
        assert_eq!(status(req("GET", "http://localhost:8404/api", &[("host", "evil.example")])), None);
        assert_eq!(status(req("GET", "https://localhost/api", &[])), Some(StatusCode::MISDIRECTED_REQUEST));
        // Missing (HTTP/1.1), doubled or malformed: 400.
        assert_eq!(status(req("GET", "/", &[])), Some(StatusCode::BAD_REQUEST));
        let two = req("GET", "/", &[("host", "127.0.0.1:8404"), ("host", "127.0.0.1:8404")]);
        assert_eq!(status(two), Some(StatusCode::BAD_REQUEST));
        for bad in ["127.0.0.1:8404/x", "a@127.0.0.1:8404", "127.0.0.1:8404 ", "ex ample"] {
            let r = Request::get("/").header("host", http::HeaderValue::from_bytes(bad.as_bytes()).unwrap());
            assert_eq!(status(r.body(()).unwrap()), Some(StatusCode::BAD_REQUEST), "{bad:?}");
        }
        let opaque = Request::get("/").header("host", http::HeaderValue::from_bytes(b"\xffevil").unwrap());
        let e = check_host(&opaque.body(()).unwrap(), &l).unwrap_err();
        assert!(e.message.contains("`\\xffevil`"), "shown escaped: {e:?}");
        // HTTP/1.0 without Host: no browser sends that.
        let old = Request::get("/").version(Version::HTTP_10).body(()).unwrap();
        assert_eq!(check_host(&old, &l), Ok(()));
        let long = format!("{}.example", "a".repeat(300));
        let e = check_host(&req("GET", "/", &[("host", &long)]), &l).unwrap_err();
        assert!(e.message.len() < 250, "a long value is cut: {}", e.message);
    }

    #[test]
    fn a_change_needs_json_or_the_bearer_token() {
        let l = listener("127.0.0.1:8404", &[]);
        let check = |method: &str, headers: &[(&str, &str)], token_set: bool, bearer: bool| {
            check_change(&req(method, "/api/reload", headers), &l, token_set, bearer).map_err(|e| e.status)
        };
        for ct in ["application/json", "Application/JSON; charset=utf-8", " application/json ;x=y"] {
            assert_eq!(check("POST", &[("content-type", ct)], false, false), Ok(()), "{ct}");
        }
        for ct in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/plain",
            "text/plain; x=application/json",
            "application/jsonp",
            "",
        ] {
            for method in ["POST", "PUT", "PATCH", "DELETE"] {
                let got = check(method, &[("content-type", ct)], false, false);
                assert_eq!(got, Err(StatusCode::UNSUPPORTED_MEDIA_TYPE), "{method} {ct}");
            }
        }
        assert_eq!(check("POST", &[], false, false), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE));
        let two = [("content-type", "application/json"), ("content-type", "text/plain")];
        assert_eq!(check("POST", &two, false, false), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE));
        // The bearer token stands in for JSON; reads need neither.
        assert_eq!(check("POST", &[("content-type", "text/plain")], true, true), Ok(()));
        for method in ["GET", "HEAD", "OPTIONS"] {
            assert_eq!(check(method, &[("content-type", "text/plain")], false, false), Ok(()), "{method}");
        }
        // The message says what to send.
        let e = check_change(&req("POST", "/", &[("content-type", "text/plain")]), &l, false, false).unwrap_err();
        assert!(e.message.contains("`Content-Type: application/json`"), "{}", e.message);
        assert!(e.message.contains("`Content-Type: text/plain`") && !e.message.contains("Bearer"), "{}", e.message);
        let e = check_change(&req("POST", "/", &[]), &l, true, false).unwrap_err();
        assert!(e.message.contains("Authorization: Bearer") && e.message.contains("no Content-Type"), "{}", e.message);
    }

    #[test]
    fn a_change_from_another_origin_is_refused() {
        let allowed = [HostPort::parse("stats.example.com").unwrap()];
        let l = listener("127.0.0.1:8404", &allowed);
        let json = ("content-type", "application/json");
        let check = |headers: &[(&str, &str)]| {
            let mut all = vec![json];
            all.extend_from_slice(headers);
            check_change(&req("PUT", "/api/backends/b/servers/s", &all), &l, true, true).map_err(|e| e.status)
        };
        for ok in ["http://127.0.0.1:8404", "http://localhost:8404", "https://stats.example.com", "HTTP://[::1]:8404"] {
            assert_eq!(check(&[("origin", ok)]), Ok(()), "{ok}");
        }
        for no in [
            "http://evil.example",
            "http://evil.example:8404",
            "http://127.0.0.1:8405",
            "http://127.0.0.1",
            "https://127.0.0.1",
            "null",
            "file://",
            "ftp://127.0.0.1:8404",
            "http://127.0.0.1:8404/",
            "",
        ] {
            assert_eq!(check(&[("origin", no)]), Err(StatusCode::FORBIDDEN), "{no:?}");
        }
        assert_eq!(check(&[("origin", "http://127.0.0.1:8404"), ("origin", "null")]), Err(StatusCode::FORBIDDEN));
        assert_eq!(check(&[("sec-fetch-site", "Cross-Site")]), Err(StatusCode::FORBIDDEN));
        for site in ["same-origin", "none", "same-site"] {
            assert_eq!(check(&[("sec-fetch-site", site)]), Ok(()), "{site}");
        }
        // A read from another origin passes: the browser keeps its answer
        // from the other site (no CORS header allows it).
        let read = req("GET", "/api", &[("origin", "http://evil.example"), ("sec-fetch-site", "cross-site")]);
        assert_eq!(check_change(&read, &l, false, false), Ok(()));
        let e = check_change(&req("PUT", "/", &[json, ("origin", "http://evil.example")]), &l, false, false);
        let e = e.unwrap_err();
        assert!(e.message.contains("Origin `http://evil.example`"), "{}", e.message);
    }
}
