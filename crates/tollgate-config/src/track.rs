//! The config's traffic control and client certificate types: `[[table]]`s
//! of counters and what reads them (counter conditions, connection rules),
//! what rules read of a request, and mutual TLS (`client_ca`), with the
//! client certificate as rules and header variables see it.

use http::HeaderName;
use regex::Regex;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `[[table]]`: counters per key, shared by every worker and kept across
/// reloads (HAProxy's stick tables with `store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackTable {
    pub name: String,
    pub key: TrackKey,
    /// The most entries at once.
    pub size: usize,
    /// An entry not touched for this long (and with no connection open) goes.
    pub expire: Duration,
    /// The window of the `*_rate` counters.
    pub period: Duration,
    /// Counted with the instances of `[global.peers]`: their events are
    /// added to this table's counters (tier.rs).
    pub share: bool,
}

/// What a table's entries are keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrackKey {
    /// The client's address (after a PROXY header): connections are counted too.
    Src,
    /// A request header's value (its first).
    Header(HeaderName),
    /// A request cookie's value.
    Cookie(String),
    /// The request's path, without the query.
    Path,
}

impl TrackKey {
    /// HAProxy's `type` in `show table`.
    pub fn kind(&self) -> &'static str {
        match self {
            TrackKey::Src => "ip",
            _ => "string",
        }
    }
}

/// A counter of a table's entry (HAProxy's stored data types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    ConnCur,
    ConnCnt,
    ConnRate,
    HttpReqCnt,
    HttpReqRate,
    HttpErrCnt,
    HttpErrRate,
    HttpFailCnt,
    HttpFailRate,
    BytesInCnt,
    BytesInRate,
    BytesOutCnt,
    BytesOutRate,
}

impl Counter {
    pub const ALL: [Counter; 13] = [
        Counter::ConnCur,
        Counter::ConnCnt,
        Counter::ConnRate,
        Counter::HttpReqCnt,
        Counter::HttpReqRate,
        Counter::HttpErrCnt,
        Counter::HttpErrRate,
        Counter::HttpFailCnt,
        Counter::HttpFailRate,
        Counter::BytesInCnt,
        Counter::BytesInRate,
        Counter::BytesOutCnt,
        Counter::BytesOutRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Counter::ConnCur => "conn_cur",
            Counter::ConnCnt => "conn_cnt",
            Counter::ConnRate => "conn_rate",
            Counter::HttpReqCnt => "http_req_cnt",
            Counter::HttpReqRate => "http_req_rate",
            Counter::HttpErrCnt => "http_err_cnt",
            Counter::HttpErrRate => "http_err_rate",
            Counter::HttpFailCnt => "http_fail_cnt",
            Counter::HttpFailRate => "http_fail_rate",
            Counter::BytesInCnt => "bytes_in_cnt",
            Counter::BytesInRate => "bytes_in_rate",
            Counter::BytesOutCnt => "bytes_out_cnt",
            Counter::BytesOutRate => "bytes_out_rate",
        }
    }

    pub fn from_name(name: &str) -> Option<Counter> {
        Counter::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Counts connections, which only a `src` table sees.
    pub fn of_connections(self) -> bool {
        matches!(self, Counter::ConnCur | Counter::ConnCnt | Counter::ConnRate)
    }
}

/// `counter = { table, name, above }`: the request's (or connection's) entry
/// in `table` has `counter` above `above`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterCond {
    pub table: usize,
    pub counter: Counter,
    pub above: u64,
}

/// Client certificates on a bind (mutual TLS): checked in the handshake
/// against `client_ca` and the CRLs; `required`, or `optional` (a client
/// without one is let in, one with a bad one is not).
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub ca_file: PathBuf,
    pub crl_files: Vec<PathBuf>,
    pub required: bool,
    pub verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    /// Of the files' bytes and `required`: a reload that changes none keeps
    /// the bind's resumable sessions (else a session resumed would skip the
    /// new checks).
    pub digest: u64,
}

/// `client_cert = { ... }`: what a condition asks of the client's certificate.
#[derive(Debug, Clone)]
pub enum ClientCertTest {
    Present(bool),
    /// A regex over the subject (RFC 4514 text).
    Subject(Regex),
    /// One of these SHA-256 fingerprints (hex, lower case, no colons).
    Fingerprint(Vec<String>),
}

/// A client's certificate, as rules and header variables see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientCert {
    /// The subject's distinguished name, RFC 4514 (`CN=alice,O=Example`).
    pub subject: String,
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The serial number, hex, upper case.
    pub serial: String,
    /// SHA-256 of the certificate (DER), hex, lower case.
    pub fingerprint: String,
}

/// What a frontend's rules read of a request beyond its fields and address:
/// the facts made ready for them (a host lower-cased, a path in normal form)
/// only when some rule tests them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    pub host: bool,
    pub path: bool,
    pub method: bool,
}

/// Read access to the counters a request or connection is tracked by, by
/// table index (`Config::tables`).
pub trait CounterLookup: Sync {
    /// The value of `counter` in the entry of table `table`, if tracked.
    fn counter(&self, table: usize, counter: Counter) -> Option<u64>;
}

/// Tracked in no table.
pub struct NoCounters;

impl CounterLookup for NoCounters {
    fn counter(&self, _: usize, _: Counter) -> Option<u64> {
        None
    }
}
