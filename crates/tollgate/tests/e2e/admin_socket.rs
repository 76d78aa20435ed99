//! The command socket (docs/admin.md, "Command socket"): HAProxy's runtime commands over a
//! real Unix socket, with the answers parsed the way scripts written for
//! HAProxy parse them.

use crate::harness::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tollgate_proxy::lb::AdminState;

/// Positions of `show stat` columns in HAProxy's management guide (section 9.1).
const HAPROXY_POSITIONS: [(usize, &str); 12] = [
    (0, "pxname"),
    (1, "svname"),
    (4, "scur"),
    (7, "stot"),
    (17, "status"),
    (18, "weight"),
    (32, "type"),
    (40, "hrsp_2xx"),
    (48, "req_tot"),
    (73, "addr"),
    (76, "algo"),
    (99, "uweight"),
];

/// A fresh directory for one test's socket.
fn socket_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tg-sock-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tg.sock")
}

fn config(socket: &Path, servers: &[(&str, SocketAddr, u32)], admin: &str) -> String {
    let mut s = format!(
        "[global]\nworkers = 1\n\n[admin]\nsocket = \"{}\"\n{admin}\n\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\n[[backend]]\nname = \"b\"\n",
        socket.display()
    );
    for (name, addr, weight) in servers {
        s.push_str(&format!("  [[backend.server]]\n  name = \"{name}\"\n  addr = \"{addr}\"\n  weight = {weight}\n"));
    }
    s
}

/// A proxy with the command socket (and `admin`, more `[admin]` settings) over
/// one echo origin per weight, named s1, s2, ... in backend `b`.
async fn start(tag: &str, weights: &[u32], admin: &str) -> (Proxy, PathBuf, Vec<Echo>) {
    let mut origins = Vec::new();
    for _ in weights {
        origins.push(echo().await);
    }
    let names: Vec<String> = (1..=weights.len()).map(|i| format!("s{i}")).collect();
    let servers: Vec<(&str, SocketAddr, u32)> =
        names.iter().zip(&origins).zip(weights).map(|((n, o), w)| (n.as_str(), o.addr, *w)).collect();
    let sock = socket_path(tag);
    (proxy(&config(&sock, &servers, admin)), sock, origins)
}

/// One line in non-interactive mode: everything until the socket closes.
async fn cmd(path: &Path, line: &str) -> String {
    let mut s = UnixStream::connect(path).await.expect("the command socket accepts");
    s.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .expect("the socket closes after the answer")
        .unwrap();
    out
}

/// Reads until `buf` ends with `end` (or the connection closes).
async fn read_until(s: &mut UnixStream, end: &str) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while !out.ends_with(end.as_bytes()) {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await.expect("an answer").unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(out).unwrap()
}

