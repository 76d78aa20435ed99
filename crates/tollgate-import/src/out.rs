//! The Tollgate config being written: tables of keys in the order they are set,
//! each with the comments that say where it came from, rendered as TOML.
//!
//! Keys may be dotted (`timeout.connect`), so that every directive translated
//! gets its own line and its own comment; a key set twice keeps its first place
//! and takes the later value, as a later directive overrides an earlier one in
//! HAProxy and nginx.

use std::fmt::Write;

/// A TOML value.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Str(String),
    Int(i64),
    Bool(bool),
    Arr(Vec<V>),
    /// An inline table, keys in order.
    Table(Vec<(String, V)>),
}

impl V {
    pub fn s(s: impl Into<String>) -> V {
        V::Str(s.into())
    }

    pub fn strs<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> V {
        V::Arr(items.into_iter().map(|s| V::Str(s.into())).collect())
    }

    pub fn table<const N: usize>(pairs: [(&str, V); N]) -> V {
        V::Table(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    fn render(&self, out: &mut String) {
        match self {
            V::Str(s) => out.push_str(&string(s)),
            V::Int(i) => {
                let _ = write!(out, "{i}");
            }
            V::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            V::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.render(out);
                }
                out.push(']');
            }
            V::Table(pairs) => {
                if pairs.is_empty() {
                    out.push_str("{}");
                    return;
                }
                // A key given twice (an option repeated on a line) keeps its
                // last value, as a later option overrides an earlier one.
                out.push_str("{ ");
                let mut first = true;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if pairs[i + 1..].iter().any(|(later, _)| later == k) {
                        continue;
                    }
                    if !first {
                        out.push_str(", ");
                    }
                    first = false;
                    out.push_str(&key(k));
                    out.push_str(" = ");
                    v.render(out);
                }
                out.push_str(" }");
            }
        }
    }
}

