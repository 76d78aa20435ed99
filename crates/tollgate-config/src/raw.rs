//! The serde mirror of the configuration file.
//!
//! These types say what the TOML may contain and nothing more: values stay loose
//! (durations and sizes as strings, names as strings) and carry their spans, so that
//! `crate::build` can turn them into the typed model and report every semantic
//! error at once, each with its file:line and key path.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub global: RawGlobal,
    #[serde(default)]
    pub defaults: RawDefaults,
    #[serde(default)]
    pub frontend: Vec<Spanned<RawFrontend>>,
    #[serde(default)]
    pub backend: Vec<Spanned<RawBackend>>,
    pub admin: Option<Spanned<RawAdmin>>,
    /// `[[cache]]`: cache zones.
    #[serde(default)]
    pub cache: Vec<Spanned<RawCacheZone>>,
    #[serde(default)]
    pub userlist: Vec<Spanned<RawUserlist>>,
    /// `[[table]]`: stick tables of counters, which frontends `track`.
    #[serde(default)]
    pub table: Vec<Spanned<RawTable>>,
    /// `[[acme]]`: certificates from an ACME server, which TLS binds use.
    #[serde(default)]
    pub acme: Vec<Spanned<RawAcme>>,
}

/// `[[acme]]`: one certificate obtained and renewed by ACME.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    pub name: Spanned<String>,
    pub directory: Spanned<String>,
    pub domains: Spanned<Vec<String>>,
    pub contact: Option<Spanned<Vec<String>>>,
    /// `"http-01"` (the default) or `"tls-alpn-01"`.
    pub challenge: Option<Spanned<String>>,
    pub state_dir: Option<Spanned<String>>,
    pub renew_before: Option<Spanned<RawDuration>>,
    pub retry: Option<Spanned<RawDuration>>,
    /// CA certificates (PEM) the ACME server's HTTPS is checked against.
    pub directory_ca: Option<Spanned<String>>,
}

/// `[[table]]`: per-key counters (HAProxy's `stick-table ... store ...`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTable {
    pub name: Spanned<String>,
    /// `"src"`, `"header:<name>"`, `"cookie:<name>"` or `"path"`.
    pub key: Spanned<String>,
    pub size: Option<Spanned<i64>>,
    pub expire: Option<Spanned<RawDuration>>,
    pub period: Option<Spanned<RawDuration>>,
    /// Counted with the instances of `[global.peers]`.
    pub share: Option<Spanned<bool>>,
}

/// `[[frontend.connection_rule]]`: acts on a connection as it is accepted,
/// before TLS and HTTP (HAProxy's `tcp-request connection`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConnRule {
    pub when: Option<Spanned<RawCond>>,
    pub reject: Option<Spanned<bool>>,
    pub silent_drop: Option<Spanned<bool>>,
}

/// `tarpit = "5s"` or `tarpit = { delay = "5s", status = 429 }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawTarpit {
    Delay(RawDuration),
    Full(RawTarpitFull),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarpitFull {
    pub delay: Option<RawDuration>,
    pub status: Option<i64>,
}

/// `client_cert = { present = true }`, `{ subject = "<regex>" }` or
/// `{ fingerprint = ["<sha-256 hex>", ...] }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientCertCond {
    pub present: Option<bool>,
    pub subject: Option<String>,
    pub fingerprint: Option<OneOrMany>,
}

/// `counter = { table = "clients", name = "http_req_rate", above = 100 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCounterCond {
    pub table: String,
    pub name: String,
    pub above: i64,
}

/// `[admin]`: the admin listener (JSON API, stats page, metrics) and the command socket.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub bind: Option<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    pub allowed_hosts: Option<Vec<Spanned<String>>>,
    pub socket: Option<Spanned<RawSockets>>,
    pub refresh: Option<Spanned<RawDuration>>,
    pub read_only: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobal {
    pub workers: Option<Spanned<i64>>,
    pub max_connections: Option<Spanned<i64>>,
    pub grace_period: Option<Spanned<RawDuration>>,
    pub idle_poll: Option<Spanned<RawDuration>>,
    pub splice: Option<bool>,
    pub access_log: Option<Spanned<String>>,
    pub access_log_format: Option<Spanned<String>>,
    pub pidfile: Option<Spanned<String>>,
    pub user: Option<Spanned<String>>,
    pub group: Option<Spanned<String>>,
    pub dns: Option<Spanned<RawDns>>,
    /// `[global.etcd]`: a shared store for server state and the config.
    pub etcd: Option<Spanned<RawEtcd>>,
    /// `[global.peers]`: the instances tables are shared with (tier.rs).
    pub peers: Option<Spanned<RawGlobalPeers>>,
}

