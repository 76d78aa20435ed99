//! `tollgate`: the command line. Parses arguments, loads the config, starts the
//! server and waits for signals (the table in docs/configuration.md, "Signals":
//! TERM/INT stop gracefully, QUIT at once, HUP reloads, USR1 reopens the log
//! files, USR2 hands the listening sockets to a new binary (upgrade.rs), any
//! other that would end the process is logged and ignored); `reload` and
//! `upgrade` send SIGHUP and SIGUSR2 to the running instance. Everything else
//! lives in the library crates.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tollgate::Running;
use tollgate::privileges::Dropped;
use tollgate::upgrade::Received;
use tollgate_config::Config;
use tollgate_proxy::Server;

#[derive(Parser)]
#[command(name = "tollgate", version, about = "Reverse proxy, load balancer and HTTP cache")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve in the foreground until SIGTERM or SIGINT; SIGHUP reloads the config file.
    Run {
        #[arg(short, long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Take over the listening sockets of the tollgate that started this
        /// one (a hot binary upgrade); they come on standard input.
        #[arg(long, hide = true)]
        take_over: bool,
    },
    /// Validate a config file, then make the running tollgate (found through the
    /// file's `global.pidfile`) reload its config, with SIGHUP.
    Reload {
        #[arg(short, long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Replace the running tollgate (found through the file's `global.pidfile`)
    /// with the binary now at its path, without closing a connection: with
    /// SIGUSR2, it starts that binary, hands it its listening sockets, and
    /// finishes its own connections.
    Upgrade {
        #[arg(short, long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Validate a config file: print every error, exit 1 if there is any.
    Check {
        #[arg(short, long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Translate a haproxy.cfg or an nginx.conf into a Tollgate config (TOML on
    /// standard output, or in the -o file); what is not carried over is listed
    /// on standard error, each with its file:line.
    Import {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The format of FILE, when it is not to be detected.
        #[arg(long, value_name = "haproxy|nginx")]
        from: Option<tollgate_import::Format>,
        /// Write the TOML here instead of standard output.
        #[arg(short, long, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Read the files the config names by absolute path (includes,
        /// htpasswd and ACL files) under this directory: for a config copied
        /// from another machine with its /etc.
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Start two demo app servers (s1, s2) and the proxy in front of them.
    Demo {
        /// Port of the proxy.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Port of demo server s1.
        #[arg(long, default_value_t = 3001)]
        s1_port: u16,
        /// Port of demo server s2.
        #[arg(long, default_value_t = 3002)]
        s2_port: u16,
        /// Port of the admin listener (stats page, JSON API, /metrics).
        #[arg(long, default_value_t = 8404)]
        admin_port: u16,
        /// Path of the command socket.
        #[arg(long, value_name = "PATH", default_value = "/tmp/tollgate-demo.sock")]
        socket: PathBuf,
        /// Proxy config to use instead of the built-in examples/demo.toml.
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

/// mimalloc: measured with bench/ (same workload, builds alternated, 4 runs each),
/// it cut CPU per request by ~14% at 8 KiB / 500 connections against glibc malloc.
/// Built without transparent huge pages (Cargo.toml), which had cost 5-8 MiB of
/// RSS (docs/architecture.md, "Memory allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The config file when `-c` is not given (the package installs one there).
const DEFAULT_CONFIG: &str = "/etc/tollgate/tollgate.toml";

const DEMO_TOML: &str = include_str!("../../../examples/demo.toml");

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colours for a terminal only: a file or a journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.cmd {
        Cmd::Check { config } => match tollgate_config::load(&config) {
            Ok(mut c) => {
                for w in &c.warnings {
                    eprintln!("warning: {w}");
                }
                // Names are looked up as `run` would; one that does not resolve is no error.
                for w in tollgate_proxy::runtime::dns::settle(&mut c, None) {
                    eprintln!("warning: {w}");
                }
                println!(
                    "{}: ok ({} frontend(s), {} backend(s))",
                    config.display(),
                    c.frontends.len(),
                    c.backends.len()
                );
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                eprintln!("{}: {} error(s)", config.display(), errors.0.len());
                ExitCode::FAILURE
            }
        },
        Cmd::Run { config, take_over } => {
            // First: the old process waits for this one, and a config that
            // does not load ends the upgrade with this process's exit.
            let received = match take_over.then(tollgate::upgrade::receive).transpose() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("tollgate: taking over: {e}");
                    return ExitCode::FAILURE;
                }
            };
            run(config, received)
        }
        Cmd::Import { file, from, output, root } => import(&file, from, output.as_deref(), root.as_deref()),
        Cmd::Reload { config } => reload(&config),
        Cmd::Upgrade { config } => upgrade(&config),
        Cmd::Demo { port, s1_port, s2_port, admin_port, socket, config } => {
            demo(port, s1_port, s2_port, admin_port, socket, config)
        }
    }
}

/// `tollgate import`: exit 0 with the TOML written (warnings or not), 1 when
/// the file cannot be read or holds nothing that listens.
fn import(file: &Path, from: Option<tollgate_import::Format>, output: Option<&Path>, root: Option<&Path>) -> ExitCode {
    let imported = match tollgate_import::import_file(file, from, root) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tollgate import: {e}");
            return ExitCode::FAILURE;
        }
    };
    for w in &imported.warnings {
        eprintln!("{w}");
    }
    let count = |k: tollgate_import::Kind| imported.warnings.iter().filter(|w| w.kind == k).count();
    eprintln!(
        "{}: read as {}: {} not translated, {} approximated, {} unknown",
        file.display(),
        imported.format.name(),
        count(tollgate_import::Kind::NoEquivalent),
        count(tollgate_import::Kind::Approximate),
        count(tollgate_import::Kind::Unknown),
    );
    if !imported.usable {
        eprintln!("tollgate import: nothing usable: no frontend with an address Tollgate can listen on");
        return ExitCode::FAILURE;
    }
    match output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &imported.toml) {
                eprintln!("tollgate import: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            eprintln!("wrote {} (check it with `tollgate check -c {}`)", path.display(), path.display());
        }
        None => print!("{}", imported.toml),
    }
    ExitCode::SUCCESS
}

