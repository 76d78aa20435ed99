//! Live control of a running server: read its statistics, set a server's
//! state or weight, reload the config. The admin interfaces (the tollgate-admin
//! crate: HTTP API, stats page, metrics, command socket) are built on it, and so
//! can tests be.

use crate::ReloadReport;
use crate::lb::{AdminState, ServerRt};
use crate::runtime::report::{Report, ServerReport};
use crate::runtime::server::{Core, Server};
use std::net::SocketAddr;
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
    /// `add server`: the backend has a server of that name already.
    ServerExists {
        backend: String,
        server: String,
    },
    /// `add server`: a name, address or setting that cannot be (the reason).
    BadServer(String),
    /// `del server`: only a server in maintenance may be deleted.
    NotInMaintenance,
    /// `del server`: requests or tunnels still hold the server.
    StillInUse(u32),
    /// No `[[table]]` of that name.
    NoTable(String),
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
            ControlError::ServerExists { backend, server } => write!(f, "server {backend}/{server} exists already"),
            ControlError::BadServer(why) => write!(f, "{why}"),
            ControlError::NotInMaintenance => write!(f, "only a server in maintenance (MAINT) can be deleted"),
            ControlError::NoTable(t) => write!(f, "no such table: {t}"),
            ControlError::StillInUse(n) => {
                write!(f, "the server still has {n} request(s) or tunnel(s) in flight (shutdown sessions first)")
            }
        }
    }
}

impl std::error::Error for ControlError {}

/// `be`'s stick table at `now`, if it has one, as the admin interfaces show it.
pub fn stick_table(be: &crate::lb::BackendRt, now: std::time::Instant) -> Option<StickTableView> {
    let t = be.stick.as_ref()?;
    let entries = t
        .entries(now)
        .into_iter()
        .map(|(ip, i, left)| StickEntry {
            key: ip,
            server_id: i + 1,
            server: be.servers.get(i).map_or_else(String::new, |s| s.cfg.name.clone()),
            expire_ms: left.as_millis() as u64,
        })
        .collect();
    Some(StickTableView { size: t.size(), entries })
}

/// A stick table as the admin interfaces show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StickTableView {
    pub size: usize,
    pub entries: Vec<StickEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StickEntry {
    pub key: std::net::IpAddr,
    /// The server's position in its backend, from 1 (HAProxy's `server_id`).
    pub server_id: usize,
    pub server: String,
    /// Milliseconds left before the entry expires.
    pub expire_ms: u64,
}

/// A `[[table]]` of counters as the admin interfaces show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CounterTableView {
    pub name: String,
    /// `src`, `header:<name>`, `cookie:<name>` or `path`.
    pub key: String,
    /// HAProxy's `type`: `ip` or `string`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: usize,
    /// Entries held now.
    pub used: usize,
    pub period_ms: u64,
    pub expire_ms: u64,
    /// Keys not counted because the table was full of entries in use.
    pub refused: u64,
    /// The live entries, most recently used first (up to the limit asked).
    pub entries: Vec<CounterEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CounterEntry {
    pub key: String,
    /// Milliseconds left before the entry expires.
    pub expire_ms: u64,
    /// Every counter, in HAProxy's order (`conn_cur` first).
    pub counters: Vec<(&'static str, u64)>,
}

/// A table and up to `limit` of its entries.
pub fn counter_table(t: &crate::lb::track::Table, limit: usize) -> CounterTableView {
    use tollgate_config::{Counter, TrackKey};
    let now = crate::lb::track::now_ms();
    let period = t.period_ms();
    let entries = t
        .entries(now, limit)
        .into_iter()
        .map(|(key, c, left)| CounterEntry {
            key: key.to_string(),
            expire_ms: left,
            counters: Counter::ALL.iter().map(|k| (k.name(), c.get(*k, now, period))).collect(),
        })
        .collect();
    CounterTableView {
        name: t.cfg.name.clone(),
        key: match &t.cfg.key {
            TrackKey::Src => "src".into(),
            TrackKey::Header(h) => format!("header:{h}"),
            TrackKey::Cookie(c) => format!("cookie:{c}"),
            TrackKey::Path => "path".into(),
        },
        kind: t.cfg.key.kind(),
        size: t.cfg.size,
        used: t.len(),
        period_ms: period,
        expire_ms: t.cfg.expire.as_millis() as u64,
        refused: t.refused.load(std::sync::atomic::Ordering::Relaxed),
        entries,
    }
}

/// A change to one server: either or both of its admin state and weight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerChange {
    pub state: Option<AdminState>,
    pub weight: Option<u32>,
}

