//! The frontend side of frontend and listen sections: binds, rules, routes;
//! a section that only serves HAProxy's stats page becomes `[admin]`.

use super::Cx;
use super::cond::{self, Cond};
use super::parse::Line;
use super::proxy::{
    BackendInfo, BackendRule, Proxy, Sec, option_note, request_rule, response_rule, split_cond, stick_table,
    timeout_key,
};
use super::values::redirect;
use crate::out::{Frontend, Table, V};
use crate::report::Kind;
use crate::units;

/// Keywords the backend side of a listen section translates.
fn backend_side(l: &Line) -> bool {
    match l.word(0) {
        "timeout" => matches!(l.word(1), "connect" | "server" | "queue" | "tunnel" | "check"),
        "option" => !matches!(l.word(1), "forwarded"),
        w => matches!(
            w,
            "balance"
                | "cookie"
                | "server"
                | "default-server"
                | "server-template"
                | "http-check"
                | "tcp-check"
                | "retries"
                | "no"
                | "stick"
                | "http-reuse"
                | "fullconn"
                | "hash-type"
                | "hash-balance-factor"
                | "compression"
                | "source"
                | "persist"
                | "force-persist"
                | "ignore-persist"
                | "use-server"
                | "dispatch"
                | "http-send-name-header"
                | "email-alert"
                | "external-check"
                | "load-server-state-from-file"
                | "tcp-response"
                | "filter"
        ),
    }
}

/// A stats-only section: `stats enable` / `stats uri` and nothing to proxy.
pub(super) fn stats_only(p: &Proxy) -> bool {
    let own = &p.sec.lines;
    own.iter().any(|l| l.word(0) == "stats" && matches!(l.word(1), "enable" | "uri"))
        && !own.iter().any(|l| matches!(l.word(0), "server" | "use_backend" | "default_backend"))
}

