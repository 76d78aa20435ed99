//! End-to-end tests: real listeners on 127.0.0.1 port 0, real origins, real clients.
//! One test binary (modules below) to keep link time down.

mod access_log;
mod admin_api;
mod admin_socket;
mod auth;
mod backend_tls;
mod balancing;
mod browser_selftest;
mod cache;
mod cache_disk;
mod cdp;
mod compression;
mod dns;
mod errors;
mod h2;
mod h2spec;
mod h3;
mod harness;
mod health;
mod http_path;
mod interim;
mod metrics;
mod path_rules;
mod persistence;
mod proxy_protocol;
mod reload;
mod rules;
mod runtime_api;
mod slots;
mod smuggling;
mod static_files;
mod stats_page;
mod tcp;
mod tls;
mod traffic;
mod websocket;
