//! TLS termination with rustls (aws-lc-rs): the server config of each TLS bind,
//! the certificate chosen by SNI, session resumption shared by every worker, and
//! the client stream that is either plain TCP or TLS over it.
//!
//! The config crate has read and checked every file (chains, keys, OCSP
//! responses); what is built here cannot fail on a file. One [`TlsEndpoint`] per
//! TLS bind lives in the [`crate::Snapshot`] and is shared by every worker: its
//! `Arc<ServerConfig>` carries the session cache and the ticket keys, so a session
//! made on one worker resumes on any other. A reload builds new endpoints (new
//! certificates) that keep the running [`Resumption`] of the same bind, so tickets
//! and cached sessions outlive reloads; connections already established keep
//! the config they were accepted with.

use crate::io::lazy_tcp::LazyTcp;
use crate::net::acme::{ACME_TLS_ALPN, AcmeRt, AcmeSlot, Challenges};
use rustls::server::{Acceptor, ServerConfig, ServerSessionMemoryCache};
use rustls::server::{ClientHello, NoServerSessionStorage, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::{ProtocolVersion, SupportedProtocolVersion};
use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;
use tollgate_config::{AcmeChallenge, ClientCert, Tls, TlsVersion};

/// What a TLS bind accepts with: its rustls config (certificates, versions,
/// suites, ALPN, resumption), and the resumption state, kept across reloads.
pub struct TlsEndpoint {
    pub config: Arc<ServerConfig>,
    pub resumption: Arc<Resumption>,
    /// `Strict-Transport-Security` for responses on this bind.
    pub hsts: Option<http::HeaderValue>,
    /// The bind serves HTTP/3 too (`h3 = true`): its responses say so (`Alt-Svc`).
    pub h3: bool,
    /// TLS-ALPN-01 challenges to answer: set when an `[[acme]]` the bind
    /// serves proves its names that way (acme.rs).
    pub acme_challenges: Option<Arc<Challenges>>,
}

impl TlsEndpoint {
    /// The endpoint for `tls`, with `resumption` when it was made for the same
    /// settings (a reload), else a new one.
    pub fn new(tls: &Tls, resumption: Option<&Arc<Resumption>>, acme: &AcmeRt) -> Result<Self, rustls::Error> {
        let resumption = match resumption {
            Some(r) if r.fits(tls) => r.clone(),
            _ => Arc::new(Resumption::new(tls)?),
        };
        let mut provider = tollgate_config::tls_provider();
        provider.cipher_suites = tls.cipher_suites.clone();
        let versions: Vec<&'static SupportedProtocolVersion> = [TlsVersion::Tls12, TlsVersion::Tls13]
            .into_iter()
            .filter(|v| (tls.min_version..=tls.max_version).contains(v))
            .map(|v| match v {
                TlsVersion::Tls12 => &rustls::version::TLS12,
                TlsVersion::Tls13 => &rustls::version::TLS13,
            })
            .collect();
        let builder = ServerConfig::builder_with_provider(Arc::new(provider)).with_protocol_versions(&versions)?;
        let builder = match &tls.client_auth {
            Some(auth) => builder.with_client_cert_verifier(auth.verifier.clone()),
            None => builder.with_no_client_auth(),
        };
        let slots: Vec<Arc<AcmeSlot>> = tls.acme.iter().filter_map(|i| acme.slots.get(*i).cloned()).collect();
        let acme_challenges =
            slots.iter().any(|s| s.cfg.challenge == AcmeChallenge::TlsAlpn01).then(|| acme.challenges.clone());
        let mut config = builder.with_cert_resolver(Arc::new(SniResolver::new(tls, slots)));
        config.alpn_protocols = tls.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        // The configured order of cipher suites is the preference.
        config.ignore_client_order = true;
        config.session_storage = resumption.cache.clone();
        if let Some(t) = &resumption.ticketer {
            config.ticketer = t.clone();
        } else if tls.session_cache == 0 {
            // Nothing to resume from: TLS 1.3 tickets would be useless.
            config.send_tls13_tickets = 0;
        }
        Ok(TlsEndpoint { config: Arc::new(config), resumption, hsts: tls.hsts.clone(), h3: false, acme_challenges })
    }
}

/// Session resumption for one bind, shared by every worker: a server-side
/// session cache (TLS 1.2 session IDs, TLS 1.3 stateful tickets) and a ticketer
/// whose keys rotate every 6 hours (tickets live 12 hours; rustls' aws-lc-rs
/// `Ticketer`, RFC 5077's construction).
pub struct Resumption {
    session_cache: usize,
    /// The client certificate checks the sessions were made under.
    client_auth: Option<u64>,
    cache: Arc<dyn StoresServerSessions>,
    ticketer: Option<Arc<dyn ProducesTickets>>,
}

impl Resumption {
    fn new(tls: &Tls) -> Result<Self, rustls::Error> {
        let cache: Arc<dyn StoresServerSessions> = match tls.session_cache {
            0 => Arc::new(NoServerSessionStorage {}),
            n => ServerSessionMemoryCache::new(n),
        };
        let ticketer = if tls.tickets { Some(rustls::crypto::aws_lc_rs::Ticketer::new()?) } else { None };
        let client_auth = tls.client_auth.as_ref().map(|a| a.digest);
        Ok(Resumption { session_cache: tls.session_cache, client_auth, cache, ticketer })
    }

    /// Whether this state was made for `tls`'s resumption settings.
    fn fits(&self, tls: &Tls) -> bool {
        self.session_cache == tls.session_cache
            && self.ticketer.is_some() == tls.tickets
            && self.client_auth == tls.client_auth.as_ref().map(|a| a.digest)
    }
}

/// Chooses the certificate for a handshake by the client's server name (SNI):
/// the certificates naming it exactly, then those whose wildcard covers it
/// (`*.example.com` covers one label: `a.example.com`, not `a.b.example.com`),
/// then all of them in the configured order (the first is the default). Among
/// the candidates, the first whose key can sign with a scheme the client
/// offers wins, so RSA and ECDSA certificates for one name live side by side.
///
/// When none can, the first candidate is returned all the same: rustls then
/// fails the handshake on what is really missing, with the alert OpenSSL-based
/// servers send (`handshake_failure`: no cipher suite, or no signature scheme,
/// in common). A resolver that returns nothing makes rustls send
/// `access_denied` instead, which scanners (sslyze) take for a refusal of the
/// client and stop at. This happens when the client shares no cipher suite
/// with the bind: rustls hands the resolver only the signature schemes usable
/// with the shared suites, so none.
///
/// `[[acme]]` certificates come first for the names they were obtained for,
/// read from their slots at each handshake (a renewal is served at once);
/// without any `certs`, the first ACME certificate there is is the default.
#[derive(Debug)]
pub struct SniResolver {
    exact: HashMap<String, Vec<Arc<CertifiedKey>>>,
    /// Keyed by what follows `*.`.
    wildcard: HashMap<String, Vec<Arc<CertifiedKey>>>,
    all: Vec<Arc<CertifiedKey>>,
    acme: Vec<Arc<AcmeSlot>>,
}

impl SniResolver {
    pub fn new(tls: &Tls, acme: Vec<Arc<AcmeSlot>>) -> Self {
        let mut r = SniResolver { exact: HashMap::new(), wildcard: HashMap::new(), all: Vec::new(), acme };
        for c in &tls.certs {
            for name in &c.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut r.wildcard, parent),
                    None => (&mut r.exact, name.as_str()),
                };
                map.entry(key.to_string()).or_default().push(c.key.clone());
            }
            r.all.push(c.key.clone());
        }
        r
    }

    /// The certificate for server name `sni` (lower-case), for a client that
    /// accepts `schemes`; when no candidate fits `schemes`, the first candidate
    /// (see the type's doc). `None` only without any certificate.
    pub fn pick(&self, sni: Option<&str>, schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        if !self.acme.is_empty() {
            let now = tollgate_wire::clock::unix_now();
            let acme = sni.and_then(|n| self.acme.iter().filter(|s| s.covers(n)).find_map(|s| s.valid_cert(now)));
            if acme.is_some() {
                return acme;
            }
            if self.all.is_empty() {
                // Nothing else to offer: an expired certificate fails the
                // handshake as clearly as none.
                return self
                    .acme
                    .iter()
                    .find_map(|s| s.valid_cert(now))
                    .or_else(|| self.acme.iter().find_map(|s| s.cert()));
            }
        }
        let exact = sni.and_then(|n| self.exact.get(n));
        let wildcard = sni.and_then(|n| n.split_once('.')).and_then(|(_, parent)| self.wildcard.get(parent));
        let mut candidates = [exact, wildcard, Some(&self.all)].into_iter().flatten().flat_map(|keys| keys.iter());
        let first = candidates.clone().next();
        candidates.find(|k| k.key.choose_scheme(schemes).is_some()).or(first).cloned()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name().map(sni_name);
        self.pick(sni.as_deref(), hello.signature_schemes())
    }
}

