//! nginx.conf: blocks of directives, includes followed, translated.
//!
//! [`parse`] reads the files into a tree of directives; the main context, the
//! `events` and `http` blocks are translated here, `server` blocks in
//! [`server`] (one frontend per set of listening addresses), their locations
//! in [`location`] (rules, in nginx's order of precedence), `upstream` and
//! `stream` in [`upstream`]. Each directive is marked done when it has been
//! looked at; those left over at the end are reported, so that nothing is
//! dropped without a word.

mod files;
mod location;
mod parse;
mod proxy;
mod rewrite;
mod server;
mod upstream;

#[cfg(test)]
mod tests;

use crate::out::{Out, Table, V};
use crate::{Error, Kind, Warning, units};
use parse::Directive;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

pub fn translate(text: &str, path: &Path, root: Option<&Path>) -> Result<(Out, Vec<Warning>), Error> {
    let tree = parse::Parser::new(path, root).parse(text, path)?;
    let mut cx = Cx::new(path);
    cx.root = root.map(Path::to_path_buf);
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    cx.out.header.push(format!("Translated from {file} (nginx) by `tollgate import`."));
    cx.main(&tree);
    cx.sweep(&tree);
    // nginx sends X-Forwarded-For only where a proxy_set_header says so.
    let http_frontends = cx.out.frontends.iter().any(|f| f.table.get("mode") != Some(&V::s("tcp")));
    if http_frontends && !sets_forwarded_for(&tree) {
        cx.out.defaults.set(
            "forward_for",
            V::Bool(false),
            "no `proxy_set_header X-Forwarded-For` in the nginx config: X-Forwarded-* are not added",
        );
    }
    Ok(cx.finish())
}

fn sets_forwarded_for(tree: &[Directive]) -> bool {
    tree.iter().any(|d| {
        (d.name == "proxy_set_header" && d.arg(0).eq_ignore_ascii_case("x-forwarded-for"))
            || d.block.as_deref().is_some_and(sets_forwarded_for)
    })
}

/// The comment written above a key: where the directive was read, and it.
pub(crate) fn comment_of(d: &Directive) -> String {
    let file = d.pos.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{file}:{}: {}", d.pos.line, d.head())
}

/// The warnings, and which directives have been looked at.
#[derive(Default)]
pub(crate) struct Log {
    warnings: Vec<(usize, Warning)>,
    warned: HashSet<(usize, String)>,
    done: HashSet<usize>,
    /// Comments for the end of the file.
    pub trailer: Vec<String>,
}

impl Log {
    /// Marks the directive as looked at.
    pub fn done(&mut self, d: &Directive) {
        self.done.insert(d.id);
    }

    /// Marks the directive and all it holds as looked at.
    pub fn done_all(&mut self, d: &Directive) {
        self.done.insert(d.id);
        for k in d.children() {
            self.done_all(k);
        }
    }

    /// Marks the directive as looked at and gives its comment.
    pub fn com(&mut self, d: &Directive) -> String {
        self.done(d);
        comment_of(d)
    }

    /// Records a warning for the directive (once, however often it is
    /// inherited) and gives the comment to write where it would have gone.
    pub fn warn(&mut self, d: &Directive, kind: Kind, message: impl Into<String>) -> Option<String> {
        self.done(d);
        let message = message.into();
        if !self.warned.insert((d.id, message.clone())) {
            return None;
        }
        let w = Warning { pos: d.pos.clone(), kind, directive: d.text(), message };
        let c = w.comment();
        self.warnings.push((d.id, w));
        Some(c)
    }

    /// [`Log::warn`], the comment written among the table's keys.
    pub fn warn_to(&mut self, t: &mut Table, d: &Directive, kind: Kind, message: impl Into<String>) {
        if let Some(c) = self.warn(d, kind, message) {
            t.note(c);
        }
    }

    /// [`Log::warn`], the comment written into `notes`.
    pub fn warn_in(&mut self, notes: &mut Vec<String>, d: &Directive, kind: Kind, message: impl Into<String>) {
        if let Some(c) = self.warn(d, kind, message) {
            notes.push(c);
        }
    }

    /// [`Log::warn`], the comment written at the end of the file.
    pub fn warn_trailer(&mut self, d: &Directive, kind: Kind, message: impl Into<String>) {
        if let Some(c) = self.warn(d, kind, message) {
            self.trailer.push(c);
        }
    }

    pub fn is_done(&self, d: &Directive) -> bool {
        self.done.contains(&d.id)
    }
}

/// A `limit_req_zone`: a table counting requests.
#[derive(Debug, Clone)]
pub(crate) struct ReqZone {
    pub table: String,
    pub rate: i64,
}

