#!/usr/bin/env python3
"""Static files benchmark (issue 29, "Speed"): Tollgate's `static` backend
against nginx serving the same files, CPU per request and requests/s.

    python3 bench/static_bench.py [--tollgate PATH] [--rounds 3] [--seconds 5] [--write-docs]

Method: the one of bench/proxy_bench.py (whose helpers this uses): each server
runs one worker pinned to CPU 0, wrk (one thread) on CPU 1, everything on
127.0.0.1, keep-alive connections. The files are those of the proxy benchmark
(811 B, 8 KiB, 160 KiB), at 50 and 500 connections. nginx as Debian ships it
to serve files: `sendfile on; tcp_nopush on;`, ETags on, no `open_file_cache`
(off by default), access log off; Tollgate `static = { root = ... }` with
its defaults, access log off. Each workload gets a warm-up per server, then
interleaved rounds (the order alternating); medians of CPU-microseconds of
the server's processes per request (utime+stime from /proc) and of
requests/s. Every response is checked first (status, size), and a run with
errors stops the benchmark.

Python 3 standard library only; needs nginx and wrk (bash bench/run.sh
installs them).
"""

import argparse
import http.client
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

PORTS = {"tollgate": 18310, "nginx": 18312}
SERVERS = ["tollgate", "nginx"]
CONNS = [50, 500]
BEGIN, END = "<!-- static-bench: begin -->", "<!-- static-bench: end -->"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOLLGATE = """[global]
workers = 1
access_log = "off"
[defaults]
timeout = {{ client = "300s", keep_alive = "300s" }}
[[frontend]]
name = "files"
bind = ["127.0.0.1:{port}"]
default_backend = "www"
[[backend]]
name = "www"
static = {{ root = "{www}" }}
"""

NGINX = """{user}
worker_processes 1;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
worker_rlimit_nofile 20000;
events {{
    worker_connections 8000;
}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    default_type application/octet-stream;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {www};
        location / {{ }}
    }}
}}
"""


