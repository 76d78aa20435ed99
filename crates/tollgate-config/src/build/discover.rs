//! `discover` on a backend: servers found in DNS (discover.rs has what an
//! answer makes).

use super::*;
use crate::discover::{DISCOVER_EVERY, Discover, Source};

impl Builder<'_> {
    /// A backend's `discover` table: the name looked up, how often, and the
    /// settings of the servers found (`server`, checked as a
    /// `[[backend.server]]` would be, with the backend's `tls` and `proto`).
    pub(super) fn discover(
        &mut self,
        b: &RawBackend,
        key: &str,
        transport: BackendTransport<'_>,
        keep_alive: Duration,
    ) -> Option<Discover> {
        let raw = b.discover.as_ref()?;
        let key = format!("{key}.discover");
        let r = raw.get_ref();
        let source = match (&r.dns_srv, &r.dns) {
            (Some(s), None) => match HostPort::parse(s.get_ref()) {
                Some(HostPort { host: HostName::Name(n), port: None }) if n.starts_with('_') && n.contains('.') => {
                    Some(Source::Srv(n))
                }
                _ => {
                    self.err(
                        s.span(),
                        format!("{key}.dns_srv"),
                        format!("`{}` is not an SRV name (like \"_http._tcp.app.internal\")", s.get_ref()),
                    );
                    None
                }
            },
            (None, Some(d)) => match HostPort::parse(d.get_ref()) {
                Some(HostPort { host: HostName::Name(host), port: Some(port) }) if port != 0 => {
                    Some(Source::Addrs(DnsAddr { host, port }))
                }
                Some(HostPort { host: HostName::Ip(_), .. }) => {
                    self.err(
                        d.span(),
                        format!("{key}.dns"),
                        "an address is not looked up: write it as a `[[backend.server]]`",
                    );
                    None
                }
                _ => {
                    self.err(
                        d.span(),
                        format!("{key}.dns"),
                        format!("`{}` is not a host name and port (like \"app.internal:8080\")", d.get_ref()),
                    );
                    None
                }
            },
            (Some(_), Some(d)) => {
                self.err(d.span(), format!("{key}.dns"), "give `dns_srv` or `dns`, not both");
                None
            }
            (None, None) => {
                self.err(
                    raw.span(),
                    key.clone(),
                    "name what to look up: dns_srv = \"_http._tcp.app.internal\" or dns = \"app.internal:8080\"",
                );
                None
            }
        };
        let every = match &r.every {
            None => DISCOVER_EVERY,
            Some(d) => {
                let every = self.duration(d, &format!("{key}.every"), false).unwrap_or(DISCOVER_EVERY);
                if every < Duration::from_secs(1) {
                    self.err(d.span(), format!("{key}.every"), "must be 1s or more");
                }
                every
            }
        };
        let t = r.server.as_ref().map(Spanned::get_ref);
        let span = r.server.as_ref().map_or_else(|| raw.span(), Spanned::span);
        // The address a `[[backend.server]]` would have: TLS checks this name
        // unless `sni` says another (an SRV target's, per server, at run time).
        let addr = match &source {
            Some(Source::Addrs(a)) => a.to_string(),
            Some(Source::Srv(n)) => {
                format!("{}:1", n.split('.').skip_while(|l| l.starts_with('_')).collect::<Vec<_>>().join("."))
            }
            None => "discovered.invalid:1".into(),
        };
        let template = RawServer {
            name: Spanned::new(span.clone(), "discovered".into()),
            addr: Spanned::new(span, addr),
            weight: t.and_then(|t| t.weight.clone()),
            backup: None,
            disabled: None,
            maxconn: t.and_then(|t| t.maxconn.clone()),
            check: t.and_then(|t| t.check.clone()),
            check_port: t.and_then(|t| t.check_port.clone()),
            cookie: None,
            send_proxy: t.and_then(|t| t.send_proxy.clone()),
            tls: t.and_then(|t| t.tls.clone()),
            proto: t.and_then(|t| t.proto.clone()),
        };
        let sni_given =
            t.and_then(|t| t.tls.as_ref()).or(transport.0.as_ref()).is_some_and(|t| t.get_ref().sni.is_some());
        let server =
            self.server(&template, &format!("{key}.server"), b.check.is_some(), transport, keep_alive, true)?;
        Some(Discover {
            sni_from_target: matches!(source, Some(Source::Srv(_))) && !sni_given,
            source: source?,
            every,
            server: Server { dns: None, unresolved: None, discovered: true, ..server },
        })
    }
}
