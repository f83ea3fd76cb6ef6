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
import http.client
import http.server
import socketserver
import sys
import threading
import time

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
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        if self.command == "GET" and "/chunks/" in self.path:
            time.sleep(DELAY)
        up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=60)
        hdrs = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
        up.request(self.command, self.path, body=body, headers=hdrs)
        r = up.getresponse()
        data = r.read()
        log("ANS", self.command, self.path)
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(r.getheader("Content-Length", len(data))
                                               if self.command == "HEAD" else len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        up.close()

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = forward


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the client opens many connections at once


srv = Server(("127.0.0.1", 0), Handler)
print("ready", srv.server_address[1], flush=True)
srv.serve_forever()
