//! Access log: one line per request, text or JSON, to stdout, stderr, a file
//! or a syslog daemon (one datagram per line: the local socket, as glibc's
//! `syslog()` writes to it, or RFC 5424 over UDP; facility local0, severity
//! info, as HAProxy's `log ... local0`).
//!
//! Timings (milliseconds, as HAProxy's `%TR/%Tw/%Tc/%Tr/%Ta`):
//! - `tq`: from the request's first byte to its complete head;
//! - `tw`: waiting in the backend queue for a free server slot;
//! - `tc`: connecting to the server (`-` / null when a pooled connection was reused);
//! - `tr`: from sending the request to the server's response head;
//! - `tt`: from the first byte to the end of the response.
//!
//! A line is written with one `write` call, so lines from several workers never mix.

use serde::Serialize;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tollgate_config::{AccessLogTarget, LogField, LogFormat, LogPiece, SyslogTarget};

enum Sink {
    Stdout,
    Stderr,
    /// The file, and its path for [`AccessLog::reopen`].
    File(parking_lot::Mutex<File>, PathBuf),
    Syslog(Syslog),
}

/// A syslog destination: a non-blocking datagram socket (a line the daemon
/// cannot take at once is dropped, never waited for on a worker).
struct Syslog {
    socket: SyslogSocket,
    /// `HOSTNAME` of an RFC 5424 line (UDP).
    hostname: String,
}

enum SyslogSocket {
    Unix(std::os::unix::net::UnixDatagram, PathBuf),
    Udp(std::net::UdpSocket, SocketAddr),
}

/// `<PRI>`: facility local0 (16), severity informational (6).
const SYSLOG_PRI: u32 = 16 * 8 + 6;

impl Syslog {
    fn open(target: &SyslogTarget) -> io::Result<Syslog> {
        let socket = match target {
            SyslogTarget::Unix(path) => {
                let s = std::os::unix::net::UnixDatagram::unbound()?;
                s.set_nonblocking(true)?;
                SyslogSocket::Unix(s, path.clone())
            }
            SyslogTarget::Udp(addr) => {
                let any: std::net::IpAddr = if addr.is_ipv6() {
                    std::net::Ipv6Addr::UNSPECIFIED.into()
                } else {
                    std::net::Ipv4Addr::UNSPECIFIED.into()
                };
                let local = SocketAddr::new(any, 0);
                let s = std::net::UdpSocket::bind(local)?;
                s.set_nonblocking(true)?;
                SyslogSocket::Udp(s, *addr)
            }
        };
        let hostname =
            std::fs::read_to_string("/proc/sys/kernel/hostname").map_or("-".into(), |h| h.trim().to_string());
        Ok(Syslog { socket, hostname })
    }

    /// One line as a datagram: to the local socket in glibc's form
    /// (`<PRI>Mmm dd hh:mm:ss tollgate[PID]: LINE`), over UDP as RFC 5424
    /// (`<PRI>1 TIMESTAMP HOSTNAME tollgate PID - - LINE`).
    fn send(&self, line: &str) -> io::Result<()> {
        let now = SystemTime::now();
        let pid = std::process::id();
        match &self.socket {
            SyslogSocket::Unix(s, path) => {
                let msg = format!("<{SYSLOG_PRI}>{} tollgate[{pid}]: {line}", fmt_3164(now));
                s.send_to(msg.as_bytes(), path).map(|_| ())
            }
            SyslogSocket::Udp(s, addr) => {
                let msg = format!("<{SYSLOG_PRI}>1 {} {} tollgate {pid} - - {line}", fmt_time(now), self.hostname);
                s.send_to(msg.as_bytes(), addr).map(|_| ())
            }
        }
    }
}

/// `Mmm dd hh:mm:ss` (RFC 3164's TIMESTAMP, UTC).
fn fmt_3164(t: SystemTime) -> String {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let dt = time::OffsetDateTime::from(t);
    let month = MONTHS[(dt.month() as usize).saturating_sub(1) % 12];
    format!("{month} {:>2} {:02}:{:02}:{:02}", dt.day(), dt.hour(), dt.minute(), dt.second())
}

pub struct AccessLog {
    sink: Sink,
    format: LogFormat,
    /// The format prints a [`Detail`] field (JSON, or a custom line naming one).
    wants_detail: bool,
}

