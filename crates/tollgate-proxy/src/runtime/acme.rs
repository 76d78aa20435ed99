//! ACME (RFC 8555) with instant-acme: each `[[acme]]` certificate obtained,
//! kept on disk and renewed before it expires, on a thread of its own.
//!
//! For each slot of the snapshot in force (net/acme.rs) a task here:
//! 1. waits until the certificate is due: none yet, or its renewal time
//!    (`renew_before`, else a third of its lifetime before the end);
//! 2. signs in with the account kept in `<state_dir>/<name>/account.json`
//!    (made on first use; made again when the server no longer knows it);
//! 3. orders the certificate, answers each name's challenge (HTTP-01: a
//!    token the pipeline serves; TLS-ALPN-01: a validation certificate the
//!    TLS binds serve), waits for the order, finalizes it with a new P-256
//!    key and downloads the chain;
//! 4. writes `cert.pem` (the chain and its key, mode 0600, through a new
//!    temporary file and a rename) and puts the certificate in the slot: the
//!    next handshake gets it, with no reload.
//!
//! A failed attempt (the ACME server down, a challenge not validated) is
//! logged and tried again after `retry`, doubling up to an hour; meanwhile
//! the certificate in the slot, if any, goes on serving. A slot that a
//! reload drops ends its task at its next wake.

use super::dns::Running;
use crate::net::acme::{AcmeSlot, CERT_FILE, Challenges, validity};
use bytes::Bytes;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, BodyWrapper, BytesResponse, ChallengeType, HttpClient,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rustls::sign::CertifiedKey;
use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tollgate_config::{Acme, AcmeChallenge};
use tollgate_wire::clock::unix_now;

/// How often the thread looks for slots a reload added.
const TICK: Duration = Duration::from_millis(250);
/// The longest one wait lasts before the task looks at its slot again.
const NAP: Duration = Duration::from_secs(60);
/// The most one attempt (sign-in to download) may take.
const ATTEMPT: Duration = Duration::from_secs(300);
/// One request to the ACME server, connection included.
const REQUEST: Duration = Duration::from_secs(30);
/// The least time between a certificate obtained and the next attempt.
const AFTER_SUCCESS: Duration = Duration::from_secs(5);

