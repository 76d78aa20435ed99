# What bench/callgrind.sh and bench/callgrind_h2c.sh share; sourced by them
# after they set BIN, N, C and F. Sets W (the bench setup) and OUT (a scratch
# directory removed at exit, with every process started here), installs
# valgrind and h2load when missing, and gives:
#   wait_port PORT                      until http://127.0.0.1:PORT/$F answers
#   measure CONFIG PORT URL [FLAGS...]  Tollgate under callgrind with CONFIG,
#       once PORT answers: 2,000 requests of warm-up, then N on C connections
#       to URL (h2load FLAGS), counted; prints the instructions per request
#       and the 25 costliest functions.
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

measure() {
  local config=$1 port=$2 url=$3
  shift 3
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" -q "$BIN" run -c "$config" >"$OUT/tollgate.log" 2>&1 &
  local tg=$!
  pids+=($tg)
  wait_port "$port"
  h2load "$@" -n 2000 -c "$C" "$url" >/dev/null   # warm-up: pools filled, connections open
  callgrind_control -z "$tg" >/dev/null 2>&1
  h2load "$@" -n "$N" -c "$C" "$url" | grep -E "^requests:|^status codes:"
  callgrind_control -d "$tg" >/dev/null 2>&1
  python3 "$(dirname "${BASH_SOURCE[0]}")/callgrind_top.py" "$(ls "$OUT"/cg.*.1)" "$N" "${TOP:-25}"
}
