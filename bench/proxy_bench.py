#!/usr/bin/env python3
"""HTTP/1.1 proxy benchmark: Tollgate against HAProxy and nginx.

Run through bench/run.sh (which installs the tools and builds Tollgate first):

    bash bench/run.sh [--quick] [--no-build] [--write-docs] [--tcp]

With --tcp the three proxies relay TCP instead (Tollgate `mode = "tcp"`,
HAProxy `mode tcp` with `option splice-auto`, nginx's stream module): the same
workloads, but each client connection has an origin connection of its own, so
a request costs the proxy no parsing, and a close row a connect to the origin.

Method (see /work/shared/BENCHMARKING.md): every proxy runs one worker pinned to
CPU 0; wrk (one thread) and the nginx origin share CPU 1; all traffic stays on
127.0.0.1. Each workload gets a warm-up per proxy, then interleaved rounds (every
proxy once per round, order rotating and reversing). Per run we record requests/s, latency
p50/p99, the proxy's CPU time per 100k requests (utime+stime of its process tree
from /proc), its RSS, error counts, and how many upstream connections the origin
accepted (nginx stub_status). Medians over rounds go into a Markdown table.

Python 3 standard library only.
"""

import argparse
import ctypes
import datetime
import http.client
import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
DOC_BEGIN, DOC_END = "<!-- proxy-bench: begin -->", "<!-- proxy-bench: end -->"
TCP_DOC_BEGIN, TCP_DOC_END = "<!-- tcp-bench: begin -->", "<!-- tcp-bench: end -->"
# nginx's stream module, a package of its own in Debian (libnginx-mod-stream)
STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"
REPO_DEFAULT = os.path.dirname(BENCH_DIR)

ORIGIN_PORT = 18001
STATUS_PORT = 18002
PROXY_PORTS = {"tollgate": 18010, "haproxy": 18011, "nginx": 18012}
PROXIES = ["tollgate", "haproxy", "nginx"]
PROXY_LABEL = {"tollgate": "Tollgate", "haproxy": "HAProxy", "nginx": "nginx"}

# (label, file name, size in bytes)
FILES = [("811 B", "f811.bin", 811), ("8 KiB", "f8k.bin", 8 * 1024), ("160 KiB", "f160k.bin", 160 * 1024)]
CONNS = [50, 500]
KEEPALIVE = [True, False]

PROXY_CPU = "0"
CLIENT_CPU = "1"

CLK_TCK = int(subprocess.run(["getconf", "CLK_TCK"], capture_output=True, text=True).stdout.strip() or "100")


def log(msg=""):
    print(msg, flush=True)


def loud(msg):
    bar = "!" * 78
    print(f"\n{bar}\n!!! {msg}\n{bar}\n", flush=True)


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------- processes


def _pdeathsig():
    """In the child before exec: die with SIGTERM if this script dies (belt and braces)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    os.setsid()  # own session: a terminal Ctrl-C reaches this script, which stops them in order


def proc_stat(pid):
    """Fields of /proc/PID/stat after the command name, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(")") + 2 :].split()


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = proc_stat(int(d))
        if st is None:
            continue
        kids.setdefault(int(st[1]), []).append(int(d))
    return kids


def proc_tree(pid):
    """pid and all its live descendants, as (pid, starttime) pairs."""
    kids = children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        st = proc_stat(p)
        if st is None:
            continue
        out.append((p, st[19]))
        todo.extend(kids.get(p, []))
    return out


def tree_cpu_seconds(pid):
    """utime+stime of pid and its live descendants, plus the reaped children's
    cutime+cstime of each (all in seconds)."""
    ticks = 0
    for p, _ in proc_tree(pid):
        st = proc_stat(p)
        if st is None:
            continue
        # after "pid (comm) ": state=0 ppid=1 ... utime=11 stime=12 cutime=13 cstime=14
        ticks += int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])
    return ticks / CLK_TCK


def tree_memory_kib(pid):
    rss = hwm = 0
    for p, _ in proc_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
                    elif line.startswith("VmHWM:"):
                        hwm += int(line.split()[1])
        except FileNotFoundError:
            pass
    return rss, hwm


