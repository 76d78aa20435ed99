//! etcd as the store a fleet shares (`[global.etcd]`; tollgate_config::etcd
//! has the keys). A thread of its own (`tollgate-etcd`) keeps one session
//! with the members:
//!
//! - at each (re)connection it reads every key under the prefix, then
//!   watches them from the next revision, so nothing written in between is
//!   missed (a watch the server compacted away starts a new session);
//! - `<prefix>servers/<backend>/<server>` (`{"state": "drain", "weight": 5}`)
//!   is the admin state and weight operators set: this instance applies each
//!   to its server, and again each second to servers that appear later
//!   (a reload, discovery); a change made here through the admin API, the
//!   command socket or the stats page ([`Shared::publish`]) is applied here
//!   at once and written to the key, kept until the write succeeds, so an
//!   etcd outage loses none;
//! - with `config = true`, `<prefix>config` is the config: a new revision is
//!   parsed and checked like a file, then reloaded; one with errors is
//!   refused (the running config keeps serving) and each instance says so
//!   in `<prefix>status/<name>`. The file gives `[global.etcd]` and where
//!   relative paths lead; without the key, the file's config serves.
//!
//! Without etcd (no `[global.etcd]`), or while it is unreachable, every
//! instance serves with what it has; the session is tried again every few
//! seconds (docs/scale-out.md has the failure modes).

use super::reload::{ReloadError, ReloadReport};
use super::report::EtcdReport;
use crate::lb::AdminState;
use crate::pipeline::snapshot::Snapshot;
use etcdv3client::{EtcdClient, pb};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::IntoFuture;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, watch};
use tollgate_config::{Config, Etcd};

/// What the etcd thread works on: the running server (server.rs).
pub(crate) trait Cluster: Send + Sync {
    fn snapshot(&self) -> Arc<Snapshot>;
    fn etcd(&self) -> &Shared;
    /// Puts `config` in force, as a reload of the file does.
    fn reload_with(self: Arc<Self>, config: Config) -> Result<ReloadReport, ReloadError>;
}

/// A server's admin state and weight as etcd holds them; `None`: not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Desired {
    pub state: Option<AdminState>,
    pub weight: Option<u32>,
}

impl Desired {
    /// A key's value; `None` when it is not such an object.
    pub(crate) fn parse(value: &[u8]) -> Option<Desired> {
        let v: serde_json::Value = serde_json::from_slice(value).ok()?;
        let o = v.as_object()?;
        let state = match o.get("state") {
            None | Some(serde_json::Value::Null) => None,
            Some(s) => Some(AdminState::parse(s.as_str()?)?),
        };
        let weight = match o.get("weight") {
            None | Some(serde_json::Value::Null) => None,
            Some(w) => Some(u32::try_from(w.as_u64()?).ok().filter(|w| *w <= 256)?),
        };
        Some(Desired { state, weight })
    }

    pub(crate) fn to_json(self, by: &str) -> String {
        let mut o = serde_json::Map::new();
        if let Some(s) = self.state {
            o.insert("state".into(), s.as_str().into());
        }
        if let Some(w) = self.weight {
            o.insert("weight".into(), w.into());
        }
        o.insert("by".into(), by.into());
        serde_json::Value::Object(o).to_string()
    }

    /// This one with what `change` sets.
    fn with(self, change: Desired) -> Desired {
        Desired { state: change.state.or(self.state), weight: change.weight.or(self.weight) }
    }
}

/// What the server shares with the etcd thread.
#[derive(Default)]
pub(crate) struct Shared(Mutex<State>);

#[derive(Default)]
struct State {
    tx: Option<mpsc::UnboundedSender<Publish>>,
    /// The config text from etcd in force, and its revision.
    config: Option<(i64, String)>,
    report: EtcdReport,
}

/// A change made here, to write to etcd.
#[derive(Debug, Clone)]
pub(crate) struct Publish {
    backend: String,
    server: String,
    change: Desired,
}

impl Shared {
    /// Writes an operator's change (already applied here) to etcd, when the
    /// config has `[global.etcd]`.
    pub(crate) fn publish(&self, backend: &str, server: &str, state: Option<AdminState>, weight: Option<u32>) {
        if let Some(tx) = &self.0.lock().tx {
            let change = Desired { state, weight };
            let _ = tx.send(Publish { backend: backend.into(), server: server.into(), change });
        }
    }

