//! Path normalisation for rule matching on arbitrary bytes: no panic; the
//! result is a fixed point (normalising it again changes nothing), stays
//! UTF-8 when the input was, and has no empty, `.` or `..` segment, no `;`
//! parameter and no `%` that begins no `%XX`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_config::path::{fold_case, normalize};

fuzz_target!(|data: &[u8]| {
    for fold in [false, true] {
        let once = normalize(data, fold).into_owned();
        let twice = normalize(&once, fold);
        assert_eq!(twice.as_ref(), &once[..], "not idempotent for {:?}", String::from_utf8_lossy(data));
        if std::str::from_utf8(data).is_ok() {
            assert!(std::str::from_utf8(&once).is_ok());
        }
        assert!(!once.contains(&b';'));
        let body = once.strip_prefix(b"/").unwrap_or(&once);
        let body = body.strip_suffix(b"/").unwrap_or(body);
        if !body.is_empty() {
            for seg in body.split(|b| *b == b'/') {
                assert!(!matches!(seg, b"" | b"." | b".."), "segment {seg:?} in {:?}", String::from_utf8_lossy(&once));
            }
        }
        for (i, _) in once.iter().enumerate().filter(|(_, b)| **b == b'%') {
            let hex = once.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
            assert!(hex, "a lone % in {:?}", String::from_utf8_lossy(&once));
        }
    }
    let folded = fold_case(data).into_owned();
    assert_eq!(fold_case(&folded).as_ref(), &folded[..]);
});
