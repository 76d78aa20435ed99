#!/usr/bin/env python3
"""Compression benchmark (issue 29, "Speed"): CPU per response and bytes sent
for Tollgate's gzip, brotli and zstd at their default levels against nginx's
gzip at level 1 (its default `gzip_comp_level`), for the same text response.

    python3 bench/compress_bench.py [--tollgate PATH] [--rounds 3] [--seconds 5] [--write-docs]

Method: the one of bench/proxy_bench.py (whose helpers this uses): each proxy
runs one worker pinned to CPU 0, wrk (one thread, 50 keep-alive connections)
and the nginx origin share CPU 1, everything on 127.0.0.1. The origin serves a
64 KiB text response made of this repository's docs (real prose and tables,
which compress as web pages do), `text/plain`. Each run asks for one coding
with `Accept-Encoding`; `identity` measures the proxy without compression.
Per run: responses per second and CPU-milliseconds of the proxy per 1,000
responses (utime+stime of its processes); per coding: the bytes of one
response. Rounds are interleaved; medians. nginx 1.22 (Debian) has no brotli
or zstd module: only its gzip is measured.

Python 3 standard library only; needs nginx and wrk (bash bench/run.sh
installs them).
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

ORIGIN_PORT, STATUS_PORT = 18201, 18202
PROXY_PORTS = {"tollgate": 18210, "nginx": 18212, "haproxy": 18213}
FNAME, SIZE = "page.txt", 64 * 1024
CONNS = 50
RUNS = [("tollgate", "identity"), ("tollgate", "gzip"), ("tollgate", "br"), ("tollgate", "zstd"),
        ("nginx", "identity"), ("nginx", "gzip")]
BEGIN, END = "<!-- compress-bench: begin -->", "<!-- compress-bench: end -->"

pb.ORIGIN_PORT, pb.STATUS_PORT, pb.PROXY_PORTS = ORIGIN_PORT, STATUS_PORT, PROXY_PORTS
pb.FILES = [("64 KiB", FNAME, SIZE)]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOLLGATE = """[global]
workers = 1
access_log = "off"
[defaults]
timeout = {{ connect = "5s", client = "50s", server = "50s", server_keep_alive = "60s" }}
forward_for = false
[[frontend]]
name = "bench"
bind = ["127.0.0.1:{port}"]
default_backend = "origin"
compression = {compression}
[[backend]]
name = "origin"
  [[backend.server]]
  name = "nginx"
  addr = "127.0.0.1:{origin}"
"""

NGINX_GZIP = """    gzip on;
    gzip_comp_level 1;
    gzip_types text/plain;
    gzip_min_length 1024;
    gzip_vary on;
"""


def prepare(work, levels):
    pb.prepare_workdir(work, False)
    # The response: the docs, real text, cut to 64 KiB.
    text = b""
    for name in ("configuration.md", "admin.md", "architecture.md"):
        with open(os.path.join(REPO, "docs", name), "rb") as f:
            text += f.read()
    with open(os.path.join(work, "www", FNAME), "wb") as f:
        f.write(text[:SIZE])
    # The origin's type for it: text, as a page is (its other benchmarks serve octets).
    origin = f"{work}/origin/nginx.conf"
    with open(origin) as f:
        conf = f.read()
    if "default_type application/octet-stream;" not in conf:
        raise pb.BenchError("nginx-origin.conf changed: cannot make the response text/plain")
    with open(origin, "w") as f:
        f.write(conf.replace("default_type application/octet-stream;", "default_type text/plain;"))
    with open(f"{work}/tollgate/tollgate.toml", "w") as f:
        compression = f"{{ level = {{ {levels} }} }}" if levels else "true"
        f.write(TOLLGATE.format(port=PROXY_PORTS["tollgate"], origin=ORIGIN_PORT, compression=compression))
    path = f"{work}/nginx/nginx.conf"
    with open(path) as f:
        conf = f.read()
    if "    access_log off;\n" not in conf:
        raise pb.BenchError("nginx-proxy.conf changed: cannot add the gzip settings")
    with open(path, "w") as f:
        f.write(conf.replace("    access_log off;\n", "    access_log off;\n" + NGINX_GZIP, 1))


def one(port, coding):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", f"/{FNAME}", headers={"Accept-Encoding": coding})
        r = c.getresponse()
        body = r.read()
        return r.status, (r.getheader("Content-Encoding") or "identity"), len(body)
    finally:
        c.close()


def wrk(port, coding, seconds):
    lua = os.path.join(pb.BENCH_DIR, "report.lua")
    cmd = ["taskset", "-c", pb.CLIENT_CPU, "wrk", "-t1", f"-c{CONNS}", f"-d{seconds}s", "--latency", "-s", lua,
           "-H", f"Accept-Encoding: {coding}", f"http://127.0.0.1:{port}/{FNAME}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
    for line in out.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    raise pb.BenchError(f"wrk printed no BENCH_JSON line:\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tollgate", default=os.path.join(REPO, "target", "dist", "tollgate"))
    ap.add_argument("--workdir", default="/var/tmp/tollgate-compress-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--levels", default="", help='Tollgate\'s levels instead of its defaults: "gzip = 2, br = 1"')
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    prepare(a.workdir, a.levels)
    procs = pb.Procs()
    try:
        pids = pb.start_all(procs, a.workdir, a.tollgate, ["tollgate", "nginx"])
        sizes = {}
        for name, coding in RUNS:
            status, got, n = one(PROXY_PORTS[name], coding)
            if status != 200 or got != coding:
                raise pb.BenchError(f"{name} with Accept-Encoding {coding}: {status}, Content-Encoding {got}")
            sizes[(name, coding)] = n
        results = {run: [] for run in RUNS}
        for rnd in range(a.rounds):
            order = RUNS[rnd % len(RUNS):] + RUNS[:rnd % len(RUNS)]
            for name, coding in order:
                cpu0 = pb.tree_cpu_seconds(pids[name])
                w = wrk(PROXY_PORTS[name], coding, a.seconds)
                cpu = pb.tree_cpu_seconds(pids[name]) - cpu0
                n = w["requests"]
                if sum(w["errors"].values()) or not n:
                    raise pb.BenchError(f"{name} {coding}: {w}")
                results[(name, coding)].append((n / (w["duration_us"] / 1e6), cpu * 1e6 / n))
                pb.log(f"  round {rnd + 1}: {name:8} {coding:8} {n / (w['duration_us'] / 1e6):9.0f} resp/s, "
                       f"{cpu * 1e6 / n:7.1f} CPU-us per response")
    finally:
        procs.stop_all()
    ref = statistics.median(x[1] for x in results[("nginx", "gzip")])
    lines = [BEGIN, "",
             f"64 KiB of text (docs/*.md), `text/plain`, 50 keep-alive connections, {a.rounds} rounds of "
             f"{a.seconds} s, medians:", "",
             "| proxy, coding | bytes per response | saved | responses/s | CPU-us per response | CPU vs nginx gzip-1 |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, coding in RUNS:
        rps = statistics.median(x[0] for x in results[(name, coding)])
        cpu = statistics.median(x[1] for x in results[(name, coding)])
        saved = 1 - sizes[(name, coding)] / SIZE
        label = f"{'Tollgate' if name == 'tollgate' else 'nginx'}, {coding}"
        lines.append(f"| {label} | {sizes[(name, coding)]:,} | {saved:.0%} | {rps:,.0f} | {cpu:.1f} | "
                     f"{cpu / ref:.2f}x |")
    pb.emit_section(REPO, lines, BEGIN, END, a.write_docs)


if __name__ == "__main__":
    pb.entry(main)
