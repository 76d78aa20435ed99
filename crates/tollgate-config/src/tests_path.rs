//! Path rules on normalised paths (`path_normalize`, `path_case_insensitive`)
//! and host rules with a trailing dot (security issue 33 G).

use super::*;
use std::path::Path;

const RULES: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
default_backend = "app"
  [[frontend.rule]]
  when = { path_prefix = "/admin/" }
  deny = 403
  [[frontend.rule]]
  when = { path_prefix = "/api/" }
  backend = "api"
  [[frontend.rule]]
  when = { path = "/Private/%7Ex" }
  deny = 403
  [[frontend.rule]]
  when = { path_regex = "^/secret(/|$)" }
  deny = 403
  [[frontend.rule]]
  when = { path_prefix = "/Docs/" }
  backend = "api"
  path_case_insensitive = true
  [[frontend.rule]]
  when = { path_prefix = "/Case/" }
  deny = 403
  path_case_insensitive = false
  [[frontend.rule]]
  when = { path_prefix = "/staff/" }
  auth = { userlist = "staff" }

[[userlist]]
name = "staff"
users = [{ name = "carol", insecure_password = "plain" }]

[[backend]]
name = "app"
  [[backend.server]]
  name = "a"
  addr = "127.0.0.1:3001"
[[backend]]
name = "api"
  [[backend.server]]
  name = "a"
  addr = "127.0.0.1:3002"
"#;

fn config(src: &str) -> Config {
    parse(src, Path::new("p.toml")).unwrap_or_else(|e| panic!("{e}"))
}

/// The index of the first rule of frontend 0 that a request for `target` on
/// host `host` matches, as the proxy decides it (exchange.rs: the path in the
/// frontend's form, folded for a case-insensitive rule).
fn first_match(c: &Config, host: &str, target: &str) -> Option<usize> {
    let fe = &c.frontends[0];
    let raw = target.split_once('?').map_or(target, |(p, _)| p);
    let path = path::match_form(raw, fe.path_normalize, false);
    let folded = std::cell::OnceCell::new();
    let folded = || folded.get_or_init(|| path::match_form(raw, fe.path_normalize, true)).as_ref();
    let headers = http::HeaderMap::new();
    let facts = RequestFacts {
        host,
        path: &path,
        method: &http::Method::GET,
        headers: &headers,
        src: "192.0.2.1".parse().unwrap(),
        tls: false,
        sni: "",
        counters: &crate::NoCounters,
        client_cert: None,
    };
    fe.rules.iter().position(|r| r.matches(&facts, folded))
}

#[test]
fn a_deny_rule_for_a_prefix_catches_every_spelling_of_it() {
    let c = config(RULES);
    assert!(c.frontends[0].path_normalize, "on by default");
    for p in [
        "/admin/",
        "/admin/x?y=1",
        "/%61dmin/",
        "/%61DMIN/",
        "/ADMIN/",
        "/Admin/x",
        "/admin;x/",
        "/admin;jsessionid=1/users",
        "/%2e/admin/",
        "/%2E%2e/admin/",
        "/./admin/",
        "/x/../admin/",
        "/x/..;/admin/",
        "//admin/",
        "/../admin/",
        "/api/../admin/x",
        "/admin/.",
    ] {
        assert_eq!(first_match(&c, "h", p), Some(0), "{p}");
    }
    // Not the same path: an encoded slash is no separator, and the prefix is `/admin/`.
    for p in ["/admin%2Fx", "/administrator/", "/admin", "/x/admin/", "/admin/../x"] {
        assert_ne!(first_match(&c, "h", p), Some(0), "{p}");
    }
}

#[test]
fn routing_rules_match_the_normal_form_but_keep_case_by_default() {
    let c = config(RULES);
    assert!(!c.frontends[0].rules[1].path_case_insensitive);
    assert_eq!(first_match(&c, "h", "/api/v1"), Some(1));
    assert_eq!(first_match(&c, "h", "//api/./v1"), Some(1));
    assert_eq!(first_match(&c, "h", "/%61pi/v1"), Some(1));
    assert_eq!(first_match(&c, "h", "/API/v1"), None, "paths are case-sensitive");
    // path_case_insensitive = true on a routing rule; its value is folded.
    assert_eq!(first_match(&c, "h", "/docs/a"), Some(4));
    assert_eq!(first_match(&c, "h", "/DOCS/a"), Some(4));
    // ... and false on a deny rule.
    assert!(!c.frontends[0].rules[5].path_case_insensitive);
    assert_eq!(first_match(&c, "h", "/Case/x"), Some(5));
    assert_eq!(first_match(&c, "h", "/case/x"), None);
    // An auth rule compares without case by default, like a deny rule.
    assert!(c.frontends[0].rules[6].path_case_insensitive);
    assert_eq!(first_match(&c, "h", "/STAFF/x"), Some(6));
}

