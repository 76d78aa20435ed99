//! frontend, backend and listen sections: a listen is a frontend and a backend
//! of one name. Backends are translated first: a frontend takes the request
//! rules (`http-request` lines) of the backends it routes to, since Tollgate's
//! rules live on frontends.

use super::Cx;
use super::cond::{self, Acls, Cond};
use super::parse::{Line, Section};
use super::values::{header_value, is_forward_for, path_rewrite, redirect};
use crate::out::{Backend, Table, V};
use crate::report::Kind;
use crate::units;

pub struct Proxy<'a> {
    pub sec: &'a Section,
    /// The lines of the defaults section in force that [defaults] does not hold.
    pub inherited: Vec<&'a Line>,
}

impl<'a> Proxy<'a> {
    pub fn new(sec: &'a Section, defaults: Option<&'a Section>, later: bool) -> Proxy<'a> {
        let inherited =
            defaults.map(|d| d.lines.iter().filter(|l| later || !in_defaults_table(l)).collect()).unwrap_or_default();
        Proxy { sec, inherited }
    }

    pub fn kind(&self) -> &str {
        self.sec.kind()
    }

    pub fn name(&self) -> String {
        units::name(self.sec.name())
    }

    /// Whether the section (or its defaults) has `option forwardfor` (and no `no option forwardfor` after it).
    pub fn has_forwardfor(&self) -> bool {
        let mut on = false;
        for (l, _) in self.lines() {
            if l.word(0) == "option" && l.word(1) == "forwardfor" {
                on = true;
            } else if l.word(0) == "no" && l.word(1) == "option" && l.word(2) == "forwardfor" {
                on = false;
            }
        }
        on
    }

    /// Inherited lines, then the section's own; each with whether it is inherited.
    pub fn lines(&self) -> impl Iterator<Item = (&'a Line, bool)> + '_ {
        self.inherited.iter().map(|l| (*l, true)).chain(self.sec.lines.iter().map(|l| (l, false)))
    }
}

/// Lines of the first defaults section written into [defaults] itself.
fn in_defaults_table(l: &Line) -> bool {
    match (l.word(0), l.word(1)) {
        ("timeout", w) => timeout_key(w).is_some(),
        ("retries", _) => true,
        ("option", "redispatch") => true,
        ("no", "option") => l.word(2) == "redispatch",
        _ => false,
    }
}

/// A HAProxy timeout's Tollgate key.
pub fn timeout_key(which: &str) -> Option<&'static str> {
    Some(match which {
        "connect" => "connect",
        "client" => "client",
        "server" => "server",
        "http-request" => "http_request",
        "http-keep-alive" => "keep_alive",
        "queue" => "queue",
        "tunnel" => "tunnel",
        _ => return None,
    })
}

/// A rule of a backend's `http-request` / `http-response` lines, to be put on
/// the frontends that route there.
#[derive(Clone)]
pub(super) struct BackendRule {
    pub cond: Cond,
    pub table: Table,
    /// The line it comes from.
    pub line: Line,
}

#[derive(Default)]
pub(super) struct BackendInfo {
    pub rules: Vec<BackendRule>,
    /// `option forwardfor` here (or in its defaults).
    pub forwardfor: bool,
}

/// State of one section being translated.
pub(super) struct Sec<'c> {
    pub acls: Acls,
    pub table: Table,
    pub base: std::path::PathBuf,
    pub is_frontend: bool,
    pub cx: &'c mut Cx,
    pub connection_rules: Vec<Table>,
    /// The bind lines, written above the `bind` key.
    pub bind_comments: Vec<String>,
    /// A backend's stick-table settings, for its `stick on`.
    stick: Option<Vec<(String, V)>>,
    /// `option forwardfor` in the section (or its defaults).
    pub forwardfor: bool,
    /// Conditions of `tcp-request connection accept` lines so far.
    pub connection_accepts: Vec<Cond>,
}

