//! Rewrite-phase directives (`return`, `rewrite`, `if`), `allow`/`deny`
//! and nginx variables, as Tollgate conditions and actions.

use super::parse::Directive;
use super::{Log, cond, one_or_many};
use crate::Kind;
use crate::out::V;

/// The condition under which `allow`/`deny` (in order, first match wins)
/// refuse a client: None when none is refused.
pub(crate) fn access_cond(log: &mut Log, notes: &mut Vec<String>, dirs: &[&Directive]) -> Option<V> {
    // Runs of the same verb, in order; an `all` ends the list.
    let mut groups: Vec<(bool, Vec<String>)> = Vec::new();
    let mut end: Option<bool> = None;
    for d in dirs {
        log.done(d);
        let deny = d.name == "deny";
        let addr = d.arg(0);
        if end.is_some() {
            continue;
        }
        if addr == "all" {
            end = Some(deny);
            continue;
        }
        if addr.starts_with("unix:") || addr.is_empty() {
            log.warn_in(notes, d, Kind::NoEquivalent, "only IP addresses and CIDR blocks");
            continue;
        }
        match groups.last_mut() {
            Some((v, list)) if *v == deny => list.push(addr.to_string()),
            _ => groups.push((deny, vec![addr.to_string()])),
        }
    }
    if groups.len() > 32 {
        if let Some(d) = dirs.first() {
            log.warn_in(notes, d, Kind::NoEquivalent, "more than 32 alternations of allow and deny: not translated");
        }
        return None;
    }
    // Denied by the entries from a group on, built from the end.
    enum C {
        True,
        False,
        V(V),
    }
    let mut acc = match end {
        Some(true) => C::True,
        _ => C::False,
    };
    for (deny, list) in groups.into_iter().rev() {
        let m = cond("src", one_or_many(list));
        acc = match (deny, acc) {
            (true, C::True) => C::True,
            (true, C::False) => C::V(m),
            (true, C::V(rest)) => C::V(cond("any", V::Arr(vec![m, rest]))),
            (false, C::False) => C::False,
            (false, C::True) => C::V(cond("not", m)),
            (false, C::V(rest)) => C::V(cond("all", V::Arr(vec![cond("not", m), rest]))),
        };
    }
    match acc {
        C::True => Some(V::Table(Vec::new())),
        C::False => None,
        C::V(v) => Some(v),
    }
}

/// A value with nginx's variables in Tollgate's `${...}` form, or the first
/// variable Tollgate has not.
pub(crate) fn map_vars(v: &str) -> Result<String, String> {
    let chars: Vec<char> = v.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if c != '$' {
            out.push(c);
            i += 1;
            continue;
        }
        let (name, next) = if chars.get(i + 1) == Some(&'{') {
            let end = chars[i..].iter().position(|&c| c == '}').map(|e| i + e);
            match end {
                Some(e) => (chars.get(i + 2..e).map(|s| s.iter().collect::<String>()).unwrap_or_default(), e + 1),
                None => (String::new(), i + 1),
            }
        } else {
            let n: String = chars[i + 1..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').collect();
            let len = n.chars().count();
            (n, i + 1 + len)
        };
        if name.is_empty() {
            // A lone `$`: kept; `$${` is how Tollgate writes a literal `${`.
            out.push('$');
            if chars.get(i + 1) == Some(&'{') {
                out.push('$');
            }
            i += 1;
            continue;
        }
        let t = match name.as_str() {
            "remote_addr" | "proxy_protocol_addr" | "realip_remote_addr" => "client_ip",
            "remote_port" | "proxy_protocol_port" | "realip_remote_port" => "client_port",
            "scheme" => "scheme",
            "host" | "http_host" => "host",
            "request_method" => "method",
            "uri" | "document_uri" => "path",
            "request_id" => "request_id",
            "ssl_client_s_dn" => "ssl_client_s_dn",
            "ssl_client_i_dn" => "ssl_client_i_dn",
            "ssl_client_serial" => "ssl_client_serial",
            "ssl_client_verify" => "ssl_client_verify",
            _ => return Err(format!("${name}")),
        };
        out.push_str("${");
        out.push_str(t);
        out.push('}');
        i = next;
    }
    Ok(out)
}

