//! Listeners, workers and the server's lifecycle.
//!
//! One worker thread per core (`global.workers`), each running a single-threaded
//! tokio runtime with its own SO_REUSEPORT listener for every bind address, so the
//! kernel spreads connections over workers and a connection never changes thread.
//! Each worker keeps its own upstream pool (see pool.rs). docs/architecture.md
//! explains the choice.
//!
//! Reload ([`Server::reload`]): a new snapshot is swapped in; each worker takes
//! orders on a command channel to open the listeners a new config adds and close
//! those it drops, and keeps the others as they are. Accept loops find their
//! frontend by name in the snapshot current at accept time.
//!
//! Shutdown: listeners close at once; idle connections close, busy ones finish
//! their in-flight request (and say `connection: close`), bounded by
//! `global.grace_period`.

use crate::io::idle_poll;
use crate::io::lazy_tcp::{self, LazyTcp};
use crate::io::limits::{self, FdBudget, Shortage, Throttle};
use crate::io::reclaim::{Registration, Wait};
use crate::lb::track::{self, Admit};
use crate::net::proxy_proto::read_header;
use crate::net::tls::ClientStream;
use crate::pipeline::snapshot::Snapshot;
use crate::pipeline::start_error::StartError;
use crate::runtime::check::Checker;
use crate::runtime::reload::{self, ReloadError, ReloadReport};
use crate::session::conn::Conn;
use crate::session::h2conn;
use crate::upstream;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::{Notify, Semaphore, TryAcquireError, mpsc, oneshot, watch};
use tollgate_config::{Config, Mode, binds_overlap};
use tollgate_wire::headers::canonical_ip;

const BACKLOG: i32 = 4096;
/// How long a listener with `defer_accept` holds a silent connection back
/// (the kernel counts it in SYN-ACK retransmissions: one, after 1 s), as
/// HAProxy's `defer-accept` and nginx's `deferred` do.
const DEFER_ACCEPT_SECS: u32 = 1;
/// How long a reload waits for each worker to close a listener it no longer wants.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// How long a listener stops accepting after an accept failed for want of
/// descriptors or memory ([`accept_pause`]); connections already open go on.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// How far ahead a worker always has a timer due ([`timer_floor`]).
const TIMER_FLOOR: Duration = Duration::from_secs(1);

/// A listener's identity across reloads: its frontend's name, its address as
/// configured (port 0 included) and whether it defers accepts, so that the same
/// line in the next config keeps the same listening sockets (and a changed
/// `defer_accept` opens new ones in their place).
type BindKey = (String, SocketAddr, bool);

/// One configured listening address, open on every worker.
#[derive(Debug, Clone)]
struct Bound {
    key: BindKey,
    /// The real address (the port chosen by the system for port 0).
    actual: SocketAddr,
}

/// What a reload asks of each worker.
enum Cmd {
    /// Start accepting on this socket (this worker's own SO_REUSEPORT one).
    Listen { key: BindKey, listener: std::net::TcpListener },
    /// Stop accepting on this listener and close it; `done` when it is closed.
    /// Connections it accepted go on.
    Close { key: BindKey, done: std::sync::mpsc::Sender<()> },
    /// Copies of this worker's listening sockets (new descriptors of the same
    /// sockets), for a new process to take over ([`Server::share_listeners`]).
    Share { done: std::sync::mpsc::Sender<Vec<(SocketAddr, std::net::TcpListener)>> },
    /// End the exchanges and tunnels of the server with this id (`shutdown
    /// sessions server`, lb/shutdown.rs).
    Kill(u64),
}

/// Listening sockets a new process takes over from the one it replaces (a
/// hot binary upgrade), by the address they were configured with. A bind whose
/// address is here uses these sockets rather than new ones, so no connection
/// waiting in their accept queues is lost.
pub type Inherited = HashMap<SocketAddr, Vec<std::net::TcpListener>>;

/// What reloads change, behind one lock so that reloads happen one at a time.
struct Control {
    health: Checker,
    /// The thread that follows server names runs (dns.rs).
    following: bool,
    /// The thread that keeps `[[acme]]` certificates runs (acme.rs).
    acme: bool,
    /// The thread that keeps the etcd session runs (etcd.rs).
    etcd: bool,
    /// The thread that shares tables with the peers runs (peers.rs), on this address.
    peers: Option<SocketAddr>,
    listeners: Vec<Bound>,
    /// One command channel per worker.
    cmds: Vec<mpsc::UnboundedSender<Cmd>>,
}

/// A running proxy. Dropping it stops it (without waiting).
pub struct Server {
    pub(crate) core: Arc<Core>,
    workers: Vec<JoinHandle<()>>,
}

/// What the server and its admin interfaces share: the snapshot in force, the
/// stop signal, and what reloads change.
pub(crate) struct Core {
    snap: Arc<ArcSwap<Snapshot>>,
    stop: watch::Sender<bool>,
    /// Set with `stop` for a fast stop: the workers close their connections
    /// at once rather than after the grace period.
    fast: watch::Sender<bool>,
    control: Mutex<Control>,
    nworkers: usize,
    started: std::time::SystemTime,
    reloads: std::sync::atomic::AtomicU64,
    /// What the etcd thread and the admin interfaces share (etcd.rs).
    pub(crate) etcd: super::etcd::Shared,
}

impl Server {
    /// Binds every frontend and starts the workers.
    pub fn start(config: Config) -> Result<Server, StartError> {
        Self::start_inheriting(config, Inherited::new())
    }

