//! Bytes both ways between a client and a server, as they come, with an idle
//! timeout per side and half-closes passed on.
//!
//! Each direction is a [`Pipe`]: one 16 KiB block, filled by a read on one
//! side and emptied by writes on the other; both are polled by one future in
//! the connection's task (no task per direction, no lock). A pipe holds its
//! block only while it has bytes to write or a read to try: when a read would
//! block and nothing is left to write, the block goes back to the worker's
//! free list (`buf.rs`), so an idle relay (a quiet WebSocket) holds no buffer
//! and one block serves many relays in turn. A side whose read
//! ends (FIN; a TLS close_notify, or a TLS peer that closed without one) has
//! its peer's sending side shut down once what it sent is written, and the
//! other direction goes on, as HAProxy and `tokio::io::copy_bidirectional` do.
//! The relay ends when both directions are shut, when a read or write fails,
//! or when a side stays idle too long.
//!
//! With `global.splice` on and both sides plain TCP, a direction whose read
//! fills a whole block (a bulk transfer: a download, a large message) moves
//! its bytes through a kernel pipe from then on (`splice(2)`, splice.rs):
//! never copied into the process. It goes back to copying when a fill takes
//! less than a block, since for a few bytes (most WebSocket messages) two
//! copies cost less than handing pages to a pipe and back; HAProxy's
//! `option splice-auto` likewise splices only what it sees streaming. A
//! direction holds a pipe only while it splices and gives it back, empty, when
//! its reading side has nothing, as it does a block; when none is to be had
//! (the cap on pipes), that turn copies.
//!
//! Idle, as HAProxy's `timeout client` / `timeout server` mean it: a side is
//! active when a byte is read from it or written to it (or its FIN is read).
//! A side with nothing read from or written to it for its idle time ends the
//! relay. Bytes flowing either way touch both sides, so a transfer that moves
//! never times out; a write that stays blocked (a peer that does not read)
//! leaves both sides idle.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::io::buf::BUF_SIZE;
use crate::io::lazy_tcp::LazyTcp;
use crate::io::splice::{Pipe as KernelPipe, SpliceIo};
use crate::net::tls::ClientStream;
use crate::upstream::UpStream;
use tokio::net::TcpStream;

/// Reads and writes one direction may do in one poll before it lets the other
/// direction and the timer have their turn.
const ROUNDS: usize = 16;

/// What a relay runs between: a byte stream that, when it is a plain TCP
/// socket, bytes can also be spliced from and to.
pub(crate) trait RelayEnd: AsyncRead + AsyncWrite + Unpin {
    /// The plain TCP socket, to splice; `None` for TLS and the like.
    fn spliceable(&mut self) -> Option<&mut dyn SpliceIo>;
}

impl RelayEnd for TcpStream {
    fn spliceable(&mut self) -> Option<&mut dyn SpliceIo> {
        Some(self)
    }
}

impl RelayEnd for LazyTcp {
    fn spliceable(&mut self) -> Option<&mut dyn SpliceIo> {
        Some(self)
    }
}

impl RelayEnd for ClientStream {
    fn spliceable(&mut self) -> Option<&mut dyn SpliceIo> {
        match self {
            ClientStream::Plain(s) => Some(s),
            ClientStream::Tls(_) => None,
        }
    }
}

impl RelayEnd for UpStream {
    fn spliceable(&mut self) -> Option<&mut dyn SpliceIo> {
        self.plain_tcp().map(|s| s as &mut dyn SpliceIo)
    }
}

/// The two ends of a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// Which way bytes go: `Up` from the client to the server, `Down` back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Up,
    Down,
}

/// How long each side may stay idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Idle {
    pub(crate) client: Duration,
    pub(crate) server: Duration,
}

/// Why a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Both sides closed, each close passed on to the other.
    Closed,
    /// Nothing was read from or written to this side for its idle time.
    Timeout(Side),
    /// A read or a write on this side failed (a reset, a broken TLS record).
    Error(Side),
    /// The operator ended it (`shutdown sessions server`): the relay was
    /// dropped where it stood.
    Killed,
}

