//! What a location says about its server: `proxy_pass`, the headers it sets,
//! timeouts and TLS of the backend, cache staleness.

use super::location::LocKind;
use super::parse::Directive;
use super::rewrite::map_vars;
use super::upstream::{host_port, set_backend_key};
use super::{Cx, comment_of};
use crate::out::V;
use crate::{Kind, units};

impl Cx {
    /// A `proxy_set_header`: the edit, or a note on why none is needed.
    pub(crate) fn request_header(
        &mut self,
        d: &Directive,
        notes: &mut Vec<String>,
        ws: &mut bool,
    ) -> Option<(Vec<String>, V, String)> {
        let (name, value) = (d.arg(0), d.arg(1));
        let lname = name.to_ascii_lowercase();
        let note =
            |log: &mut super::Log, notes: &mut Vec<String>, msg: &str| log.warn_in(notes, d, Kind::NoEquivalent, msg);
        match (lname.as_str(), value) {
            ("host", "$host" | "$http_host") => {
                note(&mut self.log, notes, "not needed: Tollgate passes the request's Host to the server");
                return None;
            }
            ("host", "$proxy_host") => {
                note(
                    &mut self.log,
                    notes,
                    "Tollgate passes the request's Host (set Host to the server's name by hand if it needs it)",
                );
                return None;
            }
            ("x-forwarded-for", "$proxy_add_x_forwarded_for")
            | ("x-forwarded-proto", "$scheme")
            | ("x-forwarded-host", "$host" | "$http_host")
            | ("x-forwarded-port", "$server_port") => {
                note(
                    &mut self.log,
                    notes,
                    "not needed: forward_for (on by default) sets X-Forwarded-For, -Proto, -Host and -Port",
                );
                return None;
            }
            ("upgrade", "$http_upgrade") | ("connection", "upgrade" | "Upgrade" | "$connection_upgrade") => {
                *ws = true;
                note(
                    &mut self.log,
                    notes,
                    "not needed: WebSocket upgrades pass through (the frontend's `upgrades`, websocket by default)",
                );
                return None;
            }
            ("connection", "" | "close" | "keep-alive") => {
                note(
                    &mut self.log,
                    notes,
                    "not needed: Tollgate manages the connections to servers (kept alive in a pool)",
                );
                return None;
            }
            (_, "") => return Some((vec!["delete_request_headers".into()], V::s(name), self.log.com(d))),
            _ => {}
        }
        match map_vars(value) {
            Ok(v) => Some((vec!["set_request_headers".into(), name.to_string()], V::s(v), self.log.com(d))),
            Err(var) => {
                self.log.warn_in(notes, d, Kind::NoEquivalent, format!("{var}: Tollgate has no such variable"));
                None
            }
        }
    }

