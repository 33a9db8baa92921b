#!/usr/bin/env bash
# Stop the AWS emulator started by start-emulator.sh (only the process named in its pid file).
set -euo pipefail
EMU_DIR=${AGENTLANE_EMULATOR_DIR:-$HOME/.cache/agentlane/aws-emulator}
PID_FILE="$EMU_DIR/emulator.pid"
if [ ! -f "$PID_FILE" ]; then
  echo "no pid file at $PID_FILE; nothing to stop"
  exit 0
fi
PID=$(cat "$PID_FILE")
if kill -0 "$PID" 2>/dev/null; then
  kill "$PID"
  for _ in $(seq 1 50); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$PID" 2>/dev/null; then
    kill -9 "$PID"
  fi
  echo "stopped AWS emulator (pid $PID)"
else
  echo "AWS emulator (pid $PID) was not running"
fi
rm -f "$PID_FILE"