/// A redirect to `url` (nginx's form, with variables): Tollgate's
/// `redirect` table, or why it cannot be one.
pub(crate) fn redirect_of(code: i64, url: &str, names: &[String]) -> Result<V, String> {
    let code_v = ("code".to_string(), V::Int(code));
    let base = ["$request_uri", "$uri$is_args$args", "$uri?$args"].iter().find_map(|s| url.strip_suffix(s));
    if let Some(base) = base {
        let scheme = base.strip_suffix("://$host").or_else(|| base.strip_suffix("://$http_host"));
        if let Some(s) = scheme.filter(|s| *s == "https" || *s == "http") {
            return Ok(V::Table(vec![("scheme".into(), V::s(s)), code_v]));
        }
        let base = match base.split_once("://$server_name") {
            Some((s, rest)) => {
                let first = names.iter().find(|n| !n.is_empty() && *n != "_" && !n.contains(['*', '~']));
                match first {
                    Some(n) => format!("{s}://{n}{rest}"),
                    None => return Err("$server_name: the server block has no plain name".into()),
                }
            }
            None => base.to_string(),
        };
        if base.contains('$') {
            return Err("a URL made of variables Tollgate has not".into());
        }
        if base.trim_end_matches('/').is_empty() {
            return Err("a prefix that redirects to the same place".into());
        }
        return Ok(V::Table(vec![("prefix".into(), V::s(base)), code_v]));
    }
    if url.contains('$') {
        return Err("a URL made of variables Tollgate has not".into());
    }
    Ok(V::Table(vec![("location".into(), V::s(url)), code_v]))
}

