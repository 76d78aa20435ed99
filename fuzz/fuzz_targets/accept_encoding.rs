//! `Accept-Encoding` field lines (split at each `\n` of the input) and the
//! choice of a coding: no panic, at most `MAX_MEMBERS` members, weights within
//! 0..=1000, names lower case, and a chosen coding one the client gave a
//! weight above 0 (by name or by `*`) and one offered.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_wire::encoding::{Coding, MAX_MEMBERS, choose, parse_accept};

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let accepted = parse_accept(&lines);
    assert!(accepted.len() <= MAX_MEMBERS);
    for (name, q) in &accepted {
        assert!(*q <= 1000 && !name.is_empty() && !name.bytes().any(|b| b.is_ascii_uppercase()));
    }
    let offered = [Coding::Zstd, Coding::Br, Coding::Gzip];
    for n in 0..=offered.len() {
        if let Some(c) = choose(Some(&accepted), &offered[..n]) {
            assert!(offered[..n].contains(&c));
            let named = accepted.iter().filter(|(t, _)| Coding::from_token(t) == Some(c)).map(|(_, q)| *q).max();
            let star = accepted.iter().find(|(t, _)| t == "*").map(|(_, q)| *q);
            assert!(named.or(star).is_some_and(|q| q > 0), "{c:?} from {accepted:?}");
        }
    }
});
