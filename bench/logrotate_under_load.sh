#!/usr/bin/env bash
# Log rotation under load: wrk drives the demo (Tollgate in front of its two
# built-in app servers) while the access log is rotated 10 times, as logrotate
# does: `mv access.log access.log.N`, then SIGUSR1 (or, every other time, a
# SIGHUP reload). The run passes when wrk saw 0 socket errors and 0 non-2xx
# responses, every rotated file and the new one got lines (no line went to a
# moved file after its rotation finished), and the lines of all the files add up
# to the requests wrk counted (plus at most the ones in flight when it stopped).
#
#   bash bench/logrotate_under_load.sh            (about 25 s)
#   bash bench/logrotate_under_load.sh --no-build
#
# Ports: picked free on 127.0.0.1 at start. Everything started here is stopped by
# its PID at the end.
set -euo pipefail
ROTATIONS=10
CONNECTIONS=50
# shellcheck source=bench/under_load.sh
source "$(dirname "${BASH_SOURCE[0]}")/under_load.sh"

read -r PROXY S1 S2 ADMIN < <(free_ports 4)

cat > "$work/tollgate.toml" <<EOF
[global]
workers = 2
pidfile = "tollgate.pid"
access_log = "access.log"

[admin]
bind = "127.0.0.1:$ADMIN"
socket = "$work/tollgate.sock"

[[frontend]]
name = "web"
bind = ["127.0.0.1:$PROXY"]
default_backend = "nodes"

[[backend]]
name = "nodes"
  [[backend.server]]
  name = "s1"
  addr = "127.0.0.1:$S1"
  [[backend.server]]
  name = "s2"
  addr = "127.0.0.1:$S2"
EOF

"$BIN" demo -c "$work/tollgate.toml" --s1-port "$S1" --s2-port "$S2" >"$work/tollgate.log" 2>&1 &
pids+=($!)
wait_started "$PROXY"
PID=$(cat "$work/tollgate.pid")
# The lines so far (the start's checks) are not wrk's.
sleep 0.5
before=$(wc -l <"$work/access.log")

echo "wrk: $CONNECTIONS connections, 2 threads, 22 s, against http://127.0.0.1:$PROXY/ ($ROTATIONS rotations during the run)"
wrk -t2 -c"$CONNECTIONS" -d22s "http://127.0.0.1:$PROXY/" >"$work/wrk.txt" 2>&1 &
wrk_pid=$!
pids+=($wrk_pid)

sleep 1
for i in $(seq "$ROTATIONS"); do
  mv "$work/access.log" "$work/access.log.$i"
  if ((i % 2)); then kill -USR1 "$PID"; else kill -HUP "$PID"; fi
  sleep 2
done
wait "$wrk_pid" || true
sleep 1

cat "$work/wrk.txt"
wrk_report
lines=$(cat "$work"/access.log* | wc -l)
lines=$((lines - before))
empty=0
for f in "$work"/access.log "$work"/access.log.*; do [[ -s "$f" ]] || empty=$((empty + 1)); done
reopened=$(grep -c "access log reopened" "$work/tollgate.log" || true)
echo
echo "rotations: $ROTATIONS, reopenings logged: $reopened, files without a line: $empty"
echo "requests: $requests, access log lines: $lines, non-2xx: ${non2xx:-0}, socket errors: $errors"
if [[ "$reopened" == "$ROTATIONS" && "$empty" == 0 && -z "$non2xx" && "$errors" == 0 ]] &&
  ((lines >= requests && lines <= requests + CONNECTIONS)); then
  echo "PASS"
else
  echo "FAIL"
  tail -20 "$work/tollgate.log"
  exit 1
fi
