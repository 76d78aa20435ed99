//! ACME (issue 30, 4) against Pebble, Let's Encrypt's test server, and its
//! DNS (pebble-challtestsrv, every name 127.0.0.1), all on loopback: a
//! certificate obtained by HTTP-01 and by TLS-ALPN-01 and served on the TLS
//! bind with no reload, kept on disk; renewed before it expires; a Pebble
//! outage during renewal leaves the old certificate serving, and the
//! renewal goes through once Pebble is back (with a new account: Pebble
//! forgets them).

use crate::harness::*;
use crate::tls::{Pki, client, handshake};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// A Pebble binary: on PATH, or where `go install` puts it.
pub(crate) fn find(bin: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join("go/bin"));
    }
    if let Some(gopath) = std::env::var_os("GOPATH") {
        dirs.push(Path::new(&gopath).join("bin"));
    }
    dirs.into_iter().map(|d| d.join(bin)).find(|p| p.is_file())
}

/// A free loopback port for a program that needs one named in advance (its
/// listener closed again before the program binds it).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process, killed (by its PID) when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (bounded) until something listens on `port`.
pub(crate) async fn listening(port: u16) {
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pebble and its DNS, and the files they were started with.
struct Acme {
    pki: Pki,
    dir: PathBuf,
    /// The ACME directory's port, the management port, the DNS port.
    port: u16,
    management: u16,
    dns: u16,
    pebble: Option<Proc>,
    _dns: Proc,
}

impl Acme {
    /// Pebble's DNS (every name 127.0.0.1, no AAAA), and the ports Pebble
    /// will take: Pebble itself starts with [`Acme::start`], once the proxy's
    /// ports are known. `None` (the test skips) when Pebble is not installed,
    /// outside CI.
    async fn new(tag: &str) -> Option<Acme> {
        let (Some(_), Some(dns_bin)) = (find("pebble"), find("pebble-challtestsrv")) else {
            assert!(!crate::cdp::in_ci(), "pebble not found, and CI is set: .ci/run installs it");
            eprintln!("pebble not installed (go install github.com/letsencrypt/pebble/v2/cmd/...): skipped");
            return None;
        };
        let pki = Pki::new(&format!("acme-{tag}"));
        let dir = pki.dir.clone();
        let (dns, dns_mgmt) = (free_port(), free_port());
        let child = Command::new(dns_bin)
            .args(["-management", &format!("127.0.0.1:{dns_mgmt}"), "-dnsserver", &format!("127.0.0.1:{dns}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv starts");
        let dns_proc = Proc(child);
        listening(dns).await;
        Some(Acme { pki, dir, port: free_port(), management: free_port(), dns, pebble: None, _dns: dns_proc })
    }

    fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// The CA file Pebble's own HTTPS is checked with.
    fn ca_file(&self) -> PathBuf {
        let path = self.dir.join("ca.pem");
        std::fs::write(&path, self.pki.ca_pem()).unwrap();
        path
    }

    /// Starts Pebble: HTTP-01 checked on `http`, TLS-ALPN-01 on `tls`, its
    /// certificates valid for `validity` seconds.
    async fn start(&mut self, http: u16, tls: u16, validity: u64) {
        let (_, listener) = self.pki.leaf("pebble.pem", &["127.0.0.1"], false);
        let cfg = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{}", self.port),
            "managementListenAddress": format!("127.0.0.1:{}", self.management),
            "certificate": listener, "privateKey": listener,
            "httpPort": http, "tlsPort": tls,
            "ocspResponderURL": "", "externalAccountBindingRequired": false, "domainBlocklist": [],
            "retryAfter": { "authz": 0, "order": 0 }, "keyAlgorithm": "ecdsa",
            "profiles": { "default": { "description": "test", "validityPeriod": validity } }
        }});
        let file = self.dir.join("pebble.json");
        std::fs::write(&file, cfg.to_string()).unwrap();
        let child = Command::new(find("pebble").unwrap())
            .args(["-config", &file.display().to_string(), "-dnsserver", &format!("127.0.0.1:{}", self.dns)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble starts");
        self.pebble = Some(Proc(child));
        listening(self.port).await;
        listening(self.management).await;
    }

    /// Stops Pebble (an outage).
    fn stop(&mut self) {
        self.pebble = None;
    }

    /// Pebble's root certificate (new at each start), from its management port.
    async fn root(&self) -> CertificateDer<'static> {
        let (cfg, _) = client(&[&rustls::version::TLS13], Some(&self.pki), None);
        let addr: SocketAddr = format!("127.0.0.1:{}", self.management).parse().unwrap();
        let tls = handshake(addr, "127.0.0.1", &cfg).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        let req = http::Request::get("/roots/0")
            .header("host", "127.0.0.1")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
        CertificateDer::pem_slice_iter(&body).next().expect("a root").unwrap()
    }
}

/// The certificate chain `addr` presents for `sni` (no check).
async fn chain(addr: SocketAddr, sni: &str) -> Option<Vec<CertificateDer<'static>>> {
    let (cfg, _) = client(&[&rustls::version::TLS13], None, None);
    let tls = handshake(addr, sni, &cfg).await.ok()?;
    tls.get_ref().1.peer_certificates().map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
}

