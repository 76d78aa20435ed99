//! The one place where errors become HTTP responses.
//!
//! Every failure on the request path is a [`ProxyError`] while the response has
//! not begun (after that, the exchange ends with a `termination::Termination`;
//! the exchange's `Fail` is one or the other). [`ProxyError::status`] says what
//! the client gets, [`ProxyError::side`] whose failure it is and
//! [`ProxyError::unsent`] whether the request never reached a server;
//! [`respond`] builds the response (using the frontend's error page for that
//! status when one is configured) and the access log records why
//! ([`ProxyError::reason`]).

use crate::io::limits::Shortage;
use http::StatusCode;
use std::borrow::Cow;
use tollgate_config::Frontend;

/// Whose failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's request (its syntax, size, pace or credentials): 4xx.
    Client,
    /// The server's, or the way to it: it failed, was not there or not in time.
    Server,
    /// The proxy's own doing: a rule, no backend, its own resources.
    Proxy,
}

#[derive(Debug)]
pub enum ProxyError {
    /// The request head was refused by the parser's checks (h1.rs): 400, 405,
    /// 414, 417 or 431, with the log's reason; the connection closes.
    Refused { status: u16, reason: &'static str },
    /// The request breaks HTTP/1.1 framing rules in its body; the connection closes.
    BadRequest(&'static str),
    /// The request head grew past `limits.max_header_size`.
    HeadersTooLarge,
    /// Request body larger than `limits.max_request_body`.
    BodyTooLarge,
    /// The request head did not arrive within `timeout.http_request`.
    RequestTimeout,
    /// The client stalled while sending its body.
    ClientTimeout,
    /// A rule denied the request (`retry_after`: seconds, for `Retry-After`).
    Denied { status: StatusCode, body: Option<String>, retry_after: Option<u32> },
    /// A rule's `tarpit` held the request, and now answers; the connection closes.
    Tarpitted(StatusCode),
    /// Basic authentication (auth.rs) did not pass: `challenge` is the
    /// WWW-Authenticate value; `reason` is `auth-required` (no credentials) or
    /// `auth-failed` (wrong ones).
    Unauthorized { challenge: String, reason: &'static str },
    /// Too many password checks already wait for a CPU (auth.rs).
    AuthBusy,
    /// A forward proxy's authentication did not pass: 407 with
    /// `Proxy-Authenticate: challenge`.
    ProxyAuth { challenge: String, reason: &'static str },
    /// A forward proxy may not reach the destination asked for (forward.rs): 403.
    ForwardDenied(tollgate_config::forward::Refusal),
    /// A forward proxy's destination did not resolve: 502, or 504 when the
    /// lookup took too long.
    ForwardDns { timeout: bool },
    /// No rule chose a backend and the frontend has no default backend.
    NoBackend,
    /// The backend has no server that may take the request.
    NoServer,
    /// Every usable server stayed at its `maxconn` for `timeout.queue`.
    QueueTimeout,
    /// Connecting failed on every attempt (`retries`, `redispatch`).
    ConnectFailed,
    /// The server sent no response head within `timeout.server`.
    ServerTimeout,
    /// The server broke the exchange (reset, malformed response).
    BadGateway,
    /// Tollgate itself could not open a connection to the server: out of file
    /// descriptors, memory or local ports (limits.rs). 503, as for any server
    /// unavailable for now; not the server's failure, so not counted against
    /// it, and not retried on another server, which the same shortage would
    /// stop too.
    Local(Shortage),
    /// A `static` backend has no file for the request and no fallback.
    FileMissing,
    /// A `static` backend's path that cannot name a file under its root
    /// (`..` above it, `%2F`, NUL): the reason.
    FilePath(&'static str),
    /// A `static` backend without fallback asked for another method than
    /// GET and HEAD.
    FileMethod,
    /// The file exists but Tollgate may not read it.
    FileForbidden,
    /// Opening or reading the file failed otherwise (logged).
    FileFailed,
}

impl ProxyError {
    pub fn status(&self) -> u16 {
        match self {
            ProxyError::Refused { status, .. } => *status,
            ProxyError::BadRequest(_) => 400,
            ProxyError::HeadersTooLarge => 431,
            ProxyError::BodyTooLarge => 413,
            ProxyError::RequestTimeout | ProxyError::ClientTimeout => 408,
            ProxyError::Denied { status, .. } => status.as_u16(),
            ProxyError::Tarpitted(status) => status.as_u16(),
            ProxyError::Unauthorized { .. } => 401,
            ProxyError::AuthBusy => 503,
            ProxyError::ProxyAuth { .. } => 407,
            ProxyError::ForwardDenied(_) => 403,
            ProxyError::ForwardDns { timeout } => {
                if *timeout {
                    504
                } else {
                    502
                }
            }
            ProxyError::NoBackend | ProxyError::NoServer | ProxyError::QueueTimeout | ProxyError::Local(_) => 503,
            ProxyError::ConnectFailed | ProxyError::BadGateway => 502,
            ProxyError::ServerTimeout => 504,
            ProxyError::FileMissing => 404,
            ProxyError::FilePath(_) => 400,
            ProxyError::FileMethod => 405,
            ProxyError::FileForbidden => 403,
            ProxyError::FileFailed => 500,
        }
    }

    /// Whose failure it is.
    pub fn side(&self) -> Side {
        match self {
            ProxyError::Refused { .. }
            | ProxyError::BadRequest(_)
            | ProxyError::HeadersTooLarge
            | ProxyError::BodyTooLarge
            | ProxyError::RequestTimeout
            | ProxyError::ClientTimeout
            | ProxyError::Unauthorized { .. }
            | ProxyError::ProxyAuth { .. }
            | ProxyError::FileMissing
            | ProxyError::FilePath(_)
            | ProxyError::FileMethod
            | ProxyError::FileForbidden => Side::Client,
            ProxyError::NoServer
            | ProxyError::QueueTimeout
            | ProxyError::ConnectFailed
            | ProxyError::ServerTimeout
            | ProxyError::BadGateway
            | ProxyError::ForwardDns { .. } => Side::Server,
            ProxyError::Denied { .. }
            | ProxyError::ForwardDenied(_)
            | ProxyError::Tarpitted(_)
            | ProxyError::AuthBusy
            | ProxyError::NoBackend
            | ProxyError::Local(_)
            | ProxyError::FileFailed => Side::Proxy,
        }
    }

    /// The request never reached a server: none could take it, no connection
    /// could be opened, or the proxy was short of resources. Sending it again
    /// (later, or elsewhere) is safe whatever its method.
    pub fn unsent(&self) -> bool {
        matches!(
            self,
            ProxyError::NoServer | ProxyError::QueueTimeout | ProxyError::ConnectFailed | ProxyError::Local(_)
        )
    }

    /// The access log's termination reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::Refused { reason, .. } => reason,
            ProxyError::BadRequest(why) => why,
            ProxyError::HeadersTooLarge => "headers-too-large",
            ProxyError::BodyTooLarge => "body-too-large",
            ProxyError::RequestTimeout => "request-timeout",
            ProxyError::ClientTimeout => "client-timeout",
            ProxyError::Denied { .. } => "denied",
            ProxyError::Tarpitted(_) => "tarpit",
            ProxyError::Unauthorized { reason, .. } => reason,
            ProxyError::AuthBusy => "auth-busy",
            ProxyError::ProxyAuth { reason, .. } => reason,
            ProxyError::ForwardDenied(why) => why.reason(),
            ProxyError::ForwardDns { timeout: false } => "forward-dns-failed",
            ProxyError::ForwardDns { timeout: true } => "forward-dns-timeout",
            ProxyError::NoBackend => "no-backend",
            ProxyError::NoServer => "no-server",
            ProxyError::QueueTimeout => "queue-timeout",
            ProxyError::ConnectFailed => "connect-failed",
            ProxyError::ServerTimeout => "server-timeout",
            ProxyError::BadGateway => "bad-gateway",
            ProxyError::Local(s) => s.reason(),
            ProxyError::FileMissing => "not-found",
            ProxyError::FilePath(why) => why,
            ProxyError::FileMethod => "method-not-allowed",
            ProxyError::FileForbidden => "forbidden",
            ProxyError::FileFailed => "file-error",
        }
    }

    /// Errors after which the client connection must not be reused: the
    /// client's own (its request's framing cannot be trusted, or it was too
    /// slow), but for a failed sign-in, which it may try again on the same
    /// connection, and a file that is not there (or not to be had), which
    /// says nothing of the framing.
    pub fn closes(&self) -> bool {
        if matches!(self, ProxyError::Tarpitted(_)) {
            return true;
        }
        self.side() == Side::Client
            && !matches!(
                self,
                ProxyError::Unauthorized { .. }
                    | ProxyError::ProxyAuth { .. }
                    | ProxyError::FileMissing
                    | ProxyError::FilePath(_)
                    | ProxyError::FileMethod
                    | ProxyError::FileForbidden
            )
    }

    fn detail(&self) -> &'static str {
        match self.status() {
            400 => "Your browser (or proxy) sent a request that this server could not understand.",
            403 if matches!(self, ProxyError::FileForbidden) => "You don't have permission to access this file.",
            404 => "The requested URL was not found on this server.",
            500 => "The server could not read the file.",
            401 => "This server could not verify that you are authorized to access the document requested.",
            407 => "This proxy could not verify that you are authorized to use it.",
            403 if matches!(self, ProxyError::ForwardDenied(_)) => {
                "This proxy does not go to the destination asked for."
            }
            508 => "The request came back through this proxy: a forwarding loop.",
            502 if matches!(self, ProxyError::ForwardDns { .. }) => "The destination's name could not be resolved.",
            405 => "This method is not allowed here.",
            408 => "Your browser didn't send a complete request in time.",
            413 => "The request body is larger than this server accepts.",
            414 => "The requested URL is too long.",
            417 => "The expectation given in the Expect header cannot be met.",
            431 => "The request header fields are too large.",
            502 => "The server returned an invalid or incomplete response.",
            _ if matches!(self, ProxyError::AuthBusy) => "Too many sign-ins are being checked; try again shortly.",
            _ if matches!(self, ProxyError::Local(_)) => {
                "The proxy is out of resources for a moment; try again shortly."
            }
            503 => "No server is available to handle this request.",
            504 => "The server didn't respond in time.",
            _ if matches!(self, ProxyError::Denied { .. }) => "Request forbidden by administrative rules.",
            _ => "",
        }
    }
}

/// An error response, ready to be written.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Cow<'static, [u8]>,
    /// The client connection closes after it.
    pub closes: bool,
    /// The Allow field, for 405.
    pub allow: Option<&'static str>,
    /// The WWW-Authenticate field, for 401.
    pub www_authenticate: Option<String>,
    /// The Proxy-Authenticate field, for 407.
    pub proxy_authenticate: Option<String>,
    /// The Retry-After field (seconds), for a rule's deny that says it.
    pub retry_after: Option<u32>,
}

/// The response for an error, honouring the frontend's error pages.
pub fn respond(err: &ProxyError, fe: &Frontend) -> Reply {
    let status = err.status();
    // A rule's own deny body is the most specific; then the frontend's error page.
    let (content_type, body): (&'static str, Cow<'static, [u8]>) = if let ProxyError::Denied { body: Some(b), .. } = err
    {
        ("text/plain; charset=utf-8", Cow::Owned(b.clone().into_bytes()))
    } else if let Some(page) = fe.error_pages.get(&status) {
        (page.content_type, Cow::Owned(page.body.to_vec()))
    } else {
        let reason = StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
        let html = format!("<html><body><h1>{status} {reason}</h1>\n{}\n</body></html>\n", err.detail());
        ("text/html", Cow::Owned(html.into_bytes()))
    };
    Reply {
        status,
        content_type,
        body,
        closes: err.closes(),
        allow: match err {
            ProxyError::FileMethod => Some("GET, HEAD"),
            _ => (status == 405).then_some("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"),
        },
        www_authenticate: match err {
            ProxyError::Unauthorized { challenge, .. } => Some(challenge.clone()),
            _ => None,
        },
        proxy_authenticate: match err {
            ProxyError::ProxyAuth { challenge, .. } => Some(challenge.clone()),
            _ => None,
        },
        retry_after: match err {
            ProxyError::Denied { retry_after, .. } => *retry_after,
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error says whose failure it is: the client's are the 4xx of its
    /// own request; a denial, a missing backend and a shortage of the proxy's
    /// are the proxy's; the rest the server's. Only those before any server
    /// had the request are unsent (and only those, with the server's own
    /// failures, let a stale stored response answer: pipeline/serve.rs).
    #[test]
    fn errors_carry_their_side_and_whether_the_request_went_out() {
        let client = [
            ProxyError::Refused { status: 400, reason: "bad-target" },
            ProxyError::BadRequest("bad-chunk"),
            ProxyError::HeadersTooLarge,
            ProxyError::BodyTooLarge,
            ProxyError::RequestTimeout,
            ProxyError::ClientTimeout,
            ProxyError::Unauthorized { challenge: "Basic".into(), reason: "auth-failed" },
            ProxyError::ProxyAuth { challenge: "Basic".into(), reason: "proxy-auth-failed" },
        ];
        for e in &client {
            assert_eq!(e.side(), Side::Client, "{e:?}");
            assert!((400..500).contains(&e.status()) && !e.unsent(), "{e:?}");
        }
        let server = [
            (ProxyError::NoServer, true),
            (ProxyError::QueueTimeout, true),
            (ProxyError::ConnectFailed, true),
            (ProxyError::ServerTimeout, false),
            (ProxyError::BadGateway, false),
            (ProxyError::ForwardDns { timeout: false }, false),
            (ProxyError::ForwardDns { timeout: true }, false),
        ];
        for (e, unsent) in &server {
            assert_eq!((e.side(), e.unsent()), (Side::Server, *unsent), "{e:?}");
            assert!(e.status() >= 500, "{e:?}");
        }
        let denied = ProxyError::Denied { status: StatusCode::FORBIDDEN, body: None, retry_after: None };
        let forward = ProxyError::ForwardDenied(tollgate_config::forward::Refusal::Network);
        assert_eq!((forward.status(), forward.reason(), forward.closes()), (403, "forward-network-denied", false));
        for (e, unsent) in
            [(denied, false), (ProxyError::NoBackend, false), (ProxyError::AuthBusy, false), (forward, false)]
        {
            assert_eq!((e.side(), e.unsent()), (Side::Proxy, unsent), "{e:?}");
        }
        let local = ProxyError::Local(Shortage::ProcessFds);
        assert_eq!((local.side(), local.unsent()), (Side::Proxy, true));
    }

    /// A shortage of Tollgate's own is a 503 whose log reason says so, told
    /// apart from a server that could not be reached (502 connect-failed).
    #[test]
    fn local_shortages_are_503_with_their_own_reason() {
        let e = ProxyError::Local(Shortage::ProcessFds);
        assert_eq!((e.status(), e.reason(), e.closes()), (503, "local-fd-limit", false));
        assert_eq!(ProxyError::Local(Shortage::Ports).reason(), "local-no-ports");
        assert_eq!((ProxyError::ConnectFailed.status(), ProxyError::ConnectFailed.reason()), (502, "connect-failed"));
        let cfg = tollgate_config::parse(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\n",
            std::path::Path::new("t.toml"),
        )
        .unwrap();
        let reply = respond(&e, &cfg.frontends[0]);
        assert_eq!(reply.status, 503);
        assert!(String::from_utf8_lossy(&reply.body).contains("out of resources"));
    }
}
