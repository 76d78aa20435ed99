#!/usr/bin/env python3
"""Edge benchmark: TLS handshakes, HTTP/2 and WebSockets, Tollgate against HAProxy and nginx.

Run through bench/run.sh (which installs the tools and builds Tollgate and the
load tool first):

    bash bench/run.sh --edge [--quick] [--no-build] [--write-docs]

Workloads (issue 4's benchmark, after the seeds 001 and 002):
  - tls-ecdsa, tls-rsa: full TLS handshakes (ECDSA P-256, RSA-2048 certificates),
    each followed by one HTTP/1.1 request for an 811 B file from the origin and a
    close; 50 connections in flight.
  - tls-resumed: the same with the ECDSA certificate, resuming sessions (TLS 1.3
    tickets); reports the share of handshakes resumed.
  - h2: h2load over TLS (ALPN h2), 10 connections x 100 concurrent streams, 811 B.
  - ws, wss: 10,000 WebSocket connections (plain, TLS) at 100 in flight, each one
    handshake, one 32 B echoed message and a close (the seed's load tool did so),
    to a WebSocket echo server behind the proxy.
  - flood: what a handshake flood costs the connections already established.
    RSA-2048 full handshakes at 50 in flight for 6 s (each proxy's core is then
    busy with them) while one established plain WebSocket connection sends a
    32 B message every 5 ms (`loadgen probe`); reports the handshake rate and
    the probe's echo latency (p50, p99, max).

Method: the one of bench/proxy_bench.py (whose helpers this uses). The proxy
under test runs one worker pinned to CPU 0; the load tool and the backends share
CPU 1. Each proxy is started fresh for each timed run (so its peak RSS belongs to
that run) and gets a short warm-up; proxies are interleaved over rounds. The
proxy's CPU time (utime+stime from /proc) is read around each run: one client
core cannot saturate a TLS server, so handshakes are compared by the server's CPU
per handshake, not by handshakes per second alone. The client (bench/loadgen,
rustls) offers only the X25519 key exchange, so all three servers do the same
key exchange (OpenSSL 3.0 has no ML-KEM).

Python 3 standard library only.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402
from proxy_bench import BenchError, log, loud  # noqa: E402

PORTS = {  # per proxy: TLS with ECDSA, TLS with RSA, plain
    "tollgate": (18030, 18031, 18032),
    "haproxy": (18033, 18034, 18035),
    "nginx": (18036, 18037, 18038),
}
WS_PORT = 18039
PROXIES = ["tollgate", "haproxy", "nginx"]
FILE = "f811.bin"
BEGIN, END = "<!-- edge-bench: begin -->", "<!-- edge-bench: end -->"

# id, label, kind, port index (0 ECDSA, 1 RSA, 2 plain), extra
WORKLOADS = [
    {"id": "tls-ecdsa", "label": "TLS full handshake, ECDSA P-256", "kind": "tls", "port": 0, "resume": False},
    {"id": "tls-rsa", "label": "TLS full handshake, RSA-2048", "kind": "tls", "port": 1, "resume": False},
    {"id": "tls-resumed", "label": "TLS resumed handshake (ECDSA)", "kind": "tls", "port": 0, "resume": True},
    {"id": "h2", "label": "HTTP/2 over TLS, 10 conns x 100 streams", "kind": "h2", "port": 0},
    {"id": "ws", "label": "WebSocket, plain", "kind": "ws", "port": 2},
    {"id": "wss", "label": "WebSocket over TLS", "kind": "ws", "port": 0},
    {"id": "flood", "label": "WebSocket echo during an RSA-2048 handshake flood", "kind": "flood", "port": 1,
     "resume": False},
]


def openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise BenchError(f"openssl {args[0]} failed:\n{r.stderr}")


def make_certs(work):
    """A bench CA, and from it an ECDSA P-256 and an RSA-2048 certificate for
    bench.test, each with its key in one PEM file (what all three servers read)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
            "-subj", "/CN=Tollgate bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign", "-keyout", f"{work}/ca.key", "-out", f"{work}/ca.pem")
    with open(f"{work}/leaf.ext", "w") as f:
        f.write("subjectAltName=DNS:bench.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    for name, alg in (("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
                      ("rsa", ["-newkey", "rsa:2048"])):
        key, csr, crt = f"{work}/{name}.key", f"{work}/{name}.csr", f"{work}/{name}.crt"
        openssl("req", *alg, "-nodes", "-subj", "/CN=bench.test", "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", f"{work}/ca.pem", "-CAkey", f"{work}/ca.key", "-CAcreateserial",
                "-days", "30", "-extfile", f"{work}/leaf.ext", "-out", crt)
        pem = open(crt).read() + open(key).read()
        for d in ("tollgate", "haproxy", "nginx"):
            path = f"{work}/{d}/{name}.pem"
            with open(path, "w") as f:
                f.write(pem)
            os.chmod(path, 0o644)


