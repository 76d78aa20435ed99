//! The JSON API's server management (docs/admin.md, "Servers at run time"):
//! the command socket's `add server`, `del server`, `set server ... addr`,
//! `shutdown sessions server` and `show table`, as resources. http.rs routes
//! to these and maps their errors.

use crate::reply::{Reply, error_reply, json_reply};
use crate::{Control, ControlError, NewServer};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;

/// `POST /api/backends/{b}/servers`:
/// `{"name": "s3", "addr": "10.0.0.3:80", "weight": 2, "maxconn": 100,
/// "backup": false, "check": true, "state": "maint" | "ready"}`; `name` and
/// `addr` required, `state` `"maint"` by default (as the socket's `add server`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBody {
    name: String,
    addr: String,
    weight: Option<u32>,
    maxconn: Option<u32>,
    #[serde(default)]
    backup: bool,
    #[serde(default)]
    check: bool,
    state: Option<String>,
}

async fn body<T: for<'de> Deserialize<'de>>(req: Request<Incoming>, max: usize, example: &str) -> Result<T, Reply> {
    let bytes = match Limited::new(req.into_body(), max).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Err(error_reply(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}"))),
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| error_reply(StatusCode::BAD_REQUEST, format!("the body must be JSON like {example}: {e}")))
}

fn addr(text: &str) -> Result<SocketAddr, ControlError> {
    text.parse().map_err(|_| {
        ControlError::BadServer(format!("`{text}` is not an IP:port (names belong in the config file, with `resolve`)"))
    })
}

pub(crate) async fn add(
    control: &Control,
    backend: &str,
    req: Request<Incoming>,
    max: usize,
    map: fn(ControlError) -> Reply,
) -> Reply {
    let b: AddBody = match body(req, max, r#"{"name": "s3", "addr": "10.0.0.3:80"}"#).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let disabled = match b.state.as_deref() {
        None | Some("maint") => true,
        Some("ready") => false,
        Some(other) => return map(ControlError::BadState(other.to_string())),
    };
    let addr = match addr(&b.addr) {
        Ok(a) => a,
        Err(e) => return map(e),
    };
    let new = NewServer {
        name: b.name,
        addr,
        weight: b.weight,
        maxconn: b.maxconn,
        backup: b.backup,
        check: b.check,
        disabled,
    };
    match control.add_server(backend, new) {
        Ok(report) => json_reply(StatusCode::CREATED, &report),
        Err(e) => map(e),
    }
}

pub(crate) fn delete(control: &Control, backend: &str, server: &str, map: fn(ControlError) -> Reply) -> Reply {
    match control.del_server(backend, server) {
        Ok(()) => json_reply(StatusCode::OK, &json!({ "deleted": format!("{backend}/{server}") })),
        Err(e) => map(e),
    }
}

pub(crate) fn shutdown(control: &Control, backend: &str, server: &str, map: fn(ControlError) -> Reply) -> Reply {
    let inflight = match control.server(backend, server) {
        Ok(s) => s.inflight(),
        Err(e) => return map(e),
    };
    match control.shutdown_sessions(backend, server) {
        Ok(()) => json_reply(StatusCode::OK, &json!({ "shut_down": inflight })),
        Err(e) => map(e),
    }
}

pub(crate) fn table(control: &Control, backend: &str, map: fn(ControlError) -> Reply) -> Reply {
    match control.table(backend) {
        Ok(Some(t)) => json_reply(StatusCode::OK, &t),
        Ok(None) => error_reply(StatusCode::NOT_FOUND, format!("backend {backend} has no stick table")),
        Err(e) => map(e),
    }
}

/// The `"addr"` of a server change (PUT/PATCH), applied after its state and
/// weight: `"IP:PORT"`.
pub(crate) fn parse_addr(text: &str) -> Result<SocketAddr, ControlError> {
    addr(text)
}
