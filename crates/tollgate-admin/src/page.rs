//! The stats page (`GET /` and `/stats` on the admin listener): one
//! self-contained HTML document, laid out like HAProxy's stats page. An info
//! header, one table per frontend, one table per backend with a row per server
//! (coloured by its status) and a total row, one table per cache zone.
//!
//! The page is rendered here and only here. Its small inline script refreshes it
//! every `admin.refresh` by fetching the page again and swapping the `#stats`
//! element, so refreshing does not flicker, the scroll position stays and nothing
//! is rendered twice (once in Rust, once in JavaScript). Unless `admin.read_only`
//! is set, each server row has Ready / Drain / Maint buttons and a weight field;
//! they call `PUT /api/backends/{b}/servers/{s}` with `fetch()` (same origin, so a
//! browser that logged in with basic auth sends it again; with `Content-Type:
//! application/json`, which the listener requires of a change, admin/guard.rs)
//! and refresh the page.
//! Without JavaScript a `<meta>` refresh reloads the page instead.
//!
//! Every name written into the document goes through [`Esc`].

use super::reply::Reply;
use super::{Control, ControlError};
use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use std::fmt::{self, Display, Write};
use std::time::Duration;
use tollgate_proxy::cache::CacheReport;
use tollgate_proxy::runtime::report::{BackendReport, FrontendReport, Info, Report, Responses, ServerReport};

/// What the page shows besides the report.
#[derive(Debug, Clone, Copy)]
pub struct PageOptions {
    /// How often the page refreshes itself; zero: never.
    pub refresh: Duration,
    /// No buttons: changes are refused anyway.
    pub read_only: bool,
}

/// The page for the server `control` drives, as an HTTP response.
pub(crate) fn reply(control: &Control) -> Result<Reply, ControlError> {
    let report = control.report()?;
    let refresh = control.snapshot()?.config.admin.as_ref().map_or(Duration::ZERO, |a| a.refresh);
    let html = render(&report, &PageOptions { refresh, read_only: control.read_only() });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        // The buttons change live state: no framing by another site. Nothing is
        // loaded from anywhere; the only requests are to this listener.
        .header(header::X_FRAME_OPTIONS, "DENY")
        .header(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        )
        .body(Full::new(Bytes::from(html)))
        .expect("valid response"))
}

/// Text escaped for HTML content and quoted attribute values.
pub struct Esc<'a>(pub &'a str);

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A duration in seconds the way HAProxy's page shows it: `42s`, `5m07s`,
/// `3h12m`, `2d05h`.
pub fn age(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d{h:02}h")
    } else if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

/// A byte count in binary units, one decimal: `512 B`, `1.5 KiB`, `3.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The CSS class of a status: the row's colour.
fn status_class(status: &str) -> &'static str {
    match status {
        "UP" => "s-up",
        "no check" => "s-nocheck",
        "DRAIN" => "s-drain",
        "MAINT" => "s-maint",
        _ => "s-down",
    }
}

/// The whole document.
pub fn render(report: &Report, opts: &PageOptions) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = document(&mut out, report, opts);
    out
}

fn document(out: &mut String, report: &Report, opts: &PageOptions) -> fmt::Result {
    let refresh = opts.refresh.as_secs().max(u64::from(!opts.refresh.is_zero()));
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Tollgate statistics (pid {})</title>\n",
        report.info.pid
    )?;
    if refresh > 0 {
        writeln!(out, "<noscript><meta http-equiv=\"refresh\" content=\"{refresh}\"></noscript>")?;
    }
    writeln!(out, "<style>{CSS}</style></head>")?;
    write!(out, "<body data-refresh=\"{}\">\n<header>", opts.refresh.as_millis())?;
    write!(out, "<h1>Tollgate <span class=\"ver\">{}</span></h1>", Esc(report.info.version))?;
    out.push_str("<div class=\"controls\">");
    if refresh > 0 {
        write!(out, "<label><input type=\"checkbox\" id=\"auto\" checked> refresh every {refresh} s</label> ")?;
    } else {
        out.push_str("<span class=\"muted\">auto-refresh off (admin.refresh = 0)</span> ");
    }
    out.push_str("<button type=\"button\" id=\"refresh\">Refresh now</button> <span id=\"note\" role=\"status\"></span></div></header>\n");
    out.push_str("<main id=\"stats\">\n");
    info(out, &report.info, opts)?;
    legend(out)?;
    for f in &report.frontends {
        frontend(out, f)?;
    }
    for b in &report.backends {
        backend(out, b, opts)?;
    }
    for c in &report.caches {
        cache(out, c)?;
    }
    out.push_str("</main>\n");
    writeln!(out, "<script>{SCRIPT}</script>\n</body></html>")
}

