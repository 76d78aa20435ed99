//! ACLs and `if` / `unless` conditions, as Tollgate `when` tables.
//!
//! An ACL that cannot be expressed is kept as the reason why, so that a rule
//! using it is reported rather than written with part of its condition
//! missing (a `deny` without its condition would deny everything).

use crate::out::V;
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// Always true (`TRUE`, an empty condition).
    True,
    /// One `when` key and its value; `ci_path` when a path key is to match
    /// without case (`-i`), which Tollgate sets on the rule.
    Leaf {
        key: &'static str,
        value: V,
        ci_path: bool,
    },
    /// `http_auth(<userlist>)`: the request has a valid user of the list.
    Auth(String),
    Not(Box<Cond>),
    All(Vec<Cond>),
    Any(Vec<Cond>),
}

pub type Acl = Result<Cond, String>;

/// The ACLs of a section, by name; a name defined on several lines is their OR.
#[derive(Debug, Default, Clone)]
pub struct Acls {
    pub(super) map: HashMap<String, Acl>,
    /// The stick table each `track-scN` counts in, for `sc_*` fetches.
    pub sc_tables: [Option<String>; 3],
    /// The table of a `stick-table` line in this section.
    pub own_table: Option<String>,
    /// Absolute paths of `-f` files are read under it.
    pub root: Option<std::path::PathBuf>,
}

impl Acls {
    /// `acl <name> <criterion> [flags] [values]` (the words after `acl`).
    pub fn define(&mut self, words: &[String], base: &Path) {
        let Some(name) = words.first() else { return };
        let acl = parse_acl(&words[1..], self, base);
        let merged = match (self.map.remove(name), acl) {
            (None, a) => a,
            (Some(Err(e)), _) | (Some(Ok(_)), Err(e)) => Err(e),
            (Some(Ok(a)), Ok(b)) => Ok(or(vec![a, b])),
        };
        self.map.insert(name.clone(), merged);
    }

    /// The condition after `if` or `unless` (`words` starts with the keyword).
    pub fn condition(&self, words: &[String], base: &Path) -> Acl {
        let (negate, words) = match words.first().map(String::as_str) {
            Some("if") => (false, &words[1..]),
            Some("unless") => (true, &words[1..]),
            _ => return Ok(Cond::True),
        };
        let mut groups: Vec<Vec<Cond>> = vec![Vec::new()];
        let mut i = 0;
        while i < words.len() {
            let w = words[i].as_str();
            if w == "||" || w == "or" {
                groups.push(Vec::new());
                i += 1;
                continue;
            }
            let (neg, w) = match w.strip_prefix('!') {
                Some("") => {
                    i += 1;
                    (true, words.get(i).map(String::as_str).unwrap_or(""))
                }
                Some(rest) => (true, rest),
                None => (false, w),
            };
            let term = if w == "{" {
                let end = words[i..].iter().position(|x| x == "}").map(|p| p + i).ok_or("`{` without `}`")?;
                let c = parse_acl(&words[i + 1..end], self, base)?;
                i = end;
                c
            } else if w.is_empty() {
                return Err("`!` with nothing after it".into());
            } else {
                self.named(w)?
            };
            i += 1;
            let last = groups.last_mut().ok_or("empty condition")?;
            last.push(if neg { not(term) } else { term });
        }
        let c = or(groups.into_iter().map(and).collect());
        Ok(if negate { not(c) } else { c })
    }

    fn named(&self, name: &str) -> Acl {
        if let Some(a) = self.map.get(name) {
            return a.clone();
        }
        predefined(name).ok_or_else(|| format!("ACL `{name}` is not defined"))
    }
}

/// HAProxy's predefined ACLs that Tollgate can express.
fn predefined(name: &str) -> Option<Cond> {
    let method = |m: &[&str]| leaf("method", one_or_many(m.iter().map(|s| s.to_string()).collect()));
    Some(match name {
        "TRUE" | "HTTP" => Cond::True,
        "LOCALHOST" => leaf("src", V::strs(["127.0.0.0/8", "::1"])),
        "METH_GET" => method(&["GET", "HEAD"]),
        "METH_HEAD" => method(&["HEAD"]),
        "METH_POST" => method(&["POST"]),
        "METH_PUT" => method(&["PUT"]),
        "METH_DELETE" => method(&["DELETE"]),
        "METH_OPTIONS" => method(&["OPTIONS"]),
        "METH_CONNECT" => method(&["CONNECT"]),
        "METH_TRACE" => method(&["TRACE"]),
        _ => return None,
    })
}

