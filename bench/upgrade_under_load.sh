#!/usr/bin/env bash
# Hot binary upgrades under load: wrk drives Tollgate (in front of the demo's two
# app servers, run by a separate `tollgate demo`) over keep-alive connections while
# the binary is upgraded 10 times, alternating `tollgate upgrade -c` and a plain
# SIGUSR2, and one WebSocket (bench/ws_echo.py) echoes a message every 100 ms
# through all of them. The run passes when wrk saw 0 socket errors and 0 non-2xx
# responses, the pidfile named 10 new processes in turn, and the WebSocket never
# missed an echo.
#
#   bash bench/upgrade_under_load.sh            (about 35 s)
#   bash bench/upgrade_under_load.sh --no-build
#
# Ports: picked free on 127.0.0.1 at start. Everything started here is stopped by
# its PID at the end (the processes the upgrades started are found in the pidfile
# as each takes over).
set -euo pipefail

UPGRADES=10
# shellcheck source=bench/under_load.sh
source "$(dirname "${BASH_SOURCE[0]}")/under_load.sh"
# The binary upgraded: a copy, so that a build never replaces it mid-run.
cp "$BIN" "$work/tollgate"
BIN="$work/tollgate"

read -r PROXY S1 S2 DEMO DEMO_ADMIN WS < <(free_ports 6)

cat > "$work/tollgate.toml" <<EOF
[global]
workers = 2
pidfile = "tollgate.pid"
# The WebSocket stays with the process it was opened on until it closes.
grace_period = "120s"

[[frontend]]
name = "web"
bind = ["127.0.0.1:$PROXY"]
default_backend = "nodes"
  [[frontend.rule]]
  when = { path_prefix = "/ws" }
  backend = "ws"

[[backend]]
name = "nodes"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:$S1"
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:$S2"

[[backend]]
name = "ws"
  [[backend.server]]
  name = "echo"
  addr = "127.0.0.1:$WS"
EOF

# The app servers: a demo of their own (its proxy and admin on ports of their own).
"$BIN" demo --port "$DEMO" --admin-port "$DEMO_ADMIN" --s1-port "$S1" --s2-port "$S2" \
  --socket "$work/demo.sock" >"$work/demo.log" 2>&1 &
pids+=($!)
python3 "$HERE/ws_echo.py" server "$WS" &
pids+=($!)
"$BIN" run -c "$work/tollgate.toml" >"$work/tollgate.log" 2>&1 &
pids+=($!)
wait_started "$PROXY"
# The echo server and the app servers listen before any client starts.
for port in "$WS" "$S1" "$S2"; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
done
first=$(cat "$work/tollgate.pid")

echo "wrk: 50 connections, 2 threads, 28 s, against http://127.0.0.1:$PROXY/ ($UPGRADES upgrades during the run)"
wrk -t2 -c50 -d28s --latency "http://127.0.0.1:$PROXY/" >"$work/wrk.txt" 2>&1 &
wrk_pid=$!
pids+=($wrk_pid)
python3 "$HERE/ws_echo.py" client "127.0.0.1:$PROXY" 30 >"$work/ws.txt" 2>&1 &
ws_pid=$!
pids+=($ws_pid)

sleep 2
seen=("$first")
for i in $(seq "$UPGRADES"); do
  before=$(cat "$work/tollgate.pid")
  if ((i % 2)); then
    "$BIN" upgrade -c "$work/tollgate.toml" >/dev/null
  else
    kill -USR2 "$before"
  fi
  for _ in $(seq 200); do
    now=$(cat "$work/tollgate.pid" 2>/dev/null || true)
    [[ -n "$now" && "$now" != "$before" ]] && break
    sleep 0.05
  done
  now=$(cat "$work/tollgate.pid")
  [[ "$now" != "$before" ]] && { seen+=("$now"); pids+=("$now"); }
  sleep 2
done
wait "$wrk_pid" || true
ws_ok=0
wait "$ws_pid" && ws_ok=1

cat "$work/wrk.txt"
cat "$work/ws.txt"
upgrades=$((${#seen[@]} - 1))
failed=$(grep -c "upgrade failed" "$work/tollgate.log" || true)
wrk_report
# The processes upgraded away from: each exits once its connections are done
# (the first one holds the WebSocket until the client closed it).
sleep 2
left=0
for p in "${seen[@]:0:${#seen[@]}-1}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
echo
echo "upgrades: $upgrades of $UPGRADES (failed: $failed); processes: ${seen[*]}"
echo "requests: $requests, non-2xx: ${non2xx:-0}, socket errors: $errors; old processes still running: $left"
if [[ "$upgrades" == "$UPGRADES" && -z "$non2xx" && "$errors" == 0 && "$ws_ok" == 1 && "$left" == 0 ]]; then
  echo "PASS"
else
  echo "FAIL"
  tail -30 "$work/tollgate.log"
  exit 1
fi
