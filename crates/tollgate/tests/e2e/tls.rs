//! TLS binds end to end: certificates made at test time by a test CA (rcgen),
//! rustls clients that record what the server presented, the echo origin.

use crate::harness::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rcgen::{PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientSessionMemoryCache, Resumption, WebPkiServerVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, HandshakeKind, ProtocolVersion, RootCertStore, SignatureScheme};
use rustls::{SupportedProtocolVersion, version};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_proxy::Server;

pub(crate) const BOTH: &[&SupportedProtocolVersion] = &[&version::TLS13, &version::TLS12];

/// A test CA and the files of the certificates it signs, in a fresh directory.
pub(crate) struct Pki {
    pub(crate) dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub(crate) fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("tollgate-tls-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Subjects of their own: with rcgen's one default name for CA and leaves,
        // OpenSSL clients (curl) take a leaf for self-signed.
        params.distinguished_name.push(DnType::CommonName, format!("Tollgate test CA {tag}"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap()).unwrap();
        Pki { dir, ca }
    }

    /// Writes a certificate for `names` and its key (RSA or ECDSA) into `file`;
    /// returns the certificate (DER) and the file's path.
    pub(crate) fn leaf(&self, file: &str, names: &[&str], rsa: bool) -> (Vec<u8>, String) {
        let key = KeyPair::generate_for(if rsa { &PKCS_RSA_SHA256 } else { &PKCS_ECDSA_P256_SHA256 }).unwrap();
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("tollgate test"));
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let path = self.dir.join(file);
        std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        (cert.der().to_vec(), path.display().to_string())
    }

    /// A client certificate (CommonName `cn`, serial `serial`) and its key in
    /// `file`, valid now or `expired` (2020 to 2021); returns its DER and path.
    pub(crate) fn client_leaf(&self, file: &str, cn: &str, serial: u64, expired: bool) -> (Vec<u8>, String) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.distinguished_name.push(DnType::OrganizationName, "Tollgate tests");
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let path = self.dir.join(file);
        std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        (cert.der().to_vec(), path.display().to_string())
    }

    /// A CRL of this CA revoking `serials`, as PEM in `file`; returns its path.
    pub(crate) fn crl(&self, file: &str, serials: &[u64]) -> String {
        let params = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2025, 1, 1),
            next_update: rcgen::date_time_ymd(2035, 1, 1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(*s),
                    revocation_time: rcgen::date_time_ymd(2025, 6, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.ca).unwrap();
        let path = self.dir.join(file);
        std::fs::write(&path, crl.pem().unwrap()).unwrap();
        path.display().to_string()
    }

    /// The CA's certificate, DER and PEM.
    pub(crate) fn ca_der(&self) -> Vec<u8> {
        self.ca.der().to_vec()
    }
    pub(crate) fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }
}

/// What the client saw of each full handshake: the server's certificate and the
/// stapled OCSP response (empty when none).
pub(crate) type Seen = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

