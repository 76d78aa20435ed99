//! `server` blocks of `http` into frontends: one frontend per set of
//! listening addresses, its server blocks told apart by `host` conditions.

use super::location::{self, Rule, RulesOut, SrvCtx};
use super::parse::Directive;
use super::{ClientTimeouts, Cx, Log, Pending, comment_of, cond, one_or_many, other};
use crate::out::{Frontend, Table, V};
use crate::{Kind, units};
use std::collections::HashMap;

/// A `listen` directive.
#[derive(Debug, Clone)]
pub(crate) struct Listen {
    pub addr: String,
    pub ssl: bool,
    pub default: bool,
    pub proxy_protocol: bool,
    pub http2: bool,
    pub comment: String,
}

/// Directives a server block handles itself (they may come from `http`).
pub(crate) fn is_server_level(name: &str) -> bool {
    name.starts_with("ssl")
        || name.starts_with("gzip")
        || name.starts_with("http2")
        || name.starts_with("http3")
        || name.starts_with("quic")
        || matches!(
            name,
            "listen"
                | "server_name"
                | "gunzip"
                | "error_page"
                | "limit_conn"
                | "client_max_body_size"
                | "large_client_header_buffers"
                | "client_header_timeout"
                | "client_body_timeout"
                | "send_timeout"
                | "keepalive_timeout"
        )
}

pub(crate) fn parse_listen(log: &mut Log, notes: &mut Vec<String>, d: &Directive, tcp: bool) -> Option<Listen> {
    let a = d.arg(0);
    if a.starts_with("unix:") {
        log.warn_in(notes, d, Kind::NoEquivalent, "Tollgate listens on TCP addresses only");
        return None;
    }
    if d.args.iter().any(|p| p == "quic" || p == "udp") {
        log.warn_in(
            notes,
            d,
            Kind::NoEquivalent,
            if tcp {
                "Tollgate does not proxy UDP"
            } else {
                "not translated: Tollgate's HTTP/3 is `h3 = true` on a TLS bind"
            },
        );
        return None;
    }
    let addr = if let Some(x) = units::listen_addr(a) {
        x
    } else if a.parse::<std::net::Ipv4Addr>().is_ok()
        || (a.starts_with('[') && a.ends_with(']') && units::listen_addr(&format!("{a}:80")).is_some())
    {
        format!("{a}:80")
    } else if a == "localhost" || a.starts_with("localhost:") {
        let port = a.strip_prefix("localhost:").unwrap_or("80");
        log.warn_in(
            notes,
            d,
            Kind::Approximate,
            "localhost is written 127.0.0.1 (Tollgate binds addresses, not names)",
        );
        format!("127.0.0.1:{port}")
    } else if a == "*" {
        ":80".to_string()
    } else {
        log.warn_in(notes, d, Kind::NoEquivalent, format!("{a}: not an address Tollgate can bind (IP:port)"));
        return None;
    };
    let mut l = Listen { addr, ssl: false, default: false, proxy_protocol: false, http2: false, comment: log.com(d) };
    for p in d.args.iter().skip(1) {
        let k = p.split('=').next().unwrap_or("");
        match k {
            "ssl" => l.ssl = true,
            "http2" => l.http2 = true,
            "proxy_protocol" => l.proxy_protocol = true,
            "default_server" | "default" => {
                l.default = true;
                log.warn_in(
                    notes,
                    d,
                    Kind::NoEquivalent,
                    "default_server: its rules come last, without a host condition, and catch what no other server block does",
                );
            }
            "reuseport" => {
                log.warn_in(notes, d, Kind::NoEquivalent, "not needed: Tollgate's workers always use SO_REUSEPORT")
            }
            "deferred" => {
                log.warn_in(notes, d, Kind::NoEquivalent, "not needed: defer_accept is on by default on HTTP binds")
            }
            "ipv6only" if p.ends_with("off") => log.warn_in(
                notes,
                d,
                Kind::Approximate,
                "Tollgate's IPv6 sockets are IPv6 only: bind the IPv4 address too",
            ),
            "bind" | "ipv6only" => {}
            _ => log.warn_in(notes, d, Kind::NoEquivalent, format!("{p}: no equivalent on a Tollgate bind")),
        }
    }
    Some(l)
}

/// The TLS settings of one server block.
#[derive(Debug, Default, Clone)]
pub(crate) struct TlsConf {
    certs: Vec<(String, Option<String>, Directive)>,
    settings: Vec<(String, V, String, Directive)>,
}

