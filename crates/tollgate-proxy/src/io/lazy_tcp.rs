//! A client's TCP socket, registered with the reactor only once it has to wait.
//!
//! Tokio registers every socket it accepts with epoll (`EPOLL_CTL_ADD`) and
//! removes it before closing it (`EPOLL_CTL_DEL`): two system calls on every
//! connection. With `Connection: close` a socket often never has to wait: the
//! request is already in it when it is accepted, the response fits in its send
//! buffer, and it is closed. HAProxy tries the read first and subscribes to the
//! poller only when it finds nothing; it makes 0.03 `epoll_ctl` per connection
//! (docs/architecture.md, "Per connection, with Connection: close").
//!
//! [`LazyTcp`] does the same. It reads and writes the socket directly until an
//! operation would block, and registers it then, for good; a socket that never
//! waited is closed without ever having been registered. Tokio has no such mode
//! (a `TcpStream` is registered when it is made), hence this wrapper: accepting
//! here with `accept4` rather than through `tokio::net::TcpListener`, which
//! would register the socket.
//!
//! Direct reads and writes take from the task's cooperative budget as tokio's
//! own I/O does, so a client whose bytes never run out still lets the other
//! tasks of its worker run.

use socket2::SockRef;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::coop;

/// A TCP socket used directly until it must wait, then through tokio.
#[derive(Debug)]
pub struct LazyTcp(State);

#[derive(Debug)]
enum State {
    /// Not registered with the reactor; non-blocking.
    Direct(std::net::TcpStream),
    Registered(TcpStream),
    /// Registration failed: the socket is closed and every use errs.
    Lost,
}

/// Accepts one connection on the non-blocking listener `l`, non-blocking and
/// close-on-exec from the start (one `accept4`), not registered.
pub fn accept(l: &std::net::TcpListener) -> io::Result<(LazyTcp, SocketAddr)> {
    let (socket, addr) = SockRef::from(l).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    let peer = addr.as_socket().ok_or_else(|| io::Error::other("accepted a connection that is not TCP/IP"))?;
    Ok((LazyTcp(State::Direct(socket.into())), peer))
}

impl From<TcpStream> for LazyTcp {
    fn from(s: TcpStream) -> Self {
        LazyTcp(State::Registered(s))
    }
}

fn lost() -> io::Error {
    io::Error::other("the socket could not be registered with the reactor")
}

impl LazyTcp {
    /// The socket registered with the reactor, for the paths that wait from
    /// the start (a TLS handshake, a tcp-mode relay).
    pub fn registered(self) -> io::Result<TcpStream> {
        match self.0 {
            State::Direct(s) => TcpStream::from_std(s),
            State::Registered(s) => Ok(s),
            State::Lost => Err(lost()),
        }
    }

    /// Registers the socket (if it is not yet) and returns tokio's stream.
    fn register(&mut self) -> io::Result<&mut TcpStream> {
        if matches!(self.0, State::Direct(_))
            && let State::Direct(s) = std::mem::replace(&mut self.0, State::Lost)
        {
            self.0 = State::Registered(TcpStream::from_std(s)?);
        }
        match &mut self.0 {
            State::Registered(s) => Ok(s),
            _ => Err(lost()),
        }
    }

    /// Whether the socket has been registered (it had to wait once).
    #[cfg(test)]
    fn is_registered(&self) -> bool {
        matches!(self.0, State::Registered(_))
    }

    fn sock(&self) -> io::Result<SockRef<'_>> {
        match &self.0 {
            State::Direct(s) => Ok(SockRef::from(s)),
            State::Registered(s) => Ok(SockRef::from(s)),
            State::Lost => Err(lost()),
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock()?.local_addr()?.as_socket().ok_or_else(|| io::Error::other("not a TCP/IP socket"))
    }

    /// The socket's descriptor (none once registration failed).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.0 {
            State::Direct(s) => Some(s.as_fd()),
            State::Registered(s) => Some(s.as_fd()),
            State::Lost => None,
        }
    }

    /// Polls for what the client sends (0: it closed), as a non-blocking read
    /// that may find nothing (`WouldBlock`; the next poll then waits).
    pub fn poll_read_some(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        if let Some(r) = ready!(self.poll_direct(cx, |s| s.read(buf))) {
            return Poll::Ready(r);
        }
        // Nothing there: from now on the reactor says when there is.
        let s = self.register()?;
        ready!(s.poll_read_ready(cx))?;
        Poll::Ready(s.try_read(buf))
    }

    /// Polls a read made by other means than `read(2)` (a `splice` into a
    /// pipe, splice.rs): `op` is given the socket and its result returned,
    /// unless it would block; then the socket is registered and `op` tried
    /// again once the reactor says there are bytes.
    pub(crate) fn poll_read_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>> {
        if let Some(r) = ready!(self.poll_direct(cx, |s| op(s.as_fd()))) {
            return Poll::Ready(r);
        }
        poll_by(self.register()?, cx, Interest::READABLE, op)
    }

    /// Ready when the socket may have bytes: at once while it is not
    /// registered (nothing says it has none), else when the reactor says so.
    pub(crate) fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.0 {
            State::Direct(_) => Poll::Ready(Ok(())),
            State::Registered(s) => s.poll_read_ready(cx),
            State::Lost => Poll::Ready(Err(lost())),
        }
    }

    /// [`LazyTcp::poll_read_by`] for a write (a `splice` from a pipe).
    pub(crate) fn poll_write_by(&mut self, cx: &mut Context<'_>, op: &mut FdOp<'_>) -> Poll<io::Result<usize>> {
        if let Some(r) = ready!(self.poll_direct(cx, |s| op(s.as_fd()))) {
            return Poll::Ready(r);
        }
        poll_by(self.register()?, cx, Interest::WRITABLE, op)
    }

    /// `op` on the socket itself while it is not registered, within the
    /// task's cooperative budget: `Some` with its result, or `None` once it
    /// would block (or the socket is registered), for the caller to go through
    /// tokio's stream from then on.
    fn poll_direct<T>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(&mut std::net::TcpStream) -> io::Result<T>,
    ) -> Poll<Option<io::Result<T>>> {
        let State::Direct(s) = &mut self.0 else { return Poll::Ready(None) };
        let budget = ready!(coop::poll_proceed(cx));
        match op(s) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Ready(None),
            r => {
                budget.made_progress();
                Poll::Ready(Some(r))
            }
        }
    }
}

