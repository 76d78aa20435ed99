//! A custom access log line: literal text with named fields, `{host}` style
//! (docs/configuration.md, section 11.3). Parsed once, at load time, into
//! pieces the log writes in order; an unknown name is a config error.

use std::sync::Arc;

/// One named field of a custom log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogField {
    Time,
    TimeUnix,
    Client,
    ClientIp,
    ClientPort,
    Frontend,
    Backend,
    Server,
    Mode,
    Method,
    Uri,
    Version,
    Status,
    Bytes,
    BytesIn,
    Host,
    UserAgent,
    Referer,
    RequestId,
    Cache,
    Retries,
    Termination,
    Sni,
    TlsVersion,
    TlsCipher,
    Tq,
    Tw,
    Tc,
    Tr,
    Tt,
}

impl LogField {
    /// Every field and its name in a format string, in the documented order.
    pub const ALL: [(&'static str, LogField); 30] = [
        ("time", LogField::Time),
        ("time_unix", LogField::TimeUnix),
        ("client", LogField::Client),
        ("client_ip", LogField::ClientIp),
        ("client_port", LogField::ClientPort),
        ("frontend", LogField::Frontend),
        ("backend", LogField::Backend),
        ("server", LogField::Server),
        ("mode", LogField::Mode),
        ("method", LogField::Method),
        ("uri", LogField::Uri),
        ("version", LogField::Version),
        ("status", LogField::Status),
        ("bytes", LogField::Bytes),
        ("bytes_in", LogField::BytesIn),
        ("host", LogField::Host),
        ("user_agent", LogField::UserAgent),
        ("referer", LogField::Referer),
        ("request_id", LogField::RequestId),
        ("cache", LogField::Cache),
        ("retries", LogField::Retries),
        ("termination", LogField::Termination),
        ("sni", LogField::Sni),
        ("tls_version", LogField::TlsVersion),
        ("tls_cipher", LogField::TlsCipher),
        ("tq", LogField::Tq),
        ("tw", LogField::Tw),
        ("tc", LogField::Tc),
        ("tr", LogField::Tr),
        ("tt", LogField::Tt),
    ];

    pub fn from_name(name: &str) -> Option<LogField> {
        LogField::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }
}

/// A piece of a custom log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogPiece {
    Text(String),
    Field(LogField),
}

/// Parses a format string: `{name}` is a field, `{{` and `}}` are literal
/// braces. The error says what is wrong, for the key's message.
pub fn parse_log_template(s: &str) -> Result<Arc<[LogPiece]>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|p| p.1) == Some('{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek().map(|p| p.1) == Some('}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let rest = &s[i + 1..];
                let Some(end) = rest.find('}') else {
                    return Err(format!("`{{` at offset {i} is not closed (write `{{{{` for a literal brace)"));
                };
                let name = &rest[..end];
                let Some(field) = LogField::from_name(name) else {
                    return Err(format!("`{{{name}}}` is not a log field (the fields: {})", field_names()));
                };
                if !text.is_empty() {
                    pieces.push(LogPiece::Text(std::mem::take(&mut text)));
                }
                pieces.push(LogPiece::Field(field));
                for _ in 0..=end {
                    chars.next();
                }
            }
            '}' => return Err(format!("`}}` at offset {i} closes nothing (write `}}}}` for a literal brace)")),
            '\n' | '\r' => return Err("a log line cannot hold a line break".into()),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(LogPiece::Text(text));
    }
    if !pieces.iter().any(|p| matches!(p, LogPiece::Field(_))) {
        return Err("the format names no field (e.g. \"{client_ip} {status} {tt}\")".into());
    }
    Ok(pieces.into())
}

fn field_names() -> String {
    LogField::ALL.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_literals_and_braces() {
        let t = parse_log_template("{client_ip} - \"{method} {uri}\" {status} {{x}}").unwrap();
        assert_eq!(
            &t[..],
            &[
                LogPiece::Field(LogField::ClientIp),
                LogPiece::Text(" - \"".into()),
                LogPiece::Field(LogField::Method),
                LogPiece::Text(" ".into()),
                LogPiece::Field(LogField::Uri),
                LogPiece::Text("\" ".into()),
                LogPiece::Field(LogField::Status),
                LogPiece::Text(" {x}".into()),
            ]
        );
        for (name, f) in LogField::ALL {
            assert_eq!(&parse_log_template(&format!("{{{name}}}")).unwrap()[..], &[LogPiece::Field(f)]);
        }
    }

    #[test]
    fn mistakes_are_named() {
        assert!(parse_log_template("{nope}").unwrap_err().contains("`{nope}` is not a log field"));
        assert!(parse_log_template("{status").unwrap_err().contains("not closed"));
        assert!(parse_log_template("status}").unwrap_err().contains("closes nothing"));
        assert!(parse_log_template("plain").unwrap_err().contains("names no field"));
        assert!(parse_log_template("{status}\n").unwrap_err().contains("line break"));
    }
}