def prepare(work):
    pb.mkdir(work)
    www = os.path.join(work, "www")
    pb.mkdir(www)
    for _, name, size in pb.FILES:
        line = b"tollgate benchmark payload 0123456789 abcdefghijklmnopqrstuvwxyz\n"
        with open(os.path.join(www, name), "wb") as f:
            f.write((line * (size // len(line) + 1))[:size])
        os.chmod(os.path.join(www, name), 0o644)
    for sub in ("tollgate", "nginx", "nginx/tmp"):
        pb.mkdir(os.path.join(work, sub))
    with open(f"{work}/tollgate/tollgate.toml", "w") as f:
        f.write(TOLLGATE.format(port=PORTS["tollgate"], www=www))
    with open(f"{work}/nginx/nginx.conf", "w") as f:
        f.write(NGINX.format(user=pb.nginx_user_line(), dir=f"{work}/nginx", port=PORTS["nginx"], www=www))


def start(procs, work, tollgate_bin):
    busy = [p for p in PORTS.values() if not pb.port_free(p)]
    if busy:
        raise pb.BenchError(f"port(s) {busy} on 127.0.0.1 already in use")
    for cmd, what in (([tollgate_bin, "check", "-c", f"{work}/tollgate/tollgate.toml"], "tollgate config"),
                      (["nginx", "-t", "-q", "-p", f"{work}/nginx/", "-c", f"{work}/nginx/nginx.conf",
                        "-e", f"{work}/nginx/error.log"], "nginx config")):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise pb.BenchError(f"{what} rejected:\n{r.stdout}{r.stderr}")
    pids = {}
    d = f"{work}/tollgate"
    cmd = ["taskset", "-c", pb.PROXY_CPU, tollgate_bin, "run", "-c", f"{d}/tollgate.toml"]
    p = procs.start("tollgate", cmd, f"{d}/tollgate.log", env=dict(os.environ, RUST_LOG="warn"))
    pb.wait_port(PORTS["tollgate"], p, "tollgate", f"{d}/tollgate.log")
    pids["tollgate"] = p.pid
    d = f"{work}/nginx"
    p = procs.start("nginx", pb.nginx_cmd(pb.PROXY_CPU, d), f"{d}/stdout.log")
    pb.wait_port(PORTS["nginx"], p, "nginx", f"{d}/error.log")
    pids["nginx"] = p.pid
    procs.remember_tree()
    return pids


def check(name):
    for _, fname, size in pb.FILES:
        c = http.client.HTTPConnection("127.0.0.1", PORTS[name], timeout=5)
        try:
            c.request("GET", f"/{fname}")
            r = c.getresponse()
            body = r.read()
        finally:
            c.close()
        if r.status != 200 or len(body) != size:
            raise pb.BenchError(f"GET /{fname} from {name}: {r.status}, {len(body)} bytes (want 200, {size})")


def run(name, pid, fname, conns, seconds):
    cpu0 = pb.tree_cpu_seconds(pid)
    w = pb.run_wrk(PORTS[name], fname, conns, True, seconds)
    cpu = pb.tree_cpu_seconds(pid) - cpu0
    n = w["requests"]
    if sum(w["errors"].values()) or not n:
        raise pb.BenchError(f"{name} {fname} at {conns}: {w['errors']}, {n} requests")
    return n / (w["duration_us"] / 1e6), cpu * 1e6 / n, w["latency_us"]["p99"] / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tollgate", default=os.path.join(REPO, "target", "dist", "tollgate"))
    ap.add_argument("--workdir", default="/var/tmp/tollgate-static-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--files", default="", help="only these files, e.g. 8k,160k")
    ap.add_argument("--conns", default="", help="only these connection counts, e.g. 500")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    prepare(a.workdir)
    procs = pb.Procs()
    workloads = [(label, fname, conns) for label, fname, _ in pb.FILES for conns in CONNS
                 if (not a.files or any(f"f{x}.bin" == fname for x in a.files.split(",")))
                 and (not a.conns or str(conns) in a.conns.split(","))]
    results = {(w, s): [] for w in workloads for s in SERVERS}
    try:
        pids = start(procs, a.workdir, a.tollgate)
        for s in SERVERS:
            check(s)
        pb.log("  every file answers 200 with its size from both servers")
        for w in workloads:
            label, fname, conns = w
            for s in SERVERS:
                run(s, pids[s], fname, conns, 1)  # warm-up
            for rnd in range(a.rounds):
                for s in (SERVERS if rnd % 2 == 0 else SERVERS[::-1]):
                    rps, cpu, p99 = run(s, pids[s], fname, conns, a.seconds)
                    results[(w, s)].append((rps, cpu, p99))
                    pb.log(f"  {label:7} c={conns:3} round {rnd + 1}: {s:8} {rps:9.0f} req/s, "
                           f"{cpu:6.2f} CPU-us per request, p99 {p99:.2f} ms")
    finally:
        procs.stop_all()
    lines = [BEGIN, "",
             f"One worker each on CPU 0, wrk (1 thread, keep-alive) on CPU 1, {a.rounds} rounds of {a.seconds} s, "
             "medians (`python3 bench/static_bench.py`):", "",
             "| file, connections | Tollgate req/s | nginx req/s | Tollgate CPU-us/req | nginx CPU-us/req | "
             "CPU Tollgate/nginx | p99 Tollgate / nginx (ms) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for w in workloads:
        label, _, conns = w
        med = {s: [statistics.median(x[i] for x in results[(w, s)]) for i in range(3)] for s in SERVERS}
        t, n = med["tollgate"], med["nginx"]
        lines.append(f"| {label}, {conns} | {t[0]:,.0f} | {n[0]:,.0f} | {t[1]:.2f} | {n[1]:.2f} | "
                     f"{t[1] / n[1]:.2f}x | {t[2]:.2f} / {n[2]:.2f} |")
    pb.emit_section(REPO, lines, BEGIN, END, a.write_docs)


if __name__ == "__main__":
    pb.entry(main)
