//! `GET /metrics` on the admin listener: the report in Prometheus' text
//! exposition format 0.0.4, written by hand. Every family has its `# HELP` and
//! `# TYPE` and then all its samples; names are `tollgate_*` (and the process's
//! own `process_*`, as Prometheus' client libraries name them) and follow
//! Prometheus' rules (base units in the name, counters end in `_total`,
//! histograms in cumulative `le` buckets with `_sum` and `_count`). Rates are
//! left to PromQL's `rate()` over the counters. docs/admin.md lists every
//! family.

use super::reply::Reply;
use super::{Control, ControlError};
use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use std::fmt::{Display, Write};
use tollgate_proxy::cache::CacheReport;
use tollgate_proxy::observe::counters::{BUCKETS_US, HistogramReport};
use tollgate_proxy::runtime::report::{BackendReport, FrontendReport, Info, Report, Responses, ServerReport};

/// The exposition format's media type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(crate) fn reply(control: &Control) -> Result<Reply, ControlError> {
    let report = control.report()?;
    let mut body = render(&report);
    render_process(&mut body, &ProcessFigures::read(report.info.start_time));
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, CONTENT_TYPE)
        .header(header::CACHE_CONTROL, "no-store")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response"))
}

/// A label value, escaped as the format wants: `\` `"` and newline.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text, escaped as the format wants: `\` and newline.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A sample's value: counts stay exact integers.
#[derive(Clone, Copy)]
enum Num {
    Int(u64),
    Float(f64),
}

impl Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Int(n) => write!(f, "{n}"),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

impl From<u64> for Num {
    fn from(n: u64) -> Num {
        Num::Int(n)
    }
}

/// One family whose samples each come from one item (a frontend, ...): an
/// item for which `value` is `None` has no sample.
struct Family<T> {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&T) -> Option<Num>,
}

/// Shorthand for a family whose every item has a value.
macro_rules! family {
    ($name:literal, $kind:ident, $help:literal, |$x:ident| $v:expr) => {
        Family { name: $name, kind: Kind::$kind, help: $help, value: |$x| Some(Num::from($v)) }
    };
}

/// An item and its labels, formatted (`backend="b",server="s1"`).
type Labelled<'a, T> = (String, &'a T);

struct Writer {
    out: String,
}