fn info(out: &mut String, i: &Info, opts: &PageOptions) -> fmt::Result {
    out.push_str("<section class=\"info\"><table class=\"kv\">");
    let rows: [(&str, String); 8] = [
        ("pid", i.pid.to_string()),
        ("workers", i.workers.to_string()),
        ("uptime", age(i.uptime_sec)),
        ("config", i.config.clone()),
        ("reloads", i.reloads.to_string()),
        (
            "connections",
            format!("{} current, {} limit, {} total", i.current_connections, i.max_connections, i.total_connections),
        ),
        ("rates", format!("{} conn/s, {} req/s; {} requests", i.connection_rate, i.request_rate, i.total_requests)),
        ("admin", if opts.read_only { "read-only".into() } else { "changes allowed".into() }),
    ];
    for (k, v) in &rows {
        write!(out, "<tr><th>{k}</th><td>{}</td></tr>", Esc(v))?;
    }
    out.push_str("</table></section>\n");
    Ok(())
}

fn legend(out: &mut String) -> fmt::Result {
    out.push_str("<p class=\"legend\">");
    for (status, what) in [
        ("UP", "up, checks pass"),
        ("no check", "up, not checked"),
        ("DRAIN", "draining: no new sessions"),
        ("MAINT", "maintenance: no traffic"),
        ("DOWN", "down: failing its checks"),
    ] {
        write!(out, "<span class=\"{}\">{}</span> {} ", status_class(status), Esc(status), Esc(what))?;
    }
    out.push_str("</p>\n");
    Ok(())
}

/// A table's title bar and its two header rows: `groups` are (title, columns).
fn table_head(out: &mut String, kind: &str, name: &str, note: &str, groups: &[(&str, &[&str])]) -> fmt::Result {
    write!(
        out,
        "<table class=\"px {kind}\" data-{kind}=\"{n}\"><thead>\
         <tr class=\"title\"><th colspan=\"{span}\">{n}<span class=\"note\">{note}</span></th></tr><tr>",
        n = Esc(name),
        note = Esc(note),
        span = groups.iter().map(|(_, c)| c.len().max(1)).sum::<usize>()
    )?;
    for (title, cols) in groups {
        if cols.is_empty() {
            write!(out, "<th rowspan=\"2\">{title}</th>")?;
        } else {
            write!(out, "<th colspan=\"{}\">{title}</th>", cols.len())?;
        }
    }
    out.push_str("</tr><tr>");
    for (_, cols) in groups {
        for c in *cols {
            write!(out, "<th>{c}</th>")?;
        }
    }
    out.push_str("</tr></thead><tbody>");
    Ok(())
}

const RESPONSES: (&str, &[&str]) = ("Responses", &["1xx", "2xx", "3xx", "4xx", "5xx", "other"]);

fn responses(out: &mut String, r: &Responses) -> fmt::Result {
    for n in [r.r1xx, r.r2xx, r.r3xx, r.r4xx, r.r5xx, r.other] {
        write!(out, "<td>{n}</td>")?;
    }
    Ok(())
}