/// A verifier that records what the server presents, then checks it against the
/// test CA (with the name) when given one, else accepts it; it offers only
/// `schemes`, so a test can ask for an RSA or an ECDSA certificate.
#[derive(Debug)]
struct Recorder {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    schemes: Vec<SignatureScheme>,
    algs: WebPkiSupportedAlgorithms,
    seen: Seen,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.seen.lock().push((end_entity.to_vec(), ocsp.to_vec()));
        match &self.webpki {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

const ECDSA: &[SignatureScheme] = &[SignatureScheme::ECDSA_NISTP256_SHA256, SignatureScheme::ECDSA_NISTP384_SHA384];
const RSA: &[SignatureScheme] = &[SignatureScheme::RSA_PSS_SHA256, SignatureScheme::RSA_PKCS1_SHA256];

/// A client config: `versions`, checking certificates against `pki`'s CA when
/// given, offering `schemes` (None: every scheme), with a session store.
pub(crate) fn client(
    versions: &[&'static SupportedProtocolVersion],
    pki: Option<&Pki>,
    schemes: Option<&[SignatureScheme]>,
) -> (Arc<ClientConfig>, Seen) {
    let provider = Arc::new(tollgate_config::tls_provider());
    let webpki = pki
        .map(|p| WebPkiServerVerifier::builder_with_provider(Arc::new(p.roots()), provider.clone()).build().unwrap());
    let algs = provider.signature_verification_algorithms;
    let seen = Seen::default();
    let schemes = schemes.map_or_else(|| algs.supported_schemes(), <[_]>::to_vec);
    let verifier = Recorder { webpki, schemes, algs, seen: seen.clone() };
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = Resumption::store(Arc::new(ClientSessionMemoryCache::new(64)));
    (Arc::new(cfg), seen)
}

/// A TLS handshake with `addr`, sending `sni` as the server name (an IP address
/// sends none).
pub(crate) async fn handshake(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, tcp).await
}

/// An HTTP/1.1 keep-alive connection over TLS, and what its handshake was.
pub(crate) struct Https {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    kind: HandshakeKind,
    version: ProtocolVersion,
    alpn: Option<Vec<u8>>,
}

impl Https {
    pub(crate) async fn connect(addr: SocketAddr, sni: &str, cfg: &Arc<ClientConfig>) -> Https {
        let tls = handshake(addr, sni, cfg).await.unwrap_or_else(|e| panic!("TLS handshake with {sni}: {e}"));
        let conn = tls.get_ref().1;
        let (kind, version) = (conn.handshake_kind().unwrap(), conn.protocol_version().unwrap());
        let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
        let (sender, c) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(c);
        Https { sender, kind, version, alpn }
    }

    pub(crate) async fn get(&mut self, host: &str, path: &str) -> (StatusCode, http::HeaderMap, Bytes) {
        self.send(Request::get(path).header("host", host).body(Full::default()).unwrap()).await
    }

    pub(crate) async fn send(&mut self, req: Request<Full<Bytes>>) -> (StatusCode, http::HeaderMap, Bytes) {
        self.sender.ready().await.expect("connection ready");
        let resp = self.sender.send_request(req).await.expect("response");
        let (parts, body) = resp.into_parts();
        (parts.status, parts.headers, body.collect().await.expect("body").to_bytes())
    }
}

/// A frontend `web` with `binds` (TOML array items) and `rules`, over the echo origin.
fn config(binds: &str, rules: &str, origin: SocketAddr) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [{binds}]\ndefault_backend = \"b\"\n{rules}\n\
         [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s1\"\naddr = \"{origin}\"\n"
    )
}

/// A TLS bind on 127.0.0.`n` port 0 (binds of one config need distinct addresses).
pub(crate) fn tls_bind(n: u8, certs: &[&str], extra: &str) -> String {
    let list: Vec<String> = certs.iter().map(|c| format!("{c:?}")).collect();
    format!("{{ addr = \"127.0.0.{n}:0\", tls = {{ certs = [{}]{extra} }} }}", list.join(", "))
}

/// The address of the `n`th listener (in config order).
fn nth(p: &Server, n: usize) -> SocketAddr {
    p.addrs()[n].1
}

#[tokio::test]
async fn rsa_and_ecdsa_certificates_serve_requests_with_forwarded_proto_https() {
    let pki = Pki::new("kinds");
    let origin = echo().await;
    let (rsa, rsa_file) = pki.leaf("rsa.pem", &["rsa.test"], true);
    let (ecdsa, ecdsa_file) = pki.leaf("ecdsa.pem", &["ecdsa.test"], false);
    let p = proxy(&config(&tls_bind(1, &[&rsa_file, &ecdsa_file], ""), "", origin.addr));
    let addr = nth(&p, 0);
    for (name, want) in [("rsa.test", &rsa), ("ecdsa.test", &ecdsa)] {
        let (cfg, seen) = client(BOTH, Some(&pki), None);
        let mut c = Https::connect(addr, name, &cfg).await;
        assert_eq!(&seen.lock()[0].0, want, "{name}");
        assert_eq!((c.version, c.alpn.as_deref()), (ProtocolVersion::TLSv1_3, Some(&b"http/1.1"[..])));
        for _ in 0..2 {
            let (status, _, body) = c.get(name, "/x").await;
            assert_eq!(status, StatusCode::OK);
            let j = json(&body);
            assert_eq!(echoed_header(&j, "x-forwarded-proto").as_deref(), Some("https"));
            assert_eq!(echoed_header(&j, "x-forwarded-port"), Some(addr.port().to_string()));
        }
    }
    // TLS 1.2 suites are chosen by the certificate's key too.
    for (name, want) in [("rsa.test", &rsa), ("ecdsa.test", &ecdsa)] {
        let (cfg, seen) = client(&[&version::TLS12], Some(&pki), None);
        let mut c = Https::connect(addr, name, &cfg).await;
        assert_eq!((&seen.lock()[0].0, c.version), (want, ProtocolVersion::TLSv1_2));
        assert_eq!(c.get(name, "/").await.0, StatusCode::OK);
    }
}

