//! Locations that serve files (`root`, `alias`, `index`, `try_files`), the
//! files `error_page` names, and htpasswd files for `auth_basic`.

use super::Cx;
use super::location::{Loc, LocKind, SrvCtx};
use super::parse::Directive;
use crate::out::{Backend, Table, V};
use crate::{Kind, units};
use std::collections::HashMap;

/// The file an `error_page` URI names: through the location that serves it.
pub(crate) fn file_for(uri: &str, locations: &[&Directive], loc_dirs: &[&Directive]) -> Option<String> {
    let mut best: Option<(&Directive, usize, bool)> = None;
    for l in locations {
        let (exact, path) = match (l.arg(0), l.args.len()) {
            ("=", _) => (true, l.arg(1)),
            ("^~", _) => (false, l.arg(1)),
            (p, 1) if p.starts_with('/') => (false, p),
            _ => continue,
        };
        if (exact && path == uri) || (!exact && uri.starts_with(path)) {
            let score = if exact { usize::MAX } else { path.len() };
            if best.is_none_or(|b| score > b.1) {
                best = Some((l, score, exact));
            }
        }
    }
    let find =
        |dirs: &[&Directive], name: &str| dirs.iter().rev().find(|d| d.name == name).map(|d| d.arg(0).to_string());
    if let Some((l, _, _)) = best {
        let own: Vec<&Directive> = l.children().iter().collect();
        if let Some(a) = find(&own, "alias") {
            let prefix = if l.arg(0) == "=" || l.arg(0) == "^~" { l.arg(1) } else { l.arg(0) };
            let rest = uri.strip_prefix(prefix).unwrap_or("");
            return Some(if rest.is_empty() {
                a
            } else {
                format!("{}/{}", a.trim_end_matches('/'), rest.trim_start_matches('/'))
            });
        }
        if let Some(r) = find(&own, "root") {
            return (!r.contains('$')).then(|| format!("{}{uri}", r.trim_end_matches('/')));
        }
    }
    let r = find(loc_dirs, "root")?;
    (!r.contains('$')).then(|| format!("{}{uri}", r.trim_end_matches('/')))
}

