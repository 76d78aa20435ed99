//! The admin HTTP listener: the JSON API (docs/admin.md). Served with hyper, on
//! the admin thread; nothing here is on the data path.
//!
//! Every request goes through, in order:
//! 1. the Host check ([`guard::check_host`]): only the hosts the listener
//!    answers to, against DNS rebinding (421);
//! 2. the token, with `admin.token`: `Authorization: Bearer TOKEN` (scripts) or
//!    the password of HTTP basic auth, any user name (a browser asks for it)
//!    (401). Without a token the listener is open to whoever can reach its
//!    address (127.0.0.1:8404 by default);
//! 3. for a change (not GET, HEAD or OPTIONS), the cross-site checks
//!    ([`guard::check_change`]): no foreign `Origin` (403), and
//!    `Content-Type: application/json` or the bearer token (415).
//!
//! The listener sends no CORS header: a browser never lets another site's
//! script read an answer, nor send it what needs a pre-flight.

use crate::guard::{self, Listener, Refusal};
use crate::reply::{Reply, error_reply, json_reply};
use crate::{Control, ControlError, ServerChange};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate_proxy::lb::AdminState;
use tollgate_proxy::pipeline::auth::{basic_credentials, constant_time_eq};

/// The largest request body the API reads (a JSON change is a few bytes).
const MAX_BODY: usize = 64 * 1024;

/// Serves the API on `listener`, whose address is `local` (the Host check
/// compares requests with it).
pub(crate) async fn serve(listener: TcpListener, local: SocketAddr, control: Control, mut stop: watch::Receiver<bool>) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = crate::stopped(&mut stop) => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    static WARN: tollgate_proxy::io::limits::Throttle = tollgate_proxy::io::limits::Throttle::new();
                    if let Some(held) = WARN.ready() {
                        tracing::warn!("admin: accept failed: {e} ({held} more since the last such message)");
                    }
                    tokio::time::sleep(tollgate_proxy::runtime::server::ACCEPT_PAUSE).await;
                    continue;
                }
            },
        };
        let control = control.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let control = control.clone();
                async move { Ok::<_, Infallible>(handle(req, &control, peer, local).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = crate::stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

/// `?limit=N` on a table's entries: 1,000 by default, at most 100,000.
fn query_limit(query: Option<&str>) -> usize {
    let given = query.and_then(|q| q.split('&').find_map(|p| p.strip_prefix("limit=")?.parse::<usize>().ok()));
    given.unwrap_or(1000).min(100_000)
}

fn control_error(e: ControlError) -> Reply {
    let status = match e {
        ControlError::NoBackend(_) | ControlError::NoServer { .. } | ControlError::NoTable(_) => StatusCode::NOT_FOUND,
        ControlError::BadWeight(_) | ControlError::BadState(_) | ControlError::BadServer(_) => StatusCode::BAD_REQUEST,
        ControlError::ServerExists { .. } | ControlError::NotInMaintenance | ControlError::StillInUse(_) => {
            StatusCode::CONFLICT
        }
        ControlError::ReadOnly => StatusCode::FORBIDDEN,
        ControlError::Reload(_) => StatusCode::UNPROCESSABLE_ENTITY,
        ControlError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
    };
    error_reply(status, e)
}

/// How `req` carries the token, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credentials {
    /// No token is set: nothing to carry.
    Open,
    /// `Authorization: Bearer TOKEN`, which a browser never sends by itself.
    Bearer,
    /// The basic-auth password, which a browser resends on its own, even on a
    /// request another site makes it send.
    Basic,
    /// Missing or wrong.
    None,
}

fn credentials(req: &Request<Incoming>, token: Option<&str>) -> Credentials {
    let Some(token) = token else { return Credentials::Open };
    let Some(value) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Credentials::None;
    };
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        if constant_time_eq(rest.as_bytes(), token.as_bytes()) {
            return Credentials::Bearer;
        }
        return Credentials::None;
    }
    if basic_credentials(value.as_bytes()).is_some_and(|c| constant_time_eq(c.password(), token.as_bytes())) {
        Credentials::Basic
    } else {
        Credentials::None
    }
}

fn refused(r: Refusal, req: &Request<Incoming>, peer: SocketAddr) -> Reply {
    tracing::warn!(client = %peer, method = %req.method(), path = req.uri().path(), status = r.status.as_u16(), "admin: request refused: {}", r.message);
    error_reply(r.status, r.message)
}

