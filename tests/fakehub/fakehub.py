#!/usr/bin/env python3
"""fakehub: a Hugging Face Hub emulator on loopback, for tests and benchmarks.

Three servers:
  hub      http://127.0.0.1:<port>   the Hub API and /resolve (hub-api.md)
  cdn      http://localhost:<port>   signed, expiring URLs that /resolve 302s to (a different
                                     host name, so clients must drop the token)
  control  http://127.0.0.1:<port>   JSON API for tests: faults, WAN mode, commits, log

    fakehub.py --repo DoctorPopi/python_wheelhouse=DIR [--repo ID=DIR:private] \\
               [--token hf_x=ID,ID2] [--write-token hf_w=ID|*] [--page-size 7] [--rate 50m] \\
               [--latency-ms 20] [--log requests.jsonl] [--ports-file ports.json] \\
               [--upload-dir DIR] [--multipart-threshold BYTES] [--multipart-chunk BYTES]

Tokens: --token hf_x=ID,ID2 may read those repos (and every public one); --write-token
hf_w=ID,ID2 may also write them ('*': every repo). Writes (hub_write.py, hub-write-api.md):
preupload, the Git LFS batch API (basic and multipart; the CDN host doubles as the storage
host that takes the PUTs), /api/complete_multipart, verify, and the ndjson commit. A commit
becomes the branch head at once and every read route sees it.

On start it prints one JSON line {"hub":..., "cdn":..., "control":...} (also written to
--ports-file) once every server accepts connections. Control API (POST bodies are JSON):
  GET  /state                      ports, repos, heads, counters, faults, uploads
  POST /faults   {fault spec}      add a fault rule (see faults.py); returns {"id": n}
  POST /faults/clear               remove every rule
  POST /config   {rate, latency_ms, page_size, url_ttl, xet_hash, quota, multipart_threshold,
                  multipart_chunk}
  POST /commit   {repo, dir?, add?: {path: text}, delete?: [path], title?, branch?}
  POST /ref      {repo, kind: tag|branch|pr, name, target}
  POST /expire-urls                every CDN URL signed so far now answers 403
  POST /down     {server: hub|cdn} close the listener and drop connections ("Hub down")
  POST /up       {server: hub|cdn} listen again on the same port
  GET  /log                        the request log as a JSON array; POST /log/clear
                                   empties it and drops every request that arrived before it,
                                   even one still answering
  POST /shutdown
"""
import argparse
import calendar
import hashlib
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hub_write  # noqa: E402
from faults import FaultTable  # noqa: E402
from httpcore import Body, Handler, RequestLog, Server  # noqa: E402
from hub import CdnHandler, HubHandler, sign  # noqa: E402
from repo import FileInfo, Repo, git_blob_sha1, load_manifest_near, snapshot_dir  # noqa: E402


def parse_rate(text):
    """'50m' -> 50e6 bytes/s (decimal, as nginx's limit_rate); '0' or '' -> None."""
    if not text or text == "0":
        return None
    mult = {"k": 1e3, "m": 1e6, "g": 1e9}.get(text[-1].lower(), 1)
    return float(text[:-1] if mult != 1 else text) * mult


def cdn_address(host):
    """(host name for URLs, loopback address to bind) for the CDN. The name must differ from
    the Hub's 127.0.0.1 so that clients see another origin; when it does not resolve (a system
    without /etc/hosts), 127.0.0.2, which is loopback on Linux without any setup, stands in."""
    try:
        for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
            addr = info[4][0]
            if addr.startswith("127."):
                return host, addr
    except socket.gaierror:
        pass
    print(f"fakehub: {host} does not resolve to a loopback address; the CDN uses 127.0.0.2",
          file=sys.stderr)
    return "127.0.0.2", "127.0.0.2"


class RateLimiter:
    """Fixed 5-minute windows per bucket, as the Hub's RateLimit headers describe."""

    def __init__(self, quota):
        self.quota = quota
        self.lock = threading.Lock()
        self.windows = {}

    def take(self, bucket):
        now = time.time()
        with self.lock:
            start, used = self.windows.get(bucket, (now, 0))
            if now - start >= 300:
                start, used = now, 0
            used += 1
            self.windows[bucket] = (start, used)
            return max(0, self.quota - used), int(300 - (now - start)) + 1, self.quota


