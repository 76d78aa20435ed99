//! The admin listener's responses: the type every handler answers with, and
//! its JSON forms (the outputs and the router below them share it).

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde_json::json;

/// What every admin handler answers.
pub(crate) type Reply = Response<Full<Bytes>>;

/// `value` as pretty JSON, never stored by caches.
pub(crate) fn json_reply(status: StatusCode, value: &impl serde::Serialize) -> Reply {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

/// `{"error": message}` with `status`.
pub(crate) fn error_reply(status: StatusCode, message: impl std::fmt::Display) -> Reply {
    json_reply(status, &json!({ "error": message.to_string() }))
}