/// Starts the thread that keeps the `[[acme]]` certificates of `core`'s
/// snapshots; it ends when the server stops (or is gone).
pub(crate) fn run(core: Weak<dyn Running>, mut stop: watch::Receiver<bool>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("tollgate-acme".into()).spawn(move || {
        rt.block_on(async move {
            // Each slot's task, with the flag that tells it the slot left the
            // snapshot in force (a connection may hold an old snapshot, and
            // so the slot, for long: its task must not go on renewing).
            let mut managed: Vec<(Weak<AcmeSlot>, Arc<AtomicBool>)> = Vec::new();
            loop {
                let Some(core) = core.upgrade() else { return };
                let snap = core.snapshot();
                drop(core);
                let current =
                    |w: &Weak<AcmeSlot>| snap.acme.slots.iter().any(|s| std::ptr::eq(w.as_ptr(), Arc::as_ptr(s)));
                for (w, retired) in &managed {
                    if !current(w) {
                        retired.store(true, Ordering::Relaxed);
                    }
                }
                managed.retain(|(w, retired)| !retired.load(Ordering::Relaxed) && w.strong_count() > 0);
                for slot in &snap.acme.slots {
                    if !managed.iter().any(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(slot))) {
                        let retired = Arc::new(AtomicBool::new(false));
                        managed.push((Arc::downgrade(slot), retired.clone()));
                        let task = keep(Arc::downgrade(slot), retired, snap.acme.challenges.clone(), stop.clone());
                        tokio::spawn(task);
                    }
                }
                drop(snap);
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
    })?;
    Ok(())
}

/// Keeps one slot's certificate: obtained when missing, renewed when due,
/// until the slot leaves the snapshot in force (`retired`).
async fn keep(
    slot: Weak<AcmeSlot>,
    retired: Arc<AtomicBool>,
    challenges: Arc<Challenges>,
    mut stop: watch::Receiver<bool>,
) {
    let mut failures = 0u32;
    loop {
        if retired.load(Ordering::Relaxed) {
            return;
        }
        let Some(s) = slot.upgrade() else { return };
        let cfg = s.cfg.clone();
        let wait = match s.validity() {
            Some((from, until)) => cfg.renew_at(from, until).saturating_sub(unix_now()),
            None => 0,
        };
        if wait > 0 {
            drop(s);
            let nap = Duration::from_secs(wait).min(NAP);
            tokio::select! {
                _ = tokio::time::sleep(nap) => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let outcome = match Busy::take(&cfg) {
            Some(_busy) => match tokio::time::timeout(ATTEMPT, obtain(&cfg, &challenges)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no certificate within {} s", ATTEMPT.as_secs())),
            },
            None => Err("another order for these names or this directory is in progress".to_string()),
        };
        let wait = match outcome.and_then(|got| store(&cfg, got)) {
            Ok((cert, (from, until))) => {
                s.set(cert, (from, until));
                failures = 0;
                s.failures.store(0, Ordering::Relaxed);
                tracing::info!(
                    acme = %cfg.name, domains = ?cfg.domains,
                    "ACME: certificate obtained, valid until {}; served from the next handshake on",
                    httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(until))
                );
                // However soon the next renewal is due, not at once again.
                AFTER_SUCCESS
            }
            Err(e) => {
                failures += 1;
                s.failures.store(failures, Ordering::Relaxed);
                let wait = cfg.retry.saturating_mul(1 << (failures - 1).min(16)).min(Acme::MAX_RETRY);
                let serving = match s.validity() {
                    Some((_, until)) => format!(
                        "the current certificate goes on serving (valid until {})",
                        httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(until))
                    ),
                    None => "there is no certificate to serve yet".to_string(),
                };
                tracing::warn!(
                    acme = %cfg.name, directory = %cfg.directory,
                    "ACME: attempt {failures} failed: {e}; {serving}; next attempt in {} s", wait.as_secs()
                );
                wait
            }
        };
        drop(s);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The names and directories with an order in progress in this process: one
/// order at a time for each (two would overwrite each other's TLS-ALPN-01
/// certificates and files).
static BUSY: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// An order's hold on its names and directory, given back when dropped.
struct Busy(Vec<String>);

impl Busy {
    fn take(cfg: &Acme) -> Option<Busy> {
        let mut keys = cfg.domains.clone();
        keys.push(cfg.dir().display().to_string());
        let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        if keys.iter().any(|k| busy.contains(k)) {
            return None;
        }
        busy.extend(keys.iter().cloned());
        Some(Busy(keys))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.lock().unwrap_or_else(|e| e.into_inner()).retain(|k| !self.0.contains(k));
    }
}

/// A certificate as obtained: the chain and the key, PEM.
struct Obtained {
    chain: String,
    key: String,
}

/// One attempt: sign in, order, answer the challenges, finalize, download.
async fn obtain(cfg: &Acme, challenges: &Arc<Challenges>) -> Result<Obtained, String> {
    let dir = cfg.dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let ids: Vec<Identifier> = cfg.domains.iter().map(|d| Identifier::Dns(d.clone())).collect();
    let mut order = match account(cfg, &dir, false).await?.new_order(&NewOrder::new(&ids)).await {
        Ok(o) => o,
        // An account the server lost (a test CA restarted, an account
        // deactivated elsewhere): a new one, once.
        Err(instant_acme::Error::Api(p)) if unknown_account(&p) => {
            tracing::info!(acme = %cfg.name, "ACME: the server does not know the stored account ({p}); a new one is made");
            account(cfg, &dir, true)
                .await?
                .new_order(&NewOrder::new(&ids))
                .await
                .map_err(|e| format!("new order: {e}"))?
        }
        Err(e) => return Err(format!("new order: {e}")),
    };
    // What is answered for this order, withdrawn however it ends.
    let mut answered = Answered { challenges: challenges.clone(), tokens: Vec::new(), names: Vec::new() };
    let wanted = match cfg.challenge {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    let mut authzs = order.authorizations();
    while let Some(authz) = authzs.next().await {
        let mut authz = authz.map_err(|e| format!("authorization: {e}"))?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("an authorization is {other:?}")),
        }
        let name = authz.identifier().to_string();
        let mut challenge = authz
            .challenge(wanted.clone())
            .ok_or_else(|| format!("the server offers no {} challenge for {name}", cfg.challenge.as_str()))?;
        let key_auth = challenge.key_authorization();
        match cfg.challenge {
            AcmeChallenge::Http01 => {
                challenges.add_http01(&challenge.token, key_auth.as_str());
                answered.tokens.push(challenge.token.clone());
            }
            AcmeChallenge::TlsAlpn01 => {
                challenges.add_alpn(&name, validation_cert(&name, key_auth.digest().as_ref())?);
                answered.names.push(name.clone());
            }
        }
        challenge.set_ready().await.map_err(|e| format!("challenge for {name}: {e}"))?;
    }
    let retry =
        RetryPolicy::new().initial_delay(Duration::from_millis(100)).backoff(1.5).timeout(Duration::from_secs(90));
    match order.poll_ready(&retry).await.map_err(|e| format!("validation: {e}"))? {
        OrderStatus::Ready => {}
        other => return Err(format!("the order is {other:?}, not ready")),
    }
    drop(answered);
    let key = order.finalize().await.map_err(|e| format!("finalize: {e}"))?;
    let chain = order.poll_certificate(&retry).await.map_err(|e| format!("certificate: {e}"))?;
    Ok(Obtained { chain, key })
}

/// The challenges answered for one order: withdrawn when it is done.
struct Answered {
    challenges: Arc<Challenges>,
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        for t in &self.tokens {
            self.challenges.remove_http01(t);
        }
        for n in &self.names {
            self.challenges.remove_alpn(n);
        }
    }
}

/// The account: the stored one, or a new one (stored) when there is none,
/// it is another directory's, the server refuses it, or `fresh`. Making one
/// agrees to the CA's terms of service (RFC 8555 section 7.3).
async fn account(cfg: &Acme, dir: &Path, fresh: bool) -> Result<Account, String> {
    let file = dir.join("account.json");
    let builder = || Account::builder_with_http(Box::new(Client::new(cfg)));
    // An account of another directory (the config moved from a CA's staging
    // server to its production one) is not this one's.
    let stored = std::fs::read_to_string(&file).ok().filter(|text| {
        serde_json::from_str::<serde_json::Value>(text)
            .is_ok_and(|v| v.get("directory").and_then(|d| d.as_str()) == Some(cfg.directory.as_str()))
    });
    if let Some(text) = stored
        && !fresh
    {
        let creds: AccountCredentials = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        match builder().from_credentials(creds).await {
            Ok(a) => return Ok(a),
            // The server answered and refused it: a new account below.
            Err(instant_acme::Error::Api(p)) => {
                tracing::info!(acme = %cfg.name, "ACME: the stored account is refused ({p}); a new one is made");
            }
            Err(e) => return Err(format!("sign-in: {e}")),
        }
    }
    let contact: Vec<&str> = cfg.contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, creds) =
        builder().create(&new, cfg.directory.clone(), None).await.map_err(|e| format!("new account: {e}"))?;
    let json = serde_json::to_vec(&creds).map_err(|e| e.to_string())?;
    write_private(&file, &json)?;
    Ok(account)
}

/// Whether a problem says the account is unknown to the server (RFC 8555
/// section 6.7, `accountDoesNotExist`). Other refusals (`unauthorized`, a
/// rate limit) do not make a new account: that would spend the CA's limit
/// on new accounts at every attempt.
fn unknown_account(p: &instant_acme::Problem) -> bool {
    p.r#type.as_deref().is_some_and(|t| t.ends_with(":accountDoesNotExist"))
}

/// The TLS-ALPN-01 validation certificate for `name` (RFC 8737 section 3):
/// self-signed, `name` its one subjectAltName, the key authorization's
/// SHA-256 in the critical acmeIdentifier extension.
fn validation_cert(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = tollgate_config::tls_provider().key_provider.load_private_key(der).map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing)))
}