fn leaf(key: &'static str, value: V) -> Cond {
    Cond::Leaf { key, value, ci_path: false }
}

pub fn not(c: Cond) -> Cond {
    match c {
        Cond::Not(inner) => *inner,
        c => Cond::Not(Box::new(c)),
    }
}

pub fn and(v: Vec<Cond>) -> Cond {
    let mut v: Vec<Cond> = v
        .into_iter()
        .flat_map(|c| match c {
            Cond::All(items) => items,
            c => vec![c],
        })
        .collect();
    v.retain(|c| *c != Cond::True);
    match v.len() {
        0 => Cond::True,
        1 => v.remove(0),
        _ => Cond::All(v),
    }
}

pub fn or(v: Vec<Cond>) -> Cond {
    let v: Vec<Cond> = v
        .into_iter()
        .flat_map(|c| match c {
            Cond::Any(items) => items,
            c => vec![c],
        })
        .collect();
    if v.contains(&Cond::True) {
        return Cond::True;
    }
    // Leaves of one list-valued key are one leaf with all the values.
    if let Some(Cond::Leaf { key: k0, ci_path: ci0, .. }) = v.first() {
        let (k0, ci0) = (*k0, *ci0);
        let listy = matches!(k0, "host" | "path" | "path_prefix" | "method" | "src" | "sni");
        if v.len() > 1
            && listy
            && v.iter().all(|c| matches!(c, Cond::Leaf { key, ci_path, .. } if *key == k0 && *ci_path == ci0))
        {
            let mut all = Vec::new();
            for c in v {
                if let Cond::Leaf { value, .. } = c {
                    match value {
                        V::Arr(items) => all.extend(items),
                        other => all.push(other),
                    }
                }
            }
            return Cond::Leaf { key: k0, value: V::Arr(all), ci_path: ci0 };
        }
    }
    match v.len() {
        0 => Cond::True,
        1 => v.into_iter().next().unwrap_or(Cond::True),
        _ => Cond::Any(v),
    }
}

/// The match method of an ACL: from the fetch's suffix (`path_beg`) or `-m`.
fn parse_acl(words: &[String], acls: &Acls, base: &Path) -> Acl {
    let fetch = words.first().ok_or("an ACL without a criterion")?;
    let mut ci = false;
    let mut method: Option<String> = None;
    let mut values: Vec<String> = Vec::new();
    let mut i = 1;
    let mut flags = true;
    while i < words.len() {
        let w = words[i].as_str();
        match w {
            "-i" if flags => ci = true,
            "-m" if flags => {
                i += 1;
                method = words.get(i).cloned();
            }
            "-f" if flags => {
                i += 1;
                let file = words.get(i).ok_or("-f without a file")?;
                let path = crate::resolve(acls.root.as_deref(), &base.join(file));
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("its values are in {}, which cannot be read here ({e})", path.display()))?;
                values.extend(
                    text.lines()
                        .map(|l| l.split('#').next().unwrap_or("").trim())
                        .filter(|l| !l.is_empty())
                        .map(String::from),
                );
            }
            "-n" | "-M" if flags => {}
            "-u" if flags => i += 1,
            "--" if flags => flags = false,
            _ => {
                flags = false;
                values.push(w.to_string());
            }
        }
        i += 1;
    }
    let (name, arg) = match fetch.split_once('(') {
        Some((n, rest)) => (n, rest.strip_suffix(')').unwrap_or(rest)),
        None => (fetch.as_str(), ""),
    };
    let name = name.strip_prefix("req.").unwrap_or(name);
    // The converter chain (`,lower`) changes what is compared.
    if arg.contains(',') || fetch.contains("),") || (!fetch.contains('(') && fetch.contains(',')) {
        return Err(format!("`{fetch}`: converters are not translated"));
    }
    if let Some(c) = counter_fetch(name, arg, acls, &values) {
        return c;
    }
    let (base_name, suffix) = split_suffix(name);
    let method = method.as_deref().or(suffix).unwrap_or("");
    match base_name {
        "hdr" | "fhdr" if arg.eq_ignore_ascii_case("host") => host(method, ci, values),
        "hdr" | "fhdr" => header(arg, method, ci, values),
        "path" => path(method, ci, values, false),
        "url" => path(method, ci, values, true),
        "method" => {
            if !matches!(method, "" | "str") {
                return Err(format!("`method -m {method}` is not translated"));
            }
            Ok(leaf("method", one_or_many(values.iter().map(|m| m.to_ascii_uppercase()).collect())))
        }
        "src" => {
            if values.is_empty() {
                return Err("`src` without addresses".into());
            }
            Ok(leaf("src", one_or_many(values)))
        }
        "ssl_fc" if values.is_empty() => Ok(leaf("tls", V::Bool(true))),
        "ssl_fc_sni" | "ssl_sni" | "req_ssl_sni" => sni(method, values),
        "http_auth" if !arg.is_empty() => Ok(Cond::Auth(arg.to_string())),
        _ => Err(format!("the criterion `{fetch}` has no Tollgate equivalent")),
    }
}

