//! A server block's `location`s into rules, in nginx's order of precedence:
//! exact (`=`), then `^~` prefixes longest first, then regular expressions in
//! file order, then the other prefixes longest first.

use super::parse::Directive;
use super::rewrite::{Act, access_cond, if_cond, map_vars, regex_ok, rewrite_act};
use super::{Cx, and, comment_of, cond, one_or_many, other};
use crate::out::{Table, V};
use crate::{Kind, units};
use std::collections::HashMap;

/// A rule made, and what the frontend needs to know of it.
#[derive(Debug, Default)]
pub(crate) struct Rule {
    pub t: Table,
    /// Whether it has a `when`.
    pub when: bool,
    /// The backend, when choosing it is all the rule does.
    pub backend_only: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct RulesOut {
    pub rules: Vec<Rule>,
    pub tracked: Vec<String>,
    pub conn_rules: Vec<Table>,
}

impl RulesOut {
    pub fn track(&mut self, t: &str) {
        if !self.tracked.iter().any(|x| x == t) {
            self.tracked.push(t.to_string());
        }
    }
}

/// A server block, as its locations see it.
pub(crate) struct SrvCtx<'a> {
    /// For the names of the backends made for it.
    pub label: String,
    /// Location directives written at the server (or http) level.
    pub loc_dirs: &'a [&'a Directive],
    pub locations: &'a [&'a Directive],
    /// `return`, `rewrite`, `if` at the server level, in order.
    pub rewrite: &'a [&'a Directive],
    /// The conditions every rule of the server gets (host, tls).
    pub pre: Vec<V>,
    pub names: &'a [String],
    /// Whether a request for this server that no location takes must be
    /// kept from the next server's rules.
    pub catch_all: bool,
}

/// Directives that a location inherits from its server and from `http`.
pub(crate) fn inheritable(name: &str) -> bool {
    let families = ["proxy_", "grpc_", "fastcgi_", "uwsgi_", "scgi_", "memcached_", "auth_basic", "sub_filter", "ssi"];
    families.iter().any(|f| name.starts_with(f))
        || matches!(
            name,
            "add_header"
                | "allow"
                | "deny"
                | "root"
                | "index"
                | "try_files"
                | "limit_req"
                | "expires"
                | "autoindex"
                | "satisfy"
                | "charset"
                | "etag"
                | "limit_rate"
                | "limit_rate_after"
                | "log_not_found"
                | "open_file_cache"
                | "default_type"
                | "add_trailer"
                | "more_set_headers"
                | "more_clear_headers"
                | "set"
        )
}

/// The group a directive's inheritance goes by: a level that writes one of
/// them drops all those of its parent.
fn group(name: &str) -> &str {
    match name {
        "allow" | "deny" => "access",
        n => n,
    }
}