fn run(config: PathBuf, received: Option<Received>) -> ExitCode {
    match tollgate_config::load(&config) {
        Ok(c) => serve(c, None, Some(config), received),
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{}: {} error(s); not starting", config.display(), errors.0.len());
            ExitCode::FAILURE
        }
    }
}

/// `tollgate reload`: validates `path`, then sends SIGHUP to the process whose id
/// is in the file's `global.pidfile`. That process re-reads its own config file
/// (the one it was started with) and logs the outcome.
fn reload(path: &Path) -> ExitCode {
    let pid = match running_pid(path, "reload") {
        Ok(found) => found.0,
        Err(code) => return code,
    };
    match send_signal(pid, rustix::process::Signal::HUP, "reload") {
        Ok(()) => {
            println!("tollgate reload: sent SIGHUP to tollgate (pid {}); it logs the outcome", pid.as_raw_nonzero());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// How long `tollgate upgrade` waits for the new process to serve: the
/// running one's own wait ([`UPGRADE_WAIT`]) and some.
const UPGRADE_CLI_WAIT: std::time::Duration = std::time::Duration::from_secs(40);

/// `tollgate upgrade`: validates `path`, sends SIGUSR2 to the running tollgate
/// (its `global.pidfile`), and waits until the pidfile names the new process.
fn upgrade(path: &Path) -> ExitCode {
    let (pid, pidfile) = match running_pid(path, "upgrade") {
        Ok(found) => found,
        Err(code) => return code,
    };
    if let Err(code) = send_signal(pid, rustix::process::Signal::USR2, "upgrade") {
        return code;
    }
    let old = pid.as_raw_nonzero().get();
    println!("tollgate upgrade: sent SIGUSR2 to tollgate (pid {old}); waiting for the new process to serve");
    let since = std::time::Instant::now();
    while since.elapsed() < UPGRADE_CLI_WAIT {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = std::fs::read_to_string(&pidfile).ok().and_then(|t| t.trim().parse::<i32>().ok());
        if let Some(new) = now.filter(|n| *n != old) {
            println!("tollgate upgrade: pid {new} serves; pid {old} finishes its connections and exits");
            return ExitCode::SUCCESS;
        }
    }
    eprintln!(
        "tollgate upgrade: no new process took over within {} s; pid {old} goes on serving (its log says why)",
        UPGRADE_CLI_WAIT.as_secs()
    );
    ExitCode::FAILURE
}

/// The running tollgate's process id, from the `global.pidfile` of the config
/// at `path` (validated first), and the pidfile; `what` names the command in
/// the errors, printed here.
fn running_pid(path: &Path, what: &str) -> Result<(rustix::process::Pid, PathBuf), ExitCode> {
    let config = match tollgate_config::load(path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            let doing = if what == "reload" { "reloading" } else { "upgrading" };
            eprintln!("{}: {} error(s); not {doing}", path.display(), errors.0.len());
            return Err(ExitCode::FAILURE);
        }
    };
    let Some(pidfile) = config.global.pidfile else {
        eprintln!(
            "tollgate {what}: {} has no `global.pidfile`, so the running tollgate cannot be found \
             (set one, and restart tollgate once so that it writes it)",
            path.display()
        );
        return Err(ExitCode::FAILURE);
    };
    let text = match std::fs::read_to_string(&pidfile) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tollgate {what}: cannot read the pidfile {}: {e} (is tollgate running?)", pidfile.display());
            return Err(ExitCode::FAILURE);
        }
    };
    let Some(pid) = text.trim().parse::<i32>().ok().and_then(rustix::process::Pid::from_raw) else {
        eprintln!("tollgate {what}: the pidfile {} does not hold a process id: {:?}", pidfile.display(), text.trim());
        return Err(ExitCode::FAILURE);
    };
    if let Err(e) = rustix::process::test_kill_process(pid)
        && e == rustix::io::Errno::SRCH
    {
        eprintln!(
            "tollgate {what}: tollgate is not running (no process {} from {})",
            pid.as_raw_nonzero(),
            pidfile.display()
        );
        return Err(ExitCode::FAILURE);
    }
    Ok((pid, pidfile))
}