impl AsyncRead for LazyTcp {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(r) = ready!(this.poll_direct(cx, |s| s.read(buf.initialize_unfilled()))) {
            buf.advance(r?);
            return Poll::Ready(Ok(()));
        }
        Pin::new(this.register()?).poll_read(cx, buf)
    }
}

impl AsyncWrite for LazyTcp {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(r) = ready!(this.poll_direct(cx, |s| s.write(data))) {
            return Poll::Ready(r);
        }
        Pin::new(this.register()?).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(r) = ready!(this.poll_direct(cx, |s| s.write_vectored(bufs))) {
            return Poll::Ready(r);
        }
        Pin::new(this.register()?).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            State::Direct(s) => Poll::Ready(s.shutdown(Shutdown::Write)),
            State::Registered(s) => Pin::new(s).poll_shutdown(cx),
            State::Lost => Poll::Ready(Err(lost())),
        }
    }
}

/// A system call on a socket's file descriptor, moving bytes.
pub(crate) type FdOp<'a> = dyn FnMut(BorrowedFd<'_>) -> io::Result<usize> + 'a;

/// `op` on a registered socket once it is ready for `interest`; a
/// `WouldBlock` clears the readiness (stale) and waits again.
pub(crate) fn poll_by(
    s: &TcpStream,
    cx: &mut Context<'_>,
    interest: Interest,
    op: &mut FdOp<'_>,
) -> Poll<io::Result<usize>> {
    loop {
        if interest.is_readable() {
            ready!(s.poll_read_ready(cx))?;
        } else {
            ready!(s.poll_write_ready(cx))?;
        }
        match s.try_io(interest, || op(s.as_fd())) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A blocking listener (accept waits for the client) and a connected client.
    async fn pair() -> (LazyTcp, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, peer) = accept(&l).unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert!(!server.is_registered());
        (server, client)
    }

    /// Waits until `s` has bytes to read, on a duplicate of its descriptor (so
    /// `s` itself stays unregistered).
    async fn until_readable(s: &LazyTcp) {
        let State::Direct(std) = &s.0 else { panic!("registered already") };
        let dup = TcpStream::from_std(std.try_clone().unwrap()).unwrap();
        dup.readable().await.unwrap();
    }

    async fn read_some(s: &mut LazyTcp, buf: &mut [u8]) -> io::Result<usize> {
        std::future::poll_fn(|cx| s.poll_read_some(cx, buf)).await
    }

    #[tokio::test]
    async fn a_connection_that_never_waits_is_never_registered() {
        let (mut server, mut client) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        until_readable(&server).await;
        let mut buf = [0u8; 64];
        assert_eq!(read_some(&mut server, &mut buf).await.unwrap(), 18);
        assert_eq!(&buf[..18], b"GET / HTTP/1.1\r\n\r\n");
        server.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
        server.shutdown().await.unwrap();
        assert!(!server.is_registered());
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    }

    #[tokio::test]
    async fn a_read_that_finds_nothing_registers_and_waits_for_the_bytes() {
        let (mut server, mut client) = pair().await;
        let mut buf = [0u8; 64];
        let first = std::future::poll_fn(|cx| Poll::Ready(server.poll_read_some(cx, &mut buf))).await;
        assert!(first.is_pending(), "{first:?}");
        assert!(server.is_registered());
        client.write_all(b"late").await.unwrap();
        let n = read_some(&mut server, &mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"late");
        // The AsyncRead side reads the same socket; 0 once the client closed.
        client.write_all(b"more").await.unwrap();
        let mut four = [0u8; 4];
        server.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"more");
        drop(client);
        assert_eq!(read_some(&mut server, &mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_write_the_socket_cannot_take_registers_and_completes() {
        let (mut server, mut client) = pair().await;
        // Small buffers both ends, so that 4 MiB cannot fit in them.
        SockRef::from(&client).set_recv_buffer_size(64 << 10).unwrap();
        server.sock().unwrap().set_send_buffer_size(64 << 10).unwrap();
        let body: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
        let expect = body.clone();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        });
        server.write_all(&body).await.unwrap();
        assert!(server.is_registered(), "4 MiB fit in the socket buffers");
        server.shutdown().await.unwrap();
        drop(server);
        assert!(reader.await.unwrap() == expect);
    }

    #[tokio::test]
    async fn the_async_read_side_reads_directly_until_empty() {
        let (mut server, mut client) = pair().await;
        client.write_all(b"PROXY UNKNOWN\r\n").await.unwrap();
        until_readable(&server).await;
        let mut line = [0u8; 15];
        server.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"PROXY UNKNOWN\r\n");
        assert!(!server.is_registered());
        assert_eq!(server.local_addr().unwrap(), client.peer_addr().unwrap());
        let tokio = server.registered().unwrap();
        assert_eq!(tokio.peer_addr().unwrap(), client.local_addr().unwrap());
    }
}
