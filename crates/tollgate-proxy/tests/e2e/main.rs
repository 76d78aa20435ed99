//! End-to-end tests: real listeners on 127.0.0.1 port 0, real origins, real clients.
//! One test binary (modules below) to keep link time down.

mod admin_api;
mod balancing;
mod errors;
mod harness;
mod health;
mod http_path;
mod persistence;
mod reload;
mod rules;
mod tls;
