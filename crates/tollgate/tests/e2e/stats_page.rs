//! The stats page in a real browser (headless Chromium, see cdp.rs): the
//! rendered tables and their colours, a state change and a weight change made
//! with the page's buttons, auto-refresh, and the read-only page without buttons.

use crate::cdp::{Browser, Page};
use crate::harness::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use tollgate_admin::ServerChange;
use tollgate_proxy::Server;
use tollgate_proxy::lb::AdminState;

/// Bound on every wait for the page to show something.
const WAIT: Duration = Duration::from_secs(10);

/// A proxy with frontend `web`, backend `b` over `servers` (HTTP checks every
/// 200 ms, so they show UP), and the admin listener with `admin` added.
fn start(servers: &[(&str, SocketAddr, u32)], admin: &str) -> Proxy {
    let check = "check = { type = \"http\", path = \"/\", interval = \"200ms\" }";
    proxy(&format!(
        "[admin]\nbind = \"127.0.0.1:0\"\nrefresh = \"1s\"\n{admin}\n\n{}",
        simple_config("roundrobin", servers, check)
    ))
}

/// A row as the browser shows it: its computed background and its cells' text.
struct Row {
    rgb: (u8, u8, u8),
    cells: Vec<String>,
}

impl Row {
    fn status(&self) -> &str {
        &self.cells[1]
    }
}

/// The JavaScript expression for the first row matching `selector`, or null.
fn row_js(selector: &str) -> String {
    let sel = Value::from(selector);
    format!(
        "(() => {{ const r = document.querySelector({sel}); return r && {{ bg: getComputedStyle(r).backgroundColor, \
         cells: [...r.cells].map(c => c.textContent.trim()) }}; }})()"
    )
}

async fn row(page: &Page, selector: &str) -> Row {
    let v = page.eval(&row_js(selector)).await.unwrap();
    assert!(!v.is_null(), "no row {selector} on the page");
    parse_row(&v)
}