class Procs:
    """Every process this script starts, stopped by PID (never by name) on exit."""

    def __init__(self):
        self.items = []  # [name, Popen, {pid: starttime} of the tree seen so far, logfile]

    def start(self, name, cmd, logpath, env=None):
        logf = open(logpath, "ab")
        p = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env, preexec_fn=_pdeathsig
        )
        self.items.append([name, p, {}, logf])
        log(f"  started {name}: pid {p.pid}: {' '.join(cmd)}")
        return p

    def remember_tree(self):
        for item in self.items:
            if item[1].poll() is None:
                for pid, start in proc_tree(item[1].pid):
                    item[2][pid] = start

    def alive(self, name):
        for item in self.items:
            if item[0] == name:
                return item[1].poll() is None
        return False

    def stop(self, name):
        """Stops the process `name` (and its descendants) as stop_all does, leaving the others."""
        keep = [it for it in self.items if it[0] != name]
        self.items = [it for it in self.items if it[0] == name]
        self.stop_all()
        self.items = keep

    def stop_all(self):
        self.remember_tree()
        for name, p, tree, logf in reversed(self.items):
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log(f"  {name} (pid {p.pid}) ignored SIGTERM: SIGKILL")
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait(timeout=5)
            # descendants (nginx workers) still alive with the same start time: ours
            for pid, start in tree.items():
                if pid == p.pid:
                    continue
                deadline = time.time() + 3
                while time.time() < deadline:
                    st = proc_stat(pid)
                    if st is None or st[19] != start:
                        break
                    time.sleep(0.05)
                else:
                    log(f"  {name} child pid {pid} still running: SIGKILL")
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            logf.close()
        self.items = []


