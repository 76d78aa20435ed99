//! Tables shared across instances (`[global.peers]`, `share = true` on a
//! `[[table]]` or a backend's `stick`), pushed peer to peer as HAProxy's
//! peers do rather than through etcd: a rate limit counts every request,
//! far more writes than a store of record should take, and a peer needs
//! only the others' recent events, not a history.
//!
//! A thread of its own (`tollgate-peers`) listens on this instance's
//! address in `list` (HTTP/1.1, `POST /tollgate/peers`, from the other
//! peers' addresses only) and, every `PEERS_PUSH`, sends each other peer
//! what happened here since the last push: for each shared counter table,
//! the events of each key (connections, requests, 4xx, 5xx, bytes), which
//! the receiver adds to its own counts and rates, so that a limit of 100
//! requests a minute is 100 across the fleet; for each shared stick table,
//! the client addresses new or sent to another server, by server name. A
//! connection's `conn_cur` stays the instance's that holds it. A push a
//! peer does not take is dropped (counts there run short by it for one
//! period): events are not kept for a peer that is down.

use super::dns::Running;
use crate::lb::track::{Events, Key};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tollgate_config::tier::PEERS_PUSH;

/// What one peer sends the others.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Message {
    /// The sender's address in `list`.
    pub from: String,
    #[serde(default)]
    pub tables: Vec<TableEvents>,
    #[serde(default)]
    pub stick: Vec<StickEntries>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct TableEvents {
    pub table: String,
    pub entries: Vec<(WireKey, Events)>,
}

/// A key: an address (`src` tables), or bytes (base64).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireKey {
    Ip(IpAddr),
    B64(String),
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct StickEntries {
    pub backend: String,
    /// Client address, server name.
    pub entries: Vec<(IpAddr, String)>,
}

impl WireKey {
    fn of(k: &Key) -> WireKey {
        match k {
            Key::Ip(ip) => WireKey::Ip(*ip),
            Key::Text(t) => WireKey::B64(base64::engine::general_purpose::STANDARD.encode(t)),
        }
    }

    fn key(&self) -> Option<Key> {
        match self {
            WireKey::Ip(ip) => Some(Key::Ip(*ip)),
            WireKey::B64(b) => {
                let t = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
                (t.len() <= crate::lb::track::MAX_KEY).then(|| Key::Text(t.into()))
            }
        }
    }
}

/// The most keys of one table in one push.
const MAX_KEYS: usize = 50_000;
/// The largest message taken.
const MAX_BODY: usize = 32 << 20;

/// What happened here since the last call, for the other peers; `None`
/// when nothing did.
pub(crate) fn collect(snap: &crate::Snapshot, from: SocketAddr) -> Option<Message> {
    let mut m = Message { from: from.to_string(), ..Message::default() };
    for t in snap.tables.iter().filter(|t| t.cfg.share) {
        let entries: Vec<_> = t.take_unsent(MAX_KEYS).iter().map(|(k, e)| (WireKey::of(k), *e)).collect();
        if !entries.is_empty() {
            m.tables.push(TableEvents { table: t.cfg.name.clone(), entries });
        }
    }
    for be in &snap.backends {
        let Some(st) = be.stick.as_ref().filter(|_| be.cfg.stick.is_some_and(|p| p.share)) else { continue };
        let entries: Vec<_> = st
            .take_unsent()
            .into_iter()
            .filter_map(|(ip, i)| Some((ip, be.servers.get(i)?.cfg.name.clone())))
            .collect();
        if !entries.is_empty() {
            m.stick.push(StickEntries { backend: be.name().to_string(), entries });
        }
    }
    (!m.tables.is_empty() || !m.stick.is_empty()).then_some(m)
}

