//! The TLS settings of a bind: reading certificate chains, private keys and OCSP
//! responses from PEM (and DER) files, and checking the names of versions, cipher
//! suites and protocols. Every error names the file it is about; `crate::build`
//! adds the config's file:line and key path.

use crate::model::{TlsCert, TlsVersion};
use crate::raw::RawTlsVersion;
use http::HeaderValue;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{Error as TlsError, InconsistentKeys, SupportedCipherSuite};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The provider Tollgate's TLS uses: rustls on aws-lc-rs.
pub fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// File name endings in a certificate directory that are not certificate files.
const NOT_CERTS: [&str; 4] = [".key", ".ocsp", ".issuer", ".sctl"];

/// The certificate files one `certs` entry names: the file itself, or every file
/// of a directory (sorted by name) but hidden ones and those ending in `.key`,
/// `.ocsp`, `.issuer` or `.sctl`.
pub(crate) fn cert_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| format!("cannot read the directory {}: {e}", path.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read the directory {}: {e}", path.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || NOT_CERTS.iter().any(|end| name.ends_with(end)) {
            continue;
        }
        let p = entry.path();
        if std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
            files.push(p);
        }
    }
    if files.is_empty() {
        return Err(format!("the directory {} holds no certificate file", path.display()));
    }
    files.sort();
    Ok(files)
}

/// Reads one certificate chain and its private key, checks that they belong
/// together, and takes the OCSP response `<cert_file>.ocsp` if there is one.
///
/// The key is `key_file` when given; otherwise the first private key in the
/// certificate file itself, else `<cert_file>.key`, else the certificate file's
/// name with its extension replaced by `.key` (`site.crt` -> `site.key`).
pub(crate) fn load_cert(
    cert_file: &Path,
    key_file: Option<&Path>,
    provider: &CryptoProvider,
) -> Result<TlsCert, String> {
    let bytes = read(cert_file)?;
    let chain = pem_certs(&bytes, cert_file)?;
    let (key, key_file) = match key_file {
        Some(k) => (pem_key(&read(k)?, k)?.ok_or_else(|| no_key_in(k))?, k.to_path_buf()),
        None => match pem_key(&bytes, cert_file)? {
            Some(key) => (key, cert_file.to_path_buf()),
            None => {
                let beside = key_beside(cert_file).ok_or_else(|| {
                    format!(
                        "{} holds no private key, and neither {} nor {} exists (or give `key`)",
                        cert_file.display(),
                        appended(cert_file, ".key").display(),
                        cert_file.with_extension("key").display()
                    )
                })?;
                (pem_key(&read(&beside)?, &beside)?.ok_or_else(|| no_key_in(&beside))?, beside)
            }
        },
    };
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{}: the private key cannot be used: {e}", key_file.display()))?;
    let mut certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(TlsError::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(format!(
                "the private key in {} does not belong to the certificate in {}",
                key_file.display(),
                cert_file.display()
            ));
        }
        Err(e) => return Err(format!("{}: the certificate cannot be parsed: {e}", cert_file.display())),
    }
    let names = dns_names(&certified.cert[0]).map_err(|e| format!("{}: {e}", cert_file.display()))?;
    let ocsp_path = appended(cert_file, ".ocsp");
    let ocsp_file = if ocsp_path.exists() {
        let der = read(&ocsp_path)?;
        check_ocsp(&der).map_err(|e| format!("{}: {e}", ocsp_path.display()))?;
        certified.ocsp = Some(der);
        Some(ocsp_path)
    } else {
        None
    };
    Ok(TlsCert { cert_file: cert_file.to_path_buf(), key_file, ocsp_file, names, key: Arc::new(certified) })
}

/// A certificate chain and its key from PEM text (an ACME certificate, as
/// obtained or as kept on disk), checked as [`load_cert`] checks files; with
/// the DNS names of the leaf. `what` names it in errors.
pub fn certified_key(
    chain_pem: &[u8],
    key_pem: &[u8],
    what: &Path,
) -> Result<(Arc<CertifiedKey>, Vec<String>), String> {
    let chain = pem_certs(chain_pem, what)?;
    let key = pem_key(key_pem, what)?.ok_or_else(|| no_key_in(what))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{}: the private key cannot be used: {e}", what.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    if let Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) = certified.keys_match() {
        return Err(format!("{}: the private key does not belong to the certificate", what.display()));
    }
    let names = dns_names(&certified.cert[0]).map_err(|e| format!("{}: {e}", what.display()))?;
    Ok((Arc::new(certified), names))
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The certificates in PEM text (the bytes of `path`): at least one.
fn pem_certs(bytes: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate (no \"BEGIN CERTIFICATE\" block)", path.display()));
    }
    Ok(certs)
}

fn no_key_in(path: &Path) -> String {
    format!("{} holds no private key (no \"BEGIN ... PRIVATE KEY\" block)", path.display())
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in PEM text, if any.
fn pem_key(bytes: &[u8], path: &Path) -> Result<Option<PrivateKeyDer<'static>>, String> {
    match PrivateKeyDer::from_pem_slice(bytes) {
        Ok(k) => Ok(Some(k)),
        Err(pem::Error::NoItemsFound) => Ok(None),
        Err(e) => Err(format!("{}: bad PEM: {e}", path.display())),
    }
}

