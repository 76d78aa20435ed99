//! A running Tollgate as the binary runs it: the server (tollgate-proxy) and,
//! when the config has `[admin]`, the admin interfaces (tollgate-admin) beside
//! it, on the server's control. The end-to-end tests start it the same way.

use std::net::SocketAddr;
use tollgate_admin::AdminHandle;
use tollgate_proxy::{Server, StartError};

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
    let admin_cfg = config.admin.clone();
    let server = Server::start(config).map_err(StartFailed::Server)?;
    match admin_cfg.map(|a| tollgate_admin::start(&a, server.control())).transpose() {
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

    /// Waits for the server to finish (after `stop`), then for the admin thread.
    pub fn join(self) {
        self.server.join();
        if let Some(a) = self.admin {
            a.join();
        }
    }
}
