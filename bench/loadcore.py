#!/usr/bin/env python3
"""Where the load core's time goes, behind Tollgate and behind HAProxy.

In the proxy benchmark's small keep-alive rows the core that runs wrk and the
origin (CPU 1) is the limit, so requests/s there measures how much work the
proxy makes that core do. This probe counts that work, per request, with the
same setup as bench/proxy_bench.py (its configs, ports, pinning and files):

    python3 bench/loadcore.py [--size 811] [--conns 50] [--rounds 8] [--duration 4] [--no-trace]

(bash bench/run.sh installs haproxy, nginx and wrk and builds Tollgate first;
perf is the Debian package linux-perf, and without it only /proc is read.)

Per timed run, for each CPU: busy share and busy microseconds per request
(/proc/stat), context switches, system calls, epoll_wait calls, packets sent on
lo and softirqs per request (`perf stat -a -A`, software events and
tracepoints; --no-trace keeps only context switches, as tracepoints cost a
little), and the wake-up interrupts received (/proc/interrupts RES and CAL);
then wrk's and the origin's CPU microseconds per request. Tollgate and
HAProxy alternate, one run each per round, after a 1 s warm-up before each.
Output: one line per run, then the medians side by side with their ratio, and
the per-round requests/s ratios.

Python 3 standard library only; all traffic on 127.0.0.1, every run bounded by
--duration.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile

import proxy_bench as pb

PROXIES = ["tollgate", "haproxy"]
FILES = {str(size): fname for _, fname, size in pb.FILES}


def cpu_jiffies():
    """{cpu: (busy, idle, steal)} from /proc/stat, in clock ticks."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            m = re.match(r"cpu(\d+) (.*)", line)
            if m:
                v = [int(x) for x in m.group(2).split()]
                # user nice system idle iowait irq softirq steal
                out[int(m.group(1))] = (v[0] + v[1] + v[2] + v[5] + v[6], v[3] + v[4], v[7])
    return out


def ipis():
    """{"RES": [per cpu], "CAL": [per cpu]} from /proc/interrupts."""
    out = {}
    with open("/proc/interrupts") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in ("RES:", "CAL:"):
                out[parts[0][:-1]] = [int(x) for x in parts[1:] if x.isdigit()]
    return out


def children_cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def perf_events(trace):
    events = ["context-switches"]
    if trace:
        events += ["raw_syscalls:sys_enter", "syscalls:sys_enter_epoll_wait", "net:net_dev_xmit",
                   "irq:softirq_entry"]
    return events


EVENT_KEY = {"context-switches": "cs", "raw_syscalls:sys_enter": "syscalls",
             "syscalls:sys_enter_epoll_wait": "epoll_wait", "net:net_dev_xmit": "xmit",
             "irq:softirq_entry": "softirq"}


