#!/usr/bin/env python3
"""copyfault.py — a small fault-injecting HTTP proxy in front of one S3
server, for the server-side copy tests (test-copy-faults.sh).

    python3 copyfault.py UPSTREAM_PORT MODE_FILE

Listens on a kernel-picked loopback port and prints "ready <port>" once it
does.  Every request is passed to 127.0.0.1:UPSTREAM_PORT unchanged (Host
header included, so SigV4 signatures still verify), except a CopyObject (a
PUT carrying x-amz-copy-source), which is answered according to the first
word of MODE_FILE, read at each copy:

    pass           passed through
    error200       200 OK whose body is an <Error> (InternalError)
    denied         403 AccessDenied
    notimpl        501 NotImplemented
    invalidregion  400 InvalidRegion
    storm          503 SlowDown
    drop           the connection is closed without an answer
    lie            200 OK with a <CopyObjectResult>, and nothing copied
    hold           held, unanswered, while MODE_FILE says hold (at most
                   120 s), then treated by the mode it says then

Each copy it sees appends "<mode> <path>" to MODE_FILE.log.
"""
import http.server
import sys
import time

import s3relay

UPSTREAM = int(sys.argv[1])
MODE_FILE = sys.argv[2]

ERRORS = {
    "error200": (200, "InternalError", "We encountered an internal error. Please try again."),
    "denied": (403, "AccessDenied", "Access Denied"),
    "notimpl": (501, "NotImplemented", "A header you provided implies functionality that is not implemented"),
    "invalidregion": (400, "InvalidRegion", "The source bucket is in another region"),
    "storm": (503, "SlowDown", "Please reduce your request rate."),
}


def mode():
    try:
        with open(MODE_FILE) as f:
            return (f.read().split() or ["pass"])[0]
    except FileNotFoundError:
        return "pass"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, ctype="application/xml"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def copy_fault(self):
        m = mode()
        with open(MODE_FILE + ".log", "a") as f:
            f.write(f"{m} {self.path}\n")
        for _ in range(1200):
            if m != "hold":
                break
            time.sleep(0.1)
            m = mode()
        if m == "pass":
            return False
        if m == "drop":
            self.close_connection = True
            self.connection.close()
            return True
        if m == "lie":
            self.answer(200, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CopyObjectResult>"
                        "<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                        "<ETag>\"0123456789abcdef0123456789abcdef\"</ETag></CopyObjectResult>")
            return True
        status, code, msg = ERRORS[m]
        self.answer(status, f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
                    f"<Message>{msg}</Message><RequestId>fault</RequestId></Error>")
        return True

    def forward(self):
        body = s3relay.read_body(self)
        if self.command == "PUT" and self.headers.get("x-amz-copy-source") and self.copy_fault():
            return
        s3relay.relay(self, UPSTREAM, body)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = forward


s3relay.serve(Handler)
