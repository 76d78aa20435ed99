//! Response bodies moved from the server's socket to the client's through a
//! pipe with `splice(2)`, never copied into the process (HAProxy's
//! `option splice-response`).
//!
//! Copying a large body costs two copies per byte: `read` from the server's
//! socket into a buffer, `write` from it into the client's. On 160 KiB
//! responses those copies were a quarter of the proxy's CPU (`perf`: 12% in
//! `_copy_to_iter`, 10% in `_copy_from_iter`, more in the user-copy checks).
//! `splice` hands the socket's pages to a pipe and the pipe's pages to the
//! other socket instead. conn.rs uses it for a plain-TCP response body with a
//! Content-Length, on plain TCP to the client, that the cache does not keep and
//! that did not fit in the read that brought its head (`global.splice`).
//!
//! Pipes are kept per worker thread (two file descriptors each) and reused, so
//! a response costs no `pipe2` or `close`. A pipe goes back to the list only
//! empty; one still holding bytes (its client left) is closed. Pipes in use
//! and kept together take at most an eighth of the process's file descriptor
//! limit (`RLIMIT_NOFILE`), so that they never leave connections without one
//! (HAProxy's `maxpipes` is likewise a quarter of `maxconn`); past that, and
//! whenever `pipe2` fails, the body is copied.
//!
//! The pipe is filled only when empty and emptied completely before the next
//! fill. With the pipe empty, a fill that finds nothing (`EAGAIN`) means the
//! socket has nothing: a non-empty pipe could also answer `EAGAIN` because it
//! is full, and taking that for "nothing to read" would clear the socket's
//! readiness while bytes wait in it.

use crate::lazy_tcp::LazyTcp;
use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use rustix::process::{Resource, getrlimit};
use std::cell::RefCell;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Empty pipes kept per worker thread.
const KEPT_MAX: usize = 256;
/// The most one fill asks for: a pipe's default capacity (16 pages).
const FILL_MAX: usize = 64 * 1024;

thread_local! {
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// Pipes open in the process, in use or kept.
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// Of those, the ones kept for reuse.
static KEPT: AtomicUsize = AtomicUsize::new(0);
/// Bytes moved to clients through pipes.
static SPLICED: AtomicU64 = AtomicU64::new(0);

/// The most pipes open at once ([`open_max`]); HAProxy's `Maxpipes`.
pub fn pipes_max() -> usize {
    open_max()
}

/// Pipes moving a body now, and pipes kept empty for the next (HAProxy's
/// `PipesUsed` and `PipesFree`).
pub fn pipes() -> (usize, usize) {
    let kept = KEPT.load(Ordering::Relaxed);
    (OPEN.load(Ordering::Relaxed).saturating_sub(kept), kept)
}

/// Response bytes moved to clients through pipes since the process started
/// (HAProxy's `TotalSplicedBytesOut`).
pub fn spliced_bytes() -> u64 {
    SPLICED.load(Ordering::Relaxed)
}

/// The most pipes open at once: a quarter of the file descriptor limit, in
/// descriptors (two per pipe).
fn open_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        let fds = getrlimit(Resource::Nofile).current.unwrap_or(1 << 20);
        usize::try_from(fds / 8).unwrap_or(usize::MAX)
    })
}

/// A pipe and how many bytes it holds.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    held: usize,
}