#[tokio::test]
async fn rsa_and_ecdsa_for_one_name_side_by_side() {
    let pki = Pki::new("side");
    let origin = echo().await;
    let (rsa, rsa_file) = pki.leaf("a-rsa.pem", &["a.test"], true);
    let (ecdsa, ecdsa_file) = pki.leaf("a-ecdsa.pem", &["a.test"], false);
    let p = proxy(&config(&tls_bind(1, &[&rsa_file, &ecdsa_file], ""), "", origin.addr));
    for (schemes, want) in [(ECDSA, &ecdsa), (RSA, &rsa)] {
        for versions in [&[&version::TLS13][..], &[&version::TLS12]] {
            let (cfg, seen) = client(versions, Some(&pki), Some(schemes));
            let mut c = Https::connect(nth(&p, 0), "a.test", &cfg).await;
            assert_eq!(&seen.lock()[0].0, want, "{schemes:?} {versions:?}");
            assert_eq!(c.get("a.test", "/").await.0, StatusCode::OK);
        }
    }
}

#[tokio::test]
async fn sni_picks_exact_names_then_wildcards_then_the_default() {
    let pki = Pki::new("sni");
    let origin = echo().await;
    let (default, default_file) = pki.leaf("default.pem", &["default.test"], false);
    let (wild, wild_file) = pki.leaf("wild.pem", &["*.wild.test"], false);
    let (exact, exact_file) = pki.leaf("exact.pem", &["a.wild.test", "other.test"], false);
    let p = proxy(&config(&tls_bind(1, &[&default_file, &wild_file, &exact_file], ""), "", origin.addr));
    for (sni, want) in [
        ("a.wild.test", &exact),
        ("A.Wild.Test", &exact),
        ("other.test", &exact),
        ("b.wild.test", &wild),
        ("x.y.wild.test", &default),
        ("wild.test", &default),
        ("unknown.test", &default),
        ("default.test", &default),
        ("127.0.0.1", &default),
    ] {
        let (cfg, seen) = client(BOTH, None, None);
        let tls = handshake(nth(&p, 0), sni, &cfg).await.unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(&seen.lock()[0].0, want, "{sni}");
        drop(tls);
    }
}

#[tokio::test]
async fn tls_versions_follow_the_bind() {
    let pki = Pki::new("versions");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let binds = format!(
        "{}, {}",
        tls_bind(1, &[&file], ", max_version = \"1.2\""),
        tls_bind(2, &[&file], ", min_version = \"1.3\", alpn = [\"http/1.1\"]")
    );
    let p = proxy(&config(&binds, "", origin.addr));
    let (only12, only13) = (nth(&p, 0), nth(&p, 1));
    let (c12, _) = client(&[&version::TLS12], Some(&pki), None);
    let (c13, _) = client(&[&version::TLS13], Some(&pki), None);
    assert!(handshake(only12, "a.test", &c13).await.is_err(), "a TLS 1.3-only client on a 1.2-only bind");
    assert!(handshake(only13, "a.test", &c12).await.is_err(), "a TLS 1.2-only client on a 1.3-only bind");
    let mut c = Https::connect(only12, "a.test", &c12).await;
    assert_eq!((c.version, c.get("a.test", "/").await.0), (ProtocolVersion::TLSv1_2, StatusCode::OK));
    let (any, _) = client(BOTH, Some(&pki), None);
    assert_eq!(Https::connect(only12, "a.test", &any).await.version, ProtocolVersion::TLSv1_2);
    let mut c = Https::connect(only13, "a.test", &any).await;
    assert_eq!((c.version, c.get("a.test", "/").await.0), (ProtocolVersion::TLSv1_3, StatusCode::OK));

    // ALPN on a bind that offers HTTP/1.1 only: an h2-only client is refused,
    // one without ALPN served.
    let mut h2_only = (*any).clone();
    h2_only.alpn_protocols = vec![b"h2".to_vec()];
    let err = handshake(only13, "a.test", &Arc::new(h2_only)).await.unwrap_err();
    assert!(err.to_string().contains("NoApplicationProtocol"), "{err}");
    let mut no_alpn = (*any).clone();
    no_alpn.alpn_protocols.clear();
    let mut c = Https::connect(only13, "a.test", &Arc::new(no_alpn)).await;
    assert_eq!(c.alpn, None);
    assert_eq!(c.get("a.test", "/").await.0, StatusCode::OK);
}

