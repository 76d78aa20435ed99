//! `[[acme]]` sections, and a TLS bind's `acme` list.

use super::*;
use crate::acme::{Acme, AcmeChallenge};
use crate::forward::HostPattern;

impl Builder<'_> {
    /// The `[[acme]]` sections, in order; their names go to `acme_index`.
    pub(super) fn acme(&mut self, raw: &[Spanned<RawAcme>]) -> Vec<Arc<Acme>> {
        let mut out = Vec::new();
        for (i, a) in raw.iter().enumerate() {
            let key = format!("acme[{i}]");
            let r = a.get_ref();
            let name = r.name.get_ref().clone();
            if !valid_name(&name) {
                self.err(
                    r.name.span(),
                    format!("{key}.name"),
                    format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
                );
            }
            if self.acme_index.insert(name.clone(), i).is_some() {
                self.err(r.name.span(), format!("{key}.name"), format!("[[acme]] `{name}` is defined twice"));
            }
            let directory = r.directory.get_ref().clone();
            let uri_ok =
                directory.parse::<http::Uri>().is_ok_and(|u| u.scheme_str() == Some("https") && u.host().is_some());
            if !uri_ok {
                self.err(
                    r.directory.span(),
                    format!("{key}.directory"),
                    format!("`{directory}` is not an https URL (ACME servers speak HTTPS: RFC 8555 section 6.1)"),
                );
            }
            let mut domains: Vec<String> = Vec::new();
            if r.domains.get_ref().is_empty() {
                self.err(r.domains.span(), format!("{key}.domains"), "name at least one domain");
            }
            for (j, d) in r.domains.get_ref().iter().enumerate() {
                let k = format!("{key}.domains[{j}]");
                let lower = d.to_ascii_lowercase();
                if lower.starts_with("*.") {
                    self.err(
                        r.domains.span(),
                        k,
                        format!("`{d}`: a wildcard name needs the DNS-01 challenge, which Tollgate does not answer"),
                    );
                } else if !matches!(HostPattern::parse(&lower), Ok(HostPattern::Exact(_)))
                    || lower.parse::<IpAddr>().is_ok()
                {
                    self.err(r.domains.span(), k, format!("`{d}` is not a DNS name"));
                } else if domains.contains(&lower) {
                    self.err(r.domains.span(), k, format!("`{d}` is listed twice"));
                } else {
                    domains.push(lower);
                }
            }
            let mut contact = Vec::new();
            if let Some(c) = &r.contact {
                for (j, m) in c.get_ref().iter().enumerate() {
                    let ok = m.strip_prefix("mailto:").is_some_and(|a| a.contains('@') && !a.contains([' ', ',']));
                    if ok {
                        contact.push(m.clone());
                    } else {
                        self.err(c.span(), format!("{key}.contact[{j}]"), format!("`{m}` is not `mailto:ADDRESS`"));
                    }
                }
            }
            let challenge = match r.challenge.as_ref().map(|c| (c.get_ref().as_str(), c.span())) {
                None | Some(("http-01", _)) => AcmeChallenge::Http01,
                Some(("tls-alpn-01", _)) => AcmeChallenge::TlsAlpn01,
                Some((other, span)) => {
                    self.err(
                        span,
                        format!("{key}.challenge"),
                        format!("`{other}` is not a challenge Tollgate answers (\"http-01\" or \"tls-alpn-01\")"),
                    );
                    AcmeChallenge::Http01
                }
            };
            let state_dir = self.base_dir().join(r.state_dir.as_ref().map_or("acme", |s| s.get_ref().as_str()));
            let renew_before =
                r.renew_before.as_ref().and_then(|d| self.duration(d, &format!("{key}.renew_before"), false));
            let retry = r
                .retry
                .as_ref()
                .and_then(|d| self.duration(d, &format!("{key}.retry"), false))
                .unwrap_or(Duration::from_secs(60));
            let ca_file = r.directory_ca.as_ref().map(|c| (c.span(), self.base_dir().join(c.get_ref())));
            let roots = match &ca_file {
                _ if self.offline => Ok(Arc::new(rustls::RootCertStore::empty())),
                Some((span, path)) => tls::load_ca(path).map(Arc::new).map_err(|e| (Some(span.clone()), e)),
                None => self
                    .system_roots
                    .get_or_insert_with(|| tls::system_roots().map(Arc::new))
                    .clone()
                    .map_err(|e| (None, e)),
            };
            let roots = match roots {
                Ok(r) => r,
                Err((span, e)) => {
                    let span = span.unwrap_or_else(|| r.directory.span());
                    self.err(span, format!("{key}.directory_ca"), e);
                    Arc::new(rustls::RootCertStore::empty())
                }
            };
            let client = match tls::client_config(Some(roots), None, &["http/1.1".to_string()], tls::provider()) {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    self.err(r.directory.span(), format!("{key}.directory_ca"), e);
                    continue;
                }
            };
            let settings = format!(
                "{name}|{directory}|{domains:?}|{contact:?}|{}|{}|{renew_before:?}|{retry:?}",
                challenge.as_str(),
                state_dir.display()
            );
            let files: Vec<&Path> = ca_file.iter().map(|(_, p)| p.as_path()).collect();
            let digest = tls::digest(&files, &settings);
            out.push(Arc::new(Acme {
                name,
                directory,
                domains,
                contact,
                challenge,
                state_dir,
                renew_before,
                retry,
                client,
                digest,
            }));
        }
        out
    }

    /// A TLS bind's `acme`: `[[acme]]` names.
    pub(super) fn bind_acme(&mut self, raw: &RawTls, key: &str) -> Vec<usize> {
        let Some(list) = &raw.acme else { return Vec::new() };
        let mut out = Vec::new();
        for (j, n) in list.get_ref().iter().enumerate() {
            match self.acme_index.get(n.get_ref()) {
                Some(i) if out.contains(i) => {
                    self.err(n.span(), format!("{key}.acme[{j}]"), format!("`{}` is listed twice", n.get_ref()))
                }
                Some(i) => out.push(*i),
                None => {
                    self.err(n.span(), format!("{key}.acme[{j}]"), format!("no [[acme]] is named `{}`", n.get_ref()))
                }
            }
        }
        if out.is_empty() && list.get_ref().is_empty() {
            self.err(list.span(), format!("{key}.acme"), "name at least one [[acme]]");
        }
        out
    }
}