    /// [`Server::start`], a bind whose configured address is in `inherited`
    /// taking its sockets (spread over the workers; more bound beside them
    /// when there are more workers than sockets). Sockets no bind takes are
    /// closed.
    pub fn start_inheriting(mut config: Config, mut inherited: Inherited) -> Result<Server, StartError> {
        log_warnings(&config);
        let workers = match config.global.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let keys = bind_keys(&config);
        // The figure in force goes into the snapshot's config, where the
        // stats and a reload read it.
        let limit = limits::nofile();
        let checked_servers = config
            .backends
            .iter()
            .filter(|b| b.check.is_some())
            .map(|b| b.servers.iter().filter(|s| s.check).count())
            .sum();
        let budget = FdBudget {
            nofile: limit.current,
            workers,
            listeners: keys.len(),
            checked_servers,
            splice: config.global.splice,
        };
        let max_conn = limits::settle(&mut config.global, budget, limit.raised_from).max_connections;
        // Before binding anything: another process listening on one of the
        // addresses refuses the start (see `refuse_if_in_use`).
        for key in keys.iter().filter(|k| !inherited.contains_key(&k.1)) {
            refuse_if_in_use(key.1).map_err(|error| StartError::Bind {
                frontend: key.0.clone(),
                addr: key.1,
                error,
            })?;
        }
        // Server names: looked up before anything serves.
        for w in super::dns::settle(&mut config, None) {
            tracing::warn!("{w}");
        }
        let follow = has_names(&config);
        let acme = !config.acme.is_empty();
        let etcd = config.global.etcd.is_some();
        let peers = config.global.peers.as_ref().map(|p| p.me());
        let snap = Snapshot::new(config)?;

        let mut listeners = Vec::new();
        let mut per_worker: Vec<Vec<(BindKey, std::net::TcpListener)>> = (0..workers).map(|_| Vec::new()).collect();
        for key in keys {
            let taken = inherited.remove(&key.1).unwrap_or_default();
            let (actual, socks) = bind_all(&key.1, key.2, workers, taken).map_err(|error| StartError::Bind {
                frontend: key.0.clone(),
                addr: key.1,
                error,
            })?;
            // One socket per worker; inherited ones beyond that go round.
            for (i, sock) in socks.into_iter().enumerate() {
                per_worker[i % workers].push((key.clone(), sock));
            }
            listeners.push(Bound { key, actual });
        }

        let snap = Arc::new(ArcSwap::from_pointee(snap));
        // Before any worker accepts: a first round of health checks sets each checked server UP or DOWN.
        let health = Checker::start(&snap.load().backends).map_err(StartError::Runtime)?;
        let (stop, stop_rx) = watch::channel(false);
        let (fast, fast_rx) = watch::channel(false);
        let permits = Arc::new(Semaphore::new(max_conn));
        let reclaim = Arc::new(Notify::new());
        let mut handles = Vec::new();
        let mut cmds = Vec::new();
        for (i, initial) in per_worker.into_iter().enumerate() {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(StartError::Runtime)?;
            let (tx, rx) = mpsc::unbounded_channel();
            let ctx = AcceptCtx {
                snap: snap.clone(),
                stop: stop_rx.clone(),
                fast: fast_rx.clone(),
                permits: permits.clone(),
                live: Arc::default(),
                reclaim: reclaim.clone(),
            };
            let h = std::thread::Builder::new()
                .name(format!("tollgate-w{i}"))
                .spawn(move || rt.block_on(worker(initial, rx, ctx)))
                .map_err(StartError::Runtime)?;
            handles.push(h);
            cmds.push(tx);
        }
        if let Some(h) = start_h3(&snap, &listeners, permits.clone(), stop_rx.clone(), fast_rx.clone())? {
            handles.push(h);
        }
        let core = Arc::new(Core {
            snap,
            stop,
            fast,
            control: Mutex::new(Control { health, following: follow, acme, etcd, peers, listeners, cmds }),
            nworkers: handles.len(),
            started: std::time::SystemTime::now(),
            reloads: Default::default(),
            etcd: Default::default(),
        });
        if follow {
            super::dns::follow(Arc::downgrade(&core) as Weak<dyn super::dns::Running>, core.stop.subscribe())
                .map_err(StartError::Runtime)?;
        }
        if acme {
            super::acme::run(Arc::downgrade(&core) as Weak<dyn super::dns::Running>, core.stop.subscribe())
                .map_err(StartError::Runtime)?;
        }
        if etcd {
            super::etcd::start(Arc::downgrade(&core) as Weak<dyn super::etcd::Cluster>, core.stop.subscribe())
                .map_err(StartError::Runtime)?;
        }
        if let Some(me) = peers {
            super::peers::start(Arc::downgrade(&core) as Weak<dyn super::dns::Running>, core.stop.subscribe(), me)
                .map_err(|error| StartError::Bind { frontend: "global.peers".into(), addr: me, error })?;
        }
        Ok(Server { core, workers: handles })
    }

    /// Replaces the running configuration with `config`, without dropping a
    /// connection, keeping the live state of the servers both configs have (see
    /// [`crate::runtime::reload`] and docs/architecture.md, "Reload").
    ///
    /// In order: the config is checked; the next snapshot is built; new binds are
    /// bound on every worker; the health checker for the new set of servers starts
    /// (its first round, for servers new to the config, runs before they can get
    /// traffic). Any failure up to there returns an error and leaves everything
    /// running as it was. Then the new listeners start accepting, the snapshot is
    /// swapped in (atomically), the old checker stops and the listeners the new
    /// config no longer has are closed. `global.workers` and
    /// `global.max_connections` keep their running values (the report says so).
    pub fn reload(&self, config: Config) -> Result<ReloadReport, ReloadError> {
        self.core.reload(config)
    }

    /// Every listening address: frontend and real address, in config order.
    pub fn addrs(&self) -> Vec<(String, SocketAddr)> {
        self.core.control.lock().listeners.iter().map(|b| (b.key.0.clone(), b.actual)).collect()
    }

    /// Like [`Server::addrs`], with whether each address terminates TLS.
    pub fn listening(&self) -> Vec<(String, SocketAddr, bool)> {
        let snap = self.snapshot();
        let tls = |fe: &str, configured: SocketAddr| {
            snap.config
                .frontends
                .iter()
                .filter(|f| f.name == fe)
                .flat_map(|f| &f.binds)
                .any(|b| b.addr == configured && b.tls.is_some())
        };
        let control = self.core.control.lock();
        control.listeners.iter().map(|b| (b.key.0.clone(), b.actual, tls(&b.key.0, b.key.1))).collect()
    }

    /// The address a frontend listens on (its first bind), with the real port.
    pub fn addr(&self, frontend: &str) -> Option<SocketAddr> {
        self.core.control.lock().listeners.iter().find(|b| b.key.0 == frontend).map(|b| b.actual)
    }

    /// The configuration in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.core.snap.load_full()
    }

    /// Stops accepting; workers finish in-flight requests (within the grace period).
    pub fn stop(&self) {
        self.core.stop();
    }

    /// Stops accepting and closes every connection now, requests in flight
    /// and tunnels included (also after [`Server::stop`], cutting its grace
    /// period short).
    pub fn stop_fast(&self) {
        self.stopper().stop_fast();
    }

    /// A handle that stops the server at once from elsewhere (a signal that
    /// comes while [`Server::join`] waits).
    pub fn stopper(&self) -> Stopper {
        Stopper(self.core.clone())
    }

    /// New descriptors of every listening socket of every worker, with the
    /// address its bind was configured with, for a new process to take over
    /// ([`Server::start_inheriting`]).
    pub fn share_listeners(&self) -> Vec<(SocketAddr, std::net::TcpListener)> {
        let cmds = self.core.control.lock().cmds.clone();
        let mut all = Vec::new();
        for tx in cmds {
            let (done, copies) = std::sync::mpsc::channel();
            if tx.send(Cmd::Share { done }).is_ok()
                && let Ok(mut c) = copies.recv()
            {
                all.append(&mut c);
            }
        }
        all
    }

    /// Reopens the access log file (log rotation: after the file was moved
    /// away, lines go to a new file at its path). Returns the path reopened,
    /// if the log is a file.
    pub fn reopen_logs(&self) -> std::io::Result<Option<std::path::PathBuf>> {
        match &self.core.snapshot().access_log {
            Some(log) => log.reopen(),
            None => Ok(None),
        }
    }

    /// Waits for every worker to end, then for the cache's disk writes
    /// queued by then (at most 10 s), so that a restart finds them.
    pub fn join(mut self) {
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        for zone in &self.core.snapshot().caches {
            if let Some(d) = &zone.shared.disk
                && !d.flush_blocking(std::time::Duration::from_secs(10))
            {
                tracing::warn!(zone = %zone.cfg.name, "cache: disk writes still queued at exit are lost");
            }
        }
    }
}

