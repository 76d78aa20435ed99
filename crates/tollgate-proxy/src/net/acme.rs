//! ACME certificates as the TLS binds serve them, and the challenges being
//! answered while one is obtained (runtime/acme.rs does the protocol).
//!
//! Each `[[acme]]` has a slot holding its current certificate: TLS binds that
//! name it read the slot at every handshake ([`crate::net::tls::SniResolver`]),
//! and the runtime swaps a renewed certificate in, so a renewal needs no
//! reload and no connection notices it. Slots and challenges live in an
//! [`AcmeRt`] that a reload carries over for every `[[acme]]` it keeps
//! unchanged.
//!
//! Challenges: HTTP-01 key authorizations by token (the pipeline answers
//! `GET /.well-known/acme-challenge/<token>` before any rule), and TLS-ALPN-01
//! certificates by name (a ClientHello that offers only `acme-tls/1` gets one
//! and nothing else: tls.rs).

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use tollgate_config::{Acme, Config};

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 section 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Where an ACME challenge's file is asked for (RFC 8555 section 8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The certificate's file in an `[[acme]]`'s directory: the chain (leaf
/// first) and its private key in one PEM file (as HAProxy's `crt` files),
/// mode 0600, replaced whole by a rename, so that a key never lies beside
/// another certificate.
pub const CERT_FILE: &str = "cert.pem";

/// A certificate with its notBefore and notAfter (seconds since the epoch).
pub type Dated = (Arc<CertifiedKey>, (u64, u64));

/// The certificate stored for `cfg`, with its notBefore and notAfter
/// (seconds since the epoch): `None` when there is none, or it is for other names than
/// `cfg.domains` (the list changed: a new one is to be obtained).
pub fn load_stored(cfg: &Acme) -> Result<Option<Dated>, String> {
    let cert_path = cfg.dir().join(CERT_FILE);
    let pem = match std::fs::read(&cert_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", cert_path.display())),
    };
    let (cert, names) = tollgate_config::certified_key(&pem, &pem, &cert_path)?;
    let mut want = cfg.domains.clone();
    let mut have = names;
    want.sort();
    have.sort();
    if want != have {
        return Ok(None);
    }
    let dates = validity(&cert.cert[0]).ok_or_else(|| format!("{}: no validity dates", cert_path.display()))?;
    Ok(Some((cert, dates)))
}

/// A certificate's notBefore and notAfter, in seconds since the epoch.
pub fn validity(der: &[u8]) -> Option<(u64, u64)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let v = cert.validity();
    let secs = |t: &x509_parser::time::ASN1Time| u64::try_from(t.timestamp()).ok();
    Some((secs(&v.not_before)?, secs(&v.not_after)?))
}

/// One `[[acme]]`'s certificate.
#[derive(Debug)]
pub struct AcmeSlot {
    pub cfg: Arc<Acme>,
    cert: ArcSwapOption<CertifiedKey>,
    /// The certificate's notBefore and notAfter (seconds since the epoch; 0: none yet).
    not_before: AtomicU64,
    not_after: AtomicU64,
    /// Attempts that failed since the last success.
    pub failures: AtomicU32,
}

impl AcmeSlot {
    fn new(cfg: Arc<Acme>) -> AcmeSlot {
        AcmeSlot {
            cfg,
            cert: ArcSwapOption::empty(),
            not_before: AtomicU64::new(0),
            not_after: AtomicU64::new(0),
            failures: AtomicU32::new(0),
        }
    }

    /// The served certificate's notBefore and notAfter, if there is one.
    pub fn validity(&self) -> Option<(u64, u64)> {
        let until = self.not_after.load(Ordering::Acquire);
        (until != 0).then(|| (self.not_before.load(Ordering::Acquire), until))
    }

    /// The certificate being served, if there is one yet.
    pub fn cert(&self) -> Option<Arc<CertifiedKey>> {
        self.cert.load_full()
    }

    /// The certificate, unless it has expired by `now` (seconds since the
    /// epoch): a certificate from files for the same name is then better.
    pub fn valid_cert(&self, now: u64) -> Option<Arc<CertifiedKey>> {
        self.validity().is_some_and(|(_, until)| now < until).then(|| self.cert()).flatten()
    }

    /// Serves `cert` (valid over `(not_before, not_after)`) from the next handshake on.
    pub fn set(&self, cert: Arc<CertifiedKey>, (not_before, not_after): (u64, u64)) {
        self.cert.store(Some(cert));
        self.not_before.store(not_before, Ordering::Release);
        self.not_after.store(not_after, Ordering::Release);
    }

    /// Whether this slot's certificate is for `name` (lower case).
    pub fn covers(&self, name: &str) -> bool {
        self.cfg.domains.iter().any(|d| d == name)
    }
}