/// `path` with `ext` added to its file name (`a.pem` -> `a.pem.key`).
fn appended(path: &Path, ext: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// The key file beside a certificate file without a key in it, if one exists.
fn key_beside(cert_file: &Path) -> Option<PathBuf> {
    [appended(cert_file, ".key"), cert_file.with_extension("key")].into_iter().find(|p| p != cert_file && p.is_file())
}

/// The DNS names (lower-case) of a certificate's subjectAltName extension.
fn dns_names(der: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let cert = webpki::EndEntityCert::try_from(der).map_err(|e| format!("the certificate cannot be parsed: {e:?}"))?;
    let mut names: Vec<String> = cert.valid_dns_names().map(str::to_ascii_lowercase).collect();
    names.dedup();
    Ok(names)
}

/// A stapled response must be a DER `OCSPResponse` whose status is `successful`:
/// `SEQUENCE { ENUMERATED 0, ... }`.
fn check_ocsp(der: &[u8]) -> Result<(), String> {
    let bad = || "not a DER-encoded OCSP response".to_string();
    if der.first() != Some(&0x30) {
        return Err(bad());
    }
    let len_octets = match der.get(1) {
        Some(b) if b & 0x80 == 0 => 0,
        Some(b) => (b & 0x7f) as usize,
        None => return Err(bad()),
    };
    match der.get(2 + len_octets..5 + len_octets) {
        Some([0x0a, 0x01, 0]) => Ok(()),
        Some([0x0a, 0x01, status]) => {
            Err(format!("the OCSP response's status is {status}, not successful (0): it cannot be stapled"))
        }
        _ => Err(bad()),
    }
}

/// `"1.2"`, `"1.3"` (also `1.2`, `"TLSv1.3"`).
pub(crate) fn parse_version(v: &RawTlsVersion) -> Result<TlsVersion, String> {
    let text = match v {
        RawTlsVersion::Text(t) => t.trim().to_ascii_lowercase(),
        RawTlsVersion::Number(n) => format!("{n}"),
    };
    match text.strip_prefix("tlsv").unwrap_or(&text) {
        "1.2" => Ok(TlsVersion::Tls12),
        "1.3" => Ok(TlsVersion::Tls13),
        "1" | "1.0" | "1.1" => {
            Err(format!("TLS {text} is not supported: it is obsolete (RFC 8996); use \"1.2\" or \"1.3\""))
        }
        _ => Err(format!("`{text}` is not a TLS version (use \"1.2\" or \"1.3\")")),
    }
}

/// The version a cipher suite belongs to.
pub(crate) fn suite_version(s: &SupportedCipherSuite) -> TlsVersion {
    match s {
        SupportedCipherSuite::Tls12(_) => TlsVersion::Tls12,
        SupportedCipherSuite::Tls13(_) => TlsVersion::Tls13,
    }
}

/// A cipher suite by its IANA name, as rustls writes it
/// (`TLS13_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`) or with
/// TLS 1.3's `TLS_AES_128_GCM_SHA256`; case does not matter.
pub(crate) fn parse_cipher(name: &str, provider: &CryptoProvider) -> Result<SupportedCipherSuite, String> {
    let want = name.trim().to_ascii_uppercase();
    for s in rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES {
        let Some(own) = s.suite().as_str() else { continue };
        let iana13 = own.strip_prefix("TLS13_").map(|rest| format!("TLS_{rest}"));
        if want == own || iana13.as_deref() == Some(want.as_str()) {
            return Ok(*s);
        }
    }
    let known: Vec<&str> = provider.cipher_suites.iter().filter_map(|s| s.suite().as_str()).collect();
    Err(format!("`{name}` is not a cipher suite Tollgate offers ({})", known.join(", ")))
}

/// The protocols ALPN may offer.
pub(crate) fn check_alpn(name: &str) -> Result<(), String> {
    match name {
        "h2" | "http/1.1" => Ok(()),
        other => Err(format!("`{other}` is not a protocol Tollgate serves (\"h2\", \"http/1.1\")")),
    }
}

/// A `Strict-Transport-Security` value (RFC 6797 section 6.1): directives
/// separated by `;`, one of them `max-age=<seconds>`.
pub(crate) fn parse_hsts(v: &str) -> Result<HeaderValue, String> {
    let value = HeaderValue::from_str(v).map_err(|_| "the value cannot be sent in a header".to_string())?;
    let mut max_age = false;
    for d in v.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let (name, arg) = d.split_once('=').map_or((d, None), |(n, a)| (n.trim(), Some(a.trim().trim_matches('"'))));
        match name.to_ascii_lowercase().as_str() {
            "max-age" => match arg {
                Some(a) if !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) => max_age = true,
                _ => return Err(format!("`{d}`: max-age takes a number of seconds, e.g. max-age=31536000")),
            },
            "includesubdomains" | "preload" if arg.is_none() => {}
            _ => return Err(format!("`{d}` is not an HSTS directive (max-age=N, includeSubDomains, preload)")),
        }
    }
    if !max_age {
        return Err("an HSTS value needs max-age, e.g. \"max-age=31536000\"".into());
    }
    Ok(value)
}