#[test]
fn path_values_are_put_in_the_same_form_and_regexes_fold_case() {
    let c = config(RULES);
    let rules = &c.frontends[0].rules;
    assert!(matches!(&rules[2].when, Condition::PathExact(v) if v == &["/private/~x"]), "{:?}", rules[2].when);
    assert!(matches!(&rules[4].when, Condition::PathPrefix(v) if v == &["/docs/"]), "{:?}", rules[4].when);
    assert_eq!(first_match(&c, "h", "/PRIVATE/~x"), Some(2));
    assert_eq!(first_match(&c, "h", "/private/%7ex;a"), Some(2));
    assert_eq!(first_match(&c, "h", "/SECRET"), Some(3));
    assert_eq!(first_match(&c, "h", "/a/..//%53ecret/x"), Some(3));
    assert_eq!(first_match(&c, "h", "/secretary"), None);
}

#[test]
fn path_normalize_false_matches_the_path_as_it_came() {
    let src = RULES.replacen("default_backend = \"app\"", "default_backend = \"app\"\npath_normalize = false", 1);
    let c = config(&src);
    assert!(!c.frontends[0].path_normalize);
    assert_eq!(first_match(&c, "h", "/admin/"), Some(0));
    assert_eq!(first_match(&c, "h", "/ADMIN/"), Some(0), "case folding is a separate switch");
    for p in ["/%61dmin/", "/./admin/", "//admin/", "/admin;x/"] {
        assert_eq!(first_match(&c, "h", p), None, "{p}");
    }
}

#[test]
fn the_new_keys_are_checked() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
path_normalize = "yes"
[[frontend]]
name = "web2"
bind = ["127.0.0.1:8081"]
  [[frontend.rule]]
  when = { host = "a" }
  deny = 403
  path_case_insensitive = true
[[frontend]]
name = "relay"
mode = "tcp"
bind = ["127.0.0.1:8082"]
path_normalize = true
  [[frontend.rule]]
  when = { src = "10.0.0.0/8" }
  backend = "b"
  path_case_insensitive = false
[[backend]]
name = "b"
mode = "tcp"
  [[backend.server]]
  name = "s"
  addr = "127.0.0.1:1"
"#;
    let errs = parse(src, Path::new("k.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("path_normalize"), "{text:#?}");
    // The type error stops serde before the rest; check the rest without it.
    let src = src.replace("path_normalize = \"yes\"", "");
    let errs = parse(&src, Path::new("k.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("frontend[1].rule[0].path_case_insensitive: the rule's `when` tests no path"), "{text:#?}");
    assert!(has("frontend[2].path_normalize: `path_normalize` is for HTTP"), "{text:#?}");
    assert!(has("frontend[2].rule[0].path_case_insensitive: `path_case_insensitive` acts on HTTP"), "{text:#?}");
    assert_eq!(text.len(), 3, "{text:#?}");
}

#[test]
fn host_rules_ignore_one_trailing_dot() {
    let src = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
default_backend = "app"
  [[frontend.rule]]
  when = { host = "example.com" }
  deny = 403
  [[frontend.rule]]
  when = { host = "*.example.com" }
  deny = 404
  [[frontend.rule]]
  when = { host = "fqdn.example.org." }
  deny = 405
[[backend]]
name = "app"
  [[backend.server]]
  name = "a"
  addr = "127.0.0.1:3001"
"#;
    let c = config(src);
    let headers = http::HeaderMap::new();
    let host_rule = |host: &str| {
        let facts = RequestFacts {
            host,
            path: "/",
            method: &http::Method::GET,
            headers: &headers,
            src: "192.0.2.1".parse().unwrap(),
            tls: false,
            sni: "",
            counters: &crate::NoCounters,
            client_cert: None,
        };
        c.frontends[0].rules.iter().position(|r| r.when.matches(&facts))
    };
    for (host, want) in [
        ("example.com", Some(0)),
        ("example.com.", Some(0)),
        ("a.example.com.", Some(1)),
        ("a.b.example.com.", Some(1)),
        ("fqdn.example.org", Some(2)),
        ("fqdn.example.org.", Some(2)),
        ("example.com..", None),
        (".example.com.", None),
        ("xexample.com.", None),
        (".", None),
    ] {
        assert_eq!(host_rule(host), want, "{host}");
    }
    let pats = [HostPattern::Exact("example.com".into()), HostPattern::Suffix(".example.com".into())];
    assert!(pats[0].matches("example.com."));
    assert!(pats[1].matches("www.example.com."));
    assert!(!pats[1].matches("example.com."));
    // The same patterns serve `sni` conditions (a ClientHello may carry the dot).
    let sni = Condition::Sni(pats.to_vec());
    let facts = RequestFacts {
        host: "",
        path: "",
        method: &http::Method::GET,
        headers: &headers,
        src: "192.0.2.1".parse().unwrap(),
        tls: true,
        sni: "www.example.com.",
        counters: &crate::NoCounters,
        client_cert: None,
    };
    assert!(sni.matches(&facts));
}