class State:
    def __init__(self, args):
        self.faults = FaultTable()
        self.log = RequestLog(args.log)
        self.stopping = threading.Event()
        self.secret = secrets.token_bytes(32)
        self.url_generation = 0  # bumped by /expire-urls: older signatures are expired
        self.counters = {}
        self.counters_lock = threading.Lock()
        self.config = {"rate": parse_rate(args.rate), "latency_ms": args.latency_ms,
                       "page_size": args.page_size, "url_ttl": args.url_ttl,
                       "xet_hash": args.xet_hash, "redirect_base": args.redirect_base}
        self.ratelimit = RateLimiter(args.quota)
        self.repos = {}
        self.tokens = {}
        self.blobs = {}  # sha256 -> FileInfo, what the CDN can serve
        self.hub_base = self.cdn_base = ""

    def count(self, name):
        with self.counters_lock:
            self.counters[name] = self.counters.get(name, 0) + 1

    def find_repo(self, repo_id):
        return self.repos.get(repo_id.lower())

    def token_has_access(self, token, repo_id):
        allowed = self.tokens.get(token, set())
        return "*" in allowed or repo_id in allowed

    def bucket_for(self, path):
        return "resolvers" if "/resolve/" in path or "/resolve-cache/" in path else "api"

    def register_blobs(self, files):
        for f in files.values():
            if f.lfs:
                self.blobs[f.sha256] = f

    def sign_cdn_url(self, repo, f):
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        ttl = int(self.config["url_ttl"])
        path = f"/xet-bridge-us/{repo.internal_id}/{f.sha256}"
        name = f.path.rsplit("/", 1)[-1]
        disposition = quote(f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
                            safe="")
        return (f"{self.cdn_base}{path}?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                f"&X-Amz-Content-Sha256=UNSIGNED-PAYLOAD"
                f"&X-Amz-Credential=FAKEHUB%2F{amz_date[:8]}%2Fus-east-1%2Fs3%2Faws4_request"
                f"&X-Amz-Date={amz_date}&X-Amz-Expires={ttl}"
                f"&X-Amz-Signature={sign(self.secret, path, amz_date, ttl, self.url_generation)}"
                f"&X-Amz-SignedHeaders=host&X-Xet-Cas-Uid=public"
                f"&response-content-disposition={disposition}")

    def check_signature(self, path, q):
        """None when the URL is valid, else the reason for a 403."""
        try:
            amz_date, expires = q["X-Amz-Date"], int(q["X-Amz-Expires"])
            issued = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        except (KeyError, ValueError):
            return "Missing or malformed signature parameters"
        signature, gen = q.get("X-Amz-Signature"), self.url_generation
        if signature != sign(self.secret, path, amz_date, expires, gen):
            if any(signature == sign(self.secret, path, amz_date, expires, g) for g in range(gen)):
                return "Request has expired"
            return "The request signature we calculated does not match the signature you provided"
        if time.time() > issued + expires:
            return "Request has expired"
        return None