/// `peers = { list = ["10.0.0.1:10000", ...], self = "10.0.0.1:10000" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobalPeers {
    pub list: Spanned<Vec<Spanned<String>>>,
    #[serde(rename = "self")]
    pub me: Option<Spanned<String>>,
}

/// `[global.etcd]` (etcd.rs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEtcd {
    pub endpoints: Spanned<Vec<Spanned<String>>>,
    pub prefix: Option<Spanned<String>>,
    pub name: Option<Spanned<String>>,
    pub config: Option<bool>,
    pub timeout: Option<Spanned<RawDuration>>,
}

/// A duration: a string with a unit (`"150ms"`, `"5s"`, `"2m"`, `"1h"`, `"1d"`) or an
/// integer number of milliseconds, as HAProxy reads a bare number.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    Millis(i64),
    Text(String),
}

/// A byte size: `"64KiB"`, `"10MB"`, `"1GiB"` or an integer number of bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(i64),
    Text(String),
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    pub connect: Option<Spanned<RawDuration>>,
    pub client: Option<Spanned<RawDuration>>,
    pub server: Option<Spanned<RawDuration>>,
    pub http_request: Option<Spanned<RawDuration>>,
    pub keep_alive: Option<Spanned<RawDuration>>,
    pub server_keep_alive: Option<Spanned<RawDuration>>,
    pub queue: Option<Spanned<RawDuration>>,
    pub tunnel: Option<Spanned<RawDuration>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_header_size: Option<Spanned<RawSize>>,
    pub max_headers: Option<Spanned<i64>>,
    pub max_uri_size: Option<Spanned<RawSize>>,
    pub max_request_body: Option<Spanned<RawSize>>,
    /// `"drop"`, `"refuse"` or `"keep"`: names that pass for framing ones.
    pub lookalike_headers: Option<Spanned<String>>,
    /// `"merge"` or `"refuse"`: a Content-Length list or repeat of one value.
    pub repeated_content_length: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDefaults {
    #[serde(default)]
    pub timeout: RawTimeouts,
    pub retries: Option<Spanned<i64>>,
    pub redispatch: Option<bool>,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub error_pages: BTreeMap<String, Spanned<String>>,
    pub forward_for: Option<bool>,
    #[serde(default)]
    pub h2: RawH2,
}

/// `h2 = { max_concurrent_streams = 100, ... }`: HTTP/2 with clients.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawH2 {
    pub max_concurrent_streams: Option<Spanned<i64>>,
    pub initial_window_size: Option<Spanned<RawSize>>,
    pub connection_window_size: Option<Spanned<RawSize>>,
    pub max_frame_size: Option<Spanned<RawSize>>,
    pub max_header_list_size: Option<Spanned<RawSize>>,
    pub header_table_size: Option<Spanned<RawSize>>,
    pub max_resets: Option<Spanned<i64>>,
    pub reset_window: Option<Spanned<RawDuration>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFrontend {
    pub name: Spanned<String>,
    /// `"http"` (the default) or `"tcp"`.
    pub mode: Option<Spanned<String>>,
    #[serde(default)]
    pub bind: Vec<Spanned<RawBind>>,
    pub default_backend: Option<Spanned<String>>,
    pub forward_for: Option<Spanned<bool>>,
    /// RFC 7239 `Forwarded`, added to requests (off by default).
    pub forwarded: Option<Spanned<bool>>,
    /// A request id header: `true`, or `{ header, trust }`.
    pub request_id: Option<Spanned<RawRequestId>>,
    pub compression: Option<Spanned<RawCompression>>,
    #[serde(default)]
    pub timeout: RawTimeouts,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub error_pages: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub rule: Vec<Spanned<RawRule>>,
    /// HTTP/2 with prior knowledge on the plain binds (bind tables may override).
    pub h2c: Option<Spanned<bool>>,
    #[serde(default)]
    pub h2: RawH2,
    pub auth: Option<Spanned<RawAuth>>,
    /// The protocols an HTTP/1.1 `Upgrade` may switch to (`["websocket"]`).
    pub upgrades: Option<Spanned<Vec<Spanned<String>>>>,
    /// Rules match the path in normal form (the default) or as it came.
    pub path_normalize: Option<Spanned<bool>>,
    /// The `[[table]]`s each connection and request of the frontend counts in.
    pub track: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub connection_rule: Vec<Spanned<RawConnRule>>,
}

