//! The built `tollgate` under a low file descriptor limit (issue 33, item D).
//!
//! Each test runs the binary as a child of `sh -c 'ulimit -n N; exec ...'`, so
//! that only the child has the low limit (this process's own stays as it is:
//! other tests share it), with two origins served from this process (threads
//! on 127.0.0.1 port 0) that hold every request but health checks until a
//! gate opens. Then more clients connect than the child has descriptors for.
//! Waits poll a condition with a deadline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The child's descriptor limit, soft and hard.
const NOFILE: u32 = 256;

/// A port nothing listens on now (bound on port 0, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tollgate-fd-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Polls `cond` every 20 ms until it holds; panics after `limit`, with `log`'s
/// text (the child's stderr) to show why.
fn eventually(what: &str, limit: Duration, log: &Path, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: not within {limit:?}; the child's log ends with:\n{}", tail(log));
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Two origins that answer `/health` at once and hold every other request
/// until [`Origins::open`], counting those they hold together.
struct Origins {
    addrs: [SocketAddr; 2],
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    open: Mutex<bool>,
    opened: Condvar,
    held: AtomicUsize,
    held_max: AtomicUsize,
}

impl Origins {
    fn start() -> Origins {
        let shared = Arc::new(Shared::default());
        let addrs = [0, 1].map(|_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let s = shared.clone();
            std::thread::spawn(move || {
                for c in l.incoming() {
                    let Ok(c) = c else { continue };
                    let s = s.clone();
                    std::thread::spawn(move || serve(c, &s));
                }
            });
            addr
        });
        Origins { addrs, shared }
    }

    /// Requests held now, over both.
    fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// The most requests held at once, over both.
    fn held_max(&self) -> usize {
        self.shared.held_max.load(Ordering::SeqCst)
    }

    fn open(&self) {
        *self.shared.open.lock().unwrap() = true;
        self.shared.opened.notify_all();
    }
}

impl Drop for Origins {
    fn drop(&mut self) {
        self.open();
    }
}

/// One origin connection: keep-alive requests, each answered with 200.
fn serve(mut c: TcpStream, s: &Shared) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        // Checks (OPTIONS by default, as HAProxy's) ask for /health.
        let line = &buf[..buf.iter().position(|b| *b == b'\r').unwrap_or(0)];
        let health = line.windows(9).any(|w| w == b" /health ");
        buf.drain(..end);
        if !health {
            let now = s.held.fetch_add(1, Ordering::SeqCst) + 1;
            s.held_max.fetch_max(now, Ordering::SeqCst);
            let mut open = s.open.lock().unwrap();
            while !*open {
                open = s.opened.wait(open).unwrap();
            }
            drop(open);
            s.held.fetch_sub(1, Ordering::SeqCst);
        }
        if c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
            return;
        }
    }
}

/// `tollgate run` under `ulimit` (`limits`: the shell's arguments), its stderr in a file.
struct Tollgate {
    child: std::process::Child,
    log: PathBuf,
    port: u16,
    admin: u16,
}