fn bytes_cells(out: &mut String, bytes_in: u64, bytes_out: u64) -> fmt::Result {
    for n in [bytes_in, bytes_out] {
        write!(out, "<td title=\"{n} bytes\">{}</td>", bytes(n))?;
    }
    Ok(())
}

fn frontend(out: &mut String, f: &FrontendReport) -> fmt::Result {
    let binds = format!("frontend on {}", f.binds.join(", "));
    table_head(
        out,
        "frontend",
        &f.name,
        &binds,
        &[
            ("", &[]),
            ("Status", &[]),
            ("Sessions", &["Cur", "Max", "Limit", "Total"]),
            ("Session rate", &["Cur", "Max"]),
            ("Requests", &["Total", "Rate", "Max"]),
            ("Bytes", &["In", "Out"]),
            ("Denied", &[]),
            ("Errors", &[]),
            RESPONSES,
        ],
    )?;
    write!(
        out,
        "<tr class=\"frontend\"><td class=\"name\">Frontend</td><td class=\"st\">OPEN</td>\
         <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        f.sessions_cur,
        f.sessions_max,
        f.sessions_limit,
        f.sessions_total,
        f.session_rate,
        f.session_rate_max,
        f.requests_total,
        f.request_rate,
        f.request_rate_max
    )?;
    bytes_cells(out, f.bytes_in, f.bytes_out)?;
    write!(out, "<td>{}</td><td>{}</td>", f.denied, f.request_errors)?;
    responses(out, &f.responses)?;
    out.push_str("</tr></tbody></table>\n");
    Ok(())
}

fn backend(out: &mut String, b: &BackendReport, opts: &PageOptions) -> fmt::Result {
    let note = format!("backend, {} balancing, {}/{} servers up", b.balance, b.servers_up, b.servers.len());
    let mut groups: Vec<(&str, &[&str])> = vec![
        ("Server", &[]),
        ("Status", &[]),
        ("Last chg", &[]),
        ("Weight", &[]),
        ("Sessions", &["Cur", "Max", "Limit", "Total"]),
        ("Rate", &["Cur", "Max"]),
        ("Queue", &["Cur", "Max"]),
        ("Bytes", &["In", "Out"]),
        RESPONSES,
        ("Conn errors", &[]),
        ("Check", &["Last", "Time", "Failed", "Downs"]),
    ];
    if !opts.read_only {
        groups.push(("Set state / weight", &[]));
    }
    table_head(out, "backend", &b.name, &note, &groups)?;
    for s in &b.servers {
        server(out, &b.name, s, opts)?;
    }
    write!(
        out,
        "</tbody><tfoot><tr class=\"total {cls}\"><td class=\"name\">Backend</td><td class=\"st\">{st}</td><td></td>\
         <td>{w}</td><td>{}</td><td>{}</td><td></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        b.sessions_cur,
        b.sessions_max,
        b.sessions_total,
        b.session_rate,
        b.session_rate_max,
        b.queue_cur,
        b.queue_max,
        cls = status_class(b.status),
        st = Esc(b.status),
        w = b.weight,
    )?;
    bytes_cells(out, b.bytes_in, b.bytes_out)?;
    responses(out, &b.responses)?;
    write!(out, "<td>{}</td><td colspan=\"4\"></td>", b.connect_errors)?;
    if !opts.read_only {
        out.push_str("<td></td>");
    }
    out.push_str("</tr></tfoot></table>\n");
    Ok(())
}

