//! Bytes moved from one socket to another through a pipe with `splice(2)`,
//! never copied into the process (HAProxy's `option splice-auto`): large
//! response and request bodies, and tunnels (WebSocket, TCP mode).
//!
//! Copying a large body costs two copies per byte: `read` from the server's
//! socket into a buffer, `write` from it into the client's. On 160 KiB
//! responses those copies were a quarter of the proxy's CPU (`perf`: 12% in
//! `_copy_to_iter`, 10% in `_copy_from_iter`, more in the user-copy checks).
//! `splice` hands the socket's pages to a pipe and the pipe's pages to the
//! other socket instead. With `global.splice` on, and both sockets plain TCP:
//! - conn.rs moves this way a response body with a Content-Length that the
//!   cache does not keep and that did not fit in the read that brought its
//!   head, and likewise a request body (an upload);
//! - tcp/relay.rs moves this way both directions of a tunnel (a WebSocket
//!   after its 101, a TCP-mode session), taking a pipe only while bytes move.
//!
//! Pipes are kept per worker thread (two file descriptors each) and reused, so
//! a body or a burst costs no `pipe2` or `close`. A pipe goes back to the list
//! only empty; one still holding bytes (its reader left) is closed. Pipes in
//! use and kept together take at most a quarter of the process's file
//! descriptor limit (`RLIMIT_NOFILE`) in descriptors, an eighth in pipes, so
//! that they never leave connections without one (HAProxy's `maxpipes` is
//! likewise a quarter of `maxconn`); past that, and whenever `pipe2` fails, the
//! bytes are copied.
//!
//! The pipe is filled only when empty and emptied completely before the next
//! fill. With the pipe empty, a fill that finds nothing (`EAGAIN`) means the
//! socket has nothing: a non-empty pipe could also answer `EAGAIN` because it
//! is full, and taking that for "nothing to read" would clear the socket's
//! readiness while bytes wait in it.

use crate::io::lazy_tcp::{FdOp, LazyTcp, poll_by};
use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use socket2::SockRef;
use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
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
/// Bytes moved out of pipes, either way.
static SPLICED: AtomicU64 = AtomicU64::new(0);

/// Pipes moving bytes now, and pipes kept empty for the next (HAProxy's
/// `PipesUsed` and `PipesFree`).
pub fn pipes() -> (usize, usize) {
    let kept = KEPT.load(Ordering::Relaxed);
    (OPEN.load(Ordering::Relaxed).saturating_sub(kept), kept)
}

/// Bytes moved through pipes since the process started, to clients and to
/// servers (HAProxy's `TotalSplicedBytesOut`).
pub fn spliced_bytes() -> u64 {
    SPLICED.load(Ordering::Relaxed)
}

/// The most pipes open at once (HAProxy's `Maxpipes`): a quarter of the file
/// descriptor limit (as raised at start, limits.rs), in descriptors (two per
/// pipe). The derived `global.max_connections` leaves them that share.
pub fn pipes_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| crate::io::limits::pipes_for(crate::io::limits::nofile().current))
}

/// Closes the pipes this thread keeps (tests: what a relay gives back then
/// shows in [`kept_here`]).
#[cfg(test)]
pub(crate) fn close_kept_here() {
    let kept = PIPES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    KEPT.fetch_sub(kept.len(), Ordering::Relaxed);
}

/// Pipes this thread keeps for reuse.
#[cfg(test)]
pub(crate) fn kept_here() -> usize {
    PIPES.with(|l| l.borrow().len())
}

/// Two connected TCP sockets on 127.0.0.1: (the connecting one, the accepted one).
#[cfg(test)]
pub(crate) async fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    (ours, l.accept().await.unwrap().0)
}

/// Why a fill failed: urgent data in the socket ([`Pipe::poll_fill`]).
#[derive(Debug)]
struct Urgent;

impl std::fmt::Display for Urgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TCP urgent data, which splice cannot move")
    }
}

impl std::error::Error for Urgent {}

/// Whether a fill failed on urgent data (the bytes are then to be read).
pub(crate) fn is_urgent(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Urgent>())
}

/// A socket that bytes can be spliced from and to. `op` is tried on its file
/// descriptor; when it would block, the socket waits for the reactor to say it
/// is ready, and `op` is tried again.
pub(crate) trait SpliceIo {
    /// Ready when there may be bytes to read (for a socket not yet
    /// registered with the reactor: at once, as nothing says otherwise).
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn poll_read_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>>;
    fn poll_write_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>>;
}

