//! `[[table]]` (counters per key), a frontend's `track` and its
//! `[[frontend.connection_rule]]`s, and the parts of a rule that use them
//! (`counter` conditions are built in rules.rs).

use super::*;

/// Entries a table holds when `size` is left out (HAProxy makes it required;
/// 100,000 entries are about 20 MB).
const DEFAULT_SIZE: i64 = 100_000;
/// At most this many (a bound on memory a typo could take).
const MAX_SIZE: i64 = 50_000_000;
/// The config's tables and those a frontend tracks (indexes), for its rules.
pub(crate) type Tracking<'a> = (&'a [TrackTable], &'a [usize]);

/// A frontend tracks at most this many tables (HAProxy's sc0, sc1, sc2).
pub(crate) const MAX_TRACKED: usize = 3;

impl Builder<'_> {
    /// The `[[table]]`s, in file order.
    pub(super) fn tables(&mut self, raw: &[Spanned<RawTable>]) -> Vec<TrackTable> {
        let mut tables: Vec<TrackTable> = Vec::new();
        for (i, t) in raw.iter().enumerate() {
            let key = format!("table[{i}]");
            let t = t.get_ref();
            let name = t.name.get_ref().clone();
            if !valid_name(&name) {
                self.err(
                    t.name.span(),
                    format!("{key}.name"),
                    format!("`{name}` is not a valid name (letters, digits, '-', '_', '.')"),
                );
            }
            if tables.iter().any(|o| o.name == name) {
                self.err(t.name.span(), format!("{key}.name"), format!("table `{name}` is defined twice"));
            }
            let k = t.key.get_ref();
            let track_key = match k.split_once(':') {
                None if k == "src" => Some(TrackKey::Src),
                None if k == "path" => Some(TrackKey::Path),
                Some(("header", h)) => match HeaderName::from_bytes(h.trim().as_bytes()) {
                    Ok(h) => Some(TrackKey::Header(h)),
                    Err(_) => {
                        self.err(t.key.span(), format!("{key}.key"), format!("`{h}` is not a valid header name"));
                        None
                    }
                },
                Some(("cookie", c)) if !c.trim().is_empty() && c.trim().bytes().all(is_tchar) => {
                    Some(TrackKey::Cookie(c.trim().to_string()))
                }
                Some(("cookie", c)) => {
                    self.err(t.key.span(), format!("{key}.key"), format!("`{c}` is not a cookie name"));
                    None
                }
                _ => {
                    self.err(
                        t.key.span(),
                        format!("{key}.key"),
                        format!(
                            "`{k}` is not a key: \"src\" (the client's address), \"header:<name>\", \
                             \"cookie:<name>\" or \"path\""
                        ),
                    );
                    None
                }
            };
            let size = match &t.size {
                Some(s) => self.int_in(s, 1, MAX_SIZE, &format!("{key}.size")).unwrap_or(DEFAULT_SIZE),
                None => DEFAULT_SIZE,
            } as usize;
            let period = t
                .period
                .as_ref()
                .map_or(Some(Duration::from_secs(10)), |p| self.duration(p, &format!("{key}.period"), false));
            let expire = t
                .expire
                .as_ref()
                .map_or(Some(Duration::from_secs(60)), |e| self.duration(e, &format!("{key}.expire"), false));
            // A rate reads this period and the one before it: an entry that
            // expired sooner would forget what its rate still counts.
            if let (Some(p), Some(e), Some(span)) = (period, expire, t.expire.as_ref().map(Spanned::span))
                && e < p
            {
                self.err(
                    span,
                    format!("{key}.expire"),
                    format!(
                        "{} is shorter than the table's period ({}): its rates would be forgotten",
                        fmt_duration(e),
                        fmt_duration(p)
                    ),
                );
            }
            let share = self.share(t.share.as_ref(), &format!("{key}.share"));
            if let (Some(key), Some(period), Some(expire)) = (track_key, period, expire) {
                tables.push(TrackTable { name, key, size, expire: expire.max(period), period, share });
            }
        }
        tables
    }

    /// A frontend's `track`: table names to indexes.
    pub(super) fn track(
        &mut self,
        raw: Option<&Spanned<Vec<Spanned<String>>>>,
        key: &str,
        tables: &[TrackTable],
    ) -> Vec<usize> {
        let Some(raw) = raw else { return Vec::new() };
        let mut out = Vec::new();
        for (i, name) in raw.get_ref().iter().enumerate() {
            let k = format!("{key}.track[{i}]");
            match tables.iter().position(|t| &t.name == name.get_ref()) {
                Some(t) if out.contains(&t) => {
                    self.err(name.span(), k, format!("`{}` is tracked twice", name.get_ref()))
                }
                Some(t) => out.push(t),
                None => self.err(name.span(), k, format!("no [[table]] is named `{}`", name.get_ref())),
            }
        }
        if out.len() > MAX_TRACKED {
            self.err(
                raw.span(),
                format!("{key}.track"),
                format!("a frontend tracks at most {MAX_TRACKED} tables (HAProxy's sc0..sc2); {} given", out.len()),
            );
        }
        out
    }

    /// A `counter` condition: its table must be tracked by the frontend
    /// (`tracked`), and a connection counter needs a `src` table.
    pub(super) fn counter_cond(
        &mut self,
        c: &Spanned<RawCounterCond>,
        key: &str,
        (tables, tracked): Tracking<'_>,
    ) -> Option<CounterCond> {
        let v = c.get_ref();
        let table = tables.iter().position(|t| t.name == v.table);
        let counter = Counter::from_name(&v.name);
        if table.is_none() {
            self.err(c.span(), format!("{key}.table"), format!("no [[table]] is named `{}`", v.table));
        }
        if counter.is_none() {
            let names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
            self.err(
                c.span(),
                format!("{key}.name"),
                format!("`{}` is not a counter (one of {})", v.name, names.join(", ")),
            );
        }
        if v.above < 0 {
            self.err(c.span(), format!("{key}.above"), format!("{} is negative", v.above));
        }
        let (table, counter) = (table?, counter?);
        if !tracked.contains(&table) {
            self.err(
                c.span(),
                format!("{key}.table"),
                format!("the frontend does not track `{}`: add it to the frontend's `track`", v.table),
            );
        }
        if counter.of_connections() && tables[table].key != TrackKey::Src {
            self.err(
                c.span(),
                format!("{key}.name"),
                format!(
                    "`{}` counts connections, which only a table keyed by \"src\" sees (`{}` is keyed by a request's {})",
                    v.name,
                    v.table,
                    match &tables[table].key {
                        TrackKey::Header(_) => "header",
                        TrackKey::Cookie(_) => "cookie",
                        _ => "path",
                    }
                ),
            );
        }
        (v.above >= 0).then_some(CounterCond { table, counter, above: v.above as u64 })
    }

    /// `[[frontend.connection_rule]]`: `when` may test `src` and the counters
    /// of the frontend's `src` tables, which is all a connection has before
    /// its first byte; the action is `reject` or `silent_drop`.
    pub(super) fn connection_rule(
        &mut self,
        r: &Spanned<RawConnRule>,
        key: &str,
        (tables, tracked): Tracking<'_>,
    ) -> Option<ConnectionRule> {
        let span = r.span();
        let r = r.get_ref();
        let before = self.errors.len();
        let when = match &r.when {
            Some(c) => {
                self.connection_cond(c.get_ref(), &format!("{key}.when"));
                let form = PathForm { normalize: false, fold: false };
                self.cond(c, &format!("{key}.when"), form, (tables, tracked))
            }
            None => Condition::Always,
        };
        let mut tables_used = Vec::new();
        when.tables(&mut tables_used);
        for t in tables_used {
            if tables.get(t).is_some_and(|t| t.key != TrackKey::Src) {
                self.err(
                    span.clone(),
                    format!("{key}.when.counter"),
                    format!(
                        "table `{}` is keyed by a request's part: a connection is counted in \"src\" tables only",
                        tables[t].name
                    ),
                );
            }
        }
        let action = match (r.reject.as_ref().map(|v| *v.get_ref()), r.silent_drop.as_ref().map(|v| *v.get_ref())) {
            (Some(true), None | Some(false)) => Some(ConnectionAction::Reject),
            (None | Some(false), Some(true)) => Some(ConnectionAction::SilentDrop),
            (Some(true), Some(true)) => {
                self.err(span, key, "give one of `reject` or `silent_drop`, not both");
                None
            }
            _ => {
                self.err(span, key, "a connection rule needs `reject = true` or `silent_drop = true`");
                None
            }
        };
        if self.errors.len() > before {
            return None;
        }
        action.map(|action| ConnectionRule { when, action })
    }

    /// Keys a connection has no value for yet: each an error at its place.
    fn connection_cond(&mut self, c: &RawCond, key: &str) {
        let request_only = [
            ("host", c.host.as_ref().map(Spanned::span)),
            ("path", c.path.as_ref().map(Spanned::span)),
            ("path_prefix", c.path_prefix.as_ref().map(Spanned::span)),
            ("path_regex", c.path_regex.as_ref().map(Spanned::span)),
            ("method", c.method.as_ref().map(Spanned::span)),
            ("header", c.header.as_ref().map(Spanned::span)),
            ("tls", c.tls.as_ref().map(Spanned::span)),
            ("sni", c.sni.as_ref().map(Spanned::span)),
            ("client_cert", c.client_cert.as_ref().map(Spanned::span)),
        ];
        for (name, span) in request_only {
            if let Some(span) = span {
                self.err(
                    span,
                    format!("{key}.{name}"),
                    format!(
                        "a connection rule acts before TLS and HTTP: it can test `src` and \"src\" tables' \
                         counters, not `{name}` (use a [[frontend.rule]])"
                    ),
                );
            }
        }
        if let Some(n) = &c.not {
            self.connection_cond(n.get_ref(), &format!("{key}.not"));
        }
        for (name, list) in [("all", &c.all), ("any", &c.any)] {
            for (i, c) in list.iter().flatten().enumerate() {
                self.connection_cond(c.get_ref(), &format!("{key}.{name}[{i}]"));
            }
        }
    }
}
