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

RELOADS=20
# shellcheck source=bench/under_load.sh
source "$(dirname "${BASH_SOURCE[0]}")/under_load.sh"

read -r PROXY S1 S2 ADMIN EXTRA < <(free_ports 5)

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
wait_started "$PROXY"
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
wrk_report
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
