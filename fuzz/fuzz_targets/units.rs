//! Duration and size syntax on arbitrary text: no panic, no overflow.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = tollgate_config::units::parse_duration(s);
    let _ = tollgate_config::units::parse_size(s);
});
