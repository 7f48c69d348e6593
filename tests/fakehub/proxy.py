#!/usr/bin/env python3
"""A minimal HTTP forward proxy for tests: forwards absolute-URI requests (plain http only),
streams the answer back, and logs each request as a JSON line (method, url, auth header seen).

    proxy.py --log proxy.jsonl [--resolve HOST=ADDR ...]
                                    prints {"proxy": "http://127.0.0.1:PORT"} when ready

--resolve connects to ADDR for requests naming HOST (as curl --resolve does): a test can use a
host name that is not on this machine as far as the client can tell, while the bytes stay on
loopback.
"""
import argparse
import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade"}


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self.forward()

    def do_HEAD(self):
        self.forward()

    def forward(self):
        u = urlsplit(self.path)
        if u.scheme != "http" or not u.hostname:
            self.send_error(400, "absolute http URI required")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        host = self.server.resolve.get(u.hostname, u.hostname)
        conn = http.client.HTTPConnection(host, u.port or 80, timeout=60)
        target = u.path + ("?" + u.query if u.query else "")
        try:
            conn.request(self.command, target, headers=headers)
            r = conn.getresponse()
            body = r.read()
        except OSError as e:
            self.send_error(502, f"upstream: {e}")
            return
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        conn.close()
        with self.server.log_lock:
            self.server.log.write(json.dumps({"method": self.command, "host": u.netloc,
                                              "path": u.path, "status": r.status,
                                              "auth": "Authorization" in self.headers}) + "\n")
            self.server.log.flush()


def main():
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--log", required=True)
    p.add_argument("--resolve", action="append", default=[], metavar="HOST=ADDR")
    a = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), ProxyHandler)
    srv.daemon_threads = True
    srv.log = open(a.log, "a", encoding="utf-8")
    srv.log_lock = threading.Lock()
    srv.resolve = dict(item.split("=", 1) for item in a.resolve)
    print(json.dumps({"proxy": f"http://127.0.0.1:{srv.server_address[1]}"}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
