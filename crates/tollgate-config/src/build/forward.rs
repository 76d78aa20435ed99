//! `forward` on a backend: a forward proxy (forward.rs has what it allows).

use super::tcp::span;
use super::*;
use crate::forward::{DEFAULT_CONNECT_PORTS, DEFAULT_PORTS, Forward, HostPattern};

impl Builder<'_> {
    /// A backend's `forward` table, and the keys of the backend it cannot go
    /// with: servers and what chooses among them, files, mode "tcp".
    pub(super) fn forward(
        &mut self,
        b: &RawBackend,
        key: &str,
        mode: Mode,
        userlists: &auth::UserlistIndex,
    ) -> Option<Forward> {
        let raw = b.forward.as_ref()?;
        let key = format!("{key}.forward");
        let name = b.name.get_ref();
        if mode == Mode::Tcp {
            self.err(raw.span(), key.clone(), "a TCP backend relays to its servers; `forward` is for HTTP");
        }
        if !b.server.is_empty() {
            self.err(
                raw.span(),
                key.clone(),
                "a forward proxy goes to the host each request names: leave `server` out of the backend",
            );
        }
        let with_servers = |k: &str| {
            format!("`{k}` is about a backend's servers; backend `{name}` is a forward proxy (`forward`) and has none")
        };
        let backend_key = key.trim_end_matches(".forward").to_string();
        self.refuse(
            vec![
                ("balance", span(&b.balance)),
                ("check", span(&b.check)),
                ("observe", span(&b.observe)),
                ("cookie", span(&b.cookie)),
                ("stick", span(&b.stick)),
                ("static", span(&b.files)),
                ("resolve", span(&b.resolve)),
                ("discover", span(&b.discover)),
                ("tls", span(&b.tls)),
                ("proto", span(&b.proto)),
            ],
            &backend_key,
            with_servers,
        );
        let r = raw.get_ref();
        let mut allow_hosts = None;
        if let Some(h) = &r.allow_hosts {
            let mut v = Vec::new();
            for (i, p) in h.get_ref().iter().enumerate() {
                match HostPattern::parse(p) {
                    Ok(p) => v.push(p),
                    Err(e) => self.err(h.span(), format!("{key}.allow_hosts[{i}]"), e),
                }
            }
            allow_hosts = Some(v);
        }
        let ports = self.forward_ports(r.ports.as_ref(), &format!("{key}.ports"), &DEFAULT_PORTS);
        let connect_ports =
            self.forward_ports(r.connect_ports.as_ref(), &format!("{key}.connect_ports"), &DEFAULT_CONNECT_PORTS);
        let allow_networks = r.allow_networks.as_ref().map(|n| self.networks(n, &format!("{key}.allow_networks")));
        let deny_networks =
            r.deny_networks.as_ref().map(|n| self.networks(n, &format!("{key}.deny_networks"))).unwrap_or_default();
        let auth = r.auth.as_ref().and_then(|a| self.auth(a, &format!("{key}.auth"), userlists, name));
        if let Some(a) = &r.auth
            && a.get_ref().strip.is_some()
        {
            self.err(
                a.span(),
                format!("{key}.auth.strip"),
                "Proxy-Authorization is always removed: it is for this proxy, not for the server",
            );
        }
        Some(Forward { allow_hosts, ports, connect_ports, allow_networks, deny_networks, auth })
    }

    fn forward_ports(&mut self, raw: Option<&Spanned<Vec<i64>>>, key: &str, default: &[u16]) -> Vec<u16> {
        let Some(list) = raw else { return default.to_vec() };
        let mut ports = Vec::new();
        for (i, p) in list.get_ref().iter().enumerate() {
            match u16::try_from(*p) {
                Ok(p) if p > 0 => ports.push(p),
                _ => self.err(list.span(), format!("{key}[{i}]"), format!("{p} is not a port (1..=65535)")),
            }
        }
        ports
    }

    fn networks(&mut self, raw: &Spanned<Vec<String>>, key: &str) -> Vec<IpNet> {
        let mut nets = Vec::new();
        for (i, n) in raw.get_ref().iter().enumerate() {
            match parse_net(n) {
                Some(net) => nets.push(net.trunc()),
                None => self.err(raw.span(), format!("{key}[{i}]"), format!("`{n}` is not an address or CIDR block")),
            }
        }
        nets
    }
}