async fn handle(req: Request<Incoming>, control: &Control, peer: SocketAddr, local: SocketAddr) -> Reply {
    let snap = match control.snapshot() {
        Ok(s) => s,
        Err(e) => return control_error(e),
    };
    let admin = snap.config.admin.as_ref();
    let listener = Listener { addr: local, allowed: admin.map_or(&[][..], |a| &a.allowed_hosts) };
    if let Err(r) = guard::check_host(&req, &listener) {
        return refused(r, &req, peer);
    }
    let token = admin.and_then(|a| a.token.as_deref());
    let creds = credentials(&req, token);
    if creds == Credentials::None {
        tracing::info!(client = %peer, path = req.uri().path(), "admin: request without the token refused");
        let mut r = error_reply(StatusCode::UNAUTHORIZED, "this admin interface needs its token");
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"tollgate admin\", charset=\"UTF-8\""),
        );
        return r;
    }
    if let Err(r) = guard::check_change(&req, &listener, token.is_some(), creds == Credentials::Bearer) {
        return refused(r, &req, peer);
    }
    // Not held while the request runs (a reload replaces it).
    drop(snap);
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    match (&method, segments.as_slice()) {
        (&Method::GET, [""] | ["stats"]) => crate::page::reply(control).unwrap_or_else(control_error),
        (&Method::GET, ["metrics"]) => crate::metrics::reply(control).unwrap_or_else(control_error),
        (&Method::GET, ["api"]) | (&Method::GET, ["api", "stats"]) => match control.report() {
            Ok(r) => json_reply(StatusCode::OK, &r),
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "info"]) => match control.report() {
            Ok(r) => json_reply(StatusCode::OK, &r.info),
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "frontends"]) => match control.report() {
            Ok(r) => json_reply(StatusCode::OK, &r.frontends),
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "backends"]) => match control.report() {
            Ok(r) => json_reply(StatusCode::OK, &r.backends),
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "backends", b]) => match control.report() {
            Ok(r) => match r.backends.into_iter().find(|x| x.name == *b) {
                Some(x) => json_reply(StatusCode::OK, &x),
                None => control_error(ControlError::NoBackend(b.to_string())),
            },
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "backends", b, "servers", s]) => match control.server(b, s) {
            Ok(s) => json_reply(StatusCode::OK, &tollgate_proxy::runtime::report::server_report(&s)),
            Err(e) => control_error(e),
        },
        (&Method::PUT, ["api", "backends", b, "servers", s])
        | (&Method::PATCH, ["api", "backends", b, "servers", s]) => {
            let (b, s) = (b.to_string(), s.to_string());
            let (change, addr) = match read_change(req).await {
                Ok(c) => c,
                Err(r) => return r,
            };
            // The address first: the server it makes carries the state and weight.
            if let Some(a) = addr
                && let Err(e) = control.set_server_addr(&b, &s, a)
            {
                return control_error(e);
            }
            match control.set_server(&b, &s, change) {
                Ok(r) => json_reply(StatusCode::OK, &r),
                Err(e) => control_error(e),
            }
        }
        (&Method::POST, ["api", "backends", b, "servers"]) => {
            let b = b.to_string();
            crate::http_servers::add(control, &b, req, MAX_BODY, control_error).await
        }
        (&Method::DELETE, ["api", "backends", b, "servers", s]) => {
            crate::http_servers::delete(control, b, s, control_error)
        }
        (&Method::POST, ["api", "backends", b, "servers", s, "shutdown-sessions"]) => {
            crate::http_servers::shutdown(control, b, s, control_error)
        }
        (&Method::GET, ["api", "backends", b, "table"]) => crate::http_servers::table(control, b, control_error),
        (&Method::GET, ["api", "tables"]) => match control.counter_tables(0) {
            Ok(t) => json_reply(StatusCode::OK, &t),
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "tables", t]) => {
            let limit = query_limit(req.uri().query());
            match control.counter_table(t, limit) {
                Ok(t) => json_reply(StatusCode::OK, &t),
                Err(e) => control_error(e),
            }
        }
        (&Method::DELETE, ["api", "tables", t]) => match control.clear_table(t) {
            Ok(n) => json_reply(StatusCode::OK, &serde_json::json!({ "cleared": n })),
            Err(e) => control_error(e),
        },
        (&Method::GET, ["api", "cache"]) => match control.report() {
            Ok(r) => json_reply(StatusCode::OK, &r.caches),
            Err(e) => control_error(e),
        },
        (&Method::DELETE, ["api", "cache", z]) => match crate::cache::purge(control, z, req.uri().query()) {
            Ok(r) => r,
            Err(crate::cache::PurgeError::Control(e)) => control_error(e),
            Err(crate::cache::PurgeError::NoZone(z)) => {
                error_reply(StatusCode::NOT_FOUND, format!("no such cache zone: {z}"))
            }
            Err(crate::cache::PurgeError::BadQuery(m)) => error_reply(StatusCode::BAD_REQUEST, m),
        },
        (&Method::POST, ["api", "reload"]) => {
            // Off the admin thread's event loop: a reload reads files and waits for workers.
            let c = control.clone();
            match tokio::task::spawn_blocking(move || c.reload()).await {
                Ok(Ok(report)) => json_reply(
                    StatusCode::OK,
                    &json!({ "reloaded": true, "summary": report.to_string(), "needs_restart": report.needs_restart }),
                ),
                Ok(Err(e)) => control_error(e),
                Err(e) => error_reply(StatusCode::INTERNAL_SERVER_ERROR, format!("reload failed: {e}")),
            }
        }
        (_, ["api", ..]) => {
            let allowed = match segments.as_slice() {
                ["api", "backends", _, "servers", _] => "GET, PUT, PATCH, DELETE",
                ["api", "backends", _, "servers"] | ["api", "backends", _, "servers", _, "shutdown-sessions"] => "POST",
                ["api", "reload"] => "POST",
                ["api", "cache", _] => "DELETE",
                ["api", "tables", _] => "GET, DELETE",
                _ => "GET",
            };
            let known = matches!(
                segments.as_slice(),
                ["api"]
                    | ["api", "stats" | "info" | "frontends" | "backends" | "reload"]
                    | ["api", "backends", _]
                    | ["api", "backends", _, "servers", _]
                    | ["api", "backends", _, "servers"]
                    | ["api", "backends", _, "servers", _, "shutdown-sessions"]
                    | ["api", "backends", _, "table"]
                    | ["api", "cache"]
                    | ["api", "cache", _]
                    | ["api", "tables"]
                    | ["api", "tables", _]
            );
            if known {
                let mut r = error_reply(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed here"));
                r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static(allowed));
                r
            } else {
                error_reply(StatusCode::NOT_FOUND, format!("no such endpoint: {path}"))
            }
        }
        _ => error_reply(StatusCode::NOT_FOUND, format!("no such page: {path}")),
    }
}

