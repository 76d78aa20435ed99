//! The command sockets: Unix sockets (or TCP addresses) at `admin.socket` that
//! speak HAProxy's runtime API (the language is in [`super::cli`]; this is the
//! I/O), each at its level. They run on the admin thread, next to the admin
//! HTTP listener.
//!
//! - [`bind`] (called by `admin::start`, so that errors surface at start): a
//!   stale socket file left by a process that is gone is replaced; a path that
//!   exists and is not a socket, or a socket another process listens on, is
//!   refused. The socket is bound under a temporary name with its mode (0600
//!   by default) and owner, then moved into place, so it is never reachable
//!   with wider permissions. The file is removed when the server stops (if it
//!   is still the one this process created). A TCP socket refuses an address
//!   another process answers on; it is bound with SO_REUSEPORT, so that the
//!   new process of a hot upgrade binds it beside the old one.
//! - Sessions as HAProxy's: read a line (at most [`cli::MAX_LINE`] bytes), run
//!   its commands, write the answer; close after it in non-interactive mode,
//!   else wait for the next line until `quit`, end of input or the idle timeout
//!   (`set timeout cli`, 10 s by default). At most [`MAX_SESSIONS`] at once;
//!   more wait to be accepted.

use super::cli::{self, BackendConf, CheckConf, Runtime, Session, StickView, View};
use super::cli_servers::ServerAdmin;
use super::{Control, ControlError, CounterTableView, NewServer, ServerChange};
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tollgate_config::{CheckKind, CliLevel, CommandSocket, SocketListen, UnixSocket};

/// Sessions served at once (the `maxconn` of HAProxy's stats socket).
pub const MAX_SESSIONS: usize = 10;

/// A command socket, bound and not yet served.
pub(crate) struct Bound {
    listener: Listener,
    /// The socket's file (none for TCP).
    file: Option<SocketFile>,
    level: CliLevel,
    /// Its path or address, for the log.
    shown: String,
}

enum Listener {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

/// Opens a command socket. Every error names its path or address.
pub(crate) fn bind(sock: &CommandSocket, take_over: bool) -> io::Result<Bound> {
    match &sock.listen {
        SocketListen::Unix(u) => {
            let (listener, file) = bind_unix(u, take_over)?;
            let shown = u.path.display().to_string();
            Ok(Bound { listener: Listener::Unix(listener), file: Some(file), level: sock.level, shown })
        }
        SocketListen::Tcp(addr) => {
            let listener = bind_tcp(*addr, take_over)?;
            let shown = listener.local_addr().map_or_else(|_| addr.to_string(), |a| a.to_string());
            Ok(Bound { listener: Listener::Tcp(listener), file: None, level: sock.level, shown })
        }
    }
}

impl Bound {
    /// The address a TCP socket listens on.
    pub(crate) fn tcp_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(_) => None,
        }
    }
}

/// A TCP command socket on `addr`: refused when another process answers
/// there, unless `take_over` (the process being replaced does).
fn bind_tcp(addr: SocketAddr, take_over: bool) -> io::Result<std::net::TcpListener> {
    let error = |e: io::Error, what: &str| io::Error::new(e.kind(), format!("command socket {addr}: {what}: {e}"));
    if !take_over
        && addr.port() != 0
        && std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)).is_ok()
    {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("command socket {addr}: already in use: another process answers there"),
        ));
    }
    let domain = socket2::Domain::for_address(addr);
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| error(e, "cannot open"))?;
    s.set_reuse_address(true).and_then(|()| s.set_reuse_port(true)).map_err(|e| error(e, "cannot set options"))?;
    s.bind(&addr.into()).map_err(|e| error(e, "cannot listen"))?;
    s.listen(128).map_err(|e| error(e, "cannot listen"))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// The socket's file: removed on drop, if the path still names it (a later
/// process may have put its own socket there).
struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path)
            && m.dev() == self.dev
            && m.ino() == self.ino
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Opens the command socket at `u.path`. Every error names the path. A live
/// socket there refuses the start, unless `take_over`: the process being
/// replaced (a hot binary upgrade) listens there until it stops, and the new
/// socket takes its place.
fn bind_unix(u: &UnixSocket, take_over: bool) -> io::Result<(std::os::unix::net::UnixListener, SocketFile)> {
    let path = u.path.as_path();
    let shown = path.display();
    let error = |kind: io::ErrorKind, what: String| io::Error::new(kind, format!("command socket {shown}: {what}"));
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(error(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket (remove it, or set another admin.socket)".into(),
            ));
        }
        Ok(_) => {
            if !take_over && std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(error(io::ErrorKind::AddrInUse, "already in use: a live socket listens there".into()));
            }
            // A stale socket: the rename below replaces it.
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(error(e.kind(), format!("cannot inspect the path: {e}"))),
    }
    let Some(name) = path.file_name() else {
        return Err(error(io::ErrorKind::InvalidInput, "not a file path".into()));
    };
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let listener = std::os::unix::net::UnixListener::bind(&tmp)
        .map_err(|e| error(e.kind(), format!("cannot listen on {}: {e}", tmp.display())))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(u.mode))
        .and_then(|()| match (u.uid, u.gid) {
            (None, None) => Ok(()),
            (uid, gid) => std::os::unix::fs::chown(&tmp, uid, gid),
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(error(e.kind(), format!("cannot put the socket in place: {e}")));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| error(e.kind(), format!("cannot inspect the path: {e}")))?;
    let file = SocketFile { path: path.to_path_buf(), dev: meta.dev(), ino: meta.ino() };
    listener.set_nonblocking(true)?;
    Ok((listener, file))
}