class ControlHandler(Handler):
    """JSON control API for tests (never part of the emulated Hub)."""

    def route(self, method):
        app = self.server.app
        st = self.server.state
        path = self.decoded_path.rstrip("/")
        try:
            body = json.loads(self.request_body or b"{}") if method == "POST" else {}
        except ValueError as e:
            return self.send_json(400, {"error": f"bad JSON: {e}"})
        try:
            if method == "GET" and path == "/state":
                return self.send_json(200, app.describe())
            if method == "GET" and path == "/log":
                with st.log.lock:
                    return self.send_json(200, list(st.log.entries))
            if method != "POST":
                return self.send_json(404, {"error": "unknown control route"})
            if path == "/faults":
                return self.send_json(200, {"id": st.faults.add(body).id})
            if path == "/faults/clear":
                st.faults.clear()
                return self.send_json(200, {})
            if path == "/config":
                for k, v in body.items():
                    if k == "rate":
                        st.config["rate"] = parse_rate(str(v)) if v else None
                    elif k == "quota":
                        st.ratelimit.quota = int(v)
                    elif k in st.config:
                        st.config[k] = v
                    else:
                        raise ValueError(f"unknown config key {k}")
                return self.send_json(200, st.config)
            if path == "/commit":
                return self.send_json(200, {"sha": app.commit(body)})
            if path == "/ref":
                return self.send_json(200, app.set_ref(body))
            if path == "/expire-urls":
                st.url_generation += 1
                return self.send_json(200, {})
            if path in ("/down", "/up"):
                app.set_up(body.get("server", "hub"), path == "/up")
                return self.send_json(200, {})
            if path == "/log/clear":
                st.log.clear()
                return self.send_json(200, {})
            if path == "/shutdown":
                self.send_json(200, {})
                threading.Thread(target=app.stop, daemon=True).start()
                return None
        except (ValueError, KeyError, TypeError, OSError) as e:
            return self.send_json(400, {"error": str(e)})
        return self.send_json(404, {"error": "unknown control route"})

    def common_headers(self):
        return {}


class App:
    def __init__(self, args):
        self.args = args
        self.state = State(args)
        self.servers = {}
        self.ports = {}
        self.threads = []
        self.lfs_mode = args.lfs
        for spec in args.repo:
            self.add_repo(spec)
        for spec in args.token:
            tok, _, ids = spec.partition("=")
            self.state.tokens[tok] = {i for i in ids.split(",") if i}
        hub_write.install(self.state, args)  # write tokens, upload store, multipart config

    def add_repo(self, spec):
        """ID=DIR[:private|:gated|:gated-manual]"""
        repo_id, _, rest = spec.partition("=")
        flags = rest.split(":")
        folder = flags[0]
        private = "private" in flags[1:]
        gated = "manual" if "gated-manual" in flags[1:] else ("auto" if "gated" in flags[1:] else False)
        repo = Repo(repo_id, private=private, gated=gated, lfs_mode=self.lfs_mode)
        files = snapshot_dir(folder, self.lfs_mode, load_manifest_near(folder))
        c = repo.add_commit(files, "Initial commit")
        repo.tags["v1.0"] = c.sha
        repo.prs["1"] = c.sha
        self.state.register_blobs(files)
        self.state.repos[repo_id.lower()] = repo

    def commit(self, body):
        repo = self.state.find_repo(body["repo"])
        if repo is None:
            raise ValueError(f"no repo {body['repo']}")
        branch = body.get("branch", "main")
        base = repo.resolve(branch)
        if body.get("dir"):
            files = snapshot_dir(body["dir"], repo.lfs_mode, load_manifest_near(body["dir"]))
        else:
            files = dict(base.files) if base else {}
        for p in body.get("delete", []):
            files.pop(p, None)
        for p, text in body.get("add", {}).items():
            data = text.encode() if isinstance(text, str) else bytes(text)
            lfs = repo.lfs_mode == "all" and len(data) > 0
            files[p] = FileInfo(p, len(data), hashlib.sha256(data).hexdigest(),
                                git_blob_sha1(data), lfs, data)
        c = repo.add_commit(files, body.get("title", "Update"), branch)
        self.state.register_blobs(files)
        return c.sha

    def set_ref(self, body):
        repo = self.state.find_repo(body["repo"])
        if repo is None or body["target"] not in repo.commits:
            raise ValueError("unknown repo or target commit")
        table = {"tag": repo.tags, "branch": repo.branches, "pr": repo.prs}[body["kind"]]
        with repo.lock:
            table[body["name"]] = body["target"]
        return {"ok": True}

    def serve(self, kind, handler, host, port):
        srv = Server((host, port), handler, self.state, kind)
        srv.app = self
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        t.start()
        self.servers[kind] = srv
        self.ports[kind] = srv.server_address[1]

    def set_up(self, kind, up):
        if kind not in ("hub", "cdn"):
            raise ValueError("server must be hub or cdn")
        srv = self.servers.get(kind)
        if not up and srv is not None:
            srv.shutdown()
            srv.server_close()
            srv.drop_connections()
            self.servers[kind] = None
        elif up and srv is None:
            handler = HubHandler if kind == "hub" else CdnHandler
            addr = "127.0.0.1" if kind == "hub" else cdn_address(self.args.cdn_host)[1]
            self.serve(kind, handler, addr, self.ports[kind])

    def describe(self):
        st = self.state
        repos = {}
        for r in st.repos.values():
            head = r.head()
            repos[r.id] = {"head": head.sha if head else None, "commits": len(r.commits),
                           "private": r.private, "gated": r.gated}
        return {"hub": st.hub_base, "cdn": st.cdn_base,
                "control": f"http://127.0.0.1:{self.ports['control']}", "repos": repos,
                "counters": dict(st.counters), "faults": st.faults.describe(),
                "uploads": st.uploads.describe(),
                "config": st.config, "up": {k: v is not None for k, v in self.servers.items()}}

    def start(self):
        a = self.args
        self.serve("hub", HubHandler, "127.0.0.1", a.hub_port)
        cdn_host, cdn_addr = cdn_address(a.cdn_host)
        self.serve("cdn", CdnHandler, cdn_addr, a.cdn_port)
        self.serve("control", ControlHandler, "127.0.0.1", a.control_port)
        self.state.hub_base = f"http://127.0.0.1:{self.ports['hub']}"
        self.state.cdn_base = f"http://{cdn_host}:{self.ports['cdn']}"
        info = {"hub": self.state.hub_base, "cdn": self.state.cdn_base,
                "control": f"http://127.0.0.1:{self.ports['control']}", "pid": os.getpid()}
        if a.ports_file:
            tmp = a.ports_file + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(info, f)
            os.replace(tmp, a.ports_file)
        print(json.dumps(info), flush=True)

    def stop(self):
        self.state.stopping.set()
        for srv in self.servers.values():
            if srv is not None:
                srv.shutdown()
                srv.server_close()
                srv.drop_connections()