/// A server added at run time (HAProxy's `add server`). It takes its
/// transport (`tls`, `proto`, `send_proxy`) from the backend's first server,
/// and its keep-alive from the backend; it lives until the next reload of the
/// file, which does not have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewServer {
    pub name: String,
    pub addr: SocketAddr,
    /// 0..=256 (default 1).
    pub weight: Option<u32>,
    pub maxconn: Option<u32>,
    pub backup: bool,
    /// The backend's active checks apply (the backend must have a `check`).
    pub check: bool,
    /// Starts in maintenance, as HAProxy's dynamic servers do (then `enable
    /// server`, or `set server ... state ready`).
    pub disabled: bool,
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
        // Every instance sharing the etcd store applies it too; handed to the
        // etcd thread first, so that its reconciling never undoes it here.
        if change.state.is_some() || change.weight.is_some() {
            self.core()?.etcd.publish(backend, server, change.state, change.weight);
        }
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

    /// Adds a server to a backend without a reload (HAProxy's `add server`):
    /// live state of every other server kept, the new one checked first if
    /// it has checks.
    pub fn add_server(&self, backend: &str, new: NewServer) -> Result<ServerReport, ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        if !tollgate_config::valid_name(&new.name) {
            return Err(ControlError::BadServer(format!(
                "`{}` is not a valid server name (letters, digits, '-', '_', '.')",
                new.name
            )));
        }
        if new.weight.is_some_and(|w| w > 256) {
            return Err(ControlError::BadWeight(new.weight.unwrap_or_default().to_string()));
        }
        if new.maxconn == Some(0) {
            return Err(ControlError::BadServer("maxconn must be 1 or more".into()));
        }
        let core = self.core()?;
        let added = core
            .amend(|cfg| {
                let b = cfg.backends.iter_mut().find(|b| b.name == backend);
                let b = Arc::make_mut(b.ok_or_else(|| ControlError::NoBackend(backend.into()))?);
                if b.servers.iter().any(|s| s.name == new.name) {
                    return Err(ControlError::ServerExists { backend: backend.into(), server: new.name.clone() });
                }
                if b.servers.iter().any(|s| s.cookie == new.name) {
                    return Err(ControlError::BadServer(format!(
                        "another server of {backend} has `{}` as its cookie value",
                        new.name
                    )));
                }
                if new.check && b.check.is_none() {
                    return Err(ControlError::BadServer(format!("backend {backend} has no `check`")));
                }
                let template = b.servers.first();
                b.servers.push(tollgate_config::Server {
                    name: new.name.clone(),
                    addr: new.addr,
                    weight: new.weight.unwrap_or(1),
                    backup: new.backup,
                    maxconn: new.maxconn,
                    check: new.check,
                    check_port: None,
                    cookie: new.name.clone(),
                    send_proxy: template.and_then(|t| t.send_proxy),
                    tls: template.and_then(|t| t.tls.clone()),
                    proto: template.map(|t| t.proto).unwrap_or_default(),
                    keep_alive: b.timeouts.server_keep_alive,
                    dns: None,
                    unresolved: None,
                    disabled: new.disabled,
                    discovered: false,
                });
                Ok(())
            })
            .map_err(|e| ControlError::Reload(e.to_string()))?;
        added?;
        tracing::info!(backend, server = %new.name, addr = %new.addr, "server added by the admin interface");
        let s = self.server(backend, &new.name)?;
        Ok(crate::runtime::report::server_report(&s))
    }

    /// Deletes a server without a reload (HAProxy's `del server`): only one
    /// in maintenance with nothing in flight, as HAProxy asks.
    pub fn del_server(&self, backend: &str, server: &str) -> Result<(), ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        let s = self.server(backend, server)?;
        if s.admin() != AdminState::Maint {
            return Err(ControlError::NotInMaintenance);
        }
        let core = self.core()?;
        let deleted = core
            .amend(|cfg| {
                // Checked again under the lock: a request may have taken it since.
                let live = core.snapshot().backend(backend).and_then(|b| b.server(server).cloned());
                match live {
                    Some(s) if s.admin() != AdminState::Maint => return Err(ControlError::NotInMaintenance),
                    Some(s) if s.inflight() > 0 => return Err(ControlError::StillInUse(s.inflight())),
                    _ => {}
                }
                let b = cfg.backends.iter_mut().find(|b| b.name == backend);
                let b = Arc::make_mut(b.ok_or_else(|| ControlError::NoBackend(backend.into()))?);
                let before = b.servers.len();
                b.servers.retain(|s| s.name != server);
                if b.servers.len() == before {
                    return Err(ControlError::NoServer { backend: backend.into(), server: server.into() });
                }
                Ok(())
            })
            .map_err(|e| ControlError::Reload(e.to_string()))?;
        deleted?;
        tracing::info!(backend, server, "server deleted by the admin interface");
        Ok(())
    }

    /// Moves a server to `addr` without a reload (HAProxy's `set server ...
    /// addr`): its admin state and weight kept, its checks started again at
    /// the new address, its idle connections to the old one closed. A server
    /// written as a name stops following it (until the next reload).
    /// Returns the address it had.
    pub fn set_server_addr(&self, backend: &str, server: &str, addr: SocketAddr) -> Result<SocketAddr, ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        let was = self.server(backend, server)?.addr();
        self.core()?
            .amend(|cfg| {
                let b = cfg.backends.iter_mut().find(|b| b.name == backend);
                let b = Arc::make_mut(b.ok_or_else(|| ControlError::NoBackend(backend.into()))?);
                let s = b.servers.iter_mut().find(|s| s.name == server);
                let s = s.ok_or_else(|| ControlError::NoServer { backend: backend.into(), server: server.into() })?;
                s.addr = addr;
                s.dns = None;
                s.unresolved = None;
                Ok(())
            })
            .map_err(|e| ControlError::Reload(e.to_string()))??;
        tracing::info!(backend, server, %addr, was = %was, "server address changed by the admin interface");
        Ok(was)
    }

    /// Ends every request and tunnel on a server now (HAProxy's `shutdown
    /// sessions server`), leaving the server as it is.
    pub fn shutdown_sessions(&self, backend: &str, server: &str) -> Result<(), ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        let s = self.server(backend, server)?;
        tracing::info!(backend, server, inflight = s.inflight(), "sessions shut down by the admin interface");
        self.core()?.kill(s.id);
        Ok(())
    }

    /// A backend's stick table, if it has one: its size and each client
    /// still bound (address, server name, milliseconds left), by address.
    pub fn table(&self, backend: &str) -> Result<Option<StickTableView>, ControlError> {
        let snap = self.snapshot()?;
        let be = snap.backend(backend).ok_or_else(|| ControlError::NoBackend(backend.into()))?;
        Ok(stick_table(be, std::time::Instant::now()))
    }

    /// The `[[table]]`s, each with up to `limit` entries (0: none, a summary).
    pub fn counter_tables(&self, limit: usize) -> Result<Vec<CounterTableView>, ControlError> {
        let snap = self.snapshot()?;
        Ok(snap.tables.iter().map(|t| counter_table(t, limit)).collect())
    }

    /// One `[[table]]` with up to `limit` entries.
    pub fn counter_table(&self, name: &str, limit: usize) -> Result<CounterTableView, ControlError> {
        let snap = self.snapshot()?;
        let t = snap.tables.iter().find(|t| t.cfg.name == name).ok_or_else(|| ControlError::NoTable(name.into()))?;
        Ok(counter_table(t, limit))
    }

    /// Empties a `[[table]]` (HAProxy's `clear table`): its entries start
    /// again from zero; those a connection holds stay. Returns how many went.
    pub fn clear_table(&self, name: &str) -> Result<usize, ControlError> {
        if self.read_only() {
            return Err(ControlError::ReadOnly);
        }
        let snap = self.snapshot()?;
        let t = snap.tables.iter().find(|t| t.cfg.name == name).ok_or_else(|| ControlError::NoTable(name.into()))?;
        Ok(t.clear())
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
