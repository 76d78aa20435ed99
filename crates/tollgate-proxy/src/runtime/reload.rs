//! Reloading the configuration of a running server: what carries over from the
//! running snapshot to the next one, and the report of what changed.
//!
//! A server of the new config that the running config already has (same backend
//! name, same server name) keeps its live state: admin state, a weight set at run
//! time, health (UP or DOWN and its counts) and counters. [`carry`] is the pure
//! decision; [`next_snapshot`] applies it to every backend. Listeners and the
//! health checker follow in `server.rs` (docs/architecture.md, "Reload").

use crate::lb::{BackendRt, ServerRt};
use crate::observe::access_log::AccessLog;
use crate::pipeline::snapshot::{Snapshot, tls_endpoints};
use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use tollgate_config::{Action, Backend, Config, Server};

/// The health rules that apply to one server: what its health state means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthRules {
    /// The address active checks go to; `None`: not checked.
    pub check_addr: Option<SocketAddr>,
    pub fall: u32,
    pub rise: u32,
    /// Passive checks' error limit.
    pub observe: Option<u32>,
}

impl HealthRules {
    pub fn of(server: &Server, backend: &Backend) -> Self {
        let check = backend.check.as_ref().filter(|_| server.check);
        HealthRules {
            check_addr: check.map(|c| c.addr(server)),
            fall: check.map_or(1, |c| c.fall),
            rise: check.map_or(1, |c| c.rise),
            observe: check.and(backend.observe).map(|o| o.errors),
        }
    }
}

/// A server of the running config, as [`carry`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Running<'a> {
    pub cfg: &'a Server,
    /// Position in its backend's server list.
    pub index: usize,
    /// The weight in force (set at run time, or the configured one).
    pub live_weight: u32,
    pub rules: HealthRules,
}

/// What a server of the new config takes from the running one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    /// Same config, same position, same health rules: the running server is kept
    /// as it is (same `Arc<ServerRt>`, so its state and counters simply go on).
    Reuse,
    /// Changed: a new server takes the running one's admin state and counters,
    /// this weight, and its health when `health` (both checked, at the same address).
    Copy { weight: u32, health: bool },
    /// Not in the running config: starts as a fresh server (checked first when its
    /// backend has checks).
    Fresh,
}

/// Decides what the server `new` (at `index`, under `rules`) takes from the
/// running server of the same name, if there is one.
///
/// A weight changed at run time wins over the config: if the live weight differs
/// from the old configured weight it is kept, else the new configured weight applies.
pub fn carry(old: Option<Running<'_>>, new: &Server, index: usize, rules: HealthRules) -> Carry {
    let Some(old) = old else { return Carry::Fresh };
    if old.cfg == new && old.index == index && old.rules == rules {
        return Carry::Reuse;
    }
    let weight = if old.live_weight != old.cfg.weight { old.live_weight } else { new.weight };
    let health = old.rules.check_addr.is_some() && old.rules.check_addr == rules.check_addr;
    Carry::Copy { weight, health }
}

/// What a reload changed, for its log line and for callers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    pub frontends_added: Vec<String>,
    pub frontends_removed: Vec<String>,
    /// Listening addresses opened: frontend and the real address.
    pub binds_added: Vec<(String, SocketAddr)>,
    /// Listening addresses closed (connections already open finish).
    pub binds_removed: Vec<(String, SocketAddr)>,
    /// Listening sockets kept as they were.
    pub binds_kept: usize,
    pub backends_added: Vec<String>,
    pub backends_removed: Vec<String>,
    /// `backend/server`, new to the config.
    pub servers_added: Vec<String>,
    /// `backend/server`, gone from the config.
    pub servers_removed: Vec<String>,
    /// `backend/server` whose config changed; their live state was copied.
    pub servers_changed: Vec<String>,
    /// Servers kept as they were.
    pub servers_kept: usize,
    /// Whether the access log was reopened (its target or format changed).
    pub access_log_reopened: bool,
    /// TLS binds whose certificates were read anew (all of them: every reload
    /// re-reads the files, so renewed certificates apply).
    pub tls_binds: usize,
    /// Settings that changed in the file but need a restart; the running values stay.
    pub needs_restart: Vec<String>,
    /// Cache zones whose size changed: they start empty (the others keep their store).
    pub caches_emptied: Vec<String>,
}

impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(f: &mut fmt::Formatter<'_>, what: &str, items: &[String]) -> fmt::Result {
            if !items.is_empty() {
                write!(f, "; {what} {}: {}", items.len(), items.join(", "))?;
            }
            Ok(())
        }
        let binds = |b: &[(String, SocketAddr)]| b.iter().map(|(fe, a)| format!("{fe}@{a}")).collect::<Vec<_>>();
        write!(f, "{} server(s) kept as they were, {} listener(s) kept", self.servers_kept, self.binds_kept)?;
        list(f, "frontends added", &self.frontends_added)?;
        list(f, "frontends removed", &self.frontends_removed)?;
        list(f, "listeners opened", &binds(&self.binds_added))?;
        list(f, "listeners closed", &binds(&self.binds_removed))?;
        list(f, "backends added", &self.backends_added)?;
        list(f, "backends removed", &self.backends_removed)?;
        list(f, "servers added", &self.servers_added)?;
        list(f, "servers removed", &self.servers_removed)?;
        list(f, "servers changed (live state kept)", &self.servers_changed)?;
        if self.access_log_reopened {
            write!(f, "; access log reopened")?;
        }
        if self.tls_binds > 0 {
            write!(f, "; certificates read anew for {} TLS bind(s)", self.tls_binds)?;
        }
        list(f, "cache zones resized (emptied)", &self.caches_emptied)?;
        list(f, "not applied until a restart", &self.needs_restart)
    }
}

/// Why a reload was refused. The running config keeps serving, untouched.
#[derive(Debug)]
pub enum ReloadError {
    /// The config breaks the model's invariants (e.g. a backend index out of range).
    Invalid(Vec<String>),
    Bind {
        frontend: String,
        addr: SocketAddr,
        error: std::io::Error,
    },
    AccessLog(std::io::Error),
    /// A TLS bind's server config could not be built.
    Tls(String),
    /// The health checker could not start.
    Runtime(std::io::Error),
    /// A cache zone's disk tier could not be opened.
    Cache(String),
    /// A `static` backend's root could not be opened.
    Files(String),
    /// The server is stopping.
    Stopped,
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Invalid(problems) => write!(f, "invalid config: {}", problems.join("; ")),
            ReloadError::Bind { frontend, addr, error } => {
                crate::pipeline::start_error::bind_error(f, frontend, addr, error)
            }
            ReloadError::AccessLog(e) => write!(f, "cannot open the access log: {e}"),
            ReloadError::Tls(e) => write!(f, "TLS: {e}"),
            ReloadError::Runtime(e) => write!(f, "cannot start the health checker: {e}"),
            ReloadError::Cache(e) | ReloadError::Files(e) => write!(f, "{e}"),
            ReloadError::Stopped => write!(f, "the server is stopping"),
        }
    }
}

impl std::error::Error for ReloadError {}

/// Checks what the data path relies on and a `Config` built in code could break
/// (the config crate's builder guarantees all of it for a file).
pub fn validate(config: &Config) -> Result<(), ReloadError> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for (i, fe) in config.frontends.iter().enumerate() {
        if !names.insert(fe.name.as_str()) {
            problems.push(format!("frontend[{i}]: a frontend named `{}` already exists", fe.name));
        }
        if fe.binds.is_empty() {
            problems.push(format!("frontend[{i}] `{}`: no bind address", fe.name));
        }
        // Each backend the frontend names: in range, and of the frontend's mode.
        let mut check = |b: usize, out_of_range: String| match config.backends.get(b) {
            None => problems.push(out_of_range),
            Some(be) if be.mode != fe.mode => problems.push(format!(
                "frontend[{i}] `{}` (mode {}) uses backend `{}` (mode {})",
                fe.name,
                fe.mode.as_str(),
                be.name,
                be.mode.as_str()
            )),
            Some(_) => {}
        };
        if let Some(b) = fe.default_backend {
            check(b, format!("frontend[{i}] `{}`: default backend out of range", fe.name));
        }
        for (r, rule) in fe.rules.iter().enumerate() {
            if let Some(Action::Backend(b)) = rule.action {
                check(b, format!("frontend[{i}].rule[{r}]: backend out of range"));
            }
        }
    }
    let mut names = HashSet::new();
    for (i, b) in config.backends.iter().enumerate() {
        if !names.insert(b.name.as_str()) {
            problems.push(format!("backend[{i}]: a backend named `{}` already exists", b.name));
        }
        let mut servers = HashSet::new();
        for (k, s) in b.servers.iter().enumerate() {
            if !servers.insert(s.name.as_str()) {
                problems.push(format!("backend[{i}].server[{k}]: a server named `{}` already exists", s.name));
            }
            if s.weight > 256 {
                problems.push(format!("backend[{i}].server[{k}].weight: {} is out of range (0..=256)", s.weight));
            }
        }
    }
    problems.extend(crate::cache::zone::validate(config));
    if config.global.max_connections == 0 {
        problems.push("global.max_connections: must be at least 1".into());
    }
    if problems.is_empty() { Ok(()) } else { Err(ReloadError::Invalid(problems)) }
}

