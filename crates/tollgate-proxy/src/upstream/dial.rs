//! Opening a connection to a server: TCP, the PROXY header, TLS (SNI, ALPN),
//! and the HTTP/2 handshake where the server speaks it; the DNS resolver
//! that server names and a forward proxy's destinations are looked up with.

use super::h2::{self, Session};
use super::stream::{ConnectError, Io, UpStream};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tollgate_config::{Dns, Proto, Server};

/// A connection just opened, before any request.
pub enum Dialed {
    /// HTTP/1.1, on TCP or TLS.
    H1(UpStream),
    /// HTTP/2: the handle to send requests on; the connection itself is a
    /// task of the current runtime.
    H2(Session),
}

/// Opens a connection to `addr` the way `server` is reached: TCP, then
/// `proxy_header` (send_proxy), then the TLS handshake (SNI, ALPN) when the
/// server has `tls`, then the HTTP/2 handshake when the protocol is HTTP/2
/// (`proto`, or the server's choice by ALPN). All within `timeout`.
pub async fn dial(
    server: &Server,
    addr: SocketAddr,
    proxy_header: Option<&[u8]>,
    timeout: Duration,
) -> Result<Dialed, ConnectError> {
    let opening = async {
        let mut tcp = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
        let _ = tcp.set_nodelay(true);
        if let Some(header) = proxy_header {
            tcp.write_all(header)
                .await
                .map_err(|_| ConnectError::Io(io::Error::other("the PROXY header could not be sent")))?;
        }
        let Some(tls) = &server.tls else {
            return match server.proto {
                Proto::H2c => h2::handshake(tcp, "http").await.map(Dialed::H2).map_err(ConnectError::H2),
                _ => Ok(Dialed::H1(UpStream::new(Io::Tcp(tcp)))),
            };
        };
        let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
        // Boxed: the handshake's state (1.6 KiB) would otherwise be part of
        // every client connection's task, whether it ever opens one or not.
        let stream = Box::pin(connector.connect(tls.server_name.clone(), tcp)).await.map_err(ConnectError::Tls)?;
        let h2 = match stream.get_ref().1.alpn_protocol() {
            Some(p) => p == b"h2",
            None => server.proto == Proto::H2,
        };
        // Boxed, as in an `UpStream`: the TLS state by value would make the
        // handshake's future, and so every client connection's task, ~3 KiB larger.
        let stream = Box::new(stream);
        if h2 {
            h2::handshake(stream, "https").await.map(Dialed::H2).map_err(ConnectError::H2)
        } else {
            Ok(Dialed::H1(UpStream::new(Io::Tls(stream))))
        }
    };
    match tokio::time::timeout(timeout, opening).await {
        Err(_) => Err(ConnectError::Timeout),
        Ok(r) => r,
    }
}

/// A resolver as `[global.dns]` says: its name servers, or those of
/// /etc/resolv.conf (none readable: /etc/hosts alone).
pub(crate) fn resolver(dns: &Dns) -> TokioResolver {
    let mut builder = if dns.nameservers.is_empty() {
        match TokioResolver::builder_tokio() {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("DNS: cannot read the system's resolver config ({e}): /etc/hosts only");
                TokioResolver::builder_with_config(ResolverConfig::new(), TokioConnectionProvider::default())
            }
        }
    } else {
        let mut cfg = ResolverConfig::new();
        for a in &dns.nameservers {
            cfg.add_name_server(NameServerConfig::new(*a, Protocol::Udp));
            cfg.add_name_server(NameServerConfig::new(*a, Protocol::Tcp));
        }
        TokioResolver::builder_with_config(cfg, TokioConnectionProvider::default())
    };
    let o = builder.options_mut();
    o.timeout = dns.timeout;
    o.attempts = 1;
    o.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
    builder.build()
}