/// Challenges in progress, shared by every `[[acme]]` and every worker.
#[derive(Debug, Default)]
pub struct Challenges {
    /// HTTP-01: token -> key authorization.
    http01: Mutex<HashMap<String, String>>,
    /// Whether `http01` has anything: most requests are told no without a lock.
    any_http01: AtomicBool,
    /// TLS-ALPN-01: name -> the validation certificate.
    alpn: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl Challenges {
    pub fn add_http01(&self, token: &str, key_authorization: &str) {
        let mut m = self.http01.lock();
        m.insert(token.to_string(), key_authorization.to_string());
        self.any_http01.store(true, Ordering::Release);
    }

    pub fn remove_http01(&self, token: &str) {
        let mut m = self.http01.lock();
        m.remove(token);
        self.any_http01.store(!m.is_empty(), Ordering::Release);
    }

    /// Whether an HTTP-01 token is pending: one atomic load, so that a
    /// request looks at its path only while one is.
    pub fn http01_pending(&self) -> bool {
        self.any_http01.load(Ordering::Acquire)
    }

    /// The answer to a request for `path`, if it asks for a pending HTTP-01 token.
    pub fn http01(&self, path: &str) -> Option<String> {
        if !self.http01_pending() {
            return None;
        }
        let token = path.strip_prefix(HTTP01_PREFIX)?;
        self.http01.lock().get(token).cloned()
    }

    pub fn add_alpn(&self, name: &str, cert: Arc<CertifiedKey>) {
        self.alpn.lock().insert(name.to_string(), cert);
    }

    pub fn remove_alpn(&self, name: &str) {
        self.alpn.lock().remove(name);
    }

    /// The TLS-ALPN-01 certificate for `name` (lower case), if one is pending.
    pub fn alpn(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.alpn.lock().get(name).cloned()
    }
}

/// The ACME state of a config: a slot per `[[acme]]`, and the challenges.
#[derive(Debug, Default)]
pub struct AcmeRt {
    /// In the order of `Config::acme`.
    pub slots: Vec<Arc<AcmeSlot>>,
    pub challenges: Arc<Challenges>,
}

impl AcmeRt {
    /// The slots of `config`'s `[[acme]]`s: `prev`'s for those unchanged (same
    /// digest), new ones otherwise, filled from their state directory when it
    /// holds a certificate for exactly their names (`load`).
    pub fn new(config: &Config, prev: Option<&AcmeRt>) -> AcmeRt {
        let slots = config
            .acme
            .iter()
            .map(|a| match prev.and_then(|p| p.slots.iter().find(|s| s.cfg.digest == a.digest)) {
                Some(running) => running.clone(),
                None => {
                    let slot = AcmeSlot::new(a.clone());
                    match load_stored(&slot.cfg) {
                        Ok(Some((cert, dates))) => slot.set(cert, dates),
                        Ok(None) => {}
                        Err(e) => tracing::warn!(acme = %a.name, "ACME: the stored certificate is not used: {e}"),
                    }
                    Arc::new(slot)
                }
            })
            .collect();
        let challenges = prev.map(|p| p.challenges.clone()).unwrap_or_default();
        AcmeRt { slots, challenges }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A slot for `domains` (no certificate yet), for tests.
    pub(crate) fn slot(domains: &[&str]) -> Arc<AcmeSlot> {
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(tollgate_config::tls_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        Arc::new(AcmeSlot::new(Arc::new(Acme {
            name: "t".into(),
            directory: "https://acme.test/dir".into(),
            domains: domains.iter().map(|d| d.to_string()).collect(),
            contact: vec![],
            challenge: tollgate_config::AcmeChallenge::Http01,
            state_dir: std::env::temp_dir(),
            renew_before: None,
            retry: std::time::Duration::from_secs(1),
            client: Arc::new(client),
            digest: 0,
        })))
    }

    #[test]
    fn http01_tokens_are_answered_while_pending() {
        let c = Challenges::default();
        assert_eq!(c.http01("/.well-known/acme-challenge/abc"), None);
        c.add_http01("abc", "abc.thumb");
        c.add_http01("def", "def.thumb");
        assert_eq!(c.http01("/.well-known/acme-challenge/abc").as_deref(), Some("abc.thumb"));
        assert_eq!(c.http01("/.well-known/acme-challenge/ab"), None);
        assert_eq!(c.http01("/abc"), None);
        c.remove_http01("abc");
        assert_eq!(c.http01("/.well-known/acme-challenge/abc"), None);
        assert_eq!(c.http01("/.well-known/acme-challenge/def").as_deref(), Some("def.thumb"));
        c.remove_http01("def");
        assert!(!c.any_http01.load(Ordering::Relaxed));
    }
}