/// `{"state": "ready" | "drain" | "maint", "weight": N, "addr": "IP:PORT"}`,
/// any of them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeBody {
    state: Option<String>,
    weight: Option<serde_json::Value>,
    addr: Option<String>,
}

/// A change's state and weight, and its new address; all checked before
/// anything applies.
async fn read_change(req: Request<Incoming>) -> Result<(ServerChange, Option<SocketAddr>), Reply> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Err(error_reply(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}"))),
    };
    let parsed: ChangeBody = serde_json::from_slice(&body).map_err(|e| {
        error_reply(StatusCode::BAD_REQUEST, format!("the body must be JSON like {{\"state\": \"drain\"}}: {e}"))
    })?;
    let state = match parsed.state {
        Some(s) => Some(AdminState::parse(&s).ok_or_else(|| control_error(ControlError::BadState(s)))?),
        None => None,
    };
    let weight = match parsed.weight {
        Some(w) => match w.as_u64().filter(|w| *w <= 256) {
            Some(w) => Some(w as u32),
            None => return Err(control_error(ControlError::BadWeight(w.to_string()))),
        },
        None => None,
    };
    let addr = match parsed.addr {
        Some(a) => Some(crate::http_servers::parse_addr(&a).map_err(control_error)?),
        None => None,
    };
    if state.is_none() && weight.is_none() && addr.is_none() {
        return Err(error_reply(StatusCode::BAD_REQUEST, "nothing to change: give \"state\", \"weight\" or \"addr\""));
    }
    Ok((ServerChange { state, weight }, addr))
}
