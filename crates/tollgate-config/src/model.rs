//! The validated configuration: every value typed, every reference resolved.
//! Nothing here can be invalid; `crate::build` is the only way to make one.

use crate::track::*;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use ipnet::IpNet;
use regex::Regex;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this was read from.
    pub source: PathBuf,
    pub global: Global,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Arc<Backend>>,
    /// `[admin]`; `None`: no admin listener and no command socket.
    pub admin: Option<Admin>,
    /// `[[cache]]` zones; backends and rules refer to them by index.
    pub caches: Vec<CacheZone>,
    /// `[[userlist]]`s, in file order (`AuthPolicy::userlist` indexes them).
    pub userlists: Vec<Arc<Userlist>>,
    /// `[[table]]`s of counters, in file order (frontends' `track` and
    /// `counter` conditions index them).
    pub tables: Vec<TrackTable>,
    /// `[[acme]]` certificates, in file order (TLS binds' `acme` index them).
    pub acme: Vec<Arc<crate::Acme>>,
    /// What is allowed but risky (`verify = "none"`), to be logged at load.
    pub warnings: Vec<crate::ConfigError>,
}

/// The admin listener and the command socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// The HTTP listener (JSON API, stats page, /metrics). `None`: only the socket.
    pub bind: Option<SocketAddr>,
    /// Bearer token the HTTP listener requires (`Authorization: Bearer ...`).
    pub token: Option<String>,
    /// Host names (and addresses) the HTTP listener answers to besides its own
    /// address: a request with another `Host` is refused (421). An entry
    /// without a port matches any port.
    pub allowed_hosts: Vec<crate::HostPort>,
    /// The command sockets (HAProxy's `stats socket`s).
    pub sockets: Vec<CommandSocket>,
    /// How often the stats page reloads itself.
    pub refresh: Duration,
    /// Changes (state, weight, reload) refused on both the API and the socket.
    pub read_only: bool,
}

impl Admin {
    pub const DEFAULT_BIND: &'static str = "127.0.0.1:8404";

    /// The first command socket on a path, if any (what the demo prints).
    pub fn socket_path(&self) -> Option<&std::path::Path> {
        self.sockets.iter().find_map(|s| match &s.listen {
            SocketListen::Unix(u) => Some(u.path.as_path()),
            SocketListen::Tcp(_) => None,
        })
    }
}

/// One command socket: where it listens, and what its clients may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSocket {
    pub listen: SocketListen,
    pub level: CliLevel,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketListen {
    Unix(UnixSocket),
    Tcp(SocketAddr),
}

/// A command socket's file: its path, permission bits and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixSocket {
    pub path: PathBuf,
    /// Permission bits (default 0600).
    pub mode: u32,
    /// Owner and group to give the file (default: the process's).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// What a command socket's clients may do, HAProxy's levels: `user` reads
/// the statistics, `operator` also reads what clients are bound to (stick
/// tables), `admin` changes servers too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CliLevel {
    User,
    Operator,
    Admin,
}

impl CliLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            CliLevel::User => "user",
            CliLevel::Operator => "operator",
            CliLevel::Admin => "admin",
        }
    }
}

impl Config {
    pub fn backend(&self, name: &str) -> Option<&Arc<Backend>> {
        self.backends.iter().find(|b| b.name == name)
    }
}

/// `global.idle_poll` when the file leaves it out: off (docs/architecture.md,
/// "Idle polling", says why).
pub const DEFAULT_IDLE_POLL: Duration = Duration::ZERO;
/// The longest `global.idle_poll` accepted.
pub const MAX_IDLE_POLL: Duration = Duration::from_millis(10);
/// The most client connections a `global.max_connections` derived from the
/// file descriptor limit allows (and the value the key holds until it is
/// derived, when the file leaves it out).
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;

#[derive(Debug, Clone)]
pub struct Global {
    /// Worker threads; 0 in the file means one per core and is resolved by the runtime.
    pub workers: usize,
    /// The most client connections open at once. When the file leaves it out
    /// (`max_connections_set` false) it holds [`DEFAULT_MAX_CONNECTIONS`]
    /// until the server derives it from the file descriptor limit at start
    /// (tollgate-proxy, limits.rs), and the figure in force from then on.
    pub max_connections: usize,
    /// Whether the file sets `max_connections`.
    pub max_connections_set: bool,
    pub grace_period: Duration,
    /// The longest a worker keeps polling for I/O, without sleeping, after it
    /// last had work; the window adapts below it (0 = sleep at once, always);
    /// see docs/architecture.md, "Idle polling".
    pub idle_poll: Duration,
    /// Whether large bodies (responses and uploads) and tunnels' bulk transfers
    /// go from socket to socket with `splice(2)` rather than through a buffer
    /// (docs/architecture.md, "Bodies moved with splice").
    pub splice: bool,
    pub access_log: AccessLogTarget,
    pub access_log_format: LogFormat,
    /// Where `tollgate run` writes its process id (and `tollgate reload` reads it).
    pub pidfile: Option<PathBuf>,
    /// The account to run as once the listeners, logs and sockets are open.
    pub run_as: Option<RunAs>,
    pub dns: Dns,
    /// `[global.etcd]`: server state and the config shared through etcd.
    pub etcd: Option<Arc<crate::Etcd>>,
    /// `[global.peers]`: the instances shared tables are pushed to.
    pub peers: Option<Arc<crate::tier::Peers>>,
}

/// A content coding responses may be compressed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    Gzip,
    Br,
    Zstd,
}

impl Coding {
    /// Its `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }

    pub fn from_token(t: &str) -> Option<Coding> {
        match t {
            "gzip" | "x-gzip" => Some(Coding::Gzip),
            "br" => Some(Coding::Br),
            "zstd" => Some(Coding::Zstd),
            _ => None,
        }
    }
}

