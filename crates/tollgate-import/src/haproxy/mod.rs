//! haproxy.cfg: sections of lines (parse.rs), ACLs (cond.rs), the proxies
//! (proxy.rs); here the file as a whole and the sections that are not proxies.

mod cond;
mod frontend;
mod parse;
mod proxy;
#[cfg(test)]
mod tests;
mod values;

use crate::out::{Out, Table, V};
use crate::report::{Kind, Warning};
use crate::units;
use crate::{Env, Error};
use parse::{Line, Section};
use std::path::{Path, PathBuf};

/// What the translation carries from section to section.
pub(crate) struct Cx {
    pub out: Out,
    pub warnings: Vec<Warning>,
    /// The config's directory (HAProxy reads relative paths from its working
    /// directory, usually this one).
    pub base: PathBuf,
    /// Absolute paths are read under it (`tollgate import --root`).
    pub root: Option<PathBuf>,
    /// `crt-base` and `ca-base` of `global`.
    pub crt_base: Option<String>,
    pub ca_base: Option<String>,
    /// `ssl-default-bind-options`: the minimum TLS version they leave.
    pub bind_min_tls: Option<String>,
    /// `no-tls-tickets` in `ssl-default-bind-options`.
    pub bind_no_tickets: bool,
    /// The `log` target of `global`, for proxies with `log global`.
    pub global_log: Option<String>,
    /// Addresses bound so far (HAProxy may bind one per process; Tollgate once).
    pub binds: Vec<(String, String)>,
    /// Comments already written into [defaults] for inherited lines.
    pub inherited_notes: Vec<String>,
}

impl Cx {
    /// Reports `line` and writes the report as a comment in `table`.
    pub fn warn(&mut self, table: &mut Table, line: &Line, kind: Kind, message: impl Into<String>) {
        let w = line.warn(kind, message);
        table.note(w.comment());
        self.warnings.push(w);
    }

    pub fn path(&self, base: &Option<String>, file: &str) -> String {
        match base {
            Some(b) if !file.starts_with('/') => format!("{}/{file}", b.trim_end_matches('/')),
            _ => file.to_string(),
        }
    }
}

pub fn translate(text: &str, path: &Path, root: Option<&Path>, env: Env) -> Result<(Out, Vec<Warning>), Error> {
    let mut warnings = Vec::new();
    let sections = parse::sections(text, path, env, &mut warnings);
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut cx = Cx {
        out: Out::default(),
        warnings,
        base,
        root: root.map(Path::to_path_buf),
        crt_base: None,
        ca_base: None,
        bind_min_tls: None,
        bind_no_tickets: false,
        global_log: None,
        binds: Vec::new(),
        inherited_notes: Vec::new(),
    };
    let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    cx.out.header = vec![
        format!("Translated from {name} by `tollgate import`."),
        "Each key has the HAProxy line it comes from above it; lines marked NOT TRANSLATED,".into(),
        "APPROXIMATED or UNKNOWN need a look. Reference: docs/configuration.md, docs/migrating.md.".into(),
    ];
    // Sections that others refer to come first: global (bases, TLS defaults),
    // userlists, caches, resolvers.
    for s in &sections {
        match s.kind() {
            "global" => global(&mut cx, s),
            "userlist" => userlist(&mut cx, s),
            "cache" => cache(&mut cx, s),
            "resolvers" => resolvers(&mut cx, s),
            _ => {}
        }
    }
    let mut defaults: Option<&Section> = None;
    let mut first_defaults = true;
    let mut proxies = Vec::new();
    for s in &sections {
        match s.kind() {
            "defaults" => {
                if first_defaults {
                    defaults_section(&mut cx, s);
                    first_defaults = false;
                } else {
                    let mut t = std::mem::take(&mut cx.out.defaults);
                    let w = s.head.warn(
                        Kind::Approximate,
                        "a second defaults section: its settings are written on each proxy after it; \
                         [defaults] keeps the first one's",
                    );
                    t.note(w.comment());
                    cx.warnings.push(w);
                    cx.out.defaults = t;
                }
                defaults = Some(s);
            }
            "frontend" | "backend" | "listen" => {
                proxies.push(proxy::Proxy::new(s, defaults, !std::ptr::eq(defaults.unwrap_or(s), first(&sections))))
            }
            "global" | "userlist" | "cache" | "resolvers" => {}
            other => {
                let w = s.head.warn(
                    Kind::NoEquivalent,
                    match other {
                        "peers" => {
                            "peers: Tollgate shares tables with [global.peers] and `share = true` (docs/scale-out.md)"
                        }
                        "http-errors" => "http-errors: use error_pages (files holding the body only)",
                        "mailers" => "mailers: Tollgate sends no mail; alert on its metrics instead",
                        "program" => "program: run it as its own service",
                        "ring" | "log-forward" => "Tollgate logs to a file, stdout or syslog (global.access_log)",
                        _ => "this section has no Tollgate equivalent",
                    },
                );
                cx.out.trailer.push(w.comment());
                cx.warnings.push(w);
                for l in &s.lines {
                    let w = l.warn(Kind::NoEquivalent, format!("in the `{other}` section"));
                    cx.warnings.push(w);
                }
            }
        }
    }
    translate_all(&mut cx, &proxies);
    // `log global` with option httplog / tcplog: the access log goes where global's `log` did.
    let logs = sections.iter().flat_map(|s| &s.lines).any(|l| {
        (l.word(0) == "option" && matches!(l.word(1), "httplog" | "tcplog"))
            || (l.word(0) == "log" && l.word(1) == "global")
    });
    if let (true, Some(target)) = (logs, &cx.global_log) {
        cx.out.global.set("access_log", V::s(target), "global `log` with the proxies' `log global` / option httplog");
    }
    cx.out.keep_path_case();
    cx.warnings.sort_by(|a, b| (&a.pos.file, a.pos.line).cmp(&(&b.pos.file, b.pos.line)));
    Ok((cx.out, cx.warnings))
}

