use super::*;
use std::path::Path;
use std::time::Duration;

const GOOD: &str = r#"
[global]
workers = 1
access_log = "stdout"

[defaults]
timeout = { connect = "2s", server = "30s", queue = "1s" }
retries = 2

[[frontend]]
name = "web"
bind = ["127.0.0.1:8080", ":8081"]
default_backend = "nodes"
  [[frontend.rule]]
  when = { host = ["tus.example.com", "*.tus.example.com"] }
  backend = "tus"
  [[frontend.rule]]
  when = { path_prefix = "/old/", not = { method = "POST" } }
  redirect = { prefix = "https://new.example.com", code = 301 }
  [[frontend.rule]]
  when = { src = ["10.0.0.0/8", "192.168.1.1"] }
  deny = 403
  [[frontend.rule]]
  set_request_headers = { "X-Env" = "prod" }

[[backend]]
name = "nodes"
balance = "hdr(X-User)"
timeout = { server = "5s" }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
  weight = 2
  [[backend.server]]
  name = "s2"
  addr = "localhost:3002"
  maxconn = 10
  backup = true

[[backend]]
name = "tus"
  [[backend.server]]
  name = "t1"
  addr = "127.0.0.1:1080"
"#;

#[test]
fn good_config_builds() {
    let c = parse(GOOD, Path::new("good.toml")).unwrap();
    assert_eq!(c.global.workers, 1);
    assert_eq!(c.global.access_log, AccessLogTarget::Stdout);
    let f = &c.frontends[0];
    assert_eq!(f.binds.len(), 2);
    assert_eq!(f.binds[1].to_string(), "0.0.0.0:8081");
    assert_eq!(f.default_backend, Some(0));
    assert_eq!(f.timeouts.connect.as_secs(), 2);
    assert_eq!(f.rules.len(), 4);
    assert!(matches!(f.rules[0].action, Some(Action::Backend(1))));
    assert!(matches!(f.rules[2].action, Some(Action::Deny { .. })));
    assert!(f.rules[3].action.is_none());
    let b = &c.backends[0];
    assert_eq!(b.balance, Balance::Hdr(http::HeaderName::from_static("x-user")));
    assert_eq!(b.timeouts.server.as_secs(), 5);
    assert_eq!(b.timeouts.connect.as_secs(), 2, "inherits defaults");
    assert_eq!(b.retries, 2);
    assert_eq!(b.servers[0].weight, 2);
    assert_eq!(b.servers[1].maxconn, Some(10));
    assert!(b.servers[1].backup);
    assert_eq!(c.backends[1].balance, Balance::RoundRobin);
    assert_eq!(f.upgrades, ["websocket"], "the default");
    assert!(f.allows_upgrade(b"WebSocket") && f.allows_upgrade(b"websocket/13") && !f.allows_upgrade(b"h2c"));
}

#[test]
fn upgrades_are_protocol_names() {
    let src =
        GOOD.replace("default_backend = \"nodes\"", "default_backend = \"nodes\"\nupgrades = [\"WebSocket\", \"h2c\"]");
    let c = parse(&src, Path::new("good.toml")).unwrap();
    assert_eq!(c.frontends[0].upgrades, ["websocket", "h2c"]);
    let src = GOOD.replace(
        "default_backend = \"nodes\"",
        "default_backend = \"nodes\"\nupgrades = [\"websocket\", \"a b\", \"\"]",
    );
    let e = parse(&src, Path::new("good.toml")).unwrap_err().to_string();
    assert!(
        e.contains("good.toml:14:26:") && e.contains("frontend[0].upgrades[1]: `a b` is not a protocol name"),
        "{e}"
    );
    assert!(e.contains("frontend[0].upgrades[2]: `` is not a protocol name"), "{e}");
    let src = GOOD.replace("default_backend = \"nodes\"", "default_backend = \"nodes\"\nupgrades = []");
    assert!(parse(&src, Path::new("good.toml")).unwrap().frontends[0].upgrades.is_empty());
}

#[test]
fn every_semantic_error_is_reported_at_once_with_line_and_key() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["nonsense"]
default_backend = "nope"
timeout = { client = "5 parsecs" }
  [[frontend.rule]]
  when = { path_regex = "([" }
  backend = "nodes"

[[backend]]
name = "nodes"
balance = "fastest"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1"
  weight = 300