def prepare(work):
    pb.prepare_workdir(work)  # www files, the origin's config, dirs per proxy
    pb.mkdir(f"{work}/nginx/tmp")
    make_certs(work)
    for name, (e, r, p) in PORTS.items():
        d = f"{work}/{name}"
        subst = dict(DIR=d, ECDSA_PORT=e, RSA_PORT=r, PLAIN_PORT=p, ORIGIN_PORT=pb.ORIGIN_PORT, WS_PORT=WS_PORT)
        if name == "tollgate":
            pb.render("tollgate-edge.toml", f"{d}/edge.toml", **subst)
        elif name == "haproxy":
            pb.render("haproxy-edge.cfg", f"{d}/edge.cfg", **subst)
        else:
            pb.render("nginx-edge.conf", f"{d}/nginx.conf", USER=pb.nginx_user_line(), **subst)
            pb.render("nginx-edge-locations.conf", f"{d}/locations.conf")


def proxy_cmd(name, work, tollgate_bin):
    d = f"{work}/{name}"
    if name == "tollgate":
        return ["taskset", "-c", pb.PROXY_CPU, tollgate_bin, "run", "-c", f"{d}/edge.toml"], f"{d}/tollgate.log"
    if name == "haproxy":
        return ["taskset", "-c", pb.PROXY_CPU, "haproxy", "-db", "-f", f"{d}/edge.cfg"], f"{d}/haproxy.log"
    return pb.nginx_cmd(pb.PROXY_CPU, d), f"{d}/error.log"


def check_configs(work, tollgate_bin):
    for cmd, what in (
        (["haproxy", "-c", "-q", "-f", f"{work}/haproxy/edge.cfg"], "haproxy config"),
        (["nginx", "-t", "-q", "-p", f"{work}/nginx/", "-c", f"{work}/nginx/nginx.conf",
          "-e", f"{work}/nginx/error.log"], "nginx config"),
        ([tollgate_bin, "check", "-c", f"{work}/tollgate/edge.toml"], "tollgate config"),
    ):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise BenchError(f"{what} rejected:\n{r.stdout}{r.stderr}")


def start_proxy(procs, name, work, tollgate_bin):
    cmd, logpath = proxy_cmd(name, work, tollgate_bin)
    env = dict(os.environ, RUST_LOG="warn") if name == "tollgate" else None
    p = procs.start(name, cmd, logpath, env=env)
    for port in PORTS[name]:
        pb.wait_port(port, p, name, logpath)
    procs.remember_tree()
    return p


def start_tool(cmd):
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=pb._pdeathsig)


def finish_tool(p, timeout):
    """Waits for a tool started by start_tool (killing it if that fails or times
    out): its exit status and output."""
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        raise
    return p.returncode, out, err


def run_tool(cmd, timeout):
    return finish_tool(start_tool(cmd), timeout)


def loadgen(a, w, port, n, conns, seconds=None):
    kind = "ws" if w["kind"] == "ws" else "tls"
    seconds = seconds or a.max_seconds
    cmd = ["taskset", "-c", pb.CLIENT_CPU, a.loadgen, kind, "--addr", f"127.0.0.1:{port}", "--n", str(n),
           "--c", str(conns), "--max-seconds", str(seconds)]
    if w["port"] != 2:
        cmd += ["--ca", f"{a.workdir}/ca.pem"]
    if kind == "tls":
        cmd += ["--path", f"/{FILE}"] + (["--resume"] if w["resume"] else [])
    rc, out, err = run_tool(cmd, seconds + 60)
    if rc != 0:
        raise BenchError(f"loadgen exited {rc}: {err.strip()}")
    return json.loads(out.strip().splitlines()[-1])