def main(argv=None):
    # No abbreviations: "--port 18999" once wrote a ports file named 18999 into the checkout.
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1], allow_abbrev=False)
    p.add_argument("--repo", action="append", default=[], required=True,
                   help="ID=DIR[:private|:gated|:gated-manual] (repeatable)")
    p.add_argument("--token", action="append", default=[],
                   help="TOKEN=ID,ID (valid token with access to those repos; '*' = all)")
    p.add_argument("--hub-port", type=int, default=0)
    p.add_argument("--cdn-port", type=int, default=0)
    p.add_argument("--control-port", type=int, default=0)
    p.add_argument("--cdn-host", default="localhost",
                   help="host name in CDN URLs; must differ from 127.0.0.1")
    p.add_argument("--page-size", type=int, default=0, help="cap on tree page size (0: Hub's)")
    p.add_argument("--rate", default="", help="per-connection cap, e.g. 50m (bytes/s)")
    p.add_argument("--latency-ms", type=float, default=0, help="first-byte latency")
    p.add_argument("--url-ttl", type=int, default=3600, help="CDN URL lifetime, seconds")
    p.add_argument("--quota", type=int, default=1000000, help="requests per 5 min per bucket")
    p.add_argument("--lfs", choices=["auto", "all", "none"], default="auto")
    p.add_argument("--xet-hash", action="store_true", help="emit X-Xet-Hash / xetHash")
    p.add_argument("--redirect-base", default="",
                   help="send LFS downloads to this URL + path (an outside server) instead of "
                        "the signed CDN")
    hub_write.add_arguments(p)
    p.add_argument("--log", default="", help="request log, JSON lines")
    p.add_argument("--ports-file", default="")
    args = p.parse_args(argv)
    app = App(args)
    app.start()
    # SIGTERM ends main normally, so atexit handlers run (they remove a temporary upload dir).
    signal.signal(signal.SIGTERM, lambda *_: app.state.stopping.set())
    try:
        while not app.state.stopping.wait(0.5):  # a timeout, so the main thread runs handlers
            pass
    except KeyboardInterrupt:
        app.stop()


if __name__ == "__main__":
    main()