/// Stick counters (`sc_http_req_rate(0)`, `sc0_conn_cur`, `src_conn_cur`),
/// matched on the whole fetch name (before `_cnt` could pass for a match method).
fn counter_fetch(name: &str, arg: &str, acls: &Acls, values: &[String]) -> Option<Acl> {
    const COUNTERS: [&str; 12] = [
        "http_req_rate",
        "http_req_cnt",
        "http_err_rate",
        "http_err_cnt",
        "http_fail_rate",
        "http_fail_cnt",
        "conn_cur",
        "conn_rate",
        "conn_cnt",
        "bytes_in_rate",
        "bytes_out_rate",
        "bytes_in_cnt",
    ];
    let known = |c: &str| COUNTERS.contains(&c) || c == "bytes_out_cnt";
    if let Some(c) = name.strip_prefix("sc_").filter(|c| known(c)) {
        let idx = arg.split(',').next().unwrap_or("").trim().parse::<usize>();
        return Some(match idx {
            Ok(i) => counter(acls, i, c, values),
            Err(_) => Err(format!("`{name}({arg})`: a stick counter number")),
        });
    }
    let b = name.as_bytes();
    if b.len() > 4 && name.starts_with("sc") && b[2].is_ascii_digit() && b[3] == b'_' && known(&name[4..]) {
        return Some(counter(acls, (b[2] - b'0') as usize, &name[4..], values));
    }
    if let Some(c) = name.strip_prefix("src_").filter(|c| known(c)) {
        let table = if arg.is_empty() { acls.own_table.clone() } else { Some(arg.to_string()) };
        return Some(match table {
            Some(t) => counter_in(t, c, values),
            None => Err(format!("`{name}`: no stick table")),
        });
    }
    None
}

fn split_suffix(name: &str) -> (&str, Option<&'static str>) {
    for s in ["beg", "end", "sub", "reg", "dom", "dir", "len", "cnt", "found", "str", "val", "ip"] {
        if let Some(b) = name.strip_suffix(s).and_then(|b| b.strip_suffix('_')) {
            let s: &'static str = match s {
                "beg" => "beg",
                "end" => "end",
                "sub" => "sub",
                "reg" => "reg",
                "dom" => "dom",
                "dir" => "dir",
                "len" => "len",
                "cnt" => "cnt",
                "found" => "found",
                "str" => "str",
                "val" => "int",
                _ => "ip",
            };
            return (b, Some(s));
        }
    }
    (name, None)
}

/// A regex over the value for a match method.
fn regex_for(method: &str, ci: bool, values: &[String]) -> Result<String, String> {
    let parts: Vec<String> = match method {
        "" | "str" => values.iter().map(|v| format!("^{}$", regex::escape(v))).collect(),
        "beg" => values.iter().map(|v| format!("^{}", regex::escape(v))).collect(),
        "end" => values.iter().map(|v| format!("{}$", regex::escape(v))).collect(),
        "sub" => values.iter().map(|v| regex::escape(v)).collect(),
        "dir" => values.iter().map(|v| format!("(^|/){}(/|$)", regex::escape(v.trim_matches('/')))).collect(),
        "dom" => values.iter().map(|v| format!("(^|[./]){}([.:/]|$)", regex::escape(v.trim_matches('.')))).collect(),
        "reg" => {
            for v in values {
                regex::Regex::new(v)
                    .map_err(|_| format!("the regex `{v}` is not one Tollgate's regex engine reads"))?;
            }
            values.to_vec()
        }
        m => return Err(format!("the match method `{m}` is not translated")),
    };
    if parts.is_empty() {
        return Err("an ACL without values".into());
    }
    let body = if parts.len() == 1 { parts[0].clone() } else { format!("(?:{})", parts.join(")|(?:")) };
    Ok(if ci { format!("(?i){body}") } else { body })
}

