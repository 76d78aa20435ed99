//! TLS binds: certificates read at build time (made here with rcgen), defaults,
//! and every error with its file:line, key path and the file it is about.

use super::*;
use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256};
use std::path::{Path, PathBuf};

/// A fresh directory for one test's files.
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tollgate-config-tls-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A self-signed certificate for `names` and its key, in PEM.
fn cert(names: &[&str], rsa: bool) -> (String, String) {
    let key = KeyPair::generate_for(if rsa { &PKCS_RSA_SHA256 } else { &PKCS_ECDSA_P256_SHA256 }).unwrap();
    let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn config(bind: &str) -> String {
    format!("[[frontend]]\nname = \"web\"\nbind = [\":8080\", {bind}]\n")
}

/// The errors of `src` (read as `<dir>/t.toml`) as `file:line:col: key: message` lines.
fn errors(dir: &Path, src: &str) -> Vec<String> {
    match parse(src, &dir.join("t.toml")) {
        Ok(_) => panic!("expected errors:\n{src}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn tls_bind_reads_a_directory_of_certificates_with_keys_in_or_beside_them() {
    let d = dir("good");
    std::fs::create_dir(d.join("certs")).unwrap();
    let (a_cert, a_key) = cert(&["a.example.com", "A2.example.com"], false);
    write(&d.join("certs"), "a.pem", &format!("{a_cert}{a_key}"));
    let (b_cert, b_key) = cert(&["*.example.com"], true);
    write(&d.join("certs"), "b.crt", &b_cert);
    write(&d.join("certs"), "b.key", &b_key);
    std::fs::write(d.join("certs/b.crt.ocsp"), [0x30, 0x03, 0x0a, 0x01, 0x00]).unwrap();
    write(&d.join("certs"), ".hidden", "not a certificate");
    let src = config(r#"{ addr = "127.0.0.1:8443", tls = { certs = ["certs/"] } }"#);
    let c = parse(&src, &d.join("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    let binds = &c.frontends[0].binds;
    assert!(binds[0].tls.is_none());
    assert_eq!(binds[1].addr.to_string(), "127.0.0.1:8443");
    let tls = binds[1].tls.as_ref().unwrap();
    assert_eq!(tls.certs.len(), 2);
    assert_eq!(tls.certs[0].names, ["a.example.com", "a2.example.com"]);
    assert_eq!(tls.certs[0].key_file, d.join("certs/a.pem"), "the key in the certificate's file");
    assert_eq!(tls.certs[0].ocsp_file, None);
    assert_eq!(tls.certs[1].names, ["*.example.com"]);
    assert_eq!(tls.certs[1].key_file, d.join("certs/b.key"), "the key beside it");
    assert_eq!(tls.certs[1].ocsp_file, Some(d.join("certs/b.crt.ocsp")));
    assert_eq!(tls.certs[1].key.ocsp.as_deref(), Some(&[0x30, 0x03, 0x0a, 0x01, 0x00][..]));
    assert_eq!(tls.certs[1].key.key.algorithm(), rustls::SignatureAlgorithm::RSA);
    assert_eq!((tls.min_version, tls.max_version), (TlsVersion::Tls12, TlsVersion::Tls13));
    assert_eq!(tls.cipher_suites.len(), crate::tls_provider().cipher_suites.len());
    assert_eq!(tls.alpn, ["h2", "http/1.1"], "HTTP/2 first, by default");
    assert_eq!((tls.session_cache, tls.tickets, tls.hsts.is_none()), (20_000, true, true));
}

#[test]
fn tls_options_build() {
    let d = dir("options");
    let (c, k) = cert(&["x.example.com"], false);
    write(&d, "x.pem", &c);
    write(&d, "x.pem.key", &k);
    let (c2, k2) = cert(&["y.example.com"], false);
    write(&d, "y.crt", &c2);
    write(&d, "y-key.pem", &k2);
    let src = config(
        r#"{ addr = "127.0.0.1:8443", tls = { certs = ["x.pem"], min_version = 1.3, alpn = [],
             hsts = "max-age=600; includeSubDomains", session_cache = 0, tickets = false } },
           { addr = "127.0.0.1:8444", tls = { certs = ["y.crt"], key = "y-key.pem", max_version = "1.2",
             ciphers = ["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"] } }"#,
    );
    let c = parse(&src, &d.join("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    let tls = c.frontends[0].binds[1].tls.as_ref().unwrap();
    assert_eq!(tls.certs[0].key_file, d.join("x.pem.key"));
    assert_eq!((tls.min_version, tls.max_version), (TlsVersion::Tls13, TlsVersion::Tls13));
    assert!(tls.cipher_suites.iter().all(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_))));
    assert!(tls.alpn.is_empty());
    assert_eq!(tls.hsts.as_ref().unwrap(), "max-age=600; includeSubDomains");
    assert_eq!((tls.session_cache, tls.tickets), (0, false));
    let tls = c.frontends[0].binds[2].tls.as_ref().unwrap();
    assert_eq!(tls.certs[0].key_file, d.join("y-key.pem"));
    assert_eq!((tls.min_version, tls.max_version), (TlsVersion::Tls12, TlsVersion::Tls12));
    let names: Vec<_> = tls.cipher_suites.iter().map(|s| s.suite().as_str().unwrap()).collect();
    assert_eq!(names, ["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]);
}

#[test]
fn certificate_file_errors_name_the_file_with_line_and_key() {
    let d = dir("files");
    let (ca, ka) = cert(&["a.example.com"], false);
    let (_, other_key) = cert(&["b.example.com"], false);
    write(&d, "mismatch.crt", &ca);
    write(&d, "mismatch.key", &other_key);
    write(&d, "nokey.crt", &ca);
    write(&d, "garbage.pem", "hello\n");
    write(&d, "keyonly.pem", &ka);
    let (cn, kn) = {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        (CertificateParams::new(Vec::<String>::new()).unwrap().self_signed(&key).unwrap().pem(), key.serialize_pem())
    };
    write(&d, "noname.pem", &format!("{cn}{kn}"));
    write(&d, "good.pem", &format!("{ca}{ka}"));
    std::fs::write(d.join("good.pem.ocsp"), b"not der").unwrap();
    let src = "[[frontend]]\nname = \"web\"\nbind = [\n\
        { addr = \":1\", tls = { certs = [\"missing.pem\"] } },\n\
        { addr = \":2\", tls = { certs = [\"mismatch.crt\"] } },\n\
        { addr = \":3\", tls = { certs = [\"nokey.crt\"] } },\n\
        { addr = \":4\", tls = { certs = [\"garbage.pem\"] } },\n\
        { addr = \":5\", tls = { certs = [\"keyonly.pem\"] } },\n\
        { addr = \":6\", tls = { certs = [\"good.pem\"] } },\n\
        { addr = \":7\", tls = { certs = [\"mismatch.crt\", \"keyonly.pem\"], key = \"mismatch.key\" } },\n\
        { addr = \":8\", tls = { min_version = \"1.2\" } },\n\
        ]\n";
    let text = errors(&d, src);
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    let f = |name: &str| d.join(name).display().to_string();
    let t = d.join("t.toml").display().to_string();
    assert!(
        has(&format!("{t}:4:33: frontend[0].bind[0].tls.certs[0]: cannot read {}:", f("missing.pem"))),
        "{text:#?}"
    );
    assert!(
        has(&format!(
            "{t}:5:33: frontend[0].bind[1].tls.certs[0]: the private key in {} does not belong to the certificate in {}",
            f("mismatch.key"),
            f("mismatch.crt")
        )),
        "{text:#?}"
    );
    assert!(has(&format!("frontend[0].bind[2].tls.certs[0]: {} holds no private key", f("nokey.crt"))), "{text:#?}");
    assert!(has(&format!("frontend[0].bind[3].tls.certs[0]: {} holds no certificate", f("garbage.pem"))), "{text:#?}");
    assert!(has(&format!("frontend[0].bind[4].tls.certs[0]: {} holds no certificate", f("keyonly.pem"))), "{text:#?}");
    assert!(
        has(&format!("frontend[0].bind[5].tls.certs[0]: {}: not a DER-encoded OCSP response", f("good.pem.ocsp"))),
        "{text:#?}"
    );
    assert!(has("t.toml:10:71: frontend[0].bind[6].tls.key: `key` goes with a single certificate file"), "{text:#?}");
    assert!(has("t.toml:11:22: frontend[0].bind[7].tls.certs: a TLS bind needs `certs`"), "{text:#?}");
    assert_eq!(text.len(), 8, "{text:#?}");

    // A certificate without DNS names may only be the first (the default).
    let src = config(r#"{ addr = ":9", tls = { certs = ["good.pem", "noname.pem"] } }"#);
    std::fs::remove_file(d.join("good.pem.ocsp")).unwrap();
    let text = errors(&d, &src);
    assert!(
        has_in(&text, &format!("frontend[0].bind[1].tls.certs[1]: {} has no DNS name", f("noname.pem"))),
        "{text:#?}"
    );
    let src = config(r#"{ addr = ":9", tls = { certs = ["noname.pem", "good.pem"] } }"#);
    assert!(parse(&src, &d.join("t.toml")).is_ok());
}

fn has_in(text: &[String], needle: &str) -> bool {
    text.iter().any(|t| t.contains(needle))
}

#[test]
fn tls_setting_errors_are_reported_with_line_and_key() {
    let d = dir("settings");
    let (c, k) = cert(&["a.example.com"], false);
    write(&d, "a.pem", &format!("{c}{k}"));
    let src = "[[frontend]]\nname = \"web\"\nbind = [\n\
        { addr = \":1\", tls = { certs = [\"a.pem\"], min_version = \"1.1\" } },\n\
        { addr = \":2\", tls = { certs = [\"a.pem\"], min_version = \"1.3\", max_version = \"1.2\" } },\n\
        { addr = \":3\", tls = { certs = [\"a.pem\"], alpn = [\"spdy/3\", \"http/1.1\"] }, h2c = true },\n\
        { addr = \":4\", tls = { certs = [\"a.pem\"], max_version = \"1.2\", ciphers = [\"TLS13_AES_128_GCM_SHA256\"] } },\n\
        { addr = \":5\", tls = { certs = [\"a.pem\"], ciphers = [\"TLS_AES_128_GCM_SHA256\", \"RC4\"] } },\n\
        { addr = \":6\", tls = { certs = [\"a.pem\"], max_version = \"1.2\", ciphers = [\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"] } },\n\
        { addr = \":7\", tls = { certs = [\"a.pem\"], hsts = \"includeSubDomains\", session_cache = -1 } },\n\
        ]\n";
    let text = errors(&d, src);
    let has = |needle: &str| has_in(&text, needle);
    assert!(has("t.toml:4:57: frontend[0].bind[0].tls.min_version: TLS 1.1 is not supported"), "{text:#?}");
    assert!(has("t.toml:5:57: frontend[0].bind[1].tls.min_version: 1.3 is above max_version 1.2"), "{text:#?}");
    assert!(has("t.toml:6:51: frontend[0].bind[2].tls.alpn[0]: `spdy/3` is not a protocol"), "{text:#?}");
    assert!(has("t.toml:6:82: frontend[0].bind[2].h2c: h2c is HTTP/2 over plain TCP"), "{text:#?}");
    assert!(has("frontend[0].bind[3].tls.ciphers[0]: `TLS13_AES_128_GCM_SHA256` is a TLS 1.3 suite"), "{text:#?}");
    assert!(has("frontend[0].bind[3].tls.ciphers: no TLS 1.2 cipher suite is listed"), "{text:#?}");
    assert!(has("frontend[0].bind[4].tls.ciphers[1]: `RC4` is not a cipher suite"), "{text:#?}");
    assert!(has("frontend[0].bind[4].tls.ciphers: no TLS 1.2 cipher suite is listed"), "{text:#?}");
    assert!(
        has("frontend[0].bind[5].tls.ciphers: no TLS 1.2 suite listed can be used with the ECDSA key of"),
        "{text:#?}"
    );
    assert!(has("frontend[0].bind[6].tls.hsts: an HSTS value needs max-age"), "{text:#?}");
    assert!(has("frontend[0].bind[6].tls.session_cache: -1 is out of range"), "{text:#?}");
    assert_eq!(text.len(), 11, "{text:#?}");

    // Mistakes serde finds inside the table keep their own message and key path.
    let text = errors(&d, &config(r#"{ addr = ":1", tls = { cert = ["a.pem"] } }"#));
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(text[0].contains("frontend[0].bind[1].tls.certs: a TLS bind needs `certs`"), "{text:#?}");
    assert!(text[1].contains("frontend[0].bind[1].tls.cert: unknown field `cert`"), "{text:#?}");
    let text = errors(&d, &config(r#"{ addr = ":1", tls = { certs = "a.pem" } }"#));
    assert!(text[0].contains("frontend[0].bind[1].tls.certs: invalid type"), "{text:#?}");
    let text = errors(&d, &config(r#"{ address = ":1" }"#));
    assert!(text[0].contains("frontend[0].bind[1].address: unknown field `address`"), "{text:#?}");
    let text = errors(&d, &config(r#"{ addr = "nowhere" }"#));
    assert!(text[0].contains("t.toml:3:27: frontend[0].bind[1].addr: `nowhere` is not an address"), "{text:#?}");
    let text = errors(&d, &config("443"));
    assert!(text[0].contains("frontend[0].bind[1]: invalid type: integer `443`, expected an address"), "{text:#?}");
}

#[test]
fn offline_parsing_reads_no_certificate() {
    let d = dir("offline");
    let (c, k) = cert(&["a.example.com"], false);
    write(&d, "a.pem", &format!("{c}{k}"));
    let src = config(r#"{ addr = ":1", tls = { certs = ["a.pem"] } }"#);
    assert!(parse(&src, &d.join("t.toml")).is_ok());
    let errs = parse_offline(&src, &d.join("t.toml")).unwrap_err().0;
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].key, "frontend[0].bind[1].tls.certs");
    assert!(errs[0].message.contains("not read offline"), "{}", errs[0]);
}

#[test]
fn tls_conditions_and_scheme_redirects() {
    let src = r#"
[[frontend]]
name = "web"
bind = [":8080"]
  [[frontend.rule]]
  when = { not = { tls = true } }
  redirect = { scheme = "https", code = 301 }
  [[frontend.rule]]
  when = { sni = ["a.example.com", "*.b.example.com"] }
  redirect = { scheme = "http", port = 8080 }
"#;
    let c = parse(src, Path::new("t.toml")).unwrap();
    let rules = &c.frontends[0].rules;
    match &rules[0].action {
        Some(Action::Redirect(r)) => {
            assert!(matches!(&r.target, RedirectTarget::Scheme { scheme, port: None } if scheme == "https"));
            assert_eq!(r.code, 301);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&rules[1].action, Some(Action::Redirect(r))
        if matches!(&r.target, RedirectTarget::Scheme { scheme, port: Some(8080) } if scheme == "http")));
    let headers = http::HeaderMap::new();
    let facts = |tls: bool, sni: &'static str| RequestFacts {
        host: "h",
        path: "/",
        method: &http::Method::GET,
        headers: &headers,
        src: "1.1.1.1".parse().unwrap(),
        tls,
        sni,
        counters: &crate::NoCounters,
        client_cert: None,
    };
    assert!(rules[0].when.matches(&facts(false, "")));
    assert!(!rules[0].when.matches(&facts(true, "a.example.com")));
    assert!(rules[1].when.matches(&facts(true, "a.example.com")));
    assert!(rules[1].when.matches(&facts(true, "x.b.example.com")));
    assert!(!rules[1].when.matches(&facts(true, "b.example.com")));
    assert!(!rules[1].when.matches(&facts(false, "")));

    let bad = r#"
[[frontend]]
name = "web"
bind = [":8080"]
  [[frontend.rule]]
  when = { sni = [] }
  redirect = { scheme = "ftp" }
  [[frontend.rule]]
  redirect = { scheme = "https", port = 70000 }
  [[frontend.rule]]
  redirect = { location = "/x", port = 8443 }
  [[frontend.rule]]
  redirect = { location = "/x", scheme = "https" }
"#;
    let errs = parse(bad, Path::new("t.toml")).unwrap_err().0;
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert!(has_in(&text, "t.toml:6:18: frontend[0].rule[0].when.sni: an empty list never matches"), "{text:#?}");
    assert!(has_in(&text, "frontend[0].rule[0].redirect.scheme: `ftp` is not a scheme"), "{text:#?}");
    assert!(has_in(&text, "frontend[0].rule[1].redirect.port: 70000 is out of range"), "{text:#?}");
    assert!(has_in(&text, "frontend[0].rule[2].redirect.port: `port` goes with `scheme`"), "{text:#?}");
    assert!(
        has_in(&text, "frontend[0].rule[3].redirect: give exactly one of `location`, `prefix` or `scheme`"),
        "{text:#?}"
    );
    assert_eq!(text.len(), 5, "{text:#?}");
}

/// examples/tls.toml as written, with certificates made into a copy's certs/.
#[test]
fn example_tls_config_loads() {
    let d = dir("example");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tls.toml");
    std::fs::copy(&example, d.join("tls.toml")).unwrap();
    std::fs::create_dir(d.join("certs")).unwrap();
    let (c, k) = cert(&["example.com", "www.example.com"], true);
    write(&d.join("certs"), "example.com.pem", &format!("{c}{k}"));
    let (c, k) = cert(&["example.com", "www.example.com"], false);
    write(&d.join("certs"), "example.com-ecdsa.crt", &c);
    write(&d.join("certs"), "example.com-ecdsa.key", &k);
    let (c, k) = cert(&["api.example.com"], false);
    write(&d.join("certs"), "api.example.com.pem", &format!("{c}{k}"));
    let c = load(&d.join("tls.toml")).unwrap_or_else(|e| panic!("{e}"));
    let binds = &c.frontends[0].binds;
    assert_eq!(binds.iter().filter(|b| b.tls.is_some()).count(), 2);
    let tls = binds[2].tls.as_ref().unwrap();
    let files: Vec<_> = tls.certs.iter().map(|c| c.cert_file.file_name().unwrap().to_str().unwrap()).collect();
    assert_eq!(files, ["api.example.com.pem", "example.com-ecdsa.crt", "example.com.pem"]);
    assert_eq!(tls.hsts.as_ref().unwrap(), "max-age=31536000");
    assert!(matches!(&c.frontends[0].rules[0].action, Some(Action::Redirect(_))));
    // Without its certificates the example says which file is missing.
    std::fs::remove_dir_all(d.join("certs")).unwrap();
    let text: Vec<String> = load(&d.join("tls.toml")).unwrap_err().0.iter().map(|e| e.to_string()).collect();
    assert!(has_in(&text, "frontend[0].bind[2].tls.certs[0]: cannot read"), "{text:#?}");
    assert!(has_in(&text, &d.join("certs/").display().to_string()), "{text:#?}");
}

fn backend(servers: &str) -> String {
    format!(
        "[[backend]]\nname = \"app\"\n{servers}\n[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\ndefault_backend = \"app\"\n"
    )
}

#[test]
fn server_tls_inherits_the_backends_and_defaults_sni_and_alpn() {
    let d = dir("server-tls");
    let (ca, _) = cert(&["ca.internal"], false);
    write(&d, "ca.pem", &ca);
    let (c, k) = cert(&["client"], false);
    write(&d, "client.pem", &c);
    write(&d, "client.key", &k);
    let src = backend(
        r#"tls = { ca = "ca.pem" }
proto = "h2"
[[backend.server]]
name = "a"
addr = "127.0.0.1:8443"
[[backend.server]]
name = "b"
addr = "127.0.0.1:8444"
proto = "h1"
tls = { ca = "ca.pem", sni = "b.internal", cert = "client.pem", key = "client.key", alpn = ["h2", "http/1.1"] }
[[backend.server]]
name = "c"
addr = "127.0.0.1:8445"
proto = "h2c"
tls = { verify = "none" }
"#,
    );
    let errs = errors(&d, &src);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].contains("t.toml:16:9: backend[0].server[2].proto: \"h2c\" is HTTP/2 over plain TCP"), "{errs:#?}");

    let src =
        src.replace("proto = \"h2c\"\ntls = { verify = \"none\" }", "proto = \"h1\"\ntls = { verify = \"none\" }");
    let c = parse(&src, &d.join("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    let s = &c.backends[0].servers;
    let a = s[0].tls.as_ref().unwrap();
    assert_eq!(s[0].proto, Proto::H2);
    assert_eq!(a.alpn, ["h2"], "h2 offers h2 by default");
    assert_eq!(format!("{:?}", a.server_name), "IpAddress(V4(Ipv4Addr([127, 0, 0, 1])))");
    assert!(a.verify && a.cert.is_none() && a.ca.as_deref() == Some(&*d.join("ca.pem")));
    let b = s[1].tls.as_ref().unwrap();
    assert_eq!(s[1].proto, Proto::H1);
    assert_eq!(b.alpn, ["h2", "http/1.1"]);
    assert_eq!(format!("{:?}", b.server_name), "DnsName(\"b.internal\")");
    assert_eq!(b.cert, Some((d.join("client.pem"), d.join("client.key"))));
    let cc = s[2].tls.as_ref().unwrap();
    assert!(!cc.verify);
    assert_eq!(cc.alpn, ["http/1.1"]);
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0]
            .to_string()
            .contains("t.toml:17:18: backend[0].server[2].tls.verify: the server's certificate is not verified"),
        "{}",
        c.warnings[0]
    );
    assert_ne!(s[0].transport_key(), s[1].transport_key());
    assert_ne!(s[0].transport_key(), 0);
    // The same settings and files are equal (a reload keeps the server), a changed CA file is not.
    let again = parse(&src, &d.join("t.toml")).unwrap();
    assert_eq!(again.backends[0].servers[0], s[0]);
    write(&d, "ca.pem", &cert(&["other"], false).0);
    let renewed = parse(&src, &d.join("t.toml")).unwrap();
    assert_ne!(renewed.backends[0].servers[0], s[0]);
}

#[test]
fn server_tls_errors_name_the_key_and_the_file() {
    let d = dir("server-tls-errors");
    let (c, k) = cert(&["client"], false);
    write(&d, "client.pem", &c);
    write(&d, "other.key", &cert(&["other"], false).1);
    let _ = k;
    let src = backend(
        r#"[[backend.server]]
name = "a"
addr = "127.0.0.1:1"
tls = { ca = "missing.pem", alpn = ["h3"] }
[[backend.server]]
name = "b"
addr = "127.0.0.1:2"
proto = "h2"
[[backend.server]]
name = "c"
addr = "127.0.0.1:3"
tls = { cert = "client.pem", key = "other.key", verify = "none", ca = "client.pem" }
[[backend.server]]
name = "d"
addr = "127.0.0.1:4"
tls = { key = "other.key", verify = "maybe" }
[[backend.server]]
name = "e"
addr = "127.0.0.1:5"
proto = "h2c"
send_proxy = "v2"
[[backend.server]]
name = "f"
addr = "127.0.0.1:6"
proto = "h3"
"#,
    );
    let errs = errors(&d, &src);
    let want = [
        ("t.toml:6:14: backend[0].server[0].tls.ca: cannot read", "missing.pem"),
        ("t.toml:6:37: backend[0].server[0].tls.alpn[0]: `h3` is not a protocol", ""),
        ("t.toml:10:9: backend[0].server[1].proto: \"h2\" is HTTP/2 over TLS and needs `tls`", ""),
        ("t.toml:14:16: backend[0].server[2].tls.cert: the private key in", "does not belong to the certificate"),
        ("t.toml:14:71: backend[0].server[2].tls.ca: `ca` has no use with verify = \"none\"", ""),
        ("t.toml:18:15: backend[0].server[3].tls.key: `key` is the key of `cert`", ""),
        ("t.toml:18:37: backend[0].server[3].tls.verify: `maybe` is not", ""),
        ("t.toml:23:14: backend[0].server[4].send_proxy: `send_proxy` cannot be used with HTTP/2", ""),
        ("t.toml:27:9: backend[0].server[5].proto: `h3` is not a protocol", ""),
    ];
    assert_eq!(errs.len(), want.len(), "{errs:#?}");
    for (e, (start, part)) in errs.iter().zip(want) {
        assert!(e.contains(start) && e.contains(part), "{e}\nwanted: {start} ... {part}");
    }
}

#[test]
fn a_backends_verify_none_warns_once_for_all_its_servers() {
    let d = dir("verify-none-once");
    let src = backend(
        r#"tls = { verify = "none" }
[[backend.server]]
name = "a"
addr = "127.0.0.1:8443"
[[backend.server]]
name = "b"
addr = "127.0.0.1:8444"
"#,
    );
    let c = parse(&src, &d.join("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    let warnings: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].contains("t.toml:3:18: backend[0].tls.verify: the server's certificate is not verified"));
}

#[test]
fn h2_needs_h2_in_alpn() {
    let d = dir("h2-alpn");
    let src = backend(
        r#"tls = { verify = "none", alpn = ["http/1.1"] }
proto = "h2"
[[backend.server]]
name = "a"
addr = "127.0.0.1:8443"
[[backend.server]]
name = "b"
addr = "127.0.0.1:8444"
tls = { verify = "none", alpn = ["http/1.1", "h2"] }
[[backend.server]]
name = "c"
addr = "127.0.0.1:8445"
proto = "h1"
"#,
    );
    let errs = errors(&d, &src);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0].contains("t.toml:3:33: backend[0].tls.alpn: proto = \"h2\" needs \"h2\" in alpn (or leave alpn out)"),
        "{errs:#?}"
    );
    let src = src.replace("tls = { verify = \"none\", alpn = [\"http/1.1\"] }\n", "tls = { verify = \"none\" }\n");
    let src = src.replace("addr = \"127.0.0.1:8444\"\n", "addr = \"127.0.0.1:8444\"\nproto = \"h2\"\n");
    let src = src.replace("[\"http/1.1\", \"h2\"]", "[\"http/1.1\"]");
    let errs = errors(&d, &src);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].contains("t.toml:12:33: backend[0].server[1].tls.alpn: proto = \"h2\" needs \"h2\""), "{errs:#?}");
}