/// Adds what a peer sent to this instance's shared tables (those it does
/// not share, or does not have, are left alone).
pub(crate) fn apply(snap: &crate::Snapshot, m: &Message) {
    let now = crate::lb::track::now_ms();
    for te in &m.tables {
        let Some(t) = snap.tables.iter().find(|t| t.cfg.name == te.table && t.cfg.share) else { continue };
        let ip_keys = t.cfg.key == tollgate_config::TrackKey::Src;
        for (k, e) in &te.entries {
            match (k.key(), ip_keys) {
                (Some(k @ Key::Ip(_)), true) | (Some(k @ Key::Text(_)), false) => t.add_remote(k, e, now),
                _ => {}
            }
        }
    }
    let now = Instant::now();
    for se in &m.stick {
        let Some(be) = snap.backend(&se.backend) else { continue };
        let Some(st) = be.stick.as_ref().filter(|_| be.cfg.stick.is_some_and(|p| p.share)) else { continue };
        for (ip, server) in &se.entries {
            if let Some(i) = be.servers.iter().position(|s| s.cfg.name == *server) {
                st.put_here(*ip, i, now);
            }
        }
    }
}

/// Binds this instance's address and starts the thread; it ends when the
/// server stops (or is gone).
pub(crate) fn start(core: Weak<dyn Running>, stop: watch::Receiver<bool>, me: SocketAddr) -> std::io::Result<()> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(me), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    // A new process of a hot upgrade binds it beside the old one.
    sock.set_reuse_port(true)?;
    sock.bind(&me.into())?;
    sock.listen(64)?;
    sock.set_nonblocking(true)?;
    let listener: std::net::TcpListener = sock.into();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("tollgate-peers".into()).spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
            tokio::spawn(listen(listener, core.clone()));
            push(core, stop).await;
        });
    })?;
    Ok(())
}

/// The most connections from peers at once.
const MAX_CONNECTIONS: usize = 64;

async fn listen(listener: tokio::net::TcpListener, core: Weak<dyn Running>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            // Out of descriptors, say: not a spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Only peers are served; anyone else is closed at once.
        let Some(c) = core.upgrade() else { return };
        let known =
            c.snapshot().config.global.peers.as_ref().is_some_and(|p| p.list.iter().any(|m| m.ip() == peer.ip()));
        drop(c);
        if !known {
            tracing::debug!(%peer, "peers: a connection from an address not in global.peers.list, closed");
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let core = core.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let core = core.clone();
                async move { Ok::<_, std::convert::Infallible>(receive(core, peer, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
            drop(slot);
        });
    }
}

async fn receive(core: Weak<dyn Running>, from: SocketAddr, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let answer = |status: StatusCode, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = status;
        r
    };
    let Some(core) = core.upgrade() else { return answer(StatusCode::SERVICE_UNAVAILABLE, "stopping\n") };
    let snap = core.snapshot();
    drop(core);
    let Some(peers) = snap.config.global.peers.clone() else { return answer(StatusCode::NOT_FOUND, "no peers\n") };
    if !peers.list.iter().any(|p| p.ip() == from.ip()) {
        tracing::warn!(%from, "peers: a message from an address not in global.peers.list, refused");
        return answer(StatusCode::FORBIDDEN, "not a peer\n");
    }
    if req.method() != hyper::Method::POST || req.uri().path() != "/tollgate/peers" {
        return answer(StatusCode::NOT_FOUND, "POST /tollgate/peers\n");
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return answer(StatusCode::PAYLOAD_TOO_LARGE, "too large\n"),
    };
    match serde_json::from_slice::<Message>(&body) {
        Ok(m) => {
            apply(&snap, &m);
            answer(StatusCode::NO_CONTENT, "")
        }
        Err(e) => {
            tracing::warn!(%from, "peers: a message that is not one ({e}), dropped");
            answer(StatusCode::BAD_REQUEST, "not a peers message\n")
        }
    }
}

/// A connection to one peer, made again when it breaks.
#[derive(Default)]
struct Link {
    sender: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    /// Why the last push failed (logged once until one succeeds).
    failing: Option<String>,
}