/// Stops a server at once ([`Server::stop_fast`]) from another thread.
pub struct Stopper(Arc<Core>);

impl Stopper {
    pub fn stop_fast(&self) {
        let _ = self.0.fast.send(true);
        self.0.stop();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.core.stop.send(true);
    }
}

impl Core {
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snap.load_full()
    }

    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub(crate) fn facts(&self) -> crate::runtime::report::ProcessFacts {
        crate::runtime::report::ProcessFacts {
            started: self.started,
            workers: self.nworkers,
            reloads: self.reloads.load(Ordering::Relaxed),
            etcd: Some(self.etcd.report()),
        }
    }

    fn stop(&self) {
        let _ = self.stop.send(true);
        self.control.lock().health.stop();
    }

    /// Reloads with the file's `config` (SIGHUP, the admin interfaces): etcd's
    /// config instead when the file says to read it from there.
    pub(crate) fn reload(self: &Arc<Self>, config: Config) -> Result<ReloadReport, ReloadError> {
        match self.etcd.prefer(config) {
            Ok(config) => self.reload_now(config),
            Err(e) => {
                tracing::error!("reload refused, the running config keeps serving: {e}");
                Err(e)
            }
        }
    }

    fn reload_now(self: &Arc<Self>, mut config: Config) -> Result<ReloadReport, ReloadError> {
        // Outside the lock: the lookups may take a name server's timeout.
        for w in super::dns::settle(&mut config, Some(&self.snapshot().config)) {
            tracing::warn!("{w}");
        }
        let out = self.reload_inner(config);
        if out.is_ok() {
            self.reloads.fetch_add(1, Ordering::Relaxed);
        }
        match &out {
            Ok(report) => {
                tracing::info!("reload done: {report}");
                if !report.needs_restart.is_empty() {
                    tracing::warn!("reload: not applied until a restart: {}", report.needs_restart.join(", "));
                }
            }
            Err(e) => tracing::error!("reload refused, the running config keeps serving: {e}"),
        }
        out
    }

    fn reload_inner(self: &Arc<Self>, config: Config) -> Result<ReloadReport, ReloadError> {
        reload::validate(&config)?;
        // Here, not in `Server::reload`: the admin API and the command socket reload through `Core`.
        log_warnings(&config);
        let mut ctl = self.control.lock();
        let names = has_names(&config);
        let (report, old_health) = self.swap(&mut ctl, config)?;
        if names && !ctl.following {
            match super::dns::follow(Arc::downgrade(self) as Weak<dyn super::dns::Running>, self.stop.subscribe()) {
                Ok(()) => ctl.following = true,
                Err(e) => tracing::error!("DNS: server names will not be followed: {e}"),
            }
        }
        let me = self.snapshot().config.global.peers.as_ref().map(|p| p.me());
        match (me, ctl.peers) {
            (Some(me), None) => {
                match super::peers::start(
                    Arc::downgrade(self) as Weak<dyn super::dns::Running>,
                    self.stop.subscribe(),
                    me,
                ) {
                    Ok(()) => ctl.peers = Some(me),
                    Err(e) => tracing::error!("peers: cannot listen on {me}: {e}; tables are not shared"),
                }
            }
            (Some(me), Some(was)) if me != was => {
                tracing::warn!("reload: global.peers' own address {was} -> {me} applies at the next restart");
            }
            _ => {}
        }
        if self.snapshot().config.global.etcd.is_some() && !ctl.etcd {
            match super::etcd::start(Arc::downgrade(self) as Weak<dyn super::etcd::Cluster>, self.stop.subscribe()) {
                Ok(()) => ctl.etcd = true,
                Err(e) => tracing::error!("etcd: the shared store will not be used: {e}"),
            }
        }
        if !self.snapshot().acme.slots.is_empty() && !ctl.acme {
            match super::acme::run(Arc::downgrade(self) as Weak<dyn super::dns::Running>, self.stop.subscribe()) {
                Ok(()) => ctl.acme = true,
                Err(e) => tracing::error!("ACME: certificates will not be obtained: {e}"),
            }
        }
        drop(ctl);
        drop(old_health);
        Ok(report)
    }

    /// Ends the exchanges and tunnels of the server `id` on every worker.
    pub(crate) fn kill(&self, id: u64) {
        for tx in &self.control.lock().cmds {
            let _ = tx.send(Cmd::Kill(id));
        }
    }

    /// A change to the running config that is not a reload: `f` edits a copy
    /// of the config in force (a new server address, a server added), which
    /// then replaces it as a reload would, every live state carried. Returns
    /// what `f` returned; when that is an error, nothing changes.
    pub(crate) fn amend<R, E>(&self, f: impl FnOnce(&mut Config) -> Result<R, E>) -> Result<Result<R, E>, ReloadError> {
        let mut ctl = self.control.lock();
        let mut config = (*self.snapshot().config).clone();
        let out = match f(&mut config) {
            Ok(out) => out,
            Err(e) => return Ok(Err(e)),
        };
        reload::validate(&config)?;
        let (_, old_health) = self.swap(&mut ctl, config)?;
        drop(ctl);
        drop(old_health);
        Ok(Ok(out))
    }

    /// Puts `config` in force: the snapshot swap of a reload, under the
    /// control lock. Returns the checker of the old config, for the caller to
    /// drop (it waits for its thread) once the lock is released.
    fn swap(&self, ctl: &mut Control, config: Config) -> Result<(ReloadReport, Checker), ReloadError> {
        if *self.stop.borrow() {
            return Err(ReloadError::Stopped);
        }
        let old = self.snap.load_full();
        let mut report = ReloadReport::default();
        let (was, now) = (&old.config.global, &config.global);
        if now.workers != was.workers {
            report.needs_restart.push(format!(
                "global.workers {} -> {} ({} worker(s) keep running)",
                was.workers, now.workers, self.nworkers
            ));
        }
        // HTTP/3 endpoints are opened at start (their UDP sockets).
        if h3_binds(&old.config) != h3_binds(&config) {
            report.needs_restart.push(format!(
                "HTTP/3 binds {:?} -> {:?} (the running ones stay as they are; certificates follow the reload)",
                h3_binds(&old.config),
                h3_binds(&config)
            ));
        }
        // Left out in both files: derived at start, and it stays so.
        let max_changed = match (was.max_connections_set, now.max_connections_set) {
            (_, true) => now.max_connections != was.max_connections,
            (set, false) => set,
        };
        if max_changed {
            let now_text = if now.max_connections_set { now.max_connections.to_string() } else { "derived".into() };
            report.needs_restart.push(format!(
                "global.max_connections {} -> {now_text} ({} stays in force)",
                was.max_connections, was.max_connections
            ));
        }
        // The admin listener and socket stay where they are; the token,
        // `read_only` and `refresh` apply at once. A config without `[admin]`
        // keeps the running admin settings, so that an open admin listener
        // never loses its token.
        let admin = match (&old.config.admin, &config.admin) {
            (Some(run), None) => {
                report.needs_restart.push("admin section removed (the admin interfaces keep running)".into());
                Some(run.clone())
            }
            (None, Some(_)) => {
                report.needs_restart.push("admin section added (opened at the next start)".into());
                None
            }
            (Some(run), Some(new)) if (&run.bind, &run.sockets) != (&new.bind, &new.sockets) => {
                report.needs_restart.push("admin.bind/admin.socket changed (the running ones stay open)".into());
                Some(tollgate_config::Admin { bind: run.bind, sockets: run.sockets.clone(), ..new.clone() })
            }
            (_, new) => new.clone(),
        };
        let mut snap = reload::next_snapshot(&old, config, &mut report)?;
        // The running values of restart-only settings stay in the snapshot, which
        // tells what is in force.
        {
            let cfg = Arc::make_mut(&mut snap.config);
            cfg.global.workers = was.workers;
            cfg.global.max_connections = was.max_connections;
            cfg.global.max_connections_set = was.max_connections_set;
            cfg.admin = admin;
        }

        // Listeners: keep those the new config still has, bind the new ones.
        let wanted = bind_keys(&snap.config);
        let mut opened = Vec::new();
        for key in wanted.iter().filter(|k| !ctl.listeners.iter().any(|b| &b.key == *k)) {
            let bind_err = |error| ReloadError::Bind { frontend: key.0.clone(), addr: key.1, error };
            // An address this process listens on already (a bind moved to
            // another frontend, `defer_accept` changed) is rebound beside the
            // running sockets, which close after the swap; any other must be free.
            if !ctl.listeners.iter().any(|b| binds_overlap(b.actual, key.1)) {
                refuse_if_in_use(key.1).map_err(bind_err)?;
            }
            let (actual, socks) = bind_all(&key.1, key.2, ctl.cmds.len(), Vec::new()).map_err(bind_err)?;
            opened.push((Bound { key: key.clone(), actual }, socks));
        }
        // Health checks of the new set of servers; new ones are checked before the swap.
        let health = Checker::start(&snap.backends).map_err(ReloadError::Runtime)?;

        // Nothing can fail from here on.
        for fe in &snap.config.frontends {
            if !old.config.frontends.iter().any(|f| f.name == fe.name) {
                report.frontends_added.push(fe.name.clone());
            }
        }
        for fe in &old.config.frontends {
            if !snap.config.frontends.iter().any(|f| f.name == fe.name) {
                report.frontends_removed.push(fe.name.clone());
            }
        }
        for (bound, socks) in opened {
            for (tx, listener) in ctl.cmds.iter().zip(socks) {
                let _ = tx.send(Cmd::Listen { key: bound.key.clone(), listener });
            }
            report.binds_added.push((bound.key.0.clone(), bound.actual));
            ctl.listeners.push(bound);
        }
        self.snap.store(Arc::new(snap));
        let old_health = std::mem::replace(&mut ctl.health, health);
        let (kept, gone): (Vec<Bound>, Vec<Bound>) =
            std::mem::take(&mut ctl.listeners).into_iter().partition(|b| wanted.contains(&b.key));
        let mut acks = Vec::new();
        for bound in &gone {
            for tx in &ctl.cmds {
                let (done, ack) = std::sync::mpsc::channel();
                if tx.send(Cmd::Close { key: bound.key.clone(), done }).is_ok() {
                    acks.push(ack);
                }
            }
            report.binds_removed.push((bound.key.0.clone(), bound.actual));
        }
        for ack in acks {
            let _ = ack.recv_timeout(CLOSE_WAIT);
        }
        report.binds_kept = kept.len() - report.binds_added.len();
        // In the order of the new config.
        let mut kept = kept;
        kept.sort_by_key(|b| wanted.iter().position(|k| k == &b.key));
        ctl.listeners = kept;
        Ok((report, old_health))
    }
}