/// `compression`: which responses are compressed, how (docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    /// Off (`compression = false` on a backend, over its frontend's).
    pub enabled: bool,
    /// Offered in this order of preference (the client's weights first).
    pub codings: Vec<Coding>,
    /// Media types, `text/*` prefixes allowed, lower case.
    pub types: Vec<String>,
    /// Responses whose `Content-Length` is smaller are sent as they are.
    pub min_size: u64,
    pub gzip_level: u32,
    pub br_level: u32,
    pub zstd_level: i32,
    /// A server's response encoded with one of `codings` is decoded on its
    /// way to a client that does not take that coding (nginx's `gunzip`).
    pub decompress: bool,
}

/// `static`: a backend that serves the files of a directory (docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticFiles {
    /// The directory, absolute; no request reaches outside it.
    pub root: PathBuf,
    /// Files tried, in order, for a path that names a directory.
    pub index: Vec<String>,
    /// The backend a request goes to when no file answers it (`try_files`):
    /// an index into `Config::backends`.
    pub fallback: Option<usize>,
    /// Sibling files (`F.br`, `F.zst`, `F.gz`) sent in place of `F` to a
    /// client that takes their coding, in this order of preference.
    pub precompressed: Vec<Coding>,
    /// Content types by file extension (lower case, no dot), over the
    /// built-in table.
    pub types: BTreeMap<String, String>,
    /// The content type of a file whose extension neither knows.
    pub default_type: String,
}

/// `[global.dns]`: how server names are looked up at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dns {
    /// Empty: the name servers of /etc/resolv.conf.
    pub nameservers: Vec<SocketAddr>,
    /// How long one query may take (each name server is tried in turn).
    pub timeout: Duration,
}

impl Default for Dns {
    fn default() -> Self {
        Dns { nameservers: Vec::new(), timeout: Duration::from_secs(2) }
    }
}

/// A server's address written as a name: `host:port`, looked up at run time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DnsAddr {
    /// Lower case, without a trailing dot.
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for DnsAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// `global.user` / `global.group`, looked up at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The user and its uid; none with `group` alone (the uid stays).
    pub user: Option<(String, u32)>,
    /// The group and its gid (without `group`: the user's primary group).
    pub group: (String, u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    Off,
    Stdout,
    Stderr,
    File(PathBuf),
    /// A syslog daemon: one datagram per line.
    Syslog(SyslogTarget),
}

/// Where syslog lines go: the local daemon's Unix datagram socket (`/dev/log`
/// by default), or a remote one over UDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogTarget {
    Unix(PathBuf),
    Udp(SocketAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
    /// A line of the operator's own: literal text and named fields.
    Custom(std::sync::Arc<[crate::log_format::LogPiece]>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub client: Duration,
    pub server: Duration,
    pub http_request: Duration,
    pub keep_alive: Duration,
    /// How long an idle connection to a server is kept for another request.
    pub server_keep_alive: Duration,
    pub queue: Duration,
    /// Idle time allowed on both sides of a tunnel (a WebSocket after its 101).
    pub tunnel: Duration,
    /// Whether `tunnel` was written in the file (`[defaults]` or the backend):
    /// a tcp session then idles out after `tunnel` on both sides instead of
    /// `client` and `server`, as HAProxy's `timeout tunnel` replaces them.
    pub tunnel_set: bool,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            client: Duration::from_secs(50),
            server: Duration::from_secs(50),
            http_request: Duration::from_secs(10),
            keep_alive: Duration::from_secs(60),
            server_keep_alive: Duration::from_secs(4),
            queue: Duration::from_secs(5),
            tunnel: Duration::from_secs(3600),
            tunnel_set: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line + headers) in bytes; more gets 431.
    pub max_header_size: usize,
    /// Most header fields in a request; more gets 431.
    pub max_headers: usize,
    /// Longest request target in bytes; longer gets 414.
    pub max_uri_size: usize,
    /// Largest request body in bytes; larger gets 413. `None`: unlimited.
    pub max_request_body: Option<u64>,
    /// A field whose name passes for a framing one (`Content_Length`).
    pub lookalike_headers: Lookalikes,
    /// A Content-Length sent as a list or repeats of one value: merged into
    /// one field (`false`), or refused with 400 (`true`).
    pub refuse_repeated_length: bool,
}

/// What becomes of a request field whose name passes for a framing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookalikes {
    /// Removed before rules and the server see it (the default).
    Drop,
    /// 400 (`lookalike-header`).
    Refuse,
    /// Passed on.
    Keep,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_size: 64 * 1024,
            max_headers: 100,
            max_uri_size: 8 * 1024,
            max_request_body: None,
            lookalike_headers: Lookalikes::Drop,
            refuse_repeated_length: false,
        }
    }
}

/// A response body served in place of the built-in one for a status.
#[derive(Debug, Clone)]
pub struct ErrorPage {
    pub content_type: &'static str,
    pub body: Arc<[u8]>,
}

/// What a frontend or a backend proxies (HAProxy: `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// HTTP requests: parsed, routed by their content, answered with errors.
    #[default]
    Http,
    /// TCP connections: a server is chosen per connection and bytes are
    /// relayed both ways untouched (tcp.rs in the proxy).
    Tcp,
}

impl Mode {
    /// `"http"` or `"tcp"`, as the file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Http => "http",
            Mode::Tcp => "tcp",
        }
    }
}

/// `request_id`: the header a request's id goes in (lowercase), and the
/// clients whose own id is kept (any other gets a new one).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestId {
    pub header: String,
    pub trust: Vec<IpNet>,
}

impl RequestId {
    /// Whether a request from `ip` keeps the id it came with.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.trust.iter().any(|n| n.contains(&ip))
    }
}

