#!/usr/bin/env python3
"""HTTP cache benchmark: Tollgate's cache against Varnish, nginx proxy_cache and
Apache Traffic Server, at 100% hit rate (issue 5, item 7; the seed's benchmark).

Run through bench/run.sh (which installs the tools and builds Tollgate first):

    bash bench/run.sh --cache [--quick] [--no-build | --tollgate PATH] [--write-docs]

Method: the one of bench/proxy_bench.py (whose helpers this uses). Every cache
runs one worker (Varnish: its processes; Traffic Server: traffic_server alone,
with one event thread) pinned to CPU 0, and a check makes sure that none of its
threads may run elsewhere; wrk (one thread) and the nginx origin share CPU 1;
everything on 127.0.0.1. The origin serves an 8 KiB file with
`Cache-Control: max-age=3600`; each cache is primed, and a check before
measuring makes sure that the origin sees no request while the cache answers
(100% hits). Workloads: 1,000 clients, keep-alive on and off.
Per run: requests/s, requests per CPU-second of the cache's processes (the
target: the highest), latency p50 / p95 / p99, RSS, and the origin's request
count (0 at 100% hits). Medians over interleaved rounds. CPU and RSS count
every process of a cache (Varnish's manager and child; traffic_server is one).

Traffic Server (the Debian package `trafficserver`) runs as an instance of its
own: its config (bench/conf/trafficserver/, rendered into WORKDIR/ats/etc), lock,
logs and a 64 MiB storage file all under WORKDIR/ats, by a runroot.yaml; the
package's own config, cache and service are left alone.

Python 3 standard library only.
"""

import argparse
import datetime
import http.client
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

ORIGIN_PORT = 18101
STATUS_PORT = 18102
PROXY_PORTS = {"tollgate": 18110, "varnish": 18111, "nginx": 18112, "ats": 18114}
PROXIES = ["tollgate", "varnish", "nginx", "ats"]
LABEL = {"tollgate": "Tollgate", "varnish": "Varnish", "nginx": "nginx proxy_cache", "ats": "Traffic Server"}
# Traffic Server's config files rendered from bench/conf/trafficserver/ into its etc/,
# and those it only warns about when missing (empty is their valid default).
ATS_TEMPLATES = ["records.config", "remap.config", "storage.config", "ip_allow.yaml"]
ATS_EMPTY = {"cache.config": "", "hosting.config": "", "parent.config": "", "plugin.config": "", "volume.config": "",
             "ssl_multicert.config": "", "sni.yaml": "sni: []\n"}
FNAME, SIZE = "f8k.bin", 8 * 1024
CONNS = 1000
KEEPALIVE = [True, False]
BEGIN, END = "<!-- cache-bench: begin -->", "<!-- cache-bench: end -->"

# proxy_bench's helpers read these module globals.
pb.ORIGIN_PORT, pb.STATUS_PORT = ORIGIN_PORT, STATUS_PORT
pb.PROXY_PORTS = dict(PROXY_PORTS, haproxy=18113)  # prepare_workdir renders haproxy's config too
pb.FILES = [("8 KiB", FNAME, SIZE)]

log = pb.log


def prepare(work):
    pb.prepare_workdir(work)  # www files, origin and nginx dirs, and configs this bench replaces
    origin = f"{work}/origin/nginx.conf"
    with open(origin) as f:
        text = f.read()
    if "location / { }" not in text:
        raise pb.BenchError("nginx-origin.conf changed: cannot add `expires 1h` to it")
    with open(origin, "w") as f:
        f.write(text.replace("location / { }", "location / { expires 1h; }"))
    for sub in ("varnish", "nginx/cache"):
        pb.mkdir(os.path.join(work, sub))
    user = pb.nginx_user_line()
    pb.render("nginx-cache.conf", f"{work}/nginx/nginx.conf", DIR=f"{work}/nginx", PORT=PROXY_PORTS["nginx"],
              ORIGIN_PORT=ORIGIN_PORT, USER=user)
    if user:
        shutil.chown(f"{work}/nginx/cache", user.split()[1])
    pb.render("tollgate-cache.toml", f"{work}/tollgate/tollgate.toml", PORT=PROXY_PORTS["tollgate"],
              ORIGIN_PORT=ORIGIN_PORT)
    prepare_ats(f"{work}/ats")


def ats_user():
    """The account traffic_server switches to: when started as root, the package's
    `trafficserver` (nobody without it); otherwise #-1, i.e. stay who we are."""
    if os.geteuid() != 0:
        return "#-1"
    for user in ("trafficserver", "nobody"):
        try:
            pwd.getpwnam(user)
            return user
        except KeyError:
            continue
    raise pb.BenchError("no `trafficserver` or `nobody` account for traffic_server to run as")


