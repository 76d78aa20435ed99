//! The `tollgate` binary's library: how a Tollgate runs (the server and its
//! admin interfaces, [`running`]), and the demo app servers that `tollgate
//! demo` puts behind the proxy. The end-to-end tests use both.

#![forbid(unsafe_code)]

pub mod demo;
pub mod privileges;
pub mod running;
pub mod upgrade;

pub use running::{Running, StartFailed, start, start_taking_over};