    /// The backend a `proxy_pass` (or `grpc_pass`) goes to.
    pub(crate) fn proxy_target(
        &mut self,
        d: &Directive,
        grpc: bool,
        loc_path: &str,
        kind: LocKind,
        notes: &mut Vec<String>,
        rewrite: &mut Option<(V, String)>,
    ) -> Option<String> {
        let target = d.arg(0);
        let (scheme, rest) = match target.split_once("://") {
            Some((s, r)) => (s, r),
            None if grpc => ("grpc", target),
            None => ("", target),
        };
        let tls = match scheme {
            "http" | "grpc" => false,
            "https" | "grpcs" => true,
            _ => {
                self.log.warn_in(notes, d, Kind::NoEquivalent, "not an http:// or https:// address");
                return None;
            }
        };
        if target.contains('$') {
            self.log.warn_in(
                notes,
                d,
                Kind::NoEquivalent,
                "a server chosen by variables: Tollgate's backends are fixed (the location is not translated)",
            );
            return None;
        }
        if rest.starts_with("unix:") {
            self.log.warn_in(notes, d, Kind::NoEquivalent, "Tollgate connects to servers over TCP only");
            return None;
        }
        let (hostport, uri) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let name = if let Some(n) = self.http_upstreams.get(hostport) {
            n.clone()
        } else {
            let Some((h, p)) = host_port(hostport, Some(if tls { 443 } else { 80 })) else {
                self.log.warn_in(notes, d, Kind::NoEquivalent, "not an upstream or host:port");
                return None;
            };
            self.address_backend(if tls { "https" } else { "http" }, &h, p, false, d)
        };
        let same = matches!(kind, LocKind::Prefix | LocKind::NoRegex) && uri == loc_path;
        if !uri.is_empty() && !same {
            // nginx replaces the part of the normalized URI the location
            // matched with the URI given: rewrite_path does the same.
            let regex = match kind {
                LocKind::Prefix | LocKind::NoRegex => Some(format!("^{}", regex::escape(loc_path))),
                LocKind::Exact => Some(format!("^{}$", regex::escape(loc_path))),
                _ => None,
            };
            match regex {
                Some(regex)
                    if !uri.contains(['?', '#']) && !uri.chars().any(|c| c.is_whitespace() || c.is_control()) =>
                {
                    let to = uri.replace('$', "$$");
                    *rewrite = Some((
                        V::table([("regex", V::s(regex)), ("to", V::s(to))]),
                        format!("{}: the path the location matched becomes {uri}", comment_of(d)),
                    ));
                }
                _ => self.log.warn_in(
                    notes,
                    d,
                    Kind::NoEquivalent,
                    format!(
                        "path not rewritten: the server gets the path the client sent (nginx replaces {loc_path} with \
                         {uri}, which rewrite_path cannot express here)"
                    ),
                ),
            }
        }
        let Some(b) = self.out.backends.iter_mut().find(|b| b.name == name) else { return Some(name) };
        if grpc {
            let proto = if tls { "h2" } else { "h2c" };
            set_backend_key(&mut self.log, &mut b.table, "proto", V::s(proto), d);
        }
        if tls && !b.table.has("tls") {
            b.table.set("tls", V::table([("verify", V::s("none"))]), comment_of(d));
        }
        Some(name)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backend_settings(
        &mut self,
        name: &str,
        timeouts: &[(&str, u64, &Directive)],
        websocket: bool,
        keys: &[(String, V, &Directive)],
        ssl: &[&Directive],
        pass: Option<&Directive>,
        notes: &mut Vec<String>,
    ) {
        let Some(b) = self.out.backends.iter_mut().find(|b| b.name == name) else { return };
        let static_ = b.table.has("static");
        let mut server_ms: Option<(u64, &Directive)> = None;
        for (k, ms, d) in timeouts {
            if static_ {
                self.log.done(d);
                continue;
            }
            if *k == "connect" {
                set_backend_key(&mut self.log, &mut b.table, "timeout.connect", units::ms_value(*ms), d);
            } else {
                if d.name.ends_with("send_timeout") {
                    self.log.warn_in(
                        notes,
                        d,
                        Kind::Approximate,
                        "timeout.server bounds the server's silence both ways: the larger of read and send is kept",
                    );
                }
                if server_ms.is_none_or(|(m, _)| *ms > m) {
                    if let Some((_, old)) = server_ms {
                        self.log.done(old);
                    }
                    server_ms = Some((*ms, d));
                } else {
                    self.log.done(d);
                }
            }
        }
        if let Some((ms, d)) = server_ms {
            set_backend_key(&mut self.log, &mut b.table, "timeout.server", units::ms_value(ms), d);
            if websocket {
                set_backend_key(&mut self.log, &mut b.table, "timeout.tunnel", units::ms_value(ms), d);
            }
        }
        for (k, v, d) in keys {
            set_backend_key(&mut self.log, &mut b.table, k, v.clone(), d);
        }
        if ssl.is_empty() && !b.table.has("tls") {
            return;
        }
        let tls = b.table.has("tls");
        let mut verify = false;
        let mut pairs: Vec<(String, V)> = Vec::new();
        for d in ssl {
            let v = d.arg(0);
            match d.name.trim_start_matches("grpc_").trim_start_matches("proxy_") {
                "ssl_verify" => {
                    verify = v == "on";
                    self.log.done(d);
                }
                "ssl_trusted_certificate" => pairs.push(("ca".into(), V::s(v))),
                "ssl_name" if !v.contains('$') => pairs.push(("sni".into(), V::s(v))),
                "ssl_certificate" => pairs.push(("cert".into(), V::s(v))),
                "ssl_certificate_key" => pairs.push(("key".into(), V::s(v))),
                "ssl_server_name" => self.log.warn_in(
                    notes,
                    d,
                    Kind::NoEquivalent,
                    "not needed: Tollgate sends SNI (the host of the server's addr, or tls.sni)",
                ),
                _ => self.log.warn_in(notes, d, Kind::NoEquivalent, "rustls decides it (TLS 1.2 and 1.3, AEAD suites)"),
            }
            if !self.log.is_done(d) {
                self.log.done(d);
            }
        }
        if !tls {
            for d in ssl {
                self.log.warn_in(notes, d, Kind::NoEquivalent, "the server is not reached over TLS (http://)");
            }
            return;
        }
        if verify {
            pairs.retain(|(k, _)| k != "verify");
        } else {
            pairs.retain(|(k, _)| k != "ca");
            pairs.insert(0, ("verify".into(), V::s("none")));
            if let Some(d) = pass {
                self.log.warn_in(
                    notes,
                    d,
                    Kind::Approximate,
                    "tls = { verify = \"none\" }: nginx does not verify the server's certificate by default, and \
                     Tollgate warns about it at every load (proxy_ssl_verify on with proxy_ssl_trusted_certificate to \
                     check it); Tollgate sends SNI, nginx not by default",
                );
            }
        }
        b.table.set("tls", V::Table(pairs), "");
    }

    pub(crate) fn is_static(&self, name: &str) -> bool {
        self.out.backend(name).is_some_and(|b| b.table.has("static"))
    }

    pub(crate) fn stale(&mut self, zone: &str, d: &Directive, notes: &mut Vec<String>) {
        let errs = d.args.iter().any(|a| a == "error" || a == "timeout" || a.starts_with("http_5"));
        let Some(t) = self.out.caches.iter_mut().find(|t| t.get("name") == Some(&V::s(zone))) else { return };
        if errs {
            if !t.has("stale_if_error") {
                t.set("stale_if_error", V::s("1d"), comment_of(d));
            }
            self.log.warn_in(
                notes,
                d,
                Kind::Approximate,
                "the zone's stale_if_error (1 day past freshness, for every location using it) serves a stale \
                 response when the origin fails; `updating` is the response's own stale-while-revalidate",
            );
        } else {
            self.log.warn_in(notes, d, Kind::NoEquivalent, "nothing Tollgate's stale_if_error covers");
        }
    }
}
