//! `[[frontend.rule]]`: conditions (`when`), actions and header edits.

use super::*;

impl Builder<'_> {
    /// A rule; `userlists` resolves its `auth`, whose realm defaults to the
    /// frontend's name; `path_normalize`: the frontend's, for its path values
    /// (`None` in a tcp frontend, which has no paths: tcp.rs refuses the keys).
    pub(super) fn rule(
        &mut self,
        r: &Spanned<RawRule>,
        key: &str,
        backends: &HashMap<String, usize>,
        (userlists, frontend): (&UserlistIndex, &str),
        path_normalize: Option<bool>,
        tracking: Tracking<'_>,
    ) -> Option<Rule> {
        let span = r.span();
        let r = r.get_ref();
        let errors_before = self.errors.len();
        // Access rules compare paths without case by default: a server on a
        // case-insensitive file system (or IIS) serves /ADMIN/ as /admin/.
        let path_case_insensitive = r
            .path_case_insensitive
            .as_ref()
            .map_or(r.deny.is_some() || r.tarpit.is_some() || r.silent_drop.is_some() || r.auth.is_some(), |v| {
                *v.get_ref()
            });
        let form = PathForm { normalize: path_normalize.unwrap_or(false), fold: path_case_insensitive };
        let when = match &r.when {
            Some(c) => self.cond(c, &format!("{key}.when"), form, tracking),
            None => Condition::Always,
        };
        if let Some(v) = &r.path_case_insensitive
            && path_normalize.is_some()
            && !when.uses_path()
        {
            self.err(
                v.span(),
                format!("{key}.path_case_insensitive"),
                "the rule's `when` tests no path (`path`, `path_prefix`, `path_regex`): this would do nothing",
            );
        }
        let mut actions = Vec::new();
        if let Some(b) = &r.backend {
            match backends.get(b.get_ref()) {
                Some(i) => actions.push(Action::Backend(*i)),
                None => self.err(b.span(), format!("{key}.backend"), format!("no backend is named `{}`", b.get_ref())),
            }
        }
        if let Some(red) = &r.redirect {
            let k = format!("{key}.redirect");
            let v = red.get_ref();
            if v.port.is_some() && v.scheme.is_none() {
                self.err(red.span(), format!("{k}.port"), "`port` goes with `scheme`");
            }
            let target = match (&v.location, &v.prefix, &v.scheme) {
                (Some(l), None, None) => Some(RedirectTarget::Location(l.clone())),
                (None, None, Some(scheme)) => {
                    let port = match v.port {
                        None => Ok(None),
                        Some(p) => u16::try_from(p).ok().filter(|p| *p > 0).map(Some).ok_or(p),
                    };
                    if let Err(p) = port {
                        self.err(red.span(), format!("{k}.port"), format!("{p} is out of range (1..=65535)"));
                    }
                    match scheme.as_str() {
                        "http" | "https" => {
                            port.ok().map(|port| RedirectTarget::Scheme { scheme: scheme.clone(), port })
                        }
                        other => {
                            self.err(
                                red.span(),
                                format!("{k}.scheme"),
                                format!("`{other}` is not a scheme to redirect to (\"https\" or \"http\")"),
                            );
                            None
                        }
                    }
                }
                (None, Some(p), None) if p.trim_end_matches('/').is_empty() => {
                    self.err(
                        red.span(),
                        format!("{k}.prefix"),
                        "an empty prefix would redirect every request to itself",
                    );
                    None
                }
                (None, Some(p), None) => Some(RedirectTarget::Prefix(p.trim_end_matches('/').to_string())),
                _ => {
                    self.err(red.span(), k.clone(), "give exactly one of `location`, `prefix` or `scheme`");
                    None
                }
            };
            if let Some(RedirectTarget::Location(s) | RedirectTarget::Prefix(s)) = &target
                && HeaderValue::from_str(s).is_err()
            {
                self.err(red.span(), k.clone(), format!("`{s}` cannot be sent in a Location header"));
            }
            let code = match v.code.unwrap_or(302) {
                c @ (301 | 302 | 303 | 307 | 308) => StatusCode::from_u16(c as u16).ok(),
                c => {
                    self.err(
                        red.span(),
                        format!("{k}.code"),
                        format!("{c} is not a redirect code (301, 302, 303, 307 or 308)"),
                    );
                    None
                }
            };
            if let (Some(target), Some(code)) = (target, code) {
                actions.push(Action::Redirect(Redirect { target, code }));
            }
        }
        if let Some(d) = &r.deny {
            let (status, body, retry) = match d.get_ref() {
                RawDeny::Status(s) => (*s, None, None),
                RawDeny::Full(f) => (f.status.unwrap_or(403), f.body.clone(), f.retry_after.clone()),
            };
            let retry_after = retry.and_then(|v| {
                let k = format!("{key}.deny.retry_after");
                let d = self.duration(&Spanned::new(d.span(), v), &k, false)?;
                // Whole seconds, rounded up (RFC 9110 section 10.2.3).
                Some(d.as_millis().div_ceil(1000).min(u32::MAX as u128) as u32)
            });
            // A 429 says when to come back: by default, the period of the
            // table whose rate the rule tests (HAProxy sends none).
            let retry_after = retry_after.or_else(|| {
                let mut used = Vec::new();
                when.tables(&mut used);
                let period = used.first().and_then(|t| tracking.0.get(*t)).map(|t| t.period);
                period.filter(|_| status == 429).map(|p| p.as_millis().div_ceil(1000) as u32)
            });
            if (400..=599).contains(&status) {
                let status = StatusCode::from_u16(status as u16).expect("checked range");
                actions.push(Action::Deny { status, body, retry_after });
            } else {
                self.err(d.span(), format!("{key}.deny"), format!("{status} is not an error status (400..=599)"));
            }
        }
        if let Some(t) = &r.tarpit {
            let k = format!("{key}.tarpit");
            let (delay, status) = match t.get_ref() {
                RawTarpit::Delay(d) => (Some(d.clone()), None),
                RawTarpit::Full(f) => (f.delay.clone(), f.status),
            };
            let delay = match delay {
                Some(d) => self.duration(&Spanned::new(t.span(), d), &format!("{k}.delay"), false),
                None => {
                    self.err(t.span(), format!("{k}.delay"), "give the time to hold the request (e.g. \"10s\")");
                    None
                }
            };
            let status = status.unwrap_or(500);
            if !(400..=599).contains(&status) {
                self.err(t.span(), format!("{k}.status"), format!("{status} is not an error status (400..=599)"));
            }
            if let Some(delay) = delay
                && (400..=599).contains(&status)
            {
                actions.push(Action::Tarpit { delay, status: StatusCode::from_u16(status as u16).expect("checked") });
            }
        }
        if let Some(d) = &r.silent_drop {
            if *d.get_ref() {
                actions.push(Action::SilentDrop);
            } else {
                self.err(d.span(), format!("{key}.silent_drop"), "`silent_drop = false` does nothing: leave it out");
            }
        }
        let request_headers = self.header_edits(
            &r.set_request_headers,
            &r.add_request_headers,
            &r.delete_request_headers,
            key,
            "request",
        );
        let response_headers = self.header_edits(
            &r.set_response_headers,
            &r.add_response_headers,
            &r.delete_response_headers,
            key,
            "response",
        );
        let stops = r.deny.is_some() || r.tarpit.is_some() || r.silent_drop.is_some();
        let given =
            [r.backend.is_some(), r.redirect.is_some(), r.deny.is_some(), r.tarpit.is_some(), r.silent_drop.is_some()]
                .iter()
                .filter(|x| **x)
                .count();
        if given > 1 {
            self.err(
                span.clone(),
                key,
                "a rule takes at most one of `backend`, `redirect`, `deny`, `tarpit` or `silent_drop`",
            );
        }
        let auth = r.auth.as_ref().and_then(|a| self.auth(a, &format!("{key}.auth"), userlists, frontend));
        if let Some(a) = &r.auth
            && (r.redirect.is_some() || stops)
        {
            self.err(
                a.span(),
                format!("{key}.auth"),
                "`auth` cannot go with `redirect`, `deny`, `tarpit` or `silent_drop`: credentials are asked for requests that go to a backend",
            );
        }
        let mut early_hints = Vec::new();
        if let Some(hints) = &r.early_hints {
            if r.redirect.is_some() || stops {
                self.err(
                    hints.span(),
                    format!("{key}.early_hints"),
                    "hints go before a server's answer: not with `redirect`, `deny`, `tarpit` or `silent_drop`",
                );
            }
            for (i, link) in hints.get_ref().iter().enumerate() {
                match HeaderValue::from_str(link.trim()) {
                    Ok(v) if link.trim().starts_with('<') => early_hints.push(v),
                    _ => self.err(
                        hints.span(),
                        format!("{key}.early_hints[{i}]"),
                        format!("`{link}` is not a Link field value (e.g. \"</app.css>; rel=preload; as=style\")"),
                    ),
                }
            }
        }
        let rewrite_path = r.rewrite_path.as_ref().and_then(|rw| {
            let k = format!("{key}.rewrite_path");
            if r.redirect.is_some() || stops {
                self.err(
                    rw.span(),
                    &k,
                    "the path is rewritten for the server: not with `redirect`, `deny`, `tarpit` or `silent_drop`",
                );
                return None;
            }
            let regex = match regex::Regex::new(&rw.get_ref().regex) {
                Ok(re) => re,
                Err(e) => {
                    self.err(rw.span(), format!("{k}.regex"), format!("not a regular expression: {e}"));
                    return None;
                }
            };
            let to = &rw.get_ref().to;
            if let Some(c) = to.chars().find(|c| c.is_ascii_control() || c.is_whitespace() || matches!(c, '?' | '#')) {
                self.err(
                    rw.span(),
                    format!("{k}.to"),
                    format!("{c:?} cannot be in a path (the query string is kept as the client sent it)"),
                );
                return None;
            }
            Some(PathRewrite { regex, to: to.clone() })
        });
        if given == 0
            && rewrite_path.is_none()
            && request_headers.is_empty()
            && response_headers.is_empty()
            && r.auth.is_none()
            && r.cache.is_none()
            && early_hints.is_empty()
        {
            self.err(
                span,
                key,
                "this rule does nothing: give it `backend`, `redirect`, `deny`, `tarpit`, `silent_drop`, `auth`, `cache`, `early_hints`, `rewrite_path` or header edits",
            );
        }
        if self.errors.len() > errors_before {
            return None;
        }
        Some(Rule {
            when,
            action: actions.pop(),
            request_headers,
            response_headers,
            auth,
            cache: None,
            path_case_insensitive,
            early_hints,
            rewrite_path,
        })
    }

    fn header_edits(
        &mut self,
        set: &BTreeMap<String, Spanned<String>>,
        add: &BTreeMap<String, Spanned<String>>,
        delete: &[Spanned<String>],
        key: &str,
        side: &str,
    ) -> HeaderEdits {
        let mut edits = HeaderEdits::default();
        for (verb, map, out) in [("set", set, &mut edits.set), ("add", add, &mut edits.add)] {
            for (name, value) in map {
                let k = format!("{key}.{verb}_{side}_headers.{name}");
                let n = HeaderName::from_bytes(name.as_bytes());
                let v = HeaderValue::from_str(value.get_ref());
                match (n, v) {
                    (Ok(n), Ok(_)) => match EditValue::parse(value.get_ref()) {
                        Ok(v) => out.push((n, v)),
                        Err(e) => self.err(value.span(), k, e),
                    },
                    (Err(_), _) => self.err(value.span(), k, format!("`{name}` is not a valid header name")),
                    (_, Err(_)) => self.err(
                        value.span(),
                        k,
                        "the value has a character a header cannot carry (control characters, CR, LF)",
                    ),
                }
            }
        }
        for (j, name) in delete.iter().enumerate() {
            match HeaderName::from_bytes(name.get_ref().as_bytes()) {
                Ok(n) => edits.delete.push(n),
                Err(_) => self.err(
                    name.span(),
                    format!("{key}.delete_{side}_headers[{j}]"),
                    format!("`{}` is not a valid header name", name.get_ref()),
                ),
            }
        }
        edits
    }

    /// A condition; `form`: how its rule matches paths, which its path values
    /// are put in (a regex is only made case-insensitive).
    pub(super) fn cond(
        &mut self,
        c: &Spanned<RawCond>,
        key: &str,
        form: PathForm,
        tracking: Tracking<'_>,
    ) -> Condition {
        let span = c.span();
        let c = c.get_ref();
        let mut parts = Vec::new();
        for (name, list) in [
            ("host", &c.host),
            ("path", &c.path),
            ("path_prefix", &c.path_prefix),
            ("path_regex", &c.path_regex),
            ("method", &c.method),
            ("src", &c.src),
            ("sni", &c.sni),
        ] {
            if let Some(l) = list
                && matches!(l.get_ref(), OneOrMany::Many(v) if v.is_empty())
            {
                self.err(l.span(), format!("{key}.{name}"), "an empty list never matches; give at least one value");
            }
        }
        for (name, list) in [("all", &c.all), ("any", &c.any)] {
            if list.as_ref().is_some_and(|l| l.is_empty()) {
                self.err(span.clone(), format!("{key}.{name}"), "an empty list of conditions; give at least one");
            }
        }
        if let Some(h) = &c.host {
            parts.push(Condition::Host(host_patterns(h.get_ref())));
        }
        if let Some(t) = &c.tls {
            parts.push(Condition::Tls(*t.get_ref()));
        }
        if let Some(h) = &c.sni {
            parts.push(Condition::Sni(host_patterns(h.get_ref())));
        }
        let in_form = |v: &OneOrMany| -> Vec<String> {
            v.to_vec().iter().map(|p| crate::path::match_form(p, form.normalize, form.fold).into_owned()).collect()
        };
        if let Some(p) = &c.path {
            parts.push(Condition::PathExact(in_form(p.get_ref())));
        }
        if let Some(p) = &c.path_prefix {
            parts.push(Condition::PathPrefix(in_form(p.get_ref())));
        }
        if let Some(p) = &c.path_regex {
            let mut res = Vec::new();
            for s in p.get_ref().to_vec() {
                match RegexBuilder::new(&s).case_insensitive(form.fold).build() {
                    Ok(re) => res.push(re),
                    Err(e) => {
                        self.err(p.span(), format!("{key}.path_regex"), format!("bad regex `{s}`: {}", one_line(&e)))
                    }
                }
            }
            parts.push(Condition::PathRegex(res));
        }
        if let Some(m) = &c.method {
            let mut ms = Vec::new();
            for s in m.get_ref().to_vec() {
                match Method::from_bytes(s.to_ascii_uppercase().as_bytes()) {
                    Ok(m) => ms.push(m),
                    Err(_) => self.err(m.span(), format!("{key}.method"), format!("`{s}` is not a method")),
                }
            }
            parts.push(Condition::Method(ms));
        }
        if let Some(h) = &c.header {
            let k = format!("{key}.header");
            let hv = h.get_ref();
            match HeaderName::from_bytes(hv.name.as_bytes()) {
                Ok(name) => {
                    let tests = [hv.present.is_some(), hv.equals.is_some(), hv.regex.is_some()];
                    if tests.iter().filter(|t| **t).count() != 1 {
                        self.err(h.span(), k, "give exactly one of `present`, `equals` or `regex`");
                    } else if let Some(p) = hv.present {
                        parts.push(Condition::Header(HeaderCond {
                            name,
                            test: if p { HeaderTest::Present } else { HeaderTest::Absent },
                        }));
                    } else if let Some(e) = &hv.equals {
                        parts.push(Condition::Header(HeaderCond { name, test: HeaderTest::Equals(e.clone()) }));
                    } else if let Some(r) = &hv.regex {
                        match Regex::new(r) {
                            Ok(re) => parts.push(Condition::Header(HeaderCond { name, test: HeaderTest::Regex(re) })),
                            Err(e) => {
                                self.err(h.span(), format!("{k}.regex"), format!("bad regex `{r}`: {}", one_line(&e)))
                            }
                        }
                    }
                }
                Err(_) => self.err(h.span(), format!("{k}.name"), format!("`{}` is not a valid header name", hv.name)),
            }
        }
        if let Some(s) = &c.src {
            let mut nets = Vec::new();
            for n in s.get_ref().to_vec() {
                match parse_net(&n) {
                    Some(net) => nets.push(net),
                    None => self.err(s.span(), format!("{key}.src"), format!("`{n}` is not an address or CIDR block")),
                }
            }
            parts.push(Condition::Src(nets));
        }
        if let Some(c) = &c.counter
            && let Some(cc) = self.counter_cond(c, &format!("{key}.counter"), tracking)
        {
            parts.push(Condition::Counter(cc));
        }
        if let Some(cc) = &c.client_cert {
            let k = format!("{key}.client_cert");
            let v = cc.get_ref();
            match (v.present, &v.subject, &v.fingerprint) {
                (Some(p), None, None) => parts.push(Condition::ClientCert(ClientCertTest::Present(p))),
                (None, Some(re), None) => match Regex::new(re) {
                    Ok(re) => parts.push(Condition::ClientCert(ClientCertTest::Subject(re))),
                    Err(e) => {
                        self.err(cc.span(), format!("{k}.subject"), format!("bad regex `{re}`: {}", one_line(&e)))
                    }
                },
                (None, None, Some(list)) => {
                    let mut out = Vec::new();
                    for f in list.to_vec() {
                        let hex: String = f.chars().filter(|c| *c != ':').collect::<String>().to_ascii_lowercase();
                        if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            out.push(hex);
                        } else {
                            self.err(
                                cc.span(),
                                format!("{k}.fingerprint"),
                                format!("`{f}` is not a SHA-256 fingerprint (64 hex digits, colons allowed)"),
                            );
                        }
                    }
                    parts.push(Condition::ClientCert(ClientCertTest::Fingerprint(out)));
                }
                _ => self.err(cc.span(), k, "give exactly one of `present`, `subject` or `fingerprint`"),
            }
        }
        if let Some(n) = &c.not {
            parts.push(Condition::Not(Box::new(self.cond(n, &format!("{key}.not"), form, tracking))));
        }
        if let Some(all) = &c.all {
            let cs =
                all.iter().enumerate().map(|(i, c)| self.cond(c, &format!("{key}.all[{i}]"), form, tracking)).collect();
            parts.push(Condition::All(cs));
        }
        if let Some(any) = &c.any {
            let cs =
                any.iter().enumerate().map(|(i, c)| self.cond(c, &format!("{key}.any[{i}]"), form, tracking)).collect();
            parts.push(Condition::Any(cs));
        }
        match parts.len() {
            0 => {
                self.err(span, key, "an empty condition matches everything; leave `when` out instead");
                Condition::Always
            }
            1 => parts.pop().expect("one part"),
            _ => Condition::All(parts),
        }
    }
}

/// Host names to match, lower-case; `*.example.com` matches names below example.com.
fn host_patterns(names: &OneOrMany) -> Vec<HostPattern> {
    names
        .to_vec()
        .into_iter()
        .map(|s| {
            // Matched without one trailing dot (HostPattern::matches), so stored without it.
            let mut s = s.to_ascii_lowercase();
            if s.ends_with('.') {
                s.pop();
            }
            match s.strip_prefix("*.") {
                Some(rest) => HostPattern::Suffix(format!(".{rest}")),
                None => HostPattern::Exact(s),
            }
        })
        .collect()
}

fn one_line(e: &regex::Error) -> String {
    e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}
