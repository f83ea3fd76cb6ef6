"""s3relay.py — what the test proxies in front of one S3 server share
(reqlog.py, copyfault.py): passing a request on unchanged (Host header
included, so SigV4 signatures still verify) and its answer back, and the
threaded server that prints "ready <port>" on a kernel-picked loopback
port.

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def forward(self):
            body = s3relay.read_body(self)
            ...
            s3relay.relay(self, UPSTREAM, body, on_answer=...)
    s3relay.serve(Handler)
"""
import http.client
import http.server
import socketserver


def read_body(h):
    """The request's body (None when it has none)."""
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n else None


def relay(h, upstream, body, on_answer=None, answer=True):
    """Passes h's request to 127.0.0.1:upstream and its answer back (not
    when answer is False: the caller answers); on_answer() runs after the
    answer is read, before it is sent."""
    up = http.client.HTTPConnection("127.0.0.1", upstream, timeout=60)
    hdrs = {k: v for k, v in h.headers.items() if k.lower() not in ("connection",)}
    up.request(h.command, h.path, body=body, headers=hdrs)
    r = up.getresponse()
    data = r.read()
    if on_answer:
        on_answer()
    if not answer:
        up.close()
        return
    h.send_response(r.status, r.reason)
    for k, v in r.getheaders():
        if k.lower() not in ("connection", "transfer-encoding", "content-length"):
            h.send_header(k, v)
    h.send_header("Content-Length", str(r.getheader("Content-Length", len(data))
                                        if h.command == "HEAD" else len(data)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(data)
    up.close()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the client opens many connections at once


def serve(handler):
    """Serves handler on a kernel-picked loopback port, forever, after
    printing "ready <port>"."""
    srv = Server(("127.0.0.1", 0), handler)
    print("ready", srv.server_address[1], flush=True)
    srv.serve_forever()