/// Everything being built.
pub(crate) struct Cx {
    pub out: Out,
    pub log: Log,
    /// The main config's directory (relative paths of htpasswd files...).
    pub main_dir: PathBuf,
    /// Absolute paths are read under it (`tollgate import --root`).
    pub root: Option<PathBuf>,
    /// Backend and table names taken (they share one space: a table may not
    /// have a backend's name).
    pub taken: HashSet<String>,
    pub frontend_names: HashSet<String>,
    /// Backends made for an address or a directory, by what they stand for.
    pub backend_keys: HashMap<String, String>,
    /// `upstream` blocks of `http`, by nginx name: backend name.
    pub http_upstreams: HashMap<String, String>,
    /// `upstream` blocks of `stream`.
    pub stream_upstreams: HashMap<String, String>,
    pub req_zones: HashMap<String, ReqZone>,
    /// `limit_conn_zone`s keyed by the client address: table name.
    pub conn_zones: HashMap<String, String>,
    /// `proxy_cache_path` zones: nginx name -> Tollgate name.
    pub cache_zones: HashMap<String, String>,
    /// htpasswd files read: userlist name (None: unusable).
    pub userlists: HashMap<String, Option<String>>,
    pub workers: Option<i64>,
    pub limit_req_status: i64,
    pub limit_conn_status: i64,
}

impl Cx {
    fn new(path: &Path) -> Cx {
        Cx {
            out: Out::default(),
            log: Log::default(),
            main_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            root: None,
            taken: HashSet::new(),
            frontend_names: HashSet::new(),
            backend_keys: HashMap::new(),
            http_upstreams: HashMap::new(),
            stream_upstreams: HashMap::new(),
            req_zones: HashMap::new(),
            conn_zones: HashMap::new(),
            cache_zones: HashMap::new(),
            userlists: HashMap::new(),
            workers: None,
            limit_req_status: 503,
            limit_conn_status: 503,
        }
    }

    fn finish(mut self) -> (Out, Vec<Warning>) {
        self.out.trailer.append(&mut self.log.trailer);
        let mut w = std::mem::take(&mut self.log.warnings);
        w.sort_by_key(|(id, _)| *id);
        (self.out, w.into_iter().map(|(_, w)| w).collect())
    }

    /// A backend or table name not taken yet, made from `want`.
    pub fn unique_name(&mut self, want: &str) -> String {
        let n = short_name(want);
        let name = unique(&n, &self.taken);
        self.taken.insert(name.clone());
        name
    }

    pub fn unique_frontend(&mut self, want: &str) -> String {
        let n = short_name(want);
        let name = unique(&n, &self.frontend_names);
        self.frontend_names.insert(name.clone());
        name
    }

    /// Reports every directive nobody looked at: nothing goes unsaid.
    fn sweep(&mut self, tree: &[Directive]) {
        for d in tree {
            if !self.log.is_done(d) {
                if let Some(why) = &d.unresolved {
                    let why = why.clone();
                    self.log.warn_trailer(d, Kind::NoEquivalent, why);
                } else {
                    self.log.warn_trailer(
                        d,
                        Kind::NoEquivalent,
                        "not translated: nothing in the output inherits it (no server or location uses it)",
                    );
                }
            }
            self.sweep(d.children());
        }
    }

