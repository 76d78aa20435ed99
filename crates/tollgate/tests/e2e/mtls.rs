//! Mutual TLS on a bind (issue 30, 3): `client_ca` with `verify = "required"`
//! or `"optional"` and a CRL; the certificate's subject and fingerprint in a
//! rule and in request headers; expired, revoked and missing certificates
//! refused.

use crate::harness::*;
use crate::tls::Pki;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;

/// A client trusting `pki`'s CA, presenting the certificate and key in `file` (none: no certificate).
fn client(pki: &Pki, file: Option<&str>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki.ca_der())).unwrap();
    let provider = Arc::new(tollgate_config::tls_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match file {
        Some(f) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(f).unwrap().collect::<Result<_, _>>().unwrap();
            let key = PrivateKeyDer::from_pem_file(f).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// One GET over TLS with `cfg` and `headers`: the status and the echoed
/// request, or the error that ended it (a refused certificate ends the
/// handshake, or with TLS 1.3 the first read).
async fn get(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<(StatusCode, serde_json::Value), String> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("mtls.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "mtls.test")
        .header("x-client-dn", "CN=forged")
        .body(Full::<bytes::Bytes>::default())
        .unwrap();
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null)))
}

fn config(cert: &str, ca: &str, crl: &str, origin: SocketAddr) -> String {
    format!(
        r#"[[frontend]]
name = "strict"
bind = [{{ addr = "127.0.0.1:0", tls = {{ certs = [{cert:?}], client_ca = {ca:?}, crl = [{crl:?}] }} }}]
default_backend = "app"
  [[frontend.rule]]
  set_request_headers = {{ "X-Client-DN" = "${{ssl_client_s_dn}}", "X-Client-FP" = "${{ssl_client_fingerprint}}", "X-Client-Verify" = "${{ssl_client_verify}}", "X-Client-Serial" = "${{ssl_client_serial}}" }}
  [[frontend.rule]]
  when = {{ path_prefix = "/admin", not = {{ client_cert = {{ subject = "(^|,)CN=admin(,|$)" }} }} }}
  deny = 403

[[frontend]]
name = "open"
bind = [{{ addr = "127.0.0.2:0", tls = {{ certs = [{cert:?}], client_ca = {ca:?}, verify = "optional" }} }}]
default_backend = "app"
  [[frontend.rule]]
  set_request_headers = {{ "X-Client-Verify" = "${{ssl_client_verify}}" }}
  [[frontend.rule]]
  when = {{ path_prefix = "/members", client_cert = {{ present = false }} }}
  deny = 401

[[backend]]
name = "app"
  [[backend.server]]
  name = "s1"
  addr = "{origin}"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_checked_and_passed_on() {
    let pki = Pki::new("mtls");
    let (_, cert) = pki.leaf("server.pem", &["mtls.test"], false);
    let ca = pki.dir.join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let (alice_der, alice) = pki.client_leaf("alice.pem", "alice", 10, false);
    let (_, admin) = pki.client_leaf("admin.pem", "admin", 11, false);
    let (_, expired) = pki.client_leaf("expired.pem", "old", 12, true);
    let (_, revoked) = pki.client_leaf("revoked.pem", "mallory", 13, false);
    let crl = pki.crl("clients.crl", &[13]);
    let origin = echo().await;
    let p = proxy(&config(&cert, &ca.display().to_string(), &crl, origin.addr));
    let (strict, open) = (p.addr("strict").unwrap(), p.addr("open").unwrap());

    // A good certificate: served, its subject and SHA-256 in the headers (a
    // client's own X-Client-DN replaced).
    let (s, v) = get(strict, &client(&pki, Some(&alice)), "/").await.expect("served");
    assert_eq!(s, StatusCode::OK);
    assert_eq!(echoed_header(&v, "x-client-dn").as_deref(), Some("CN=alice, O=Tollgate tests"));
    let fp = tollgate_proxy::net::tls::client_cert(&alice_der).fingerprint;
    assert_eq!(fp.len(), 64);
    assert_eq!(echoed_header(&v, "x-client-fp"), Some(fp));
    assert_eq!(echoed_header(&v, "x-client-verify").as_deref(), Some("SUCCESS"));
    assert_eq!(echoed_header(&v, "x-client-serial").as_deref(), Some("0A"));
    // A rule on the subject.
    assert_eq!(get(strict, &client(&pki, Some(&alice)), "/admin").await.unwrap().0, StatusCode::FORBIDDEN);
    assert_eq!(get(strict, &client(&pki, Some(&admin)), "/admin").await.unwrap().0, StatusCode::OK);
    // Refused: no certificate, an expired one, a revoked one.
    for (what, file) in [("none", None), ("expired", Some(expired.as_str())), ("revoked", Some(revoked.as_str()))] {
        let r = get(strict, &client(&pki, file), "/").await;
        assert!(r.is_err(), "{what}: {r:?}");
    }
    // Optional: no certificate is let in (and told apart by a rule); a bad
    // one is still refused.
    let (s, v) = get(open, &client(&pki, None), "/").await.expect("served without a certificate");
    assert_eq!((s, echoed_header(&v, "x-client-verify").as_deref()), (StatusCode::OK, Some("NONE")));
    assert_eq!(get(open, &client(&pki, None), "/members").await.unwrap().0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(open, &client(&pki, Some(&alice)), "/members").await.unwrap().0, StatusCode::OK);
    assert!(get(open, &client(&pki, Some(&expired)), "/").await.is_err());
}

/// Mistakes at load, each at its key.
#[test]
fn mtls_mistakes_are_named() {
    let pki = Pki::new("mtls-config");
    let (_, cert) = pki.leaf("server.pem", &["mtls.test"], false);
    let ca = pki.dir.join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();
    let bad_crl = pki.dir.join("bad.crl");
    std::fs::write(&bad_crl, "not a list").unwrap();
    let ca = ca.display().to_string();
    let bad_crl = bad_crl.display().to_string();
    for (tls, want) in [
        (format!("certs = [{cert:?}], verify = \"optional\""), "tls.verify: `verify` goes with `client_ca`"),
        (format!("certs = [{cert:?}], client_ca = {ca:?}, verify = \"maybe\""), "tls.verify: `maybe` is not"),
        (format!("certs = [{cert:?}], client_ca = {ca:?}, crl = [{bad_crl:?}]"), "tls.crl[0]:"),
        (format!("certs = [{cert:?}], client_ca = \"/nonexistent/ca.pem\""), "tls.client_ca: cannot read"),
    ] {
        let toml = format!("[[frontend]]\nname = \"web\"\nbind = [{{ addr = \"127.0.0.1:0\", tls = {{ {tls} }} }}]\n");
        let e = tollgate_config::parse(&toml, Path::new("t.toml")).unwrap_err().to_string();
        assert!(e.contains(&format!("frontend[0].bind[0].{want}")), "{want}: {e}");
    }
}