#[derive(Debug, Clone)]
pub struct Frontend {
    pub name: String,
    /// HTTP or TCP; a frontend only uses backends of its own mode.
    pub mode: Mode,
    pub binds: Vec<Bind>,
    /// Index into `Config::backends`.
    pub default_backend: Option<usize>,
    pub forward_for: bool,
    /// Add RFC 7239 `Forwarded` (`for`, `proto`, `host`) to requests.
    pub forwarded: bool,
    /// A request id in a header, made for each request (or kept from a trusted client).
    pub request_id: Option<RequestId>,
    /// Response compression for this frontend's clients (a backend's own wins).
    pub compression: Option<Arc<Compression>>,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub error_pages: BTreeMap<u16, ErrorPage>,
    pub rules: Vec<Rule>,
    /// Basic authentication for every request the frontend forwards.
    pub auth: Option<AuthPolicy>,
    /// HTTP/2 settings for this frontend's clients (ALPN `h2`, h2c).
    pub h2: H2,
    /// The protocols an HTTP/1.1 `Upgrade` may switch to, lowercase
    /// (`websocket` by default); an offer of any other is left out of the
    /// request, and a request that offers none of these is not an upgrade.
    pub upgrades: Vec<String>,
    /// `path_normalize`: rules match the request's path in normal form
    /// ([`crate::path::normalize`]: unreserved `%XX` decoded, dot segments
    /// resolved, slashes merged, `;` parameters removed), not as it came. The
    /// request goes to the server as it came either way.
    pub path_normalize: bool,
    /// `track`: the tables (indexes into `Config::tables`) each connection
    /// (`src` tables) and request of the frontend counts in; at most three,
    /// as HAProxy's sc0..sc2.
    pub track: Vec<usize>,
    /// `[[frontend.connection_rule]]`, checked in order as a connection is
    /// accepted; the first that matches acts.
    pub connection_rules: Vec<ConnectionRule>,
    /// What the rules' conditions read (see [`Reads`]).
    pub rule_reads: Reads,
}

impl Frontend {
    /// Whether `protocol` (an `Upgrade` list element: a name with an optional
    /// `/version`) is one this frontend lets a request switch to.
    pub fn allows_upgrade(&self, protocol: &[u8]) -> bool {
        let name = protocol.split(|&b| b == b'/').next().unwrap_or_default().trim_ascii();
        self.upgrades.iter().any(|u| u.as_bytes().eq_ignore_ascii_case(name))
    }

    /// How long a new connection may take to send its PROXY header and to
    /// complete its TLS handshake: `timeout.http_request` in HTTP mode,
    /// `timeout.client` in TCP mode (which has no requests).
    pub fn handshake_timeout(&self) -> Duration {
        match self.mode {
            Mode::Http => self.timeouts.http_request,
            Mode::Tcp => self.timeouts.client,
        }
    }
}

/// HTTP/2 with clients: the SETTINGS Tollgate sends and the abuse limits it
/// enforces, per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2 {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams a client may have open at once.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: request body bytes a stream may send
    /// before Tollgate has passed them on.
    pub initial_window_size: u32,
    /// The connection's receive window (all streams together).
    pub connection_window_size: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame payload accepted.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the largest decoded header list (RFC 9113
    /// section 6.5.2 sizes: name + value + 32 per field); larger gets 431. Also
    /// bounds the HEADERS + CONTINUATION bytes buffered for one header block.
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client may use.
    pub header_table_size: u32,
    /// Streams a client may reset (RST_STREAM) within `reset_window`; one more
    /// ends the connection with GOAWAY ENHANCE_YOUR_CALM (CVE-2023-44487).
    pub max_resets: u32,
    pub reset_window: Duration,
}

impl Default for H2 {
    fn default() -> Self {
        H2 {
            max_concurrent_streams: 100,
            initial_window_size: 256 * 1024,
            connection_window_size: 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 64 * 1024,
            header_table_size: 4096,
            max_resets: 100,
            reset_window: Duration::from_secs(10),
        }
    }
}

/// One address a frontend listens on, with TLS or without.
#[derive(Debug, Clone)]
pub struct Bind {
    pub addr: SocketAddr,
    /// `None`: plain HTTP.
    pub tls: Option<Arc<Tls>>,
    /// Every connection must start with a PROXY protocol header (v1 or v2),
    /// whose addresses then stand for the client's.
    pub accept_proxy: bool,
    /// A plain bind that also takes HTTP/2 with prior knowledge (h2c): a
    /// connection starting with the HTTP/2 preface is served as HTTP/2.
    pub h2c: bool,
    /// The kernel hands a connection over only once its first bytes have
    /// arrived (TCP_DEFER_ACCEPT): on by default in HTTP mode, where the client
    /// speaks first, off in TCP mode, where the server may.
    pub defer_accept: bool,
    /// HTTP/3 (QUIC) on the same address over UDP, with the bind's TLS.
    pub h3: bool,
}

impl From<SocketAddr> for Bind {
    /// A plain-HTTP bind.
    fn from(addr: SocketAddr) -> Self {
        Bind { addr, tls: None, accept_proxy: false, h2c: false, defer_accept: true, h3: false }
    }
}

impl std::fmt::Display for Bind {
    /// The address (as in the file's string form).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.addr)
    }
}

/// A TLS version Tollgate can speak (rustls implements 1.2 and 1.3 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }
}

/// TLS termination on one bind: certificates, versions, cipher suites and
/// session resumption, all checked (and the files read) when the config was built.
#[derive(Debug, Clone)]
pub struct Tls {
    /// In the order given; the first is the default (a client without SNI, or
    /// with a name no certificate has).
    pub certs: Vec<TlsCert>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    /// In order of preference (the server's order wins); every one belongs to a
    /// version in `min_version..=max_version`, and each such version has one.
    pub cipher_suites: Vec<rustls::SupportedCipherSuite>,
    /// ALPN protocol names offered, in order of preference (empty: no ALPN):
    /// `h2` and `http/1.1`.
    pub alpn: Vec<String>,
    /// `Strict-Transport-Security` added to every response on this bind.
    pub hsts: Option<HeaderValue>,
    /// Entries of the server-side session cache shared by every worker (0: none).
    pub session_cache: usize,
    /// Stateless session tickets, with keys shared by every worker and rotated.
    pub tickets: bool,
    /// `client_ca`: clients present (or may present) a certificate its CAs sign.
    pub client_auth: Option<Arc<ClientAuth>>,
    /// `[[acme]]` certificates served for their names, before `certs`
    /// (indexes into `Config::acme`).
    pub acme: Vec<usize>,
}

