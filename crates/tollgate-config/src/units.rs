//! Durations and byte sizes as people write them in a config file.

use std::time::Duration;

/// `"150ms"`, `"5s"`, `"2m"`, `"1h"`, `"1d"`, `"50us"` (or `"50µs"`), or a bare
/// number of milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(format!("`{s}` is not a duration (write it like \"150ms\", \"5s\", \"2m\", \"1h\" or \"1d\")"));
    }
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is too large"))?;
    let us = match unit.trim() {
        "us" | "µs" => Some(n),
        "" | "ms" => n.checked_mul(1000),
        "s" => n.checked_mul(1_000_000),
        "m" => n.checked_mul(60_000_000),
        "h" => n.checked_mul(3_600_000_000),
        "d" => n.checked_mul(86_400_000_000),
        other => {
            return Err(format!("unknown duration unit `{other}` in `{s}` (use us, ms, s, m, h or d)"));
        }
    };
    us.map(Duration::from_micros).ok_or_else(|| format!("`{s}` is too large"))
}

/// A duration as a config file writes it: `"2s"` for whole seconds, `"50us"` for
/// what is not a whole number of milliseconds, else `"150ms"`.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else if !d.subsec_micros().is_multiple_of(1000) {
        format!("{}us", d.as_micros())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// `"512"`, `"64KiB"`, `"10MB"`, `"1g"`: KB/MB/GB are powers of 1000, KiB/MiB/GiB and
/// the one-letter k/m/g (as nginx writes them) powers of 1024.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(format!("`{s}` is not a size (write it like \"512\", \"64KiB\" or \"10MB\")"));
    }
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is too large"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "k" | "kib" => 1 << 10,
        "mb" => 1_000_000,
        "m" | "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "g" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit `{other}` in `{s}` (use B, KB, KiB, MB, MiB, GB or GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("150ms").unwrap(), Duration::from_millis(150));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86400));
        assert_eq!(parse_duration("250").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5 parsecs").unwrap_err().contains("unknown duration unit"));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        assert_eq!(parse_duration("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse_duration("50µs").unwrap(), Duration::from_micros(50));
        assert_eq!(format_duration(Duration::from_micros(50)), "50us");
        assert_eq!(format_duration(Duration::from_micros(2500)), "2500us");
        assert_eq!(format_duration(Duration::from_micros(3000)), "3ms");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("1 parsec").is_err());
    }
}