FLOOD_SECONDS = 6


def flood(a, w, name, conns):
    """The flood workload: full handshakes on the RSA port, `conns` in flight for
    FLOOD_SECONDS, with `loadgen probe` on the plain port beside them (it settles
    0.5 s, then times an echo every 5 ms for FLOOD_SECONDS - 2 s, so it ends
    while the flood still runs)."""
    cmd = ["taskset", "-c", pb.CLIENT_CPU, a.loadgen, "probe", "--addr", f"127.0.0.1:{PORTS[name][2]}",
           "--interval-ms", "5", "--settle-ms", "500", "--seconds", str(FLOOD_SECONDS - 2)]
    probe = start_tool(cmd)
    try:
        r = loadgen(a, w, PORTS[name][w["port"]], 1_000_000, conns, seconds=FLOOD_SECONDS)
    except BaseException:
        probe.kill()
        probe.wait()
        raise
    rc, out, err = finish_tool(probe, 60)
    if rc != 0:
        raise BenchError(f"loadgen probe exited {rc}: {err.strip()}")
    p = json.loads(out.strip().splitlines()[-1])
    r.update({f"probe_{k}": v for k, v in p.items() if k.startswith("message_")})
    r["probe_ok"] = p["ok"]
    return r


def h2load(a, port, seconds):
    cmd = ["taskset", "-c", pb.CLIENT_CPU, "h2load", "-c", "10", "-m", "100", "-t", "1", "-D", str(seconds),
           "--warm-up-time", "1", f"https://127.0.0.1:{port}/{FILE}"]
    rc, out, err = run_tool(cmd, seconds + 60)
    done = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                     r"(\d+) errored", out)
    rps = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
    proto = re.search(r"Application protocol: (\S+)", out)
    if not (done and rps):
        raise BenchError(f"h2load output not understood (exit {rc}):\n{out}\n{err}")
    secs = float(rps.group(1)) / (1000 if rps.group(2) == "ms" else 1)
    return {"ok": int(done.group(4)), "errors": int(done.group(5)) + int(done.group(6)),
            "seconds": secs, "rps": float(rps.group(3)), "protocol": proto.group(1) if proto else "?"}