    fn main(&mut self, tree: &[Directive]) {
        let mut events = Vec::new();
        let mut https: Vec<Vec<&Directive>> = Vec::new();
        let mut streams = Vec::new();
        // A sites-enabled snippet: server and upstream blocks at the top, as
        // the http block that includes it would see them.
        let snippet = tree.iter().any(|d| matches!(d.name.as_str(), "server" | "upstream") && d.block.is_some());
        let mut top: Vec<&Directive> = Vec::new();
        for d in tree {
            let c = comment_of(d);
            match d.name.as_str() {
                "worker_processes" => {
                    self.log.done(d);
                    match d.arg(0) {
                        "auto" => {
                            self.out
                                .global
                                .note(format!("{c}\n  one worker per core: Tollgate's default (workers = 0)"));
                            self.workers = None;
                        }
                        n => match n.parse::<i64>() {
                            Ok(n) if (1..=256).contains(&n) => {
                                self.out.global.set("workers", V::Int(n), c);
                                self.workers = Some(n);
                            }
                            _ => self.log.warn_to(
                                &mut self.out.global,
                                d,
                                Kind::NoEquivalent,
                                "workers takes 1 to 256 (0 for one per core)",
                            ),
                        },
                    }
                }
                "user" => {
                    if d.args.is_empty() {
                        self.log.warn_to(&mut self.out.global, d, Kind::NoEquivalent, "no user given");
                        continue;
                    }
                    self.out.global.set("user", V::s(d.arg(0)), self.log.com(d));
                    if d.args.len() > 1 {
                        self.out.global.set("group", V::s(d.arg(1)), "");
                    }
                }
                "pid" => {
                    if d.arg(0) == "off" {
                        self.log.warn_to(
                            &mut self.out.global,
                            d,
                            Kind::NoEquivalent,
                            "no pid file: Tollgate's default",
                        );
                    } else {
                        self.out.global.set("pidfile", V::s(d.arg(0)), self.log.com(d));
                    }
                }
                "worker_shutdown_timeout" => match units::duration(d.arg(0), false) {
                    Some(v) => self.out.global.set("grace_period", v, self.log.com(d)),
                    None => self.log.warn_to(&mut self.out.global, d, Kind::NoEquivalent, "not a duration"),
                },
                "events" => {
                    self.log.done(d);
                    events.push(d);
                }
                "http" => {
                    self.log.done(d);
                    https.push(d.children().iter().collect());
                }
                "stream" => {
                    self.log.done(d);
                    streams.push(d);
                }
                "load_module" => self.log.warn_to(
                    &mut self.out.global,
                    d,
                    Kind::NoEquivalent,
                    "Tollgate has no modules: what it does is built in",
                ),
                "mail" => {
                    self.log.done_all(d);
                    self.log.warn_to(&mut self.out.global, d, Kind::NoEquivalent, "Tollgate does not proxy mail");
                }
                _ if snippet => top.push(d),
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        self.out.global.note(c);
                    }
                }
            }
        }
        if !top.is_empty() {
            https.push(top);
        }
        for e in events {
            self.events(e);
        }
        for h in https {
            self.http(&h);
        }
        for s in streams {
            self.stream(s);
        }
    }

    fn events(&mut self, e: &Directive) {
        for d in e.children() {
            match d.name.as_str() {
                "worker_connections" => {
                    let Ok(n) = d.arg(0).parse::<i64>() else {
                        self.log.warn_to(&mut self.out.global, d, Kind::NoEquivalent, "not a number");
                        continue;
                    };
                    let (total, msg) = match self.workers {
                        Some(w) => (
                            n.saturating_mul(w),
                            format!(
                                "max_connections = worker_connections x worker_processes ({n} x {w}); nginx counts the \
                                 connections to servers too, Tollgate only those of clients"
                            ),
                        ),
                        None => (
                            n,
                            "worker_processes auto: max_connections is worker_connections for the whole process, not per \
                             worker (nginx counts the connections to servers too, Tollgate only those of clients)"
                                .to_string(),
                        ),
                    };
                    let total = total.clamp(1, 10_000_000);
                    let c = self.log.com(d);
                    self.out.global.set("max_connections", V::Int(total), c);
                    self.log.warn_to(&mut self.out.global, d, Kind::Approximate, msg);
                }
                "multi_accept" | "use" | "accept_mutex" | "accept_mutex_delay" | "worker_aio_requests" => {
                    self.log.warn_to(
                        &mut self.out.global,
                        d,
                        Kind::NoEquivalent,
                        "not needed: each Tollgate worker accepts on its own SO_REUSEPORT socket with epoll",
                    );
                }
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        self.out.global.note(c);
                    }
                }
            }
        }
    }

    fn http(&mut self, kids: &[&Directive]) {
        // Names first: zones, caches and upstreams are referred to from anywhere.
        for d in kids {
            match d.name.as_str() {
                "limit_req_zone" => self.limit_req_zone(d),
                "limit_conn_zone" => self.limit_conn_zone(d),
                "proxy_cache_path" => self.proxy_cache_path(d),
                "upstream" if d.block.is_some() => {
                    let name = self.unique_name(d.arg(0));
                    self.http_upstreams.insert(d.arg(0).to_string(), name);
                }
                _ => {}
            }
        }
        for d in kids {
            if d.name == "upstream" && d.block.is_some() {
                self.upstream(d, false);
            }
        }
        let kids: Vec<&Directive> = kids.to_vec();
        let mut inherit: Vec<&Directive> = Vec::new();
        let mut servers = Vec::new();
        let mut timeouts = ClientTimeouts::default();
        for d in kids {
            let name = d.name.as_str();
            match name {
                "limit_req_zone" | "limit_conn_zone" | "proxy_cache_path" | "upstream" => {}
                "server" => {
                    self.log.done(d);
                    servers.push(d);
                }
                "limit_req_status" | "limit_conn_status" => match d.arg(0).parse::<i64>() {
                    Ok(s) if (400..=599).contains(&s) => {
                        if name == "limit_req_status" {
                            self.limit_req_status = s;
                        } else {
                            self.limit_conn_status = s;
                        }
                        let c = self.log.com(d);
                        self.out.defaults.note(format!("{c}\n  the status of the rate-limit rules below"));
                    }
                    _ => self.log.warn_to(&mut self.out.defaults, d, Kind::NoEquivalent, "a status 400 to 599 only"),
                },
                "map" | "geo" | "split_clients" => {
                    self.log.done_all(d);
                    self.log.warn_to(
                        &mut self.out.defaults,
                        d,
                        Kind::NoEquivalent,
                        "Tollgate has no variables: uses of it are reported where they are",
                    );
                }
                "types" => {
                    self.log.done_all(d);
                    self.log.warn_to(
                        &mut self.out.defaults,
                        d,
                        Kind::NoEquivalent,
                        "not needed: Tollgate's static backends have their own table of content types \
                         (static.types adds to it)",
                    );
                }
                "log_format" => self.log.warn_to(
                    &mut self.out.global,
                    d,
                    Kind::Approximate,
                    "Tollgate writes its own access log format (text or JSON, global.access_log_format): \
                     the fields of this one are not carried over",
                ),
                "access_log" => {
                    let g = &mut self.out.global;
                    access_log(&mut self.log, g, d);
                }
                "keepalive_timeout" | "client_header_timeout" | "client_body_timeout" | "send_timeout" => {
                    let mut p = Pending::default();
                    timeouts.take(&mut self.log, &mut p, d);
                    p.apply(&mut self.log, &mut self.out.defaults);
                }
                "client_max_body_size" | "large_client_header_buffers" | "http2_max_concurrent_streams" => {
                    let mut p = Pending::default();
                    server::limits(&mut self.log, &mut p, d);
                    p.apply(&mut self.log, &mut self.out.defaults);
                }
                "resolver" | "resolver_timeout" => self.resolver(d),
                _ => {
                    if server::is_server_level(name) || location::inheritable(name) {
                        inherit.push(d);
                    } else if let Some(c) = other(&mut self.log, d) {
                        self.out.defaults.note(c);
                    }
                }
            }
        }
        self.servers(&servers, &inherit);
    }

    fn resolver(&mut self, d: &Directive) {
        let c = self.log.com(d);
        if d.name == "resolver_timeout" {
            match units::duration(d.arg(0), false) {
                Some(v) => self.out.global.set("dns.timeout", v, c),
                None => self.log.warn_to(&mut self.out.global, d, Kind::NoEquivalent, "not a duration"),
            }
            return;
        }
        let mut ns = Vec::new();
        let mut extra = Vec::new();
        for a in &d.args {
            if a.contains('=') {
                extra.push(a.clone());
                continue;
            }
            let ok = a.parse::<std::net::IpAddr>().is_ok()
                || a.parse::<std::net::SocketAddr>().is_ok()
                || a.strip_prefix('[')
                    .and_then(|r| r.strip_suffix(']'))
                    .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
            if ok {
                ns.push(a.trim_start_matches('[').trim_end_matches(']').to_string());
            } else {
                extra.push(a.clone());
            }
        }
        // `[::1]` without a port is written bare; with a port it stays bracketed.
        let ns: Vec<String> =
            ns.into_iter().map(|a| if a.contains("]:") && !a.starts_with('[') { format!("[{a}") } else { a }).collect();
        if ns.is_empty() {
            self.log.warn_to(&mut self.out.global, d, Kind::NoEquivalent, "no name server address Tollgate can use");
            return;
        }
        self.out.global.set("dns.nameservers", V::strs(ns), c);
        if !extra.is_empty() {
            self.log.warn_to(
                &mut self.out.global,
                d,
                Kind::Approximate,
                format!(
                    "{} not carried over: each backend looks its server names up again every resolve.every (30s)",
                    extra.join(" ")
                ),
            );
        }
    }

    fn limit_req_zone(&mut self, d: &Directive) {
        let key = d.arg(0);
        let mut zone = None;
        let mut rate = None;
        for a in d.args.iter().skip(1) {
            if let Some(z) = a.strip_prefix("zone=") {
                zone = z.split(':').next().map(str::to_string);
            } else if let Some(r) = a.strip_prefix("rate=") {
                rate = Some(r.to_string());
            }
        }
        let (Some(zone), Some(rate)) = (zone, rate) else {
            self.log.warn_to(&mut self.out.defaults, d, Kind::NoEquivalent, "needs zone= and rate=");
            return;
        };
        let Some(tkey) = table_key(key) else {
            self.log.warn_to(
                &mut self.out.defaults,
                d,
                Kind::NoEquivalent,
                format!("a table is keyed by the client address, a header, a cookie or the path, not by {key}"),
            );
            return;
        };
        let (n, period) = match rate.strip_suffix("r/s") {
            Some(n) => (n, "1s"),
            None => match rate.strip_suffix("r/m") {
                Some(n) => (n, "1m"),
                None => ("", ""),
            },
        };
        let Ok(n) = n.parse::<i64>() else {
            self.log.warn_to(&mut self.out.defaults, d, Kind::NoEquivalent, format!("rate {rate} not understood"));
            return;
        };
        let name = self.unique_name(&zone);
        let mut t = Table::default();
        t.set("name", V::s(&name), self.log.com(d));
        t.set("key", V::s(tkey), "");
        t.set("period", V::s(period), "");
        t.set("expire", V::s(period), "");
        self.out.tables.push(t);
        self.req_zones.insert(zone, ReqZone { table: name, rate: n });
    }

    fn limit_conn_zone(&mut self, d: &Directive) {
        let key = d.arg(0);
        let zone = d.args.iter().skip(1).find_map(|a| a.strip_prefix("zone=")).and_then(|z| z.split(':').next());
        let Some(zone) = zone else {
            self.log.warn_to(&mut self.out.defaults, d, Kind::NoEquivalent, "needs zone=");
            return;
        };
        if table_key(key) != Some("src") {
            self.log.warn_to(
                &mut self.out.defaults,
                d,
                Kind::NoEquivalent,
                format!("connections are counted per client address only, not by {key}"),
            );
            return;
        }
        let name = self.unique_name(zone);
        let mut t = Table::default();
        t.set("name", V::s(&name), self.log.com(d));
        t.set("key", V::s("src"), "");
        self.out.tables.push(t);
        self.conn_zones.insert(zone.to_string(), name);
    }

    fn proxy_cache_path(&mut self, d: &Directive) {
        let path = d.arg(0);
        let mut zone = None;
        let mut zone_size = None;
        let mut max_size = None;
        let mut others = Vec::new();
        for a in d.args.iter().skip(1) {
            if let Some(z) = a.strip_prefix("keys_zone=") {
                let mut it = z.splitn(2, ':');
                zone = it.next().map(str::to_string);
                zone_size = it.next().and_then(size_bytes);
            } else if let Some(m) = a.strip_prefix("max_size=") {
                max_size = units::size(m);
            } else {
                others.push(a.clone());
            }
        }
        let Some(zone) = zone.filter(|z| !z.is_empty()) else {
            self.log.warn_to(&mut self.out.defaults, d, Kind::NoEquivalent, "no keys_zone=");
            return;
        };
        let name = units::name(&zone);
        let mut t = Table::default();
        t.set("name", V::s(&name), self.log.com(d));
        let memory = zone_size.map(|b| b.saturating_mul(8)).unwrap_or(64 << 20).clamp(64 << 10, 1 << 40);
        t.set(
            "memory",
            units::size_value(memory),
            "keys_zone size x 8: nginx's zone holds keys, Tollgate's memory holds responses",
        );
        let mut msg = String::from(
            "nginx keeps the keys in memory and the responses on disk; Tollgate keeps the responses read lately in memory",
        );
        match max_size {
            Some(size) => {
                t.set("disk", V::table([("path", V::s(path)), ("size", size)]), "");
                msg.push_str(" and all of them on disk (disk.size = max_size)");
            }
            None => msg.push_str(
                "; without max_size there is no disk tier (give the zone a disk = { path, size } to keep responses there)",
            ),
        }
        if !others.is_empty() {
            msg.push_str(&format!("; {} not carried over", others.join(" ")));
        }
        self.log.warn_to(&mut t, d, Kind::Approximate, msg);
        self.out.caches.push(t);
        self.cache_zones.insert(zone, name);
    }
}