def measure(origin_pid, port, fname, conns, seconds, perf, trace):
    j0, i0 = cpu_jiffies(), ipis()
    o0 = pb.tree_cpu_seconds(origin_pid)
    pf = None
    if perf:
        pf = subprocess.Popen([perf, "stat", "-x,", "-a", "-A", "-e", ",".join(perf_events(trace)), "--",
                               "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # the benchmark's own wrk run (pinned, --latency, report.lua); taskset execs
    # wrk, so the reaped child whose CPU time this adds up is wrk itself
    c0 = children_cpu_seconds()
    w = pb.run_wrk(port, fname, conns, True, seconds)
    wrk_cpu = children_cpu_seconds() - c0
    n = w["requests"]
    errors = {k: v for k, v in w["errors"].items() if v}
    counts = {}
    if pf is not None:
        _, err = pf.communicate(timeout=seconds + 30)
        for line in err.splitlines():
            f = line.split(",")
            if len(f) > 3 and f[0].startswith("CPU") and f[1].isdigit():
                counts[(f[3], int(f[0][3:]))] = int(f[1])
    j1, i1 = cpu_jiffies(), ipis()
    o1 = pb.tree_cpu_seconds(origin_pid)
    n = max(n, 1)
    tick_us = 1e6 / pb.CLK_TCK
    row = {"req/s": n / (w["duration_us"] / 1e6 or seconds)}
    for cpu in (0, 1):
        busy = j1[cpu][0] - j0[cpu][0]
        total = busy + (j1[cpu][1] - j0[cpu][1]) + (j1[cpu][2] - j0[cpu][2])
        row[f"cpu{cpu} busy"] = busy / max(total, 1)
        row[f"cpu{cpu} us/req"] = busy * tick_us / n
        for ev in perf_events(trace) if perf else []:
            row[f"cpu{cpu} {EVENT_KEY[ev]}/req"] = counts.get((ev, cpu), 0) / n
        for k in ("RES", "CAL"):
            row[f"cpu{cpu} {k} IPIs/req"] = (i1[k][cpu] - i0[k][cpu]) / n
    row["wrk us/req"] = wrk_cpu * 1e6 / n
    row["origin us/req"] = (o1 - o0) * 1e6 / n
    row["requests"] = n
    return row, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="811", choices=sorted(FILES), help="response body size (default 811)")
    ap.add_argument("--conns", type=int, default=50, help="wrk keep-alive connections (default 50)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds, one run per proxy each (default 8)")
    ap.add_argument("--duration", type=int, default=4, help="seconds per timed run (default 4)")
    ap.add_argument("--no-trace", action="store_true", help="count context switches only, no tracepoints")
    ap.add_argument("--repo", default=pb.REPO_DEFAULT)
    ap.add_argument("--tollgate", default=None, help="tollgate binary (default REPO/target/dist/tollgate)")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 100 or not 1 <= a.duration <= 60 or not 1 <= a.conns <= 5000:
        raise pb.BenchError("--rounds 1..100, --duration 1..60 s and --conns 1..5000")
    tollgate = a.tollgate or os.path.join(a.repo, "target", "dist", "tollgate")
    for tool in ("taskset", "wrk", "haproxy", "nginx"):
        if not shutil.which(tool):
            raise pb.BenchError(f"`{tool}` not found (bench/run.sh installs it)")
    if not os.access(tollgate, os.X_OK):
        raise pb.BenchError(f"{tollgate} missing: build with `cargo build --profile dist -p tollgate`")
    perf = shutil.which("perf")
    if perf is None:
        pb.log("perf not found (Debian: linux-perf): counting from /proc only")
    fname = FILES[a.size]
    pb.stop_on_signals()

    work = tempfile.mkdtemp(prefix="tollgate-loadcore-")
    procs = pb.Procs()
    rows = {p: [] for p in PROXIES}
    try:
        pb.prepare_workdir(work, False)
        pids = pb.start_all(procs, work, tollgate, PROXIES)
        origin_pid = next(it[1].pid for it in procs.items if it[0] == "origin")
        pb.check_responses(PROXIES)
        pb.log(f"{a.size} B, {a.conns} keep-alive connections, {a.rounds} rounds x {a.duration} s")
        for rnd in range(a.rounds):
            for name in (PROXIES if rnd % 2 == 0 else PROXIES[::-1]):
                port = pb.PROXY_PORTS[name]
                pb.run_wrk(port, fname, a.conns, True, 1)  # warm-up: pools and caches as under load
                before = pb.tree_cpu_seconds(pids[name])
                row, errors = measure(origin_pid, port, fname, a.conns, a.duration, perf,
                                      not a.no_trace)
                row["proxy us/req"] = (pb.tree_cpu_seconds(pids[name]) - before) * 1e6 / row.pop("requests")
                rows[name].append(row)
                cells = " ".join(f"{k}={v:.3g}" for k, v in row.items())
                pb.log(f"round {rnd + 1} {name:8} {cells}" + (f"  ERRORS {errors}" if errors else ""))
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)

    pb.log("\nmedians over rounds (per request unless named otherwise)")
    pb.log(f"{'':24} {'Tollgate':>10} {'HAProxy':>10} {'ratio':>7}")
    for key in rows["tollgate"][0]:
        t = statistics.median(r[key] for r in rows["tollgate"])
        h = statistics.median(r[key] for r in rows["haproxy"])
        ratio = f"{t / h:7.3f}" if h else "      -"
        pb.log(f"{key:24} {t:10.4g} {h:10.4g} {ratio}")
    ratios = [t["req/s"] / h["req/s"] for t, h in zip(rows["tollgate"], rows["haproxy"]) if h["req/s"]]
    pb.log("req/s Tollgate/HAProxy per round: " + " ".join(f"{x:.3f}" for x in ratios)
           + f"; median {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    pb.entry(main)