def measure(procs, a, w, name, conns):
    """One timed run on a freshly started proxy: warm-up, then the load, with the
    proxy's CPU time around the load and its peak RSS after."""
    p = start_proxy(procs, name, a.workdir, a.tollgate)
    port = PORTS[name][w["port"]]
    try:
        # warm-up: caches, pools and the allocator see traffic first
        if w["kind"] == "h2":
            h2load(a, port, 1)
        else:
            loadgen(a, w, port, max(100, a.n // 20), conns)
        cpu0 = pb.tree_cpu_seconds(p.pid)
        if w["kind"] == "h2":
            r = h2load(a, port, a.duration)
        elif w["kind"] == "flood":
            r = flood(a, w, name, conns)
        else:
            r = loadgen(a, w, port, a.n, conns)
        cpu = pb.tree_cpu_seconds(p.pid) - cpu0
        _, hwm = pb.tree_memory_kib(p.pid)
        alive = procs.alive(name)
    finally:
        procs.stop(name)
    r.update({"proxy": name, "workload": w["id"], "cpu_s": cpu, "hwm_mib": hwm / 1024, "flags": []})
    if r["errors"]:
        r["flags"].append(f"ERRORS {r['errors']}: {r.get('error_samples', '')}")
    if not r["ok"]:
        r["flags"].append("NOTHING completed")
    if not alive:
        r["flags"].append("PROXY DIED during the run")
    if w["kind"] == "h2" and r.get("protocol") != "h2":
        r["flags"].append(f"negotiated {r.get('protocol')}, not h2")
    if w.get("resume") and r["ok"] and r["resumed"] < 0.9 * r["ok"]:
        r["notes"] = [f"only {r['resumed']} of {r['ok']} handshakes resumed"]
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summary(runs, w):
    """Medians over rounds of the numbers the table shows."""
    per = {}
    for key in ("ok", "seconds", "cpu_s", "hwm_mib", "handshake_mean_ms", "message_mean_ms", "rps", "resumed",
                "probe_ok", "probe_message_p50_ms", "probe_message_p99_ms", "probe_message_max_ms"):
        per[key] = med([r.get(key) for r in runs])
    ok, cpu = per["ok"], per["cpu_s"]
    per["cpu_ms_per"] = cpu / ok * 1000 if ok and cpu else None
    per["per_cpu_s"] = ok / cpu if ok and cpu else None
    per["rate"] = per["rps"] if w["kind"] == "h2" else (ok / per["seconds"] if ok and per["seconds"] else None)
    per["spread"] = (min(r.get("ok", 0) / (r["cpu_s"] or 1) for r in runs),
                     max(r.get("ok", 0) / (r["cpu_s"] or 1) for r in runs))
    return per


def vs(s, p, other, key):
    """Tollgate's `key` over `other`'s (on Tollgate's row only)."""
    if p != "tollgate" or other not in s or not s[p][key] or not s[other][key]:
        return None
    return s[p][key] / s[other][key]


def f(x, fmt):
    return "-" if x is None else format(x, fmt)


def report(meta, a, results):
    v = meta["versions"]
    out = [BEGIN, "", "## TLS handshakes, HTTP/2 and WebSockets (bench/edge_bench.py)", "",
           f"Run {meta['date']} on {meta['machine']['cpu']} ({meta['machine']['nproc']} cores), Tollgate "
           f"{v['tollgate']}, HAProxy {v['haproxy']} (OpenSSL), nginx {v['nginx']} (OpenSSL). "
           f"`bash bench/run.sh --edge`: {a.rounds} round(s) per proxy, each on a freshly started proxy pinned to "
           "CPU 0 with one worker; the load tool (bench/loadgen, rustls, X25519 only) and the backends on CPU 1. "
           f"TLS runs: {a.n} connections, {a.conns or 50} in flight, each a handshake + one 811 B request + close. "
           f"h2: h2load 10 connections x 100 streams for {a.duration} s. WebSocket: {a.n} connections, "
           f"{a.conns or 100} in flight, one 32 B echo each. Medians over rounds; ratios are Tollgate / other.", ""]
    flagged = [r for r in results if r["flags"]]
    by = {}
    for r in results:
        by.setdefault((r["workload"], r["proxy"]), []).append(r)
    wl = [w for w in WORKLOADS if any((w["id"], p) in by for p in a.proxies)]

    def summaries(w):
        return {p: summary(by[(w["id"], p)], w) for p in a.proxies if (w["id"], p) in by}

    def table(kind, head, row, intro=()):
        """The table of the workloads of `kind`: Workload, Proxy, then the
        columns `head`, one row per proxy with the cells `row(s, p, x)` (all the
        summaries, the proxy, its summary)."""
        ws = [w for w in wl if w["kind"] == kind]
        if not ws:
            return []
        lines = list(intro) + ["| Workload | Proxy | " + " | ".join(head) + " |", "|---|---|" + "--:|" * len(head)]
        for w in ws:
            s = summaries(w)
            for p, x in s.items():
                lines.append(f"| {w['label']} | {pb.PROXY_LABEL[p]} | " + " | ".join(row(s, p, x)) + " |")
        return lines + [""]

    def tls_row(s, p, x):
        resumed = x["resumed"] / x["ok"] * 100 if x["ok"] and x["resumed"] is not None else None
        return [f(x["rate"], ",.0f"), f(x["cpu_ms_per"], ".3f"),
                f"{f(x['per_cpu_s'], ',.0f')} ({x['spread'][0]:,.0f}-{x['spread'][1]:,.0f})",
                f(vs(s, p, "haproxy", "per_cpu_s"), ".2f"), f(vs(s, p, "nginx", "per_cpu_s"), ".2f"),
                f(x["handshake_mean_ms"], ".2f"), f"{f(resumed, '.0f')}%", f(x["hwm_mib"], ".1f")]

    def h2_row(s, p, x):
        cpu100k = x["cpu_s"] / x["ok"] * 100_000 if x["ok"] and x["cpu_s"] else None
        return [f(x["rate"], ",.0f"), f(cpu100k, ".3f"), f(x["per_cpu_s"], ",.0f"),
                f(vs(s, p, "haproxy", "per_cpu_s"), ".2f"), f(vs(s, p, "nginx", "per_cpu_s"), ".2f"),
                f(x["hwm_mib"], ".1f")]

    def ws_row(s, p, x):
        return [f(x["ok"], ",.0f"), f(x["seconds"], ".2f"), f(x["handshake_mean_ms"], ".2f"),
                f(x["message_mean_ms"], ".3f"), f(x["cpu_ms_per"], ".3f"), f(x["hwm_mib"], ".1f"),
                f(vs(s, p, "haproxy", "hwm_mib"), ".2f")]

    def flood_row(s, p, x):
        return [f(x["rate"], ",.0f"), f(x["cpu_ms_per"], ".3f"), f(x["probe_ok"], ",.0f"),
                f(x["probe_message_p50_ms"], ".3f"), f(x["probe_message_p99_ms"], ".3f"),
                f(x["probe_message_max_ms"], ".3f"), f(vs(s, p, "haproxy", "probe_message_p99_ms"), ".2f")]

    out += table("tls", ["Handshakes/s", "CPU ms per handshake", "Handshakes per CPU-s (min-max)", "vs HAProxy",
                         "vs nginx", "Handshake mean ms", "Resumed", "Peak RSS MiB"], tls_row)
    out += table("h2", ["Requests/s", "CPU s per 100k requests", "Requests per CPU-s", "vs HAProxy", "vs nginx",
                        "Peak RSS MiB"], h2_row)
    out += table("ws", ["Connections", "Total s", "Handshake mean ms", "Message mean ms", "CPU ms per connection",
                        "Peak RSS MiB", "RSS vs HAProxy"], ws_row)
    out += table("flood", ["Handshakes/s", "CPU ms per handshake", "Echoes timed", "Echo p50 ms", "Echo p99 ms",
                           "Echo max ms", "p99 vs HAProxy"], flood_row,
                 intro=[f"Flood: RSA-2048 full handshakes, {a.conns or 50} in flight for {FLOOD_SECONDS} s; beside "
                        "them one "
                        "established plain WebSocket connection sends a 32 B message every 5 ms for "
                        f"{FLOOD_SECONDS - 2} s (`loadgen probe`). Echo latency: medians over rounds of each "
                        "round's p50, p99 and max.", ""])
    if flagged:
        out += ["FLAGGED RUNS:", ""] + [f"- {r['workload']} / {r['proxy']}: {'; '.join(r['flags'])}" for r in flagged]
        out.append("")
    out.append(END)
    return "\n".join(out) + "\n", flagged


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=pb.REPO_DEFAULT)
    ap.add_argument("--tollgate", required=True, help="the tollgate binary")
    ap.add_argument("--loadgen", required=True, help="the bench/loadgen binary")
    ap.add_argument("--workdir", default="/tmp/tollgate-edge-bench")
    ap.add_argument("--quick", action="store_true", help="1 round, 500 connections, 2 s of h2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000, help="connections per TLS / WebSocket run")
    ap.add_argument("--conns", type=int, default=0, help="in flight (default: 50 for TLS, 100 for WebSocket)")
    ap.add_argument("--duration", type=int, default=8, help="seconds per h2 run")
    ap.add_argument("--max-seconds", type=int, default=120, help="bound on each load run")
    ap.add_argument("--only", default="", help="comma-separated workload ids (" +
                    ", ".join(w["id"] for w in WORKLOADS) + ")")
    ap.add_argument("--proxies", default=",".join(PROXIES))
    ap.add_argument("--write-docs", action="store_true", help="also put the tables into docs/benchmarks.md")
    ap.add_argument("--no-build", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.proxies = [p for p in a.proxies.split(",") if p]
    if a.quick:
        a.rounds, a.n, a.duration = 1, 500, 2
    if a.write_docs and (a.quick or a.proxies != PROXIES or a.only):
        ap.error("--write-docs is for the full benchmark (no --quick, --only or --proxies)")
    return a


def main():
    a = parse_args()
    for tool in ("taskset", "haproxy", "nginx", "h2load", "openssl"):
        if not shutil.which(tool):
            raise BenchError(f"`{tool}` not found (bench/run.sh installs it)")
    for b in (a.tollgate, a.loadgen):
        if not os.access(b, os.X_OK):
            raise BenchError(f"{b} missing: build with `cargo build --profile dist -p tollgate -p tollgate-loadgen`")
    only = [x for x in a.only.split(",") if x]
    workloads = [w for w in WORKLOADS if not only or w["id"] in only]
    if not workloads:
        raise BenchError("no workload matches --only")

    pb.stop_on_signals()
    started = datetime.datetime.now(datetime.timezone.utc)
    meta = {"date": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": pb.machine(),
            "versions": pb.versions(a.tollgate, a.repo)}
    busy = [p for p in [pb.ORIGIN_PORT, pb.STATUS_PORT, WS_PORT] + [x for p in a.proxies for x in PORTS[p]]
            if not pb.port_free(p)]
    if busy:
        raise BenchError(f"port(s) {busy} on 127.0.0.1 already in use (a previous bench run?)")
    log(f"Tollgate edge benchmark: {len(workloads)} workload(s) x {len(a.proxies)} proxies x {a.rounds} round(s)")
    procs = pb.Procs()
    results = []
    try:
        prepare(a.workdir)
        check_configs(a.workdir, a.tollgate)
        d = f"{a.workdir}/origin"
        p = procs.start("origin", pb.nginx_cmd(pb.CLIENT_CPU, d), f"{d}/stdout.log")
        pb.wait_port(pb.ORIGIN_PORT, p, "origin nginx", f"{d}/error.log")
        p = procs.start("ws-echo", ["taskset", "-c", pb.CLIENT_CPU, a.loadgen, "ws-echo", "--listen",
                                    f"127.0.0.1:{WS_PORT}"], f"{a.workdir}/ws-echo.log")
        pb.wait_port(WS_PORT, p, "ws-echo", f"{a.workdir}/ws-echo.log")
        for w in workloads:
            log(f"\n== {w['label']}")
            conns = a.conns or (100 if w["kind"] == "ws" else 50)
            for rnd in range(a.rounds):
                order = pb.round_order(a.proxies, rnd)
                for name in order:
                    r = measure(procs, a, w, name, conns)
                    r["round"] = rnd
                    results.append(r)
                    per = r["ok"] / r["cpu_s"] if r["cpu_s"] else 0
                    extra = (f"resumed {r['resumed']}" if w["kind"] == "tls" else
                             f"echo p50 {r['probe_message_p50_ms']:.3f} ms, p99 {r['probe_message_p99_ms']:.3f} ms, "
                             f"max {r['probe_message_max_ms']:.3f} ms over {r['probe_ok']}" if w["kind"] == "flood" else
                             f"{r['rps']:,.0f} req/s ({r['protocol']})" if w["kind"] == "h2" else
                             f"handshake {r['handshake_mean_ms']:.2f} ms, message {r['message_mean_ms']:.3f} ms")
                    log(f"  round {rnd + 1} {pb.PROXY_LABEL[name]:8} ok {r['ok']:>7,} in {r['seconds']:.2f} s, "
                        f"CPU {r['cpu_s']:.2f} s ({per:,.0f} per CPU-s), peak RSS {r['hwm_mib']:.1f} MiB, {extra}, "
                        f"errors {r['errors']}")
                    for fl in r["flags"]:
                        loud(f"{w['id']} / {name} / round {rnd + 1}: {fl}")
                    for note in r.get("notes", []):
                        log(f"  note: {note}")
    finally:
        log("\nstopping the processes this run started")
        procs.stop_all()
        if results:
            results_dir = os.path.join(a.repo, "bench", "results")
            os.makedirs(results_dir, exist_ok=True)
            raw = os.path.join(results_dir, f"edge-{started:%Y%m%d-%H%M%S}.json")
            with open(raw, "w") as fh:
                json.dump({"meta": meta, "results": results}, fh, indent=1)
            log(f"raw results: {raw}")
    text, flagged = report(meta, a, results)
    log("")
    log(text)
    with open(os.path.join(a.repo, "bench", "results", "edge-latest.md"), "w") as fh:
        fh.write(text)
    if a.write_docs:
        pb.write_section(a.repo, text, BEGIN, END)
    if flagged:
        loud(f"{len(flagged)} run(s) had errors: see FLAGGED RUNS above")
        return 2
    return 0


if __name__ == "__main__":
    pb.entry(main)
