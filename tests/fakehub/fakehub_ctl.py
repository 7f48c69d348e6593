"""Start and drive a fakehub process from Python tests (unittest) and scripts."""
import json
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_REPO = "DoctorPopi/python_wheelhouse"


class FakeHub:
    """A running emulator. `repos` maps repo id -> folder (append ":private" / ":gated");
    `tokens` and `write_tokens` map a token to the repo ids it may read, or also write."""

    def __init__(self, repos, workdir, *, tokens=None, write_tokens=None, extra_args=(),
                 log_name="requests.jsonl"):
        os.makedirs(workdir, exist_ok=True)
        self.log_path = os.path.join(workdir, log_name)
        ports_file = os.path.join(workdir, "fakehub-ports.json")
        if os.path.exists(ports_file):
            os.unlink(ports_file)
        cmd = [sys.executable, os.path.join(HERE, "fakehub.py"), "--log", self.log_path,
               "--ports-file", ports_file]
        for rid, folder in repos.items():
            cmd += ["--repo", f"{rid}={folder}"]
        for tok, ids in (tokens or {}).items():
            cmd += ["--token", f"{tok}={','.join(ids)}"]
        for tok, ids in (write_tokens or {}).items():
            cmd += ["--write-token", f"{tok}={','.join(ids)}"]
        cmd += ["--upload-dir", os.path.join(workdir, "uploads")]
        cmd += list(extra_args)
        self.stderr_path = os.path.join(workdir, "fakehub.stderr")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"fakehub failed to start:\n{f.read()}")
        info = json.loads(line)
        self.hub, self.cdn, self.control_url = info["hub"], info["cdn"], info["control"]

    def ctl(self, path, body=None):
        """GET for the read-only routes (/state, /log), else POST with a JSON body."""
        if path in ("/state", "/log"):
            req = urllib.request.Request(self.control_url + path)
        else:
            req = urllib.request.Request(self.control_url + path, method="POST",
                                         data=json.dumps(body or {}).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"{}")

    def fault(self, **spec):
        return self.ctl("/faults", spec)["id"]

    def clear_faults(self):
        self.ctl("/faults/clear", {})

    def config(self, **cfg):
        return self.ctl("/config", cfg)

    def log(self):
        """Every request so far (from the JSON-lines file the emulator writes). A request's line
        lands just after its response, so read until the file stops growing."""
        def read():
            with open(self.log_path, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        entries = read()
        for _ in range(40):
            time.sleep(0.025)
            again = read()
            if len(again) == len(entries):
                break
            entries = again
        return entries

    def clear_log(self):
        self.ctl("/log/clear", {})

    def state(self):
        return self.ctl("/state")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def wait_for(pred, timeout=10.0, interval=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return pred()