fn send_signal(pid: rustix::process::Pid, sig: rustix::process::Signal, what: &str) -> Result<(), ExitCode> {
    rustix::process::kill_process(pid, sig).map_err(|e| {
        eprintln!("tollgate {what}: cannot signal process {}: {e}", pid.as_raw_nonzero());
        ExitCode::FAILURE
    })
}

/// Printed once the server listens (the demo's instructions).
type Banner = Box<dyn FnOnce(&Running)>;

/// How long a new process may take to serve after a hot binary upgrade
/// started it (its first round of health checks included).
const UPGRADE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts the server (taking over the sockets `received`, for a process
/// started by a hot binary upgrade), writes the pidfile, and blocks until
/// SIGTERM/SIGINT (then stops gracefully), SIGQUIT (then at once) or a hot
/// binary upgrade handed over to a new process (then as for SIGTERM), and
/// removes the pidfile unless the new process wrote its own. SIGHUP reloads
/// `source`, the config file (none: SIGHUP only logs a warning).
fn serve(config: Config, banner: Option<Banner>, source: Option<PathBuf>, mut received: Option<Received>) -> ExitCode {
    // The binary's path now: once a new binary replaced the file, the running
    // one's path would read `... (deleted)`.
    let exe = std::env::current_exe().ok();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Handlers first: a SIGHUP sent as soon as the pidfile exists must reload, not kill.
    let mut signals = match rt.block_on(async { Signals::new() }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tollgate: cannot handle signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pidfile = config.global.pidfile.clone();
    let run_as = config.global.run_as.clone();
    let started = match &mut received {
        Some(r) => {
            let (listeners, admin) = r.take();
            tollgate::start_taking_over(config, listeners, admin)
        }
        None => tollgate::start(config),
    };
    let server = match started {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(r) = &received {
        // At once: the workers accept already (the old process does too, until `ready`).
        server.restore_server_states(&r.servers);
    }
    if let Some(p) = &pidfile
        && let Err(e) = std::fs::write(p, format!("{}\n", std::process::id()))
    {
        eprintln!("tollgate: cannot write the pidfile {}: {e}", p.display());
        server.stop();
        server.join();
        return ExitCode::FAILURE;
    }
    if let Some(run_as) = &run_as {
        match tollgate::privileges::drop_to(run_as) {
            Ok(Dropped::Switched) => tracing::info!("running as {}", tollgate::privileges::describe(run_as)),
            Ok(Dropped::Already) => {}
            Err(e) => {
                eprintln!("tollgate: {e}");
                server.stop_fast();
                server.join();
                if let Some(p) = &pidfile {
                    let _ = std::fs::remove_file(p);
                }
                return ExitCode::FAILURE;
            }
        }
    }
    for (fe, addr, tls) in server.listening() {
        let scheme = if tls { "https" } else { "http" };
        tracing::info!("frontend `{fe}` listening on {scheme}://{addr}");
    }
    if let Some(addr) = server.admin_addr() {
        tracing::info!("admin listening on http://{addr}/ (stats page, /api, /metrics)");
    }
    if let Some(r) = &received {
        match r.ready() {
            Ok(()) => tracing::info!("took over the listening sockets: serving"),
            Err(e) => tracing::warn!("{e}"),
        }
        // The service's main process is this one now (the unit needs NotifyAccess=all).
        notify(&[sd_notify::NotifyState::MainPid(std::process::id())]);
    }
    notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status("serving")]);
    if let Some(b) = banner {
        b(&server);
    }
    let upgrade = exe.as_deref().zip(source.as_deref());
    match rt.block_on(signals.serve(&server, source.as_deref(), pidfile.as_deref(), upgrade)) {
        Stop::Graceful(name) => {
            tracing::info!("{name}: stopping: no new connections; finishing requests in flight");
            notify(&[sd_notify::NotifyState::Stopping]);
            server.stop();
        }
        Stop::Fast => {
            tracing::info!("SIGQUIT: stopping now: every connection closed");
            notify(&[sd_notify::NotifyState::Stopping]);
            server.stop_fast();
        }
        Stop::HandedOver(pid) => {
            tracing::info!("pid {pid} serves now: no new connections here; finishing requests in flight");
            server.stop();
        }
    }
    // While the connections finish: QUIT, or TERM/INT again, stops at once.
    let stopper = server.stopper();
    rt.block_on(async {
        let mut joined = tokio::task::spawn_blocking(move || server.join());
        loop {
            tokio::select! {
                _ = &mut joined => return,
                _ = signals.quit.recv() => stopper.stop_fast(),
                _ = signals.term.recv() => stopper.stop_fast(),
                _ = signals.int.recv() => stopper.stop_fast(),
            }
        }
    });
    // The pidfile goes, unless a process that took over wrote its own there.
    let ours = std::process::id().to_string();
    if let Some(p) = &pidfile
        && std::fs::read_to_string(p).is_ok_and(|t| t.trim() == ours)
        && let Err(e) = std::fs::remove_file(p)
    {
        tracing::warn!("cannot remove the pidfile {}: {e}", p.display());
    }
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// How the process was asked to stop.
enum Stop {
    /// SIGTERM or SIGINT (the name): no new connections, requests in flight finish.
    Graceful(&'static str),
    /// SIGQUIT: every connection closed now.
    Fast,
    /// A hot binary upgrade: the process with this id took the listening
    /// sockets over; this one finishes its connections.
    HandedOver(u32),
}

struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

/// Signals whose default action ends the process and that Tollgate has no use
/// for: each is logged and ignored, so that a stray `kill -ALRM` is never a
/// silent death (SIGPIPE is ignored by the Rust runtime itself).
const IGNORED: [(&str, i32); 8] = [
    ("SIGALRM", libc::SIGALRM),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGPROF", libc::SIGPROF),
    ("SIGIO", libc::SIGIO),
    ("SIGPWR", libc::SIGPWR),
    ("SIGSTKFLT", libc::SIGSTKFLT),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
];

impl Signals {
    /// Must run inside the runtime that will wait for the signals; the
    /// ignored ones are waited for by tasks of that runtime.
    fn new() -> std::io::Result<Signals> {
        let ignored = IGNORED.iter().map(|(name, n)| (name.to_string(), *n));
        // The real-time signals, which end a process by default too.
        let realtime = (libc::SIGRTMIN()..=libc::SIGRTMAX()).map(|n| (format!("signal {n} (real-time)"), n));
        for (name, n) in ignored.chain(realtime) {
            // Best effort: some are not ours to take (valgrind keeps the
            // highest real-time signal for itself).
            let Ok(mut sig) = signal(SignalKind::from_raw(n)) else {
                tracing::debug!("{name}: cannot be handled here; its default action stays");
                continue;
            };
            tokio::spawn(async move {
                while sig.recv().await.is_some() {
                    tracing::warn!("{name} received: ignored (docs/configuration.md, Signals)");
                }
            });
        }
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Reloads on each SIGHUP, reopens the log files on each SIGUSR1; returns
    /// on SIGTERM, SIGINT or SIGQUIT.
    /// A hot binary upgrade (SIGUSR2) starts `upgrade`'s binary with its
    /// config file.
    async fn serve(
        &mut self,
        server: &Running,
        source: Option<&Path>,
        pidfile: Option<&Path>,
        upgrade: Option<(&Path, &Path)>,
    ) -> Stop {
        loop {
            tokio::select! {
                _ = self.term.recv() => return Stop::Graceful("SIGTERM"),
                _ = self.int.recv() => return Stop::Graceful("SIGINT"),
                _ = self.quit.recv() => return Stop::Fast,
                _ = self.hup.recv() => match source {
                    Some(path) => reload_from(server, path, pidfile),
                    None => tracing::warn!("SIGHUP: no config file to reload (the built-in demo config)"),
                },
                _ = self.usr1.recv() => match server.reopen_logs() {
                    Ok(Some(path)) => tracing::info!("SIGUSR1: access log reopened: {}", path.display()),
                    Ok(None) => tracing::info!("SIGUSR1: no log file to reopen"),
                    Err(e) => tracing::error!("SIGUSR1: the access log could not be reopened, it goes on as it was: {e}"),
                },
                _ = self.usr2.recv() => match upgrade {
                    Some((exe, config)) => {
                        tracing::info!("SIGUSR2: starting {} to take over the listening sockets", exe.display());
                        let (sockets, servers) = (server.share(), server.server_states());
                        let (exe, config) = (exe.to_owned(), config.to_owned());
                        let handing = tokio::task::spawn_blocking(move || {
                            tollgate::upgrade::hand_over(&exe, &config, sockets, servers, UPGRADE_WAIT)
                        });
                        match handing.await {
                            Ok(Ok(pid)) => return Stop::HandedOver(pid),
                            Ok(Err(e)) => tracing::error!("SIGUSR2: upgrade failed, this process goes on serving: {e}"),
                            Err(e) => tracing::error!("SIGUSR2: upgrade failed, this process goes on serving: {e}"),
                        }
                    }
                    None => tracing::warn!("SIGUSR2: no config file to start a new binary with (the built-in demo config)"),
                },
            }
        }
    }
}

/// SIGHUP: re-reads and validates `path`, then reloads. A file with errors is
/// refused, each error logged as `check` prints it; the running config stays.
/// (`Server::reload` logs what changed, or why it refused.)
fn reload_from(server: &Server, path: &Path, pidfile: Option<&Path>) {
    tracing::info!("SIGHUP: reloading {}", path.display());
    // The service manager (Type=notify-reload waits for this pair, then READY=1).
    let now = sd_notify::NotifyState::monotonic_usec_now();
    notify(&[sd_notify::NotifyState::Reloading].into_iter().chain(now).collect::<Vec<_>>());
    reload_file(server, path, pidfile);
    notify(&[sd_notify::NotifyState::Ready]);
}

/// Tells the service manager (systemd, `Type=notify`; docs/configuration.md,
/// "Under systemd") how the process stands, when one asked for it
/// (`$NOTIFY_SOCKET`); a failure is logged, nothing more.
fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

fn reload_file(server: &Server, path: &Path, pidfile: Option<&Path>) {
    let config = match tollgate_config::load(path) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors.0 {
                tracing::error!("{e}");
            }
            tracing::error!(
                "reload refused: {}: {} error(s); the running config keeps serving",
                path.display(),
                errors.0.len()
            );
            return;
        }
    };
    if config.global.pidfile.as_deref() != pidfile {
        tracing::warn!("reload: global.pidfile changed; it applies at the next restart");
    }
    if config.global.run_as != server.snapshot().config.global.run_as {
        tracing::warn!(
            "reload: global.user or group changed; it applies at the next restart (the process switches once)"
        );
    }
    let _ = server.reload(config);
}

fn demo(port: u16, s1_port: u16, s2_port: u16, admin_port: u16, socket: PathBuf, config: Option<PathBuf>) -> ExitCode {
    let loaded = match &config {
        Some(p) => tollgate_config::load(p),
        None => tollgate_config::parse(DEMO_TOML, Path::new("examples/demo.toml")),
    };
    let mut cfg = match loaded {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    let localhost = |p: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, p));
    if config.is_none() {
        // Flags override the built-in config's ports.
        cfg.frontends[0].binds = vec![localhost(port).into()];
        if let Some(admin) = cfg.admin.as_mut() {
            admin.bind = Some(localhost(admin_port));
            admin.sockets = vec![tollgate_config::CommandSocket {
                listen: tollgate_config::SocketListen::Unix(tollgate_config::UnixSocket {
                    path: socket,
                    mode: 0o600,
                    uid: None,
                    gid: None,
                }),
                level: tollgate_config::CliLevel::Admin,
            }];
        }
        if let Some(b) = cfg.backends.iter_mut().find(|b| b.name == "nodes") {
            let b = Arc::make_mut(b);
            for s in &mut b.servers {
                match s.name.as_str() {
                    "s1" => s.addr = localhost(s1_port),
                    "s2" => s.addr = localhost(s2_port),
                    _ => {}
                }
            }
        }
    }
    // The demo apps run on their own thread so the proxy's workers stay proxy-only.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("demo runtime");
        rt.block_on(async move {
            let s1 = tollgate::demo::spawn(localhost(s1_port), "s1").await;
            let s2 = tollgate::demo::spawn(localhost(s2_port), "s2").await;
            match (s1, s2) {
                (Ok(s1), Ok(s2)) => {
                    let _ = tx.send(Ok(()));
                    let _keep = (s1, s2);
                    std::future::pending::<()>().await;
                }
                (Err(e), _) | (_, Err(e)) => {
                    let _ = tx.send(Err(e));
                }
            }
        });
    });
    match rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("tollgate demo: cannot start the demo app servers on ports {s1_port} and {s2_port}: {e}");
            return ExitCode::FAILURE;
        }
        Err(_) => return ExitCode::FAILURE,
    }
    serve(
        cfg,
        Some(Box::new(move |server: &Running| {
            let proxy = server.addr("web").map_or_else(|| format!("127.0.0.1:{port}"), |a| a.to_string());
            let admin = server.snapshot().config.admin.clone();
            let stats = server.admin_addr().map(|a| a.to_string());
            let sock = admin.as_ref().and_then(|a| a.socket_path()).map(|p| p.display().to_string());
            let mut text = format!(
                "\nTollgate demo\n\
                 \n  proxy  http://{proxy}   frontend `web` -> backend `nodes` (roundrobin, cookie SERVERID)\
                 \n  s1     http://127.0.0.1:{s1_port}\
                 \n  s2     http://127.0.0.1:{s2_port}\n"
            );
            if let Some(stats) = &stats {
                text += &format!(
                    "  stats  http://{stats}/            (stats page; JSON under /api, Prometheus at /metrics)\n"
                );
            }
            if let Some(sock) = &sock {
                text += &format!("  socket {sock}        (HAProxy-style command socket)\n");
            }
            text += &format!(
                "\nTry:\
                 \n  curl -s http://{proxy}/                  # run it again: the tag alternates s1, s2\
                 \n  for i in $(seq 10); do curl -s http://{proxy}/ | grep -o '\"tag\":\"s[12]\"'; done | sort | uniq -c\
                 \n  curl -s -c jar -b jar http://{proxy}/    # with cookies: you stay on one server\
                 \n  curl -i http://{proxy}/static/hello.txt # twice: the second is `Cache-Status: tollgate; hit`, with an Age\
                 \n  curl -s -H 'Content-Type: application/json' -d '{{\"delay\": 250}}' http://127.0.0.1:{s1_port}/delay\
                 \n                                              # s1 now answers 250 ms late; {{\"delay\": 0}} undoes it\n"
            );
            if let Some(sock) = &sock {
                text += &format!(
                    "\nDrain s1 (bound clients stay, new ones go to s2), watch, then bring it back:\
                     \n  echo \"set server nodes/s1 state drain\" | socat stdio {sock}\
                     \n  watch -n1 \"echo 'show stat' | socat stdio {sock} | cut -d, -f1,2,5,8,18\"\
                     \n  echo \"set server nodes/s1 state ready\" | socat stdio {sock}\
                     \n  socat readline {sock}                    # then type: prompt, help, show info, ...\n"
                );
            }
            if let Some(stats) = &stats {
                text += &format!(
                    "\nThe same over HTTP:\
                     \n  curl -s -X PUT -H 'Content-Type: application/json' -d '{{\"state\": \"drain\"}}' \\\
                     \n       http://{stats}/api/backends/nodes/servers/s1\
                     \n  curl -s http://{stats}/api/backends\n"
                );
            }
            text += "\nPress Ctrl-C to stop.\n";
            println!("{text}");
        })),
        config,
        None,
    )
}