/// A server name as certificates and `sni` rules are matched against it:
/// lower-case, without the one trailing dot of a fully qualified name, which
/// rustls passes on (`openssl s_client -servername example.com.` sends it).
pub fn sni_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// What a request on a TLS connection knows of it.
#[derive(Debug, Clone)]
pub struct TlsInfo {
    /// The server name the client sent, lower-case; empty without SNI.
    pub sni: String,
    pub version: &'static str,
    pub cipher: &'static str,
    pub hsts: Option<http::HeaderValue>,
    /// `Alt-Svc` for responses on this connection: HTTP/3 on the same port
    /// (RFC 9114 section 3.1.1), on an `h3` bind.
    pub alt_svc: Option<http::HeaderValue>,
    /// The certificate the client presented (a bind with `client_ca`), checked.
    pub client: Option<Arc<ClientCert>>,
}

/// `text` with its control characters written `\xNN`: a name in a
/// certificate may hold any, and it goes into request headers.
fn header_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\x{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// What rules and header variables see of a client's certificate (`der`,
/// the leaf): its subject and issuer (RFC 4514 text), serial and SHA-256.
/// A certificate the verifier took but x509-parser cannot read keeps the
/// fingerprint alone.
pub fn client_cert(der: &[u8]) -> ClientCert {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    let fingerprint = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => ClientCert {
            subject: header_safe(&cert.subject().to_string()),
            issuer: header_safe(&cert.issuer().to_string()),
            serial: cert.raw_serial().iter().map(|b| format!("{b:02X}")).collect(),
            fingerprint,
        },
        Err(_) => ClientCert { fingerprint, ..ClientCert::default() },
    }
}

