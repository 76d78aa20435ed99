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
# shellcheck source=bench/callgrind_lib.sh
source "$HERE/callgrind_lib.sh"
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
taskset -c 1 nginx -p "$OUT/" -c "$OUT/nginx.conf" -e "$OUT/error.log" &
pids+=($!)
if [ "$MODE" = h1 ]; then
  measure "$OUT/tollgate.toml" 18033 "http://127.0.0.1:18033/$F" --h1
else
  measure "$OUT/tollgate.toml" 18033 "http://127.0.0.1:18034/$F"
fi