/// Builds the snapshot of `config` that follows `old`, carrying live state over
/// (see [`carry`]), and fills in the backend, server and access log parts of
/// `report`. Touches nothing that is running but the access log file, reopened
/// when it stays the same (log rotation).
pub fn next_snapshot(old: &Snapshot, config: Config, report: &mut ReloadReport) -> Result<Snapshot, ReloadError> {
    // New certificates; the session cache and ticket keys of a bind carry over.
    // `[[acme]]` certificates kept unchanged keep their slot (and renewal).
    let acme = crate::net::acme::AcmeRt::new(&config, Some(&old.acme));
    let tls = tls_endpoints(&config, Some(old), &acme).map_err(ReloadError::Tls)?;
    report.tls_binds = tls.len();
    let g = &config.global;
    let access_log = match &old.access_log {
        Some(log)
            if g.access_log == old.config.global.access_log
                && g.access_log_format == old.config.global.access_log_format =>
        {
            // The same file: opened again, so that a reload after the file
            // was moved away (log rotation) writes to a new one at its path.
            match log.reopen() {
                Ok(reopened) => report.access_log_reopened = reopened.is_some(),
                Err(e) => tracing::warn!("reload: the access log could not be reopened, it goes on as it was: {e}"),
            }
            Some(log.clone())
        }
        None if g.access_log == old.config.global.access_log => None,
        _ => {
            report.access_log_reopened = true;
            AccessLog::open(&g.access_log, g.access_log_format.clone()).map_err(ReloadError::AccessLog)?.map(Arc::new)
        }
    };
    let mut backends = Vec::with_capacity(config.backends.len());
    for cfg in &config.backends {
        let Some(prev) = old.backend(&cfg.name) else {
            report.backends_added.push(cfg.name.clone());
            report.servers_added.extend(cfg.servers.iter().map(|s| format!("{}/{}", cfg.name, s.name)));
            backends.push(BackendRt::new(cfg.clone()));
            continue;
        };
        let mut servers = Vec::with_capacity(cfg.servers.len());
        for (i, s) in cfg.servers.iter().enumerate() {
            let running = prev.server(&s.name);
            let decision = carry(
                running.map(|r| Running {
                    cfg: &r.cfg,
                    index: r.index,
                    live_weight: r.weight(),
                    rules: HealthRules::of(&r.cfg, &prev.cfg),
                }),
                s,
                i,
                HealthRules::of(s, cfg),
            );
            let name = || format!("{}/{}", cfg.name, s.name);
            let rt = match (decision, running) {
                (Carry::Reuse, Some(r)) => {
                    report.servers_kept += 1;
                    r.clone()
                }
                (Carry::Copy { weight, health }, Some(r)) => {
                    report.servers_changed.push(name());
                    Arc::new(ServerRt::carried(s.clone(), i, cfg, r, weight, health))
                }
                _ => {
                    report.servers_added.push(name());
                    Arc::new(ServerRt::new(s.clone(), i, cfg))
                }
            };
            servers.push(rt);
        }
        for s in &prev.servers {
            if !cfg.servers.iter().any(|n| n.name == s.cfg.name) {
                report.servers_removed.push(format!("{}/{}", cfg.name, s.cfg.name));
            }
        }
        backends.push(BackendRt::succeed(prev, cfg.clone(), servers));
    }
    for b in &old.backends {
        if config.backend(b.name()).is_none() {
            report.backends_removed.push(b.name().to_string());
            report.servers_removed.extend(b.servers.iter().map(|s| format!("{}/{}", b.name(), s.cfg.name)));
        }
    }
    // A frontend of the same name keeps its counters (the same ones: its
    // connections' session guards hold them).
    let frontend_stats = config
        .frontends
        .iter()
        .map(|fe| match old.config.frontends.iter().position(|f| f.name == fe.name) {
            Some(i) => old.frontend_stats[i].clone(),
            None => Arc::default(),
        })
        .collect();
    let (caches, emptied) = crate::cache::Zone::carry(&old.caches, &config.caches).map_err(ReloadError::Cache)?;
    report.caches_emptied = emptied;
    // An unchanged userlist keeps the passwords it remembers.
    let auth = crate::pipeline::auth::AuthRt::new(&config, Some(&old.auth));
    let files = crate::pipeline::files::open_roots(&config).map_err(ReloadError::Files)?;
    // A table of the same name and policy keeps its entries (and the
    // connections open count on in it).
    let tables = crate::lb::track::carry(&old.tables, &config.tables);
    Ok(Snapshot {
        config: Arc::new(config),
        backends,
        access_log,
        frontend_stats,
        tls,
        auth,
        caches,
        files,
        tables,
        acme,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::AdminState;
    use crate::lb::health::Health;
    use std::path::Path;
    use std::sync::atomic::Ordering;

    fn server(name: &str, weight: u32) -> Server {
        Server {
            name: name.into(),
            addr: "127.0.0.1:3001".parse().unwrap(),
            weight,
            backup: false,
            maxconn: None,
            check: true,
            check_port: None,
            cookie: name.into(),
            send_proxy: None,
            tls: None,
            proto: Default::default(),
            keep_alive: std::time::Duration::from_secs(4),
            dns: None,
            unresolved: None,
            disabled: false,
            discovered: false,
        }
    }

    fn rules(port: u16) -> HealthRules {
        HealthRules { check_addr: Some(SocketAddr::from(([127, 0, 0, 1], port))), fall: 3, rise: 2, observe: None }
    }

    fn running(cfg: &Server, live_weight: u32, r: HealthRules) -> Option<Running<'_>> {
        Some(Running { cfg, index: 0, live_weight, rules: r })
    }

    #[test]
    fn a_server_new_to_the_config_starts_fresh() {
        assert_eq!(carry(None, &server("s1", 1), 0, rules(3001)), Carry::Fresh);
    }

    #[test]
    fn an_unchanged_server_is_reused_with_its_live_weight() {
        let s = server("s1", 1);
        assert_eq!(carry(running(&s, 1, rules(3001)), &s, 0, rules(3001)), Carry::Reuse);
        // A weight set at run time lives in the reused server itself.
        assert_eq!(carry(running(&s, 7, rules(3001)), &s, 0, rules(3001)), Carry::Reuse);
    }

    #[test]
    fn a_changed_server_copies_its_state_and_the_run_time_weight_wins() {
        let old = server("s1", 1);
        let mut new = server("s1", 5);
        // Weight untouched at run time: the new configured weight applies.
        assert_eq!(carry(running(&old, 1, rules(3001)), &new, 0, rules(3001)), Carry::Copy { weight: 5, health: true });
        // Weight changed at run time: it is kept.
        assert_eq!(carry(running(&old, 9, rules(3001)), &new, 0, rules(3001)), Carry::Copy { weight: 9, health: true });
        // maxconn changed: copied, weight as configured.
        new.weight = 1;
        new.maxconn = Some(10);
        assert_eq!(carry(running(&old, 1, rules(3001)), &new, 0, rules(3001)), Carry::Copy { weight: 1, health: true });
        // Same config at another position: copied (the position is part of a server).
        assert_eq!(carry(running(&old, 1, rules(3001)), &old, 1, rules(3001)), Carry::Copy { weight: 1, health: true });
    }

    #[test]
    fn health_carries_only_for_the_same_checked_address() {
        let s = server("s1", 1);
        // New fall/rise: copied, health kept.
        let stricter = HealthRules { fall: 5, ..rules(3001) };
        assert_eq!(carry(running(&s, 1, rules(3001)), &s, 0, stricter), Carry::Copy { weight: 1, health: true });
        // Checks now go elsewhere: a fresh health state (checked first).
        assert_eq!(carry(running(&s, 1, rules(3001)), &s, 0, rules(4000)), Carry::Copy { weight: 1, health: false });
        // Not checked before: nothing to carry; checked first.
        let unchecked = HealthRules { check_addr: None, ..rules(3001) };
        assert_eq!(carry(running(&s, 1, unchecked), &s, 0, rules(3001)), Carry::Copy { weight: 1, health: false });
        // No longer checked.
        assert_eq!(carry(running(&s, 1, rules(3001)), &s, 0, unchecked), Carry::Copy { weight: 1, health: false });
    }

    fn config(servers: &str, extra: &str) -> Config {
        let src = format!(
            "{extra}[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
             [[backend]]\nname = \"b\"\ncheck = {{ type = \"tcp\", fall = 3, rise = 2 }}\n{servers}"
        );
        tollgate_config::parse(&src, Path::new("t.toml")).unwrap()
    }

    fn srv(name: &str, port: u16, extra: &str) -> String {
        format!("[[backend.server]]\nname = \"{name}\"\naddr = \"127.0.0.1:{port}\"\n{extra}\n")
    }

    #[test]
    fn next_snapshot_carries_live_state_and_reports() {
        let old =
            Snapshot::new(config(&(srv("s1", 1001, "") + &srv("s2", 1002, "") + &srv("s3", 1003, "")), "")).unwrap();
        let b = &old.backends[0];
        let (s1, s2) = (b.servers[0].clone(), b.servers[1].clone());
        s1.set_admin(AdminState::Maint);
        s1.stats.requests.store(42, Ordering::Relaxed);
        s2.set_weight(7);
        s2.stats.requests.store(5, Ordering::Relaxed);
        let passed = crate::lb::health::CheckResult {
            ok: true,
            text: "TCP connect ok".into(),
            duration: Default::default(),
            local: false,
        };
        s2.apply_check(passed);

        // s1 unchanged, s2 gets a maxconn, s3 removed, s4 added.
        let next = config(&(srv("s1", 1001, "") + &srv("s2", 1002, "maxconn = 4") + &srv("s4", 1004, "")), "");
        let mut report = ReloadReport::default();
        let snap = next_snapshot(&old, next, &mut report).unwrap();
        let nb = &snap.backends[0];
        assert!(Arc::ptr_eq(&nb.servers[0], &s1), "unchanged: the same server");
        assert_eq!(nb.servers[0].admin(), AdminState::Maint);
        let n2 = &nb.servers[1];
        assert!(!Arc::ptr_eq(n2, &s2));
        assert_eq!((n2.weight(), n2.admin(), n2.cfg.maxconn), (7, AdminState::Ready, Some(4)));
        assert_eq!(n2.stats.requests.load(Ordering::Relaxed), 5);
        assert!(!n2.health.needs_first_check(), "health carried: no first check");
        assert!(nb.servers[2].health.needs_first_check(), "a new server is checked first");
        assert_eq!(report.servers_kept, 1);
        assert_eq!(report.servers_changed, ["b/s2"]);
        assert_eq!(report.servers_removed, ["b/s3"]);
        assert_eq!(report.servers_added, ["b/s4"]);
        assert!(!report.access_log_reopened);
        assert!(report.to_string().contains("servers added 1: b/s4"), "{report}");
    }

    #[test]
    fn a_down_server_stays_down_across_a_reload() {
        let old = Snapshot::new(config(&srv("s1", 1001, ""), "")).unwrap();
        let s1 = old.backends[0].servers[0].clone();
        let refused = crate::lb::health::CheckResult {
            ok: false,
            text: "connection refused".into(),
            duration: Default::default(),
            local: false,
        };
        s1.apply_check(refused);
        let mut report = ReloadReport::default();
        let snap = next_snapshot(&old, config(&srv("s1", 1001, "weight = 3"), ""), &mut report).unwrap();
        let n1 = &snap.backends[0].servers[0];
        assert!(!n1.is_up());
        let st = n1.check_status();
        assert_eq!((st.health, st.checks, st.downs), (Health::Down, 1, 1));
        assert_eq!(n1.weight(), 3);
    }

    #[test]
    fn the_access_log_is_reopened_only_when_its_target_changes() {
        let old = Snapshot::new(config(&srv("s1", 1001, ""), "[global]\naccess_log = \"stderr\"\n")).unwrap();
        let mut report = ReloadReport::default();
        let same =
            next_snapshot(&old, config(&srv("s1", 1001, ""), "[global]\naccess_log = \"stderr\"\n"), &mut report)
                .unwrap();
        assert!(Arc::ptr_eq(same.access_log.as_ref().unwrap(), old.access_log.as_ref().unwrap()));
        assert!(!report.access_log_reopened);
        let other =
            next_snapshot(&old, config(&srv("s1", 1001, ""), "[global]\naccess_log = \"stdout\"\n"), &mut report)
                .unwrap();
        assert!(!Arc::ptr_eq(other.access_log.as_ref().unwrap(), old.access_log.as_ref().unwrap()));
        assert!(report.access_log_reopened);
    }

    #[test]
    fn validation_catches_what_code_can_break() {
        let good = config(&srv("s1", 1001, ""), "");
        assert!(validate(&good).is_ok());
        let mut bad = good.clone();
        bad.frontends[0].default_backend = Some(3);
        Arc::make_mut(&mut bad.backends[0]).servers[0].weight = 1000;
        let Err(ReloadError::Invalid(p)) = validate(&bad) else { panic!("accepted") };
        assert_eq!(p.len(), 2, "{p:?}");
        let mut bad = good.clone();
        bad.frontends.push(bad.frontends[0].clone());
        assert!(validate(&bad).is_err(), "two frontends of one name");
    }
}
