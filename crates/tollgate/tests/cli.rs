//! The command line as a user runs it.

use std::process::Command;

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The configs the package and the container image install as
/// /etc/tollgate/tollgate.toml, and the systemd unit that runs it (packaging/;
/// CI runs `systemd-analyze verify` on the unit and builds the .deb).
#[test]
fn check_accepts_the_packaged_config() {
    for file in ["tollgate.toml", "docker/tollgate.toml"] {
        let path = format!("{}/../../packaging/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = tollgate().args(["check", "-c", &path]).output().unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../packaging/tollgate.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/tollgate run -c /etc/tollgate/tollgate.toml"));
}

#[test]
fn check_accepts_the_demo_config() {
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml");
    let out = tollgate().args(["check", "-c"]).arg(&demo).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (1 frontend(s), 1 backend(s))"));
}

#[test]
fn check_prints_every_error_with_file_line_and_key_then_exits_1() {
    let p = write(
        "bad.toml",
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\ndefault_backend = \"nodes\"\n\n\
         [[backend]]\nname = \"nodez\"\nbalance = \"roundrobin\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"127.0.0.1:3001\"\n  weight = 999\n",
    );
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = p.display().to_string();
    assert!(err.contains(&format!("{file}:4:19: frontend[0].default_backend: no backend is named `nodes`")), "{err}");
    assert!(
        err.contains(&format!("{file}:12:12: backend[0].server[0].weight: 999 is out of range (0..=256)")),
        "{err}"
    );
    assert!(err.contains("2 error(s)"), "{err}");

    // `run` refuses the same file the same way, before binding anything.
    let out = tollgate().args(["run", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not starting"));
}

#[test]
fn check_reports_toml_syntax_and_unknown_keys() {
    let p = write("syntax.toml", "[[frontend]\nname = \"web\"\n");
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{}:1:", p.display())));

    let p = write("unknown.toml", "[[frontend]]\nname = \"web\"\nbind = [\":8080\"]\nforwardfor = true\n");
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":4:1: frontend[0].forwardfor: unknown field `forwardfor`"), "{err}");
}

/// A server name that does not resolve is a warning, not an error: `run`
/// would start with that server DOWN.
#[test]
fn check_warns_of_a_server_name_that_does_not_resolve() {
    // A name server that is not there (nothing listens on the discard port).
    let p = write(
        "names.toml",
        "[global]\ndns = { nameservers = [\"127.0.0.1:9\"], timeout = \"300ms\" }\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\ndefault_backend = \"b\"\n\
         [[backend]]\nname = \"b\"\n  [[backend.server]]\n  name = \"s1\"\n  addr = \"app.tollgate.invalid:80\"\n\
         \x20 [[backend.server]]\n  name = \"s2\"\n  addr = \"localhost:81\"\n",
    );
    let out = tollgate().args(["check", "-c"]).arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("warning: server b/s1: app.tollgate.invalid:80 does not resolve ("), "{err}");
    assert!(err.contains("the server is DOWN until it does"), "{err}");
    assert!(!err.contains("b/s2"), "localhost resolves from /etc/hosts: {err}");
}

#[test]
fn missing_file_is_named() {
    let out = tollgate().args(["check", "-c", "/nonexistent/tollgate.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tollgate.toml: cannot read the config"));
}

#[test]
fn run_names_the_certificate_file_it_cannot_use_and_does_not_start() {
    let keyonly =
        write("keyonly.pem", "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n");
    let p = write(
        "tls.toml",
        "[[frontend]]\nname = \"web\"\nbind = [\n  \"127.0.0.1:0\",\n  \
         { addr = \"127.0.0.2:0\", tls = { certs = [\"missing.pem\"] } },\n  \
         { addr = \"127.0.0.3:0\", tls = { certs = [\"keyonly.pem\"] } },\n]\n",
    );
    let dir = p.parent().unwrap();
    let (file, missing) = (p.display().to_string(), dir.join("missing.pem").display().to_string());
    for cmd in ["check", "run"] {
        let out = tollgate().args([cmd, "-c"]).arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{file}:5:44: frontend[0].bind[1].tls.certs[0]: cannot read {missing}")),
            "{err}"
        );
        let no_cert =
            format!("{file}:6:44: frontend[0].bind[2].tls.certs[0]: {} holds no certificate", keyonly.display());
        assert!(err.contains(&no_cert), "{err}");
        assert!(err.contains(if cmd == "run" { "2 error(s); not starting" } else { "2 error(s)" }), "{err}");
    }
}