impl TlsConf {
    /// Reads the `ssl_*` directives among `dirs`.
    pub fn read(log: &mut Log, notes: &mut Vec<String>, dirs: &[&Directive]) -> TlsConf {
        let mut t = TlsConf::default();
        let mut keys = Vec::new();
        for d in dirs {
            let d = *d;
            let v = d.arg(0);
            match d.name.as_str() {
                "ssl_certificate" => {
                    if v.contains('$') || v.starts_with("data:") {
                        log.warn_in(notes, d, Kind::NoEquivalent, "a certificate named by variables: list the files");
                    } else {
                        log.done(d);
                        let mut dd = d.clone();
                        dd.block = None;
                        t.certs.push((v.to_string(), None, dd));
                    }
                }
                "ssl_certificate_key" => {
                    log.done(d);
                    keys.push(v.to_string());
                }
                "ssl_protocols" => {
                    let has = |p: &str| d.args.iter().any(|a| a == p);
                    let (v12, v13) = (has("TLSv1.2"), has("TLSv1.3"));
                    if !v12 && !v13 {
                        log.warn_in(notes, d, Kind::NoEquivalent, "Tollgate offers TLS 1.2 and 1.3 only");
                        continue;
                    }
                    t.set("min_version", V::s(if v12 { "1.2" } else { "1.3" }), d, log);
                    if !v13 {
                        t.set("max_version", V::s("1.2"), d, log);
                    }
                    if d.args.iter().any(|a| a != "TLSv1.2" && a != "TLSv1.3") {
                        log.warn_in(
                            notes,
                            d,
                            Kind::Approximate,
                            "TLS 1.0 and 1.1 (and SSL) are not offered by rustls: clients need TLS 1.2 or 1.3",
                        );
                    }
                }
                "ssl_ciphers" => log.warn_in(
                    notes,
                    d,
                    Kind::Approximate,
                    "Tollgate's default suites are kept (AEAD with forward secrecy only; tls.ciphers takes rustls names \
                     such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
                ),
                "ssl_session_tickets" => {
                    if v == "off" {
                        t.set("tickets", V::Bool(false), d, log);
                    } else {
                        log.done(d);
                    }
                }
                "ssl_session_cache" => {
                    if v == "off" || v == "none" {
                        t.set("session_cache", V::Int(0), d, log);
                    } else {
                        log.warn_in(
                            notes,
                            d,
                            Kind::NoEquivalent,
                            "not needed: each TLS bind has a session cache shared by the workers (tls.session_cache, 20000 entries)",
                        );
                    }
                }
                "ssl_client_certificate" => t.set("client_ca", V::s(v), d, log),
                "ssl_verify_client" => match v {
                    "on" => t.set("verify", V::s("required"), d, log),
                    "optional" => t.set("verify", V::s("optional"), d, log),
                    "off" => log.done(d),
                    _ => log.warn_in(notes, d, Kind::NoEquivalent, "client certificates are verified against client_ca"),
                },
                "ssl_crl" => t.set("crl", V::strs([v]), d, log),
                "ssl_verify_depth" => log.warn_in(notes, d, Kind::NoEquivalent, "not needed: the whole chain is checked"),
                "ssl" => {}
                _ => {
                    if let Some(c) = other(log, d) {
                        notes.push(c);
                    }
                }
            }
        }
        for (i, k) in keys.into_iter().enumerate() {
            if let Some(c) = t.certs.get_mut(i) {
                c.1 = Some(k);
            }
        }
        t
    }

    fn set(&mut self, key: &str, v: V, d: &Directive, log: &mut Log) {
        let c = log.com(d);
        let mut dd = d.clone();
        dd.block = None;
        self.settings.retain(|s| s.0 != key);
        self.settings.push((key.to_string(), v, c, dd));
    }

    /// The `tls` table of a bind served by these server blocks.
    pub fn build(confs: &[&TlsConf], log: &mut Log, notes: &mut Vec<String>, comments: &mut Vec<String>) -> Option<V> {
        let mut certs: Vec<&(String, Option<String>, Directive)> = Vec::new();
        let mut settings: Vec<(String, V)> = Vec::new();
        for c in confs {
            for cert in &c.certs {
                if !certs.iter().any(|x| x.0 == cert.0) {
                    certs.push(cert);
                }
            }
            for (k, v, com, d) in &c.settings {
                match settings.iter().find(|(k2, _)| k2 == k) {
                    Some((_, old)) if old != v => log.warn_in(
                        notes,
                        d,
                        Kind::Approximate,
                        format!("tls.{k} is one value per address: the first server block's is kept"),
                    ),
                    Some(_) => {}
                    None => {
                        if !comments.contains(com) {
                            comments.push(com.clone());
                        }
                        settings.push((k.clone(), v.clone()));
                    }
                }
            }
        }
        if certs.is_empty() {
            return None;
        }
        let mut pairs = vec![("certs".to_string(), V::strs(certs.iter().map(|c| c.0.clone())))];
        for (_, key, d) in &certs {
            let mut c = comment_of(d);
            if let Some(k) = key {
                c.push_str(&format!("\n  key: {k}"));
            }
            if !comments.contains(&c) {
                comments.push(c);
            }
        }
        if let [(cert, Some(key), _)] = certs.as_slice() {
            if key != cert {
                pairs.push(("key".into(), V::s(key)));
            }
        } else {
            for (cert, key, d) in &certs {
                let Some(key) = key else { continue };
                let beside = std::path::Path::new(cert).with_extension("key");
                if key == cert || *key == format!("{cert}.key") || std::path::Path::new(key) == beside {
                    continue;
                }
                log.warn_in(
                    notes,
                    d,
                    Kind::Approximate,
                    format!(
                        "with several certificates on one address Tollgate finds each key beside its certificate \
                         ({cert}.key or {}): put {key} there",
                        beside.display()
                    ),
                );
            }
        }
        for (k, v) in settings {
            pairs.push((k, v));
        }
        Some(V::Table(pairs))
    }
}