fn parse_row(v: &Value) -> Row {
    let bg = v["bg"].as_str().unwrap();
    let n: Vec<u8> =
        bg.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    assert!(n.len() >= 3, "background {bg}");
    let cells = v["cells"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    Row { rgb: (n[0], n[1], n[2]), cells }
}

/// Waits (bounded) until the row of server `name` shows `status`; returns it.
async fn wait_status(page: &Page, name: &str, status: &str) -> Row {
    let js = row_js(&format!("tr[data-server=\"{name}\"]"));
    let v = page
        .wait_for(&format!("(() => {{ const r = {js}; return r && r.cells[1] === {status:?} && r; }})()"), WAIT)
        .await;
    match v {
        Ok(v) => parse_row(&v),
        Err(e) => {
            // The page's own message says why a button did nothing.
            let note = page.eval("document.getElementById('note').textContent").await;
            panic!("{name} never showed {status}: {e}; the page says {note:?}")
        }
    }
}

fn greenish((r, g, b): (u8, u8, u8)) -> bool {
    g > 150 && g as u16 > r as u16 + 40 && g as u16 > b as u16 + 40
}

fn blueish((r, g, b): (u8, u8, u8)) -> bool {
    b > 150 && b as u16 > r as u16 + 60 && b as u16 > g as u16 + 40
}

fn admin_state(p: &Server, server: &str) -> (AdminState, u32) {
    let snap = p.snapshot();
    let s = snap.backends[0].servers.iter().find(|s| s.cfg.name == server).unwrap();
    (s.admin(), s.weight())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_page_shows_the_servers_and_its_buttons_change_them() {
    let Some(browser) = Browser::launch().await else {
        println!("skipped: chromium not installed");
        return;
    };
    let (a, b) = (echo().await, echo().await);
    // With a token: the browser logs in with basic auth (as a person would when
    // it asks) and its fetch() calls send it again.
    let p = start(&[("s1", a.addr, 1), ("s2", b.addr, 1)], "token = \"s3cret\"");
    let web = p.addr("web").unwrap();
    let admin = p.admin_addr().unwrap();
    for _ in 0..10 {
        assert_eq!(get(web, "/").await.0, 200);
    }
    until_counted(&p, "web", 10).await;
    let page = browser.new_page(&format!("http://admin:s3cret@{admin}/")).await.unwrap();
    assert!(page.eval("document.title").await.unwrap().as_str().unwrap().starts_with("Tollgate statistics"));

    // The frontend: its row, with the requests and responses counted.
    let fe = row(&page, "table.frontend[data-frontend=\"web\"] tr.frontend").await;
    assert_eq!(fe.cells[0], "Frontend");
    assert_eq!(fe.cells[5], "10", "sessions total: {:?}", fe.cells);
    assert_eq!(fe.cells[8], "10", "requests total: {:?}", fe.cells);
    let headers: Vec<String> = serde_json::from_value(
        page.eval("[...document.querySelectorAll('table.frontend thead tr:last-child th')].map(t => t.textContent)")
            .await
            .unwrap(),
    )
    .unwrap();
    let col_2xx = headers.iter().position(|h| h == "2xx").unwrap();
    // The sub-header row lacks the two row-spanning headers (name, status), and
    // Denied and Errors, which also span both rows, come before the responses.
    assert_eq!(fe.cells[col_2xx + 4], "10", "2xx: {:?} under {headers:?}", fe.cells);

    // The backend: one row per server, UP and green (checks pass), and a total.
    let s1 = wait_status(&page, "s1", "UP").await;
    assert!(greenish(s1.rgb), "an UP row is green, not {:?}", s1.rgb);
    let s2 = row(&page, "tr[data-server=\"s2\"]").await;
    assert_eq!(s2.status(), "UP");
    assert_eq!(s1.cells[0], "s1");
    assert_eq!(s1.cells[3], "1", "weight");
    let sessions: u64 = [&s1, &s2].iter().map(|r| r.cells[7].parse::<u64>().unwrap()).sum();
    assert_eq!(sessions, 10, "sessions total per server: {:?} {:?}", s1.cells, s2.cells);
    let total = row(&page, "table.backend[data-backend=\"b\"] tr.total").await;
    assert_eq!((total.cells[0].as_str(), total.status()), ("Backend", "UP"));
    assert_eq!(total.cells[7], "10");

    // Drain s1 with its button: the row turns DRAIN and blue, the server drains.
    page.click("tr[data-server=\"s1\"] button[data-to=\"drain\"]").await.unwrap();
    let s1 = wait_status(&page, "s1", "DRAIN").await;
    assert!(blueish(s1.rgb), "a DRAIN row is blue, not {:?}", s1.rgb);
    assert_eq!(admin_state(&p, "s1").0, AdminState::Drain);
    let note = page.wait_for("document.getElementById('note').textContent", WAIT).await.unwrap();
    assert_eq!(note, "b/s1: DRAIN, weight 1");
    // Its Drain button is now the disabled one.
    let disabled =
        page.eval("[...document.querySelectorAll('tr[data-server=\"s1\"] button:disabled')].map(b => b.textContent)");
    assert_eq!(disabled.await.unwrap(), serde_json::json!(["Drain"]));

    // A weight through the field and its Set button.
    page.eval("document.querySelector('tr[data-server=\"s2\"] input.weight').value = '7'").await.unwrap();
    page.click("tr[data-server=\"s2\"] button[data-act=\"weight\"]").await.unwrap();
    page.wait_for("document.querySelector('tr[data-server=\"s2\"]').cells[3].textContent === '7'", WAIT).await.unwrap();
    assert_eq!(admin_state(&p, "s2"), (AdminState::Ready, 7));
    // A weight out of range: the API's error is shown, nothing changes.
    page.eval("document.querySelector('tr[data-server=\"s2\"] input.weight').value = '300'").await.unwrap();
    page.click("tr[data-server=\"s2\"] button[data-act=\"weight\"]").await.unwrap();
    let note = page
        .wait_for(
            "document.getElementById('note').className === 'bad' && document.getElementById('note').textContent",
            WAIT,
        )
        .await
        .unwrap();
    assert!(note.as_str().unwrap().contains("invalid weight"), "{note}");
    assert_eq!(admin_state(&p, "s2").1, 7);

    // A change made elsewhere (the API, the socket) shows by auto-refresh alone.
    p.control().set_server("b", "s2", ServerChange { state: Some(AdminState::Maint), weight: None }).unwrap();
    let s2 = wait_status(&page, "s2", "MAINT").await;
    let (r, g, b) = s2.rgb;
    assert!(r > g && g > b && r > 150, "a MAINT row is brown, not {:?}", s2.rgb);
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_stats_page_has_no_buttons() {
    let Some(browser) = Browser::launch().await else {
        println!("skipped: chromium not installed");
        return;
    };
    let a = echo().await;
    let dead = dead_addr().await;
    let p = start(&[("s1", a.addr, 1), ("s2", dead, 1)], "read_only = true");
    let admin = p.admin_addr().unwrap();
    let page = browser.new_page(&format!("http://{admin}/stats")).await.unwrap();
    assert!(greenish(wait_status(&page, "s1", "UP").await.rgb));
    let s2 = wait_status(&page, "s2", "DOWN").await;
    let (r, g, b) = s2.rgb;
    assert!(r > 200 && g < 180 && b < 180, "a DOWN row is red, not {:?}", s2.rgb);
    assert_eq!(s2.cells[s2.cells.len() - 4], "connection refused", "last check: {:?}", s2.cells);
    let controls = page.eval("document.querySelectorAll('#stats button, #stats input').length").await.unwrap();
    assert_eq!(controls, 0);
    assert_eq!(
        page.eval("document.querySelector('table.backend thead').textContent.includes('Set state')").await.unwrap(),
        false
    );
    p.stop();
}