fn host(method: &str, ci: bool, values: Vec<String>) -> Acl {
    if method == "found" {
        return Ok(leaf("header", V::table([("name", V::s("Host")), ("present", V::Bool(true))])));
    }
    if values.is_empty() {
        return Err("a host ACL without values".into());
    }
    match method {
        // Tollgate compares hosts without case and without the port.
        "" | "str" if values.iter().all(|v| !v.contains(':') && !v.contains('*')) => {
            Ok(leaf("host", one_or_many(values)))
        }
        "end" if values.iter().all(|v| v.starts_with('.') && v.len() > 1 && !v.contains(':')) => {
            Ok(leaf("host", one_or_many(values.iter().map(|v| format!("*{v}")).collect())))
        }
        _ => header("Host", method, ci, values),
    }
}

fn one_or_many(mut values: Vec<String>) -> V {
    if values.len() == 1 { V::Str(values.remove(0)) } else { V::strs(values) }
}

fn header(name: &str, method: &str, ci: bool, values: Vec<String>) -> Acl {
    if name.is_empty() {
        return Err("`hdr` without a header name".into());
    }
    let table = |k: &str, v: V| leaf("header", V::Table(vec![("name".into(), V::s(name)), (k.into(), v)]));
    if method == "found" {
        return Ok(table("present", V::Bool(true)));
    }
    if method == "cnt" {
        // Tollgate tests whether a header is there, not how many times.
        let present = match values.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["gt", "0"] | ["ge", "1"] => true,
            ["eq", "0"] | ["lt", "1"] | ["le", "0"] => false,
            _ => {
                return Err(format!(
                    "`hdr_cnt({name})` compared with `{}`: Tollgate tests only whether a header is there",
                    values.join(" ")
                ));
            }
        };
        return Ok(table("present", V::Bool(present)));
    }
    if values.is_empty() {
        return Err("an ACL without a value to match never matches (`-m found` tests presence)".into());
    }
    if matches!(method, "" | "str") && !ci && values.len() == 1 {
        return Ok(table("equals", V::s(values[0].clone())));
    }
    Ok(table("regex", V::s(regex_for(method, ci, &values)?)))
}

fn path(method: &str, ci: bool, values: Vec<String>, url: bool) -> Acl {
    if url && values.iter().any(|v| v.contains('?')) {
        return Err("a `url` ACL with a query string (Tollgate matches the path)".into());
    }
    if url && !matches!(method, "" | "str" | "beg" | "found") {
        return Err(format!(
            "`url` matched by `{method}` would also look at the query string, which Tollgate's path conditions do not"
        ));
    }
    if method == "found" {
        return Ok(Cond::True);
    }
    let c = match method {
        "" | "str" => leaf("path", one_or_many(values)),
        "beg" => leaf("path_prefix", one_or_many(values)),
        _ => leaf("path_regex", V::s(regex_for(method, false, &values)?)),
    };
    Ok(match c {
        Cond::Leaf { key, value, .. } => Cond::Leaf { key, value, ci_path: ci },
        c => c,
    })
}

fn sni(method: &str, values: Vec<String>) -> Acl {
    match method {
        "" | "str" => Ok(leaf("sni", one_or_many(values.iter().map(|v| v.to_ascii_lowercase()).collect()))),
        "end" if values.iter().all(|v| v.starts_with('.')) => {
            Ok(leaf("sni", one_or_many(values.iter().map(|v| format!("*{}", v.to_ascii_lowercase())).collect())))
        }
        m => Err(format!("an SNI match by `{m}` (Tollgate matches names and *.suffixes)")),
    }
}