/// One address to listen on: `"127.0.0.1:8080"`, or a table with the address
/// and its options, `{ addr = ":443", tls = { certs = [...] } }`.
#[derive(Debug)]
pub enum RawBind {
    Addr(String),
    Table(Box<RawBindTable>),
}

/// Written by hand rather than `#[serde(untagged)]`, so that a mistake inside the
/// table (an unknown key, a wrong type) is reported as itself, with its key path,
/// rather than as "no variant matched".
impl<'de> Deserialize<'de> for RawBind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawBind;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an address (\"127.0.0.1:8080\") or a table ({ addr = \":443\", tls = { ... } })")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RawBind, E> {
                Ok(RawBind::Addr(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawBind, A::Error> {
                RawBindTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|t| RawBind::Table(Box::new(t)))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBindTable {
    pub addr: Spanned<String>,
    pub tls: Option<Spanned<RawTls>>,
    pub accept_proxy: Option<bool>,
    pub h2c: Option<Spanned<bool>>,
    pub defer_accept: Option<bool>,
    /// HTTP/3 on the same port over UDP (a TLS bind only).
    pub h3: Option<Spanned<bool>>,
}

/// `tls = { certs = [...], ... }` on a bind: TLS termination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub certs: Option<Spanned<Vec<Spanned<String>>>>,
    pub key: Option<Spanned<String>>,
    pub alpn: Option<Spanned<Vec<Spanned<String>>>>,
    pub min_version: Option<Spanned<RawTlsVersion>>,
    pub max_version: Option<Spanned<RawTlsVersion>>,
    pub ciphers: Option<Spanned<Vec<Spanned<String>>>>,
    pub hsts: Option<Spanned<String>>,
    pub session_cache: Option<Spanned<i64>>,
    pub tickets: Option<bool>,
    /// Client certificates: the CAs that sign them (PEM).
    pub client_ca: Option<Spanned<String>>,
    /// `"required"` (the default with `client_ca`) or `"optional"`.
    pub verify: Option<Spanned<String>>,
    /// Certificate revocation lists (PEM or DER) for client certificates.
    pub crl: Option<Spanned<Vec<Spanned<String>>>>,
    /// `[[acme]]` certificates served beside (or instead of) `certs`.
    pub acme: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `"1.2"` or `1.2`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawTlsVersion {
    Text(String),
    Number(f64),
}

/// One routing rule: a condition, header edits, and at most one final action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub when: Option<Spanned<RawCond>>,
    pub backend: Option<Spanned<String>>,
    pub redirect: Option<Spanned<RawRedirect>>,
    pub deny: Option<Spanned<RawDeny>>,
    #[serde(default)]
    pub set_request_headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub add_request_headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub delete_request_headers: Vec<Spanned<String>>,
    #[serde(default)]
    pub set_response_headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub add_response_headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub delete_response_headers: Vec<Spanned<String>>,
    pub cache: Option<Spanned<RawCacheUse>>,
    pub auth: Option<Spanned<RawAuth>>,
    /// Path conditions without ASCII case; by default on for `deny` and `auth` rules.
    pub path_case_insensitive: Option<Spanned<bool>>,
    /// `Link` values sent in a 103 Early Hints before the server answers.
    pub early_hints: Option<Spanned<Vec<String>>>,
    /// Holds the request, then answers with an error (HAProxy's `tarpit`).
    pub tarpit: Option<Spanned<RawTarpit>>,
    /// Closes the client connection without a response.
    pub silent_drop: Option<Spanned<bool>>,
    /// `rewrite_path = { regex = "^/api/", to = "/" }`: the path sent to the server.
    pub rewrite_path: Option<Spanned<RawRewritePath>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRewritePath {
    pub regex: String,
    pub to: String,
}

/// `deny = 403` or `deny = { status = 403, body = "..." }`
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawDeny {
    Status(i64),
    Full(RawDenyFull),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDenyFull {
    pub status: Option<i64>,
    pub body: Option<String>,
    pub retry_after: Option<RawDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    pub location: Option<String>,
    pub prefix: Option<String>,
    pub scheme: Option<String>,
    pub port: Option<i64>,
    pub code: Option<i64>,
}

/// A condition table. Every key present must match (they are ANDed); `not`, `all`
/// and `any` nest further conditions.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCond {
    pub host: Option<Spanned<OneOrMany>>,
    pub path: Option<Spanned<OneOrMany>>,
    pub path_prefix: Option<Spanned<OneOrMany>>,
    pub path_regex: Option<Spanned<OneOrMany>>,
    pub method: Option<Spanned<OneOrMany>>,
    pub header: Option<Spanned<RawHeaderCond>>,
    pub src: Option<Spanned<OneOrMany>>,
    pub tls: Option<Spanned<bool>>,
    pub sni: Option<Spanned<OneOrMany>>,
    pub counter: Option<Spanned<RawCounterCond>>,
    pub client_cert: Option<Spanned<RawClientCertCond>>,
    pub not: Option<Box<Spanned<RawCond>>>,
    pub all: Option<Vec<Spanned<RawCond>>>,
    pub any: Option<Vec<Spanned<RawCond>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderCond {
    pub name: String,
    pub present: Option<bool>,
    pub equals: Option<String>,
    pub regex: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    pub name: Spanned<String>,
    /// `"http"` (the default) or `"tcp"`.
    pub mode: Option<Spanned<String>>,
    pub balance: Option<Spanned<String>>,
    #[serde(default)]
    pub timeout: RawTimeouts,
    pub retries: Option<Spanned<i64>>,
    pub redispatch: Option<bool>,
    pub check: Option<Spanned<RawCheck>>,
    pub observe: Option<Spanned<RawObserve>>,
    pub cookie: Option<Spanned<RawCookie>>,
    pub stick: Option<Spanned<RawStick>>,
    #[serde(default)]
    pub server: Vec<Spanned<RawServer>>,
    pub cache: Option<Spanned<RawCacheUse>>,
    pub auth: Option<Spanned<RawAuth>>,
    /// TLS to every server of the backend that has no `tls` of its own.
    pub tls: Option<Spanned<RawServerTls>>,
    /// The protocol of every server of the backend that has no `proto` of its own.
    pub proto: Option<Spanned<String>>,
    /// Server names followed at run time: `{ every = "30s" }` (the default),
    /// or `false` (resolved once, at load).
    pub resolve: Option<Spanned<RawResolve>>,
    pub compression: Option<Spanned<RawCompression>>,
    /// `static = { root = "DIR", ... }`: files from a directory instead of servers.
    #[serde(rename = "static")]
    pub files: Option<Spanned<RawStatic>>,
    /// `forward = { ... }`: a forward proxy to the host each request names.
    pub forward: Option<Spanned<RawForward>>,
    /// `discover = { dns_srv = "_http._tcp.app.internal" | dns = "app.internal:8080",
    /// every = "10s", server = { ... } }`: servers found in DNS.
    pub discover: Option<Spanned<RawDiscover>>,
}

/// A backend's `discover` table (discover.rs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscover {
    pub dns_srv: Option<Spanned<String>>,
    pub dns: Option<Spanned<String>>,
    pub every: Option<Spanned<RawDuration>>,
    /// Settings of every server found (a `[[backend.server]]` without name
    /// and address; weight and backup come from SRV records).
    pub server: Option<Spanned<RawServerTemplate>>,
}

/// `discover.server`: the keys of `[[backend.server]]` that are not per server.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerTemplate {
    pub weight: Option<Spanned<i64>>,
    pub maxconn: Option<Spanned<i64>>,
    pub check: Option<Spanned<bool>>,
    pub check_port: Option<Spanned<i64>>,
    pub send_proxy: Option<Spanned<String>>,
    pub tls: Option<Spanned<RawServerTls>>,
    pub proto: Option<Spanned<String>>,
}

/// `forward = { allow_hosts = [...], ports = [...], connect_ports = [...],
/// allow_networks = [...], deny_networks = [...], auth = { ... } }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForward {
    pub allow_hosts: Option<Spanned<Vec<String>>>,
    pub ports: Option<Spanned<Vec<i64>>>,
    pub connect_ports: Option<Spanned<Vec<i64>>>,
    pub allow_networks: Option<Spanned<Vec<String>>>,
    pub deny_networks: Option<Spanned<Vec<String>>>,
    pub auth: Option<Spanned<RawAuth>>,
}

/// `static = { root = "DIR", index = [...], fallback = "BACKEND", ... }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStatic {
    pub root: Spanned<String>,
    pub index: Option<Spanned<OneOrMany>>,
    pub fallback: Option<Spanned<String>>,
    pub precompressed: Option<Spanned<RawPrecompressed>>,
    pub types: Option<Spanned<BTreeMap<String, String>>>,
    pub default_type: Option<Spanned<String>>,
}

