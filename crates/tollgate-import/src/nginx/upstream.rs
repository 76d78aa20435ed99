//! `upstream` blocks (http and stream) into backends, and `stream` servers
//! into tcp frontends.

use super::parse::Directive;
use super::{Cx, and, comment_of, other};
use crate::out::{Backend, Frontend, Table, V};
use crate::{Kind, units};

/// A server address: `host:port`, `[v6]:port`; `default_port` when none is
/// written (None: a port is required).
pub(crate) fn host_port(addr: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if let Some(rest) = addr.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        ip.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port?,
            None => return None,
        };
        return Some((format!("[{ip}]"), port));
    }
    let (host, port) = match addr.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        None => (addr, default_port?),
    };
    let ok = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    ok.then(|| (host.to_string(), port))
}

/// What the `server` lines of an upstream say about failures.
#[derive(Default)]
struct Fails {
    min_errors: Option<i64>,
    interval_ms: u64,
}

impl Cx {
    /// Makes the backend of an `upstream` block (its name is already taken).
    pub(crate) fn upstream(&mut self, u: &Directive, tcp: bool) {
        let map = if tcp { &self.stream_upstreams } else { &self.http_upstreams };
        let Some(name) = map.get(u.arg(0)).cloned() else { return };
        let mut b = Backend { name: name.clone(), ..Default::default() };
        b.table.comments.push(self.log.com(u));
        b.table.set("name", V::s(&name), "");
        if tcp {
            b.table.set("mode", V::s("tcp"), "");
        }
        let mut servers: Vec<(String, u16, Table, bool)> = Vec::new();
        let mut fails = Fails::default();
        for d in u.children() {
            let c = comment_of(d);
            match d.name.as_str() {
                "server" => {
                    if let Some(s) = self.upstream_server(d, tcp, &mut fails, &mut b.table) {
                        servers.push(s);
                    }
                }
                "least_conn" => {
                    self.log.done(d);
                    b.table.set("balance", V::s("leastconn"), c);
                }
                "least_time" => {
                    b.table.set("balance", V::s("leastconn"), c);
                    self.log.warn_to(
                        &mut b.table,
                        d,
                        Kind::Approximate,
                        "leastconn: the fewest requests in flight, not the quickest answers",
                    );
                }
                "ip_hash" => {
                    b.table.set("balance", V::s("source"), c);
                    self.log.warn_to(
                        &mut b.table,
                        d,
                        Kind::Approximate,
                        "source hashes the whole client address (nginx: the first three octets of an IPv4 one); \
                         clients are spread anew when the servers change",
                    );
                }
                "hash" => self.hash(d, tcp, &mut b.table),
                "random" => {
                    self.log.done(d);
                    b.table.set("balance", V::s("random"), c);
                    if d.arg(0) != "two" || !matches!(d.arg(1), "" | "least_conn") {
                        self.log.warn_to(
                            &mut b.table,
                            d,
                            Kind::Approximate,
                            "Tollgate's random draws two servers and takes the less busy (nginx's `random two least_conn`)",
                        );
                    }
                }
                "keepalive_timeout" if !tcp => match units::duration(d.arg(0), false) {
                    Some(v) => {
                        self.log.done(d);
                        b.table.set("timeout.server_keep_alive", v, c);
                    }
                    None => self.log.warn_to(&mut b.table, d, Kind::NoEquivalent, "not a duration"),
                },
                "keepalive" | "keepalive_requests" | "keepalive_time" => self.log.warn_to(
                    &mut b.table,
                    d,
                    Kind::NoEquivalent,
                    "not needed: Tollgate keeps idle connections to servers in each worker's pool always \
                     (timeout.server_keep_alive bounds their idle time)",
                ),
                "zone" => self.log.warn_to(
                    &mut b.table,
                    d,
                    Kind::NoEquivalent,
                    "not needed: Tollgate's workers share their servers' state always",
                ),
                "sticky" => self.log.warn_to(
                    &mut b.table,
                    d,
                    Kind::NoEquivalent,
                    "not translated: persistence by cookie is the backend's `cookie = { name = ... }`",
                ),
                "ntlm" | "queue" | "resolver" | "resolver_timeout" => {
                    self.log.warn_to(&mut b.table, d, Kind::NoEquivalent, "no equivalent in a Tollgate backend")
                }
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        b.table.note(c);
                    }
                }
            }
        }
        if let Some(errors) = fails.min_errors {
            let interval = units::ms_value(fails.interval_ms.max(1000));
            b.table.set(
                "check",
                V::table([("type", V::s("tcp")), ("interval", interval), ("rise", V::Int(1))]),
                "max_fails/fail_timeout: passive checks (observe) need active ones to bring a server back",
            );
            b.table.set("observe", V::table([("errors", V::Int(errors.clamp(1, 1000)))]), "");
        }
        name_servers(&mut servers);
        for (_, _, t, _) in servers {
            b.servers.push(t);
        }
        self.out.backends.push(b);
    }

    fn hash(&mut self, d: &Directive, tcp: bool, t: &mut Table) {
        let c = comment_of(d);
        let key = d.arg(0);
        let consistent = d.arg(1) == "consistent";
        let (balance, exact) = match key {
            "$remote_addr" | "$binary_remote_addr" => ("source".to_string(), false),
            "$request_uri" | "$uri" | "$document_uri" if !tcp => ("uri".to_string(), key != "$request_uri"),
            k if !tcp && k.starts_with("$http_") && k[6..].chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                let header: Vec<String> = k[6..]
                    .split('_')
                    .map(|w| {
                        let mut cs = w.chars();
                        cs.next().map(|f| f.to_ascii_uppercase().to_string() + cs.as_str()).unwrap_or_default()
                    })
                    .collect();
                (format!("hdr({})", header.join("-")), true)
            }
            _ => {
                self.log.warn_to(
                    t,
                    d,
                    Kind::NoEquivalent,
                    "Tollgate hashes the client address, the path or a header: the backend balances in round robin",
                );
                return;
            }
        };
        self.log.done(d);
        t.set("balance", V::s(&balance), c);
        if consistent || !exact {
            let mut why = Vec::new();
            if key == "$request_uri" {
                why.push("`uri` hashes the path without the query string".to_string());
            }
            if balance == "source" {
                why.push("`source` hashes the client address".to_string());
            }
            if consistent {
                why.push(
                    "it is not consistent hashing: when the servers change, many keys move to another server"
                        .to_string(),
                );
            }
            self.log.warn_to(t, d, Kind::Approximate, why.join("; "));
        }
    }

    /// A `server` line of an upstream: its table, or None when it cannot be
    /// used (a unix socket).
    fn upstream_server(
        &mut self,
        d: &Directive,
        tcp: bool,
        fails: &mut Fails,
        bt: &mut Table,
    ) -> Option<(String, u16, Table, bool)> {
        let addr = d.arg(0);
        if addr.starts_with("unix:") {
            self.log.warn_to(
                bt,
                d,
                Kind::NoEquivalent,
                "Tollgate connects to servers over TCP only: serve the application on a TCP port (127.0.0.1:PORT) \
                 and list it here",
            );
            return None;
        }
        let Some((host, port)) = host_port(addr, if tcp { None } else { Some(80) }) else {
            let msg = if tcp { "the address needs a port" } else { "not an address Tollgate can use" };
            self.log.warn_to(bt, d, Kind::NoEquivalent, msg);
            return None;
        };
        let mut t = Table::default();
        t.set("name", V::s(""), "");
        t.set("addr", V::s(format!("{host}:{port}")), self.log.com(d));
        let mut max_fails = None;
        let mut fail_timeout = None;
        for p in d.args.iter().skip(1) {
            let (k, v) = p.split_once('=').unwrap_or((p.as_str(), ""));
            match k {
                "weight" => match v.parse::<i64>() {
                    Ok(w) if (1..=256).contains(&w) => t.set("weight", V::Int(w), ""),
                    Ok(w) if w > 256 => {
                        t.set("weight", V::Int(256), "");
                        self.log.warn_to(&mut t, d, Kind::Approximate, "weight is at most 256 in Tollgate");
                    }
                    _ => self.log.warn_to(&mut t, d, Kind::NoEquivalent, format!("{p}: not a weight")),
                },
                "backup" => t.set("backup", V::Bool(true), ""),
                "down" => t.set("disabled", V::Bool(true), ""),
                "max_conns" => match v.parse::<i64>() {
                    Ok(0) => {}
                    Ok(n) if n > 0 => t.set("maxconn", V::Int(n.min(1_000_000)), ""),
                    _ => self.log.warn_to(&mut t, d, Kind::NoEquivalent, format!("{p}: not a number")),
                },
                "max_fails" => max_fails = v.parse::<i64>().ok(),
                "fail_timeout" => fail_timeout = units::duration_ms(v, false),
                "resolve" => {}
                _ => {
                    self.log.warn_to(&mut t, d, Kind::NoEquivalent, format!("{p}: no equivalent on a Tollgate server"))
                }
            }
        }
        match max_fails {
            Some(0) => {
                t.set("check", V::Bool(false), "max_fails=0: never taken out");
            }
            Some(n) if n > 0 => {
                fails.min_errors = Some(fails.min_errors.map_or(n, |m| m.min(n)));
                fails.interval_ms = fails.interval_ms.max(fail_timeout.unwrap_or(10_000));
                self.log.warn_to(
                    &mut t,
                    d,
                    Kind::Approximate,
                    "max_fails/fail_timeout: the backend's passive checks (observe) take a server out after that many \
                     consecutive failed requests (nginx: within fail_timeout); a TCP check every fail_timeout brings \
                     it back (and can take it out too)",
                );
            }
            _ => {
                if fail_timeout.is_some() {
                    self.log.warn_to(
                        &mut t,
                        d,
                        Kind::NoEquivalent,
                        "fail_timeout without max_fails: no passive checks are made",
                    );
                }
            }
        }
        Some((host, port, t, false))
    }

    /// A backend for an address written in `proxy_pass` (made once, reused).
    pub(crate) fn address_backend(&mut self, scheme: &str, host: &str, port: u16, tcp: bool, d: &Directive) -> String {
        let key = format!("{scheme}://{host}:{port}");
        if let Some(n) = self.backend_keys.get(&key) {
            return n.clone();
        }
        let name = self.unique_name(&format!("{}_{port}", host.trim_start_matches('[').trim_end_matches(']')));
        self.backend_keys.insert(key, name.clone());
        let mut b = Backend { name: name.clone(), ..Default::default() };
        b.table.comments.push(format!("made for {scheme}://{host}:{port} ({})", comment_of(d)));
        b.table.set("name", V::s(&name), "");
        if tcp {
            b.table.set("mode", V::s("tcp"), "");
        }
        let mut s = Table::default();
        let sname = units::name(host.trim_start_matches('[').trim_end_matches(']'));
        s.set("name", V::s(sname), "");
        s.set("addr", V::s(format!("{host}:{port}")), "");
        b.servers.push(s);
        self.out.backends.push(b);
        name
    }

    pub(crate) fn stream(&mut self, st: &Directive) {
        let kids = st.children();
        for d in kids {
            if d.name == "upstream" && d.block.is_some() {
                let name = self.unique_name(d.arg(0));
                self.stream_upstreams.insert(d.arg(0).to_string(), name);
            }
        }
        for d in kids {
            if d.name == "upstream" && d.block.is_some() {
                self.upstream(d, true);
            }
        }
        let mut inherit: Vec<&Directive> = Vec::new();
        let mut servers = Vec::new();
        for d in kids {
            match d.name.as_str() {
                "upstream" => {}
                "server" if d.block.is_some() => {
                    self.log.done(d);
                    servers.push(d);
                }
                "access_log" => {
                    super::access_log(&mut self.log, &mut self.out.global, d);
                }
                "log_format" => self.log.warn_trailer(
                    d,
                    Kind::Approximate,
                    "tcp sessions get a line of Tollgate's own format in the access log (section 11.4)",
                ),
                "resolver" | "resolver_timeout" => self.resolver(d),
                n if stream_inheritable(n) => inherit.push(d),
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        self.log.trailer.push(c);
                    }
                }
            }
        }
        for s in servers {
            self.stream_server(s, &inherit);
        }
    }

    fn stream_server(&mut self, s: &Directive, inherit: &[&Directive]) {
        let own: Vec<&Directive> = s.children().iter().collect();
        let dirs = super::location::merge(inherit, &own);
        let mut f = Frontend::default();
        f.table.comments.push(self.log.com(s));
        let mut binds = Vec::new();
        let mut bind_comments = Vec::new();
        let mut tls_wanted = false;
        let mut target: Option<(String, &Directive)> = None;
        let mut connect = None;
        let mut idle = None;
        let mut send_proxy = None;
        let mut access = Vec::new();
        let mut notes = Vec::new();
        for d in &dirs {
            let d = *d;
            match d.name.as_str() {
                "listen" => {
                    let Some(l) = super::server::parse_listen(&mut self.log, &mut notes, d, true) else { continue };
                    bind_comments.push(comment_of(d));
                    tls_wanted |= l.ssl;
                    binds.push(l);
                }
                "proxy_pass" => {
                    self.log.done(d);
                    let t = d.arg(0);
                    let backend = if let Some(n) = self.stream_upstreams.get(t) {
                        Some(n.clone())
                    } else if t.contains('$') {
                        self.log.warn_in(
                            &mut notes,
                            d,
                            Kind::NoEquivalent,
                            "a server chosen by variables (a map, ssl_preread): route with rules on `sni` or `src` instead",
                        );
                        None
                    } else if let Some((h, p)) = host_port(t, None) {
                        Some(self.address_backend("tcp", &h, p, true, d))
                    } else {
                        self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "not an upstream or host:port");
                        None
                    };
                    target = backend.map(|b| (b, d));
                }
                "proxy_connect_timeout" => connect = Some(d),
                "proxy_timeout" => idle = Some(d),
                "proxy_protocol" => {
                    if d.arg(0) == "on" {
                        send_proxy = Some(d);
                    } else {
                        self.log.done(d);
                    }
                }
                "allow" | "deny" => access.push(d),
                "proxy_responses" | "proxy_requests" | "proxy_half_close" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "for UDP sessions, which Tollgate does not proxy (a TCP half-close is always passed on)",
                ),
                "ssl_preread" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "not needed: a tcp frontend reads the ClientHello itself for rules on `sni`",
                ),
                n if n.starts_with("ssl_") || n == "ssl" => {}
                "proxy_next_upstream" | "proxy_next_upstream_tries" | "proxy_next_upstream_timeout" => {
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::Approximate,
                        "a failed connect is retried (retries, 3 by default) on another server (redispatch)",
                    )
                }
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        notes.push(c);
                    }
                }
            }
        }
        if binds.is_empty() {
            for n in notes {
                self.log.trailer.push(n);
            }
            self.log.done_all(s);
            self.log.warn_trailer(
                s,
                Kind::NoEquivalent,
                "no TCP address to listen on (UDP is not proxied): not translated",
            );
            return;
        }
        let Some((backend, pass)) = target else {
            for n in notes {
                self.log.trailer.push(n);
            }
            self.log.warn_trailer(s, Kind::NoEquivalent, "no proxy_pass Tollgate can follow: not translated");
            return;
        };
        let tls = if tls_wanted { super::server::tls_of(&mut self.log, &mut notes, &dirs, true) } else { None };
        let name = self.unique_frontend(&backend);
        f.name = name.clone();
        f.table.set("name", V::s(&name), "");
        f.table.set("mode", V::s("tcp"), "");
        let bv: Vec<V> = binds
            .iter()
            .map(|l| {
                let mut pairs = vec![("addr".to_string(), V::s(&l.addr))];
                if l.ssl
                    && let Some(t) = &tls
                {
                    pairs.push(("tls".into(), t.clone()));
                }
                if l.proxy_protocol {
                    pairs.push(("accept_proxy".into(), V::Bool(true)));
                }
                if pairs.len() == 1 { V::s(&l.addr) } else { V::Table(pairs) }
            })
            .collect();
        for c in &bind_comments {
            f.table.set("bind", V::Arr(bv.clone()), c.clone());
        }
        f.table.set("default_backend", V::s(&backend), self.log.com(pass));
        if !access.is_empty()
            && let Some(denied) = super::rewrite::access_cond(&mut self.log, &mut notes, &access)
        {
            let mut r = Table::default();
            for d in &access {
                r.comments.push(comment_of(d));
            }
            if let Some(w) = and(vec![denied]) {
                r.set("when", w, "");
            }
            r.set("reject", V::Bool(true), "");
            f.connection_rules.push(r);
        }
        for n in notes {
            f.table.note(n);
        }
        self.out.frontends.push(f);
        let Some(b) = self.out.backends.iter_mut().find(|b| b.name == backend) else { return };
        if let Some(d) = connect {
            match units::duration(d.arg(0), false) {
                Some(v) => set_backend_key(&mut self.log, &mut b.table, "timeout.connect", v, d),
                None => self.log.warn_to(&mut b.table, d, Kind::NoEquivalent, "not a duration"),
            }
        }
        match idle {
            Some(d) => match units::duration(d.arg(0), false) {
                Some(v) => set_backend_key(&mut self.log, &mut b.table, "timeout.tunnel", v, d),
                None => self.log.warn_to(&mut b.table, d, Kind::NoEquivalent, "not a duration"),
            },
            None => {
                if !b.table.has("timeout.tunnel") {
                    b.table.set(
                        "timeout.tunnel",
                        V::s("10m"),
                        "nginx's default proxy_timeout: a session idle 10 minutes ends",
                    );
                }
            }
        }
        if let Some(d) = send_proxy {
            let c = self.log.com(d);
            for s in &mut b.servers {
                s.set("send_proxy", V::s("v1"), c.clone());
            }
        }
    }
}

