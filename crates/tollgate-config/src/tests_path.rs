//! Host rules with a trailing dot (security issue 33 G).

use super::*;
use std::path::Path;

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
    let c = parse(src, Path::new("p.toml")).unwrap();
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
    };
    assert!(sni.matches(&facts));
}
