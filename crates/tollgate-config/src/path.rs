//! Request paths as the rules see them.
//!
//! A backend does not serve the bytes of a path: it serves what it makes of
//! them. `/%61dmin/`, `/./admin/`, `/x/../admin/`, `//admin/` and `/admin;x/`
//! are `/admin/` to most servers, and `/ADMIN/` is too to IIS or to a
//! case-insensitive file system. A rule that compared the raw bytes with
//! `/admin/` would let each of them by, so [`normalize`] puts a path in one
//! form before a rule looks at it (the request sent to the server keeps the
//! client's bytes):
//!
//! 1. percent-encoding (RFC 3986 section 6.2.2.1 and 6.2.2.2): `%XX` of an
//!    unreserved character (`A-Z a-z 0-9 - . _ ~`, section 2.3) is decoded,
//!    every other `%XX` keeps its encoding with upper-case hex digits, and a
//!    `%` that begins no `%XX` becomes `%25`. `%2F` stays encoded: it is not a
//!    segment separator (section 2.2), so `/admin%2Fx` is one segment.
//! 2. path parameters: `;` and what follows it up to the next `/` are removed
//!    from each segment (`/admin;jsessionid=1/` is `/admin/`), as Tomcat and
//!    other servlet containers read them.
//! 3. slashes: empty segments are dropped (`//admin//x` is `/admin/x`), as
//!    nginx's `merge_slashes` does.
//! 4. dot segments (section 5.2.4), the decoded `%2e` included: `.` is dropped
//!    and `..` drops the segment before it; a path cannot climb above its root
//!    (`/../admin` is `/admin`). A path that ended in a dot segment ends in `/`
//!    (`/a/b/..` is `/a/`).
//! 5. with `fold_case`, ASCII letters in lower case (outside `%XX`, whose hex
//!    digits stay upper case).
//!
//! The result is a fixed point: normalising it again changes nothing (the
//! fuzz target `path_normalize` checks it). The function is total: any bytes
//! in, bytes out, no panic; valid UTF-8 stays valid UTF-8.

use std::borrow::Cow;

/// RFC 3986 section 2.3.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The byte `%XX` at the start of `s` encodes, if `s` starts with one.
fn triplet(s: &[u8]) -> Option<u8> {
    match s {
        [b'%', h, l, ..] => Some(hex_value(*h)? << 4 | hex_value(*l)?),
        _ => None,
    }
}

/// Whether `path` is already in normal form for the cheap cases: it starts
/// with `/`, has no `%`, no `;`, no `//` and no segment starting with `.`
/// (and, with `fold_case`, no upper-case letter). Most paths are.
fn already_normal(path: &[u8], fold_case: bool) -> bool {
    path.first() == Some(&b'/')
        && !path.iter().any(|b| matches!(b, b'%' | b';') || (fold_case && b.is_ascii_uppercase()))
        && !path.windows(2).any(|w| w[0] == b'/' && matches!(w[1], b'/' | b'.'))
}

/// Step 1: `%XX` of an unreserved byte decoded, other `%XX` in upper case, a
/// lone `%` as `%25`.
fn decode_unreserved(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 4);
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        match triplet(&path[i..]) {
            Some(c) if unreserved(c) => {
                out.push(c);
                i += 3;
            }
            Some(_) => {
                out.push(b'%');
                out.push(path[i + 1].to_ascii_uppercase());
                out.push(path[i + 2].to_ascii_uppercase());
                i += 3;
            }
            None => {
                out.extend_from_slice(b"%25");
                i += 1;
            }
        }
    }
    out
}

/// Step 5: ASCII letters in lower case, except the hex digits of `%XX`.
fn fold(path: &mut [u8]) {
    let mut i = 0;
    while i < path.len() {
        if triplet(&path[i..]).is_some() {
            i += 3;
        } else {
            path[i] = path[i].to_ascii_lowercase();
            i += 1;
        }
    }
}

