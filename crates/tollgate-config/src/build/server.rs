//! `[[backend.server]]`: address (an IP, or a name followed at run time:
//! `resolve`, `[global.dns]`), weight and limits, and how Tollgate reaches it
//! (`proto`, `tls`).

use super::*;

impl Builder<'_> {
    /// A backend's `resolve`: how often its server names are looked up again
    /// (none: `false`, once at load).
    pub(super) fn resolve(&mut self, r: Option<&Spanned<RawResolve>>, key: &str) -> Option<Duration> {
        let Some(r) = r else { return Some(RESOLVE_EVERY) };
        match r.get_ref() {
            RawResolve::On(true) => Some(RESOLVE_EVERY),
            RawResolve::On(false) => None,
            RawResolve::Table(t) => match &t.every {
                None => Some(RESOLVE_EVERY),
                Some(d) => {
                    // Inside an either-or value the table's keys keep no span of their own.
                    let d = Spanned::new(r.span(), d.clone());
                    let every = self.duration(&d, &format!("{key}.every"), false).unwrap_or(RESOLVE_EVERY);
                    if every < Duration::from_secs(1) {
                        self.err(r.span(), format!("{key}.every"), "must be 1s or more");
                    }
                    Some(every)
                }
            },
        }
    }

    /// `[global.dns]`.
    pub(super) fn dns(&mut self, d: Option<&Spanned<RawDns>>) -> Dns {
        let Some(d) = d.map(Spanned::get_ref) else { return Dns::default() };
        let mut nameservers = Vec::new();
        for (i, n) in d.nameservers.iter().enumerate() {
            let text = n.get_ref();
            let parsed = text
                .parse::<SocketAddr>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(|ip| SocketAddr::new(ip, 53)));
            match parsed {
                Ok(a) => nameservers.push(a),
                Err(_) => self.err(
                    n.span(),
                    format!("global.dns.nameservers[{i}]"),
                    format!("`{text}` is not an IP address or IP:port"),
                ),
            }
        }
        let timeout = match &d.timeout {
            Some(t) => self.duration(t, "global.dns.timeout", false).unwrap_or(Dns::default().timeout),
            None => Dns::default().timeout,
        };
        Dns { nameservers, timeout }
    }

    pub(super) fn server(
        &mut self,
        s: &RawServer,
        key: &str,
        backend_checks: bool,
        backend: BackendTransport<'_>,
        keep_alive: Duration,
        follow: bool,
    ) -> Option<Server> {
        let name = s.name.get_ref().clone();
        let mut ok = true;
        if !valid_name(&name) {
            self.err(
                s.name.span(),
                format!("{key}.name"),
                format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
            );
            ok = false;
        }
        let addr = match server_addr(s.addr.get_ref(), follow, self.offline) {
            Ok(a) => Some(a),
            Err(e) => {
                self.err(s.addr.span(), format!("{key}.addr"), e);
                None
            }
        };
        let weight = match &s.weight {
            Some(w) => self.int_in(w, 0, 256, &format!("{key}.weight")),
            None => Some(1),
        };
        let maxconn = match &s.maxconn {
            Some(m) => self.int_in(m, 1, 1_000_000, &format!("{key}.maxconn")).map(|n| Some(n as u32)),
            None => Some(None),
        };
        if !backend_checks {
            for (name, span) in
                [("check", s.check.as_ref().map(|c| c.span())), ("check_port", s.check_port.as_ref().map(|c| c.span()))]
            {
                if let Some(span) = span {
                    self.err(
                        span,
                        format!("{key}.{name}"),
                        format!("`{name}` has no effect: the backend has no `check`"),
                    );
                    ok = false;
                }
            }
        }
        let cookie = match &s.cookie {
            None => Some(name.clone()),
            Some(c)
                if !c.get_ref().is_empty() && c.get_ref().bytes().all(|b| is_tchar(b) && b != b'|' && b != b'~') =>
            {
                Some(c.get_ref().clone())
            }
            Some(c) => {
                self.err(
                    c.span(),
                    format!("{key}.cookie"),
                    format!("`{}` is not a valid cookie value (letters, digits and !#$%&'*+-.^_`)", c.get_ref()),
                );
                None
            }
        };
        let check = backend_checks && s.check.as_ref().is_none_or(|c| *c.get_ref());
        let check_port = match &s.check_port {
            Some(p) if backend_checks && !check => {
                self.err(
                    p.span(),
                    format!("{key}.check_port"),
                    "`check_port` has no effect: checks are off for this server (`check = false`)",
                );
                None
            }
            Some(p) => self.int_in(p, 1, 65535, &format!("{key}.check_port")).map(|p| Some(p as u16)),
            None => Some(None),
        };
        let send_proxy = match &s.send_proxy {
            None => Some(None),
            Some(v) => match v.get_ref().as_str() {
                "v1" => Some(Some(ProxyProtocol::V1)),
                "v2" => Some(Some(ProxyProtocol::V2)),
                other => {
                    self.err(
                        v.span(),
                        format!("{key}.send_proxy"),
                        format!("`{other}` is not a PROXY protocol version (use \"v1\" or \"v2\")"),
                    );
                    None
                }
            },
        };
        let (tls, proto) = self.transport(s, key, backend, send_proxy.flatten())?;
        Some(Server {
            tls,
            proto,
            send_proxy: send_proxy?,
            name,
            unresolved: addr.as_ref()?.1.as_ref().map(|_| "not looked up yet".to_string()),
            addr: addr.as_ref()?.0,
            dns: addr?.1,
            disabled: s.disabled.unwrap_or(false),
            discovered: false,
            weight: weight? as u32,
            backup: s.backup.unwrap_or(false),
            maxconn: maxconn?,
            check,
            check_port: check_port?,
            cookie: cookie?,
            keep_alive,
        })
        .filter(|_| ok)
    }

    /// A server's `proto` and `tls`, each its own or else its backend's:
    /// whether the combination can work (h2 needs TLS, h2c refuses it, HTTP/2
    /// carries no PROXY header), and the TLS files read.
    fn transport(
        &mut self,
        s: &RawServer,
        key: &str,
        (b_tls, b_proto, bkey): BackendTransport<'_>,
        send_proxy: Option<ProxyProtocol>,
    ) -> Option<(Option<Arc<ServerTls>>, Proto)> {
        let (raw_proto, pkey) = match (&s.proto, b_proto) {
            (Some(p), _) => (Some(p), format!("{key}.proto")),
            (None, Some(p)) => (Some(p), format!("{bkey}.proto")),
            (None, None) => (None, String::new()),
        };
        let (raw_tls, tkey) = match (&s.tls, b_tls) {
            (Some(t), _) => (Some(t), format!("{key}.tls")),
            (None, Some(t)) => (Some(t), format!("{bkey}.tls")),
            (None, None) => (None, String::new()),
        };
        let proto = match raw_proto {
            None => Proto::H1,
            Some(p) => match p.get_ref().as_str() {
                "h1" => Proto::H1,
                "h2" => Proto::H2,
                "h2c" => Proto::H2c,
                other => {
                    self.err(p.span(), pkey, format!("`{other}` is not a protocol (\"h1\", \"h2\" or \"h2c\")"));
                    return None;
                }
            },
        };
        match (proto, raw_tls, raw_proto) {
            (Proto::H2, None, Some(p)) => {
                self.err(
                    p.span(),
                    pkey,
                    "\"h2\" is HTTP/2 over TLS and needs `tls`; for HTTP/2 over plain TCP write \"h2c\"",
                );
                return None;
            }
            (Proto::H2c, Some(_), Some(p)) => {
                self.err(
                    p.span(),
                    pkey,
                    "\"h2c\" is HTTP/2 over plain TCP, but the server has `tls`: write \"h2\" for HTTP/2 over TLS",
                );
                return None;
            }
            _ => {}
        }
        let tls = match raw_tls {
            None => None,
            Some(t) => Some(self.server_tls(t, &tkey, s.addr.get_ref(), proto)?),
        };
        if let (Some(_), true, Some(sp)) = (send_proxy, may_be_h2(proto, tls.as_deref()), &s.send_proxy) {
            self.err(
                sp.span(),
                format!("{key}.send_proxy"),
                "`send_proxy` cannot be used with HTTP/2 to the server (`proto` h2 or h2c, or \"h2\" in `tls.alpn`): \
                 a PROXY header names one client, and an HTTP/2 connection carries the requests of many",
            );
            return None;
        }
        Some((tls, proto))
    }

    /// A server's `tls` table: the CA (or the system's), the name checked and
    /// sent by SNI, the client certificate, ALPN; every file read now.
    fn server_tls(&mut self, t: &Spanned<RawServerTls>, key: &str, addr: &str, proto: Proto) -> Option<Arc<ServerTls>> {
        let before = self.errors.len();
        let raw = t.get_ref();
        let verify = match &raw.verify {
            None => true,
            Some(v) => match v.get_ref().as_str() {
                "full" => true,
                "none" => {
                    self.warnings.push(ConfigError::at(
                        self.file,
                        self.src,
                        v.span(),
                        format!("{key}.verify"),
                        "the server's certificate is not verified: anyone on the path to it can read and \
                         change the traffic"
                            .into(),
                    ));
                    false
                }
                other => {
                    self.err(v.span(), format!("{key}.verify"), format!("`{other}` is not \"full\" or \"none\""));
                    true
                }
            },
        };
        if let (false, Some(ca)) = (verify, &raw.ca) {
            self.err(ca.span(), format!("{key}.ca"), "`ca` has no use with verify = \"none\"");
        }
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = raw.sni.as_ref().map_or(host, |s| s.get_ref().as_str());
        let server_name = match rustls::pki_types::ServerName::try_from(name.to_string()) {
            Ok(n) => Some(n),
            Err(_) => {
                let (span, k) = match &raw.sni {
                    Some(s) => (s.span(), format!("{key}.sni")),
                    None => (t.span(), key.to_string()),
                };
                self.err(span, k, format!("`{name}` is not a DNS name or an IP address to check the certificate for"));
                None
            }
        };
        let alpn = match &raw.alpn {
            None if proto == Proto::H2 => vec!["h2".to_string()],
            None => vec!["http/1.1".to_string()],
            Some(list) => {
                let out = self.alpn(list, key);
                if out.is_empty() && self.errors.len() == before {
                    self.err(list.span(), format!("{key}.alpn"), "give at least one protocol (\"h2\", \"http/1.1\")");
                } else if proto == Proto::H2 && !out.is_empty() && !out.iter().any(|a| a == "h2") {
                    // ALPN would choose HTTP/1.1, and the server silently get it.
                    self.err(
                        list.span(),
                        format!("{key}.alpn"),
                        "proto = \"h2\" needs \"h2\" in alpn (or leave alpn out)",
                    );
                }
                out
            }
        };
        if self.offline {
            self.err(t.span(), key, "certificate files are not read offline");
            return None;
        }
        let dir = self.base_dir();
        let ca = raw.ca.as_ref().map(|c| (c, dir.join(c.get_ref())));
        let roots = match (&ca, verify) {
            (_, false) => None,
            (Some((c, path)), true) => match tls::load_ca(path) {
                Ok(r) => Some(Arc::new(r)),
                Err(e) => {
                    self.err(c.span(), format!("{key}.ca"), e);
                    None
                }
            },
            (None, true) => match self.system_roots.get_or_insert_with(|| tls::system_roots().map(Arc::new)).clone() {
                Ok(r) => Some(r),
                Err(e) => {
                    self.err(t.span(), key, e);
                    None
                }
            },
        };
        let provider = tls::provider();
        let client = match (&raw.cert, &raw.key) {
            (None, None) => None,
            (None, Some(k)) => {
                self.err(k.span(), format!("{key}.key"), "`key` is the key of `cert`: give `cert` too");
                None
            }
            (Some(c), k) => {
                let cert_file = dir.join(c.get_ref());
                let key_file = k.as_ref().map(|k| dir.join(k.get_ref()));
                match tls::load_cert(&cert_file, key_file.as_deref(), &provider) {
                    Ok(loaded) => Some(loaded),
                    Err(e) => {
                        self.err(c.span(), format!("{key}.cert"), e);
                        None
                    }
                }
            }
        };
        if self.errors.len() > before {
            return None;
        }
        let server_name = server_name?;
        let cert = client.as_ref().map(|c| (c.cert_file.clone(), c.key_file.clone()));
        let config = match tls::client_config(roots, client.map(|c| c.key), &alpn, provider) {
            Ok(c) => c,
            Err(e) => {
                self.err(t.span(), key, e);
                return None;
            }
        };
        let ca = ca.map(|(_, p)| p);
        let mut files: Vec<&Path> = ca.iter().map(PathBuf::as_path).collect();
        if let Some((c, k)) = &cert {
            files.push(c);
            files.push(k);
        }
        let settings = format!("{server_name:?} {verify} {alpn:?} {ca:?} {cert:?}");
        let digest = tls::digest(&files, &settings);
        Some(Arc::new(ServerTls { ca, server_name, cert, verify, alpn, config: Arc::new(config), digest }))
    }
}

/// How often names are followed when `resolve` is left out.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// A server's address: an IP:port; or `host:port`, kept as a name the
/// runtime looks up (`follow`, the backend's `resolve`), or else resolved
/// now, once.
fn server_addr(s: &str, follow: bool, offline: bool) -> Result<(SocketAddr, Option<DnsAddr>), String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok((a, None));
    }
    if !follow {
        return resolve_addr(s, offline).map(|a| (a, None));
    }
    match HostPort::parse(s) {
        Some(HostPort { host: HostName::Name(host), port: Some(port) }) if port != 0 => {
            Ok((SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), port), Some(DnsAddr { host, port })))
        }
        Some(HostPort { port: None, .. }) => {
            Err(format!("`{s}` has no port (write it like \"127.0.0.1:3000\" or \"app.internal:3000\")"))
        }
        _ => Err(format!("`{s}` is not an IP:port or a host name and port")),
    }
}