/// Bytes delivered each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    /// To the server.
    pub(crate) up: u64,
    /// To the client.
    pub(crate) down: u64,
}

/// One direction: bytes read from one side, not yet written to the other.
struct Pipe {
    /// Empty (no block held) while the pipe waits for its reading side with
    /// nothing to write.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The reading side sent its FIN.
    eof: bool,
    /// The FIN was passed on: the writing side's sending side is shut down.
    shut: bool,
    /// Bytes were written since the last flush (TLS may hold records back).
    unflushed: bool,
    /// Bytes read and bytes written, in all.
    read: u64,
    written: u64,
    /// Bytes may go through a kernel pipe (both sides are plain TCP and
    /// `global.splice` is on).
    splice: bool,
    /// The last read filled a whole block (or a fill of the pipe took as
    /// much): a bulk transfer, which the pipe then carries.
    streaming: bool,
    /// The kernel pipe, held while bytes move through it.
    kernel: Option<KernelPipe>,
}

/// What went wrong in a pipe: on its reading or its writing side.
enum Broke {
    Reader,
    Writer,
}

impl Pipe {
    /// A pipe whose first bytes to write are `first` (what was read before
    /// the relay began); `eof`: the reading side has already sent its FIN.
    fn new(first: Vec<u8>, eof: bool, splice: bool) -> Self {
        let end = first.len();
        Pipe {
            buf: first,
            start: 0,
            end,
            eof,
            shut: false,
            unflushed: false,
            read: 0,
            written: 0,
            splice,
            streaming: false,
            kernel: None,
        }
    }

    /// Gives the block back to the free list (when nothing is left to write).
    fn release(&mut self) {
        crate::io::buf::give_block(std::mem::take(&mut self.buf));
    }

