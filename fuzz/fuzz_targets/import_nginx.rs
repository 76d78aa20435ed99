//! `tollgate import` on arbitrary nginx text: it returns a translation or an
//! error, never panics; the translation is always TOML, and every warning
//! names a line of the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tollgate_import::{Format, import_str};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    // Includes would read this machine's files.
    if src.contains("include") {
        return;
    }
    let Ok(imported) = import_str(src, Path::new("/nonexistent/fuzz.conf"), Format::Nginx, Some(Path::new("/nonexistent")), &|_| None) else { return };
    if let Err(e) = toml::from_str::<toml::Value>(&imported.toml) {
        panic!("not TOML: {e}\n{}", imported.toml);
    }
    let lines = src.lines().count().max(1);
    for w in &imported.warnings {
        assert!(w.pos.line >= 1 && w.pos.line <= lines, "warning line {} of {lines}: {w}", w.pos.line);
    }
});
