//! `[global.etcd]` (etcd.rs has the keys).

use super::*;
use crate::etcd::{ETCD_PREFIX, ETCD_TIMEOUT, Etcd, default_name};

impl Builder<'_> {
    pub(super) fn etcd(&mut self, e: &Spanned<RawEtcd>) -> Option<Etcd> {
        let r = e.get_ref();
        let key = "global.etcd";
        let before = self.errors.len();
        let mut endpoints = Vec::new();
        if r.endpoints.get_ref().is_empty() {
            self.err(
                r.endpoints.span(),
                format!("{key}.endpoints"),
                "name at least one member: [\"http://127.0.0.1:2379\"]",
            );
        }
        for (i, ep) in r.endpoints.get_ref().iter().enumerate() {
            let text = ep.get_ref();
            let uri = text.parse::<http::Uri>().ok();
            match uri.as_ref().map(|u| (u.scheme_str(), u.host(), u.port_u16(), u.path())) {
                Some((Some("http"), Some(_), Some(_), "" | "/")) => {
                    endpoints.push(text.trim_end_matches('/').to_string())
                }
                Some((Some("https"), ..)) => self.err(
                    ep.span(),
                    format!("{key}.endpoints[{i}]"),
                    "TLS to etcd is not supported yet: reach the members over http (loopback or a private network)",
                ),
                _ => self.err(
                    ep.span(),
                    format!("{key}.endpoints[{i}]"),
                    format!("`{text}` is not http://host:port (like \"http://10.0.0.2:2379\")"),
                ),
            }
        }
        let prefix = match &r.prefix {
            None => ETCD_PREFIX.to_string(),
            Some(p) if p.get_ref().starts_with('/') && p.get_ref().ends_with('/') => p.get_ref().clone(),
            Some(p) => {
                self.err(p.span(), format!("{key}.prefix"), "must begin and end with `/` (like \"/tollgate/\")");
                String::new()
            }
        };
        let name = match &r.name {
            None => default_name(),
            Some(n) if valid_name(n.get_ref()) => n.get_ref().clone(),
            Some(n) => {
                self.err(
                    n.span(),
                    format!("{key}.name"),
                    format!("`{}` is not a valid name (letters, digits, '-', '_', '.')", n.get_ref()),
                );
                String::new()
            }
        };
        let timeout = match &r.timeout {
            None => ETCD_TIMEOUT,
            Some(t) => self.duration(t, &format!("{key}.timeout"), false).unwrap_or(ETCD_TIMEOUT),
        };
        (self.errors.len() == before).then(|| Etcd {
            endpoints,
            prefix,
            name,
            config: r.config.unwrap_or(false),
            timeout,
        })
    }
}