/// Connects with `cfg` `n` times, each time making a request (so that TLS 1.3
/// tickets arrive), and returns each handshake's kind.
async fn kinds(addr: SocketAddr, cfg: &Arc<ClientConfig>, n: usize) -> Vec<HandshakeKind> {
    let mut out = Vec::new();
    for _ in 0..n {
        let mut c = Https::connect(addr, "a.test", cfg).await;
        assert_eq!(c.get("a.test", "/").await.0, StatusCode::OK);
        out.push(c.kind);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_on_every_worker_with_tickets_or_the_session_cache() {
    use HandshakeKind::{Full, Resumed};
    let pki = Pki::new("resume");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let binds = [
        tls_bind(1, &[&file], ""),
        tls_bind(2, &[&file], ", tickets = false"),
        tls_bind(3, &[&file], ", session_cache = 0"),
        tls_bind(4, &[&file], ", session_cache = 0, tickets = false"),
    ];
    let p = proxy(&format!("[global]\nworkers = 2\n{}", config(&binds.join(", "), "", origin.addr)));
    // Two workers, each with its own listener: over six connections the kernel
    // spreads them, and every one after the first resumes.
    let resumed = [Full, Resumed, Resumed, Resumed, Resumed, Resumed];
    for (n, b) in [0, 1, 2].into_iter().map(|n| (n, &binds[n])) {
        for versions in [&[&version::TLS13][..], &[&version::TLS12]] {
            let (cfg, _) = client(versions, Some(&pki), None);
            assert_eq!(kinds(nth(&p, n), &cfg, 6).await, resumed, "{b} {versions:?}");
        }
    }
    for versions in [&[&version::TLS13][..], &[&version::TLS12]] {
        let (cfg, _) = client(versions, Some(&pki), None);
        assert_eq!(kinds(nth(&p, 3), &cfg, 3).await, [Full, Full, Full], "no resumption {versions:?}");
    }
}

#[tokio::test]
async fn ocsp_response_is_stapled_from_the_file_beside_the_certificate() {
    let pki = Pki::new("ocsp");
    let origin = echo().await;
    let (_, stapled) = pki.leaf("stapled.pem", &["stapled.test"], false);
    let (_, plain) = pki.leaf("plain.pem", &["plain.test"], false);
    let response = [0x30, 0x03, 0x0a, 0x01, 0x00];
    std::fs::write(format!("{stapled}.ocsp"), response).unwrap();
    let p = proxy(&config(&tls_bind(1, &[&stapled, &plain], ""), "", origin.addr));
    for versions in [&[&version::TLS13][..], &[&version::TLS12]] {
        let (cfg, seen) = client(versions, None, None);
        drop(handshake(nth(&p, 0), "stapled.test", &cfg).await.unwrap());
        drop(handshake(nth(&p, 0), "plain.test", &cfg).await.unwrap());
        let seen = seen.lock();
        assert_eq!(seen[0].1, response, "{versions:?}");
        assert!(seen[1].1.is_empty(), "{versions:?}");
    }
}

#[tokio::test]
async fn redirect_scheme_https_from_the_plain_bind_and_hsts_on_tls_only() {
    let pki = Pki::new("redirect");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let dir = &pki.dir;
    let log = dir.join("access.log");
    let rules = "  [[frontend.rule]]\n  when = { tls = false, path_prefix = \"/secure/\" }\n  \
                 redirect = { scheme = \"https\", code = 301 }\n  \
                 [[frontend.rule]]\n  when = { path = \"/private\" }\n  deny = 403\n";
    let binds = format!("\"127.0.0.1:0\", {}", tls_bind(2, &[&file], ", hsts = \"max-age=600\""));
    let toml = format!(
        "[global]\nworkers = 1\naccess_log = {:?}\n{}",
        log.display().to_string(),
        config(&binds, rules, origin.addr)
    );
    let p = proxy(&toml);
    let (plain, tls) = (nth(&p, 0), nth(&p, 1));

    let reply = raw(
        plain,
        b"GET /secure/a?b=1 HTTP/1.1\r\nHost: a.test:80\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(status_of(&reply), 301, "{reply}");
    assert!(reply.contains("\r\nlocation: https://a.test/secure/a?b=1\r\n"), "{reply}");
    assert!(!reply.to_ascii_lowercase().contains("strict-transport-security"), "{reply}");
    let reply =
        raw(plain, b"GET /secure/ HTTP/1.1\r\nHost: a.test:8080\r\nConnection: close\r\n\r\n", Duration::from_secs(5))
            .await;
    assert!(reply.contains("\r\nlocation: https://a.test:8080/secure/\r\n"), "{reply}");
    // Other paths pass on the plain bind, without HSTS.
    let (status, headers, body) = get(plain, "/open").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("strict-transport-security").is_none());
    assert_eq!(echoed_header(&json(&body), "x-forwarded-proto").as_deref(), Some("http"));

    let (cfg, _) = client(BOTH, Some(&pki), None);
    let mut c = Https::connect(tls, "a.test", &cfg).await;
    let (status, headers, body) = c.get("a.test", "/secure/a").await;
    assert_eq!(status, StatusCode::OK, "no redirect on TLS");
    assert_eq!(headers.get("strict-transport-security").unwrap(), "max-age=600");
    assert_eq!(echoed_header(&json(&body), "x-forwarded-proto").as_deref(), Some("https"));
    // Tollgate's own responses on TLS carry it too.
    let (status, headers, _) = c.get("a.test", "/private").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(headers.get("strict-transport-security").unwrap(), "max-age=600");

    // A line is written once its response has gone out: wait for the fifth.
    let start = Instant::now();
    let mut text = String::new();
    while start.elapsed() < Duration::from_secs(5) {
        text = std::fs::read_to_string(&log).unwrap();
        if text.lines().count() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[..3].iter().all(|l| !l.contains(" tls=")), "{text}");
    assert!(lines[3].ends_with("\"GET /secure/a HTTP/1.1\" tls=TLSv1.3/TLS13_AES_256_GCM_SHA384"), "{text}");
}

#[tokio::test]
async fn sni_and_tls_rule_conditions_route() {
    let pki = Pki::new("rules");
    let (main, other) = (echo().await, echo().await);
    let (_, a) = pki.leaf("a.pem", &["a.test"], false);
    let (_, b) = pki.leaf("b.pem", &["b.test"], false);
    let rules = "  [[frontend.rule]]\n  when = { sni = \"b.test\" }\n  backend = \"other\"\n";
    let toml = format!(
        "{}[[backend]]\nname = \"other\"\n[[backend.server]]\nname = \"o1\"\naddr = \"{}\"\n",
        config(&format!("\"127.0.0.1:0\", {}", tls_bind(2, &[&a, &b], "")), rules, main.addr),
        other.addr
    );
    let p = proxy(&toml);
    let (cfg, _) = client(BOTH, Some(&pki), None);
    // The rule looks at the TLS server name, not at the Host header.
    assert_eq!(Https::connect(nth(&p, 1), "b.test", &cfg).await.get("a.test", "/").await.0, StatusCode::OK);
    assert_eq!(Https::connect(nth(&p, 1), "a.test", &cfg).await.get("b.test", "/").await.0, StatusCode::OK);
    assert_eq!(get(nth(&p, 0), "/").await.0, StatusCode::OK);
    assert_eq!(
        (other.hits.load(std::sync::atomic::Ordering::Relaxed), main.hits.load(std::sync::atomic::Ordering::Relaxed)),
        (1, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_certificates_and_keeps_established_connections_and_sessions() {
    let pki = Pki::new("reload");
    let origin = echo().await;
    let (first, first_file) = pki.leaf("first.pem", &["a.test"], false);
    let toml = config(&format!("{{ addr = \"127.0.0.1:0\", tls = {{ certs = [{first_file:?}] }} }}"), "", origin.addr);
    let p = proxy(&toml);
    let addr = nth(&p, 0);
    let (cfg, seen) = client(BOTH, Some(&pki), None);
    let mut established = Https::connect(addr, "a.test", &cfg).await;
    assert_eq!(established.get("a.test", "/").await.0, StatusCode::OK);
    assert_eq!(seen.lock()[0].0, first);

    // The same file gets a new certificate (a renewal); the reload reads it.
    let (second, _) = pki.leaf("first.pem", &["a.test"], true);
    let new = tollgate_config::parse(&format!("[global]\nworkers = 1\n{toml}"), Path::new("t.toml")).unwrap();
    let report = tokio::task::block_in_place(|| p.reload(new)).unwrap();
    assert_eq!((report.binds_kept, report.tls_binds), (1, 1), "{report}");
    assert!(report.to_string().contains("certificates read anew for 1 TLS bind(s)"), "{report}");

    let (fresh, fresh_seen) = client(BOTH, Some(&pki), None);
    let mut c = Https::connect(addr, "a.test", &fresh).await;
    assert_eq!(fresh_seen.lock()[0].0, second, "a new connection gets the new certificate");
    assert_eq!(c.get("a.test", "/").await.0, StatusCode::OK);
    for _ in 0..3 {
        assert_eq!(established.get("a.test", "/").await.0, StatusCode::OK, "the established connection goes on");
    }
    // The session made before the reload resumes after it: ticket keys and the
    // session cache carry over.
    assert_eq!(Https::connect(addr, "a.test", &cfg).await.kind, HandshakeKind::Resumed);
    assert_eq!(seen.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turns_tls_on_and_off_on_the_same_listener() {
    let pki = Pki::new("onoff");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let plain = config("\"127.0.0.1:0\"", "", origin.addr);
    let tls = config(&format!("{{ addr = \"127.0.0.1:0\", tls = {{ certs = [{file:?}] }} }}"), "", origin.addr);
    let reload = |p: &Server, toml: &str| {
        let cfg = tollgate_config::parse(&format!("[global]\nworkers = 1\n{toml}"), Path::new("t.toml")).unwrap();
        let report = tokio::task::block_in_place(|| p.reload(cfg)).unwrap();
        assert_eq!((report.binds_kept, report.binds_added.len()), (1, 0), "{report}");
    };
    let p = proxy(&plain);
    let addr = nth(&p, 0);
    let mut before = Client::connect(addr).await;
    assert_eq!(before.get("/").await.0, StatusCode::OK);
    reload(&p, &tls);
    let (cfg, _) = client(BOTH, Some(&pki), None);
    assert_eq!(Https::connect(addr, "a.test", &cfg).await.get("a.test", "/").await.0, StatusCode::OK);
    assert_eq!(before.get("/").await.0, StatusCode::OK, "a plain connection from before goes on");
    reload(&p, &plain);
    assert_eq!(get(addr, "/").await.0, StatusCode::OK);
}

#[tokio::test]
async fn plain_http_to_a_tls_port_is_closed_and_tls_to_a_plain_port_gets_400() {
    let pki = Pki::new("mixup");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let p = proxy(&config(&format!("\"127.0.0.1:0\", {}", tls_bind(2, &[&file], "")), "", origin.addr));
    let (plain, tls) = (nth(&p, 0), nth(&p, 1));

    let t = Instant::now();
    let mut s = TcpStream::connect(tls).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply)).await.expect("closed").ok();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(!reply.starts_with(b"HTTP/"), "{reply:?}");

    let (cfg, _) = client(BOTH, None, None);
    let mut hello = Vec::new();
    let mut conn = rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("a.test").unwrap()).unwrap();
    conn.write_tls(&mut hello).unwrap();
    let reply = raw(plain, &hello, Duration::from_secs(5)).await;
    assert_eq!(status_of(&reply), 400, "{reply}");

    // Both binds still serve.
    assert_eq!(Https::connect(tls, "a.test", &cfg).await.get("a.test", "/").await.0, StatusCode::OK);
    assert_eq!(get(plain, "/").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_silent_client_is_closed_after_timeout_http_request() {
    let pki = Pki::new("silent");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let toml = config(&tls_bind(1, &[&file], ""), "timeout = { http_request = \"300ms\" }", origin.addr);
    let p = proxy(&toml);
    let t = Instant::now();
    let mut s = TcpStream::connect(nth(&p, 0)).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply)).await.expect("closed").ok();
    assert!(t.elapsed() >= Duration::from_millis(250) && t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(reply.is_empty());
}

/// The first record a TLS bind answers `cfg`'s ClientHello with, when it is an
/// alert: (level, description). The hello is made by rustls and sent raw; the
/// answer is read until the server closes.
async fn alert_for(addr: SocketAddr, cfg: ClientConfig) -> Option<(u8, u8)> {
    let mut hello = Vec::new();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("a.test").unwrap()).unwrap();
    conn.write_tls(&mut hello).unwrap();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply)).await.expect("closed").ok();
    // An alert record: type 21, version 3.x, length 2, then level and description.
    match reply.as_slice() {
        [0x15, 0x03, _, 0x00, 0x02, level, description, ..] => Some((*level, *description)),
        _ => None,
    }
}

/// A client config offering only `suites` (of `versions`) and every signature scheme.
fn client_with_suites(versions: &[&'static SupportedProtocolVersion], suites: &[&str]) -> ClientConfig {
    let mut provider = tollgate_config::tls_provider();
    provider.cipher_suites.retain(|s| suites.contains(&s.suite().as_str().unwrap()));
    assert_eq!(provider.cipher_suites.len(), suites.len(), "{suites:?}");
    let algs = provider.signature_verification_algorithms;
    let verifier = Recorder { webpki: None, schemes: algs.supported_schemes(), algs, seen: Seen::default() };
    ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth()
}

/// As OpenSSL-based servers do, and as scanners (sslyze) expect when they probe
/// suites one by one: no cipher suite in common ends the handshake with a fatal
/// `handshake_failure` (40), no version in common with `protocol_version` (70),
/// not `access_denied` (49), on HTTP and TCP binds alike.
#[tokio::test]
async fn no_shared_suite_or_version_ends_with_handshake_failure_or_protocol_version() {
    let pki = Pki::new("alerts");
    let origin = echo().await;
    let (_, file) = pki.leaf("a.pem", &["a.test"], false);
    let suites = ", ciphers = [\"TLS13_AES_128_GCM_SHA256\", \"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]";
    let binds = format!("{}, {}", tls_bind(1, &[&file], suites), tls_bind(2, &[&file], ", min_version = \"1.3\""));
    let mut toml = config(&binds, "", origin.addr);
    toml.push_str(&format!(
        "[[frontend]]\nname = \"t\"\nmode = \"tcp\"\nbind = [{}]\ndefault_backend = \"tb\"\n\
         [[backend]]\nname = \"tb\"\nmode = \"tcp\"\n[[backend.server]]\nname = \"s1\"\naddr = \"{}\"\n",
        tls_bind(3, &[&file], suites),
        origin.addr
    ));
    let p = proxy(&toml);
    let (suited, only13, tcp) = (nth(&p, 0), nth(&p, 1), nth(&p, 2));
    const FATAL: u8 = 2;
    const HANDSHAKE_FAILURE: u8 = 40;
    const PROTOCOL_VERSION: u8 = 70;
    for addr in [suited, tcp] {
        let c13 = client_with_suites(&[&version::TLS13], &["TLS13_CHACHA20_POLY1305_SHA256"]);
        assert_eq!(alert_for(addr, c13).await, Some((FATAL, HANDSHAKE_FAILURE)), "TLS 1.3 {addr}");
        let c12 = client_with_suites(&[&version::TLS12], &["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"]);
        assert_eq!(alert_for(addr, c12).await, Some((FATAL, HANDSHAKE_FAILURE)), "TLS 1.2 {addr}");
        let rsa_only = client_with_suites(BOTH, &["TLS13_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
        assert_eq!(alert_for(addr, rsa_only).await, Some((FATAL, HANDSHAKE_FAILURE)), "both {addr}");
        // A shared suite still makes a handshake.
        let ok = client_with_suites(BOTH, &["TLS13_AES_128_GCM_SHA256"]);
        assert!(handshake(addr, "a.test", &Arc::new(ok)).await.is_ok(), "{addr}");
    }
    let (c12, _) = client(&[&version::TLS12], None, None);
    assert_eq!(alert_for(only13, (*c12).clone()).await, Some((FATAL, PROTOCOL_VERSION)));
}