/// `precompressed = true | false | ["br", "gzip"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawPrecompressed {
    On(bool),
    Codings(Vec<String>),
}

/// `compression = true | false`, or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawCompression {
    On(bool),
    Table(RawCompressionTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompressionTable {
    pub codings: Option<Vec<String>>,
    pub types: Option<Vec<String>>,
    pub min_size: Option<RawSize>,
    pub level: Option<RawLevels>,
    pub decompress: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLevels {
    pub gzip: Option<i64>,
    pub br: Option<i64>,
    pub zstd: Option<i64>,
}

/// `resolve = false`, or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawResolve {
    On(bool),
    Table(RawResolveTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResolveTable {
    pub every: Option<RawDuration>,
}

/// `[global.dns]`: the name servers that follow server names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    /// `"IP"` or `"IP:PORT"`; none: those of /etc/resolv.conf.
    #[serde(default)]
    pub nameservers: Vec<Spanned<String>>,
    pub timeout: Option<Spanned<RawDuration>>,
}

/// `cookie = { name = "SERVERID", mode = "insert", indirect = true, ... }`:
/// cookie-based persistence.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCookie {
    pub name: Spanned<String>,
    pub mode: Option<Spanned<String>>,
    pub indirect: Option<Spanned<bool>>,
    pub nocache: Option<Spanned<bool>>,
    pub httponly: Option<Spanned<bool>>,
    pub secure: Option<Spanned<bool>>,
    pub max_idle: Option<Spanned<RawDuration>>,
    pub max_life: Option<Spanned<RawDuration>>,
    pub domain: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
}

/// `stick = { on = "source", expire = "30m", size = 100000 }`: a stick table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStick {
    pub on: Spanned<String>,
    pub expire: Option<Spanned<RawDuration>>,
    pub size: Option<Spanned<i64>>,
    /// Entries shared with the instances of `[global.peers]`.
    pub share: Option<Spanned<bool>>,
}

