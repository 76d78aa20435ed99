//! [`Report`], the one view of the counters (counters.rs, and the servers'
//! in lb/) every admin output is made from (JSON API, stats page, command
//! socket, Prometheus metrics), and [`tick`], which the admin thread calls once
//! a second to update the rates.

use crate::lb::health::Health;
use crate::lb::{AdminState, BackendRt, ServerRt};
use crate::observe::counters::{ClassCounts, HistogramReport, get};
use crate::pipeline::snapshot::Snapshot;
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

/// Once a second: updates every rate of `snap` (frontends and servers).
pub fn tick(snap: &Snapshot, elapsed: Duration) {
    for f in &snap.frontend_stats {
        f.session_rate.tick(get(&f.sessions_total), elapsed);
        f.request_rate.tick(get(&f.requests), elapsed);
    }
    for b in &snap.backends {
        for s in &b.servers {
            s.stats.session_rate.tick(get(&s.stats.requests), elapsed);
        }
        let total = b.servers.iter().map(|s| get(&s.stats.requests)).sum();
        b.session_rate.tick(total, elapsed);
    }
}

// ---------------------------------------------------------------------------
// The report: plain data, serialisable, made from a snapshot at one moment.

/// Responses by class.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Responses {
    #[serde(rename = "1xx")]
    pub r1xx: u64,
    #[serde(rename = "2xx")]
    pub r2xx: u64,
    #[serde(rename = "3xx")]
    pub r3xx: u64,
    #[serde(rename = "4xx")]
    pub r4xx: u64,
    #[serde(rename = "5xx")]
    pub r5xx: u64,
    pub other: u64,
}

impl Responses {
    fn of(c: &ClassCounts) -> Self {
        Responses {
            r1xx: get(&c[1]),
            r2xx: get(&c[2]),
            r3xx: get(&c[3]),
            r4xx: get(&c[4]),
            r5xx: get(&c[5]),
            other: get(&c[0]),
        }
    }
    fn add(&mut self, o: &Responses) {
        self.r1xx += o.r1xx;
        self.r2xx += o.r2xx;
        self.r3xx += o.r3xx;
        self.r4xx += o.r4xx;
        self.r5xx += o.r5xx;
        self.other += o.other;
    }
    pub fn total(&self) -> u64 {
        self.r1xx + self.r2xx + self.r3xx + self.r4xx + self.r5xx + self.other
    }
}

/// Everything the admin outputs show, at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub info: Info,
    pub frontends: Vec<FrontendReport>,
    pub backends: Vec<BackendReport>,
    /// Cache zones (`[[cache]]`).
    pub caches: Vec<crate::cache::CacheReport>,
    /// `[[acme]]` certificates.
    pub acme: Vec<AcmeReport>,
    /// The etcd session, with `[global.etcd]`.
    pub etcd: Option<EtcdReport>,
}

/// How the etcd session stands, for /api/stats and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EtcdReport {
    pub connected: bool,
    /// The store's revision last seen.
    pub revision: i64,
    /// Changes made here not yet written.
    pub pending: usize,
    /// The revision of `<prefix>config` in force, if the config comes from etcd.
    pub config_revision: Option<i64>,
    /// Why the last config read from etcd was refused.
    pub config_error: Option<String>,
    pub last_error: Option<String>,
}

/// One `[[acme]]` certificate: what it is for, until when, when it renews,
/// and the attempts that failed since the last success.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AcmeReport {
    pub name: String,
    pub domains: Vec<String>,
    /// Unix time at which the certificate served expires; none: none yet.
    pub not_after: Option<u64>,
    /// Unix time of the next renewal (none: at once, there is no certificate).
    pub renew_at: Option<u64>,
    pub failures: u32,
}

