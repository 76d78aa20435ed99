//! Layer 1, observe: the counters the data path bumps, the access log, and why
//! an exchange ended. Imports nothing of the crate, so every layer may use it.

pub mod access_log;
pub mod counters;
pub mod termination;