/// The CA certificates of a `ca` file (PEM), as a root store.
pub(crate) fn load_ca(path: &Path) -> Result<rustls::RootCertStore, String> {
    let certs = pem_certs(&read(path)?, path)?;
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| format!("{}: a CA certificate cannot be used: {e}", path.display()))?;
    }
    Ok(roots)
}

/// The certificate revocation lists of a `crl` file: PEM (`BEGIN X509 CRL`
/// blocks) or one DER list.
pub(crate) fn load_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let bytes = read(path)?;
    let pem: Vec<_> = CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    let list = if pem.is_empty() { vec![CertificateRevocationListDer::from(bytes)] } else { pem };
    // Parsed here so that a bad list is an error at load, not a refused handshake.
    for crl in &list {
        webpki::OwnedCertRevocationList::from_der(crl)
            .map_err(|e| format!("{}: not a certificate revocation list: {e:?}", path.display()))?;
    }
    Ok(list)
}

/// The system's trusted CA certificates (rustls-native-certs: on Linux the
/// distribution's bundle, e.g. /etc/ssl/certs), for servers without `ca`.
pub(crate) fn system_roots() -> Result<rustls::RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found.errors.first().map(|e| format!(": {e}")).unwrap_or_default();
        return Err(format!("the system has no trusted CA certificate to verify the server with{why}; give `ca`"));
    }
    Ok(roots)
}

/// The rustls client config for a server: its roots (or no verification at
/// all), an optional client certificate, and ALPN.
pub(crate) fn client_config(
    roots: Option<Arc<rustls::RootCertStore>>,
    client_cert: Option<Arc<CertifiedKey>>,
    alpn: &[String],
    provider: CryptoProvider,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(provider);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match roots {
        Some(roots) => builder.with_root_certificates(roots),
        None => builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))),
    };
    let mut config = match client_cert {
        Some(key) => builder.with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Ok(config)
}

/// `verify = "none"`: every certificate is accepted, whoever it names and
/// whoever signed it; the handshake's signatures are still checked, so the
/// session is at least with the holder of the certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, TlsError> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A hash of the bytes of `files` (those that can be read) and of `settings`.
pub(crate) fn digest(files: &[&Path], settings: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    settings.hash(&mut h);
    for f in files {
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ocsp_status_is_checked() {
        assert_eq!(check_ocsp(&[0x30, 0x03, 0x0a, 0x01, 0x00]), Ok(()));
        assert_eq!(check_ocsp(&[0x30, 0x82, 0x01, 0x00, 0x0a, 0x01, 0x00]), Ok(()));
        assert!(check_ocsp(&[0x30, 0x03, 0x0a, 0x01, 0x06]).unwrap_err().contains("status is 6"));
        assert!(check_ocsp(b"-----BEGIN").is_err());
        assert!(check_ocsp(&[0x30]).is_err());
        assert!(check_ocsp(&[]).is_err());
    }

    #[test]
    fn versions_ciphers_alpn_hsts() {
        let p = provider();
        assert_eq!(parse_version(&RawTlsVersion::Text("1.2".into())), Ok(TlsVersion::Tls12));
        assert_eq!(parse_version(&RawTlsVersion::Number(1.3)), Ok(TlsVersion::Tls13));
        assert_eq!(parse_version(&RawTlsVersion::Text("TLSv1.3".into())), Ok(TlsVersion::Tls13));
        assert!(parse_version(&RawTlsVersion::Text("1.1".into())).unwrap_err().contains("obsolete"));
        assert!(parse_version(&RawTlsVersion::Text("2".into())).unwrap_err().contains("not a TLS version"));
        let a = parse_cipher("TLS_AES_128_GCM_SHA256", &p).unwrap();
        let b = parse_cipher("tls13_aes_128_gcm_sha256", &p).unwrap();
        assert_eq!(a.suite(), b.suite());
        assert_eq!(suite_version(&a), TlsVersion::Tls13);
        let c = parse_cipher("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", &p).unwrap();
        assert_eq!(suite_version(&c), TlsVersion::Tls12);
        assert!(parse_cipher("RC4-MD5", &p).unwrap_err().contains("TLS13_AES_256_GCM_SHA384"));
        assert!(check_alpn("http/1.1").is_ok());
        assert!(check_alpn("h2").is_ok());
        assert!(check_alpn("h2c").unwrap_err().contains("\"h2\", \"http/1.1\""));
        assert!(check_alpn("spdy/3").is_err());
        assert!(parse_hsts("max-age=31536000; includeSubDomains; preload").is_ok());
        assert!(parse_hsts("max-age=\"600\"").is_ok());
        assert!(parse_hsts("includeSubDomains").unwrap_err().contains("needs max-age"));
        assert!(parse_hsts("max-age=soon").is_err());
        assert!(parse_hsts("max-age=1; nosniff").is_err());
        assert!(parse_hsts("max-age=1\n").is_err());
    }
}
