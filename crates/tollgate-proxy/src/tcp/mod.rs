//! TCP mode (`mode = "tcp"` on a frontend and its backends): a server is chosen
//! per connection and bytes are relayed both ways untouched, as HAProxy's
//! `mode tcp` does. [`hello`] reads the server name of a TLS ClientHello, so
//! that a tcp frontend can route by it without terminating TLS.

pub mod hello;