/// Directives in force: the parent's, less those the child writes again,
/// then the child's.
pub(crate) fn merge<'a>(parent: &[&'a Directive], own: &[&'a Directive]) -> Vec<&'a Directive> {
    let mine: Vec<&str> = own.iter().map(|d| group(&d.name)).collect();
    parent.iter().copied().filter(|d| !mine.contains(&group(&d.name))).chain(own.iter().copied()).collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LocKind {
    Exact,
    NoRegex,
    Regex(bool),
    Prefix,
}

pub(crate) struct Loc<'a> {
    pub d: &'a Directive,
    pub kind: LocKind,
    pub path: String,
    pub dirs: Vec<&'a Directive>,
    pub blocks: Vec<&'a Directive>,
}

impl Cx {
    /// The rules of one server block.
    pub(crate) fn server_rules(&mut self, ctx: &SrvCtx, out: &mut RulesOut) {
        // Server-level return / rewrite / if run before a location is chosen.
        let mut closed = false;
        for d in ctx.rewrite {
            if closed {
                self.log.done_all(d);
                continue;
            }
            closed = self.rewrite_rule(ctx, d, &ctx.pre, out);
        }
        let mut named: HashMap<String, &Directive> = HashMap::new();
        let mut locs = Vec::new();
        for l in ctx.locations {
            self.collect(l, ctx.loc_dirs, &mut locs, &mut named, 0);
        }
        if closed {
            for l in &locs {
                self.log.done_all(l.d);
                self.log.warn_trailer(
                    l.d,
                    Kind::NoEquivalent,
                    "never used: the server block's return answers every request before a location is chosen",
                );
            }
            return;
        }
        let plain: Vec<String> = locs.iter().filter(|l| l.kind == LocKind::Prefix).map(|l| l.path.clone()).collect();
        let mut order: Vec<&Loc> = Vec::new();
        order.extend(locs.iter().filter(|l| l.kind == LocKind::Exact));
        let mut norx: Vec<&Loc> = locs.iter().filter(|l| l.kind == LocKind::NoRegex).collect();
        norx.sort_by_key(|l| std::cmp::Reverse(l.path.len()));
        order.extend(norx);
        order.extend(locs.iter().filter(|l| matches!(l.kind, LocKind::Regex(_))));
        let mut pre: Vec<&Loc> = locs.iter().filter(|l| l.kind == LocKind::Prefix).collect();
        pre.sort_by_key(|l| std::cmp::Reverse(l.path.len()));
        order.extend(pre);
        let has_root = locs.iter().any(|l| matches!(l.kind, LocKind::Prefix | LocKind::NoRegex) && l.path == "/");
        for l in order {
            let excl: Vec<String> = if l.kind == LocKind::NoRegex {
                plain.iter().filter(|q| q.len() > l.path.len() && q.starts_with(&l.path)).cloned().collect()
            } else {
                Vec::new()
            };
            self.location(ctx, l, excl, &named, out);
        }
        let unconditional = and(ctx.pre.clone());
        let caught = out.rules.last().is_some_and(|r| r.t.get("when") == unconditional.as_ref());
        if !has_root
            && !caught
            && let Some(r) = ctx.loc_dirs.iter().find(|d| d.name == "root").copied()
        {
            let l =
                Loc { d: r, kind: LocKind::Prefix, path: "/".into(), dirs: ctx.loc_dirs.to_vec(), blocks: Vec::new() };
            if ctx.locations.is_empty() {
                self.location_inner(ctx, &l, Vec::new(), &named, out, "no location: nginx serves the files of root");
            } else {
                self.location_inner(
                    ctx,
                    &l,
                    Vec::new(),
                    &named,
                    out,
                    "no `location /`: nginx serves other paths from root",
                );
            }
        }
        let caught = out.rules.last().is_some_and(|r| r.t.get("when") == unconditional.as_ref());
        if ctx.catch_all && !caught {
            {
                let mut r = Table::default();
                r.comments.push(format!("no location of server {} takes it: nginx answers 404", ctx.label));
                let when = and(ctx.pre.clone());
                let has_when = when.is_some();
                if let Some(w) = when {
                    r.set("when", w, "");
                }
                r.set("deny", V::Int(404), "");
                out.rules.push(Rule { t: r, when: has_when, backend_only: None });
            }
        }
        for d in named.values() {
            if !self.log.is_done(d) {
                self.log.done_all(d);
                self.log.warn_trailer(
                    d,
                    Kind::NoEquivalent,
                    "a named location is reached by nginx's internal redirects only: not translated",
                );
            }
        }
    }

    /// One rewrite-phase directive as a rule; true when it answers every
    /// request (later ones are never reached).
    fn rewrite_rule(&mut self, ctx: &SrvCtx, d: &Directive, base: &[V], out: &mut RulesOut) -> bool {
        let mut notes = Vec::new();
        let (act, extra) = if d.name == "if" {
            let body: Vec<&Directive> = d.children().iter().collect();
            let c = if_cond(d);
            match (c, body.as_slice()) {
                (Some(c), [one]) if one.name == "return" || one.name == "rewrite" => {
                    self.log.done(d);
                    match rewrite_act(&mut self.log, &mut notes, one, ctx.names) {
                        Act::Do(k, v, e, a) => (Some((k, v, *one, a)), vec![Some(c), e]),
                        Act::Skip => (None, vec![]),
                    }
                }
                _ => {
                    self.log.done_all(d);
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::NoEquivalent,
                        format!(
                            "`if` (line {}) is not translated, with all it holds: Tollgate's rules test the host, the path, \
                             headers, the method, the client address and TLS",
                            d.pos.line
                        ),
                    );
                    (None, vec![])
                }
            }
        } else {
            match rewrite_act(&mut self.log, &mut notes, d, ctx.names) {
                Act::Do(k, v, e, a) => (Some((k, v, d, a)), vec![e]),
                Act::Skip => (None, vec![]),
            }
        };
        let Some((k, v, src, approx)) = act else {
            self.note_rule(out, notes);
            return false;
        };
        let conditional = extra.iter().any(Option::is_some);
        let mut conds = base.to_vec();
        conds.extend(extra.into_iter().flatten());
        let mut r = Table::default();
        r.comments.push(comment_of(d));
        let when = and(conds);
        let has_when = when.is_some();
        if let Some(w) = when {
            r.set("when", w, "");
        }
        r.set(&k, v, self.log.com(src));
        if let Some(a) = approx {
            self.log.warn_to(&mut r, src, Kind::Approximate, a);
        }
        for n in notes {
            r.note(n);
        }
        out.rules.push(Rule { t: r, when: has_when, backend_only: None });
        !conditional
    }

    /// Comments with nowhere else to go: on the last rule, else the trailer.
    fn note_rule(&mut self, out: &mut RulesOut, notes: Vec<String>) {
        match out.rules.last_mut() {
            Some(r) => notes.into_iter().for_each(|n| r.t.note(n)),
            None => self.log.trailer.extend(notes),
        }
    }

    fn collect<'a>(
        &mut self,
        l: &'a Directive,
        parent: &[&'a Directive],
        locs: &mut Vec<Loc<'a>>,
        named: &mut HashMap<String, &'a Directive>,
        depth: usize,
    ) {
        let own: Vec<&Directive> = l.children().iter().filter(|d| d.block.is_none()).collect();
        let dirs = merge(parent, &own);
        let (kind, path) = match (l.arg(0), l.args.len()) {
            ("=", 2) => (LocKind::Exact, l.arg(1).to_string()),
            ("^~", 2) => (LocKind::NoRegex, l.arg(1).to_string()),
            ("~", 2) => (LocKind::Regex(false), l.arg(1).to_string()),
            ("~*", 2) => (LocKind::Regex(true), l.arg(1).to_string()),
            (p, 1) if p.starts_with('@') => {
                named.insert(p.to_string(), l);
                return;
            }
            (p, 1) if p.len() > 1 && p.starts_with('=') => (LocKind::Exact, p[1..].to_string()),
            (p, 1) => (LocKind::Prefix, p.to_string()),
            _ => {
                self.log.done_all(l);
                self.log.warn_trailer(l, Kind::NoEquivalent, "a location of a form not understood");
                return;
            }
        };
        if depth > 0 {
            let msg = "a nested location is made a rule of its own, after the locations around it in nginx's order \
                       (nginx looks for it inside its parent only)";
            let mut notes = Vec::new();
            self.log.warn_in(&mut notes, l, Kind::Approximate, msg);
            self.log.trailer.extend(notes);
        }
        let blocks: Vec<&Directive> =
            l.children().iter().filter(|d| d.block.is_some() && d.name != "location").collect();
        locs.push(Loc { d: l, kind, path, dirs: dirs.clone(), blocks });
        for k in l.children().iter().filter(|d| d.name == "location" && d.block.is_some()) {
            if depth < 8 {
                self.collect(k, &dirs, locs, named, depth + 1);
            }
        }
    }

    fn location(
        &mut self,
        ctx: &SrvCtx,
        l: &Loc,
        excl: Vec<String>,
        named: &HashMap<String, &Directive>,
        out: &mut RulesOut,
    ) {
        self.location_inner(ctx, l, excl, named, out, "");
    }

    #[allow(clippy::too_many_lines)]
    fn location_inner(
        &mut self,
        ctx: &SrvCtx,
        l: &Loc,
        excl: Vec<String>,
        named: &HashMap<String, &Directive>,
        out: &mut RulesOut,
        implicit: &str,
    ) {
        let head = if implicit.is_empty() { self.log.com(l.d) } else { implicit.to_string() };
        // The location's own condition.
        let path_cond = match l.kind {
            LocKind::Exact => Some(cond("path", V::s(&l.path))),
            LocKind::Regex(ci) => {
                if !regex_ok(&l.path) {
                    self.log.done_all(l.d);
                    self.log.warn_trailer(
                        l.d,
                        Kind::NoEquivalent,
                        "a regular expression Tollgate's regex engine does not take (look-around, back-references...)",
                    );
                    return;
                }
                Some(cond("path_regex", V::s(if ci { format!("(?i){}", l.path) } else { l.path.clone() })))
            }
            LocKind::NoRegex | LocKind::Prefix => {
                let mut cs = Vec::new();
                if l.path != "/" {
                    cs.push(cond("path_prefix", V::s(&l.path)));
                }
                if !excl.is_empty() {
                    cs.push(cond("not", cond("path_prefix", one_or_many(excl))));
                }
                and(cs)
            }
        };
        let mut base = ctx.pre.clone();
        base.extend(path_cond);
        let mut rule = Table::default();
        rule.comments.push(head);
        let mut notes: Vec<String> = Vec::new();
        let mut edits: Vec<(Vec<String>, V, String)> = Vec::new();
        let mut action: Option<(String, V, String)> = None;
        // proxy_pass with a URI: the path the server gets.
        let mut rewrite: Option<(V, String)> = None;
        // http2_push: the same resources as 103 Early Hints.
        let mut hints: Vec<String> = Vec::new();
        let mut action_approx: Option<(&Directive, &'static str)> = None;
        let mut proxy: Option<(&Directive, bool)> = None; // (proxy_pass, grpc)
        let mut dead: Option<&Directive> = None;
        let mut internal = None;
        let (mut root, mut alias, mut index, mut try_files) = (None, None, None, None);
        let mut access = Vec::new();
        let mut limits = Vec::new();
        let (mut auth_basic, mut auth_file) = (None, None);
        let mut cache = None;
        let mut stale = None;
        let mut websocket = false;
        let mut backend_keys: Vec<(String, V, &Directive)> = Vec::new();
        let mut timeouts: Vec<(&str, u64, &Directive)> = Vec::new();
        let mut ssl: Vec<&Directive> = Vec::new();
        let mut pre_rules: Vec<Rule> = Vec::new();
        // A `return` (or redirecting `rewrite`) that answers every request:
        // nginx runs it before the access phase (allow/deny, limit_req,
        // limit_except, auth_basic), which it never reaches.
        let mut answered: Option<&Directive> = None;
        for d in &l.dirs {
            let d = *d;
            let pname = match d.name.strip_prefix("grpc_") {
                Some("pass") | None => d.name.clone(),
                Some(rest) => format!("proxy_{rest}"),
            };
            let c = comment_of(d);
            match pname.as_str() {
                "proxy_pass" | "grpc_pass" => proxy = Some((d, pname == "grpc_pass")),
                "stub_status" => {
                    dead = Some(d);
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::NoEquivalent,
                        "the [admin] listener's stats page and /metrics show Tollgate's counters",
                    );
                }
                "fastcgi_pass" | "uwsgi_pass" | "scgi_pass" | "memcached_pass" => {
                    dead = Some(d);
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::NoEquivalent,
                        "Tollgate speaks HTTP to its servers (no FastCGI, uwsgi, SCGI or memcached): serve the \
                         application over HTTP and proxy_pass to it; this location is not translated",
                    );
                }
                "rewrite" if internal_rewrite(d) => {
                    if action.is_some() {
                        self.log.done(d);
                        continue;
                    }
                    match path_rewrite(d) {
                        Ok(v) if rewrite.is_none() => {
                            self.log.done(d);
                            rewrite = Some((v, comment_of(d)));
                            if d.arg(2) != "break" {
                                self.log.warn_in(
                                    &mut notes,
                                    d,
                                    Kind::Approximate,
                                    "nginx looks for the location again with the new path; here the request stays \
                                     with this location (`break` is what Tollgate does)",
                                );
                            }
                        }
                        Ok(_) => self.log.warn_in(
                            &mut notes,
                            d,
                            Kind::NoEquivalent,
                            "a second internal rewrite in the location: only the first is translated",
                        ),
                        Err(why) => self.log.warn_in(&mut notes, d, Kind::NoEquivalent, why),
                    }
                }
                "return" | "rewrite" => {
                    if action.is_some() {
                        self.log.done(d);
                        continue;
                    }
                    match rewrite_act(&mut self.log, &mut notes, d, ctx.names) {
                        Act::Do(k, v, None, a) => {
                            action = Some((k, v, c));
                            answered = Some(d);
                            self.log.done(d);
                            if let Some(a) = a {
                                action_approx = Some((d, a));
                            }
                        }
                        Act::Do(k, v, Some(extra), _) => {
                            let mut cs = base.clone();
                            cs.push(extra);
                            let mut r = Table::default();
                            r.comments.push(comment_of(d));
                            if let Some(w) = and(cs) {
                                r.set("when", w, "");
                            }
                            r.set(&k, v, self.log.com(d));
                            pre_rules.push(Rule { t: r, when: true, backend_only: None });
                        }
                        Act::Skip => {}
                    }
                }
                "proxy_set_header" => {
                    if let Some(e) = self.request_header(d, &mut notes, &mut websocket) {
                        edits.push(e);
                    }
                }
                "add_header" => {
                    let (n, v) = (d.arg(0), d.arg(1));
                    if v.contains("$upstream_cache_status") {
                        self.log.warn_in(
                            &mut notes,
                            d,
                            Kind::NoEquivalent,
                            "not needed: responses through a cache zone carry Cache-Status (RFC 9211)",
                        );
                        continue;
                    }
                    match map_vars(v) {
                        Ok(v) => {
                            edits.push((vec!["set_response_headers".into(), n.to_string()], V::s(v), self.log.com(d)));
                            if d.arg(2) != "always" {
                                self.log.warn_in(
                                    &mut notes,
                                    d,
                                    Kind::Approximate,
                                    "set on every response from a server (nginx without `always`: on 2xx and 3xx only), \
                                     replacing the server's",
                                );
                            }
                        }
                        Err(var) => self.log.warn_in(&mut notes, d, Kind::NoEquivalent, format!("{var}: Tollgate has no such variable")),
                    }
                }
                "proxy_hide_header" | "more_clear_headers" => {
                    for n in &d.args {
                        edits.push((vec!["delete_response_headers".into()], V::s(n), String::new()));
                    }
                    if let Some(e) = edits.last_mut() {
                        e.2 = self.log.com(d);
                    }
                }
                "proxy_pass_header" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "not needed: Tollgate passes the server's header fields (hop-by-hop ones aside)",
                ),
                "proxy_http_version" => {
                    let msg = if d.arg(0) == "1.1" {
                        "not needed: Tollgate speaks HTTP/1.1 to servers, with keep-alive"
                    } else {
                        "Tollgate speaks HTTP/1.1 to servers (proto = \"h2\" for HTTP/2)"
                    };
                    self.log.warn_in(&mut notes, d, Kind::NoEquivalent, msg);
                }
                "proxy_redirect" => {
                    let (k, msg) = match d.arg(0) {
                        "off" => (Kind::NoEquivalent, "not needed: Tollgate does not rewrite Location headers"),
                        "default" => (Kind::Approximate, "Tollgate does not rewrite the server's Location and Refresh headers"),
                        _ => (Kind::NoEquivalent, "Tollgate does not rewrite the server's Location and Refresh headers"),
                    };
                    self.log.warn_in(&mut notes, d, k, msg);
                }
                "proxy_connect_timeout" | "proxy_read_timeout" | "proxy_send_timeout" => {
                    match units::duration_ms(d.arg(0), false).filter(|ms| *ms > 0) {
                        Some(ms) => timeouts.push((if pname == "proxy_connect_timeout" { "connect" } else { "server" }, ms, d)),
                        None => self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "not a duration above 0"),
                    }
                }
                "proxy_next_upstream" => {
                    if d.arg(0) == "off" {
                        backend_keys.push(("retries".into(), V::Int(0), d));
                    }
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::Approximate,
                        "Tollgate retries a request on another server only when the connection fails (retries, \
                         redispatch); not after an error, a timeout or a 5xx once the request is sent",
                    );
                }
                "proxy_next_upstream_tries" => {
                    if let Ok(n) = d.arg(0).parse::<i64>()
                        && n > 0 {
                            backend_keys.push(("retries".into(), V::Int((n - 1).clamp(0, 100)), d));
                        }
                    self.log.warn_in(&mut notes, d, Kind::Approximate, "retries = tries - 1, for failed connections only");
                }
                "proxy_next_upstream_timeout" => {
                    self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "retries are bounded by their number only")
                }
                n if n.starts_with("proxy_ssl_") => ssl.push(d),
                "proxy_cache" => cache = Some(d),
                "proxy_cache_use_stale" => stale = Some(d),
                "proxy_cache_valid" | "proxy_cache_key" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::Approximate,
                    "Tollgate's cache keys by scheme, host, path and query, and keeps what the response's Cache-Control \
                     or Expires allows (heuristic_percent of Last-Modified else)",
                ),
                "proxy_cache_bypass" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "not translated: requests with a body, an upgrade or no-cache go past the cache anyway; a rule's \
                     `cache = false` sends others past it",
                ),
                "proxy_intercept_errors" | "proxy_ignore_headers" | "proxy_method" | "proxy_pass_request_headers"
                | "proxy_pass_request_body" | "proxy_set_body" | "proxy_cookie_domain" | "proxy_cookie_path"
                | "proxy_cookie_flags" | "proxy_store" | "proxy_store_access" | "proxy_pass_trailers" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "no equivalent: Tollgate passes requests and responses as they are, but for header edits",
                ),
                "allow" | "deny" => access.push(d),
                "auth_basic" => auth_basic = Some(d),
                "auth_basic_user_file" => auth_file = Some(d),
                "satisfy" => {
                    let k = if d.arg(0) == "any" { Kind::NoEquivalent } else { Kind::Approximate };
                    let msg = if d.arg(0) == "any" {
                        "`satisfy any` is not translated: the address rules and the password are both required"
                    } else {
                        "not needed: the address rules and the password are both required"
                    };
                    self.log.warn_in(&mut notes, d, k, msg);
                }
                "limit_req" => limits.push(d),
                "limit_req_log_level" | "limit_req_dry_run" => {
                    self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "no equivalent in Tollgate's rate limits")
                }
                "root" => root = Some(d),
                "alias" => alias = Some(d),
                "index" => index = Some(d),
                "try_files" => try_files = Some(d),
                "internal" => internal = Some(d),
                "http2_push" if d.arg(0).starts_with('/') => {
                    hints.push(preload(d.arg(0)));
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::Approximate,
                        "sent as a 103 Early Hints Link (rel=preload) for the browser to fetch: no browser takes \
                         HTTP/2 pushes any more, and Tollgate does not push",
                    );
                }
                "expires" => match expires(d) {
                    Some(v) => {
                        edits.push((vec!["set_response_headers".into(), "Cache-Control".into()], V::s(v), self.log.com(d)));
                        self.log.warn_in(&mut notes, d, Kind::Approximate, "Cache-Control: max-age only (no Expires header)");
                    }
                    None => self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "not carried over"),
                },
                "access_log" if d.arg(0) == "off" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "Tollgate logs every request (one access log for all)",
                ),
                "access_log" => super::access_log(&mut self.log, &mut self.out.global, d),
                "client_max_body_size" | "client_body_timeout" | "send_timeout" | "keepalive_timeout"
                | "client_header_timeout" | "error_page" | "limit_conn" | "large_client_header_buffers" => {
                    self.log.warn_in(
                        &mut notes,
                        d,
                        Kind::NoEquivalent,
                        "in a location: Tollgate sets it per frontend (write it in the server block)",
                    )
                }
                n if n.starts_with("gzip") => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "in a location: compression is set per frontend or backend",
                ),
                "default_type" => self.log.warn_in(
                    &mut notes,
                    d,
                    Kind::NoEquivalent,
                    "not carried over: a static backend's default_type is application/octet-stream",
                ),
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        notes.push(c);
                    }
                }
            }
        }
        let answered = answered.filter(|_| internal.is_none());
        if let Some(ret) = answered {
            let mut skipped: Vec<&Directive> = access.drain(..).chain(limits.drain(..)).collect();
            skipped.extend(l.blocks.iter().copied().filter(|b| b.name == "limit_except"));
            for d in skipped {
                self.log.done_all(d);
                notes.push(format!(
                    "{}\n  not needed: nginx's `{}` answers before this is looked at",
                    comment_of(d),
                    ret.name
                ));
            }
        }
        // Blocks inside the location: `if`, `limit_except`.
        for b in &l.blocks {
            match b.name.as_str() {
                "if" => {
                    let mut o = RulesOut::default();
                    self.rewrite_rule(ctx, b, &base, &mut o);
                    for r in o.rules.iter_mut() {
                        r.when = true;
                    }
                    pre_rules.extend(o.rules);
                }
                "limit_except" if answered.is_some() => {}
                "limit_except" => self.limit_except(b, &base, &l.dirs, &mut notes, &mut pre_rules),
                _ => {
                    if let Some(c) = other(&mut self.log, b) {
                        notes.push(c);
                    }
                }
            }
        }
        let when = and(base.clone());
        let has_when = when.is_some();
        // Access rules and rate limits come before the location's own rule.
        let mut denied_all = false;
        if !access.is_empty()
            && let Some(den) = access_cond(&mut self.log, &mut notes, &access)
        {
            denied_all = matches!(&den, V::Table(p) if p.is_empty());
            let mut cs = base.clone();
            cs.push(den);
            let mut r = Table::default();
            r.comments.push(format!("{}: allow/deny", comment_of(l.d)));
            for d in &access {
                r.comments.push(comment_of(d));
            }
            let w = and(cs);
            let hw = w.is_some();
            if let Some(w) = w {
                r.set("when", w, "");
            }
            r.set("deny", V::Int(403), "");
            pre_rules.push(Rule { t: r, when: hw, backend_only: None });
        }
        for d in &limits {
            let zone = d.args.iter().find_map(|a| a.strip_prefix("zone=")).unwrap_or("");
            let Some(z) = self.req_zones.get(zone).cloned() else {
                self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "no limit_req_zone of that name was translated");
                continue;
            };
            let burst =
                d.args.iter().find_map(|a| a.strip_prefix("burst=")).and_then(|b| b.parse::<i64>().ok()).unwrap_or(0);
            let mut cs = base.clone();
            cs.push(cond(
                "counter",
                V::table([
                    ("table", V::s(&z.table)),
                    ("name", V::s("http_req_rate")),
                    ("above", V::Int(z.rate.saturating_add(burst))),
                ]),
            ));
            let mut r = Table::default();
            r.comments.push(format!("{}: rate limit", comment_of(l.d)));
            if let Some(w) = and(cs) {
                r.set("when", w, "");
            }
            r.set("deny", V::Int(self.limit_req_status), self.log.com(d));
            self.log.warn_to(
                &mut r,
                d,
                Kind::Approximate,
                "a sliding count of the frontend's requests per client over the period, above rate + burst, is \
                 refused (nginx: a leaky bucket of this location's requests, burst and nodelay shaping it)",
            );
            pre_rules.push(Rule { t: r, when: true, backend_only: None });
            out.track(&z.table);
        }
        // The action.
        let mut backend_only = None;
        let mut backend: Option<String> = None;
        if let Some(d) = internal {
            for x in [root, alias, index, try_files].into_iter().flatten() {
                self.log.done(x);
            }
            let c = self.log.com(d);
            action = Some(("deny".into(), V::Int(404), c));
            self.log.warn_in(
                &mut notes,
                d,
                Kind::Approximate,
                "internal: clients get 404 here; nginx's error_page and try_files reach it (error_pages use its file)",
            );
        }
        if denied_all {
            // Everything is refused: the rest is never used.
        } else if let Some((k, v, c)) = action.take() {
            action = Some((k, v, c));
            if let Some((d, _)) = proxy {
                self.log.done(d);
            }
        } else if let Some((d, grpc)) = proxy {
            // An internal rewrite wins over proxy_pass's URI (nginx then
            // sends the rewritten path as it is).
            let mut uri_rewrite = None;
            backend = self.proxy_target(d, grpc, &l.path, l.kind, &mut notes, &mut uri_rewrite);
            if rewrite.is_none() {
                rewrite = uri_rewrite;
            }
            if let Some(b) = &backend {
                action = Some(("backend".into(), V::s(b), self.log.com(d)));
            }
        } else if let Some(d) = dead {
            for x in [root, alias, index, try_files].into_iter().flatten() {
                self.log.done(x);
            }
            let status = if d.name == "stub_status" { 404 } else { 503 };
            action = Some((
                "deny".into(),
                V::Int(status),
                format!("{} is not translated: refused here rather than served by another rule", d.name),
            ));
        } else {
            match self.static_action(ctx, l, root, alias, index, try_files, named, &mut notes) {
                Some(b) => action = Some(("backend".into(), V::s(&b), String::new())),
                None => {
                    if action.is_none() && access.is_empty() && limits.is_empty() {
                        let mut n = Vec::new();
                        self.log.warn_in(
                            &mut n,
                            l.d,
                            Kind::NoEquivalent,
                            "nothing here Tollgate can serve (no proxy_pass, no root): requests for it go to the next rule that matches",
                        );
                        notes.extend(n);
                    }
                }
            }
        }
        if denied_all {
            for d in &l.dirs {
                self.log.done(d);
            }
        }
        // Backend settings written in the location.
        if let Some(b) = &backend {
            self.backend_settings(b, &timeouts, websocket, &backend_keys, &ssl, proxy.map(|p| p.0), &mut notes);
        } else {
            for (_, _, d) in &timeouts {
                self.log.done(d);
            }
            for d in &ssl {
                self.log.done(d);
            }
            for (_, _, d) in &backend_keys {
                self.log.done(d);
            }
        }
        // Password. One that cannot be carried over closes the location
        // rather than leave it open.
        let mut auth_lost = false;
        let auth = match (auth_basic, auth_file) {
            (Some(a), _) if a.arg(0) == "off" => {
                self.log.done(a);
                if let Some(f) = auth_file {
                    self.log.done(f);
                }
                None
            }
            (Some(a), Some(f)) => {
                let v = self.auth_of(a, f, &mut notes);
                auth_lost = v.is_none();
                v.map(|v| (v, comment_of(a)))
            }
            (Some(a), None) => {
                self.log.warn_in(
                    &mut notes,
                    a,
                    Kind::NoEquivalent,
                    "no auth_basic_user_file: nothing to check against",
                );
                auth_lost = true;
                None
            }
            (None, Some(f)) => {
                self.log.done(f);
                None
            }
            (None, None) => None,
        };
        // Cache.
        let mut cache_v = None;
        if let Some(d) = cache {
            if d.arg(0) == "off" {
                self.log.done(d);
            } else if let Some(z) = self.cache_zones.get(d.arg(0)).cloned() {
                if backend.as_ref().is_some_and(|b| self.is_static(b)) || proxy.is_none() {
                    self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "only responses from servers are cached");
                } else {
                    cache_v = Some((V::table([("zone", V::s(&z))]), self.log.com(d)));
                    if let Some(s) = stale {
                        self.stale(&z, s, &mut notes);
                    }
                }
            } else {
                self.log.warn_in(&mut notes, d, Kind::NoEquivalent, "no proxy_cache_path zone of that name");
            }
        }
        if let Some(s) = stale
            && !self.log.is_done(s)
        {
            self.log.warn_in(&mut notes, s, Kind::NoEquivalent, "no cache zone here");
        }
        // The location's rule.
        out.rules.extend(pre_rules);
        if denied_all {
            return;
        }
        if auth_lost && action.as_ref().is_none_or(|(k, ..)| k == "backend") {
            let body = "this location asks for a password the import could not carry over\n";
            action = Some((
                "deny".to_string(),
                V::table([("status", V::Int(403)), ("body", V::s(body))]),
                "auth_basic without a userlist Tollgate can take: denied until one is written".to_string(),
            ));
        }
        if action.is_none() && auth.is_none() {
            self.note_rule(out, notes);
            return;
        }
        if let Some(w) = when {
            rule.set("when", w, "");
        }
        if action.as_ref().is_some_and(|(k, ..)| k != "backend") {
            // Edits are not applied to what Tollgate answers itself.
            edits.clear();
        }
        let action_kind: Option<String> = action.as_ref().map(|(k, ..)| k.clone());
        let only_backend = edits.is_empty() && auth.is_none() && cache_v.is_none() && rewrite.is_none();
        if let Some((k, v, c)) = action {
            if k == "backend"
                && only_backend
                && let V::Str(b) = &v
            {
                backend_only = Some(b.clone());
            }
            rule.set(&k, v, c);
        }
        if let Some((d, a)) = action_approx {
            self.log.warn_to(&mut rule, d, Kind::Approximate, a);
        }
        if let Some((v, c)) = rewrite.filter(|_| rule.has("backend")) {
            rule.set("rewrite_path", v, c);
        }
        if !hints.is_empty() && rule.has("backend") {
            rule.set("early_hints", V::strs(hints), "http2_push");
        }
        if let Some((v, c)) = auth {
            if rule.has("backend") || action_kind.is_none() {
                rule.set("auth", v, c);
            } else {
                // A redirect or an error answers without going to a server:
                // nginx's `return` runs before the password is asked for.
                rule.note(format!("{c}\n  not needed: this rule answers before a password is asked for"));
            }
        }
        if let Some((v, c)) = cache_v {
            rule.set("cache", v, c);
        }
        for (k, mut v, c) in edits {
            let parts: Vec<&str> = k.iter().map(String::as_str).collect();
            if parts.first() == Some(&"set_response_headers") {
                // add_header twice for one name (expires and add_header
                // Cache-Control): both values, as nginx sends both.
                let pk = crate::out::path_key(&parts);
                if let (Some(V::Str(old)), V::Str(new)) = (rule.get(&pk), &v) {
                    v = V::s(format!("{old}, {new}"));
                }
            }
            if parts.len() == 1 {
                rule.push(parts.first().copied().unwrap_or_default(), v, c);
            } else {
                rule.set_path(&parts, v, c);
            }
        }
        for n in notes {
            rule.note(n);
        }
        out.rules.push(Rule { t: rule, when: has_when, backend_only });
    }
}

