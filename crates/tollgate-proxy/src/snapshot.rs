//! The immutable runtime form of one config: what a connection uses from accept to
//! close. A reload builds a new snapshot and swaps it in atomically; connections
//! already open keep the one they started with.

use crate::access_log::AccessLog;
use crate::lb::BackendRt;
use crate::stats::FrontendStats;
use std::sync::Arc;
use tollgate_config::Config;

pub struct Snapshot {
    pub config: Arc<Config>,
    /// In the order of `config.backends` (rules refer to them by index).
    pub backends: Vec<Arc<BackendRt>>,
    pub access_log: Option<Arc<AccessLog>>,
    /// Counters of each frontend, in the order of `config.frontends`.
    pub frontend_stats: Vec<Arc<FrontendStats>>,
    /// The cache zones, in the order of `config.caches`.
    pub caches: Vec<Arc<crate::cache::Zone>>,
}

impl Snapshot {
    pub fn new(config: Config) -> std::io::Result<Self> {
        let access_log = AccessLog::open(&config.global.access_log, config.global.access_log_format)?.map(Arc::new);
        let backends = config.backends.iter().map(|b| BackendRt::new(b.clone())).collect();
        let frontend_stats = config.frontends.iter().map(|_| Arc::default()).collect();
        let caches = config.caches.iter().map(|z| crate::cache::Zone::new(z.clone())).collect();
        Ok(Snapshot { config: Arc::new(config), backends, access_log, frontend_stats, caches })
    }

    pub fn backend(&self, name: &str) -> Option<&Arc<BackendRt>> {
        self.backends.iter().find(|b| b.name() == name)
    }
}