"#;
    let errs = parse(src, Path::new("bad.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("bad.toml:4:9: frontend[0].bind[0]: `nonsense` is not an address"), "{text:#?}");
    assert!(has("bad.toml:5:19: frontend[0].default_backend: no backend is named `nope`"), "{text:#?}");
    assert!(has("bad.toml:6:22: frontend[0].timeout.client: unknown duration unit"), "{text:#?}");
    assert!(has("bad.toml:8:25: frontend[0].rule[0].when.path_regex: bad regex"), "{text:#?}");
    assert!(has("bad.toml:13:11: backend[0].balance: `fastest` is not a balance algorithm"), "{text:#?}");
    assert!(has("bad.toml:16:10: backend[0].server[0].addr: `127.0.0.1` has no port"), "{text:#?}");
    assert!(has("bad.toml:17:12: backend[0].server[0].weight: 300 is out of range (0..=256)"), "{text:#?}");
    assert_eq!(errs.len(), 7, "{text:#?}");
}

#[test]
fn unknown_key_names_its_path_and_line() {
    let src = "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n\n[[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"127.0.0.1:1\"\n  wieght = 3\n";
    let errs = parse(src, Path::new("x.toml")).unwrap_err().0;
    assert_eq!(errs.len(), 1);
    let e = &errs[0];
    assert_eq!(e.line, 10, "{e}");
    assert_eq!(e.key, "backend[0].server[0].wieght", "{e}");
    assert!(e.message.contains("unknown field `wieght`"), "{e}");
}

#[test]
fn wrong_type_is_reported_with_path() {
    let src = "[global]\nworkers = \"two\"\n[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n";
    let errs = parse(src, Path::new("x.toml")).unwrap_err().0;
    assert_eq!(errs[0].line, 2);
    assert_eq!(errs[0].key, "global.workers");
}

#[test]
fn rule_checks() {
    let src = r#"
[[frontend]]
name = "web"
bind = [":8080"]
  [[frontend.rule]]
  when = { host = "a" }
  [[frontend.rule]]
  backend = "x"
  deny = 403
  [[frontend.rule]]
  redirect = { location = "/a", prefix = "/b" }
  [[frontend.rule]]
  redirect = { location = "/a", code = 200 }
  [[frontend.rule]]
  when = { header = { name = "X-A", present = true, equals = "1" } }
  deny = 403
"#;
    let errs = parse(src, Path::new("r.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("frontend[0].rule[0]: this rule does nothing"), "{text:#?}");
    assert!(has("frontend[0].rule[1]: a rule takes at most one of"), "{text:#?}");
    assert!(has("frontend[0].rule[2].redirect: give exactly one of `location`, `prefix` or `scheme`"), "{text:#?}");
    assert!(has("frontend[0].rule[3].redirect.code: 200 is not a redirect code"), "{text:#?}");
    assert!(has("frontend[0].rule[4].when.header: give exactly one of"), "{text:#?}");
}

#[test]
fn duplicates_are_refused() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[backend]]
name = "b"
  [[backend.server]]
  name = "s"
  addr = "127.0.0.1:1"
  [[backend.server]]
  name = "s"
  addr = "127.0.0.1:2"
"#;
    let errs = parse(src, Path::new("d.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert!(text.iter().any(|t| t.contains("frontend `web` is defined twice")), "{text:#?}");
    assert!(text.iter().any(|t| t.contains("127.0.0.1:8080 is already bound by frontend `web`")), "{text:#?}");
    assert!(text.iter().any(|t| t.contains("server `s` is defined twice in backend `b`")), "{text:#?}");
}

#[test]
fn conditions_match() {
    let c = parse(GOOD, Path::new("good.toml")).unwrap();
    let rules = &c.frontends[0].rules;
    let headers = http::HeaderMap::new();
    let facts = |host: &'static str, path: &'static str, method: &'static http::Method, src: &str| RequestFacts {
        host,
        path,
        method,
        headers: &headers,
        src: src.parse().unwrap(),
        tls: false,
        sni: "",
        counters: &crate::NoCounters,
        client_cert: None,
    };
    assert!(rules[0].when.matches(&facts("tus.example.com", "/", &http::Method::GET, "1.1.1.1")));
    assert!(rules[0].when.matches(&facts("a.tus.example.com", "/", &http::Method::GET, "1.1.1.1")));
    assert!(!rules[0].when.matches(&facts("xtus.example.com", "/", &http::Method::GET, "1.1.1.1")));
    assert!(rules[1].when.matches(&facts("h", "/old/x", &http::Method::GET, "1.1.1.1")));
    assert!(!rules[1].when.matches(&facts("h", "/old/x", &http::Method::POST, "1.1.1.1")));
    assert!(rules[2].when.matches(&facts("h", "/", &http::Method::GET, "10.2.3.4")));
    assert!(rules[2].when.matches(&facts("h", "/", &http::Method::GET, "::ffff:192.168.1.1")));
    assert!(!rules[2].when.matches(&facts("h", "/", &http::Method::GET, "192.168.1.2")));
}

#[test]
fn side_specific_timeouts_empty_lists_self_redirects_and_bind_overlaps_are_refused() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["0.0.0.0:8080"]
timeout = { server = "1s" }
  [[frontend.rule]]
  when = { host = [] }
  deny = 403
  [[frontend.rule]]
  redirect = { prefix = "/" }
[[frontend]]
name = "other"
bind = ["127.0.0.1:8080"]
timeout = { server_keep_alive = "1s" }
[[backend]]
name = "b"
timeout = { keep_alive = "1s" }
"#;
    let errs = parse(src, Path::new("s.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("frontend[0].timeout.server: `server` has no effect on a frontend"), "{text:#?}");
    assert!(has("backend[0].timeout.keep_alive: `keep_alive` has no effect on a backend"), "{text:#?}");
    assert!(has("frontend[1].timeout.server_keep_alive: `server_keep_alive` has no effect on a frontend"), "{text:#?}");
    assert!(has("frontend[0].rule[0].when.host: an empty list never matches"), "{text:#?}");
    assert!(has("frontend[0].rule[1].redirect.prefix: an empty prefix"), "{text:#?}");
    assert!(has("frontend[1].bind[0]: 127.0.0.1:8080 overlaps 0.0.0.0:8080"), "{text:#?}");
    assert_eq!(errs.len(), 6, "{text:#?}");
}

#[test]
fn servers_keep_idle_connections_for_their_backends_server_keep_alive() {
    let src = r#"
[defaults]
timeout = { server_keep_alive = "30s" }
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
default_backend = "a"
[[backend]]
name = "a"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
[[backend]]
name = "node"
timeout = { server_keep_alive = "4500ms" }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3002"
"#;
    let cfg = parse(src, Path::new("k.toml")).unwrap();
    let keep: Vec<Duration> = cfg.backends.iter().map(|b| b.servers[0].keep_alive).collect();
    assert_eq!(keep, [Duration::from_secs(30), Duration::from_millis(4500)]);
    let plain = parse(&src.replace("timeout = { server_keep_alive = \"30s\" }", ""), Path::new("k.toml")).unwrap();
    assert_eq!(plain.backends[0].servers[0].keep_alive, Duration::from_secs(4), "the default");
    let zero = parse(&src.replace("4500ms", "0s"), Path::new("k.toml")).unwrap_err().0;
    assert!(zero[0].to_string().contains("backend[1].timeout.server_keep_alive: must be more than 0"), "{zero:#?}");
}

const CHECKED: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[backend]]
name = "api"
check = { type = "http", interval = "5s", timeout = "1500ms", fall = 2, rise = 4, port = 9000, method = "get", path = "/healthz?deep=1", host = "api.internal", expect_status = "200-204", expect_body = "ok" }
observe = { errors = 5 }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:3002"
  check_port = 9100
  [[backend.server]]
  name = "s3"
  addr = "127.0.0.1:3003"
  check = false
[[backend]]
name = "tcp"
check = { interval = "1s" }
  [[backend.server]]
  name = "t1"
  addr = "127.0.0.1:4001"
[[backend]]
name = "plain"
  [[backend.server]]
  name = "p1"
  addr = "127.0.0.1:5001"
"#;

#[test]
fn health_checks_build_with_defaults() {
    let c = parse(CHECKED, Path::new("c.toml")).unwrap();
    let api = &c.backends[0];
    let check = api.check.as_ref().unwrap();
    assert_eq!(check.interval, std::time::Duration::from_secs(5));
    assert_eq!(check.timeout, std::time::Duration::from_millis(1500));
    assert_eq!((check.fall, check.rise, check.port), (2, 4, Some(9000)));
    let CheckKind::Http(h) = &check.kind else { panic!("http check") };
    assert_eq!(h.method, http::Method::GET);
    assert_eq!(h.path, "/healthz?deep=1");
    assert_eq!(h.host.as_deref(), Some("api.internal"));
    assert_eq!(h.expect_status, StatusRange { min: 200, max: 204 });
    assert!(h.expect_status.contains(204) && !h.expect_status.contains(205));
    assert_eq!(h.expect_body.as_deref(), Some("ok"));
    assert_eq!(api.observe, Some(Observe { errors: 5 }));
    assert!(api.servers[0].check && api.servers[1].check && !api.servers[2].check);
    assert_eq!(check.addr(&api.servers[0]).to_string(), "127.0.0.1:9000", "the check's port");
    assert_eq!(check.addr(&api.servers[1]).to_string(), "127.0.0.1:9100", "the server's check_port wins");

    // HAProxy's defaults: TCP, inter 2s, fall 3, rise 2, timeout = interval.
    let tcp = c.backends[1].check.as_ref().unwrap();
    assert_eq!(tcp.kind, CheckKind::Tcp);
    assert_eq!((tcp.fall, tcp.rise, tcp.port), (3, 2, None));
    assert_eq!(tcp.timeout, tcp.interval, "timeout defaults to the interval");
    assert_eq!(tcp.addr(&c.backends[1].servers[0]).to_string(), "127.0.0.1:4001");
    assert!(c.backends[1].servers[0].check);
    assert!(c.backends[2].check.is_none() && !c.backends[2].servers[0].check, "no check: always up");

    let src = CHECKED.replace(r#"check = { interval = "1s" }"#, r#"check = { type = "http", expect_status = 200 }"#);
    let c = parse(&src, Path::new("c.toml")).unwrap();
    let CheckKind::Http(h) = &c.backends[1].check.as_ref().unwrap().kind else { panic!("http check") };
    assert_eq!((h.method.as_str(), h.path.as_str(), h.host.as_deref()), ("HEAD", "/", None));
    assert_eq!(h.expect_status, StatusRange { min: 200, max: 200 });
    assert_eq!(c.backends[1].check.as_ref().unwrap().interval, std::time::Duration::from_secs(2));
    // With expect_body and no method, GET (a HEAD response has no body).
    let src = CHECKED.replace(r#"check = { interval = "1s" }"#, r#"check = { type = "http", expect_body = "up" }"#);
    let c = parse(&src, Path::new("c.toml")).unwrap();
    let CheckKind::Http(h) = &c.backends[1].check.as_ref().unwrap().kind else { panic!("http check") };
    assert_eq!(h.method, http::Method::GET);
}

#[test]
fn bad_health_check_values_are_refused_with_line_and_key() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[backend]]
name = "a"
check = { type = "udp" }
[[backend]]
name = "b"
check = { type = "http", interval = "1s", timeout = "2s", fall = 0, rise = 1001, port = 70000, method = "HEAD", path = "health", host = "a\nb", expect_status = "399-200", expect_body = "x" }
[[backend]]
name = "c"
check = { type = "tcp", path = "/", expect_status = 200 }
[[backend]]
name = "d"
check = { type = "http", expect_status = "2xx", interval = "0s" }
[[backend]]
name = "e"
check = { type = "http", expect_status = 700, expect_body = "" }
"#;
    let errs = parse(src, Path::new("h.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("h.toml:7:18: backend[0].check.type: `udp` is not a check type"), "{text:#?}");
    assert!(has("h.toml:10:53: backend[1].check.timeout: 2s is longer than the interval (1s)"), "{text:#?}");
    assert!(has("backend[1].check.fall: 0 is out of range (1..=1000)"), "{text:#?}");
    assert!(has("backend[1].check.rise: 1001 is out of range (1..=1000)"), "{text:#?}");
    assert!(has("backend[1].check.port: 70000 is out of range (1..=65535)"), "{text:#?}");
    assert!(has("backend[1].check.path: `health` is not a request path"), "{text:#?}");
    assert!(has("backend[1].check.host: `a\nb` cannot be sent as a Host header"), "{text:#?}");
    assert!(has("backend[1].check.expect_status: the range 399-200 is empty"), "{text:#?}");
    assert!(has("backend[1].check.expect_body: a response to HEAD has no body"), "{text:#?}");
    assert!(has("h.toml:13:32: backend[2].check.path: `path` applies to HTTP checks only"), "{text:#?}");
    assert!(has("backend[2].check.expect_status: `expect_status` applies to HTTP checks only"), "{text:#?}");
    assert!(has("backend[3].check.expect_status: `2xx` is not a status or a range"), "{text:#?}");
    assert!(has("backend[3].check.interval: must be more than 0"), "{text:#?}");
    assert!(has("backend[4].check.expect_status: 700 is not an HTTP status (100..=599)"), "{text:#?}");
    assert!(has("backend[4].check.expect_body: an empty string is in every body"), "{text:#?}");
    assert_eq!(errs.len(), 15, "{text:#?}");
}

#[test]
fn passive_checks_and_server_check_keys_need_an_active_check() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[backend]]
name = "b"
observe = { errors = 3 }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
  check = true
  check_port = 9000
[[backend]]
name = "c"
check = { type = "tcp" }
observe = { errors = 0 }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
  check = false
  check_port = 9000
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:3002"
  check_port = 0
[[backend]]
name = "d"
check = { type = "tcp" }
observe = {}
"#;
    let errs = parse(src, Path::new("p.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("p.toml:7:11: backend[0].observe: passive checks need an active `check` on this backend"), "{text:#?}");
    assert!(has("would stay DOWN for good"), "{text:#?}");
    assert!(
        has("p.toml:11:11: backend[0].server[0].check: `check` has no effect: the backend has no `check`"),
        "{text:#?}"
    );
    assert!(
        has("backend[0].server[0].check_port: `check_port` has no effect: the backend has no `check`"),
        "{text:#?}"
    );
    assert!(has("backend[1].observe.errors: 0 is out of range (1..=1000)"), "{text:#?}");
    assert!(has("backend[1].server[0].check_port: `check_port` has no effect: checks are off"), "{text:#?}");
    assert!(has("backend[1].server[1].check_port: 0 is out of range (1..=65535)"), "{text:#?}");
    assert!(has("backend[2].observe.errors: give the number of consecutive errors"), "{text:#?}");
    assert_eq!(errs.len(), 7, "{text:#?}");
}

#[test]
fn persistence_keys_build_with_defaults() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[backend]]
name = "a"
cookie = { name = "SERVERID", indirect = true, nocache = true, max_idle = "30m" }
stick = { on = "source" }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:3002"
  cookie = "b"
[[backend]]
name = "p"
cookie = { name = "JSESSIONID", mode = "prefix" }
"#;
    let c = parse(src, Path::new("c.toml")).unwrap();
    let a = &c.backends[0];
    let cookie = a.cookie.as_ref().unwrap();
    assert_eq!(
        (cookie.mode, cookie.indirect, cookie.nocache, cookie.httponly),
        (CookieMode::Insert, true, true, false)
    );
    assert_eq!(cookie.max_idle, Some(std::time::Duration::from_secs(1800)));
    assert_eq!(cookie.path, "/");
    assert_eq!(
        a.stick,
        Some(StickPolicy { expire: std::time::Duration::from_secs(1800), size: 100_000, share: false })
    );
    assert_eq!((a.servers[0].cookie.as_str(), a.servers[1].cookie.as_str()), ("s1", "b"));
    assert_eq!(c.backends[1].cookie.as_ref().unwrap().mode, CookieMode::Prefix);
}

#[test]
fn bad_persistence_values_are_refused_with_line_and_key() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
[[backend]]
name = "a"
cookie = { name = "bad name", mode = "sticky" }
[[backend]]
name = "b"
cookie = { name = "X", mode = "prefix", indirect = true, max_life = "1h" }
stick = { on = "header" }
[[backend]]
name = "c"
cookie = { name = "X", max_idle = "0s", path = "a;b" }
stick = { on = "source", size = 0 }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:3001"
  cookie = "x~y"
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:3002"
  cookie = "same"
  [[backend.server]]
  name = "s3"
  addr = "127.0.0.1:3003"
  cookie = "same"
"#;
    let errs = parse(src, Path::new("k.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("k.toml:7:") && has("backend[0].cookie.name: `bad name` is not a valid cookie name"), "{text:#?}");
    assert!(has("backend[0].cookie.mode: `sticky` is not a cookie mode"), "{text:#?}");
    assert!(has("backend[1].cookie.indirect: `indirect` applies to mode \"insert\" only"), "{text:#?}");
    assert!(has("backend[1].cookie.max_life: `max_life` applies to mode \"insert\" only"), "{text:#?}");
    assert!(has("backend[1].stick.on: `header` cannot be stuck on"), "{text:#?}");
    assert!(has("backend[2].cookie.max_idle: must be more than 0"), "{text:#?}");
    assert!(has("backend[2].cookie.path: `a;b` is not a valid cookie path"), "{text:#?}");
    assert!(has("backend[2].stick.size: 0 is out of range"), "{text:#?}");
    assert!(has("backend[2].server[0].cookie: `x~y` is not a valid cookie value"), "{text:#?}");
    assert!(has("backend[2].server[2].cookie: cookie value `same` is already server `s2`'s"), "{text:#?}");
    assert_eq!(errs.len(), 10, "{text:#?}");
}

#[test]
fn pidfile_is_relative_to_the_config_and_must_name_a_file() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n";
    let c = parse(base, Path::new("/etc/tollgate/t.toml")).unwrap();
    assert_eq!(c.global.pidfile, None, "no pidfile by default");
    let c =
        parse(&format!("[global]\npidfile = \"run/tollgate.pid\"\n{base}"), Path::new("/etc/tollgate/t.toml")).unwrap();
    assert_eq!(c.global.pidfile.as_deref(), Some(Path::new("/etc/tollgate/run/tollgate.pid")));
    let c = parse(&format!("[global]\npidfile = \"/run/t.pid\"\n{base}"), Path::new("/etc/tollgate/t.toml")).unwrap();
    assert_eq!(c.global.pidfile.as_deref(), Some(Path::new("/run/t.pid")));
    for bad in ["\"\"", "\"/run/\""] {
        let errs = parse(&format!("[global]\npidfile = {bad}\n{base}"), Path::new("t.toml")).unwrap_err().0;
        assert_eq!(errs.len(), 1, "{bad}");
        assert_eq!((errs[0].line, errs[0].key.as_str()), (2, "global.pidfile"), "{}", errs[0]);
    }
    let errs = parse(&format!("[global]\npidfile = 3\n{base}"), Path::new("t.toml")).unwrap_err().0;
    assert_eq!(errs[0].key, "global.pidfile");
}

/// Left out, `max_connections` is marked so for the server to derive it from
/// the file descriptor limit; written, it is taken as it is.
#[test]
fn max_connections_left_out_is_marked_for_derivation() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n";
    let c = parse(base, Path::new("t.toml")).unwrap();
    assert_eq!((c.global.max_connections, c.global.max_connections_set), (DEFAULT_MAX_CONNECTIONS, false));
    let c = parse(&format!("[global]\nmax_connections = 500\n{base}"), Path::new("t.toml")).unwrap();
    assert_eq!((c.global.max_connections, c.global.max_connections_set), (500, true));
    let errs = parse(&format!("[global]\nmax_connections = 0\n{base}"), Path::new("t.toml")).unwrap_err().0;
    assert_eq!((errs[0].line, errs[0].key.as_str()), (2, "global.max_connections"), "{}", errs[0]);
}

#[test]
fn admin_section_defaults_and_errors() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\n";
    let none = parse(base, Path::new("a.toml")).unwrap();
    assert!(none.admin.is_none(), "no [admin]: no admin interfaces");

    let dflt = parse(&format!("{base}[admin]\n"), Path::new("/etc/tg/a.toml")).unwrap();
    let a = dflt.admin.unwrap();
    assert_eq!(a.bind, Some("127.0.0.1:8404".parse().unwrap()));
    assert_eq!((a.token, a.sockets, a.refresh, a.read_only), (None, vec![], std::time::Duration::from_secs(5), false));
    assert!(a.allowed_hosts.is_empty(), "only the bind address (and localhost) by default");

    let sock = parse(
        &format!("{base}[admin]\nsocket = \"run/admin.sock\"\ntoken = \"t0k\"\nrefresh = \"2s\"\n"),
        Path::new("/etc/tg/a.toml"),
    )
    .unwrap()
    .admin
    .unwrap();
    assert_eq!(sock.bind, None, "a socket alone: no HTTP listener");
    assert_eq!(sock.socket_path(), Some(Path::new("/etc/tg/run/admin.sock")));
    let unix = |path: &str, mode, uid, gid| SocketListen::Unix(UnixSocket { path: path.into(), mode, uid, gid });
    assert_eq!(
        sock.sockets,
        [CommandSocket { listen: unix("/etc/tg/run/admin.sock", 0o600, None, None), level: CliLevel::Admin }]
    );
    assert_eq!((sock.token.as_deref(), sock.refresh), (Some("t0k"), std::time::Duration::from_secs(2)));

    let src = format!(
        "{base}[admin]\nbind = \"localhost\"\ntoken = \"with space\"\nsocket = \"dir/\"\nrefresh = \"soon\"\nport = 1\n"
    );
    let errs = parse(&src, Path::new("a.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    // An unknown key is named with the others: it takes nothing away to check.
    assert_eq!(text.len(), 5, "{text:#?}");
    assert!(text[4].contains("a.toml:9:1: admin.port: unknown field `port`"), "{text:#?}");
    assert!(text[0].contains("a.toml:5:8: admin.bind"), "{text:#?}");
    let errs = parse(&src.replace("port = 1\n", ""), Path::new("a.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("a.toml:5:8: admin.bind"), "{text:#?}");
    assert!(has("a.toml:6:9: admin.token: must be non-empty printable ASCII"), "{text:#?}");
    assert!(has("a.toml:7:10: admin.socket: must be the path of a socket file"), "{text:#?}");
    assert!(has("admin.refresh"), "{text:#?}");
}

/// `admin.socket` as a table or a list: paths with mode and owner, TCP
/// addresses, each with its level (admin for a path, operator for TCP).
#[test]
fn command_sockets_with_levels_modes_and_owners() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\n[admin]\n";
    let src = format!(
        "{base}socket = [{{ path = \"/run/a.sock\", mode = 0o660, user = \"root\", group = \"0\" }}, \
         {{ path = \"/run/b.sock\", mode = \"0644\", level = \"user\" }}, {{ addr = \"127.0.0.1:9999\" }}, \
         {{ addr = \"[::1]:9998\", level = \"admin\" }}]\n"
    );
    let a = parse(&src, Path::new("a.toml")).unwrap().admin.unwrap();
    let unix = |path: &str, mode, uid, gid| SocketListen::Unix(UnixSocket { path: path.into(), mode, uid, gid });
    assert_eq!(
        a.sockets,
        [
            CommandSocket { listen: unix("/run/a.sock", 0o660, Some(0), Some(0)), level: CliLevel::Admin },
            CommandSocket { listen: unix("/run/b.sock", 0o644, None, None), level: CliLevel::User },
            CommandSocket { listen: SocketListen::Tcp("127.0.0.1:9999".parse().unwrap()), level: CliLevel::Operator },
            CommandSocket { listen: SocketListen::Tcp("[::1]:9998".parse().unwrap()), level: CliLevel::Admin },
        ]
    );
    assert_eq!(a.bind, None, "sockets alone: no HTTP listener");
    let one = parse(&format!("{base}socket = {{ addr = \"0.0.0.0:9999\", level = \"admin\" }}\n"), Path::new("a.toml"))
        .unwrap();
    let w = one.warnings.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    assert!(w.contains("admin.socket: level admin on 0.0.0.0:9999, not a loopback address"), "{w}");
    let err = |s: &str| parse(&format!("{base}socket = {s}\n"), Path::new("a.toml")).unwrap_err().to_string();
    assert!(err("{ addr = \"127.0.0.1:1\", level = \"root\" }").contains("admin.socket.level: `root` is not a level"));
    assert!(err("{ path = \"/a\", addr = \"127.0.0.1:1\" }").contains("takes `path` (a Unix socket) or `addr` (TCP)"));
    assert!(err("{ addr = \"127.0.0.1:1\", mode = 0o600 }").contains("are for a socket file"));
    assert!(err("[{ path = \"/a\", mode = 0o1777 }]").contains("admin.socket[0].mode: permission bits"));
    assert!(err("{ path = \"/a\", user = \"no-such-user-here\" }").contains("admin.socket.user: there is no user"));
    assert!(err("[{ path = \"/a\" }, { path = \"/a\" }]").contains("the same socket is listed twice"));
    assert!(err("{ addr = \"localhost:1\" }").contains("admin.socket.addr: `localhost:1` is not an IP:port"));
}

#[test]
fn admin_allowed_hosts() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\n";
    let src = format!("{base}[admin]\nallowed_hosts = [\"Stats.Example.com.\", \"10.0.0.5:8404\", \"[fd00::5]\"]\n");
    let a = parse(&src, Path::new("a.toml")).unwrap().admin.unwrap();
    let got: Vec<String> = a.allowed_hosts.iter().map(ToString::to_string).collect();
    assert_eq!(got, ["stats.example.com", "10.0.0.5:8404", "[fd00::5]"]);
    assert_eq!(a.allowed_hosts[0].host, crate::HostName::Name("stats.example.com".into()));

    let src = format!("{base}[admin]\nallowed_hosts = [\"ok.example\", \"http://x.example/\", \"*\", \"a:99999\"]\n");
    let errs = parse(&src, Path::new("a.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(text.len(), 3, "{text:#?}");
    assert!(
        text[0].starts_with("a.toml:5:32: admin.allowed_hosts[1]: `http://x.example/` is not a host name"),
        "{text:#?}"
    );
    assert!(text[1].contains("admin.allowed_hosts[2]: `*`"), "{text:#?}");
    assert!(text[2].contains("admin.allowed_hosts[3]: `a:99999`"), "{text:#?}");
    let errs = parse(&format!("{base}[admin]\nallowed_hosts = \"one.example\"\n"), Path::new("a.toml")).unwrap_err().0;
    assert!(errs[0].to_string().contains("allowed_hosts"), "{}", errs[0]);
}

#[test]
fn h2_settings_inherit_from_defaults_and_h2c_from_the_frontend() {
    let src = r#"
[defaults]
h2 = { max_concurrent_streams = 50, max_header_list_size = "32KiB" }
[[frontend]]
name = "a"
bind = ["127.0.0.1:8080", { addr = "127.0.0.1:8081", h2c = false }]
h2c = true
h2 = { initial_window_size = "1MiB", max_resets = 10, reset_window = "2s" }
[[frontend]]
name = "b"
bind = ["127.0.0.1:8090", { addr = "127.0.0.1:8091", h2c = true }]
"#;
    let c = parse(src, Path::new("h.toml")).unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (&c.frontends[0], &c.frontends[1]);
    assert_eq!(a.binds.iter().map(|b| b.h2c).collect::<Vec<_>>(), [true, false], "a bind overrides its frontend");
    assert_eq!(b.binds.iter().map(|b| b.h2c).collect::<Vec<_>>(), [false, true], "off by default");
    let d = H2::default();
    assert_eq!(
        a.h2,
        H2 {
            max_concurrent_streams: 50,
            max_header_list_size: 32 * 1024,
            initial_window_size: 1024 * 1024,
            max_resets: 10,
            reset_window: std::time::Duration::from_secs(2),
            ..d
        }
    );
    assert_eq!(b.h2, H2 { max_concurrent_streams: 50, max_header_list_size: 32 * 1024, ..d });
    assert_eq!((d.max_concurrent_streams, d.max_frame_size, d.header_table_size), (100, 16_384, 4096));
}

#[test]
fn bad_h2_values_are_refused_with_line_and_key() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
h2 = { max_concurrent_streams = 0, initial_window_size = "4GiB", max_frame_size = "8KiB" }
[[frontend]]
name = "two"
bind = ["127.0.0.1:8081"]
h2 = { connection_window_size = 100, max_header_list_size = "1B", max_resets = 0, reset_window = "0s" }
"#;
    let errs = parse(src, Path::new("k.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("k.toml:5:33: frontend[0].h2.max_concurrent_streams: 0 is out of range (1..=100000)"), "{text:#?}");
    assert!(
        has("frontend[0].h2.initial_window_size: 4294967296 bytes is out of range (1024..=2147483647)"),
        "{text:#?}"
    );
    assert!(has("frontend[0].h2.max_frame_size: 8192 bytes is out of range (16384..=16777215)"), "{text:#?}");
    assert!(has("k.toml:9:33: frontend[1].h2.connection_window_size: 100 bytes is out of range"), "{text:#?}");
    assert!(has("frontend[1].h2.max_header_list_size: 1 bytes is out of range"), "{text:#?}");
    assert!(has("frontend[1].h2.max_resets: 0 is out of range"), "{text:#?}");
    assert!(has("frontend[1].h2.reset_window: must be more than 0"), "{text:#?}");
    assert_eq!(errs.len(), 7, "{text:#?}");
}

#[test]
fn idle_poll_is_off_by_default_takes_microseconds_and_is_bounded() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n";
    let c = parse(base, Path::new("x.toml")).unwrap();
    assert_eq!(c.global.idle_poll, std::time::Duration::ZERO);
    let c = parse(&format!("[global]\nidle_poll = \"250us\"\n{base}"), Path::new("x.toml")).unwrap();
    assert_eq!(c.global.idle_poll, std::time::Duration::from_micros(250));
    let errs = parse(&format!("[global]\nidle_poll = \"20ms\"\n{base}"), Path::new("x.toml")).unwrap_err().0;
    assert_eq!((errs[0].line, errs[0].key.as_str()), (2, "global.idle_poll"), "{}", errs[0]);
    assert!(errs[0].message.contains("at most 10ms"), "{}", errs[0]);
}

#[test]
fn splice_is_on_by_default_and_takes_a_boolean() {
    let base = "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n";
    assert!(parse(base, Path::new("x.toml")).unwrap().global.splice);
    let c = parse(&format!("[global]\nsplice = false\n{base}"), Path::new("x.toml")).unwrap();
    assert!(!c.global.splice);
    let errs = parse(&format!("[global]\nworkers = 1\nsplice = \"no\"\n{base}"), Path::new("x.toml")).unwrap_err().0;
    assert_eq!((errs[0].line, errs[0].key.as_str()), (3, "global.splice"), "{}", errs[0]);
}

#[test]
fn http_binds_defer_accepts_unless_told_not_to() {
    let src = "[[frontend]]\nname = \"web\"\nbind = [\":8080\", { addr = \":8081\" }, { addr = \":8082\", defer_accept = false }]\n";
    let c = parse(src, Path::new("x.toml")).unwrap();
    let got: Vec<bool> = c.frontends[0].binds.iter().map(|b| b.defer_accept).collect();
    assert_eq!(got, [true, true, false]);
    let errs = parse(&src.replace("defer_accept = false", "defer_accept = 1"), Path::new("x.toml")).unwrap_err().0;
    assert_eq!((errs[0].line, errs[0].key.as_str()), (3, "frontend[0].bind[2].defer_accept"), "{}", errs[0]);
}

#[test]
fn microseconds_are_for_idle_poll_only() {
    let src = "[defaults]\ntimeout = { connect = \"500us\" }\n[global]\ngrace_period = \"1500us\"\n\
               [[frontend]]\nname = \"web\"\nbind = [\":8080\"]\n";
    let errs = parse(src, Path::new("x.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(errs.len(), 2, "{text:#?}");
    assert_eq!((errs[0].line, errs[0].key.as_str()), (2, "defaults.timeout.connect"), "{}", errs[0]);
    assert!(errs[0].message.contains("whole number of milliseconds"), "{}", errs[0]);
    assert_eq!((errs[1].line, errs[1].key.as_str()), (4, "global.grace_period"), "{}", errs[1]);
    assert!(errs[1].message.contains("whole number of milliseconds"), "{}", errs[1]);
    // Whole milliseconds written in microseconds are still whole milliseconds.
    let src = src.replace("1500us", "3000us").replace("\"500us", "\"2000us");
    let c = parse(&src, Path::new("x.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.global.grace_period, std::time::Duration::from_millis(3));
}

/// `access_log` to a syslog daemon: `syslog` (/dev/log), `syslog:PATH` (a
/// relative path from the file's directory), `syslog:udp:IP:PORT`.
#[test]
fn access_log_to_syslog() {
    let target = |v: &str| {
        let src = format!("[global]\naccess_log = \"{v}\"\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\n");
        parse(&src, Path::new("/etc/tollgate/t.toml")).map(|c| c.global.access_log)
    };
    assert_eq!(target("syslog").unwrap(), AccessLogTarget::Syslog(SyslogTarget::Unix("/dev/log".into())));
    assert_eq!(
        target("syslog:/run/log.sock").unwrap(),
        AccessLogTarget::Syslog(SyslogTarget::Unix("/run/log.sock".into()))
    );
    assert_eq!(
        target("syslog:log.sock").unwrap(),
        AccessLogTarget::Syslog(SyslogTarget::Unix("/etc/tollgate/log.sock".into()))
    );
    assert_eq!(
        target("syslog:udp:10.0.0.5:514").unwrap(),
        AccessLogTarget::Syslog(SyslogTarget::Udp("10.0.0.5:514".parse().unwrap()))
    );
    let e = target("syslog:udp:loghost").unwrap_err().to_string();
    assert!(e.contains("global.access_log") && e.contains("takes an IP address and a port"), "{e}");
}

/// `${name}` in a header rule's value: a variable filled in per request;
/// `$${` a literal `${`; an unknown or unclosed one is an error at its key.
#[test]
fn variables_in_header_values() {
    use crate::{EditValue, ValuePart, Var};
    let p = |s: &str| EditValue::parse(s).map(|v| v.parts);
    assert_eq!(p("${client_ip}").unwrap(), [ValuePart::Var(Var::ClientIp)]);
    assert_eq!(
        p("for ${host}${path}!").unwrap(),
        [
            ValuePart::Text(b"for ".to_vec()),
            ValuePart::Var(Var::Host),
            ValuePart::Var(Var::Path),
            ValuePart::Text(b"!".to_vec())
        ]
    );
    assert_eq!(p("cost $5, $${x}").unwrap(), [ValuePart::Text(b"cost $5, ${x}".to_vec())]);
    assert_eq!(EditValue::parse("plain").unwrap().literal(), Some(&b"plain"[..]));
    assert_eq!(EditValue::parse("").unwrap().literal(), Some(&b""[..]));
    assert!(p("${nope}").unwrap_err().contains("unknown variable `${nope}` (known: client_ip, client_port"));
    assert!(p("a ${host").unwrap_err().contains("no closing `}`"));
    let src = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\n  [[frontend.rule]]\n  \
               set_request_headers = { \"X-A\" = \"${client}\" }\n";
    let e = parse(src, Path::new("t.toml")).unwrap_err().to_string();
    assert!(
        e.contains("frontend[0].rule[0].set_request_headers.X-A") && e.contains("unknown variable `${client}`"),
        "{e}"
    );
}

/// `user` and `group`: looked up at load; a name the system does not know is
/// an error at its key; `user` alone takes the user's primary group.
#[test]
fn user_and_group_are_looked_up_at_load() {
    let run_as = |keys: &str| {
        let src = format!("[global]\n{keys}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\n");
        parse(&src, Path::new("t.toml")).map(|c| c.global.run_as).map_err(|e| e.to_string())
    };
    assert_eq!(run_as("").unwrap(), None);
    let root = run_as("user = \"root\"").unwrap().unwrap();
    assert_eq!((root.user, root.group.1), (Some(("root".into(), 0)), 0));
    let numeric = run_as("user = \"0\"\ngroup = \"0\"").unwrap().unwrap();
    assert_eq!((numeric.user, numeric.group), (Some(("root".into(), 0)), ("root".into(), 0)));
    // Ids without an account, as containers use them: with a group only.
    let bare = run_as("user = \"4242\"\ngroup = \"4243\"").unwrap().unwrap();
    assert_eq!((bare.user, bare.group.1), (Some(("4242".into(), 4242)), 4243));
    let e = run_as("user = \"4242\"").unwrap_err();
    assert!(e.contains("t.toml:2:") && e.contains("global.user: there is no user `4242`"), "{e}");
    let e = run_as("user = \"no-such-user-here\"\ngroup = \"no-such-group-here\"").unwrap_err();
    assert!(e.contains("global.user: there is no user `no-such-user-here`"), "{e}");
    assert!(e.contains("t.toml:3:") && e.contains("global.group: there is no group `no-such-group-here`"), "{e}");
    let group_only = run_as("group = \"root\"").unwrap().unwrap();
    assert_eq!((group_only.user, group_only.group), (None, ("root".into(), 0)));
}

/// `disabled = true`: the server starts in maintenance (HAProxy's `disabled`).
#[test]
fn a_disabled_server() {
    let src = "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\n[[backend]]\nname = \"b\"\n\
               \x20 [[backend.server]]\n  name = \"s1\"\n  addr = \"127.0.0.1:81\"\n  disabled = true\n\
               \x20 [[backend.server]]\n  name = \"s2\"\n  addr = \"127.0.0.1:82\"\n";
    let c = parse(src, Path::new("t.toml")).unwrap();
    assert_eq!((c.backends[0].servers[0].disabled, c.backends[0].servers[1].disabled), (true, false));
}

/// `compression`: `true` (the defaults), `false`, or a table; each mistake at
/// its key.
#[test]
fn compression_keys() {
    let cfg = |fe: &str, be: &str| {
        let src = format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\ndefault_backend = \"b\"\n{fe}\n\
             [[backend]]\nname = \"b\"\n{be}\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"127.0.0.1:81\"\n"
        );
        parse(&src, Path::new("t.toml")).map_err(|e| e.to_string())
    };
    let c = cfg("compression = true", "").unwrap();
    assert_eq!(c.frontends[0].compression.as_deref(), Some(&Compression::defaults()));
    assert_eq!(c.backends[0].compression, None);
    let d = Compression::defaults();
    assert_eq!(
        (d.codings.clone(), d.min_size, d.gzip_level, d.br_level, d.zstd_level),
        (vec![Coding::Zstd, Coding::Gzip, Coding::Br], 1024, 2, 1, 3)
    );
    assert!(d.types.contains(&"text/*".to_string()) && d.types.contains(&"application/json".to_string()));
    let c = cfg("", "compression = false").unwrap();
    assert!(!c.backends[0].compression.as_ref().unwrap().enabled);
    let c = cfg(
        "compression = { codings = [\"gzip\", \"br\"], types = [\"Text/HTML\", \"application/*\"], min_size = \"2KiB\", level = { gzip = 6, br = 5 }, decompress = true }",
        "",
    )
    .unwrap();
    let t = c.frontends[0].compression.as_deref().unwrap();
    assert_eq!(
        (t.codings.clone(), t.types.clone(), t.min_size),
        (vec![Coding::Gzip, Coding::Br], vec!["text/html".to_string(), "application/*".to_string()], 2048)
    );
    assert_eq!((t.gzip_level, t.br_level, t.zstd_level, t.decompress), (6, 5, 3, true));
    assert!(!Compression::defaults().decompress);
    let e = cfg(
        "compression = { codings = [\"deflate\", \"gzip\", \"gzip\"], types = [\"html\"], level = { gzip = 10 } }",
        "",
    )
    .unwrap_err();
    assert!(e.contains("frontend[0].compression.codings[0]: `deflate` is not a coding"), "{e}");
    assert!(e.contains("frontend[0].compression.codings[2]: `gzip` is listed twice"), "{e}");
    assert!(e.contains("frontend[0].compression.types[0]: `html` is not a media type"), "{e}");
    assert!(e.contains("frontend[0].compression.level.gzip: 10 is out of range (1..=9)"), "{e}");
    assert!(
        cfg("", "compression = { codings = [] }")
            .unwrap_err()
            .contains("backend[0].compression.codings: names no coding")
    );
}

/// A rule's `early_hints`: `Link` values; not with `redirect` or `deny`.
#[test]
fn early_hints_on_a_rule() {
    let rule = |r: &str| {
        let src = format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\n  [[frontend.rule]]\n  when = {{ path_prefix = \"/\" }}\n  {r}\n"
        );
        parse(&src, Path::new("t.toml")).map_err(|e| e.to_string())
    };
    let c = rule("early_hints = [\"</a.css>; rel=preload; as=style\"]").unwrap();
    assert_eq!(
        c.frontends[0].rules[0].early_hints,
        [http::HeaderValue::from_static("</a.css>; rel=preload; as=style")]
    );
    let e = rule("early_hints = [\"a.css\", \"</b>\\u0001x\"]").unwrap_err();
    assert!(e.contains("frontend[0].rule[0].early_hints[0]: `a.css` is not a Link field value"), "{e}");
    assert!(e.contains("frontend[0].rule[0].early_hints[1]"), "{e}");
    let e = rule("early_hints = [\"</a>\"]\n  deny = 403").unwrap_err();
    assert!(
        e.contains(
            "early_hints: hints go before a server's answer: not with `redirect`, `deny`, `tarpit` or `silent_drop`"
        ),
        "{e}"
    );
}

/// A rule's `rewrite_path`: a regex and its replacement; on requests that go
/// to a server only; not in a tcp frontend.
#[test]
fn rewrite_path_on_a_rule() {
    let rule = |mode: &str, r: &str| {
        let src = format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:80\"]\n{mode}\n  [[frontend.rule]]\n  when = {{ sni = \"a\" }}\n  {r}\n"
        );
        parse(&src, Path::new("t.toml")).map_err(|e| e.to_string())
    };
    let c = rule("", "rewrite_path = { regex = '^/api/(.*)', to = \"/v2/$1\" }").unwrap();
    let rw = c.frontends[0].rules[0].rewrite_path.as_ref().unwrap();
    assert_eq!(rw.apply("/api/users/7"), "/v2/users/7");
    assert_eq!(rw.apply("/other"), "/other");
    let c = rule("", "rewrite_path = { regex = \"^/app\", to = \"\" }").unwrap();
    assert_eq!(c.frontends[0].rules[0].rewrite_path.as_ref().unwrap().apply("/app"), "/", "never an empty path");
    let e = rule("", "rewrite_path = { regex = \"(\", to = \"/\" }").unwrap_err();
    assert!(e.contains("frontend[0].rule[0].rewrite_path.regex: not a regular expression"), "{e}");
    let e = rule("", "rewrite_path = { regex = \"^/\", to = \"/a?b\" }").unwrap_err();
    assert!(e.contains("frontend[0].rule[0].rewrite_path.to: '?' cannot be in a path"), "{e}");
    let e = rule("", "rewrite_path = { regex = \"^/\", to = \"/\" }\n  deny = 403").unwrap_err();
    assert!(e.contains("rewrite_path: the path is rewritten for the server: not with"), "{e}");
    let e = rule(
        "mode = \"tcp\"\ndefault_backend = \"b\"",
        "rewrite_path = { regex = \"^/\", to = \"/\" }\n  backend = \"b\"",
    )
    .unwrap_err();
    assert!(e.contains("frontend[0].rule[0].rewrite_path: `rewrite_path` acts on HTTP requests"), "{e}");
}
