//! The `tollgate` binary's library: the demo app servers that `tollgate demo`
//! puts behind the proxy, which the end-to-end tests use as backends too.

#![forbid(unsafe_code)]

pub mod demo;