    /// Moves bytes from `r` to `w` until one of them has to wait; ready when
    /// the direction is over (the FIN passed on) or broken.
    fn poll_pump<R, W>(&mut self, cx: &mut Context<'_>, r: &mut R, w: &mut W) -> Poll<Result<(), Broke>>
    where
        R: RelayEnd + ?Sized,
        W: RelayEnd + ?Sized,
    {
        for _ in 0..ROUNDS {
            while self.start < self.end {
                match Pin::new(&mut *w).poll_write(cx, &self.buf[self.start..self.end]) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Err(Broke::Writer)),
                    Poll::Ready(Ok(n)) => {
                        self.start += n;
                        self.written += n as u64;
                        self.unflushed = true;
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
            (self.start, self.end) = (0, 0);
            // Splicing while it streams, and until a pipe still holding bytes
            // (a short last fill) is emptied: they go before any read.
            if self.splice
                && (self.streaming || self.kernel.is_some())
                && !self.eof
                && let (Some(from), Some(to)) = (r.spliceable(), w.spliceable())
            {
                // The bytes read before the relay are written: their block goes.
                self.release();
                // Ready: the FIN was read (the writing side is shut down
                // below), or a read was small again or no pipe was to be had
                // (this turn copies).
                ready!(self.poll_splice(cx, from, to))?;
            }
            if self.eof {
                self.release();
                // A peer that is already gone has nothing more to be told.
                return Pin::new(&mut *w).poll_shutdown(cx).map(|_| {
                    self.shut = true;
                    Ok(())
                });
            }
            if self.buf.len() < BUF_SIZE {
                // None held, or the bytes read before the relay (written by now;
                // a block they were read into goes back to the free list first).
                self.release();
                self.buf = crate::io::buf::take_block();
            }
            let mut rb = ReadBuf::new(&mut self.buf);
            match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    self.end = n;
                    self.read += n as u64;
                    self.eof = n == 0;
                    self.streaming = n >= BUF_SIZE;
                }
                // A TLS peer that closed the connection without close_notify.
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => self.eof = true,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(Broke::Reader)),
                Poll::Pending => {
                    self.release();
                    if self.unflushed {
                        match Pin::new(&mut *w).poll_flush(cx) {
                            Poll::Ready(Ok(())) => self.unflushed = false,
                            Poll::Ready(Err(_)) => return Poll::Ready(Err(Broke::Writer)),
                            Poll::Pending => {}
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
        // Busy: yield to the other direction and the timer, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// [`Pipe::poll_pump`] through the kernel pipe: empties it into `to`,
    /// fills it from `from`, until one has to wait (the pipe goes back to the
    /// worker's list when `from` has nothing). Ready, with the pipe given back,
    /// once the FIN is read and all before it written, once a fill takes less
    /// than a block (the transfer is over: back to copying), or when no pipe
    /// is to be had.
    fn poll_splice(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut dyn SpliceIo,
        to: &mut dyn SpliceIo,
    ) -> Poll<Result<(), Broke>> {
        for _ in 0..ROUNDS {
            if let Some(kernel) = self.kernel.as_mut() {
                let held = kernel.held();
                let drained = kernel.poll_drain(cx, to);
                self.written += (held - kernel.held()) as u64;
                match drained {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(Err(Broke::Writer)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if self.eof || !self.streaming {
                self.give_pipe();
                return Poll::Ready(Ok(()));
            }
            // A pipe only once there are bytes: a quiet direction holds none.
            match from.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(Err(Broke::Reader)),
                Poll::Pending => {
                    self.give_pipe();
                    return Poll::Pending;
                }
            }
            let kernel = match self.kernel.take().or_else(KernelPipe::take) {
                Some(k) => self.kernel.insert(k),
                None => return Poll::Ready(Ok(())),
            };
            match kernel.poll_fill(cx, from, u64::MAX) {
                // Urgent data: copied (a read steps over the urgent byte).
                Poll::Ready(Err(e)) if crate::io::splice::is_urgent(&e) => {
                    self.streaming = false;
                    self.give_pipe();
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(0)) => self.eof = true,
                Poll::Ready(Ok(n)) => {
                    self.read += n as u64;
                    self.streaming = n >= BUF_SIZE;
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Err(Broke::Reader)),
                Poll::Pending => {
                    self.give_pipe();
                    return Poll::Pending;
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Gives the kernel pipe (empty) back to the worker's list.
    fn give_pipe(&mut self) {
        if let Some(kernel) = self.kernel.take() {
            kernel.give();
        }
    }

    /// A mark of how far it got: what changed since tells who was active.
    fn progress(&self) -> (u64, u64, bool) {
        (self.read, self.written, self.eof)
    }
}

/// Relays between `client` and `server` until both have closed, one fails,
/// or one stays idle for longer than `idle` allows. `first`: bytes already
/// read from the client, to go to the server first; `client_eof`: the client
/// already sent its FIN. `splice`: bytes may go through kernel pipes when both
/// sides are plain TCP (`global.splice`). `moved` is told of the bytes
/// delivered each way as they go (for counters that must not wait for the end).
pub(crate) async fn relay<C, S>(
    client: &mut C,
    server: &mut S,
    (first, client_eof): (Vec<u8>, bool),
    splice: bool,
    idle: Idle,
    mut moved: impl FnMut(Way, u64),
) -> (End, Moved)
where
    C: RelayEnd + ?Sized,
    S: RelayEnd + ?Sized,
{
    let splice = splice && client.spliceable().is_some() && server.spliceable().is_some();
    let mut up = Pipe::new(first, client_eof, splice);
    let mut down = Pipe::new(Vec::new(), false, splice);
    let now = Instant::now();
    let (mut client_seen, mut server_seen) = (now, now);
    let sleep = tokio::time::sleep_until(now + idle.client.min(idle.server));
    tokio::pin!(sleep);
    let end = std::future::poll_fn(|cx| {
        let now = Instant::now();
        for (way, pipe) in [(Way::Up, &mut up), (Way::Down, &mut down)] {
            if pipe.shut {
                continue;
            }
            let (reader, writer) = match way {
                Way::Up => (Side::Client, Side::Server),
                Way::Down => (Side::Server, Side::Client),
            };
            let before = pipe.progress();
            let r = match way {
                Way::Up => pipe.poll_pump(cx, &mut *client, &mut *server),
                Way::Down => pipe.poll_pump(cx, &mut *server, &mut *client),
            };
            let after = pipe.progress();
            if after.0 != before.0 || after.2 != before.2 {
                *seen(reader, &mut client_seen, &mut server_seen) = now;
            }
            if after.1 != before.1 {
                *seen(writer, &mut client_seen, &mut server_seen) = now;
                moved(way, after.1 - before.1);
            }
            match r {
                Poll::Ready(Err(Broke::Reader)) => return Poll::Ready(End::Error(reader)),
                Poll::Ready(Err(Broke::Writer)) => return Poll::Ready(End::Error(writer)),
                Poll::Ready(Ok(())) | Poll::Pending => {}
            }
        }
        if up.shut && down.shut {
            return Poll::Ready(End::Closed);
        }
        // The timer is moved only when it fires: the deadline only ever
        // grows (both sides' last activity only moves forward), so a timer
        // set to an earlier deadline fires early, and is then set to the
        // current one or ends the relay. Resetting it on every turn that
        // moved bytes would take the timer driver's lock once per turn.
        loop {
            ready!(sleep.as_mut().poll(cx));
            let (client_until, server_until) = (client_seen + idle.client, server_seen + idle.server);
            let until = client_until.min(server_until);
            if until <= Instant::now() {
                let side = if client_until <= server_until { Side::Client } else { Side::Server };
                return Poll::Ready(End::Timeout(side));
            }
            sleep.as_mut().reset(until);
        }
    })
    .await;
    (end, Moved { up: up.written, down: down.written })
}

fn seen<'a>(side: Side, client: &'a mut Instant, server: &'a mut Instant) -> &'a mut Instant {
    match side {
        Side::Client => client,
        Side::Server => server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::splice::tcp_pair;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    const LONG: Duration = Duration::from_secs(3600);

    impl RelayEnd for DuplexStream {
        fn spliceable(&mut self) -> Option<&mut dyn SpliceIo> {
            None
        }
    }

    /// How a relay ended, what it moved, and what it told as it went.
    type Outcome = tokio::task::JoinHandle<(End, Moved, Vec<(Way, u64)>)>;

    /// A relay between two in-memory pipes: (the client's end, the server's
    /// end, the relay).
    fn pair(first: &[u8], idle: Idle) -> (DuplexStream, DuplexStream, Outcome) {
        let (client, mut proxy_client) = duplex(64 * 1024);
        let (server, mut proxy_server) = duplex(64 * 1024);
        let first = first.to_vec();
        let task = tokio::spawn(async move {
            let mut log = Vec::new();
            let count = |w, n| log.push((w, n));
            let (end, moved) = relay(&mut proxy_client, &mut proxy_server, (first, false), true, idle, count).await;
            (end, moved, log)
        });
        (client, server, task)
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_half_closes_are_passed_on() {
        let (mut c, mut s, task) = pair(b"hello ", Idle { client: LONG, server: LONG });
        c.write_all(b"server").await.unwrap();
        let mut got = [0u8; 12];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello server", "the first bytes go first");
        // The client is done sending: the server reads the end, and still answers.
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        s.write_all(b"answer after the half-close").await.unwrap();
        let mut back = vec![0u8; 27];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(back, b"answer after the half-close");
        s.shutdown().await.unwrap();
        assert_eq!(c.read(&mut back).await.unwrap(), 0);
        let (end, moved, log) = task.await.unwrap();
        assert_eq!(end, End::Closed);
        assert_eq!(moved, Moved { up: 12, down: 27 });
        let sum = |way| log.iter().filter(|(w, _)| *w == way).map(|(_, n)| n).sum::<u64>();
        assert_eq!((sum(Way::Up), sum(Way::Down)), (12, 27), "told as they go");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_side_times_out_and_traffic_keeps_both_alive() {
        let idle = Idle { client: Duration::from_secs(10), server: Duration::from_secs(30) };
        let (mut c, mut s, task) = pair(b"", idle);
        // The server streams for 60 s, a byte every 5 s: both sides stay active.
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            s.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            c.read_exact(&mut b).await.unwrap();
        }
        assert!(!task.is_finished());
        // Then silence: the client side's 10 s end it.
        let started = Instant::now();
        let (end, moved, _) = task.await.unwrap();
        assert_eq!(end, End::Timeout(Side::Client));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert_eq!(moved.down, 12);
        drop((c, s));

        let idle = Idle { client: Duration::from_secs(30), server: Duration::from_secs(10) };
        let (_c, _s, task) = pair(b"", idle);
        assert_eq!(task.await.unwrap().0, End::Timeout(Side::Server));
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_read_is_idle() {
        let idle = Idle { client: Duration::from_secs(10), server: Duration::from_secs(3600) };
        let (c, mut s, task) = pair(b"", idle);
        // The server sends more than every buffer holds; the client reads nothing.
        let writer = tokio::spawn(async move {
            let block = vec![0u8; 64 * 1024];
            while s.write_all(&block).await.is_ok() {}
        });
        let (end, moved, _) = task.await.unwrap();
        assert_eq!(end, End::Timeout(Side::Client));
        assert!(moved.down >= 64 * 1024 && moved.down < 10 * 64 * 1024, "{moved:?}");
        drop(c);
        writer.await.unwrap();
    }

    /// A relay waiting on both sides holds no buffer: its blocks are back in
    /// the worker's free list, and it takes one again when bytes come.
    #[tokio::test]
    async fn an_idle_relay_holds_no_buffer_and_still_relays() {
        // The relay runs on this thread (current-thread runtime): its free list
        // is this one. Empty it, so that each block the relay takes is new.
        while crate::io::buf::free_blocks() > 0 {
            drop(crate::io::buf::take_block());
        }
        let (mut c, mut s, task) = pair(b"first ", Idle { client: LONG, server: LONG });
        for round in 0..3 {
            c.write_all(b"ping").await.unwrap();
            let mut up = [0u8; 10];
            let n = if round == 0 { 10 } else { 4 };
            s.read_exact(&mut up[..n]).await.unwrap();
            assert_eq!(&up[..n], if round == 0 { &b"first ping"[..] } else { &b"ping"[..] });
            s.write_all(b"pong").await.unwrap();
            let mut down = [0u8; 4];
            c.read_exact(&mut down).await.unwrap();
            assert_eq!(&down, b"pong");
            // Both reads now wait: the one block the two directions took in
            // turn is back, and nothing else was allocated.
            assert_eq!(crate::io::buf::free_blocks(), 1, "round {round}");
        }
        drop((c, s));
        let (end, moved, _) = task.await.unwrap();
        assert_eq!(end, End::Closed);
        assert_eq!(moved, Moved { up: 18, down: 12 });
    }

    /// Between plain TCP sockets, with `splice` and without: the first bytes
    /// go first, a megabyte each way arrives whole and in order, a few bytes
    /// then too, half-closes are passed on. With `splice`, each megabyte goes
    /// through a pipe, and a relay waiting on both sides holds none: the one
    /// pipe it made is back in the worker's list after each transfer. Small
    /// messages are copied (no pipe taken).
    #[tokio::test]
    async fn tcp_sockets_relay_through_pipes_or_copies() {
        for splice in [true, false] {
            let (mut c, mut proxy_client) = tcp_pair().await;
            let (mut s, mut proxy_server) = tcp_pair().await;
            // The relay and this test share the thread (a current-thread
            // runtime), and its list of pipes: emptied, it shows what the
            // relay takes and gives back.
            crate::io::splice::close_kept_here();
            let spliced_before = crate::io::splice::spliced_bytes();
            let task = tokio::spawn(async move {
                let idle = Idle { client: LONG, server: LONG };
                relay(&mut proxy_client, &mut proxy_server, (b"first".to_vec(), false), splice, idle, |_, _| {}).await
            });
            let pipes_kept = if splice { 1 } else { 0 };
            let up: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
            let sent = up.clone();
            let writer = tokio::spawn(async move {
                c.write_all(&sent).await.unwrap();
                c
            });
            let mut got = vec![0u8; 5 + up.len()];
            s.read_exact(&mut got).await.unwrap();
            assert!(got.starts_with(b"first") && got[5..] == up[..], "splice {splice}: up in order");
            let mut c = writer.await.unwrap();
            assert_eq!(crate::io::splice::kept_here(), pipes_kept, "splice {splice}: after the upload");

            let down: Vec<u8> = (0..1_000_000u32).map(|i| (i % 241) as u8).collect();
            let sent = down.clone();
            let writer = tokio::spawn(async move {
                s.write_all(&sent).await.unwrap();
                s
            });
            let mut got = vec![0u8; down.len()];
            c.read_exact(&mut got).await.unwrap();
            assert!(got == down, "splice {splice}: down in order");
            let mut s = writer.await.unwrap();
            assert_eq!(crate::io::splice::kept_here(), pipes_kept, "splice {splice}: after the download");
            if splice {
                // Most of the two megabytes (not the first block of each).
                let spliced = crate::io::splice::spliced_bytes() - spliced_before;
                assert!(spliced >= 1_000_000, "splice {splice}: {spliced} bytes spliced");
            }

            // A few bytes each way. The first message after a transfer may
            // still take the pipe (the direction was streaming when it last
            // waited); from the next on, they are copied and take none.
            for round in 0..2 {
                crate::io::splice::close_kept_here();
                let mut x = [0u8; 4];
                c.write_all(b"ping").await.unwrap();
                s.read_exact(&mut x).await.unwrap();
                assert_eq!(&x, b"ping");
                s.write_all(b"pong").await.unwrap();
                c.read_exact(&mut x).await.unwrap();
                assert_eq!(&x, b"pong");
                if round == 1 {
                    assert_eq!(crate::io::splice::kept_here(), 0, "splice {splice}: small messages take no pipe");
                }
            }

            c.shutdown().await.unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "splice {splice}");
            s.write_all(b"after the half-close").await.unwrap();
            s.shutdown().await.unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).await.unwrap();
            assert_eq!(back, b"after the half-close");
            let (end, moved) = task.await.unwrap();
            assert_eq!(end, End::Closed);
            assert_eq!(moved, Moved { up: 5 + 1_000_008, down: 1_000_028 }, "splice {splice}");
        }
    }

    /// A writing side that can be made to wait (a client whose window is
    /// full), around a real socket.
    struct Gate {
        inner: TcpStream,
        blocked: bool,
    }

    impl AsyncRead for Gate {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Gate {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            if self.blocked {
                return Poll::Pending;
            }
            Pin::new(&mut self.inner).poll_write(cx, data)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    impl SpliceIo for Gate {
        fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.inner.poll_read_ready(cx)
        }

        fn poll_read_by(
            &mut self,
            cx: &mut Context<'_>,
            op: &mut crate::io::lazy_tcp::FdOp<'_>,
        ) -> Poll<io::Result<usize>> {
            SpliceIo::poll_read_by(&mut self.inner, cx, op)
        }

        fn poll_write_by(
            &mut self,
            cx: &mut Context<'_>,
            op: &mut crate::io::lazy_tcp::FdOp<'_>,
        ) -> Poll<io::Result<usize>> {
            if self.blocked {
                return Poll::Pending;
            }
            SpliceIo::poll_write_by(&mut self.inner, cx, op)
        }
    }

    impl RelayEnd for Gate {
        fn spliceable(&mut self) -> Option<&mut dyn SpliceIo> {
            Some(self)
        }
    }

    /// One direction driven by hand: `sender` writes into `from`, the
    /// direction `way` moves it to `to`, and `receiver` reads it there.
    struct Rig {
        sender: TcpStream,
        from: TcpStream,
        to: Gate,
        receiver: TcpStream,
        way: Pipe,
    }

    impl Rig {
        async fn new() -> Rig {
            let (sender, from) = tcp_pair().await;
            let (receiver, to) = tcp_pair().await;
            let to = Gate { inner: to, blocked: false };
            Rig { sender, from, to, receiver, way: Pipe::new(Vec::new(), false, true) }
        }

        /// Once `from` has bytes, one poll of the direction with this task's
        /// waker; it must go on (not end).
        async fn pump(&mut self, stalled: &str) {
            let wait = tokio::time::timeout(Duration::from_secs(10), self.from.readable());
            wait.await.expect(stalled).unwrap();
            let Rig { from, to, way, .. } = self;
            let r = std::future::poll_fn(|cx| Poll::Ready(way.poll_pump(cx, from, to))).await;
            assert!(r.is_pending(), "the direction ended");
        }

        /// Sends a whole block and pumps until it is read: the direction
        /// streams. Returns the block.
        async fn stream_a_block(&mut self) -> Vec<u8> {
            let block = vec![b'a'; BUF_SIZE];
            self.sender.write_all(&block).await.unwrap();
            while self.way.read < BUF_SIZE as u64 {
                self.pump("the block was not read").await;
            }
            assert!(self.way.streaming);
            block
        }
    }

    /// A short fill ends a streaming direction's splicing, but what it put in
    /// the pipe goes out before anything read after it, even when the writing
    /// side had to wait in between.
    #[tokio::test]
    async fn bytes_left_in_the_pipe_go_before_later_ones() {
        let mut rig = Rig::new().await;
        let block = rig.stream_a_block().await;
        // A short fill, then the client's side waits: the bytes stay in the pipe.
        rig.sender.write_all(&[b'b'; 100]).await.unwrap();
        rig.to.blocked = true;
        while rig.way.read < BUF_SIZE as u64 + 100 {
            rig.pump("the short fill was not read").await;
        }
        let way = &rig.way;
        assert!(!way.streaming && way.kernel.as_ref().is_some_and(|k| k.held() == 100), "held in the pipe");
        // Then more comes, and the client's side takes bytes again.
        rig.sender.write_all(b"later").await.unwrap();
        rig.to.blocked = false;
        while rig.way.written < BUF_SIZE as u64 + 105 {
            rig.pump("bytes to read: the relay waits for bytes that came").await;
        }
        let mut got = vec![0u8; BUF_SIZE + 105];
        rig.receiver.read_exact(&mut got).await.unwrap();
        assert!(got[..BUF_SIZE] == block[..] && got[BUF_SIZE..BUF_SIZE + 100] == [b'b'; 100]);
        assert_eq!(&got[BUF_SIZE + 100..], b"later");
        assert!(rig.way.kernel.is_none(), "the emptied pipe went back");
    }

    /// TCP urgent data in a spliced stream (telnet sends it to interrupt):
    /// `splice` cannot take it and answers EAGAIN as if nothing were there,
    /// so that turn copies instead (a read steps over the urgent byte, as a copying
    /// relay's does); the stream goes on, not ended as if the client closed.
    #[tokio::test]
    async fn urgent_data_in_a_spliced_stream_is_copied_past() {
        let mut rig = Rig::new().await;
        let block = rig.stream_a_block().await;
        socket2::SockRef::from(&rig.sender).send_out_of_band(b"!").unwrap();
        rig.sender.write_all(b"after").await.unwrap();
        while rig.way.read < BUF_SIZE as u64 + 5 && !rig.way.eof {
            rig.pump("the stream stalled at the urgent byte").await;
        }
        assert!(!rig.way.eof && !rig.way.shut, "urgent data taken for the end");
        let mut got = vec![0u8; BUF_SIZE + 5];
        rig.receiver.read_exact(&mut got).await.unwrap();
        assert!(got[..BUF_SIZE] == block[..]);
        assert_eq!(&got[BUF_SIZE..], b"after");
    }

    #[tokio::test]
    async fn a_broken_side_ends_the_relay() {
        let (c, s, task) = pair(b"", Idle { client: LONG, server: LONG });
        drop(s);
        // The server's end is gone: writing what the client sends fails.
        let mut c = c;
        let _ = c.write_all(b"to nobody").await;
        assert_eq!(task.await.unwrap().0, End::Error(Side::Server));
    }
}