def prepare_ats(d):
    """Traffic Server's own tree: etc/ (config), run/ (lock, records.snap), log/ and
    cache/ (the storage file). Made afresh every run: no stale lock, an empty cache."""
    shutil.rmtree(d, ignore_errors=True)
    for sub in ("", "etc", "run", "log", "cache"):
        pb.mkdir(os.path.join(d, sub))
    user = ats_user()
    pb.render("trafficserver/runroot.yaml", f"{d}/runroot.yaml", DIR=d)
    for name in ATS_TEMPLATES:
        pb.render(f"trafficserver/{name}", f"{d}/etc/{name}", DIR=d, PORT=PROXY_PORTS["ats"],
                  ORIGIN_PORT=ORIGIN_PORT, USER=user)
    for name, text in ATS_EMPTY.items():
        with open(f"{d}/etc/{name}", "w") as f:
            f.write(text)
    # traffic_server uses but does not create its storage files: each one of
    # storage.config, sparse, of the size given there.
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    with open(f"{d}/etc/storage.config") as f:
        spans = [line.split()[:2] for line in f if line.strip() and not line.lstrip().startswith("#")]
    for path, size in spans:
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if not m:
            raise pb.BenchError(f"storage.config: size {size!r} of {path}: expected a number with K, M or G")
        with open(path, "wb") as f:
            f.truncate(int(m.group(1)) * units[m.group(2)])
    if not user.startswith("#"):
        for sub in ("run", "log", "cache"):
            for root, _, files in os.walk(os.path.join(d, sub)):
                for p in [root] + [os.path.join(root, x) for x in files]:
                    shutil.chown(p, user)


def start(procs, work, tollgate_bin, proxies):
    busy = [p for p in [ORIGIN_PORT, STATUS_PORT] + [PROXY_PORTS[x] for x in proxies] if not pb.port_free(p)]
    if busy:
        raise pb.BenchError(f"port(s) {busy} on 127.0.0.1 already in use; stop whatever holds them and retry")
    d = f"{work}/origin"
    p = procs.start("origin", pb.nginx_cmd(pb.CLIENT_CPU, d), f"{d}/stdout.log")
    pb.wait_port(ORIGIN_PORT, p, "origin nginx", f"{d}/error.log")
    pb.wait_port(STATUS_PORT, p, "origin nginx (stub_status)", f"{d}/error.log")
    pids = {"origin": p.pid}
    for name in proxies:
        d = f"{work}/{name}"
        env = None
        if name == "tollgate":
            cmd = ["taskset", "-c", pb.PROXY_CPU, tollgate_bin, "run", "-c", f"{d}/tollgate.toml"]
            logpath = f"{d}/tollgate.log"
            env = dict(os.environ, RUST_LOG="warn")
        elif name == "ats":
            # traffic_server itself, without traffic_manager: one process to measure
            # and to stop. Its threads: bench/conf/trafficserver/records.config.
            cmd = ["taskset", "-c", pb.PROXY_CPU, "traffic_server", f"--run-root={d}/runroot.yaml"]
            logpath = f"{d}/stdout.log"
        elif name == "varnish":
            # -b: the built-in VCL, which caches by the origin's Cache-Control. A
            # thread per request in progress: 1,000 of them from the start, so the
            # pool does not grow during the runs.
            cmd = ["taskset", "-c", pb.PROXY_CPU, "varnishd", "-F", "-n", d, "-a", f"127.0.0.1:{PROXY_PORTS[name]}",
                   "-b", f"127.0.0.1:{ORIGIN_PORT}", "-s", "malloc,256m", "-p", "thread_pools=1",
                   "-p", "thread_pool_min=1000", "-p", "thread_pool_max=5000", "-T", "none"]
            logpath = f"{d}/varnish.log"
        else:
            cmd = pb.nginx_cmd(pb.PROXY_CPU, d)
            logpath = f"{d}/stdout.log"
        p = procs.start(name, cmd, logpath, env=env)
        errlog = {"nginx": f"{d}/error.log", "ats": f"{d}/log/diags.log"}.get(name, logpath)
        pb.wait_port(PROXY_PORTS[name], p, name, errlog, timeout=30)
        pids[name] = p.pid
    procs.remember_tree()
    return pids