impl Cx {
    /// `auth_basic` with its `auth_basic_user_file` as an `auth` value; None
    /// when the userlist cannot be made.
    fn auth_of(&mut self, a: &Directive, f: &Directive, notes: &mut Vec<String>) -> Option<V> {
        self.log.done(a);
        let u = self.userlist(f, notes)?;
        let realm: String = a.arg(0).chars().filter(|c| (' '..='~').contains(c)).take(200).collect();
        let mut pairs = vec![("userlist".to_string(), V::s(u))];
        if !realm.is_empty() {
            pairs.push(("realm".into(), V::s(realm)));
        }
        Some(V::Table(pairs))
    }

    /// `limit_except METHODS { ... }`: what it holds applies to the other
    /// methods (GET brings HEAD along, as in nginx). Address rules deny,
    /// a password is asked for; what cannot be carried over closes those
    /// methods rather than leave them open.
    fn limit_except(
        &mut self,
        b: &Directive,
        base: &[V],
        loc_dirs: &[&Directive],
        notes: &mut Vec<String>,
        pre_rules: &mut Vec<Rule>,
    ) {
        let mut methods: Vec<String> = Vec::new();
        for m in &b.args {
            let m = m.to_ascii_uppercase();
            let with: &[&str] = if m == "GET" { &["GET", "HEAD"] } else { &[] };
            for x in std::iter::once(m.as_str()).chain(with.iter().copied()) {
                if !methods.iter().any(|y| y == x) {
                    methods.push(x.to_string());
                }
            }
        }
        if methods.is_empty() {
            self.log.done_all(b);
            self.log.warn_in(notes, b, Kind::NoEquivalent, "limit_except without a method: not translated");
            return;
        }
        let others = cond("not", cond("method", V::strs(methods)));
        let inner: Vec<&Directive> = b.children().iter().collect();
        let access: Vec<&Directive> = inner.iter().copied().filter(|d| d.name == "allow" || d.name == "deny").collect();
        let (mut realm, mut file) = (None, None);
        // A directive that restricts these methods in a way Tollgate cannot.
        let mut closed: Option<String> = None;
        for d in &inner {
            match d.name.as_str() {
                "allow" | "deny" => {}
                "auth_basic" => realm = Some(*d),
                "auth_basic_user_file" => file = Some(*d),
                "satisfy" => {
                    let msg = if d.arg(0) == "any" {
                        "`satisfy any` is not translated: the address rules and the password are both required"
                    } else {
                        "not needed: the address rules and the password are both required"
                    };
                    let k = if d.arg(0) == "any" { Kind::NoEquivalent } else { Kind::Approximate };
                    self.log.warn_in(notes, d, k, msg);
                }
                n if n.starts_with("auth_") => {
                    self.log.warn_in(
                        notes,
                        d,
                        Kind::NoEquivalent,
                        "not translated in limit_except: the methods it restricts are refused (403) instead",
                    );
                    closed.get_or_insert_with(|| format!("{} is not translated", d.name));
                }
                _ => {
                    if let Some(c) = other(&mut self.log, d) {
                        notes.push(c);
                    }
                }
            }
        }
        self.log.done(b);
        let rule = |base: &[V], extra: Option<V>, key: &str, v: V, comment: String| {
            let mut cs = base.to_vec();
            cs.push(others.clone());
            cs.extend(extra);
            let mut r = Table::default();
            r.comments.push(comment);
            if let Some(w) = and(cs) {
                r.set("when", w, "");
            }
            r.set(key, v, "");
            Rule { t: r, when: true, backend_only: None }
        };
        if !access.is_empty()
            && let Some(den) = access_cond(&mut self.log, notes, &access)
        {
            pre_rules.push(rule(base, Some(den), "deny", V::Int(403), self.log.com(b)));
        }
        // The password: limit_except's own auth_basic and file, else the
        // location's (nginx merges them in).
        if realm.is_some() || file.is_some() {
            let inherited = |n: &str| loc_dirs.iter().rev().find(|d| d.name == n).copied();
            let a = realm.or_else(|| inherited("auth_basic"));
            let f = file.or_else(|| inherited("auth_basic_user_file"));
            match (a, f) {
                (Some(a), f) if a.arg(0) == "off" => {
                    self.log.done(a);
                    if let Some(f) = f {
                        self.log.done(f);
                    }
                    if realm.is_some() && inherited("auth_basic").is_some_and(|x| x.arg(0) != "off") {
                        self.log.warn_in(
                            notes,
                            a,
                            Kind::Approximate,
                            "the location's password is asked for every method (nginx: not for these)",
                        );
                    }
                }
                (Some(a), Some(f)) => match self.auth_of(a, f, notes) {
                    Some(v) => pre_rules.push(rule(base, None, "auth", v, self.log.com(b))),
                    None => {
                        closed.get_or_insert_with(|| "the password file could not be read".into());
                    }
                },
                (Some(a), None) => {
                    self.log.warn_in(notes, a, Kind::NoEquivalent, "no auth_basic_user_file: nothing to check against");
                    closed.get_or_insert_with(|| "auth_basic has no auth_basic_user_file".into());
                }
                (None, Some(f)) => {
                    // auth_basic is off by default: the file alone asks nothing.
                    self.log.done(f);
                }
                (None, None) => {}
            }
        }
        if let Some(why) = closed {
            let body = "this location restricts these methods in a way the import could not carry over\n";
            let v = V::table([("status", V::Int(403)), ("body", V::s(body))]);
            pre_rules.push(rule(
                base,
                None,
                "deny",
                v,
                format!("{}: {why}: denied until written by hand", self.log.com(b)),
            ));
        }
    }
}