/// Every listener `config` asks for, in order, each once.
/// HTTP/3 (session/h3conn.rs): the QUIC endpoint of every `h3` bind, on the
/// UDP port of the bind's TCP listener (`listeners`, the port the system chose
/// for port 0), served on a thread of its own, `tollgate-h3`. The UDP sockets
/// are bound here, so that a port taken fails the start.
fn start_h3(
    snap: &Arc<ArcSwap<Snapshot>>,
    listeners: &[Bound],
    permits: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    fast: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, StartError> {
    let current = snap.load_full();
    let mut endpoints = Vec::new();
    for (fi, fe) in current.config.frontends.iter().enumerate() {
        for bind in fe.binds.iter().filter(|b| b.h3) {
            let fail = |error| StartError::Bind { frontend: fe.name.clone(), addr: bind.addr, error };
            let actual =
                listeners.iter().find(|l| l.key.0 == fe.name && l.key.1 == bind.addr).map_or(bind.addr, |l| l.actual);
            let tls =
                current.tls_endpoint(fi, bind.addr).ok_or_else(|| StartError::Tls(format!("{actual}: no TLS")))?;
            let cfg = crate::session::h3conn::quic_config(tls, fe)
                .map_err(|e| StartError::Tls(format!("frontend `{}`, HTTP/3 on {actual}: {e}", fe.name)))?;
            let udp = reuseport_udp(actual).map_err(fail)?;
            endpoints.push(((fe.name.clone(), bind.addr), actual, udp, cfg));
        }
    }
    if endpoints.is_empty() {
        return Ok(None);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(StartError::Runtime)?;
    let snap = snap.clone();
    let h = std::thread::Builder::new()
        .name("tollgate-h3".into())
        .spawn(move || {
            rt.block_on(async move {
                // The thread's own upstream pool (thread-local), swept as a worker's.
                let sweep = tokio::spawn(pool_sweep(snap.clone()));
                let mut served = tokio::task::JoinSet::new();
                for (key, actual, udp, cfg) in endpoints {
                    let runtime = Arc::new(quinn::TokioRuntime);
                    match quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(cfg), udp, runtime) {
                        Ok(ep) => {
                            let serve = crate::session::h3conn::serve(
                                ep,
                                snap.clone(),
                                key,
                                actual,
                                permits.clone(),
                                stop.clone(),
                            );
                            served.spawn(serve);
                        }
                        Err(e) => tracing::error!("HTTP/3 on {actual}: {e}"),
                    }
                }
                let mut fast = fast;
                tokio::select! {
                    _ = async { while served.join_next().await.is_some() {} } => {}
                    _ = async { while !*fast.borrow() { if fast.changed().await.is_err() { break } } } => {
                        served.abort_all();
                    }
                }
                sweep.abort();
            })
        })
        .map_err(StartError::Runtime)?;
    Ok(Some(h))
}

/// The `h3` binds of `config`: frontend name and address.
fn h3_binds(config: &Config) -> Vec<(String, SocketAddr)> {
    let binds = config.frontends.iter().flat_map(|f| f.binds.iter().map(move |b| (f, b)));
    binds.filter(|(_, b)| b.h3).map(|(f, b)| (f.name.clone(), b.addr)).collect()
}

/// A UDP socket for QUIC on `addr`, with SO_REUSEPORT: a hot binary upgrade's
/// new process binds it while the old one still holds it (HTTP/3 connections
/// are not handed over: their clients connect again).
fn reuseport_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

fn bind_keys(config: &Config) -> Vec<BindKey> {
    let mut keys: Vec<BindKey> = Vec::new();
    for fe in &config.frontends {
        for bind in &fe.binds {
            let key = (fe.name.clone(), bind.addr, bind.defer_accept);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// Binds `addr` once per worker: the first socket learns the real port (for port
/// 0), the others bind that port. Sockets `taken` over from another process
/// count first (all of them are kept: closing one would drop the connections
/// in its accept queue).
fn bind_all(
    addr: &SocketAddr,
    defer_accept: bool,
    workers: usize,
    taken: Vec<std::net::TcpListener>,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    let mut socks = taken;
    if socks.is_empty() {
        socks.push(reuseport_listener(*addr, defer_accept)?);
    }
    for s in &socks {
        s.set_nonblocking(true)?;
    }
    let actual = socks[0].local_addr()?;
    while socks.len() < workers {
        socks.push(reuseport_listener(actual, defer_accept)?);
    }
    Ok((actual, socks))
}

/// Fails with `AddrInUse` when another socket listens on `addr` (or on an
/// address that overlaps it), so that a second `tollgate run` on the same
/// address does not start.
///
/// Every listener sets SO_REUSEPORT (one socket per worker), and the kernel
/// lets any process of the same user join such a group: a second instance
/// would bind without an error and silently take half the connections. So
/// before binding, a plain socket without SO_REUSEPORT binds the address and
/// is closed at once. The kernel refuses that bind while any socket listens
/// there, whoever owns it, on the very address or on a wildcard covering it;
/// SO_REUSEADDR on the probe lets sockets of a previous run in TIME_WAIT
/// through, as for the listeners themselves. Nothing is parsed (unlike
/// /proc/net/tcp, which also misses other network namespaces' views and
/// races the same way), and the answer is the kernel's own rule for
/// conflicting binds. What it leaves open: two instances started within
/// microseconds of each other can both pass before either listens.
///
/// Port 0 is not probed: the kernel picks a port no listener has, reuseport
/// or not. Within the process, the caller skips addresses its own listeners
/// hold (a reload rebinding one); its SO_REUSEPORT sockets per worker are
/// bound after the probe, so they never meet it. Nor is an address probed
/// whose sockets a new process takes over from the one it replaces (a hot
/// binary upgrade, [`Server::start_inheriting`]): that one listens there.
fn refuse_if_in_use(addr: SocketAddr) -> std::io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    probe.set_reuse_address(true)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

fn reuseport_listener(addr: SocketAddr, defer_accept: bool) -> std::io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    // Accepted sockets inherit TCP_NODELAY: no setsockopt per connection.
    sock.set_tcp_nodelay(true)?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    // Delayed ACKs from the first byte (after listen, which resets it; accepted
    // sockets inherit it), as HAProxy's tcp-smart-accept: a request's ACK rides
    // on the response instead of going out alone the moment the request lands,
    // one packet fewer per connection. The kernel drops back to quick ACKs by
    // itself the first time the delayed-ACK timer fires, so a client that
    // talks first and waits for an ACK loses at most one delayed ACK.
    sock.set_tcp_quickack(false)?;
    // Connections handed over with their first bytes (`defer_accept`, HTTP
    // listeners by default): an accept and the first read in one wake-up
    // instead of two, and a client that connects and stays silent costs no
    // accept, task or buffer. A client still silent after DEFER_ACCEPT_SECS
    // is handed over as it is.
    if defer_accept {
        crate::io::sockopt::set_defer_accept(&sock, DEFER_ACCEPT_SECS)?;
    }
    Ok(sock.into())
}

/// The connections a worker has open, so that a stop can wait for them.
#[derive(Default)]
struct Live {
    count: AtomicUsize,
    gone: Notify,
}

/// Held by a connection's task; the last one out wakes the stopping worker.
struct LiveGuard(Arc<Live>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.gone.notify_waiters();
        }
    }
}

/// What every accept loop of a worker shares.
#[derive(Clone)]
struct AcceptCtx {
    snap: Arc<ArcSwap<Snapshot>>,
    stop: watch::Receiver<bool>,
    /// A fast stop: no grace period ([`Server::stop_fast`]).
    fast: watch::Receiver<bool>,
    permits: Arc<Semaphore>,
    live: Arc<Live>,
    /// Rung by an accept loop that finds every slot held with a client
    /// waiting: each worker takes one of its waiting connections back
    /// (io/reclaim.rs).
    reclaim: Arc<Notify>,
}

/// A worker's open listeners: how to close each, and its accept loop (more
/// than one for a bind only with sockets taken over from another process).
type Loops = HashMap<BindKey, Vec<Loop>>;

struct Loop {
    close: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    /// The listener the loop accepts on (shared with its task, closed when
    /// both are done), for [`Cmd::Share`].
    listener: Arc<AsyncFd<std::net::TcpListener>>,
}

async fn worker(
    initial: Vec<(BindKey, std::net::TcpListener)>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    ctx: AcceptCtx,
) {
    tokio::spawn(timer_floor());
    tokio::spawn(pool_sweep(ctx.snap.clone()));
    tokio::spawn(crate::io::reclaim::serve(ctx.reclaim.clone()));
    let snap = ctx.snap.clone();
    tokio::spawn(idle_poll::run(move || snap.load().config.global.idle_poll));
    let mut loops = Loops::new();
    for (key, l) in initial {
        add(&mut loops, key, l, &ctx);
    }
    let mut stop = ctx.stop.clone();
    loop {
        if *stop.borrow() {
            break;
        }
        tokio::select! {
            r = stop.changed() => if r.is_err() { break },
            cmd = cmds.recv() => match cmd {
                Some(Cmd::Listen { key, listener }) => open(&mut loops, key, listener, &ctx).await,
                Some(Cmd::Close { key, done }) => {
                    close(&mut loops, &key).await;
                    let _ = done.send(());
                }
                Some(Cmd::Share { done }) => {
                    let all = loops.iter().flat_map(|(key, ls)| ls.iter().map(move |l| (key.1, &l.listener)));
                    let copies = all.filter_map(|(addr, l)| Some((addr, l.get_ref().try_clone().ok()?)));
                    let _ = done.send(copies.collect());
                }
                Some(Cmd::Kill(server)) => {
                    crate::lb::shutdown::fire(server);
                }
                // The server is gone: its drop has set `stop`.
                None => {
                    let _ = stop.wait_for(|s| *s).await;
                    break;
                }
            },
        }
    }
    for l in loops.into_values().flatten() {
        let _ = l.task.await;
    }
    // Every accept loop has ended: wait for the connections still open.
    let live = &ctx.live;
    let drained = async {
        loop {
            let gone = live.gone.notified();
            if live.count.load(Ordering::Acquire) == 0 {
                return;
            }
            gone.await;
        }
    };
    let grace = ctx.snap.load().config.global.grace_period;
    let mut fast = ctx.fast.clone();
    // While the connections finish, `shutdown sessions` still ends those of a server.
    let kills = async {
        while let Some(cmd) = cmds.recv().await {
            if let Cmd::Kill(server) = cmd {
                crate::lb::shutdown::fire(server);
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        drained = tokio::time::timeout(grace, drained) => if drained.is_err() {
            tracing::warn!("grace period over: closing the connections still open");
        },
        _ = fast.wait_for(|f| *f) => {}
        _ = kills => {}
    }
}

/// Every [`upstream::SWEEP_EVERY`], closes the worker's upstream connections
/// that can no longer be used: idle ones past their keep-alive time, and any to
/// a server the current snapshot does not have ([`upstream::sweep`]).
async fn pool_sweep(snap: Arc<ArcSwap<Snapshot>>) {
    let mut tick = tokio::time::interval(upstream::SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let snap = snap.load();
        let servers = snap.config.backends.iter().flat_map(|b| &b.servers);
        let forwarding = snap.config.backends.iter().any(|b| b.forward.is_some());
        upstream::sweep(&servers.map(|s| (s.addr, s.transport_key())).collect(), forwarding);
    }
}

/// Keeps a timer due within [`TIMER_FLOOR`] on the worker's runtime, for as
/// long as the runtime lives. Tokio's timer wakes its I/O driver (a write to an
/// eventfd, and an `epoll_wait` that returns at once) whenever a timer is
/// registered with a deadline earlier than the one the driver last parked for,
/// even on a current-thread runtime whose driver is not parked but running the
/// registering task (tokio-rs/tokio#5207). Without this, every exchange that
/// waits for a response registers `timeout.server` (50 s) while the other timers
/// are keep-alive waits (60 s): 0.16 such wake-ups per request at 811 B / 50
/// keep-alive connections (docs/architecture.md, data path). With a timer always
/// due within a second, the timeouts the data path sets are never the earliest.
async fn timer_floor() {
    let mut tick = tokio::time::interval(TIMER_FLOOR);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

/// Starts accepting on `l` (replacing a listener of the same key, if any).
async fn open(loops: &mut Loops, key: BindKey, l: std::net::TcpListener, ctx: &AcceptCtx) {
    close(loops, &key).await;
    add(loops, key, l, ctx);
}

/// Starts an accept loop on `l` for `key`, beside any the bind has.
fn add(loops: &mut Loops, key: BindKey, l: std::net::TcpListener, ctx: &AcceptCtx) {
    // `with_interest` is deprecated for types whose descriptor may change or
    // close under the AsyncFd; a std TcpListener owns its descriptor until it
    // is dropped with the AsyncFd, which is what the unsafe replacement asks.
    #[allow(deprecated)]
    let listener = match AsyncFd::with_interest(l, Interest::READABLE) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            tracing::error!("cannot register listener: {e}");
            return;
        }
    };
    let (close, rx) = oneshot::channel();
    let task = tokio::spawn(accept_loop(listener.clone(), key.clone(), rx, ctx.clone()));
    loops.entry(key).or_default().push(Loop { close, task, listener });
}

/// Stops the accept loops of `key` and waits until their listeners are closed.
async fn close(loops: &mut Loops, key: &BindKey) {
    for l in loops.remove(key).unwrap_or_default() {
        let _ = l.close.send(());
        let _ = l.task.await;
    }
}

/// Accepts connections for the bind `key` (frontend name, configured address)
/// until the server stops or the listener is closed by a reload. Each connection
/// is served with the snapshot current when it is accepted: its frontend is found
/// there by name, and on a TLS bind the TLS endpoint (certificates) of that
/// snapshot. The PROXY header and the TLS handshake are read in the
/// connection's own task, bounded by the frontend's `timeout.http_request`
/// (`timeout.client` in tcp mode).
async fn accept_loop(
    listener: Arc<AsyncFd<std::net::TcpListener>>,
    key: BindKey,
    mut close: oneshot::Receiver<()>,
    ctx: AcceptCtx,
) {
    let (frontend, addr, _) = key;
    let AcceptCtx { snap, mut stop, permits, live, reclaim, .. } = ctx;
    // The port a client connected to is the listener's: no getsockname per connection.
    let local_port = listener.get_ref().local_addr().map_or(0, |a| a.port());
    loop {
        if *stop.borrow() {
            return;
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return,
            // At `max_connections`: once a client waits in the backlog, the
            // workers take back a connection that only waits on its client
            // (io/reclaim.rs), then the first slot free is this one's.
            Err(TryAcquireError::NoPermits) => loop {
                let mut ready = tokio::select! {
                    _ = stop.changed() => return,
                    _ = &mut close => return,
                    r = listener.readable() => match r { Ok(g) => g, Err(_) => return },
                };
                // The readiness may be left from the last accept: ask the
                // socket whether a connection really waits.
                if !backlog_waiting(ready.get_inner()) {
                    ready.clear_ready();
                    continue;
                }
                drop(ready);
                reclaim.notify_waiters();
                // Nothing to take back yet (every waiting head within its
                // grace): again in a moment while the client still waits.
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = &mut close => return,
                    p = permits.clone().acquire_owned() => match p { Ok(p) => break p, Err(_) => return },
                    _ = tokio::time::sleep(RECLAIM_RETRY) => {}
                }
            },
        };
        let (stream, peer) = tokio::select! {
            _ = stop.changed() => return,
            _ = &mut close => return,
            r = accept(&listener) => match r {
                Ok(x) => x,
                Err(e) => {
                    let Some(pause) = accept_pause(&e) else { continue };
                    static WARN: Throttle = Throttle::new();
                    if let Some(held) = WARN.ready() {
                        tracing::warn!(
                            "accept on {addr} failed: {}; pausing accepts for {} ms, connections \
                             open are served ({held} more since the last such message)",
                            Shortage::of(&e).map_or_else(|| e.to_string(), |s| s.to_string()),
                            pause.as_millis()
                        );
                    }
                    // Out of descriptors: the connection stays in the backlog
                    // and the listener readable; retrying at once would spin.
                    // The permit goes back meanwhile.
                    drop(permit);
                    tokio::select! {
                        _ = stop.changed() => return,
                        _ = &mut close => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    continue;
                }
            },
        };
        let current = snap.load_full();
        // A reload removed this frontend and is about to close this listener.
        let Some(fi) = current.config.frontends.iter().position(|f| f.name == frontend) else { continue };
        live.count.fetch_add(1, Ordering::AcqRel);
        let guard = LiveGuard(live.clone());
        let tls = current.tls_endpoint(fi, addr).cloned();
        let bind = current.config.frontends[fi].binds.iter().find(|b| b.addr == addr);
        let (accept_proxy, h2c) = bind.map_or((false, false), |b| (b.accept_proxy, b.h2c));
        let stop = stop.clone();
        tokio::spawn(idle_poll::counted(async move {
            let _permit = permit;
            let _guard = guard;
            let mut stream = stream;
            // PROXY protocol: the header's addresses stand for the client's.
            let (peer, local_port, dst) = if accept_proxy {
                let fe = &current.config.frontends[fi];
                let why = match tokio::time::timeout(fe.handshake_timeout(), read_header(&mut stream)).await {
                    Ok(Ok(h)) => match h.addrs {
                        Some((src, dst)) => Ok((src, dst.port(), Some(dst))),
                        None => Ok((peer, local_port, None)),
                    },
                    Ok(Err(why)) => Err(why),
                    Err(_) => Err("proxy-header-timeout"),
                };
                match why {
                    Ok(x) => x,
                    Err(why) => {
                        tracing::info!(client = %peer, frontend = %fe.name, "connection refused: no valid PROXY header ({why})");
                        current.frontend_stats[fi].request_errors.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            } else {
                (peer, local_port, None)
            };
            // Counted in the frontend's `src` tables, and its connection rules.
            let fe = &current.config.frontends[fi];
            let _tracked = match track::admit(&current.tables, fe, canonical_ip(peer.ip())) {
                Admit::Go(t) => t,
                refused => {
                    current.frontend_stats[fi].denied_connections.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(client = %peer, frontend = %fe.name, "connection refused by a connection rule");
                    if let (Admit::SilentDrop, Some(fd)) = (refused, stream.fd()) {
                        crate::io::sockopt::silent_close(fd);
                    }
                    return;
                }
            };
            serve_connection(current, fi, stream, tls, h2c, (peer, local_port, dst), stop).await;
        }));
    }
}

/// How often an accept loop at `max_connections` with a client waiting asks
/// again for a connection to be taken back (io/reclaim.rs).
const RECLAIM_RETRY: Duration = Duration::from_millis(250);

/// Whether a connection waits in `l`'s accept queue (a poll that does not wait).
fn backlog_waiting(l: &std::net::TcpListener) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(l, PollFlags::IN)];
    let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
    poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
}

/// How long accepts pause after `accept` failed with `e`: `None` to go on at
/// once, for an error that belonged to the connection being accepted (it is
/// gone from the queue: the client reset, a firewall refused it, a network
/// error passed on, as accept(2) says to treat like EAGAIN); else
/// [`ACCEPT_PAUSE`]: out of descriptors or memory (limits.rs), the
/// connection waits in the queue, and trying again at once would find the
/// same shortage and spin; other errors are unexpected, and a pause bounds
/// their log.
fn accept_pause(e: &std::io::Error) -> Option<Duration> {
    if Shortage::of(e).is_some() {
        return Some(ACCEPT_PAUSE);
    }
    match e.raw_os_error() {
        Some(
            libc::ECONNABORTED
            | libc::EINTR
            | libc::EPERM
            | libc::EPROTO
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::EHOSTUNREACH
            | libc::EOPNOTSUPP
            | libc::ENETUNREACH,
        ) => None,
        _ => Some(ACCEPT_PAUSE),
    }
}

/// Accepts one connection, leaving it unregistered with the reactor until it
/// has to wait (lazy_tcp.rs).
async fn accept(listener: &AsyncFd<std::net::TcpListener>) -> std::io::Result<(LazyTcp, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        if let Ok(r) = ready.try_io(|l| lazy_tcp::accept(l.get_ref())) {
            return r;
        }
    }
}

/// Serves one accepted connection: on a tcp frontend, a tcp session (tcp.rs);
/// else the TLS handshake on a TLS bind, then HTTP/2 when ALPN chose `h2`
/// (or, on a plain bind with `h2c`, when the client starts with the HTTP/2
/// preface), else HTTP/1.1. `ends` is the client's
/// address, the port it reached and, when a PROXY header said it, the address
/// it reached.
async fn serve_connection(
    snap: Arc<Snapshot>,
    fi: usize,
    mut tcp: LazyTcp,
    tls: Option<Arc<crate::net::tls::TlsEndpoint>>,
    h2c: bool,
    ends: (SocketAddr, u16, Option<SocketAddr>),
    stop: watch::Receiver<bool>,
) {
    let (peer, local_port, dst) = ends;
    // A tcp-mode relay and a TLS handshake wait from the start: their socket
    // is registered at once.
    let registered = |tcp: LazyTcp| match tcp.registered() {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(client = %peer, "cannot register the connection: {e}");
            None
        }
    };
    if snap.config.frontends[fi].mode == Mode::Tcp {
        let Some(tcp) = registered(tcp) else { return };
        return crate::session::tcp::serve(snap, fi, tcp, tls, ends).await;
    }
    let limit = snap.config.frontends[fi].timeouts.http_request;
    let (stream, info, read) = match tls {
        Some(endpoint) => {
            let Some(tcp) = registered(tcp) else { return };
            // A handshake waits on the client: its slot may be taken back.
            let slot = Registration::new(Wait::Head, std::time::Instant::now());
            let handshake = ClientStream::accept(&endpoint, tcp, limit);
            let done = tokio::select! {
                done = handshake => done,
                _ = slot.taken() => None,
            };
            match done {
                Some((s, info)) => (s, Some(info), None),
                None => return,
            }
        }
        // On h2c, one `timeout.http_request` from here covers telling HTTP/2
        // from HTTP/1.1 and the request head: HTTP/2's preface and first
        // request by then, HTTP/1.1's head within it of its first byte, read
        // while sniffing.
        None if h2c => {
            let head_by = tokio::time::Instant::now() + limit;
            match h2conn::sniff(&mut tcp, head_by).await {
                h2conn::Sniffed::H2(preface) => {
                    let io = h2conn::H2Io::new(ClientStream::Plain(tcp), preface);
                    return h2conn::serve(snap, fi, io, None, ends, head_by, stop).await;
                }
                h2conn::Sniffed::H1(read, first_byte) => (ClientStream::Plain(tcp), None, Some((read, first_byte))),
                h2conn::Sniffed::Neither => return,
            }
        }
        None => (ClientStream::Plain(tcp), None, None),
    };
    if stream.alpn_h2() {
        let io = h2conn::H2Io::new(stream, Vec::new());
        let head_by = tokio::time::Instant::now() + limit;
        return h2conn::serve(snap, fi, io, info, ends, head_by, stop).await;
    }
    let conn = Conn::new(snap, fi, stream, info, peer, local_port, stop).with_destination(dst);
    match read {
        Some((bytes, first_byte)) => conn.with_bytes(&bytes, first_byte).serve().await,
        None => conn.serve().await,
    }
}

