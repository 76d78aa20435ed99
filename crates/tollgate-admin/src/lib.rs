//! Tollgate's admin interfaces, built on the proxy's [`Control`] (read the
//! statistics, set a server's state or weight, reload the config) and started
//! by the binary beside the server; they run on a thread of their own, away
//! from the workers:
//! - the admin HTTP listener ([`http`]): JSON API, stats page, Prometheus metrics;
//! - the command socket ([`socket`], language in [`cli`]): HAProxy's runtime API;
//! - a once-a-second tick that updates the rates ([`tollgate_proxy::runtime::report::tick`]).
//!
//! docs/admin.md documents what they offer.

#![forbid(unsafe_code)]

pub mod cache;
pub mod cli;
mod cli_servers;
mod guard;
pub mod http;
mod http_servers;
pub mod metrics;
pub mod page;
mod reply;
pub mod socket;

pub use tollgate_proxy::runtime::control::{Control, ControlError, CounterTableView, NewServer, ServerChange};

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The admin thread, and what it listens on.
pub struct AdminHandle {
    pub http_addr: Option<SocketAddr>,
    /// The TCP command sockets' addresses (the real ports for port 0).
    pub socket_addrs: Vec<SocketAddr>,
    /// A new descriptor of the HTTP listener, for a new process to take over
    /// ([`AdminHandle::share_http`]).
    http_share: Option<std::net::TcpListener>,
    thread: JoinHandle<()>,
}

impl AdminHandle {
    pub fn join(self) {
        let _ = self.thread.join();
    }

    /// A new descriptor of the admin HTTP listener, if there is one, for a
    /// new process to take over (a hot binary upgrade).
    pub fn share_http(&self) -> Option<std::net::TcpListener> {
        self.http_share.as_ref().and_then(|l| l.try_clone().ok())
    }
}

/// What an admin interface takes over from the process it replaces (a hot
/// binary upgrade): the HTTP listener's socket, and the command socket's path
/// (where the old process's socket still listens until it stops).
#[derive(Default)]
pub struct TakeOver {
    pub http: Option<std::net::TcpListener>,
    pub socket: bool,
}

/// Opens the admin interfaces `cfg` asks for and starts their thread. Errors
/// (an address in use, ...) come back at once, before anything runs.
pub fn start(cfg: &tollgate_config::Admin, control: Control) -> std::io::Result<AdminHandle> {
    start_taking_over(cfg, control, TakeOver::default())
}

/// [`start`], taking over what `taken` holds: the HTTP listener's socket
/// (when it is on the configured address) and the command socket's path.
pub fn start_taking_over(
    cfg: &tollgate_config::Admin,
    control: Control,
    taken: TakeOver,
) -> std::io::Result<AdminHandle> {
    let inherited =
        taken.http.filter(|l| cfg.bind.is_some_and(|a| l.local_addr().is_ok_and(|b| a == b || a.port() == 0)));
    let http = match (cfg.bind, inherited) {
        (Some(_), Some(l)) => {
            l.set_nonblocking(true)?;
            Some(l)
        }
        (Some(addr), None) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            l.set_nonblocking(true)?;
            Some(l)
        }
        (None, _) => None,
    };
    let http_addr = http.as_ref().map(|l| l.local_addr()).transpose()?;
    let http_share = http.as_ref().map(|l| l.try_clone()).transpose()?;
    let sockets = cfg.sockets.iter().map(|s| socket::bind(s, taken.socket)).collect::<std::io::Result<Vec<_>>>()?;
    let socket_addrs = sockets.iter().filter_map(socket::Bound::tcp_addr).collect();
    let stop = control.stop_signal().ok_or_else(|| std::io::Error::other("the server is stopping"))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let thread = std::thread::Builder::new().name("tollgate-admin".into()).spawn(move || {
        rt.block_on(async move {
            let mut tasks = tokio::task::JoinSet::new();
            tasks.spawn(ticker(control.clone(), stop.clone()));
            if let (Some(l), Some(addr)) = (http, http_addr) {
                match tokio::net::TcpListener::from_std(l) {
                    Ok(l) => {
                        tasks.spawn(http::serve(l, addr, control.clone(), stop.clone()));
                    }
                    Err(e) => tracing::error!("admin: cannot register the listener: {e}"),
                }
            }
            for s in sockets {
                tasks.spawn(socket::serve(s, control.clone(), stop.clone()));
            }
            while tasks.join_next().await.is_some() {}
        })
    })?;
    Ok(AdminHandle { http_addr, socket_addrs, http_share, thread })
}

/// Resolves once the server stops (or is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Updates the rates once a second until the server stops.
async fn ticker(control: Control, mut stop: watch::Receiver<bool>) {
    let mut every =
        tokio::time::interval_at(tokio::time::Instant::now() + Duration::from_secs(1), Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stopped(&mut stop) => return,
        }
        let Ok(snap) = control.snapshot() else { return };
        let now = Instant::now();
        tollgate_proxy::runtime::report::tick(&snap, now - last);
        last = now;
    }
}