pub(super) fn frontend(cx: &mut Cx, p: &Proxy, infos: &[(String, BackendInfo)]) {
    if stats_only(p) {
        return stats(cx, p);
    }
    let name = p.name();
    let listen = p.kind() == "listen";
    let mut s = Sec::new(cx, true);
    s.forwardfor = p.has_forwardfor();
    s.table.set("name", V::s(&name), p.sec.head.text());
    let mut binds: Vec<V> = Vec::new();
    let mut pre: Vec<BackendRule> = Vec::new();
    let mut redirects: Vec<BackendRule> = Vec::new();
    let mut resp: Vec<BackendRule> = Vec::new();
    let mut routes: Vec<(Cond, String, String)> = Vec::new();
    let mut default: Option<(String, String)> = listen.then(|| (name.clone(), String::new()));
    let mut allows: Vec<Cond> = Vec::new();
    let mut order_check: Vec<(Cond, Line)> = Vec::new();
    let mut tcp = false;
    for (l, inh) in p.lines() {
        let text = l.text();
        let w1 = l.word(1);
        if listen && backend_side(l) {
            continue;
        }
        match l.word(0) {
            "bind" => bind(&mut s, l, &mut binds),
            "mode" => {
                tcp = w1 == "tcp";
                if tcp {
                    s.table.set("mode", V::s("tcp"), text);
                } else {
                    s.table.remove("mode");
                }
            }
            "acl" => {
                let base = s.base.clone();
                s.acls.define(&l.words[1..], &base)
            }
            "http-request" => {
                if let Some(r) = request_rule(&mut s, l, inh, &mut allows) {
                    pre.push(r);
                }
            }
            "http-response" => {
                if let Some(r) = response_rule(&mut s, l, inh) {
                    resp.push(r);
                }
            }
            "redirect" => {
                let (action, cond_words) = split_cond(&l.words[1..]);
                let base = s.base.clone();
                match (s.acls.condition(cond_words, &base), redirect(action)) {
                    (Ok(c), Ok(r)) if !cond::has_auth(&c) => {
                        let mut t = Table::default();
                        t.set("redirect", r, text);
                        if cond::ci_path(&c) {
                            t.set("path_case_insensitive", V::Bool(true), "");
                        }
                        let c =
                            if allows.is_empty() { c } else { cond::and(vec![c, cond::not(cond::or(allows.clone()))]) };
                        redirects.push(BackendRule { cond: c, table: t, line: l.clone() });
                    }
                    (Err(e), _) => {
                        s.warn(l, inh, Kind::NoEquivalent, format!("its condition cannot be translated: {e}"))
                    }
                    (_, Err(e)) => s.warn(l, inh, Kind::NoEquivalent, e),
                    _ => s.warn(l, inh, Kind::NoEquivalent, "`http_auth` in a redirect's condition"),
                }
            }
            "use_backend" => {
                let (target, cond_words) = split_cond(&l.words[1..]);
                let backend = target.first().map(String::as_str).unwrap_or("");
                if backend.contains("%[") {
                    s.warn(l, inh, Kind::NoEquivalent, "a backend named by a sample (a map): write one rule per entry");
                    continue;
                }
                let base = s.base.clone();
                match s.acls.condition(cond_words, &base) {
                    Ok(c) if !cond::has_auth(&c) => {
                        order_check.push((c.clone(), l.clone()));
                        routes.push((c, units::name(backend), text))
                    }
                    Ok(_) => s.warn(l, inh, Kind::NoEquivalent, "`http_auth` in a use_backend condition"),
                    Err(e) => s.warn(l, inh, Kind::NoEquivalent, format!("its condition cannot be translated: {e}")),
                }
            }
            "default_backend" => default = Some((units::name(w1), text)),
            "timeout" => match (timeout_key(w1), units::duration(l.word(2), true)) {
                (Some(k @ ("client" | "http_request" | "keep_alive")), Some(v)) => {
                    // The first defaults section's already are [defaults].
                    if !inh || s.cx.out.defaults.get(&format!("timeout.{k}")) != Some(&v) {
                        s.table.set(&format!("timeout.{k}"), v, text)
                    }
                }
                (Some(_), _) => {}
                (None, _) if matches!(w1, "client-fin" | "tarpit" | "check" | "server-fin" | "connect" | "server") => {}
                _ => s.warn(l, inh, Kind::NoEquivalent, "not a timeout Tollgate has"),
            },
            "option" if !listen => option_note(&mut s, l, inh),
            "option" => {
                if w1 == "forwarded" {
                    s.table.set("forwarded", V::Bool(true), text)
                }
            }
            "errorfile" => super::proxy::errorfile(&mut s, l, inh),
            "stick-table" => stick_table(&mut s, l, inh, p),
            "tcp-request" => tcp_request(&mut s, l, inh, tcp),
            "compression" if !listen => super::proxy::compression(&mut s, l, inh),
            "unique-id-header" => {
                s.table.set("request_id", V::table([("header", V::s(w1))]), text);
                s.warn(l, inh, Kind::Approximate, "Tollgate makes its own ids (unique-id-format is not kept)");
            }
            "stats" => {
                s.warn(l, inh, Kind::NoEquivalent, "the stats page is served by the admin listener ([admin] bind)")
            }
            "capture" | "log-format" | "unique-id-format" | "error-log-format" | "log-format-sd" => s.warn(
                l,
                inh,
                Kind::NoEquivalent,
                "the access log has its own fields (global.access_log_format, docs section 11)",
            ),
            "monitor-uri" | "monitor" => s.warn(
                l,
                inh,
                Kind::NoEquivalent,
                "the admin listener answers health probes (GET /health on [admin] bind)",
            ),
            "maxconn" => s.note(l, inh, format!("{text}  (global.max_connections bounds all frontends)")),
            "log"
            | "description"
            | "id"
            | "bind-process"
            | "log-tag"
            | "declare"
            | "rate-limit"
            | "enabled"
            | "disabled"
            | "errorloc"
            | "errorloc302"
            | "errorloc303"
            | "email-alert"
            | "filter"
            | "http-after-response"
            | "log-steps" => {
                if !inh && !matches!(l.word(0), "log" | "description" | "id" | "log-tag") {
                    s.warn(l, inh, Kind::NoEquivalent, "no Tollgate equivalent")
                }
            }
            // Backend-side keywords a defaults section gives every proxy.
            _ if inh => {}
            w if !listen && backend_side(l) => {
                s.warn(l, inh, Kind::NoEquivalent, format!("`{w}` belongs in a backend"))
            }
            _ => s.warn(l, inh, Kind::Unknown, "not a frontend keyword the importer knows"),
        }
    }
    if binds.is_empty() {
        s.table.note("no bind that Tollgate can listen on");
    } else {
        let comment = s.bind_comments.join("\n");
        s.table.set("bind", V::Arr(binds), comment);
    }
    // HAProxy's later conditions see the request as earlier rules edited it;
    // Tollgate's see it as the client sent it.
    let mut seen_edits: Vec<String> = Vec::new();
    let mut checks: Vec<(&Cond, &Line, bool)> =
        pre.iter().chain(&redirects).map(|r| (&r.cond, &r.line, true)).collect();
    checks.extend(order_check.iter().map(|(c, l)| (c, l, false)));
    let mut late = Vec::new();
    for (c, l, edits) in checks {
        let read = cond::reads(c);
        if let Some(n) = read.iter().find(|n| seen_edits.contains(n)) {
            late.push((l.clone(), n.clone()));
        }
        if edits && let Some(r) = pre.iter().find(|r| std::ptr::eq(&r.line, l)) {
            seen_edits.extend(request_names(&r.table));
        }
    }
    for (l, n) in late {
        s.warn(&l, false, Kind::Approximate, format!("its condition reads {n}, which a rule before it changes: Tollgate's conditions see the request as the client sent it"));
    }
    let mut rules: Vec<Table> = Vec::new();
    let rule = |r: &BackendRule, extra: Option<&Cond>| -> Table {
        let c = match extra {
            Some(e) => cond::and(vec![e.clone(), r.cond.clone()]),
            None => r.cond.clone(),
        };
        let mut t = Table::default();
        if let Some(w) = cond::when(&c) {
            t.set("when", w, "");
        }
        t.absorb(&r.table);
        t
    };
    for r in pre.iter().chain(&resp).chain(&redirects) {
        push_merged(&mut rules, rule(r, None));
    }
    let backend_rules = |b: &str| infos.iter().find(|(n, _)| n == b).map(|(_, i)| i.rules.clone()).unwrap_or_default();
    for (c, backend, text) in &routes {
        let mut route = Table::default();
        if let Some(w) = cond::when(c) {
            route.set("when", w, "");
        }
        route.set("backend", V::s(backend), text.clone());
        if cond::ci_path(c) {
            route.set("path_case_insensitive", V::Bool(true), "");
        }
        // The backend's rules, in their order, just before the route, under its condition.
        for r in backend_rules(backend) {
            push_merged(&mut rules, rule(&r, Some(c)));
        }
        // Edits under the route's own condition just before it join it.
        match rules.last_mut() {
            Some(last) if edits_only(last) && last.get("when") == route.get("when") => last.absorb(&route),
            _ => rules.push(route),
        }
    }
    if let Some((backend, text)) = &default {
        for r in backend_rules(backend) {
            push_merged(&mut rules, rule(&r, None));
        }
        s.table.set("default_backend", V::s(backend), text.clone());
    }
    // HAProxy adds X-Forwarded-For only where option forwardfor is: on the
    // frontend, or on the backends it routes to.
    let routed: Vec<&String> = routes.iter().map(|(_, b, _)| b).chain(default.as_ref().map(|(b, _)| b)).collect();
    let backend_ff = infos.iter().any(|(n, i)| routed.contains(&n) && i.forwardfor);
    if !tcp && !p.has_forwardfor() && !backend_ff {
        s.table.set("forward_for", V::Bool(false), "no `option forwardfor` here or in the backends it routes to");
    }
    let table = std::mem::take(&mut s.table);
    let connection_rules = std::mem::take(&mut s.connection_rules);
    cx.out.frontends.push(Frontend { name, table, rules, connection_rules });
}

