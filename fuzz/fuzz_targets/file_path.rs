//! A request path made a static file's path under the root (tollgate-wire
//! `files::file_path`): no panic, and whatever it accepts stays under the
//! root: no leading `/`, no empty, `.` or `..` segment, no NUL; a path that
//! has no `..` in any form and no escape is accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_wire::files::file_path;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = file_path(data) else { return };
    assert!(!p.rel.starts_with(b"/") && !p.rel.contains(&0), "{p:?}");
    if !p.rel.is_empty() {
        for seg in p.rel.split(|b| *b == b'/') {
            assert!(!matches!(seg, b"" | b"." | b".."), "{p:?} from {data:?}");
        }
    }
    // Accepted paths decode to no more bytes than they had.
    assert!(p.rel.len() <= data.len());
});
