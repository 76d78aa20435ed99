//! Live control of a running server: read its statistics, set a server's
//! state or weight, reload the config. The admin interfaces (the tollgate-admin
//! crate: HTTP API, stats page, metrics, command socket) are built on it, and so
//! can tests be.

use crate::ReloadReport;
use crate::lb::{AdminState, ServerRt};
use crate::runtime::report::{Report, ServerReport};
use crate::runtime::server::{Core, Server};
use std::sync::{Arc, Weak};
use tokio::sync::watch;

impl Server {
    /// Live control of this server (the admin interfaces, which the binary
    /// starts beside it, use it; so can tests).
    pub fn control(&self) -> Control {
        Control::new(&self.core)
    }
}

/// Why a control request was refused. Each interface turns it into its own
/// answer (an HTTP status, a command socket message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlError {
    NoBackend(String),
    NoServer {
        backend: String,
        server: String,
    },
    /// A weight outside 0..=256, or not a number.
    BadWeight(String),
    /// Not "ready", "drain" or "maint".
    BadState(String),
    /// `admin.read_only` is set.
    ReadOnly,
    /// The config file has errors, or the reload failed; the running config keeps serving.
    Reload(String),
    /// The server is stopping.
    Stopped,
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::NoBackend(b) => write!(f, "no such backend: {b}"),
            ControlError::NoServer { backend, server } => write!(f, "no such server: {backend}/{server}"),
            ControlError::BadWeight(w) => write!(f, "invalid weight `{w}`: must be an integer from 0 to 256"),
            ControlError::BadState(s) => write!(f, "invalid state `{s}`: must be ready, drain or maint"),
            ControlError::ReadOnly => write!(f, "the admin interface is read-only (admin.read_only)"),
            ControlError::Reload(e) => write!(f, "reload refused, the running config keeps serving: {e}"),
            ControlError::Stopped => write!(f, "the server is stopping"),
        }
    }
}

impl std::error::Error for ControlError {}

/// A change to one server: either or both of its admin state and weight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerChange {
    pub state: Option<AdminState>,
    pub weight: Option<u32>,
}

/// Live control of a running server. Cheap to clone; holds the server weakly,
/// so a control outliving its server answers [`ControlError::Stopped`].
#[derive(Clone)]
pub struct Control {
    core: Weak<Core>,
}

impl Control {
    pub(crate) fn new(core: &Arc<Core>) -> Self {
        Control { core: Arc::downgrade(core) }
    }

    fn core(&self) -> Result<Arc<Core>, ControlError> {
        self.core.upgrade().ok_or(ControlError::Stopped)
    }

    /// The snapshot in force.
    pub fn snapshot(&self) -> Result<Arc<crate::Snapshot>, ControlError> {
        Ok(self.core()?.snapshot())
    }

    /// Every counter and state, now.
    pub fn report(&self) -> Result<Report, ControlError> {
        let core = self.core()?;
        Ok(Report::new(&core.snapshot(), &core.facts()))
    }

    /// Whether changes are refused (`admin.read_only`).
    pub fn read_only(&self) -> bool {
        self.core().is_ok_and(|c| c.snapshot().config.admin.as_ref().is_some_and(|a| a.read_only))
    }

    /// The server `backend`/`server` of the snapshot in force.
    pub fn server(&self, backend: &str, server: &str) -> Result<Arc<ServerRt>, ControlError> {
        let snap = self.snapshot()?;
        let be = snap.backend(backend).ok_or_else(|| ControlError::NoBackend(backend.into()))?;
        be.server(server)
            .cloned()
            .ok_or_else(|| ControlError::NoServer { backend: backend.into(), server: server.into() })
    }

    /// Sets a server's admin state and/or weight (HAProxy's `set server`). The
    /// change holds across reloads for as long as the server stays in the config.
    pub fn set_server(&self, backend: &str, server: &str, change: ServerChange) -> Result<ServerReport, ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        if let Some(w) = change.weight
            && w > 256
        {
            return Err(ControlError::BadWeight(w.to_string()));
        }
        let s = self.server(backend, server)?;
        if let Some(w) = change.weight {
            s.set_weight(w);
        }
        if let Some(st) = change.state {
            s.set_admin(st);
        }
        if change.state.is_some() || change.weight.is_some() {
            tracing::info!(
                backend,
                server,
                state = s.admin().as_str(),
                weight = s.weight(),
                "server changed by the admin interface"
            );
        }
        Ok(crate::runtime::report::server_report(&s))
    }

    /// Re-reads the config file in force, validates it and reloads it, as SIGHUP
    /// does. A file with errors is refused with every error; the running config
    /// keeps serving.
    pub fn reload(&self) -> Result<ReloadReport, ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        let core = self.core()?;
        let path = core.snapshot().config.source.clone();
        let config = tollgate_config::load(&path).map_err(|e| {
            tracing::error!("reload refused, the running config keeps serving:\n{e}");
            ControlError::Reload(e.to_string())
        })?;
        core.reload(config).map_err(|e| ControlError::Reload(e.to_string()))
    }

    /// Changes to `true` when the server stops (the admin interfaces end then).
    pub fn stop_signal(&self) -> Option<watch::Receiver<bool>> {
        self.core.upgrade().map(|c| c.stop_signal())
    }
}