/// The key of a table for an nginx key variable.
fn table_key(var: &str) -> Option<&'static str> {
    match var {
        "$binary_remote_addr" | "$remote_addr" => Some("src"),
        "$uri" | "$document_uri" => Some("path"),
        _ => None,
    }
}

fn size_bytes(text: &str) -> Option<u64> {
    match units::size(text)? {
        V::Int(n) => u64::try_from(n).ok(),
        V::Str(s) => {
            let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
            let n: u64 = n.parse().ok()?;
            let m = match unit {
                "KiB" => 1 << 10,
                "MiB" => 1 << 20,
                "GiB" => 1 << 30,
                _ => return None,
            };
            n.checked_mul(m)
        }
        _ => None,
    }
}

/// `access_log`: the one log of the process.
pub(crate) fn access_log(log: &mut Log, g: &mut Table, d: &Directive) {
    let path = d.arg(0);
    if path == "off" {
        log.warn_to(g, d, Kind::NoEquivalent, "the access log is off by default in Tollgate");
        return;
    }
    let value = if path == "/dev/stdout" {
        "stdout".to_string()
    } else if path == "/dev/stderr" {
        "stderr".to_string()
    } else if let Some(s) = path.strip_prefix("syslog:") {
        let server = s.split(',').find_map(|p| p.strip_prefix("server=")).unwrap_or("unix:/dev/log");
        match server.strip_prefix("unix:") {
            Some(sock) => format!("syslog:{sock}"),
            None if server.contains(':') => format!("syslog:udp:{server}"),
            None => format!("syslog:udp:{server}:514"),
        }
    } else {
        path.to_string()
    };
    if value.contains('$') {
        log.warn_to(g, d, Kind::NoEquivalent, "a log file named by variables: Tollgate writes one log");
        return;
    }
    if let Some(V::Str(old)) = g.get("access_log") {
        if *old != value {
            log.warn_to(
                g,
                d,
                Kind::Approximate,
                format!("Tollgate writes one access log for every frontend: kept {old}"),
            );
        } else {
            log.done(d);
        }
        return;
    }
    g.set("access_log", V::s(value), log.com(d));
    let rest: Vec<&str> = d.args.iter().skip(1).map(String::as_str).collect();
    if !rest.is_empty() && rest != ["combined"] {
        log.warn_to(
            g,
            d,
            Kind::Approximate,
            format!("{}: Tollgate writes its own format (section 11 of the manual)", rest.join(" ")),
        );
    }
}

