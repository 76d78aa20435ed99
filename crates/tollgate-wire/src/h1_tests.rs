//! Unit tests of the HTTP/1.1 codec (h1.rs): parsing, framing, the rules on
//! fields, and what is written to servers and clients.

use super::*;

fn req(bytes: &[u8]) -> Result<RequestHead, Reject> {
    let mut h = RequestHead::default();
    match parse_request(bytes, &mut h, 100, 64 * 1024, 8 * 1024)? {
        Parsed::Complete((), n) => {
            assert!(n <= bytes.len());
            Ok(h)
        }
        Parsed::Partial => Err(reject(0, "partial")),
    }
}

fn upstream(h: &RequestHead) -> String {
    let mut out = Vec::new();
    h.write_upstream(&mut out, "10.0.0.1:80".parse().unwrap());
    String::from_utf8(out).unwrap()
}

#[test]
fn simple_request_keeps_case_and_order() {
    let h = req(b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Mixed-CASE: v\r\nAccept: */*\r\n\r\n").unwrap();
    assert_eq!(h.method(), "GET");
    assert_eq!(h.path(), "/a");
    assert_eq!(h.framing(), Framing::Empty);
    assert!(!h.close);
    assert_eq!(upstream(&h), "GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Mixed-CASE: v\r\nAccept: */*\r\n\r\n");
}

#[test]
fn an_encoded_nul_in_the_path_is_refused() {
    for t in ["/a%00.png", "/%00", "/x/%00/", "http://h/a%00b"] {
        let bytes = format!("GET {t} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(req(bytes.as_bytes()).map(|_| ()).unwrap_err(), reject(400, "bad-target"), "{t}");
    }
    for t in ["/a?q=%00", "/a%0?", "/%20%0A"] {
        let bytes = format!("GET {t} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(req(bytes.as_bytes()).is_ok(), "{t}");
    }
}

#[test]
fn hop_by_hop_and_connection_listed_fields_are_dropped() {
    let h = req(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Kept: 1\r\n\r\n").unwrap();
    assert!(h.close);
    assert_eq!(upstream(&h), "GET / HTTP/1.1\r\nHost: x\r\nX-Kept: 1\r\n\r\n");
}

#[test]
fn connection_cannot_name_framing_fields_in_a_request() {
    // Dropping Content-Length while forwarding the body would smuggle the
    // body to the server as a second request.
    for conn in ["Content-Length", "close, content-length", "Transfer-Encoding", "host", "keep-alive,HOST"] {
        let bytes = format!("POST / HTTP/1.1\r\nHost: x\r\nConnection: {conn}\r\nContent-Length: 5\r\n\r\n");
        let got = req(bytes.as_bytes()).map(|_| ()).unwrap_err();
        assert_eq!(got, reject(400, "connection-lists-framing"), "{conn}");
    }
}

#[test]
fn connection_listed_fields_go_before_the_proxy_adds_its_own() {
    // A client naming X-Forwarded-For loses its own value, never the proxy's;
    // a field a rule sets afterwards is sent.
    let mut h = req(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: X-Forwarded-For, x-rule\r\nX-Forwarded-For: 6.6.6.6\r\nX-Rule: client\r\n\r\n").unwrap();
    assert_eq!(h.fields.get(b"x-forwarded-for"), None);
    crate::headers::add_forwarded(&mut h.fields, "10.0.0.9".parse().unwrap(), 80, "http");
    h.fields.set(b"x-rule", b"proxy");
    let up = upstream(&h);
    assert!(up.contains("x-forwarded-for: 10.0.0.9\r\n"), "{up}");
    assert!(up.contains("x-rule: proxy\r\n") && !up.contains("client") && !up.contains("6.6.6.6"), "{up}");
}

#[test]
fn upgrade_requests_keep_upgrade_and_connection_upgrade() {
    // RFC 9110 section 7.8: Upgrade named in Connection, HTTP/1.1, no body.
    let h = req(b"GET /chat HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n").unwrap();
    assert!(h.upgrade);
    assert_eq!(
        upstream(&h),
        "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\nconnection: upgrade\r\n\r\n"
    );
    // Not an upgrade: Upgrade without the Connection token, HTTP/1.0, or a body.
    for bytes in [
        &b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"[..],
        b"GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nab",
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n",
    ] {
        let h = req(bytes).unwrap();
        assert!(!h.upgrade, "{}", String::from_utf8_lossy(bytes));
        assert!(!upstream(&h).to_ascii_lowercase().contains("upgrade"), "{}", upstream(&h));
    }
}

#[test]
fn a_101_goes_to_the_client_with_upgrade_and_connection_upgrade() {
    let mut r = ResponseHead::default();
    let bytes = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nKeep-Alive: 5\r\nSec-WebSocket-Accept: a\r\n\r\n";
    assert!(matches!(parse_response(bytes, &mut r, 8192), Ok(Parsed::Complete((), _))));
    assert!(r.switches_protocols());
    let mut out = Vec::new();
    r.write_switching(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: a\r\nconnection: upgrade\r\n\r\n"
    );
    let bare = b"HTTP/1.1 101 Switching Protocols\r\n\r\n";
    assert!(matches!(parse_response(bare, &mut r, 8192), Ok(Parsed::Complete((), _))));
    assert!(!r.switches_protocols(), "a 101 must name the protocol");
}

#[test]
fn framing_rules() {
    let h = req(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n").unwrap();
    assert_eq!(h.framing(), Framing::Length(5));
    // RFC 9110 section 8.6: a list of one repeated value, or repeated lines,
    // go on as one field with one value.
    for cl in
        ["Content-Length: 5, 5\r\nContent-Length: 5", "Content-Length: 5,5", "Content-Length: 5\r\ncontent-length: 5"]
    {
        let h = req(format!("POST / HTTP/1.1\r\nHost: x\r\n{cl}\r\n\r\n").as_bytes()).unwrap();
        assert_eq!(h.framing(), Framing::Length(5));
        assert_eq!(upstream(&h), "POST / HTTP/1.1\r\nHost: x\r\ncontent-length: 5\r\n\r\n", "{cl}");
    }
    // CL + TE: TE wins, CL is dropped, the connection closes after.
    let h = req(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    assert_eq!(h.framing(), Framing::Chunked);
    assert!(h.close);
    assert_eq!(upstream(&h), "POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n");
    // HTTP/1.0: close unless keep-alive is asked for; no Host needed.
    let h = req(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(h.close);
    assert_eq!(upstream(&h), "GET / HTTP/1.1\r\nhost: 10.0.0.1:80\r\n\r\n");
    let h = req(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap();
    assert!(!h.close);
}

#[test]
fn refusals() {
    let cases: &[(&[u8], u16)] = &[
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: foo, chunked\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A : x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n", 400),
        (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400),
        (b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 400),
        (b"GET ftp://a/x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET http://u@a/x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT a: HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT http://a:443/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT u@a:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT [::1] HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", 400),
        (b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\nContent-Length: 1\r\n\r\n", 417),
    ];
    for (bytes, status) in cases {
        let got = req(bytes).map(|_| ()).unwrap_err();
        assert_eq!(got.status, *status, "{:?} -> {got:?}", String::from_utf8_lossy(bytes));
    }
}

#[test]
fn connect_takes_an_authority_which_becomes_the_host() {
    let h =
        req(b"CONNECT Example.com:443 HTTP/1.1\r\nHost: other\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n").unwrap();
    assert_eq!(h.form, Some(TargetForm::Authority));
    assert_eq!((h.method(), h.target(), h.raw_target()), ("CONNECT", "Example.com:443", "Example.com:443"));
    assert_eq!(h.fields.get(b"host"), Some(&b"Example.com:443"[..]));
    assert_eq!((h.framing(), h.upgrade), (Framing::Empty, false), "no body, not an upgrade");
    let h = req(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(h.fields.get(b"host"), Some(&b"[::1]:8443"[..]));
    let why = req(b"CONNECT a:443 HTTP/1.1\r\nContent-Length: 2\r\n\r\nab").unwrap_err();
    assert_eq!(why.reason, "connect-with-body");
}

#[test]
fn absolute_form_becomes_host_and_origin_form() {
    let h = req(b"GET http://Other.example:81/x?y HTTP/1.1\r\nHost: ignored\r\n\r\n").unwrap();
    assert_eq!(h.form, Some(TargetForm::Absolute));
    assert_eq!(h.target(), "/x?y");
    assert_eq!(h.raw_target(), "http://Other.example:81/x?y");
    assert_eq!(upstream(&h), "GET /x?y HTTP/1.1\r\nhost: Other.example:81\r\n\r\n");
    let h = req(b"GET http://a HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(h.target(), "/");
    let h = req(b"GET http://a?x=1 HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(h.target(), "/?x=1");
    assert_eq!(upstream(&h), "GET /?x=1 HTTP/1.1\r\nhost: a\r\n\r\n");
}

#[test]
fn limits() {
    let mut h = RequestHead::default();
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(200));
    assert_eq!(parse_request(long.as_bytes(), &mut h, 100, 64 * 1024, 100).unwrap_err().status, 414);
    let partial_line = format!("GET /{}", "a".repeat(9000));
    assert_eq!(parse_request(partial_line.as_bytes(), &mut h, 100, 8192, 100_000).unwrap_err().status, 414);
    let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n", "b".repeat(9000));
    assert_eq!(parse_request(big.as_bytes(), &mut h, 100, 8192, 8192).unwrap_err().status, 431);
    let many: String = (0..5).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    assert_eq!(parse_request(many.as_bytes(), &mut h, 4, 8192, 8192).unwrap_err().status, 431);
    assert!(matches!(parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n", &mut h, 100, 8192, 8192), Ok(Parsed::Partial)));
}

#[test]
fn edits_and_lookup() {
    let mut h = req(b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a: 2\r\n\r\n").unwrap();
    assert_eq!(h.fields.get_all(b"X-A").collect::<Vec<_>>(), [&b"1"[..], b"2"]);
    h.fields.set(b"x-a", b"3");
    h.fields.append(b"X-New", b"n");
    assert_eq!(upstream(&h), "GET / HTTP/1.1\r\nHost: x\r\nx-a: 3\r\nX-New: n\r\n\r\n");
}

fn resp(bytes: &[u8]) -> ResponseHead {
    let mut h = ResponseHead::default();
    match parse_response(bytes, &mut h, 64 * 1024).unwrap() {
        Parsed::Complete((), _) => h,
        Parsed::Partial => panic!("partial"),
    }
}

#[test]
fn response_framing_and_client_head() {
    let h = resp(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Y: z\r\n\r\n");
    assert_eq!(h.framing(false), Framing::Length(3));
    assert_eq!(h.framing(true), Framing::Empty);
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Length(3), false, false);
    let s = String::from_utf8(out).unwrap();
    assert!(s.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Y: z\r\ndate: "), "{s}");
    assert!(s.ends_with("GMT\r\n\r\n"), "{s}");

    let h = resp(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nDate: d\r\n\r\n",
    );
    assert_eq!(h.framing(false), Framing::Chunked);
    assert!(h.server_closes);
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Chunked, false, false);
    assert_eq!(String::from_utf8(out).unwrap(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: d\r\n\r\n");

    // CL + TE from a server: TE wins, CL is not sent on, the server connection is not reused.
    let h = resp(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\nDate: d\r\n\r\n");
    assert!(h.both_lengths && h.server_closes);
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Chunked, true, false);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: d\r\nconnection: close\r\n\r\n"
    );

    assert_eq!(resp(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n").framing(false), Framing::Empty);
    // A 204 has no body and no Content-Length (RFC 9110 section 8.6): one a
    // server sent goes no further, to HTTP/1.1 or HTTP/2 clients; a 304's
    // (the length of the representation, which it may carry) does.
    let h = resp(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nDate: d\r\n\r\n");
    assert_eq!(h.framing(false), Framing::Empty);
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Empty, false, false);
    assert_eq!(String::from_utf8(out).unwrap(), "HTTP/1.1 204 No Content\r\nDate: d\r\n\r\n");
    let mut names = Vec::new();
    h.h2_fields(false, |n, _| names.push(n.to_vec()));
    assert_eq!(names, [b"Date".to_vec()]);
    let h = resp(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nDate: d\r\n\r\n");
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Empty, false, false);
    assert_eq!(String::from_utf8(out).unwrap(), "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nDate: d\r\n\r\n");
    assert_eq!(resp(b"HTTP/1.0 200 OK\r\n\r\n").framing(false), Framing::UntilClose);
    assert!(resp(b"HTTP/1.0 200 OK\r\n\r\n").server_closes);
    let mut h = ResponseHead::default();
    assert!(
        parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &mut h, 1024).is_err()
    );
    assert!(parse_response(b"HTTP/1.1 2000 OK\r\n\r\n", &mut h, 1024).is_err());
    // Codings other than chunked are not passed off as content.
    for te in ["gzip, chunked", "gzip"] {
        let bytes = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {te}\r\n\r\n");
        assert_eq!(parse_response(bytes.as_bytes(), &mut h, 1024).unwrap_err(), "unknown-transfer-coding");
    }
    // One Content-Length value goes on, however the server repeated it.
    let h = resp(b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nDate: d\r\n\r\n");
    assert_eq!(h.framing(false), Framing::Length(3));
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Length(3), false, false);
    assert_eq!(String::from_utf8(out).unwrap(), "HTTP/1.1 200 OK\r\nDate: d\r\ncontent-length: 3\r\n\r\n");
}

#[test]
fn a_status_line_without_reason_phrase_is_accepted() {
    // RFC 9112 section 4: the reason may be empty, and servers leave out the
    // space before it too. This used to panic (and, with panic = "abort",
    // end the whole process).
    for (bytes, status, minor) in [
        (&b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n"[..], 200, 1),
        (b"HTTP/1.1 404\r\n\r\n", 404, 1),
        (b"HTTP/1.0 200\r\n\r\n", 200, 0),
        (b"HTTP/1.1 204 \r\n\r\n", 204, 1),
    ] {
        let h = resp(bytes);
        assert_eq!((h.status, h.minor, h.reason()), (status, minor, &b""[..]));
        let mut out = Vec::new();
        h.write_client(&mut out, h.framing(false), true, false);
        let mut again = ResponseHead::default();
        assert!(matches!(parse_response(&out, &mut again, 8192), Ok(Parsed::Complete((), n)) if n == out.len()));
        assert_eq!(again.status, status);
        h.write_switching(&mut Vec::new());
    }
}

#[test]
fn only_allowed_upgrades_go_on() {
    let websocket = |p: &[u8]| p.eq_ignore_ascii_case(b"websocket");
    let up = |upgrade: &str| {
        let mut h =
            req(format!("GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: {upgrade}\r\n\r\n").as_bytes())
                .unwrap();
        assert!(h.upgrade);
        h.keep_upgrades(websocket);
        (h.upgrade, upstream(&h).to_ascii_lowercase())
    };
    let (upgrade, out) = up("WebSocket");
    assert!(upgrade && out.contains("\r\nupgrade: websocket\r\n") && out.contains("connection: upgrade"), "{out}");
    // Not allowed: a plain request, with neither Upgrade nor Connection: upgrade.
    for offer in ["h2c", "foo/1, bar", "websocketx"] {
        let (upgrade, out) = up(offer);
        assert!(!upgrade && !out.contains("upgrade"), "{offer}: {out}");
    }
    // Mixed: only the allowed ones are offered to the server.
    let (upgrade, out) = up("h2c, websocket");
    assert!(upgrade && out.contains("\r\nupgrade: websocket\r\n") && !out.contains("h2c"), "{out}");
}

#[test]
fn interim_heads_go_on_with_their_end_to_end_fields() {
    let h = resp(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n");
    assert!(h.is_interim());
    let mut out = Vec::new();
    h.write_interim(&mut out);
    assert_eq!(out, b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n");
    let mut fields = Vec::new();
    h.h2_interim_fields(|n, v| fields.push((n.to_vec(), v.to_vec())));
    assert_eq!(fields, [(b"Link".to_vec(), b"</a.css>; rel=preload".to_vec())]);
    let mut out = Vec::new();
    resp(b"HTTP/1.1 102\r\n\r\n").write_interim(&mut out);
    assert_eq!(out, b"HTTP/1.1 102 \r\n\r\n");
    // 100 is the proxy's to answer, 101 ends HTTP, the rest are final.
    for head in
        [&b"HTTP/1.1 100 Continue\r\n\r\n"[..], b"HTTP/1.1 101 S\r\nUpgrade: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n"]
    {
        assert!(!resp(head).is_interim());
    }
}

#[test]
fn a_server_connection_header_cannot_remove_framing_or_the_date() {
    // `Connection: Content-Length` from a server: the token is ignored, so the
    // client still gets the length its body is framed by.
    let h = resp(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: Content-Length, Date, X-Drop\r\nDate: d\r\nX-Drop: 1\r\n\r\n");
    assert_eq!(h.framing(false), Framing::Length(3));
    let mut out = Vec::new();
    h.write_client(&mut out, Framing::Length(3), false, false);
    let s = String::from_utf8(out).unwrap();
    assert!(s.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 3\r\ndate: "), "{s}");
    assert!(!s.contains("X-Drop") && !s.contains("Date: d"), "{s}");
    let mut h2 = Vec::new();
    h.h2_fields(false, |n, _| h2.push(String::from_utf8_lossy(n).into_owned()));
    assert_eq!(h2, ["Content-Length", "date"]);
}

fn walk(body: &[u8], split: usize) -> Result<(usize, Vec<u8>), ChunkError> {
    let mut c = Chunked::new();
    let mut data = Vec::new();
    let mut used = 0;
    for part in [&body[..split], &body[split..]] {
        if c.is_done() {
            break;
        }
        let n = c.feed(part, |r| data.extend_from_slice(&part[r]))?;
        used += n;
    }
    Ok((used, data))
}

#[test]
fn chunked_bodies_at_every_split() {
    let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    for split in 0..body.len() {
        let (used, data) = walk(body, split).unwrap();
        assert_eq!(used, body.len() - 4, "split {split}");
        assert_eq!(data, b"hello world");
    }
}

#[test]
fn chunked_trailers_are_kept_when_asked_at_every_split() {
    let body = b"5\r\nhello\r\n0\r\ngrpc-status: 0\r\nGrpc-Message:  all good \r\n\r\nNEXT";
    for split in 0..body.len() {
        let mut c = Chunked::new();
        c.keep_trailers();
        let first = c.feed(&body[..split], |_| {}).unwrap();
        let second = c.feed(&body[split..], |_| {}).unwrap();
        assert_eq!(first + second, body.len() - 4, "split {split}");
        let t: Vec<_> = c.trailers().collect();
        assert_eq!(t, [(&b"grpc-status"[..], &b"0"[..]), (&b"Grpc-Message"[..], &b"all good"[..])], "split {split}");
    }
    let mut c = Chunked::new();
    c.feed(body, |_| {}).unwrap();
    assert_eq!(c.trailers().count(), 0, "not kept unless asked");
}

#[test]
fn chunked_refusals() {
    for bad in [
        &b"x\r\n"[..],
        b"5\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloXX0\r\n\r\n",
        b"5\r\nhello\r\n0\r\n\n",
        b"5;a\x00b\r\nhello\r\n",
        b"0\r\n X: y\r\n\r\n",
        b"fffffffffffffff\r\n",
        // Chunk extensions off their grammar: a quote left open (a server
        // reading on to the next quote would frame the body differently),
        // a stray character, more digits after whitespace, no name, a bad
        // quoted pair.
        b"1;a=\"\r\nx\r\n0\r\n\r\n",
        b"1;a=\"b\\\"\r\nx\r\n0\r\n\r\n",
        b"1 2\r\nx\r\n0\r\n\r\n",
        b"1;\r\nx\r\n0\r\n\r\n",
        b"1;=b\r\nx\r\n0\r\n\r\n",
        b"1;a b\r\nx\r\n0\r\n\r\n",
        b"1;a=b c\r\nx\r\n0\r\n\r\n",
        b"1;a=\"b\"c\r\nx\r\n0\r\n\r\n",
        b"1;a=b=c\r\nx\r\n0\r\n\r\n",
        b"1;a=(b)\r\nx\r\n0\r\n\r\n",
        b"1;a=\"\\\x7f\"\r\nx\r\n0\r\n\r\n",
        // Trailer lines that are not a name, a colon and a value.
        b"0\r\nX-T 1\r\n\r\n",
        b"0\r\nX-T\r\n\r\n",
        b"0\r\nX T: 1\r\n\r\n",
        b"0\r\nX-T : 1\r\n\r\n",
    ] {
        for split in 0..bad.len() {
            assert!(walk(bad, split).is_err(), "{:?} split {split}", String::from_utf8_lossy(bad));
        }
    }
}

/// A request's trailers may not name a field it was framed or routed by
/// (they go to the server as they came); other trailers, and a response's,
/// go through.
#[test]
fn framing_trailers_are_refused_on_requests() {
    fn walk_request(body: &[u8], split: usize) -> Result<usize, ChunkError> {
        let mut c = Chunked::new();
        c.refuse_framing_trailers();
        let first = c.feed(&body[..split], |_| {})?;
        Ok(first + c.feed(&body[split..], |_| {})?)
    }
    for name in ["Content-Length", "transfer-encoding", "HOST", "Connection", "TE", "Trailer", "Upgrade"] {
        let body = format!("1\r\nx\r\n0\r\nX-Ok: 1\r\n{name}: 5\r\n\r\n");
        for split in 0..body.len() {
            assert_eq!(walk_request(body.as_bytes(), split), Err(ChunkError::FramingTrailer), "{name} split {split}");
        }
        assert!(walk(body.as_bytes(), 0).is_ok(), "{name}: not refused unless asked");
    }
    for name in ["X-Checksum", "Content-Lengths", "Hos", "Transfer-Encoding-X", "grpc-status"] {
        let body = format!("1\r\nx\r\n0\r\n{name}: 5\r\n\r\n");
        for split in 0..body.len() {
            assert_eq!(walk_request(body.as_bytes(), split), Ok(body.len()), "{name} split {split}");
        }
    }
}

/// What RFC 9112 section 7.1.1 allows in a chunk extension goes through.
#[test]
fn chunk_extensions_in_their_grammar() {
    for ext in [
        &b"1;a\r\n"[..],
        b"1 \r\n",
        b"1\t;a\r\n",
        b"1;a=b\r\n",
        b"1 ; a = b ; c\r\n",
        b"1;a=\"\"\r\n",
        b"1;a=\"b c;d=\\\"e\\\\\";f\r\n",
        b"1;a=\"\xe9\\\xe9\t\"\r\n",
        b"1;a=b \r\n",
        b"1;a=\"b\" ;c=d\r\n",
    ] {
        let body = [ext, b"x\r\n0\r\nX-T:1\r\nY: \r\n\r\n"].concat();
        for split in 0..body.len() {
            assert_eq!(
                walk(&body, split),
                Ok((body.len(), b"x".to_vec())),
                "{:?} split {split}",
                String::from_utf8_lossy(&body)
            );
        }
    }
}

/// A head loaded from fields (HTTP/2) goes through the parser's checks; the
/// fuzz target h2_fields holds it to the text path on every head text can
/// carry. Its first find: a form feed at the start of a value is a control
/// character (400), not whitespace to trim.
#[test]
fn a_head_from_fields_is_checked_as_its_text_would_be() {
    const LIMITS: (usize, usize, usize) = (100, 8192, 4096);
    let mut head = RequestHead::default();
    let load = |head: &mut RequestHead, m: &[u8], t: &[u8], f: &[(&[u8], &[u8])]| {
        request_from_fields(head, m, t, f.iter().copied(), LIMITS).map_err(|r| (r.status, r.reason))
    };
    assert_eq!(load(&mut head, b"GET", b"/", &[(b"host", b"a"), (b"x", b"\x0cv")]), Err((400, "bad-request")));
    assert_eq!(load(&mut head, b"G T", b"/", &[(b"host", b"a")]), Err((400, "bad-request")));
    assert_eq!(load(&mut head, b"GET", b"", &[(b"host", b"a")]), Err((400, "bad-request")));
    assert_eq!(load(&mut head, b"GET", b"/", &[(b"ho st", b"a")]), Err((400, "bad-request")));
    assert_eq!(load(&mut head, b"GET", b"/", &[]), Err((400, "missing-host")));
    assert!(load(&mut head, b"CONNECT", b"a:443", &[(b"host", b"a")]).is_ok());
    assert_eq!(head.fields.get(b"host"), Some(&b"a:443"[..]));
    assert_eq!(load(&mut head, b"CONNECT", b"/", &[(b"host", b"a")]), Err((400, "bad-target")));
    // Surrounding SP and HTAB go, as httparse drops them; the size counts
    // the head as text, before they go.
    let size = load(&mut head, b"POST", b"/x", &[(b"host", b" a\t"), (b"content-length", b"3")]).unwrap();
    assert_eq!(size, "POST /x HTTP/1.1\r\nhost:  a\t\r\ncontent-length: 3\r\n\r\n".len());
    assert_eq!((head.fields.get(b"host"), head.framing()), (Some(&b"a"[..]), Framing::Length(3)));
    assert_eq!((head.method(), head.target(), head.minor), ("POST", "/x", 1));
}

/// A response head loaded from fields (an HTTP/2 server's) frames its body as
/// the relay of its DATA frames does, and meets the parser's checks.
#[test]
fn a_response_head_from_fields_frames_its_body_as_its_bytes_come() {
    let mut head = ResponseHead::default();
    let mut load = |status, fields: &[(&[u8], &[u8])], end_stream| {
        response_from_fields(&mut head, status, b"OK", fields.iter().copied(), end_stream, 1024)
            .map(|()| (head.framing(false), head.fields.get(b"content-length").map(<[u8]>::to_vec)))
    };
    assert_eq!(load(200, &[(b"content-length", b"5")], false), Ok((Framing::Length(5), Some(b"5".to_vec()))));
    assert_eq!(load(200, &[(b"content-type", b"text/plain")], false), Ok((Framing::Chunked, None)));
    assert_eq!(load(200, &[], true), Ok((Framing::Length(0), Some(b"0".to_vec()))));
    // No content: no framing field is added.
    assert_eq!(load(204, &[], false), Ok((Framing::Empty, None)));
    assert_eq!(load(103, &[(b"link", b"</a.css>; rel=preload")], false), Ok((Framing::Empty, None)));
    assert_eq!(
        load(200, &[(b"content-length", b"1"), (b"content-length", b"2")], false),
        Err("differing-content-length")
    );
    assert_eq!(load(200, &[(b"x y", b"1")], false), Err("bad-response"));
    assert_eq!(load(200, &[(b"x", b"a\rb")], false), Err("bad-response"));
    assert_eq!(load(200, &[(b"x", &[b'a'; 1024])], false), Err("response-head-too-large"));
    assert_eq!(load(99, &[], true), Err("bad-response"));
    // The head as the client gets it: what the same text would have given.
    response_from_fields(&mut head, 200, b"OK", [(&b"x-a"[..], &b"1"[..])], false, 1024).unwrap();
    let mut out = Vec::new();
    head.write_client(&mut out, Framing::Chunked, false, false);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ntransfer-encoding: chunked\r\n"), "{text}");
    let mut parsed = ResponseHead::default();
    parse_response(
        b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
        &mut parsed,
        1024,
    )
    .unwrap();
    response_from_fields(
        &mut head,
        101,
        b"Switching Protocols",
        [(&b"connection"[..], &b"upgrade"[..]), (b"upgrade", b"websocket")],
        false,
        1024,
    )
    .unwrap();
    assert!(head.switches_protocols() && parsed.switches_protocols());
    assert_eq!((head.server_closes, parsed.server_closes), (false, false));
}

/// Names that pass for framing ones once `_` reads as `-` and a run of `-`
/// as one (issue 30, 6): found at parse time, dropped on demand; the framing
/// names themselves and other names are not.
#[test]
fn lookalikes_of_framing_names() {
    for name in [
        "Content_Length",
        "content--length",
        "Content-Length-",
        "Transfer_Encoding",
        "transfer---encoding",
        "HOST_",
        "_host",
        "-Host",
        "Connection_",
        "keep_alive",
        "Up_grade_",
    ] {
        let lookalike = !name.eq_ignore_ascii_case("up_grade_");
        assert_eq!(lookalike_framing(name.as_bytes()), lookalike, "{name}");
    }
    for name in ["Content-Length", "Transfer-Encoding", "Host", "X-Content_Length", "Content_Type", "user_agent", "a"] {
        assert!(!lookalike_framing(name.as_bytes()), "{name}");
    }
    let mut h = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 40\r\nTransfer__Encoding: chunked\r\nX_Ok: 1\r\nContent-Length: 3\r\n\r\nabc").unwrap();
    assert!(h.fields.has_lookalikes());
    assert_eq!(h.framing(), Framing::Length(3), "the real Content-Length frames the body");
    assert_eq!(h.fields.drop_lookalikes(), 2);
    assert!(!h.fields.has_lookalikes());
    let names: Vec<String> = h.fields.iter().map(|(n, _)| String::from_utf8_lossy(n).into_owned()).collect();
    assert_eq!(names, ["Host", "X_Ok", "Content-Length"]);
    assert_eq!(h.fields.get(b"content-length"), Some(&b"3"[..]), "known fields found again after the drop");
    let plain = req(b"GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: x\r\nContent-Type: y\r\n\r\n").unwrap();
    assert!(!plain.fields.has_lookalikes());
}

/// A repeated Content-Length is merged, and the head says so (a frontend
/// may refuse it); a GET or HEAD with a body keeps its framing (the one
/// rule: the body goes on as framed, so the server reads what Tollgate
/// counted).
#[test]
fn repeated_lengths_are_told_and_a_get_keeps_its_body() {
    let h = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc").unwrap();
    assert!(h.length_merged);
    let h = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc").unwrap();
    assert!(!h.length_merged);
    for method in ["GET", "HEAD"] {
        let h = req(format!("{method} / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbody").as_bytes()).unwrap();
        assert_eq!(h.framing(), Framing::Length(4), "{method}");
        assert!(upstream(&h).contains("Content-Length: 4\r\n"), "{method}");
        let h =
            req(format!("{method} / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n").as_bytes()).unwrap();
        assert_eq!(h.framing(), Framing::Chunked, "{method}");
    }
}
