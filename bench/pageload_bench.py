#!/usr/bin/env python3
"""Page-load benchmark (issue 29, item 5): seed 000's HTTP/2 push page in its
modern form, loaded in headless Chromium through Tollgate and through nginx,
over HTTP/1.1, HTTPS (HTTP/1.1), HTTP/2, HTTP/2 with 103 Early Hints and HTTP/3.

    python3 bench/pageload_bench.py [--tollgate PATH] [--rounds 5] [--write-docs]

The page is the seed's: an HTML page that loads 2 scripts (1.2 MB and 270 KB)
and 14 style sheets in its head and shows 10 images (170 KB each): 27
requests, about 3.3 MB (and the favicon the browser asks for, the seed's
28th, left out of the timings). Its HTML comes from an application that takes
`--think` ms to answer (an origin in this script); everything else is a file
the server under test serves itself (Tollgate: a `static` backend; nginx:
`root`). With 103 Early Hints (Tollgate: `early_hints` on the rule for `/`)
the browser fetches the scripts and sheets while the application thinks,
which is what HTTP/2 push was for. nginx 1.22 (Debian 12) has no early hints
(the `early_hints` directive came in 1.29) and no HTTP/3: its rows stop at h2.
Tollgate's h3 row: Chromium made to use QUIC for that origin at once
(`--origin-to-force-quic-on`), as it would after an `Alt-Svc`; no 103 there
(Tollgate sends interim responses over HTTP/1.1 and HTTP/2 only).

Each load is a first view: a fresh browser context (empty cache, no open
connection) in one headless Chromium, DevTools network emulation of
`--latency` ms (Chromium's emulation makes it the least time from a
request to its response head) and `--mbps` download, the load event
awaited, then
the page's Navigation and Resource Timing read: time to first byte of the
HTML, DOMContentLoaded, the load event, and the end of the last resource
("fully loaded"); the protocol of every response is checked to be the one the
row says. Rows are interleaved by round; medians and the min-max spread.

Python 3 standard library only (a small DevTools WebSocket client is here);
needs chromium, nginx and openssl (Debian packages).
"""

import argparse
import base64
import http.server
import json
import os
import random
import re
import shutil
import socket
import socketserver
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP_PORT = 18401
TG = {"h1": 18410, "https": 18411, "h2": 18412, "h2+103": 18413, "h3": 18414}
NG = {"h1": 18420, "https": 18421, "h2": 18422}
BEGIN, END = "<!-- pageload-bench: begin -->", "<!-- pageload-bench: end -->"
CSS = ["RatingStars", "speech", "style", "track"] + [f"speech{i}" for i in range(1, 11)]
JS = [("angular", 1_200_000), ("jquery-latest", 270_000)]
IMAGES, IMAGE_SIZE, CSS_SIZE = 10, 170_000, 3_000


# --------------------------------------------------------------------------- the site


def page_html():
    head = "".join(f'<script src="js/{n}.js"></script>\n' for n, _ in JS)
    head += "".join(f'<link href="css/{c}.css" rel="stylesheet" type="text/css" />\n' for c in CSS)
    imgs = "".join(f'<div><img src="images/{i}.jpg" /></div>\n' for i in range(1, IMAGES + 1))
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<title>My HTTP2 Test</title>\n{head}</head>\n"
            f"<body>\n<div>\n<h1>Images</h1>\n{imgs}</div>\n</body>\n</html>\n")