    pub(crate) fn report(&self) -> EtcdReport {
        self.0.lock().report.clone()
    }

    /// The config a reload of the file puts in force: etcd's when the file
    /// says to read it from there and it is there (with the file's
    /// `[global.etcd]`), else the file's.
    pub(crate) fn prefer(&self, file: Config) -> Result<Config, ReloadError> {
        let Some(etcd) = file.global.etcd.clone().filter(|e| e.config) else { return Ok(file) };
        let Some((_, text)) = self.0.lock().config.clone() else { return Ok(file) };
        from_etcd(&text, &etcd, &file).map_err(|e| ReloadError::Invalid(vec![e]))
    }
}

/// `text` (etcd's config) parsed as a file would be, its errors named after
/// the key, relative paths read from the file's directory; it takes the
/// file's `[global.etcd]` and source.
fn from_etcd(text: &str, etcd: &Arc<Etcd>, file: &Config) -> Result<Config, String> {
    let name = format!("etcd:{}", etcd.config_key());
    let base = file.source.parent().unwrap_or(Path::new("."));
    let mut c = tollgate_config::parse_from(text, Path::new(&name), base).map_err(|e| e.to_string())?;
    c.global.etcd = Some(etcd.clone());
    c.source = file.source.clone();
    Ok(c)
}

/// Starts the etcd thread; it ends when the server stops (or is gone).
pub(crate) fn start(core: Weak<dyn Cluster>, stop: watch::Receiver<bool>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (tx, rx) = mpsc::unbounded_channel();
    if let Some(c) = core.upgrade() {
        c.etcd().0.lock().tx = Some(tx);
    }
    std::thread::Builder::new().name("tollgate-etcd".into()).spawn(move || rt.block_on(run(core, stop, rx)))?;
    Ok(())
}

/// What the thread keeps across sessions.
#[derive(Default)]
struct Work {
    /// Every server key's value, as etcd has it, with the changes made here
    /// and not yet written over it.
    desired: HashMap<(String, String), Desired>,
    /// The changes made here, not yet written: only the fields they set, so
    /// that writing them changes nothing else another instance wrote
    /// meanwhile.
    pending: HashMap<(String, String), Desired>,
    /// The config revision last read (applied or refused).
    config_seen: Option<i64>,
}

impl Work {
    fn note(&mut self, p: Publish) {
        let key = (p.backend, p.server);
        let pending = self.pending.get(&key).copied().unwrap_or_default().with(p.change);
        self.pending.insert(key.clone(), pending);
        let d = self.desired.get(&key).copied().unwrap_or_default().with(p.change);
        self.desired.insert(key, d);
    }

    /// Takes every change made here that the channel holds.
    fn drain(&mut self, rx: &mut mpsc::UnboundedReceiver<Publish>) {
        while let Ok(p) = rx.try_recv() {
            self.note(p);
        }
    }
}

enum Ended {
    Stop,
    /// `[global.etcd]` changed (or went): start again with the new one.
    Settings,
    Failed(String),
}

const TICK: Duration = Duration::from_secs(1);
/// A session that heard nothing for this long (a progress request is sent
/// every few seconds, which the members answer) is taken as lost.
const SILENCE: Duration = Duration::from_secs(10);

async fn run(core: Weak<dyn Cluster>, mut stop: watch::Receiver<bool>, mut rx: mpsc::UnboundedReceiver<Publish>) {
    let mut work = Work::default();
    let mut backoff = Duration::from_millis(500);
    let mut last_failure = String::new();
    loop {
        let settings = match core.upgrade() {
            None => return,
            Some(c) => c.snapshot().config.global.etcd.clone(),
        };
        let ended = match settings {
            None => Ended::Settings,
            Some(s) => session(&core, &s, &mut stop, &mut rx, &mut work).await,
        };
        let wait = match ended {
            Ended::Stop => return,
            Ended::Settings => TICK,
            Ended::Failed(why) => {
                if why != last_failure {
                    tracing::warn!("etcd: {why}; serving with what this instance has, trying again");
                    last_failure = why.clone();
                }
                let mut was_connected = false;
                if let Some(c) = core.upgrade() {
                    let mut st = c.etcd().0.lock();
                    was_connected = std::mem::replace(&mut st.report.connected, false);
                    st.report.last_error = Some(why);
                    st.report.pending = work.pending.len();
                }
                // 1 s after a session that held, doubling to 5 s while none does.
                backoff =
                    if was_connected { Duration::from_secs(1) } else { (backoff * 2).min(Duration::from_secs(5)) };
                backoff
            }
        };
        // Changes made here while away are kept for the next session.
        let until = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                _ = stop.wait_for(|s| *s) => return,
                p = rx.recv() => match p {
                    Some(p) => {
                        work.note(p);
                        if let Some(c) = core.upgrade() {
                            c.etcd().0.lock().report.pending = work.pending.len();
                        }
                    }
                    None => return,
                },
            }
        }
    }
}

