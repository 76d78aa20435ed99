//! Layer 8, sessions: a client's HTTP/1.1 connection (`conn`), its HTTP/2
//! connection and streams (`h2conn`), and TCP mode (`tcp`, whose relay also
//! carries WebSocket tunnels). Each runs the request phase (pipeline) and
//! writes what it ends with in its own framing; `file` writes a static file's
//! response for both HTTP sessions.

pub mod conn;
pub(crate) mod file;
pub mod h2conn;
pub mod h3conn;
pub(crate) mod mux;
pub mod tcp;