impl<'c> Sec<'c> {
    pub fn new(cx: &'c mut Cx, is_frontend: bool) -> Sec<'c> {
        Sec {
            acls: Acls { root: cx.root.clone(), ..Acls::default() },
            table: Table::default(),
            base: cx.base.clone(),
            is_frontend,
            cx,
            connection_rules: Vec::new(),
            bind_comments: Vec::new(),
            stick: None,
            forwardfor: false,
            connection_accepts: Vec::new(),
        }
    }

    /// Reports a line; one inherited from defaults is reported once, in [defaults].
    pub fn warn(&mut self, l: &Line, inherited: bool, kind: Kind, msg: impl Into<String>) {
        let msg = msg.into();
        if !inherited {
            return self.cx.warn(&mut self.table, l, kind, msg);
        }
        if self.cx.warnings.iter().any(|w| w.pos == l.pos && w.message == msg) {
            return;
        }
        let mut d = std::mem::take(&mut self.cx.out.defaults);
        self.cx.warn(&mut d, l, kind, msg);
        self.cx.out.defaults = d;
    }

    /// A comment for a line with no key of its own; an inherited line's goes
    /// once into [defaults].
    pub fn note(&mut self, _l: &Line, inherited: bool, text: String) {
        if !inherited {
            return self.table.note(text);
        }
        if !self.cx.inherited_notes.contains(&text) {
            self.cx.inherited_notes.push(text.clone());
            self.cx.out.defaults.note(text);
        }
    }
}

pub(super) fn backend(cx: &mut Cx, p: &Proxy) -> BackendInfo {
    let name = p.name();
    let mut s = Sec::new(cx, false);
    s.forwardfor = p.has_forwardfor();
    s.table.set("name", V::s(&name), p.sec.head.text());
    let mut info = BackendInfo { forwardfor: s.forwardfor, ..Default::default() };
    let mut servers: Vec<Table> = Vec::new();
    let mut server_checks: Vec<bool> = Vec::new();
    let mut check = Table::default();
    let mut httpchk = false;
    let mut default_server: Vec<String> = Vec::new();
    let mut allows: Vec<Cond> = Vec::new();
    for (l, inh) in p.lines() {
        let text = l.text();
        let w1 = l.word(1);
        // A listen's frontend side (frontend.rs) takes these.
        if p.kind() == "listen"
            && matches!(l.word(0), "http-request" | "http-response" | "stick-table" | "tcp-request" | "errorfile")
        {
            continue;
        }
        match l.word(0) {
            "mode" => {
                if w1 == "tcp" {
                    s.table.set("mode", V::s("tcp"), text);
                } else if w1 == "http" {
                    s.table.remove("mode");
                }
            }
            "balance" => balance(&mut s, l, inh),
            "timeout" => match (timeout_key(w1), units::duration(l.word(2), true)) {
                (Some(k @ ("connect" | "server" | "queue" | "tunnel")), Some(v)) => {
                    s.table.set(&format!("timeout.{k}"), v, text)
                }
                (Some(_), Some(_)) => {}
                (_, _) if w1 == "check" => match units::duration(l.word(2), true) {
                    Some(v) => check.set("timeout", v, text),
                    None => s.warn(l, inh, Kind::NoEquivalent, "not a duration"),
                },
                (_, _) if matches!(w1, "client-fin" | "server-fin" | "tarpit") => {}
                _ => s.warn(l, inh, Kind::NoEquivalent, "not a timeout Tollgate has"),
            },
            "retries" => match w1.parse::<i64>() {
                Ok(n) => s.table.set("retries", V::Int(n), text),
                Err(_) => s.warn(l, inh, Kind::NoEquivalent, "not a number"),
            },
            "acl" => s.acls.define(&l.words[1..], &s.base.clone()),
            "cookie" => cookie(&mut s, l, inh),
            "server" => {
                let mut words = l.words.clone();
                words.extend(default_server.iter().cloned());
                if let Some((t, checked)) = server(&mut s, l, &words, &mut check, inh) {
                    servers.push(t);
                    server_checks.push(checked);
                }
            }
            "default-server" => default_server = l.words[1..].to_vec(),
            "tcp-check" => {
                s.warn(l, inh, Kind::NoEquivalent, "tcp-check scripts are not sent: Tollgate's TCP check is a connect")
            }
            "server-template" => s.warn(
                l,
                inh,
                Kind::NoEquivalent,
                "servers from DNS: use the backend's `discover = { dns = \"name:port\" }` or `{ dns_srv = ... }`",
            ),
            "option" => backend_option(&mut s, l, inh, &mut check, &mut httpchk),
            "no" if l.word(1) == "option" => {
                if l.word(2) == "redispatch" {
                    s.table.set("redispatch", V::Bool(false), text)
                }
            }
            "http-check" => http_check(&mut s, l, inh, &mut check),
            "http-request" => {
                if let Some(r) = request_rule(&mut s, l, inh, &mut allows) {
                    // `auth` unconditional but for its own userlist: the backend's.
                    if r.table.has("auth") && r.cond == Cond::True && r.table.get("auth").is_some() {
                        if let Some(a) = r.table.get("auth") {
                            s.table.set("auth", a.clone(), text);
                        }
                    } else if r.table.has("cache") && r.cond == Cond::True {
                        if let Some(c) = r.table.get("cache") {
                            s.table.set("cache", c.clone(), text);
                        }
                    } else {
                        info.rules.push(r);
                    }
                }
            }
            "http-response" => {
                if let Some(r) = response_rule(&mut s, l, inh) {
                    info.rules.push(r);
                }
            }
            "stick-table" => stick_table(&mut s, l, inh, p),
            "stick" if w1 == "on" || w1 == "match" || w1 == "store-request" => stick_on(&mut s, l, inh),
            "compression" => compression(&mut s, l, inh),
            "http-reuse" => s.note(l, inh, format!("{text}  (Tollgate reuses idle server connections as `safe` does)")),
            "fullconn"
            | "hash-type"
            | "hash-balance-factor"
            | "load-server-state-from-file"
            | "source"
            | "http-send-name-header"
            | "email-alert"
            | "dispatch"
            | "external-check"
            | "persist"
            | "force-persist"
            | "ignore-persist"
            | "tcp-response"
            | "filter"
            | "use-server" => s.warn(l, inh, Kind::NoEquivalent, "no Tollgate equivalent"),
            // Frontend-side keywords a defaults section gives every proxy.
            _ if inh => {}
            "bind" | "default_backend" | "use_backend" | "redirect" | "monitor-uri" | "capture" | "maxconn"
            | "tcp-request" | "errorfile" | "log" | "log-format" | "unique-id-format" | "unique-id-header"
            | "description" | "id" | "stats" | "errorloc" | "errorloc302" | "errorloc303" | "declare"
            | "bind-process" | "log-tag" | "disabled" | "enabled" | "monitor" | "rate-limit" | "email-alert-from"
                if p.kind() == "listen" => {}
            "errorfile" => errorfile(&mut s, l, inh),
            "log" | "description" | "id" | "bind-process" | "log-tag" => {}
            _ => s.warn(l, inh, Kind::Unknown, "not a backend keyword the importer knows"),
        }
    }
    // Active checks: only for the servers that say `check`.
    let any_checked = server_checks.iter().any(|c| *c);
    // HAProxy's `timeout check` adds to the connect time; Tollgate's bounds the
    // whole check, which must end before the next one starts.
    let interval = match check.get("interval") {
        Some(V::Str(i)) => units::duration_ms(i, true),
        _ => Some(2000),
    };
    if let (Some(V::Str(t)), Some(interval)) = (check.get("timeout"), interval)
        && units::duration_ms(t, true).is_some_and(|t| t > interval)
    {
        let t = t.clone();
        check.set("timeout", units::ms_value(interval), "");
        s.table.note(format!("timeout check {t}: written as the check interval, the longest a check may take here"));
    }
    if any_checked {
        let mut entries: Vec<(String, V)> = Vec::new();
        entries.push(("type".into(), V::s(if httpchk { "http" } else { "tcp" })));
        for k in
            ["interval", "timeout", "fall", "rise", "port", "method", "path", "host", "expect_status", "expect_body"]
        {
            if let Some(v) = check.get(k)
                && (httpchk || !matches!(k, "method" | "path" | "host" | "expect_status" | "expect_body"))
            {
                entries.push((k.into(), v.clone()));
            }
        }
        s.table.set("check", V::Table(entries), "the servers' `check` (and option httpchk / http-check)");
        for (t, checked) in servers.iter_mut().zip(&server_checks) {
            if !checked {
                t.set("check", V::Bool(false), "no `check` on this server");
            }
        }
    } else if httpchk {
        s.table.note("option httpchk without `check` on any server: HAProxy checks none, nor does this");
    }
    let mut b = Backend { name: name.clone(), table: std::mem::take(&mut s.table), servers };
    if b.servers.is_empty() {
        b.table.note("no server: every request gets 503");
    }
    cx.out.backends.push(b);
    info
}

pub(super) fn balance(s: &mut Sec, l: &Line, inh: bool) {
    let text = l.text();
    let alg = l.word(1);
    let v = match alg {
        "roundrobin" | "static-rr" | "leastconn" | "first" | "source" => Some(alg.to_string()),
        "uri" => {
            if l.words.len() > 2 {
                s.warn(
                    l,
                    inh,
                    Kind::Approximate,
                    "the options of `balance uri` are not kept: the whole path is hashed",
                );
            }
            Some("uri".into())
        }
        a if a.starts_with("random") => {
            if a != "random" && a != "random(2)" {
                s.warn(l, inh, Kind::Approximate, "Tollgate draws two servers (power of two choices)");
            }
            Some("random".into())
        }
        a if a.starts_with("hdr(") && a.ends_with(')') => Some(a.to_string()),
        _ => None,
    };
    match v {
        Some(v) => s.table.set("balance", V::Str(v), text),
        None => s.warn(
            l,
            inh,
            Kind::NoEquivalent,
            "not an algorithm Tollgate has (roundrobin, static-rr, leastconn, first, source, uri, hdr(<name>), random)",
        ),
    }
}

pub(super) fn cookie(s: &mut Sec, l: &Line, inh: bool) {
    let mut c: Vec<(String, V)> = vec![("name".into(), V::s(l.word(1)))];
    let mut ignored = Vec::new();
    let mut i = 2;
    while i < l.words.len() {
        let w = l.word(i);
        match w {
            "insert" | "prefix" | "rewrite" => c.push(("mode".into(), V::s(w))),
            "indirect" | "nocache" | "httponly" | "secure" => c.push((w.into(), V::Bool(true))),
            "domain" | "maxidle" | "maxlife" => {
                let v = l.word(i + 1);
                i += 1;
                match w {
                    "domain" => c.push(("domain".into(), V::s(v))),
                    _ => match units::duration(v, true) {
                        Some(d) => c.push((if w == "maxidle" { "max_idle" } else { "max_life" }.into(), d)),
                        None => ignored.push(format!("{w} {v}")),
                    },
                }
            }
            "attr" => {
                ignored.push(format!("attr {}", l.word(i + 1)));
                i += 1;
            }
            other => ignored.push(other.to_string()),
        }
        i += 1;
    }
    let insert = c.iter().any(|(k, v)| k == "mode" && *v == V::s("insert"));
    if !insert && c.iter().any(|(k, _)| k == "nocache") {
        c.retain(|(k, _)| k != "nocache");
        ignored.push("nocache (Tollgate's applies to mode insert only)".into());
    }
    s.table.set("cookie", V::Table(c), l.text());
    if !ignored.is_empty() {
        s.warn(l, inh, Kind::Approximate, format!("not carried over: {}", ignored.join(", ")));
    }
}

/// A `server` line (with `default-server`'s words after it) as a table, and
/// whether it says `check`.
fn server(s: &mut Sec, l: &Line, words: &[String], check: &mut Table, inh: bool) -> Option<(Table, bool)> {
    let name = words.get(1)?;
    let addr = words.get(2).map(String::as_str).unwrap_or("");
    let mut t = Table::default();
    t.set("name", V::s(name), l.text());
    let addr = addr.strip_prefix("ipv4@").or_else(|| addr.strip_prefix("ipv6@")).unwrap_or(addr);
    if addr.starts_with('/') || addr.starts_with("unix@") || addr.starts_with("abns@") {
        s.warn(l, inh, Kind::NoEquivalent, "a server on a Unix socket: Tollgate connects over TCP");
        return None;
    }
    let has_port = match addr.rsplit_once(':') {
        Some((h, p)) => !h.is_empty() && p.parse::<u16>().is_ok() && (!h.contains(':') || h.starts_with('[')),
        None => false,
    };
    let addr = if has_port {
        addr.to_string()
    } else if addr.parse::<std::net::Ipv6Addr>().is_ok() {
        s.warn(l, inh, Kind::Approximate, "no port: HAProxy uses the client's; written with port 80");
        format!("[{addr}]:80")
    } else {
        s.warn(l, inh, Kind::Approximate, "no port: HAProxy uses the client's; written with port 80");
        format!("{addr}:80")
    };
    t.set("addr", V::Str(addr), "");
    let mut checked = false;
    let mut tls: Vec<(String, V)> = Vec::new();
    let mut ssl = false;
    let mut ignored: Vec<String> = Vec::new();
    let mut i = 3;
    let mut seen = std::collections::HashSet::new();
    while i < words.len() {
        let k = words[i].as_str();
        let v = words.get(i + 1).map(String::as_str).unwrap_or("");
        // default-server words come after the server's own: the first wins.
        let first = seen.insert(k.to_string());
        let mut takes_value = true;
        match k {
            "check" => {
                checked = true;
                takes_value = false;
            }
            "no-check" => {
                checked = false;
                takes_value = false;
            }
            "backup" => {
                t.set("backup", V::Bool(true), "");
                takes_value = false;
            }
            "disabled" => {
                t.set("disabled", V::Bool(true), "");
                takes_value = false;
            }
            "enabled" => takes_value = false,
            "send-proxy" | "send-proxy-v2" => {
                t.set("send_proxy", V::s(if k == "send-proxy" { "v1" } else { "v2" }), "");
                takes_value = false;
            }
            "ssl" => {
                ssl = true;
                takes_value = false;
            }
            "weight" if first => match v.parse::<i64>() {
                Ok(w) => t.set("weight", V::Int(w), ""),
                Err(_) => ignored.push(format!("weight {v}")),
            },
            "maxconn" if first => match v.parse::<i64>() {
                Ok(m) => t.set("maxconn", V::Int(m), ""),
                Err(_) => ignored.push(format!("maxconn {v}")),
            },
            "cookie" if first => t.set("cookie", V::s(v), ""),
            "port" if first => match v.parse::<i64>() {
                Ok(p) => t.set("check_port", V::Int(p), ""),
                Err(_) => ignored.push(format!("port {v}")),
            },
            "inter" | "fall" | "rise" if first => {
                let key = if k == "inter" { "interval" } else { k };
                let value = if k == "inter" { units::duration(v, true) } else { v.parse::<i64>().ok().map(V::Int) };
                match value {
                    Some(value) => {
                        if let Some(old) = check.get(key)
                            && *old != value
                        {
                            ignored.push(format!("{k} {v} (the backend's check takes the first server's)"));
                            i += 2;
                            continue;
                        }
                        check.set(key, value, "");
                    }
                    None => ignored.push(format!("{k} {v}")),
                }
            }
            "verify" if first => tls.push(("verify".into(), V::s(if v == "none" { "none" } else { "full" }))),
            "ca-file" if first => {
                let path = s.cx.path(&s.cx.ca_base.clone(), v);
                tls.push(("ca".into(), V::Str(path)))
            }
            "sni" if first => match v.strip_prefix("str(").and_then(|x| x.strip_suffix(')')) {
                Some(name) => tls.push(("sni".into(), V::s(name))),
                None if v == "req.hdr(host)" || v == "hdr(host)" => {
                    ignored.push(format!("sni {v} (Tollgate sends the server's own name)"))
                }
                None => ignored.push(format!("sni {v}")),
            },
            "crt" if first => {
                let path = s.cx.path(&s.cx.crt_base.clone(), v);
                tls.push(("cert".into(), V::Str(path)))
            }
            "alpn" if first => tls.push(("alpn".into(), V::strs(v.split(',')))),
            "proto" if first && v == "h2" => t.set("proto", V::s("h2"), ""),
            "slowstart"
            | "fastinter"
            | "downinter"
            | "observe"
            | "error-limit"
            | "on-error"
            | "on-marked-down"
            | "on-marked-up"
            | "resolvers"
            | "resolve-prefer"
            | "init-addr"
            | "check-sni"
            | "check-alpn"
            | "agent-port"
            | "agent-inter"
            | "agent-send"
            | "id"
            | "maxqueue"
            | "minconn"
            | "source"
            | "pool-max-conn"
            | "pool-purge-delay"
            | "max-reuse"
            | "ciphers"
            | "ciphersuites"
            | "ssl-min-ver"
            | "ssl-max-ver"
            | "crl-file"
            | "track"
            | "redir"
            | "resolve-opts"
            | "namespace"
            | "tcp-ut"
            | "proxy-v2-options"
            | "usesrc"
            | "addr"
            | "agent-addr"
            | "curves"
            | "sigalgs"
            | "ws"
            | "log-proto"
            | "pool-low-conn"
            | "set-proxy-v2-tlv-fmt"
            | "socks4"
            | "npn"
            | "proto"
            | "shard"
            | "guid" => {
                if first {
                    ignored.push(format!("{k} {v}"));
                }
            }
            "weight" | "maxconn" | "cookie" | "port" | "inter" | "fall" | "rise" | "verify" | "ca-file" | "sni"
            | "crt" | "alpn" => {}
            _ => {
                // Flags: no value.
                takes_value = false;
                if first
                    && !matches!(
                        k,
                        "check-ssl"
                            | "no-ssl"
                            | "no-sslv3"
                            | "no-tlsv10"
                            | "no-tlsv11"
                            | "no-tlsv12"
                            | "no-tlsv13"
                            | "force-tlsv12"
                            | "force-tlsv13"
                            | "no-tls-tickets"
                            | "tfo"
                            | "allow-0rtt"
                            | "no-verifyhost"
                            | "non-stick"
                            | "check-send-proxy"
                            | "agent-check"
                            | "no-send-proxy"
                            | "send-proxy-v2-ssl"
                            | "send-proxy-v2-ssl-cn"
                            | "no-backup"
                            | "check-via-socks4"
                            | "no-tfo"
                            | "no-agent-check"
                    )
                {
                    ignored.push(format!("{k} (unknown)"));
                } else if first && !matches!(k, "no-sslv3" | "no-tlsv10" | "no-tlsv11" | "no-tls-tickets" | "no-backup")
                {
                    ignored.push(k.to_string());
                }
            }
        }
        i += if takes_value { 2 } else { 1 };
    }
    if ssl {
        t.set("tls", V::Table(tls), "");
    } else if !tls.is_empty() {
        ignored.push("TLS settings without `ssl`".into());
    }
    if !ignored.is_empty() {
        s.warn(l, inh, Kind::Approximate, format!("not carried over: {}", ignored.join(", ")));
    }
    Some((t, checked))
}

fn backend_option(s: &mut Sec, l: &Line, inh: bool, check: &mut Table, httpchk: &mut bool) {
    let text = l.text();
    match l.word(1) {
        "redispatch" => s.table.set("redispatch", V::Bool(true), text),
        "httpchk" => {
            *httpchk = true;
            // option httpchk [<method>] [<uri>] [<version>] (old style: headers after \r\n).
            let rest = &l.words[2..];
            let (method, uri) = match rest.len() {
                0 => (None, None),
                1 => (None, Some(rest[0].as_str())),
                _ => (Some(rest[0].as_str()), Some(rest[1].as_str())),
            };
            if let Some(m) = method {
                check.set("method", V::s(m), "");
            }
            if let Some(u) = uri {
                check.set("path", V::s(u), "");
            }
            if let Some(v) = rest.get(2) {
                // `HTTP/1.1\r\nHost:\ www` as parsed: the Host header after the version.
                if let Some(idx) = v.find("Host:") {
                    let host = v[idx + 5..].trim();
                    if !host.is_empty() {
                        check.set("host", V::s(host), "");
                    }
                }
            }
            s.note(l, inh, format!("{text}  (check.type = \"http\")"));
        }
        "tcp-check" | "ldap-check" | "mysql-check" | "pgsql-check" | "redis-check" | "smtpchk" | "ssl-hello-chk"
        | "spop-check" | "external-check" => s.warn(
            l,
            inh,
            Kind::Approximate,
            "Tollgate's checks are a TCP connect or an HTTP request: this one is a TCP connect",
        ),
        "forwardfor"
        | "http-server-close"
        | "httpclose"
        | "http-keep-alive"
        | "http-pretend-keepalive"
        | "abortonclose"
        | "allbackups"
        | "persist"
        | "prefer-last-server"
        | "http-no-delay"
        | "tcp-smart-connect"
        | "splice-auto"
        | "splice-request"
        | "splice-response"
        | "socket-stats"
        | "log-health-checks"
        | "tcpka"
        | "srvtcpka"
        | "checkcache"
        | "independent-streams"
        | "http-buffer-request"
        | "http-use-htx"
        | "httplog"
        | "tcplog"
        | "dontlognull"
        | "log-separate-errors"
        | "http-ignore-probes"
        | "clitcpka"
        | "dontlog-normal"
        | "logasap"
        | "contstats"
        | "http-use-proxy-header"
        | "accept-invalid-http-response"
        | "accept-invalid-http-request"
        | "h1-case-adjust-bogus-server"
        | "h1-case-adjust-bogus-client"
        | "disable-h2-upgrade"
        | "nolinger"
        | "transparent"
        | "originalto"
        | "forwarded"
        | "httplog-clf"
        | "http-restrict-req-hdr-names"
        | "idle-close-on-response"
        | "tcp-smart-accept"
        | "log-health-check" => option_note(s, l, inh),
        _ => s.warn(l, inh, Kind::Unknown, "not an option the importer knows"),
    }
}

/// Options with no key of their own: a note saying how Tollgate behaves.
pub(super) fn option_note(s: &mut Sec, l: &Line, inh: bool) {
    let text = l.text();
    let msg = match l.word(1) {
        "forwardfor" => {
            if l.words.len() > 2 {
                s.warn(
                    l,
                    inh,
                    Kind::Approximate,
                    "`except` / `header` / `if-none` are not kept: Tollgate always appends",
                );
                return;
            }
            "forward_for (on by default) adds X-Forwarded-For, -Proto, -Port and -Host"
        }
        "http-server-close" | "httpclose" | "http-keep-alive" | "http-pretend-keepalive" | "prefer-last-server" => {
            "Tollgate keeps client connections alive and pools server connections"
        }
        "allbackups" => {
            s.warn(l, inh, Kind::Approximate, "Tollgate balances over all usable backups (as allbackups) always");
            return;
        }
        "abortonclose"
        | "http-buffer-request"
        | "http-no-delay"
        | "independent-streams"
        | "checkcache"
        | "http-use-htx"
        | "nolinger"
        | "idle-close-on-response"
        | "http-ignore-probes"
        | "http-restrict-req-hdr-names"
        | "disable-h2-upgrade" => "not needed",
        "tcp-smart-connect" | "tcp-smart-accept" | "splice-auto" | "splice-request" | "splice-response" | "tcpka"
        | "srvtcpka" | "clitcpka" | "socket-stats" | "contstats" => {
            "socket tuning Tollgate does itself (global.splice for TCP mode)"
        }
        "httplog"
        | "tcplog"
        | "dontlognull"
        | "log-separate-errors"
        | "log-health-checks"
        | "log-health-check"
        | "dontlog-normal"
        | "logasap"
        | "httplog-clf" => "the access log (global.access_log) has its own format; health changes are always logged",
        "forwarded" => {
            s.table.set("forwarded", V::Bool(true), text);
            return;
        }
        _ => {
            s.warn(l, inh, Kind::NoEquivalent, "no Tollgate equivalent");
            return;
        }
    };
    if !inh || !s.cx.warnings.iter().any(|w| w.pos == l.pos) {
        s.note(l, inh, format!("{text}  ({msg})"));
    }
}

fn http_check(s: &mut Sec, l: &Line, inh: bool, check: &mut Table) {
    let words = &l.words;
    match l.word(1) {
        "expect" => {
            let (neg, i) = if l.word(2) == "!" { (true, 3) } else { (false, 2) };
            let (what, v) = (l.word(i), l.word(i + 1));
            match (neg, what) {
                (false, "status") => {
                    let value = match v.parse::<i64>() {
                        Ok(n) => V::Int(n),
                        Err(_) => V::s(v),
                    };
                    check.set("expect_status", value, "");
                }
                (false, "string") => check.set("expect_body", V::s(v), ""),
                _ => s.warn(l, inh, Kind::NoEquivalent, "Tollgate expects a status (or range) and a body text"),
            }
        }
        "send" => {
            let mut i = 2;
            while i < words.len() {
                let v = l.word(i + 1);
                match l.word(i) {
                    "meth" => check.set("method", V::s(v), ""),
                    "uri" => check.set("path", V::s(v), ""),
                    "hdr" if v.eq_ignore_ascii_case("host") => {
                        check.set("host", V::s(l.word(i + 2)), "");
                        i += 1;
                    }
                    "ver" => {}
                    other => {
                        s.warn(l, inh, Kind::Approximate, format!("`{other}` is not sent by Tollgate's check"));
                        if other == "hdr" {
                            i += 1;
                        }
                    }
                }
                i += 2;
            }
        }
        "send-state" | "disable-on-404" | "connect" | "comment" => {
            s.warn(l, inh, Kind::NoEquivalent, "no Tollgate equivalent")
        }
        _ => s.warn(l, inh, Kind::Unknown, "not an http-check keyword the importer knows"),
    }
}

pub(super) fn compression(s: &mut Sec, l: &Line, inh: bool) {
    let text = l.text();
    match l.word(1) {
        "algo" => {
            let codings: Vec<String> = l.words[2..]
                .iter()
                .filter_map(|a| match a.as_str() {
                    "gzip" => Some("gzip".to_string()),
                    "deflate" | "raw-deflate" | "identity" => None,
                    other => Some(other.to_string()),
                })
                .collect();
            s.table.set("compression.codings", V::strs(codings), text);
            if l.words[2..].iter().any(|a| a == "deflate" || a == "raw-deflate") {
                s.warn(l, inh, Kind::Approximate, "deflate is not offered (gzip, br and zstd are)");
            }
        }
        "type" => s.table.set("compression.types", V::strs(l.words[2..].iter().cloned()), text),
        "offload" => s.table.set("compression.decompress", V::Bool(false), text),
        _ => s.warn(l, inh, Kind::Unknown, "not a compression keyword the importer knows"),
    }
}

pub(super) fn stick_table(s: &mut Sec, l: &Line, inh: bool, p: &Proxy) {
    let mut t = Table::default();
    let name = p.name();
    t.set("name", V::s(&name), l.text());
    let mut key = "src";
    let mut i = 1;
    while i < l.words.len() {
        let v = l.word(i + 1);
        match l.word(i) {
            "type" => {
                key = match v {
                    "ip" | "ipv6" => "src",
                    _ => "?",
                };
                if v == "string" || v == "binary" {
                    i += 2; // `len <n>`
                }
            }
            "size" => {
                let n = match v.char_indices().last() {
                    Some((j, 'k')) => v[..j].parse::<i64>().ok().and_then(|n| n.checked_mul(1024)),
                    Some((j, 'm')) => v[..j].parse::<i64>().ok().and_then(|n| n.checked_mul(1024 * 1024)),
                    _ => v.parse::<i64>().ok(),
                };
                if let Some(n) = n {
                    t.set("size", V::Int(n), "");
                }
            }
            "expire" => {
                if let Some(d) = units::duration(v, true) {
                    t.set("expire", d, "");
                }
            }
            "store" => {
                for item in v.split(',') {
                    if let Some(period) = item.split_once('(').and_then(|(_, p)| p.strip_suffix(')'))
                        && let Some(d) = units::duration(period, true)
                    {
                        t.set("period", d, "");
                    }
                }
            }
            "peers" => t.set("share", V::Bool(true), ""),
            "nopurge" | "srvkey" | "write-to" | "recv-only" => {}
            _ => {}
        }
        i += 2;
    }
    if key == "?" {
        // Keyed by what track-sc puts in it; set when a frontend tracks it.
        t.set("key", V::s("src"), "");
    } else {
        t.set("key", V::s(key), "");
    }
    if s.is_frontend || p.kind() != "backend" || !p.sec.lines.iter().any(|l| l.word(0) == "stick") {
        s.acls.own_table = Some(name);
        s.cx.out.tables.push(t);
    } else {
        // A backend's table for `stick on`: the backend's own stick settings.
        let mut stick = Vec::new();
        for k in ["expire", "size"] {
            if let Some(v) = t.get(k) {
                stick.push((k.to_string(), v.clone()));
            }
        }
        if let Some(V::Bool(true)) = t.get("share") {
            stick.push(("share".into(), V::Bool(true)));
        }
        s.stick = Some(stick);
        let _ = inh;
    }
}

pub(super) fn stick_on(s: &mut Sec, l: &Line, inh: bool) {
    let on = match l.word(2) {
        "src" => "source",
        _ => {
            s.warn(
                l,
                inh,
                Kind::NoEquivalent,
                "Tollgate's stick tables are keyed on the source address (`stick = { on = \"source\" }`)",
            );
            return;
        }
    };
    let mut stick = vec![("on".to_string(), V::s(on))];
    if let Some(extra) = s.stick.take() {
        stick.extend(extra);
    }
    if l.words.iter().any(|w| w == "if" || w == "unless") {
        s.warn(l, inh, Kind::Approximate, "the condition is not kept: every request sticks");
    }
    s.table.set("stick", V::Table(stick), l.text());
}

/// Splits `<action words> [if|unless <cond>]`.
pub(super) fn split_cond(words: &[String]) -> (&[String], &[String]) {
    match words.iter().position(|w| w == "if" || w == "unless") {
        Some(i) => (&words[..i], &words[i..]),
        None => (words, &[]),
    }
}

/// An `http-request` line as a rule (condition and keys), or `None` when it
/// was reported.
pub(super) fn request_rule(s: &mut Sec, l: &Line, inh: bool, allows: &mut Vec<Cond>) -> Option<BackendRule> {
    let (action, cond_words) = split_cond(&l.words[1..]);
    let c = line_cond(s, l, inh, cond_words)?;
    // Rules after an `allow` do not see the requests it let through.
    let c = if allows.is_empty() { c } else { cond::and(vec![c, cond::not(cond::or(allows.clone()))]) };
    let mut t = Table::default();
    let a = action.first().map(String::as_str).unwrap_or("");
    let arg = |i: usize| action.get(i).map(String::as_str).unwrap_or("");
    let text = l.text();
    match a {
        "set-header" | "add-header" => {
            let (name, value) = (arg(1), action[2.min(action.len())..].join(" "));
            let https_when_tls = name.eq_ignore_ascii_case("x-forwarded-proto")
                && value == "https"
                && matches!(&c, Cond::Leaf { key: "tls", value: V::Bool(true), .. });
            if s.forwardfor && (is_forward_for(name, &value) || https_when_tls) {
                s.note(l, inh, format!("{text}  (forward_for sets {name})"));
                return None;
            }
            match header_value(&value) {
                Ok(v) => {
                    let key = if a == "set-header" { "set_request_headers" } else { "add_request_headers" };
                    t.set_path(&[key, name], V::Str(v), text);
                }
                Err(e) => {
                    s.warn(l, inh, Kind::NoEquivalent, e);
                    return None;
                }
            }
        }
        "del-header" => {
            if action.len() > 2 {
                s.warn(l, inh, Kind::NoEquivalent, "a match method on the name: Tollgate deletes by exact name");
                return None;
            }
            t.push("delete_request_headers", V::s(arg(1)), text);
        }
        "redirect" => match redirect(&action[1..]) {
            Ok(r) => t.set("redirect", r, text),
            Err(e) => {
                s.warn(l, inh, Kind::NoEquivalent, e);
                return None;
            }
        },
        "deny" | "tarpit" => {
            let status = action
                .iter()
                .position(|w| w == "deny_status")
                .and_then(|i| action.get(i + 1))
                .and_then(|s| s.parse::<i64>().ok());
            if a == "deny" {
                t.set("deny", V::Int(status.unwrap_or(403)), text);
            } else {
                t.set("tarpit", V::table([("delay", V::s("5s")), ("status", V::Int(status.unwrap_or(500)))]), text);
                s.warn(l, inh, Kind::Approximate, "the delay is `timeout tarpit` in HAProxy: written as 5s");
            }
            if action
                .iter()
                .any(|w| matches!(w.as_str(), "content-type" | "string" | "lf-string" | "errorfile" | "file" | "hdr"))
            {
                s.warn(
                    l,
                    inh,
                    Kind::Approximate,
                    "the response's own body and headers are not kept (error_pages gives a body)",
                );
            }
        }
        "return" => {
            let status = action
                .iter()
                .position(|w| w == "status")
                .and_then(|i| action.get(i + 1))
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(200);
            if !(400..=599).contains(&status) {
                s.warn(
                    l,
                    inh,
                    Kind::NoEquivalent,
                    format!("a {status} answered by the proxy: Tollgate answers only errors itself (deny, 400-599)"),
                );
                return None;
            }
            let body = action.iter().position(|w| w == "string" || w == "lf-string").and_then(|i| action.get(i + 1));
            let mut d = vec![("status".to_string(), V::Int(status))];
            if let Some(b) = body {
                d.push(("body".into(), V::s(b)));
            }
            t.set("deny", V::Table(d), text);
        }
        "silent-drop" | "reject" => {
            t.set("silent_drop", V::Bool(true), text);
        }
        "auth" => {
            // http-request auth [realm R] if !{ http_auth(L) } [and ...]
            let realm = action.iter().position(|w| w == "realm").and_then(|i| action.get(i + 1));
            let (userlist, rest) = match take_auth(&c) {
                Some(x) => x,
                None => {
                    s.warn(
                        l,
                        inh,
                        Kind::NoEquivalent,
                        "Tollgate asks for a user of a userlist: the condition must be `!{ http_auth(<userlist>) }`",
                    );
                    return None;
                }
            };
            let mut a = vec![("userlist".to_string(), V::Str(userlist))];
            if let Some(r) = realm {
                a.push(("realm".into(), V::s(r)));
            }
            t.set("auth", V::Table(a), text);
            return Some(BackendRule { cond: rest, table: t, line: l.clone() });
        }
        "allow" => {
            allows.push(c);
            s.note(l, inh, format!("{text}  (the rules below are written not to match what it allows)"));
            return None;
        }
        "cache-use" => t.set("cache", V::table([("zone", V::s(units::name(arg(1))))]), text),
        "early-hint" => {
            if arg(1).eq_ignore_ascii_case("link") {
                match header_value(arg(2)) {
                    Ok(v) => t.set("early_hints", V::strs([v]), text),
                    Err(e) => {
                        s.warn(l, inh, Kind::NoEquivalent, e);
                        return None;
                    }
                }
            } else {
                s.warn(l, inh, Kind::NoEquivalent, "Tollgate's early hints carry Link fields only");
                return None;
            }
        }
        a if a.starts_with("track-sc") => {
            track(s, l, inh, action);
            return None;
        }
        "replace-path" | "set-path" => match path_rewrite(a, &action[1..]) {
            Ok(v) => t.set("rewrite_path", v, text),
            Err(e) => {
                s.warn(l, inh, Kind::NoEquivalent, e);
                return None;
            }
        },
        "set-uri" | "replace-uri" | "set-query" | "set-pathq" | "set-method" => {
            s.warn(
                l,
                inh,
                Kind::NoEquivalent,
                "Tollgate does not rewrite the request line: rewrite in the application, or redirect",
            );
            return None;
        }
        "replace-header"
        | "replace-value"
        | "normalize-uri"
        | "set-var"
        | "set-var-fmt"
        | "unset-var"
        | "capture"
        | "set-log-level"
        | "set-src"
        | "set-dst"
        | "set-dst-port"
        | "lua"
        | "use-service"
        | "set-map"
        | "del-map"
        | "add-acl"
        | "del-acl"
        | "set-nice"
        | "set-tos"
        | "set-mark"
        | "sc-inc-gpc0"
        | "sc-set-gpt0"
        | "wait-for-body"
        | "do-resolve"
        | "set-priority-class"
        | "set-priority-offset"
        | "strict-mode"
        | "disable-l7-retry"
        | "set-timeout"
        | "send-spoe-group"
        | "wait-for-handshake"
        | "sc-inc-gpc"
        | "set-bandwidth-limit" => {
            s.warn(l, inh, Kind::NoEquivalent, "no Tollgate equivalent");
            return None;
        }
        _ => {
            s.warn(l, inh, Kind::Unknown, "not an http-request action the importer knows");
            return None;
        }
    }
    if cond::has_auth(&c) {
        s.warn(l, inh, Kind::NoEquivalent, "`http_auth` in the condition of another action than `auth`");
        return None;
    }
    if cond::ci_path(&c) {
        t.set("path_case_insensitive", V::Bool(true), "");
    }
    Some(BackendRule { cond: c, table: t, line: l.clone() })
}

/// `!{ http_auth(L) }`, alone or ANDed with other conditions: L and the others.
fn take_auth(c: &Cond) -> Option<(String, Cond)> {
    match c {
        Cond::Not(inner) => match inner.as_ref() {
            Cond::Auth(l) => Some((l.clone(), Cond::True)),
            _ => None,
        },
        Cond::All(items) => {
            let mut user = None;
            let mut rest = Vec::new();
            for i in items {
                match (i, &user) {
                    (Cond::Not(inner), None) if matches!(inner.as_ref(), Cond::Auth(_)) => {
                        if let Cond::Auth(l) = inner.as_ref() {
                            user = Some(l.clone());
                        }
                    }
                    _ => rest.push(i.clone()),
                }
            }
            let rest = cond::and(rest);
            if cond::has_auth(&rest) {
                return None;
            }
            user.map(|u| (u, rest))
        }
        _ => None,
    }
}

/// `http-request track-sc<n> <key> [table <t>]`: the frontend counts in that table.
pub(super) fn track(s: &mut Sec, l: &Line, inh: bool, action: &[String]) {
    let idx = action[0].trim_start_matches("track-sc").parse::<usize>().unwrap_or(9);
    let key = action.get(1).map(String::as_str).unwrap_or("");
    let table = action
        .iter()
        .position(|w| w == "table")
        .and_then(|i| action.get(i + 1))
        .map(|t| units::name(t))
        .or_else(|| s.acls.own_table.clone());
    let Some(table) = table else {
        s.warn(l, inh, Kind::NoEquivalent, "no stick-table to track in");
        return;
    };
    let tollgate_key = match key {
        "src" => Some("src".to_string()),
        "path" => Some("path".to_string()),
        k => k
            .strip_prefix("req.hdr(")
            .or_else(|| k.strip_prefix("hdr("))
            .and_then(|h| h.strip_suffix(')'))
            .map(|h| format!("header:{h}"))
            .or_else(|| k.strip_prefix("req.cook(").and_then(|c| c.strip_suffix(')')).map(|c| format!("cookie:{c}"))),
    };
    let Some(tollgate_key) = tollgate_key else {
        s.warn(
            l,
            inh,
            Kind::NoEquivalent,
            format!("tables are keyed by src, a header, a cookie or the path, not `{key}`"),
        );
        return;
    };
    if let Some(t) = s.cx.out.tables.iter_mut().find(|t| t.get("name") == Some(&V::s(&table))) {
        t.set("key", V::Str(tollgate_key), "");
    }
    if idx < 3 {
        s.acls.sc_tables[idx] = Some(table.clone());
    }
    s.table.push("track", V::Str(table), l.text());
    if l.words.iter().any(|w| w == "if" || w == "unless") {
        s.warn(l, inh, Kind::Approximate, "Tollgate counts every request of the frontend: the condition is not kept");
    }
}

/// The condition of a line (`if ...` / `unless ...`), or `None` when it was
/// reported as one that cannot be translated.
fn line_cond(s: &mut Sec, l: &Line, inh: bool, cond_words: &[String]) -> Option<Cond> {
    match s.acls.condition(cond_words, &s.base.clone()) {
        Ok(c) => Some(c),
        Err(e) => {
            s.warn(l, inh, Kind::NoEquivalent, format!("its condition cannot be translated: {e}"));
            None
        }
    }
}

pub(super) fn response_rule(s: &mut Sec, l: &Line, inh: bool) -> Option<BackendRule> {
    let (action, cond_words) = split_cond(&l.words[1..]);
    let c = line_cond(s, l, inh, cond_words)?;
    if !cond_words.is_empty() && cond_uses_headers(&c) {
        s.warn(
            l,
            inh,
            Kind::NoEquivalent,
            "a condition on the response's headers: Tollgate's conditions look at the request",
        );
        return None;
    }
    let mut t = Table::default();
    let text = l.text();
    let a = action.first().map(String::as_str).unwrap_or("");
    match a {
        "set-header" | "add-header" => {
            let name = action.get(1).map(String::as_str).unwrap_or("");
            let value = action[2.min(action.len())..].join(" ");
            match header_value(&value) {
                Ok(v) => {
                    let key = if a == "set-header" { "set_response_headers" } else { "add_response_headers" };
                    t.set_path(&[key, name], V::Str(v), text);
                }
                Err(e) => {
                    s.warn(l, inh, Kind::NoEquivalent, e);
                    return None;
                }
            }
        }
        "del-header" => t.push("delete_response_headers", V::s(action.get(1).map(String::as_str).unwrap_or("")), text),
        "cache-store" => {
            s.note(l, inh, format!("{text}  (the zone's `cache` on the route stores and serves)"));
            return None;
        }
        _ => {
            s.warn(l, inh, Kind::NoEquivalent, "Tollgate edits response headers only (set, add, delete)");
            return None;
        }
    }
    if cond::ci_path(&c) {
        t.set("path_case_insensitive", V::Bool(true), "");
    }
    Some(BackendRule { cond: c, table: t, line: l.clone() })
}

fn cond_uses_headers(c: &Cond) -> bool {
    match c {
        Cond::Leaf { key, .. } => *key == "header",
        Cond::Not(c) => cond_uses_headers(c),
        Cond::All(v) | Cond::Any(v) => v.iter().any(cond_uses_headers),
        _ => false,
    }
}

/// `errorfile <status> <file>`: the frontend's `error_pages` (from defaults:
/// [defaults]'); Tollgate reads HAProxy's errorfile form as it is. HAProxy's
/// stock pages say what Tollgate's own say.
pub(super) fn errorfile(s: &mut Sec, l: &Line, inh: bool) {
    let (code, file) = (l.word(1), l.word(2));
    if stock_page(file) {
        s.note(l, inh, format!("{}  (HAProxy's stock page: Tollgate's own is used)", l.text()));
        return;
    }
    if !code.parse::<u16>().is_ok_and(|c| (400..=599).contains(&c)) || file.is_empty() {
        s.warn(l, inh, Kind::NoEquivalent, "expected `errorfile <400-599> <file>`");
        return;
    }
    if !s.is_frontend {
        s.warn(
            l,
            inh,
            Kind::Approximate,
            format!("Tollgate's error pages are a frontend's: set error_pages.{code} = \"{file}\" on the frontends that route here"),
        );
        return;
    }
    if !file.starts_with('/') {
        s.warn(l, inh, Kind::Approximate, "a relative path: Tollgate reads it from the config file's directory");
    }
    let table = if inh { &mut s.cx.out.defaults } else { &mut s.table };
    table.set_path(&["error_pages", code], V::s(file), l.text());
}

/// HAProxy's own error pages, as Debian and the upstream tarball install them.
fn stock_page(file: &str) -> bool {
    let stock = ["/etc/haproxy/errors/", "/usr/share/haproxy/", "/usr/local/etc/haproxy/errors/"];
    stock.iter().any(|d| {
        file.strip_prefix(d)
            .is_some_and(|f| f.len() == 8 && f.ends_with(".http") && f[..3].bytes().all(|b| b.is_ascii_digit()))
    })
}
