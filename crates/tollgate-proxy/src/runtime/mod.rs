//! Layer 9, runtime: listeners, workers, start and stop (`server`), reloads,
//! active health checks, ACME certificates, the report every admin output is made from, and live
//! control of a running server. Imports every layer below.

pub(crate) mod acme;
mod changes;
pub mod check;
pub mod control;
pub(crate) mod discover;
pub mod dns;
pub(crate) mod etcd;
pub(crate) mod peers;
pub mod reload;
pub mod report;
pub mod server;