/// A cache zone: what it holds, how requests went, what reached the origin.
fn cache(out: &mut String, c: &CacheReport) -> fmt::Result {
    let disk_note = c.disk.as_ref().map_or(String::new(), |d| format!(", {} on disk", bytes(d.limit)));
    let note =
        format!("cache zone, {} of memory{disk_note}, objects up to {}", bytes(c.memory_limit), bytes(c.max_object));
    table_head(
        out,
        "cache",
        &c.name,
        &note,
        &[
            ("", &[]),
            ("Stored", &["Objects", "Bytes", "Full"]),
            ("Requests", &["Hits", "Misses", "Hit %", "Stale", "Bypass"]),
            ("Origin", &["Revalidations", "304", "Coalesced"]),
            ("Store", &["Stores", "Evictions", "Purged"]),
            ("Disk", &["Objects", "Bytes", "Full", "Hits", "Writes", "Evictions", "Errors"]),
        ],
    )?;
    let looked = c.hits + c.misses;
    let ratio = if looked == 0 { "-".to_string() } else { format!("{:.1}", c.hits as f64 * 100.0 / looked as f64) };
    let full = format!("{:.0}%", c.bytes as f64 * 100.0 / c.memory_limit.max(1) as f64);
    write!(out, "<tr class=\"cache\"><td class=\"name\">Zone</td><td>{}</td>", c.objects)?;
    write!(out, "<td title=\"{} bytes\">{}</td><td>{full}</td>", c.bytes, bytes(c.bytes))?;
    for n in [c.hits, c.misses] {
        write!(out, "<td>{n}</td>")?;
    }
    write!(out, "<td>{ratio}</td>")?;
    for n in [c.stale, c.bypass, c.revalidations, c.not_modified, c.coalesced, c.stores, c.evictions, c.purged] {
        write!(out, "<td>{n}</td>")?;
    }
    match &c.disk {
        Some(d) => {
            let full = format!("{:.0}%", d.bytes as f64 * 100.0 / d.limit.max(1) as f64);
            let loading = if d.loaded { "" } else { " (loading)" };
            write!(
                out,
                "<td>{}{loading}</td><td title=\"{} bytes\">{}</td><td>{full}</td>",
                d.objects,
                d.bytes,
                bytes(d.bytes)
            )?;
            for n in [d.hits, d.writes, d.evictions, d.errors] {
                write!(out, "<td>{n}</td>")?;
            }
        }
        None => out.push_str(&"<td>-</td>".repeat(7)),
    }
    out.push_str("</tr></tbody></table>\n");
    Ok(())
}

fn server(out: &mut String, backend: &str, s: &ServerReport, opts: &PageOptions) -> fmt::Result {
    write!(
        out,
        "<tr class=\"server {cls}\" data-backend=\"{b}\" data-server=\"{n}\" data-state=\"{state}\">\
         <td class=\"name\" title=\"{addr}\">{n}{bck}</td><td class=\"st\">{st}</td><td>{chg}</td><td>{w}</td>",
        cls = status_class(s.status),
        b = Esc(backend),
        n = Esc(&s.name),
        state = s.state,
        addr = Esc(&s.addr),
        bck = if s.backup { " <span class=\"tag\">backup</span>" } else { "" },
        st = Esc(s.status),
        chg = age(s.last_change_sec),
        w = s.weight,
    )?;
    let limit = s.sessions_limit.map_or_else(|| "-".to_string(), |l| l.to_string());
    write!(
        out,
        "<td>{}</td><td>{}</td><td>{limit}</td><td>{}</td><td>{}</td><td>{}</td><td>-</td><td>-</td>",
        s.sessions_cur, s.sessions_max, s.sessions_total, s.session_rate, s.session_rate_max
    )?;
    bytes_cells(out, s.bytes_in, s.bytes_out)?;
    responses(out, &s.responses)?;
    write!(out, "<td>{}</td>", s.connect_errors)?;
    let c = &s.check;
    if c.active || c.passive {
        let last = c.last.as_deref().unwrap_or("pending");
        let cls = match c.last_ok {
            Some(true) => "ok",
            Some(false) => "fail",
            None => "",
        };
        let time = c.last_duration_ms.map_or_else(|| "-".to_string(), |ms| format!("{ms} ms"));
        write!(
            out,
            "<td class=\"chk {cls}\">{}</td><td>{time}</td><td>{}</td><td>{}</td>",
            Esc(last),
            c.failed_checks,
            c.downs
        )?;
    } else {
        out.push_str("<td class=\"chk\">no check</td><td>-</td><td>-</td><td>-</td>");
    }
    if !opts.read_only {
        out.push_str("<td class=\"act\">");
        for (state, label) in [("ready", "Ready"), ("drain", "Drain"), ("maint", "Maint")] {
            let current = if state == s.state { " disabled" } else { "" };
            write!(out, "<button type=\"button\" data-act=\"state\" data-to=\"{state}\"{current}>{label}</button>")?;
        }
        write!(
            out,
            " <input class=\"weight\" type=\"number\" min=\"0\" max=\"256\" value=\"{}\" aria-label=\"weight of {}\">\
             <button type=\"button\" data-act=\"weight\">Set</button></td>",
            s.weight,
            Esc(&s.name)
        )?;
    }
    out.push_str("</tr>");
    Ok(())
}

