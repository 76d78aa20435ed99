//! The command socket: a Unix socket at `admin.socket` that speaks HAProxy's
//! runtime API (the language is in [`super::cli`]; this is the I/O). It runs on
//! the admin thread, next to the admin HTTP listener.
//!
//! - [`bind`] (called by `admin::start`, so that errors surface at start): a
//!   stale socket file left by a process that is gone is replaced; a path that
//!   exists and is not a socket, or a socket another process listens on, is
//!   refused. The socket is bound under a temporary name, restricted to its
//!   owner (mode 0600) and then moved into place, so it is never reachable with
//!   wider permissions. The file is removed when the server stops (if it is
//!   still the one this process created).
//! - Sessions as HAProxy's: read a line (at most [`cli::MAX_LINE`] bytes), run
//!   its commands, write the answer; close after it in non-interactive mode,
//!   else wait for the next line until `quit`, end of input or the idle timeout
//!   (`set timeout cli`, 10 s by default). At most [`MAX_SESSIONS`] at once;
//!   more wait to be accepted.

use super::cli::{self, BackendConf, CheckConf, Runtime, Session, StickView, View};
use super::{Control, ControlError, ServerChange};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tollgate_config::CheckKind;

/// Sessions served at once (the `maxconn` of HAProxy's stats socket).
pub const MAX_SESSIONS: usize = 10;

/// The command socket, bound and not yet served.
pub(crate) struct Bound {
    listener: std::os::unix::net::UnixListener,
    file: SocketFile,
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

/// Opens the command socket at `path`. Every error names the path. A live
/// socket there refuses the start, unless `take_over`: the process being
/// replaced (a hot binary upgrade) listens there until it stops, and the new
/// socket takes its place.
pub(crate) fn bind(path: &Path, take_over: bool) -> io::Result<Bound> {
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
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(error(e.kind(), format!("cannot put the socket in place: {e}")));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| error(e.kind(), format!("cannot inspect the path: {e}")))?;
    let file = SocketFile { path: path.to_path_buf(), dev: meta.dev(), ino: meta.ino() };
    listener.set_nonblocking(true)?;
    Ok(Bound { listener, file })
}

/// Serves the command socket until the server stops, then removes its file.
pub(crate) async fn serve(bound: Bound, control: Control, mut stop: watch::Receiver<bool>) {
    let Bound { listener, file } = bound;
    let listener = match UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("admin: cannot register the command socket {}: {e}", file.path.display());
            return;
        }
    };
    tracing::info!("admin: command socket listening on {}", file.path.display());
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
                Ok((s, _)) => s,
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
        tokio::spawn(session(stream, control.clone(), stop.clone(), slot));
    }
    drop(listener);
    drop(file);
}

/// One connection, until it closes, times out or the server stops.
async fn session(stream: UnixStream, control: Control, mut stop: watch::Receiver<bool>, _slot: OwnedSemaphorePermit) {
    let (mut rd, mut wr) = stream.into_split();
    let mut cli = Session::default();
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
                let stick = rt.stick.as_ref().map(|t| StickView {
                    size: t.size(),
                    entries: t
                        .entries(now)
                        .into_iter()
                        .map(|(ip, i, left)| {
                            let name = rt.servers.get(i).map_or_else(String::new, |s| s.cfg.name.clone());
                            (ip, i + 1, name, left.as_millis() as u64)
                        })
                        .collect(),
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let bound = bind(&path, false).expect("a stale socket is replaced");
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        // A live one is not taken over, but by a process replacing this one.
        let e = bind(&path, false).err().expect("in use");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let successor = bind(&path, true).expect("taken over");
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
        let e = bind(&file, false).err().expect("not a socket");
        assert!(e.to_string().contains("is not a socket") && e.to_string().contains("plain"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

        let e = bind(&d.join("no/such/dir/tg.sock"), false).err().expect("no directory");
        assert!(e.to_string().contains("no/such/dir/tg.sock"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_file_is_left_alone_once_another_socket_replaced_it() {
        let d = dir("replaced");
        let path = d.join("tg.sock");
        let bound = bind(&path, false).unwrap();
        std::fs::remove_file(&path).unwrap();
        let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(bound);
        assert!(path.exists(), "not ours any more");
        drop(other);
        let _ = std::fs::remove_dir_all(&d);
    }
}
