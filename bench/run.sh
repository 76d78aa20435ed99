#!/usr/bin/env bash
# Tollgate HTTP/1.1 proxy benchmark: Tollgate vs HAProxy vs nginx, each proxying to
# an nginx origin over keep-alive. Method: /work/shared/BENCHMARKING.md; details in
# bench/proxy_bench.py.
#
#   bash bench/run.sh                 full run (12 workloads x 3 rounds x 8 s, ~17 min)
#   bash bench/run.sh --quick         smoke test (811 B / 50 conns / keep-alive, 1 x 2 s)
#   bash bench/run.sh --no-build      skip `cargo build` if target/release/tollgate exists
#   bash bench/run.sh --write-docs    also write the table to docs/benchmarks.md
#   bash bench/run.sh --edge          TLS handshakes, HTTP/2 and WebSockets instead
#                                     (bench/edge_bench.py; ~15 min; also --quick, --write-docs)
#   (other options: bash bench/run.sh --help)
#
# Results: bench/results/latest.md (table), bench/results/raw-*.json (every run).
# Exit status: 0 ok, 2 some run had errors (flagged in the table), 1 setup failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
export PATH="$PATH:/usr/sbin:/sbin"

build=1
edge=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --edge) edge=1 ;;
  esac
done
for arg in "$@"; do
  case "$arg" in
    -h|--help) ((edge)) && exec python3 "$HERE/edge_bench.py" --help; exec python3 "$HERE/proxy_bench.py" --help ;;
  esac
done

# 1. tools, from Debian (the packages start system services on the default ports:
#    leave them alone; the benchmark runs its own instances on 18001-18012)
missing=()
command -v haproxy >/dev/null || missing+=(haproxy)
command -v nginx >/dev/null || missing+=(nginx-light)
command -v wrk >/dev/null || missing+=(wrk)
command -v taskset >/dev/null || missing+=(util-linux)
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v openssl >/dev/null || missing+=(openssl)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=()
  [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

# 2. Tollgate, release build
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
BIN="$TARGET_DIR/release/tollgate"
LOADGEN="$TARGET_DIR/release/loadgen"
if ((build)) || [[ ! -x "$BIN" ]] || { ((edge)) && [[ ! -x "$LOADGEN" ]]; }; then
  echo "building: cargo build --release -p tollgate -p tollgate-loadgen (fat LTO: a few minutes)"
  (cd "$REPO" && cargo build --release -p tollgate -p tollgate-loadgen)
fi

# 3. the benchmark (exec: Ctrl-C goes straight to it, and it stops everything it started)
if ((edge)); then
  exec python3 "$HERE/edge_bench.py" --repo "$REPO" --tollgate "$BIN" --loadgen "$LOADGEN" "$@"
fi
exec python3 "$HERE/proxy_bench.py" --repo "$REPO" --tollgate "$BIN" "$@"