/// `check = { type = "http", interval = "2s", ... }`: active health checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    pub interval: Option<Spanned<RawDuration>>,
    pub timeout: Option<Spanned<RawDuration>>,
    pub fall: Option<Spanned<i64>>,
    pub rise: Option<Spanned<i64>>,
    pub port: Option<Spanned<i64>>,
    pub method: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub expect_status: Option<Spanned<RawStatusRange>>,
    pub expect_body: Option<Spanned<String>>,
}

/// `200`, `"200"` or `"200-399"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawStatusRange {
    Code(i64),
    Text(String),
}

/// `observe = { errors = 3 }`: passive health checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawObserve {
    pub errors: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub name: Spanned<String>,
    pub addr: Spanned<String>,
    pub weight: Option<Spanned<i64>>,
    pub backup: Option<bool>,
    /// Starts in maintenance (HAProxy's `disabled`).
    pub disabled: Option<bool>,
    pub maxconn: Option<Spanned<i64>>,
    pub check: Option<Spanned<bool>>,
    pub check_port: Option<Spanned<i64>>,
    pub cookie: Option<Spanned<String>>,
    pub send_proxy: Option<Spanned<String>>,
    pub tls: Option<Spanned<RawServerTls>>,
    pub proto: Option<Spanned<String>>,
}