/// The process, as HAProxy's `show info`.
#[derive(Debug, Clone, Serialize)]
pub struct Info {
    pub name: &'static str,
    pub version: &'static str,
    pub pid: u32,
    /// Seconds since the process started.
    pub uptime_sec: u64,
    /// Unix time at which it started.
    pub start_time: u64,
    pub workers: usize,
    pub max_connections: usize,
    pub current_connections: u64,
    pub total_connections: u64,
    pub total_requests: u64,
    pub connection_rate: u64,
    pub request_rate: u64,
    pub reloads: u64,
    /// Pipes for bodies and tunnels moved with `splice` (splice.rs): the most open at
    /// once, in use, kept for reuse; and the bytes moved through them.
    pub pipes_max: usize,
    pub pipes_used: usize,
    pub pipes_free: usize,
    pub spliced_bytes: u64,
    /// The config file in force.
    pub config: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrontendReport {
    pub name: String,
    /// "http" or "tcp" (a tcp frontend counts sessions and bytes, no requests).
    pub mode: &'static str,
    /// Listening addresses, as configured.
    pub binds: Vec<String>,
    pub sessions_cur: u64,
    pub sessions_max: u64,
    pub sessions_limit: usize,
    pub sessions_total: u64,
    pub session_rate: u64,
    pub session_rate_max: u64,
    pub requests_total: u64,
    /// Of `requests_total`, those that came on HTTP/2 streams.
    pub requests_h2_total: u64,
    pub requests_h3_total: u64,
    pub request_rate: u64,
    pub request_rate_max: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub denied: u64,
    /// Connections refused by a connection rule (HAProxy's `dcon`).
    pub denied_connections: u64,
    pub request_errors: u64,
    pub responses: Responses,
    /// Requests' times, from their first byte to their response's last.
    pub duration: HistogramReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    pub name: String,
    /// "http" or "tcp" (in tcp mode a session is a connection, and it has no responses).
    pub mode: &'static str,
    pub balance: String,
    /// "UP" while some server can take traffic, else "DOWN".
    pub status: &'static str,
    pub servers_up: usize,
    pub sessions_cur: u64,
    pub sessions_max: u64,
    pub sessions_total: u64,
    pub session_rate: u64,
    pub session_rate_max: u64,
    pub queue_cur: u64,
    pub queue_max: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connect_errors: u64,
    pub responses: Responses,
    /// From a request sent to a server to its response head.
    pub response_time: HistogramReport,
    /// Opening connections to its servers.
    pub connect_time: HistogramReport,
    /// Sum of the weights of the servers that take traffic.
    pub weight: u64,
    pub servers: Vec<ServerReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerReport {
    pub name: String,
    /// `IP:port`; a server whose name does not resolve: `-`.
    pub addr: String,
    /// The name the address comes from (`host:port`), when it is written as one.
    pub fqdn: Option<String>,
    /// Admin state: "ready", "drain" or "maint".
    pub state: &'static str,
    /// "up", "down", or "unchecked" (no active or passive checks).
    pub health: &'static str,
    /// The state as HAProxy's stats show it: "UP", "DOWN", "DRAIN", "MAINT",
    /// "no check" (UP but unchecked).
    pub status: &'static str,
    pub weight: u32,
    pub configured_weight: u32,
    pub backup: bool,
    pub cookie: String,
    pub sessions_cur: u64,
    pub sessions_max: u64,
    pub sessions_limit: Option<u32>,
    pub sessions_total: u64,
    pub session_rate: u64,
    pub session_rate_max: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connect_errors: u64,
    pub connections_opened: u64,
    pub responses: Responses,
    pub check: CheckReport,
    /// Seconds since the last change of state (admin or health).
    pub last_change_sec: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub active: bool,
    pub passive: bool,
    /// The last check: "HTTP status 200", "connection refused", ... or null.
    pub last: Option<String>,
    pub last_ok: Option<bool>,
    pub last_duration_ms: Option<u64>,
    pub checks: u64,
    pub failed_checks: u64,
    /// Times it went DOWN.
    pub downs: u64,
    pub consecutive_failures: u32,
}

/// What the report needs besides the snapshot.
pub struct ProcessFacts {
    pub started: SystemTime,
    pub workers: usize,
    pub reloads: u64,
    /// The etcd session's state (reported when the config has `[global.etcd]`).
    pub etcd: Option<EtcdReport>,
}

impl Report {
    pub fn new(snap: &Snapshot, facts: &ProcessFacts) -> Self {
        let frontends: Vec<FrontendReport> = snap
            .config
            .frontends
            .iter()
            .zip(&snap.frontend_stats)
            .map(|(fe, s)| FrontendReport {
                name: fe.name.clone(),
                mode: fe.mode.as_str(),
                binds: fe.binds.iter().map(|b| b.to_string()).collect(),
                sessions_cur: get(&s.sessions_cur),
                sessions_max: get(&s.sessions_max),
                sessions_limit: snap.config.global.max_connections,
                sessions_total: get(&s.sessions_total),
                session_rate: s.session_rate.per_sec(),
                session_rate_max: s.session_rate.max(),
                requests_total: get(&s.requests),
                requests_h2_total: get(&s.h2_requests),
                requests_h3_total: get(&s.h3_requests),
                request_rate: s.request_rate.per_sec(),
                request_rate_max: s.request_rate.max(),
                bytes_in: get(&s.bytes_in),
                bytes_out: get(&s.bytes_out),
                denied: get(&s.denied),
                denied_connections: get(&s.denied_connections),
                request_errors: get(&s.request_errors),
                responses: Responses::of(&s.responses),
                duration: s.duration.report(),
            })
            .collect();
        let backends = snap.backends.iter().map(|b| backend_report(b)).collect();
        let now = SystemTime::now();
        let (pipes_used, pipes_free) = crate::io::splice::pipes();
        let info = Info {
            name: "tollgate",
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            uptime_sec: now.duration_since(facts.started).unwrap_or_default().as_secs(),
            start_time: facts.started.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs(),
            workers: facts.workers,
            max_connections: snap.config.global.max_connections,
            current_connections: frontends.iter().map(|f| f.sessions_cur).sum(),
            total_connections: frontends.iter().map(|f| f.sessions_total).sum(),
            total_requests: frontends.iter().map(|f| f.requests_total).sum(),
            connection_rate: frontends.iter().map(|f| f.session_rate).sum(),
            request_rate: frontends.iter().map(|f| f.request_rate).sum(),
            reloads: facts.reloads,
            pipes_max: crate::io::splice::pipes_max(),
            pipes_used,
            pipes_free,
            spliced_bytes: crate::io::splice::spliced_bytes(),
            config: snap.config.source.display().to_string(),
        };
        let caches = snap.caches.iter().map(|z| z.report()).collect();
        let acme = snap
            .acme
            .slots
            .iter()
            .map(|s| {
                let dates = s.validity();
                AcmeReport {
                    name: s.cfg.name.clone(),
                    domains: s.cfg.domains.clone(),
                    not_after: dates.map(|(_, until)| until),
                    renew_at: dates.map(|(from, until)| s.cfg.renew_at(from, until)),
                    failures: s.failures.load(Ordering::Relaxed),
                }
            })
            .collect();
        let etcd = snap.config.global.etcd.as_ref().and(facts.etcd.clone());
        Report { info, frontends, backends, caches, acme, etcd }
    }
}

fn backend_report(b: &BackendRt) -> BackendReport {
    let servers: Vec<ServerReport> = b.servers.iter().map(|s| server_report(s)).collect();
    let mut responses = Responses::default();
    for s in &servers {
        responses.add(&s.responses);
    }
    let serving = |s: &&ServerReport| s.status == "UP" || s.status == "no check";
    let servers_up = servers.iter().filter(serving).count();
    BackendReport {
        name: b.name().to_string(),
        mode: b.cfg.mode.as_str(),
        balance: b.cfg.balance.as_str(),
        status: if servers_up > 0 { "UP" } else { "DOWN" },
        servers_up,
        // In flight on any generation of its servers (a reload replaces changed ones).
        sessions_cur: get(&b.inflight),
        sessions_max: get(&b.sessions_max),
        sessions_total: servers.iter().map(|s| s.sessions_total).sum(),
        session_rate: b.session_rate.per_sec(),
        session_rate_max: b.session_rate.max(),
        queue_cur: get(&b.queue.cur),
        queue_max: get(&b.queue.max),
        bytes_in: servers.iter().map(|s| s.bytes_in).sum(),
        bytes_out: servers.iter().map(|s| s.bytes_out).sum(),
        connect_errors: servers.iter().map(|s| s.connect_errors).sum(),
        responses,
        response_time: b.response_time.report(),
        connect_time: b.connect_time.report(),
        weight: servers.iter().filter(serving).map(|s| s.weight as u64).sum(),
        servers,
    }
}

pub fn server_report(s: &ServerRt) -> ServerReport {
    let st = s.check_status();
    let checked = st.checked || st.observed;
    let admin = s.admin();
    let status = match (admin, st.health) {
        (AdminState::Maint, _) => "MAINT",
        (_, Health::Down) => "DOWN",
        (AdminState::Drain, _) => "DRAIN",
        (AdminState::Ready, Health::Up) if checked => "UP",
        (AdminState::Ready, Health::Up) => "no check",
    };
    let since = st.since_change.min(s.admin_changed().elapsed());
    ServerReport {
        name: s.cfg.name.clone(),
        addr: if s.cfg.unresolved.is_some() { "-".into() } else { s.addr().to_string() },
        fqdn: s.cfg.dns.as_ref().map(ToString::to_string),
        state: admin.as_str(),
        health: match (checked, st.health) {
            (false, Health::Down) => "down",
            (false, _) => "unchecked",
            (true, Health::Up) => "up",
            (true, Health::Down) => "down",
        },
        status,
        weight: s.weight(),
        configured_weight: s.cfg.weight,
        backup: s.cfg.backup,
        cookie: s.cfg.cookie.clone(),
        sessions_cur: s.inflight() as u64,
        sessions_max: get(&s.stats.sessions_max),
        sessions_limit: s.cfg.maxconn,
        sessions_total: get(&s.stats.requests),
        session_rate: s.stats.session_rate.per_sec(),
        session_rate_max: s.stats.session_rate.max(),
        bytes_in: get(&s.stats.bytes_in),
        bytes_out: get(&s.stats.bytes_out),
        connect_errors: get(&s.stats.connect_errors),
        connections_opened: get(&s.stats.connections_opened),
        responses: Responses::of(&s.stats.responses),
        check: CheckReport {
            active: st.checked,
            passive: st.observed,
            last: st.last.as_ref().map(|r| r.text.clone()),
            last_ok: st.last.as_ref().map(|r| r.ok),
            last_duration_ms: st.last.as_ref().map(|r| r.duration.as_millis() as u64),
            checks: st.checks,
            failed_checks: st.failed_checks,
            downs: st.downs,
            consecutive_failures: st.consecutive_failures,
        },
        last_change_sec: since.as_secs(),
    }
}