fn translate_all(cx: &mut Cx, proxies: &[proxy::Proxy]) {
    let mut infos: Vec<(String, proxy::BackendInfo)> = Vec::new();
    for p in proxies.iter().filter(|p| p.kind() != "frontend" && !frontend::stats_only(p)) {
        let info = proxy::backend(cx, p);
        infos.push((p.name(), info));
    }
    for p in proxies.iter().filter(|p| p.kind() != "backend") {
        frontend::frontend(cx, p, &infos);
    }
}

/// The first `defaults` section (the one [defaults] is written from).
fn first(sections: &[Section]) -> &Section {
    sections.iter().find(|s| s.kind() == "defaults").unwrap_or(&sections[0])
}

fn global(cx: &mut Cx, s: &Section) {
    let mut g = std::mem::take(&mut cx.out.global);
    for l in &s.lines {
        let text = l.text();
        let arg = l.word(1);
        match l.word(0) {
            "maxconn" => match arg.parse::<i64>() {
                Ok(n) => g.set("max_connections", V::Int(n), text),
                Err(_) => cx.warn(&mut g, l, Kind::NoEquivalent, "not a number"),
            },
            "nbthread" => match arg.parse::<i64>() {
                Ok(n) => g.set("workers", V::Int(n), text),
                Err(_) => cx.warn(&mut g, l, Kind::NoEquivalent, "not a number"),
            },
            "nbproc" => match arg.parse::<i64>() {
                Ok(n) => {
                    g.set("workers", V::Int(n), text);
                    cx.warn(
                        &mut g,
                        l,
                        Kind::Approximate,
                        "Tollgate runs worker threads in one process: they share TLS sessions, \
                         counters and health state, so no per-process binds are needed",
                    );
                }
                Err(_) => cx.warn(&mut g, l, Kind::NoEquivalent, "not a number"),
            },
            "user" | "group" => g.set(l.word(0), V::s(arg), text),
            "uid" | "gid" => cx.warn(&mut g, l, Kind::NoEquivalent, "give global.user / global.group by name"),
            "pidfile" => g.set("pidfile", V::s(arg), text),
            "hard-stop-after" => match units::duration(arg, true) {
                Some(v) => g.set("grace_period", v, text),
                None => cx.warn(&mut g, l, Kind::NoEquivalent, "not a duration"),
            },
            "log" => {
                if cx.global_log.is_none() {
                    cx.global_log = log_target(&l.words[1..]);
                }
                if cx.global_log.is_none() {
                    cx.warn(&mut g, l, Kind::NoEquivalent, "a log target Tollgate does not write to");
                } else {
                    g.note(format!("{text}  (used by the proxies' `log global`: global.access_log)"));
                }
            }
            "stats" => stats_global(cx, &mut g, l),
            "daemon" | "master-worker" => cx.warn(
                &mut g,
                l,
                Kind::NoEquivalent,
                "Tollgate runs in the foreground, under systemd (packaging/tollgate.service); \
                 `tollgate reload` and `tollgate upgrade` replace the master process's signals",
            ),
            "chroot" => cx.warn(
                &mut g,
                l,
                Kind::NoEquivalent,
                "no chroot: use systemd's sandboxing (ProtectSystem=, the shipped unit does)",
            ),
            "crt-base" => {
                cx.crt_base = Some(arg.to_string());
                g.note(format!("{text}  (relative crt paths below are written under it)"));
            }
            "ca-base" => {
                cx.ca_base = Some(arg.to_string());
                g.note(format!("{text}  (relative ca-file paths below are written under it)"));
            }
            "ssl-default-bind-options" => {
                cx.bind_min_tls = min_tls(&l.words[1..]);
                cx.bind_no_tickets = l.words.iter().any(|w| w == "no-tls-tickets");
                let msg = match &cx.bind_min_tls {
                    Some(v) => format!("TLS binds get min_version = \"{v}\""),
                    None => "TLS 1.0 and 1.1 are never offered: rustls speaks TLS 1.2 and 1.3".into(),
                };
                cx.warn(&mut g, l, Kind::Approximate, msg);
            }
            "ssl-default-bind-ciphers"
            | "ssl-default-bind-ciphersuites"
            | "ssl-default-server-ciphers"
            | "ssl-default-server-ciphersuites" => cx.warn(
                &mut g,
                l,
                Kind::Approximate,
                "Tollgate's suites are rustls' AEAD suites with forward secrecy (no CBC, RC4 or static RSA); \
                 its default list is already that. To narrow it, set tls.ciphers on a bind (IANA names)",
            ),
            "ssl-default-server-options" | "ssl-server-verify" => cx.warn(
                &mut g,
                l,
                Kind::Approximate,
                "TLS to servers is 1.2 or 1.3 and verified unless a server says `verify = \"none\"`",
            ),
            "tune.http.maxhdr" => match arg.parse::<i64>() {
                Ok(n) => cx.out.defaults.set("limits.max_headers", V::Int(n), text),
                Err(_) => cx.warn(&mut g, l, Kind::NoEquivalent, "not a number"),
            },
            k if k.starts_with("tune.") => cx.warn(
                &mut g,
                l,
                Kind::NoEquivalent,
                "Tollgate sizes its buffers and TLS parameters itself (no DH: ECDHE only)",
            ),
            "cpu-map"
            | "spread-checks"
            | "server-state-file"
            | "server-state-base"
            | "lua-load"
            | "lua-prepend-path"
            | "h1-case-adjust"
            | "h1-case-adjust-file"
            | "setenv"
            | "presetenv"
            | "resetenv"
            | "unsetenv"
            | "node"
            | "description"
            | "localpeer"
            | "log-send-hostname"
            | "log-tag"
            | "ulimit-n"
            | "maxsslconn"
            | "maxconnrate"
            | "maxsessrate"
            | "maxsslrate"
            | "busy-polling"
            | "noepoll"
            | "nosplice"
            | "insecure-fork-wanted"
            | "expose-experimental-directives"
            | "set-dumpable"
            | "strict-limits"
            | "ssl-dh-param-file"
            | "ssl-engine"
            | "ssl-mode-async"
            | "issuers-chain-path"
            | "quiet"
            | "zero-warning"
            | "nbcores"
            | "thread-groups"
            | "numa-cpu-mapping"
            | "httpclient.resolvers.prefer"
            | "profiling.tasks"
            | "default-path"
            | "unix-bind" => cx.warn(&mut g, l, Kind::NoEquivalent, "no Tollgate equivalent (not needed)"),
            _ => cx.warn(&mut g, l, Kind::Unknown, "not a global keyword the importer knows"),
        }
    }
    cx.out.global = g;
}

