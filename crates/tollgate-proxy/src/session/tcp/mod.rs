//! TCP mode (`mode = "tcp"` on a frontend and its backends): a server is chosen
//! per connection and bytes are relayed both ways untouched, as HAProxy's
//! `mode tcp` does. docs/architecture.md draws the path:
//!
//! accept (server.rs; a PROXY header with `accept_proxy`) -> TLS handshake on
//! a TLS bind, or, when rules look at `sni`, the client's ClientHello read
//! without taking part in the handshake (tollgate-wire's `hello`) -> rules (`src`, `sni`,
//! `tls`; else `default_backend`) -> balance, queue, connect with retries and
//! redispatch (lb/, exchange.rs), a PROXY header to `send_proxy` servers ->
//! relay ([`relay`]: the bytes read so far first, half-closes passed on, idle
//! timeouts per side) -> one access log line ([`log`]).
//!
//! The server's slot (`maxconn`, leastconn's count) is held for the whole
//! session; counters (sessions, bytes each way) are those of HTTP frontends,
//! backends and servers. Server connections are never pooled or reused.

mod log;
pub(crate) mod relay;

use crate::lb::shutdown::Watcher;
use crate::lb::{BackendRt, SelectInput, Slot};
use crate::net::tls::{ClientStream, TlsEndpoint};
use crate::observe::termination::Termination;
use crate::pipeline::exchange::{self, ClientEnds, PickState};
use crate::pipeline::rescue::ProxyError;
use crate::pipeline::snapshot::Snapshot;
use log::TcpLog;
use relay::{End, Idle, Side, Way};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tollgate_config::{Action, Frontend, RequestFacts};
use tollgate_wire::hello::{Hello, MAX_PEEK};

/// Serves one connection of tcp frontend `fi`. `ends`: the client's address,
/// the port it reached and, when a PROXY header said it, the address it reached.
pub(crate) async fn serve(
    snap: Arc<Snapshot>,
    fi: usize,
    tcp: TcpStream,
    tls: Option<Arc<TlsEndpoint>>,
    ends: (SocketAddr, u16, Option<SocketAddr>),
) {
    let stats = &snap.frontend_stats[fi];
    let _session = stats.open_session();
    let mut log = TcpLog::new(ends.0, &snap.config.frontends[fi].name);
    if let Err(why) = session(&snap, fi, tcp, tls, ends, &mut log).await {
        log.termination = Some(why);
    }
    if let Some(sink) = &snap.access_log {
        sink.write(&log);
    }
}

/// The session, from the client stream to the end of the relay; `Err` says
/// why it ended before the relay began.
async fn session<'a>(
    snap: &'a Snapshot,
    fi: usize,
    mut tcp: TcpStream,
    tls: Option<Arc<TlsEndpoint>>,
    (peer, _, dst): (SocketAddr, u16, Option<SocketAddr>),
    log: &mut TcpLog<'a>,
) -> Result<(), &'static str> {
    let fe = &snap.config.frontends[fi];
    let stats = &snap.frontend_stats[fi];
    let needs_sni = fe.rules.iter().any(|r| r.when.uses_sni());
    let (mut client, peeked) = match tls {
        Some(endpoint) => {
            let (stream, info) =
                ClientStream::accept(&endpoint, tcp, fe.timeouts.client).await.ok_or("tls-handshake-failed")?;
            log.tls = Some((info.version, info.cipher));
            log.sni = Some(info.sni).filter(|s| !s.is_empty());
            (stream, Peeked::default())
        }
        None if needs_sni => {
            let peeked = peek(&mut tcp, fe.timeouts.client).await?;
            log.sni = peeked.sni.clone();
            (ClientStream::Plain(tcp.into()), peeked)
        }
        None => (ClientStream::Plain(tcp.into()), Peeked::default()),
    };
    let Some(bi) = route(fe, peer.ip(), log.tls.is_some(), log.sni.as_deref().unwrap_or("")) else {
        stats.request_errors.fetch_add(1, Ordering::Relaxed);
        return Err(ProxyError::NoBackend.reason());
    };
    let be = &snap.backends[bi];
    log.backend = Some(be.name());
    let local = || dst.or_else(|| client.local_addr().ok()).unwrap_or(peer);
    let ends = ClientEnds { peer, local };
    let (slot, mut server) = reach(be, peer.ip(), &ends, log).await.map_err(|e| e.reason())?;

    let t = &be.cfg.timeouts;
    let idle = match t.tunnel_set {
        true => Idle { client: t.tunnel, server: t.tunnel },
        false => Idle { client: fe.timeouts.client, server: t.server },
    };
    let server_stats = &slot.server.stats;
    let count = |way, n| match way {
        Way::Up => {
            stats.bytes_in.fetch_add(n, Ordering::Relaxed);
            server_stats.bytes_in.fetch_add(n, Ordering::Relaxed);
        }
        Way::Down => {
            stats.bytes_out.fetch_add(n, Ordering::Relaxed);
            server_stats.bytes_out.fetch_add(n, Ordering::Relaxed);
        }
    };
    let first = (peeked.bytes, peeked.eof);
    let watcher = Watcher::new();
    let (end, moved) = {
        let relay =
            std::pin::pin!(relay::relay(&mut client, &mut server, first, snap.config.global.splice, idle, count));
        slot.server.unless_shut(relay, watcher.id()).await.unwrap_or((End::Killed, relay::Moved::default()))
    };
    (log.bytes_in, log.bytes_out) = (moved.up, moved.down);
    log.termination = match end {
        End::Closed => None,
        End::Killed => Some(Termination::Killed),
        End::Timeout(_) if t.tunnel_set => Some(Termination::TunnelTimeout),
        End::Timeout(Side::Client) => Some(Termination::ClientTimeout),
        End::Timeout(Side::Server) => Some(Termination::ServerTimeout),
        End::Error(Side::Client) => Some(Termination::ClientAborted),
        End::Error(Side::Server) => Some(Termination::ServerAborted),
    }
    .map(Termination::as_str);
    drop(slot);
    Ok(())
}

