//! The values of HAProxy's actions in Tollgate's form: header values with
//! their variables, redirects, path rewrites. Pure: words in, a value or the
//! reason it cannot be written out.

use crate::out::V;

/// A header value with `%[fetch]` / `%x` log-format variables as Tollgate's `${name}`.
pub(super) fn header_value(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find(['%', '$']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("${") {
            out.push_str("$${");
            rest = t;
            continue;
        }
        if let Some(t) = tail.strip_prefix('$') {
            out.push('$');
            rest = t;
            continue;
        }
        if let Some(t) = tail.strip_prefix("%%") {
            out.push('%');
            rest = t;
            continue;
        }
        if let Some(t) = tail.strip_prefix("%[") {
            let end = t.find(']').ok_or("a `%[` without `]`")?;
            let fetch = &t[..end];
            let var = match fetch {
                "src" => "client_ip",
                "src_port" => "client_port",
                "req.hdr(host)" | "hdr(host)" | "req.hdr(Host)" | "hdr(Host)" | "req.fhdr(host)" => "host",
                "ssl_fc,iif(https,http)" => "scheme",
                "method" => "method",
                "path" => "path",
                "unique-id" => "request_id",
                "fe_name" => "frontend",
                "ssl_c_s_dn" => "ssl_client_s_dn",
                "ssl_c_i_dn" => "ssl_client_i_dn",
                "ssl_c_serial,hex" => "ssl_client_serial",
                "ssl_c_sha256,hex" => "ssl_client_fingerprint",
                _ => return Err(format!("`%[{fetch}]` has no Tollgate variable")),
            };
            out.push_str(&format!("${{{var}}}"));
            rest = &t[end + 1..];
            continue;
        }
        let t = &tail[1..];
        let (var, len) = if t.starts_with("ci") {
            ("client_ip", 2)
        } else if t.starts_with("cp") {
            ("client_port", 2)
        } else if t.starts_with("ID") {
            ("request_id", 2)
        } else if t.starts_with('f') && !t.starts_with("fi") && !t.starts_with("fp") {
            ("frontend", 1)
        } else if t.starts_with("HM") {
            ("method", 2)
        } else if t.starts_with("HP") {
            ("path", 2)
        } else {
            return Err(format!(
                "the log-format variable `%{}` has no Tollgate variable",
                t.chars().take(3).collect::<String>()
            ));
        };
        out.push_str(&format!("${{{var}}}"));
        rest = &t[len..];
    }
    out.push_str(rest);
    if out.chars().any(|c| c.is_control() && c != '\t') {
        return Err("a control character in the value".into());
    }
    Ok(out)
}

/// `replace-path <regex> <fmt>` / `set-path <fmt>` as `rewrite_path`. HAProxy
/// replaces the whole path with the format when the regex matches anywhere in
/// it; Tollgate replaces the first match, so a regex that does not already
/// span the path is made to.
pub(super) fn path_rewrite(action: &str, args: &[String]) -> Result<V, String> {
    let (regex, fmt) = match (action, args) {
        ("set-path", [fmt]) => ("^.*$".to_string(), fmt),
        ("replace-path", [regex, fmt]) => {
            let spans =
                regex.starts_with('^') && (regex.ends_with('$') || regex.ends_with(".*") || regex.ends_with("(.*)"));
            (if spans { regex.clone() } else { format!("^.*?(?:{regex}).*$") }, fmt)
        }
        _ => return Err("expected `replace-path <regex> <format>` or `set-path <format>`".into()),
    };
    if regex::Regex::new(&regex).is_err() {
        return Err(format!("the regex `{regex}` is not one Tollgate's regex engine reads"));
    }
    if fmt.contains('%') {
        return Err(
            "a path built from samples (`%[...]`): Tollgate's replacement takes the regex's captures only".into()
        );
    }
    if fmt.contains(['?', '#']) || fmt.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a replacement with a query string or spaces: Tollgate rewrites the path only".into());
    }
    // `\1` is a capture in HAProxy, `${1}` in Tollgate; a literal `$` is `$$`.
    let mut to = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let d = chars.next().unwrap_or('0');
                to.push_str(&format!("${{{d}}}"));
            }
            '$' => to.push_str("$$"),
            c => to.push(c),
        }
    }
    Ok(V::Table(vec![("regex".into(), V::Str(regex)), ("to".into(), V::Str(to))]))
}

pub(super) fn is_forward_for(name: &str, value: &str) -> bool {
    let n = name.to_ascii_lowercase();
    match n.as_str() {
        // forward_for appends to the client's list; set-header replaced it.
        "x-forwarded-for" => false,
        "x-forwarded-proto" => value == "%[ssl_fc,iif(https,http)]",
        "x-forwarded-port" => value == "%[dst_port]" || value == "%fp",
        "x-forwarded-host" => value == "%[req.hdr(host)]" || value == "%[hdr(host)]",
        _ => false,
    }
}

/// `redirect` / `http-request redirect` arguments, in any order.
pub(super) fn redirect(words: &[String]) -> Result<V, String> {
    let mut target: Option<(&str, &str)> = None;
    let mut code = 302;
    let mut ignored = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        match w {
            "location" | "prefix" | "scheme" => {
                let t = words.get(i + 1).ok_or("a redirect without its target")?;
                target = Some((w, t));
                i += 1;
            }
            "code" => {
                code = words.get(i + 1).and_then(|c| c.parse().ok()).ok_or("a redirect code that is not a number")?;
                i += 1;
            }
            "drop-query" | "append-slash" | "clear-cookie" | "ignore-empty" | "keep-query" => {
                ignored.push(w.to_string())
            }
            "set-cookie" => {
                ignored.push(w.to_string());
                i += 1;
            }
            other => return Err(format!("`{other}` in a redirect")),
        }
        i += 1;
    }
    if !ignored.is_empty() {
        return Err(format!("redirect options Tollgate has not: {}", ignored.join(", ")));
    }
    let (kind, target) = target.ok_or("a redirect without location, prefix or scheme")?;
    if target.contains('%') {
        return Err("a redirect target built from variables".into());
    }
    if kind == "scheme" && target != "https" && target != "http" {
        return Err(format!("`redirect scheme {target}`"));
    }
    Ok(V::Table(vec![(kind.to_string(), V::s(target)), ("code".into(), V::Int(code))]))
}