fn counter(acls: &Acls, idx: usize, counter: &str, values: &[String]) -> Acl {
    let table = acls
        .sc_tables
        .get(idx)
        .cloned()
        .flatten()
        .ok_or(format!("sc{idx} is not tracked in this section (a track-sc{idx} line)"))?;
    counter_in(table, counter, values)
}

fn counter_in(table: String, counter: &str, values: &[String]) -> Acl {
    let (op, n) = match values {
        [op, n] => (op.as_str(), n.parse::<i64>().map_err(|_| format!("`{n}` is not a number"))?),
        _ => return Err("a counter compared without `gt <n>`".into()),
    };
    let above = match op {
        "gt" if n >= 0 => n,
        "ge" if n >= 1 => n - 1,
        "gt" | "ge" => return Err(format!("a counter compared with `{op} {n}`: counts are never below 0")),
        _ => return Err(format!("a counter compared with `{op}` (Tollgate tests `above`)")),
    };
    Ok(leaf(
        "counter",
        V::Table(vec![
            ("table".into(), V::Str(table)),
            ("name".into(), V::s(counter)),
            ("above".into(), V::Int(above)),
        ]),
    ))
}

/// The condition as a `when` table; `None` for one that is always true.
pub fn when(c: &Cond) -> Option<V> {
    match c {
        Cond::True => None,
        c => Some(to_v(c)),
    }
}

/// Whether a path key in the condition is to match without case.
pub fn ci_path(c: &Cond) -> bool {
    match c {
        Cond::Leaf { ci_path, .. } => *ci_path,
        Cond::Not(c) => ci_path(c),
        Cond::All(v) | Cond::Any(v) => v.iter().any(ci_path),
        _ => false,
    }
}

/// What a condition reads of the request that rules can change: header
/// names (lower case; `host` for a host test) and `path`.
pub fn reads(c: &Cond) -> Vec<String> {
    match c {
        Cond::Leaf { key: "host", .. } => vec!["host".into()],
        Cond::Leaf { key: "path" | "path_prefix" | "path_regex", .. } => vec!["path".into()],
        Cond::Leaf { key: "header", value: V::Table(t), .. } => t
            .iter()
            .filter(|(k, _)| k == "name")
            .filter_map(|(_, v)| if let V::Str(n) = v { Some(n.to_ascii_lowercase()) } else { None })
            .collect(),
        Cond::Not(c) => reads(c),
        Cond::All(v) | Cond::Any(v) => v.iter().flat_map(reads).collect(),
        _ => Vec::new(),
    }
}

pub fn has_auth(c: &Cond) -> bool {
    match c {
        Cond::Auth(_) => true,
        Cond::Not(c) => has_auth(c),
        Cond::All(v) | Cond::Any(v) => v.iter().any(has_auth),
        _ => false,
    }
}

