//! Reading the raw mirror past its first error, so that `tollgate check` names
//! every misspelt key of a file at once (as `haproxy -c` does), not one per run.
//!
//! serde stops at the first problem. After each one, the key and value it sits
//! on are blanked out of a copy of the text (spaces, newlines kept, so every
//! byte offset and line stays that of the file) and the copy is read again.
//! An unknown key is blanked without consequence: it would have been ignored.
//! Any other error (a wrong type, a bad value) may take a needed key away, so
//! a later "missing field" for a key blanked here is not reported, and the
//! semantic checks are not run on what is left.

use std::ops::Range;
use toml::de::{DeTable, DeValue};

use crate::raw::RawConfig;

/// At most this many structural errors are collected from one file.
const MAX_ERRORS: usize = 64;

/// What serde made of a file.
pub(crate) enum Read {
    /// The file as it is.
    Clean(RawConfig),
    /// The file without its unknown keys, which `errors` names: the rest can
    /// still be checked.
    UnknownKeys(RawConfig, Vec<(usize, String)>),
    /// Errors (byte offset, message) that leave nothing safe to check further.
    Broken(Vec<(usize, String)>),
}

pub(crate) fn read(src: &str) -> Read {
    let mut text: Option<String> = None;
    let mut errors: Vec<(usize, String)> = Vec::new();
    let mut blanked: Vec<String> = Vec::new();
    let mut only_unknown = true;
    loop {
        let current = text.as_deref().unwrap_or(src);
        let e = match toml::from_str::<RawConfig>(current) {
            Ok(raw) if errors.is_empty() => return Read::Clean(raw),
            Ok(raw) if only_unknown => return Read::UnknownKeys(raw, errors),
            Ok(_) => return Read::Broken(errors),
            Err(e) => e,
        };
        let at = e.span().map_or(0, |s| s.start);
        let message = e.message().trim().to_string();
        if missing_field(&message).is_some_and(|f| blanked.iter().any(|b| b == f)) {
            break;
        }
        if errors.iter().any(|(o, m)| *o == at && *m == message) {
            break;
        }
        only_unknown &= message.starts_with("unknown field");
        errors.push((at, message));
        if errors.len() >= MAX_ERRORS {
            break;
        }
        let Some((key, range)) = pair_at(current, at) else { break };
        let mut next = current.to_string();
        blank(&mut next, range);
        // A blank that leaves text TOML cannot read (a dotted key's prefix, a
        // table header) would only add errors of its own making.
        if DeTable::parse(&next).is_err() {
            break;
        }
        blanked.push(key);
        text = Some(next);
    }
    Read::Broken(errors)
}

/// `missing field `name`` -> `name`.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// The deepest `key = value` pair whose key or value holds byte `offset`: its
/// key and the bytes from the key's start to the value's end. None when the
/// offset is in no pair, or the pair is a table header (`[name]`, `[[name]]`).
fn pair_at(src: &str, offset: usize) -> Option<(String, Range<usize>)> {
    let (_, found) = locate(src, offset)?;
    let found = found?;
    let line_start = src[..found.1.start].rfind('\n').map_or(0, |n| n + 1);
    if src[line_start..found.1.start].trim_start().starts_with('[') {
        return None;
    }
    Some(found)
}

/// Where byte `offset` of `src` is, found by re-reading it as a spanned tree:
/// the dotted key path of the deepest key or value that holds it (e.g.
/// `backend[0].server[1].weight`), and the deepest `key = value` pair that
/// holds it (its key, and the bytes from the key's start to the value's end).
pub(crate) fn locate(src: &str, offset: usize) -> Option<(String, Pair)> {
    let root = DeTable::parse(src).ok()?;
    let mut path = String::new();
    let mut pair = None;
    walk_table(root.get_ref(), offset, &mut path, &mut pair);
    Some((path, pair))
}

/// A `key = value` pair: its key, and the bytes from the key to the end of its value.
type Pair = Option<(String, Range<usize>)>;

fn holds(span: &Range<usize>, offset: usize) -> bool {
    span.start <= offset && offset < span.end.max(span.start + 1)
}

fn walk_table(t: &DeTable<'_>, offset: usize, path: &mut String, pair: &mut Pair) -> bool {
    for (k, v) in t.iter() {
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(k.get_ref());
        if walk_value(v, offset, path, pair) || holds(&k.span(), offset) || holds(&v.span(), offset) {
            // The deepest pair is found first, on the way back up.
            if pair.is_none() {
                *pair = Some((k.get_ref().to_string(), k.span().start..v.span().end.max(k.span().end)));
            }
            return true;
        }
        path.truncate(len);
    }
    false
}

