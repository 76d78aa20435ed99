//! Instances sharing an etcd store ([global.etcd]) against a real etcd the
//! test starts (Debian's etcd-server; .ci/run installs it): a DRAIN or a
//! weight set on one instance reaches the others within a second, and an
//! instance started later; the config read from etcd is reloaded by every
//! instance, a bad one refused by each (reported in its status key) while the
//! last good one serves; an etcd outage loses no change made meanwhile; the
//! config key deleted brings the file's config back.

use crate::acme::{Proc, find, free_port, listening};
use crate::harness::*;
use etcdv3client::EtcdClient;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::runtime::control::ServerChange;

/// An etcd member on loopback, its data in a directory of its own.
struct Etcd {
    bin: PathBuf,
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
    proc: Option<Proc>,
}

impl Etcd {
    /// `None` (the test skips) when etcd is not installed, outside CI.
    async fn start() -> Option<Etcd> {
        let Some(bin) = find("etcd") else {
            assert!(!crate::cdp::in_ci(), "etcd not found, and CI is set: .ci/run installs it");
            eprintln!("etcd not installed (apt-get install etcd-server): skipped");
            return None;
        };
        let mut e = Etcd { bin, dir: tempfile::tempdir().unwrap(), client: free_port(), peer: free_port(), proc: None };
        e.up().await;
        Some(e)
    }

    async fn up(&mut self) {
        let (c, p) = (format!("http://127.0.0.1:{}", self.client), format!("http://127.0.0.1:{}", self.peer));
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let child = Command::new(&self.bin)
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
            .args(["--listen-peer-urls", &p, "--initial-advertise-peer-urls", &p])
            .args(["--initial-cluster", &format!("t={p}"), "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.proc = Some(Proc(child));
        listening(self.client).await;
        // Listening is not serving: wait for a read to succeed.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = EtcdClient::new(vec![self.endpoint()], None).await
                && c.kv.range(etcdv3client::pb::RangeRequest { key: b"/".to_vec(), ..Default::default() }).await.is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "etcd does not answer");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the member (by its PID); its data stays for [`Etcd::up`].
    fn down(&mut self) {
        self.proc = None;
    }

    /// Stops (`true`) or resumes the member with SIGSTOP / SIGCONT: its
    /// connections stay open and say nothing, as across a partition.
    fn freeze(&self, on: bool) {
        let child = &self.proc.as_ref().unwrap().0;
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        let sig = if on { rustix::process::Signal::STOP } else { rustix::process::Signal::CONT };
        rustix::process::kill_process(pid, sig).unwrap();
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    async fn client(&self) -> EtcdClient {
        EtcdClient::new(vec![self.endpoint()], None).await.unwrap()
    }
}

/// An origin answering every request with `text`.
async fn serve_text(text: &'static str) -> Origin {
    serve(move |_| async move { http::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(text.as_bytes()))) }).await
}

/// The file config of instance `name`: backend `b` over `one` and `two`,
/// the config read from etcd.
fn file_config(dir: &Path, name: &str, endpoint: &str, one: SocketAddr, two: SocketAddr) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let toml = format!(
        "[global]\nworkers = 1\netcd = {{ endpoints = [\"{endpoint}\"], name = \"{name}\", config = true, timeout = \"1s\" }}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n\
         \x20 [[backend.server]]\n  name = \"s1\"\n  addr = \"{one}\"\n\
         \x20 [[backend.server]]\n  name = \"s2\"\n  addr = \"{two}\"\n"
    );
    std::fs::write(&path, toml).unwrap();
    path
}

fn admin(p: &Proxy, server: &str) -> AdminState {
    p.snapshot().backend("b").unwrap().server(server).map_or(AdminState::Ready, |s| s.admin())
}

fn weight(p: &Proxy, server: &str) -> u32 {
    p.snapshot().backend("b").unwrap().server(server).unwrap().weight()
}

fn connected(p: &Proxy) -> bool {
    p.control().report().unwrap().etcd.is_some_and(|e| e.connected)
}