def make_site(work):
    site = os.path.join(work, "site")
    for d in ("js", "css", "images"):
        pb.mkdir(os.path.join(site, d))
    rnd = random.Random(29)
    for name, size in JS:
        line = "  function f%d(a, b) { return a.map(function (x) { return x + b; }); }\n"
        text = "".join(line % i for i in range(size // len(line) + 1))[:size]
        with open(os.path.join(site, "js", f"{name}.js"), "w") as f:
            f.write(text)
    for c in CSS:
        rule = ".%s-%d { color: #%06x; margin: %dpx; }\n"
        text = "".join(rule % (c, i, rnd.randrange(1 << 24), i % 17) for i in range(400))[:CSS_SIZE]
        with open(os.path.join(site, "css", f"{c}.css"), "w") as f:
            f.write(text)
    for i in range(1, IMAGES + 1):
        with open(os.path.join(site, "images", f"{i}.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0" + rnd.randbytes(IMAGE_SIZE - 4))
    # The browser asks for it too: the seed's 28th request.
    with open(os.path.join(site, "favicon.ico"), "wb") as f:
        f.write(b"\x00\x00\x01\x00" + rnd.randbytes(1146))
    for root, dirs, files in os.walk(work):
        os.chmod(root, 0o755)
        for n in files:
            os.chmod(os.path.join(root, n), 0o644)
    return site


class App(http.server.BaseHTTPRequestHandler):
    """The application behind `/`: the page's HTML after `think` ms."""

    think = 0.2
    html = b""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        time.sleep(self.think)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.html)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, *_):
        pass


class AppServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


# --------------------------------------------------------------------------- servers

TOLLGATE_FE = """[[frontend]]
name = "{name}"
bind = [{bind}]
default_backend = "site"
  [[frontend.rule]]
  when = {{ path = "/" }}
  backend = "app"
{hints}
"""

TOLLGATE_TAIL = """[[backend]]
name = "site"
static = {{ root = "{site}" }}
[[backend]]
name = "app"
  [[backend.server]]
  name = "a1"
  addr = "127.0.0.1:{app}"
"""

NGINX = """{user}
worker_processes 1;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    include /etc/nginx/mime.types;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    upstream app {{ server 127.0.0.1:{app}; keepalive 16; }}
{servers}
}}
"""

NGINX_SERVER = """    server {{
        listen 127.0.0.1:{port}{extra};
        root {site};
        location = / {{ proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }}
    }}
"""


def cert(work):
    crt, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    os.chmod(key, 0o644)
    return crt, key


def spki_hash(crt):
    """The base64 SHA-256 of the certificate's public key, for Chromium's
    `--ignore-certificate-errors-spki-list`: the certificate is then trusted
    as a valid one (with `--ignore-certificate-errors` it is only let through
    with an error, and Chromium uses no Early Hints on such a connection)."""
    pub = subprocess.run(["openssl", "x509", "-in", crt, "-pubkey", "-noout"], check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, check=True,
                         capture_output=True).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-binary"], input=der, check=True,
                            capture_output=True).stdout
    return base64.b64encode(digest).decode()


def configs(work, site, crt, key):
    links = [f"</js/{n}.js>; rel=preload; as=script" for n, _ in JS]
    links += [f"</css/{c}.css>; rel=preload; as=style" for c in CSS]
    hints = "  early_hints = [" + ", ".join(json.dumps(x) for x in links) + "]"
    binds = {
        "h1": f'"127.0.0.1:{TG["h1"]}"',
        "https": f'{{ addr = "127.0.0.1:{TG["https"]}", tls = {{ certs = ["{crt}"], alpn = ["http/1.1"] }} }}',
        "h2": f'{{ addr = "127.0.0.1:{TG["h2"]}", tls = {{ certs = ["{crt}"] }} }}',
        "h2+103": f'{{ addr = "127.0.0.1:{TG["h2+103"]}", tls = {{ certs = ["{crt}"] }} }}',
        "h3": f'{{ addr = "127.0.0.1:{TG["h3"]}", tls = {{ certs = ["{crt}"] }}, h3 = true }}',
    }
    with open(crt) as c, open(key) as k, open(os.path.join(work, "tollgate", "both.pem"), "w") as out:
        out.write(c.read() + k.read())
    both = os.path.join(work, "tollgate", "both.pem")
    toml = '[global]\nworkers = 1\naccess_log = "off"\n'
    for i, (row, bind) in enumerate(binds.items()):
        toml += TOLLGATE_FE.format(name=f"fe{i}", bind=bind.replace(crt, both), hints=hints if row == "h2+103" else "")
    toml += TOLLGATE_TAIL.format(site=site, app=APP_PORT)
    with open(os.path.join(work, "tollgate", "tollgate.toml"), "w") as f:
        f.write(toml)
    servers = "".join(NGINX_SERVER.format(port=NG[row], extra=extra, site=site)
                      for row, extra in (("h1", ""), ("https", " ssl"), ("h2", " ssl http2")))
    with open(os.path.join(work, "nginx", "nginx.conf"), "w") as f:
        f.write(NGINX.format(user=pb.nginx_user_line(), dir=f"{work}/nginx", cert=crt, key=key, app=APP_PORT,
                             servers=servers))


# --------------------------------------------------------------------------- DevTools


