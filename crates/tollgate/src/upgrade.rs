//! Hot binary upgrade: a running Tollgate starts the binary at its own path
//! and hands it its listening sockets, which it keeps serving from; the old
//! process then stops accepting and finishes its connections (SIGUSR2, or
//! `tollgate upgrade`; docs/configuration.md, "Hot binary upgrade").
//!
//! As HAProxy hands sockets to its successor (`-x`, `expose-fd listeners`),
//! the sockets go over a Unix socket with SCM_RIGHTS, so they are the very
//! sockets (new descriptors of them): connections waiting in their accept
//! queues are taken by the new process, none is refused or reset. The channel
//! is a `SOCK_SEQPACKET` pair made for the occasion, whose one end is the new
//! process's standard input (`run --take-over`), so no path needs to be agreed
//! on, nothing else can connect to it, and no descriptor number is taken on
//! trust.
//!
//! The exchange: the old process sends batches of descriptors, each with a
//! JSON list of what they are (`frontend ADDR`: a listener of the bind
//! configured with ADDR; `admin`: the admin HTTP listener) and whether more
//! follow; the new process starts with them and answers `ready` once it
//! serves. Anything else (it exits, it says nothing within the wait) is a
//! failed upgrade: the new process is killed and the old one goes on serving.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketFlags, SocketType,
};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tollgate_admin::TakeOver;
use tollgate_proxy::Inherited;

/// Descriptors per message: under the kernel's SCM_MAX_FD (253).
const BATCH: usize = 200;
/// What the new process says once it serves.
const READY: &[u8] = b"ready";
/// The largest JSON description of a batch.
const MAX_DESCRIPTION: usize = 64 * 1024;

/// One batch: what each descriptor is, in order; with the first, the servers'
/// live state.
#[derive(Serialize, Deserialize)]
struct Batch {
    sockets: Vec<String>,
    more: bool,
    #[serde(default)]
    servers: Vec<ServerState>,
}

/// A server's state set at run time (admin API, command socket), which the
/// new process takes on as a reload keeps it: its administrative state, and
/// its weight when it was changed from the file's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ServerState {
    pub backend: String,
    pub server: String,
    pub state: String,
    pub weight: Option<u32>,
}

/// A socket handed over, and what it is.
pub enum Shared {
    /// A listener of the bind configured with this address.
    Frontend(SocketAddr, OwnedFd),
    /// The admin HTTP listener.
    Admin(OwnedFd),
}

/// Starts `exe run -c config` to take over from this process, hands it
/// `sockets`, and waits (at most `wait`) until it serves: its process id. On
/// any failure the new process is killed and waited for, and the error says
/// what went wrong; this process is untouched either way.
pub fn hand_over(
    exe: &Path,
    config: &Path,
    sockets: Vec<Shared>,
    servers: Vec<ServerState>,
    wait: Duration,
) -> Result<u32, String> {
    let (ours, theirs) =
        rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
            .map_err(|e| format!("cannot make the channel to the new process: {e}"))?;
    let mut child = std::process::Command::new(exe)
        .arg("run")
        .arg("-c")
        .arg(config)
        .arg("--take-over")
        .stdin(std::process::Stdio::from(theirs))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let outcome = send_all(&ours, &sockets, servers).and_then(|()| wait_ready(&ours, wait));
    match outcome {
        Ok(()) => Ok(child.id()),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

fn send_all(channel: &OwnedFd, sockets: &[Shared], mut servers: Vec<ServerState>) -> Result<(), String> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(BATCH))];
    // An empty hand-over is one empty batch: the new process binds everything itself.
    let batches: Vec<&[Shared]> = if sockets.is_empty() { vec![&[]] } else { sockets.chunks(BATCH).collect() };
    for (i, chunk) in batches.iter().enumerate() {
        let (names, fds): (Vec<String>, Vec<BorrowedFd<'_>>) = chunk
            .iter()
            .map(|s| match s {
                Shared::Frontend(addr, fd) => (format!("frontend {addr}"), fd.as_fd()),
                Shared::Admin(fd) => ("admin".to_string(), fd.as_fd()),
            })
            .unzip();
        let more = i + 1 < batches.len();
        let servers = std::mem::take(&mut servers);
        let text = serde_json::to_vec(&Batch { sockets: names, more, servers }).map_err(|e| e.to_string())?;
        if text.len() > MAX_DESCRIPTION {
            return Err("the description of the sockets is too large".into());
        }
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err("the descriptors do not fit a message".into());
        }
        rustix::net::sendmsg(channel, &[IoSlice::new(&text)], &mut control, SendFlags::NOSIGNAL)
            .map_err(|e| format!("cannot hand the sockets over: {e}"))?;
    }
    Ok(())
}

