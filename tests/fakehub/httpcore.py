"""HTTP plumbing shared by the Hub and CDN servers: request parsing, ranges, body sending with
sendfile, the bandwidth cap and first-byte latency of WAN mode, faults that act on the wire,
and the JSON-lines request log."""
import gzip
import json
import os
import socket
import struct
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote


class RequestLog:
    """One JSON object per line: ts, server, method, path, query, range, auth, status, bytes."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.fh = open(path, "a", encoding="utf-8") if path else None
        self.entries = []
        # Bumped by clear(). A request's line is written after its response, so a client can
        # read the response and clear the log before that line lands: a request that arrived
        # before the clear is dropped, not logged into the next test's record.
        self.generation = 0

    def write(self, entry, generation):
        line = json.dumps(entry, separators=(",", ":"))
        with self.lock:
            if generation != self.generation:
                return
            self.entries.append(entry)
            if self.fh:
                self.fh.write(line + "\n")
                self.fh.flush()

    def clear(self):
        with self.lock:
            self.generation += 1
            self.entries = []
            if self.fh:
                self.fh.truncate(0)
                self.fh.seek(0)


class Body:
    """A response body: bytes, or a window of a FileInfo (sent with sendfile when possible)."""

    def __init__(self, data=b"", info=None, offset=0, length=None):
        self.data = data
        self.info = info
        self.offset = offset
        self.length = len(data) if info is None else length


def parse_range(header, size):
    """RFC 7233 single range -> (start, end_inclusive), "unsatisfiable", or None (ignore)."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    spec = header[len("bytes="):].strip()
    first, sep, last = spec.partition("-")
    if not sep:
        return None
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            return (max(0, size - n), size - 1) if size > 0 else "unsatisfiable"
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size:
        return "unsatisfiable"
    if end < start:
        return None
    return (start, min(end, size - 1))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, state, kind):
        self.state = state
        self.kind = kind
        self.conns = set()
        self.conns_lock = threading.Lock()
        super().__init__(addr, handler)

    def drop_connections(self):
        with self.conns_lock:
            for s in list(self.conns):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Handler(BaseHTTPRequestHandler):
    """Base handler: subclasses implement route(method)."""

    protocol_version = "HTTP/1.1"
    server_version = "fakehub"
    sys_version = ""

    def setup(self):
        super().setup()
        with self.server.conns_lock:
            self.server.conns.add(self.connection)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self):
        with self.server.conns_lock:
            self.server.conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, fmt, *args):  # keep stderr quiet; the JSON log is the record
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):  # uploads to the storage host (hub_write.py); the route reads the body
        self._dispatch("PUT")

    def _dispatch(self, method):
        st = self.server.state
        self.started = time.time()
        self.log_generation = st.log.generation
        self.method = method
        raw_path, _, self.raw_query = self.path.partition("?")
        self.raw_segments = raw_path.split("/")
        self.segments = [unquote(s) for s in self.raw_segments]
        self.decoded_path = "/".join(self.segments)
        self.query = parse_qsl(self.raw_query, keep_blank_values=True)
        self.request_body = b""
        self.body_pending = method in ("POST", "PUT")
        if method == "POST":
            self.request_body = b"".join(self.iter_request_body())
        self.log_extra = {}
        self.response_status = 0
        self.bytes_sent = 0
        self.fault_used = None
        auth = self.headers.get("Authorization")
        self.token = auth[len("Bearer "):].strip() if auth and auth.startswith("Bearer ") else None
        self.has_auth = auth is not None
        try:
            fault = None
            if self.server.kind != "control":
                fault = st.faults.take(self.server.kind, method, self.decoded_path,
                                       ("status", "stall", "slow", "hold"))
            if fault and not self._pre_fault(fault):
                return
            self.route(method)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if self.body_pending:  # an unread body would be parsed as the next request
                self.close_connection = True
            self._log()

    def iter_request_body(self, piece=1 << 20):
        """The request body in pieces, from Content-Length or chunked transfer coding; a body
        cut short raises ConnectionResetError."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            while True:
                size = int(self.rfile.readline(1 << 16).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1 << 16) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                yield from self._read_exactly(size, piece)
                self.rfile.readline(1 << 16)  # the CRLF after each chunk
        else:
            yield from self._read_exactly(int(self.headers.get("Content-Length") or 0), piece)
        self.body_pending = False

    def _read_exactly(self, left, piece):
        while left > 0:
            data = self.rfile.read(min(left, piece))
            if not data:
                raise ConnectionResetError("request body cut short")
            left -= len(data)
            yield data

    def _pre_fault(self, f):
        """Faults that act before routing; False when the request is fully handled."""
        self.fault_used = f.kind
        if f.kind == "slow":
            time.sleep(f.seconds)
            return True
        if f.kind == "hold":
            deadline = time.time() + f.seconds
            while not f.released.wait(0.2):
                if time.time() > deadline or self.server.state.stopping.is_set():
                    break
            return True
        if f.kind == "stall":
            self.response_status = 0
            self._stall(f.seconds)
            return False
        if self.body_pending:  # a PUT's body: read it, so the client sees the status
            for _ in self.iter_request_body():
                pass
        headers = {"X-Error-Message": f.message}
        if f.status == 429:
            st = self.server.state
            headers["RateLimit"] = f'"{st.bucket_for(self.decoded_path)}";r=0;t={f.reset}'
            if f.retry_after is not None:
                headers["Retry-After"] = str(f.retry_after)
        self.send_json(f.status, {"error": f.message}, headers)
        return False

    def _stall(self, seconds):
        """Hold the connection without answering until the client leaves or time is up."""
        deadline = time.time() + seconds
        self.close_connection = True
        self.connection.settimeout(0.2)
        while time.time() < deadline and not self.server.state.stopping.is_set():
            try:
                if self.connection.recv(4096) == b"":
                    return  # the client gave up
            except socket.timeout:
                continue
            except OSError:
                return

    # ---- responses -------------------------------------------------------------------------

    def common_headers(self):
        st = self.server.state
        h = {"X-Request-Id": "Root=1-" + uuid.uuid4().hex[:24]}
        bucket = st.bucket_for(self.decoded_path)
        remaining, reset, quota = st.ratelimit.take(bucket)
        h["RateLimit"] = f'"{bucket}";r={remaining};t={reset}'
        h["RateLimit-Policy"] = f'"fixed window";"{bucket}";q={quota};w=300'
        return h

    def send(self, status, headers=None, body=None):
        """Send a complete response (HEAD: headers only), applying WAN latency and wire faults."""
        st = self.server.state
        body = body if body is not None else Body()
        if st.config["latency_ms"]:
            time.sleep(st.config["latency_ms"] / 1000.0)
        self.response_status = status
        all_headers = self.common_headers()
        all_headers.update(headers or {})
        all_headers["Content-Length"] = str(body.length)
        self.send_response(status)
        for k, v in all_headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.method == "HEAD" or body.length == 0:
            return
        wire = None
        if status in (200, 206):
            wire = st.faults.take(self.server.kind, self.method, self.decoded_path,
                                  ("reset", "truncate", "stall_body"))
        limit = body.length
        if wire:
            self.fault_used = wire.kind
            limit = min(limit, wire.after_bytes)
        self._send_body(body, limit)
        if wire:
            self.close_connection = True
            if wire.kind == "reset":
                # SO_LINGER with a zero timeout turns close() into a TCP RST.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
            elif wire.kind == "stall_body":
                self._stall(wire.seconds)
            try:
                self.connection.close()
            except OSError:
                pass

    def _send_body(self, body, limit):
        st = self.server.state
        rate = st.config["rate"]
        corrupt = st.faults.corruption_for(body.info.path) if body.info is not None else None
        if body.info is None:
            self._write(body.data[:limit], rate)
            return
        if corrupt:
            self.fault_used = "corrupt"
        if isinstance(body.info.source, bytes) or corrupt or rate:
            self._send_file_chunks(body, limit, rate, corrupt)
            return
        with open(body.info.source, "rb") as f:
            offset, left = body.offset, limit
            while left > 0:
                n = os.sendfile(self.connection.fileno(), f.fileno(), offset, left)
                if n == 0:
                    break
                offset += n
                left -= n
                self.bytes_sent += n

    def _send_file_chunks(self, body, limit, rate, corrupt):
        offsets = set()
        if corrupt:
            offs = corrupt.offsets if corrupt.offsets else [body.info.size // 2]
            offsets = {int(o) for o in offs}
        pos, end = body.offset, body.offset + limit
        chunk = 1 << 20
        while pos < end:
            n = min(chunk, end - pos)
            data = body.info.read(pos, n)
            if not data:
                break
            hit = [o - pos for o in offsets if pos <= o < pos + len(data)]
            if hit:
                buf = bytearray(data)
                for i in hit:
                    buf[i] ^= 0xFF
                data = bytes(buf)
            self._write(data, rate)
            pos += len(data)

    def _write(self, data, rate):
        """Write with an optional per-connection cap (bytes/s), in 10 ms slices."""
        if not rate:
            self.wfile.write(data)
            self.bytes_sent += len(data)
            return
        slice_bytes = max(1, int(rate / 100))
        start = time.monotonic()
        sent = 0
        view = memoryview(data)
        while sent < len(data):
            n = min(slice_bytes, len(data) - sent)
            self.wfile.write(view[sent:sent + n])
            sent += n
            self.bytes_sent += n
            ahead = sent / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)

    def send_json(self, status, obj, headers=None):
        self.send_json_text(status, json.dumps(obj, separators=(",", ":")), headers)

    def send_json_text(self, status, text, headers=None):
        """A body already encoded as JSON."""
        h = {"Content-Type": "application/json; charset=utf-8"}
        h.update(headers or {})
        self.send(status, h, Body(text.encode()))

    def send_error_json(self, status, message, code=None, headers=None):
        h = {"X-Error-Message": message}
        if code:
            h["X-Error-Code"] = code
        h.update(headers or {})
        self.send_json(status, {"error": message}, h)

    def maybe_gzip(self, data, headers):
        """Small text bodies are gzipped (chunk-free here) when the client offers gzip."""
        offered = "gzip" in (self.headers.get("Accept-Encoding") or "")
        f = self.server.state.faults.take(self.server.kind, self.method, self.decoded_path,
                                          ("gzip",)) if offered else None
        if f:
            headers["Content-Encoding"] = "gzip"
            self.fault_used = "gzip"
            return gzip.compress(data, mtime=0)
        return data

    def _log(self):
        st = self.server.state
        if self.server.kind == "control":
            return
        entry = {
            "ts": round(time.time(), 6),
            "start": round(self.started, 6),  # when the request arrived: sort by it for order
            "server": self.server.kind,
            "method": self.method,
            "path": self.decoded_path,
            "raw_path": self.path.partition("?")[0],
            "query": self.raw_query if self.server.kind == "hub" else "<signed>",
            "range": self.headers.get("Range"),
            "auth": self.has_auth,
            "status": self.response_status,
            "bytes": self.bytes_sent,
            "fault": self.fault_used,
            "ua": self.headers.get("User-Agent"),
            "peer": self.client_address[1],
            "accept_encoding": self.headers.get("Accept-Encoding"),
        }
        entry.update(self.log_extra)
        st.log.write(entry, self.log_generation)