/// What a server block sets on its frontend, before frontends are made.
#[derive(Debug, Default, Clone)]
pub(crate) struct Pending {
    pub sets: Vec<(Vec<String>, V, String, Directive)>,
    pub notes: Vec<String>,
}

impl Pending {
    pub fn set(&mut self, key: &[&str], v: V, comment: String, d: &Directive) {
        let key: Vec<String> = key.iter().map(|s| s.to_string()).collect();
        self.sets.retain(|(k, ..)| *k != key);
        let mut d = d.clone();
        d.block = None;
        self.sets.push((key, v, comment, d));
    }

    /// Writes it into `t`; a key already set to another value keeps it, with a
    /// warning (several server blocks in one frontend).
    pub fn apply(&self, log: &mut Log, t: &mut Table) {
        for (key, v, c, d) in &self.sets {
            let parts: Vec<&str> = key.iter().map(String::as_str).collect();
            let pk = crate::out::path_key(&parts);
            match t.get(&pk) {
                Some(old) if old != v => log.warn_to(
                    t,
                    d,
                    Kind::Approximate,
                    format!("`{pk}` is one value for the whole frontend: the first server block's is kept"),
                ),
                Some(_) => {}
                None => t.set_path(&parts, v.clone(), c.clone()),
            }
        }
        for n in &self.notes {
            t.note(n.clone());
        }
    }
}

