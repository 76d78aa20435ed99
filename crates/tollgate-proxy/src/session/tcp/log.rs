//! The access log line of a tcp session (one per connection, when it ends),
//! in the access log's format, text or JSON (docs/configuration.md, 11.4).
//! HAProxy's `option tcplog` says the same things: who, where to, the queue
//! and connect times, the session's length, the bytes and how it ended.

use crate::observe::access_log::{LogLine, common_field, fmt_time, ms, push_escaped, push_opt, push_tls};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};
use tollgate_config::LogField;

/// What the log says about one tcp session. Filled in as it goes; the names
/// are borrowed from the session's snapshot (nothing is copied for a log that
/// is off).
#[derive(Debug, Clone)]
pub(crate) struct TcpLog<'a> {
    pub(crate) at: SystemTime,
    pub(crate) start: Instant,
    pub(crate) client: SocketAddr,
    pub(crate) frontend: &'a str,
    pub(crate) backend: Option<&'a str>,
    pub(crate) server: Option<&'a str>,
    /// Bytes from the client delivered to the server.
    pub(crate) bytes_in: u64,
    /// Bytes from the server delivered to the client.
    pub(crate) bytes_out: u64,
    pub(crate) tw: Option<Duration>,
    pub(crate) tc: Option<Duration>,
    pub(crate) retries: u32,
    /// How the session ended; `None`: both sides closed.
    pub(crate) termination: Option<&'static str>,
    /// The server name the client asked for (ClientHello), if it was read.
    pub(crate) sni: Option<String>,
    /// TLS terminated here: its version and cipher suite.
    pub(crate) tls: Option<(&'static str, &'static str)>,
}

impl<'a> TcpLog<'a> {
    pub(crate) fn new(client: SocketAddr, frontend: &'a str) -> Self {
        TcpLog {
            at: SystemTime::now(),
            start: Instant::now(),
            client,
            frontend,
            backend: None,
            server: None,
            bytes_in: 0,
            bytes_out: 0,
            tw: None,
            tc: None,
            retries: 0,
            termination: None,
            sni: None,
            tls: None,
        }
    }
}

impl LogLine for TcpLog<'_> {
    fn text(&self) -> String {
        let mut line = format!(
            "{} {} {} {}/{} tcp {} {} tw={} tc={} tt={} retries={} {}",
            fmt_time(self.at),
            self.client,
            self.frontend,
            self.backend.unwrap_or("-"),
            self.server.unwrap_or("-"),
            self.bytes_in,
            self.bytes_out,
            ms(self.tw),
            ms(self.tc),
            ms(Some(self.start.elapsed())),
            self.retries,
            self.termination.unwrap_or("-"),
        );
        if let Some(sni) = &self.sni {
            line.push_str(" sni=");
            line.push_str(sni);
        }
        push_tls(&mut line, self.tls);
        line
    }

    fn field(&self, f: LogField, out: &mut String) {
        if common_field(f, self.at, self.client, out) {
            return;
        }
        match f {
            LogField::Frontend => out.push_str(self.frontend),
            LogField::Backend => push_opt(out, self.backend),
            LogField::Server => push_opt(out, self.server),
            LogField::Mode => out.push_str("tcp"),
            LogField::Bytes => push_opt(out, Some(self.bytes_out)),
            LogField::BytesIn => push_opt(out, Some(self.bytes_in)),
            LogField::Retries => push_opt(out, Some(self.retries)),
            LogField::Termination => push_opt(out, self.termination),
            LogField::Sni => push_escaped(out, self.sni.as_deref()),
            LogField::TlsVersion => push_opt(out, self.tls.map(|t| t.0)),
            LogField::TlsCipher => push_opt(out, self.tls.map(|t| t.1)),
            LogField::Tw => out.push_str(&ms(self.tw)),
            LogField::Tc => out.push_str(&ms(self.tc)),
            LogField::Tt => out.push_str(&ms(Some(self.start.elapsed()))),
            // An HTTP request's: a tcp session has none.
            LogField::Method
            | LogField::Uri
            | LogField::Version
            | LogField::Status
            | LogField::Host
            | LogField::UserAgent
            | LogField::Referer
            | LogField::RequestId
            | LogField::Cache
            | LogField::Tq
            | LogField::Tr => out.push('-'),
            LogField::Time | LogField::TimeUnix | LogField::Client | LogField::ClientIp | LogField::ClientPort => {}
        }
    }

    fn json(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let j = Json {
            time: fmt_time(self.at),
            client: self.client.to_string(),
            frontend: self.frontend,
            mode: "tcp",
            backend: self.backend,
            server: self.server,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            tw_ms: self.tw.map(ms),
            tc_ms: self.tc.map(ms),
            tt_ms: ms(self.start.elapsed()),
            retries: self.retries,
            termination: self.termination,
            sni: self.sni.as_deref(),
            tls_version: self.tls.map(|t| t.0),
            tls_cipher: self.tls.map(|t| t.1),
        };
        serde_json::to_string(&j).unwrap_or_default()
    }
}

#[derive(Serialize)]
struct Json<'a> {
    time: String,
    client: String,
    frontend: &'a str,
    mode: &'static str,
    backend: Option<&'a str>,
    server: Option<&'a str>,
    bytes_in: u64,
    bytes_out: u64,
    tw_ms: Option<f64>,
    tc_ms: Option<f64>,
    tt_ms: f64,
    retries: u32,
    termination: Option<&'static str>,
    sni: Option<&'a str>,
    tls_version: Option<&'a str>,
    tls_cipher: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_lines() {
        let mut r = TcpLog::new("192.0.2.10:51544".parse().unwrap(), "db");
        let t = r.text();
        assert!(t.contains(" 192.0.2.10:51544 db -/- tcp 0 0 tw=- tc=- tt="), "{t}");
        assert!(t.ends_with(" retries=0 -"), "{t}");
        r.backend = Some("pg");
        r.server = Some("p1");
        r.bytes_in = 120;
        r.bytes_out = 4096;
        r.tw = Some(Duration::from_micros(30));
        r.tc = Some(Duration::from_micros(1500));
        r.retries = 1;
        r.termination = Some("server-timeout");
        r.sni = Some("db.example.com".into());
        r.tls = Some(("TLSv1.3", "TLS13_AES_128_GCM_SHA256"));
        let t = r.text();
        assert!(t.contains(" db pg/p1 tcp 120 4096 tw=0.030 tc=1.500 tt="), "{t}");
        assert!(
            t.ends_with(" retries=1 server-timeout sni=db.example.com tls=TLSv1.3/TLS13_AES_128_GCM_SHA256"),
            "{t}"
        );
        let j: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!((&j["mode"], &j["backend"], &j["server"]), (&"tcp".into(), &"pg".into(), &"p1".into()));
        assert_eq!((&j["bytes_in"], &j["bytes_out"]), (&120.into(), &4096.into()));
        assert_eq!((&j["termination"], &j["sni"]), (&"server-timeout".into(), &"db.example.com".into()));
        assert_eq!(j["tc_ms"], 1.5);
        assert!(j["time"].as_str().unwrap().ends_with('Z'));
    }
}