/// Checks what was obtained (a chain and key rustls takes, for exactly the
/// names asked), writes it to the state directory, and returns it ready.
fn store(cfg: &Acme, got: Obtained) -> Result<crate::net::acme::Dated, String> {
    let dir = cfg.dir();
    let (cert, mut names) =
        tollgate_config::certified_key(got.chain.as_bytes(), got.key.as_bytes(), &dir.join(CERT_FILE))?;
    let mut want = cfg.domains.clone();
    names.sort();
    want.sort();
    if names != want {
        return Err(format!("the certificate is for {names:?}, not {want:?}"));
    }
    let dates = validity(&cert.cert[0]).ok_or("the certificate has no validity dates")?;
    write_private(&dir.join(CERT_FILE), format!("{}{}", got.chain, got.key).as_bytes())?;
    Ok((cert, dates))
}

/// Writes `path` (mode 0600) whole or not at all: a new temporary file beside
/// it (made by this call, never one found there), synced, renamed over it,
/// and the directory synced.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let tmp = path.with_extension(format!("tmp.{}.{nonce}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}

/// instant-acme's HTTP client: one HTTPS connection per request (an ACME
/// conversation is a handful of requests a quarter), with the `[[acme]]`'s
/// TLS client config (its `directory_ca`, or the system's roots).
struct Client {
    tls: tokio_rustls::TlsConnector,
}

impl Client {
    fn new(cfg: &Acme) -> Client {
        Client { tls: tokio_rustls::TlsConnector::from(cfg.client.clone()) }
    }
}

impl HttpClient for Client {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let tls = self.tls.clone();
        Box::pin(async move {
            match tokio::time::timeout(REQUEST, send(tls, req)).await {
                Ok(r) => r,
                Err(_) => Err(instant_acme::Error::Str("the ACME server did not answer in time")),
            }
        })
    }
}

async fn send(
    tls: tokio_rustls::TlsConnector,
    req: http::Request<BodyWrapper<Bytes>>,
) -> Result<BytesResponse, instant_acme::Error> {
    let other = |e: Box<dyn std::error::Error + Send + Sync>| instant_acme::Error::Other(e);
    let (mut parts, body) = req.into_parts();
    let authority = parts.uri.authority().cloned().ok_or(instant_acme::Error::Str("a URL without a host"))?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
    let port = authority.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| other(e.into()))?;
    let name = rustls::pki_types::ServerName::try_from(host).map_err(|e| other(e.into()))?;
    let stream = tls.connect(name, tcp).await.map_err(|e| other(e.into()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| other(e.into()))?;
    tokio::spawn(conn);
    parts
        .headers
        .insert(http::header::HOST, http::HeaderValue::from_str(authority.as_str()).map_err(|e| other(e.into()))?);
    parts.uri = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|e: http::uri::InvalidUri| other(e.into()))?;
    let resp = sender.send_request(http::Request::from_parts(parts, body)).await.map_err(|e| other(e.into()))?;
    Ok(BytesResponse::from(resp))
}