fn to_v(c: &Cond) -> V {
    match c {
        Cond::True => V::Table(vec![]),
        Cond::Leaf { key, value, .. } => V::Table(vec![(key.to_string(), value.clone())]),
        // Only reached for an `http_auth` that is not a rule's own `auth`; the
        // caller refuses those (has_auth) before writing.
        Cond::Auth(_) => V::Table(vec![]),
        Cond::Not(inner) => V::Table(vec![("not".into(), to_v(inner))]),
        Cond::All(items) => {
            // Leaves with distinct keys share one table (its keys are ANDed).
            let mut keys: Vec<&str> = Vec::new();
            let mergeable = items.iter().all(|i| match i {
                Cond::Leaf { key, .. } if !keys.contains(key) => {
                    keys.push(key);
                    true
                }
                _ => false,
            });
            if mergeable {
                V::Table(
                    items
                        .iter()
                        .filter_map(|i| match i {
                            Cond::Leaf { key, value, .. } => Some((key.to_string(), value.clone())),
                            _ => None,
                        })
                        .collect(),
                )
            } else {
                V::Table(vec![("all".into(), V::Arr(items.iter().map(to_v).collect()))])
            }
        }
        Cond::Any(items) => {
            // Leaves of one list-valued key merge into one list.
            if let Some(Cond::Leaf { key: k0, .. }) = items.first() {
                let same = items.iter().all(|i| {
                    matches!(i, Cond::Leaf { key, .. } if key == k0 && matches!(*key, "host" | "path" | "path_prefix" | "path_regex" | "method" | "src" | "sni"))
                });
                if same {
                    let mut all = Vec::new();
                    for i in items {
                        if let Cond::Leaf { value, .. } = i {
                            match value {
                                V::Arr(v) => all.extend(v.iter().cloned()),
                                v => all.push(v.clone()),
                            }
                        }
                    }
                    return V::Table(vec![(k0.to_string(), V::Arr(all))]);
                }
            }
            V::Table(vec![("any".into(), V::Arr(items.iter().map(to_v).collect()))])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn render(c: &Cond) -> String {
        let mut t = crate::out::Table::default();
        if let Some(v) = when(c) {
            t.set("when", v, "");
        }
        let o = crate::out::Out { defaults: t, ..Default::default() };
        o.render().trim().trim_start_matches("[defaults]").trim().to_string()
    }

    fn cond(acls: &[&str], c: &str) -> Acl {
        let mut a = Acls::default();
        for acl in acls {
            a.define(&ws(acl), Path::new("."));
        }
        a.condition(&ws(c), Path::new("."))
    }

    #[test]
    fn named_inline_negated_and_ored() {
        let c = cond(&["tus hdr(host) -i tus.example.com"], "if tus").unwrap();
        assert_eq!(render(&c), "when = { host = \"tus.example.com\" }");
        let c = cond(&[], "if !{ ssl_fc }").unwrap();
        assert_eq!(render(&c), "when = { not = { tls = true } }");
        let c =
            cond(&["api path_beg /api/", "api path_beg /v2/", "get method GET"], "if api get || METH_POST").unwrap();
        assert_eq!(
            render(&c),
            "when = { any = [{ path_prefix = [\"/api/\", \"/v2/\"], method = \"GET\" }, { method = \"POST\" }] }"
        );
        let c = cond(&["a path /x"], "unless a").unwrap();
        assert_eq!(render(&c), "when = { not = { path = \"/x\" } }");
    }

    #[test]
    fn match_methods() {
        let c = cond(&[], "if { hdr_end(host) -i .example.com }").unwrap();
        assert_eq!(render(&c), "when = { host = \"*.example.com\" }");
        let c = cond(&[], "if { hdr_beg(host) -i www. }").unwrap();
        assert_eq!(render(&c), "when = { header = { name = \"Host\", regex = '(?i)^www\\.' } }");
        let c = cond(&[], "if { path_end .php .phtml }").unwrap();
        assert_eq!(render(&c), "when = { path_regex = '(?:\\.php$)|(?:\\.phtml$)' }");
        let c = cond(&[], "if { path -m beg -i /Admin }").unwrap();
        assert!(ci_path(&c));
        assert_eq!(render(&c), "when = { path_prefix = \"/Admin\" }");
        let c = cond(&[], "if { req.hdr(X-Debug) -m found }").unwrap();
        assert_eq!(render(&c), "when = { header = { name = \"X-Debug\", present = true } }");
        let c = cond(&[], "if { req.ssl_sni -i api.example.com }").unwrap();
        assert_eq!(render(&c), "when = { sni = \"api.example.com\" }");
    }

    #[test]
    fn auth_and_counters() {
        let c = cond(&["ok http_auth(UL1)"], "if !ok").unwrap();
        assert_eq!(c, Cond::Not(Box::new(Cond::Auth("UL1".into()))));
        let mut a = Acls::default();
        a.sc_tables[0] = Some("web".into());
        let c = a.condition(&ws("if { sc_http_req_rate(0) gt 100 }"), Path::new(".")).unwrap();
        assert_eq!(render(&c), "when = { counter = { table = \"web\", name = \"http_req_rate\", above = 100 } }");
    }

    #[test]
    fn refuses_what_it_cannot_express() {
        assert!(cond(&[], "if { fc_rcvd_proxy }").is_err());
        assert!(cond(&["x dst_port 443"], "if x").is_err());
        assert!(cond(&[], "if undefined").is_err());
        assert!(cond(&[], "if { path_reg ^/(?!admin) }").is_err());
        assert!(cond(&[], "if { hdr(host),lower -m str a }").is_err());
        // An error in one line of a name spoils the name.
        assert!(cond(&["a path /x", "a dst_port 1"], "if a").is_err());
    }
}
