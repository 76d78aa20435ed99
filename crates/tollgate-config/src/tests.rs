use super::*;
use std::path::Path;

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
    assert!(has("frontend[0].rule[2].redirect: give exactly one of `location` or `prefix`"), "{text:#?}");
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
[[backend]]
name = "b"
timeout = { keep_alive = "1s" }
"#;
    let errs = parse(src, Path::new("s.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("frontend[0].timeout.server: `server` has no effect on a frontend"), "{text:#?}");
    assert!(has("backend[0].timeout.keep_alive: `keep_alive` has no effect on a backend"), "{text:#?}");
    assert!(has("frontend[0].rule[0].when.host: an empty list never matches"), "{text:#?}");
    assert!(has("frontend[0].rule[1].redirect.prefix: an empty prefix"), "{text:#?}");
    assert!(has("frontend[1].bind[0]: 127.0.0.1:8080 overlaps 0.0.0.0:8080"), "{text:#?}");
    assert_eq!(errs.len(), 5, "{text:#?}");
}