/// Sets a key of a backend that several locations or servers may use: the
/// first value stays, a different later one is reported.
pub(crate) fn set_backend_key(log: &mut super::Log, t: &mut Table, key: &str, v: V, d: &Directive) {
    match t.get(key) {
        Some(old) if *old != v => log.warn_to(
            t,
            d,
            Kind::Approximate,
            format!("the backend is used from several places with different values: `{key}` keeps the first"),
        ),
        Some(_) => log.done(d),
        None => {
            let c = log.com(d);
            t.set(key, v, c);
        }
    }
}

fn stream_inheritable(name: &str) -> bool {
    name.starts_with("ssl_")
        || name.starts_with("proxy_")
        || matches!(name, "allow" | "deny" | "tcp_nodelay" | "preread_buffer_size" | "preread_timeout")
}

/// Names the servers of a backend: the host when it is unique, else host and
/// port, made unique.
fn name_servers(servers: &mut [(String, u16, Table, bool)]) {
    let hosts: Vec<String> =
        servers.iter().map(|(h, ..)| h.trim_start_matches('[').trim_end_matches(']').to_string()).collect();
    let mut used = std::collections::HashSet::new();
    for (i, (_, port, t, _)) in servers.iter_mut().enumerate() {
        let host = hosts.get(i).cloned().unwrap_or_default();
        let dup = hosts.iter().filter(|h| **h == host).count() > 1;
        let base = if dup { units::name(&format!("{host}_{port}")) } else { units::name(&host) };
        let base: String = base.chars().take(60).collect();
        let mut name = base.clone();
        let mut n = 2;
        while !used.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        t.set("name", V::s(name), "");
    }
}