impl Pipe {
    /// An empty pipe from this thread's list, or a new one (`None` when the
    /// process has no file descriptor left for it: the body is then copied).
    pub(crate) fn take() -> Option<Pipe> {
        if let Some(p) = PIPES.with(|l| l.borrow_mut().pop()) {
            KEPT.fetch_sub(1, Ordering::Relaxed);
            return Some(p);
        }
        OPEN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < open_max()).then_some(n + 1)).ok()?;
        match pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC) {
            Ok((read, write)) => Some(Pipe { read, write, held: 0 }),
            Err(_) => {
                OPEN.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Gives the pipe back for reuse when it is empty; closes it otherwise.
    pub(crate) fn give(self) {
        if self.held == 0 {
            // At thread exit the list may be gone: the pipe is then closed.
            let _ = PIPES.try_with(|l| {
                let mut l = l.borrow_mut();
                if l.len() < KEPT_MAX {
                    KEPT.fetch_add(1, Ordering::Relaxed);
                    l.push(self);
                }
            });
        }
    }

    /// Moves up to `max` bytes the server sent into the (empty) pipe, waiting
    /// until there are some. `Ok(0)`: the server closed.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>, from: &TcpStream, max: u64) -> Poll<io::Result<usize>> {
        debug_assert_eq!(self.held, 0, "a pipe is filled only when empty");
        let len = usize::try_from(max).unwrap_or(usize::MAX).min(FILL_MAX);
        loop {
            ready!(from.poll_read_ready(cx))?;
            let moved = from.try_io(Interest::READABLE, || {
                splice(from, None, &self.write, None, len, SpliceFlags::NONBLOCK | SpliceFlags::MOVE)
                    .map_err(io::Error::from)
            });
            match moved {
                Ok(n) => {
                    self.held = n;
                    return Poll::Ready(Ok(n));
                }
                // Readiness was stale: tokio cleared it; wait again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Moves everything the pipe holds to the client, waiting while its
    /// socket's send buffer is full.
    pub(crate) fn poll_drain(&mut self, cx: &mut Context<'_>, to: &mut LazyTcp) -> Poll<io::Result<()>> {
        while self.held > 0 {
            let (read, held) = (&self.read, self.held);
            let n = ready!(to.poll_write_by(cx, |fd| {
                splice(read, None, fd, None, held, SpliceFlags::NONBLOCK | SpliceFlags::MOVE).map_err(io::Error::from)
            }))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held -= n.min(held);
            SPLICED.fetch_add(n as u64, Ordering::Relaxed);
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// Bytes go from one connection to another through the pipe unchanged, in
    /// fills of at most the asked length, and the emptied pipe is reused.
    #[tokio::test]
    async fn moves_bytes_between_sockets_and_reuses_the_pipe() {
        let (mut server, from) = pair().await;
        let (to, mut client) = pair().await;
        let mut to = LazyTcp::from(to);
        let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let sent = body.clone();
        let writer = tokio::spawn(async move {
            server.write_all(&sent).await.unwrap();
            server
        });
        let reader = tokio::spawn(async move {
            let mut got = vec![0; 300_000];
            client.read_exact(&mut got).await.unwrap();
            got
        });
        let mut pipe = Pipe::take().unwrap();
        let mut left = body.len() as u64;
        while left > 0 {
            let n = std::future::poll_fn(|cx| pipe.poll_fill(cx, &from, left.min(100_000))).await.unwrap();
            assert!(n > 0 && n <= 100_000 && n as u64 <= left, "{n}");
            left -= n as u64;
            std::future::poll_fn(|cx| pipe.poll_drain(cx, &mut to)).await.unwrap();
        }
        assert_eq!(reader.await.unwrap(), body);
        let read_fd = std::os::fd::AsRawFd::as_raw_fd(&pipe.read);
        pipe.give();
        let again = Pipe::take().unwrap();
        assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&again.read), read_fd);
        // The server closing reads as 0.
        drop(writer.await.unwrap());
        let mut again = again;
        assert_eq!(std::future::poll_fn(|cx| again.poll_fill(cx, &from, 10)).await.unwrap(), 0);
    }

    /// A pipe that still holds bytes is closed, not kept.
    #[tokio::test]
    async fn a_pipe_with_bytes_left_is_not_reused() {
        let (mut server, from) = pair().await;
        server.write_all(b"left behind").await.unwrap();
        let mut pipe = Pipe::take().unwrap();
        assert_eq!(std::future::poll_fn(|cx| pipe.poll_fill(cx, &from, 64)).await.unwrap(), 11);
        let before = PIPES.with(|l| l.borrow().len());
        pipe.give();
        assert_eq!(PIPES.with(|l| l.borrow().len()), before);
    }
}
