//! A running Tollgate as the binary runs it: the server (tollgate-proxy) and,
//! when the config has `[admin]`, the admin interfaces (tollgate-admin) beside
//! it, on the server's control. The end-to-end tests start it the same way.

use crate::upgrade::{ServerState, Shared};
use std::net::SocketAddr;
use tollgate_admin::{AdminHandle, ServerChange, TakeOver};
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::{Inherited, Server, StartError};

/// The server and its admin interfaces. Dereferences to the server.
pub struct Running {
    server: Server,
    admin: Option<AdminHandle>,
}

/// Why [`start`] failed: the server, or the admin interfaces (the server is
/// stopped again then).
#[derive(Debug)]
pub enum StartFailed {
    Server(StartError),
    Admin(std::io::Error),
}

impl std::fmt::Display for StartFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartFailed::Server(e) => write!(f, "{e}"),
            StartFailed::Admin(e) => write!(f, "admin: {e}"),
        }
    }
}

/// Starts the server with `config`, then its admin interfaces.
pub fn start(config: tollgate_config::Config) -> Result<Running, StartFailed> {
    start_taking_over(config, Inherited::new(), TakeOver::default())
}

/// [`start`], taking over sockets from the process this one replaces (a hot
/// binary upgrade, upgrade.rs): the frontends' listeners and the admin's.
pub fn start_taking_over(
    config: tollgate_config::Config,
    listeners: Inherited,
    admin: TakeOver,
) -> Result<Running, StartFailed> {
    let admin_cfg = config.admin.clone();
    let server = Server::start_inheriting(config, listeners).map_err(StartFailed::Server)?;
    match admin_cfg.map(|a| tollgate_admin::start_taking_over(&a, server.control(), admin)).transpose() {
        Ok(admin) => Ok(Running { server, admin }),
        Err(e) => {
            server.stop();
            server.join();
            Err(StartFailed::Admin(e))
        }
    }
}

impl std::ops::Deref for Running {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.server
    }
}

impl Running {
    /// The admin listener's address (the real port, for port 0), if it has one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|a| a.http_addr)
    }

    /// The TCP command sockets' addresses (the real ports, for port 0).
    pub fn socket_addrs(&self) -> Vec<SocketAddr> {
        self.admin.as_ref().map(|a| a.socket_addrs.clone()).unwrap_or_default()
    }

    /// New descriptors of every listening socket (the frontends' on every
    /// worker, the admin HTTP listener), for a process that takes over.
    pub fn share(&self) -> Vec<Shared> {
        let frontends = self.server.share_listeners().into_iter().map(|(addr, l)| Shared::Frontend(addr, l.into()));
        let admin = self.admin.as_ref().and_then(|a| a.share_http()).map(|l| Shared::Admin(l.into()));
        frontends.chain(admin).collect()
    }

    /// The servers' state set at run time, for a process that takes over.
    pub fn server_states(&self) -> Vec<ServerState> {
        let snap = self.server.snapshot();
        let servers = snap.backends.iter().flat_map(|b| b.servers.iter().map(move |s| (b.name(), s)));
        servers
            .map(|(backend, s)| ServerState {
                backend: backend.to_string(),
                server: s.cfg.name.clone(),
                state: s.admin().as_str().to_string(),
                weight: (s.weight() != s.cfg.weight).then(|| s.weight()),
            })
            .collect()
    }

    /// Sets the servers' state a process taken over from had (see
    /// [`Running::server_states`]); a server the config no longer has is left out.
    pub fn restore_server_states(&self, states: &[ServerState]) {
        let control = self.server.control();
        for s in states {
            let change = ServerChange { state: AdminState::parse(&s.state), weight: s.weight };
            if let Ok(server) = control.server(&s.backend, &s.server)
                && (change.state.is_some_and(|a| a != server.admin()) || change.weight.is_some())
            {
                let _ = control.set_server(&s.backend, &s.server, change);
            }
        }
    }

    /// Waits for the server to finish (after `stop`), then for the admin thread.
    pub fn join(self) {
        self.server.join();
        if let Some(a) = self.admin {
            a.join();
        }
    }
}
