//! Durations, sizes and addresses as HAProxy and nginx write them, in
//! Tollgate's form.

use crate::out::V;

/// A duration: HAProxy's (`5000` = ms, `us`, `ms`, `s`, `m`, `h`, `d`) when
/// `bare_ms`, else nginx's (`30` = s; `ms`, `s`, `m`, `h`, `d`, `w`, `M`, `y`,
/// and sums such as `1h30m`). The result is an integer of milliseconds or a
/// string with a unit Tollgate reads.
pub fn duration(text: &str, bare_ms: bool) -> Option<V> {
    let ms = duration_ms(text, bare_ms)?;
    Some(ms_value(ms))
}

pub fn duration_ms(text: &str, bare_ms: bool) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let ms = match unit {
            "" if bare_ms => n,
            "" => n.checked_mul(1000)?,
            "us" if bare_ms => n.div_ceil(1000),
            "ms" => n,
            "s" => n.checked_mul(1000)?,
            "m" => n.checked_mul(60_000)?,
            "h" => n.checked_mul(3_600_000)?,
            "d" => n.checked_mul(86_400_000)?,
            "w" if !bare_ms => n.checked_mul(7 * 86_400_000)?,
            "M" if !bare_ms => n.checked_mul(30 * 86_400_000)?,
            "y" if !bare_ms => n.checked_mul(365 * 86_400_000)?,
            _ => return None,
        };
        total = total.checked_add(ms)?;
        if bare_ms && !rest.is_empty() {
            return None;
        }
    }
    Some(total)
}

/// Milliseconds in the largest unit that writes them whole.
pub fn ms_value(ms: u64) -> V {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= size && ms.is_multiple_of(size) {
            return V::s(format!("{}{unit}", ms / size));
        }
    }
    V::s(format!("{ms}ms"))
}

/// A size: nginx's `10m`, `1g`, `512k` or bytes; HAProxy's bytes.
pub fn size(text: &str) -> Option<V> {
    let text = text.trim();
    let (num, mult) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&text[..i], 1 << 20),
        (i, 'g' | 'G') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    let n: u64 = num.parse().ok()?;
    let bytes = n.checked_mul(mult)?;
    Some(size_value(bytes))
}

pub fn size_value(bytes: u64) -> V {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return V::s(format!("{}{unit}", bytes / size));
        }
    }
    V::Int(bytes as i64)
}

/// A listening address in Tollgate's form: `*:80` and `0.0.0.0:80` stay IPv4,
/// `:::80` and `[::]:80` are IPv6, a bare port is every IPv4 address.
pub fn listen_addr(text: &str) -> Option<String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Some(format!(":{port}"));
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, port) = rest.split_once("]:")?;
        ip.parse::<std::net::Ipv6Addr>().ok()?;
        port.parse::<u16>().ok()?;
        return Some(format!("[{ip}]:{port}"));
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    match host {
        "" | "*" => Some(format!(":{port}")),
        "::" => Some(format!("[::]:{port}")),
        h if h.parse::<std::net::Ipv4Addr>().is_ok() => Some(format!("{h}:{port}")),
        h if h.contains(':') && h.parse::<std::net::Ipv6Addr>().is_ok() => Some(format!("[{h}]:{port}")),
        _ => None,
    }
}

/// A name Tollgate accepts for a frontend, backend, zone...: letters, digits,
/// `-`, `_`, `.`; anything else becomes `_`.
pub fn name(text: &str) -> String {
    let n: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect();
    if n.is_empty() { "_".into() } else { n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("5000", true), Some(V::s("5s")));
        assert_eq!(duration("50000", true), Some(V::s("50s")));
        assert_eq!(duration("1500", true), Some(V::s("1500ms")));
        assert_eq!(duration("450s", true), Some(V::s("450s")));
        assert_eq!(duration("60", false), Some(V::s("1m")));
        assert_eq!(duration("1h30m", false), Some(V::s("90m")));
        assert_eq!(duration("2500us", true), Some(V::s("3ms")));
        assert_eq!(duration("5x", true), None);
        assert_eq!(duration("", true), None);
        assert_eq!(duration("1h30m", true), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(size("10m"), Some(V::s("10MiB")));
        assert_eq!(size("1g"), Some(V::s("1GiB")));
        assert_eq!(size("1048576"), Some(V::s("1MiB")));
        assert_eq!(size("1000"), Some(V::Int(1000)));
        assert_eq!(size("x"), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(listen_addr("*:80").as_deref(), Some(":80"));
        assert_eq!(listen_addr("0.0.0.0:443").as_deref(), Some("0.0.0.0:443"));
        assert_eq!(listen_addr(":::80").as_deref(), Some("[::]:80"));
        assert_eq!(listen_addr("[::]:443").as_deref(), Some("[::]:443"));
        assert_eq!(listen_addr("8080").as_deref(), Some(":8080"));
        assert_eq!(listen_addr("localhost:80"), None);
    }
}