/// What the config allows but should not go unnoticed (`verify = "none"`).
impl super::dns::Running for Core {
    fn snapshot(&self) -> Arc<Snapshot> {
        Core::snapshot(self)
    }

    fn amend(
        &self,
        f: &mut dyn FnMut(&mut Config) -> Vec<super::dns::Change>,
    ) -> Result<Vec<super::dns::Change>, ReloadError> {
        let changed = |cfg: &mut Config| {
            let changes = f(cfg);
            if changes.is_empty() { Err(()) } else { Ok(changes) }
        };
        Core::amend(self, changed).map(Result::unwrap_or_default)
    }
}

impl super::etcd::Cluster for Core {
    fn snapshot(&self) -> Arc<Snapshot> {
        Core::snapshot(self)
    }

    fn etcd(&self) -> &super::etcd::Shared {
        &self.etcd
    }

    fn reload_with(self: Arc<Self>, config: Config) -> Result<ReloadReport, ReloadError> {
        self.reload_now(config)
    }
}

/// Some server of `config` is written as a name its backend follows, or
/// some backend discovers its servers.
fn has_names(config: &Config) -> bool {
    config
        .backends
        .iter()
        .any(|b| b.discover.is_some() || b.resolve_every.is_some() && b.servers.iter().any(|s| s.dns.is_some()))
}

