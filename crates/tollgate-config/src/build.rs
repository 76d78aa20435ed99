//! Raw mirror -> validated model. Every problem found is recorded with its span and
//! key path, and building goes on, so that one run reports all of them.

use crate::ConfigError;
use crate::model::*;
use crate::raw::*;
use crate::tls;
use crate::track::*;
use crate::units::{format_duration as fmt_duration, parse_duration, parse_size};
use crate::{HostName, HostPort};
use auth::UserlistIndex;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use ipnet::IpNet;
use regex::{Regex, RegexBuilder};
use rustls::crypto::CryptoProvider;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tcp::tcp_alpn;
use toml::Spanned;
use track::Tracking;

mod acme;
mod admin;
mod auth;
mod cache;
mod compression;
mod discover;
mod etcd;
mod files;
mod forward;
mod mtls;
mod pages;
mod rules;
mod server;
mod tcp;
mod tier;
mod track;

pub use auth::parse_password_hash;

pub(crate) struct Builder<'a> {
    pub file: &'a Path,
    /// Where relative paths lead from, when not the file's directory.
    pub base: Option<&'a Path>,
    pub src: &'a str,
    /// No name resolution and no file reads (for fuzzing): server addresses must
    /// be literal IP:port and error pages are left out.
    pub offline: bool,
    pub errors: Vec<ConfigError>,
    /// Allowed but risky settings, logged at load.
    pub warnings: Vec<ConfigError>,
    /// The system's CA certificates, read once, when a server's `tls` has no `ca`.
    pub system_roots: Option<Result<Arc<rustls::RootCertStore>, String>>,
    /// `[[acme]]` names, for TLS binds' `acme` lists.
    pub acme_index: HashMap<String, usize>,
    /// The config has `[global.peers]` (tables may `share`).
    pub has_peers: bool,
}