/// Compact, like HAProxy's page; row colours are HAProxy's.
const CSS: &str = r#"
body { font: 12px Verdana, Arial, Helvetica, sans-serif; margin: 8px 12px; color: #000; background: #fff; }
header { display: flex; align-items: baseline; gap: 24px; flex-wrap: wrap; border-bottom: 2px solid #a00030; margin-bottom: 8px; }
h1 { font-size: 18px; margin: 4px 0; color: #a00030; }
h1 .ver { font-size: 12px; color: #555; font-weight: normal; }
.controls { display: flex; align-items: center; gap: 8px; }
.muted { color: #666; }
#note { color: #060; }
#note.bad { color: #b00; font-weight: bold; }
table { border-collapse: collapse; margin: 0 0 12px 0; }
table.kv th { text-align: left; padding: 1px 12px 1px 0; font-weight: bold; color: #333; }
table.kv td { padding: 1px 8px 1px 0; }
table.px { border: 1px solid #999; }
table.px th, table.px td { border: 1px solid #bbb; padding: 1px 5px; white-space: nowrap; }
table.px thead th { background: #dcdcd0; font-weight: normal; }
table.px tr.title th { background: #a00030; color: #fff; font-weight: bold; text-align: left; font-size: 13px; }
table.px.frontend tr.title th { background: #6a4090; }
.note { font-weight: normal; font-size: 11px; margin-left: 12px; color: #f4e8ee; }
table.px td { text-align: right; }
table.px td.name, table.px td.st, table.px td.chk, table.px td.act { text-align: left; }
td.name { font-weight: bold; }
tr.frontend, tr.total { background: #e8e8d0; }
tr.total td { font-weight: bold; border-top: 2px solid #999; }
.tag { font-weight: normal; font-size: 10px; background: #fff8; border: 1px solid #888; padding: 0 2px; }
td.chk.fail { color: #900; font-weight: bold; }
td.act button { font-size: 11px; padding: 0 4px; }
td.act input.weight { width: 44px; font-size: 11px; }
.s-up { background: #c0ffc0; }
.s-nocheck { background: #d8f0d0; }
.s-drain { background: #20a0ff; }
.s-maint { background: #c07820; }
.s-down { background: #ff9090; }
tr.total.s-up, tr.total.s-nocheck { background: #e8e8d0; }
.legend span { display: inline-block; padding: 0 6px; border: 1px solid #999; margin-left: 8px; }
"#;

/// Auto-refresh (swapping `#stats` for a fresh copy of the page) and the
/// buttons. The rows carry `data-backend`/`data-server`; names reach the URL
/// through encodeURIComponent and the note through textContent.
const SCRIPT: &str = r##"
(() => {
  "use strict";
  const every = Number(document.body.dataset.refresh) || 0;
  const note = document.getElementById("note");
  const auto = document.getElementById("auto");
  // From the origin: a page opened as http://user:pass@host/ has its
  // credentials in its own URL, and fetch() refuses URLs that carry them (the
  // browser still sends them, from its cache).
  const here = location.origin;
  let busy = false;
  function say(text, bad) {
    note.textContent = text;
    note.className = bad ? "bad" : "";
  }
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const r = await fetch(here + location.pathname, { cache: "no-store", headers: { accept: "text/html" } });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const fresh = new DOMParser().parseFromString(await r.text(), "text/html").getElementById("stats");
      if (!fresh) throw new Error("unexpected answer");
      document.getElementById("stats").replaceWith(fresh);
    } catch (e) {
      say("refresh failed: " + e.message, true);
    } finally {
      busy = false;
    }
  }
  async function change(row, body, button) {
    const b = row.dataset.backend, s = row.dataset.server;
    button.disabled = true;
    try {
      const r = await fetch(here + "/api/backends/" + encodeURIComponent(b) + "/servers/" + encodeURIComponent(s), {
        method: "PUT",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const j = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(j.error || "HTTP " + r.status);
      say(b + "/" + s + ": " + j.status + ", weight " + j.weight, false);
    } catch (e) {
      say(b + "/" + s + ": " + e.message, true);
    }
    await refresh();
  }
  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("button");
    if (!button) return;
    if (button.id === "refresh") return void refresh();
    const row = button.closest("tr[data-server]");
    if (!row) return;
    if (button.dataset.act === "state") {
      change(row, { state: button.dataset.to }, button);
    } else if (button.dataset.act === "weight") {
      const w = row.querySelector("input.weight").value.trim();
      if (!/^\d+$/.test(w)) return say("the weight must be a whole number from 0 to 256", true);
      change(row, { weight: Number(w) }, button);
    }
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && ev.target.matches("input.weight")) {
      ev.target.closest("tr").querySelector("button[data-act=weight]").click();
    }
  });
  if (every > 0) {
    setInterval(() => {
      // Not while the auto box is off, nor while a weight is being typed.
      const typing = document.activeElement && document.activeElement.matches("#stats input");
      if (auto.checked && !typing) refresh();
    }, every);
  }
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_proxy::runtime::report::{CheckReport, FrontendReport};

    fn server(name: &str, status: &'static str, state: &'static str) -> ServerReport {
        ServerReport {
            name: name.into(),
            addr: "127.0.0.1:9000".into(),
            fqdn: None,
            state,
            health: "up",
            status,
            weight: 7,
            configured_weight: 1,
            backup: false,
            cookie: String::new(),
            sessions_cur: 2,
            sessions_max: 3,
            sessions_limit: Some(50),
            sessions_total: 1234,
            session_rate: 4,
            session_rate_max: 9,
            bytes_in: 100,
            bytes_out: 5 * 1024 * 1024,
            connect_errors: 1,
            connections_opened: 10,
            responses: Responses { r2xx: 1200, r5xx: 34, ..Default::default() },
            check: CheckReport {
                active: true,
                passive: false,
                last: Some("HTTP status 200".into()),
                last_ok: Some(true),
                last_duration_ms: Some(3),
                checks: 10,
                failed_checks: 2,
                downs: 1,
                consecutive_failures: 0,
            },
            last_change_sec: 3725,
        }
    }

    fn report() -> Report {
        Report {
            info: Info {
                name: "tollgate",
                version: "0.1.0",
                pid: 4242,
                uptime_sec: 90_061,
                start_time: 1_700_000_000,
                workers: 2,
                max_connections: 1000,
                current_connections: 1,
                total_connections: 10,
                total_requests: 20,
                connection_rate: 0,
                request_rate: 0,
                reloads: 3,
                pipes_max: 128,
                pipes_used: 3,
                pipes_free: 5,
                spliced_bytes: 1_000_000,
                config: "/etc/tollgate/<odd>.toml".into(),
            },
            frontends: vec![FrontendReport {
                name: "web".into(),
                mode: "http",
                binds: vec!["0.0.0.0:80".into()],
                sessions_cur: 1,
                sessions_max: 5,
                sessions_limit: 1000,
                sessions_total: 10,
                session_rate: 0,
                session_rate_max: 3,
                requests_total: 20,
                requests_h2_total: 0,
                requests_h3_total: 0,
                request_rate: 0,
                request_rate_max: 6,
                bytes_in: 2048,
                bytes_out: 4096,
                denied: 1,
                denied_connections: 0,
                request_errors: 2,
                duration: Default::default(),
                responses: Responses { r2xx: 18, r4xx: 2, ..Default::default() },
            }],
            backends: vec![BackendReport {
                name: "app".into(),
                mode: "http",
                balance: "roundrobin".into(),
                status: "UP",
                servers_up: 1,
                sessions_cur: 2,
                sessions_max: 3,
                sessions_total: 1234,
                session_rate: 4,
                session_rate_max: 9,
                queue_cur: 0,
                queue_max: 4,
                bytes_in: 100,
                bytes_out: 5 * 1024 * 1024,
                connect_errors: 1,
                response_time: Default::default(),
                connect_time: Default::default(),
                responses: Responses { r2xx: 1200, r5xx: 34, ..Default::default() },
                weight: 7,
                servers: vec![server("s1", "UP", "ready"), server("s2", "DRAIN", "drain")],
            }],
            caches: vec![CacheReport {
                name: "main<z>".into(),
                memory_limit: 4 << 20,
                max_object: 1 << 20,
                objects: 12,
                bytes: 1 << 20,
                hits: 30,
                misses: 10,
                disk: Some(tollgate_proxy::cache::DiskReport {
                    limit: 1 << 30,
                    objects: 40,
                    bytes: 1 << 28,
                    loaded: true,
                    hits: 6,
                    writes: 41,
                    errors: 2,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            acme: Vec::new(),
            etcd: None,
        }
    }

    const RW: PageOptions = PageOptions { refresh: Duration::from_secs(5), read_only: false };

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(Esc("a<b>&\"c'd").to_string(), "a&lt;b&gt;&amp;&quot;c&#39;d");
        assert_eq!(Esc("plain-name_1.x").to_string(), "plain-name_1.x");
        assert_eq!(Esc("").to_string(), "");
        assert_eq!(Esc("é<").to_string(), "é&lt;");
    }

    #[test]
    fn every_name_is_escaped() {
        let mut r = report();
        r.backends[0].name = "<script>alert(1)</script>".into();
        r.backends[0].servers[0].name = "s\"1' onmouseover=x".into();
        r.frontends[0].name = "f&<b>".into();
        let html = render(&r, &RW);
        assert!(!html.contains("<script>alert"), "raw backend name in the page");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!html.contains("s\"1'"), "raw server name in an attribute");
        assert!(html.contains("data-server=\"s&quot;1&#39; onmouseover=x\""));
        assert!(html.contains("f&amp;&lt;b&gt;"));
        assert!(html.contains("/etc/tollgate/&lt;odd&gt;.toml"));
        // Exactly one script element: ours.
        assert_eq!(html.matches("<script>").count(), 1);
    }

    #[test]
    fn rows_are_coloured_by_status_and_carry_their_counters() {
        let html = render(&report(), &RW);
        assert!(
            html.contains("<tr class=\"server s-up\" data-backend=\"app\" data-server=\"s1\" data-state=\"ready\">")
        );
        assert!(
            html.contains("<tr class=\"server s-drain\" data-backend=\"app\" data-server=\"s2\" data-state=\"drain\">")
        );
        assert!(
            html.contains(
                "<td class=\"st\">UP</td><td>1h02m</td><td>7</td><td>2</td><td>3</td><td>50</td><td>1234</td>"
            )
        );
        assert!(html.contains("<td title=\"5242880 bytes\">5.0 MiB</td>"));
        assert!(html.contains("<td class=\"chk ok\">HTTP status 200</td><td>3 ms</td><td>2</td><td>1</td>"));
        assert!(html.contains("<td>1200</td><td>0</td><td>0</td><td>34</td>"));
        assert!(html.contains("<tr class=\"total s-up\"><td class=\"name\">Backend</td><td class=\"st\">UP</td>"));
        assert!(html.contains("<tr class=\"frontend\"><td class=\"name\">Frontend</td><td class=\"st\">OPEN</td><td>1</td><td>5</td><td>1000</td><td>10</td>"));
        assert!(html.contains("1d01h"), "uptime");
        assert!(html.contains("data-cache=\"main&lt;z&gt;\""), "cache zone table, name escaped");
        assert!(html.contains("<td class=\"name\">Zone</td><td>12</td><td title=\"1048576 bytes\">1.0 MiB</td><td>25%</td><td>30</td><td>10</td><td>75.0</td>"));
        assert!(html.contains("4.0 MiB of memory, 1.0 GiB on disk"), "the zone's note names both tiers");
        assert!(html.contains("<td>40</td><td title=\"268435456 bytes\">256.0 MiB</td><td>25%</td><td>6</td><td>41</td><td>0</td><td>2</td></tr>"), "disk tier columns");
        for cls in ["s-up", "s-nocheck", "s-drain", "s-maint", "s-down"] {
            assert!(CSS.contains(&format!(".{cls} {{ background:")), "{cls} has a colour");
        }
    }

    #[test]
    fn buttons_only_when_changes_are_allowed() {
        let html = render(&report(), &RW);
        assert_eq!(html.matches("data-act=\"state\"").count(), 6);
        // The current state's button is disabled.
        assert!(html.contains("data-to=\"drain\" disabled>Drain</button>"));
        assert!(html.contains("data-to=\"drain\">Drain</button>"));
        assert!(html.contains("<input class=\"weight\" type=\"number\" min=\"0\" max=\"256\" value=\"7\""));
        let ro = render(&report(), &PageOptions { read_only: true, ..RW });
        assert!(!ro.contains("<button type=\"button\" data-act"));
        assert!(!ro.contains("input class=\"weight\""));
        assert!(!ro.contains("Set state / weight"));
        assert!(ro.contains("read-only"));
    }

    #[test]
    fn refresh_follows_the_setting() {
        let html = render(&report(), &RW);
        assert!(html.contains("<body data-refresh=\"5000\">"));
        assert!(html.contains("<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>"));
        assert!(html.contains("id=\"auto\" checked"));
        let off = render(&report(), &PageOptions { refresh: Duration::ZERO, ..RW });
        assert!(off.contains("<body data-refresh=\"0\">"));
        assert!(!off.contains("http-equiv"));
        assert!(!off.contains("id=\"auto\""));
        // Under a second still refreshes (the meta tag in whole seconds).
        let fast = render(&report(), &PageOptions { refresh: Duration::from_millis(500), ..RW });
        assert!(fast.contains("<body data-refresh=\"500\">") && fast.contains("content=\"1\""));
    }

    #[test]
    fn header_cells_match_row_cells() {
        for opts in [RW, PageOptions { read_only: true, ..RW }] {
            let html = render(&report(), &opts);
            for table in html.split("<table class=\"px").skip(1) {
                let table = &table[..table.find("</table>").unwrap()];
                let span: usize = table
                    .split("<tr class=\"title\"><th colspan=\"")
                    .nth(1)
                    .and_then(|t| t.split('"').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap();
                for row in table.split("<tr class=\"").skip(1).filter(|r| !r.starts_with("title")) {
                    let row = &row[..row.find("</tr>").unwrap()];
                    if row.contains("<th") {
                        continue;
                    }
                    let cells: usize = row
                        .split("<td")
                        .skip(1)
                        .map(|c| {
                            c.strip_prefix(" colspan=\"").and_then(|c| c.split('"').next()?.parse().ok()).unwrap_or(1)
                        })
                        .sum();
                    assert_eq!(cells, span, "row of {} cells under a {span}-column header: {row}", cells);
                }
            }
        }
    }

    #[test]
    fn ages_and_sizes() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(61), "1m01s");
        assert_eq!(age(3600), "1h00m");
        assert_eq!(age(86_400 * 3 + 3600 * 5), "3d05h");
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }
}
