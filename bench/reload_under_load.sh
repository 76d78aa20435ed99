#!/usr/bin/env bash
# Reloads under load: wrk drives the demo (Tollgate in front of its two built-in
# app servers) over keep-alive connections while the config is reloaded 20 times,
# alternating between two files that differ in weights, a rule and an added
# frontend. Reloads go through all three triggers in turn: `tollgate reload -c`
# (SIGHUP via the pidfile), a plain SIGHUP, and POST /api/reload on the admin
# listener. The run passes when wrk saw 0 socket errors and 0 non-2xx responses
# and all 20 reloads were applied.
#
#   bash bench/reload_under_load.sh            (about 30 s)
#   bash bench/reload_under_load.sh --no-build
#
# Ports: picked free on 127.0.0.1 at start. Everything started here is stopped by
# its PID at the end.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
RELOADS=20
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

read -r PROXY S1 S2 ADMIN EXTRA < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)

write_config() { # $1 = variant (a|b)
  local w1=1 w2=1 extra=""
  if [[ $1 == b ]]; then
    w1=2
    extra=$(printf '[[frontend]]\nname = "extra"\nbind = ["127.0.0.1:%s"]\ndefault_backend = "nodes"\n' "$EXTRA")
  fi
  cat > "$work/tollgate.toml.new" <<EOF
[global]
workers = 1
pidfile = "tollgate.pid"

[admin]
bind = "127.0.0.1:$ADMIN"

[[frontend]]
name = "web"
bind = ["127.0.0.1:$PROXY"]
default_backend = "nodes"
  [[frontend.rule]]
  when = { path_prefix = "/variant-$1/" }
  set_response_headers = { "X-Variant" = "$1" }

$extra

[[backend]]
name = "nodes"
balance = "roundrobin"
check = { type = "http", method = "HEAD", path = "/", interval = "1s", fall = 3, rise = 2 }
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:$S1"
  weight = $w1
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:$S2"
  weight = $w2
EOF
  mv "$work/tollgate.toml.new" "$work/tollgate.toml"
}

write_config a
"$BIN" demo -c "$work/tollgate.toml" --s1-port "$S1" --s2-port "$S2" >"$work/tollgate.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PROXY/" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PROXY/" >/dev/null || { echo "tollgate did not start"; cat "$work/tollgate.log"; exit 1; }
PID=$(cat "$work/tollgate.pid")

echo "wrk: 50 connections, 2 threads, 25 s, against http://127.0.0.1:$PROXY/ ($RELOADS reloads during the run)"
wrk -t2 -c50 -d25s --latency "http://127.0.0.1:$PROXY/" >"$work/wrk.txt" 2>&1 &
wrk_pid=$!
pids+=($wrk_pid)

sleep 2
for i in $(seq "$RELOADS"); do
  if ((i % 2)); then write_config b; else write_config a; fi
  case $((i % 3)) in
    0) "$BIN" reload -c "$work/tollgate.toml" >/dev/null ;;
    1) kill -HUP "$PID" ;;
    2) curl -sf -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$ADMIN/api/reload" >/dev/null ;;
  esac
  sleep 1
done
wait "$wrk_pid" || true

cat "$work/wrk.txt"
reloads=$(curl -sf "http://127.0.0.1:$ADMIN/api/info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["reloads"])')
refused=$(grep -c "reload refused" "$work/tollgate.log" || true)
non2xx=$(awk '/Non-2xx or 3xx responses/ {print $NF}' "$work/wrk.txt")
errors=$(awk '/Socket errors/ {gsub(",", ""); s = $4 + $6 + $8 + $10} END {print s + 0}' "$work/wrk.txt")
requests=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
echo
echo "reloads applied: $reloads of $RELOADS (refused: $refused)"
echo "requests: $requests, non-2xx: ${non2xx:-0}, socket errors: $errors"
if [[ "$reloads" == "$RELOADS" && -z "$non2xx" && "$errors" == 0 ]]; then
  echo "PASS"
else
  echo "FAIL"
  tail -20 "$work/tollgate.log"
  exit 1
fi