impl SpliceIo for TcpStream {
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }

    fn poll_read_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>> {
        poll_by(self, cx, Interest::READABLE, op)
    }

    fn poll_write_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>> {
        poll_by(self, cx, Interest::WRITABLE, op)
    }
}

impl SpliceIo for LazyTcp {
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        LazyTcp::poll_read_ready(self, cx)
    }

    fn poll_read_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>> {
        LazyTcp::poll_read_by(self, cx, op)
    }

    fn poll_write_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>> {
        LazyTcp::poll_write_by(self, cx, op)
    }
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
        OPEN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < pipes_max()).then_some(n + 1)).ok()?;
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

    /// Bytes in the pipe, not yet moved on.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Moves up to `max` bytes (at most [`FILL_MAX`]) from `from` into the
    /// (empty) pipe, waiting until there are some. `Ok(0)`: `from` closed.
    /// An error for which [`is_urgent`] holds: the socket has TCP urgent data,
    /// which `splice` cannot take; a `read` can (it steps over the urgent byte).
    /// That costs a `recv` peek each time the socket turns out empty (about
    /// one per response): in TCP mode at 160 KiB, from nothing to 9% of the
    /// CPU per request in different runs of alternating rounds; the price of
    /// never stalling on urgent data (HAProxy's splice stalls there).
    /// `FIONREAD` cannot stand in for it: it counts only up to the urgent mark.
    pub(crate) fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut dyn SpliceIo,
        max: u64,
    ) -> Poll<io::Result<usize>> {
        debug_assert_eq!(self.held, 0, "a pipe is filled only when empty");
        let len = usize::try_from(max).unwrap_or(usize::MAX).min(FILL_MAX);
        let write = &self.write;
        let n = ready!(from.poll_read_by(cx, &mut |fd| {
            let fill = || splice(fd, None, write, None, len, SpliceFlags::NONBLOCK | SpliceFlags::MOVE);
            match fill() {
                // On a non-blocking socket `splice` answers EAGAIN also when
                // it stops at TCP urgent data, which it cannot move, with
                // bytes waiting (tcp_splice_read): taken for "nothing", that
                // would clear the readiness and stall the stream. A peek tells
                // them apart; a second try, bytes that came meanwhile.
                Err(Errno::AGAIN) => match SockRef::from(&fd).peek(&mut [MaybeUninit::uninit()])? {
                    0 => Ok(0),
                    _ => match fill() {
                        Err(Errno::AGAIN) => Err(io::Error::other(Urgent)),
                        r => r.map_err(io::Error::from),
                    },
                },
                r => r.map_err(io::Error::from),
            }
        }))?;
        self.held = n;
        Poll::Ready(Ok(n))
    }

    /// Moves everything the pipe holds to `to`, waiting while its socket's
    /// send buffer is full ([`Pipe::held`] says how far it got meanwhile).
    pub(crate) fn poll_drain(&mut self, cx: &mut Context<'_>, to: &mut dyn SpliceIo) -> Poll<io::Result<()>> {
        while self.held > 0 {
            let (read, held) = (&self.read, self.held);
            let n = ready!(to.poll_write_by(cx, &mut |fd| {
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

    /// Bytes go from one connection to another through the pipe unchanged, in
    /// fills of at most the asked length, and the emptied pipe is reused.
    #[tokio::test]
    async fn moves_bytes_between_sockets_and_reuses_the_pipe() {
        let (mut server, mut from) = tcp_pair().await;
        let (to, mut client) = tcp_pair().await;
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
            let n = std::future::poll_fn(|cx| pipe.poll_fill(cx, &mut from, left.min(100_000))).await.unwrap();
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
        assert_eq!(std::future::poll_fn(|cx| again.poll_fill(cx, &mut from, 10)).await.unwrap(), 0);
    }

    /// A pipe that still holds bytes is closed, not kept.
    #[tokio::test]
    async fn a_pipe_with_bytes_left_is_not_reused() {
        let (mut server, mut from) = tcp_pair().await;
        server.write_all(b"left behind").await.unwrap();
        let mut pipe = Pipe::take().unwrap();
        assert_eq!(std::future::poll_fn(|cx| pipe.poll_fill(cx, &mut from, 64)).await.unwrap(), 11);
        let before = kept_here();
        pipe.give();
        assert_eq!(kept_here(), before);
    }
}
