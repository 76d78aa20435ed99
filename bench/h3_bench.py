#!/usr/bin/env python3
"""HTTP/3 benchmark (issue 29, "Speed"): Tollgate's requests per CPU-second
over HTTP/3 beside HTTP/2, on the same TLS bind (`h3 = true`).

    python3 bench/h3_bench.py [--tollgate PATH] [--loadgen PATH] [--rounds 3] [--n 100000] [--write-docs]

Tollgate runs one worker (and its HTTP/3 thread) pinned to CPU 0 and serves
the proxy benchmark's files (811 B, 8 KiB) from a `static` backend, so the
figure is the protocol's cost and not an origin's. The clients, on CPU 1:
h2load for HTTP/2 and `loadgen h3` (bench/loadgen: quinn and the h3 crate;
Debian's h2load has no QUIC) for HTTP/3, both with 10 connections of 10
requests in flight, `--n` requests a run. Per run: requests/s and Tollgate's
CPU (utime+stime of the process, every thread) per request; rounds
alternate the order; medians. nginx 1.22 (Debian 12) serves no HTTP/3, so
there is no nginx row.

Python 3 standard library only; needs h2load (nghttp2-client), openssl, and
bench/loadgen built (`cargo build --release -p tollgate-loadgen`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proxy_bench as pb  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = 18610
BEGIN, END = "<!-- h3-bench: begin -->", "<!-- h3-bench: end -->"
FILES = [f for f in pb.FILES if f[2] <= 8192]

TOLLGATE = """[global]
workers = 1
access_log = "off"
[[frontend]]
name = "web"
bind = [{{ addr = "127.0.0.1:{port}", tls = {{ certs = ["{cert}"] }}, h3 = true }}]
default_backend = "files"
[[backend]]
name = "files"
static = {{ root = "{www}" }}
"""


def pki(work):
    """A CA and a leaf for `localhost` it signs (QUIC clients refuse a CA as
    the server's certificate)."""
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
    ca_key, ca, key, csr, leaf = (os.path.join(work, n) for n in ("ca.key", "ca.pem", "leaf.key", "leaf.csr", "leaf.pem"))
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", ca_key,
        "-out", ca, "-days", "2", "-subj", "/CN=Tollgate bench CA")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr,
        "-subj", "/CN=localhost")
    ext = os.path.join(work, "leaf.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", leaf, "-days",
        "2", "-extfile", ext)
    both = os.path.join(work, "both.pem")
    with open(both, "w") as out, open(leaf) as c, open(key) as k:
        out.write(c.read() + k.read())
    return ca, both


def run_h2(fname, n):
    cmd = ["taskset", "-c", pb.CLIENT_CPU, "h2load", "-n", str(n), "-c", "10", "-m", "10",
           f"https://127.0.0.1:{PORT}/{fname}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    done = int(out.split("requests:")[1].split("done,")[0].split()[-1])
    ok = int(out.split("status codes:")[1].split("2xx")[0].strip())
    secs = float(out.split("finished in ")[1].split("s,")[0].replace("m", "")) / (1000 if "ms," in out else 1)
    return done, ok, secs


def run_h3(loadgen, ca, fname, n):
    cmd = ["taskset", "-c", pb.CLIENT_CPU, loadgen, "h3", "--addr", f"127.0.0.1:{PORT}", "--ca", ca, "--name",
           "localhost", "--n", str(n), "--c", "10", "--m", "10", "--path", f"/{fname}", "--max-seconds", "120"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise pb.BenchError(f"loadgen h3: {r.stderr}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["requests"], j["requests"] - j["errors"], j["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tollgate", default=os.path.join(REPO, "target", "dist", "tollgate"))
    ap.add_argument("--loadgen", default=os.path.join(REPO, "target", "release", "loadgen"))
    ap.add_argument("--workdir", default="/var/tmp/tollgate-h3-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    pb.mkdir(a.workdir)
    www = os.path.join(a.workdir, "www")
    pb.mkdir(www)
    for _, name, size in FILES:
        line = b"tollgate benchmark payload 0123456789 abcdefghijklmnopqrstuvwxyz\n"
        with open(os.path.join(www, name), "wb") as f:
            f.write((line * (size // len(line) + 1))[:size])
    ca, both = pki(a.workdir)
    conf = os.path.join(a.workdir, "tollgate.toml")
    with open(conf, "w") as f:
        f.write(TOLLGATE.format(port=PORT, cert=both, www=www))
    procs = pb.Procs()
    results = {(label, proto): [] for label, _, _ in FILES for proto in ("h2", "h3")}
    try:
        log = os.path.join(a.workdir, "tollgate.log")
        p = procs.start("tollgate", ["taskset", "-c", pb.PROXY_CPU, a.tollgate, "run", "-c", conf], log,
                        env=dict(os.environ, RUST_LOG="warn"))
        pb.wait_port(PORT, p, "tollgate", log)
        for label, fname, _ in FILES:
            run_h2(fname, 2000)
            run_h3(a.loadgen, ca, fname, 2000)
            for rnd in range(a.rounds):
                for proto in (("h2", "h3") if rnd % 2 == 0 else ("h3", "h2")):
                    cpu0 = pb.tree_cpu_seconds(p.pid)
                    done, ok, secs = run_h2(fname, a.n) if proto == "h2" else run_h3(a.loadgen, ca, fname, a.n)
                    cpu = pb.tree_cpu_seconds(p.pid) - cpu0
                    if ok != a.n or done != a.n:
                        raise pb.BenchError(f"{proto} {fname}: {ok} good of {done} done, {a.n} asked")
                    results[(label, proto)].append((done / secs, cpu * 1e6 / done, done / cpu))
                    pb.log(f"  {label:6} round {rnd + 1}: {proto} {done / secs:9.0f} req/s, {cpu * 1e6 / done:6.2f} "
                           f"CPU-us per request, {done / cpu:9.0f} requests per CPU-second")
    finally:
        procs.stop_all()
    lines = [BEGIN, "",
             f"Tollgate, one worker and its HTTP/3 thread on CPU 0, static files; 10 connections x 10 requests in "
             f"flight from CPU 1 (h2load for h2, `loadgen h3` for h3), {a.n:,} requests a run, {a.rounds} rounds, "
             "medians (`python3 bench/h3_bench.py`):", "",
             "| file, protocol | requests/s | CPU-us per request | requests per CPU-second |",
             "| --- | --- | --- | --- |"]
    for label, _, _ in FILES:
        for proto in ("h2", "h3"):
            rs = results[(label, proto)]
            med = [statistics.median(x[i] for x in rs) for i in range(3)]
            lines.append(f"| {label}, {proto} | {med[0]:,.0f} | {med[1]:.2f} | {med[2]:,.0f} |")
    pb.emit_section(REPO, lines, BEGIN, END, a.write_docs)


if __name__ == "__main__":
    pb.entry(main)