/// `client_body_timeout` and `send_timeout` both become `timeout.client`: the
/// larger is kept.
#[derive(Debug, Default, Clone)]
pub(crate) struct ClientTimeouts {
    client_ms: Option<u64>,
}

impl ClientTimeouts {
    pub fn take(&mut self, log: &mut Log, p: &mut Pending, d: &Directive) {
        let Some(ms) = units::duration_ms(d.arg(0), false) else {
            log.warn_in(&mut p.notes, d, Kind::NoEquivalent, "not a duration");
            return;
        };
        if ms == 0 {
            let msg = if d.name == "keepalive_timeout" {
                "keep-alive cannot be turned off: Tollgate's timeouts are more than 0"
            } else {
                "Tollgate's timeouts are more than 0"
            };
            log.warn_in(&mut p.notes, d, Kind::NoEquivalent, msg);
            return;
        }
        let c = log.com(d);
        match d.name.as_str() {
            "keepalive_timeout" => {
                p.set(&["timeout", "keep_alive"], units::ms_value(ms), c, d);
                if d.args.len() > 1 {
                    log.warn_in(&mut p.notes, d, Kind::NoEquivalent, "the Keep-Alive: timeout= header is not sent");
                }
            }
            "client_header_timeout" => p.set(&["timeout", "http_request"], units::ms_value(ms), c, d),
            _ => {
                let keep = self.client_ms.is_none_or(|old| ms >= old);
                if keep {
                    self.client_ms = Some(ms);
                    p.set(&["timeout", "client"], units::ms_value(ms), c, d);
                }
                log.warn_in(
                    &mut p.notes,
                    d,
                    Kind::Approximate,
                    "timeout.client bounds both the request body and writes to the client (client_body_timeout and \
                     send_timeout): the larger of the two is kept",
                );
            }
        }
    }
}

/// A directive no context handles itself: a known one with the reason it is
/// not needed or not possible, an unresolved include, or an unknown one.
pub(crate) fn other(log: &mut Log, d: &Directive) -> Option<String> {
    if let Some(why) = &d.unresolved {
        let why = why.clone();
        return log.warn(d, Kind::NoEquivalent, why);
    }
    if d.block.is_some() {
        log.done_all(d);
    }
    match reason(&d.name) {
        Some(why) => log.warn(d, Kind::NoEquivalent, why),
        None => log.warn(d, Kind::Unknown, "not a directive the importer knows: not translated"),
    }
}