/// The `tls` table of a stream server's TLS binds.
pub(crate) fn tls_of(log: &mut Log, notes: &mut Vec<String>, dirs: &[&Directive], _tcp: bool) -> Option<V> {
    let ssl: Vec<&Directive> = dirs.iter().copied().filter(|d| d.name.starts_with("ssl_")).collect();
    let conf = TlsConf::read(log, notes, &ssl);
    let mut comments = Vec::new();
    let v = TlsConf::build(&[&conf], log, notes, &mut comments);
    notes.extend(comments);
    v
}

/// gzip settings (http's, then the server's).
#[derive(Debug, Default, Clone)]
struct Gzip {
    on: bool,
    types: Vec<String>,
    any_type: bool,
    min: Option<V>,
    level: Option<i64>,
    gunzip: bool,
    comments: Vec<String>,
}

impl Gzip {
    fn take(&mut self, log: &mut Log, notes: &mut Vec<String>, d: &Directive) {
        match d.name.as_str() {
            "gzip" => self.on = d.arg(0) == "on",
            "gunzip" => self.gunzip = d.arg(0) == "on",
            "gzip_types" => {
                for t in &d.args {
                    if t == "*" {
                        self.any_type = true;
                    } else if !self.types.contains(t) {
                        self.types.push(t.clone());
                    }
                }
            }
            "gzip_min_length" => match d.arg(0).parse::<u64>() {
                Ok(n) => self.min = Some(units::size_value(n)),
                Err(_) => match units::size(d.arg(0)) {
                    Some(v) => self.min = Some(v),
                    None => {
                        log.warn_in(notes, d, Kind::NoEquivalent, "not a size");
                        return;
                    }
                },
            },
            "gzip_comp_level" => match d.arg(0).parse::<i64>() {
                Ok(n) if (1..=9).contains(&n) => self.level = Some(n),
                _ => {
                    log.warn_in(notes, d, Kind::NoEquivalent, "a level 1 to 9");
                    return;
                }
            },
            _ => {
                if let Some(c) = other(log, d) {
                    notes.push(c);
                }
                return;
            }
        }
        self.comments.push(log.com(d));
    }

    fn value(&self) -> Option<V> {
        if !self.on && !self.gunzip {
            return None;
        }
        let mut pairs = vec![("codings".to_string(), V::strs(["gzip"]))];
        if !self.any_type {
            let mut types = vec!["text/html".to_string()];
            types.extend(self.types.iter().filter(|t| *t != "text/html").cloned());
            pairs.push(("types".into(), V::strs(types)));
        }
        if let Some(m) = &self.min {
            pairs.push(("min_size".into(), m.clone()));
        }
        if let Some(l) = self.level {
            pairs.push(("level".into(), V::table([("gzip", V::Int(l))])));
        }
        if self.gunzip {
            pairs.push(("decompress".into(), V::Bool(true)));
        }
        Some(V::Table(pairs))
    }
}

/// A server block read.
pub(crate) struct Srv<'a> {
    pub d: &'a Directive,
    pub names: Vec<String>,
    names_comment: Option<String>,
    listens: Vec<Listen>,
    ssl_on: bool,
    tls: TlsConf,
    pend: Pending,
    gzip: Gzip,
    pub loc_dirs: Vec<&'a Directive>,
    pub rewrite: Vec<&'a Directive>,
    pub locations: Vec<&'a Directive>,
    conn_limits: Vec<(&'a Directive, String, i64)>,
    error_pages: Vec<&'a Directive>,
}

/// `client_max_body_size`, `large_client_header_buffers`,
/// `http2_max_concurrent_streams`.
pub(crate) fn limits(log: &mut Log, p: &mut Pending, d: &Directive) {
    match d.name.as_str() {
        "client_max_body_size" => match units::size(d.arg(0)) {
            Some(V::Int(0)) => log.warn_in(
                &mut p.notes,
                d,
                Kind::NoEquivalent,
                "0 is unlimited in nginx: Tollgate's default (no limit)",
            ),
            Some(v) => p.set(&["limits", "max_request_body"], v, log.com(d), d),
            None => log.warn_in(&mut p.notes, d, Kind::NoEquivalent, "not a size"),
        },
        "large_client_header_buffers" => {
            let n = d.arg(0).parse::<u64>().ok();
            let size = super::size_bytes(d.arg(1));
            let (Some(n), Some(size)) = (n, size) else {
                log.warn_in(&mut p.notes, d, Kind::NoEquivalent, "not a number and a size");
                return;
            };
            let c = log.com(d);
            p.set(&["limits", "max_header_size"], units::size_value(n.saturating_mul(size).max(8192)), c, d);
            p.set(&["limits", "max_uri_size"], units::size_value(size.max(64)), String::new(), d);
            log.warn_in(
                &mut p.notes,
                d,
                Kind::Approximate,
                "limits.max_header_size bounds the whole request head (number x size), limits.max_uri_size the target \
                 (one buffer); nginx bounds each header line by one buffer",
            );
        }
        "http2_max_concurrent_streams" => match d.arg(0).parse::<i64>() {
            Ok(n) if (1..=100_000).contains(&n) => p.set(&["h2", "max_concurrent_streams"], V::Int(n), log.com(d), d),
            _ => log.warn_in(&mut p.notes, d, Kind::NoEquivalent, "1 to 100000 streams"),
        },
        _ => {}
    }
}

