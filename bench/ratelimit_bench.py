#!/usr/bin/env python3
"""Rate-limit benchmark (issue 30): what tracking every client and testing a
rate-limit rule on every request costs, in Tollgate, HAProxy and nginx.

    python3 bench/ratelimit_bench.py [--tollgate PATH] [--rounds 5] [--seconds 5] [--write-docs]

Each proxy runs twice, from the proxy benchmark's configs (bench/conf): as
it is, and with a per-address rate limit that never fires:

  - Tollgate: a `[[table]]` keyed by `src` (100k entries, 10 s period), the
    frontend `track`s it, and a rule `deny = 429` when `http_req_rate` is
    above 1,000,000,000.
  - HAProxy: `stick-table type ip size 100k expire 60s store
    http_req_rate(10s)`, `http-request track-sc0 src`, and `http-request deny
    deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }`.
  - nginx: `limit_req_zone $binary_remote_addr zone=per_ip:10m
    rate=1000000r/s` and `limit_req zone=per_ip burst=1000000 nodelay`
    (nginx's limit is a leaky bucket, not a sliding count).

Workloads: the proxy table's 811 B through each proxy to the nginx origin,
50 connections, keep-alive and `Connection: close` (a connection is counted
in the table too). Method: the one of bench/proxy_bench.py (whose helpers
this uses): each proxy one worker pinned to CPU 0, wrk (one thread) and the
origin on CPU 1, everything on 127.0.0.1; a warm-up per proxy, then rounds in
a rotating order; medians of requests/s and of the proxy's CPU-microseconds
per request (utime+stime of its processes from /proc). The figure that
matters is each proxy's CPU per request with the limit over without it.

Python 3 standard library only; needs haproxy, nginx and wrk (bash
bench/run.sh installs them).
"""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- ratelimit-bench: begin -->", "<!-- ratelimit-bench: end -->"
LIMITED_PORTS = {"tollgate": 18013, "haproxy": 18014, "nginx": 18015}
FILE = ("811 B", "f811.bin", 811)
CONNS = 50

TOLLGATE_LIMIT = """
[[table]]
name = "per_ip"
key = "src"
size = 100000
expire = "60s"
period = "10s"
"""

TOLLGATE_RULE = """track = ["per_ip"]
  [[frontend.rule]]
  when = { counter = { table = "per_ip", name = "http_req_rate", above = 1000000000 } }
  deny = 429
"""

HAPROXY_RULE = """    stick-table type ip size 100k expire 60s store http_req_rate(10s)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }
"""


def limited_configs(work):
    """The three proxies' configs with the rate limit, each in a directory of its own."""
    for name in pb.PROXIES:
        pb.mkdir(f"{work}/{name}-rl")
    pb.mkdir(f"{work}/nginx-rl/tmp")
    port = pb.PROXY_PORTS
    with open(f"{work}/tollgate/tollgate.toml") as f:
        t = f.read()
    t = t.replace(f"127.0.0.1:{port['tollgate']}", f"127.0.0.1:{LIMITED_PORTS['tollgate']}")
    t = t.replace("[[frontend]]", TOLLGATE_LIMIT + "\n[[frontend]]", 1)
    t = t.replace('default_backend = "origin"\n', 'default_backend = "origin"\n' + TOLLGATE_RULE, 1)
    with open(f"{work}/tollgate-rl/tollgate.toml", "w") as f:
        f.write(t)
    with open(f"{work}/haproxy/haproxy.cfg") as f:
        h = f.read()
    h = h.replace(f"127.0.0.1:{port['haproxy']}", f"127.0.0.1:{LIMITED_PORTS['haproxy']}")
    h = h.replace("    default_backend origin\n", HAPROXY_RULE + "    default_backend origin\n", 1)
    with open(f"{work}/haproxy-rl/haproxy.cfg", "w") as f:
        f.write(h)
    with open(f"{work}/nginx/nginx.conf") as f:
        n = f.read()
    n = n.replace(f"127.0.0.1:{port['nginx']}", f"127.0.0.1:{LIMITED_PORTS['nginx']}")
    n = n.replace(f"{work}/nginx/", f"{work}/nginx-rl/").replace(f"{work}/nginx\n", f"{work}/nginx-rl\n")
    n = n.replace("    upstream origin {",
                  "    limit_req_zone $binary_remote_addr zone=per_ip:10m rate=1000000r/s;\n\n    upstream origin {", 1)
    n = n.replace("            proxy_pass http://origin;",
                  "            limit_req zone=per_ip burst=1000000 nodelay;\n            proxy_pass http://origin;", 1)
    with open(f"{work}/nginx-rl/nginx.conf", "w") as f:
        f.write(n)
    for needle, text, what in (("per_ip", t, "tollgate"), ("track-sc0", h, "haproxy"), ("limit_req ", n, "nginx")):
        if needle not in text:
            raise pb.BenchError(f"the {what} config template changed: the rate limit could not be added")


