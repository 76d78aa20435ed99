//! `[[acme]]`: certificates obtained and renewed from an ACME server (RFC
//! 8555: Let's Encrypt, ZeroSSL, a company's own CA) for TLS binds that name
//! them (`tls = { acme = ["NAME"] }`). The runtime does the protocol
//! (tollgate-proxy runtime/acme.rs); this is what the file asks for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One certificate to obtain and keep renewed.
#[derive(Debug, Clone)]
pub struct Acme {
    pub name: String,
    /// The ACME server's directory URL (https).
    pub directory: String,
    /// The names the certificate covers (DNS names, lower case, no wildcard:
    /// HTTP-01 and TLS-ALPN-01 cannot prove one).
    pub domains: Vec<String>,
    /// `mailto:` addresses given to the ACME server with the account.
    pub contact: Vec<String>,
    pub challenge: AcmeChallenge,
    /// Where the account key, the certificate and its key are kept:
    /// `<state_dir>/<name>/` (`account.json`, `cert.pem`, `key.pem`).
    pub state_dir: PathBuf,
    /// Renew this long before the certificate expires; `None`: when a third
    /// of its lifetime is left (30 days of Let's Encrypt's 90).
    pub renew_before: Option<Duration>,
    /// The first wait after a failed attempt; it doubles up to [`Acme::MAX_RETRY`].
    pub retry: Duration,
    /// The TLS client config for the ACME server: `directory_ca`'s roots, or
    /// the system's.
    pub client: Arc<rustls::ClientConfig>,
    /// A hash of all the above and of `directory_ca`'s contents: a reload
    /// keeps the running state of an `[[acme]]` whose digest is unchanged.
    pub digest: u64,
}

impl Acme {
    /// The longest wait between two attempts after failures.
    pub const MAX_RETRY: Duration = Duration::from_secs(3600);

    /// `<state_dir>/<name>`.
    pub fn dir(&self) -> PathBuf {
        self.state_dir.join(&self.name)
    }

    /// When a certificate valid from `not_before` to `not_after` (seconds
    /// since the epoch) is to be renewed: `renew_before` (else a third of its
    /// lifetime) before its end, but never before half its lifetime has
    /// passed (a margin as long as the lifetime would renew without end).
    pub fn renew_at(&self, not_before: u64, not_after: u64) -> u64 {
        let lifetime = not_after.saturating_sub(not_before);
        let left = match self.renew_before {
            Some(d) => d.as_secs().min(lifetime / 2),
            None => lifetime / 3,
        };
        not_after.saturating_sub(left)
    }
}

/// How the ACME server is shown that this proxy answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// A file under `/.well-known/acme-challenge/` over plain HTTP on port 80:
    /// any HTTP frontend answers it, before its rules.
    Http01,
    /// A special certificate over TLS on port 443, to a client that asks
    /// for ALPN `acme-tls/1` (RFC 8737): TLS binds that use the `[[acme]]`.
    TlsAlpn01,
}

impl AcmeChallenge {
    pub fn as_str(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_a_third_of_the_lifetime_before_the_end_unless_told() {
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        );
        let mut a = Acme {
            name: "a".into(),
            directory: "https://acme.test/dir".into(),
            domains: vec!["a.test".into()],
            contact: vec![],
            challenge: AcmeChallenge::Http01,
            state_dir: "acme".into(),
            renew_before: None,
            retry: Duration::from_secs(60),
            client,
            digest: 0,
        };
        let day = 86_400;
        assert_eq!(a.renew_at(0, 90 * day), 60 * day);
        a.renew_before = Some(Duration::from_secs(7 * day));
        assert_eq!(a.renew_at(0, 90 * day), 83 * day);
        a.renew_before = Some(Duration::from_secs(100 * day));
        assert_eq!(a.renew_at(0, 90 * day), 45 * day, "at most half the lifetime before the end");
        assert_eq!(a.renew_at(10 * day, 16 * day), 13 * day, "a six-day certificate");
        assert_eq!(a.dir(), PathBuf::from("acme/a"));
    }
}
