"""Fault switches, set per test through the control port.

A rule matches requests by server ("hub", "cdn" or "any"), method and a regex over the decoded
request path, and fires `count` times (-1: until cleared). Kinds:

  status        answer `status` (429 adds Retry-After when `retry_after` is set and
                RateLimit r=0;t=`reset`), X-Error-Message `message`
  reset         send the headers and `after_bytes` of the body, then a TCP RST
  truncate      promise the full Content-Length, send `after_bytes`, then close (FIN)
  stall         read the request, never answer (until the client goes or `seconds` pass)
  stall_body    send the headers and `after_bytes`, then stall
  slow          wait `seconds` before the first byte
  hold          wait before the first byte until the rule is cleared (POST /faults/clear) or
                `seconds` pass, then answer as usual: a request in flight for as long as a
                test wants, with no clock involved
  ignore_range  answer 200 with the whole body to a ranged request
  gzip          gzip small bodies when the client offers it
  link_repeat   the Link next URL repeats the current cursor
  link_cross_origin  the Link next URL points at another origin
  corrupt       flip the bytes at `offsets` (default: the middle byte) of the file whose repo
                path matches `path`, wherever it is served (hub or CDN), until cleared
  branch_moved  on a commit POST (hub_write.py): another commit lands on the target branch
                just before this one is applied, so a stale parentCommit gets the Hub's 412

On an upload PUT to the storage host (server "cdn", path /lfs-upload/...), `reset` and
`stall_body` act on the request instead: read `after_bytes` of the body, then RST or stall;
`status` reads the whole body first, then answers.
"""
import itertools
import re
import threading

KINDS = {
    "status", "reset", "truncate", "stall", "stall_body", "slow", "ignore_range", "gzip",
    "link_repeat", "link_cross_origin", "corrupt", "branch_moved", "hold",
}


class Fault:
    _ids = itertools.count(1)

    def __init__(self, spec):
        kind = spec.get("kind")
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(KINDS)}")
        self.id = next(self._ids)
        self.kind = kind
        self.server = spec.get("server", "any")
        if self.server not in ("hub", "cdn", "any"):
            raise ValueError("server must be hub, cdn or any")
        self.method = spec.get("method")
        self.path_re = re.compile(spec.get("path", ".*"))
        self.count = int(spec.get("count", -1))
        self.status = int(spec.get("status", 500))
        self.retry_after = spec.get("retry_after")
        self.reset = int(spec.get("reset", 1))
        self.message = spec.get("message", "injected fault")
        self.after_bytes = int(spec.get("after_bytes", 0))
        self.seconds = float(spec.get("seconds", 3600))
        self.offsets = spec.get("offsets")
        self.fired = 0
        self.released = threading.Event()  # set when the rule is cleared (hold)

    def describe(self):
        return {"id": self.id, "kind": self.kind, "server": self.server, "path": self.path_re.pattern,
                "count": self.count, "fired": self.fired}


class FaultTable:
    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []

    def add(self, spec):
        f = Fault(spec)
        with self.lock:
            self.rules.append(f)
        return f

    def clear(self):
        with self.lock:
            for f in self.rules:
                f.released.set()
            self.rules = []

    def take(self, server, method, path, kinds):
        """The first live rule of one of `kinds` that matches; consumes one use."""
        with self.lock:
            for f in self.rules:
                if f.kind not in kinds or f.count == 0:
                    continue
                if f.server not in ("any", server) or (f.method and f.method != method):
                    continue
                if not f.path_re.search(path):
                    continue
                if f.count > 0:
                    f.count -= 1
                f.fired += 1
                return f
        return None

    def corruption_for(self, repo_path):
        """Offsets to corrupt in the file at `repo_path` (persistent, not consumed)."""
        with self.lock:
            for f in self.rules:
                if f.kind == "corrupt" and f.path_re.search(repo_path):
                    f.fired += 1
                    return f
        return None

    def describe(self):
        with self.lock:
            return [f.describe() for f in self.rules]
