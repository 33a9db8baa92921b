#!/usr/bin/env python3
"""Measure the local init time of agentlane's Lambda bootstraps, and invoke each one.

A minimal fake Lambda Runtime API runs on 127.0.0.1 (a free port). For each function the
script spawns the release bootstrap (`target/lambda/<function>/bootstrap`, as built by
`cargo lambda build --release`) with `AWS_LAMBDA_RUNTIME_API` pointing at it, and measures

  init = time from spawn to the bootstrap's first `GET /2018-06-01/runtime/invocation/next`

over --runs runs (the process is killed as soon as it asks for work), and the CPU time the
process (all its threads) spent up to that point, from /proc/<pid>/task/*/schedstat: on a loaded
machine the wall time mostly measures the wait for a core, the CPU time far less. This is the local
counterpart of Lambda's "Init Duration": process start, settings, SDK configuration and client
construction, up to the point where the runtime loop is ready. It includes no code download and
no Firecracker start.

Then (unless --no-invoke) each function gets one fresh process and two canned events, the
first invocation and a warm one, and the script reports the response (or error) and the time
from handing the event over to receiving the answer:

  agentlane-ingress  an API Gateway HTTP API (payload v2.0) event for `GET /healthz`
  agentlane-runner   an SQS batch with one record: a lane message for a run that does not exist
                     (expected answer: `{"batchItemFailures": []}`, after one DynamoDB read)
  agentlane-cron     an EventBridge "Scheduled Event"

The AWS backend is an emulator (moto server, `localstack/start-emulator.sh`) at --endpoint; the
table and queue must exist (`agentlane setup-aws`, or pass --setup-cli to run it from here).

Python 3 standard library only. Loopback only. Exit code 0 when every run and invocation
succeeded, 1 otherwise.

Example (from the repository root, after the release build):

  python3 scripts/lambda-init-time.py --runs 10 \\
      --setup-cli target/release/agentlane --json /tmp/lambda-init.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.request import urlopen

API_PREFIX = "/2018-06-01/runtime"
ACCOUNT = "123456789012"
REGION = "us-east-1"
FUNCTIONS = ("agentlane-ingress", "agentlane-runner", "agentlane-cron")
REPO = Path(__file__).resolve().parent.parent
# Where distributions keep the system CA bundle (the template names Amazon Linux 2023's).
CA_BUNDLES = (
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/cert.pem",
)


# --------------------------------------------------------------------------------------------
# The fake Runtime API
# --------------------------------------------------------------------------------------------


@dataclass
class Invocation:
    """One canned event handed to the bootstrap, and what came back."""

    label: str
    payload: dict[str, Any]
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    sent_at: float | None = None
    answered_at: float | None = None
    kind: str | None = None  # "response" | "error"
    body: bytes = b""

    @property
    def duration_ms(self) -> float | None:
        if self.sent_at is None or self.answered_at is None:
            return None
        return (self.answered_at - self.sent_at) * 1000.0


class Session:
    """The Runtime API's view of one bootstrap process."""

    def __init__(self, function: str, events: list[Invocation], deadline_s: float) -> None:
        self.function = function
        self.pending = list(events)
        self.by_id = {e.request_id: e for e in events}
        self.deadline_s = deadline_s
        self.first_next_at: float | None = None
        self.next_calls = 0
        self.init_error: bytes | None = None
        self.unexpected: list[str] = []
        self.done = threading.Event()  # the process is being stopped: release held polls
        self.changed = threading.Condition()

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, predicate, timeout: float) -> bool:
        end = time.perf_counter() + timeout
        with self.changed:
            while not predicate():
                left = end - time.perf_counter()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.05))
        return True