/// `log <target> [len n] [format f] <facility> [level]` as an access_log value.
fn log_target(words: &[String]) -> Option<String> {
    let target = words.first()?.as_str();
    match target {
        "stdout" => Some("stdout".into()),
        "stderr" => Some("stderr".into()),
        "/dev/log" => Some("syslog".into()),
        "global" => None,
        t if t.starts_with('/') => Some(format!("syslog:{t}")),
        t => {
            let t = t.strip_prefix("udp@").or_else(|| t.strip_prefix("ipv4@")).unwrap_or(t);
            let addr = if t.contains(':') { t.to_string() } else { format!("{t}:514") };
            addr.parse::<std::net::SocketAddr>().ok().map(|a| format!("syslog:udp:{a}"))
        }
    }
}

/// The lowest TLS version left by `no-tlsv1x` / `ssl-min-ver` options, when above 1.2.
fn min_tls(words: &[String]) -> Option<String> {
    let mut min = None;
    for (i, w) in words.iter().enumerate() {
        match w.as_str() {
            "ssl-min-ver" => {
                if let Some(v) = words.get(i + 1)
                    && v == "TLSv1.3"
                {
                    min = Some("1.3".to_string());
                }
            }
            "no-tlsv12" | "force-tlsv13" => min = Some("1.3".to_string()),
            _ => {}
        }
    }
    min
}