/// Waits (bounded) until `addr` presents, for `sni`, a chain other than `not`.
async fn new_chain(
    addr: SocketAddr,
    sni: &str,
    not: Option<&[CertificateDer<'static>]>,
) -> Vec<CertificateDer<'static>> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(c) = chain(addr, sni).await
            && Some(c.as_slice()) != not
        {
            return c;
        }
        assert!(Instant::now() < deadline, "no new certificate for {sni} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks `chain` for `name` against Pebble's root, as a browser would.
fn verify(chain: &[CertificateDer<'static>], root: CertificateDer<'static>, name: &str) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let provider = Arc::new(tollgate_config::tls_provider());
    let v = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    v.verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
        .unwrap_or_else(|e| panic!("the chain for {name:?} does not verify: {e}"));
}

/// Frontends `web` (plain: HTTP-01) and `secure` (TLS, serving `[[acme]]`
/// `site` for `domains`), over an echo origin.
/// The one Pebble reaches is on 127.0.0.1 (its DNS says so), the other on
/// 127.0.0.2: `tls_first` puts the TLS one on 127.0.0.1.
fn config(acme: &Acme, origin: SocketAddr, state: &Path, domains: &[&str], extra: &str, tls_first: bool) -> String {
    let (web, secure) = if tls_first { ("127.0.0.2", "127.0.0.1") } else { ("127.0.0.1", "127.0.0.2") };
    format!(
        "[global]\nworkers = 1\n\
         [[acme]]\nname = \"site\"\ndirectory = \"{}\"\ndirectory_ca = \"{}\"\ndomains = {domains:?}\n\
         state_dir = \"{}\"\nretry = \"200ms\"\ncontact = [\"mailto:ops@example.test\"]\n{extra}\n\
         [[frontend]]\nname = \"web\"\ndefault_backend = \"app\"\nbind = [\"{web}:0\"]\n\
         [[frontend]]\nname = \"secure\"\ndefault_backend = \"app\"\n\
         bind = [{{ addr = \"{secure}:0\", tls = {{ acme = [\"site\"] }} }}]\n\
         [[backend]]\nname = \"app\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{origin}\"\n",
        acme.directory(),
        acme.ca_file().display(),
        state.display()
    )
}

fn state_dir(acme: &Acme) -> PathBuf {
    let d = acme.dir.join("state");
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// HTTP-01: the proxy starts before Pebble (the first attempts fail and are
/// retried), answers Pebble's challenge requests on its plain bind, and
/// serves the certificate for both names on its TLS bind, without a reload;
/// the files are in the state directory (the key private), and a restart
/// serves them at once without asking Pebble.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http01_obtains_a_certificate_served_without_a_reload() {
    let Some(mut acme) = Acme::new("http01").await else { return };
    let origin = echo().await;
    let state = state_dir(&acme);
    let toml = config(&acme, origin.addr, &state, &["a.acme.test", "b.acme.test"], "", false);
    let p = proxy(&toml);
    let (plain, tls) = (p.addr("web").unwrap(), p.addr("secure").unwrap());
    assert!(chain(tls, "a.acme.test").await.is_none(), "no certificate before Pebble runs");
    acme.start(plain.port(), tls.port(), 3600).await;

    let got = new_chain(tls, "a.acme.test", None).await;
    verify(&got, acme.root().await, "a.acme.test");
    verify(&new_chain(tls, "b.acme.test", None).await, acme.root().await, "b.acme.test");
    let dir = state.join("site");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf| {
        std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
    };
    assert_eq!((mode(dir.join("cert.pem")), mode(dir.join("account.json")), mode(dir.clone())), (0o600, 0o600, 0o700));
    let files: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(files.len(), 2, "no temporary file left: {files:?}");
    // A request over it reaches the origin.
    let (cfg, _) = client(&[&rustls::version::TLS13], None, None);
    let stream = handshake(tls, "a.acme.test", &cfg).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req =
        http::Request::get("/hello").header("host", "a.acme.test").body(http_body_util::Empty::<bytes::Bytes>::new());
    assert_eq!(send.send_request(req.unwrap()).await.unwrap().status(), 200);
    assert_eq!(origin.hits.load(Ordering::Relaxed), 1);
    p.stop();

    // A new process with Pebble gone: the stored certificate serves at once.
    acme.stop();
    let p = proxy(&toml);
    let tls = p.addr("secure").unwrap();
    assert_eq!(chain(tls, "a.acme.test").await.as_deref(), Some(got.as_slice()));
    p.stop();
}

/// TLS-ALPN-01, and renewal: certificates valid 16 s, renewed 8 s before
/// the end (half their lifetime: the most `renew_before` may take). Pebble goes away after the first: the renewal attempts fail
/// while the first certificate goes on serving; Pebble comes back (without
/// the account) and the renewal goes through, served without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_alpn01_renews_and_an_outage_keeps_the_old_certificate() {
    let Some(mut acme) = Acme::new("alpn").await else { return };
    let origin = echo().await;
    let state = state_dir(&acme);
    let extra = "challenge = \"tls-alpn-01\"\nrenew_before = \"8s\"";
    let p = proxy(&config(&acme, origin.addr, &state, &["alpn.acme.test"], extra, true));
    let tls = p.addr("secure").unwrap();
    // Pebble must not reach the HTTP-01 path: its HTTP port is a dead one.
    let dead = dead_addr().await;
    acme.start(dead.port(), tls.port(), 16).await;
    let first = new_chain(tls, "alpn.acme.test", None).await;
    verify(&first, acme.root().await, "alpn.acme.test");

    // The outage: the renewal is due 8 s after issue; wait for 2 failures.
    acme.stop();
    let slot = p.snapshot().acme.slots[0].clone();
    let deadline = Instant::now() + WAIT;
    while slot.failures.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "no failed renewal within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(chain(tls, "alpn.acme.test").await.as_deref(), Some(first.as_slice()), "the old certificate serves");

    acme.start(dead.port(), tls.port(), 16).await;
    let renewed = new_chain(tls, "alpn.acme.test", Some(&first)).await;
    verify(&renewed, acme.root().await, "alpn.acme.test");
    assert_eq!(slot.failures.load(Ordering::Relaxed), 0);
    p.stop();
}

/// examples/acme.toml, pointed at Pebble and loopback: its HTTP-01
/// challenges are answered although every plain request is redirected to
/// HTTPS (the answer comes before the rules), and its names get their
/// certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acme_example_runs_against_pebble() {
    let Some(mut acme) = Acme::new("example").await else { return };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/acme.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let state = state_dir(&acme);
    let origin = echo().await;
    let toml = text
        .replace(
            "directory = \"https://acme-staging-v02.api.letsencrypt.org/directory\"",
            &format!("directory = \"{}\"\ndirectory_ca = \"{}\"", acme.directory(), acme.ca_file().display()),
        )
        .replace("\"/var/lib/tollgate/acme\"", &format!("\"{}\"\nretry = \"200ms\"", state.display()))
        .replace("bind = [\":80\", { addr = \":443\",", "bind = [\"127.0.0.1:0\", { addr = \"127.0.0.2:0\",")
        .replace("workers = 0 ", "workers = 1 ")
        .replace("access_log = \"stdout\"", "")
        .replace("127.0.0.1:3000", &origin.addr.to_string());
    assert!(toml.contains(&acme.directory()) && toml.contains("127.0.0.2:0"), "the example changed: {toml}");
    let p = proxy(&toml);
    let listening = p.listening();
    let plain = listening.iter().find(|(_, _, tls)| !tls).unwrap().1;
    let tls = listening.iter().find(|(_, _, tls)| *tls).unwrap().1;
    let reply = raw(plain, b"GET /page HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n", WAIT).await;
    assert_eq!(status_of(&reply), 301, "{reply}");
    acme.start(plain.port(), tls.port(), 3600).await;
    for name in ["example.com", "www.example.com"] {
        verify(&new_chain(tls, name, None).await, acme.root().await, name);
    }
    p.stop();
}
