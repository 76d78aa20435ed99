//! A small Chrome DevTools Protocol client for the browser end-to-end tests.
//!
//! [`Browser::launch`] starts headless Chromium on a fresh profile in a temporary
//! folder and talks to it over its DevTools WebSocket (on 127.0.0.1). A [`Page`] is
//! one tab, reached through a flat session on that one connection: it navigates
//! (waiting for the load event), evaluates JavaScript, clicks, and waits for a
//! condition by polling it. Every wait is bounded and fails with a message that
//! says what was awaited. Nothing is shared between tests: each launches its own
//! browser, and dropping it kills the process and removes the profile.

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long Chromium may take to print its DevTools address.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one DevTools command may take to be answered.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a navigation may take to reach its load event, and a click to find
/// its element.
const PAGE_TIMEOUT: Duration = Duration::from_secs(15);
/// How often [`Page::wait_for`] evaluates its condition.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Chromium's flags besides the profile folder: headless, no sandbox (the tests
/// may run as root), and none of the background services that would reach out
/// of the machine (host names other than localhost do not resolve).
const FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-port=0",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--no-pings",
    "--metrics-recording-only",
    "--password-store=basic",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
];

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What went wrong talking to the browser. `Debug` prints the bare message, so
/// `unwrap()` and `expect()` show it as it is.
pub struct Error {
    kind: Kind,
    msg: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The DevTools connection is gone.
    Closed,
    /// A bounded wait ran out.
    Timeout,
    /// Chromium answered with an error (or a navigation failed).
    Protocol,
    /// The page's JavaScript threw.
    Js,
}

impl Error {
    fn new(kind: Kind, msg: impl Into<String>) -> Error {
        Error { kind, msg: msg.into() }
    }

    /// Whether this is an exception thrown by the page's JavaScript.
    pub fn is_js_exception(&self) -> bool {
        self.kind == Kind::Js
    }

    /// Whether this is a bounded wait that ran out.
    pub fn is_timeout(&self) -> bool {
        self.kind == Kind::Timeout
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// A running headless Chromium. Dropping it kills the process and removes its
/// profile folder.
pub struct Browser {
    conn: Arc<Conn>,
    reader: tokio::task::JoinHandle<()>,
    // Held for its `Drop`, last: the process goes after the connection's tasks.
    _process: Process,
}

impl Browser {
    /// Starts Chromium, or returns `None` when it is not installed, except under
    /// CI (`CI` set, and not `false` or `0`), where its absence is a failure: the
    /// browser tests must not pass there by skipping. Chromium is
    /// `$TOLLGATE_CHROMIUM` when that is set, else `/usr/bin/chromium`, else
    /// `chromium` or `chromium-browser` on `PATH`. Panics when Chromium is there
    /// but does not start.
    pub async fn launch() -> Option<Browser> {
        let Some(bin) = find_chromium(std::env::var_os("TOLLGATE_CHROMIUM"), std::env::var_os("PATH")) else {
            assert!(
                !in_ci(),
                "chromium not found ($TOLLGATE_CHROMIUM, /usr/bin/chromium, or chromium or chromium-browser on PATH), \
                 and CI is set: the browser tests must run in CI (.ci/run installs Debian's chromium package)"
            );
            return None;
        };
        Some(Browser::start(&bin).await)
    }

    async fn start(bin: &Path) -> Browser {
        let profile = profile_dir();
        let spawned = Command::new(bin)
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&profile);
                panic!("cannot start {}: {e}", bin.display());
            }
        };
        // From here on, a panic kills the process and removes the profile.
        let mut process = Process { child, profile };
        let stderr = process.child.stderr.take().expect("chromium's stderr is piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = oneshot::channel();
        let thread_log = log.clone();
        std::thread::spawn(move || watch_stderr(stderr, &thread_log, tx));
        let url = match tokio::time::timeout(LAUNCH_TIMEOUT, rx).await {
            Ok(Ok(url)) => url,
            Ok(Err(_)) => panic!("{} exited before its DevTools listened; its stderr:\n{}", bin.display(), log.lock()),
            Err(_) => panic!(
                "{} did not print its DevTools address within {LAUNCH_TIMEOUT:?}; its stderr:\n{}",
                bin.display(),
                log.lock()
            ),
        };
        assert!(url.starts_with("ws://127.0.0.1:"), "DevTools listens on {url}, not on 127.0.0.1");
        let ws = match tokio::time::timeout(COMMAND_TIMEOUT, tokio_tungstenite::connect_async(url.as_str())).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => panic!("cannot connect to chromium's DevTools at {url}: {e}"),
            Err(_) => panic!("connecting to chromium's DevTools at {url} took over {COMMAND_TIMEOUT:?}"),
        };
        let (sink, stream) = ws.split();
        let conn = Arc::new(Conn {
            sink: tokio::sync::Mutex::new(sink),
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(1),
        });
        let reader = tokio::spawn(read_loop(conn.clone(), stream));
        Browser { conn, reader, _process: process }
    }

    /// Accepts any server certificate from now on (DevTools'
    /// `Security.setIgnoreCertificateErrors`), for tests against test CAs.
    pub async fn ignore_certificate_errors(&self) -> Result<()> {
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        self.conn.call(None, "Security.setIgnoreCertificateErrors", json!({ "ignore": true }), deadline).await?;
        Ok(())
    }

    /// Opens a new tab on `url` and waits for its load event.
    pub async fn new_page(&self, url: &str) -> Result<Page> {
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let target = self.conn.call(None, "Target.createTarget", json!({ "url": "about:blank" }), deadline).await?;
        let target_id = str_field(&target, "targetId")?;
        let attached = self
            .conn
            .call(None, "Target.attachToTarget", json!({ "targetId": target_id, "flatten": true }), deadline)
            .await?;
        let session = str_field(&attached, "sessionId")?;
        let (tx, rx) = mpsc::unbounded_channel();
        self.conn.state.lock().sessions.insert(session.clone(), tx);
        let page = Page { conn: self.conn.clone(), session, events: tokio::sync::Mutex::new(rx) };
        page.call("Page.enable", json!({}), deadline).await?;
        page.call("Page.setLifecycleEventsEnabled", json!({ "enabled": true }), deadline).await?;
        page.call("Runtime.enable", json!({}), deadline).await?;
        page.navigate(url).await?;
        Ok(page)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.reader.abort();
        self.conn.close("the browser was dropped");
    }
}