def start_limited(procs, work, tollgate_bin):
    busy = [p for p in LIMITED_PORTS.values() if not pb.port_free(p)]
    if busy:
        raise pb.BenchError(f"port(s) {busy} on 127.0.0.1 already in use")
    checks = ((["haproxy", "-c", "-q", "-f", f"{work}/haproxy-rl/haproxy.cfg"], "haproxy"),
              (["nginx", "-t", "-q", "-p", f"{work}/nginx-rl/", "-c", f"{work}/nginx-rl/nginx.conf",
                "-e", f"{work}/nginx-rl/error.log"], "nginx"),
              ([tollgate_bin, "check", "-c", f"{work}/tollgate-rl/tollgate.toml"], "tollgate"))
    for cmd, what in checks:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise pb.BenchError(f"{what} rate-limit config rejected:\n{r.stdout}{r.stderr}")
    pids = {}
    for name in pb.PROXIES:
        d = f"{work}/{name}-rl"
        if name == "tollgate":
            cmd = ["taskset", "-c", pb.PROXY_CPU, tollgate_bin, "run", "-c", f"{d}/tollgate.toml"]
            logpath, env = f"{d}/tollgate.log", dict(os.environ, RUST_LOG="warn")
        elif name == "haproxy":
            cmd = ["taskset", "-c", pb.PROXY_CPU, "haproxy", "-db", "-f", f"{d}/haproxy.cfg"]
            logpath, env = f"{d}/haproxy.log", None
        else:
            cmd, logpath, env = pb.nginx_cmd(pb.PROXY_CPU, d), f"{d}/stdout.log", None
        p = procs.start(f"{name}-rl", cmd, logpath, env=env)
        pb.wait_port(LIMITED_PORTS[name], p, f"{name}-rl", f"{d}/error.log" if name == "nginx" else logpath)
        pids[(name, True)] = p.pid
    procs.remember_tree()
    return pids


def check(port, what):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", f"/{FILE[1]}")
        r = c.getresponse()
        body = r.read()
    finally:
        c.close()
    if r.status != 200 or len(body) != FILE[2]:
        raise pb.BenchError(f"GET /{FILE[1]} via {what}: {r.status}, {len(body)} bytes")


def run(port, pid, keepalive, seconds, what):
    cpu0 = pb.tree_cpu_seconds(pid)
    w = pb.run_wrk(port, FILE[1], CONNS, keepalive, seconds)
    cpu = pb.tree_cpu_seconds(pid) - cpu0
    n = w["requests"]
    if sum(w["errors"].values()) or not n:
        raise pb.BenchError(f"{what}: {w['errors']}, {n} requests")
    return n / (w["duration_us"] / 1e6), cpu * 1e6 / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tollgate", default=os.path.join(REPO, "target", "dist", "tollgate"))
    ap.add_argument("--workdir", default="/var/tmp/tollgate-ratelimit-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    pb.prepare_workdir(a.workdir, False)
    limited_configs(a.workdir)
    procs = pb.Procs()
    variants = [(name, limited) for name in pb.PROXIES for limited in (False, True)]
    port = {(n, lim): (LIMITED_PORTS if lim else pb.PROXY_PORTS)[n] for n, lim in variants}
    workloads = [True, False]
    results = {(k, v): [] for k in workloads for v in variants}
    try:
        base = pb.start_all(procs, a.workdir, a.tollgate, pb.PROXIES)
        pids = {(n, False): pid for n, pid in base.items()}
        pids.update(start_limited(procs, a.workdir, a.tollgate))
        for v in variants:
            check(port[v], f"{v[0]}{' (limited)' if v[1] else ''}")
        pb.log("  811 B answers 200 through every proxy, with and without the rate limit")
        for keepalive in workloads:
            for v in variants:
                run(port[v], pids[v], keepalive, 1, "warm-up")
            for rnd in range(a.rounds):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                if rnd % 2:
                    order.reverse()
                for v in order:
                    what = f"{v[0]}{'+limit' if v[1] else ''}"
                    rps, cpu = run(port[v], pids[v], keepalive, a.seconds, what)
                    results[(keepalive, v)].append((rps, cpu))
                    pb.log(f"  {'keep-alive' if keepalive else 'close':10} round {rnd + 1}: {what:15} "
                           f"{rps:9.0f} req/s, {cpu:6.2f} CPU-us per request")
    finally:
        procs.stop_all()
    lines = [BEGIN, "",
             f"811 B from the nginx origin, {CONNS} connections; each proxy one worker on CPU 0, wrk (1 thread) "
             f"and the origin on CPU 1; {a.rounds} rounds of {a.seconds} s, medians "
             "(`python3 bench/ratelimit_bench.py`). \"+ limit\": a per-address rate limit that never fires.", "",
             "| workload, proxy | req/s | + limit req/s | CPU-us/req | + limit CPU-us/req | CPU with / without |",
             "| --- | --- | --- | --- | --- | --- |"]
    for keepalive in workloads:
        for name in pb.PROXIES:
            off = [statistics.median(x[i] for x in results[(keepalive, (name, False))]) for i in range(2)]
            on = [statistics.median(x[i] for x in results[(keepalive, (name, True))]) for i in range(2)]
            lines.append(f"| {'keep-alive' if keepalive else 'close'}, {pb.PROXY_LABEL[name]} | {off[0]:,.0f} | "
                         f"{on[0]:,.0f} | {off[1]:.2f} | {on[1]:.2f} | {on[1] / off[1]:.3f}x |")
    pb.emit_section(REPO, lines, BEGIN, END, a.write_docs)


if __name__ == "__main__":
    pb.entry(main)