impl Writer {
    fn head(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.out, "# HELP {name} {}\n# TYPE {name} {kind}", escape_help(help));
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl Display) {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
        }
    }

    fn families<T>(&mut self, items: &[Labelled<'_, T>], families: &[Family<T>]) {
        for f in families {
            self.head(f.name, f.kind, f.help);
            for (labels, item) in items {
                if let Some(v) = (f.value)(item) {
                    self.sample(f.name, labels, v);
                }
            }
        }
    }

    /// A histogram family: for each item, `NAME_bucket` at each bound of
    /// [`BUCKETS_US`] (in seconds) and `+Inf` (cumulative), `NAME_sum` (seconds) and `NAME_count`.
    fn histogram<T>(&mut self, name: &str, help: &str, items: &[Labelled<'_, T>], of: fn(&T) -> &HistogramReport) {
        self.head(name, Kind::Histogram, help);
        for (labels, item) in items {
            let h = of(item);
            let sep = if labels.is_empty() { "" } else { "," };
            let bounds = BUCKETS_US.iter().map(|us| (*us as f64 / 1e6).to_string()).chain(["+Inf".to_string()]);
            for (le, n) in bounds.zip(h.cumulative.iter().chain(std::iter::repeat(&h.count()))) {
                self.sample(&format!("{name}_bucket"), &format!("{labels}{sep}le=\"{le}\""), n);
            }
            self.sample(&format!("{name}_sum"), labels, h.sum_seconds);
            self.sample(&format!("{name}_count"), labels, h.count());
        }
    }

    /// `PREFIX_http_responses_total{...,code="2xx"}` for each class.
    fn responses<T>(&mut self, prefix: &str, help: &str, items: &[Labelled<'_, T>], of: fn(&T) -> &Responses) {
        let name = format!("{prefix}_http_responses_total");
        self.head(&name, Kind::Counter, &format!("{help}, by status class (code 1xx to 5xx, or other)."));
        for (labels, item) in items {
            let r = of(item);
            let classes = [("1xx", r.r1xx), ("2xx", r.r2xx), ("3xx", r.r3xx), ("4xx", r.r4xx), ("5xx", r.r5xx)];
            for (code, n) in classes.into_iter().chain([("other", r.other)]) {
                self.sample(&name, &format!("{labels},code=\"{code}\""), n);
            }
        }
    }
}

const FRONTEND: &[Family<FrontendReport>] = &[
    family!("tollgate_frontend_current_connections", Gauge, "Client connections open now.", |f| f.sessions_cur),
    family!("tollgate_frontend_max_connections", Gauge, "The most client connections open at once since start.", |f| f
        .sessions_max),
    family!("tollgate_frontend_connections_total", Counter, "Client connections accepted.", |f| f.sessions_total),
    family!("tollgate_frontend_requests_total", Counter, "Requests received.", |f| f.requests_total),
    family!(
        "tollgate_frontend_requests_denied_total",
        Counter,
        "Requests refused by a deny, tarpit or silent_drop rule.",
        |f| f.denied
    ),
    family!("tollgate_frontend_connections_denied_total", Counter, "Connections refused by a connection rule.", |f| f
        .denied_connections),
    family!(
        "tollgate_frontend_request_errors_total",
        Counter,
        "Requests refused as malformed, too large or too slow.",
        |f| f.request_errors
    ),
    family!("tollgate_frontend_request_bytes_total", Counter, "Request bytes received from clients.", |f| f.bytes_in),
    family!("tollgate_frontend_response_bytes_total", Counter, "Response bytes sent to clients.", |f| f.bytes_out),
];

const BACKEND: &[Family<BackendReport>] = &[
    family!("tollgate_backend_up", Gauge, "1 while some server of the backend can take traffic, else 0.", |b| {
        u64::from(b.status == "UP")
    }),
    family!("tollgate_backend_active_servers", Gauge, "Servers taking traffic (up and ready).", |b| b.servers_up
        as u64),
    family!("tollgate_backend_servers", Gauge, "Servers configured.", |b| b.servers.len() as u64),
    family!("tollgate_backend_weight", Gauge, "Sum of the weights of the servers taking traffic.", |b| b.weight),
    family!("tollgate_backend_current_sessions", Gauge, "Requests in flight to its servers now.", |b| b.sessions_cur),
    family!("tollgate_backend_max_sessions", Gauge, "The most requests in flight at once since start.", |b| b
        .sessions_max),
    family!("tollgate_backend_sessions_total", Counter, "Requests sent to its servers.", |b| b.sessions_total),
    family!("tollgate_backend_current_queue", Gauge, "Requests waiting for a server slot (maxconn) now.", |b| b
        .queue_cur),
    family!("tollgate_backend_max_queue", Gauge, "The most requests waiting at once since start.", |b| b.queue_max),
    family!("tollgate_backend_request_bytes_total", Counter, "Request bytes sent to its servers.", |b| b.bytes_in),
    family!("tollgate_backend_response_bytes_total", Counter, "Response body bytes received from its servers.", |b| b
        .bytes_out),
    family!("tollgate_backend_connect_errors_total", Counter, "Failed connection attempts to its servers.", |b| b
        .connect_errors),
];

const SERVER: &[Family<ServerReport>] = &[
    family!(
        "tollgate_server_up",
        Gauge,
        "1 while the server passes its health checks (or has none), 0 while DOWN. The admin state is tollgate_server_state.",
        |s| u64::from(s.health != "down")
    ),
    family!("tollgate_server_weight", Gauge, "Weight in force (0 to 256).", |s| u64::from(s.weight)),
    family!("tollgate_server_current_sessions", Gauge, "Requests in flight to the server now.", |s| s.sessions_cur),
    family!("tollgate_server_max_sessions", Gauge, "The most requests in flight at once since start.", |s| s
        .sessions_max),
    Family {
        name: "tollgate_server_sessions_limit",
        kind: Kind::Gauge,
        help: "Its maxconn: the most requests in flight at once (servers without maxconn have no sample).",
        value: |s| s.sessions_limit.map(|l| Num::Int(u64::from(l))),
    },
    family!("tollgate_server_sessions_total", Counter, "Requests sent to the server.", |s| s.sessions_total),
    family!("tollgate_server_connections_total", Counter, "Connections opened to the server.", |s| s
        .connections_opened),
    family!("tollgate_server_connect_errors_total", Counter, "Failed connection attempts to the server.", |s| s
        .connect_errors),
    family!("tollgate_server_request_bytes_total", Counter, "Request bytes sent to the server.", |s| s.bytes_in),
    family!("tollgate_server_response_bytes_total", Counter, "Response body bytes received from the server.", |s| s
        .bytes_out),
    family!("tollgate_server_checks_total", Counter, "Active health checks run.", |s| s.check.checks),
    family!("tollgate_server_check_failures_total", Counter, "Active health checks that failed.", |s| s
        .check
        .failed_checks),
    family!("tollgate_server_downs_total", Counter, "Times the server went DOWN.", |s| s.check.downs),
    Family {
        name: "tollgate_server_last_check_duration_seconds",
        kind: Kind::Gauge,
        help: "How long the last health check took (servers not checked yet have no sample).",
        value: |s| s.check.last_duration_ms.map(|ms| Num::Float(ms as f64 / 1000.0)),
    },
];

const CACHE: &[Family<CacheReport>] = &[
    family!(
        "tollgate_cache_hits_total",
        Counter,
        "Requests answered from the store without going to the origin (fresh, stale allowed, stale-while-revalidate, 304 to a conditional request, HEAD from a stored GET, a coalesced request handed another's response).",
        |c| c.hits
    ),
    family!("tollgate_cache_misses_total", Counter, "Requests looked up and forwarded: nothing usable stored.", |c| c
        .misses),
    family!(
        "tollgate_cache_stale_total",
        Counter,
        "Responses served stale (stale-while-revalidate, max-stale, stale-if-error).",
        |c| c.stale
    ),
    family!(
        "tollgate_cache_revalidations_total",
        Counter,
        "Conditional requests sent to the origin to validate a stored response (foreground and background).",
        |c| c.revalidations
    ),
    family!(
        "tollgate_cache_not_modified_total",
        Counter,
        "Revalidations the origin answered 304: the stored response was freshened and served.",
        |c| c.not_modified
    ),
    family!(
        "tollgate_cache_coalesced_total",
        Counter,
        "Requests that waited for another request's origin response to the same URI.",
        |c| c.coalesced
    ),
    family!(
        "tollgate_cache_bypass_total",
        Counter,
        "Requests not looked up: methods other than GET and HEAD, preconditions, request bodies, upgrades.",
        |c| c.bypass
    ),
    family!(
        "tollgate_cache_only_if_cached_misses_total",
        Counter,
        "504 answers to only-if-cached requests with nothing usable stored.",
        |c| c.only_if_cached_misses
    ),
    family!("tollgate_cache_stores_total", Counter, "Responses stored.", |c| c.stores),
    family!("tollgate_cache_evictions_total", Counter, "Stored responses evicted to make room.", |c| c.evictions),
    family!(
        "tollgate_cache_purged_total",
        Counter,
        "Stored responses removed by PURGE, the admin API or invalidation after an unsafe method.",
        |c| c.purged
    ),
    family!(
        "tollgate_cache_invalidated_total",
        Counter,
        "Stored responses removed after an unsafe method succeeded (RFC 9111 section 4.4).",
        |c| c.invalidated
    ),
];

/// A counter of the disk tier (zones without one have no sample).
macro_rules! disk_family {
    ($name:literal, $help:literal, $field:ident) => {
        Family {
            name: $name,
            kind: Kind::Counter,
            help: $help,
            value: |c| c.disk.as_ref().map(|d| Num::from(d.$field)),
        }
    };
}

/// The disk tier's counters, per zone that has one.
const CACHE_DISK: &[Family<CacheReport>] = &[
    disk_family!(
        "tollgate_cache_disk_hits_total",
        "Lookups answered from the disk tier (nothing in memory), the file read and checked.",
        hits
    ),
    disk_family!(
        "tollgate_cache_disk_writes_total",
        "Files written to the disk tier (stored responses, and rewrites after a 304).",
        writes
    ),
    disk_family!("tollgate_cache_disk_evictions_total", "Files deleted from the disk tier to make room.", evictions),
    disk_family!(
        "tollgate_cache_disk_errors_total",
        "Disk tier files that could not be written or read, or failed their checksums (dropped, never served).",
        errors
    ),
    disk_family!(
        "tollgate_cache_disk_dropped_total",
        "Writes to the disk tier dropped because its writer was too far behind.",
        dropped
    ),
];

/// One tier of a zone.
struct Tier {
    objects: u64,
    bytes: u64,
    limit: u64,
}

/// Per zone and tier (`memory`, `disk`).
const CACHE_TIER: &[Family<Tier>] = &[
    family!("tollgate_cache_objects", Gauge, "Stored responses, each variant counted.", |t| t.objects),
    family!("tollgate_cache_bytes", Gauge, "Bytes held, as counted against the tier's limit.", |t| t.bytes),
    family!(
        "tollgate_cache_limit_bytes",
        Gauge,
        "The most bytes the tier holds (the zone's memory, or disk.size).",
        |t| t.limit
    ),
];

const PROCESS: &[Family<Info>] = &[
    family!(
        "tollgate_process_start_time_seconds",
        Gauge,
        "Start time of the process, in seconds since the Unix epoch.",
        |i| i.start_time
    ),
    family!("tollgate_workers", Gauge, "Worker threads.", |i| i.workers as u64),
    family!(
        "tollgate_connections_limit",
        Gauge,
        "The most client connections open at once (global.max_connections).",
        |i| i.max_connections as u64
    ),
    family!("tollgate_reloads_total", Counter, "Configuration reloads applied.", |i| i.reloads),
    family!("tollgate_pipes_used", Gauge, "Pipes moving bytes with splice now.", |i| i.pipes_used as u64),
    family!("tollgate_pipes_free", Gauge, "Empty pipes kept for reuse by splice.", |i| i.pipes_free as u64),
    family!(
        "tollgate_spliced_bytes_total",
        Counter,
        "Bytes moved with splice, both ways, not copied through the process.",
        |i| i.spliced_bytes
    ),
];

/// The whole exposition.
pub fn render(r: &Report) -> String {
    let mut w = Writer { out: String::with_capacity(16 * 1024) };
    w.head("tollgate_build_info", Kind::Gauge, "Always 1; the version is a label.");
    w.sample("tollgate_build_info", &format!("version=\"{}\"", escape_label(r.info.version)), 1);
    w.families(&[(String::new(), &r.info)], PROCESS);

    let frontends: Vec<Labelled<'_, FrontendReport>> =
        r.frontends.iter().map(|f| (format!("frontend=\"{}\"", escape_label(&f.name)), f)).collect();
    w.families(&frontends, FRONTEND);
    w.responses("tollgate_frontend", "Responses sent to clients", &frontends, |f| &f.responses);
    w.histogram(
        "tollgate_frontend_request_duration_seconds",
        "Requests' times, from their first byte to their response's last.",
        &frontends,
        |f| &f.duration,
    );

    let backends: Vec<Labelled<'_, BackendReport>> =
        r.backends.iter().map(|b| (format!("backend=\"{}\"", escape_label(&b.name)), b)).collect();
    w.families(&backends, BACKEND);
    w.responses("tollgate_backend", "Responses from its servers", &backends, |b| &b.responses);
    w.histogram(
        "tollgate_backend_response_duration_seconds",
        "From a request sent to one of its servers to the response head.",
        &backends,
        |b| &b.response_time,
    );
    w.histogram(
        "tollgate_backend_connect_duration_seconds",
        "Opening a connection to one of its servers (TCP, PROXY header, TLS, HTTP/2).",
        &backends,
        |b| &b.connect_time,
    );

    let servers: Vec<Labelled<'_, ServerReport>> = r
        .backends
        .iter()
        .flat_map(|b| {
            b.servers.iter().map(move |s| {
                (format!("backend=\"{}\",server=\"{}\"", escape_label(&b.name), escape_label(&s.name)), s)
            })
        })
        .collect();
    w.families(&servers, SERVER);
    w.head(
        "tollgate_server_state",
        Kind::Gauge,
        "Admin state: 1 for the one in force (ready, drain or maint), 0 for the others.",
    );
    for (labels, s) in &servers {
        for state in ["ready", "drain", "maint"] {
            w.sample("tollgate_server_state", &format!("{labels},state=\"{state}\""), u64::from(s.state == state));
        }
    }
    w.responses("tollgate_server", "Responses from the server", &servers, |s| &s.responses);
    let name = "tollgate_server_last_change_timestamp_seconds";
    w.head(
        name,
        Kind::Gauge,
        "When the server's state (admin or health) last changed, in seconds since the Unix epoch.",
    );
    let now = r.info.start_time + r.info.uptime_sec;
    for (labels, s) in &servers {
        w.sample(name, labels, now.saturating_sub(s.last_change_sec));
    }

    let zones: Vec<Labelled<'_, CacheReport>> =
        r.caches.iter().map(|c| (format!("zone=\"{}\"", escape_label(&c.name)), c)).collect();
    w.families(&zones, CACHE);
    w.families(&zones, CACHE_DISK);
    let mut tiers = Vec::new();
    for (labels, c) in &zones {
        tiers.push((
            format!("{labels},tier=\"memory\""),
            Tier { objects: c.objects, bytes: c.bytes, limit: c.memory_limit },
        ));
        if let Some(d) = &c.disk {
            tiers
                .push((format!("{labels},tier=\"disk\""), Tier { objects: d.objects, bytes: d.bytes, limit: d.limit }));
        }
    }
    let tiers: Vec<Labelled<'_, Tier>> = tiers.iter().map(|(l, t)| (l.clone(), t)).collect();
    w.families(&tiers, CACHE_TIER);

    // [[acme]] certificates: when each expires (none yet: no sample), and
    // the attempts that failed since the last success (the families are
    // there without samples in a config with none).
    {
        let labels = |a: &tollgate_proxy::runtime::report::AcmeReport| format!("acme=\"{}\"", escape_label(&a.name));
        let name = "tollgate_acme_certificate_expiry_timestamp_seconds";
        w.head(name, Kind::Gauge, "When the [[acme]] certificate served expires, in seconds since the Unix epoch.");
        for a in &r.acme {
            if let Some(t) = a.not_after {
                w.sample(name, &labels(a), t);
            }
        }
        let name = "tollgate_acme_failures";
        w.head(
            name,
            Kind::Gauge,
            "Attempts to obtain or renew the [[acme]] certificate that failed since the last success.",
        );
        for a in &r.acme {
            w.sample(name, &labels(a), u64::from(a.failures));
        }
    }
    // The etcd session: samples with [global.etcd] only (the families are
    // there without in a config with none).
    let etcd = r.etcd.as_ref();
    for (name, help, value) in [
        (
            "tollgate_etcd_connected",
            "1 while the session with etcd holds, else 0.",
            etcd.map(|e| u64::from(e.connected)),
        ),
        (
            "tollgate_etcd_pending_changes",
            "Server state changes made here and not yet written to etcd.",
            etcd.map(|e| e.pending as u64),
        ),
        (
            "tollgate_etcd_config_refused",
            "1 when the last config read from etcd was refused (the one before serves).",
            etcd.map(|e| u64::from(e.config_error.is_some())),
        ),
    ] {
        w.head(name, Kind::Gauge, help);
        if let Some(v) = value {
            w.sample(name, "", v);
        }
    }
    w.out
}

/// The process's own figures, as Prometheus' client libraries export them
/// (`process_*`), read from /proc at each scrape; a figure that cannot be read
/// is left out.
#[derive(Debug, Default)]
pub struct ProcessFigures {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time: Option<u64>,
}

impl ProcessFigures {
    /// The figures now; `start_time`: when the process started (Unix
    /// seconds), which the report already has.
    pub fn read(start_time: u64) -> Self {
        // /proc/self/stat: utime and stime (fields 14 and 15) in clock ticks,
        // after the command in parentheses (which may hold spaces).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let cpu_seconds = tick(11).zip(tick(12)).map(|(u, s)| (u + s) as f64 / hz);
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |key: &str| {
            let line = status.lines().find(|l| l.starts_with(key))?;
            line[key.len()..].split_whitespace().next()?.parse::<u64>().ok().map(|k| k * 1024)
        };
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        ProcessFigures {
            cpu_seconds,
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            open_fds,
            max_fds: limit.current,
            start_time: Some(start_time),
        }
    }
}

/// Appends the `process_*` families with the figures there are.
pub fn render_process(out: &mut String, p: &ProcessFigures) {
    let mut w = Writer { out: std::mem::take(out) };
    let families: [(&str, Kind, &str, Option<Num>); 6] = [
        (
            "process_cpu_seconds_total",
            Kind::Counter,
            "User and system CPU time spent, in seconds.",
            p.cpu_seconds.map(Num::Float),
        ),
        (
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory size, in bytes.",
            p.resident_bytes.map(Num::Int),
        ),
        ("process_virtual_memory_bytes", Kind::Gauge, "Virtual memory size, in bytes.", p.virtual_bytes.map(Num::Int)),
        ("process_open_fds", Kind::Gauge, "Open file descriptors.", p.open_fds.map(Num::Int)),
        ("process_max_fds", Kind::Gauge, "The file descriptor limit (RLIMIT_NOFILE, soft).", p.max_fds.map(Num::Int)),
        (
            "process_start_time_seconds",
            Kind::Gauge,
            "When the process started, in seconds since the Unix epoch.",
            p.start_time.map(Num::Int),
        ),
    ];
    for (name, kind, help, value) in families {
        if let Some(v) = value {
            w.head(name, kind, help);
            w.sample(name, "", v);
        }
    }
    *out = w.out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};
    use tollgate_proxy::runtime::report::CheckReport;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("plain"), "plain");
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("two\nlines"), "two\\nlines");
        assert_eq!(escape_label("\\n"), "\\\\n", "a backslash then n is not a newline");
        assert_eq!(escape_help("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"", "help keeps its quotes");
    }

    fn server(name: &str, state: &'static str, health: &'static str, limit: Option<u32>) -> ServerReport {
        ServerReport {
            name: name.into(),
            addr: "127.0.0.1:1".into(),
            fqdn: None,
            state,
            health,
            status: "UP",
            weight: 3,
            configured_weight: 1,
            backup: false,
            cookie: String::new(),
            sessions_cur: 1,
            sessions_max: 4,
            sessions_limit: limit,
            sessions_total: 7,
            session_rate: 0,
            session_rate_max: 0,
            bytes_in: 70,
            bytes_out: 700,
            connect_errors: 2,
            connections_opened: 5,
            responses: Responses { r2xx: 6, r5xx: 1, ..Default::default() },
            check: CheckReport {
                active: true,
                passive: false,
                last: Some("HTTP status 200".into()),
                last_ok: Some(true),
                last_duration_ms: limit.map(|_| 12),
                checks: 9,
                failed_checks: 3,
                downs: 1,
                consecutive_failures: 0,
            },
            last_change_sec: 60,
        }
    }

    fn report() -> Report {
        Report {
            info: Info {
                name: "tollgate",
                version: "1.2.3",
                pid: 1,
                uptime_sec: 5,
                start_time: 1_700_000_000,
                workers: 2,
                max_connections: 100,
                current_connections: 0,
                total_connections: 0,
                total_requests: 0,
                connection_rate: 0,
                request_rate: 0,
                reloads: 4,
                pipes_max: 128,
                pipes_used: 3,
                pipes_free: 5,
                spliced_bytes: 1_000_000,
                config: "x.toml".into(),
            },
            frontends: vec![FrontendReport {
                name: "web".into(),
                mode: "http",
                binds: vec![],
                sessions_cur: 1,
                sessions_max: 2,
                sessions_limit: 100,
                sessions_total: 10,
                session_rate: 0,
                session_rate_max: 0,
                requests_total: 12,
                requests_h2_total: 0,
                requests_h3_total: 0,
                request_rate: 0,
                request_rate_max: 0,
                bytes_in: 300,
                bytes_out: 4000,
                denied: 1,
                denied_connections: 0,
                request_errors: 0,
                duration: HistogramReport {
                    cumulative: vec![5, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8],
                    sum_seconds: 12.5,
                },
                responses: Responses { r2xx: 11, r4xx: 1, ..Default::default() },
            }],
            backends: vec![BackendReport {
                name: "we\"ird\\b".into(),
                mode: "http",
                balance: "roundrobin".into(),
                status: "UP",
                servers_up: 1,
                sessions_cur: 1,
                sessions_max: 4,
                sessions_total: 7,
                session_rate: 0,
                session_rate_max: 0,
                queue_cur: 0,
                queue_max: 2,
                bytes_in: 70,
                bytes_out: 700,
                connect_errors: 2,
                response_time: HistogramReport {
                    cumulative: vec![1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7, 7, 7],
                    sum_seconds: 0.25,
                },
                connect_time: HistogramReport { cumulative: vec![3; 13], sum_seconds: 0.001 },
                responses: Responses { r2xx: 6, r5xx: 1, ..Default::default() },
                weight: 3,
                servers: vec![server("s1", "ready", "up", Some(10)), server("s2", "drain", "down", None)],
            }],
            caches: vec![CacheReport {
                name: "main".into(),
                memory_limit: 1 << 20,
                objects: 3,
                bytes: 4000,
                hits: 10,
                misses: 2,
                stores: 2,
                disk: Some(tollgate_proxy::cache::DiskReport {
                    limit: 1 << 30,
                    objects: 7,
                    bytes: 28672,
                    hits: 4,
                    writes: 9,
                    evictions: 1,
                    errors: 1,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            acme: Vec::new(),
            etcd: None,
        }
    }

    /// A strict reader of the text format: every sample line belongs to the
    /// family whose HELP and TYPE came just before it; families are not split.
    /// Returns (name and labels) -> value.
    fn parse(text: &str) -> HashMap<String, f64> {
        let mut samples = HashMap::new();
        let mut seen = HashSet::new();
        let mut current: Option<(String, String)> = None;
        let mut help_for: Option<String> = None;
        let name_ok = |n: &str| {
            (n.starts_with("tollgate_") || n.starts_with("process_"))
                && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && !n.contains("__")
        };
        assert!(text.ends_with('\n'), "the last line ends with a newline");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP name text");
                assert!(name_ok(name), "bad name {name}");
                assert!(!help.is_empty() && !help.contains('\n'));
                assert!(seen.insert(name.to_string()), "family {name} appears twice");
                help_for = Some(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                assert_eq!(help_for.take().as_deref(), Some(name), "TYPE right after its HELP");
                assert!(kind == "counter" || kind == "gauge" || kind == "histogram", "{kind}");
                assert_eq!(
                    kind == "counter",
                    name.ends_with("_total"),
                    "{name}: counters, and only they, end in _total"
                );
                current = Some((name.to_string(), kind.to_string()));
            } else {
                assert!(!line.starts_with('#') && !line.is_empty(), "stray line {line:?}");
                let (series, value) = line.rsplit_once(' ').expect("series value");
                let name = series.split('{').next().unwrap();
                let (family, kind) = current.as_ref().expect("a sample after a TYPE");
                let of_family = match kind.as_str() {
                    "histogram" => ["_bucket", "_sum", "_count"].iter().any(|s| name.strip_suffix(s) == Some(family)),
                    _ => name == family,
                };
                assert!(of_family, "sample of another family: {line}");
                assert_eq!(name.ends_with("_bucket"), series.contains("le=\""), "le on buckets only: {line}");
                if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
                    let inner = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}')).expect("{labels}");
                    check_labels(inner);
                }
                let v: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
                assert!(samples.insert(series.to_string(), v).is_none(), "duplicate series {series}");
            }
        }
        samples
    }

    /// `k="v",k="v"` with escapes only as the format allows.
    fn check_labels(mut s: &str) {
        loop {
            let (key, rest) = s.split_once("=\"").expect("key=\"");
            assert!(!key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "label {key}");
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next().expect("closing quote") {
                    (_, '\\') => assert!(matches!(chars.next(), Some((_, '\\' | '"' | 'n'))), "bad escape"),
                    (i, '"') => break i,
                    (_, c) => assert!(c != '\n'),
                }
            };
            match &rest[end + 1..] {
                "" => return,
                more => s = more.strip_prefix(',').expect("comma between labels"),
            }
        }
    }

    /// The process's figures: read from /proc here, well formed, in
    /// Prometheus' client libraries' names; one that cannot be read is left out.
    #[test]
    fn process_figures_follow_the_client_libraries() {
        let mut text = render(&report());
        render_process(&mut text, &ProcessFigures::read(report().info.start_time));
        let m = parse(&text);
        for name in
            ["process_resident_memory_bytes", "process_open_fds", "process_max_fds", "process_start_time_seconds"]
        {
            assert!(m.get(name).is_some_and(|v| *v > 0.0), "{name} in\n{text}");
        }
        assert!(m.contains_key("process_cpu_seconds_total"));
        let mut text = String::new();
        render_process(&mut text, &ProcessFigures { open_fds: Some(7), ..Default::default() });
        assert_eq!(
            text,
            "# HELP process_open_fds Open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds 7\n"
        );
    }

    #[test]
    fn the_exposition_is_well_formed_and_complete() {
        let text = render(&report());
        let m = parse(&text);
        let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
        assert_eq!(get("tollgate_build_info{version=\"1.2.3\"}"), 1.0);
        assert_eq!(get("tollgate_process_start_time_seconds"), 1_700_000_000.0);
        assert_eq!(get("tollgate_reloads_total"), 4.0);
        assert_eq!(get("tollgate_pipes_used"), 3.0);
        assert_eq!(get("tollgate_pipes_free"), 5.0);
        assert_eq!(get("tollgate_spliced_bytes_total"), 1_000_000.0);
        assert_eq!(get("tollgate_frontend_requests_total{frontend=\"web\"}"), 12.0);
        assert_eq!(get("tollgate_frontend_connections_total{frontend=\"web\"}"), 10.0);
        assert_eq!(get("tollgate_frontend_http_responses_total{frontend=\"web\",code=\"2xx\"}"), 11.0);
        assert_eq!(get("tollgate_frontend_http_responses_total{frontend=\"web\",code=\"other\"}"), 0.0);
        assert_eq!(get("tollgate_frontend_request_bytes_total{frontend=\"web\"}"), 300.0);
        let b = r#"backend="we\"ird\\b""#;
        assert_eq!(get(&format!("tollgate_backend_max_queue{{{b}}}")), 2.0);
        assert_eq!(get(&format!("tollgate_backend_http_responses_total{{{b},code=\"5xx\"}}")), 1.0);
        let s1 = format!("{b},server=\"s1\"");
        let s2 = format!("{b},server=\"s2\"");
        assert_eq!(get(&format!("tollgate_server_up{{{s1}}}")), 1.0);
        assert_eq!(get(&format!("tollgate_server_up{{{s2}}}")), 0.0);
        assert_eq!(get(&format!("tollgate_server_state{{{s1},state=\"ready\"}}")), 1.0);
        assert_eq!(get(&format!("tollgate_server_state{{{s1},state=\"drain\"}}")), 0.0);
        assert_eq!(get(&format!("tollgate_server_state{{{s2},state=\"drain\"}}")), 1.0);
        assert_eq!(get(&format!("tollgate_server_state{{{s2},state=\"ready\"}}")), 0.0);
        assert_eq!(get(&format!("tollgate_server_weight{{{s1}}}")), 3.0);
        assert_eq!(get(&format!("tollgate_server_last_change_timestamp_seconds{{{s1}}}")), 1_700_000_005.0 - 60.0);
        assert_eq!(get(&format!("tollgate_server_http_responses_total{{{s2},code=\"5xx\"}}")), 1.0);
        assert_eq!(get(&format!("tollgate_server_http_responses_total{{{s2},code=\"2xx\"}}")), 6.0);
        assert_eq!(get(&format!("tollgate_server_check_failures_total{{{s1}}}")), 3.0);
        assert_eq!(get(&format!("tollgate_server_last_check_duration_seconds{{{s1}}}")), 0.012);
        assert_eq!(get(&format!("tollgate_server_sessions_limit{{{s1}}}")), 10.0);
        // Optional values leave no sample, not a made-up one.
        assert!(!m.contains_key(&format!("tollgate_server_sessions_limit{{{s2}}}")));
        assert!(!m.contains_key(&format!("tollgate_server_last_check_duration_seconds{{{s2}}}")));
        // Histograms: cumulative buckets, +Inf equal to _count.
        let d = "tollgate_frontend_request_duration_seconds";
        assert!(text.contains(&format!("# TYPE {d} histogram\n")));
        assert_eq!(get(&format!("{d}_bucket{{frontend=\"web\",le=\"0.001\"}}")), 5.0);
        assert_eq!(get(&format!("{d}_bucket{{frontend=\"web\",le=\"0.005\"}}")), 6.0);
        assert_eq!(get(&format!("{d}_bucket{{frontend=\"web\",le=\"10\"}}")), 7.0);
        assert_eq!(get(&format!("{d}_bucket{{frontend=\"web\",le=\"+Inf\"}}")), 8.0);
        assert_eq!(get(&format!("{d}_count{{frontend=\"web\"}}")), 8.0);
        assert_eq!(get(&format!("{d}_sum{{frontend=\"web\"}}")), 12.5);
        let r = "tollgate_backend_response_duration_seconds";
        assert_eq!(get(&format!("{r}_bucket{{{b},le=\"0.05\"}}")), 5.0);
        assert_eq!(get(&format!("{r}_count{{{b}}}")), 7.0);
        assert_eq!(get(&format!("tollgate_backend_connect_duration_seconds_sum{{{b}}}")), 0.001);
        assert!(text.contains("# TYPE tollgate_server_downs_total counter\n"));
        assert!(text.contains("# TYPE tollgate_server_up gauge\n"));
        assert_eq!(get("tollgate_cache_hits_total{zone=\"main\"}"), 10.0);
        assert_eq!(get("tollgate_cache_stores_total{zone=\"main\"}"), 2.0);
        assert_eq!(get("tollgate_cache_objects{zone=\"main\",tier=\"memory\"}"), 3.0);
        assert_eq!(get("tollgate_cache_limit_bytes{zone=\"main\",tier=\"memory\"}"), 1048576.0);
        assert_eq!(get("tollgate_cache_objects{zone=\"main\",tier=\"disk\"}"), 7.0);
        assert_eq!(get("tollgate_cache_bytes{zone=\"main\",tier=\"disk\"}"), 28672.0);
        assert_eq!(get("tollgate_cache_limit_bytes{zone=\"main\",tier=\"disk\"}"), 1073741824.0);
        assert_eq!(get("tollgate_cache_disk_hits_total{zone=\"main\"}"), 4.0);
        assert_eq!(get("tollgate_cache_disk_writes_total{zone=\"main\"}"), 9.0);
        assert_eq!(get("tollgate_cache_disk_evictions_total{zone=\"main\"}"), 1.0);
        assert_eq!(get("tollgate_cache_disk_errors_total{zone=\"main\"}"), 1.0);
        assert_eq!(get("tollgate_cache_disk_dropped_total{zone=\"main\"}"), 0.0);
    }

    #[test]
    fn the_reader_rejects_malformed_text() {
        let bad = [
            "tollgate_x 1\n",                                                           // no TYPE
            "# HELP tollgate_x h\n# TYPE tollgate_x counter\ntollgate_x 1\n",           // counter without _total
            "# HELP tollgate_a h\n# TYPE tollgate_a gauge\ntollgate_b 1\n",             // another family's sample
            "# HELP tollgate_a h\n# TYPE tollgate_a gauge\ntollgate_a{k=\"a\"b\"} 1\n", // bad quote
            "# HELP tollgate_a h\n# TYPE tollgate_a gauge\ntollgate_a 1",               // no final newline
        ];
        for text in bad {
            assert!(std::panic::catch_unwind(|| parse(text)).is_err(), "accepted: {text:?}");
        }
    }

    /// `[[acme]]` certificates: the expiry of each one obtained, and the
    /// failed attempts of each.
    #[test]
    fn acme_certificates_have_their_expiry_and_failures() {
        let mut r = report();
        let acme = |name: &str, not_after, failures| tollgate_proxy::runtime::report::AcmeReport {
            name: name.into(),
            domains: vec!["a.test".into()],
            not_after,
            renew_at: not_after.map(|t| t - 100),
            failures,
        };
        r.acme = vec![acme("site", Some(1_800_000_000), 0), acme("new", None, 3)];
        let text = render(&r);
        let m = parse(&text);
        assert_eq!(m.get("tollgate_acme_certificate_expiry_timestamp_seconds{acme=\"site\"}"), Some(&1.8e9));
        assert!(!m.contains_key("tollgate_acme_certificate_expiry_timestamp_seconds{acme=\"new\"}"), "none yet");
        assert_eq!(m.get("tollgate_acme_failures{acme=\"new\"}"), Some(&3.0));
        assert_eq!(m.get("tollgate_acme_failures{acme=\"site\"}"), Some(&0.0));
    }

    #[test]
    fn no_frontends_or_backends_still_well_formed() {
        let mut r = report();
        r.frontends.clear();
        r.backends.clear();
        r.caches.clear();
        let m = parse(&render(&r));
        assert_eq!(m.len(), 8, "only the process samples: {m:?}");
    }
}