/// The Chromium process and its profile folder.
struct Process {
    child: Child,
    profile: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Chromium's helpers (zygotes, renderers) leave once the browser process
        // is gone, and may write to the profile until then: retry for a while.
        for _ in 0..40 {
            match std::fs::remove_dir_all(&self.profile) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

/// One tab, on its own DevTools session.
pub struct Page {
    conn: Arc<Conn>,
    session: String,
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<Event>>,
}

impl Page {
    async fn call(&self, method: &str, params: Value, deadline: Instant) -> Result<Value> {
        self.conn.call(Some(&self.session), method, params, deadline).await
    }

    /// Loads `url` in this tab and waits for its load event. A navigation that
    /// fails (connection refused, …) is an error; an HTTP error status is not.
    pub async fn navigate(&self, url: &str) -> Result<()> {
        let deadline = Instant::now() + PAGE_TIMEOUT;
        // Held throughout, so that the load event is read here and nowhere else.
        let mut events = self.events.lock().await;
        let nav = self.call("Page.navigate", json!({ "url": url }), deadline).await?;
        if let Some(err) = nav["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(Error::new(Kind::Protocol, format!("navigating to {url}: {err}")));
        }
        // No loader: a same-document navigation (a fragment), already done.
        let Some(loader) = nav["loaderId"].as_str() else { return Ok(()) };
        loop {
            let event = match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) => return Err(Error::new(Kind::Closed, format!("navigating to {url}: the page went away"))),
                Err(_) => {
                    return Err(Error::new(
                        Kind::Timeout,
                        format!("{url} did not reach its load event within {PAGE_TIMEOUT:?}"),
                    ));
                }
            };
            let p = &event.params;
            if event.method == "Page.lifecycleEvent" && p["name"] == "load" && p["loaderId"] == loader {
                return Ok(());
            }
        }
    }

    /// Evaluates `js` in the page and returns its value as JSON (a promise is
    /// awaited; `undefined` is `null`; NaN, ±Infinity, -0 and bigints come as
    /// strings such as `"NaN"`). A thrown exception is an error carrying its text.
    pub async fn eval(&self, js: &str) -> Result<Value> {
        let value = self.evaluate(js, Instant::now() + COMMAND_TIMEOUT).await;
        value.map_err(|e| Error { msg: format!("evaluating `{}`: {}", excerpt(js), e.msg), ..e })
    }