fn stats_global(cx: &mut Cx, g: &mut Table, l: &Line) {
    let text = l.text();
    match l.word(1) {
        "socket" => {
            let target = l.word(2);
            let mut sock: Vec<(String, V)> = Vec::new();
            let t = target.strip_prefix("unix@").unwrap_or(target);
            if let Some(addr) =
                t.strip_prefix("ipv4@").or_else(|| t.strip_prefix("ipv6@")).or_else(|| t.strip_prefix("tcp@"))
            {
                sock.push(("addr".into(), V::s(addr)));
            } else if t.starts_with('/') || !t.contains(':') {
                sock.push(("path".into(), V::s(t)));
            } else {
                sock.push(("addr".into(), V::s(t)));
            }
            let mut i = 3;
            let mut ignored = Vec::new();
            while i < l.words.len() {
                let (k, v) = (l.word(i), l.word(i + 1));
                match k {
                    "mode" => sock.push(("mode".into(), V::s(format!("{:0>4}", v)))),
                    "level" => sock.push(("level".into(), V::s(v))),
                    "user" | "uid" => sock.push(("user".into(), V::s(v))),
                    "group" | "gid" => sock.push(("group".into(), V::s(v))),
                    "expose-fd" => ignored.push(format!("expose-fd {v} (tollgate upgrade hands the sockets over)")),
                    other => {
                        ignored.push(other.to_string());
                        i += 1;
                        continue;
                    }
                }
                i += 2;
            }
            if sock.iter().any(|(k, _)| k == "addr") {
                sock.retain(|(k, _)| !matches!(k.as_str(), "mode" | "user" | "group"));
            }
            let admin = cx.out.admin.get_or_insert_with(Table::default);
            admin.push("socket", V::Table(sock), text);
            if !ignored.is_empty() {
                let mut t = std::mem::take(admin);
                cx.warn(&mut t, l, Kind::Approximate, format!("not carried over: {}", ignored.join(", ")));
                cx.out.admin = Some(t);
            }
        }
        "timeout" | "maxconn" | "bind-process" => {
            cx.warn(g, l, Kind::NoEquivalent, "the command socket keeps a session open as long as its client does")
        }
        _ => cx.warn(g, l, Kind::Unknown, "not a `stats` keyword of global the importer knows"),
    }
}

fn userlist(cx: &mut Cx, s: &Section) {
    let mut t = Table::default();
    t.set("name", V::s(s.name()), s.head.text());
    let mut users = Vec::new();
    for l in &s.lines {
        match l.word(0) {
            "user" => {
                let name = l.word(1);
                let mut user = vec![("name".to_string(), V::s(name))];
                let mut groups = false;
                let mut i = 2;
                while i < l.words.len() {
                    match l.word(i) {
                        "password" => user.push(("password".into(), V::s(l.word(i + 1)))),
                        "insecure-password" => user.push(("insecure_password".into(), V::s(l.word(i + 1)))),
                        "groups" => groups = true,
                        _ => {}
                    }
                    i += 2;
                }
                if user.len() == 1 {
                    cx.warn(&mut t, l, Kind::NoEquivalent, "a user without a password");
                    continue;
                }
                if groups {
                    cx.warn(
                        &mut t,
                        l,
                        Kind::Approximate,
                        "groups are not kept: Tollgate's auth takes a whole userlist",
                    );
                }
                users.push(V::Table(user));
            }
            "group" => cx.warn(&mut t, l, Kind::NoEquivalent, "groups: use one userlist per group"),
            _ => cx.warn(&mut t, l, Kind::Unknown, "not a userlist keyword"),
        }
    }
    t.set("users", V::Arr(users), "");
    cx.out.userlists.push(t);
}