/// Why a directive is not carried over, for those that need nothing or have
/// no equivalent wherever they are.
pub(crate) fn reason(name: &str) -> Option<&'static str> {
    let r = match name {
        "sendfile" | "sendfile_max_chunk" | "aio" | "aio_write" | "directio" | "directio_alignment" | "read_ahead" => {
            "not needed: Tollgate sends files with sendfile(2) and relays bodies with splice(2) on its own"
        }
        "tcp_nopush" | "tcp_nodelay" => "not needed: Tollgate sets its socket options itself",
        "server_tokens" => "not needed: Tollgate adds no Server header of its own",
        "default_type" => "not needed: proxied responses keep the server's Content-Type; static backends know types",
        "types_hash_max_size"
        | "types_hash_bucket_size"
        | "server_names_hash_bucket_size"
        | "server_names_hash_max_size"
        | "variables_hash_max_size"
        | "variables_hash_bucket_size"
        | "map_hash_max_size"
        | "map_hash_bucket_size"
        | "proxy_headers_hash_max_size"
        | "proxy_headers_hash_bucket_size" => "not needed: a size of nginx's own hash tables",
        "ssl_prefer_server_ciphers" => "not needed: Tollgate always prefers its own order of cipher suites",
        "proxy_buffering"
        | "proxy_buffers"
        | "proxy_buffer_size"
        | "proxy_busy_buffers_size"
        | "proxy_request_buffering"
        | "proxy_max_temp_file_size"
        | "proxy_temp_file_write_size"
        | "proxy_temp_path"
        | "client_body_buffer_size"
        | "client_body_temp_path"
        | "client_body_in_file_only"
        | "client_body_in_single_buffer"
        | "output_buffers"
        | "postpone_output"
        | "client_header_buffer_size"
        | "connection_pool_size"
        | "request_pool_size" => "not needed: Tollgate streams bodies as they come and never buffers them to disk",
        "worker_rlimit_nofile" => {
            "not needed: Tollgate raises its file descriptor limit to the hard limit at start (systemd LimitNOFILE=)"
        }
        "error_log" => "Tollgate logs its errors to stderr (the journal under systemd)",
        "log_not_found"
        | "log_subrequest"
        | "open_log_file_cache"
        | "open_file_cache"
        | "open_file_cache_valid"
        | "open_file_cache_min_uses"
        | "open_file_cache_errors"
        | "disable_symlinks" => "not needed: Tollgate has no such setting",
        "reset_timedout_connection" | "lingering_close" | "lingering_time" | "lingering_timeout" => {
            "not needed: Tollgate closes connections in its own way"
        }
        "keepalive_requests" | "keepalive_time" | "keepalive_disable" => {
            "Tollgate does not bound the requests or the time of a client connection, only its idle time"
        }
        "server_name_in_redirect" | "port_in_redirect" | "absolute_redirect" | "msie_padding" | "msie_refresh" => {
            "not needed: Tollgate's redirects say what the rule says"
        }
        "chunked_transfer_encoding" | "etag" | "if_modified_since" | "max_ranges" => {
            "Tollgate has no such setting: it follows the HTTP specifications"
        }
        "daemon"
        | "master_process"
        | "worker_cpu_affinity"
        | "worker_priority"
        | "timer_resolution"
        | "pcre_jit"
        | "thread_pool"
        | "lock_file"
        | "working_directory"
        | "worker_rlimit_core"
        | "env"
        | "debug_points"
        | "debug_connection"
        | "ssl_engine"
        | "worker_processes"
        | "accept_mutex" => "not needed: a setting of nginx's processes",
        "ssl_session_timeout"
        | "ssl_buffer_size"
        | "ssl_dhparam"
        | "ssl_ecdh_curve"
        | "ssl_session_ticket_key"
        | "ssl_conf_command"
        | "ssl_password_file" => {
            "not needed: rustls decides it (ECDHE groups only, no DH parameters; tickets and sessions as tls.tickets and tls.session_cache say)"
        }
        "ssl_stapling"
        | "ssl_stapling_verify"
        | "ssl_stapling_file"
        | "ssl_stapling_responder"
        | "ssl_trusted_certificate" => {
            "Tollgate staples the OCSP response in <certificate>.ocsp beside the certificate, when there is one; it does not fetch it"
        }
        "ssl_early_data" => "Tollgate does not accept TLS 1.3 early data",
        "real_ip_header" | "set_real_ip_from" | "real_ip_recursive" => {
            "Tollgate takes the client's address from the connection, or from a PROXY header on an accept_proxy bind; not from a header"
        }
        "gzip_vary" => "not needed: Tollgate always sends Vary: Accept-Encoding with compressible responses",
        "gzip_proxied" | "gzip_disable" | "gzip_buffers" | "gzip_http_version" => {
            "not carried over: Tollgate compresses by the response's type and size and the client's Accept-Encoding"
        }
        "http2_push" | "http2_push_preload" => "Tollgate does not push: see a rule's early_hints",
        "http2_recv_buffer_size"
        | "http2_chunk_size"
        | "http2_body_preread_size"
        | "http2_idle_timeout"
        | "http2_recv_timeout"
        | "http2_max_field_size"
        | "http2_max_header_size"
        | "http2_max_requests" => "not carried over: see the h2 table of [defaults] for Tollgate's HTTP/2 limits",
        "proxy_cache_lock" | "proxy_cache_lock_timeout" | "proxy_cache_lock_age" => {
            "not needed: Tollgate sends one request for concurrent misses of a URL (coalescing) always"
        }
        "proxy_cache_revalidate" => "not needed: Tollgate validates stale responses with conditional requests always",
        "proxy_cache_background_update" => {
            "Tollgate refreshes in the background when a response says stale-while-revalidate"
        }
        "proxy_cache_methods"
        | "proxy_cache_min_uses"
        | "proxy_no_cache"
        | "proxy_cache_convert_head"
        | "proxy_cache_max_range_offset"
        | "proxy_cache_purge" => "not carried over: Tollgate caches GET (and answers HEAD) as RFC 9111 says",
        "stub_status" => "the [admin] listener's stats page and /metrics show Tollgate's counters",
        "autoindex" | "autoindex_exact_size" | "autoindex_format" | "autoindex_localtime" => {
            "Tollgate's static backends do not list directories"
        }
        "charset" | "source_charset" | "charset_types" | "override_charset" | "charset_map" => {
            "Tollgate does not convert or add charsets"
        }
        "ssi"
        | "ssi_types"
        | "sub_filter"
        | "sub_filter_once"
        | "sub_filter_types"
        | "sub_filter_last_modified"
        | "add_before_body"
        | "add_after_body"
        | "addition_types"
        | "xslt_stylesheet"
        | "image_filter" => "Tollgate does not edit response bodies",
        "limit_rate" | "limit_rate_after" | "proxy_limit_rate" => "Tollgate does not limit bandwidth",
        "set" | "break" | "rewrite_log" | "uninitialized_variable_warn" => "Tollgate has no variables",
        "mirror" | "mirror_request_body" => "Tollgate does not mirror requests",
        "auth_request" | "auth_request_set" | "auth_jwt" | "auth_delay" => {
            "Tollgate's authentication is Basic with a userlist (section 13): no subrequests"
        }
        "secure_link" | "secure_link_md5" | "secure_link_secret" | "userid" | "userid_name" | "userid_domain"
        | "userid_path" | "userid_expires" | "empty_gif" | "flv" | "mp4" | "hls" | "dav_methods" | "perl"
        | "perl_modules" | "perl_require" | "perl_set" | "random_index" | "gunzip_buffers" | "gzip_static" => {
            "Tollgate has no equivalent module"
        }
        "recursive_error_pages" | "error_log_format" | "log_format" => "not carried over: Tollgate's own format",
        "send_lowat"
        | "so_keepalive"
        | "tcp_fastopen"
        | "proxy_socket_keepalive"
        | "proxy_bind"
        | "proxy_ignore_client_abort" => "Tollgate has no such socket setting",
        "internal" => "only for nginx's internal redirects",
        "zone" | "state" => "not needed: Tollgate's workers share their servers' state always",
        "underscores_in_headers" | "ignore_invalid_headers" => {
            "not carried over: Tollgate drops only the names that read as framing ones (limits.lookalike_headers)"
        }
        "server_names_hash" | "merge_slashes" => {
            "not carried over: Tollgate normalises paths for its rules (path_normalize)"
        }
        n if n.starts_with("fastcgi_")
            || n.starts_with("uwsgi_")
            || n.starts_with("scgi_")
            || n.starts_with("memcached_") =>
        {
            "Tollgate speaks HTTP to its servers (no FastCGI, uwsgi, SCGI or memcached)"
        }
        n if n.starts_with("js_") || n.starts_with("lua_") || n.contains("_by_lua") || n.starts_with("perl_") => {
            "Tollgate runs no scripts"
        }
        n if n.starts_with("quic_") || n.starts_with("http3") => {
            "not carried over: Tollgate's HTTP/3 is `h3 = true` on a TLS bind"
        }
        n if n.starts_with("proxy_cache_") => "not carried over: Tollgate's cache follows RFC 9111",
        _ => return None,
    };
    Some(r)
}