class RuntimeApi(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.session: Session | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A killed bootstrap drops its connections; anything else is worth a traceback.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host}:{port}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RuntimeApi

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class name
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)
        self.wfile.flush()

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        now = time.perf_counter()
        session = self.server.session
        if session is None or self.path != f"{API_PREFIX}/invocation/next":
            if session is not None:
                session.unexpected.append(f"GET {self.path}")
            self._reply(404, b'{"errorMessage":"not found"}')
            return
        with session.changed:
            session.next_calls += 1
            if session.first_next_at is None:
                session.first_next_at = now
            event = session.pending.pop(0) if session.pending else None
            session.changed.notify_all()
        if event is None:
            # Hold the long poll until the process is stopped (as Lambda does between events).
            session.done.wait()
            self.close_connection = True
            return
        body = json.dumps(event.payload).encode()
        deadline_ms = int((time.time() + session.deadline_s) * 1000)
        headers = {
            "Content-Type": "application/json",
            "Lambda-Runtime-Aws-Request-Id": event.request_id,
            "Lambda-Runtime-Deadline-Ms": str(deadline_ms),
            "Lambda-Runtime-Invoked-Function-Arn": (
                f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{session.function}"
            ),
            "Lambda-Runtime-Trace-Id": (
                f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0"
            ),
        }
        event.sent_at = time.perf_counter()
        self._reply(200, body, headers)

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        now = time.perf_counter()
        session = self.server.session
        body = self._body()
        if session is None:
            self._reply(404)
            return
        m = re.fullmatch(rf"{API_PREFIX}/invocation/([^/]+)/(response|error)", self.path)
        if m and m.group(1) in session.by_id:
            event = session.by_id[m.group(1)]
            with session.changed:
                event.answered_at, event.kind, event.body = now, m.group(2), body
                session.changed.notify_all()
            self._reply(202, b'{"status":"OK"}', {"Content-Type": "application/json"})
            return
        if self.path == f"{API_PREFIX}/init/error":
            with session.changed:
                session.init_error = body or b"(empty body)"
                session.changed.notify_all()
            self._reply(202, b'{"status":"OK"}', {"Content-Type": "application/json"})
            return
        session.unexpected.append(f"POST {self.path}")
        self._reply(404, b'{"errorMessage":"not found"}')


# --------------------------------------------------------------------------------------------
# Canned events
# --------------------------------------------------------------------------------------------


def iso_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def healthz_event() -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/healthz",
        "rawQueryString": "",
        "headers": {
            "accept": "*/*",
            "host": "abcdef1234.execute-api.us-east-1.amazonaws.com",
            "user-agent": "lambda-init-time",
            "x-forwarded-proto": "https",
        },
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abcdef1234",
            "domainName": "abcdef1234.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abcdef1234",
            "http": {
                "method": "GET",
                "path": "/healthz",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "lambda-init-time",
            },
            "requestId": uuid.uuid4().hex[:16],
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }


def sqs_event(queue_url: str) -> dict[str, Any]:
    """One record: a lane message (the SQS wire body) for a run that does not exist."""
    run_id = f"run_missing_{uuid.uuid4().hex[:12]}"
    lane = "local/agent:main:init-time"
    body = json.dumps(
        {"lane": lane, "dedupId": run_id, "body": {"tenant": "local", "runId": run_id}},
        separators=(",", ":"),
    )
    now_ms = str(int(time.time() * 1000))
    queue_name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": f"fake-receipt-{uuid.uuid4().hex}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now_ms,
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": now_ms,
                    "MessageGroupId": lane,
                    "MessageDeduplicationId": run_id,
                    "SequenceNumber": "18849496460467696128",
                },
                "messageAttributes": {},
                "md5OfBody": "0" * 32,
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name}",
                "awsRegion": REGION,
            }
        ]
    }


def scheduled_event() -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": iso_now(),
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/agentlane-cron"],
        "detail": {},
    }


def answer_problem(function: str, answer: Any) -> str | None:
    """Why an answer is not the expected one (None when it is)."""
    if not isinstance(answer, dict):
        return "the answer is not a JSON object"
    if function == "agentlane-ingress":
        if answer.get("statusCode") != 200 or answer.get("body") != '{"ok":true}':
            return "expected statusCode 200 and body {\"ok\":true}"
    elif function == "agentlane-runner":
        if answer.get("batchItemFailures") != []:
            return "expected no batchItemFailures (the run does not exist: the record is dropped)"
    elif function == "agentlane-cron":
        if answer.get("jobsFired") != 0 or "scheduledFor" not in answer:
            return "expected a tick report with jobsFired 0"
    return None


def events_for(function: str, queue_url: str) -> list[Invocation]:
    make = {
        "agentlane-ingress": healthz_event,
        "agentlane-runner": lambda: sqs_event(queue_url),
        "agentlane-cron": scheduled_event,
    }[function]
    return [Invocation("first", make()), Invocation("warm", make())]