/// One certificate chain with its private key, as read from its files.
#[derive(Debug, Clone)]
pub struct TlsCert {
    /// The PEM file of the chain (leaf first).
    pub cert_file: PathBuf,
    /// Where the private key came from (`cert_file` itself when it holds one).
    pub key_file: PathBuf,
    /// The OCSP response stapled with it (`<cert_file>.ocsp`), if there is one.
    pub ocsp_file: Option<PathBuf>,
    /// The DNS names of its subjectAltName, lower-case (`*.example.com` for a wildcard).
    pub names: Vec<String>,
    /// The chain, the signing key and the OCSP response, ready for rustls.
    pub key: Arc<rustls::sign::CertifiedKey>,
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub when: Condition,
    pub action: Option<Action>,
    pub request_headers: HeaderEdits,
    pub response_headers: HeaderEdits,
    /// `cache`: the zone requests matching this rule use (or none), over the
    /// backend's; the first matching rule that says wins.
    pub cache: Option<CacheUse>,
    /// Basic authentication for requests this rule matches, when they are
    /// forwarded (never with a redirect or deny action).
    pub auth: Option<AuthPolicy>,
    /// `path_case_insensitive`: the rule's path conditions compare without
    /// ASCII case (the path and the values are folded to lower case). By
    /// default on for a rule that denies or asks for credentials, off for others.
    pub path_case_insensitive: bool,
    /// `Link` field values sent in a 103 (Early Hints) before the server's
    /// answer, for requests this rule matches that go to a server.
    pub early_hints: Vec<HeaderValue>,
    /// `rewrite_path`: the path sent to the server.
    pub rewrite_path: Option<PathRewrite>,
}

/// `rewrite_path = { regex, to }`: the first match of `regex` in the path (in
/// the form rules match, without its query) replaced by `to` (`$1`, `${name}`
/// for captures).
#[derive(Debug, Clone)]
pub struct PathRewrite {
    pub regex: regex::Regex,
    pub to: String,
}

impl PathRewrite {
    /// The new path; always starts with `/` (prepended when the replacement
    /// left it out).
    pub fn apply(&self, path: &str) -> String {
        let out = self.regex.replace(path, self.to.as_str());
        if out.starts_with('/') { out.into_owned() } else { format!("/{out}") }
    }
}

impl Rule {
    /// Whether the rule's condition holds. `facts.path` is the path as the
    /// frontend matches it ([`crate::path::match_form`] without folding);
    /// `folded` gives it folded, asked for only by a case-insensitive rule
    /// that tests the path.
    pub fn matches<'a>(&self, facts: &RequestFacts<'a>, folded: impl FnOnce() -> &'a str) -> bool {
        if self.path_case_insensitive && self.when.uses_path() {
            self.when.matches(&RequestFacts { path: folded(), ..*facts })
        } else {
            self.when.matches(facts)
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct HeaderEdits {
    pub delete: Vec<HeaderName>,
    pub set: Vec<(HeaderName, EditValue)>,
    pub add: Vec<(HeaderName, EditValue)>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.delete.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Whether a value it sets or adds has a variable.
    pub fn has_vars(&self) -> bool {
        self.set.iter().chain(&self.add).any(|(_, v)| v.has_vars())
    }
}

/// A variable of a header rule's value, `${name}`, filled in per request
/// (docs/configuration.md, "Variables in header values").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The client's IP address (IPv4-mapped IPv6 written as IPv4).
    ClientIp,
    ClientPort,
    /// `https` on a TLS bind, else `http`.
    Scheme,
    /// The request's Host (empty without one).
    Host,
    Method,
    /// The request's path, without the query.
    Path,
    /// The request's id (the frontend's `request_id`; empty without one).
    RequestId,
    /// The frontend's name.
    Frontend,
    /// The client certificate's subject, issuer, serial and SHA-256 (empty
    /// without one), and `SUCCESS` or `NONE` (nginx's `$ssl_client_*`).
    SslClientSDn,
    SslClientIDn,
    SslClientSerial,
    SslClientFingerprint,
    SslClientVerify,
}

impl Var {
    pub const NAMES: [(&'static str, Var); 13] = [
        ("client_ip", Var::ClientIp),
        ("client_port", Var::ClientPort),
        ("scheme", Var::Scheme),
        ("host", Var::Host),
        ("method", Var::Method),
        ("path", Var::Path),
        ("request_id", Var::RequestId),
        ("frontend", Var::Frontend),
        ("ssl_client_s_dn", Var::SslClientSDn),
        ("ssl_client_i_dn", Var::SslClientIDn),
        ("ssl_client_serial", Var::SslClientSerial),
        ("ssl_client_fingerprint", Var::SslClientFingerprint),
        ("ssl_client_verify", Var::SslClientVerify),
    ];
}

/// A header value a rule sets or adds: text, and `${name}` variables filled in
/// per request; `$${` stands for a literal `${`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditValue {
    pub parts: Vec<ValuePart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValuePart {
    Text(Vec<u8>),
    Var(Var),
}

impl EditValue {
    /// Parses `${name}` variables out of `s` (a valid header value); an
    /// unknown or unclosed one is an error that names what it found.
    pub fn parse(s: &str) -> Result<EditValue, String> {
        let mut parts = Vec::new();
        let mut text = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find("${") {
            if rest[..i].ends_with('$') {
                // `$${`: a literal `${`.
                text.extend_from_slice(&rest.as_bytes()[..i - 1]);
                text.extend_from_slice(b"${");
                rest = &rest[i + 2..];
                continue;
            }
            text.extend_from_slice(&rest.as_bytes()[..i]);
            let Some(end) = rest[i..].find('}') else {
                return Err(format!("`{}` has no closing `}}`", &rest[i..]));
            };
            let name = &rest[i + 2..i + end];
            let Some((_, var)) = Var::NAMES.iter().find(|(n, _)| *n == name) else {
                let known: Vec<&str> = Var::NAMES.iter().map(|(n, _)| *n).collect();
                return Err(format!("unknown variable `${{{name}}}` (known: {})", known.join(", ")));
            };
            if !text.is_empty() {
                parts.push(ValuePart::Text(std::mem::take(&mut text)));
            }
            parts.push(ValuePart::Var(*var));
            rest = &rest[i + end + 1..];
        }
        text.extend_from_slice(rest.as_bytes());
        if !text.is_empty() || parts.is_empty() {
            parts.push(ValuePart::Text(text));
        }
        Ok(EditValue { parts })
    }