fn log_warnings(config: &Config) {
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the listener sets, every accepted socket has from its first byte.
    #[test]
    fn accepted_sockets_inherit_nodelay_and_delayed_acks() {
        let l = reuseport_listener("127.0.0.1:0".parse().unwrap(), false).unwrap();
        l.set_nonblocking(false).unwrap();
        let _client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        let sock = socket2::SockRef::from(&accepted);
        assert!(sock.tcp_nodelay().unwrap());
        assert!(!sock.tcp_quickack().unwrap());
    }

    /// Out of descriptors or memory: pause (the connection waits in the
    /// queue). An error of the connection being accepted: go on at once.
    #[test]
    fn accepts_pause_on_shortages_only() {
        let os = std::io::Error::from_raw_os_error;
        for short in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert_eq!(accept_pause(&os(short)), Some(ACCEPT_PAUSE), "{short}");
        }
        for gone in [libc::ECONNABORTED, libc::EPERM, libc::EPROTO, libc::EINTR, libc::ENETUNREACH] {
            assert_eq!(accept_pause(&os(gone)), None, "{gone}");
        }
        assert_eq!(accept_pause(&std::io::Error::other("?")), Some(ACCEPT_PAUSE));
    }

    /// The probe finds a listener of anyone on the address, SO_REUSEPORT or
    /// not, or on the wildcard covering it; a free address, or port 0, passes.
    #[test]
    fn the_probe_finds_listeners_on_the_address() {
        let theirs = reuseport_listener("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let addr = theirs.local_addr().unwrap();
        assert_eq!(refuse_if_in_use(addr).unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
        // Our own workers' sockets still bind beside it (the probe is not one of them).
        let (actual, socks) = bind_all(&addr, false, 3, Vec::new()).unwrap();
        assert_eq!((actual, socks.len()), (addr, 3));
        drop((theirs, socks));
        assert!(refuse_if_in_use(addr).is_ok(), "free again");
        assert!(refuse_if_in_use("127.0.0.1:0".parse().unwrap()).is_ok());

        let plain = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = plain.local_addr().unwrap().port();
        let under_wildcard = SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(refuse_if_in_use(under_wildcard).unwrap_err().kind(), std::io::ErrorKind::AddrInUse);

        assert!(binds_overlap(under_wildcard, SocketAddr::from(([0, 0, 0, 0], port))));
        assert!(!binds_overlap(under_wildcard, SocketAddr::from(([127, 0, 0, 2], port))));
        assert!(!binds_overlap(under_wildcard, SocketAddr::from(([127, 0, 0, 1], port.wrapping_add(1)))));
        assert!(!binds_overlap(under_wildcard, format!("[::]:{port}").parse().unwrap()));
    }

    /// Sockets taken over count first: as many as there are are kept (more
    /// than the workers, all of them), and more are bound to make up one per
    /// worker, on their port.
    #[test]
    fn sockets_taken_over_are_kept_and_made_up_to_one_per_worker() {
        let first = reuseport_listener("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let addr = first.local_addr().unwrap();
        let second = reuseport_listener(addr, false).unwrap();
        let (actual, socks) = bind_all(&"127.0.0.1:0".parse().unwrap(), false, 4, vec![first, second]).unwrap();
        assert_eq!((actual, socks.len()), (addr, 4));
        assert!(socks.iter().all(|s| s.local_addr().unwrap() == addr));
        let taken: Vec<_> = (0..3).map(|_| reuseport_listener(addr, false).unwrap()).collect();
        let (_, kept) = bind_all(&addr, false, 2, taken).unwrap();
        assert_eq!(kept.len(), 3, "none closed: each may hold connections in its queue");
    }

    /// With `defer_accept` a connection is handed over once its first bytes
    /// are in: one that connected earlier but stays silent comes after one
    /// that spoke (without it, the accept queue is first come, first served),
    /// and is still handed over, bytes or not, after DEFER_ACCEPT_SECS.
    #[test]
    fn deferred_accepts_hand_over_connections_that_spoke_first() {
        use std::io::Write;
        for defer in [true, false] {
            let l = reuseport_listener("127.0.0.1:0".parse().unwrap(), defer).unwrap();
            let l = socket2::Socket::from(l);
            l.set_nonblocking(false).unwrap();
            l.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
            let addr = l.local_addr().unwrap().as_socket().unwrap();
            let silent = std::net::TcpStream::connect(addr).unwrap();
            let mut talker = std::net::TcpStream::connect(addr).unwrap();
            talker.write_all(b"GET / HTTP/1.1\r\n").unwrap();
            let first = l.accept().unwrap().1.as_socket().unwrap();
            let second = l.accept().unwrap().1.as_socket().unwrap();
            let (want_first, want_second) = if defer { (&talker, &silent) } else { (&silent, &talker) };
            assert_eq!(first, want_first.local_addr().unwrap(), "defer_accept {defer}");
            assert_eq!(second, want_second.local_addr().unwrap(), "defer_accept {defer}");
        }
    }

    /// The floor keeps a timer due within TIMER_FLOOR for as long as the runtime
    /// lives: a runtime waiting for a 20 s timer wakes once per floor tick (on
    /// paused time, each wake-up jumps to the next timer due), so no timer the
    /// data path registers is ever the earliest and none wakes the I/O driver.
    #[test]
    fn timer_floor_keeps_a_timer_due_within_the_floor() {
        let parks = |floor: bool| {
            let count = Arc::new(AtomicUsize::new(0));
            let counted = count.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .on_thread_park(move || {
                    counted.fetch_add(1, Ordering::Relaxed);
                })
                .build()
                .unwrap();
            rt.block_on(async {
                if floor {
                    tokio::spawn(timer_floor());
                }
                tokio::time::sleep(Duration::from_secs(20)).await;
            });
            count.load(Ordering::Relaxed)
        };
        let (without, with) = (parks(false), parks(true));
        assert!(without <= 5, "{without} parks without the floor");
        assert!(with >= 20, "{with} parks with the floor: a timer due every {TIMER_FLOOR:?}");
    }
}