impl AccessLog {
    pub fn open(target: &AccessLogTarget, format: LogFormat) -> io::Result<Option<Self>> {
        let sink = match target {
            AccessLogTarget::Off => return Ok(None),
            AccessLogTarget::Stdout => Sink::Stdout,
            AccessLogTarget::Stderr => Sink::Stderr,
            AccessLogTarget::File(p) => Sink::File(parking_lot::Mutex::new(open_append(p)?), p.clone()),
            AccessLogTarget::Syslog(t) => Sink::Syslog(Syslog::open(t)?),
        };
        let wants_detail = match &format {
            LogFormat::Text => false,
            LogFormat::Json => true,
            LogFormat::Custom(pieces) => pieces.iter().any(|p| {
                matches!(
                    p,
                    LogPiece::Field(
                        LogField::Host | LogField::UserAgent | LogField::Referer | LogField::Sni | LogField::Cache
                    )
                )
            }),
        };
        Ok(Some(AccessLog { sink, format, wants_detail }))
    }

    /// Whether a request's [`Detail`] is printed: else it is not gathered
    /// (an allocation and three copies per request the default line does not use).
    pub fn wants_detail(&self) -> bool {
        self.wants_detail
    }

    /// Opens the file at the log's path again and writes there from now on
    /// (log rotation: SIGUSR1, a reload). The old file is closed once the
    /// lines being written to it are done. Returns the path for a file log.
    pub fn reopen(&self) -> io::Result<Option<PathBuf>> {
        let Sink::File(file, path) = &self.sink else { return Ok(None) };
        let fresh = open_append(path)?;
        *file.lock() = fresh;
        Ok(Some(path.clone()))
    }

    /// Writes one line in the log's format (a tcp session's line, tcp/log.rs,
    /// as well as a request's).
    pub(crate) fn write(&self, rec: &impl LogLine) {
        let mut line = match &self.format {
            LogFormat::Text => rec.text(),
            LogFormat::Json => rec.json(),
            LogFormat::Custom(pieces) => custom_line(rec, pieces),
        };
        if let Sink::Syslog(s) = &self.sink {
            if let Err(e) = s.send(&line) {
                tracing::debug!("access log to syslog failed: {e}");
            }
            return;
        }
        line.push('\n');
        // A failing log sink must not take requests down with it; it is reported once
        // per failure by tracing at debug level.
        let res = match &self.sink {
            Sink::Stdout => io::stdout().lock().write_all(line.as_bytes()),
            Sink::Stderr => io::stderr().lock().write_all(line.as_bytes()),
            Sink::File(f, _) => f.lock().write_all(line.as_bytes()),
            Sink::Syslog(_) => Ok(()),
        };
        if let Err(e) = res {
            tracing::debug!("access log write failed: {e}");
        }
    }
}

/// What a log line is made from: a request's record or a tcp session's.
pub(crate) trait LogLine {
    /// The default text line.
    fn text(&self) -> String;
    /// The JSON object.
    fn json(&self) -> String;
    /// Appends one field's value to `out` for a custom line; `-` when the
    /// record has none.
    fn field(&self, f: LogField, out: &mut String);
}

/// A custom line: the literal pieces as written, the fields in turn.
fn custom_line(rec: &impl LogLine, pieces: &[LogPiece]) -> String {
    let mut line = String::with_capacity(160);
    for p in pieces {
        match p {
            LogPiece::Text(t) => line.push_str(t),
            LogPiece::Field(f) => rec.field(*f, &mut line),
        }
    }
    line
}

/// Appends a value from the wire (a URI, a header's value), escaped so that
/// it cannot end the line or break a quoted field: controls, `"` and `\`
/// as Rust escapes them; `-` when absent or empty.
pub(crate) fn push_escaped(out: &mut String, v: Option<&str>) {
    match v {
        Some(v) if !v.is_empty() => {
            let _ = write!(out, "{}", v.escape_debug());
        }
        _ => out.push('-'),
    }
}

/// Appends a plain value, `-` when absent.
pub(crate) fn push_opt(out: &mut String, v: Option<impl std::fmt::Display>) {
    match v {
        Some(v) => {
            let _ = write!(out, "{v}");
        }
        None => out.push('-'),
    }
}

/// The fields every kind of line has, for [`LogLine::field`].
pub(crate) fn common_field(f: LogField, at: SystemTime, client: SocketAddr, out: &mut String) -> bool {
    match f {
        LogField::Time => out.push_str(&fmt_time(at)),
        LogField::TimeUnix => {
            let d = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            let _ = write!(out, "{}.{:03}", d.as_secs(), d.subsec_millis());
        }
        LogField::Client => {
            let _ = write!(out, "{client}");
        }
        LogField::ClientIp => {
            let _ = write!(out, "{}", client.ip());
        }
        LogField::ClientPort => {
            let _ = write!(out, "{}", client.port());
        }
        _ => return false,
    }
    true
}

fn open_append(p: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(p)
}