fn cache(cx: &mut Cx, s: &Section) {
    let mut t = Table::default();
    t.set("name", V::s(units::name(s.name())), s.head.text());
    for l in &s.lines {
        let text = l.text();
        match (l.word(0), l.word(1).parse::<u64>()) {
            ("total-max-size", Ok(mb)) if mb.checked_mul(1 << 20).is_some() => {
                t.set("memory", units::size_value(mb << 20), text)
            }
            ("max-object-size", Ok(b)) => t.set("max_object", units::size_value(b), text),
            ("max-age", Ok(_)) => cx.warn(
                &mut t,
                l,
                Kind::Approximate,
                "Tollgate keeps a response as long as its Cache-Control / Expires allow (RFC 9111), \
                 not capped; without them, heuristic_max bounds the heuristic lifetime",
            ),
            ("process-vary", _) => t.note(format!("{text}  (Tollgate always honours Vary)")),
            ("max-secondary-entries", _) => {
                cx.warn(&mut t, l, Kind::NoEquivalent, "Vary variants are not counted apart")
            }
            _ => cx.warn(&mut t, l, Kind::Unknown, "not a cache keyword the importer knows"),
        }
    }
    if !t.has("memory") {
        t.set("memory", V::s("16MiB"), "HAProxy's cache needs total-max-size; this is Tollgate's size here");
    }
    cx.out.caches.push(t);
}

fn resolvers(cx: &mut Cx, s: &Section) {
    let mut g = std::mem::take(&mut cx.out.global);
    for l in &s.lines {
        let text = l.text();
        match l.word(0) {
            "nameserver" => {
                let addr = l.word(2);
                let addr = addr.strip_prefix("udp@").or_else(|| addr.strip_prefix("tcp@")).unwrap_or(addr);
                g.push("dns.nameservers", V::s(addr), format!("resolvers {}: {text}", s.name()));
            }
            "parse-resolv-conf" => g.note(format!("{text}  (without nameservers Tollgate reads /etc/resolv.conf)")),
            "timeout" if l.word(1) == "resolve" => {
                g.note(format!("{text}  (servers' names are looked up again on the backend's `resolve.every`)"))
            }
            "timeout" if l.word(1) == "retry" => match units::duration(l.word(2), true) {
                Some(v) => g.set("dns.timeout", v, text),
                None => cx.warn(&mut g, l, Kind::NoEquivalent, "not a duration"),
            },
            "hold" | "resolve_retries" | "accepted_payload_size" => {
                cx.warn(&mut g, l, Kind::NoEquivalent, "Tollgate's DNS client decides this itself")
            }
            _ => cx.warn(&mut g, l, Kind::Unknown, "not a resolvers keyword the importer knows"),
        }
    }
    cx.out.global = g;
}

/// The [defaults]-level keys of the first `defaults` section; the rest of it
/// is applied to each proxy (proxy.rs).
fn defaults_section(cx: &mut Cx, s: &Section) {
    let mut d = std::mem::take(&mut cx.out.defaults);
    for l in &s.lines {
        let text = l.text();
        match (l.word(0), l.word(1)) {
            ("timeout", which) => {
                if let Some(key) = proxy::timeout_key(which) {
                    match units::duration(l.word(2), true) {
                        Some(v) => d.set(&format!("timeout.{key}"), v, text),
                        None => cx.warn(&mut d, l, Kind::NoEquivalent, "not a duration"),
                    }
                }
            }
            ("retries", n) => match n.parse::<i64>() {
                Ok(n) => d.set("retries", V::Int(n), text),
                Err(_) => cx.warn(&mut d, l, Kind::NoEquivalent, "not a number"),
            },
            ("option", "redispatch") => d.set("redispatch", V::Bool(true), text),
            ("no", "option") if l.word(2) == "redispatch" => d.set("redispatch", V::Bool(false), text),
            _ => {}
        }
    }
    cx.out.defaults = d;
}