/// What a rewrite-phase directive does.
pub(crate) enum Act {
    /// A rule action (key, value), under an extra condition when the
    /// directive applies to some paths only.
    Do(String, V, Option<V>, Option<&'static str>),
    Skip,
}

/// `return` and `rewrite` (a redirect) as a rule action.
pub(crate) fn rewrite_act(log: &mut Log, notes: &mut Vec<String>, d: &Directive, names: &[String]) -> Act {
    match d.name.as_str() {
        "return" => {
            let (code, text) = match d.arg(0).parse::<i64>() {
                Ok(c) => (c, d.args.get(1).cloned()),
                Err(_) => (302, d.args.first().cloned()),
            };
            match code {
                444 => Act::Do("silent_drop".into(), V::Bool(true), None, None),
                301 | 302 | 303 | 307 | 308 => {
                    let Some(url) = text else {
                        log.warn_in(notes, d, Kind::NoEquivalent, "a redirect needs a URL");
                        return Act::Skip;
                    };
                    match redirect_of(code, &url, names) {
                        Ok(v) => Act::Do("redirect".into(), v, None, None),
                        Err(why) => {
                            log.warn_in(notes, d, Kind::NoEquivalent, why);
                            Act::Skip
                        }
                    }
                }
                400..=599 => {
                    let mut pairs = vec![("status".to_string(), V::Int(code))];
                    let mut approx = None;
                    if let Some(t) = text {
                        if t.contains('$') {
                            approx = Some("the body is sent as written: Tollgate fills in no variables there");
                        }
                        pairs.push(("body".into(), V::s(t)));
                    }
                    let v = if pairs.len() == 1 { V::Int(code) } else { V::Table(pairs) };
                    Act::Do("deny".into(), v, None, approx)
                }
                _ => {
                    log.warn_in(
                        notes,
                        d,
                        Kind::NoEquivalent,
                        "Tollgate answers by itself only with errors (deny, 400-599) and redirects: route it to a server",
                    );
                    Act::Skip
                }
            }
        }
        "rewrite" => {
            let (re, repl, flag) = (d.arg(0), d.arg(1), d.arg(2));
            let code = match flag {
                "permanent" => 301,
                "redirect" => 302,
                _ if repl.starts_with("http://") || repl.starts_with("https://") || repl.starts_with("$scheme://") => {
                    302
                }
                _ => {
                    log.warn_in(
                        notes,
                        d,
                        Kind::NoEquivalent,
                        "an internal rewrite (last / break) is not translated: give the location's rule a `rewrite_path = { regex, to }` by hand",
                    );
                    return Act::Skip;
                }
            };
            let repl = repl.strip_suffix('?').unwrap_or(repl);
            let whole = matches!(re, "^(.*)$" | "^(.*)" | "(.*)" | "^/(.*)$" | "^/(.*)" | "^" | "^/" | "^(/.*)$");
            let url = if whole {
                let base = repl
                    .strip_suffix("$1")
                    .map(|b| if re.starts_with("^/") { b.strip_suffix('/').unwrap_or(b) } else { b })
                    .or_else(|| repl.strip_suffix("$request_uri"));
                match base {
                    Some(b) => format!("{b}$request_uri"),
                    None => repl.to_string(),
                }
            } else {
                repl.to_string()
            };
            if !whole && (url.contains('$') || re.is_empty() || !regex_ok(re)) {
                log.warn_in(notes, d, Kind::NoEquivalent, "a redirect made of parts of the path: not translated");
                return Act::Skip;
            }
            match redirect_of(code, &url, names) {
                Ok(v) => {
                    let extra = (!whole).then(|| cond("path_regex", V::s(re)));
                    Act::Do("redirect".into(), v, extra, None)
                }
                Err(why) => {
                    log.warn_in(notes, d, Kind::NoEquivalent, why);
                    Act::Skip
                }
            }
        }
        _ => Act::Skip,
    }
}

/// `if (...)` of a simple form: its condition, or None.
pub(crate) fn if_cond(d: &Directive) -> Option<V> {
    // The parser has taken the quotes off: `($http_x = "")` is `($http_x`,
    // `=`, ``, `)`.
    let mut args: Vec<String> = d.args.clone();
    let first = args.first_mut()?;
    if first == "(" {
        args.remove(0);
    } else {
        *first = first.strip_prefix('(')?.to_string();
    }
    if args.last().is_some_and(|a| a == ")") {
        args.pop();
    } else {
        let last = args.last_mut()?;
        *last = last.strip_suffix(')')?.to_string();
    }
    let var = args.first()?.trim().to_string();
    if args.len() == 1 {
        // `if ($http_x)`: true when the value is neither empty nor "0" (an
        // absent header is empty).
        let name = var.strip_prefix("$http_").filter(|n| !n.is_empty())?.replace('_', "-");
        let h = |k: &str, v: V| cond("header", V::Table(vec![("name".into(), V::s(&name)), (k.into(), v)]));
        return Some(cond(
            "all",
            V::Arr(vec![
                h("present", V::Bool(true)),
                cond("not", h("equals", V::s(""))),
                cond("not", h("equals", V::s("0"))),
            ]),
        ));
    }
    let op = args.get(1)?.as_str();
    let value = args.get(2..).map(|v| v.join(" ")).unwrap_or_default();
    let positive = match var.as_str() {
        "$host" | "$http_host" if (op == "=" || op == "!=") && !value.is_empty() => {
            cond("host", V::s(value.to_ascii_lowercase()))
        }
        "$scheme" if op == "=" || op == "!=" => match value.as_str() {
            "https" => cond("tls", V::Bool(true)),
            "http" => cond("tls", V::Bool(false)),
            _ => return None,
        },
        "$request_method" if op == "=" || op == "!=" => cond("method", V::s(value)),
        v if v.starts_with("$http_") && matches!(op, "~" | "~*" | "!~" | "!~*" | "=" | "!=") => {
            let name = v.get(6..).filter(|n| !n.is_empty())?.replace('_', "-");
            let test = match op {
                "=" | "!=" => ("equals", V::s(&value)),
                "~*" | "!~*" => ("regex", V::s(format!("(?i){value}"))),
                _ => ("regex", V::s(&value)),
            };
            // nginx compares an absent header as an empty value: a test the
            // empty value passes passes for a missing header too.
            let empty_passes = match &test {
                ("regex", V::Str(re)) => match regex::Regex::new(re) {
                    Ok(re) => re.is_match(""),
                    Err(_) => return None,
                },
                _ => value.is_empty(),
            };
            let h = cond("header", V::Table(vec![("name".into(), V::s(&name)), (test.0.into(), test.1)]));
            if empty_passes {
                let absent =
                    cond("header", V::Table(vec![("name".into(), V::s(&name)), ("present".into(), V::Bool(false))]));
                cond("any", V::Arr(vec![absent, h]))
            } else {
                h
            }
        }
        _ => return None,
    };
    Some(if op.starts_with('!') { cond("not", positive) } else { positive })
}

/// Whether Tollgate's regex engine takes the expression (no look-around,
/// no back-references).
pub(crate) fn regex_ok(re: &str) -> bool {
    regex::Regex::new(re).is_ok()
}