async fn timed<T, E: std::fmt::Display>(
    limit: Duration,
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {} ms", limit.as_millis())),
    }
}

fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    // The prefix ends with '/': the next byte value bounds the range.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

async fn session(
    core: &Weak<dyn Cluster>,
    s: &Arc<Etcd>,
    stop: &mut watch::Receiver<bool>,
    rx: &mut mpsc::UnboundedReceiver<Publish>,
    work: &mut Work,
) -> Ended {
    let t = s.timeout;
    let mut client = match timed(t, "connecting", EtcdClient::new(s.endpoints.clone(), None)).await {
        Ok(c) => c,
        Err(e) => return Ended::Failed(e),
    };
    let range =
        pb::RangeRequest { key: s.prefix.as_bytes().to_vec(), range_end: prefix_end(&s.prefix), ..Default::default() };
    let all = match timed(t, "reading the keys", client.kv.range(range)).await {
        Ok(r) => r,
        Err(e) => return Ended::Failed(e),
    };
    let revision = all.header.as_ref().map_or(0, |h| h.revision);
    let mut desired = HashMap::new();
    let mut config = None;
    for kv in &all.kvs {
        let key = String::from_utf8_lossy(&kv.key);
        if let Some((b, sv)) = s.server_of(&key) {
            match Desired::parse(&kv.value) {
                Some(d) => {
                    desired.insert((b.to_string(), sv.to_string()), d);
                }
                None => tracing::warn!("etcd: {key}: not a server state (like {{\"state\": \"drain\"}}); left alone"),
            }
        } else if *key == s.config_key() {
            config = Some((kv.mod_revision, String::from_utf8_lossy(&kv.value).into_owned()));
        }
    }
    // Changes made here and not yet written are newer than what etcd has.
    work.drain(rx);
    for (k, d) in &work.pending {
        let merged = desired.get(k).copied().unwrap_or_default().with(*d);
        desired.insert(k.clone(), merged);
    }
    work.desired = desired;
    {
        let Some(c) = core.upgrade() else { return Ended::Stop };
        let mut st = c.etcd().0.lock();
        st.report.connected = true;
        st.report.revision = revision;
        st.report.last_error = None;
    }
    tracing::info!("etcd: connected to {} (revision {revision})", s.endpoints.join(", "));
    if let Err(e) = write_pending(&mut client, s, work).await {
        return Ended::Failed(e);
    }
    if let Some(c) = core.upgrade() {
        c.etcd().0.lock().report.pending = 0;
    }
    reconcile(core, work);
    if s.config {
        config_changed(core, &mut client, s, config, work).await;
    }

    let mut create = client.watch.do_watch(s.prefix.as_bytes().to_vec()).with_prefix();
    create.request.start_revision = revision + 1;
    let mut watcher = match timed(t, "watching", create.into_future()).await {
        Ok(w) => w,
        Err(e) => return Ended::Failed(e),
    };
    let mut ticker = tokio::time::interval(TICK);
    let mut heard = Instant::now();
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return Ended::Stop,
            m = watcher.message() => {
                let resp = match m {
                    Ok(Some(r)) => r,
                    Ok(None) => return Ended::Failed("the watch ended".into()),
                    Err(e) => return Ended::Failed(format!("watching: {e}")),
                };
                heard = Instant::now();
                if resp.canceled || resp.compact_revision > 0 {
                    return Ended::Failed(format!("the watch was cancelled ({}); reading every key again", resp.cancel_reason));
                }
                if let Some(h) = &resp.header
                    && let Some(c) = core.upgrade()
                {
                    c.etcd().0.lock().report.revision = h.revision;
                }
                for ev in resp.events {
                    let Some(kv) = ev.kv else { continue };
                    let deleted = ev.r#type == pb::event::EventType::Delete as i32;
                    let key = String::from_utf8_lossy(&kv.key).into_owned();
                    if let Some((b, sv)) = s.server_of(&key) {
                        let k = (b.to_string(), sv.to_string());
                        if deleted {
                            work.desired.remove(&k);
                        } else if let Some(d) = Desired::parse(&kv.value) {
                            let d = work.pending.get(&k).map_or(d, |p| d.with(*p));
                            work.desired.insert(k, d);
                        } else {
                            tracing::warn!("etcd: {key}: not a server state (like {{\"state\": \"drain\"}}); left alone");
                        }
                    } else if key == s.config_key() && s.config {
                        let c = (!deleted).then(|| (kv.mod_revision, String::from_utf8_lossy(&kv.value).into_owned()));
                        config_changed(core, &mut client, s, c, work).await;
                    }
                }
                // Changes made here first, so that they are not undone.
                work.drain(rx);
                reconcile(core, work);
            }
            p = rx.recv() => {
                let Some(p) = p else { return Ended::Stop };
                work.note(p);
                work.drain(rx);
                if let Err(e) = write_pending(&mut client, s, work).await {
                    return Ended::Failed(e);
                }
                if let Some(c) = core.upgrade() {
                    c.etcd().0.lock().report.pending = 0;
                }
            }
            _ = ticker.tick() => {
                // Changes made here first, so that they are not undone.
                work.drain(rx);
                if !work.pending.is_empty() && let Err(e) = write_pending(&mut client, s, work).await {
                    return Ended::Failed(e);
                }
                reconcile(core, work);
                let Some(c) = core.upgrade() else { return Ended::Stop };
                if c.snapshot().config.global.etcd.as_ref() != Some(s) {
                    return Ended::Settings;
                }
                drop(c);
                ticks += 1;
                if ticks.is_multiple_of(3) {
                    let _ = watcher.progress().await;
                }
                if heard.elapsed() > SILENCE {
                    return Ended::Failed(format!("no word from etcd for {} s", SILENCE.as_secs()));
                }
            }
        }
    }
}

