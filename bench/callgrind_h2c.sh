#!/usr/bin/env bash
# Instructions per request through an HTTP/2 (h2c) server, counted by callgrind,
# as bench/callgrind.sh counts them through an HTTP/1.1 one: the path of gRPC
# and other HTTP/2 backends (upstream/h2.rs).
#
#   bash bench/callgrind_h2c.sh [BINARY] [h1|h2] [REQUESTS] [CONNECTIONS] [FILE]
#   defaults: target/dist/tollgate h1 20000 50 f811.bin
#   h1: HTTP/1.1 clients (h2load --h1); h2: HTTP/2 clients (h2c, prior knowledge).
#
# Uses the files and origin config that `bash bench/run.sh` set up in
# /var/tmp/tollgate-bench (run it once first): the same nginx, listening h2c.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../target/dist/tollgate}
MODE=${2:-h1}
N=${3:-20000}
C=${4:-50}
F=${5:-f811.bin}
W=/var/tmp/tollgate-bench
OUT=$(mktemp -d)
[ -f "$W/origin/nginx.conf" ] || { echo "run 'bash bench/run.sh --quick' once first (it sets up $W)" >&2; exit 1; }
for tool in valgrind h2load; do
  command -v $tool >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind nghttp2-client; break; }
done
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$OUT"; }
trap cleanup EXIT
# The origin's config, on ports of its own, its server speaking h2c.
sed -e 's/^user .*;//' -e "s#^pid .*#pid $OUT/nginx.pid;#" \
    -e 's/listen 127.0.0.1:18001 backlog=4096;/listen 127.0.0.1:18031 http2 backlog=4096;/' \
    -e 's/listen 127.0.0.1:18002;/listen 127.0.0.1:18032;/' "$W/origin/nginx.conf" >"$OUT/nginx.conf"
cat >"$OUT/tollgate.toml" <<TOML
[global]
workers = 1
access_log = "off"

[defaults]
timeout = { connect = "5s", client = "50s", server = "50s", server_keep_alive = "60s" }
forward_for = false

[[frontend]]
name = "h1"
bind = ["127.0.0.1:18033"]
default_backend = "origin"

[[frontend]]
name = "h2c"
bind = [{ addr = "127.0.0.1:18034", h2c = true }]
default_backend = "origin"

[[backend]]
name = "origin"
  [[backend.server]]
  name = "nginx"
  addr = "127.0.0.1:18031"
  proto = "h2c"
TOML
wait_port() { for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$1/$F" && return 0; sleep 0.1; done; echo "port $1 not ready" >&2; exit 1; }
taskset -c 1 nginx -p "$OUT/" -c "$OUT/nginx.conf" -e "$OUT/error.log" &
pids+=($!)
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" -q "$BIN" run -c "$OUT/tollgate.toml" >"$OUT/tollgate.log" 2>&1 &
TG=$!
pids+=($TG)
wait_port 18033
if [ "$MODE" = h1 ]; then url="http://127.0.0.1:18033/$F"; flags=(--h1); else url="http://127.0.0.1:18034/$F"; flags=(); fi
h2load "${flags[@]}" -n 2000 -c "$C" "$url" >/dev/null   # warm-up: the connection opened
callgrind_control -z "$TG" >/dev/null 2>&1
h2load "${flags[@]}" -n "$N" -c "$C" "$url" | grep -E "^requests:|^status codes:"
callgrind_control -d "$TG" >/dev/null 2>&1
dump=$(ls "$OUT"/cg.*.1)
python3 "$HERE/callgrind_top.py" "$dump" "$N" 25
