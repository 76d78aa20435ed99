#!/usr/bin/env bash
# Instructions per request of one Tollgate build, counted by callgrind: exact and
# repeatable on a noisy machine, for comparing two builds of the request path.
#
#   bash bench/callgrind.sh [BINARY] [REQUESTS] [CONNECTIONS] [FILE]
#   defaults: target/dist/tollgate 20000 50 f811.bin (f8k.bin, f160k.bin also exist)
#   CONFIG=path PORT=port: another Tollgate config (e.g. bench/ratelimit_bench.py's
#   /var/tmp/tollgate-ratelimit-bench/tollgate-rl/tollgate.toml on 18013)
#
# Uses the origin and config that `bash bench/run.sh` set up in /var/tmp/tollgate-bench
# (run it once first), h2load (Debian nghttp2-client) as the client, valgrind.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../target/dist/tollgate}
N=${2:-20000}
C=${3:-50}
F=${4:-f811.bin}
# shellcheck source=bench/callgrind_lib.sh
source "$HERE/callgrind_lib.sh"

taskset -c 1 nginx -p "$W/origin/" -c "$W/origin/nginx.conf" -e "$W/origin/error.log" &
pids+=($!)
wait_port 18001
PORT=${PORT:-18010}
measure "${CONFIG:-$W/tollgate/tollgate.toml}" "$PORT" "http://127.0.0.1:$PORT/$F" --h1
