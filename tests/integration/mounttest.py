"""Helpers for the mounted tests: run wheelhousefs against the Hub emulator on a real FUSE
mount, and look at it from the outside (mount table, daemon fds, request log)."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("WHFS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "fakehub"))

import testdata  # noqa: E402
from fakehub_ctl import FakeHub, wait_for  # noqa: E402

REPO = "DoctorPopi/python_wheelhouse"
BINARY = os.path.join(BUILD_DIR, "fs", "wheelhousefs")
SKIP = 77  # ctest's skip code; .ci/run fails the run if mounted tests skip where FUSE works


def fuse_usable():
    """(True, "") when this machine can mount FUSE filesystems, else (False, why)."""
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        return False, f"/dev/fuse: {e}"
    if shutil.which("fusermount3") is None:
        return False, "fusermount3 is not installed (apt-get install fuse3)"
    if not os.path.exists(BINARY):
        return False, f"{BINARY} is not built"
    return True, ""


def main():
    """unittest.main(), exiting 77 (skipped) when FUSE cannot be used here."""
    ok, why = fuse_usable()
    if not ok:
        print(f"SKIP: mounted tests need FUSE: {why}", file=sys.stderr)
        sys.exit(SKIP)
    unittest.main()


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and fields[4] == path:
                return True
    return False


def sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def non_socket_fds(pid):
    """The daemon's open fds that are not sockets (connections come and go with use)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("socket:"):
            out.append(target)
    return sorted(out)


class Mount:
    """wheelhousefs in the foreground (-f) with its log in a file, or as a daemon."""

    def __init__(self, hub_url, workdir, *, cache_dir=None, options=(), repo=REPO, daemon=False,
                 env=None, mountpoint=None):
        self.workdir = workdir
        self.mountpoint = mountpoint or os.path.join(workdir, "mnt")
        os.makedirs(self.mountpoint, exist_ok=True)
        self.cache_dir = cache_dir or os.path.join(workdir, "cache")
        self.log_path = os.path.join(workdir, "wheelhousefs.log")
        opts = [f"endpoint={hub_url}", f"cache_dir={self.cache_dir}"]
        # The hooked shells' hints in the test's own folder (the daemon's default is
        # /run/wheelhouse-fs, the machine's), unless the test names one.
        # (Beside the work folder, not in it: a test may make that folder open to everyone,
        # and the daemon refuses a state folder others could change.)
        if not any(str(o).startswith("state_dir=") for o in options):
            opts.append(f"state_dir={workdir.rstrip('/')}-state")
        opts += list(options)
        cmd = [BINARY, "-o", ",".join(opts), repo, self.mountpoint]
        self.env = dict(os.environ, **(env or {}))
        self.log = open(self.log_path, "ab")
        self.killed = False
        if daemon:
            proc = subprocess.run(cmd, stdout=self.log, stderr=subprocess.PIPE, env=self.env,
                                  timeout=60)
            self.startup_stderr = proc.stderr.decode()
            self.returncode = proc.returncode
            self.proc = None
            self.pid = self.status()["pid"] if proc.returncode == 0 else None
        else:
            self.proc = subprocess.Popen(cmd[:1] + ["-f"] + cmd[1:], stdout=self.log,
                                         stderr=subprocess.STDOUT, env=self.env)
            self.pid = self.proc.pid
            if not wait_for(lambda: self.serving() or self.proc.poll() is not None, timeout=30):
                raise AssertionError(f"not mounted after 30 s; log:\n{self.read_log()}")
            if self.proc.poll() is not None:
                raise AssertionError(f"wheelhousefs exited {self.proc.returncode}:\n{self.read_log()}")
            self.returncode = 0

    def serving(self):
        """Mounted, and by this daemon (not a dead mount left on the same folder)."""
        try:
            return is_mounted(self.mountpoint) and self.status()["pid"] == self.pid
        except OSError:
            return False

    def path(self, rel=""):
        return os.path.join(self.mountpoint, rel)

    def status(self):
        return json.loads(os.getxattr(self.mountpoint, "user.wheelhouse.status"))

    def read_log(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def signal(self, sig):
        os.kill(self.pid, sig)

    def unmount(self, timeout=30):
        """fusermount3 -u, then wait for the daemon to exit; returns its exit status."""
        if is_mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", self.mountpoint], check=False, timeout=timeout)
        status = None
        if self.proc is not None:
            try:
                status = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                status = self.proc.wait()
        elif self.pid:
            wait_for(lambda: not os.path.exists(f"/proc/{self.pid}"), timeout=timeout)
        if is_mounted(self.mountpoint) and not self.serving():
            # Busy when asked (a file left open), and its daemon is gone now: never leave a
            # dead mount behind for the next run to trip over.
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)
        if not self.log.closed:
            self.log.close()
        if status not in (None, 0) and not self.killed:
            # A crash or a fatal error nobody asked for: show why, whatever the test says.
            sys.stderr.write(f"wheelhousefs on {self.mountpoint} ended with status {status}; "
                             f"its log:\n{self.read_log()[-20000:]}\n")
        return status

    def kill(self):
        """Crash the daemon (SIGKILL) and clean the dead mount up."""
        self.killed = True
        os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)
        self.log.close()


class MountedTestCase(unittest.TestCase):
    """A dataset, an emulator serving it, and a scratch folder per test class."""

    profile = "default"
    hub_args = ()

    @classmethod
    def setUpClass(cls):
        cls.data = testdata.dataset(cls.profile)
        with open(os.path.join(cls.data, "manifest.json"), encoding="utf-8") as f:
            cls.manifest = json.load(f)
        cls.tree = os.path.join(cls.data, "tree")
        cls.tmp = tempfile.mkdtemp(prefix="whfs-mount-")
        # Class cleanups, not tearDownClass: they run also when a subclass's setUpClass fails
        # after this one (then unittest calls no tearDownClass), and after any tearDownClass.
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.hub = None
        cls.addClassCleanup(cls._stop_hub)
        cls.hub = FakeHub({REPO: cls.tree}, os.path.join(cls.tmp, "hub"), extra_args=cls.hub_args)

    @classmethod
    def _stop_hub(cls):
        if cls.hub is not None:  # the class's emulator now (a class may have started another)
            cls.hub.stop()

    def scratch(self, name):
        d = os.path.join(self.tmp, f"{self.id().rsplit('.', 1)[-1]}-{name}")
        os.makedirs(d, exist_ok=True)
        return d

    def mount(self, name="m", **kw):
        m = Mount(self.hub.hub, self.scratch(name), **kw)
        self.addCleanup(m.unmount)
        return m