/// Polls `cond` every 10 ms for at most `limit`; returns how long it took.
async fn within(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

async fn body(web: SocketAddr) -> String {
    let (status, _, body) = get(web, "/").await;
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body).into_owned()
}

/// Each instance's status key: whether it applied the config, and its revision.
async fn statuses(e: &Etcd) -> Vec<(String, serde_json::Value)> {
    let mut c = e.client().await;
    let mut out: Vec<_> = c
        .get_with_prefix("/tollgate/status/")
        .await
        .unwrap()
        .into_iter()
        .map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), serde_json::from_slice(&kv.value).unwrap()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_server_state_and_config_through_etcd() {
    let Some(mut etcd) = Etcd::start().await else { return };
    let (o1, o2) = (serve_text("one").await, serve_text("two").await);
    let files = tempfile::tempdir().unwrap();
    let start = |name: &str| {
        let path = file_config(files.path(), name, &etcd.endpoint(), o1.addr, o2.addr);
        start_proxy(tollgate_config::load(&path).unwrap()).unwrap()
    };
    let (a, b, c) = (start("a"), start("b"), start("c"));
    within(Duration::from_secs(10), "all connected", || connected(&a) && connected(&b) && connected(&c)).await;

    // A DRAIN set on A is honoured by B and C within a second; a weight set
    // on B reaches A and C.
    a.control().set_server("b", "s1", ServerChange { state: Some(AdminState::Drain), weight: None }).unwrap();
    let took = within(Duration::from_secs(1), "DRAIN reaches B and C", || {
        admin(&b, "s1") == AdminState::Drain && admin(&c, "s1") == AdminState::Drain
    })
    .await;
    eprintln!("DRAIN on A seen by B and C after {took:?}");
    assert_eq!(body(b.addr("web").unwrap()).await, "two");
    b.control().set_server("b", "s2", ServerChange { state: None, weight: Some(7) }).unwrap();
    within(Duration::from_secs(1), "weight reaches A and C", || weight(&a, "s2") == 7 && weight(&c, "s2") == 7).await;
    // The key holds both, written by the instance that set each.
    let mut client = etcd.client().await;
    let v: serde_json::Value = serde_json::from_slice(&client.get("/tollgate/servers/b/s1").await.unwrap()).unwrap();
    assert_eq!((v["state"].as_str(), v["by"].as_str()), (Some("drain"), Some("a")));

    // An instance started now takes what etcd holds.
    let d = start("d");
    within(Duration::from_secs(5), "D takes the DRAIN", || {
        admin(&d, "s1") == AdminState::Drain && weight(&d, "s2") == 7
    })
    .await;
    drop(d);

    // The config from etcd: backend `b` is now `s1` alone, undrained by the
    // same change (READY written by C).
    let from_etcd = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"{}\"\n",
        o1.addr
    );
    c.control().set_server("b", "s1", ServerChange { state: Some(AdminState::Ready), weight: None }).unwrap();
    client.put("/tollgate/config", from_etcd.as_str()).await.unwrap();
    for (p, name) in [(&a, "A"), (&b, "B"), (&c, "C")] {
        within(Duration::from_secs(5), &format!("{name} reloads etcd's config"), || {
            p.snapshot().backend("b").unwrap().servers.len() == 1 && admin(p, "s1") == AdminState::Ready
        })
        .await;
        assert_eq!(body(p.addr("web").unwrap()).await, "one");
        assert!(p.snapshot().config.global.etcd.is_some(), "the file's [global.etcd] stays");
    }
    let st = statuses(&etcd).await;
    assert_eq!(st.len(), 3, "A, B and C (D stopped before): {st:?}");
    let rev = st[0].1["config_revision"].clone();
    for (k, v) in &st {
        assert_eq!((v["applied"].as_bool(), &v["config_revision"]), (Some(true), &rev), "{k}: {v}");
    }
    // A reload of the file (SIGHUP, the admin API) keeps etcd's config.
    a.control().reload().unwrap();
    assert_eq!(a.snapshot().backend("b").unwrap().servers.len(), 1);

    // A bad config: refused by every instance, each says why; etcd's last
    // good one keeps serving.
    client.put("/tollgate/config", "[[frontend]]\nname = \"web\"\nbind = [\"nowhere\"]\n").await.unwrap();
    within(Duration::from_secs(5), "every instance reports the refusal", || {
        [&a, &b, &c].iter().all(|p| p.control().report().unwrap().etcd.is_some_and(|e| e.config_error.is_some()))
    })
    .await;
    let st = statuses(&etcd).await;
    for (k, v) in &st {
        let error = v["error"].as_str().unwrap_or_default();
        assert_eq!(v["applied"].as_bool(), Some(false), "{k}: {v}");
        assert!(error.contains("etcd:/tollgate/config:3") && error.contains("frontend[0].bind[0]"), "{k}: {error}");
    }
    for p in [&a, &b, &c] {
        assert_eq!(body(p.addr("web").unwrap()).await, "one");
    }

    // etcd goes away: every instance serves on; a MAINT set on A meanwhile
    // is applied there at once and reaches B and C once etcd is back.
    etcd.down();
    within(Duration::from_secs(15), "A sees etcd gone", || !connected(&a)).await;
    assert_eq!(body(b.addr("web").unwrap()).await, "one");
    a.control().set_server("b", "s1", ServerChange { state: Some(AdminState::Maint), weight: None }).unwrap();
    assert_eq!(admin(&a, "s1"), AdminState::Maint);
    assert_eq!(admin(&b, "s1"), AdminState::Ready);
    within(Duration::from_secs(5), "A keeps the change to write", || {
        a.control().report().unwrap().etcd.is_some_and(|e| e.pending == 1)
    })
    .await;
    etcd.up().await;
    within(Duration::from_secs(15), "the MAINT made while etcd was away reaches B and C", || {
        admin(&b, "s1") == AdminState::Maint && admin(&c, "s1") == AdminState::Maint
    })
    .await;
    assert_eq!(a.control().report().unwrap().etcd.unwrap().pending, 0);

    // The config key deleted: the files' config serves again (s1 and s2).
    let mut client = etcd.client().await;
    client.delete("/tollgate/config").await.unwrap();
    for (p, name) in [(&a, "A"), (&b, "B"), (&c, "C")] {
        within(Duration::from_secs(5), &format!("{name} is back on its file"), || {
            p.snapshot().backend("b").unwrap().servers.len() == 2
        })
        .await;
        assert_eq!(body(p.addr("web").unwrap()).await, "two", "s1 is still MAINT");
    }
}

