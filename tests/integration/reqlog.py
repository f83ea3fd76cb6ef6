#!/usr/bin/env python3
"""reqlog.py — a logging HTTP proxy in front of one S3 server, for the
restore request-order test (test-restore-window.sh).

    python3 reqlog.py UPSTREAM_PORT LOG DELAY_S

Listens on a kernel-picked loopback port and prints "ready <port>" once it
does.  Every request is passed to 127.0.0.1:UPSTREAM_PORT unchanged (Host
header included, so SigV4 signatures still verify).  A GET of a chunk
object (a path with /chunks/ in it) is held DELAY_S seconds before it is
forwarded: a link latency, so that what the client asks for before its
first answer comes is what it asks for at once.  LOG gets, in the order
they happen, one line per request as it arrives and one just before its
answer is sent (so the client cannot have the answer before the line is
written):

    REQ METHOD PATH
    ANS METHOD PATH
"""
import http.server
import sys
import threading
import time

import s3relay

UPSTREAM = int(sys.argv[1])
LOG = open(sys.argv[2], "a")
DELAY = float(sys.argv[3])
LOCK = threading.Lock()


def log(what, method, path):
    with LOCK:
        LOG.write(f"{what} {method} {path}\n")
        LOG.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        log("REQ", self.command, self.path)
        body = s3relay.read_body(self)
        if self.command == "GET" and "/chunks/" in self.path:
            time.sleep(DELAY)
        s3relay.relay(self, UPSTREAM, body, on_answer=lambda: log("ANS", self.command, self.path))

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = forward


s3relay.serve(Handler)