/// Writes every change made here over what etcd has for its key now (the
/// fields it does not set stay as another instance may have written them);
/// each is dropped from `pending` once written.
async fn write_pending(client: &mut EtcdClient, s: &Etcd, work: &mut Work) -> Result<(), String> {
    let keys: Vec<_> = work.pending.keys().cloned().collect();
    for k in keys {
        let Some(change) = work.pending.get(&k).copied() else { continue };
        let key = s.server_key(&k.0, &k.1);
        let range = pb::RangeRequest { key: key.clone().into_bytes(), ..Default::default() };
        let now = timed(s.timeout, "reading a server state", client.kv.range(range)).await?;
        let was = now.kvs.first().and_then(|kv| Desired::parse(&kv.value)).unwrap_or_default();
        let d = was.with(change);
        timed(s.timeout, "writing a server state", client.kv.put_kv(key, d.to_json(&s.name))).await?;
        work.pending.remove(&k);
        work.desired.insert(k, d);
    }
    Ok(())
}

/// Sets each server that etcd has a state or weight for to it, where it
/// differs (not those with a change made here still to write: it is in force).
fn reconcile(core: &Weak<dyn Cluster>, work: &Work) {
    let Some(c) = core.upgrade() else { return };
    let snap = c.snapshot();
    for ((b, s), d) in work.desired.iter().filter(|(k, _)| !work.pending.contains_key(*k)) {
        let Some(server) = snap.backend(b).and_then(|be| be.server(s)) else { continue };
        let state = d.state.filter(|st| *st != server.admin());
        let weight = d.weight.filter(|w| *w != server.weight());
        if let Some(st) = state {
            server.set_admin(st);
        }
        if let Some(w) = weight {
            server.set_weight(w);
        }
        if state.is_some() || weight.is_some() {
            tracing::info!(
                backend = b.as_str(),
                server = s.as_str(),
                state = server.admin().as_str(),
                weight = server.weight(),
                "server changed through etcd"
            );
        }
    }
}