/// How long a client may hold on to an `Alt-Svc` (a day, Caddy's and nginx's
/// usual `ma=86400`).
const ALT_SVC_MAX_AGE: u32 = 86400;

/// The `Alt-Svc` value of an `h3` bind listening on `port`.
pub fn alt_svc(port: u16) -> http::HeaderValue {
    http::HeaderValue::try_from(format!("h3=\":{port}\"; ma={ALT_SVC_MAX_AGE}"))
        .unwrap_or_else(|_| http::HeaderValue::from_static(""))
}

/// A TLS handshake on `tcp`, its costly step taken in turn with the other
/// handshakes on this worker, after the ready connections.
///
/// The costly step is the answer to the ClientHello: rustls chooses the
/// certificate, does the key exchange and, on a full handshake, signs (about
/// 0.3 ms for ECDSA P-256 and 0.8 ms for RSA-2048 on the benchmark machine,
/// docs/benchmarks.md). It runs inside `into_stream`, synchronously. Run as an
/// ordinary task, every handshake whose ClientHello came in the same batch of
/// I/O events would take that step back to back, and an established connection
/// whose bytes arrived meanwhile (a WebSocket message, a request on a
/// keep-alive connection) would wait behind all of them. So, like HAProxy, which
/// puts handshakes in a "heavy" task class and runs at most one of them per
/// scheduler round, a handshake here first reads its ClientHello (cheap), then
/// waits for the worker's turn ([`heavy_turn`]), takes the step, and gives the
/// turn back before it sends its flight and waits for the client's Finished.
async fn handshake(endpoint: &TlsEndpoint, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    let start = LazyConfigAcceptor::new(Acceptor::default(), tcp).await?;
    if let Some(challenges) = &endpoint.acme_challenges
        && start.client_hello().alpn().is_some_and(|mut p| p.any(|p| p == ACME_TLS_ALPN))
    {
        return acme_validation(start, challenges).await;
    }
    let turn = heavy_turn().await;
    let accept = start.into_stream(endpoint.config.clone());
    drop(turn);
    accept.await
}