    async fn evaluate(&self, js: &str, deadline: Instant) -> Result<Value> {
        let params = json!({ "expression": js, "returnByValue": true, "awaitPromise": true, "userGesture": true });
        let r = self.call("Runtime.evaluate", params, deadline).await?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(Error::new(Kind::Js, format!("JavaScript threw: {}", exception_text(ex))));
        }
        let result = &r["result"];
        Ok(result.get("value").or_else(|| result.get("unserializableValue")).cloned().unwrap_or(Value::Null))
    }

    /// Evaluates the JavaScript expression `condition` every 25 ms until its
    /// value (a promise is awaited) is truthy, and returns that value as JSON.
    /// An exception counts as not yet: it is reported if `timeout` runs out.
    /// Bounded by `timeout`, plus up to 250 ms for a last evaluation under way.
    pub async fn wait_for(&self, condition: &str, timeout: Duration) -> Result<Value> {
        self.poll(condition, timeout, || format!("`{}` was not truthy", excerpt(condition))).await
    }

    /// Clicks (`element.click()`) the first element matching the CSS `selector`,
    /// waiting for one to appear (bounded).
    pub async fn click(&self, selector: &str) -> Result<()> {
        let sel = Value::from(selector).to_string();
        let js = format!(
            "(() => {{ const el = document.querySelector({sel}); if (!el) return false; el.click(); return true; }})()"
        );
        self.poll(&js, PAGE_TIMEOUT, || format!("click: no element matched {sel}")).await.map(drop)
    }

    async fn poll(&self, condition: &str, timeout: Duration, what: impl Fn() -> String) -> Result<Value> {
        // The newline ends a `//` comment that `condition` may end with.
        let probe = format!("(async () => {{ const v = await ({condition}\n); return v ? {{ v }} : null; }})()");
        let deadline = Instant::now() + timeout;
        // A condition that does not compile never will: say so now.
        let compile = json!({ "expression": probe, "sourceURL": "", "persistScript": false });
        if let Ok(compiled) =
            self.call("Runtime.compileScript", compile, deadline.min(Instant::now() + COMMAND_TIMEOUT)).await
            && let Some(ex) = compiled.get("exceptionDetails")
        {
            let text = exception_text(ex);
            return Err(Error::new(Kind::Js, format!("`{}` does not compile: {text}", excerpt(condition))));
        }
        let mut last_error = None;
        loop {
            // The last attempt may run a little past `deadline`, not be cut short.
            let attempt = (deadline + Duration::from_millis(250)).min(Instant::now() + COMMAND_TIMEOUT);
            match self.evaluate(&probe, attempt).await {
                Ok(Value::Object(mut found)) => return Ok(found.remove("v").unwrap_or(Value::Null)),
                Ok(_) => last_error = None,
                Err(e) if e.kind == Kind::Closed => return Err(e),
                // An attempt cut short by the deadline tells nothing new.
                Err(e) if e.kind == Kind::Timeout => {}
                Err(e) => last_error = Some(e.msg),
            }
            let now = Instant::now();
            if now >= deadline {
                let last = last_error.map(|e| format!("; last error: {e}")).unwrap_or_default();
                return Err(Error::new(Kind::Timeout, format!("{} within {timeout:?}{last}", what())));
            }
            tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.conn.state.lock().sessions.remove(&self.session);
    }
}

/// The DevTools connection: commands by id, events routed to their session.
struct Conn {
    sink: tokio::sync::Mutex<SplitSink<Ws, Message>>,
    state: Mutex<State>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Why the connection is gone, once it is.
    closed: Option<String>,
    pending: HashMap<u64, oneshot::Sender<Result<Value>>>,
    sessions: HashMap<String, mpsc::UnboundedSender<Event>>,
}

struct Event {
    method: String,
    params: Value,
}

