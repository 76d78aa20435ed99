//! The HTTP date (RFC 9110 section 5.6.7), formatted at most once a second per
//! worker thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Appends now, as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn write_http_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            *d = (secs, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(d.1.as_bytes());
    })
}

/// `unix` (seconds since the epoch) as an IMF-fixdate.
pub fn http_date(unix: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(unix))
}

/// Now, in whole seconds since the Unix epoch (0 before it).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #[test]
    fn imf_fixdate() {
        let mut out = Vec::new();
        super::write_http_date(&mut out);
        let d = String::from_utf8(out).unwrap();
        assert_eq!(d.len(), 29, "{d}");
        assert!(d.ends_with(" GMT"), "{d}");
        assert!(httpdate::parse_http_date(&d).is_ok());
    }
}
