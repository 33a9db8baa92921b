"""moto server, with DynamoDB requests run one at a time.

moto's DynamoDB backend is not safe under concurrent requests: `TransactWriteItems` checks its
conditions and applies its writes without a lock, and when one fails it restores a deep copy of
the whole table taken at its start, which silently rolls back other clients' writes that landed
in between. Real DynamoDB gives serializable transactions and atomic conditional writes; the
emulator must too, or a test of a design that relies on them fails at random for a reason that
cannot happen in the cloud. SQS requests are not serialized (a 20 s long poll must not hold
DynamoDB up), so the emulator's real-world-like SQS faults (a FIFO group's next message handed
out during a long poll while the previous one is in flight) stay in place for the design to
survive.

Usage: python moto_serialized.py -H 127.0.0.1 -p 4566
"""

import argparse
import gc
import os
import signal
import sys
import threading
import time

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


class SerializeDynamoDB:
    """WSGI middleware: one DynamoDB request at a time, the response read inside the lock."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self.app(environ, start_response)
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


class GcWatch:
    """Keeps full garbage collections short, and logs any over 200 ms.

    A collection holds the interpreter: the whole emulator answers nothing meanwhile. moto keeps
    every table, item, queue and message for as long as it runs, so a full (generation 2)
    collection scans more each time: 0.2 s early in a test run, 0.7 s after two, and once 3 s
    with no request answered (CI saw three cron scenarios fire late). After each full collection
    the objects that survived it are frozen (`gc.freeze`: left out of later collections), so the
    next one scans only what came since; what moto keeps is never garbage anyway.
    """

    def __init__(self):
        self.started = 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self.started = time.monotonic()
            return
        took = time.monotonic() - self.started
        if info.get("generation") == 2:
            gc.freeze()
        if took > 0.2:
            print(
                f"moto_serialized: garbage collection of generation {info.get('generation')} "
                f"took {took:.2f} s ({info.get('collected')} objects collected)",
                file=sys.stderr,
                flush=True,
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4566)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    gc.callbacks.append(GcWatch())
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerializeDynamoDB(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