/// What a rule changes in the request that a condition could read: header
/// names (lower case) and `path`.
fn request_names(t: &Table) -> Vec<String> {
    let mut names: Vec<String> = edited(t).into_iter().filter(|(k, _)| k.contains("request")).map(|(_, n)| n).collect();
    if t.has("rewrite_path") {
        names.push("path".into());
    }
    names
}

/// Whether two listening addresses (units::listen_addr's form) are the same,
/// or a wildcard and a specific address of one family and port.
fn overlap(a: &str, b: &str) -> bool {
    let split = |x: &str| -> Option<(String, String)> {
        let (h, p) = x.rsplit_once(':')?;
        let h = match h {
            "" | "0.0.0.0" => "*4".to_string(),
            "[::]" => "*6".to_string(),
            h => h.to_string(),
        };
        Some((h, p.to_string()))
    };
    let (Some((ha, pa)), Some((hb, pb))) = (split(a), split(b)) else { return a == b };
    if pa != pb {
        return false;
    }
    let v6 = |h: &str| h == "*6" || h.starts_with('[');
    ha == hb || (v6(&ha) == v6(&hb) && (ha.starts_with('*') || hb.starts_with('*')))
}

/// A rule with header edits and nothing else.
fn edits_only(t: &Table) -> bool {
    ![
        "backend",
        "redirect",
        "deny",
        "tarpit",
        "silent_drop",
        "auth",
        "cache",
        "early_hints",
        "path_case_insensitive",
        "rewrite_path",
    ]
    .iter()
    .any(|k| t.has(k))
}