impl<'a> Builder<'a> {
    pub fn err(&mut self, span: Range<usize>, key: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::at(self.file, self.src, span, key.into(), message.into()));
    }

    fn base_dir(&self) -> PathBuf {
        match self.base {
            Some(b) => b.to_path_buf(),
            None => self.file.parent().map(Path::to_path_buf).unwrap_or_default(),
        }
    }

    pub fn build(&mut self, raw: RawConfig) -> Option<Config> {
        let global = self.global(&raw.global);
        let admin = raw.admin.as_ref().and_then(|a| self.admin(a));
        let def_timeouts = self.timeouts(&raw.defaults.timeout, &Timeouts::default(), "defaults.timeout", None);
        let def_limits = self.limits(&raw.defaults.limits, &Limits::default(), "defaults.limits");
        let def_retries = match &raw.defaults.retries {
            Some(r) => self.int_in(r, 0, 100, "defaults.retries").unwrap_or(3) as u32,
            None => 3,
        };
        let def_redispatch = raw.defaults.redispatch.unwrap_or(true);
        let def_forward_for = raw.defaults.forward_for.unwrap_or(true);
        let def_pages = self.error_pages(&raw.defaults.error_pages, &BTreeMap::new(), "defaults.error_pages");
        let def_h2 = self.h2(&raw.defaults.h2, &H2::default(), "defaults.h2");
        let (userlists, userlist_index) = self.userlists(&raw.userlist);

        // Tables and cache zones first: frontends and rules refer to them by name.
        let tables = self.tables(&raw.table);
        let (mut caches, cache_index) = self.cache_zones(&raw.cache);
        let acme = self.acme(&raw.acme);
        // Backends first: frontends refer to them by name.
        let mut backend_index: HashMap<String, usize> = HashMap::new();
        let mut backends = Vec::new();
        let mut fallbacks = Vec::new();
        for (i, b) in raw.backend.iter().enumerate() {
            let key = format!("backend[{i}]");
            let b_span = b.span();
            let b = b.get_ref();
            let name = b.name.get_ref().clone();
            if !valid_name(&name) {
                self.err(
                    b.name.span(),
                    format!("{key}.name"),
                    format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
                );
            }
            let mode = self.mode(b.mode.as_ref(), &format!("{key}.mode"));
            if mode == Mode::Tcp {
                self.tcp_backend(b, &key);
            }
            if backend_index.insert(name.clone(), i).is_some() {
                self.err(b.name.span(), format!("{key}.name"), format!("backend `{name}` is defined twice"));
            }
            let balance = match &b.balance {
                None => Balance::RoundRobin,
                Some(s) => match parse_balance(s.get_ref()) {
                    Ok(b) => b,
                    Err(e) => {
                        self.err(s.span(), format!("{key}.balance"), e);
                        Balance::RoundRobin
                    }
                },
            };
            let timeouts = self.timeouts(&b.timeout, &def_timeouts, &format!("{key}.timeout"), Some(Side::Backend));
            let retries = match &b.retries {
                Some(r) => self.int_in(r, 0, 100, &format!("{key}.retries")).unwrap_or(3) as u32,
                None => def_retries,
            };
            let check = b.check.as_ref().and_then(|c| self.check(c, &format!("{key}.check")));
            let observe =
                b.observe.as_ref().and_then(|o| self.observe(o, b.check.is_some(), &format!("{key}.observe")));
            let cookie = b.cookie.as_ref().and_then(|c| self.cookie(c, &format!("{key}.cookie")));
            let stick = b.stick.as_ref().and_then(|s| self.stick(s, &format!("{key}.stick")));
            let cache = self.backend_cache(b.cache.as_ref(), &key, &cache_index);
            let resolve_every = self.resolve(b.resolve.as_ref(), &format!("{key}.resolve"));
            let compression = self.compression(b.compression.as_ref(), &format!("{key}.compression"));
            self.static_conflicts(b, &key, mode);
            let files = b.files.as_ref().and_then(|f| self.static_files(f, &key, i, &mut fallbacks)).map(Arc::new);
            let forward = self.forward(b, &key, mode, &userlist_index).map(Arc::new);
            let discover =
                self.discover(b, &key, (&b.tls, &b.proto, key.as_str()), timeouts.server_keep_alive).map(Arc::new);
            let mut servers = Vec::new();
            let mut names = HashSet::new();
            let mut cookies: HashMap<String, String> = HashMap::new();
            for (j, s) in b.server.iter().enumerate() {
                let skey = format!("{key}.server[{j}]");
                let transport = (&b.tls, &b.proto, key.as_str());
                let keep_alive = timeouts.server_keep_alive;
                let follow = resolve_every.is_some();
                if let Some(server) = self.server(s.get_ref(), &skey, b.check.is_some(), transport, keep_alive, follow)
                {
                    if !names.insert(server.name.clone()) {
                        self.err(
                            s.get_ref().name.span(),
                            format!("{skey}.name"),
                            format!("server `{}` is defined twice in backend `{name}`", server.name),
                        );
                    }
                    if let Some(other) = cookies.insert(server.cookie.clone(), server.name.clone()) {
                        let span = s.get_ref().cookie.as_ref().map_or_else(|| s.get_ref().name.span(), |c| c.span());
                        self.err(
                            span,
                            format!("{skey}.cookie"),
                            format!(
                                "cookie value `{}` is already server `{other}`'s: each server needs its own",
                                server.cookie
                            ),
                        );
                    }
                    servers.push(server);
                }
            }
            let _ = b_span;
            let auth = b.auth.as_ref().and_then(|a| self.auth(a, &format!("{key}.auth"), &userlist_index, &name));
            backends.push(Arc::new(Backend {
                name,
                mode,
                balance,
                timeouts,
                retries,
                // A forward proxy's retries go to the same address.
                redispatch: b.redispatch.unwrap_or(def_redispatch) && forward.is_none(),
                check,
                observe,
                cookie,
                stick,
                servers,
                compression,
                files,
                resolve_every,
                cache,
                auth,
                forward,
                discover,
            }));
        }
        self.static_fallbacks(fallbacks, &backend_index, &mut backends);

        // `show table NAME` names a backend's stick table or a [[table]]: one namespace.
        for (i, t) in raw.table.iter().enumerate() {
            let name = t.get_ref().name.get_ref();
            if backend_index.contains_key(name) {
                self.err(
                    t.get_ref().name.span(),
                    format!("table[{i}].name"),
                    format!("a backend is named `{name}` (its stick table has that name): give the table another"),
                );
            }
        }
        let mut frontends = Vec::new();
        let mut frontend_names = HashSet::new();
        let mut all_binds: HashMap<SocketAddr, String> = HashMap::new();
        for (i, f) in raw.frontend.iter().enumerate() {
            let key = format!("frontend[{i}]");
            let f_span = f.span();
            let f = f.get_ref();
            let name = f.name.get_ref().clone();
            if !valid_name(&name) {
                self.err(
                    f.name.span(),
                    format!("{key}.name"),
                    format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
                );
            }
            if !frontend_names.insert(name.clone()) {
                self.err(f.name.span(), format!("{key}.name"), format!("frontend `{name}` is defined twice"));
            }
            let mode = self.mode(f.mode.as_ref(), &format!("{key}.mode"));
            if mode == Mode::Tcp {
                self.tcp_frontend(f, &key);
            }
            self.same_mode(f, &key, mode, &backend_index, &backends);
            if f.bind.is_empty() {
                self.err(
                    f_span.clone(),
                    format!("{key}.bind"),
                    "a frontend needs at least one address to bind, e.g. bind = [\"127.0.0.1:8080\"]",
                );
            }
            let mut binds = Vec::new();
            for (j, b) in f.bind.iter().enumerate() {
                let bkey = format!("{key}.bind[{j}]");
                let (text, span, tls, accept_proxy, h2c, defer_accept, h3) = match b.get_ref() {
                    RawBind::Addr(a) => (a, b.span(), None, false, None, None, None),
                    RawBind::Table(t) => (
                        t.addr.get_ref(),
                        t.addr.span(),
                        t.tls.as_ref(),
                        t.accept_proxy.unwrap_or(false),
                        t.h2c.as_ref(),
                        t.defer_accept,
                        t.h3.as_ref(),
                    ),
                };
                let h3 = h3.is_some_and(|h| *h.get_ref()).then(|| h3.map(|h| h.span())).flatten();
                let defer_accept = defer_accept.unwrap_or(mode == Mode::Http);
                if let (Some(_), Some(h)) = (tls, h2c)
                    && *h.get_ref()
                {
                    self.err(
                        h.span(),
                        format!("{bkey}.h2c"),
                        "h2c is HTTP/2 over plain TCP; a TLS bind offers HTTP/2 by ALPN (`tls.alpn`, \"h2\" by default)",
                    );
                }
                // h2c: the bind's own setting, else the frontend's (plain binds only).
                let h2c = tls.is_none() && h2c.or(f.h2c.as_ref()).is_some_and(|h| *h.get_ref());
                let mut tls = tls.and_then(|t| self.tls(t, &format!("{bkey}.tls")));
                if mode == Mode::Tcp {
                    tcp_alpn(&mut tls, b.get_ref());
                }
                if let Some(h3_span) = h3.clone() {
                    let why = if tls.is_none() && !matches!(b.get_ref(), RawBind::Table(t) if t.tls.is_some()) {
                        Some("HTTP/3 is QUIC, which is TLS 1.3: `h3` needs `tls` on the bind")
                    } else if mode == Mode::Tcp {
                        Some("a TCP frontend serves no HTTP/3")
                    } else if accept_proxy {
                        Some("a PROXY header cannot come over QUIC: not with `accept_proxy`")
                    } else if tls.as_ref().is_some_and(|t| t.max_version < TlsVersion::Tls13) {
                        Some("HTTP/3 needs TLS 1.3, which `tls.max_version` leaves out")
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        self.err(h3_span, format!("{bkey}.h3"), why);
                    }
                }
                let h3 = h3.is_some() && tls.is_some() && mode == Mode::Http && !accept_proxy;
                let akey = if matches!(b.get_ref(), RawBind::Table(_)) { format!("{bkey}.addr") } else { bkey };
                match parse_bind(text) {
                    Ok(addr) => {
                        // Same port on the same address, or on a wildcard address of the
                        // same family: with SO_REUSEPORT both binds would succeed and
                        // share connections.
                        let clash = all_binds.iter().find(|(a, _)| binds_overlap(**a, addr));
                        if let Some((a, other)) = clash {
                            let msg = if *a == addr {
                                format!("{addr} is already bound by frontend `{other}`")
                            } else {
                                format!("{addr} overlaps {a}, already bound by frontend `{other}`")
                            };
                            self.err(span.clone(), akey.clone(), msg);
                        }
                        all_binds.insert(addr, name.clone());
                        binds.push(Bind { addr, tls, accept_proxy, h2c, defer_accept, h3 });
                    }
                    Err(e) => self.err(span, akey, e),
                }
            }
            let default_backend = f.default_backend.as_ref().and_then(|d| {
                let idx = backend_index.get(d.get_ref()).copied();
                if idx.is_none() {
                    self.err(
                        d.span(),
                        format!("{key}.default_backend"),
                        format!("no backend is named `{}`", d.get_ref()),
                    );
                }
                idx
            });
            let timeouts = self.timeouts(&f.timeout, &def_timeouts, &format!("{key}.timeout"), Some(Side::Frontend));
            let limits = self.limits(&f.limits, &def_limits, &format!("{key}.limits"));
            let error_pages = self.error_pages(&f.error_pages, &def_pages, &format!("{key}.error_pages"));
            let h2 = self.h2(&f.h2, &def_h2, &format!("{key}.h2"));
            let path_normalize = f.path_normalize.as_ref().is_none_or(|v| *v.get_ref());
            let track = self.track(f.track.as_ref(), &key, &tables);
            let tracking = (&tables[..], &track[..]);
            let mut connection_rules = Vec::new();
            for (j, r) in f.connection_rule.iter().enumerate() {
                if let Some(rule) = self.connection_rule(r, &format!("{key}.connection_rule[{j}]"), tracking) {
                    connection_rules.push(rule);
                }
            }
            let mut rules = Vec::new();
            for (j, r) in f.rule.iter().enumerate() {
                let cache = self.rule_cache(r.get_ref().cache.as_ref(), &format!("{key}.rule[{j}]"), &cache_index);
                let rkey = format!("{key}.rule[{j}]");
                let paths = (mode == Mode::Http).then_some(path_normalize);
                if let Some(rule) = self.rule(r, &rkey, &backend_index, (&userlist_index, &name), paths, tracking) {
                    rules.push(Rule { cache, ..rule });
                }
            }
            let auth = f.auth.as_ref().and_then(|a| self.auth(a, &format!("{key}.auth"), &userlist_index, &name));
            let upgrades = self.upgrades(f.upgrades.as_ref().map(|u| &u.get_ref()[..]), &format!("{key}.upgrades"));
            frontends.push(Frontend {
                name,
                mode,
                binds,
                default_backend,
                forward_for: f.forward_for.as_ref().map_or(def_forward_for, |v| *v.get_ref()),
                forwarded: f.forwarded.as_ref().is_some_and(|v| *v.get_ref()),
                request_id: f.request_id.as_ref().and_then(|r| self.request_id(r, &format!("{key}.request_id"))),
                compression: self.compression(f.compression.as_ref(), &format!("{key}.compression")),
                timeouts,
                limits,
                error_pages,
                h2,
                auth,
                upgrades,
                path_normalize,
                track,
                connection_rules,
                rule_reads: {
                    let mut r = Reads::default();
                    rules.iter().for_each(|rule| rule.when.reads(&mut r));
                    r
                },
                rules,
            });
        }

        if raw.frontend.is_empty() {
            self.err(0..0, "frontend", "the config has no [[frontend]]: nothing would listen");
        }

        // An [[acme]] certificate no bind serves would be obtained for nothing.
        for (i, a) in raw.acme.iter().enumerate() {
            let used = frontends
                .iter()
                .flat_map(|f: &Frontend| &f.binds)
                .any(|b| b.tls.as_ref().is_some_and(|t| t.acme.contains(&i)));
            if !used {
                self.warnings.push(ConfigError::at(
                    self.file,
                    self.src,
                    a.get_ref().name.span(),
                    format!("acme[{i}].name"),
                    "no TLS bind uses this certificate (`tls = { acme = [...] }`): it is obtained and renewed all the same".into(),
                ));
            }
        }
        self.cache_peers(&raw.cache, &mut caches, &mut backends, &frontends, &def_timeouts);
        if !self.errors.is_empty() {
            return None;
        }
        let warnings = std::mem::take(&mut self.warnings);
        Some(Config {
            source: self.file.to_path_buf(),
            global,
            frontends,
            backends,
            admin,
            userlists,
            caches,
            tables,
            acme,
            warnings,
        })
    }

    /// `upgrades = ["websocket"]`: protocol names (RFC 9110 tokens), kept
    /// lowercase; the default is WebSocket alone.
    fn upgrades(&mut self, raw: Option<&[Spanned<String>]>, key: &str) -> Vec<String> {
        let Some(raw) = raw else { return vec!["websocket".to_string()] };
        let mut out = Vec::new();
        for (i, p) in raw.iter().enumerate() {
            let name = p.get_ref();
            if name.is_empty() || !name.bytes().all(is_tchar) {
                self.err(
                    p.span(),
                    format!("{key}[{i}]"),
                    format!("`{name}` is not a protocol name (a token such as \"websocket\")"),
                );
            } else {
                out.push(name.to_ascii_lowercase());
            }
        }
        out
    }

    fn global(&mut self, g: &RawGlobal) -> Global {
        let workers = g.workers.as_ref().and_then(|w| self.int_in(w, 0, 256, "global.workers")).unwrap_or(0) as usize;
        let max_connections_set = g.max_connections.is_some();
        let max_connections = g
            .max_connections
            .as_ref()
            .and_then(|m| self.int_in(m, 1, 10_000_000, "global.max_connections"))
            .map_or(DEFAULT_MAX_CONNECTIONS, |n| n as usize);
        let grace_period = g
            .grace_period
            .as_ref()
            .and_then(|d| self.duration(d, "global.grace_period", true))
            .unwrap_or(Duration::from_secs(30));
        let idle_poll = g
            .idle_poll
            .as_ref()
            .and_then(|d| {
                let v = self.duration_us(d, "global.idle_poll", true)?;
                if v > MAX_IDLE_POLL {
                    let max = fmt_duration(MAX_IDLE_POLL);
                    self.err(d.span(), "global.idle_poll", format!("must be at most {max} (polling burns the core)"));
                    return None;
                }
                Some(v)
            })
            .unwrap_or(DEFAULT_IDLE_POLL);
        let access_log = match &g.access_log {
            None => AccessLogTarget::Off,
            Some(s) => match s.get_ref().as_str() {
                "off" | "" => AccessLogTarget::Off,
                "stdout" | "-" => AccessLogTarget::Stdout,
                "stderr" => AccessLogTarget::Stderr,
                "syslog" => AccessLogTarget::Syslog(SyslogTarget::Unix(PathBuf::from("/dev/log"))),
                v if v.starts_with("syslog:") => match &v["syslog:".len()..] {
                    udp if udp.starts_with("udp:") => match udp["udp:".len()..].parse::<SocketAddr>() {
                        Ok(addr) => AccessLogTarget::Syslog(SyslogTarget::Udp(addr)),
                        Err(_) => {
                            self.err(
                                s.span(),
                                "global.access_log",
                                format!("`{v}`: syslog over UDP takes an IP address and a port, as `syslog:udp:10.0.0.5:514`"),
                            );
                            AccessLogTarget::Off
                        }
                    },
                    path => AccessLogTarget::Syslog(SyslogTarget::Unix(self.base_dir().join(path))),
                },
                path => AccessLogTarget::File(self.base_dir().join(path)),
            },
        };
        let access_log_format = match &g.access_log_format {
            None => LogFormat::Text,
            Some(s) => match s.get_ref().as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other if !other.contains('{') => {
                    self.err(
                        s.span(),
                        "global.access_log_format",
                        format!("`{other}` is not a log format (use \"text\", \"json\" or a line with {{fields}})"),
                    );
                    LogFormat::Text
                }
                custom => match crate::log_format::parse_log_template(custom) {
                    Ok(t) => LogFormat::Custom(t),
                    Err(e) => {
                        self.err(s.span(), "global.access_log_format", e);
                        LogFormat::Text
                    }
                },
            },
        };
        let pidfile = g.pidfile.as_ref().and_then(|p| match p.get_ref().as_str() {
            "" => {
                self.err(p.span(), "global.pidfile", "must be a file path (leave the key out for no pidfile)");
                None
            }
            path if path.ends_with('/') => {
                self.err(p.span(), "global.pidfile", format!("`{path}` names a directory, not a file"));
                None
            }
            path => Some(self.base_dir().join(path)),
        });
        let splice = g.splice.unwrap_or(true);
        let run_as = self.run_as(g.user.as_ref(), g.group.as_ref());
        let dns = self.dns(g.dns.as_ref());
        let etcd = g.etcd.as_ref().and_then(|e| self.etcd(e)).map(Arc::new);
        let peers = g.peers.as_ref().and_then(|p| self.global_peers(p)).map(Arc::new);
        self.has_peers = peers.is_some();
        Global {
            workers,
            max_connections,
            max_connections_set,
            grace_period,
            idle_poll,
            splice,
            access_log,
            access_log_format,
            pidfile,
            run_as,
            dns,
            etcd,
            peers,
        }
    }

    /// `user` and `group`: names (or numeric ids) looked up in the system's
    /// account database now, so that `check` tells of a missing one.
    fn run_as(&mut self, user: Option<&Spanned<String>>, group: Option<&Spanned<String>>) -> Option<RunAs> {
        use nix::unistd::{Gid, Group, Uid, User};
        let user = user.and_then(|u| {
            let name = u.get_ref().as_str();
            let found = match name.parse::<u32>() {
                Ok(id) => User::from_uid(Uid::from_raw(id)).map(|e| e.map(|e| (e.name, id, Some(e.gid.as_raw())))),
                Err(_) => User::from_name(name).map(|e| e.map(|e| (e.name, e.uid.as_raw(), Some(e.gid.as_raw())))),
            };
            match found {
                Ok(Some(found)) => Some(found),
                // A numeric uid without an account: allowed with a group (containers).
                Ok(None) if name.parse::<u32>().is_ok() && group.is_some() => {
                    Some((name.to_string(), name.parse().ok()?, None))
                }
                Ok(None) => {
                    self.err(u.span(), "global.user", format!("there is no user `{name}` on this system"));
                    None
                }
                Err(e) => {
                    self.err(u.span(), "global.user", format!("cannot look up user `{name}`: {e}"));
                    None
                }
            }
        });
        let group = match group {
            Some(g) => {
                let name = g.get_ref().as_str();
                let found = match name.parse::<u32>() {
                    // A numeric gid needs no group entry.
                    Ok(id) => Ok(Some((
                        Group::from_gid(Gid::from_raw(id)).ok().flatten().map_or(name.to_string(), |e| e.name),
                        id,
                    ))),
                    Err(_) => Group::from_name(name).map(|e| e.map(|e| (e.name, e.gid.as_raw()))),
                };
                match found {
                    Ok(Some(found)) => Some(found),
                    Ok(None) => {
                        self.err(g.span(), "global.group", format!("there is no group `{name}` on this system"));
                        return None;
                    }
                    Err(e) => {
                        self.err(g.span(), "global.group", format!("cannot look up group `{name}`: {e}"));
                        return None;
                    }
                }
            }
            None => None,
        };
        match (user, group) {
            (None, None) => None,
            (Some((name, uid, _)), Some(group)) => Some(RunAs { user: Some((name, uid)), group }),
            (Some((name, uid, Some(gid))), None) => {
                let gname = Group::from_gid(Gid::from_raw(gid)).ok().flatten().map_or(gid.to_string(), |g| g.name);
                Some(RunAs { user: Some((name, uid)), group: (gname, gid) })
            }
            (Some((_, _, None)), None) => None,
            (None, Some(group)) => Some(RunAs { user: None, group }),
        }
    }

    /// A bind's `tls` table: every file read and checked now, so that a missing,
    /// unreadable or mismatched certificate or key stops the start (or the
    /// reload) with the file's name.
    fn tls(&mut self, t: &Spanned<RawTls>, key: &str) -> Option<Arc<Tls>> {
        let errors_before = self.errors.len();
        let raw = t.get_ref();
        let provider = tls::provider();
        let certs = self.tls_certs(t, key, &provider);
        let version = |b: &mut Self, v: &Option<Spanned<RawTlsVersion>>, name: &str, default: TlsVersion| match v {
            None => default,
            Some(v) => tls::parse_version(v.get_ref()).unwrap_or_else(|e| {
                b.err(v.span(), format!("{key}.{name}"), e);
                default
            }),
        };
        let min_version = version(self, &raw.min_version, "min_version", TlsVersion::Tls12);
        let max_version = version(self, &raw.max_version, "max_version", TlsVersion::Tls13);
        if min_version > max_version
            && let Some(v) = &raw.min_version
        {
            self.err(
                v.span(),
                format!("{key}.min_version"),
                format!("{} is above max_version {}", min_version.as_str(), max_version.as_str()),
            );
        }
        let in_range = |v: TlsVersion| (min_version..=max_version).contains(&v);
        let cipher_suites = match &raw.ciphers {
            None => provider.cipher_suites.iter().filter(|s| in_range(tls::suite_version(s))).copied().collect(),
            Some(list) => {
                let mut suites: Vec<rustls::SupportedCipherSuite> = Vec::new();
                for (j, name) in list.get_ref().iter().enumerate() {
                    let k = format!("{key}.ciphers[{j}]");
                    match tls::parse_cipher(name.get_ref(), &provider) {
                        Ok(s) if suites.iter().any(|o| o.suite() == s.suite()) => {
                            self.err(name.span(), k, format!("`{}` is listed twice", name.get_ref()))
                        }
                        Ok(s) if !in_range(tls::suite_version(&s)) => self.err(
                            name.span(),
                            k,
                            format!(
                                "`{}` is a TLS {} suite, outside min_version..=max_version ({}..={})",
                                name.get_ref(),
                                tls::suite_version(&s).as_str(),
                                min_version.as_str(),
                                max_version.as_str()
                            ),
                        ),
                        Ok(s) => suites.push(s),
                        Err(e) => self.err(name.span(), k, e),
                    }
                }
                for v in [TlsVersion::Tls12, TlsVersion::Tls13].into_iter().filter(|v| in_range(*v)) {
                    if !suites.iter().any(|s| tls::suite_version(s) == v) {
                        self.err(
                            list.span(),
                            format!("{key}.ciphers"),
                            format!(
                                "no TLS {} cipher suite is listed, so TLS {} could never be used",
                                v.as_str(),
                                v.as_str()
                            ),
                        );
                    }
                }
                // A TLS 1.2 suite signs with one kind of key: each certificate needs one it can use.
                if in_range(TlsVersion::Tls12) && suites.iter().any(|s| tls::suite_version(s) == TlsVersion::Tls12) {
                    for c in &certs {
                        let alg = c.key.key.algorithm();
                        if !suites.iter().any(|s| s.usable_for_signature_algorithm(alg)) {
                            self.err(
                                list.span(),
                                format!("{key}.ciphers"),
                                format!(
                                    "no TLS 1.2 suite listed can be used with the {alg:?} key of {}",
                                    c.cert_file.display()
                                ),
                            );
                        }
                    }
                }
                suites
            }
        };
        let alpn = match &raw.alpn {
            None => vec!["h2".to_string(), "http/1.1".to_string()],
            Some(list) => self.alpn(list, key),
        };
        let hsts = raw
            .hsts
            .as_ref()
            .and_then(|h| tls::parse_hsts(h.get_ref()).map_err(|e| self.err(h.span(), format!("{key}.hsts"), e)).ok());
        let session_cache = match &raw.session_cache {
            Some(n) => self.int_in(n, 0, 10_000_000, &format!("{key}.session_cache")).unwrap_or(0) as usize,
            None => 20_000,
        };
        let client_auth = self.client_auth(raw, key);
        let acme = self.bind_acme(raw, key);
        if self.errors.len() > errors_before {
            return None;
        }
        Some(Arc::new(Tls {
            certs,
            min_version,
            max_version,
            cipher_suites,
            alpn,
            hsts,
            session_cache,
            tickets: raw.tickets.unwrap_or(true),
            client_auth,
            acme,
        }))
    }

    /// A `tls.alpn` list: known protocols, each once.
    fn alpn(&mut self, list: &Spanned<Vec<Spanned<String>>>, key: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (j, p) in list.get_ref().iter().enumerate() {
            let k = format!("{key}.alpn[{j}]");
            match tls::check_alpn(p.get_ref()) {
                Ok(()) if out.contains(p.get_ref()) => {
                    self.err(p.span(), k, format!("`{}` is listed twice", p.get_ref()))
                }
                Ok(()) => out.push(p.get_ref().clone()),
                Err(e) => self.err(p.span(), k, e),
            }
        }
        out
    }

    /// The certificates of a `tls` table, in order: each `certs` entry is a file
    /// or a directory of them; `key` names the key of a single certificate file.
    fn tls_certs(&mut self, t: &Spanned<RawTls>, key: &str, provider: &CryptoProvider) -> Vec<TlsCert> {
        let raw = t.get_ref();
        let Some(list) = &raw.certs else {
            if raw.acme.is_some() {
                return Vec::new();
            }
            self.err(
                t.span(),
                format!("{key}.certs"),
                "a TLS bind needs `certs` (certificate files, PEM, or directories of them) or `acme` ([[acme]] names)",
            );
            return Vec::new();
        };
        if list.get_ref().is_empty() {
            self.err(list.span(), format!("{key}.certs"), "give at least one certificate file or directory");
            return Vec::new();
        }
        if self.offline {
            self.err(list.span(), format!("{key}.certs"), "certificate files are not read offline");
            return Vec::new();
        }
        let key_file = raw.key.as_ref().map(|k| (k, self.base_dir().join(k.get_ref())));
        let mut files = Vec::new();
        for (j, entry) in list.get_ref().iter().enumerate() {
            match tls::cert_files(&self.base_dir().join(entry.get_ref())) {
                Ok(found) => files.extend(found.into_iter().map(|f| (j, entry.span(), f))),
                Err(e) => self.err(entry.span(), format!("{key}.certs[{j}]"), e),
            }
        }
        if let Some((k, _)) = &key_file
            && (list.get_ref().len() != 1 || files.len() > 1)
        {
            self.err(
                k.span(),
                format!("{key}.key"),
                "`key` goes with a single certificate file; with several, keep each key in its \
                 certificate's file or beside it (<file>.key)",
            );
            return Vec::new();
        }
        let mut certs: Vec<TlsCert> = Vec::new();
        for (j, span, file) in files {
            match tls::load_cert(&file, key_file.as_ref().map(|(_, p)| p.as_path()), provider) {
                Ok(c) if c.names.is_empty() && !certs.is_empty() => self.err(
                    span,
                    format!("{key}.certs[{j}]"),
                    format!(
                        "{} has no DNS name in its subjectAltName: no client could select it; \
                         only the first certificate (the default) may lack one",
                        file.display()
                    ),
                ),
                Ok(c) => certs.push(c),
                Err(e) => self.err(span, format!("{key}.certs[{j}]"), e),
            }
        }
        certs
    }

    fn int_in(&mut self, v: &Spanned<i64>, min: i64, max: i64, key: &str) -> Option<i64> {
        let n = *v.get_ref();
        if n < min || n > max {
            self.err(v.span(), key, format!("{n} is out of range ({min}..={max})"));
            return None;
        }
        Some(n)
    }

    /// A duration in whole milliseconds (`us` is refused: see [`whole_ms`]).
    pub(crate) fn duration(&mut self, d: &Spanned<RawDuration>, key: &str, allow_zero: bool) -> Option<Duration> {
        self.duration_in(d, key, allow_zero, false)
    }

    /// A duration that may take microseconds (`"50us"`): `global.idle_poll` only.
    fn duration_us(&mut self, d: &Spanned<RawDuration>, key: &str, allow_zero: bool) -> Option<Duration> {
        self.duration_in(d, key, allow_zero, true)
    }

    fn duration_in(&mut self, d: &Spanned<RawDuration>, key: &str, allow_zero: bool, micros: bool) -> Option<Duration> {
        let parsed = match d.get_ref() {
            RawDuration::Millis(ms) if *ms >= 0 => Ok(Duration::from_millis(*ms as u64)),
            RawDuration::Millis(ms) => Err(format!("{ms} is negative")),
            RawDuration::Text(s) if micros => parse_duration(s),
            RawDuration::Text(s) => parse_duration(s).and_then(whole_ms),
        };
        match parsed {
            Ok(v) if v.is_zero() && !allow_zero => {
                self.err(d.span(), key, "must be more than 0");
                None
            }
            Ok(v) => Some(v),
            Err(e) => {
                self.err(d.span(), key, e);
                None
            }
        }
    }

    fn size(&mut self, s: &Spanned<RawSize>, key: &str) -> Option<u64> {
        let parsed = match s.get_ref() {
            RawSize::Bytes(b) if *b >= 0 => Ok(*b as u64),
            RawSize::Bytes(b) => Err(format!("{b} is negative")),
            RawSize::Text(t) => parse_size(t),
        };
        parsed.map_err(|e| self.err(s.span(), key, e)).ok()
    }

    /// Timeouts for `[defaults]` (`side` None: every key) or one side: a frontend
    /// takes the client-side keys, a backend the server-side ones; a key on the
    /// wrong side is an error rather than silently ignored.
    fn timeouts(&mut self, raw: &RawTimeouts, base: &Timeouts, key: &str, side: Option<Side>) -> Timeouts {
        let mut t = *base;
        let fields: [(&Option<Spanned<RawDuration>>, &mut Duration, &str, Side); 8] = [
            (&raw.connect, &mut t.connect, "connect", Side::Backend),
            (&raw.client, &mut t.client, "client", Side::Frontend),
            (&raw.server, &mut t.server, "server", Side::Backend),
            (&raw.http_request, &mut t.http_request, "http_request", Side::Frontend),
            (&raw.keep_alive, &mut t.keep_alive, "keep_alive", Side::Frontend),
            (&raw.server_keep_alive, &mut t.server_keep_alive, "server_keep_alive", Side::Backend),
            (&raw.queue, &mut t.queue, "queue", Side::Backend),
            (&raw.tunnel, &mut t.tunnel, "tunnel", Side::Backend),
        ];
        for (value, slot, name, belongs) in fields {
            if let Some(v) = value {
                let k = format!("{key}.{name}");
                if side.is_some_and(|s| s != belongs) {
                    let (here, there) = match belongs {
                        Side::Frontend => ("backend", "[defaults] or the frontend"),
                        Side::Backend => ("frontend", "[defaults] or the backend"),
                    };
                    self.err(v.span(), k, format!("`{name}` has no effect on a {here}: set it in {there}"));
                    continue;
                }
                let parsed = match v.get_ref() {
                    RawDuration::Millis(ms) if *ms > 0 => Ok(Duration::from_millis(*ms as u64)),
                    RawDuration::Millis(_) => Err("must be more than 0".to_string()),
                    RawDuration::Text(s) => parse_duration(s)
                        .and_then(whole_ms)
                        .and_then(|d| if d.is_zero() { Err("must be more than 0".into()) } else { Ok(d) }),
                };
                match parsed {
                    Ok(d) => {
                        *slot = d;
                        t.tunnel_set |= name == "tunnel";
                    }
                    Err(e) => self.err(v.span(), k, e),
                }
            }
        }
        t
    }

    fn limits(&mut self, raw: &RawLimits, base: &Limits, key: &str) -> Limits {
        let mut l = *base;
        if let Some(v) = &raw.max_header_size
            && let Some(n) = self.size(v, &format!("{key}.max_header_size"))
        {
            if n < 8192 {
                self.err(v.span(), format!("{key}.max_header_size"), "must be at least 8KiB");
            } else {
                l.max_header_size = n.min(u32::MAX as u64) as usize;
            }
        }
        if let Some(v) = &raw.max_headers
            && let Some(n) = self.int_in(v, 1, 10_000, &format!("{key}.max_headers"))
        {
            l.max_headers = n as usize;
        }
        if let Some(v) = &raw.max_uri_size
            && let Some(n) = self.size(v, &format!("{key}.max_uri_size"))
        {
            if n < 64 {
                self.err(v.span(), format!("{key}.max_uri_size"), "must be at least 64 bytes");
            } else {
                l.max_uri_size = n.min(u32::MAX as u64) as usize;
            }
        }
        if let Some(v) = &raw.max_request_body
            && let Some(n) = self.size(v, &format!("{key}.max_request_body"))
        {
            l.max_request_body = Some(n);
        }
        if let Some(v) = &raw.lookalike_headers {
            match v.get_ref().as_str() {
                "drop" => l.lookalike_headers = Lookalikes::Drop,
                "refuse" => l.lookalike_headers = Lookalikes::Refuse,
                "keep" => l.lookalike_headers = Lookalikes::Keep,
                other => self.err(
                    v.span(),
                    format!("{key}.lookalike_headers"),
                    format!("`{other}` is not \"drop\", \"refuse\" or \"keep\""),
                ),
            }
        }
        if let Some(v) = &raw.repeated_content_length {
            match v.get_ref().as_str() {
                "merge" => l.refuse_repeated_length = false,
                "refuse" => l.refuse_repeated_length = true,
                other => self.err(
                    v.span(),
                    format!("{key}.repeated_content_length"),
                    format!("`{other}` is not \"merge\" or \"refuse\""),
                ),
            }
        }
        l
    }

    /// An `h2` table over `base` (the defaults'). Sizes within what RFC 9113
    /// allows and what makes sense for a proxy.
    fn h2(&mut self, raw: &RawH2, base: &H2, key: &str) -> H2 {
        let mut h = *base;
        if let Some(v) = &raw.max_concurrent_streams
            && let Some(n) = self.int_in(v, 1, 100_000, &format!("{key}.max_concurrent_streams"))
        {
            h.max_concurrent_streams = n as u32;
        }
        let size = |b: &mut Self, v: &Option<Spanned<RawSize>>, name: &str, min: u64, max: u64, slot: &mut u32| {
            let Some(v) = v else { return };
            let k = format!("{key}.{name}");
            if let Some(n) = b.size(v, &k) {
                if (min..=max).contains(&n) {
                    *slot = n as u32;
                } else {
                    b.err(v.span(), k, format!("{n} bytes is out of range ({min}..={max})"));
                }
            }
        };
        // RFC 9113 section 6.5.2: windows up to 2^31-1, frames 2^14..2^24-1.
        const WINDOW_MAX: u64 = (1 << 31) - 1;
        size(self, &raw.initial_window_size, "initial_window_size", 1024, WINDOW_MAX, &mut h.initial_window_size);
        size(
            self,
            &raw.connection_window_size,
            "connection_window_size",
            65_535,
            WINDOW_MAX,
            &mut h.connection_window_size,
        );
        size(self, &raw.max_frame_size, "max_frame_size", 16_384, (1 << 24) - 1, &mut h.max_frame_size);
        size(self, &raw.max_header_list_size, "max_header_list_size", 1024, 16 << 20, &mut h.max_header_list_size);
        size(self, &raw.header_table_size, "header_table_size", 0, 1 << 20, &mut h.header_table_size);
        if let Some(v) = &raw.max_resets
            && let Some(n) = self.int_in(v, 1, 1_000_000, &format!("{key}.max_resets"))
        {
            h.max_resets = n as u32;
        }
        if let Some(d) = &raw.reset_window
            && let Some(w) = self.duration(d, &format!("{key}.reset_window"), false)
        {
            h.reset_window = w;
        }
        h
    }

    fn error_pages(
        &mut self,
        raw: &BTreeMap<String, Spanned<String>>,
        base: &BTreeMap<u16, ErrorPage>,
        key: &str,
    ) -> BTreeMap<u16, ErrorPage> {
        let mut pages = base.clone();
        for (status, path) in raw {
            let k = format!("{key}.{status}");
            let code = match status.parse::<u16>() {
                Ok(c) if (400..=599).contains(&c) => c,
                _ => {
                    self.err(path.span(), k, format!("`{status}` is not an error status (400..=599)"));
                    continue;
                }
            };
            let file = self.base_dir().join(path.get_ref());
            let read = if self.offline {
                Err(std::io::Error::other("files are not read offline"))
            } else {
                std::fs::read(&file)
            };
            match read {
                Ok(bytes) => {
                    pages.insert(code, pages::page(&file, bytes));
                }
                Err(e) => self.err(path.span(), k, format!("cannot read {}: {e}", file.display())),
            }
        }
        pages
    }

    /// A backend's `check` table. Keys that only HTTP checks use are refused on a
    /// TCP check rather than ignored.
    fn check(&mut self, c: &Spanned<RawCheck>, key: &str) -> Option<HealthCheck> {
        let errors_before = self.errors.len();
        let c = c.get_ref();
        let http = match &c.kind {
            None => false,
            Some(k) => match k.get_ref().as_str() {
                "tcp" => false,
                "http" => true,
                other => {
                    self.err(
                        k.span(),
                        format!("{key}.type"),
                        format!("`{other}` is not a check type (use \"tcp\" or \"http\")"),
                    );
                    return None;
                }
            },
        };
        let interval = match &c.interval {
            Some(d) => self.duration(d, &format!("{key}.interval"), false),
            None => Some(Duration::from_secs(2)),
        };
        let timeout = match &c.timeout {
            Some(d) => self.duration(d, &format!("{key}.timeout"), false),
            None => interval,
        };
        if let (Some(t), Some(i), Some(raw)) = (timeout, interval, &c.timeout)
            && t > i
        {
            self.err(
                raw.span(),
                format!("{key}.timeout"),
                format!(
                    "{} is longer than the interval ({}): a check must end before the next one starts",
                    fmt_duration(t),
                    fmt_duration(i)
                ),
            );
        }
        let fall = match &c.fall {
            Some(v) => self.int_in(v, 1, 1000, &format!("{key}.fall")),
            None => Some(3),
        };
        let rise = match &c.rise {
            Some(v) => self.int_in(v, 1, 1000, &format!("{key}.rise")),
            None => Some(2),
        };
        let port = match &c.port {
            Some(v) => self.int_in(v, 1, 65535, &format!("{key}.port")).map(|p| Some(p as u16)),
            None => Some(None),
        };
        let kind = if http {
            self.http_check(c, key).map(CheckKind::Http)
        } else {
            let http_only = [
                ("method", c.method.as_ref().map(|v| v.span())),
                ("path", c.path.as_ref().map(|v| v.span())),
                ("host", c.host.as_ref().map(|v| v.span())),
                ("expect_status", c.expect_status.as_ref().map(|v| v.span())),
                ("expect_body", c.expect_body.as_ref().map(|v| v.span())),
            ];
            for (name, s) in http_only {
                if let Some(s) = s {
                    self.err(
                        s,
                        format!("{key}.{name}"),
                        format!("`{name}` applies to HTTP checks only: add type = \"http\" (the default is \"tcp\")"),
                    );
                }
            }
            Some(CheckKind::Tcp)
        };
        if self.errors.len() > errors_before {
            return None;
        }
        Some(HealthCheck {
            kind: kind?,
            interval: interval?,
            timeout: timeout?,
            fall: fall? as u32,
            rise: rise? as u32,
            port: port?,
        })
    }

    fn http_check(&mut self, c: &RawCheck, key: &str) -> Option<HttpCheck> {
        let errors_before = self.errors.len();
        let method = match &c.method {
            None if c.expect_body.is_some() => Method::GET,
            None => Method::HEAD,
            Some(m) => match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                Ok(Method::CONNECT) => {
                    self.err(m.span(), format!("{key}.method"), "CONNECT cannot be a check method");
                    Method::HEAD
                }
                Ok(method) => method,
                Err(_) => {
                    self.err(m.span(), format!("{key}.method"), format!("`{}` is not a method", m.get_ref()));
                    Method::HEAD
                }
            },
        };
        if let Some(b) = &c.expect_body
            && method == Method::HEAD
        {
            self.err(
                b.span(),
                format!("{key}.expect_body"),
                "a response to HEAD has no body to look in: use method = \"GET\" with `expect_body`",
            );
        }
        let path = match &c.path {
            None => "/".to_string(),
            Some(p) => {
                let v = p.get_ref();
                if !v.starts_with('/') || v.parse::<http::uri::PathAndQuery>().is_err() {
                    self.err(
                        p.span(),
                        format!("{key}.path"),
                        format!(
                            "`{v}` is not a request path (it starts with '/' and has no spaces or control characters)"
                        ),
                    );
                }
                v.clone()
            }
        };
        let host = c.host.as_ref().map(|h| {
            let v = h.get_ref();
            if v.is_empty() || HeaderValue::from_str(v).is_err() {
                self.err(h.span(), format!("{key}.host"), format!("`{v}` cannot be sent as a Host header"));
            }
            v.clone()
        });
        let expect_status = match &c.expect_status {
            None => StatusRange { min: 200, max: 399 },
            Some(s) => match parse_status_range(s.get_ref()) {
                Ok(r) => r,
                Err(e) => {
                    self.err(s.span(), format!("{key}.expect_status"), e);
                    StatusRange { min: 200, max: 399 }
                }
            },
        };
        let expect_body = c.expect_body.as_ref().map(|b| {
            if b.get_ref().is_empty() {
                self.err(
                    b.span(),
                    format!("{key}.expect_body"),
                    "an empty string is in every body; leave `expect_body` out instead",
                );
            } else if b.get_ref().len() > 1024 {
                self.err(b.span(), format!("{key}.expect_body"), "must be at most 1024 bytes");
            }
            b.get_ref().clone()
        });
        if self.errors.len() > errors_before {
            return None;
        }
        Some(HttpCheck { method, path, host, expect_status, expect_body })
    }

    fn observe(&mut self, o: &Spanned<RawObserve>, has_check: bool, key: &str) -> Option<Observe> {
        if !has_check {
            self.err(
                o.span(),
                key,
                "passive checks need an active `check` on this backend: a server that `observe` takes DOWN \
                 comes back only when active checks pass, so without them it would stay DOWN for good",
            );
            return None;
        }
        match &o.get_ref().errors {
            Some(n) => self.int_in(n, 1, 1000, &format!("{key}.errors")).map(|n| Observe { errors: n as u32 }),
            None => {
                self.err(o.span(), format!("{key}.errors"), "give the number of consecutive errors, e.g. errors = 3");
                None
            }
        }
    }

    /// A backend's `cookie` table. The insert-only keys are refused in the other
    /// modes, where they would do nothing.
    fn cookie(&mut self, c: &Spanned<RawCookie>, key: &str) -> Option<CookiePolicy> {
        let raw = c.get_ref();
        let mut ok = true;
        let name = raw.name.get_ref().clone();
        if name.is_empty() || !name.bytes().all(is_tchar) {
            self.err(raw.name.span(), format!("{key}.name"), format!("`{name}` is not a valid cookie name"));
            ok = false;
        }
        let mode = match raw.mode.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
            None | Some(("insert", _)) => CookieMode::Insert,
            Some(("prefix", _)) => CookieMode::Prefix,
            Some(("rewrite", _)) => CookieMode::Rewrite,
            Some((other, span)) => {
                self.err(
                    span,
                    format!("{key}.mode"),
                    format!("`{other}` is not a cookie mode (use \"insert\", \"prefix\" or \"rewrite\")"),
                );
                return None;
            }
        };
        if mode != CookieMode::Insert {
            let insert_only = [
                ("indirect", raw.indirect.as_ref().map(|v| v.span())),
                ("nocache", raw.nocache.as_ref().map(|v| v.span())),
                ("httponly", raw.httponly.as_ref().map(|v| v.span())),
                ("secure", raw.secure.as_ref().map(|v| v.span())),
                ("max_idle", raw.max_idle.as_ref().map(|v| v.span())),
                ("max_life", raw.max_life.as_ref().map(|v| v.span())),
                ("domain", raw.domain.as_ref().map(|v| v.span())),
                ("path", raw.path.as_ref().map(|v| v.span())),
            ];
            for (k, span) in insert_only {
                if let Some(span) = span {
                    self.err(
                        span,
                        format!("{key}.{k}"),
                        format!("`{k}` applies to mode \"insert\" only: the application sets this cookie itself"),
                    );
                    ok = false;
                }
            }
        }
        let max_idle = raw.max_idle.as_ref().map(|d| self.duration(d, &format!("{key}.max_idle"), false));
        let max_life = raw.max_life.as_ref().map(|d| self.duration(d, &format!("{key}.max_life"), false));
        let attr_ok = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() && b != b';');
        for (k, v) in [("domain", &raw.domain), ("path", &raw.path)] {
            if let Some(v) = v
                && !attr_ok(v.get_ref())
            {
                self.err(v.span(), format!("{key}.{k}"), format!("`{}` is not a valid cookie {k}", v.get_ref()));
                ok = false;
            }
        }
        if !ok {
            return None;
        }
        Some(CookiePolicy {
            name,
            mode,
            indirect: raw.indirect.as_ref().is_some_and(|v| *v.get_ref()),
            nocache: raw.nocache.as_ref().is_some_and(|v| *v.get_ref()),
            httponly: raw.httponly.as_ref().is_some_and(|v| *v.get_ref()),
            secure: raw.secure.as_ref().is_some_and(|v| *v.get_ref()),
            max_idle: max_idle.map(|d| d.ok_or(())).transpose().ok()?,
            max_life: max_life.map(|d| d.ok_or(())).transpose().ok()?,
            domain: raw.domain.as_ref().map(|d| d.get_ref().clone()),
            path: raw.path.as_ref().map_or_else(|| "/".to_string(), |p| p.get_ref().clone()),
        })
    }

    /// A backend's `stick` table.
    fn stick(&mut self, s: &Spanned<RawStick>, key: &str) -> Option<StickPolicy> {
        let raw = s.get_ref();
        if raw.on.get_ref() != "source" {
            self.err(
                raw.on.span(),
                format!("{key}.on"),
                format!("`{}` cannot be stuck on (use \"source\")", raw.on.get_ref()),
            );
            return None;
        }
        let expire = match &raw.expire {
            Some(d) => self.duration(d, &format!("{key}.expire"), false)?,
            None => Duration::from_secs(30 * 60),
        };
        let size = match &raw.size {
            Some(n) => self.int_in(n, 1, 10_000_000, &format!("{key}.size"))? as usize,
            None => 100_000,
        };
        let share = self.share(raw.share.as_ref(), &format!("{key}.share"));
        Some(StickPolicy { expire, size, share })
    }
}