/// One certificate for every handshake.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A TLS-ALPN-01 validation (RFC 8737 section 3): the ACME server's
/// handshake, offering `acme-tls/1`, gets the validation certificate for the
/// name it sent (none pending: the handshake fails), and the connection
/// closes once the handshake is done: it carries no application data.
async fn acme_validation(
    start: tokio_rustls::StartHandshake<TcpStream>,
    challenges: &Challenges,
) -> io::Result<TlsStream<TcpStream>> {
    let cert = start.client_hello().server_name().map(sni_name).and_then(|n| challenges.alpn(&n));
    let mut config = ServerConfig::builder_with_provider(Arc::new(tollgate_config::tls_provider()))
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Fixed(
            cert.ok_or_else(|| io::Error::other("no TLS-ALPN-01 challenge for this name"))?,
        )));
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    let mut tls = start.into_stream(Arc::new(config)).await?;
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
    Err(io::Error::other("TLS-ALPN-01 validation handshake answered"))
}

thread_local! {
    /// The turn for costly handshake steps on this thread (a worker runs on a
    /// current-thread runtime, so this is per worker).
    static HEAVY: Arc<Semaphore> = Arc::new(Semaphore::new(1));
}

/// Waits for this worker's turn to take a costly handshake step, then lets
/// the worker poll its I/O driver and run whatever that made ready before the
/// step is taken: a yielded task is deferred until after the driver poll. The
/// semaphore is fair (first come, first served), and the next handshake is
/// woken only when this one gives the turn back, so at most one costly step
/// runs between two polls of the driver. The turn is given back when the
/// returned permit drops (also when the handshake is dropped on its timeout).
async fn heavy_turn() -> Option<OwnedSemaphorePermit> {
    let gate = HEAVY.with(Arc::clone);
    // The semaphore is never closed; `None` would only skip the turn.
    let permit = gate.acquire_owned().await.ok();
    tokio::task::yield_now().await;
    permit
}

/// A client connection: plain TCP, or TLS over it.
pub enum ClientStream {
    Plain(LazyTcp),
    Tls(Box<TlsStream<TcpStream>>),
}