/// A socket being served.
enum Serving {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Serving {
    async fn accept(&self) -> io::Result<Box<dyn Stream>> {
        Ok(match self {
            Serving::Unix(l) => Box::new(l.accept().await?.0),
            Serving::Tcp(l) => Box::new(l.accept().await?.0),
        })
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// Serves a command socket until the server stops, then removes its file.
pub(crate) async fn serve(bound: Bound, control: Control, mut stop: watch::Receiver<bool>) {
    let Bound { listener, file, level, shown } = bound;
    let registered = match listener {
        Listener::Unix(l) => UnixListener::from_std(l).map(Serving::Unix),
        Listener::Tcp(l) => TcpListener::from_std(l).map(Serving::Tcp),
    };
    let listener = match registered {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("admin: cannot register the command socket {shown}: {e}");
            return;
        }
    };
    tracing::info!("admin: command socket listening on {shown} (level {})", level.as_str());
    let slots = Arc::new(Semaphore::new(MAX_SESSIONS));
    loop {
        let slot = tokio::select! {
            _ = super::stopped(&mut stop) => break,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = super::stopped(&mut stop) => break,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    static WARN: tollgate_proxy::io::limits::Throttle = tollgate_proxy::io::limits::Throttle::new();
                    if let Some(held) = WARN.ready() {
                        tracing::warn!("admin: command socket accept failed: {e} ({held} more since the last such message)");
                    }
                    tokio::time::sleep(tollgate_proxy::runtime::server::ACCEPT_PAUSE).await;
                    continue;
                }
            },
        };
        tokio::spawn(session(stream, level, control.clone(), stop.clone(), slot));
    }
    drop(listener);
    drop(file);
}