/// How a rule matches paths: in normal form (the frontend's
/// `path_normalize`), without case (the rule's `path_case_insensitive`).
#[derive(Debug, Clone, Copy)]
struct PathForm {
    normalize: bool,
    fold: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Frontend,
    Backend,
}

/// Whether two listening addresses take the same connections: the same port
/// and family, on the same address or where either is the wildcard (with
/// SO_REUSEPORT both binds would succeed and share connections).
pub fn binds_overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// `d` if it is a whole number of milliseconds: the `us` unit is for
/// `global.idle_poll`, and every other duration's smallest step is 1ms.
fn whole_ms(d: Duration) -> Result<Duration, String> {
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        Ok(d)
    } else {
        Err("must be a whole number of milliseconds (`us` is for global.idle_poll)".into())
    }
}

/// A backend's `tls` and `proto` (its servers' defaults) and its key path.
type BackendTransport<'a> = (&'a Option<Spanned<RawServerTls>>, &'a Option<Spanned<String>>, &'a str);

/// `200`, `"200"` or `"200-399"`, within 100..=599.
fn parse_status_range(r: &RawStatusRange) -> Result<StatusRange, String> {
    let (min, max) = match r {
        RawStatusRange::Code(c) => (*c, *c),
        RawStatusRange::Text(t) => {
            let bad = || format!("`{t}` is not a status or a range of statuses (write it like \"200\" or \"200-399\")");
            let (a, b) = t.split_once('-').unwrap_or((t, t));
            let a: i64 = a.trim().parse().map_err(|_| bad())?;
            let b: i64 = b.trim().parse().map_err(|_| bad())?;
            (a, b)
        }
    };
    for c in [min, max] {
        if !(100..=599).contains(&c) {
            return Err(format!("{c} is not an HTTP status (100..=599)"));
        }
    }
    if min > max {
        return Err(format!("the range {min}-{max} is empty: write the lower status first"));
    }
    Ok(StatusRange { min: min as u16, max: max as u16 })
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

pub fn parse_balance(s: &str) -> Result<Balance, String> {
    Ok(match s {
        "roundrobin" => Balance::RoundRobin,
        "static-rr" => Balance::StaticRr,
        "leastconn" => Balance::LeastConn,
        "first" => Balance::First,
        "source" => Balance::Source,
        "uri" => Balance::Uri,
        "random" => Balance::Random,
        other => {
            if let Some(name) = other.strip_prefix("hdr(").and_then(|r| r.strip_suffix(')')) {
                return HeaderName::from_bytes(name.trim().as_bytes())
                    .map(Balance::Hdr)
                    .map_err(|_| format!("`{name}` in `{other}` is not a valid header name"));
            }
            return Err(format!(
                "`{other}` is not a balance algorithm (roundrobin, static-rr, leastconn, first, source, uri, hdr(NAME), random)"
            ));
        }
    })
}

/// `"127.0.0.1:8080"`, `"[::1]:8080"`, `"*:8080"` or `":8080"` (every IPv4 address).
fn parse_bind(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let t = t.strip_prefix('*').unwrap_or(t);
    let owned;
    let t = if t.starts_with(':') {
        owned = format!("0.0.0.0{t}");
        owned.as_str()
    } else {
        t
    };
    t.parse::<SocketAddr>().map_err(|_| {
        format!("`{s}` is not an address to bind (write it like \"127.0.0.1:8080\", \"[::]:443\" or \":80\")")
    })
}

/// An IP:port, or a host name and port resolved once, at load time.
fn resolve_addr(s: &str, offline: bool) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if offline {
        return Err(format!("`{s}` is not an IP:port (names are not resolved offline)"));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("`{s}` has no port (write it like \"127.0.0.1:3000\" or \"app.internal:3000\")"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("`{s}` is not host:port"));
    }
    let addrs: Vec<SocketAddr> = s.to_socket_addrs().map_err(|e| format!("cannot resolve `{s}`: {e}"))?.collect();
    addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()).copied().ok_or_else(|| format!("`{s}` resolves to no address"))
}

