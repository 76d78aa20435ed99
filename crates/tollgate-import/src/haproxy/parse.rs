//! haproxy.cfg as HAProxy reads it: lines of words (quotes, escapes and
//! `${VAR}` resolved), grouped into sections.

use crate::Env;
use crate::report::{Kind, Pos, Warning};
use std::path::Path;

/// One line: its words and where it was.
#[derive(Debug, Clone)]
pub struct Line {
    pub pos: Pos,
    pub words: Vec<String>,
}

impl Line {
    /// The directive as written, for comments and warnings.
    pub fn text(&self) -> String {
        self.words
            .iter()
            .map(|w| {
                // Control characters written as HAProxy escapes them (one line).
                let w: String = w
                    .chars()
                    .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
                    .collect();
                if w.is_empty() || w.contains(char::is_whitespace) { format!("\"{w}\"") } else { w }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn word(&self, i: usize) -> &str {
        self.words.get(i).map(String::as_str).unwrap_or("")
    }

    pub fn warn(&self, kind: Kind, message: impl Into<String>) -> Warning {
        Warning { pos: self.pos.clone(), kind, directive: self.text(), message: message.into() }
    }
}

/// A section: `frontend web` and the lines under it.
#[derive(Debug, Clone)]
pub struct Section {
    pub head: Line,
    pub lines: Vec<Line>,
}

impl Section {
    pub fn kind(&self) -> &str {
        self.head.word(0)
    }
    pub fn name(&self) -> &str {
        self.head.word(1)
    }
}

const SECTIONS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "userlist",
    "peers",
    "resolvers",
    "cache",
    "http-errors",
    "mailers",
    "program",
    "ring",
    "log-forward",
    "crt-store",
    "traces",
    "fcgi-app",
];

/// Splits the file into sections. Lines before the first section are
/// reported (HAProxy refuses them).
pub fn sections(text: &str, file: &Path, env: Env, warnings: &mut Vec<Warning>) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let pos = Pos { file: file.to_path_buf(), line: i + 1 };
        let (words, unset) = words(raw, env);
        if words.is_empty() {
            continue;
        }
        let line = Line { pos, words };
        for var in unset {
            warnings.push(line.warn(
                Kind::Approximate,
                format!("environment variable {var} is not set here: written as is (set it, or edit the output)"),
            ));
        }
        if SECTIONS.contains(&line.word(0)) {
            out.push(Section { head: line, lines: Vec::new() });
        } else if let Some(s) = out.last_mut() {
            s.lines.push(line);
        } else {
            warnings.push(line.warn(Kind::Unknown, "outside of any section"));
        }
    }
    out
}

/// The words of one line, and the `${VAR}`s that had no value.
pub fn words(line: &str, env: Env) -> (Vec<String>, Vec<String>) {
    let mut words = Vec::new();
    let mut unset = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    // Outside quotes, in double quotes, in single quotes.
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '#') => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => {
                // HAProxy's escapes; any other backslash stays (`/\1` in a rewrite).
                in_word = true;
                match chars.next() {
                    Some('n') => cur.push('\n'),
                    Some('r') => cur.push('\r'),
                    Some('t') => cur.push('\t'),
                    Some(n) if n.is_whitespace() || matches!(n, '\\' | '"' | '\'' | '#' | '$') => cur.push(n),
                    Some(n) => {
                        cur.push('\\');
                        cur.push(n);
                    }
                    None => cur.push('\\'),
                }
            }
            (_, '$') if chars.peek() == Some(&'{') => {
                in_word = true;
                chars.next();
                let mut name = String::new();
                let mut closed = false;
                for n in chars.by_ref() {
                    if n == '}' {
                        closed = true;
                        break;
                    }
                    name.push(n);
                }
                // `${NAME[,default]}`: a default after a comma.
                let (var, default) = match name.split_once(',') {
                    Some((v, d)) => (v.to_string(), Some(d.to_string())),
                    None => (name.clone(), None),
                };
                match (closed, env(&var).or(default)) {
                    (true, Some(v)) => cur.push_str(&v),
                    _ => {
                        cur.push_str("${");
                        cur.push_str(&name);
                        if closed {
                            cur.push('}');
                        }
                        unset.push(var);
                    }
                }
            }
            (_, c) => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    (words, unset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(line: &str) -> Vec<String> {
        words(line, &|n| (n == "IP").then(|| "10.0.0.1".to_string())).0
    }

    #[test]
    fn splits_words() {
        assert_eq!(w("  server s1 ${IP}:3000 check # comment"), ["server", "s1", "10.0.0.1:3000", "check"]);
        assert_eq!(w(r#"http-request set-header X-Name "a b" "#), ["http-request", "set-header", "X-Name", "a b"]);
        assert_eq!(
            w(r"option httpchk HEAD / HTTP/1.1\r\nHost:\ www"),
            ["option", "httpchk", "HEAD", "/", "HTTP/1.1\r\nHost: www"]
        );
        assert_eq!(w(r"http-request replace-path /a/(.*) /\1"), ["http-request", "replace-path", "/a/(.*)", "/\\1"]);
        assert_eq!(w(r#"errorfile 503 "x\"y""#), ["errorfile", "503", "x\"y"]);
        assert_eq!(w("a '${IP}' \"${IP}\""), ["a", "${IP}", "10.0.0.1"]);
        assert_eq!(w("x \"\""), ["x", ""]);
        assert_eq!(w("# only"), Vec::<String>::new());
    }

    #[test]
    fn reports_unset_variables() {
        let (words, unset) = words("server s1 ${NOPE}:80 ${D,9}", &|_| None);
        assert_eq!(words, ["server", "s1", "${NOPE}:80", "9"]);
        assert_eq!(unset, ["NOPE"]);
    }

    #[test]
    fn groups_sections() {
        let mut warnings = Vec::new();
        let s = sections(
            "maxconn 1\nglobal\n  maxconn 10\nfrontend web\n bind :80\n",
            Path::new("h.cfg"),
            &|_| None,
            &mut warnings,
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].name(), "web");
        assert_eq!(s[1].lines[0].pos.line, 5);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].pos.line, 1);
    }
}