/// What was read from a client before its server was chosen.
#[derive(Default)]
struct Peeked {
    /// Forwarded to the server first, unchanged.
    bytes: Vec<u8>,
    sni: Option<String>,
    /// The client sent its FIN.
    eof: bool,
}

/// Reads the client's first bytes until they hold a whole ClientHello, turn
/// out not to be one, reach [`MAX_PEEK`], or `limit` passes, or the client
/// closes; in every case but a failed read the session goes on, without a
/// server name when none was read (the rules then route as for a client that
/// sent none), as HAProxy's `tcp-request inspect-delay` does.
async fn peek(tcp: &mut TcpStream, limit: Duration) -> Result<Peeked, &'static str> {
    let until = tokio::time::Instant::now() + limit;
    // A block of the worker's free list, which the relay then reads into.
    const _: () = assert!(MAX_PEEK <= crate::io::buf::BUF_SIZE);
    let mut bytes = crate::io::buf::take_block();
    bytes.clear();
    let mut p = Peeked { bytes, ..Peeked::default() };
    loop {
        match tollgate_wire::hello::parse(&p.bytes) {
            Ok(Hello::Complete { sni, .. }) => {
                p.sni = sni;
                return Ok(p);
            }
            Ok(Hello::Partial) if p.bytes.len() < MAX_PEEK => {}
            Ok(Hello::Partial) | Err(_) => return Ok(p),
        }
        let room = MAX_PEEK - p.bytes.len();
        match tokio::time::timeout_at(until, (&mut *tcp).take(room as u64).read_buf(&mut p.bytes)).await {
            Err(_) => return Ok(p),
            Ok(Ok(0)) => {
                p.eof = true;
                return Ok(p);
            }
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err(Termination::ClientAborted.as_str()),
        }
    }
}

/// The backend of the first rule that matches the connection, else the
/// frontend's default. A tcp frontend's rules look at `src`, `sni` and `tls`
/// only (the config refuses the others), so the request facts are empty.
fn route(fe: &Frontend, src: IpAddr, tls: bool, sni: &str) -> Option<usize> {
    let headers = http::HeaderMap::new();
    let counters = &tollgate_config::NoCounters;
    let (method, client_cert) = (&http::Method::GET, None);
    let facts = RequestFacts { host: "", path: "", method, headers: &headers, src, tls, sni, counters, client_cert };
    let chosen = fe.rules.iter().filter(|r| r.when.matches(&facts)).find_map(|r| match r.action {
        Some(Action::Backend(b)) => Some(b),
        _ => None,
    });
    chosen.or(fe.default_backend)
}

/// A slot on a server of `be` and a new connection to it (a PROXY header
/// first for a `send_proxy` server): the stick table's server for `src` if it
/// has one that may take it, else the balancer's choice; a failed connect is
/// retried (`retries`, on another server with `redispatch`) as for HTTP.
async fn reach<'a, F: Fn() -> SocketAddr>(
    be: &'a Arc<BackendRt>,
    src: IpAddr,
    ends: &ClientEnds<F>,
    log: &mut TcpLog<'a>,
) -> Result<(Slot, TcpStream), ProxyError> {
    let headers = http::HeaderMap::new();
    let input = SelectInput { src, path: "", headers: &headers };
    let stuck = be.stick.as_ref().and_then(|t| t.get(src, Instant::now())).and_then(|i| be.servers.get(i));
    let mut pick = PickState::new(stuck.filter(|s| s.accepts_sticky()).cloned());
    let timeouts = &be.cfg.timeouts;
    loop {
        let slot = exchange::next_slot(be, &input, &mut pick, timeouts.queue).await?;
        log.tw.get_or_insert(pick.queued_at.elapsed());
        log.server = Some(&be.servers[slot.server.index].cfg.name);
        log.retries = pick.attempts;
        let started = Instant::now();
        // Plain TCP only: the config refuses `tls` and `proto` on tcp backends.
        let Some(up) = exchange::connect(&slot.server, timeouts, &mut None, ends, &be.connect_time)
            .await?
            .and_then(|u| u.stream.into_tcp())
        else {
            pick.failed(be, &slot.server)?;
            continue;
        };
        log.tc = Some(started.elapsed());
        slot.server.observe(true);
        if let Some(table) = &be.stick {
            table.put(src, slot.server.index, Instant::now());
        }
        return Ok((slot, up));
    }
}
