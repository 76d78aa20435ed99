#!/usr/bin/env bash
# Tollgate HTTP/1.1 proxy benchmark: Tollgate vs HAProxy vs nginx, each proxying to
# an nginx origin over keep-alive. Method: /work/shared/BENCHMARKING.md; details in
# bench/proxy_bench.py.
#
#   bash bench/run.sh                 full run (12 workloads x 3 rounds x 8 s, ~17 min)
#   bash bench/run.sh --quick         smoke test (811 B / 50 conns / keep-alive, 1 x 2 s)
#   bash bench/run.sh --no-build      skip `cargo build` if target/dist/tollgate exists
#   bash bench/run.sh --tollgate PATH measure the tollgate binary PATH (no build of it)
#   bash bench/run.sh --write-docs    also write the table to docs/benchmarks.md
#   bash bench/run.sh --tcp           the same, the three proxies relaying TCP (Tollgate
#                                     `mode = "tcp"`, HAProxy `mode tcp`, nginx stream);
#                                     table in bench/results/tcp-latest.md
#   bash bench/run.sh --edge          TLS handshakes, HTTP/2 and WebSockets instead
#                                     (bench/edge_bench.py; ~15 min; also --quick, --write-docs)
#   bash bench/run.sh --cache [...]   the cache benchmark instead: Tollgate's cache vs Varnish, nginx
#                                     proxy_cache and Traffic Server, 100% hits (bench/cache_bench.py;
#                                     same options)
#   (other options: bash bench/run.sh [--edge|--cache] --help)
#
# Results: bench/results/latest.md (table), bench/results/raw-*.json (every run);
# the cache benchmark: bench/results/cache-latest.md and .json; the edge one: edge-latest.md.
# Exit status: 0 ok, 2 some run had errors (flagged in the table), 1 setup failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
export PATH="$PATH:/usr/sbin:/sbin"

build=1
bench=proxy_bench.py
tcp=0
given_bin=""
prev=""
args=()
for arg in "$@"; do
  case "$arg" in
    --cache) bench=cache_bench.py; continue ;;
    --edge) bench=edge_bench.py; continue ;;
    --no-build) build=0 ;;
    --tcp) tcp=1 ;;
    --tollgate=*) given_bin=${arg#--tollgate=} ;;
  esac
  [[ $prev == --tollgate ]] && given_bin=$arg
  prev=$arg
  args+=("$arg")
done
for arg in "${args[@]}"; do
  [[ $arg == -h || $arg == --help ]] && exec python3 "$HERE/$bench" --help
done

# 1. tools, from Debian (the packages start system services on the default ports,
#    trafficserver's on 8080: leave them alone; the benchmarks run their own
#    instances on ports 18001-18039 and, the cache one, 18101-18114)
missing=()
if [[ $bench == cache_bench.py ]]; then
  command -v varnishd >/dev/null || missing+=(varnish)
  command -v traffic_server >/dev/null || missing+=(trafficserver)
else
  command -v haproxy >/dev/null || missing+=(haproxy)
fi
command -v nginx >/dev/null || missing+=(nginx-light)
((tcp)) && [[ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]] && missing+=(libnginx-mod-stream)
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

# 2. Tollgate, dist build (fat LTO) (unless --tollgate PATH names the binary to measure)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
BIN=${given_bin:-$TARGET_DIR/dist/tollgate}
LOADGEN="$TARGET_DIR/dist/loadgen"
if { [[ -z $given_bin ]] && { ((build)) || [[ ! -x "$BIN" ]]; }; } ||
   { [[ $bench == edge_bench.py ]] && [[ ! -x "$LOADGEN" ]]; }; then
  echo "building: cargo build --profile dist -p tollgate -p tollgate-loadgen (the dist profile, fat LTO: a few minutes)"
  (cd "$REPO" && cargo build --profile dist -p tollgate -p tollgate-loadgen)
fi

# 3. the benchmark (exec: Ctrl-C goes straight to it, and it stops everything it started)
extra=()
[[ $bench == edge_bench.py ]] && extra=(--loadgen "$LOADGEN")
exec python3 "$HERE/$bench" --repo "$REPO" --tollgate "$BIN" "${extra[@]}" "${args[@]}"