    pub fn has_vars(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, ValuePart::Var(_)))
    }

    /// The value without variables, as it is written; `None` when it has some.
    pub fn literal(&self) -> Option<&[u8]> {
        match &self.parts[..] {
            [ValuePart::Text(t)] => Some(t),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Action {
    /// Index into `Config::backends`.
    Backend(usize),
    Redirect(Redirect),
    Deny {
        status: StatusCode,
        body: Option<String>,
        /// `Retry-After` on the response, in whole seconds.
        retry_after: Option<u32>,
    },
    /// Holds the request for `delay`, then answers `status` and closes the
    /// connection (HAProxy's `tarpit`): an abusive client's slot is taken
    /// from it for that long at the cost of a timer.
    Tarpit {
        delay: Duration,
        status: StatusCode,
    },
    /// Closes the client connection at once, without a response, and so that
    /// the client is not told (a reset sent with a TTL of 1; HAProxy's
    /// `silent-drop`).
    SilentDrop,
}

#[derive(Debug, Clone)]
pub struct Redirect {
    pub target: RedirectTarget,
    pub code: StatusCode,
}

#[derive(Debug, Clone)]
pub enum RedirectTarget {
    /// Sent as the Location as is.
    Location(String),
    /// Prepended to the request's path and query.
    Prefix(String),
    /// The same host, path and query under another scheme (`https`), as
    /// HAProxy's `redirect scheme`: the Host's port is kept unless it is the
    /// default port of the request's scheme; `port` replaces it.
    Scheme { scheme: String, port: Option<u16> },
}

/// `[[frontend.connection_rule]]`: a condition on the client's address and
/// its `src` tables' counters, checked as a connection is accepted.
#[derive(Debug, Clone)]
pub struct ConnectionRule {
    pub when: Condition,
    pub action: ConnectionAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionAction {
    /// Closes the connection at once (HAProxy's `tcp-request connection reject`).
    Reject,
    /// Closes it without telling the client (see [`Action::SilentDrop`]).
    SilentDrop,
}

/// What a rule matches. Matching is pure: see [`Condition::matches`].
#[derive(Debug, Clone)]
pub enum Condition {
    Always,
    Host(Vec<HostPattern>),
    PathExact(Vec<String>),
    PathPrefix(Vec<String>),
    PathRegex(Vec<Regex>),
    Method(Vec<Method>),
    Header(HeaderCond),
    Src(Vec<IpNet>),
    /// Whether the connection is TLS (HAProxy: `ssl_fc`).
    Tls(bool),
    /// A tracked counter above a value (HAProxy: `sc_http_req_rate(0) gt 100`).
    Counter(CounterCond),
    /// The client's certificate (mutual TLS): presented or not, its subject,
    /// its SHA-256.
    ClientCert(ClientCertTest),
    /// The server name the client sent in its TLS handshake (HAProxy: `ssl_fc_sni`).
    Sni(Vec<HostPattern>),
    Not(Box<Condition>),
    All(Vec<Condition>),
    Any(Vec<Condition>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Lower-case exact name.
    Exact(String),
    /// `*.example.com`: stored as `.example.com`; matches any name ending in it.
    Suffix(String),
}

impl HostPattern {
    /// `host` must already be lower-case and without a port. One trailing dot
    /// is ignored: `example.com.` is the fully qualified `example.com`, which
    /// a client may send in Host (or `:authority`, or SNI) and a server serves
    /// as the same site (the patterns are stored without it).
    pub fn matches(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        match self {
            HostPattern::Exact(h) => h == host,
            HostPattern::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct HeaderCond {
    pub name: HeaderName,
    pub test: HeaderTest,
}

#[derive(Debug, Clone)]
pub enum HeaderTest {
    Present,
    Absent,
    Equals(String),
    Regex(Regex),
}

/// The parts of a request a condition looks at.
/// Read access to a request's header fields, whatever holds them (the data
/// path's raw fields, or an `http::HeaderMap`). Names are compared without case.
pub trait HeaderLookup: Sync {
    /// Calls `f` with each value of `name`, in order, until it returns true;
    /// returns whether it did.
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool;
}

impl HeaderLookup for http::HeaderMap {
    fn any_value(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.get_all(name).iter().any(|v| f(v.as_bytes()))
    }
}

#[derive(Clone, Copy)]
pub struct RequestFacts<'a> {
    /// Lower-case host without port (from Host or the absolute-form target).
    pub host: &'a str,
    /// The path (without query) in the form the frontend matches: see
    /// [`crate::path::match_form`] and [`Rule::matches`].
    pub path: &'a str,
    pub method: &'a Method,
    pub headers: &'a dyn HeaderLookup,
    pub src: IpAddr,
    /// Whether the request came over TLS.
    pub tls: bool,
    /// The TLS server name (SNI), lower-case; empty without TLS or SNI.
    pub sni: &'a str,
    /// The counters of the tables the request is tracked in.
    pub counters: &'a dyn CounterLookup,
    /// The certificate the client presented (a bind with `client_ca`).
    pub client_cert: Option<&'a ClientCert>,
}

impl Condition {
    pub fn matches(&self, r: &RequestFacts<'_>) -> bool {
        match self {
            Condition::Always => true,
            Condition::Host(pats) => pats.iter().any(|p| p.matches(r.host)),
            Condition::PathExact(paths) => paths.iter().any(|p| p == r.path),
            Condition::PathPrefix(prefixes) => prefixes.iter().any(|p| r.path.starts_with(p.as_str())),
            Condition::PathRegex(res) => res.iter().any(|re| re.is_match(r.path)),
            Condition::Method(ms) => ms.iter().any(|m| m == r.method),
            Condition::Header(h) => {
                let name = h.name.as_str();
                match &h.test {
                    HeaderTest::Present => r.headers.any_value(name, &mut |_| true),
                    HeaderTest::Absent => !r.headers.any_value(name, &mut |_| true),
                    HeaderTest::Equals(want) => r.headers.any_value(name, &mut |v| v == want.as_bytes()),
                    HeaderTest::Regex(re) => {
                        r.headers.any_value(name, &mut |v| std::str::from_utf8(v).is_ok_and(|s| re.is_match(s)))
                    }
                }
            }
            Condition::Src(nets) => {
                let ip = match r.src {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(r.src),
                    v4 => v4,
                };
                nets.iter().any(|n| n.contains(&ip))
            }
            Condition::Tls(want) => r.tls == *want,
            Condition::Sni(pats) => !r.sni.is_empty() && pats.iter().any(|p| p.matches(r.sni)),
            Condition::Counter(c) => r.counters.counter(c.table, c.counter).is_some_and(|v| v > c.above),
            Condition::ClientCert(t) => match (t, r.client_cert) {
                (ClientCertTest::Present(want), c) => c.is_some() == *want,
                (ClientCertTest::Subject(re), Some(c)) => re.is_match(&c.subject),
                (ClientCertTest::Fingerprint(list), Some(c)) => list.contains(&c.fingerprint),
                (_, None) => false,
            },
            Condition::Not(c) => !c.matches(r),
            Condition::All(cs) => cs.iter().all(|c| c.matches(r)),
            Condition::Any(cs) => cs.iter().any(|c| c.matches(r)),
        }
    }

    /// Whether matching looks at the request's path (`path`, `path_prefix`,
    /// `path_regex`).
    pub fn uses_path(&self) -> bool {
        match self {
            Condition::PathExact(_) | Condition::PathPrefix(_) | Condition::PathRegex(_) => true,
            Condition::Not(c) => c.uses_path(),
            Condition::All(cs) | Condition::Any(cs) => cs.iter().any(Condition::uses_path),
            _ => false,
        }
    }

    /// Adds to `r` what matching reads of a request that takes work to
    /// make ready (its host, path, method).
    pub fn reads(&self, r: &mut Reads) {
        match self {
            Condition::Host(_) => r.host = true,
            Condition::PathExact(_) | Condition::PathPrefix(_) | Condition::PathRegex(_) => r.path = true,
            Condition::Method(_) => r.method = true,
            Condition::Not(c) => c.reads(r),
            Condition::All(cs) | Condition::Any(cs) => cs.iter().for_each(|c| c.reads(r)),
            _ => {}
        }
    }

    /// The tables whose counters matching reads.
    pub fn tables(&self, out: &mut Vec<usize>) {
        match self {
            Condition::Counter(c) => out.push(c.table),
            Condition::Not(c) => c.tables(out),
            Condition::All(cs) | Condition::Any(cs) => cs.iter().for_each(|c| c.tables(out)),
            _ => {}
        }
    }

    /// Whether matching looks at the TLS server name (a tcp frontend then
    /// reads the client's ClientHello before it chooses a backend).
    pub fn uses_sni(&self) -> bool {
        match self {
            Condition::Sni(_) => true,
            Condition::Not(c) => c.uses_sni(),
            Condition::All(cs) | Condition::Any(cs) => cs.iter().any(Condition::uses_sni),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    StaticRr,
    LeastConn,
    First,
    Source,
    Uri,
    Hdr(HeaderName),
    Random,
}

impl Balance {
    pub fn as_str(&self) -> String {
        match self {
            Balance::RoundRobin => "roundrobin".into(),
            Balance::StaticRr => "static-rr".into(),
            Balance::LeastConn => "leastconn".into(),
            Balance::First => "first".into(),
            Balance::Source => "source".into(),
            Balance::Uri => "uri".into(),
            Balance::Hdr(h) => format!("hdr({h})"),
            Balance::Random => "random".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Backend {
    pub name: String,
    /// HTTP or TCP: only frontends of the same mode use it.
    pub mode: Mode,
    pub balance: Balance,
    pub timeouts: Timeouts,
    pub retries: u32,
    pub redispatch: bool,
    /// Active health checks; `None`: servers are always considered up.
    pub check: Option<HealthCheck>,
    /// Passive health checks; only with `check` (which brings servers back).
    pub observe: Option<Observe>,
    pub cookie: Option<CookiePolicy>,
    pub stick: Option<StickPolicy>,
    pub servers: Vec<Server>,
    /// Response compression for this backend's responses (over the frontend's).
    pub compression: Option<Arc<Compression>>,
    /// Files served from a directory, in place of servers (`static`).
    pub files: Option<Arc<StaticFiles>>,
    /// How often server names are looked up again; none: once, at load.
    pub resolve_every: Option<Duration>,
    /// `cache = { zone = ... }`: index into `Config::caches`.
    pub cache: Option<usize>,
    /// Basic authentication for every request routed to this backend.
    pub auth: Option<AuthPolicy>,
    /// A forward proxy, in place of servers (`forward`, forward.rs).
    pub forward: Option<Arc<crate::Forward>>,
    /// Servers found in DNS, beside the listed ones (`discover`, discover.rs).
    pub discover: Option<Arc<crate::Discover>>,
}

/// A backend's active health check (HAProxy: `check`, `inter`, `fall`, `rise`,
/// `timeout check`, `option httpchk`, `http-check expect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub kind: CheckKind,
    /// Time between the starts of two checks of one server.
    pub interval: Duration,
    /// Bound on one whole check (connect, exchange); never more than `interval`.
    pub timeout: Duration,
    /// Consecutive failed checks that take an UP server DOWN (>= 1).
    pub fall: u32,
    /// Consecutive passed checks that bring a DOWN server UP (>= 1).
    pub rise: u32,
    /// Port to check instead of the server's; a server's `check_port` wins.
    pub port: Option<u16>,
}

impl HealthCheck {
    /// The address checks of `server` go to.
    pub fn addr(&self, server: &Server) -> SocketAddr {
        let mut a = server.addr;
        if let Some(p) = server.check_port.or(self.port) {
            a.set_port(p);
        }
        a
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// The check passes when a TCP connection opens.
    Tcp,
    Http(HttpCheck),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCheck {
    pub method: Method,
    /// Origin-form target: starts with `/`.
    pub path: String,
    /// Host header; `None`: the server's address.
    pub host: Option<String>,
    pub expect_status: StatusRange,
    /// A substring the response body must contain (never with HEAD).
    pub expect_body: Option<String>,
}

/// An inclusive range of status codes, within 100..=599.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRange {
    pub min: u16,
    pub max: u16,
}

impl StatusRange {
    pub fn contains(&self, status: u16) -> bool {
        (self.min..=self.max).contains(&status)
    }
}

impl std::fmt::Display for StatusRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.min == self.max { write!(f, "{}", self.min) } else { write!(f, "{}-{}", self.min, self.max) }
    }
}

/// Passive health checks (HAProxy: `observe`, `error-limit`, `on-error mark-down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observe {
    /// Consecutive failed requests (connection errors, 5xx) that take a server DOWN.
    pub errors: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    pub addr: SocketAddr,
    /// 0..=256; 0 takes the server out of load balancing.
    pub weight: u32,
    pub backup: bool,
    /// Most concurrent requests sent to this server; more wait in the backend queue.
    pub maxconn: Option<u32>,
    /// The backend's active check applies to this server (resolved at load time:
    /// the backend has a `check` and the server does not say `check = false`).
    pub check: bool,
    /// Port for this server's checks instead of its own (or the check's `port`).
    pub check_port: Option<u16>,
    /// The value of the backend's persistence cookie that names this server
    /// (default: its name).
    pub cookie: String,
    /// Send a PROXY protocol header first on each connection to this server.
    pub send_proxy: Option<ProxyProtocol>,
    /// TLS to this server (`None`: plain TCP).
    pub tls: Option<Arc<ServerTls>>,
    /// The HTTP version spoken to this server (with TLS, ALPN may choose).
    pub proto: Proto,
    /// How long an idle connection to this server is kept for reuse (its
    /// backend's `timeout.server_keep_alive`).
    pub keep_alive: Duration,
    /// The name `addr` was written as, when its backend follows names
    /// (`resolve`); `addr` is its address now.
    pub dns: Option<DnsAddr>,
    /// Why the server has no address (its name does not resolve): it is DOWN
    /// until the name resolves; `addr` is then `0.0.0.0` and the port.
    pub unresolved: Option<String>,
    /// Starts in maintenance (MAINT) rather than READY.
    pub disabled: bool,
    /// Found by its backend's `discover` (not written in the file).
    pub discovered: bool,
}

impl Server {
    /// Tells apart the ways of reaching one address (plain, TLS with these
    /// settings, h2c): connections are pooled per address and transport.
    pub fn transport_key(&self) -> u64 {
        match (&self.tls, self.proto) {
            (None, Proto::H2c) => 1,
            (None, _) => 0,
            (Some(t), p) => t.digest ^ (p as u64) << 62 | 2,
        }
    }

    /// Whether this server may speak HTTP/2: see [`may_be_h2`].
    pub fn may_be_h2(&self) -> bool {
        may_be_h2(self.proto, self.tls.as_deref())
    }
}

/// Whether a server with this `proto` and `tls` may speak HTTP/2: by `proto`
/// (h2, h2c), or by ALPN's choice when `"h2"` is among the protocols offered.
pub fn may_be_h2(proto: Proto, tls: Option<&ServerTls>) -> bool {
    proto != Proto::H1 || tls.is_some_and(|t| t.alpn.iter().any(|a| a == "h2"))
}

/// The protocol spoken to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Proto {
    /// HTTP/1.1 (pooled keep-alive connections).
    #[default]
    H1,
    /// HTTP/2 over TLS (ALPN `h2`): one multiplexed connection per worker.
    H2,
    /// HTTP/2 over plain TCP, with prior knowledge.
    H2c,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::H1 => "h1",
            Proto::H2 => "h2",
            Proto::H2c => "h2c",
        }
    }
}

/// TLS to a server, its files read and checked when the config was built.
#[derive(Clone)]
pub struct ServerTls {
    /// The CA certificates the server's chain must lead to; `None`: the system's.
    pub ca: Option<PathBuf>,
    /// The name sent by SNI and checked in the server's certificate (an IP
    /// address is checked against the certificate's IP addresses, with no SNI).
    pub server_name: rustls::pki_types::ServerName<'static>,
    /// The client certificate presented, and its key file.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// `false` only with `verify = "none"`: any certificate is accepted.
    pub verify: bool,
    /// ALPN protocols offered, in order: `h2`, `http/1.1`.
    pub alpn: Vec<String>,
    /// The rustls client config made of all the above.
    pub config: Arc<rustls::ClientConfig>,
    /// A hash of the settings and of the files' contents: two `ServerTls` are
    /// equal when it is (a reload with a renewed file makes a new one).
    pub digest: u64,
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for ServerTls {}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("ca", &self.ca)
            .field("server_name", &self.server_name)
            .field("cert", &self.cert)
            .field("verify", &self.verify)
            .field("alpn", &self.alpn)
            .finish()
    }
}

/// A PROXY protocol version (HAProxy's `send-proxy` / `send-proxy-v2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    V1,
    V2,
}

/// How a persistence cookie is used (HAProxy's `cookie` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieMode {
    /// Tollgate sets its own cookie (`name=<server cookie>`) on responses.
    Insert,
    /// The application's cookie `name` carries the server: `<server cookie>~<value>`
    /// on the way out, the prefix removed on the way in.
    Prefix,
    /// The application sets cookie `name` itself; Tollgate rewrites its value to
    /// the server's cookie.
    Rewrite,
}

/// Cookie-based persistence for a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookiePolicy {
    pub name: String,
    pub mode: CookieMode,
    /// insert: remove the cookie from requests before they reach the server.
    pub indirect: bool,
    /// insert: responses that set the cookie get `Cache-Control: private`.
    pub nocache: bool,
    pub httponly: bool,
    pub secure: bool,
    /// insert: a cookie not seen for this long is ignored (and replaced).
    pub max_idle: Option<Duration>,
    /// insert: a cookie older than this is ignored (and replaced).
    pub max_life: Option<Duration>,
    pub domain: Option<String>,
    pub path: String,
}

/// A stick table on the client's source address: the server a client was sent
/// to is remembered (for `expire` after its last request) and used again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StickPolicy {
    pub expire: Duration,
    /// Most entries kept.
    pub size: usize,
    /// New and changed entries go to the instances of `[global.peers]`.
    pub share: bool,
}

/// A cache zone (`[[cache]]`): one memory store, its bounds and policy options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheZone {
    pub name: String,
    /// Bytes the memory tier holds (objects, heads, keys and per-object overhead).
    pub memory: u64,
    /// The largest response stored; larger ones stream through unstored.
    pub max_object: u64,
    /// Store responses that carry `Set-Cookie` (RFC 9111 allows it), without
    /// the cookie. Default false: such responses are not stored (issue 33).
    pub store_set_cookie: bool,
    /// The targeted cache-control field the zone heeds (RFC 9213), lower
    /// case; `None` when turned off (`targeted_cache_control = ""`). Default
    /// `cdn-cache-control`.
    pub targeted_cache_control: Option<String>,
    /// Remove that field from responses sent to clients (default true).
    pub strip_targeted_cache_control: bool,
    /// The `stale-if-error` window (RFC 5861 section 4) for stored responses
    /// that give none: a stale one may answer in place of an origin that
    /// fails, for this long past its freshness. Zero (default): only when
    /// the response or the request says so.
    pub stale_if_error: Duration,
    /// Heuristic freshness: this share (percent) of the time since Last-Modified...
    pub heuristic_percent: u32,
    /// ...and at most this long (RFC 9111 section 4.2.2).
    pub heuristic_max: Duration,
    /// Client addresses the PURGE method is accepted from.
    pub purge_from: Vec<IpNet>,
    /// The disk tier, if the zone has one.
    pub disk: Option<CacheDisk>,
    /// A tier across instances: the owner of each key among them (tier.rs).
    pub peers: Option<crate::tier::CachePeers>,
}