impl Cx {
    /// A location that serves files: its static backend.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn static_action(
        &mut self,
        ctx: &SrvCtx,
        l: &Loc,
        root: Option<&Directive>,
        alias: Option<&Directive>,
        index: Option<&Directive>,
        try_files: Option<&Directive>,
        named: &HashMap<String, &Directive>,
        notes: &mut Vec<String>,
    ) -> Option<String> {
        let mut comments = Vec::new();
        let dir = if let Some(a) = alias {
            comments.push(self.log.com(a));
            if let Some(r) = root {
                self.log.done(r);
            }
            let a_path = a.arg(0).trim_end_matches('/');
            let loc = l.path.trim_end_matches('/');
            match a_path
                .strip_suffix(loc)
                .filter(|_| matches!(l.kind, LocKind::Prefix | LocKind::NoRegex) && !loc.is_empty())
            {
                Some(parent) => parent.to_string(),
                None => {
                    self.log.warn_in(
                        notes,
                        a,
                        Kind::Approximate,
                        format!(
                            "Tollgate looks files up by the whole path under root: {} is served from {}{} (nginx: {} \
                             stands for {})",
                            l.path,
                            a_path,
                            l.path,
                            a.arg(0),
                            l.path
                        ),
                    );
                    a_path.to_string()
                }
            }
        } else if let Some(r) = root {
            comments.push(self.log.com(r));
            r.arg(0).to_string()
        } else {
            if try_files.is_some() || index.is_some() {
                for d in [try_files, index].into_iter().flatten() {
                    self.log.warn_in(
                        notes,
                        d,
                        Kind::NoEquivalent,
                        "no root: nginx's default (html under its prefix) is not known here",
                    );
                }
            }
            return None;
        };
        if dir.contains('$') {
            let d = alias.or(root)?;
            self.log.warn_in(
                notes,
                d,
                Kind::NoEquivalent,
                "a directory named by variables: a static backend has one root",
            );
            for d in [try_files, index].into_iter().flatten() {
                self.log.done(d);
            }
            return None;
        }
        let dir = if dir.is_empty() { "/".to_string() } else { dir };
        let mut idx = None;
        if let Some(i) = index {
            let script = |f: &str| {
                let ext = f.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
                matches!(ext.as_str(), "php" | "phtml" | "cgi" | "pl" | "py" | "jsp" | "asp" | "aspx")
            };
            let files: Vec<String> = i.args.iter().filter(|f| !f.contains('$') && !script(f)).cloned().collect();
            comments.push(self.log.com(i));
            if i.args.iter().any(|f| script(f)) {
                self.log.warn_in(
                    notes,
                    i,
                    Kind::Approximate,
                    "scripts are left out of the index: a static backend would send their source, not run them",
                );
            }
            if !files.is_empty() {
                idx = Some(files);
            }
        }
        let mut fallback = None;
        if let Some(t) = try_files {
            comments.push(self.log.com(t));
            let (last, files) = t.args.split_last().map(|(l, f)| (l.as_str(), f)).unwrap_or(("", &[]));
            let usual = files.iter().all(|f| f == "$uri" || f == "$uri/");
            if !usual {
                self.log.warn_in(
                    notes,
                    t,
                    Kind::Approximate,
                    "the static backend tries the path, then the index files of a directory; other names are not tried",
                );
            }
            if last == "=404" {
            } else if let Some(code) = last.strip_prefix('=') {
                self.log.warn_in(notes, t, Kind::Approximate, format!("a missing file gets 404 (nginx: {code})"));
            } else if last.starts_with('@') {
                match named.get(last).copied() {
                    Some(nl) => {
                        let pass = nl.children().iter().find(|d| d.name == "proxy_pass");
                        let mut n2 = Vec::new();
                        // (nginx refuses a URI in a named location's proxy_pass: no rewrite.)
                        let mut no_rewrite = None;
                        let b = pass
                            .and_then(|p| self.proxy_target(p, false, "/", LocKind::Prefix, &mut n2, &mut no_rewrite));
                        notes.extend(n2);
                        match b {
                            Some(b) => {
                                self.log.done(nl);
                                for k in nl.children() {
                                    if !self.log.is_done(k)
                                        && let Some(c) = self.log.warn(
                                            k,
                                            Kind::Approximate,
                                            "in the named location the static backend falls back to: not applied",
                                        )
                                    {
                                        notes.push(c);
                                    }
                                }
                                fallback = Some(b);
                            }
                            None => self.log.warn_in(
                                notes,
                                t,
                                Kind::NoEquivalent,
                                format!("{last} does not proxy_pass to a server: a missing file gets 404"),
                            ),
                        }
                    }
                    None => self.log.warn_in(
                        notes,
                        t,
                        Kind::NoEquivalent,
                        format!("no location {last}: a missing file gets 404"),
                    ),
                }
            } else {
                self.log.warn_in(
                    notes,
                    t,
                    Kind::Approximate,
                    format!("a missing file gets 404 (nginx serves {last} instead)"),
                );
            }
        }
        if !dir.starts_with('/')
            && let Some(d) = alias.or(root)
        {
            self.log.warn_in(
                notes,
                d,
                Kind::Approximate,
                "a relative root is relative to the config file's directory in Tollgate (nginx: its prefix)",
            );
        }
        let key = format!("static:{dir}|{idx:?}|{fallback:?}");
        if let Some(n) = self.backend_keys.get(&key) {
            return Some(n.clone());
        }
        let name = self.unique_name(&format!("{}-files", ctx.label));
        self.backend_keys.insert(key, name.clone());
        let mut b = Backend { name: name.clone(), ..Default::default() };
        b.table.comments.push(format!("the files of {dir}"));
        b.table.set("name", V::s(&name), "");
        let mut pairs = vec![("root".to_string(), V::s(&dir))];
        if let Some(i) = idx {
            pairs.push(("index".into(), V::strs(i)));
        }
        if let Some(f) = fallback {
            pairs.push(("fallback".into(), V::s(f)));
        }
        for c in comments {
            b.table.set("static", V::Table(pairs.clone()), c);
        }
        b.table.set("static", V::Table(pairs), "");
        self.out.backends.push(b);
        Some(name)
    }

    /// A userlist from an htpasswd file, made once per file.
    pub(crate) fn userlist(&mut self, d: &Directive, notes: &mut Vec<String>) -> Option<String> {
        let file = d.arg(0).to_string();
        if let Some(u) = self.userlists.get(&file) {
            self.log.done(d);
            return u.clone();
        }
        let path = if std::path::Path::new(&file).is_absolute() {
            crate::resolve(self.root.as_deref(), std::path::Path::new(&file))
        } else {
            self.main_dir.join(&file)
        };
        let text = match std::fs::read(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                self.log.warn_in(
                    notes,
                    d,
                    Kind::NoEquivalent,
                    format!(
                        "cannot read {}: {e}: no userlist is made, and the location answers 403 in the output: \
                         add a [[userlist]] and `auth` by hand",
                        crate::shown(self.root.as_deref(), &path)
                    ),
                );
                self.userlists.insert(file, None);
                return None;
            }
        };
        let mut users = Vec::new();
        let mut t = Table::default();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.splitn(3, ':');
            let (Some(user), Some(hash)) = (parts.next(), parts.next()) else { continue };
            if user.is_empty() || user.chars().any(char::is_control) {
                continue;
            }
            let entry = if ["$2a$", "$2b$", "$2y$", "$5$", "$6$"].iter().any(|p| hash.starts_with(p)) {
                Some(("password", hash.to_string()))
            } else {
                hash.strip_prefix("{PLAIN}").map(|plain| ("insecure_password", plain.to_string()))
            };
            match entry {
                Some((k, v)) if !v.is_empty() => users.push(V::table([("name", V::s(user)), (k, V::s(v))])),
                _ => {
                    let scheme = if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
                        "MD5-crypt"
                    } else if hash.starts_with("{SHA}") || hash.starts_with("{SSHA}") {
                        "SHA-1"
                    } else {
                        "an old or unknown scheme"
                    };
                    self.log.warn_in(
                        notes,
                        d,
                        Kind::NoEquivalent,
                        format!(
                            "user {user}: a password hash in {scheme}, which Tollgate does not take (bcrypt, SHA-256 or \
                             SHA-512 crypt): make a new one with `htpasswd -nbB {user} PASSWORD`; the user is left out"
                        ),
                    );
                }
            }
        }
        if users.is_empty() {
            self.log.warn_in(
                notes,
                d,
                Kind::NoEquivalent,
                format!(
                    "{}: no user Tollgate can take: the location answers 403 in the output",
                    crate::shown(self.root.as_deref(), &path)
                ),
            );
            self.userlists.insert(file, None);
            return None;
        }
        let stem =
            path.file_name().map(|f| f.to_string_lossy().trim_start_matches('.').to_string()).unwrap_or_default();
        let base = units::name(if stem.is_empty() { "htpasswd" } else { &stem });
        let taken: Vec<String> = self.userlists.values().flatten().cloned().collect();
        let mut name = base.clone();
        let mut n = 2;
        while taken.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        t.set("name", V::s(&name), self.log.com(d));
        t.set("users", V::Arr(users), format!("from {}", crate::shown(self.root.as_deref(), &path)));
        self.out.userlists.push(t);
        self.userlists.insert(file, Some(name.clone()));
        Some(name)
    }
}
