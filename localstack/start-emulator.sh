#!/usr/bin/env bash
# Start a local AWS emulator (moto server, pinned) for SQS FIFO + DynamoDB on loopback.
#
# This is moto server on LocalStack's default port, not LocalStack itself; the same tests can be
# pointed at LocalStack or real AWS through AWS_ENDPOINT_URL.
#
#   AGENTLANE_EMULATOR_DIR  venv, log and pid file (default ~/.cache/agentlane/aws-emulator);
#                           the venv is installed once and reused.
#   EMU_PORT                port on 127.0.0.1 (default 4566)
#   PIP_EXTRA_ARGS          extra pip flags for the first install (e.g. --no-cache-dir)
#
# Idempotent: when moto already answers on the port, it is reused and nothing is started.
# Then: export AWS_ENDPOINT_URL=http://127.0.0.1:$EMU_PORT   (stop with stop-emulator.sh)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EMU_DIR=${AGENTLANE_EMULATOR_DIR:-$HOME/.cache/agentlane/aws-emulator}
EMU_PORT=${EMU_PORT:-4566}
URL="http://127.0.0.1:$EMU_PORT"
PID_FILE="$EMU_DIR/emulator.pid"
LOG_FILE="$EMU_DIR/emulator.log"

is_moto() { curl -sf -m 2 -o /dev/null "$URL/moto-api/"; }

warm_up() {
  # The first call of each service imports its backend (about a second); pay it here.
  local svc target
  for svc in dynamodb:DynamoDB_20120810.ListTables sqs:AmazonSQS.ListQueues; do
    target=${svc#*:}
    curl -sf -m 30 -o /dev/null -X POST "$URL/" -H 'Content-Type: application/x-amz-json-1.0' \
      -H "X-Amz-Target: $target" \
      -H "Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/${svc%%:*}/aws4_request, SignedHeaders=host, Signature=x" \
      -d '{}'
  done
}

if is_moto; then
  warm_up
  echo "AWS emulator (moto server) already running on $URL; reusing it"
  exit 0
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$EMU_PORT") 2>/dev/null; then
  echo "port $EMU_PORT on 127.0.0.1 is taken by something that is not moto; set EMU_PORT" >&2
  exit 1
fi

mkdir -p "$EMU_DIR"
REQS="$HERE/aws-emulator-requirements.txt"
if [ ! -x "$EMU_DIR/venv/bin/moto_server" ] || ! cmp -s "$REQS" "$EMU_DIR/requirements.installed"; then
  echo "installing moto server into $EMU_DIR/venv (once)..."
  python3 -m venv "$EMU_DIR/venv"
  # shellcheck disable=SC2086
  "$EMU_DIR/venv/bin/pip" install --quiet --disable-pip-version-check ${PIP_EXTRA_ARGS:-} -r "$REQS"
  cp "$REQS" "$EMU_DIR/requirements.installed"
fi

# Detach from this shell's process group so the server outlives the caller.
# moto_serialized.py: moto server with DynamoDB requests one at a time (moto's transactions are
# not isolated; see the file). SQS keeps moto's own concurrency and its faults.
setsid "$EMU_DIR/venv/bin/python" "$HERE/moto_serialized.py" -H 127.0.0.1 -p "$EMU_PORT" \
  >"$LOG_FILE" 2>&1 < /dev/null &
echo $! >"$PID_FILE"
PID=$(cat "$PID_FILE")

for _ in $(seq 1 150); do
  is_moto && break
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "moto server exited during start-up; log follows:" >&2
    cat "$LOG_FILE" >&2
    rm -f "$PID_FILE"
    exit 1
  fi
  sleep 0.2
done
if ! is_moto; then
  echo "moto server did not answer on $URL within 30 s (log: $LOG_FILE)" >&2
  exit 1
fi
warm_up
echo "AWS emulator (moto server) ready on $URL (pid $PID)"
