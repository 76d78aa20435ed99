//! The immutable runtime form of one config: what a connection uses from accept to
//! close. A reload builds a new snapshot and swaps it in atomically; connections
//! already open keep the one they started with.

use crate::lb::BackendRt;
use crate::net::acme::AcmeRt;
use crate::net::tls::TlsEndpoint;
use crate::observe::access_log::AccessLog;
use crate::observe::counters::FrontendStats;
use crate::pipeline::auth::AuthRt;
use crate::pipeline::files::{FilesRt, open_roots};
use crate::pipeline::start_error::StartError;
use std::net::SocketAddr;
use std::sync::Arc;
use tollgate_config::Config;

pub struct Snapshot {
    pub config: Arc<Config>,
    /// In the order of `config.backends` (rules refer to them by index).
    pub backends: Vec<Arc<BackendRt>>,
    pub access_log: Option<Arc<AccessLog>>,
    /// Counters of each frontend, in the order of `config.frontends`.
    pub frontend_stats: Vec<Arc<FrontendStats>>,
    /// One endpoint per TLS bind: frontend index, bind address, endpoint.
    /// Empty when no bind has TLS.
    pub tls: Vec<(usize, SocketAddr, Arc<TlsEndpoint>)>,
    /// The userlists, with the passwords that passed (Basic auth).
    pub auth: AuthRt,
    /// The cache zones, in the order of `config.caches`.
    pub caches: Vec<Arc<crate::cache::Zone>>,
    /// The open root of each `static` backend, in the order of `config.backends`.
    pub files: Vec<Option<Arc<FilesRt>>>,
    /// The `[[table]]`s of counters, in the order of `config.tables`.
    pub tables: Vec<Arc<crate::lb::track::Table>>,
    /// The `[[acme]]` certificates and the challenges being answered.
    pub acme: AcmeRt,
}

impl Snapshot {
    pub fn new(config: Config) -> Result<Self, StartError> {
        let acme = AcmeRt::new(&config, None);
        let tls = tls_endpoints(&config, None, &acme).map_err(StartError::Tls)?;
        let access_log = AccessLog::open(&config.global.access_log, config.global.access_log_format.clone())
            .map_err(StartError::AccessLog)?
            .map(Arc::new);
        let backends = config.backends.iter().map(|b| BackendRt::new(b.clone())).collect();
        let frontend_stats = config.frontends.iter().map(|_| Arc::default()).collect();
        let auth = AuthRt::new(&config, None);
        let caches = config
            .caches
            .iter()
            .map(|z| crate::cache::Zone::new(z.clone()))
            .collect::<Result<_, _>>()
            .map_err(StartError::Cache)?;
        let files = open_roots(&config).map_err(StartError::Files)?;
        let tables = crate::lb::track::carry(&[], &config.tables);
        Ok(Snapshot {
            config: Arc::new(config),
            backends,
            access_log,
            frontend_stats,
            tls,
            auth,
            caches,
            files,
            tables,
            acme,
        })
    }

    pub fn backend(&self, name: &str) -> Option<&Arc<BackendRt>> {
        self.backends.iter().find(|b| b.name() == name)
    }

    /// The TLS endpoint of frontend `fi`'s bind `addr`; `None` for a plain bind.
    pub fn tls_endpoint(&self, fi: usize, addr: SocketAddr) -> Option<&Arc<TlsEndpoint>> {
        self.tls.iter().find(|(f, a, _)| *f == fi && *a == addr).map(|(_, _, e)| e)
    }
}

/// The endpoint of every TLS bind of `config`. A bind `prev` also has (same
/// frontend name, same address) keeps its session cache and ticket keys.
pub fn tls_endpoints(
    config: &Config,
    prev: Option<&Snapshot>,
    acme: &AcmeRt,
) -> Result<Vec<(usize, SocketAddr, Arc<TlsEndpoint>)>, String> {
    let mut out = Vec::new();
    for (fi, fe) in config.frontends.iter().enumerate() {
        for bind in &fe.binds {
            let Some(tls) = &bind.tls else { continue };
            let running = prev.and_then(|p| {
                let pfi = p.config.frontends.iter().position(|f| f.name == fe.name)?;
                p.tls_endpoint(pfi, bind.addr)
            });
            let mut endpoint = TlsEndpoint::new(tls, running.map(|e| &e.resumption), acme)
                .map_err(|e| format!("frontend `{}`, bind {}: {e}", fe.name, bind.addr))?;
            endpoint.h3 = bind.h3;
            out.push((fi, bind.addr, Arc::new(endpoint)));
        }
    }
    Ok(out)
}