/// `tollgate import`: TOML on stdout and warnings with file:line on stderr
/// (exit 0), `-o` writes a file `check` accepts, `--from` overrides the
/// detection; a file that cannot be read, or holds nothing to run, exits 1.
#[test]
fn import_writes_toml_reports_what_it_cannot_carry_over_and_exits_by_usability() {
    let cfg = write(
        "import.cfg",
        "global\n    daemon\n    maxconn 100\nfrontend web\n    bind 127.0.0.1:18080\n    frobnicate\n    default_backend app\n\
         backend app\n    balance leastconn\n    server s1 127.0.0.1:3001 check\n",
    );
    let out = tollgate().args(["import"]).arg(&cfg).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("max_connections = 100") && stdout.contains("balance = \"leastconn\""), "{stdout}");
    assert!(stderr.contains("import.cfg:2: not translated: `daemon`"), "{stderr}");
    assert!(stderr.contains("import.cfg:6: unknown directive: `frobnicate`"), "{stderr}");
    assert!(stderr.contains("read as haproxy: 1 not translated, 0 approximated, 1 unknown"), "{stderr}");

    let toml = cfg.with_extension("toml");
    let out = tollgate().args(["import", "--from", "haproxy", "-o"]).arg(&toml).arg(&cfg).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty());
    let check = tollgate().args(["check", "-c"]).arg(&toml).output().unwrap();
    assert!(check.status.success(), "{check:?}\n{}", std::fs::read_to_string(&toml).unwrap());

    // nginx, detected.
    let conf = write(
        "import-nginx.conf",
        "server {\n    listen 127.0.0.1:18081;\n    location / { proxy_pass http://127.0.0.1:3001; }\n}\n",
    );
    let out = tollgate().args(["import"]).arg(&conf).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("read as nginx"));

    let missing = tollgate().args(["import", "/nonexistent/haproxy.cfg"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/haproxy.cfg"));
    let nothing = write("import-backend-only.cfg", "backend app\n    server s1 127.0.0.1:3001\n");
    let out = tollgate().args(["import"]).arg(&nothing).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing usable"), "{out:?}");
    let neither = write("import-neither.txt", "hello\n");
    let out = tollgate().args(["import"]).arg(&neither).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from haproxy"), "{out:?}");
}

#[test]
fn version() {
    let out = tollgate().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tollgate "));
}

/// One request on a new connection; the status line and headers (empty if the
/// connection failed).
fn http_get(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let _ = s.write_all(b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `cond` every 20 ms for at most 10 s.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    for _ in 0..500 {
        if cond() {
            return;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{what}: not within 10 s");
}

/// A child process killed if the test ends early.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn reload_signals_the_running_instance_through_its_pidfile() {
    // A free port: bound on port 0, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = |rule: &str| {
        format!(
            "[global]\nworkers = 1\npidfile = \"reload-test.pid\"\n\n\
             [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\n{rule}"
        )
    };
    let p = write("reload.toml", &conf("  [[frontend.rule]]\n  deny = 403\n"));
    let pidfile = p.with_file_name("reload-test.pid");
    let log = std::fs::File::create(p.with_file_name("reload-run.log")).unwrap();
    let mut run = Child(tollgate().args(["run", "-c"]).arg(&p).stderr(log).spawn().unwrap());
    let pid = run.0.id();
    eventually("the pidfile is written", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|t| t.trim() == pid.to_string())
    });
    eventually("it serves the first config", || http_get(port).starts_with("HTTP/1.1 403"));

    // A redirect rule added: `reload` validates the file, signals, and the new rule serves.
    std::fs::write(&p, conf("  [[frontend.rule]]\n  redirect = { location = \"/moved\", code = 302 }\n")).unwrap();
    let out = tollgate().args(["reload", "-c"]).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("sent SIGHUP to tollgate (pid {pid})")));
    eventually("it serves the reloaded config", || {
        let r = http_get(port);
        r.starts_with("HTTP/1.1 302") && r.to_ascii_lowercase().contains("location: /moved")
    });

    // An invalid file: exit 1 with the error at file:line, and nothing is signalled.
    let bad = write("reload-bad.toml", &format!("{}  [[frontend.rule]]\n  deny = 99\n", conf("")));
    let out = tollgate().args(["reload", "-c"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:9:", bad.display())) && err.contains("frontend[0].rule[0].deny"), "{err}");
    assert!(err.contains("not reloading"), "{err}");

    // SIGHUP with the running file broken: refused, the old config keeps serving.
    std::fs::write(&p, conf("  [[frontend.rule]]\n  deny = 99\n")).unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::HUP)
        .unwrap();
    let log_path = p.with_file_name("reload-run.log");
    eventually("the refusal is logged", || {
        std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains("reload refused"))
    });
    assert!(http_get(port).starts_with("HTTP/1.1 302"));

    // SIGTERM: it stops and removes its pidfile.
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::TERM)
        .unwrap();
    let mut status = None;
    eventually("it exits", || {
        status = run.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    assert!(!pidfile.exists(), "the pidfile is removed at exit");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("reload done"), "{log}");
    assert!(log.contains(&format!("{}:9:", p.display())), "the refused file's errors, at file:line: {log}");

    // No running instance any more, and no pidfile key at all: clear errors.
    std::fs::write(&p, conf("")).unwrap();
    let out = tollgate().args(["reload", "-c"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is tollgate running?"));
    let none = write("reload-nopid.toml", "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:1\"]\n");
    let out = tollgate().args(["reload", "-c"]).arg(&none).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no `global.pidfile`"));
}

/// A second `tollgate run` on an address the first listens on exits 1 with an
/// error naming the address (with SO_REUSEPORT it used to start and take
/// half the connections); the first keeps serving every connection.
#[test]
fn a_second_run_on_the_same_address_is_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let p = write(
        "twice.toml",
        &format!(
            "[global]\nworkers = 2\n\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\n\
             [[frontend.rule]]\ndeny = 403\n"
        ),
    );
    let log = std::fs::File::create(p.with_file_name("twice-first.log")).unwrap();
    let mut first = Child(tollgate().args(["run", "-c"]).arg(&p).stderr(log).spawn().unwrap());
    eventually("the first serves", || http_get(port).starts_with("HTTP/1.1 403"));

    let second_log = p.with_file_name("twice-second.log");
    let log = std::fs::File::create(&second_log).unwrap();
    let mut second = Child(tollgate().args(["run", "-c"]).arg(&p).stderr(log).spawn().unwrap());
    let mut status = None;
    eventually("the second exits (if it runs, it shares the port)", || {
        status = second.0.try_wait().unwrap();
        status.is_some()
    });
    assert_eq!(status.unwrap().code(), Some(1));
    let err = std::fs::read_to_string(&second_log).unwrap();
    assert!(
        err.contains(&format!(
            "tollgate: frontend `web`: 127.0.0.1:{port} is already in use (another tollgate running?)"
        )),
        "{err}"
    );
    for _ in 0..20 {
        assert!(http_get(port).starts_with("HTTP/1.1 403"));
    }
    assert!(first.0.try_wait().unwrap().is_none(), "the first still runs");
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig).unwrap();
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The signal table (docs/configuration.md, "Signals"): USR1 and HUP reopen
/// the access log (log rotation: the file moved away, lines go to a new one at
/// its path), signals Tollgate has no use for are logged and ignored rather
/// than ending it, and QUIT stops at once, closing a request in flight that a
/// graceful stop would wait 30 s for, and removes the pidfile.
#[test]
fn signals_rotate_logs_never_kill_silently_and_quit_stops_at_once() {
    use rustix::process::Signal;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // A server that takes requests and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let conf = write(
        "signals.toml",
        &format!(
            "[global]\nworkers = 1\npidfile = \"signals.pid\"\naccess_log = \"signals-access.log\"\n\
             grace_period = \"30s\"\n\n\
             [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\ndefault_backend = \"silent\"\n\
             \x20 [[frontend.rule]]\n  when = {{ path_prefix = \"/deny\" }}\n  deny = 403\n\n\
             [[backend]]\nname = \"silent\"\n\x20 [[backend.server]]\n  name = \"s\"\n  addr = \"{}\"\n",
            silent.local_addr().unwrap()
        ),
    );
    let dir = conf.parent().unwrap().to_path_buf();
    let (pidfile, access, log_path) =
        (dir.join("signals.pid"), dir.join("signals-access.log"), dir.join("signals.log"));
    let _ = std::fs::remove_file(&access);
    let log = std::fs::File::create(&log_path).unwrap();
    let mut run = Child(tollgate().args(["run", "-c"]).arg(&conf).current_dir(&dir).stderr(log).spawn().unwrap());
    let pid = run.0.id();
    eventually("the pidfile is written", || pidfile.exists());
    let deny = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /deny HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    };
    deny();
    eventually("the first line is logged", || lines(&access) == 1);
    let logged = |what: &str| std::fs::read_to_string(&log_path).unwrap_or_default().matches(what).count();

    // Rotation by USR1, then by a reload of the same config.
    for (n, sig, said) in [(1, Signal::USR1, "SIGUSR1: access log reopened"), (2, Signal::HUP, "access log reopened")] {
        let rotated = dir.join(format!("signals-access.log.{n}"));
        std::fs::rename(&access, &rotated).unwrap();
        signal(pid, sig);
        eventually("the reopening is logged", || logged(said) >= 1 && logged("reload done") + 1 >= n);
        deny();
        eventually("the next line goes to a new file", || lines(&access) == 1);
        assert_eq!(lines(&rotated), 1, "the rotated file keeps its line");
    }

    // Signals with no use here: logged, ignored, still serving.
    for sig in [Signal::ALARM, Signal::IO, Signal::XFSZ] {
        signal(pid, sig);
    }
    // A real-time signal (rustix builds none safely): kill(1).
    let rt = Command::new("kill").arg(format!("-{}", libc::SIGRTMIN() + 2)).arg(pid.to_string()).status().unwrap();
    assert!(rt.success());
    eventually("each is logged", || {
        ["SIGALRM received: ignored", "SIGIO received", "SIGXFSZ received", "(real-time) received"]
            .iter()
            .all(|w| logged(w) == 1)
    });
    deny();
    assert!(run.0.try_wait().unwrap().is_none(), "still running");

    // A request in flight to the silent server, then QUIT: out at once.
    let in_flight = std::thread::spawn(move || http_get(port));
    let (_held, _) = silent.accept().unwrap();
    let quit = std::time::Instant::now();
    signal(pid, Signal::QUIT);
    let mut status = None;
    eventually("it exits", || {
        status = run.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    assert!(quit.elapsed() < std::time::Duration::from_secs(10), "not the 30 s grace period");
    assert_eq!(in_flight.join().unwrap(), "", "the request in flight is cut, unanswered");
    assert!(!pidfile.exists(), "the pidfile is removed");
    assert_eq!(logged("SIGQUIT: stopping now"), 1);
}

/// Sends TERM to `pid` (not a child of the test: found in a pidfile) when
/// dropped, if it still runs.
struct Adopted(u32);

impl Drop for Adopted {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0 as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

fn alive(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32).is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// A hot binary upgrade (`tollgate upgrade`, SIGUSR2): the new process takes
/// the listening sockets over and serves new connections at once; the old one
/// finishes the request it has in flight, then exits, leaving the pidfile to
/// the new one. A new process that cannot start (a config broken since)
/// leaves the running one serving.
#[test]
fn upgrade_hands_the_listeners_over_and_the_old_process_finishes_its_requests() {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The origin: the first request waits for `go`; the others are answered at once.
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = origin.local_addr().unwrap();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let (held, first_held) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut wait_go = Some(wait_go);
        for conn in origin.incoming() {
            let Ok(mut conn) = conn else { continue };
            let first = wait_go.take();
            let held = held.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(n @ 1..) => got.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let body = match first {
                    Some(go) => {
                        let _ = held.send(());
                        let _ = go.recv();
                        "late"
                    }
                    None => "now!",
                };
                let _ = write!(conn, "HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\n{body}");
            });
        }
    });
    let conf_text = format!(
        "[global]\nworkers = 2\npidfile = \"upgrade.pid\"\ngrace_period = \"30s\"\n\n\
         [admin]\nsocket = \"upgrade.sock\"\n\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\ndefault_backend = \"b\"\n\n\
         [[backend]]\nname = \"b\"\n\x20 [[backend.server]]\n  name = \"s2\"\n  addr = \"{origin_addr}\"\n\
         \x20 [[backend.server]]\n  name = \"s\"\n  addr = \"{origin_addr}\"\n"
    );
    let conf = write("upgrade.toml", &conf_text);
    let dir = conf.parent().unwrap().to_path_buf();
    let (pidfile, log_path) = (dir.join("upgrade.pid"), dir.join("upgrade.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    // As under systemd: the new process must say it is the main one now.
    let notify_path = dir.join("upgrade-notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let manager = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    manager.set_nonblocking(true).unwrap();
    let mut run = Child(
        tollgate()
            .args(["run", "-c"])
            .arg(&conf)
            .current_dir(&dir)
            .env("NOTIFY_SOCKET", &notify_path)
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let old = run.0.id();
    eventually("the pidfile is written", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|t| t.trim() == old.to_string())
    });
    let get = move |path: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };

    // A server put in MAINT at run time: the new process takes that on.
    let sock = dir.join("upgrade.sock");
    let admin = |cmd: &str| {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        writeln!(s, "{cmd}").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let s2_line = |stat: String| stat.lines().find(|l| l.starts_with("b,s2,")).unwrap_or_default().to_string();
    admin("set server b/s2 state maint");
    assert!(s2_line(admin("show stat")).contains("MAINT"));

    // A request in flight on the old process, held by the origin.
    let in_flight = std::thread::spawn(move || get("/slow"));
    first_held.recv().unwrap();

    let out = tollgate().args(["upgrade", "-c"]).arg(&conf).current_dir(&dir).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let new: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let _new_guard = Adopted(new);
    assert_ne!(new, old);
    assert!(said.contains(&format!("pid {new} serves")), "{said}");
    // New connections: the new process, while the old one still runs for its request.
    for _ in 0..20 {
        assert!(get("/fast").ends_with("now!"));
    }
    let stat = admin("show stat");
    assert!(s2_line(stat.clone()).contains("MAINT"), "the new process's socket, s2 in MAINT: {stat}");
    assert!(run.0.try_wait().unwrap().is_none(), "the old process waits for its request");
    go.send(()).unwrap();
    let answer = in_flight.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("late"), "{answer}");
    let mut status = None;
    eventually("the old process exits", || {
        status = run.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    assert_eq!(std::fs::read_to_string(&pidfile).unwrap().trim(), new.to_string(), "the new process's pidfile stays");
    let mut told = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n) = manager.recv(&mut buf) {
        told.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string());
    }
    assert!(told.contains(&format!("MAINPID={new}")), "{told:?}");
    assert!(!told.iter().any(|t| t.contains("STOPPING")), "the service goes on: {told:?}");

    // The config broken, then SIGUSR2: the new binary cannot start, the running one goes on.
    std::fs::write(&conf, format!("{conf_text}  weight = \"heavy\"\n")).unwrap();
    signal(new, rustix::process::Signal::USR2);
    let logged = || std::fs::read_to_string(&log_path).unwrap_or_default();
    eventually("the failed upgrade is logged", || logged().contains("upgrade failed, this process goes on serving"));
    assert!(alive(new));
    assert!(get("/fast").ends_with("now!"));
    std::fs::write(&conf, &conf_text).unwrap();
    signal(new, rustix::process::Signal::TERM);
    // (Not a child of the test: its pidfile's removal says it stopped.)
    eventually("the new process stops and removes its pidfile", || !pidfile.exists());
}

