//! `[[acme]]` sections and TLS binds that serve them: every key, the
//! defaults, and each mistake with its key path.

use super::*;
use rcgen::{CertificateParams, KeyPair};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh directory with a CA file (`ca.pem`) for the ACME server's HTTPS.
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tollgate-config-acme-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let key = KeyPair::generate().unwrap();
    let ca = CertificateParams::new(Vec::<String>::new()).unwrap().self_signed(&key).unwrap();
    std::fs::write(d.join("ca.pem"), ca.pem()).unwrap();
    d
}

fn config(acme: &str, tls: &str) -> String {
    format!(
        "[[acme]]\nname = \"site\"\ndirectory = \"https://acme.test/dir\"\ndirectory_ca = \"ca.pem\"\n{acme}\n\
         [[frontend]]\nname = \"web\"\nbind = [\":80\", {{ addr = \":443\", tls = {{ {tls} }} }}]\n"
    )
}

fn load(dir: &Path, src: &str) -> Result<Config, String> {
    parse(src, &dir.join("t.toml")).map_err(|e| e.to_string())
}

#[test]
fn every_key_and_the_defaults() {
    let d = dir("keys");
    let c = load(&d, &config("domains = [\"Example.com\", \"www.example.com\"]", "acme = [\"site\"]")).unwrap();
    let a = &c.acme[0];
    assert_eq!((a.name.as_str(), a.directory.as_str()), ("site", "https://acme.test/dir"));
    assert_eq!(a.domains, vec!["example.com", "www.example.com"]);
    assert_eq!((a.challenge, a.renew_before, a.retry), (AcmeChallenge::Http01, None, Duration::from_secs(60)));
    assert_eq!(a.state_dir, d.join("acme"));
    assert!(a.contact.is_empty());
    let tls = c.frontends[0].binds[1].tls.as_ref().unwrap();
    assert_eq!((tls.acme.clone(), tls.certs.len()), (vec![0], 0), "a bind may have ACME certificates alone");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);

    let all = "domains = [\"a.test\"]\ncontact = [\"mailto:ops@a.test\"]\nchallenge = \"tls-alpn-01\"\n\
               state_dir = \"/var/lib/tollgate/acme\"\nrenew_before = \"30d\"\nretry = \"5m\"";
    let c = load(&d, &config(all, "acme = [\"site\"]")).unwrap();
    let a = &c.acme[0];
    assert_eq!((a.challenge, a.contact.clone()), (AcmeChallenge::TlsAlpn01, vec!["mailto:ops@a.test".to_string()]));
    assert_eq!((a.renew_before, a.retry), (Some(Duration::from_secs(30 * 86400)), Duration::from_secs(300)));
    assert_eq!(a.dir(), PathBuf::from("/var/lib/tollgate/acme/site"));
    // The digest tells a changed section from an unchanged one (a reload keeps the latter's state).
    let again = load(&d, &config(all, "acme = [\"site\"]")).unwrap();
    assert_eq!(again.acme[0].digest, a.digest);
    let other = load(&d, &config(&all.replace("5m", "6m"), "acme = [\"site\"]")).unwrap();
    assert_ne!(other.acme[0].digest, a.digest);
}

#[test]
fn mistakes_are_named_with_their_keys() {
    let d = dir("errors");
    let src = "[[acme]]\nname = \"bad name!\"\ndirectory = \"http://acme.test/dir\"\n\
               domains = [\"*.example.com\", \"a b\", \"10.0.0.1\", \"x.test\", \"X.test\"]\n\
               contact = [\"ops@example.com\"]\nchallenge = \"dns-01\"\nretry = \"soon\"\n\
               directory_ca = \"missing.pem\"\n\
               [[acme]]\nname = \"empty\"\ndirectory = \"https://acme.test/dir\"\ndirectory_ca = \"ca.pem\"\ndomains = []\n\
               [[acme]]\nname = \"empty\"\ndirectory = \"https://acme.test/dir\"\ndirectory_ca = \"ca.pem\"\ndomains = [\"a.test\"]\n\
               [[frontend]]\nname = \"web\"\nbind = [{ addr = \":443\", tls = { acme = [\"nope\", \"empty\", \"empty\"] } }, \
               { addr = \":8443\", tls = { alpn = [\"h2\"] } }]\n";
    let e = load(&d, src).unwrap_err();
    for want in [
        "acme[0].name: `bad name!` is not a valid name",
        "acme[0].directory: `http://acme.test/dir` is not an https URL",
        "acme[0].domains[0]: `*.example.com`: a wildcard name needs the DNS-01 challenge",
        "acme[0].domains[1]: `a b` is not a DNS name",
        "acme[0].domains[2]: `10.0.0.1` is not a DNS name",
        "acme[0].domains[4]: `X.test` is listed twice",
        "acme[0].contact[0]: `ops@example.com` is not `mailto:ADDRESS`",
        "acme[0].challenge: `dns-01` is not a challenge Tollgate answers",
        "acme[0].retry:",
        "acme[0].directory_ca: cannot read",
        "acme[1].domains: name at least one domain",
        "acme[2].name: [[acme]] `empty` is defined twice",
        "frontend[0].bind[0].tls.acme[0]: no [[acme]] is named `nope`",
        "frontend[0].bind[0].tls.acme[2]: `empty` is listed twice",
        "frontend[0].bind[1].tls.certs: a TLS bind needs `certs` (certificate files, PEM, or directories of them) or `acme`",
    ] {
        assert!(e.contains(want), "{want}\nnot in:\n{e}");
    }
    assert!(e.contains("t.toml:"), "file and line: {e}");
}

#[test]
fn an_acme_certificate_no_bind_serves_is_a_warning() {
    let d = dir("unused");
    let c =
        load(&d, &config("domains = [\"a.test\"]", "acme = []").replace("tls = { acme = [] }", "h2c = false")).unwrap();
    let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert!(w.iter().any(|w| w.contains("acme[0].name: no TLS bind uses this certificate")), "{w:?}");
}