impl ClientStream {
    /// Completes a TLS handshake on `tcp` within `limit`. `None` when it fails
    /// or takes too long (the connection is then closed).
    pub async fn accept(endpoint: &TlsEndpoint, tcp: TcpStream, limit: Duration) -> Option<(Self, TlsInfo)> {
        let peer = tcp.peer_addr().ok();
        let alt_svc = if endpoint.h3 { tcp.local_addr().ok().map(|a| alt_svc(a.port())) } else { None };
        let stream = match tokio::time::timeout(limit, handshake(endpoint, tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(client = ?peer, "TLS handshake failed: {e}");
                return None;
            }
            Err(_) => {
                tracing::debug!(client = ?peer, "TLS handshake timed out");
                return None;
            }
        };
        let conn = stream.get_ref().1;
        let info = TlsInfo {
            sni: conn.server_name().map(sni_name).unwrap_or_default(),
            version: match conn.protocol_version() {
                Some(ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "-",
            },
            cipher: conn.negotiated_cipher_suite().and_then(|s| s.suite().as_str()).unwrap_or("-"),
            hsts: endpoint.hsts.clone(),
            alt_svc,
            client: conn.peer_certificates().and_then(|c| c.first()).map(|c| Arc::new(client_cert(c))),
        };
        Some((ClientStream::Tls(Box::new(stream)), info))
    }

    /// Polls for what the client sends (0: it closed). On plain TCP this is
    /// readiness then a non-blocking read, which may find nothing (`WouldBlock`);
    /// on TLS, a read (bytes may already wait decrypted in rustls).
    pub fn poll_read_some(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self {
            ClientStream::Plain(s) => s.poll_read_some(cx, buf),
            ClientStream::Tls(s) => {
                let mut rb = ReadBuf::new(buf);
                ready!(Pin::new(s.as_mut()).poll_read(cx, &mut rb))?;
                Poll::Ready(Ok(rb.filled().len()))
            }
        }
    }

    /// Writes all of `data`, then flushes: over TLS, rustls may hold records the
    /// socket did not take yet; over plain TCP the flush does nothing.
    pub fn write_all_flushed<'a>(&'a mut self, data: &'a [u8]) -> impl Future<Output = io::Result<()>> + 'a {
        self.write_pair_flushed(&[], data)
    }

    /// Writes all of `head` and then all of `body`, then flushes, as
    /// [`ClientStream::write_all_flushed`] would their concatenation, without
    /// making it: while both are left they go in one vectored write (`writev`
    /// on plain TCP; one TLS record over both with rustls).
    pub fn write_pair_flushed<'a>(
        &'a mut self,
        mut head: &'a [u8],
        mut body: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + 'a {
        std::future::poll_fn(move |cx| {
            while !head.is_empty() || !body.is_empty() {
                let n = if head.is_empty() {
                    ready!(Pin::new(&mut *self).poll_write(cx, body))?
                } else {
                    let parts = [IoSlice::new(head), IoSlice::new(body)];
                    ready!(Pin::new(&mut *self).poll_write_vectored(cx, &parts))?
                };
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                let from_head = n.min(head.len());
                head = &head[from_head..];
                body = &body[n - from_head..];
            }
            Pin::new(&mut *self).poll_flush(cx)
        })
    }

    /// Whether ALPN chose HTTP/2 (`h2`) for this connection.
    pub fn alpn_h2(&self) -> bool {
        matches!(self, ClientStream::Tls(s) if s.get_ref().1.alpn_protocol() == Some(b"h2"))
    }

