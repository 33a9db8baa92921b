#!/usr/bin/env bash
# Validates the deployment template and the LocalStack set-up, offline (PyPI only, on the first
# run, to fill a private venv with the tools pinned in infra/requirements.txt):
#   1. cfn-lint infra/template.yaml (the SAM template; informational findings count too)
#   2. the SAM transform, run offline, and cfn-lint of the CloudFormation it produces
#   3. structural facts a reviewer checks (FIFO + DLQ redrive, ReportBatchItemFailures,
#      MaximumConcurrency, least-privilege IAM without "*", secrets never in plain text, the
#      table exactly as shared/aws creates it, ...), plus a self-test that templates broken on
#      purpose are rejected
#   4. IAM proven from the code (infra/iam_inventory.py): the AWS operations each function's code
#      paths can call, derived from the sources and `cargo metadata`, against its role both ways
#      (a missing grant fails naming function, operation and source file; an unused grant fails),
#      plus a self-test that a removed grant and an extra grant are both rejected
#   5. localstack/init/ready.d/10-agentlane.sh, run twice against a private moto server
#      (localstack/start-emulator.sh on a free loopback port), creates what the template declares
# Prints `infra: N passed, N failed` and exits non-zero on any failure.
#
#   AGENTLANE_TOOLS_VENV         the tools venv (default ~/.cache/agentlane/infra-venv)
#   AGENTLANE_INFRA_EMULATOR_DIR the private emulator's venv/log/pid (default
#                                ~/.cache/agentlane/infra-emulator)
#   INFRA_SKIP_EMULATOR=1        skip check 4 (reported as skipped)
#   PIP_EXTRA_ARGS               extra pip flags for installs (e.g. --no-cache-dir)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VENV=${AGENTLANE_TOOLS_VENV:-$HOME/.cache/agentlane/infra-venv}
REQS="$HERE/requirements.txt"
TEMPLATE="$HERE/template.yaml"
HOOK="$ROOT/localstack/init/ready.d/10-agentlane.sh"

# The translator only needs a region name; nothing here calls AWS.
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true

WORK=$(mktemp -d)
EMU_STARTED=""
cleanup() {
  if [ -n "$EMU_STARTED" ]; then
    AGENTLANE_EMULATOR_DIR="$EMU_STARTED" bash "$ROOT/localstack/stop-emulator.sh" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- tools ------------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/cfn-lint" ] || ! cmp -s "$REQS" "$VENV/requirements.installed"; then
  echo "installing pinned cfn-lint, aws-sam-translator and awscli into $VENV (once)..."
  python3 -m venv "$VENV" || { echo "infra: cannot create a venv at $VENV" >&2; exit 1; }
  # shellcheck disable=SC2086
  if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check ${PIP_EXTRA_ARGS:-} -r "$REQS"; then
    echo "infra: pip install -r $REQS failed" >&2
    exit 1
  fi
  cp "$REQS" "$VENV/requirements.installed"
fi
PY="$VENV/bin/python"
LINT=("$VENV/bin/cfn-lint" --include-checks I --non-zero-exit-code informational --)

# --- checks -----------------------------------------------------------------------------------
passed=0 failed=0 skipped=0
run() { # run NAME COMMAND...: one check in this shell, its output indented
  local name=$1 rc
  shift
  "$@" >"$WORK/check.log" 2>&1
  rc=$?
  sed 's/^/    /' "$WORK/check.log"
  if [ "$rc" -eq 0 ]; then
    echo "PASS $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name (exit $rc)"
    failed=$((failed + 1))
  fi
}

lint_sam() { "${LINT[@]}" "$TEMPLATE"; }

translate_and_lint() {
  "$PY" "$HERE/checks.py" translate "$TEMPLATE" "$WORK/translated.json" &&
    "${LINT[@]}" "$WORK/translated.json"
}

structure() {
  [ -f "$WORK/translated.json" ] || { echo "no translated template (check 2 failed)"; return 1; }
  local rc=0
  "$PY" "$HERE/checks.py" structure "$TEMPLATE" "$WORK/translated.json" || rc=1
  mkdir -p "$WORK/selftest"
  "$PY" "$HERE/checks.py" selftest "$TEMPLATE" "$WORK/selftest" || rc=1
  return $rc
}

iam_from_code() {
  local rc=0
  "$PY" "$HERE/iam_inventory.py" check "$TEMPLATE" || rc=1
  mkdir -p "$WORK/iam-selftest"
  "$PY" "$HERE/iam_inventory.py" selftest "$TEMPLATE" "$WORK/iam-selftest" || rc=1
  return $rc
}

init_hook_on_emulator() {
  local emu_dir=${AGENTLANE_INFRA_EMULATOR_DIR:-$HOME/.cache/agentlane/infra-emulator} port url
  mkdir -p "$emu_dir"
  # One validation at a time per emulator dir (it holds one pid file).
  exec 9>"$emu_dir/validate.lock"
  flock 9
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  url="http://127.0.0.1:$port"
  AGENTLANE_EMULATOR_DIR="$emu_dir" EMU_PORT="$port" bash "$ROOT/localstack/start-emulator.sh" || return 1
  EMU_STARTED=$emu_dir
  # A fresh private server: the hook's default names (= setup-aws's) are free to use. Twice,
  # because the hook must be idempotent.
  for round in 1 2; do
    echo "hook run $round:"
    env -u AGENTLANE_TABLE -u AGENTLANE_QUEUE_NAME -u AGENTLANE_DLQ_NAME \
      -u AGENTLANE_MAX_RECEIVE_COUNT -u AGENTLANE_VISIBILITY_TIMEOUT \
      PATH="$VENV/bin:$PATH" AWS_ENDPOINT_URL="$url" bash "$HOOK" || return 1
  done
  "$PY" "$HERE/checks.py" emulator "$TEMPLATE" "$url" agentlane agentlane-turns.fifo agentlane-turns-dlq.fifo
}

run "cfn-lint infra/template.yaml (SAM)" lint_sam
run "SAM transform offline + cfn-lint of the CloudFormation output" translate_and_lint
run "structural facts (+ self-test on broken templates)" structure
run "IAM proven from the code: each function's role grants exactly what its code calls (+ self-test)" \
  iam_from_code
if [ "${INFRA_SKIP_EMULATOR:-}" = 1 ]; then
  echo "SKIP LocalStack init hook on a private moto server (INFRA_SKIP_EMULATOR=1)"
  skipped=$((skipped + 1))
else
  run "LocalStack init hook on a private moto server creates the template's table and queues" \
    init_hook_on_emulator
fi

summary="infra: $passed passed, $failed failed"
[ "$skipped" -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ "$failed" -eq 0 ]