def get(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", f"/{FNAME}")
        r = c.getresponse()
        return r.status, r.read(), dict((k.lower(), v) for k, v in r.getheaders())
    finally:
        c.close()


def check_hits(proxies):
    """Primes every cache, then checks that 20 more requests do not reach the origin."""
    for name in proxies:
        status, body, _ = get(PROXY_PORTS[name])
        if status != 200 or len(body) != SIZE:
            raise pb.BenchError(f"GET /{FNAME} via {name}: {status}, {len(body)} bytes")
        time.sleep(0.2)
        _, before = pb.stub_status()
        for _ in range(20):
            status, body, headers = get(PROXY_PORTS[name])
            if status != 200 or len(body) != SIZE:
                raise pb.BenchError(f"GET /{FNAME} via {name}: {status}, {len(body)} bytes")
        _, after = pb.stub_status()
        # the second stub_status read counts itself
        if after - before - 1 != 0:
            raise pb.BenchError(f"{name} sent {after - before - 1} of 20 primed requests to the origin: not caching "
                                f"(last response headers: {headers})")
        log(f"  {LABEL[name]}: 20 of 20 answered from the cache")


def check_pinned(pids, proxies):
    """Every thread of every cache may run on the cache core only: taskset's mask
    is inherited, but a server that sets thread affinities itself (Traffic Server
    does, by proxy.config.exec_thread.affinity) could leave it."""
    for name in proxies:
        for pid, _ in pb.proc_tree(pids[name]):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except FileNotFoundError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/status") as f:
                        cpus = next((line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")), "?")
                except FileNotFoundError:
                    continue
                if cpus != pb.PROXY_CPU:
                    raise pb.BenchError(f"{name}: thread {tid} of pid {pid} may run on CPU(s) {cpus}, "
                                        f"not only on CPU {pb.PROXY_CPU}")
        log(f"  {LABEL[name]}: every thread on CPU {pb.PROXY_CPU} only")


def cpu_by_process():
    """utime+stime+cutime+cstime (ticks) of every process, by (pid, start time)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = pb.proc_stat(int(d))
            if st is not None:
                out[(int(d), st[19])] = sum(int(x) for x in st[11:15])
    return out


def other_cpu_seconds(before, after, ours):
    """CPU-seconds other processes of this shared machine used between two
    `cpu_by_process` snapshots: everything but this script (and so wrk, its
    child) and the processes it started."""
    ticks = sum(t - before.get(k, 0) for k, t in after.items() if k[0] not in ours)
    return ticks / pb.CLK_TCK


def measure(procs, name, pids, keepalive, seconds):
    pid = pids[name]
    if not procs.alive(name):
        raise pb.BenchError(f"{name} (pid {pid}) is no longer running")
    _, req0 = pb.stub_status()
    ours = {os.getpid()} | {q for item in procs.items for q in item[2]}
    everyone = cpu_by_process()
    cpu0 = pb.tree_cpu_seconds(pid)
    w = pb.run_wrk(PROXY_PORTS[name], FNAME, CONNS, keepalive, seconds)
    cpu = pb.tree_cpu_seconds(pid) - cpu0
    other = other_cpu_seconds(everyone, cpu_by_process(), ours)
    _, req1 = pb.stub_status()
    rss, hwm = pb.tree_memory_kib(pid)
    requests = w["requests"]
    dur = w["duration_us"] / 1e6 or seconds
    errors = w["errors"]
    r = {
        "proxy": name,
        "requests": requests,
        "rps": requests / dur,
        "cpu_s": cpu,
        "rps_per_cpu": requests / cpu if cpu > 0 else None,
        "p50_ms": w["latency_us"]["p50"] / 1000,
        "p95_ms": w["latency_us"]["p95"] / 1000,
        "p99_ms": w["latency_us"]["p99"] / 1000,
        "rss_mib": rss / 1024,
        "hwm_mib": hwm / 1024,
        "origin_reqs": req1 - req0 - 1,
        "other_cpu_s": other,
        "errors": errors,
        "errors_total": sum(errors.values()),
        "flags": [],
    }
    if r["errors_total"]:
        r["flags"].append("ERRORS " + ", ".join(f"{k} {v}" for k, v in errors.items() if v))
    if requests == 0:
        r["flags"].append("NO REQUESTS completed")
    if r["origin_reqs"] > 0:
        r["flags"].append(f"ORIGIN SAW {r['origin_reqs']} requests: not 100% hits")
    if not procs.alive(name):
        r["flags"].append("PROXY DIED during the run")
    if other > 0.1 * seconds:
        r["flags"].append(f"OTHER LOAD: {other:.1f} CPU-s of other processes during the {seconds} s run")
    return r


def versions(tollgate_bin, repo):
    v = pb.versions(tollgate_bin, repo)
    for key, cmd, pattern in (("varnish", ["varnishd", "-V"], r"varnish-(\S+)"),
                              ("ats", ["traffic_server", "-V"], r"Traffic Server (\S+)")):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            m = re.search(pattern, out.stdout + out.stderr)
            v[key] = m.group(1) if m else "?"
        except OSError as e:
            v[key] = f"? ({e})"
    return v


def report(meta, results):
    m, v, a = meta["machine"], meta["versions"], meta["args"]
    out = [BEGIN, "", "## Cache: 100% hits, 8 KiB, 1,000 clients", ""]
    out.append(f"- Date: {meta['date']}; machine: {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}")
    out.append(f"- Versions: Tollgate {v['tollgate']}; Varnish {v['varnish']}; nginx {v['nginx']}; "
               f"Traffic Server {v.get('ats', '?')}; wrk {v['wrk']}")
    out.append(f"- Runs: {a['rounds']} round(s) x {a['duration']} s per cache and workload after a {a['warmup']} s "
               "warm-up, order rotating per round" + (" (--quick smoke test)" if a["quick"] else ""))
    out.append("- Method (bench/cache_bench.py): each cache on one core (CPU 0: Tollgate `workers = 1`, nginx "
               "`worker_processes 1`, Varnish's processes and threads, `traffic_server` with one event thread; "
               "checked: no thread of theirs may run elsewhere); wrk (1 thread) and the nginx origin on CPU 1. "
               "The origin serves 8 KiB with `Cache-Control: max-age=3600`; every cache is primed and checked to "
               "answer without the origin; `origin reqs` counts what reached it during the run (0 = 100% hits). "
               "Caches: Tollgate `[[cache]] memory = \"256MiB\"`; Varnish `-s malloc,256m -p thread_pools=1 "
               "-p thread_pool_min=1000` with the built-in VCL; nginx `proxy_cache` (files, read through the page "
               "cache); Traffic Server `traffic_server` alone (no traffic_manager) in reverse-proxy mode (one "
               "remap rule), `exec_thread.autoconfig 0`, `exec_thread.limit 1`, `accept_threads 0`, a 64 MiB RAM "
               "cache over a 64 MiB storage file (bench/conf/trafficserver/).")
    out.append("- req/s per CPU = requests / CPU-seconds (utime+stime) of the cache's process tree (all of its "
               "processes and threads) during the run; RSS of the same tree. "
               "A run is flagged when other processes of the machine took more than 0.1 CPU-s per second of it.")
    out.append("")
    out.append("| workload | cache | req/s | req/s min-max | req/s per CPU | Tollgate / this, per CPU | p50 ms "
               "| p95 ms | p99 ms | RSS MiB (HWM) | origin reqs |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    flagged, verdicts = [], []
    for ka in meta["keepalive"]:
        wl = f"8 KiB, {CONNS} clients, {'keep-alive' if ka else 'close'}"
        per_cpu_of = {}
        for p in meta["proxies"]:
            got = [r["rps_per_cpu"] for r in results if r["proxy"] == p and r["keepalive"] == ka and r["rps_per_cpu"]]
            if got:
                per_cpu_of[p] = pb.med(got)
        ours = per_cpu_of.get("tollgate")
        if ours and len(per_cpu_of) > 1:
            best = max(per_cpu_of, key=per_cpu_of.get)
            rest = ", ".join(f"{LABEL[p]} {ours / v:.2f}x" for p, v in per_cpu_of.items() if p != "tollgate")
            verdicts.append(f"- {wl}: highest req/s per CPU: **{LABEL[best]}**; Tollgate against the others: {rest}")
        for p in meta["proxies"]:
            runs = [r for r in results if r["proxy"] == p and r["keepalive"] == ka]
            if not runs:
                continue
            rps = [r["rps"] for r in runs]
            per_cpu = [r["rps_per_cpu"] for r in runs if r["rps_per_cpu"]]
            ratio = f"{ours / per_cpu_of[p]:.2f}" if ours and p != "tollgate" and p in per_cpu_of else ""
            for r in runs:
                if r["flags"]:
                    flagged.append(f"{wl} / {LABEL[p]} / round {r['round'] + 1}: " + "; ".join(r["flags"]))
            name = LABEL[p] + (" ⚠" if any(r["flags"] for r in runs) else "")
            out.append("| " + " | ".join([
                wl, name, pb.fmt_int(pb.med(rps)), f"{pb.fmt_int(min(rps))}-{pb.fmt_int(max(rps))}",
                pb.fmt_int(pb.med(per_cpu)) if per_cpu else "-", ratio,
                pb.fmt_ms(pb.med([r["p50_ms"] for r in runs])), pb.fmt_ms(pb.med([r["p95_ms"] for r in runs])),
                pb.fmt_ms(pb.med([r["p99_ms"] for r in runs])),
                f"{pb.med([r['rss_mib'] for r in runs]):.1f} ({max(r['hwm_mib'] for r in runs):.1f})",
                str(max(r["origin_reqs"] for r in runs))]) + " |")
    if verdicts:
        out += ["", "Target (issue 5): the highest requests/s per CPU of the caches measured."] + verdicts
    out += ["", "Reading it: req/s is also bounded by the single wrk thread on the other core; where a cache's "
            "req/s stays below its req/s per CPU its own core was not saturated, and req/s per CPU is the "
            "comparison of the caches' cost per request. `timeout` errors are wrk giving up on a response "
            "after 2 s."]
    if flagged:
        out += ["", "Flagged runs (errors, requests that reached the origin, other load on the machine):", ""]
        out += [f"- {f}" for f in flagged]
    out += ["", END, ""]
    return "\n".join(out), flagged


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 round of 2 s, keep-alive only")
    pb.common_args(ap, PROXIES, "cache", "/var/tmp/tollgate-cache-bench")
    return pb.settle_args(ap, ap.parse_args(), PROXIES)


def main():
    a = parse_args()
    tools = {"varnish": "varnishd", "ats": "traffic_server"}
    for tool in ["taskset", "wrk", "nginx"] + [tools[p] for p in a.proxies if p in tools]:
        if not shutil.which(tool):
            raise pb.BenchError(f"`{tool}` not found (bench/run.sh --cache installs it)")
    if not os.access(a.tollgate, os.X_OK):
        raise pb.BenchError(f"{a.tollgate} missing: build with `cargo build --profile dist -p tollgate`")

    pb.stop_on_signals()
    started = datetime.datetime.now(datetime.timezone.utc)
    keepalive = [True] if a.quick else KEEPALIVE
    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": pb.machine(),
        "versions": versions(a.tollgate, a.repo),
        "args": {"quick": a.quick, "rounds": a.rounds, "duration": a.duration, "warmup": a.warmup},
        "proxies": a.proxies,
        "keepalive": keepalive,
    }
    log(f"cache benchmark: {len(keepalive)} workload(s) x {len(a.proxies)} caches x {a.rounds} round(s) of "
        f"{a.duration} s; work dir {a.workdir}")
    procs = pb.Procs()
    results = []
    try:
        prepare(a.workdir)
        pids = start(procs, a.workdir, a.tollgate, a.proxies)
        check_hits(a.proxies)
        check_pinned(pids, a.proxies)
        for ka in keepalive:
            log(f"\n== 8 KiB, {CONNS} clients, {'keep-alive' if ka else 'close'}")
            for p in a.proxies:
                pb.run_wrk(PROXY_PORTS[p], FNAME, CONNS, ka, a.warmup)
            for rnd in range(a.rounds):
                order = pb.round_order(a.proxies, rnd)
                for p in order:
                    if rnd > 0:
                        pb.run_wrk(PROXY_PORTS[p], FNAME, CONNS, ka, 1)
                    r = measure(procs, p, pids, ka, a.duration)
                    r.update({"keepalive": ka, "round": rnd})
                    results.append(r)
                    log(f"  round {rnd + 1} {LABEL[p]:18} {r['rps']:>9,.0f} req/s  "
                        f"{r['rps_per_cpu'] or 0:>9,.0f} req/CPU-s  p50 {pb.fmt_ms(r['p50_ms'])} ms  "
                        f"p95 {pb.fmt_ms(r['p95_ms'])} ms  RSS {r['rss_mib']:.1f} MiB  "
                        f"origin {r['origin_reqs']}  errors {r['errors_total']}  other CPU {r['other_cpu_s']:.2f} s")
                    for f in r["flags"]:
                        pb.loud(f"{LABEL[p]} / round {rnd + 1}: {f}")
    finally:
        log("\nstopping the processes this run started")
        procs.stop_all()
    text, flagged = report(meta, results)
    log("\n" + text)
    results_dir = os.path.join(a.repo, "bench", "results")
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "cache-latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(results_dir, "cache-latest.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    if a.write_docs:
        pb.write_section(a.repo, text, BEGIN, END)
    return 2 if flagged else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except pb.BenchError as e:
        print(f"\nbench: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        print(f"\nbench: interrupted ({str(e) or 'Ctrl-C'}); processes stopped", file=sys.stderr)
        sys.exit(130)
