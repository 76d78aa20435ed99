//! The browser driver's own test, against a tiny app: a page whose table is
//! rendered from the server's state and whose button POSTs a change, then
//! renders the table again.

use crate::cdp::Browser;
use crate::harness::{Origin, dead_addr, serve};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

const INDEX: &str = r#"<!doctype html>
<html><head><title>self-test</title></head><body>
<table id="stats">
  <tr><th>name</th><th>count</th></tr>
  <tr><td>clicks</td><td id="count">?</td></tr>
</table>
<button id="add">add one</button>
<script>
async function render() {
  const state = await (await fetch('/state')).json();
  document.querySelector('#count').textContent = String(state.count);
}
document.querySelector('#add').addEventListener('click', async () => {
  await fetch('/set', { method: 'POST' });
  await render();
});
render();
</script>
</body></html>"#;

/// The app: `GET /` the page, `GET /state` the count as JSON, `POST /set` adds one.
struct App {
    addr: SocketAddr,
    posts: Arc<AtomicU64>,
    _origin: Origin,
}

async fn app() -> App {
    let posts = Arc::new(AtomicU64::new(0));
    let count = posts.clone();
    let origin = serve(move |req: Request<Incoming>| {
        let answer = answer(&req, &count);
        async move { answer }
    })
    .await;
    App { addr: origin.addr, posts, _origin: origin }
}

fn answer(req: &Request<Incoming>, count: &AtomicU64) -> Response<Full<Bytes>> {
    let (status, kind, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") => (StatusCode::OK, "text/html; charset=utf-8", INDEX.to_string()),
        (&Method::GET, "/other") => {
            (StatusCode::OK, "text/html", "<!doctype html><title>other</title><p>elsewhere</p>".to_string())
        }
        (&Method::GET, "/state") => {
            (StatusCode::OK, "application/json", format!("{{\"count\":{}}}", count.load(Ordering::SeqCst)))
        }
        (&Method::POST, "/set") => {
            count.fetch_add(1, Ordering::SeqCst);
            (StatusCode::NO_CONTENT, "text/plain", String::new())
        }
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert("content-type", kind.parse().unwrap());
    resp.headers_mut().insert("cache-control", "no-store".parse().unwrap());
    resp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_selftest() {
    let Some(browser) = Browser::launch().await else {
        println!("skipped: chromium not installed");
        return;
    };
    let app = app().await;
    let page = browser.new_page(&format!("http://{}/", app.addr)).await.unwrap();

    // The table is filled from /state after the load event: wait for it, read it.
    page.wait_for("document.querySelector('#count').textContent !== '?'", WAIT).await.unwrap();
    let cell = "document.querySelector('#stats tr:nth-child(2) td:nth-child(2)').textContent";
    assert_eq!(page.eval(cell).await.unwrap(), "0");
    assert_eq!(app.posts.load(Ordering::SeqCst), 0);

    // The click POSTs, then the table shows the server's new state.
    page.click("#add").await.unwrap();
    let shown = page.wait_for(&format!("{cell} === '1' && {cell}"), WAIT).await.unwrap();
    assert_eq!(shown, "1");
    assert_eq!(app.posts.load(Ordering::SeqCst), 1, "the server got one POST /set");

    // eval: values come back as JSON, promises are awaited, exceptions are errors.
    let v = page.eval("Promise.resolve({ rows: document.querySelectorAll('#stats tr').length, n: null })").await;
    assert_eq!(v.unwrap(), serde_json::json!({ "rows": 2, "n": null }));
    assert_eq!(page.eval("undefined").await.unwrap(), serde_json::Value::Null);
    let err = page.eval("(() => { throw new Error('boom') })()").await.unwrap_err();
    assert!(err.is_js_exception() && err.to_string().contains("boom"), "{err}");

    // Waits are bounded, and say what they waited for and the last error.
    let t = Instant::now();
    let err = page.wait_for("document.querySelector('#nothing').textContent", Duration::from_millis(300)).await;
    let err = err.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(err.to_string().contains("#nothing") && err.to_string().contains("TypeError"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "the wait took {:?}", t.elapsed());
    // A condition that cannot compile fails at once, whatever the timeout.
    let err = page.wait_for("1 +", Duration::from_secs(60)).await.unwrap_err();
    assert!(err.is_js_exception() && err.to_string().contains("SyntaxError"), "{err}");

    // Navigation waits for the load; a refused connection is an error.
    page.navigate(&format!("http://{}/other", app.addr)).await.unwrap();
    assert_eq!(page.eval("document.title").await.unwrap(), "other");
    let err = page.navigate(&format!("http://{}/", dead_addr().await)).await.unwrap_err();
    assert!(err.to_string().contains("ERR_CONNECTION_REFUSED"), "{err}");
    assert_eq!(app.posts.load(Ordering::SeqCst), 1);
}