    /// The TCP socket's descriptor.
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            ClientStream::Plain(s) => s.fd(),
            ClientStream::Tls(s) => Some(s.get_ref().0.as_fd()),
        }
    }

    /// Closes the connection so that the client is not told
    /// ([`crate::io::sockopt::silent_close`]); no TLS alert.
    pub fn drop_silently(self) {
        if let Some(fd) = self.fd() {
            crate::io::sockopt::silent_close(fd);
        }
    }

    /// The local address of the connection (the address the client reached).
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            ClientStream::Plain(s) => s.local_addr(),
            ClientStream::Tls(s) => s.get_ref().0.local_addr(),
        }
    }

    /// Ends a TLS connection with a close_notify alert (within `limit`), so
    /// that a client reading a response delimited by the close knows it is
    /// complete. Plain TCP just closes, but for a client that may still be
    /// sending (`linger`: a request body, or a request, not read to its end):
    /// closing with its bytes unread would send a reset, which can destroy the
    /// response before the client reads it. So the connection is half-closed
    /// and what the client sends is read and dropped until it closes, for
    /// `linger` at most (RFC 9112 section 9.6, nginx's lingering close).
    pub async fn close(mut self, limit: Duration, linger: Option<Duration>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        match &mut self {
            ClientStream::Tls(s) => {
                let _ = tokio::time::timeout(limit, s.shutdown()).await;
            }
            ClientStream::Plain(s) if linger.is_some() => {
                let _ = s.shutdown().await;
            }
            ClientStream::Plain(_) => {}
        }
        let Some(linger) = linger else { return };
        // On the heap: this runs once per such connection, and a buffer in the
        // future would make every connection's task larger.
        let mut sink = vec![0u8; 16 * 1024];
        let _ = tokio::time::timeout(linger, async { while let Ok(1..) = self.read(&mut sink).await {} }).await;
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// TLS may keep records it could not send yet: flushing sends them.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_certificates_are_safe_in_headers() {
        assert_eq!(header_safe("CN=a\r\nX-Evil: 1, O=b"), "CN=a\\x0D\\x0AX-Evil: 1, O=b");
        assert_eq!(header_safe("CN=Zoë"), "CN=Zoë");
        // Not a certificate: the fingerprint alone.
        let c = client_cert(b"not DER");
        assert_eq!((c.subject.as_str(), c.fingerprint.len()), ("", 64));
    }
    use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256};
    use rustls::SignatureScheme;
    use rustls::pki_types::PrivateKeyDer;
    use tollgate_config::TlsCert;

    fn cert(names: &[&str], rsa: bool) -> TlsCert {
        let key = KeyPair::generate_for(if rsa { &PKCS_RSA_SHA256 } else { &PKCS_ECDSA_P256_SHA256 }).unwrap();
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let der = params.self_signed(&key).unwrap().der().clone();
        let private = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let signing = tollgate_config::tls_provider().key_provider.load_private_key(private).unwrap();
        TlsCert {
            cert_file: names[0].into(),
            key_file: names[0].into(),
            ocsp_file: None,
            names: names.iter().map(|n| n.to_string()).collect(),
            key: Arc::new(CertifiedKey::new(vec![der], signing)),
        }
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_all_by_what_the_client_can_verify() {
        let certs = vec![
            cert(&["default.test"], false),
            cert(&["*.wild.test"], false),
            cert(&["a.wild.test"], true),
            cert(&["b.test"], true),
            cert(&["b.test"], false),
        ];
        let tls = Tls {
            certs: certs.clone(),
            min_version: TlsVersion::Tls12,
            max_version: TlsVersion::Tls13,
            cipher_suites: tollgate_config::tls_provider().cipher_suites,
            alpn: vec![],
            hsts: None,
            session_cache: 0,
            tickets: false,
            client_auth: None,
            acme: vec![],
        };
        let r = SniResolver::new(&tls, vec![]);
        let ecdsa = [SignatureScheme::ECDSA_NISTP256_SHA256];
        let rsa = [SignatureScheme::RSA_PSS_SHA256];
        let both = [SignatureScheme::RSA_PSS_SHA256, SignatureScheme::ECDSA_NISTP256_SHA256];
        let pick = |sni: Option<&str>, schemes: &[SignatureScheme]| {
            let k = r.pick(sni, schemes)?;
            certs.iter().position(|c| Arc::ptr_eq(&c.key, &k))
        };
        assert_eq!(pick(Some("a.wild.test"), &both), Some(2), "exact first");
        assert_eq!(pick(Some("a.wild.test"), &ecdsa), Some(1), "the exact one is RSA: the wildcard");
        assert_eq!(pick(Some("c.wild.test"), &both), Some(1));
        assert_eq!(pick(Some("x.c.wild.test"), &both), Some(0), "a wildcard covers one label");
        assert_eq!(pick(Some("b.test"), &both), Some(3), "the first listed that the client can verify");
        assert_eq!(pick(Some("b.test"), &ecdsa), Some(4));
        assert_eq!(pick(None, &both), Some(0), "no SNI: the default");
        assert_eq!(pick(Some(&sni_name("A.Wild.Test.")), &both), Some(2), "case and a trailing dot do not count");
        assert_eq!(pick(Some(&sni_name("c.wild.test.")), &both), Some(1));
        assert_eq!(sni_name("b.test.."), "b.test.", "one dot only");
        assert_eq!(pick(None, &rsa), Some(2), "the first in order the client can verify");
        // No candidate can sign with what the client offers: the first
        // candidate, for rustls to fail the handshake with handshake_failure.
        assert_eq!(pick(Some("b.test"), &[SignatureScheme::ED25519]), Some(3));
        assert_eq!(pick(Some("c.wild.test"), &[]), Some(1));
        assert_eq!(pick(None, &[]), Some(0));
        let none = SniResolver::new(&Tls { certs: vec![], ..tls.clone() }, vec![]);
        assert!(none.pick(None, &both).is_none());

        // An [[acme]] certificate: first for its names once it is there; the
        // default when the bind has no `certs`.
        let slot = crate::net::acme::tests::slot(&["b.test", "acme.test"]);
        let r = SniResolver::new(&tls, vec![slot.clone()]);
        let bare = SniResolver::new(&Tls { certs: vec![], ..tls.clone() }, vec![slot.clone()]);
        assert_eq!(pick(Some("b.test"), &both), Some(3), "none obtained yet: the files' certificate");
        assert!(bare.pick(Some("acme.test"), &both).is_none());
        let acme = cert(&["b.test", "acme.test"], false).key;
        slot.set(acme.clone(), (0, 1));
        assert_eq!(pick(Some("b.test"), &both), Some(3), "expired (1970): the files' certificate");
        slot.set(acme.clone(), (0, u64::MAX));
        let is_acme = |k: Option<Arc<CertifiedKey>>| k.is_some_and(|k| Arc::ptr_eq(&k, &acme));
        assert!(is_acme(r.pick(Some("b.test"), &both)));
        assert!(is_acme(r.pick(Some("acme.test"), &rsa)), "the only one for its name");
        assert!(!is_acme(r.pick(Some("c.wild.test"), &both)), "not its name");
        assert!(!is_acme(r.pick(None, &both)), "the files' default stays the default");
        assert!(is_acme(bare.pick(None, &both)) && is_acme(bare.pick(Some("other.test"), &both)));
    }

    /// Handshakes that want the turn at once take their costly steps one per
    /// poll of the I/O driver, in the order they asked. A task that yields in a
    /// loop marks the polls: a yielded task runs again only after one.
    #[test]
    fn costly_handshake_steps_take_one_turn_per_driver_poll() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        rt.block_on(async {
            let steps = 3;
            let ticker = tokio::spawn({
                let log = log.clone();
                async move {
                    for _ in 0..100 {
                        let done = {
                            let mut l = log.lock().unwrap();
                            l.push("tick".to_string());
                            l.iter().filter(|e| e.starts_with("step")).count() == steps
                        };
                        if done {
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                }
            });
            let handshakes: Vec<_> = (0..steps)
                .map(|i| {
                    let log = log.clone();
                    tokio::spawn(async move {
                        let turn = heavy_turn().await;
                        assert!(turn.is_some());
                        log.lock().unwrap().push(format!("step {i}"));
                    })
                })
                .collect();
            for h in handshakes {
                h.await.unwrap();
            }
            ticker.await.unwrap();
        });
        let log = log.lock().unwrap();
        let steps: Vec<&String> = log.iter().filter(|e| e.starts_with("step")).collect();
        assert_eq!(steps, ["step 0", "step 1", "step 2"], "{log:?}");
        for pair in log.windows(2) {
            assert!(!(pair[0].starts_with("step") && pair[1].starts_with("step")), "two steps in one round: {log:?}");
        }
    }
}