/// Header names a rule edits, by kind (`set_request_headers`, ...), lower case.
fn edited(t: &Table) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in t.entries() {
        match (k.split_once('.'), v) {
            (Some((kind, name)), _) => out.push((kind.to_string(), name.trim_matches('"').to_ascii_lowercase())),
            (None, V::Arr(items)) => {
                for i in items {
                    if let V::Str(name) = i {
                        out.push((k.to_string(), name.to_ascii_lowercase()));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether `next`'s edits give the same result within `last` (where Tollgate
/// applies deletes, then sets, then adds, and keeps one value per name and
/// kind) as after it.
fn mergeable(last: &Table, next: &Table) -> bool {
    let before = edited(last);
    edited(next).iter().all(|(kind, name)| {
        let side = |k: &str| if k.contains("request") { "request" } else { "response" };
        let op = |k: &str| k.split('_').next().unwrap_or("").to_string();
        before.iter().filter(|(bk, bn)| bn == name && side(bk) == side(kind)).all(|(bk, _)| {
            matches!(
                (op(bk).as_str(), op(kind).as_str()),
                ("delete", "set") | ("delete", "add") | ("set", "add") | ("delete", "delete") | ("set", "set")
            )
        })
    })
}

/// Appends `t` to the rules, or merges it into the last one when both only
/// edit headers under the same condition and the result is the same.
fn push_merged(rules: &mut Vec<Table>, t: Table) {
    match rules.last_mut() {
        Some(last)
            if edits_only(last) && edits_only(&t) && last.get("when") == t.get("when") && mergeable(last, &t) =>
        {
            last.absorb(&t)
        }
        _ => rules.push(t),
    }
}

/// `bind <addr>[,<addr>...] [options]`.
fn bind(s: &mut Sec, l: &Line, binds: &mut Vec<V>) {
    let mut tls: Vec<(String, V)> = Vec::new();
    let mut certs: Vec<V> = Vec::new();
    let mut opts: Vec<(String, V)> = Vec::new();
    let mut ssl = false;
    let mut v6only = false;
    let mut ignored: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut min: Option<String> = s.cx.bind_min_tls.clone();
    let mut i = 2;
    while i < l.words.len() {
        let k = l.word(i);
        let v = l.word(i + 1);
        let mut value = true;
        match k {
            "ssl" => {
                ssl = true;
                value = false;
            }
            "crt" => {
                let path = s.cx.path(&s.cx.crt_base.clone(), v);
                certs.push(V::Str(path));
            }
            "alpn" => {
                let protocols: Vec<&str> = v.split(',').filter(|p| *p == "h2" || *p == "http/1.1").collect();
                if !protocols.is_empty() {
                    tls.push(("alpn".into(), V::strs(protocols)));
                }
            }
            "accept-proxy" => {
                opts.push(("accept_proxy".into(), V::Bool(true)));
                value = false;
            }
            "defer-accept" => {
                opts.push(("defer_accept".into(), V::Bool(true)));
                value = false;
            }
            "proto" if v == "h2" => opts.push(("h2c".into(), V::Bool(true))),
            "ssl-min-ver" => min = (v == "TLSv1.3").then(|| "1.3".to_string()).or(min),
            "no-tlsv12" | "force-tlsv13" => {
                min = Some("1.3".into());
                value = false;
            }
            "ca-file" => tls.push(("client_ca".into(), V::Str(s.cx.path(&s.cx.ca_base.clone(), v)))),
            "verify" => match v {
                "required" | "optional" => tls.push(("verify".into(), V::s(v))),
                _ => {}
            },
            "crl-file" => tls.push(("crl".into(), V::strs([s.cx.path(&s.cx.ca_base.clone(), v)]))),
            "no-tls-tickets" => {
                tls.push(("tickets".into(), V::Bool(false)));
                value = false;
            }
            "v6only" => {
                v6only = true;
                value = false;
            }
            "crt-list" => ignored.push(format!("crt-list {v} (list the certificates in tls.certs)")),
            "process" | "thread" => notes.push(format!("{k} {v}: every worker serves every bind")),
            "ciphers" | "ciphersuites" | "curves" | "ecdhe" | "ssl-max-ver" | "npn" | "interface" | "namespace"
            | "backlog" | "maxconn" | "nice" | "id" | "name" | "tcp-ut" | "mss" | "level" | "mode" | "user"
            | "group" | "severity-output" | "gid" | "uid" | "quic-cc-algo" | "sigalgs" | "client-sigalgs"
            | "ca-sign-file" | "ca-sign-pass" | "ca-ignore-err" | "crt-ignore-err" | "label" | "guid-prefix" => {
                if !matches!(k, "name" | "id" | "backlog") {
                    ignored.push(format!("{k} {v}"));
                }
            }
            "expose-fd" => {
                i += 1;
            }
            _ => {
                value = false;
                if !matches!(
                    k,
                    "tfo"
                        | "v4v6"
                        | "no-sslv3"
                        | "no-tlsv10"
                        | "no-tlsv11"
                        | "force-tlsv12"
                        | "transparent"
                        | "prefer-client-ciphers"
                        | "strict-sni"
                        | "allow-0rtt"
                        | "generate-certificates"
                        | "accept-netscaler-cip"
                        | "quic-force-retry"
                        | "no-ca-names"
                        | "no-alpn"
                ) {
                    ignored.push(format!("{k} (unknown)"));
                } else if matches!(
                    k,
                    "strict-sni" | "allow-0rtt" | "generate-certificates" | "accept-netscaler-cip" | "transparent"
                ) {
                    ignored.push(k.to_string());
                }
            }
        }
        i += if value { 2 } else { 1 };
    }
    if ssl {
        if certs.is_empty() {
            s.warn(l, false, Kind::NoEquivalent, "`ssl` without `crt`: Tollgate needs the certificates on the bind");
            return;
        }
        let mut t = vec![("certs".to_string(), V::Arr(certs))];
        if let Some(m) = &min {
            t.push(("min_version".into(), V::s(m)));
        }
        if s.cx.bind_no_tickets && !tls.iter().any(|(k, _)| k == "tickets") {
            t.push(("tickets".into(), V::Bool(false)));
        }
        t.extend(tls);
        opts.insert(0, ("tls".into(), V::Table(t)));
    }
    for raw in l.word(1).split(',') {
        let mut addr = raw;
        let mut h3 = false;
        for p in ["ipv4@", "ipv6@", "tcp@", "tcp4@", "tcp6@"] {
            if let Some(rest) = addr.strip_prefix(p) {
                addr = rest;
            }
        }
        for p in ["quic4@", "quic6@"] {
            if let Some(rest) = addr.strip_prefix(p) {
                addr = rest;
                h3 = true;
            }
        }
        if addr.starts_with('/') || addr.contains('@') {
            s.warn(l, false, Kind::NoEquivalent, format!("`{raw}`: Tollgate listens on TCP addresses"));
            continue;
        }
        if addr.rsplit_once(':').is_some_and(|(_, p)| p.contains('-')) {
            s.warn(l, false, Kind::NoEquivalent, format!("`{raw}`: a port range (one bind per port)"));
            continue;
        }
        let Some(a) = units::listen_addr(addr) else {
            s.warn(l, false, Kind::NoEquivalent, format!("`{raw}` is not an address Tollgate listens on (IP:port)"));
            continue;
        };
        let mut list = vec![a.clone()];
        // HAProxy's `:::80` also takes IPv4 unless v6only; Tollgate's IPv6 binds never do.
        if let Some(port) = a.strip_prefix("[::]:")
            && !v6only
        {
            list.push(format!(":{port}"));
        }
        let me = match s.table.get("name") {
            Some(V::Str(n)) => n.clone(),
            _ => String::new(),
        };
        for a in list {
            match s.cx.binds.iter().find(|(b, _)| overlap(b, &a)).cloned() {
                // The same address again in this frontend (one per process): one listener.
                Some((b, fe)) if b == a && fe == me => {
                    if h3
                        && let Some(V::Table(t)) = binds
                            .iter_mut()
                            .find(|b| matches!(b, V::Table(t) if t.first() == Some(&("addr".to_string(), V::s(&a)))))
                    {
                        t.push(("h3".into(), V::Bool(true)));
                    }
                    continue;
                }
                Some((b, fe)) => {
                    let msg = if b == a {
                        format!("{a} is bound by frontend `{fe}` already: Tollgate listens once on an address")
                    } else {
                        format!(
                            "{a} overlaps {b} of frontend `{fe}`: Tollgate refuses a wildcard and a specific \
                             address on one port (its listeners share ports with SO_REUSEPORT)"
                        )
                    };
                    s.warn(l, false, Kind::NoEquivalent, msg);
                    continue;
                }
                None => {}
            }
            s.cx.binds.push((a.clone(), me.clone()));
            let mut opts = opts.clone();
            if h3 {
                opts.push(("h3".into(), V::Bool(true)));
            }
            if opts.is_empty() {
                binds.push(V::Str(a));
            } else {
                let mut t = vec![("addr".to_string(), V::Str(a))];
                t.extend(opts.iter().cloned());
                binds.push(V::Table(t));
            }
        }
    }
    let mut comment = l.text();
    for n in notes {
        comment.push_str(&format!("\n  ({n})"));
    }
    s.bind_comments.push(comment);
    if !ignored.is_empty() {
        s.warn(l, false, Kind::Approximate, format!("not carried over: {}", ignored.join(", ")));
    }
}

fn tcp_request(s: &mut Sec, l: &Line, inh: bool, tcp: bool) {
    let (action, cond_words) = split_cond(&l.words[1..]);
    let text = l.text();
    match (action.first().map(String::as_str), action.get(1).map(String::as_str)) {
        (Some("inspect-delay"), _) => {
            s.note(l, inh, format!("{text}  (Tollgate reads the ClientHello itself when a rule tests `sni`)"));
        }
        (Some("content"), Some("accept")) if tcp => {
            s.note(l, inh, format!("{text}  (Tollgate waits for the ClientHello itself)"));
        }
        (Some("connection"), Some("accept")) => {
            // Later connection rules do not see what it accepts.
            let base = s.base.clone();
            match s.acls.condition(cond_words, &base) {
                Ok(c) if !cond_uses(&c) => {
                    s.connection_accepts.push(c);
                    s.note(
                        l,
                        inh,
                        format!("{text}  (the connection rules below are written not to match what it accepts)"),
                    );
                }
                Ok(_) => s.warn(l, inh, Kind::NoEquivalent, "a connection rule tests the address and counters only"),
                Err(e) => s.warn(l, inh, Kind::NoEquivalent, format!("its condition cannot be translated: {e}")),
            }
        }
        (Some("connection"), Some(a @ ("reject" | "silent-drop"))) => {
            let base = s.base.clone();
            match s.acls.condition(cond_words, &base) {
                Ok(c) if !cond_uses(&c) => {
                    let c = match s.connection_accepts.is_empty() {
                        true => c,
                        false => cond::and(vec![c, cond::not(cond::or(s.connection_accepts.clone()))]),
                    };
                    let mut t = Table::default();
                    if let Some(w) = cond::when(&c) {
                        t.set("when", w, "");
                    }
                    t.set(if a == "reject" { "reject" } else { "silent_drop" }, V::Bool(true), text);
                    s.connection_rules.push(t);
                }
                Ok(_) => s.warn(l, inh, Kind::NoEquivalent, "a connection rule tests the address and counters only"),
                Err(e) => s.warn(l, inh, Kind::NoEquivalent, format!("its condition cannot be translated: {e}")),
            }
        }
        (Some("connection"), Some(a)) if a.starts_with("track-sc") => {
            s.warn(l, inh, Kind::Approximate, "written as the frontend's `track` (connections and requests counted)");
            let tail: Vec<String> = l.words[2..].to_vec();
            super::proxy::track(s, l, inh, &tail);
        }
        _ => s.warn(l, inh, Kind::NoEquivalent, "Tollgate's connection rules reject or drop by address and counters"),
    }
}

/// Whether a condition tests more than a connection rule can see.
fn cond_uses(c: &Cond) -> bool {
    match c {
        Cond::Leaf { key, .. } => !matches!(*key, "src" | "counter"),
        Cond::Not(c) => cond_uses(c),
        Cond::All(v) | Cond::Any(v) => v.iter().any(cond_uses),
        Cond::Auth(_) => true,
        Cond::True => false,
    }
}

/// A `listen stats` section: the admin listener.
fn stats(cx: &mut Cx, p: &Proxy) {
    let mut admin = cx.out.admin.take().unwrap_or_default();
    admin.comments.push(format!("{}: HAProxy's stats page is Tollgate's admin listener", p.sec.head.text()));
    let mut warnings = Vec::new();
    for l in &p.sec.lines {
        let text = l.text();
        match (l.word(0), l.word(1)) {
            ("bind", addr) => match units::listen_addr(addr.split(',').next().unwrap_or("")) {
                Some(a) if !admin.has("bind") => {
                    let a = match a.strip_prefix(':') {
                        Some(port) => format!("0.0.0.0:{port}"),
                        None => a,
                    };
                    admin.set("bind", V::Str(a), text);
                }
                _ => warnings.push(l.warn(Kind::NoEquivalent, "the admin listener has one address")),
            },
            ("stats", "enable")
            | ("mode", _)
            | ("stats", "hide-version")
            | ("stats", "show-legends")
            | ("stats", "show-node")
            | ("stats", "show-desc")
            | ("stats", "realm")
            | ("option", _)
            | ("log", _)
            | ("timeout", _)
            | ("maxconn", _) => admin.note(text),
            ("stats", "uri") => admin.note(format!("{text}  (the page is at / of the admin listener)")),
            ("stats", "refresh") => match units::duration(l.word(2), true) {
                Some(v) => admin.set("refresh", v, text),
                None => warnings.push(l.warn(Kind::NoEquivalent, "not a duration")),
            },
            ("stats", "auth") => match l.word(2).split_once(':') {
                Some((_, pass)) if !admin.has("token") => {
                    admin.set("token", V::s(pass), text);
                    warnings.push(l.warn(
                        Kind::Approximate,
                        "the admin listener takes this password with any user name (or as a bearer token)",
                    ));
                }
                _ => warnings.push(l.warn(Kind::NoEquivalent, "one password for the admin listener (its `token`)")),
            },
            ("stats", "admin") if matches!(&l.words[2..], [i, t] if i == "if" && t == "TRUE") || l.words.len() == 2 => {
                admin.note(format!("{text}  (the page's buttons change server states)"))
            }
            ("stats", "admin") => warnings.push(l.warn(
                Kind::Approximate,
                "a condition on who may change servers: Tollgate's admin listener cannot test it, so the page \
                 only shows (read_only, unless an admin-level socket needs changes; a token guards it)",
            )),
            _ => warnings.push(l.warn(Kind::NoEquivalent, "not part of the stats page Tollgate serves")),
        }
    }
    // HAProxy's page changes nothing without `stats admin`; Tollgate's
    // read_only also closes the command socket to changes.
    let unconditional = |l: &Line| matches!(&l.words[2..], [i, t] if i == "if" && t == "TRUE") || l.words.len() == 2;
    if !p.sec.lines.iter().any(|l| l.word(0) == "stats" && l.word(1) == "admin" && unconditional(l)) {
        let admin_socket = match admin.get("socket") {
            Some(V::Arr(socks)) => socks
                .iter()
                .any(|s| matches!(s, V::Table(t) if t.iter().any(|(k, v)| k == "level" && *v == V::s("admin")))),
            _ => false,
        };
        if admin_socket {
            warnings.push(p.sec.head.warn(
                Kind::Approximate,
                "no `stats admin`, but read_only would also refuse the admin-level stats socket's changes: \
                 the page can change server states (keep its bind private, or set a token)",
            ));
        } else {
            admin.set("read_only", V::Bool(true), "no `stats admin`: the page changes nothing");
        }
    }
    for w in warnings {
        admin.note(w.comment());
        cx.warnings.push(w);
    }
    cx.out.admin = Some(admin);
}