/// `expires`: the Cache-Control it stands for.
pub(crate) fn expires(d: &Directive) -> Option<String> {
    let v = d.args.iter().find(|a| *a != "modified")?;
    match v.as_str() {
        "off" => None,
        "epoch" => Some("no-cache".into()),
        "max" => Some("max-age=315360000".into()),
        v if v.starts_with('-') => Some("no-cache".into()),
        v => units::duration_ms(v.trim_start_matches('+'), false).map(|ms| format!("max-age={}", ms / 1000)),
    }
}

/// `rewrite <regex> <path> [break|last]`: a rewrite of the path the request
/// goes on with (not a redirect).
fn internal_rewrite(d: &Directive) -> bool {
    let to = d.arg(1);
    matches!(d.arg(2), "" | "break" | "last") && to.starts_with('/')
}

/// Whether `re` ends with `suffix` as written, not with an escaped last
/// character (`\$` is a dollar, `\.*` dots).
fn ends_unescaped(re: &str, suffix: &str) -> bool {
    re.strip_suffix(suffix).is_some_and(|head| head.chars().rev().take_while(|c| *c == '\\').count() % 2 == 0)
}

/// An internal rewrite as `rewrite_path`: `$1`..`$9` are the regex's
/// captures in both (written `${1}` so that a letter after it stays a letter).
/// nginx replaces the whole URI with the replacement when the regex matches
/// anywhere in it; Tollgate replaces the first match, so a regex that does
/// not already span the path is made to (its captures keep their numbers).
pub(crate) fn path_rewrite(d: &Directive) -> Result<V, String> {
    let (regex, to) = (d.arg(0), d.arg(1));
    if !regex_ok(regex) {
        return Err("a regular expression Tollgate's regex engine does not take".into());
    }
    let spans = regex.starts_with('^')
        && !regex.contains('|')
        && (ends_unescaped(regex, "$") || ends_unescaped(regex, ".*") || ends_unescaped(regex, "(.*)"));
    let regex = if spans { regex.to_string() } else { format!("^.*?(?:{regex}).*$") };
    if !regex_ok(&regex) {
        return Err("a regular expression Tollgate's regex engine does not take".into());
    }
    if to.contains(['?', '#']) || to.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a rewrite that sets the query string: Tollgate rewrites the path only".into());
    }
    let mut out = String::new();
    let mut chars = to.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('$', Some(n)) if n.is_ascii_digit() => {
                let n = chars.next().unwrap_or('0');
                out.push_str(&format!("${{{n}}}"));
            }
            ('$', _) => {
                return Err(
                    "a rewrite built from nginx variables: Tollgate's replacement takes the regex's captures only"
                        .into(),
                );
            }
            (c, _) => out.push(c),
        }
    }
    Ok(V::table([("regex", V::s(regex)), ("to", V::s(out))]))
}

/// A `Link` value preloading `path`, with the `as` its extension calls for.
fn preload(path: &str) -> String {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    let kind = match ext.as_str() {
        "css" => Some("style"),
        "js" | "mjs" => Some("script"),
        "png" | "jpg" | "jpeg" | "gif" | "svg" | "webp" | "avif" | "ico" => Some("image"),
        "woff" | "woff2" | "ttf" | "otf" => Some("font"),
        _ => None,
    };
    match kind {
        Some("font") => format!("<{path}>; rel=preload; as=font; crossorigin"),
        Some(k) => format!("<{path}>; rel=preload; as={k}"),
        None => format!("<{path}>; rel=preload"),
    }
}