/// A zone's disk tier (`disk = { path, size }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDisk {
    /// The directory, made absolute (relative paths are from the config
    /// file's directory); it exists and is writable when the config is built.
    pub path: std::path::PathBuf,
    /// The most bytes of files kept there.
    pub size: u64,
}

impl CacheZone {
    pub const DEFAULT_MEMORY: u64 = 64 << 20;
    /// The targeted field heeded unless the zone says otherwise (RFC 9213 section 3).
    pub const DEFAULT_TARGETED: &'static str = "cdn-cache-control";
    pub const DEFAULT_MAX_OBJECT: u64 = 1 << 20;
}

/// What a rule says about caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// Use this zone (index into `Config::caches`).
    Zone(usize),
    /// `cache = false`: not cached, whatever the backend says.
    Off,
}

/// A `[[userlist]]`: who may pass HTTP Basic authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Userlist {
    pub name: String,
    /// At least one; names are unique and hold no `:`.
    pub users: Vec<User>,
    /// A request whose credentials fail this list gets its 401 no sooner than
    /// this after its check began (0: at once).
    pub failure_delay: Duration,
}

impl Userlist {
    pub const DEFAULT_FAILURE_DELAY: Duration = Duration::from_millis(300);
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub password: Password,
}

/// A user's password as the config gives it, its syntax checked at load time.
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// bcrypt: `$2a$`, `$2b$` or `$2y$`, cost 04..=31 (`htpasswd -nbB`).
    Bcrypt(String),
    /// SHA-256 crypt: `$5$[rounds=N$]salt$hash`.
    Sha256Crypt(String),
    /// SHA-512 crypt: `$6$[rounds=N$]salt$hash` (`mkpasswd -m sha-512`).
    Sha512Crypt(String),
    /// `insecure_password`: the password itself.
    Insecure(String),
}

impl Password {
    /// The scheme's name, for logs and errors.
    pub fn scheme(&self) -> &'static str {
        match self {
            Password::Bcrypt(_) => "bcrypt",
            Password::Sha256Crypt(_) => "sha256-crypt",
            Password::Sha512Crypt(_) => "sha512-crypt",
            Password::Insecure(_) => "insecure",
        }
    }
}

impl std::fmt::Debug for Password {
    /// The scheme only: a debug print of the config shows no password or hash.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Password({})", self.scheme())
    }
}

/// `auth = { userlist, realm, strip }`: requests must carry the credentials
/// (HTTP Basic) of a user of the userlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPolicy {
    /// Index into `Config::userlists`.
    pub userlist: usize,
    /// Sent in `WWW-Authenticate` with a 401: printable ASCII. Default: the name
    /// of the frontend (for a frontend or a rule) or of the backend, as HAProxy.
    pub realm: String,
    /// Remove the `Authorization` field before the request goes to the server
    /// (it is forwarded by default, as HAProxy does).
    pub strip: bool,
}