async fn send(link: &mut Link, to: SocketAddr, body: Bytes) -> Result<(), String> {
    let limit = Duration::from_secs(1);
    if link.sender.as_ref().is_none_or(|s| s.is_closed()) {
        let stream = tokio::time::timeout(limit, TcpStream::connect(to))
            .await
            .map_err(|_| "no connection within 1 s".to_string())?
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        link.sender = Some(sender);
    }
    let Some(sender) = link.sender.as_mut() else { return Err("no connection".into()) };
    let req = Request::post("/tollgate/peers")
        .header("host", to.to_string())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let sent = tokio::time::timeout(limit, sender.send_request(req)).await;
    match sent {
        Ok(Ok(r)) if r.status().is_success() => Ok(()),
        Ok(Ok(r)) => Err(format!("answered {}", r.status())),
        Ok(Err(e)) => {
            link.sender = None;
            Err(e.to_string())
        }
        Err(_) => {
            link.sender = None;
            Err("no answer within 1 s".into())
        }
    }
}

async fn push(core: Weak<dyn Running>, mut stop: watch::Receiver<bool>) {
    let mut links: HashMap<SocketAddr, Link> = HashMap::new();
    let mut tick = tokio::time::interval(PEERS_PUSH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(c) = core.upgrade() else { return };
        let snap = c.snapshot();
        drop(c);
        let Some(peers) = snap.config.global.peers.clone() else { continue };
        let Some(m) = collect(&snap, peers.me()) else { continue };
        drop(snap);
        let Ok(body) = serde_json::to_vec(&m) else { continue };
        let body = Bytes::from(body);
        // To every peer at once: one that does not answer delays no other.
        let mut sends = tokio::task::JoinSet::new();
        for (i, to) in peers.list.iter().enumerate() {
            if i == peers.me {
                continue;
            }
            let (to, mut link, body) = (*to, links.remove(to).unwrap_or_default(), body.clone());
            sends.spawn(async move {
                match send(&mut link, to, body).await {
                    Ok(()) => {
                        if link.failing.take().is_some() {
                            tracing::info!(peer = %to, "peers: pushing to this peer again");
                        }
                    }
                    Err(e) => {
                        if link.failing.as_deref() != Some(e.as_str()) {
                            tracing::warn!(peer = %to, "peers: a push failed ({e}); what it held is dropped");
                        }
                        link.failing = Some(e);
                    }
                }
                (to, link)
            });
        }
        while let Some(done) = sends.join_next().await {
            if let Ok((to, link)) = done {
                links.insert(to, link);
            }
        }
        links.retain(|a, _| peers.list.contains(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_back_as_written() {
        let m = Message {
            from: "10.0.0.1:10000".into(),
            tables: vec![TableEvents {
                table: "per_ip".into(),
                entries: vec![
                    (
                        WireKey::of(&Key::Ip("10.1.2.3".parse().unwrap())),
                        Events { reqs: 5, conns: 1, ..Events::default() },
                    ),
                    (WireKey::of(&Key::Text((*b"key\xff").into())), Events { errs: 2, ..Events::default() }),
                ],
            }],
            stick: vec![StickEntries {
                backend: "app".into(),
                entries: vec![("10.1.2.3".parse().unwrap(), "s1".into())],
            }],
        };
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.contains(r#"{"ip":"10.1.2.3"}"#) && text.contains(r#"{"b64":"a2V5/w=="}"#), "{text}");
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), m);
        assert_eq!(WireKey::B64("a2V5/w==".into()).key(), Some(Key::Text((*b"key\xff").into())));
        // A key longer than any table keeps is refused.
        let long = base64::engine::general_purpose::STANDARD.encode(vec![b'a'; 300]);
        assert_eq!(WireKey::B64(long).key(), None);
        assert_eq!(WireKey::B64("not base64!".into()).key(), None);
        // Missing event kinds read as zero.
        let e: Events = serde_json::from_str(r#"{"reqs": 3}"#).unwrap();
        assert_eq!(e, Events { reqs: 3, ..Events::default() });
    }
}