/// A partition: etcd stops answering without closing anything (SIGSTOP).
/// Each instance takes the silent session as lost (10 s), serves on, keeps a
/// change made meanwhile, and writes it once etcd answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_etcd_is_taken_as_lost_and_a_change_made_meanwhile_reaches_the_others_after() {
    let Some(etcd) = Etcd::start().await else { return };
    let (o1, o2) = (serve_text("one").await, serve_text("two").await);
    let files = tempfile::tempdir().unwrap();
    let start = |name: &str| {
        let path = file_config(files.path(), name, &etcd.endpoint(), o1.addr, o2.addr);
        start_proxy(tollgate_config::load(&path).unwrap()).unwrap()
    };
    let (a, b) = (start("a"), start("b"));
    within(Duration::from_secs(10), "both connected", || connected(&a) && connected(&b)).await;
    etcd.freeze(true);
    a.control().set_server("b", "s1", ServerChange { state: Some(AdminState::Drain), weight: None }).unwrap();
    assert_eq!(admin(&a, "s1"), AdminState::Drain);
    let took =
        within(Duration::from_secs(20), "both take the session as lost", || !connected(&a) && !connected(&b)).await;
    eprintln!("lost after {took:?}: {:?}", b.control().report().unwrap().etcd);
    assert_eq!(admin(&b, "s1"), AdminState::Ready);
    assert_eq!(body(b.addr("web").unwrap()).await.len(), 3, "B serves on");
    etcd.freeze(false);
    within(Duration::from_secs(20), "the DRAIN reaches B once etcd answers", || admin(&b, "s1") == AdminState::Drain)
        .await;
    drop(etcd);
}
