#!/usr/bin/env python3
"""A loopback HTTP proxy in front of the AWS emulator that logs every API call it forwards
(time, service and operation from X-Amz-Target), to count the DynamoDB and SQS requests a turn
makes. Usage:

    scripts/aws-request-log.py --listen 4599 --upstream http://127.0.0.1:4566 --log /tmp/aws.log
    AWS_ENDPOINT_URL=http://127.0.0.1:4599 AGENTLANE_BACKEND=aws agentlane serve ...

Each log line: `<epoch ms> <target>` (e.g. `DynamoDB_20120810.TransactWriteItems`), then with
`--bodies N` the first N characters of the request body.
"""
import argparse
import http.client
import http.server
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, default=4599)
    ap.add_argument("--upstream", default="http://127.0.0.1:4566")
    ap.add_argument("--log", required=True)
    ap.add_argument(
        "--bodies",
        type=int,
        default=0,
        help="also log the first N characters of each request body (to see which items a turn touches)",
    )
    args = ap.parse_args()
    up = urllib.parse.urlparse(args.upstream)
    log = open(args.log, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            target = self.headers.get("X-Amz-Target") or (self.command + " " + self.path)
            line = f"{int(time.time() * 1000)} {target}"
            if args.bodies and body:
                line += " " + body[: args.bodies].decode("utf-8", "replace").replace("\n", " ")
            log.write(line + "\n")
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            headers = {k: v for k, v in self.headers.items()}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_POST = forward
        do_GET = forward

    http.server.ThreadingHTTPServer(("127.0.0.1", args.listen), Handler).serve_forever()


if __name__ == "__main__":
    main()
