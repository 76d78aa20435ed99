#!/usr/bin/env python3
"""Slowloris at the connection limit (issue 30, 2): does a client that holds
every connection slot with heads sent a byte at a time keep other clients
out? Tollgate, HAProxy and nginx, one after the other.

    python3 bench/slowloris_bench.py [--tollgate PATH] [--slots 1000] [--probes 60] [--write-docs]

Each proxy runs the proxy benchmark's config (bench/conf) with its limit set
to `--slots` connections: Tollgate `global.max_connections`, HAProxy
`maxconn`, nginx `worker_connections` (which counts its upstream connections
too). Timeouts stay at their defaults (Tollgate `timeout.http_request` 10 s;
HAProxy's config has no `timeout http-request`, so `timeout client` 50 s
bounds a head; nginx `client_header_timeout` 60 s).

The attacker (this script, asyncio on CPU 1) opens `--slots` connections,
each sending `GET / HTTP/1.1`, `Host` and the start of a header, then one
byte every 5 s; a connection the proxy closes is opened again at once. Once
all are open (or after 10 s), a well-behaved client sends `--probes`
requests, one at a time, each on a new connection with a 3 s deadline (as a
browser user would give up), and the share served and their latency are
recorded. Everything on 127.0.0.1; the attack stops by itself after the
probes (at most a couple of minutes a proxy).

Python 3 standard library only; needs haproxy and nginx (bash bench/run.sh
installs them).
"""

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- slowloris-bench: begin -->", "<!-- slowloris-bench: end -->"
PROBE_DEADLINE = 3.0
DRIP = 5.0


def limit_configs(work, slots):
    with open(f"{work}/tollgate/tollgate.toml") as f:
        t = f.read()
    t = t.replace("[global]\n", f"[global]\nmax_connections = {slots}\n", 1)
    with open(f"{work}/tollgate/tollgate.toml", "w") as f:
        f.write(t)
    with open(f"{work}/haproxy/haproxy.cfg") as f:
        h = f.read()
    h = h.replace("    maxconn 8000\n", f"    maxconn {slots}\n", 1)
    with open(f"{work}/haproxy/haproxy.cfg", "w") as f:
        f.write(h)
    with open(f"{work}/nginx/nginx.conf") as f:
        n = f.read()
    n = n.replace("worker_connections 8000;", f"worker_connections {slots};", 1)
    with open(f"{work}/nginx/nginx.conf", "w") as f:
        f.write(n)
    for text, needle in ((t, f"max_connections = {slots}"), (h, f"maxconn {slots}"),
                         (n, f"worker_connections {slots};")):
        if needle not in text:
            raise pb.BenchError(f"a config template changed: could not set `{needle}`")


class Attack:
    """`n` connections trickling a head to `port`, reopened when closed."""

    def __init__(self, port, n, until):
        self.port, self.n, self.until = port, n, until
        self.open = 0
        self.opened = 0
        self.closed_by_proxy = 0

    async def one(self):
        while time.monotonic() < self.until:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 5)
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(0.2)
                continue
            self.open += 1
            self.opened += 1
            try:
                w.write(b"GET / HTTP/1.1\r\nHost: bench\r\nX-a: ")
                await w.drain()
                while time.monotonic() < self.until:
                    try:
                        await asyncio.wait_for(r.read(4096), DRIP)
                        # The proxy answered (408) or closed: open another.
                        self.closed_by_proxy += 1
                        break
                    except asyncio.TimeoutError:
                        w.write(b"a")
                        await w.drain()
            except OSError:
                self.closed_by_proxy += 1
            finally:
                self.open -= 1
                w.close()

    async def run(self):
        await asyncio.gather(*(self.one() for _ in range(self.n)))


async def probe(port):
    """One request on a new connection: its latency (s), or None past the deadline."""
    t0 = time.monotonic()
    try:
        async def exchange():
            r, w = await asyncio.open_connection("127.0.0.1", port)
            try:
                w.write(b"GET /f811.bin HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                await w.drain()
                data = await r.read()
            finally:
                w.close()
            return data.startswith(b"HTTP/1.1 200")
        ok = await asyncio.wait_for(exchange(), PROBE_DEADLINE)
    except (OSError, asyncio.TimeoutError):
        return None
    return time.monotonic() - t0 if ok else None


async def measure(port, slots, probes):
    until = time.monotonic() + 10 + probes * (PROBE_DEADLINE + 0.5) + 5
    attack = Attack(port, slots, until)
    task = asyncio.ensure_future(attack.run())
    t0 = time.monotonic()
    while attack.open < slots and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.1)
    holding = attack.open
    # Past the grace a waiting head gets before it may give way (Tollgate: 1 s).
    await asyncio.sleep(2)
    lat = []
    for _ in range(probes):
        lat.append(await probe(port))
        await asyncio.sleep(0.5)
    attack.until = 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return holding, lat, attack.closed_by_proxy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tollgate", default=os.path.join(REPO, "target", "dist", "tollgate"))
    ap.add_argument("--workdir", default="/var/tmp/tollgate-slowloris-bench")
    ap.add_argument("--slots", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=60)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * a.slots + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    os.sched_setaffinity(0, {int(pb.CLIENT_CPU)})
    pb.prepare_workdir(a.workdir, False)
    limit_configs(a.workdir, a.slots)
    rows = []
    for name in pb.PROXIES:
        procs = pb.Procs()
        try:
            pb.start_all(procs, a.workdir, a.tollgate, [name])
            holding, lat, closed = asyncio.run(measure(pb.PROXY_PORTS[name], a.slots, a.probes))
        finally:
            procs.stop_all()
        served = [x for x in lat if x is not None]
        p50 = statistics.median(served) * 1000 if served else float("nan")
        worst = max(served) * 1000 if served else float("nan")
        pb.log(f"  {name:8}: {holding} attack connections open; {len(served)}/{len(lat)} probes served, "
               f"p50 {p50:.1f} ms, max {worst:.1f} ms; the proxy closed {closed} attack connections")
        rows.append((name, holding, len(served), len(lat), p50, worst, closed))
    lines = [BEGIN, "",
             f"{a.slots} connection slots (Tollgate `max_connections`, HAProxy `maxconn`, nginx "
             f"`worker_connections`), a slowloris holding them (a head byte every {DRIP:.0f} s, reconnecting when "
             f"closed), then {a.probes} requests from another client, one at a time on new connections, each given "
             f"{PROBE_DEADLINE:.0f} s (`python3 bench/slowloris_bench.py`):", "",
             "| proxy | attack connections open | probes served | p50 ms | max ms | attack connections closed |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, holding, ok, total, p50, worst, closed in rows:
        lines.append(f"| {pb.PROXY_LABEL[name]} | {holding:,} | {ok}/{total} | {p50:.1f} | {worst:.1f} | {closed:,} |")
    pb.emit_section(REPO, lines, BEGIN, END, a.write_docs)


if __name__ == "__main__":
    pb.entry(main)
