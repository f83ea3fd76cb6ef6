#!/usr/bin/env python3
"""putfault.py — a fault-injecting HTTP proxy in front of one S3 server,
for the transient-write test (test-put-faults.sh).

    python3 putfault.py UPSTREAM_PORT MODE_FILE

Listens on a kernel-picked loopback port and prints "ready <port>" once it
does.  Requests are passed to 127.0.0.1:UPSTREAM_PORT unchanged (Host
header included, so SigV4 signatures still verify).  The first PUT or
DELETE of each path (query included) is answered according to the first
word of MODE_FILE, read at each request:

    pass   passed through
    fail   500 InternalError, and not passed on (the store dropped it)
    lost   passed on, then answered 500 InternalError (the store did it;
           the answer was lost on the way back)

A PUT carrying "If-None-Match: *" gets 412 PreconditionFailed when a HEAD
of the key finds it: s3rver ignores the header, and the region must look
like a store that enforces create-only puts (Ceph RGW, AWS) for the
client's create-only paths to run.  Each injected failure appends
"<mode> <method> <path>" and each 412 "412 <path>" to MODE_FILE.log.
"""
import http.client
import http.server
import sys
import threading

import s3relay

UPSTREAM = int(sys.argv[1])
MODE = sys.argv[2]
LOCK = threading.Lock()
SEEN = set()


def log(line):
    with LOCK, open(MODE + ".log", "a") as f:
        f.write(line + "\n")


def mode():
    with open(MODE) as f:
        return (f.read().split() or ["pass"])[0]


def first_time(method, path):
    with LOCK:
        if (method, path) in SEEN:
            return False
        SEEN.add((method, path))
        return True


def exists(h):
    """Whether the key of h's PUT is stored: a HEAD signed like the PUT is
    not available, so the upstream is asked without a signature through the
    s3rver test hook: a plain HEAD answered 200 or 404 (s3rver checks
    signatures only when one is sent)."""
    up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=60)
    up.request("HEAD", h.path.split("?", 1)[0], headers={"Host": h.headers.get("Host", "")})
    st = up.getresponse().status
    up.close()
    return st == 200


def answer_error(h, status, code, message):
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f'<Message>{message}</Message></Error>').encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/xml")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        body = s3relay.read_body(self)
        if self.command == "PUT" and self.headers.get("If-None-Match") == "*" and exists(self):
            log(f"412 {self.path}")
            return answer_error(self, 412, "PreconditionFailed",
                                "At least one of the pre-conditions you specified did not hold")
        m = mode()
        if m in ("fail", "lost") and self.command in ("PUT", "DELETE") and \
                first_time(self.command, self.path):
            log(f"{m} {self.command} {self.path}")
            if m == "lost":
                s3relay.relay(self, UPSTREAM, body, on_answer=None, answer=False)
            return answer_error(self, 500, "InternalError",
                                "We encountered an internal error. Please try again.")
        s3relay.relay(self, UPSTREAM, body)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = forward


s3relay.serve(Handler)
