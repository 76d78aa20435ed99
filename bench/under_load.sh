# What the *_under_load.sh scripts share; sourced by them, after `set -euo pipefail`:
# wrk (installed when missing), the dist build (unless --no-build), a work
# directory and the PIDs to stop at exit, and free ports.
HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
REPO=$(dirname "$HERE")
build=1
[[ "${1:-}" == "--no-build" ]] && build=0

command -v wrk >/dev/null || {
  SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
  "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk
}
if ((build)) || [[ ! -x "$REPO/target/dist/tollgate" ]]; then
  (cd "$REPO" && cargo build --profile dist -q -p tollgate)
fi
BIN="$REPO/target/dist/tollgate"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# free_ports N: N ports free on 127.0.0.1 now, on one line.
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
PY
}

# wait_started PORT: waits (10 s at most) until Tollgate answers on PORT, else
# prints its log ($work/tollgate.log) and exits 1.
wait_started() {
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$1/" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "tollgate did not start"
  cat "$work/tollgate.log"
  exit 1
}

# wrk_report: the figures of $work/wrk.txt, as variables: requests, non2xx
# (empty when none), errors (socket errors of all kinds).
wrk_report() {
  non2xx=$(awk '/Non-2xx or 3xx responses/ {print $NF}' "$work/wrk.txt")
  errors=$(awk '/Socket errors/ {gsub(",", ""); s = $4 + $6 + $8 + $10} END {print s + 0}' "$work/wrk.txt")
  requests=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
}
