//! Layer 2, io: read blocks, sockets registered only once they wait, splice
//! pipes, socket options, idle polling, HTTP/2 DATA within the peer's window,
//! the file descriptor budget, and connection slots taken back at the limit
//! (reclaim). Imports only observe (why a write to a client ended).

pub mod buf;
pub(crate) mod h2io;
pub(crate) mod idle_poll;
pub mod lazy_tcp;
pub mod limits;
pub mod reclaim;
pub(crate) mod sockopt;
pub mod splice;