def port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_port(port, proc, name, logpath, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with {proc.returncode} before listening:\n{tail(logpath)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{name} not listening on 127.0.0.1:{port} after {timeout:.0f} s:\n{tail(logpath)}")


def tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- setup


def render(template, out, **subst):
    with open(os.path.join(BENCH_DIR, "conf", template)) as f:
        text = f.read()
    for k, v in subst.items():
        text = text.replace(f"@{k}@", str(v))
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise BenchError(f"{template}: unfilled placeholders {left}")
    with open(out, "w") as f:
        f.write(text)
    os.chmod(out, 0o644)


def mkdir(path):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o755)


def nginx_user_line():
    if os.geteuid() != 0:
        return ""
    for user, group in (("www-data", "www-data"), ("nobody", "nogroup")):
        try:
            pwd.getpwnam(user)
            return f"user {user} {group};"
        except KeyError:
            continue
    return ""


def prepare_workdir(work, tcp):
    mkdir(work)
    www = os.path.join(work, "www")
    mkdir(www)
    for _, name, size in FILES:
        path = os.path.join(www, name)
        # deterministic printable content of exactly `size` bytes
        line = b"tollgate benchmark payload 0123456789 abcdefghijklmnopqrstuvwxyz\n"
        data = (line * (size // len(line) + 1))[:size]
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o644)
    for sub in ("origin", "tollgate", "haproxy", "nginx"):
        mkdir(os.path.join(work, sub))
    for sub in ("origin", "nginx"):
        mkdir(os.path.join(work, sub, "tmp"))
    user = nginx_user_line()
    common = dict(ORIGIN_PORT=ORIGIN_PORT, USER=user)
    render("nginx-origin.conf", f"{work}/origin/nginx.conf", DIR=f"{work}/origin", WWW=www,
           STATUS_PORT=STATUS_PORT, **common)
    if tcp:
        if not os.path.exists(STREAM_MODULE):
            raise BenchError(f"{STREAM_MODULE} missing: nginx's stream module is the Debian package "
                             "libnginx-mod-stream (bench/run.sh --tcp installs it)")
        render("nginx-stream.conf", f"{work}/nginx/nginx.conf", DIR=f"{work}/nginx", PORT=PROXY_PORTS["nginx"],
               STREAM_MODULE=STREAM_MODULE, **common)
    else:
        render("nginx-proxy.conf", f"{work}/nginx/nginx.conf", DIR=f"{work}/nginx", PORT=PROXY_PORTS["nginx"],
               **common)
    suffix = "-tcp" if tcp else ""
    render(f"haproxy{suffix}.cfg", f"{work}/haproxy/haproxy.cfg", PORT=PROXY_PORTS["haproxy"],
           ORIGIN_PORT=ORIGIN_PORT)
    render(f"tollgate{suffix}.toml", f"{work}/tollgate/tollgate.toml", PORT=PROXY_PORTS["tollgate"],
           ORIGIN_PORT=ORIGIN_PORT)


def nginx_cmd(cpu, d):
    return ["taskset", "-c", cpu, "nginx", "-p", d + "/", "-c", f"{d}/nginx.conf", "-e", f"{d}/error.log"]


def start_all(procs, work, tollgate_bin, proxies):
    ports = [ORIGIN_PORT, STATUS_PORT] + [PROXY_PORTS[p] for p in proxies]
    busy = [p for p in ports if not port_free(p)]
    if busy:
        raise BenchError(f"port(s) {busy} on 127.0.0.1 already in use (see `ss -ltnp`); "
                         "stop whatever holds them (a previous bench run?) and retry")
    # config checks first: a clear message beats a crash at start
    for cmd, what in ((["nginx", "-t", "-q", "-p", f"{work}/origin/", "-c", f"{work}/origin/nginx.conf",
                        "-e", f"{work}/origin/error.log"], "origin nginx config"),
                      (["haproxy", "-c", "-q", "-f", f"{work}/haproxy/haproxy.cfg"], "haproxy config"),
                      (["nginx", "-t", "-q", "-p", f"{work}/nginx/", "-c", f"{work}/nginx/nginx.conf",
                        "-e", f"{work}/nginx/error.log"], "nginx proxy config"),
                      ([tollgate_bin, "check", "-c", f"{work}/tollgate/tollgate.toml"], "tollgate config")):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise BenchError(f"{what} rejected:\n{r.stdout}{r.stderr}")

    d = f"{work}/origin"
    p = procs.start("origin", nginx_cmd(CLIENT_CPU, d), f"{d}/stdout.log")
    wait_port(ORIGIN_PORT, p, "origin nginx", f"{d}/error.log")
    wait_port(STATUS_PORT, p, "origin nginx (stub_status)", f"{d}/error.log")

    pids = {}
    for name in proxies:
        d = f"{work}/{name}"
        if name == "tollgate":
            cmd = ["taskset", "-c", PROXY_CPU, tollgate_bin, "run", "-c", f"{d}/tollgate.toml"]
            logpath = f"{d}/tollgate.log"
        elif name == "haproxy":
            cmd = ["taskset", "-c", PROXY_CPU, "haproxy", "-db", "-f", f"{d}/haproxy.cfg"]
            logpath = f"{d}/haproxy.log"
        else:
            cmd = nginx_cmd(PROXY_CPU, d)
            logpath = f"{d}/stdout.log"
        env = dict(os.environ, RUST_LOG="warn") if name == "tollgate" else None
        p = procs.start(name, cmd, logpath, env=env)
        wait_port(PROXY_PORTS[name], p, name, f"{d}/error.log" if name == "nginx" else logpath)
        pids[name] = p.pid
    procs.remember_tree()
    return pids


def check_responses(proxies):
    """Every file through every proxy: status 200 and the exact size, before measuring anything."""
    for name in ["origin"] + proxies:
        port = ORIGIN_PORT if name == "origin" else PROXY_PORTS[name]
        for label, fname, size in FILES:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                c.request("GET", f"/{fname}")
                r = c.getresponse()
                body = r.read()
            finally:
                c.close()
            if r.status != 200 or len(body) != size:
                raise BenchError(f"GET /{fname} via {name}: status {r.status}, {len(body)} bytes "
                                 f"(want 200, {size}); check permissions of the work dir and the logs")
    log("  all files answer 200 with the right size via origin and every proxy")


def stub_status():
    c = http.client.HTTPConnection("127.0.0.1", STATUS_PORT, timeout=5)
    try:
        c.request("GET", "/")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    m = re.search(r"accepts handled requests\s+(\d+)\s+(\d+)\s+(\d+)", text)
    if not m:
        raise BenchError(f"unexpected stub_status output: {text!r}")
    return int(m.group(1)), int(m.group(3))


# --------------------------------------------------------------------------- load


def run_wrk(port, fname, conns, keepalive, seconds):
    lua = os.path.join(BENCH_DIR, "report.lua")
    cmd = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", lua]
    if not keepalive:
        cmd += ["-H", "Connection: close"]
    cmd.append(f"http://127.0.0.1:{port}/{fname}")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, preexec_fn=_pdeathsig)
    try:
        out, _ = p.communicate(timeout=seconds + 30)
    except BaseException:
        # timeout, Ctrl-C or anything else: wrk is ours, stop it by PID
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        raise
    for line in out.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    raise BenchError(f"wrk printed no BENCH_JSON line (exit {p.returncode}):\n{out}")


def measure(procs, name, pid, fname, conns, keepalive, seconds, tcp):
    if not procs.alive(name):
        raise BenchError(f"{name} (pid {pid}) is no longer running")
    tree_before = {p for p, _ in proc_tree(pid)}
    acc0, req0 = stub_status()
    cpu0 = tree_cpu_seconds(pid)
    t0 = time.time()
    w = run_wrk(PROXY_PORTS[name], fname, conns, keepalive, seconds)
    wall = time.time() - t0
    cpu1 = tree_cpu_seconds(pid)
    acc1, req1 = stub_status()
    rss, hwm = tree_memory_kib(pid)
    tree_after = {p for p, _ in proc_tree(pid)}

    requests = w["requests"]
    dur = w["duration_us"] / 1e6 or seconds
    errors = w["errors"]
    n_err = sum(errors.values())
    cpu = cpu1 - cpu0
    # each stub_status read is one connection and one request of its own: the
    # second read counts itself, the first counted itself before acc0/req0
    up_conns = acc1 - acc0 - 1
    up_reqs = req1 - req0 - 1
    r = {
        "proxy": name,
        "requests": requests,
        "rps": requests / dur,
        "duration_s": dur,
        "wall_s": wall,
        "bytes": w["bytes"],
        "p50_ms": w["latency_us"]["p50"] / 1000,
        "p90_ms": w["latency_us"]["p90"] / 1000,
        "p99_ms": w["latency_us"]["p99"] / 1000,
        "max_ms": w["latency_us"]["max"] / 1000,
        "errors": errors,
        "errors_total": n_err,
        "cpu_s": cpu,
        "cpu_s_per_100k": cpu / requests * 100_000 if requests else None,
        "rss_mib": rss / 1024,
        "hwm_mib": hwm / 1024,
        "upstream_conns": up_conns,
        "upstream_reqs": up_reqs,
        "flags": [],
        "notes": [],
    }
    if n_err:
        r["flags"].append("ERRORS " + ", ".join(f"{k} {v}" for k, v in errors.items() if v)
                          + (" (status = HTTP status >= 400)" if errors.get("status") else ""))
    if requests == 0:
        r["flags"].append("NO REQUESTS completed")
    # responses the origin served that wrk did not count, or the reverse: a proxy
    # answering by itself (error pages) or requests lost. Requests in flight when
    # this run's wrk stopped, and when the warm-up right before it stopped (they
    # reach the origin after the first stub_status read), account for up to
    # `conns` each.
    if abs(up_reqs - requests) > 2 * conns + 10:
        r["flags"].append(f"ORIGIN SAW {up_reqs} requests for {requests} client responses")
    if tree_before != tree_after:
        r["flags"].append(f"PROCESS TREE CHANGED during the run ({sorted(tree_before)} -> {sorted(tree_after)})")
    if not procs.alive(name):
        r["flags"].append("PROXY DIED during the run")
    # (in TCP mode every client connection has an origin connection of its own)
    if not tcp and up_conns > max(2 * conns, requests // 100):
        r["notes"].append(f"opened {up_conns} upstream connections for {requests} requests: not pooling?")
    return r


# --------------------------------------------------------------------------- report


def fmt_int(x):
    return f"{x:,.0f}"


def fmt_k(x):
    if x >= 10_000_000:
        return f"{x / 1e6:.0f}M"
    if x >= 1_000_000:
        return f"{x / 1e6:.1f}M"
    if x >= 10_000:
        return f"{x / 1e3:.0f}k"
    if x >= 1000:
        return f"{x / 1e3:.1f}k"
    return str(int(x))


def fmt_ms(x):
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def workload_label(w):
    return f"{w['file']}, {w['conns']} conns, {'keep-alive' if w['keepalive'] else 'close'}"


def paired_ratios(runs_a, runs_b, key):
    """a[round]/b[round] for every round both ran (interleaved runs are compared pairwise)."""
    by_round_b = {r["round"]: r for r in runs_b}
    ratios = []
    for ra in runs_a:
        rb = by_round_b.get(ra["round"])
        if rb and ra.get(key) and rb.get(key):
            ratios.append(ra[key] / rb[key])
    return ratios


def fmt_paired(ratios, favours):
    """The median per-round ratio, then (with several rounds) their range and in
    how many rounds the ratio favours Tollgate: a row whose rounds disagree shows
    it, however close its median is to 1."""
    if not ratios:
        return "-"
    m = fmt_ratio(med(ratios))
    if len(ratios) == 1:
        return m
    won = sum(1 for r in ratios if favours(r))
    return f"{m} ({min(ratios):.2f}-{max(ratios):.2f}, {won}/{len(ratios)})"


def versions(tollgate_bin, repo):
    def first_line(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except Exception as e:  # noqa: BLE001
            return f"? ({e})"

    v = {
        "tollgate": first_line([tollgate_bin, "--version"]),
        "haproxy": first_line(["haproxy", "-v"]),
        "nginx": first_line(["nginx", "-v"]),
        "wrk": first_line(["wrk", "-v"]),
    }
    try:
        rev = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        built = datetime.datetime.fromtimestamp(os.path.getmtime(tollgate_bin), datetime.timezone.utc)
        # the tree's HEAD now; the binary may be older (see its build time)
        v["tollgate"] += f" (tree at git {rev or '?'}, binary built {built:%Y-%m-%d %H:%M} UTC)"
    except Exception:  # noqa: BLE001
        pass
    v["tollgate"] = re.sub(r"^tollgate ", "", v["tollgate"])
    v["haproxy"] = re.sub(r"^HAProxy version (\S+).*", r"\1", v["haproxy"])
    v["nginx"] = v["nginx"].replace("nginx version: nginx/", "")
    v["wrk"] = re.sub(r"^wrk (\S+).*", r"\1", v["wrk"])
    return v


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu": model}


def report(meta, workloads, results):
    m, v, a = meta["machine"], meta["versions"], meta["args"]
    tcp = meta.get("mode") == "tcp"
    out = []
    out.append("# Tollgate TCP-mode proxy benchmark" if tcp else "# Tollgate HTTP/1.1 proxy benchmark")
    out.append("")
    out.append(f"- Date: {meta['date']}")
    out.append(f"- Machine: {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}")
    out.append(f"- Versions: Tollgate {v['tollgate']}; HAProxy {v['haproxy']}; nginx {v['nginx']}; wrk {v['wrk']}")
    out.append(f"- Runs: {a['rounds']} round(s) x {a['duration']} s per proxy and workload, "
               f"after a {a['warmup']} s warm-up per proxy (and 1 s right before each later timed run)" + (" (--quick smoke test)" if a["quick"] else ""))
    out.append("")
    out.append("Method:")
    if tcp:
        out.append("1. Each proxy runs one worker pinned to CPU 0 and relays TCP (Tollgate `mode = \"tcp\"`, "
                   "HAProxy `mode tcp` with `option splice-auto`, nginx `stream`); wrk (1 thread, `--latency`) "
                   "and the nginx origin share CPU 1; everything on 127.0.0.1; each client connection has an "
                   "origin connection of its own.")
    else:
        out.append("1. Each proxy runs one worker pinned to CPU 0; wrk (1 thread, `--latency`) and the nginx "
                   "origin share CPU 1; everything on 127.0.0.1, every proxy keeps alive to the origin.")
    out.append("2. Per workload every proxy is warmed up (again for 1 s before each timed run after the first), "
               "then measured once per round, the order rotating and reversing "
               "(A B C, B C A, C A B, C B A, A C B, B A C); cells are medians over rounds, req/s also with its min-max.")
    out.append("3. CPU = utime+stime of the proxy's process tree from /proc around the timed run, per 100k "
               "requests; RSS = VmRSS (VmHWM) of the tree after the run; upstream = origin `stub_status` "
               "accepts / requests during the run.")
    out.append("")
    out.append("| workload | proxy | req/s | req/s min-max | p50 ms | p99 ms | CPU-s/100k req | RSS MiB (HWM) "
               "| upstream conns / reqs | Tollgate/HAProxy req/s | Tollgate/HAProxy CPU/req "
               "| Tollgate/nginx req/s | Tollgate/nginx CPU/req |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    flagged = []
    notes = []
    for w in workloads:
        wl = workload_label(w)
        by_proxy = {p: [r for r in results if r["workload"] == w["id"] and r["proxy"] == p] for p in meta["proxies"]}
        for p in meta["proxies"]:
            runs = by_proxy[p]
            if not runs:
                continue
            rps = [r["rps"] for r in runs]
            cpu = [r["cpu_s_per_100k"] for r in runs]
            bad = [r for r in runs if r["flags"]]
            for r in bad:
                flagged.append(f"{wl} / {PROXY_LABEL[p]} / round {r['round'] + 1}: " + "; ".join(r["flags"]))
            for r in runs:
                for n in r["notes"]:
                    notes.append(f"{wl} / {PROXY_LABEL[p]} / round {r['round'] + 1}: {n}")
            name = PROXY_LABEL[p]
            if bad:
                name = f"**{name} ⚠ {sum(r['errors_total'] for r in bad)} errors / {len(bad)} flagged run(s)**"
            cpu_m = med(cpu)
            cpu_cell = "-" if cpu_m is None else f"{cpu_m:.3f}"
            if len(runs) > 1 and cpu_m is not None:
                cpu_cell += f" ({min(c for c in cpu if c is not None):.3f}-{max(c for c in cpu if c is not None):.3f})"
            ratios = ["", "", "", ""]
            if p == "tollgate":
                h, n = by_proxy.get("haproxy", []), by_proxy.get("nginx", [])
                more, less = (lambda r: r >= 1), (lambda r: r <= 1)
                ratios = [fmt_paired(paired_ratios(runs, h, "rps"), more),
                          fmt_paired(paired_ratios(runs, h, "cpu_s_per_100k"), less),
                          fmt_paired(paired_ratios(runs, n, "rps"), more),
                          fmt_paired(paired_ratios(runs, n, "cpu_s_per_100k"), less)]
            out.append("| " + " | ".join([
                wl, name, fmt_int(med(rps)), f"{fmt_int(min(rps))}-{fmt_int(max(rps))}",
                fmt_ms(med([r["p50_ms"] for r in runs])), fmt_ms(med([r["p99_ms"] for r in runs])),
                cpu_cell,
                f"{med([r['rss_mib'] for r in runs]):.1f} ({max(r['hwm_mib'] for r in runs):.1f})",
                f"{fmt_k(med([r['upstream_conns'] for r in runs]))} / {fmt_k(med([r['upstream_reqs'] for r in runs]))}",
                *ratios]) + " |")
    out.append("")
    out.append("Ratios (Tollgate row): median over rounds of the per-round ratio, then the lowest and highest "
               "per-round ratio and in how many rounds Tollgate was at or above (req/s) or at or below (CPU/req) "
               "the other proxy; req/s above 1 and CPU/req below 1 favour Tollgate. At 50 connections the wrk "
               "core is often the limit, so compare CPU/req.")
    if tcp:
        out.append("Configs: bench/conf/ (tollgate-tcp.toml, with `splice` on as by default; haproxy-tcp.cfg; "
                   "nginx-stream.conf). Upstream conns = connections the origin accepted during the timed run: "
                   "one per client connection (wrk's connections with keep-alive, one per request with close).")
    else:
        out.append("Configs: bench/conf/ (Tollgate `forward_for = false`, as HAProxy and nginx add no "
                   "X-Forwarded-*; nginx `keepalive_requests 1000000` on both sides, upstream `keepalive 1024`, "
                   "`proxy_max_temp_file_size 0`; HAProxy `http-reuse always`).")
        out.append("Upstream conns = connections the origin accepted during the timed run (0 = all requests on "
                   "pooled connections). Up to one per client connection is expected when a pool aged out "
                   "between runs (Tollgate keeps idle upstream connections for 60 s here, "
                   "`timeout.server_keep_alive`; nginx for 60 s; HAProxy closes half of them every 5 s); "
                   "thousands would mean no pooling.")
    if flagged:
        out.append("")
        out.append("## ⚠ FLAGGED RUNS (errors or inconsistent counts: do not trust these rows)")
        out.append("")
        out.extend(f"- {f}" for f in flagged)
    if notes:
        out.append("")
        out.append("Notes:")
        out.extend(f"- {n}" for n in notes)
    out.append("")
    return "\n".join(out), flagged


# --------------------------------------------------------------------------- main


def round_order(proxies, rnd):
    """The order of the proxies in round `rnd`: rotated by one each round, and
    reversed in every other cycle of rotations (A B C, B C A, C A B, C B A, A C B,
    B A C), so that over a whole number of cycles each proxy runs in each position,
    and after each other proxy, equally often. In one 5-round run of two proxies
    the run second in its round was the faster in every round; a plain rotation
    (A B, B A, A B, ...) gives one proxy the first place more often."""
    n = len(proxies)
    k = rnd % n
    order = proxies[k:] + proxies[:k]
    return order[::-1] if (rnd // n) % 2 else order


def common_args(ap, proxies, what, workdir):
    """The options every benchmark of bench/ takes (`what`: a proxy, a cache)."""
    ap.add_argument("--write-docs", action="store_true", help="also write the table to docs/benchmarks.md")
    ap.add_argument("--no-build", action="store_true", help="(handled by run.sh)")
    ap.add_argument("--rounds", type=int, help="rounds per workload (default 3, the proxy benchmark 6; --quick 1)")
    ap.add_argument("--duration", type=int, help="seconds per timed run (default 8, the proxy benchmark 4; --quick 2)")
    ap.add_argument("--warmup", type=int, help=f"warm-up seconds per {what} and workload (default 2; --quick 1)")
    ap.add_argument("--proxies", default=",".join(proxies), help="comma-separated subset of " + ",".join(proxies))
    ap.add_argument("--repo", default=REPO_DEFAULT)
    ap.add_argument("--tollgate", help="path of the tollgate binary (default REPO/target/dist/tollgate)")
    ap.add_argument("--workdir", default=workdir)


def settle_args(ap, a, proxies, only=False, rounds=3, duration=8):
    """Fills in the defaults of `common_args` and refuses --write-docs on a partial run."""
    a.rounds = a.rounds or (1 if a.quick else rounds)
    a.duration = a.duration or (2 if a.quick else duration)
    a.warmup = a.warmup or (1 if a.quick else 2)
    a.tollgate = a.tollgate or os.path.join(a.repo, "target", "dist", "tollgate")
    a.proxies = [p.strip() for p in a.proxies.split(",") if p.strip()]
    if any(p not in proxies for p in a.proxies):
        ap.error(f"--proxies: choose from {proxies}")
    if a.write_docs and (a.quick or only or a.proxies != proxies):
        ap.error("--write-docs is for the full benchmark (no --quick, --only or --proxies)")
    return a


def stop_on_signals():
    """SIGTERM and SIGHUP end a run like Ctrl-C: the `finally` that stops its processes runs."""
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 1 round of 2 s, only 811 B / 50 conns / keep-alive")
    ap.add_argument("--tcp", action="store_true",
                    help="the proxies relay TCP instead of proxying HTTP (bench/conf/*-tcp.*, nginx-stream.conf)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only workloads matching SIZE:CONNS:ka|close, e.g. 811:500:close "
                         "(any part may be *); repeatable")
    common_args(ap, PROXIES, "proxy", "/var/tmp/tollgate-bench")
    a = ap.parse_args()
    return settle_args(ap, a, PROXIES, only=bool(a.only), rounds=6, duration=4)


def select_workloads(a):
    all_w = []
    for label, fname, size in FILES:
        for conns in CONNS:
            for ka in KEEPALIVE:
                all_w.append({"id": f"{size}:{conns}:{'ka' if ka else 'close'}", "file": label, "fname": fname,
                              "size": size, "conns": conns, "keepalive": ka})
    if a.quick and not a.only:
        return [w for w in all_w if w["size"] == 811 and w["conns"] == 50 and w["keepalive"]]
    if not a.only:
        return all_w

    def match(w, pat):
        parts = (pat.split(":") + ["*", "*", "*"])[:3]
        want = [str(w["size"]), str(w["conns"]), "ka" if w["keepalive"] else "close"]
        sizes = {"811": "811", "8k": "8192", "8192": "8192", "160k": "163840", "163840": "163840"}
        parts[0] = sizes.get(parts[0].lower(), parts[0])
        return all(p in ("*", "") or p == x for p, x in zip(parts, want))

    return [w for w in all_w if any(match(w, p) for p in a.only)]


def main():
    a = parse_args()
    for tool in ("taskset", "wrk", "haproxy", "nginx"):
        if not shutil.which(tool):
            raise BenchError(f"`{tool}` not found (bench/run.sh installs it)")
    if not os.access(a.tollgate, os.X_OK):
        raise BenchError(f"{a.tollgate} missing: build with `cargo build --profile dist -p tollgate`")
    workloads = select_workloads(a)
    if not workloads:
        raise BenchError("no workload matches --only")

    stop_on_signals()

    started = datetime.datetime.now(datetime.timezone.utc)
    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(a.tollgate, a.repo),
        "args": {"quick": a.quick, "rounds": a.rounds, "duration": a.duration, "warmup": a.warmup,
                 "only": a.only},
        "proxies": a.proxies,
        "ports": {"origin": ORIGIN_PORT, "stub_status": STATUS_PORT, **PROXY_PORTS},
        "mode": "tcp" if a.tcp else "http",
    }
    results_dir = os.path.join(a.repo, "bench", "results")
    # the TCP-mode run's files beside the HTTP one's: tcp-latest.md, raw-tcp-*.json
    prefix = "tcp-" if a.tcp else ""
    stamp = started.strftime("%Y%m%d-%H%M%S")
    results = []
    raw = None
    total = len(workloads) * a.rounds * len(a.proxies)
    est = len(workloads) * len(a.proxies) * (a.rounds * a.duration + a.warmup + a.rounds - 1)
    log(f"Tollgate {'TCP-mode ' if a.tcp else ''}proxy benchmark: {len(workloads)} workload(s) x {len(a.proxies)} proxies x {a.rounds} round(s) "
        f"of {a.duration} s (about {est // 60} min {est % 60} s of load)")
    log(f"  machine: {meta['machine']}; versions: {meta['versions']}")
    log(f"  work dir {a.workdir}")

    procs = Procs()
    complete = False
    try:
        prepare_workdir(a.workdir, a.tcp)
        pids = start_all(procs, a.workdir, a.tollgate, a.proxies)
        check_responses(a.proxies)
        n = 0
        for wi, w in enumerate(workloads):
            wl = workload_label(w)
            log(f"\n== [{wi + 1}/{len(workloads)}] {wl}")
            for p in a.proxies:
                wu = run_wrk(PROXY_PORTS[p], w["fname"], w["conns"], w["keepalive"], a.warmup)
                e = sum(wu["errors"].values())
                log(f"  warm-up {PROXY_LABEL[p]:8} {wu['requests'] / (wu['duration_us'] / 1e6 or 1):>10,.0f} req/s"
                    + (f"  (warm-up errors: {wu['errors']})" if e else ""))
            for rnd in range(a.rounds):
                order = round_order(a.proxies, rnd)
                for pos, p in enumerate(order):
                    n += 1
                    if rnd > 0:
                        # Steady state: a short warm-up right before each timed run, so
                        # every proxy meets its run with connections as live traffic keeps
                        # them (idle pools age out while the other proxies run).
                        run_wrk(PROXY_PORTS[p], w["fname"], w["conns"], w["keepalive"], 1)
                    r = measure(procs, p, pids[p], w["fname"], w["conns"], w["keepalive"], a.duration, a.tcp)
                    r.update({"workload": w["id"], "round": rnd, "position": pos})
                    results.append(r)
                    cpu = "-" if r["cpu_s_per_100k"] is None else f"{r['cpu_s_per_100k']:.3f}"
                    log(f"  [{n}/{total}] round {rnd + 1} {PROXY_LABEL[p]:8} {r['rps']:>10,.0f} req/s  "
                        f"p50 {fmt_ms(r['p50_ms'])} ms  p99 {fmt_ms(r['p99_ms'])} ms  "
                        f"CPU {cpu} s/100k  RSS {r['rss_mib']:.1f} MiB  "
                        f"upstream {r['upstream_conns']} conns / {r['upstream_reqs']} reqs  "
                        f"errors {r['errors_total']}")
                    for f in r["flags"]:
                        loud(f"{wl} / {PROXY_LABEL[p]} / round {rnd + 1}: {f}")
                    for note in r["notes"]:
                        log(f"  note: {note}")
        complete = True
    finally:
        log("\nstopping the processes this run started")
        procs.stop_all()
        if results:
            os.makedirs(results_dir, exist_ok=True)
            suffix = "" if complete else "-partial"
            raw = os.path.join(results_dir, f"raw-{prefix}{stamp}{suffix}.json")
            with open(raw, "w") as f:
                json.dump({"meta": meta, "workloads": workloads, "results": results, "complete": complete}, f,
                          indent=1)
            log(f"raw results: {raw}")

    text, flagged = report(meta, workloads, results)
    log("")
    log(text)
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, f"{prefix}latest.md"), "w") as f:
        f.write(text)
    if results:
        shutil.copyfile(raw, os.path.join(results_dir, f"{prefix}latest.json"))
    log(f"table: {os.path.join(results_dir, prefix + 'latest.md')}")
    if a.write_docs:
        # Between its own markers, like the cache and edge benchmarks' sections:
        # the notes on reading it, kept outside them, stay.
        begin, end = (TCP_DOC_BEGIN, TCP_DOC_END) if a.tcp else (DOC_BEGIN, DOC_END)
        write_section(a.repo, f"{begin}\n{text.rstrip()}\n\n{end}", begin, end)
    if flagged:
        loud(f"{len(flagged)} run(s) had errors or inconsistent counts: see FLAGGED RUNS above")
        return 2
    return 0


def write_section(repo, text, begin, end):
    """Puts a benchmark's section into docs/benchmarks.md between its markers
    `begin` and `end` (appended the first time)."""
    path = os.path.join(repo, "docs", "benchmarks.md")
    doc = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if begin in doc and end in doc:
        doc = doc[: doc.index(begin)] + text.rstrip("\n") + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(doc)
    log(f"written: {path}")


def emit_section(repo, lines, begin, end, write_docs):
    """Ends a benchmark's table `lines` with its `end` marker, prints it and,
    with `write_docs`, puts it into docs/benchmarks.md (write_section)."""
    text = "\n".join(lines + ["", end])
    print(text)
    if write_docs:
        write_section(repo, text, begin, end)


def entry(main_fn):
    """Runs a benchmark's main: its exit status, a clear message for a BenchError,
    and 130 after Ctrl-C or a signal (the processes were stopped by then)."""
    try:
        sys.exit(main_fn())
    except BenchError as e:
        print(f"\nbench: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        print(f"\nbench: interrupted ({str(e) or 'Ctrl-C'}); processes stopped", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    entry(main)