impl Builder<'_> {
    /// `request_id`: `true` (X-Request-Id, no client trusted), `false`, or
    /// `{ header, trust }`; a bad header name or address is an error at `key`.
    fn request_id(&mut self, r: &Spanned<RawRequestId>, key: &str) -> Option<RequestId> {
        let (header, trust) = match r.get_ref() {
            RawRequestId::On(false) => return None,
            RawRequestId::On(true) => (None, &[][..]),
            RawRequestId::Table(t) => (t.header.as_deref(), &t.trust[..]),
        };
        let header = header.unwrap_or("x-request-id");
        let name = http::HeaderName::from_bytes(header.as_bytes()).ok().map(|n| n.as_str().to_string());
        if name.is_none() {
            self.err(r.span(), format!("{key}.header"), format!("`{header}` is not a valid header name"));
        }
        let mut nets = Vec::new();
        for n in trust {
            match parse_net(n) {
                Some(net) => nets.push(net),
                None => self.err(r.span(), format!("{key}.trust"), format!("`{n}` is not an address or CIDR block")),
            }
        }
        Some(RequestId { header: name?, trust: nets })
    }
}

fn parse_net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>().ok().or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// RFC 9110 `tchar`: what a token (a method, a field name, a cookie name or
/// our cookie values, a cache directive) may hold.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
