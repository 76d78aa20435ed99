//! The one socket option Tollgate sets that neither socket2 nor rustix wraps
//! (std's `set_deferaccept` is unstable), and so the crate's only unsafe code:
//! one `setsockopt` call with a pointer to a local `c_int`.
//!
//! Worth it, measured: with TCP_DEFER_ACCEPT on its HTTP listeners a closed
//! connection (811 B, 50 at a time, `Connection: close`) cost Tollgate 52 µs
//! of CPU instead of 73, the load generator's core 93 µs instead of 107, and
//! the client core sent 0.06 wake-up interrupts per connection to Tollgate's
//! instead of 0.54 (docs/architecture.md, "Per connection, with
//! `Connection: close`").

#![allow(unsafe_code)]

use std::os::fd::AsRawFd;

/// Sets TCP_DEFER_ACCEPT on a listening socket: the kernel queues a
/// connection for `accept` only once data has arrived on it, waiting for it
/// about `seconds` (counted in SYN-ACK retransmissions; a client still silent
/// then is handed over as it is). 0 turns it off.
pub(crate) fn set_defer_accept(sock: &socket2::Socket, seconds: u32) -> std::io::Result<()> {
    let value = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    // SAFETY: `sock` is an open socket for the duration of the call, and the
    // option value is a `c_int` the kernel only reads, `size_of::<c_int>()`
    // bytes long, as TCP_DEFER_ACCEPT takes (tcp(7)).
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Readies a client socket to be closed without the client being told
/// (HAProxy's `silent-drop`): no FIN, as the close sends a reset
/// (SO_LINGER 0), and that reset leaves with a hop limit of 1, so that the
/// first router drops it and a client beyond it sees nothing until its own
/// timeout. On loopback or a client on the same link the reset still
/// arrives. Best effort: a failed option only makes the close less quiet.
pub(crate) fn silent_close(fd: std::os::fd::BorrowedFd<'_>) {
    let sock = socket2::SockRef::from(&fd);
    let _ = sock.set_linger(Some(std::time::Duration::ZERO));
    let v6 = matches!(sock.local_addr().ok().and_then(|a| a.as_socket()), Some(std::net::SocketAddr::V6(_)));
    let _ = if v6 { sock.set_unicast_hops_v6(1) } else { sock.set_ttl_v4(1) };
}
