//! `mode = "tcp"`: what a tcp frontend or backend refuses, and frontends kept
//! to backends of their own mode. A tcp frontend relays bytes and never reads
//! a request, so every key that acts on HTTP is an error there, named with its
//! line like every other error, rather than a setting silently ignored.

use crate::build::Builder;
use crate::model::{Backend, Mode, Tls};
use crate::raw::*;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use toml::Spanned;

/// Spans of the keys present, by name.
pub(super) type Present<'a> = Vec<(&'a str, Option<Range<usize>>)>;

pub(super) fn span<T>(v: &Option<Spanned<T>>) -> Option<Range<usize>> {
    v.as_ref().map(Spanned::span)
}

impl Builder<'_> {
    /// `mode = "http" | "tcp"`; `http` when absent.
    pub(crate) fn mode(&mut self, m: Option<&Spanned<String>>, key: &str) -> Mode {
        match m.map(|m| (m.get_ref().as_str(), m.span())) {
            None | Some(("http", _)) => Mode::Http,
            Some(("tcp", _)) => Mode::Tcp,
            Some((other, span)) => {
                self.err(span, key, format!("`{other}` is not a mode (use \"http\" or \"tcp\")"));
                Mode::Http
            }
        }
    }

    /// One error per key present, `key.<name>: <why>`.
    pub(super) fn refuse(&mut self, present: Present<'_>, key: &str, why: impl Fn(&str) -> String) {
        for (name, span) in present {
            if let Some(span) = span {
                self.err(span, format!("{key}.{name}"), why(name));
            }
        }
    }

    /// A tcp backend: no persistence cookie, no Basic auth, no balancing on
    /// what a request carries.
    pub(crate) fn tcp_backend(&mut self, b: &RawBackend, key: &str) {
        let name = b.name.get_ref();
        let http_only = |k: &str| format!("`{k}` is for HTTP: backend `{name}` is in mode \"tcp\"");
        self.refuse(
            vec![("cookie", span(&b.cookie)), ("auth", span(&b.auth)), ("cache", span(&b.cache))],
            key,
            http_only,
        );
        // The relay copies bytes over plain TCP: TLS or HTTP/2 to the servers
        // would be silently ignored, so they are refused.
        let transport = |k: &str| {
            format!(
                "`{k}` sets how HTTP reaches the servers: backend `{name}` is in mode \"tcp\" and relays bytes as they are"
            )
        };
        self.refuse(vec![("tls", span(&b.tls)), ("proto", span(&b.proto))], key, transport);
        self.refuse(vec![("server_keep_alive", span(&b.timeout.server_keep_alive))], &format!("{key}.timeout"), |k| {
            format!(
                "`{k}` keeps idle HTTP connections to the servers for reuse: backend `{name}` is in mode \"tcp\", \
                 where each session has a connection of its own"
            )
        });
        if let Some(balance) = &b.balance {
            let algo = balance.get_ref().as_str();
            let what = match algo {
                "uri" => Some("the request path"),
                _ if algo.starts_with("hdr(") => Some("a request header"),
                _ => None,
            };
            if let Some(what) = what {
                self.err(
                    balance.span(),
                    format!("{key}.balance"),
                    format!(
                        "`{algo}` hashes {what}: a tcp backend balances connections, not requests \
                         (use roundrobin, static-rr, leastconn, first, source or random)"
                    ),
                );
            }
        }
        for (j, s) in b.server.iter().enumerate() {
            let cookie = vec![("cookie", span(&s.get_ref().cookie))];
            self.refuse(cookie, &format!("{key}.server[{j}]"), |_| {
                format!("`cookie` names the server in a persistence cookie, which is HTTP: backend `{name}` is in mode \"tcp\"")
            });
            let server = s.get_ref();
            self.refuse(
                vec![("tls", span(&server.tls)), ("proto", span(&server.proto))],
                &format!("{key}.server[{j}]"),
                transport,
            );
        }
    }

    /// A tcp frontend: none of the keys that act on requests or responses, and
    /// rules that only choose a backend, by `src`, `sni` and `tls`.
    pub(crate) fn tcp_frontend(&mut self, f: &RawFrontend, key: &str) {
        let name = f.name.get_ref();
        let http_only = |k: &str| format!("`{k}` is for HTTP: frontend `{name}` is in mode \"tcp\"");
        let l = &f.limits;
        let h = &f.h2;
        let present: Present<'_> = vec![
            ("forward_for", span(&f.forward_for)),
            ("forwarded", span(&f.forwarded)),
            ("request_id", span(&f.request_id)),
            ("h2c", span(&f.h2c)),
            ("auth", span(&f.auth)),
            ("upgrades", span(&f.upgrades)),
            ("path_normalize", span(&f.path_normalize)),
            ("limits.max_header_size", span(&l.max_header_size)),
            ("limits.max_headers", span(&l.max_headers)),
            ("limits.max_uri_size", span(&l.max_uri_size)),
            ("limits.max_request_body", span(&l.max_request_body)),
            ("limits.lookalike_headers", span(&l.lookalike_headers)),
            ("limits.repeated_content_length", span(&l.repeated_content_length)),
            ("h2.max_concurrent_streams", span(&h.max_concurrent_streams)),
            ("h2.initial_window_size", span(&h.initial_window_size)),
            ("h2.connection_window_size", span(&h.connection_window_size)),
            ("h2.max_frame_size", span(&h.max_frame_size)),
            ("h2.max_header_list_size", span(&h.max_header_list_size)),
            ("h2.header_table_size", span(&h.header_table_size)),
            ("h2.max_resets", span(&h.max_resets)),
            ("h2.reset_window", span(&h.reset_window)),
        ];
        self.refuse(present, key, http_only);
        let pages = f.error_pages.iter().map(|(k, v)| (k.as_str(), Some(v.span()))).collect();
        self.refuse(pages, &format!("{key}.error_pages"), |_| {
            format!("`error_pages` replace HTTP error responses: frontend `{name}` is in mode \"tcp\"")
        });
        let timeouts =
            vec![("http_request", span(&f.timeout.http_request)), ("keep_alive", span(&f.timeout.keep_alive))];
        self.refuse(timeouts, &format!("{key}.timeout"), |k| {
            format!(
                "`{k}` times HTTP requests: frontend `{name}` is in mode \"tcp\", where `timeout.client` \
                 bounds the PROXY header, the TLS handshake and the wait for a ClientHello"
            )
        });
        for (j, b) in f.bind.iter().enumerate() {
            let RawBind::Table(t) = b.get_ref() else { continue };
            let hsts = t.tls.as_ref().and_then(|tls| span(&tls.get_ref().hsts));
            self.refuse(vec![("h2c", span(&t.h2c)), ("tls.hsts", hsts)], &format!("{key}.bind[{j}]"), http_only);
        }
        for (j, r) in f.rule.iter().enumerate() {
            self.tcp_rule(r.get_ref(), &format!("{key}.rule[{j}]"));
        }
    }

    fn tcp_rule(&mut self, r: &RawRule, key: &str) {
        let action = |k: &str| {
            format!("`{k}` acts on HTTP requests or responses: a tcp frontend's rules only choose a `backend`")
        };
        let edits = |m: &std::collections::BTreeMap<String, Spanned<String>>| m.values().next().map(Spanned::span);
        let deletes = |v: &[Spanned<String>]| v.first().map(Spanned::span);
        let present = vec![
            ("redirect", span(&r.redirect)),
            ("deny", span(&r.deny)),
            ("tarpit", span(&r.tarpit)),
            ("silent_drop", span(&r.silent_drop)),
            ("auth", span(&r.auth)),
            ("cache", span(&r.cache)),
            ("path_case_insensitive", span(&r.path_case_insensitive)),
            ("rewrite_path", span(&r.rewrite_path)),
            ("set_request_headers", edits(&r.set_request_headers)),
            ("add_request_headers", edits(&r.add_request_headers)),
            ("delete_request_headers", deletes(&r.delete_request_headers)),
            ("set_response_headers", edits(&r.set_response_headers)),
            ("add_response_headers", edits(&r.add_response_headers)),
            ("delete_response_headers", deletes(&r.delete_response_headers)),
        ];
        self.refuse(present, key, action);
        if let Some(c) = &r.when {
            self.tcp_cond(c, &format!("{key}.when"));
        }
    }

    /// Conditions of a tcp frontend's rule: `src`, `sni`, `tls`, and `not`,
    /// `all`, `any` of those.
    fn tcp_cond(&mut self, c: &Spanned<RawCond>, key: &str) {
        let c = c.get_ref();
        let present = vec![
            ("host", span(&c.host)),
            ("path", span(&c.path)),
            ("path_prefix", span(&c.path_prefix)),
            ("path_regex", span(&c.path_regex)),
            ("method", span(&c.method)),
            ("header", span(&c.header)),
        ];
        if let Some(c) = &c.counter {
            self.err(
                c.span(),
                format!("{key}.counter"),
                "a tcp frontend's rules choose a backend: test counters in a [[frontend.connection_rule]]",
            );
        }
        if let Some(c) = &c.client_cert {
            self.err(
                c.span(),
                format!("{key}.client_cert"),
                "a tcp frontend's conditions are `src`, `sni` and `tls`: the bind's `client_ca` checks certificates",
            );
        }
        self.refuse(present, key, |k| {
            format!(
                "`{k}` tests HTTP requests: a tcp frontend's conditions are `src`, `sni` and `tls` \
                 (and `not`, `all`, `any` of them)"
            )
        });
        if let Some(n) = &c.not {
            self.tcp_cond(n, &format!("{key}.not"));
        }
        for (name, list) in [("all", &c.all), ("any", &c.any)] {
            for (i, c) in list.iter().flatten().enumerate() {
                self.tcp_cond(c, &format!("{key}.{name}[{i}]"));
            }
        }
    }

    /// The backends a frontend names (`default_backend`, rules) are of its mode.
    pub(crate) fn same_mode(
        &mut self,
        f: &RawFrontend,
        key: &str,
        mode: Mode,
        index: &HashMap<String, usize>,
        backends: &[Arc<Backend>],
    ) {
        let named = f.default_backend.iter().map(|d| (d, format!("{key}.default_backend")));
        let rules = f.rule.iter().enumerate();
        let named = named.chain(
            rules.filter_map(|(j, r)| Some((r.get_ref().backend.as_ref()?, format!("{key}.rule[{j}].backend")))),
        );
        for (b, k) in named {
            let Some(other) = index.get(b.get_ref()).and_then(|i| backends.get(*i)) else { continue };
            if other.mode != mode {
                self.err(
                    b.span(),
                    k,
                    format!(
                        "backend `{}` is in mode \"{}\" and this frontend in mode \"{}\": a frontend only uses \
                         backends of its own mode (set `mode` on both)",
                        other.name,
                        other.mode.as_str(),
                        mode.as_str()
                    ),
                );
            }
        }
    }
}

/// ALPN on a tcp frontend's TLS bind: none unless `tls.alpn` names protocols,
/// since the bytes go to a server whose protocol Tollgate does not know (the
/// HTTP default, `h2` and `http/1.1`, would promise what the server may not speak).
pub(crate) fn tcp_alpn(tls: &mut Option<Arc<Tls>>, bind: &RawBind) {
    let explicit = matches!(bind, RawBind::Table(t) if t.tls.as_ref().is_some_and(|t| t.get_ref().alpn.is_some()));
    if let Some(tls) = tls
        && !explicit
    {
        Arc::make_mut(tls).alpn.clear();
    }
}
