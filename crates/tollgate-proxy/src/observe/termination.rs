//! Why an exchange (or a TCP session, or a tunnel) ended other than by
//! completing: [`Termination`], one variant per reason, printed in the access
//! log as the words it has always had ([`Termination::as_str`]). Errors that
//! still get a response are `rescue::ProxyError`s, with reasons of their own.

/// Why an exchange ended early, or how a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// The client closed or reset its connection, or a write to it failed.
    ClientAborted,
    /// The client reset its HTTP/2 stream.
    ClientReset,
    /// The client stayed silent (or kept its window shut) past `timeout.client`.
    ClientTimeout,
    /// The server stayed silent past `timeout.server`.
    ServerTimeout,
    /// The server closed or broke the connection mid-response.
    ServerAborted,
    /// The server's chunked body broke its framing.
    ServerBadChunk,
    /// A tunnel stayed idle past `timeout.tunnel`.
    TunnelTimeout,
    /// A tunnel ended with both sides closing (HTTP/2 WebSocket streams).
    TunnelClosed,
    /// A tunnel's server side failed (HTTP/2 WebSocket streams).
    TunnelServerError,
    /// A rule answered with a redirect.
    Redirect,
    /// The origin failed and a stale stored response answered (RFC 5861).
    StaleIfError,
    /// Ended by the operator: `shutdown sessions server` (HAProxy's `K` flag).
    Killed,
    /// A rule's `silent_drop`: the connection closed without a response.
    SilentDrop,
}

impl Termination {
    /// The access log's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Termination::ClientAborted => "client-aborted",
            Termination::ClientReset => "client-reset",
            Termination::ClientTimeout => "client-timeout",
            Termination::ServerTimeout => "server-timeout",
            Termination::ServerAborted => "server-aborted",
            Termination::ServerBadChunk => "server-bad-chunk",
            Termination::TunnelTimeout => "tunnel-timeout",
            Termination::TunnelClosed => "tunnel-closed",
            Termination::TunnelServerError => "tunnel-server-error",
            Termination::Redirect => "redirect",
            Termination::SilentDrop => "silent-drop",
            Termination::StaleIfError => "stale-if-error",
            Termination::Killed => "killed",
        }
    }
}

impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