class Cdp:
    """A DevTools connection to the browser (one WebSocket, flat sessions)."""

    def __init__(self, url):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise pb.BenchError("DevTools closed during the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise pb.BenchError(f"DevTools refused the WebSocket: {head!r}")
        self.next_id = 0
        self.events = []

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise pb.BenchError("the DevTools connection closed")
            out += chunk
        return out

    def _send(self, obj):
        data = json.dumps(obj).encode()
        head = bytes([0x81])
        n = len(data)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _message(self):
        payload = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            data = self._read(n)
            op = b0 & 0x0F
            if op == 8:
                raise pb.BenchError("DevTools closed the WebSocket")
            if op in (0, 1, 2):
                payload += data
                if b0 & 0x80:
                    return json.loads(payload)

    def call(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._send(msg)
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self._message()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise pb.BenchError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)
        raise pb.BenchError(f"{method}: no answer in {timeout} s")

    def wait_event(self, method, session, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, m in enumerate(self.events):
                if m.get("method") == method and m.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._message())
        raise pb.BenchError(f"no {method} in {timeout} s")


def launch_chromium(procs, work, spki):
    profile = tempfile.mkdtemp(prefix="pageload-chromium-", dir=work)
    cmd = ["taskset", "-c", pb.CLIENT_CPU, shutil.which("chromium") or "chromium", "--headless=new", "--no-sandbox",
           "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
           "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update",
           "--disable-extensions", "--disable-sync", f"--ignore-certificate-errors-spki-list={spki}",
           f"--user-data-dir={profile}", "--enable-quic", f"--origin-to-force-quic-on=127.0.0.1:{TG['h3']}",
           "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1", "about:blank"]
    log = os.path.join(work, "chromium.log")
    if os.path.exists(log):
        os.remove(log)  # (Procs appends: an old address would be read)
    p = procs.start("chromium", cmd, log)
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(log) as f:
            m = re.search(r"DevTools listening on (ws://\S+)", f.read())
        if m:
            return Cdp(m.group(1))
        if p.poll() is not None:
            raise pb.BenchError(f"chromium exited: {pb.tail(log)}")
        time.sleep(0.1)
    raise pb.BenchError("chromium printed no DevTools address in 30 s")


TIMING_JS = """(() => {
  const n = performance.getEntriesByType('navigation')[0];
  // The favicon is fetched when the browser gets to it, not by the page.
  const r = performance.getEntriesByType('resource').filter(e => !e.name.endsWith('/favicon.ico'));
  // With a 103 first, responseStart is the hint's arrival; the page's own
  // head comes at finalResponseHeadersStart.
  const head = n.finalResponseHeadersStart || n.responseStart;
  return JSON.stringify({
    ttfb: head, hint: n.firstInterimResponseStart || 0, dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd,
    full: Math.max(n.loadEventEnd, ...r.map(e => e.responseEnd)),
    count: r.length + 1, bytes: n.encodedBodySize + r.reduce((s, e) => s + e.encodedBodySize, 0),
    protocols: [n.nextHopProtocol, ...r.map(e => e.nextHopProtocol)],
    // Fetched on the 103's word (their timing starts when the page takes them).
    hinted: r.filter(e => e.initiatorType === 'early-hints').length,
    names: r.map(e => e.name.replace(/^[a-z]+:\/\/[^/]+/, '') + ' ' + e.initiatorType),
  });
})()"""


def load(cdp, url, latency, mbps):
    ctx = cdp.call("Target.createBrowserContext")["browserContextId"]
    try:
        target = cdp.call("Target.createTarget", {"url": "about:blank", "browserContextId": ctx})["targetId"]
        session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        cdp.call("Page.enable", session=session)
        cdp.call("Network.enable", session=session)
        rate = mbps * 1e6 / 8
        cdp.call("Network.emulateNetworkConditions", {"offline": False, "latency": latency,
                                                      "downloadThroughput": rate, "uploadThroughput": rate},
                 session=session)
        cdp.call("Page.navigate", {"url": url}, session=session)
        cdp.wait_event("Page.loadEventFired", session)
        # The load event's end is set once its handlers ran: read it after.
        time.sleep(0.05)
        r = cdp.call("Runtime.evaluate", {"expression": TIMING_JS, "returnByValue": True}, session=session)
        return json.loads(r["result"]["value"])
    finally:
        cdp.call("Target.disposeBrowserContext", {"browserContextId": ctx})


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tollgate", default=os.path.join(REPO, "target", "dist", "tollgate"))
    ap.add_argument("--workdir", default="/var/tmp/tollgate-pageload-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--think", type=int, default=200, help="the application's time to answer /, ms")
    ap.add_argument("--latency", type=int, default=40, help="emulated round trip, ms")
    ap.add_argument("--mbps", type=float, default=50.0, help="emulated download rate, Mbit/s")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    if os.path.exists(a.workdir):
        shutil.rmtree(a.workdir)
    for sub in ("", "tollgate", "nginx", "nginx/tmp"):
        pb.mkdir(os.path.join(a.workdir, sub))
    site = make_site(a.workdir)
    crt, key = cert(a.workdir)
    configs(a.workdir, site, crt, key)
    App.think, App.html = a.think / 1000, page_html().encode()
    app = AppServer(("127.0.0.1", APP_PORT), App)
    threading.Thread(target=app.serve_forever, daemon=True).start()
    rows = [("Tollgate", r, TG[r]) for r in TG] + [("nginx", r, NG[r]) for r in NG]
    want = {"h1": "http/1.1", "https": "http/1.1", "h2": "h2", "h2+103": "h2", "h3": "h3"}
    procs = pb.Procs()
    results = {(s, r): [] for s, r, _ in rows}
    try:
        for cmd, what in (([a.tollgate, "check", "-c", f"{a.workdir}/tollgate/tollgate.toml"], "tollgate config"),
                          (["nginx", "-t", "-q", "-p", f"{a.workdir}/nginx/", "-c", f"{a.workdir}/nginx/nginx.conf",
                            "-e", f"{a.workdir}/nginx/error.log"], "nginx config")):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                raise pb.BenchError(f"{what} rejected:\n{r.stdout}{r.stderr}")
        d = f"{a.workdir}/tollgate"
        p = procs.start("tollgate", ["taskset", "-c", pb.PROXY_CPU, a.tollgate, "run", "-c", f"{d}/tollgate.toml"],
                        f"{d}/tollgate.log", env=dict(os.environ, RUST_LOG="warn"))
        pb.wait_port(TG["h1"], p, "tollgate", f"{d}/tollgate.log")
        d = f"{a.workdir}/nginx"
        p = procs.start("nginx", pb.nginx_cmd(pb.PROXY_CPU, d), f"{d}/stdout.log")
        pb.wait_port(NG["h1"], p, "nginx", f"{d}/error.log")
        cdp = launch_chromium(procs, a.workdir, spki_hash(crt))
        for rnd in range(a.rounds + 1):
            order = rows if rnd % 2 == 0 else rows[::-1]
            for server, row, port in order:
                scheme = "http" if row == "h1" else "https"
                t = load(cdp, f"{scheme}://127.0.0.1:{port}/", a.latency, a.mbps)
                bad = [x for x in t["protocols"] if x != want[row]]
                if t["count"] != 27 or bad:
                    raise pb.BenchError(f"{server} {row}: {t['count']} responses, protocols {set(t['protocols'])}: "
                                        f"{t['names']}")
                if rnd == 0:
                    continue  # warm-up: the servers' files in the page cache, TLS keys made
                results[(server, row)].append(t)
                pb.log(f"  round {rnd}: {server:8} {row:7} load {t['load']:7.0f} ms, full {t['full']:7.0f} ms, "
                       f"ttfb {t['ttfb']:5.0f} ms, {t['bytes'] / 1e6:.2f} MB, early hints {t['hinted']}")
    finally:
        procs.stop_all()
        app.shutdown()
    lines = [BEGIN, "",
             f"Seed 000's page (27 requests and the favicon, {sum(s for _, s in JS) / 1e6 + IMAGES * IMAGE_SIZE / 1e6 + 0.04:.1f} MB) "
             f"in headless Chromium {chromium_version()}, first views (fresh browser context each), network "
             f"emulation (at least {a.latency} ms to each response head, {a.mbps:g} Mbit/s), the application "
             f"answering `/` in "
             f"{a.think} ms; medians of {a.rounds} rounds (min-max) in ms (`python3 bench/pageload_bench.py`):", "",
             "| server, protocol | page head | DOMContentLoaded | load event | fully loaded | preloaded by the 103 |",
             "| --- | --- | --- | --- | --- | --- |"]
    for server, row, _ in rows:
        ts = results[(server, row)]

        def cell(k):
            xs = [t[k] for t in ts]
            return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"
        lines.append(f"| {server}, {row} | {cell('ttfb')} | {cell('dcl')} | {cell('load')} | {cell('full')} | "
                     f"{statistics.median(t['hinted'] for t in ts):.0f} |")
    lines += ["", "nginx 1.22 sends no 103 and serves no HTTP/3."]
    pb.emit_section(REPO, lines, BEGIN, END, a.write_docs)


def chromium_version():
    out = subprocess.run([shutil.which("chromium") or "chromium", "--version"], capture_output=True, text=True)
    m = re.search(r"(\d+\.\d+\.\d+\.\d+)", out.stdout)
    return m.group(1) if m else "?"


if __name__ == "__main__":
    pb.entry(main)