/// What the log says about one request. Filled in as the request goes.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub at: SystemTime,
    pub start: Instant,
    pub client: SocketAddr,
    pub frontend: String,
    pub backend: Option<String>,
    pub server: Option<String>,
    pub method: String,
    pub uri: String,
    pub version: &'static str,
    pub status: u16,
    pub bytes: u64,
    pub tq: Duration,
    pub tw: Option<Duration>,
    pub tc: Option<Duration>,
    pub tr: Option<Duration>,
    /// Retries spent on connection failures.
    pub retries: u32,
    /// Why the request ended abnormally, if it did (e.g. "client-aborted").
    pub termination: Option<&'static str>,
    /// On a TLS connection: its version and cipher suite.
    pub tls: Option<(&'static str, &'static str)>,
    /// The request's id (the frontend's `request_id`), if it has one.
    pub request_id: Option<String>,
    /// Fields of the request and the cache's verdict, boxed: the record
    /// lives in every exchange's state while the log is on. Gathered only
    /// for a format that prints them ([`AccessLog::wants_detail`]).
    pub detail: Option<Box<Detail>>,
}

/// The request's `Host`, `User-Agent` and `Referer`, the SNI, and what the
/// cache did.
#[derive(Debug, Clone, Default)]
pub struct Detail {
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub referer: Option<String>,
    pub sni: Option<String>,
    /// The `Cache-Status` parameters (RFC 9211) without the cache's name,
    /// e.g. `hit;ttl=59`; none when no cache zone saw the request.
    pub cache: Option<String>,
}

impl Detail {
    /// Keeps the `Cache-Status` member `tollgate; fwd=miss; stored` as
    /// `fwd=miss;stored`, one token for a text line.
    pub fn set_cache(&mut self, member: &str) {
        let params = member.split_once(';').map_or("", |(_, p)| p);
        self.cache = Some(params.split(';').map(str::trim).filter(|p| !p.is_empty()).collect::<Vec<_>>().join(";"));
    }
}

impl LogRecord {
    pub fn new(start: Instant, head_done: Instant, client: SocketAddr, frontend: &str) -> Self {
        LogRecord {
            at: SystemTime::now(),
            start,
            client,
            frontend: frontend.to_string(),
            backend: None,
            server: None,
            method: String::new(),
            uri: String::new(),
            version: "HTTP/1.1",
            status: 0,
            bytes: 0,
            tq: head_done.saturating_duration_since(start),
            tw: None,
            tc: None,
            tr: None,
            retries: 0,
            termination: None,
            tls: None,
            request_id: None,
            detail: None,
        }
    }

    fn tt(&self) -> Duration {
        self.start.elapsed()
    }

    /// Records what the cache did (the `Cache-Status` member), when the
    /// format prints it.
    pub fn set_cache(&mut self, member: &str) {
        if let Some(d) = self.detail.as_mut() {
            d.set_cache(member);
        }
    }
}

impl LogLine for LogRecord {
    fn text(&self) -> String {
        let mut line = format!(
            "{} {} {} {}/{} {} {} tq={} tw={} tc={} tr={} tt={} retries={} {} \"{} {} {}\"",
            fmt_time(self.at),
            self.client,
            self.frontend,
            self.backend.as_deref().unwrap_or("-"),
            self.server.as_deref().unwrap_or("-"),
            self.status,
            self.bytes,
            ms(Some(self.tq)),
            ms(self.tw),
            ms(self.tc),
            ms(self.tr),
            ms(Some(self.tt())),
            self.retries,
            self.termination.unwrap_or("-"),
            self.method,
            self.uri.escape_debug(),
            self.version,
        );
        push_tls(&mut line, self.tls);
        if let Some(id) = &self.request_id {
            line.push_str(" rid=");
            line.push_str(&id.escape_debug().to_string());
        }
        line
    }

    fn json(&self) -> String {
        serde_json::to_string(&self.to_json()).unwrap_or_default()
    }

