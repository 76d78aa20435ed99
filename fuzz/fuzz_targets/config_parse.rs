//! The config parser on arbitrary text: it must return a config or errors, never
//! panic, and every error must carry a position inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    if let Err(errors) = tollgate_config::parse_offline(src, Path::new("fuzz.toml")) {
        assert!(!errors.0.is_empty());
        let lines = src.lines().count().max(1) + 1;
        for e in &errors.0 {
            assert!(e.line <= lines, "error line {} beyond the file ({lines} lines): {e}", e.line);
            let _ = e.to_string();
        }
    }
});