/// `path` (the path of a request target, without its query) in the form the
/// rules match: see the module's documentation. Borrowed when it already is.
pub fn normalize(path: &[u8], fold_case: bool) -> Cow<'_, [u8]> {
    if already_normal(path, fold_case) {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let lead = decoded.first() == Some(&b'/');
    let mut segments: Vec<&[u8]> = Vec::new();
    let mut trailing_slash = false;
    for raw in decoded.split(|b| *b == b'/') {
        // Step 2: without its parameters (`split` yields at least one piece).
        let seg = raw.split(|b| *b == b';').next().unwrap_or_default();
        trailing_slash = true;
        match seg {
            // Step 3 (an empty segment) and step 4.
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            s => {
                segments.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = Vec::with_capacity(decoded.len());
    if lead {
        out.push(b'/');
    }
    for (i, s) in segments.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(s);
    }
    if trailing_slash && !segments.is_empty() {
        out.push(b'/');
    }
    if fold_case {
        fold(&mut out);
    }
    Cow::Owned(out)
}

/// Only case folding (`path_normalize = false` with a case-insensitive rule):
/// ASCII letters in lower case outside `%XX`.
pub fn fold_case(path: &[u8]) -> Cow<'_, [u8]> {
    if !path.iter().any(u8::is_ascii_uppercase) {
        return Cow::Borrowed(path);
    }
    let mut out = path.to_vec();
    fold(&mut out);
    Cow::Owned(out)
}

/// The path a rule matches, as text: [`normalize`] when `normalize_path`,
/// else the path as it came; folded when `fold_case`. Valid UTF-8 in, valid
/// UTF-8 out (every step works on ASCII bytes only).
pub fn match_form(path: &str, normalize_path: bool, fold_case: bool) -> Cow<'_, str> {
    let bytes = match (normalize_path, fold_case) {
        (true, _) => normalize(path.as_bytes(), fold_case),
        (false, true) => self::fold_case(path.as_bytes()),
        (false, false) => Cow::Borrowed(path.as_bytes()),
    };
    match bytes {
        Cow::Borrowed(_) => Cow::Borrowed(path),
        Cow::Owned(v) => {
            Cow::Owned(String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
        }
    }
}

/// Whether the path of a request target has `%00`, which Tollgate refuses
/// with 400 (as nginx does): a NUL that a server decodes ends a C string and
/// a file name early, so the file served is not the one the path names.
pub fn has_encoded_nul(path: &[u8]) -> bool {
    path.iter().enumerate().any(|(i, &b)| b == b'%' && path.get(i + 1..i + 3) == Some(b"00"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> String {
        String::from_utf8(normalize(p.as_bytes(), false).into_owned()).unwrap()
    }

    fn nf(p: &str) -> String {
        String::from_utf8(normalize(p.as_bytes(), true).into_owned()).unwrap()
    }

    #[test]
    fn the_bypasses_of_an_admin_prefix_all_become_admin() {
        for p in ["/%61dmin/", "/admin;x/", "/%2e/admin/", "/./admin/", "/x/../admin/", "//admin/", "/../admin/"] {
            assert_eq!(n(p), "/admin/", "{p}");
        }
        assert_eq!(n("/ADMIN/"), "/ADMIN/", "case is kept without folding");
        assert_eq!(nf("/ADMIN/"), "/admin/");
        assert_eq!(nf("/%41dMiN/"), "/admin/");
    }

    #[test]
    fn percent_encoding() {
        assert_eq!(n("/%7euser/%2D%5f"), "/~user/-_");
        assert_eq!(n("/a%2fb"), "/a%2Fb", "an encoded slash stays one segment");
        assert_eq!(n("/a%2Fb/.."), "/", "so `..` drops all of it");
        assert_eq!(n("/%c3%a9t%C3%A9"), "/%C3%A9t%C3%A9", "reserved and non-ASCII stay encoded, in upper case");
        assert_eq!(n("/100%"), "/100%25");
        assert_eq!(n("/%zz/%4"), "/%25zz/%254");
        assert_eq!(n("/%252e"), "/%252e", "decoded once, not twice");
        assert_eq!(n("/%%32%65"), "/%252e", "a lone % cannot combine with decoded digits");
        assert_eq!(n("/a%3Bb/"), "/a%3Bb/", "an encoded ; is not a parameter");
        assert_eq!(n("/%00"), "/%00");
        assert_eq!(nf("/%2f%C3%a9X"), "/%2F%C3%A9x", "folding leaves the hex digits upper case");
    }

    #[test]
    fn dot_segments() {
        // RFC 3986 section 5.2.4's examples, and more.
        assert_eq!(n("/a/b/c/./../../g"), "/a/g");
        assert_eq!(n("mid/content=5/../6"), "mid/6");
        assert_eq!(n("/a/b/.."), "/a/");
        assert_eq!(n("/a/b/."), "/a/b/");
        assert_eq!(n("/a/.."), "/");
        assert_eq!(n("/.."), "/");
        assert_eq!(n("/../../.."), "/");
        assert_eq!(n("/%2e%2E/admin"), "/admin");
        assert_eq!(n("/x/.%2e/admin"), "/admin");
        assert_eq!(n("/..;/admin"), "/admin", "Tomcat reads `..;` as `..`");
        assert_eq!(n("/x/..;a=b/admin/"), "/admin/");
        assert_eq!(n("/.well-known/x"), "/.well-known/x");
        assert_eq!(n("/a/...b/..."), "/a/...b/...");
    }

    #[test]
    fn slashes_and_parameters() {
        assert_eq!(n("///a//b///"), "/a/b/");
        assert_eq!(n("/a//../b"), "/b", "merged before dot segments, as nginx does");
        assert_eq!(n("/"), "/");
        assert_eq!(n("//"), "/");
        assert_eq!(n(""), "");
        assert_eq!(n("*"), "*");
        assert_eq!(n("/login;jsessionid=ABC"), "/login");
        assert_eq!(n("/a;x/b;y;z/c"), "/a/b/c");
        assert_eq!(n("/a/;x"), "/a/");
        assert_eq!(n("/;x/admin"), "/admin");
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for p in ["/", "/admin/", "/api/v1/users?x", "/a.b/c-d_e~"] {
            assert!(matches!(normalize(p.as_bytes(), false), Cow::Borrowed(_)), "{p}");
            assert!(matches!(normalize(p.as_bytes(), true), Cow::Borrowed(_)), "{p}");
        }
        assert!(matches!(normalize(b"/Admin", true), Cow::Owned(_)));
        assert!(matches!(normalize(b"/Admin", false), Cow::Borrowed(_)));
    }

    #[test]
    fn idempotent_on_awkward_inputs() {
        let inputs = [
            "/%%32%65",
            "%2e%2e/%2e",
            "/a/%2e%2e;/b",
            "../../x",
            "/.;/..;/;",
            "/%2E%2e%2f..",
            "/%Aa%aG%",
            ";/..",
            "./a",
            "a/..",
            "\u{e9}/%C3/../\u{e9}",
        ];
        for p in inputs {
            for fold_case in [false, true] {
                let once = normalize(p.as_bytes(), fold_case).into_owned();
                let twice = normalize(&once, fold_case).into_owned();
                assert_eq!(once, twice, "{p:?} fold={fold_case}");
                assert!(std::str::from_utf8(&once).is_ok());
            }
            let once = fold_case(p.as_bytes()).into_owned();
            assert_eq!(fold_case(&once).into_owned(), once);
        }
    }

    /// What the fuzz target checks, on many short paths over the bytes that matter.
    #[test]
    fn fixed_point_on_generated_paths() {
        const ALPHABET: &[u8] = b"/.%;2eEaAF0x";
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let len = (next() % 14) as usize;
            let p: Vec<u8> = (0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect();
            for fold_case in [false, true] {
                let once = normalize(&p, fold_case).into_owned();
                assert_eq!(normalize(&once, fold_case).as_ref(), &once[..], "{:?}", String::from_utf8_lossy(&p));
                assert!(!once.contains(&b';'));
                assert!(!once.windows(2).any(|w| w == b"//"), "{:?}", String::from_utf8_lossy(&once));
            }
        }
    }

    #[test]
    fn match_form_switches() {
        assert_eq!(match_form("/A/./b", true, false), "/A/b");
        assert_eq!(match_form("/A/./b", true, true), "/a/b");
        assert_eq!(match_form("/A/./b", false, true), "/a/./b");
        assert_eq!(match_form("/A/./b", false, false), "/A/./b");
        assert_eq!(match_form("/%41/%2f", false, true), "/%41/%2f", "raw %XX left alone");
    }

    #[test]
    fn encoded_nul() {
        assert!(has_encoded_nul(b"/a%00.png"));
        assert!(!has_encoded_nul(b"/a%0"));
        assert!(!has_encoded_nul(b"/a%20b"));
    }
}