    fn field(&self, f: LogField, out: &mut String) {
        if common_field(f, self.at, self.client, out) {
            return;
        }
        let d = self.detail.as_deref();
        let detail = |get: fn(&Detail) -> Option<&str>| d.and_then(get);
        match f {
            LogField::Frontend => out.push_str(&self.frontend),
            LogField::Backend => push_opt(out, self.backend.as_deref()),
            LogField::Server => push_opt(out, self.server.as_deref()),
            LogField::Mode => out.push_str("http"),
            LogField::Method => push_escaped(out, Some(&self.method)),
            LogField::Uri => push_escaped(out, Some(&self.uri)),
            LogField::Version => out.push_str(self.version),
            LogField::Status => push_opt(out, (self.status != 0).then_some(self.status)),
            LogField::Bytes => push_opt(out, Some(self.bytes)),
            LogField::Host => push_escaped(out, detail(|d| d.host.as_deref())),
            LogField::UserAgent => push_escaped(out, detail(|d| d.user_agent.as_deref())),
            LogField::Referer => push_escaped(out, detail(|d| d.referer.as_deref())),
            LogField::RequestId => push_escaped(out, self.request_id.as_deref()),
            LogField::Cache => push_opt(out, detail(|d| d.cache.as_deref())),
            LogField::Retries => push_opt(out, Some(self.retries)),
            LogField::Termination => push_opt(out, self.termination),
            LogField::Sni => push_escaped(out, detail(|d| d.sni.as_deref())),
            LogField::TlsVersion => push_opt(out, self.tls.map(|t| t.0)),
            LogField::TlsCipher => push_opt(out, self.tls.map(|t| t.1)),
            LogField::Tq => out.push_str(&ms(Some(self.tq))),
            LogField::Tw => out.push_str(&ms(self.tw)),
            LogField::Tc => out.push_str(&ms(self.tc)),
            LogField::Tr => out.push_str(&ms(self.tr)),
            LogField::Tt => out.push_str(&ms(Some(self.tt()))),
            // Counted for tcp sessions only.
            LogField::BytesIn => out.push('-'),
            LogField::Time | LogField::TimeUnix | LogField::Client | LogField::ClientIp | LogField::ClientPort => {}
        }
    }
}

impl LogRecord {
    fn to_json(&self) -> JsonRecord<'_> {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let d = self.detail.as_deref();
        JsonRecord {
            time: fmt_time(self.at),
            client: self.client.to_string(),
            frontend: &self.frontend,
            backend: self.backend.as_deref(),
            server: self.server.as_deref(),
            method: &self.method,
            uri: &self.uri,
            version: self.version,
            status: self.status,
            bytes: self.bytes,
            tq_ms: ms(self.tq),
            tw_ms: self.tw.map(ms),
            tc_ms: self.tc.map(ms),
            tr_ms: self.tr.map(ms),
            tt_ms: ms(self.tt()),
            retries: self.retries,
            termination: self.termination,
            tls_version: self.tls.map(|t| t.0),
            tls_cipher: self.tls.map(|t| t.1),
            request_id: self.request_id.as_deref(),
            host: d.and_then(|d| d.host.as_deref()),
            user_agent: d.and_then(|d| d.user_agent.as_deref()),
            referer: d.and_then(|d| d.referer.as_deref()),
            sni: d.and_then(|d| d.sni.as_deref()),
            cache: d.and_then(|d| d.cache.as_deref()),
        }
    }
}

#[derive(Serialize)]
struct JsonRecord<'a> {
    time: String,
    client: String,
    frontend: &'a str,
    backend: Option<&'a str>,
    server: Option<&'a str>,
    method: &'a str,
    uri: &'a str,
    version: &'a str,
    status: u16,
    bytes: u64,
    tq_ms: f64,
    tw_ms: Option<f64>,
    tc_ms: Option<f64>,
    tr_ms: Option<f64>,
    tt_ms: f64,
    retries: u32,
    termination: Option<&'a str>,
    tls_version: Option<&'a str>,
    tls_cipher: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    host: Option<&'a str>,
    user_agent: Option<&'a str>,
    referer: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sni: Option<&'a str>,
    cache: Option<&'a str>,
}

/// RFC 3339 UTC with milliseconds.
/// A timing of a text log line: milliseconds with 3 decimals, `-` when unknown.
pub(crate) fn ms(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.3}", d.as_secs_f64() * 1000.0),
        None => "-".into(),
    }
}

/// Ends a text log line with ` tls=VERSION/CIPHER` when TLS was terminated.
pub(crate) fn push_tls(line: &mut String, tls: Option<(&str, &str)>) {
    if let Some((version, cipher)) = tls {
        line.push_str(" tls=");
        line.push_str(version);
        line.push('/');
        line.push_str(cipher);
    }
}