/// `tls = { ca = "ca.pem", sni = "app.internal", cert = "client.pem", key =
/// "client.key", verify = "full", alpn = ["h2", "http/1.1"] }` on a server (or
/// a backend, for its servers): TLS to the server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerTls {
    pub ca: Option<Spanned<String>>,
    pub sni: Option<Spanned<String>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub verify: Option<Spanned<String>>,
    pub alpn: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[[userlist]]`: users for HTTP Basic authentication (HAProxy's `userlist`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUserlist {
    pub name: Spanned<String>,
    #[serde(default)]
    pub users: Vec<Spanned<RawUser>>,
    /// How long a failed attempt waits for its 401, at least.
    pub failure_delay: Option<Spanned<RawDuration>>,
}

/// One user: `{ name = "alice", password = "$2y$10$..." }`, or with
/// `insecure_password` for a password written as is.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUser {
    pub name: Spanned<String>,
    pub password: Option<Spanned<String>>,
    pub insecure_password: Option<Spanned<String>>,
}

/// `auth = { userlist = "admins", realm = "Restricted", strip = true }` on a
/// frontend, a rule or a backend.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub userlist: Spanned<String>,
    pub realm: Option<Spanned<String>>,
    pub strip: Option<bool>,
}

/// `[[cache]]`: one cache zone (a store with its size and policy options).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCacheZone {
    pub name: Spanned<String>,
    pub memory: Option<Spanned<RawSize>>,
    pub max_object: Option<Spanned<RawSize>>,
    /// The disk tier.
    pub disk: Option<Spanned<RawCacheDisk>>,
    pub store_set_cookie: Option<Spanned<bool>>,
    pub targeted_cache_control: Option<Spanned<String>>,
    pub strip_targeted_cache_control: Option<Spanned<bool>>,
    pub stale_if_error: Option<Spanned<RawDuration>>,
    pub heuristic_percent: Option<Spanned<i64>>,
    pub heuristic_max: Option<Spanned<RawDuration>>,
    pub purge_from: Option<Spanned<OneOrMany>>,
    /// A tier across instances (tier.rs).
    pub peers: Option<Spanned<RawPeers>>,
}

/// `peers = { list = ["10.0.0.1:80", ...] | dns = "tollgate.internal:80",
/// every = "10s", self = "10.0.0.1:80", check = "2s" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPeers {
    pub list: Option<Spanned<Vec<Spanned<String>>>>,
    pub dns: Option<Spanned<String>>,
    pub every: Option<Spanned<RawDuration>>,
    #[serde(rename = "self")]
    pub me: Option<Spanned<String>>,
    pub check: Option<Spanned<RawDuration>>,
}

/// `disk = { path = "...", size = "..." }` in a `[[cache]]` zone.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCacheDisk {
    pub path: Spanned<String>,
    pub size: Spanned<RawSize>,
}

/// `cache = { zone = "main" }` or `cache = false` on a backend or a rule.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawCacheUse {
    Switch(bool),
    Zone(RawCacheRef),
    /// Anything else, refused by the builder with an example.
    Other(toml::Value),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCacheRef {
    pub zone: String,
}

/// `admin.socket`: a path, a table, or a list of tables.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSockets {
    Path(String),
    One(RawSocket),
    Many(Vec<RawSocket>),
}

/// `{ path = "...", mode = 0o660, user = "...", group = "...", level = "..." }`
/// or `{ addr = "127.0.0.1:9999", level = "..." }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSocket {
    pub path: Option<String>,
    pub addr: Option<String>,
    pub level: Option<String>,
    pub mode: Option<RawMode>,
    pub user: Option<String>,
    pub group: Option<String>,
}

/// Permission bits: `0o660` (a TOML octal integer) or `"0660"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawMode {
    Int(i64),
    Text(String),
}

/// `request_id = true`, or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawRequestId {
    On(bool),
    Table(RawRequestIdTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequestIdTable {
    /// The header (default `X-Request-Id`).
    pub header: Option<String>,
    /// Client addresses or CIDR blocks whose own id is kept.
    #[serde(default)]
    pub trust: Vec<String>,
}