# --------------------------------------------------------------------------------------------
# Running a bootstrap
# --------------------------------------------------------------------------------------------


def child_env(args: argparse.Namespace, function: str, runtime_api: str) -> dict[str, str]:
    """A clean environment close to Lambda's (nothing inherited from this shell)."""
    env = {
        "AWS_LAMBDA_RUNTIME_API": runtime_api,
        "AWS_LAMBDA_FUNCTION_NAME": function,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(args.memory),
        "AWS_LAMBDA_FUNCTION_VERSION": "1",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "local/init-time",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_ENDPOINT_URL": args.endpoint,
        "AGENTLANE_TABLE": args.table,
        "AGENTLANE_QUEUE_URL": args.queue_url,
        "AGENTLANE_LOG": args.log,
        "TZ": ":UTC",
    }
    if function == "agentlane-ingress":
        env["AGENTLANE_API_KEYS"] = args.api_keys
    if function == "agentlane-cron":
        # As infra/template.yaml deploys it: without AGENTLANE_DLQ_URL the cron function looks
        # the dead-letter queue up by name (a second SDK configuration and a GetQueueUrl call at
        # init), which no deployment does.
        env["AGENTLANE_DLQ_URL"] = dlq_url_for(args.queue_url)
    # As infra/template.yaml deploys them: one CA bundle named (this machine's, not Amazon
    # Linux's path), so the TLS clients do not scan the certificate directories at init.
    bundle = next((b for b in CA_BUNDLES if Path(b).is_file()), None)
    if bundle and not args.probe_ca:
        env["SSL_CERT_FILE"] = bundle
    for kv in args.env:
        key, _, value = kv.partition("=")
        env[key] = value
    return env


def dlq_url_for(queue_url: str) -> str:
    """The dead-letter queue `setup-aws` makes beside `queue_url`: `name.fifo` -> `name-dlq.fifo`."""
    base, _, name = queue_url.rstrip("/").rpartition("/")
    stem = name[: -len(".fifo")] if name.endswith(".fifo") else name
    return f"{base}/{stem}-dlq.fifo"


@dataclass
class Outcome:
    ok: bool
    init_ms: float | None
    error: str | None = None
    stderr_tail: str = ""
    cpu_ms: float | None = None