pub(crate) fn fmt_time(t: SystemTime) -> String {
    let dt = time::OffsetDateTime::from(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        dt.year(),
        dt.month() as u8,
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_lines() {
        let start = Instant::now();
        let mut r = LogRecord::new(start, start, "127.0.0.1:5000".parse().unwrap(), "web");
        r.backend = Some("nodes".into());
        r.server = Some("s1".into());
        r.method = "GET".into();
        r.uri = "/x?y=1".into();
        r.status = 200;
        r.bytes = 42;
        r.tc = Some(Duration::from_micros(1500));
        let t = r.text();
        assert!(t.contains(" 127.0.0.1:5000 web nodes/s1 200 42 "), "{t}");
        assert!(t.contains("tc=1.500 tr=- "), "{t}");
        assert!(t.ends_with("\"GET /x?y=1 HTTP/1.1\""), "{t}");
        let j = serde_json::to_value(r.to_json()).unwrap();
        assert_eq!(j["status"], 200);
        assert_eq!(j["server"], "s1");
        assert_eq!(j["tr_ms"], serde_json::Value::Null);
        assert!(j["time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(j["tls_version"], serde_json::Value::Null);
        r.tls = Some(("TLSv1.3", "TLS13_AES_128_GCM_SHA256"));
        let t = r.text();
        assert!(t.ends_with("\"GET /x?y=1 HTTP/1.1\" tls=TLSv1.3/TLS13_AES_128_GCM_SHA256"), "{t}");
        let j = serde_json::to_value(r.to_json()).unwrap();
        assert_eq!((&j["tls_version"], &j["tls_cipher"]), (&"TLSv1.3".into(), &"TLS13_AES_128_GCM_SHA256".into()));
        assert!(j.get("request_id").is_none(), "only with a request id");
        r.request_id = Some("0af7651916cd43dd8448eb211c80319c".into());
        assert!(r.text().ends_with(" tls=TLSv1.3/TLS13_AES_128_GCM_SHA256 rid=0af7651916cd43dd8448eb211c80319c"));
        assert_eq!(serde_json::to_value(r.to_json()).unwrap()["request_id"], "0af7651916cd43dd8448eb211c80319c");
    }

    #[test]
    fn custom_lines_fill_fields_and_escape_wire_values() {
        let start = Instant::now();
        let mut r = LogRecord::new(start, start, "[2001:db8::1]:5000".parse().unwrap(), "web");
        r.method = "GET".into();
        r.uri = "/a\"b\n".into();
        r.status = 304;
        r.detail = Some(Box::new(Detail { user_agent: Some("x\\y".into()), ..Detail::default() }));
        r.set_cache("tollgate; fwd=stale; fwd-status=304; ttl=60");
        let pieces = tollgate_config::parse_log_template(
            "{client_ip}|{client_port}|{mode}|{uri}|{status}|{host}|{user_agent}|{cache}|{bytes_in}|{tls_version}",
        )
        .unwrap();
        let line = custom_line(&r, &pieces);
        assert_eq!(line, "2001:db8::1|5000|http|/a\\\"b\\n|304|-|x\\\\y|fwd=stale;fwd-status=304;ttl=60|-|-");
        let mut d = Detail::default();
        d.set_cache("tollgate; hit; ttl=12");
        assert_eq!(d.cache.as_deref(), Some("hit;ttl=12"));
        let t = tollgate_config::parse_log_template("{time_unix}").unwrap();
        let unix = custom_line(&r, &t);
        let (secs, millis) = unix.split_once('.').unwrap();
        assert!(secs.parse::<u64>().unwrap() > 1_700_000_000 && millis.len() == 3, "{unix}");
    }

    /// One datagram per line: glibc's form on a local socket, RFC 5424 over UDP.
    #[test]
    fn syslog_lines_are_datagrams_in_the_daemons_forms() {
        let start = Instant::now();
        let mut r = LogRecord::new(start, start, "127.0.0.1:5000".parse().unwrap(), "web");
        r.status = 200;
        let dir = std::env::temp_dir().join(format!("tollgate-syslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.sock");
        let _ = std::fs::remove_file(&path);
        let daemon = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let log = AccessLog::open(&AccessLogTarget::Syslog(SyslogTarget::Unix(path.clone())), LogFormat::Text)
            .unwrap()
            .unwrap();
        log.write(&r);
        let mut buf = [0u8; 2048];
        let n = daemon.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        let pid = std::process::id();
        assert!(got.starts_with("<134>") && got.contains(&format!(" tollgate[{pid}]: ")), "{got}");
        assert!(got.ends_with("\"  HTTP/1.1\"") && !got.ends_with('\n'), "{got}");
        assert_eq!(got.as_bytes()[5 + 3], b' ', "Mmm dd ...: {got}");

        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = SyslogTarget::Udp(udp.local_addr().unwrap());
        let log = AccessLog::open(&AccessLogTarget::Syslog(target), LogFormat::Json).unwrap().unwrap();
        log.write(&r);
        let n = udp.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(got.starts_with("<134>1 20"), "{got}");
        assert!(got.contains(&format!(" tollgate {pid} - - {{\"time\":")), "{got}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
