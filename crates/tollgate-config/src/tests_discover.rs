//! `discover` on a backend: the name looked up, its period, the settings of
//! the servers found, and each mistake reported with its key.

use super::*;
use crate::discover::{Found, Source};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

fn parse(toml: &str) -> Result<Config, ConfigErrors> {
    crate::parse(toml, Path::new("disc.toml"))
}

fn config(discover: &str, backend_extra: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\ndefault_backend = \"app\"\n\
         [[backend]]\nname = \"app\"\ndiscover = {{ {discover} }}\n{backend_extra}"
    )
}

#[test]
fn srv_and_address_names_with_their_defaults() {
    let c = parse(&config("dns_srv = \"_HTTP._tcp.App.Internal.\"", "")).unwrap();
    let d = c.backends[0].discover.as_deref().unwrap();
    assert_eq!(d.source, Source::Srv("_http._tcp.app.internal".into()));
    assert_eq!(
        (d.every, d.server.weight, d.server.check, d.server.discovered),
        (Duration::from_secs(10), 1, false, true)
    );
    assert!(c.backends[0].servers.is_empty(), "nothing is looked up at load");
    assert_eq!(d.source.to_string(), "SRV _http._tcp.app.internal");

    let c = parse(&config(
        "dns = \"app.internal:8080\", every = \"30s\", server = { weight = 20, maxconn = 50, check = false, send_proxy = \"v2\" }",
        "check = { type = \"http\", path = \"/health\" }\n  [[backend.server]]\n  name = \"fixed\"\n  addr = \"127.0.0.1:9000\"\n",
    ))
    .unwrap();
    let d = c.backends[0].discover.as_deref().unwrap();
    assert_eq!(d.source, Source::Addrs(DnsAddr { host: "app.internal".into(), port: 8080 }));
    assert_eq!(d.every, Duration::from_secs(30));
    let s = &d.server;
    assert_eq!(
        (s.weight, s.maxconn, s.check, s.send_proxy, s.proto),
        (20, Some(50), false, Some(ProxyProtocol::V2), Proto::H1)
    );
    assert_eq!(c.backends[0].servers.len(), 1, "listed servers stay beside the found ones");
    // With the backend's check, found servers are checked unless the template says not.
    let c = parse(&config("dns = \"app.internal:8080\"", "check = { type = \"http\", path = \"/health\" }")).unwrap();
    assert!(c.backends[0].discover.as_deref().unwrap().server.check);
}

#[test]
fn a_found_server_takes_the_template_and_a_cookie_of_its_own() {
    let c = parse(&config(
        "dns_srv = \"_https._tcp.app.internal\", server = { tls = { verify = \"none\" }, maxconn = 7 }",
        "",
    ))
    .unwrap();
    let d = c.backends[0].discover.as_deref().unwrap();
    assert!(d.sni_from_target);
    let found = Found {
        name: "node-1.app.internal:8443".into(),
        addr: "10.0.0.1:8443".parse().unwrap(),
        weight: 86,
        backup: true,
        target: Some("node-1.app.internal".into()),
    };
    let s = d.server(&found, &HashSet::new());
    assert_eq!(
        (s.name.as_str(), s.weight, s.backup, s.maxconn, s.discovered),
        ("node-1.app.internal:8443", 86, true, Some(7), true)
    );
    assert_eq!(s.cookie, "node-1.app.internal-8443");
    let tls = s.tls.as_deref().unwrap();
    assert_eq!(tls.server_name.to_str(), "node-1.app.internal", "TLS checks the SRV target's name");
    assert_ne!(tls.digest, d.server.tls.as_deref().unwrap().digest, "pooled apart from other targets");
    // A cookie value already taken gets a suffix.
    let s = d.server(&found, &HashSet::from(["node-1.app.internal-8443".to_string()]));
    assert_eq!(s.cookie, "node-1.app.internal-8443-2");

    // `sni` given: every server is checked against it.
    let c = parse(&config(
        "dns_srv = \"_https._tcp.app.internal\", server = { tls = { verify = \"none\", sni = \"app.internal\" } }",
        "",
    ))
    .unwrap();
    let d = c.backends[0].discover.as_deref().unwrap();
    assert!(!d.sni_from_target);
    assert_eq!(d.server(&found, &HashSet::new()).tls.as_deref().unwrap().server_name.to_str(), "app.internal");
    // `dns`: the name looked up is the one checked.
    let c = parse(&config("dns = \"app.internal:443\"", "tls = { verify = \"none\" }")).unwrap();
    let d = c.backends[0].discover.as_deref().unwrap();
    assert_eq!(d.server.tls.as_deref().unwrap().server_name.to_str(), "app.internal");
}

#[test]
fn mistakes_are_reported_with_their_keys() {
    let cases = [
        ("dns_srv = \"app.internal\"", "backend[0].discover.dns_srv", "not an SRV name"),
        ("dns_srv = \"_http._tcp.app.internal:80\"", "backend[0].discover.dns_srv", "not an SRV name"),
        ("dns = \"app.internal\"", "backend[0].discover.dns", "not a host name and port"),
        ("dns = \"10.0.0.1:80\"", "backend[0].discover.dns", "write it as a `[[backend.server]]`"),
        ("dns = \"a.test:80\", dns_srv = \"_x._tcp.a.test\"", "backend[0].discover.dns", "not both"),
        ("every = \"10s\"", "backend[0].discover", "name what to look up"),
        ("dns = \"a.test:80\", every = \"500ms\"", "backend[0].discover.every", "1s or more"),
        ("dns = \"a.test:80\", server = { weight = 300 }", "backend[0].discover.server.weight", ""),
        ("dns = \"a.test:80\", server = { check = true }", "backend[0].discover.server.check", "no `check`"),
        ("dns = \"a.test:80\", server = { proto = \"h3\" }", "backend[0].discover.server.proto", "not a protocol"),
        ("dns = \"a.test:80\", server = { name = \"x\" }", "name", "unknown field"),
        ("dns = \"a.test:80\", colour = 1", "colour", "unknown field"),
    ];
    for (discover, key, what) in cases {
        let e = parse(&config(discover, "")).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(what), "{discover}: `{key}` / `{what}` in {e}");
        assert!(e.contains("disc.toml:"), "file and line: {e}");
    }
    let e = parse(&config("dns = \"a.test:80\"", "forward = {}")).unwrap_err().to_string();
    assert!(e.contains("backend[0].discover"), "{e}");
    let e = parse(&config("dns = \"a.test:80\"", "static = { root = \"/tmp\" }")).unwrap_err().to_string();
    assert!(e.contains("backend[0].discover") && e.contains("not both"), "{e}");
}
