//! The one place where errors become HTTP responses.
//!
//! Every failure on the request path is a [`ProxyError`]; [`ProxyError::status`] says
//! what the client gets, [`respond`] builds it (using the frontend's error page for
//! that status when one is configured) and the access log records why.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use tollgate_config::Frontend;

#[derive(Debug)]
pub enum ProxyError {
    /// The request breaks HTTP/1.1 framing or syntax rules; the connection closes.
    BadRequest(&'static str),
    /// Request target longer than `limits.max_uri_size`.
    UriTooLong,
    /// Request body larger than `limits.max_request_body`.
    BodyTooLarge,
    /// The client stalled while sending its body.
    ClientTimeout,
    /// A method Tollgate does not proxy (CONNECT).
    MethodNotAllowed,
    /// A rule denied the request.
    Denied { status: StatusCode, body: Option<String> },
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
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::UriTooLong => StatusCode::URI_TOO_LONG,
            ProxyError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::ClientTimeout => StatusCode::REQUEST_TIMEOUT,
            ProxyError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::Denied { status, .. } => *status,
            ProxyError::NoBackend | ProxyError::NoServer | ProxyError::QueueTimeout => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectFailed | ProxyError::BadGateway => StatusCode::BAD_GATEWAY,
            ProxyError::ServerTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The access log's termination reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::BadRequest(why) => why,
            ProxyError::UriTooLong => "uri-too-long",
            ProxyError::BodyTooLarge => "body-too-large",
            ProxyError::ClientTimeout => "client-timeout",
            ProxyError::MethodNotAllowed => "method-not-allowed",
            ProxyError::Denied { .. } => "denied",
            ProxyError::NoBackend => "no-backend",
            ProxyError::NoServer => "no-server",
            ProxyError::QueueTimeout => "queue-timeout",
            ProxyError::ConnectFailed => "connect-failed",
            ProxyError::ServerTimeout => "server-timeout",
            ProxyError::BadGateway => "bad-gateway",
        }
    }

    /// Errors after which the client connection must not be reused.
    fn closes(&self) -> bool {
        matches!(self, ProxyError::BadRequest(_) | ProxyError::BodyTooLarge | ProxyError::ClientTimeout)
    }

    fn detail(&self) -> &'static str {
        match self {
            ProxyError::BadRequest(_) => {
                "Your browser (or proxy) sent a request that this server could not understand."
            }
            ProxyError::UriTooLong => "The requested URL is too long.",
            ProxyError::BodyTooLarge => "The request body is larger than this server accepts.",
            ProxyError::ClientTimeout => "Your browser didn't send a complete request in time.",
            ProxyError::MethodNotAllowed => "This method is not allowed here.",
            ProxyError::Denied { .. } => "Request forbidden by administrative rules.",
            ProxyError::NoBackend | ProxyError::NoServer | ProxyError::QueueTimeout => {
                "No server is available to handle this request."
            }
            ProxyError::ConnectFailed | ProxyError::BadGateway => {
                "The server returned an invalid or incomplete response."
            }
            ProxyError::ServerTimeout => "The server didn't respond in time.",
        }
    }
}

/// The response (head and body bytes) for an error, honouring the frontend's error pages.
pub fn respond(err: &ProxyError, fe: &Frontend) -> (Response<()>, Bytes) {
    let status = err.status();
    // A rule's own deny body is the most specific; then the frontend's error page.
    let (content_type, body): (HeaderValue, Bytes) = if let ProxyError::Denied { body: Some(b), .. } = err {
        (HeaderValue::from_static("text/plain; charset=utf-8"), Bytes::from(b.clone()))
    } else if let Some(page) = fe.error_pages.get(&status.as_u16()) {
        (HeaderValue::from_static(page.content_type), Bytes::copy_from_slice(&page.body))
    } else {
        let reason = status.canonical_reason().unwrap_or("");
        let html = format!("<html><body><h1>{} {reason}</h1>\n{}\n</body></html>\n", status.as_u16(), err.detail());
        (HeaderValue::from_static("text/html"), Bytes::from(html))
    };
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    if err.closes() {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        h.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"));
    }
    (resp, body)
}