def cpu_ms(pid: int) -> float | None:
    """The time all threads of `pid` spent on a CPU so far (Linux schedstat), or None."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e6


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_once(
    api: RuntimeApi,
    args: argparse.Namespace,
    function: str,
    bootstrap: Path,
    events: list[Invocation],
    log_path: Path,
) -> Outcome:
    """Spawns the bootstrap once; serves `events`; returns the init time (and fills `events`)."""
    session = Session(function, events, args.deadline)
    api.session = session
    env = child_env(args, function, api.address)
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [str(bootstrap)],
            env=env,
            cwd=str(bootstrap.parent),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            ready = session.wait_for(
                lambda: session.first_next_at is not None
                or session.init_error is not None
                or proc.poll() is not None,
                args.init_timeout,
            )
            if session.init_error is not None:
                return Outcome(False, None, f"init/error: {session.init_error.decode(errors='replace')}")
            if session.first_next_at is None:
                why = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
                return Outcome(False, None, f"no GET invocation/next ({why})")
            init_ms = (session.first_next_at - t0) * 1000.0
            # The bootstrap now waits on its held poll: what it spent so far is its init.
            init_cpu_ms = cpu_ms(proc.pid)
            if not ready:
                return Outcome(False, init_ms, "timed out")
            if events:
                answered = session.wait_for(
                    lambda: all(e.kind is not None for e in events) or proc.poll() is not None,
                    args.invoke_timeout,
                )
                missing = [e.label for e in events if e.kind is None]
                if missing:
                    why = f"exited with {proc.returncode}" if proc.poll() is not None else (
                        "timed out" if not answered else "no answer")
                    return Outcome(False, init_ms, f"no answer to {', '.join(missing)} ({why})")
            return Outcome(True, init_ms, cpu_ms=init_cpu_ms)
        finally:
            session.done.set()
            stop(proc)
            api.session = None


def summarize(values: list[float]) -> dict[str, float]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def describe_answer(event: Invocation) -> Any:
    try:
        return json.loads(event.body)
    except ValueError:
        return event.body.decode(errors="replace")


# --------------------------------------------------------------------------------------------
# Setup and main
# --------------------------------------------------------------------------------------------


def check_endpoint(endpoint: str) -> None:
    try:
        with urlopen(f"{endpoint.rstrip('/')}/moto-api/", timeout=5):
            pass
    except OSError as e:
        sys.exit(
            f"the AWS emulator does not answer at {endpoint} ({e}); "
            "start it with `bash localstack/start-emulator.sh`"
        )


def setup_resources(args: argparse.Namespace) -> None:
    """Runs `agentlane setup-aws` for the table and queue; takes the queue URL it prints."""
    queue_name = args.queue_url.rstrip("/").rsplit("/", 1)[-1]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AGENTLANE_BACKEND": "aws",
        "AWS_ENDPOINT_URL": args.endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AGENTLANE_TABLE": args.table,
        "AGENTLANE_QUEUE_NAME": queue_name,
    }
    out = subprocess.run(
        [args.setup_cli, "setup-aws"], env=env, capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        sys.exit(f"setup-aws failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    m = re.search(r"^queue:\s+(\S+)", out.stdout, re.MULTILINE)
    if not m:
        sys.exit(f"setup-aws printed no queue URL:\n{out.stdout}")
    args.queue_url = m.group(1)
    print(f"setup-aws: table {args.table}, queue {args.queue_url}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--lambda-dir", type=Path, default=REPO / "target" / "lambda",
                   help="where cargo lambda put <function>/bootstrap (default: %(default)s)")
    p.add_argument("--functions", default=",".join(FUNCTIONS),
                   help="comma-separated function names (default: %(default)s)")
    p.add_argument("--runs", type=int, default=10, help="init runs per function (default: 10)")
    p.add_argument("--no-invoke", action="store_true", help="measure init only")
    p.add_argument("--endpoint", default="http://127.0.0.1:4566", help="AWS_ENDPOINT_URL")
    p.add_argument("--table", default="agentlane-init", help="AGENTLANE_TABLE")
    p.add_argument("--queue-url", default=f"http://127.0.0.1:4566/{ACCOUNT}/agentlane-init.fifo",
                   help="AGENTLANE_QUEUE_URL (its last segment names the queue for --setup-cli)")
    p.add_argument("--setup-cli", help="path of the `agentlane` CLI: run `setup-aws` first")
    p.add_argument("--api-keys", default="local:0123456789abcdef0123",
                   help="AGENTLANE_API_KEYS for the ingress")
    p.add_argument("--memory", type=int, default=512, help="AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    p.add_argument("--log", default="info", help="AGENTLANE_LOG")
    p.add_argument("--probe-ca", action="store_true",
                   help="leave SSL_CERT_FILE unset: the TLS clients probe the system's CA files "
                        "and directories (as before the template named the bundle)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for the bootstraps (repeatable)")
    p.add_argument("--deadline", type=float, default=120.0,
                   help="seconds until each invocation's deadline (default: 120)")
    p.add_argument("--init-timeout", type=float, default=30.0)
    p.add_argument("--invoke-timeout", type=float, default=60.0)
    p.add_argument("--logs-dir", type=Path, help="keep each process's output here")
    p.add_argument("--json", type=Path, help="write the full results here")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    functions = [f.strip() for f in args.functions.split(",") if f.strip()]
    unknown = [f for f in functions if f not in FUNCTIONS]
    if unknown:
        sys.exit(f"unknown function(s): {', '.join(unknown)}; known: {', '.join(FUNCTIONS)}")
    bootstraps = {f: (args.lambda_dir / f / "bootstrap").resolve() for f in functions}
    missing = [str(b) for b in bootstraps.values() if not b.is_file()]
    if missing:
        sys.exit("missing bootstrap(s): " + ", ".join(missing)
                 + "\nbuild them with: cargo lambda build --release --compiler cargo "
                 + " ".join(f"-p {f}" for f in functions))
    check_endpoint(args.endpoint)
    if args.setup_cli:
        setup_resources(args)

    logs_dir = args.logs_dir or Path(tempfile.mkdtemp(prefix="lambda-init-time-"))
    logs_dir.mkdir(parents=True, exist_ok=True)
    api = RuntimeApi()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"fake Runtime API on {api.address}; process logs in {logs_dir}")

    results: dict[str, Any] = {
        "runtime_api": api.address,
        "endpoint": args.endpoint,
        "table": args.table,
        "queue_url": args.queue_url,
        "runs": args.runs,
        "functions": {},
    }
    failed = False
    for function in functions:
        bootstrap = bootstraps[function]
        entry: dict[str, Any] = {"bootstrap": str(bootstrap), "bytes": bootstrap.stat().st_size}
        samples, cpu_samples, errors = [], [], []
        for i in range(args.runs):
            log_path = logs_dir / f"{function}-init-{i + 1}.log"
            outcome = run_once(api, args, function, bootstrap, [], log_path)
            if outcome.ok and outcome.init_ms is not None:
                samples.append(outcome.init_ms)
                if outcome.cpu_ms is not None:
                    cpu_samples.append(outcome.cpu_ms)
            else:
                errors.append({"run": i + 1, "error": outcome.error, "log": tail(log_path)})
        entry["init_ms"] = [round(s, 2) for s in samples]
        if samples:
            entry["init_summary_ms"] = {k: round(v, 2) for k, v in summarize(samples).items()}
        entry["init_cpu_ms"] = [round(s, 2) for s in cpu_samples]
        if cpu_samples:
            entry["init_cpu_summary_ms"] = {
                k: round(v, 2) for k, v in summarize(cpu_samples).items()
            }
        entry["init_errors"] = errors
        failed |= bool(errors)

        if not args.no_invoke:
            events = events_for(function, args.queue_url)
            log_path = logs_dir / f"{function}-invoke.log"
            outcome = run_once(api, args, function, bootstrap, events, log_path)
            entry["invoke"] = {
                "ok": outcome.ok,
                "error": outcome.error,
                "init_ms": round(outcome.init_ms, 2) if outcome.init_ms is not None else None,
                "invocations": [
                    {
                        "label": e.label,
                        "kind": e.kind,
                        "duration_ms": round(e.duration_ms, 2) if e.duration_ms is not None else None,
                        "answer": describe_answer(e),
                        "problem": (answer_problem(function, describe_answer(e))
                                    if e.kind == "response" else f"answered {e.kind}"),
                    }
                    for e in events
                ],
                "log": tail(log_path, 30),
            }
            failed |= not outcome.ok or any(i["problem"] for i in entry["invoke"]["invocations"])
        results["functions"][function] = entry

    api.shutdown()
    print_report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nfull results: {args.json}")
    return 1 if failed else 0


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def print_report(results: dict[str, Any]) -> None:
    print(f"\ninit time (spawn -> first GET invocation/next), {results['runs']} runs, ms")
    print(f"{'function':<20} {'bytes':>10} {'min':>8} {'median':>8} {'max':>8}  runs")
    for name, e in results["functions"].items():
        s = e.get("init_summary_ms")
        cols = (f"{s['min']:>8.1f} {s['median']:>8.1f} {s['max']:>8.1f}" if s else f"{'-':>8} {'-':>8} {'-':>8}")
        runs = ", ".join(f"{v:.1f}" for v in e["init_ms"])
        print(f"{name:<20} {e['bytes']:>10} {cols}  [{runs}]")
        for err in e["init_errors"]:
            print(f"  run {err['run']} FAILED: {err['error']}\n    " + err["log"].replace("\n", "\n    "))
    print(f"\ninit CPU time (all threads, spawn -> first GET), ms; load average {load_average()}")
    print(f"{'function':<20} {'min':>8} {'median':>8} {'max':>8}")
    for name, e in results["functions"].items():
        s = e.get("init_cpu_summary_ms")
        if s:
            print(f"{name:<20} {s['min']:>8.1f} {s['median']:>8.1f} {s['max']:>8.1f}")
    for name, e in results["functions"].items():
        inv = e.get("invoke")
        if not inv:
            continue
        status = "ok" if inv["ok"] else f"FAILED: {inv['error']}"
        print(f"\n{name} invoke ({status}; init {inv['init_ms']} ms)")
        for i in inv["invocations"]:
            print(f"  {i['label']:<5} {i['kind'] or 'no answer':<8} {i['duration_ms']} ms  "
                  f"{json.dumps(i['answer'], separators=(',', ':'))}")
            if i["problem"]:
                print(f"        UNEXPECTED: {i['problem']}")


if __name__ == "__main__":
    sys.exit(main())