/// One connection, until it closes, times out or the server stops.
async fn session(
    stream: Box<dyn Stream>,
    level: CliLevel,
    control: Control,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut cli = Session { level, ..Session::default() };
    let mut buf = Vec::new();
    loop {
        let timeout = cli.timeout;
        let read = tokio::select! {
            _ = super::stopped(&mut stop) => return,
            r = tokio::time::timeout(timeout, read_line(&mut rd, &mut buf)) => r,
        };
        let (text, close) = match read {
            Ok(Ok(Line::Text(line))) => {
                let out = cli.run_line(&line, &control);
                (out.text, out.close)
            }
            Ok(Ok(Line::TooLong)) => (cli::LINE_TOO_LONG.to_string(), true),
            // End of input, an error, or the idle timeout.
            Ok(Ok(Line::End)) | Ok(Err(_)) | Err(_) => return,
        };
        match tokio::time::timeout(cli.timeout, wr.write_all(text.as_bytes())).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        if close {
            let _ = tokio::time::timeout(cli.timeout, wr.shutdown()).await;
            return;
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A line, without its `\n` (or `\r\n`); bytes that are not UTF-8 are
    /// replaced. The last line of the input may lack the `\n`.
    Text(String),
    /// No `\n` within [`cli::MAX_LINE`] bytes.
    TooLong,
    End,
}

/// The next line from `rd`; `buf` keeps what was read past it.
async fn read_line(rd: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> io::Result<Line> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = buf.drain(..=i).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Text(String::from_utf8_lossy(&line).into_owned()));
        }
        if buf.len() > cli::MAX_LINE {
            return Ok(Line::TooLong);
        }
        let n = rd.read(&mut chunk).await?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(Line::End);
            }
            let line = std::mem::take(buf);
            return Ok(Line::Text(String::from_utf8_lossy(&line).into_owned()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

impl Runtime for Control {
    fn view(&self) -> Result<View, ControlError> {
        let snap = self.snapshot()?;
        let report = self.report()?;
        let now = std::time::Instant::now();
        let backends = snap
            .config
            .backends
            .iter()
            .zip(&snap.backends)
            .map(|(b, rt)| {
                let check = b.check.as_ref().map(|c| CheckConf {
                    layer7: matches!(c.kind, CheckKind::Http(_)),
                    rise: c.rise,
                    fall: c.fall,
                });
                let stick = tollgate_proxy::runtime::control::stick_table(rt, now).map(|t| StickView {
                    size: t.size,
                    entries: t.entries.into_iter().map(|e| (e.key, e.server_id, e.server, e.expire_ms)).collect(),
                });
                (b.name.clone(), BackendConf { check, cookie: b.cookie.as_ref().map(|c| c.name.clone()), stick })
            })
            .collect();
        Ok(View { report, backends })
    }

    fn read_only(&self) -> bool {
        Control::read_only(self)
    }

    fn set_server(&self, backend: &str, server: &str, change: ServerChange) -> Result<(), ControlError> {
        Control::set_server(self, backend, server, change).map(|_| ())
    }

    fn servers(&self) -> &dyn ServerAdmin {
        self
    }

    fn counter_tables(&self, limit: usize) -> Result<Vec<CounterTableView>, ControlError> {
        Control::counter_tables(self, limit)
    }

    fn clear_table(&self, name: &str) -> Result<usize, ControlError> {
        Control::clear_table(self, name)
    }
}

impl ServerAdmin for Control {
    fn add_server(&self, backend: &str, new: NewServer) -> Result<(), ControlError> {
        Control::add_server(self, backend, new).map(|_| ())
    }

    fn del_server(&self, backend: &str, server: &str) -> Result<(), ControlError> {
        Control::del_server(self, backend, server)
    }

    fn set_server_addr(
        &self,
        backend: &str,
        server: &str,
        addr: std::net::SocketAddr,
    ) -> Result<std::net::SocketAddr, ControlError> {
        Control::set_server_addr(self, backend, server, addr)
    }

    fn shutdown_sessions(&self, backend: &str, server: &str) -> Result<(), ControlError> {
        Control::shutdown_sessions(self, backend, server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &std::path::Path) -> CommandSocket {
        let unix = UnixSocket { path: path.to_path_buf(), mode: 0o600, uid: None, gid: None };
        CommandSocket { listen: SocketListen::Unix(unix), level: CliLevel::Admin }
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tollgate-sock-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[tokio::test]
    async fn lines_are_split_bounded_and_lossy() {
        let input: &[u8] = b"show info\r\nshow stat;help\n\xffbad\nlast";
        let mut rd = input;
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut rd, &mut buf).await.unwrap(), Line::Text("show info".into()));
        assert_eq!(read_line(&mut rd, &mut buf).await.unwrap(), Line::Text("show stat;help".into()));
        assert_eq!(read_line(&mut rd, &mut buf).await.unwrap(), Line::Text("\u{fffd}bad".into()));
        assert_eq!(read_line(&mut rd, &mut buf).await.unwrap(), Line::Text("last".into()));
        assert_eq!(read_line(&mut rd, &mut buf).await.unwrap(), Line::End);

        let long = vec![b'x'; cli::MAX_LINE * 2];
        let mut rd = long.as_slice();
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut rd, &mut buf).await.unwrap(), Line::TooLong);
        assert!(buf.len() <= cli::MAX_LINE + 4096, "reading stops soon after the limit");
    }

    #[test]
    fn bind_replaces_a_stale_socket_and_refuses_other_files() {
        let d = dir("bind");
        let path = d.join("tg.sock");
        // A stale socket: bound, then its listener gone.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let bound = bind(&at(&path), false).expect("a stale socket is replaced");
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        // A live one is not taken over, but by a process replacing this one.
        let e = bind(&at(&path), false).err().expect("in use");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let successor = bind(&at(&path), true).expect("taken over");
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        // The first one's drop leaves the successor's file alone.
        drop(bound);
        assert!(path.exists());
        let bound = successor;
        // Dropped unserved: the file goes.
        drop(bound);
        assert!(!path.exists());

        let file = d.join("plain");
        std::fs::write(&file, "keep me").unwrap();
        let e = bind(&at(&file), false).err().expect("not a socket");
        assert!(e.to_string().contains("is not a socket") && e.to_string().contains("plain"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

        let e = bind(&at(&d.join("no/such/dir/tg.sock")), false).err().expect("no directory");
        assert!(e.to_string().contains("no/such/dir/tg.sock"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A mode and an owner of its own; a TCP socket refused where another
    /// process answers, bound beside it for a takeover.
    #[test]
    fn modes_owners_and_tcp_sockets() {
        let d = dir("mode");
        let path = d.join("tg.sock");
        let me = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let unix = UnixSocket { path: path.clone(), mode: 0o660, uid: Some(me), gid: Some(gid) };
        let bound = bind(&CommandSocket { listen: SocketListen::Unix(unix), level: CliLevel::User }, false).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.permissions().mode() & 0o777, meta.uid(), meta.gid()), (0o660, me, gid));
        assert_eq!(bound.level, CliLevel::User);
        drop(bound);

        let tcp = |addr: SocketAddr| CommandSocket { listen: SocketListen::Tcp(addr), level: CliLevel::Operator };
        let first = bind(&tcp("127.0.0.1:0".parse().unwrap()), false).unwrap();
        let addr = first.tcp_addr().unwrap();
        let e = bind(&tcp(addr), false).err().expect("in use");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
        let beside = bind(&tcp(addr), true).expect("a takeover binds beside it");
        assert_eq!(beside.tcp_addr(), Some(addr));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_file_is_left_alone_once_another_socket_replaced_it() {
        let d = dir("replaced");
        let path = d.join("tg.sock");
        let bound = bind(&at(&path), false).unwrap();
        std::fs::remove_file(&path).unwrap();
        let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(bound);
        assert!(path.exists(), "not ours any more");
        drop(other);
        let _ = std::fs::remove_dir_all(&d);
    }
}