/// Conditions ANDed: one table when their keys differ, else `all = [...]`.
pub(crate) fn and(conds: Vec<V>) -> Option<V> {
    let mut pairs: Vec<(String, V)> = Vec::new();
    let mut clash = false;
    let mut tables = Vec::new();
    for c in conds {
        let V::Table(ps) = c else { continue };
        if ps.is_empty() {
            continue;
        }
        for (k, v) in &ps {
            if pairs.iter().any(|(k2, _)| k2 == k) {
                clash = true;
            }
            pairs.push((k.clone(), v.clone()));
        }
        tables.push(V::Table(ps));
    }
    if pairs.is_empty() {
        return None;
    }
    if clash {
        return Some(V::Table(vec![("all".into(), V::Arr(tables))]));
    }
    Some(V::Table(pairs))
}

/// One condition `{ key = value }`.
pub(crate) fn cond(key: &str, v: V) -> V {
    V::Table(vec![(key.to_string(), v)])
}

/// A string, or an array of them when there are several.
pub(crate) fn one_or_many(items: Vec<String>) -> V {
    if items.len() == 1 { V::Str(items.into_iter().next().unwrap_or_default()) } else { V::strs(items) }
}

/// A name cut to 64 characters and made valid.
fn short_name(want: &str) -> String {
    let n = units::name(want);
    n.chars().take(56).collect()
}

fn unique(base: &str, taken: &HashSet<String>) -> String {
    if !taken.contains(base) {
        return base.to_string();
    }
    (2..).map(|i| format!("{base}-{i}")).find(|n| !taken.contains(n)).unwrap_or_else(|| base.to_string())
}
