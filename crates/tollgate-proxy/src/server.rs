//! Listeners, workers and the server's lifecycle.
//!
//! One worker thread per core (`global.workers`), each running a single-threaded
//! tokio runtime with its own SO_REUSEPORT listener for every bind address, so the
//! kernel spreads connections over workers and a connection never changes thread.
//! Each worker keeps its own upstream pool (see pool.rs). docs/architecture.md
//! explains the choice.
//!
//! Shutdown: listeners close at once; idle connections close, busy ones finish
//! their in-flight request (and say `connection: close`), bounded by
//! `global.grace_period`.

use crate::conn::Conn;
use crate::snapshot::Snapshot;
use arc_swap::ArcSwap;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tollgate_config::Config;

const BACKLOG: i32 = 4096;

#[derive(Debug)]
pub enum StartError {
    Bind { frontend: String, addr: SocketAddr, error: std::io::Error },
    AccessLog(std::io::Error),
    Runtime(std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind { frontend, addr, error } => {
                write!(f, "frontend `{frontend}`: cannot listen on {addr}: {error}")
            }
            StartError::AccessLog(e) => write!(f, "cannot open the access log: {e}"),
            StartError::Runtime(e) => write!(f, "cannot start a worker: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A running proxy. Dropping it stops it (without waiting).
pub struct Server {
    addrs: Vec<(String, SocketAddr)>,
    snap: Arc<ArcSwap<Snapshot>>,
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    health: crate::health::Checker,
}

impl Server {
    /// Binds every frontend and starts the workers.
    pub fn start(config: Config) -> Result<Server, StartError> {
        let workers = match config.global.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let max_conn = config.global.max_connections;
        let grace = config.global.grace_period;
        let snap = Snapshot::new(config).map_err(StartError::AccessLog)?;

        // Bind once to learn the real port (for port 0), then once more per worker.
        let mut addrs = Vec::new();
        let mut per_worker: Vec<Vec<(usize, std::net::TcpListener)>> = (0..workers).map(|_| Vec::new()).collect();
        for (fi, fe) in snap.config.frontends.iter().enumerate() {
            for bind in &fe.binds {
                let bind_err = |error| StartError::Bind { frontend: fe.name.clone(), addr: *bind, error };
                let first = reuseport_listener(*bind).map_err(bind_err)?;
                let actual = first.local_addr().map_err(bind_err)?;
                addrs.push((fe.name.clone(), actual));
                per_worker[0].push((fi, first));
                for w in per_worker.iter_mut().skip(1) {
                    w.push((fi, reuseport_listener(actual).map_err(bind_err)?));
                }
            }
        }

        let snap = Arc::new(ArcSwap::from_pointee(snap));
        // Before any worker accepts: a first round of health checks sets each checked server UP or DOWN.
        let health = crate::health::Checker::start(&snap.load().backends).map_err(StartError::Runtime)?;
        let (stop, stop_rx) = watch::channel(false);
        let permits = Arc::new(Semaphore::new(max_conn));
        let mut handles = Vec::new();
        for (i, listeners) in per_worker.into_iter().enumerate() {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(StartError::Runtime)?;
            let snap = snap.clone();
            let stop_rx = stop_rx.clone();
            let permits = permits.clone();
            let h = std::thread::Builder::new()
                .name(format!("tollgate-w{i}"))
                .spawn(move || rt.block_on(worker(listeners, snap, stop_rx, permits, grace)))
                .map_err(StartError::Runtime)?;
            handles.push(h);
        }
        Ok(Server { addrs, snap, stop, workers: handles, health })
    }

    /// The address a frontend listens on (its first bind), with the real port.
    pub fn addr(&self, frontend: &str) -> Option<SocketAddr> {
        self.addrs.iter().find(|(f, _)| f == frontend).map(|(_, a)| *a)
    }

    pub fn addrs(&self) -> &[(String, SocketAddr)] {
        &self.addrs
    }

    /// The configuration in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snap.load_full()
    }

    /// Stops accepting; workers finish in-flight requests (within the grace period).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        self.health.stop();
    }

    /// Waits for every worker to end.
    pub fn join(mut self) {
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn reuseport_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
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

async fn worker(
    listeners: Vec<(usize, std::net::TcpListener)>,
    snap: Arc<ArcSwap<Snapshot>>,
    stop: watch::Receiver<bool>,
    permits: Arc<Semaphore>,
    grace: std::time::Duration,
) {
    let live = Arc::new(Live::default());
    let mut loops = Vec::new();
    for (fi, l) in listeners {
        let listener = match TcpListener::from_std(l) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("cannot register listener: {e}");
                continue;
            }
        };
        loops.push(tokio::spawn(accept_loop(listener, fi, snap.clone(), stop.clone(), permits.clone(), live.clone())));
    }
    for l in loops {
        let _ = l.await;
    }
    // Every accept loop has ended: wait for the connections still open.
    let drained = async {
        loop {
            let gone = live.gone.notified();
            if live.count.load(Ordering::Acquire) == 0 {
                return;
            }
            gone.await;
        }
    };
    if tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!("grace period over: closing the connections still open");
    }
}

async fn accept_loop(
    listener: TcpListener,
    fi: usize,
    snap: Arc<ArcSwap<Snapshot>>,
    mut stop: watch::Receiver<bool>,
    permits: Arc<Semaphore>,
    live: Arc<Live>,
) {
    // The port a client connected to is the listener's: no getsockname per connection.
    let local_port = listener.local_addr().map_or(0, |a| a.port());
    loop {
        if *stop.borrow() {
            return;
        }
        let permit = tokio::select! {
            _ = stop.changed() => return,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let (stream, peer) = tokio::select! {
            _ = stop.changed() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off briefly rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        live.count.fetch_add(1, Ordering::AcqRel);
        let guard = LiveGuard(live.clone());
        let conn = Conn::new(snap.load_full(), fi, stream, peer, local_port, stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _guard = guard;
            conn.serve().await;
        });
    }
}
