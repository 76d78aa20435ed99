#!/usr/bin/env bash
# Instructions per request of one Tollgate build, counted by callgrind: exact and
# repeatable on a noisy machine, for comparing two builds of the request path.
#
#   bash bench/callgrind.sh [BINARY] [REQUESTS] [CONNECTIONS] [FILE]
#   defaults: target/dist/tollgate 20000 50 f811.bin (f8k.bin, f160k.bin also exist)
#
# Uses the origin and config that `bash bench/run.sh` set up in /var/tmp/tollgate-bench
# (run it once first), h2load (Debian nghttp2-client) as the client, valgrind.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../target/dist/tollgate}
N=${2:-20000}
C=${3:-50}
F=${4:-f811.bin}
W=/var/tmp/tollgate-bench
OUT=$(mktemp -d)
[ -f "$W/origin/nginx.conf" ] || { echo "run 'bash bench/run.sh --quick' once first (it sets up $W)" >&2; exit 1; }
for tool in valgrind h2load; do
  command -v $tool >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind nghttp2-client; break; }
done
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$OUT"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$1/$F" && return 0; sleep 0.1; done; echo "port $1 not ready" >&2; exit 1; }

taskset -c 1 nginx -p "$W/origin/" -c "$W/origin/nginx.conf" -e "$W/origin/error.log" &
pids+=($!)
wait_port 18001
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" -q "$BIN" run -c "$W/tollgate/tollgate.toml" >"$OUT/tollgate.log" 2>&1 &
TG=$!
pids+=($TG)
wait_port 18010
h2load --h1 -n 2000 -c "$C" "http://127.0.0.1:18010/$F" >/dev/null   # warm-up: pools filled
callgrind_control -z "$TG" >/dev/null 2>&1
h2load --h1 -n "$N" -c "$C" "http://127.0.0.1:18010/$F" | grep -E "^requests:|^status codes:"
callgrind_control -d "$TG" >/dev/null 2>&1
dump=$(ls "$OUT"/cg.*.1)
python3 "$HERE/callgrind_top.py" "$dump" "$N" 25