fn walk_value(v: &toml::Spanned<DeValue<'_>>, offset: usize, path: &mut String, pair: &mut Pair) -> bool {
    match v.get_ref() {
        DeValue::Table(t) => walk_table(t, offset, path, pair),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                if holds(&item.span(), offset) || matches!(item.get_ref(), DeValue::Table(_)) {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    if walk_value(item, offset, path, pair) || holds(&item.span(), offset) {
                        return true;
                    }
                    path.truncate(len);
                }
            }
            false
        }
        _ => holds(&v.span(), offset),
    }
}

/// Spaces over `range`, and over the comma that follows it in an inline table
/// (one before it may stay: TOML 1.1 allows a trailing comma). Newlines stay,
/// so lines and byte offsets do not move.
fn blank(text: &mut String, range: Range<usize>) {
    let mut end = range.end;
    let rest = &text[end..];
    let skipped = rest.len() - rest.trim_start().len();
    if rest[skipped..].starts_with(',') {
        end += skipped + 1;
    }
    let spaced: String = text[range.start..end]
        .chars()
        .map(|c| if c == '\n' { "\n".to_string() } else { " ".repeat(c.len_utf8()) })
        .collect();
    text.replace_range(range.start..end, &spaced);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(r: &Read) -> Vec<String> {
        match r {
            Read::Clean(_) => Vec::new(),
            Read::UnknownKeys(_, e) | Read::Broken(e) => e.iter().map(|(_, m)| m.clone()).collect(),
        }
    }

    #[test]
    fn every_unknown_key_is_named_and_the_rest_is_read() {
        let src = "[global]\nworkrs = 2\n\n[[frontend]]\nname = \"web\"\nbnd = [\"127.0.0.1:80\"]\n\
                   bind = [\"127.0.0.1:80\"]\ndefault_backend = \"b\"\n  [[frontend.rule]]\n  \
                   when = { hst = \"a\", path_prefix = \"/x\" }\n  deny = 403\n\n[[backend]]\nname = \"b\"\n\
                   server = [{ name = \"s1\", addr = \"127.0.0.1:1\", wieght = 2 }]\n";
        let r = read(src);
        let m = messages(&r);
        assert_eq!(m.len(), 4, "{m:#?}");
        for k in ["workrs", "bnd", "hst", "wieght"] {
            assert!(m.iter().any(|x| x.starts_with(&format!("unknown field `{k}`"))), "{k}: {m:#?}");
        }
        let Read::UnknownKeys(raw, errors) = r else { panic!("not read past its unknown keys") };
        assert_eq!(raw.frontend.len(), 1);
        assert_eq!(raw.backend.len(), 1);
        // Offsets are the file's own.
        for (at, m) in &errors {
            let key = m.split('`').nth(1).unwrap();
            assert!(src[*at..].starts_with(key), "{m} at {at}");
        }
    }

    #[test]
    fn a_wrong_type_stops_the_semantic_checks_and_hides_its_missing_field() {
        let src = "[[frontend]]\nname = 5\nbind = [\"127.0.0.1:80\"]\ndefault_backend = \"b\"\nbogus = 1\n";
        let r = read(src);
        let m = messages(&r);
        assert!(matches!(r, Read::Broken(_)));
        assert_eq!(m.len(), 2, "{m:#?}");
        assert!(m.iter().any(|x| x.starts_with("invalid type")), "{m:#?}");
        assert!(m.iter().any(|x| x.starts_with("unknown field `bogus`")), "{m:#?}");
    }

    #[test]
    fn a_syntax_error_is_the_only_one() {
        let m = messages(&read("[global\nworkers = 2\n"));
        assert_eq!(m.len(), 1, "{m:#?}");
    }

    #[test]
    fn an_unknown_table_header_is_named_and_ends_the_search() {
        let m = messages(&read("[globl]\nworkers = 2\n"));
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(m[0].starts_with("unknown field `globl`"), "{m:#?}");
        let m = messages(&read("[global]\nworkrs = 2\n[globl]\nworkers = 2\n"));
        assert!(m.iter().all(|x| x.starts_with("unknown field")), "{m:#?}");
        assert!(m.iter().any(|x| x.starts_with("unknown field `globl`")), "{m:#?}");
    }

    #[test]
    fn a_clean_file_is_read_once() {
        assert!(matches!(read("[global]\nworkers = 2\n"), Read::Clean(_)));
    }
}
