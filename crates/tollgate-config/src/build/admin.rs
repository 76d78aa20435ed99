//! `[admin]`: the admin HTTP listener and the command sockets (paths or TCP
//! addresses, each with its level, mode and owner).

use super::*;

impl Builder<'_> {
    pub(super) fn admin(&mut self, a: &Spanned<RawAdmin>) -> Option<Admin> {
        let span = a.span();
        let a = a.get_ref();
        let mut ok = true;
        let bind = match &a.bind {
            Some(b) => match parse_bind(b.get_ref()) {
                Ok(addr) => Some(addr),
                Err(e) => {
                    self.err(b.span(), "admin.bind", e);
                    ok = false;
                    None
                }
            },
            // No bind and no socket: the admin listener on its default address.
            None if a.socket.is_none() => Some(Admin::DEFAULT_BIND.parse().expect("valid default")),
            None => None,
        };
        let token = match &a.token {
            Some(t) if t.get_ref().is_empty() || !t.get_ref().bytes().all(|b| b.is_ascii_graphic()) => {
                self.err(t.span(), "admin.token", "must be non-empty printable ASCII without spaces");
                ok = false;
                None
            }
            Some(t) => Some(t.get_ref().clone()),
            None => None,
        };
        let mut allowed_hosts = Vec::new();
        for (i, h) in a.allowed_hosts.iter().flatten().enumerate() {
            match HostPort::parse(h.get_ref()) {
                Some(hp) => allowed_hosts.push(hp),
                None => {
                    self.err(
                        h.span(),
                        format!("admin.allowed_hosts[{i}]"),
                        format!(
                            "`{}` is not a host name or an IP address with an optional port \
                             (`stats.example.com`, `10.0.0.5:8404`, `[fd00::5]`)",
                            h.get_ref()
                        ),
                    );
                    ok = false;
                }
            }
        }
        let sockets = match &a.socket {
            Some(s) => match self.sockets(s) {
                Some(list) => list,
                None => {
                    ok = false;
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let refresh = match &a.refresh {
            Some(d) => self.duration(d, "admin.refresh", true).unwrap_or_else(|| {
                ok = false;
                Duration::ZERO
            }),
            None => Duration::from_secs(5),
        };
        if bind.is_none() && sockets.is_empty() && ok {
            self.err(span, "admin", "needs `bind`, `socket` or both");
            ok = false;
        }
        ok.then_some(Admin { bind, token, allowed_hosts, sockets, refresh, read_only: a.read_only.unwrap_or(false) })
    }

    /// `admin.socket`: a path (level admin, mode 0600), a table, or a list of
    /// tables. Every problem is reported at the key.
    fn sockets(&mut self, s: &Spanned<RawSockets>) -> Option<Vec<CommandSocket>> {
        let span = s.span();
        let one = |path: &String| RawSocket {
            path: Some(path.clone()),
            addr: None,
            level: None,
            mode: None,
            user: None,
            group: None,
        };
        let (list, many): (Vec<RawSocket>, bool) = match s.get_ref() {
            RawSockets::Path(p) => (vec![one(p)], false),
            RawSockets::One(t) => (vec![t.clone()], false),
            RawSockets::Many(v) => (v.clone(), true),
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, raw) in list.iter().enumerate() {
            let key = if many { format!("admin.socket[{i}]") } else { "admin.socket".to_string() };
            match self.socket(raw, &key, span.clone()) {
                Some(sock) => out.push(sock),
                None => ok = false,
            }
        }
        for (i, a) in out.iter().enumerate() {
            if out[..i].iter().any(|b| b.listen == a.listen) {
                self.err(span.clone(), "admin.socket", "the same socket is listed twice");
                ok = false;
            }
        }
        ok.then_some(out)
    }

    fn socket(&mut self, raw: &RawSocket, key: &str, span: std::ops::Range<usize>) -> Option<CommandSocket> {
        let level = match raw.level.as_deref() {
            None => None,
            Some("user") => Some(CliLevel::User),
            Some("operator") => Some(CliLevel::Operator),
            Some("admin") => Some(CliLevel::Admin),
            Some(other) => {
                self.err(span, format!("{key}.level"), format!("`{other}` is not a level (user, operator or admin)"));
                return None;
            }
        };
        match (&raw.path, &raw.addr) {
            (Some(_), Some(_)) | (None, None) => {
                self.err(span, key, "takes `path` (a Unix socket) or `addr` (TCP), one of them");
                None
            }
            (None, Some(addr)) => {
                if raw.mode.is_some() || raw.user.is_some() || raw.group.is_some() {
                    self.err(span, key, "`mode`, `user` and `group` are for a socket file (`path`), not `addr`");
                    return None;
                }
                let Ok(addr) = addr.parse::<SocketAddr>() else {
                    self.err(span, format!("{key}.addr"), format!("`{addr}` is not an IP:port"));
                    return None;
                };
                let level = level.unwrap_or(CliLevel::Operator);
                if !addr.ip().is_loopback() && level == CliLevel::Admin {
                    self.warnings.push(ConfigError::at(
                        self.file,
                        self.src,
                        span,
                        key.to_string(),
                        format!(
                            "level admin on {addr}, not a loopback address: whoever reaches it can change \
                             servers (the command socket has no password)"
                        ),
                    ));
                }
                Some(CommandSocket { listen: SocketListen::Tcp(addr), level })
            }
            (Some(path), None) => {
                if path.is_empty() || path.ends_with('/') {
                    self.err(span, key, "must be the path of a socket file");
                    return None;
                }
                let mode = match &raw.mode {
                    None => Some(0o600),
                    Some(RawMode::Int(m)) => u32::try_from(*m).ok().filter(|m| *m <= 0o777),
                    Some(RawMode::Text(t)) => {
                        u32::from_str_radix(t.trim_start_matches("0o"), 8).ok().filter(|m| *m <= 0o777)
                    }
                };
                let Some(mode) = mode else {
                    self.err(span, format!("{key}.mode"), "permission bits, 0o000 to 0o777 (e.g. 0o660 or \"0660\")");
                    return None;
                };
                let uid = raw.user.as_deref().map(lookup_user).transpose();
                let gid = raw.group.as_deref().map(lookup_group).transpose();
                let (uid, gid) = match (uid, gid) {
                    (Ok(uid), Ok(gid)) => (uid, gid),
                    (Err(e), _) => {
                        self.err(span, format!("{key}.user"), e);
                        return None;
                    }
                    (_, Err(e)) => {
                        self.err(span, format!("{key}.group"), e);
                        return None;
                    }
                };
                let unix = UnixSocket { path: self.base_dir().join(path), mode, uid, gid };
                Some(CommandSocket { listen: SocketListen::Unix(unix), level: level.unwrap_or(CliLevel::Admin) })
            }
        }
    }
}

/// A user name or numeric uid, looked up now.
fn lookup_user(name: &str) -> Result<u32, String> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(format!("there is no user `{name}` on this system")),
        Err(e) => Err(format!("cannot look up user `{name}`: {e}")),
    }
}

/// A group name or numeric gid, looked up now.
fn lookup_group(name: &str) -> Result<u32, String> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(format!("there is no group `{name}` on this system")),
        Err(e) => Err(format!("cannot look up group `{name}`: {e}")),
    }
}
