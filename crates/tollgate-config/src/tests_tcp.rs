//! `mode = "tcp"`: what a tcp frontend and backend take, what they refuse (each
//! key named, with its line, all at once), and frontends kept to backends of
//! their own mode.

use super::*;
use std::path::Path;

const TCP: &str = r#"
[defaults]
timeout = { client = "30s", server = "40s" }

[[frontend]]
name = "db"
mode = "tcp"
bind = ["127.0.0.1:5432", { addr = "127.0.0.1:5433", accept_proxy = true }]
default_backend = "pg"
  [[frontend.rule]]
  when = { sni = ["db.example.com", "*.db.example.com"] }
  backend = "pg-tls"
  [[frontend.rule]]
  when = { any = [{ src = "10.0.0.0/8" }, { not = { tls = true } }] }
  backend = "pg"

[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
default_backend = "app"

[[backend]]
name = "pg"
mode = "tcp"
balance = "leastconn"
check = { type = "tcp", interval = "1s" }
observe = { errors = 3 }
stick = { on = "source" }
  [[backend.server]]
  name = "p1"
  addr = "127.0.0.1:6432"
  maxconn = 100
  send_proxy = "v2"

[[backend]]
name = "pg-tls"
mode = "tcp"
timeout = { tunnel = "2h" }
  [[backend.server]]
  name = "t1"
  addr = "127.0.0.1:6433"

[[backend]]
name = "app"
mode = "http"
  [[backend.server]]
  name = "a1"
  addr = "127.0.0.1:3000"
"#;

fn errors(src: &str) -> Vec<String> {
    match parse(src, Path::new("t.toml")) {
        Ok(_) => panic!("expected errors:\n{src}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

/// Asserts that one error names `key` and says `says`.
fn has(errs: &[String], key: &str, says: &str) {
    assert!(
        errs.iter().any(|e| e.contains(&format!(": {key}: ")) && e.contains(says)),
        "no error for {key} saying {says:?} in:\n{}",
        errs.join("\n")
    );
}

/// A backend `name` in `mode` with `extra` keys and one server `s1` on
/// 127.0.0.1:`port` with `server` keys.
fn backend(name: &str, mode: &str, extra: &str, port: u16, server: &str) -> String {
    format!(
        "[[backend]]\nname = \"{name}\"\nmode = \"{mode}\"\n{extra}\n  [[backend.server]]\n  name = \"s1\"\n  \
         addr = \"127.0.0.1:{port}\"\n{server}\n"
    )
}

/// A frontend `name` in `mode` on 127.0.0.1:`port`, with `extra` keys and tables.
fn frontend(name: &str, mode: &str, port: u16, extra: &str) -> String {
    format!("[[frontend]]\nname = \"{name}\"\nmode = \"{mode}\"\nbind = [\"127.0.0.1:{port}\"]\n{extra}\n")
}

const USERLIST: &str = "[[userlist]]\nname = \"u\"\nusers = [{ name = \"a\", insecure_password = \"b\" }]\n";

#[test]
fn tcp_frontends_and_backends_build() {
    let c = parse(TCP, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    let db = &c.frontends[0];
    assert_eq!(db.mode, Mode::Tcp);
    assert!(db.binds[1].accept_proxy);
    assert!(!db.binds[0].defer_accept && !db.binds[1].defer_accept, "the server may speak first in TCP mode");
    assert_eq!(db.handshake_timeout(), std::time::Duration::from_secs(30), "timeout.client in tcp mode");
    assert_eq!(db.rules.len(), 2);
    assert!(db.rules[0].when.uses_sni());
    assert!(!db.rules[1].when.uses_sni());
    let web = &c.frontends[1];
    assert_eq!(web.mode, Mode::Http, "the default");
    assert_eq!(web.handshake_timeout(), web.timeouts.http_request);
    let pg = &c.backends[0];
    assert_eq!((pg.mode, &pg.balance), (Mode::Tcp, &Balance::LeastConn));
    assert_eq!(pg.servers[0].send_proxy, Some(ProxyProtocol::V2));
    assert!(!pg.timeouts.tunnel_set, "not written: client and server timeouts apply");
    assert_eq!(pg.timeouts.server, std::time::Duration::from_secs(40));
    let tls = &c.backends[1];
    assert!(tls.timeouts.tunnel_set);
    assert_eq!(tls.timeouts.tunnel, std::time::Duration::from_secs(7200));
    assert_eq!(c.backends[2].mode, Mode::Http);

    let inherited = TCP.replace("timeout = { client = \"30s\", server = \"40s\" }", "timeout = { tunnel = \"5m\" }");
    let c = parse(&inherited, Path::new("t.toml")).unwrap();
    assert!(c.backends[0].timeouts.tunnel_set, "[defaults] sets it for every backend");
}

#[test]
fn http_only_keys_on_a_tcp_frontend_are_refused_by_name() {
    let src = r#"
[[frontend]]
name = "db"
mode = "tcp"
bind = ["127.0.0.1:5432", { addr = "127.0.0.1:5433", h2c = true }]
default_backend = "pg"
forward_for = true
forwarded = true
request_id = true
h2c = false
limits = { max_headers = 10 }
h2 = { max_resets = 5 }
upgrades = ["websocket"]
error_pages = { 503 = "503.html" }
timeout = { client = "5s", http_request = "1s", keep_alive = "2s" }
auth = { userlist = "u" }
  [[frontend.rule]]
  when = { path_prefix = "/x", all = [{ header = { name = "a", present = true } }], not = { host = "h" } }
  backend = "pg"
  [[frontend.rule]]
  when = { any = [{ method = "GET" }, { src = "10.0.0.0/8" }] }
  deny = 403
  [[frontend.rule]]
  redirect = { location = "/" }
  [[frontend.rule]]
  set_request_headers = { "X-A" = "1" }
  delete_response_headers = ["X-B"]
  backend = "pg"
"#
    .to_string()
        + &backend("pg", "tcp", "", 6432, "")
        + USERLIST;
    let e = errors(&src);
    let http = "is for HTTP: frontend `db` is in mode \"tcp\"";
    for key in [
        "forward_for",
        "forwarded",
        "request_id",
        "h2c",
        "auth",
        "limits.max_headers",
        "h2.max_resets",
        "bind[1].h2c",
        "upgrades",
    ] {
        has(&e, &format!("frontend[0].{key}"), http);
    }
    has(&e, "frontend[0].error_pages.503", "replace HTTP error responses");
    has(&e, "frontend[0].timeout.http_request", "`timeout.client` bounds the PROXY header");
    has(&e, "frontend[0].timeout.keep_alive", "times HTTP requests");
    let cond = "tests HTTP requests: a tcp frontend's conditions are `src`, `sni` and `tls`";
    for key in [
        "rule[0].when.path_prefix",
        "rule[0].when.all[0].header",
        "rule[0].when.not.host",
        "rule[1].when.any[0].method",
    ] {
        has(&e, &format!("frontend[0].{key}"), cond);
    }
    let action = "a tcp frontend's rules only choose a `backend`";
    for key in ["rule[1].deny", "rule[2].redirect", "rule[3].set_request_headers", "rule[3].delete_response_headers"] {
        has(&e, &format!("frontend[0].{key}"), action);
    }
    assert!(!e.iter().any(|e| e.contains("when.any[1]") || e.contains(".timeout.client")), "{e:#?}");
    assert!(e.iter().all(|e| e.starts_with("t.toml:")), "every error has its line: {e:#?}");
}

#[test]
fn http_only_keys_on_a_tcp_backend_are_refused_by_name() {
    let src = [
        frontend("db", "tcp", 5432, "default_backend = \"a\""),
        backend(
            "a",
            "tcp",
            "balance = \"uri\"\ncookie = { name = \"SRV\" }\nauth = { userlist = \"u\" }",
            6432,
            "cookie = \"one\"",
        ),
        backend("b", "tcp", "balance = \"hdr(X-User)\"\ntimeout = { server_keep_alive = \"60s\" }", 6433, ""),
        USERLIST.to_string(),
    ]
    .concat();
    let e = errors(&src);
    has(&e, "backend[0].balance", "`uri` hashes the request path: a tcp backend balances connections");
    has(&e, "backend[1].balance", "`hdr(X-User)` hashes a request header");
    has(&e, "backend[0].cookie", "is for HTTP: backend `a` is in mode \"tcp\"");
    has(&e, "backend[0].auth", "is for HTTP");
    has(&e, "backend[0].server[0].cookie", "persistence cookie");
    has(&e, "backend[1].timeout.server_keep_alive", "each session has a connection of its own");
    assert_eq!(e.len(), 6, "{e:#?}");
}

#[test]
fn cache_and_server_transports_on_a_tcp_backend_are_refused_by_name() {
    let src = [
        "[[cache]]\nname = \"main\"\n".to_string(),
        frontend("db", "tcp", 5432, "default_backend = \"a\""),
        backend("a", "tcp", "cache = { zone = \"main\" }\nproto = \"h2c\"", 6432, "proto = \"h2c\""),
    ]
    .concat();
    let e = errors(&src);
    has(&e, "backend[0].cache", "is for HTTP: backend `a` is in mode \"tcp\"");
    has(&e, "backend[0].proto", "relays bytes as they are");
    has(&e, "backend[0].server[0].proto", "relays bytes as they are");
    assert_eq!(e.len(), 3, "{e:#?}");
}

#[test]
fn frontends_use_backends_of_their_own_mode() {
    let rule =
        "default_backend = \"web\"\n  [[frontend.rule]]\n  when = { sni = \"a.example.com\" }\n  backend = \"web\"";
    let src = [
        frontend("db", "tcp", 5432, rule),
        frontend("site", "http", 8080, "default_backend = \"db\""),
        backend("web", "http", "", 3000, ""),
        backend("db", "tcp", "", 6432, ""),
    ]
    .concat();
    let e = errors(&src);
    let tcp_to_http = "backend `web` is in mode \"http\" and this frontend in mode \"tcp\"";
    has(&e, "frontend[0].default_backend", tcp_to_http);
    has(&e, "frontend[0].rule[0].backend", tcp_to_http);
    has(&e, "frontend[1].default_backend", "backend `db` is in mode \"tcp\" and this frontend in mode \"http\"");
    assert_eq!(e.len(), 3, "{e:#?}");
}

#[test]
fn a_mode_is_http_or_tcp() {
    let src = TCP.replace("mode = \"tcp\"\nbalance", "mode = \"udp\"\nbalance");
    let e = errors(&src);
    has(&e, "backend[0].mode", "`udp` is not a mode (use \"http\" or \"tcp\")");
}

/// `request_id`: `true` (X-Request-Id, no client trusted), `false` (off), or a
/// table; a bad header name or address is named by its key.
#[test]
fn request_id_is_true_false_or_a_table_and_checked() {
    let fe = |v: &str| {
        format!("[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\nforwarded = true\nrequest_id = {v}\n")
    };
    let c = crate::parse(&fe("true"), std::path::Path::new("t.toml")).unwrap();
    let rid = c.frontends[0].request_id.clone().unwrap();
    assert_eq!((rid.header.as_str(), rid.trust.len(), c.frontends[0].forwarded), ("x-request-id", 0, true));
    assert!(!rid.trusts("10.0.0.1".parse().unwrap()));
    let c = crate::parse(&fe("false"), std::path::Path::new("t.toml")).unwrap();
    assert!(c.frontends[0].request_id.is_none());
    let c = crate::parse(
        &fe("{ header = \"X-Trace\", trust = [\"10.0.0.0/8\", \"::1\"] }"),
        std::path::Path::new("t.toml"),
    )
    .unwrap();
    let rid = c.frontends[0].request_id.clone().unwrap();
    assert_eq!(rid.header, "x-trace");
    assert!(rid.trusts("10.1.2.3".parse().unwrap()) && rid.trusts("::ffff:10.0.0.1".parse().unwrap()));
    assert!(rid.trusts("::1".parse().unwrap()) && !rid.trusts("192.0.2.1".parse().unwrap()));
    let e = errors(&fe("{ header = \"X Trace\", trust = [\"nope\"] }"));
    has(&e, "frontend[0].request_id.header", "not a valid header name");
    has(&e, "frontend[0].request_id.trust", "`nope` is not an address or CIDR block");
}