/// A string on one line: a literal string ('...') when it has backslashes
/// and nothing that needs escaping (a regex stays readable), else a basic
/// string with escapes.
fn string(s: &str) -> String {
    if s.contains('\\') && !s.contains('\'') && !s.chars().any(|c| c.is_control()) {
        return format!("'{s}'");
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A key as TOML writes it: bare when it can be, quoted otherwise; each part
/// of a dotted key on its own.
fn key(k: &str) -> String {
    path_key(&k.split('.').collect::<Vec<_>>())
}

/// A key whose parts may contain dots (a header name never does, but an
/// error page path or a host could): each part quoted as needed.
pub fn path_key(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| {
            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                p.to_string()
            } else {
                string(p)
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[derive(Debug, Clone)]
struct Entry {
    /// Already in TOML form (see [`key`] and [`path_key`]).
    key: String,
    value: V,
    comments: Vec<String>,
}

/// One table: `[global]`, a `[[frontend]]`, a rule, a server...
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Comment lines written above the table's header.
    pub comments: Vec<String>,
    entries: Vec<Entry>,
    /// Comment lines written after the keys (directives with no equivalent).
    notes: Vec<String>,
}

impl Table {
    /// Sets `key` (dotted parts are separate keys) with a comment line above it.
    pub fn set(&mut self, key_: &str, value: V, comment: impl Into<String>) {
        self.set_raw(key(key_), value, comment.into())
    }

    /// Sets a key given as parts, each quoted as needed (`["error_pages", "503"]`).
    pub fn set_path(&mut self, parts: &[&str], value: V, comment: impl Into<String>) {
        self.set_raw(path_key(parts), value, comment.into())
    }

    fn set_raw(&mut self, key: String, value: V, comment: String) {
        let comment = (!comment.is_empty()).then_some(comment);
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.value = value;
            e.comments.extend(comment);
        } else {
            self.entries.push(Entry { key, value, comments: comment.into_iter().collect() });
        }
    }

    /// Takes every key of `other` (arrays are appended to, other values replaced).
    pub fn absorb(&mut self, other: &Table) {
        for e in &other.entries {
            let existing = self.entries.iter_mut().find(|x| x.key == e.key);
            match (existing, &e.value) {
                (Some(x), V::Arr(items)) if matches!(x.value, V::Arr(_)) => {
                    if let V::Arr(mine) = &mut x.value {
                        mine.extend(items.iter().cloned());
                    }
                    x.comments.extend(e.comments.iter().cloned());
                }
                _ => {
                    self.set_raw(e.key.clone(), e.value.clone(), e.comments.join("\n"));
                }
            }
        }
        self.notes.extend(other.notes.iter().cloned());
    }

    /// Appends to the array at `key` (made if missing).
    pub fn push(&mut self, key_: &str, value: V, comment: impl Into<String>) {
        let k = key(key_);
        let comment: String = comment.into();
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == k)
            && let V::Arr(items) = &mut e.value
        {
            items.push(value);
            if !comment.is_empty() {
                e.comments.push(comment);
            }
            return;
        }
        self.set_raw(k, V::Arr(vec![value]), comment);
    }

    /// The keys (in TOML form, dotted) and values, in order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|e| (e.key.as_str(), &e.value))
    }

    pub fn get(&self, key_: &str) -> Option<&V> {
        let k = key(key_);
        self.entries.iter().find(|e| e.key == k).map(|e| &e.value)
    }

    pub fn remove(&mut self, key_: &str) -> Option<V> {
        let k = key(key_);
        let i = self.entries.iter().position(|e| e.key == k)?;
        Some(self.entries.remove(i).value)
    }

    pub fn has(&self, key_: &str) -> bool {
        self.get(key_).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A comment line among the keys, for a directive that has no equivalent.
    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    fn render(&self, header: &str, indent: &str, out: &mut String) {
        for c in &self.comments {
            comment(out, indent, c);
        }
        if !header.is_empty() {
            let _ = writeln!(out, "{indent}{header}");
        }
        for e in &self.entries {
            for c in &e.comments {
                comment(out, indent, c);
            }
            let _ = write!(out, "{indent}{} = ", e.key);
            e.value.render(out);
            out.push('\n');
        }
        for n in &self.notes {
            comment(out, indent, n);
        }
    }
}

fn comment(out: &mut String, indent: &str, text: &str) {
    // TOML comments take no control character but tab: others are written escaped.
    let text: String = text
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect();
    for line in text.lines() {
        if line.is_empty() {
            let _ = writeln!(out, "{indent}#");
        } else {
            let _ = writeln!(out, "{indent}# {line}");
        }
    }
}

/// A `[[frontend]]` and its `[[frontend.rule]]`s.
#[derive(Debug, Clone, Default)]
pub struct Frontend {
    pub name: String,
    pub table: Table,
    pub rules: Vec<Table>,
    pub connection_rules: Vec<Table>,
}

/// A `[[backend]]` and its `[[backend.server]]`s.
#[derive(Debug, Clone, Default)]
pub struct Backend {
    pub name: String,
    pub table: Table,
    pub servers: Vec<Table>,
}

/// The whole config.
#[derive(Debug, Default)]
pub struct Out {
    /// Comment lines at the top of the file.
    pub header: Vec<String>,
    pub global: Table,
    pub defaults: Table,
    pub admin: Option<Table>,
    pub userlists: Vec<Table>,
    pub caches: Vec<Table>,
    pub tables: Vec<Table>,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    /// Comment lines at the end: what had nowhere else to go.
    pub trailer: Vec<String>,
}

impl Out {
    pub fn backend(&self, name: &str) -> Option<&Backend> {
        self.backends.iter().find(|b| b.name == name)
    }

    pub fn backend_mut(&mut self, name: &str) -> Option<&mut Backend> {
        self.backends.iter_mut().find(|b| b.name == name)
    }

    pub fn frontend_mut(&mut self, name: &str) -> Option<&mut Frontend> {
        self.frontends.iter_mut().find(|f| f.name == name)
    }

    /// Tollgate compares paths without case in rules that deny or ask for
    /// credentials unless told otherwise; HAProxy and nginx compare them as
    /// written (their `-i` and `~*` say otherwise, and are kept). Such rules
    /// that test a path say so.
    pub fn keep_path_case(&mut self) {
        fn tests_path(v: &V) -> bool {
            match v {
                V::Table(pairs) => pairs
                    .iter()
                    .any(|(k, v)| matches!(k.as_str(), "path" | "path_prefix" | "path_regex") || tests_path(v)),
                V::Arr(items) => items.iter().any(tests_path),
                _ => false,
            }
        }
        for f in &mut self.frontends {
            for r in &mut f.rules {
                let folds = ["deny", "tarpit", "silent_drop", "auth"].iter().any(|k| r.has(k));
                if folds && !r.has("path_case_insensitive") && r.get("when").is_some_and(tests_path) {
                    r.set("path_case_insensitive", V::Bool(false), "paths compared as written, as the source did");
                }
            }
        }
    }

    /// Whether there is something to run: a frontend that listens.
    pub fn usable(&self) -> bool {
        self.frontends.iter().any(|f| f.table.has("bind"))
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.header {
            comment(&mut out, "", c);
        }
        let section = |t: &Table, header: &str, out: &mut String| {
            if t.is_empty() && t.notes.is_empty() && t.comments.is_empty() {
                return;
            }
            out.push('\n');
            t.render(header, "", out);
        };
        section(&self.global, "[global]", &mut out);
        section(&self.defaults, "[defaults]", &mut out);
        if let Some(a) = &self.admin {
            section(a, "[admin]", &mut out);
        }
        for u in &self.userlists {
            section(u, "[[userlist]]", &mut out);
        }
        for t in &self.tables {
            section(t, "[[table]]", &mut out);
        }
        for c in &self.caches {
            section(c, "[[cache]]", &mut out);
        }
        for f in &self.frontends {
            out.push('\n');
            f.table.render("[[frontend]]", "", &mut out);
            for r in &f.connection_rules {
                out.push('\n');
                r.render("[[frontend.connection_rule]]", "  ", &mut out);
            }
            for r in &f.rules {
                out.push('\n');
                r.render("[[frontend.rule]]", "  ", &mut out);
            }
        }
        for b in &self.backends {
            out.push('\n');
            b.table.render("[[backend]]", "", &mut out);
            for s in &b.servers {
                out.push('\n');
                s.render("[[backend.server]]", "  ", &mut out);
            }
        }
        if !self.trailer.is_empty() {
            out.push('\n');
            for c in &self.trailer {
                comment(&mut out, "", c);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_dotted_keys_comments_and_later_values() {
        let mut o = Out::default();
        o.defaults.set("timeout.connect", V::Int(5000), "timeout connect 5000");
        o.defaults.set("timeout.connect", V::s("5s"), "timeout connect 5s");
        o.defaults.set_path(&["error_pages", "503"], V::s("/e/503.html"), "");
        o.defaults.note("option httplog: the access log is always on");
        let mut f = Frontend { name: "web".into(), ..Default::default() };
        f.table.set("name", V::s("web"), "");
        f.table.push("bind", V::s(":80"), "bind *:80");
        f.table.push(
            "bind",
            V::table([("addr", V::s(":443")), ("tls", V::table([("certs", V::strs(["a b.pem"]))]))]),
            "",
        );
        let mut r = Table::default();
        r.set_path(&["set_request_headers", "X-Forwarded-Proto"], V::s("https"), "");
        f.rules.push(r);
        o.frontends.push(f);
        let text = o.render();
        assert_eq!(
            text,
            "\n[defaults]\n# timeout connect 5000\n# timeout connect 5s\ntimeout.connect = \"5s\"\n\
             error_pages.503 = \"/e/503.html\"\n# option httplog: the access log is always on\n\
             \n[[frontend]]\nname = \"web\"\n# bind *:80\nbind = [\":80\", { addr = \":443\", tls = { certs = [\"a b.pem\"] } }]\n\
             \n  [[frontend.rule]]\n  set_request_headers.X-Forwarded-Proto = \"https\"\n"
        );
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(parsed["defaults"]["timeout"]["connect"].as_str(), Some("5s"));
    }

    #[test]
    fn a_key_twice_in_an_inline_table_keeps_the_last() {
        let v = V::Table(vec![("a".into(), V::Int(1)), ("b".into(), V::Int(2)), ("a".into(), V::Int(3))]);
        let mut out = String::new();
        v.render(&mut out);
        assert_eq!(out, "{ b = 2, a = 3 }");
    }

    #[test]
    fn comments_escape_control_characters() {
        let mut o = Out::default();
        o.global.note("a\rb\u{1}c\td");
        o.global.set("workers", V::Int(1), "x\u{7f}");
        let text = o.render();
        assert!(text.contains("# a\\rb\\u{1}c\td"), "{text}");
        toml::from_str::<toml::Value>(&text).unwrap();
    }

    #[test]
    fn strings_stay_on_one_line() {
        for s in ["a\nb\"c", "(?i)^www\\.", "it's \\d", "\u{1}x\t", ""] {
            let line = string(s);
            assert!(!line.contains('\n'), "{line}");
            let v: toml::Value = toml::from_str(&format!("k = {line}")).unwrap();
            assert_eq!(v["k"].as_str(), Some(s), "{line}");
        }
        assert_eq!(string("(?i)^www\\."), "'(?i)^www\\.'");
    }

    #[test]
    fn quotes_keys_that_need_it() {
        assert_eq!(path_key(&["error_pages", "503"]), "error_pages.503");
        assert_eq!(path_key(&["set_request_headers", "X Odd"]), "set_request_headers.\"X Odd\"");
        assert_eq!(key("a.b"), "a.b");
    }
}