impl Cx {
    fn read_server<'a>(&mut self, s: &'a Directive, inherit: &[&'a Directive]) -> Srv<'a> {
        let own: Vec<&Directive> = s.children().iter().filter(|d| d.block.is_none()).collect();
        let dirs = location::merge(inherit, &own);
        let mut srv = Srv {
            d: s,
            names: Vec::new(),
            names_comment: None,
            listens: Vec::new(),
            ssl_on: false,
            tls: TlsConf::default(),
            pend: Pending::default(),
            gzip: Gzip::default(),
            loc_dirs: Vec::new(),
            rewrite: Vec::new(),
            locations: Vec::new(),
            conn_limits: Vec::new(),
            error_pages: Vec::new(),
        };
        let mut timeouts = ClientTimeouts::default();
        let mut ssl_dirs = Vec::new();
        for d in dirs {
            let name = d.name.as_str();
            match name {
                "listen" => {
                    if let Some(l) = parse_listen(&mut self.log, &mut srv.pend.notes, d, false) {
                        srv.listens.push(l);
                    }
                }
                "server_name" => {
                    srv.names_comment = Some(self.log.com(d));
                    srv.names.extend(d.args.iter().cloned());
                }
                "ssl" => {
                    srv.ssl_on = d.arg(0) == "on";
                    if srv.ssl_on {
                        self.log.warn_in(
                            &mut srv.pend.notes,
                            d,
                            Kind::Approximate,
                            "`ssl on` (deprecated): TLS on every address of this server block",
                        );
                    } else {
                        self.log.done(d);
                    }
                }
                "http2" => {
                    self.log.warn_in(
                        &mut srv.pend.notes,
                        d,
                        Kind::NoEquivalent,
                        "not needed: TLS binds offer h2 by ALPN by default (tls.alpn)",
                    );
                }
                n if n.starts_with("ssl_") => ssl_dirs.push(d),
                n if n.starts_with("gzip") || n == "gunzip" => {
                    srv.gzip.take(&mut self.log, &mut srv.pend.notes, d);
                }
                "keepalive_timeout" | "client_header_timeout" | "client_body_timeout" | "send_timeout" => {
                    timeouts.take(&mut self.log, &mut srv.pend, d);
                }
                "client_max_body_size" | "large_client_header_buffers" | "http2_max_concurrent_streams" => {
                    limits(&mut self.log, &mut srv.pend, d);
                }
                "error_page" => srv.error_pages.push(d),
                "limit_conn" => {
                    let zone = d.arg(0);
                    match (self.conn_zones.get(zone), d.arg(1).parse::<i64>()) {
                        (Some(t), Ok(n)) => srv.conn_limits.push((d, t.clone(), n)),
                        _ => self.log.warn_in(
                            &mut srv.pend.notes,
                            d,
                            Kind::NoEquivalent,
                            "no usable limit_conn_zone of that name",
                        ),
                    }
                }
                "access_log" => super::access_log(&mut self.log, &mut self.out.global, d),
                "resolver" | "resolver_timeout" => self.resolver(d),
                "return" | "rewrite" => srv.rewrite.push(d),
                _ => {
                    if location::inheritable(name) {
                        srv.loc_dirs.push(d);
                    } else if let Some(c) = other(&mut self.log, d) {
                        srv.pend.notes.push(c);
                    }
                }
            }
        }
        for d in s.children().iter().filter(|d| d.block.is_some()) {
            match d.name.as_str() {
                "location" => srv.locations.push(d),
                "if" => srv.rewrite.push(d),
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        srv.pend.notes.push(c);
                    }
                }
            }
        }
        srv.tls = TlsConf::read(&mut self.log, &mut srv.pend.notes, &ssl_dirs);
        if srv.listens.is_empty() {
            srv.listens.push(Listen {
                addr: ":80".into(),
                ssl: false,
                default: false,
                proxy_protocol: false,
                http2: false,
                comment: "no listen: nginx listens on *:80".into(),
            });
        }
        if srv.ssl_on {
            for l in &mut srv.listens {
                l.ssl = true;
            }
        }
        srv
    }

    pub(crate) fn servers(&mut self, blocks: &[&Directive], inherit: &[&Directive]) {
        let srvs: Vec<Srv> = blocks.iter().map(|s| self.read_server(s, inherit)).collect();
        // Server blocks that share an address (or a port, wildcard against
        // specific) are one frontend.
        let n = srvs.len();
        let mut group: Vec<usize> = (0..n).collect();
        fn root(g: &mut [usize], mut i: usize) -> usize {
            while let Some(&p) = g.get(i) {
                if p == i {
                    break;
                }
                i = p;
            }
            i
        }
        for i in 0..n {
            for j in 0..i {
                let overlap =
                    srvs[i].listens.iter().any(|a| srvs[j].listens.iter().any(|b| overlaps(&a.addr, &b.addr)));
                if overlap {
                    let (ri, rj) = (root(&mut group, i), root(&mut group, j));
                    if let Some(g) = group.get_mut(ri) {
                        *g = rj.min(ri);
                    }
                    if let Some(g) = group.get_mut(rj) {
                        *g = rj.min(ri);
                    }
                }
            }
        }
        let mut order: Vec<usize> = Vec::new();
        let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in 0..n {
            let r = root(&mut group, i);
            if !members.contains_key(&r) {
                order.push(r);
            }
            members.entry(r).or_default().push(i);
        }
        let mut srvs: Vec<Option<Srv>> = srvs.into_iter().map(Some).collect();
        for r in order {
            let idx = members.remove(&r).unwrap_or_default();
            let group: Vec<Srv> = idx.iter().filter_map(|&i| srvs.get_mut(i).and_then(Option::take)).collect();
            self.frontend(group);
        }
    }

    fn frontend(&mut self, srvs: Vec<Srv>) {
        if srvs.is_empty() {
            return;
        }
        // Binds, in order of appearance.
        let mut addrs: Vec<String> = Vec::new();
        for s in &srvs {
            for l in &s.listens {
                if !addrs.contains(&l.addr) {
                    addrs.push(l.addr.clone());
                }
            }
        }
        let default_idx = srvs.iter().position(|s| s.listens.iter().any(|l| l.default)).unwrap_or(0);
        let want = srvs
            .get(default_idx)
            .into_iter()
            .chain(srvs.iter())
            .flat_map(|s| s.names.iter())
            .find(|n| !n.is_empty() && *n != "_" && !n.starts_with('~') && !n.ends_with(".*"))
            .map(|n| n.trim_start_matches("*.").trim_start_matches('.').to_string())
            .unwrap_or_else(|| {
                let port = addrs.first().and_then(|a| a.rsplit(':').next()).unwrap_or("80");
                format!("server_{port}")
            });
        let port = addrs.first().and_then(|a| a.rsplit(':').next()).unwrap_or("80");
        let want = if self.frontend_names.contains(&units::name(&want)) { format!("{want}-{port}") } else { want };
        let name = self.unique_frontend(&want);
        let mut f = Frontend { name: name.clone(), ..Default::default() };
        f.table.set("name", V::s(&name), "");
        let mut notes = Vec::new();
        let mut bind_comments = Vec::new();
        let mut binds = Vec::new();
        let mut any_tls = false;
        let mut any_plain = false;
        for a in &addrs {
            let on: Vec<&Srv> = srvs.iter().filter(|s| s.listens.iter().any(|l| l.addr == *a)).collect();
            let ls: Vec<&Listen> = on.iter().flat_map(|s| s.listens.iter().filter(|l| l.addr == *a)).collect();
            for l in &ls {
                if !bind_comments.contains(&l.comment) {
                    bind_comments.push(l.comment.clone());
                }
            }
            let ssl = ls.iter().any(|l| l.ssl);
            let mut pairs = vec![("addr".to_string(), V::s(a))];
            if ssl {
                let confs: Vec<&TlsConf> =
                    on.iter().filter(|s| s.listens.iter().any(|l| l.addr == *a && l.ssl)).map(|s| &s.tls).collect();
                match TlsConf::build(&confs, &mut self.log, &mut notes, &mut bind_comments) {
                    Some(t) => {
                        pairs.push(("tls".into(), t));
                        any_tls = true;
                    }
                    None => {
                        if let Some(s) = on.first() {
                            self.log.warn_in(
                                &mut notes,
                                s.d,
                                Kind::NoEquivalent,
                                format!("{a} is a TLS address without ssl_certificate: served as plain HTTP"),
                            );
                        }
                        any_plain = true;
                    }
                }
            } else {
                any_plain = true;
                if ls.iter().any(|l| l.http2) {
                    pairs.push(("h2c".into(), V::Bool(true)));
                }
            }
            let h2 = "http2: TLS binds offer h2 by ALPN by default".to_string();
            if ssl && ls.iter().any(|l| l.http2) && !bind_comments.contains(&h2) {
                bind_comments.push(h2);
            }
            if ls.iter().any(|l| l.proxy_protocol) {
                pairs.push(("accept_proxy".into(), V::Bool(true)));
            }
            binds.push(if pairs.len() == 1 { V::s(a) } else { V::Table(pairs) });
        }
        for c in &bind_comments {
            f.table.set("bind", V::Arr(binds.clone()), c.clone());
        }
        // Frontend settings: the default server block's first.
        let mut ordered: Vec<&Srv> = Vec::new();
        if let Some(s) = srvs.get(default_idx) {
            ordered.push(s);
        }
        ordered.extend(srvs.iter().enumerate().filter(|(i, _)| *i != default_idx).map(|(_, s)| s));
        for s in &ordered {
            s.pend.apply(&mut self.log, &mut f.table);
        }
        for s in &ordered {
            if let Some(v) = s.gzip.value() {
                if !f.table.has("compression") {
                    for c in &s.gzip.comments {
                        f.table.set("compression", v.clone(), c.clone());
                    }
                }
                break;
            }
        }
        let mut out = RulesOut::default();
        let multi = srvs.len() > 1;
        let mut last: Vec<Rule> = Vec::new();
        // nginx picks a server block by name: exact, then the longest `*.`
        // wildcard, then the longest `.*` one, then regexes in file order; the
        // default block last. The blocks' rules go in that order (by the best
        // class of their names), and a block whose names a later block's beat
        // (`*.example.com` here, `www.example.com` after it) leaves those hosts out.
        let snames: Vec<Vec<SName>> =
            srvs.iter().map(|s| s.names.iter().flat_map(|n| SName::parse(n)).collect()).collect();
        let mut emit: Vec<usize> = (0..srvs.len()).filter(|i| *i != default_idx).collect();
        emit.sort_by_key(|i| snames.get(*i).map(|n| best_key(n)).unwrap_or((4, std::cmp::Reverse(0))));
        if default_idx < srvs.len() {
            emit.push(default_idx);
        }
        // Error pages and connection limits, in file order.
        for s in &srvs {
            self.error_pages(s, &mut f.table);
            for (d, table, n) in &s.conn_limits {
                let mut r = Table::default();
                r.comments.push(comment_of(d));
                r.set(
                    "when",
                    cond(
                        "counter",
                        V::table([("table", V::s(table)), ("name", V::s("conn_cur")), ("above", V::Int(*n))]),
                    ),
                    "",
                );
                r.set("reject", V::Bool(true), "");
                if multi {
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::Approximate,
                        "connections are counted for the whole frontend (a connection has no Host yet)",
                    );
                } else {
                    self.log.done(d);
                }
                out.conn_rules.push(r);
                out.track(table);
            }
        }
        for (pos, &i) in emit.iter().enumerate() {
            let Some(s) = srvs.get(i) else { continue };
            let is_default = i == default_idx;
            let mut pre = Vec::new();
            if multi {
                if any_tls && any_plain {
                    let tls: Vec<bool> = s.listens.iter().map(|l| l.ssl).collect();
                    if tls.iter().all(|t| *t) {
                        pre.push(cond("tls", V::Bool(true)));
                    } else if tls.iter().all(|t| !*t) {
                        pre.push(cond("tls", V::Bool(false)));
                    }
                }
                if !is_default {
                    let mut others = Vec::new();
                    for (opos, &j) in emit.iter().enumerate() {
                        let (Some(o), Some(names)) = (srvs.get(j), snames.get(j)) else { continue };
                        let shares = o.listens.iter().any(|a| s.listens.iter().any(|b| overlaps(&a.addr, &b.addr)));
                        if j == i || !shares {
                            continue;
                        }
                        others.extend(names.iter().map(|n| (n.clone(), j < i, opos > pos)));
                    }
                    let mine = snames.get(i).map(Vec::as_slice).unwrap_or_default();
                    match host_cond_excluding(mine, &others) {
                        Some(h) => pre.push(h),
                        None => {
                            self.log.done_all(s.d);
                            let msg = if mine.is_empty() {
                                "this server block has no name and is not the default one of its addresses: nginx gives \
                                 it no requests (but those without Host); not translated"
                            } else {
                                "the names of this server block are those of an earlier one on its addresses: nginx \
                                 gives it no requests (conflicting server name, ignored); not translated"
                            };
                            self.log.warn_in(&mut notes, s.d, Kind::NoEquivalent, msg);
                            continue;
                        }
                    }
                    if s.names.iter().any(|n| n.starts_with('~') || n.ends_with(".*"))
                        && let Some(c) = &s.names_comment
                    {
                        notes.push(format!(
                            "{c}\n  APPROXIMATED: a regular expression name is matched against the Host header as sent"
                        ));
                    }
                    let missing: Vec<&String> =
                        addrs.iter().filter(|a| !s.listens.iter().any(|l| l.addr == **a)).collect();
                    let tls_split =
                        pre.iter().any(|c| matches!(c, V::Table(p) if p.first().is_some_and(|(k, _)| k == "tls")));
                    if !missing.is_empty()
                        && !tls_split
                        && let Some(l) = s.listens.first()
                    {
                        notes.push(format!(
                            "{}\n  APPROXIMATED: the rules of server {} also answer on {} (one frontend for addresses \
                                 its server blocks share)",
                            l.comment,
                            s.names.first().map(String::as_str).unwrap_or("_"),
                            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
            }
            let label = s
                .names
                .iter()
                .find(|n| !n.is_empty() && *n != "_" && !n.starts_with('~'))
                .map(|n| n.trim_start_matches("*.").trim_start_matches('.').to_string())
                .unwrap_or_else(|| name.clone());
            let ctx = SrvCtx {
                label,
                loc_dirs: &s.loc_dirs,
                locations: &s.locations,
                rewrite: &s.rewrite,
                pre: pre.clone(),
                names: &s.names,
                catch_all: multi && !is_default,
            };
            let mut sub = RulesOut::default();
            self.server_rules(&ctx, &mut sub);
            if let Some(c) = &s.names_comment
                && let Some(r) = sub.rules.first_mut()
            {
                r.t.comments.insert(0, c.clone());
            }
            for t in sub.tracked {
                out.track(&t);
            }
            out.conn_rules.extend(sub.conn_rules);
            if is_default {
                last = sub.rules;
            } else {
                out.rules.extend(sub.rules);
            }
        }
        out.rules.extend(last);
        // A last rule that only picks a backend is the default backend.
        if let Some(r) = out.rules.last()
            && let (false, Some(b)) = (r.when, r.backend_only.clone())
        {
            let mut r = out.rules.pop().unwrap_or_default();
            for c in r.t.comments.drain(..) {
                f.table.set("default_backend", V::s(&b), c);
            }
            f.table.set("default_backend", V::s(&b), "");
        }
        if !out.tracked.is_empty() {
            let tracked: Vec<String> = out.tracked.iter().take(3).cloned().collect();
            f.table.set("track", V::strs(tracked), "the tables of the rate and connection limits");
            for t in out.tracked.iter().skip(3) {
                notes.push(format!("NOT TRANSLATED: a frontend tracks 3 tables at most: {t} is not tracked"));
            }
        }
        for n in notes {
            f.table.note(n);
        }
        f.connection_rules = out.conn_rules;
        f.rules = out.rules.into_iter().map(|r| r.t).collect();
        self.out.frontends.push(f);
    }

    /// `error_page CODES URI` of a server: the file the URI names, through the
    /// location that would serve it.
    fn error_pages(&mut self, s: &Srv, t: &mut Table) {
        for d in &s.error_pages {
            let mut p = Pending::default();
            let root = |uri: &str| super::files::file_for(uri, &s.locations, &s.loc_dirs);
            error_page(&mut self.log, &mut p, d, &root);
            p.apply(&mut self.log, t);
        }
    }
}

/// `error_page 500 502 /50x.html`: `error_pages` entries for the file.
pub(crate) fn error_page(log: &mut Log, p: &mut Pending, d: &Directive, file_for: &dyn Fn(&str) -> Option<String>) {
    let Some(uri) = d.args.last() else { return };
    let codes: Vec<&String> = d.args.iter().take(d.args.len().saturating_sub(1)).collect();
    if codes.iter().any(|c| c.starts_with('=')) || uri.starts_with('@') || uri.contains("://") || uri.contains('$') {
        log.warn_in(
            &mut p.notes,
            d,
            Kind::NoEquivalent,
            "Tollgate's error pages are files sent with the status (no other status, named location, URL or redirect)",
        );
        return;
    }
    let Some(file) = file_for(uri) else {
        log.warn_in(
            &mut p.notes,
            d,
            Kind::NoEquivalent,
            format!("no root to find the file {uri} in: error_pages takes a file path"),
        );
        return;
    };
    let c = log.com(d);
    let mut first = true;
    for code in codes {
        match code.parse::<u16>() {
            Ok(n) if (400..=599).contains(&n) => {
                p.set(&["error_pages", code], V::s(&file), if first { c.clone() } else { String::new() }, d);
                first = false;
            }
            _ => log.warn_in(&mut p.notes, d, Kind::NoEquivalent, format!("{code}: error pages are for 400 to 599")),
        }
    }
    log.warn_in(
        &mut p.notes,
        d,
        Kind::Approximate,
        "the page replaces the body of the errors Tollgate makes itself (a server's error responses pass as they are); \
         the file is read when the config is loaded",
    );
}

/// Two listening addresses that cannot be in different frontends.
fn overlaps(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let port = |s: &str| s.rsplit(':').next().map(str::to_string);
    let v6 = |s: &str| s.starts_with('[');
    let wild = |s: &str| s.starts_with(':') || s.starts_with("[::]:") || s.starts_with("0.0.0.0:");
    port(a) == port(b) && v6(a) == v6(b) && (wild(a) || wild(b))
}

/// The `host` condition of a server's names; None when it has none that a
/// request can name.
pub(crate) fn host_cond(names: &[String]) -> Option<V> {
    let mut hosts = Vec::new();
    let mut regexes = Vec::new();
    for n in names {
        if let Some(re) = n.strip_prefix('~') {
            let re = if re.starts_with("(?i)") { re.to_string() } else { format!("(?i){re}") };
            if super::rewrite::regex_ok(&re) {
                regexes.push(re);
            }
            continue;
        }
        let n = n.to_ascii_lowercase();
        if n.is_empty() || n == "_" {
            continue;
        }
        if let Some(rest) = n.strip_prefix('.') {
            hosts.push(rest.to_string());
            hosts.push(format!("*.{rest}"));
        } else if let Some(prefix) = n.strip_suffix(".*") {
            // nginx's `mail.*` takes any host whose first labels are these:
            // mail.example.com as well as mail.example.co.uk.
            regexes.push(format!("(?i)^{}\\.[^:]+(:[0-9]+)?$", regex::escape(prefix)));
        } else {
            hosts.push(n);
        }
    }
    let mut conds = Vec::new();
    if !hosts.is_empty() {
        conds.push(cond("host", one_or_many(hosts)));
    }
    for re in regexes {
        conds.push(cond("header", V::table([("name", V::s("Host")), ("regex", V::s(re))])));
    }
    match conds.len() {
        0 => None,
        1 => conds.pop(),
        _ => Some(cond("any", V::Arr(conds))),
    }
}

/// A server name in nginx's classes of precedence: exact names first, then
/// the longest wildcard starting with `*`, then the longest ending with `*`,
/// then regular expressions in file order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SName {
    Exact(String),
    /// `*.d` (and the wildcard half of `.d`): the domain `d`.
    Head(String),
    /// `p.*`: the leading labels `p`.
    Tail(String),
    /// `~re`: the expression.
    Regex(String),
}

impl SName {
    /// The names a `server_name` argument stands for (`.d` is both `d` and
    /// `*.d`, as in nginx); none for `_`, `""` and the like.
    pub(crate) fn parse(n: &str) -> Vec<SName> {
        if let Some(re) = n.strip_prefix('~') {
            return if re.is_empty() { Vec::new() } else { vec![SName::Regex(re.to_string())] };
        }
        let n = n.to_ascii_lowercase();
        if n.is_empty() || n == "_" {
            return Vec::new();
        }
        if let Some(d) = n.strip_prefix("*.").filter(|d| !d.is_empty()) {
            vec![SName::Head(d.to_string())]
        } else if let Some(d) = n.strip_prefix('.').filter(|d| !d.is_empty()) {
            vec![SName::Exact(d.to_string()), SName::Head(d.to_string())]
        } else if let Some(p) = n.strip_suffix(".*").filter(|p| !p.is_empty()) {
            vec![SName::Tail(p.to_string())]
        } else {
            vec![SName::Exact(n)]
        }
    }

    /// The name as `server_name` writes it (what `host_cond` takes).
    pub(crate) fn text(&self) -> String {
        match self {
            SName::Exact(h) => h.clone(),
            SName::Head(d) => format!("*.{d}"),
            SName::Tail(p) => format!("{p}.*"),
            SName::Regex(r) => format!("~{r}"),
        }
    }

    /// Sort key: the class, then the longer wildcard first.
    fn key(&self) -> (u8, std::cmp::Reverse<usize>) {
        match self {
            SName::Exact(_) => (0, std::cmp::Reverse(0)),
            SName::Head(d) => (1, std::cmp::Reverse(d.len())),
            SName::Tail(p) => (2, std::cmp::Reverse(p.len())),
            SName::Regex(_) => (3, std::cmp::Reverse(0)),
        }
    }
}

/// The best class of a server block's names (for the order of the blocks).
pub(crate) fn best_key(names: &[SName]) -> (u8, std::cmp::Reverse<usize>) {
    names.iter().map(SName::key).min().unwrap_or((4, std::cmp::Reverse(0)))
}

/// Whether nginx gives a request for some host to `m` (a name of the block
/// written `m_first` relative to the other) rather than to `n`, for a host
/// both match. Conservative: true when they may overlap and `m` wins.
/// `n_re` is `n` compiled when it is a regex (None when it does not compile:
/// it matches nothing, and the block's own condition leaves it out too).
pub(crate) fn beats(m: &SName, n: &SName, n_re: Option<&regex::Regex>, m_first: bool) -> bool {
    match (m, n) {
        (SName::Exact(a), SName::Exact(b)) => a == b && m_first,
        (SName::Exact(a), SName::Head(d)) => a.ends_with(&format!(".{d}")),
        (SName::Exact(a), SName::Tail(p)) => a.starts_with(&format!("{p}.")),
        (SName::Exact(a), SName::Regex(_)) => n_re.is_some_and(|re| re.is_match(a)),
        (SName::Head(e), SName::Head(d)) => (e == d && m_first) || e.ends_with(&format!(".{d}")),
        (SName::Head(_), SName::Tail(_) | SName::Regex(_)) => true,
        (SName::Tail(q), SName::Tail(p)) => (q == p && m_first) || q.starts_with(&format!("{p}.")),
        (SName::Tail(_), SName::Regex(_)) => true,
        (SName::Regex(a), SName::Regex(b)) => m_first && a != b,
        _ => false,
    }
}

/// The `host` condition of a server block's names, less the hosts nginx
/// gives to other blocks: `others` are the names of the blocks sharing an
/// address with it, each with whether that block comes first in the file
/// and whether its rules come after these (only those need excluding: the
/// ones before have taken their hosts already). None when no name is left.
pub(crate) fn host_cond_excluding(names: &[SName], others: &[(SName, bool, bool)]) -> Option<V> {
    let mut groups: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for n in names {
        // A name an earlier block has too is that block's (nginx: "conflicting
        // server name ... ignored").
        if others.iter().any(|(m, first, _)| *first && m == n) {
            continue;
        }
        let n_re = match n {
            SName::Regex(r) => {
                regex::Regex::new(&if r.starts_with("(?i)") { r.clone() } else { format!("(?i){r}") }).ok()
            }
            _ => None,
        };
        let mut excl: Vec<String> = Vec::new();
        for (m, first, after) in others {
            if *after && beats(m, n, n_re.as_ref(), *first) {
                let t = m.text();
                if !excl.contains(&t) {
                    excl.push(t);
                }
            }
        }
        match groups.iter_mut().find(|(_, e)| *e == excl) {
            Some((ns, _)) => ns.push(n.text()),
            None => groups.push((vec![n.text()], excl)),
        }
    }
    let mut conds = Vec::new();
    for (ns, excl) in groups {
        let Some(c) = host_cond(&ns) else { continue };
        match host_cond(&excl) {
            Some(e) => conds.extend(super::and(vec![c, cond("not", e)])),
            None => conds.push(c),
        }
    }
    match conds.len() {
        0 => None,
        1 => conds.pop(),
        _ => Some(cond("any", V::Arr(conds))),
    }
}