impl Tollgate {
    fn run(name: &str, limits: &str, global: &str, origins: &Origins) -> Tollgate {
        let (port, admin) = (free_port(), free_port());
        let mut conf = format!(
            "[global]\nworkers = 1\n{global}\n[admin]\nbind = \"127.0.0.1:{admin}\"\n\n\
             [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\ndefault_backend = \"b\"\n\n\
             [[backend]]\nname = \"b\"\n\
             check = {{ type = \"http\", path = \"/health\", interval = \"250ms\", timeout = \"250ms\", fall = 1, rise = 1 }}\n"
        );
        for (i, addr) in origins.addrs.iter().enumerate() {
            conf.push_str(&format!("  [[backend.server]]\n  name = \"s{}\"\n  addr = \"{addr}\"\n", i + 1));
        }
        let path = dir().join(format!("{name}.toml"));
        std::fs::write(&path, conf).unwrap();
        let log = dir().join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{limits} && exec \"$0\" run -c \"$1\""))
            .arg(env!("CARGO_BIN_EXE_tollgate"))
            .arg(&path)
            .stderr(stderr)
            .spawn()
            .unwrap();
        Tollgate { child, log, port, admin }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The child's "Max open files" line of /proc/PID/limits (the shell execs it: same PID).
    fn nofile(&self) -> String {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.child.id())).unwrap_or_default();
        limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default().to_string()
    }

    /// `GET path` on the admin listener: its JSON, or `None` if it did not answer.
    fn admin(&self, path: &str) -> Option<serde_json::Value> {
        let (status, body) = get(self.admin, path)?;
        (status == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    /// The servers' `(status, check.checks, check.downs, connect_errors)`.
    fn servers(&self) -> Option<Vec<(String, u64, u64, u64)>> {
        let b = self.admin("/api/backends/b")?;
        let servers = b["servers"].as_array()?;
        Some(
            servers
                .iter()
                .map(|s| {
                    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(u64::MAX);
                    let status = s["status"].as_str().unwrap_or("?").to_string();
                    (status, n(&s["check"]["checks"]), n(&s["check"]["downs"]), n(&s["connect_errors"]))
                })
                .collect(),
        )
    }

    fn all_up(&self) -> bool {
        self.servers().is_some_and(|s| s.len() == 2 && s.iter().all(|(st, ..)| st == "UP"))
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        // Our own child, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on a new connection to 127.0.0.1:`port`: the status and body.
/// (The Host is the address, which the admin listener answers to.)
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    read_response(&mut s)
}

fn read_response(s: &mut TcpStream) -> Option<(u16, String)> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    Some((status, body))
}

/// A client that sent one request (Connection: close), its answer still to read.
fn client(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    s
}

/// The status of every client's response (0: none within 30 s).
fn statuses(clients: Vec<TcpStream>) -> Vec<u16> {
    clients
        .into_iter()
        .map(|mut c| {
            let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
            read_response(&mut c).map_or(0, |(s, _)| s)
        })
        .collect()
}

/// The figure `max_connections = N` logs at start.
fn logged_max(log: &str) -> Option<usize> {
    let rest = log.split("global.max_connections: ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Left out of the config, `max_connections` is derived from the limit, low
/// enough that every client connection it accepts can have its server
/// connection with descriptors to spare: 300 clients against a limit of 256
/// (and the default of 100,000 before) leave the servers UP while the
/// accepted ones wait on the origins, the checks keep passing, the admin API
/// answers, and once the origins answer every one of the 300 gets its 200,
/// those over the cap after waiting in the listen backlog; none gets a 503.
#[test]
fn derived_max_connections_keeps_servers_up_and_every_request_served() {
    let origins = Origins::start();
    let t = Tollgate::run("derived", &format!("ulimit -n {NOFILE}"), "", &origins);
    eventually("it starts, both servers UP", Duration::from_secs(20), &t.log, || t.all_up());
    let nofile = t.nofile();
    assert!(nofile.split_whitespace().filter(|w| *w == NOFILE.to_string()).count() == 2, "{nofile}");

    let log = t.log();
    let cap = logged_max(&log).unwrap_or_else(|| panic!("the figure is logged: {log}"));
    assert!(log.contains(&format!("global.max_connections: {cap}, derived from the file descriptor limit {NOFILE}")));
    assert!((16..NOFILE as usize / 2).contains(&cap), "{cap}: two descriptors per connection, and some kept");
    let info = t.admin("/api/info").unwrap();
    assert_eq!(info["max_connections"].as_u64(), Some(cap as u64), "{info}");

    let checks_before: Vec<u64> = t.servers().unwrap().iter().map(|s| s.1).collect();
    let clients: Vec<TcpStream> = (0..300).map(|_| client(t.port)).collect();
    // Every accepted connection waits on an origin, the others in the
    // backlog; health checks go on meanwhile (three more each), and pass.
    eventually("the cap is reached while checks go on", Duration::from_secs(30), &t.log, || {
        let servers = t.servers().unwrap_or_default();
        origins.held() == cap
            && servers.len() == 2
            && servers.iter().zip(&checks_before).all(|(s, before)| s.0 == "UP" && s.1 >= before + 3)
    });
    let info = t.admin("/api/info").unwrap();
    assert_eq!(info["current_connections"].as_u64(), Some(cap as u64), "{info}");

    origins.open();
    let got = statuses(clients);
    let not_ok: Vec<&u16> = got.iter().filter(|s| **s != 200).collect();
    assert!(
        not_ok.is_empty(),
        "{} of 300 not 200: {:?}\n{}",
        not_ok.len(),
        &not_ok[..not_ok.len().min(20)],
        tail(&t.log)
    );
    let most = origins.held_max();
    assert!(most <= cap, "the origins held {most} requests at once, over the cap {cap}");

    let servers = t.servers().unwrap();
    assert!(servers.iter().all(|s| s.0 == "UP" && s.2 == 0 && s.3 == 0), "never DOWN, no connect error: {servers:?}");
    assert_eq!(get(t.port, "/after").map(|r| r.0), Some(200));
    assert!(!t.log().contains("is DOWN"), "{}", tail(&t.log));
}

/// `max_connections` written above what the limit allows is kept, with a
/// warning at start. When descriptors do run out, health checks that cannot
/// open a socket are not counted (fall = 1 would take a server DOWN at the
/// first), requests that cannot reach a server get 503 `local-fd-limit`
/// (not 502 `connect-failed`, not counted as the server's connect errors),
/// accepts pause, and once the origins answer everything is served again.
#[test]
fn descriptors_running_out_are_not_the_servers_fault() {
    let origins = Origins::start();
    let global = "max_connections = 100000\naccess_log = \"stderr\"";
    let t = Tollgate::run("too-high", &format!("ulimit -n {NOFILE}"), global, &origins);
    eventually("it starts, both servers UP", Duration::from_secs(20), &t.log, || t.all_up());
    let log = t.log();
    assert!(
        log.contains(&format!("the file descriptor limit {NOFILE} is too low for global.max_connections = 100000"))
    );
    assert_eq!(logged_max(&log), Some(100_000));

    // More clients than descriptors: those accepted wait on the origins,
    // two descriptors each, until accepts and connects find none left. The
    // others wait in the backlog; each accepted while a descriptor is free
    // cannot reach a server (503) and closes, freeing it again. Silent
    // connections waiting on the admin listener take the last free ones for
    // good (until its header timeout, 10 s): then nothing is free, as when
    // issue 33's checks failed, and every check finds no descriptor.
    let clients: Vec<TcpStream> = (0..300).map(|_| client(t.port)).collect();
    let fillers: Vec<TcpStream> = (0..40).filter_map(|_| TcpStream::connect(("127.0.0.1", t.admin)).ok()).collect();
    let checks_failing =
        |log: &str| ["s1", "s2"].iter().all(|s| log.contains(&format!("health check of b/{s} not counted: not run: ")));
    eventually("both servers' checks find no descriptor", Duration::from_secs(30), &t.log, || {
        let log = t.log();
        assert!(!log.contains("is DOWN"), "a server was taken DOWN:\n{}", tail(&t.log));
        checks_failing(&log)
    });

    origins.open();
    drop(fillers);
    let n = clients.len();
    let got = statuses(clients);
    let unexpected: Vec<&u16> = got.iter().filter(|s| **s != 200 && **s != 503).collect();
    assert!(
        unexpected.is_empty(),
        "{} of {n}: {:?}\n{}",
        unexpected.len(),
        &unexpected[..unexpected.len().min(20)],
        tail(&t.log)
    );
    let refused = got.iter().filter(|s| **s == 503).count();

    eventually("the admin API answers again", Duration::from_secs(20), &t.log, || t.servers().is_some());
    let servers = t.servers().unwrap();
    assert!(servers.iter().all(|s| s.0 == "UP" && s.2 == 0 && s.3 == 0), "never DOWN, no connect error: {servers:?}");
    assert_eq!(get(t.port, "/after").map(|r| r.0), Some(200));

    let log = t.log();
    let lines_503: Vec<&str> = log.lines().filter(|l| l.contains(" b/s") && l.contains(" 503 ")).collect();
    assert!(lines_503.iter().all(|l| l.contains(" local-fd-limit ")), "{lines_503:?}");
    assert!(!log.contains("connect-failed") && !log.contains("no-server"), "{}", tail(&t.log));
    eprintln!(
        "{n} clients: {} answered 200, {refused} 503 local-fd-limit (access log: {}); accept paused: {}",
        n - refused,
        log.matches(" local-fd-limit ").count(),
        log.contains("pausing accepts")
    );
}

/// The soft limit is raised to the hard one at start, as HAProxy does, and
/// the derivation uses the raised figure.
#[test]
fn the_soft_limit_is_raised_to_the_hard_one() {
    let origins = Origins::start();
    let t = Tollgate::run("raised", "ulimit -Sn 100 && ulimit -Hn 300", "", &origins);
    eventually("it starts", Duration::from_secs(20), &t.log, || t.all_up());
    let log = t.log();
    assert!(log.contains("file descriptor limit raised from 100 to the hard limit, 300"), "{log}");
    assert!(log.contains("derived from the file descriptor limit 300"), "{log}");
    let nofile = t.nofile();
    assert_eq!(nofile.split_whitespace().filter(|w| *w == "300").count(), 2, "{nofile}");
}