/// One CSV record, as RFC 4180 readers split it (double quotes honoured).
fn csv_record(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            _ => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// `show stat` as HAProxy consumers read it: the `# ` header names the fields,
/// every row has as many, and an empty line ends the output.
fn parse_stat(out: &str) -> Vec<HashMap<String, String>> {
    let body = out.strip_suffix("\n\n").unwrap_or_else(|| panic!("no end-of-output empty line: {out:?}"));
    let mut lines = body.lines();
    let header = csv_record(lines.next().unwrap().strip_prefix("# ").expect("`# ` header"));
    assert_eq!(header.last().map(String::as_str), Some(""), "lines end with a comma, as HAProxy's");
    lines
        .map(|l| {
            let fields = csv_record(l);
            assert_eq!(fields.len(), header.len(), "{l}");
            header.iter().cloned().zip(fields).collect()
        })
        .collect()
}

fn row<'a>(rows: &'a [HashMap<String, String>], px: &str, sv: &str) -> &'a HashMap<String, String> {
    rows.iter().find(|r| r["pxname"] == px && r["svname"] == sv).unwrap_or_else(|| panic!("no row {px}/{sv}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_stat_parses_as_haproxys_csv() {
    let (p, sock, origins) = start("stat", &[1, 1], "").await;
    let (a, b) = (&origins[0], &origins[1]);
    assert_eq!(p.admin_addr(), None, "a socket alone opens no HTTP listener");
    let web = p.addr("web").unwrap();
    for _ in 0..10 {
        assert_eq!(get(web, "/").await.0, http::StatusCode::OK);
    }
    until_counted(&p, "web", 10).await;

    let out = cmd(&sock, "show stat").await;
    let header = out.lines().next().unwrap();
    assert_eq!(header, format!("# {},", tollgate_admin::cli::STAT_HEADER));
    let names = csv_record(header.strip_prefix("# ").unwrap());
    for (i, name) in HAPROXY_POSITIONS {
        assert_eq!(names[i], name, "HAProxy's column {i}");
    }
    let rows = parse_stat(&out);
    assert_eq!(rows.len(), 4, "FRONTEND, s1, s2, BACKEND");
    let fe = row(&rows, "web", "FRONTEND");
    assert_eq!((fe["type"].as_str(), fe["status"].as_str()), ("0", "OPEN"));
    assert_eq!((fe["stot"].as_str(), fe["req_tot"].as_str(), fe["hrsp_2xx"].as_str()), ("10", "10", "10"));
    for (name, origin) in [("s1", a), ("s2", b)] {
        let s = row(&rows, "b", name);
        let hits = origin.hits.load(Ordering::Relaxed).to_string();
        assert_eq!(s["stot"], hits, "{name}: the requests it got");
        assert_eq!(s["hrsp_2xx"], hits);
        assert_eq!((s["type"].as_str(), s["status"].as_str(), s["weight"].as_str()), ("2", "no check", "1"));
        assert_eq!(s["addr"], origin.addr.to_string());
        assert!(s["bout"].parse::<u64>().unwrap() > 0);
    }
    let be = row(&rows, "b", "BACKEND");
    assert_eq!((be["type"].as_str(), be["status"].as_str(), be["stot"].as_str()), ("1", "UP", "10"));
    assert_eq!((be["act"].as_str(), be["algo"].as_str()), ("2", "roundrobin"));

    // Several commands on one line, each ended by its empty line.
    let out = cmd(&sock, "show backend;show info").await;
    let (backends, info) = out.split_once("\n\n").unwrap();
    assert_eq!(backends, "# name\nb");
    let info: HashMap<&str, &str> = info.trim_end().lines().map(|l| l.split_once(": ").expect("Key: value")).collect();
    assert_eq!(info["Name"], "tollgate");
    assert_eq!(info["Pid"], std::process::id().to_string());
    assert_eq!(info["CumReq"], "10");
    assert!(info["Uptime"].starts_with("0d 0h"), "{}", info["Uptime"]);
    assert!(out.ends_with("\n\n"));
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_maint_and_weights_change_the_traffic() {
    let (p, sock, origins) = start("drain", &[4, 1], "").await;
    let a = &origins[0];
    let web = p.addr("web").unwrap();
    let status = |out: &str| row(&parse_stat(out), "b", "s1")["status"].clone();

    // The lab's command: success prints only the end-of-output empty line.
    assert_eq!(cmd(&sock, "set server b/s1 state drain").await, "\n");
    let before = a.hits.load(Ordering::Relaxed);
    for _ in 0..6 {
        assert_eq!(get(web, "/").await.0, http::StatusCode::OK);
    }
    assert_eq!(a.hits.load(Ordering::Relaxed), before, "a drained server gets no new client");
    assert_eq!(status(&cmd(&sock, "show stat").await), "DRAIN");

    assert_eq!(cmd(&sock, "set server b/s1 state ready").await, "\n");
    assert_eq!(status(&cmd(&sock, "show stat").await), "no check");
    assert_eq!(cmd(&sock, "disable server b/s1").await, "\n");
    assert_eq!(status(&cmd(&sock, "show stat").await), "MAINT");
    assert_eq!(p.snapshot().backends[0].servers[0].admin(), AdminState::Maint);
    for _ in 0..4 {
        get(web, "/").await;
    }
    assert_eq!(a.hits.load(Ordering::Relaxed), before, "no traffic in maintenance");
    assert_eq!(cmd(&sock, "enable server b/s1").await, "\n");
    for _ in 0..5 {
        get(web, "/").await;
    }
    assert!(a.hits.load(Ordering::Relaxed) > before, "back in rotation");

    // Weights: absolute, percent of the configured one, read back.
    assert_eq!(cmd(&sock, "set server b/s1 weight 2").await, "\n");
    assert_eq!(cmd(&sock, "get weight b/s1").await, "2 (initial 4)\n\n");
    assert_eq!(cmd(&sock, "set weight b/s1 25%").await, "\n");
    assert_eq!(cmd(&sock, "get weight b/s1").await, "1 (initial 4)\n\n");
    assert_eq!(p.snapshot().backends[0].servers[0].weight(), 1);
    assert_eq!(cmd(&sock, "set server b/s1 weight 0").await, "\n");
    let before = a.hits.load(Ordering::Relaxed);
    for _ in 0..4 {
        get(web, "/").await;
    }
    assert_eq!(a.hits.load(Ordering::Relaxed), before, "weight 0 takes it out of rotation");
    assert_eq!(row(&parse_stat(&cmd(&sock, "show stat").await), "b", "s1")["weight"], "0");

    // `show servers state`: HAProxy's version 1 format.
    let out = cmd(&sock, "show servers state").await;
    let mut lines = out.strip_suffix("\n\n").expect("ends with the empty line").lines();
    assert_eq!(lines.next(), Some("1"));
    let header: Vec<&str> = lines.next().unwrap().strip_prefix("# ").unwrap().split(' ').collect();
    assert_eq!(
        &header[..10],
        [
            "be_id",
            "be_name",
            "srv_id",
            "srv_name",
            "srv_addr",
            "srv_op_state",
            "srv_admin_state",
            "srv_uweight",
            "srv_iweight",
            "srv_time_since_last_change"
        ]
    );
    let servers: Vec<HashMap<&str, &str>> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), header.len(), "{l}");
            header.iter().copied().zip(f).collect()
        })
        .collect();
    assert_eq!(servers.len(), 2);
    let s1 = &servers[0];
    assert_eq!((s1["be_id"], s1["be_name"], s1["srv_id"], s1["srv_name"]), ("2", "b", "1", "s1"));
    assert_eq!((s1["srv_addr"], s1["srv_port"]), ("127.0.0.1", a.addr.port().to_string().as_str()));
    assert_eq!((s1["srv_op_state"], s1["srv_admin_state"]), ("2", "0"));
    assert_eq!((s1["srv_uweight"], s1["srv_iweight"]), ("0", "4"));
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_answered_in_haproxys_words() {
    let (p, sock, _origins) = start("errors", &[1], "").await;
    let out = cmd(&sock, "frobnicate").await;
    assert!(
        out.starts_with("Unknown command: 'frobnicate', but maybe one of the following ones is a better match:\n"),
        "{out}"
    );
    assert!(out.contains("  show stat") && out.ends_with(": disconnect\n\n"), "{out}");
    let cases = [
        ("set server b/nope state drain", "No such server.\n\n"),
        ("set server x/s1 state drain", "No such backend.\n\n"),
        ("set server s1 state drain", "Require 'backend/server'.\n\n"),
        ("set server b/s1 state sleeping", "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n\n"),
        ("set server b/s1 weight 300", "Absolute weight can only be between 0 and 256 inclusive.\n\n"),
        ("set timeout cli x", "Invalid timeout value.\n\n"),
        ("show servers state nope", "Can't find backend.\n\n"),
    ];
    for (line, want) in cases {
        assert_eq!(cmd(&sock, line).await, want, "{line}");
    }
    assert_eq!(p.snapshot().backends[0].servers[0].admin(), AdminState::Ready);

    // A line longer than the limit is refused, not buffered.
    let mut s = UnixStream::connect(&sock).await.unwrap();
    let _ = s.write_all(&vec![b'x'; 64 * 1024]).await;
    let out = read_until(&mut s, "\n").await;
    assert_eq!(out, "The command line is too big for the buffer size.\n");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_mode_takes_commands_in_a_row() {
    let (p, sock, _origins) = start("prompt", &[1], "").await;
    let web = p.addr("web").unwrap();
    get(web, "/").await;

    // As in the lab: `prompt`, then one command per line, until `quit`.
    let mut s = UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"prompt\n").await.unwrap();
    assert_eq!(read_until(&mut s, "> ").await, "\n> ");
    s.write_all(b"set timeout cli 1d\n").await.unwrap();
    assert_eq!(read_until(&mut s, "> ").await, "\n> ");
    s.write_all(b"set server b/s1 state drain\n").await.unwrap();
    assert_eq!(read_until(&mut s, "> ").await, "\n> ");
    s.write_all(b"show stat\n").await.unwrap();
    let out = read_until(&mut s, "\n> ").await;
    let rows = parse_stat(out.strip_suffix("> ").unwrap());
    assert_eq!(row(&rows, "b", "s1")["status"], "DRAIN");
    assert_eq!(row(&rows, "b", "s1")["stot"], "1");
    s.write_all(b"get weight b/s1;set server b/s1 state ready\n").await.unwrap();
    assert_eq!(read_until(&mut s, "\n> ").await, "1 (initial 1)\n\n\n> ");
    s.write_all(b"quit\n").await.unwrap();
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut rest)).await.expect("quit closes").unwrap();
    assert_eq!(rest, "");
    assert_eq!(p.snapshot().backends[0].servers[0].admin(), AdminState::Ready);

    // The idle timeout closes an interactive session.
    let mut s = UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"prompt;set timeout cli 1\n").await.unwrap();
    assert_eq!(read_until(&mut s, "> ").await, "\n\n> ");
    let mut rest = String::new();
    let closed = tokio::time::timeout(Duration::from_secs(4), s.read_to_string(&mut rest)).await;
    assert!(closed.is_ok(), "closed after a second of silence");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_refuses_changes_on_the_socket() {
    let (p, sock, _origins) = start("ro", &[1], "read_only = true").await;
    for line in ["set server b/s1 state maint", "disable server b/s1", "set weight b/s1 0"] {
        assert_eq!(cmd(&sock, line).await, "Permission denied\n\n", "{line}");
    }
    assert_eq!(p.snapshot().backends[0].servers[0].admin(), AdminState::Ready);
    assert_eq!(p.snapshot().backends[0].servers[0].weight(), 1);
    assert_eq!(row(&parse_stat(&cmd(&sock, "show stat").await), "b", "s1")["status"], "no check");
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_file_is_replaced_when_stale_and_removed_at_stop() {
    let a = echo().await;
    let sock = socket_path("file");
    // Left behind by a process that is gone.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let p = proxy(&config(&sock, &[("s1", a.addr, 1)], ""));
    assert!(cmd(&sock, "show backend").await.starts_with("# name\n"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);

    // A second server on the same path is refused: the first one is alive.
    let cfg = tollgate_config::parse(&config(&sock, &[("s1", a.addr, 1)], ""), Path::new("t.toml")).unwrap();
    let err = start_proxy(cfg).err().expect("the socket is in use").to_string();
    assert!(err.contains(&sock.display().to_string()) && err.contains("in use"), "{err}");

    p.stop();
    p.join();
    assert!(!sock.exists(), "removed when the server stops");

    // A path that is not a socket is never removed: the server does not start.
    std::fs::write(&sock, "data").unwrap();
    let cfg = tollgate_config::parse(&config(&sock, &[("s1", a.addr, 1)], ""), Path::new("t.toml")).unwrap();
    let err = start_proxy(cfg).err().expect("not a socket").to_string();
    assert!(err.contains(&sock.display().to_string()) && err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "data");
}