/// `<prefix>config` is now `config` (revision, text), or gone: reloads with
/// it (or with the file), or refuses it, and says how it went in the status key.
async fn config_changed(
    core: &Weak<dyn Cluster>,
    client: &mut EtcdClient,
    s: &Arc<Etcd>,
    config: Option<(i64, String)>,
    work: &mut Work,
) {
    let Some(c) = core.upgrade() else { return };
    let revision = config.as_ref().map(|(r, _)| *r);
    if revision.is_some() && revision == work.config_seen {
        return;
    }
    work.config_seen = revision;
    let outcome = match &config {
        None => {
            let had = c.etcd().0.lock().config.take().is_some();
            if !had {
                return;
            }
            tracing::info!("etcd: {} is gone: the file's config serves again", s.config_key());
            let file = c.snapshot().config.source.clone();
            match tollgate_config::load(&file) {
                Ok(cfg) => c.clone().reload_with(cfg).map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Some((rev, text)) => {
            let file = c.snapshot().config.clone();
            match from_etcd(text, s, &file) {
                Err(e) => Err(e),
                Ok(cfg) => {
                    // Known before the reload, so that the reload keeps it.
                    let before = c.etcd().0.lock().config.replace((*rev, text.clone()));
                    let out = c.clone().reload_with(cfg);
                    if out.is_err() {
                        c.etcd().0.lock().config = before;
                    }
                    out.map(|_| ()).map_err(|e| e.to_string())
                }
            }
        }
    };
    {
        let mut st = c.etcd().0.lock();
        match &outcome {
            Ok(()) => {
                st.report.config_revision = revision;
                st.report.config_error = None;
            }
            Err(e) => st.report.config_error = Some(e.clone()),
        }
    }
    if let (Err(e), Some(rev)) = (&outcome, revision) {
        tracing::error!("etcd: {} revision {rev} refused, the running config keeps serving:\n{e}", s.config_key());
    } else if let Some(rev) = revision {
        tracing::info!("etcd: {} revision {rev} in force", s.config_key());
    }
    let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let status = serde_json::json!({
        "config_revision": revision,
        "applied": outcome.is_ok(),
        "error": outcome.as_ref().err(),
        "at": at,
    });
    if let Err(e) = timed(s.timeout, "writing the status", client.kv.put_kv(s.status_key(), status.to_string())).await {
        tracing::warn!("etcd: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_states_read_and_written() {
        let d = Desired::parse(br#"{"state": "DRAIN", "weight": 5, "by": "edge-1"}"#).unwrap();
        assert_eq!(d, Desired { state: Some(AdminState::Drain), weight: Some(5) });
        assert_eq!(Desired::parse(br#"{"weight": null}"#), Some(Desired::default()));
        for bad in [&b"drain"[..], br#"{"state": "up"}"#, br#"{"weight": 300}"#, br#"{"weight": -1}"#, br#"[]"#] {
            assert_eq!(Desired::parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        let j = Desired { state: Some(AdminState::Maint), weight: None }.to_json("a");
        assert_eq!(j, r#"{"by":"a","state":"maint"}"#);
        assert_eq!(Desired::parse(j.as_bytes()), Some(Desired { state: Some(AdminState::Maint), weight: None }));
    }

    #[test]
    fn a_change_made_here_merges_into_what_etcd_has_and_waits_to_be_written() {
        let mut w = Work::default();
        let k = ("b".to_string(), "s1".to_string());
        w.desired.insert(k.clone(), Desired { state: None, weight: Some(7) });
        w.note(Publish {
            backend: "b".into(),
            server: "s1".into(),
            change: Desired { state: Some(AdminState::Drain), weight: None },
        });
        let both = Desired { state: Some(AdminState::Drain), weight: Some(7) };
        // Pending holds only what was set here: written over etcd's value then.
        assert_eq!((w.desired[&k], w.pending[&k]), (both, Desired { state: Some(AdminState::Drain), weight: None }));
        assert_eq!(prefix_end("/tollgate/"), b"/tollgate0".to_vec());
    }
}