fn wait_ready(channel: &OwnedFd, wait: Duration) -> Result<(), String> {
    rustix::net::sockopt::set_socket_timeout(channel, rustix::net::sockopt::Timeout::Recv, Some(wait))
        .map_err(|e| e.to_string())?;
    let mut answer = [0u8; 16];
    match rustix::net::recv(channel, &mut answer, RecvFlags::empty()) {
        Ok((n, _)) if &answer[..n] == READY => Ok(()),
        Ok((0, _)) => Err("the new process ended before it served (its log says why)".into()),
        Ok(_) => Err("the new process answered something else than `ready`".into()),
        Err(e) if e == rustix::io::Errno::AGAIN => {
            Err(format!("the new process did not serve within {} s", wait.as_secs()))
        }
        Err(e) => Err(format!("the channel to the new process failed: {e}")),
    }
}

/// What a process started to take over (`run --take-over`) received.
pub struct Received {
    /// The frontends' listeners, by the address their bind was configured with.
    pub listeners: Inherited,
    /// The admin HTTP listener, if the old process had one; its command socket's
    /// path is taken over too.
    pub admin: TakeOver,
    /// The servers' state in the old process.
    pub servers: Vec<ServerState>,
    channel: OwnedFd,
}

impl Received {
    /// The sockets, for the start ([`crate::start_taking_over`]); the channel stays.
    pub fn take(&mut self) -> (Inherited, TakeOver) {
        (std::mem::take(&mut self.listeners), std::mem::take(&mut self.admin))
    }

    /// Tells the old process that this one serves: it stops accepting then.
    pub fn ready(&self) -> Result<(), String> {
        rustix::net::send(&self.channel, READY, SendFlags::NOSIGNAL)
            .map(|_| ())
            .map_err(|e| format!("cannot tell the old process: {e}"))
    }
}

/// Receives the sockets the old process hands over on the channel that is
/// this process's standard input.
pub fn receive() -> Result<Received, String> {
    let fd = rustix::io::fcntl_dupfd_cloexec(std::io::stdin().as_fd(), 3)
        .map_err(|e| format!("cannot take the channel from standard input: {e}"))?;
    let mut received = Received {
        listeners: Inherited::new(),
        admin: TakeOver { http: None, socket: true },
        servers: Vec::new(),
        channel: fd,
    };
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(BATCH))];
    let mut text = vec![0u8; MAX_DESCRIPTION];
    loop {
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &received.channel,
            &mut [IoSliceMut::new(&mut text)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| format!("cannot receive the sockets: {e}"))?;
        let mut fds = Vec::new();
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = msg {
                fds.extend(rights);
            }
        }
        if got.bytes == 0 {
            return Err("the old process closed the channel".into());
        }
        let batch: Batch = serde_json::from_slice(&text[..got.bytes.min(text.len())])
            .map_err(|e| format!("the old process sent a bad description: {e}"))?;
        received.servers.extend(batch.servers);
        if batch.sockets.len() != fds.len() {
            return Err(format!("{} sockets described, {} received", batch.sockets.len(), fds.len()));
        }
        for (what, fd) in batch.sockets.iter().zip(fds) {
            let listener = std::net::TcpListener::from(fd);
            match what.split_once(' ') {
                Some(("frontend", addr)) => {
                    let addr: SocketAddr = addr.parse().map_err(|_| format!("a bad address: {addr}"))?;
                    received.listeners.entry(addr).or_default().push(listener);
                }
                None if what == "admin" => received.admin.http = Some(listener),
                _ => return Err(format!("an unknown socket: {what}")),
            }
        }
        if !batch.more {
            return Ok(received);
        }
    }
}
