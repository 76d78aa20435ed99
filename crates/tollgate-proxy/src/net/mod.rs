//! Layer 3, net: TLS termination and reading a PROXY protocol header off an
//! accepted connection. Imports io.

pub mod acme;
pub mod proxy_proto;
pub mod tls;