impl Conn {
    /// Sends `method` (on `session`, else to the browser) and waits until
    /// `deadline` for its answer.
    async fn call(&self, session: Option<&str>, method: &str, params: Value, deadline: Instant) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.state.lock();
            if let Some(why) = &state.closed {
                return Err(Error::new(Kind::Closed, format!("{method}: {why}")));
            }
            state.pending.insert(id, tx);
        }
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            msg["sessionId"] = session.into();
        }
        let exchange = async {
            let sent = self.sink.lock().await.send(Message::text(msg.to_string())).await;
            if let Err(e) = sent {
                return Err(Error::new(Kind::Closed, format!("cannot send to chromium: {e}")));
            }
            rx.await.unwrap_or_else(|_| Err(Error::new(Kind::Closed, "the DevTools connection closed")))
        };
        let answer = tokio::time::timeout_at(deadline, exchange).await;
        self.state.lock().pending.remove(&id);
        match answer {
            Ok(answer) => answer.map_err(|e| Error { msg: format!("{method}: {}", e.msg), ..e }),
            Err(_) => Err(Error::new(Kind::Timeout, format!("{method}: chromium did not answer in time"))),
        }
    }

    fn dispatch(&self, msg: Value) {
        let mut state = self.state.lock();
        if let Some(id) = msg["id"].as_u64() {
            let Some(tx) = state.pending.remove(&id) else { return };
            let answer = match msg.get("error") {
                Some(e) => Err(Error::new(Kind::Protocol, format!("{} (code {})", e["message"], e["code"]))),
                None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(answer);
        } else if let (Some(method), Some(session)) = (msg["method"].as_str(), msg["sessionId"].as_str())
            && let Some(tx) = state.sessions.get(session)
        {
            let _ = tx.send(Event { method: method.to_string(), params: msg["params"].clone() });
        }
    }

    /// Fails whatever waits on the connection, and every later command.
    fn close(&self, why: &str) {
        let mut state = self.state.lock();
        state.closed.get_or_insert_with(|| why.to_string());
        for (_, tx) in state.pending.drain() {
            let _ = tx.send(Err(Error::new(Kind::Closed, why)));
        }
        state.sessions.clear();
    }
}

async fn read_loop(conn: Arc<Conn>, mut stream: SplitStream<Ws>) {
    let why = loop {
        match stream.next().await {
            Some(Ok(Message::Text(text))) => {
                if let Ok(msg) = serde_json::from_str(text.as_str()) {
                    conn.dispatch(msg);
                }
            }
            Some(Ok(Message::Close(_))) | None => break "chromium closed the DevTools connection".to_string(),
            Some(Ok(_)) => {}
            Some(Err(e)) => break format!("the DevTools connection failed: {e}"),
        }
    };
    conn.close(&why);
}

/// Reads Chromium's stderr: sends the DevTools address once it is printed, keeps
/// what came before it in `log` (for a launch that fails), then drains the rest.
fn watch_stderr(stderr: ChildStderr, log: &Mutex<String>, tx: oneshot::Sender<String>) {
    let mut tx = Some(tx);
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if tx.is_none() {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        match text.trim().strip_prefix("DevTools listening on ") {
            Some(url) => {
                let _ = tx.take().map(|tx| tx.send(url.to_string()));
            }
            None => {
                let mut log = log.lock();
                if log.len() < 64 * 1024 {
                    log.push_str(&text);
                }
            }
        }
    }
}

fn find_chromium(explicit: Option<OsString>, path: Option<OsString>) -> Option<PathBuf> {
    if let Some(bin) = explicit.filter(|p| !p.is_empty()).map(PathBuf::from) {
        assert!(is_executable(&bin), "TOLLGATE_CHROMIUM={} is not an executable file", bin.display());
        return Some(bin);
    }
    let usual = Path::new("/usr/bin/chromium");
    if is_executable(usual) {
        return Some(usual.to_path_buf());
    }
    let dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    ["chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub(crate) fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !(v.is_empty() || v == "false" || v == "0"))
}

/// A new, empty profile folder for one browser.
fn profile_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tollgate-chromium-{}-{n}", std::process::id()));
    // Left by an earlier process that had the same id.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The text of an exception in a `Runtime.evaluate` or `Runtime.compileScript`
/// answer: its description (message and stack), else the value thrown.
fn exception_text(ex: &Value) -> String {
    ex["exception"]["description"]
        .as_str()
        .map(str::to_string)
        .or_else(|| ex["exception"].get("value").map(|v| v.to_string()))
        .or_else(|| ex["text"].as_str().map(str::to_string))
        .unwrap_or_else(|| ex.to_string())
}

fn str_field(v: &Value, name: &str) -> Result<String> {
    v[name].as_str().map(str::to_string).ok_or_else(|| Error::new(Kind::Protocol, format!("no {name} in {v}")))
}

/// The start of `js`, for messages.
fn excerpt(js: &str) -> String {
    let mut chars = js.chars();
    let mut s: String = chars.by_ref().take(160).collect();
    if chars.next().is_some() {
        s.push('…');
    }
    s
}