/// Under systemd (`Type=notify`, packaging/tollgate.service): READY=1 once it
/// listens, RELOADING=1 with the time then READY=1 around a reload, STOPPING=1
/// at a stop, each on the socket `$NOTIFY_SOCKET` names.
#[test]
fn the_service_manager_is_told_ready_reloading_and_stopping() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = write(
        "notify.toml",
        &format!("[global]\nworkers = 1\n\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\n"),
    );
    let path = conf.with_file_name("notify.sock");
    let _ = std::fs::remove_file(&path);
    let manager = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    manager.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let next = || {
        let mut buf = [0u8; 512];
        let n = manager.recv(&mut buf).expect("a notification within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let mut run = Child(
        tollgate()
            .args(["run", "-c"])
            .arg(&conf)
            .env("NOTIFY_SOCKET", &path)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = run.0.id();
    let ready = next();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(http_get(port).starts_with("HTTP/1.1 503"), "listening, no backend");
    signal(pid, rustix::process::Signal::HUP);
    let reloading = next();
    assert!(reloading.lines().any(|l| l == "RELOADING=1"), "{reloading}");
    assert!(reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC=")), "{reloading}");
    assert_eq!(next().trim_end(), "READY=1");
    signal(pid, rustix::process::Signal::TERM);
    assert_eq!(next().trim_end(), "STOPPING=1");
    assert!(run.0.wait().unwrap().success());
    let _ = std::fs::remove_file(&path);
}

/// `global.user` / `group`: the process binds as root, then runs as the
/// account (every thread: /proc says so for each), serves, reloads the file
/// and stops. Not root: refused at start, with the reason.
#[test]
fn user_and_group_drop_root_after_binding() {
    use rustix::process::Signal;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = write(
        "drop.toml",
        &format!(
            "[global]\nworkers = 2\nuser = \"nobody\"\ngroup = \"nogroup\"\n\n\
             [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:{port}\"]\n\
             \x20 [[frontend.rule]]\n  deny = 403\n"
        ),
    );
    let dir = conf.parent().unwrap().to_path_buf();
    let log_path = dir.join("drop.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut run = Child(tollgate().args(["run", "-c"]).arg(&conf).current_dir(&dir).stderr(log).spawn().unwrap());
    let logged = |what: &str| std::fs::read_to_string(&log_path).unwrap_or_default().contains(what);
    if !rustix::process::geteuid().is_root() {
        let status = run.0.wait().unwrap();
        assert!(!status.success());
        assert!(logged("cannot switch to user nobody (uid 65534), group nogroup (gid 65534): running as uid"));
        return;
    }
    let pid = run.0.id();
    eventually("it serves", || http_get(port).starts_with("HTTP/1.1 403"));
    // The line may come just after the workers serve.
    eventually("it says whom it runs as", || logged("running as user nobody (uid 65534), group nogroup (gid 65534)"));
    // Every thread (the workers, the runtime's) runs as nobody/nogroup, with no other group.
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().map(|t| t.unwrap().path()).collect();
    assert!(tasks.len() >= 3, "workers and the main thread: {tasks:?}");
    for t in tasks {
        let status = std::fs::read_to_string(t.join("status")).unwrap();
        let line =
            |k: &str| status.lines().find(|l| l.starts_with(k)).unwrap().split_whitespace().skip(1).collect::<Vec<_>>();
        assert_eq!(line("Uid:"), ["65534"; 4], "{}", t.display());
        assert_eq!(line("Gid:"), ["65534"; 4], "{}", t.display());
        assert_eq!(line("Groups:"), ["65534"], "{}", t.display());
    }
    // A reload as nobody: the file is readable, the listener kept.
    signal(pid, Signal::HUP);
    eventually("the reload is done", || logged("reload done"));
    assert!(http_get(port).starts_with("HTTP/1.1 403"));
    signal(pid, Signal::TERM);
    let mut status = None;
    eventually("it exits", || {
        status = run.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
}
