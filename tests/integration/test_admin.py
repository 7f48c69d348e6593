#!/usr/bin/env python3
"""Mounted tests of the mount and CLI as admins expect them: mount point refusals,
cache commands aimed at a mount, exit codes (every usage error exits 2), readable errors and
`wheelhouse doctor`."""
import glob
import json
import os
import re
import signal
import socket
import subprocess

import mounttest
import sysusers
from mounttest import REPO, MountedTestCase, is_mounted, sha256_file, wait_for

CLI = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")
OVERRIDES = ["arch=sm89", "torch=2.9", "cuda=12.8"]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


# Detaches, in the namespace it runs in, every wheelhouse mount it inherited (mountinfo escapes
# a space as \040, which printf %b reads back).
_DETACH_INHERITED = ("awk '/ - fuse\\.wheelhousefs / {print $5}' /proc/self/mountinfo | "
                     "while read -r m; do umount -l \"$(printf '%b' \"$m\")\" 2>/dev/null; done\n")


def in_private_namespace(script, **kw):
    """sh -c `script` in a mount namespace of its own where no wheelhouse mount of the machine
    is seen (they are detached there only), for what needs exactly one mount, or none."""
    return run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                _DETACH_INHERITED + script], **kw)


def wheelhouse_mount_count(path):
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return sum(1 for line in f if line.split()[4] == path)


class MountPoints(MountedTestCase):
    profile = "small"

    def fs(self, mnt, *opts):
        return run([mounttest.BINARY, "-o", ",".join([f"endpoint={self.hub.hub}",
                                                      f"cache_dir={mnt}-cache"] + list(opts)),
                    REPO, mnt])

    def assert_refused(self, r, words):
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(words, lines[0])

    def test_missing_file_and_non_empty_mount_points_are_refused(self):
        base = self.scratch("points")
        self.assert_refused(self.fs(os.path.join(base, "missing")), "does not exist")
        self.assertFalse(os.path.exists(os.path.join(base, "missing")))
        afile = os.path.join(base, "file")
        open(afile, "w").close()
        self.assert_refused(self.fs(afile), "is not a folder")
        full = os.path.join(base, "full")
        os.makedirs(full)
        with open(os.path.join(full, "keep.txt"), "w") as f:
            f.write("mine\n")
        self.assert_refused(self.fs(full), "is not empty (it holds 'keep.txt')")
        self.assertFalse(is_mounted(full))
        # -o nonempty mounts over it; its file is hidden while mounted and back after.
        r = self.fs(full, "nonempty")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            self.assertTrue(is_mounted(full))
            self.assertNotIn("keep.txt", os.listdir(full))
            self.assertIn("flash_attn", os.listdir(full))
        finally:
            subprocess.run(["fusermount3", "-u", full], check=True)
        with open(os.path.join(full, "keep.txt")) as f:
            self.assertEqual(f.read(), "mine\n")

    def test_a_user_who_may_not_use_fuse_gets_one_line_and_nothing_is_made(self):
        # A user, and a /dev/fuse only root may open (as some images have it): one line that
        # says what to do, before anything is created (the cache in the user's home, a log).
        ok, why = sysusers.usable()
        if not ok:
            self.skipTest(why)
        user = sysusers.user("nofuse")
        base = self.scratch("nofuse")
        os.chmod(self.tmp, 0o755)
        os.chmod(base, 0o755)
        home, mnt = os.path.join(base, "home"), os.path.join(base, "mnt")
        for d in (home, mnt):
            os.makedirs(d)
            os.chown(d, user.uid, user.gid)
        closed = os.path.join(base, "dev-fuse-0600")
        with open(closed, "w"):
            pass
        os.chmod(closed, 0o600)
        script = (f'mount --bind {closed} /dev/fuse && exec setpriv --reuid={user.uid} '
                  f'--regid={user.gid} --clear-groups env HOME={home} {mounttest.BINARY} '
                  f'-o endpoint={self.hub.hub} {REPO} {mnt}')
        r = run(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("/dev/fuse: Permission denied: this user may not use FUSE", lines[0])
        self.assertIn("wheelhouse doctor", lines[0])
        self.assertEqual(os.listdir(home), [], "something was made before the check")

    def test_a_mount_is_silent_on_its_terminal_and_ends_in_one_line(self):
        log = os.path.join(self.scratch("quiet"), "wh.log")
        self.hub.config(rate="64k")  # downloads in flight when it is stopped
        self.addCleanup(self.hub.config, rate="0")
        m = self.mount(daemon=True, options=[f"log_file={log}"])
        self.assertEqual(m.returncode, 0, m.startup_stderr)
        self.assertEqual(m.startup_stderr, "", "a mount that works says nothing")
        with open(log, encoding="utf-8") as f:
            self.assertIn("cache ", f.read())  # the cache's trust line went to the log
        big = max((p for p in self.manifest["files"] if p.endswith(".whl")),
                  key=lambda p: self.manifest["files"][p]["size"])
        reader = subprocess.Popen(["cat", m.path(big)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        self.addCleanup(reader.kill)
        self.assertTrue(wait_for(lambda: m.status()["transfers"], timeout=30))
        with open(log, encoding="utf-8") as f:
            before = len(f.read().splitlines())
        m.signal(signal.SIGTERM)
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{m.pid}"), timeout=30))
        with open(log, encoding="utf-8") as f:
            after = f.read().splitlines()[before:]
        self.assertEqual(len(after), 1, after)
        self.assertRegex(after[0], rf"unmounted {re.escape(m.mountpoint)} \(SIGTERM\)$")

    def test_a_folder_with_a_mount_on_it_is_refused(self):
        m = self.mount(daemon=True)
        self.assertEqual(m.returncode, 0, m.startup_stderr)
        r = self.fs(m.mountpoint, "nonempty")
        self.assert_refused(r, "already has a wheelhouse mount on it")
        self.assertIn("fusermount3 -u", r.stderr)
        self.assertEqual(wheelhouse_mount_count(m.mountpoint), 1)
        other = self.scratch("tmpfs")
        subprocess.run(["mount", "-t", "tmpfs", "whfs-test", other], check=True)
        self.addCleanup(subprocess.run, ["umount", other], check=False)
        self.assert_refused(self.fs(other), "already has a mount on it (tmpfs whfs-test)")

    def test_a_token_file_that_cannot_be_read_is_an_error(self):
        mnt = self.scratch("tok")
        r = self.fs(mnt, "token_file=/nonexistent/token")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("token_file=/nonexistent/token: No such file or directory", r.stderr)
        self.assertFalse(is_mounted(mnt))

    def test_an_empty_read_only_cache_says_what_to_do(self):
        ro = self.scratch("ro-cache")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "whfs-ro", ro], check=True)
        self.addCleanup(subprocess.run, ["umount", ro], check=False)
        mnt = self.scratch("ro-mnt")
        r = run([mounttest.BINARY, "-o", f"endpoint={self.hub.hub},cache_dir={ro}", REPO, mnt])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("is read-only and holds no cache: give cache_upper=", r.stderr)
        self.assertNotIn("mdb_env_open", r.stderr)

    def test_a_missing_repository_says_what_to_check(self):
        mnt = self.scratch("norepo")
        r = run([mounttest.BINARY, "-o", f"endpoint={self.hub.hub},cache_dir={mnt}-c",
                 "Nobody/nothing", mnt])
        self.assertEqual(r.returncode, 1, r.stderr)
        first, *rest = r.stderr.strip().splitlines()
        self.assertLessEqual(len(first), 160, first)
        self.assertIn("repository not found", first)
        self.assertIn("revision=", "\n".join(rest))
        self.assertIn("HF_TOKEN", "\n".join(rest))


class CacheCommands(MountedTestCase):
    profile = "small"

    def test_cache_commands_aimed_at_a_mount(self):
        m = self.mount(options=OVERRIDES + ["cache_size=3G"])
        wheel = glob.glob(m.path("current/flash_attn/*.whl"))[0]
        src = os.getxattr(wheel, "user.wheelhouse.source").decode()
        self.assertEqual(sha256_file(wheel), self.manifest["files"][src]["sha256"])
        stats = json.loads(run([CLI, "cache", "--mount", m.mountpoint, "stats", "--json"]).stdout)
        self.assertEqual(stats["dir"], m.cache_dir)
        self.assertEqual(stats["cap_bytes"], 3 << 30)
        self.assertGreaterEqual(stats["contents"], 1)
        # Any path inside the mount names it too.
        inside = json.loads(run([CLI, "cache", "--mount", m.path("flash_attn"), "stats",
                                 "--json"]).stdout)
        self.assertEqual(inside["dir"], m.cache_dir)
        listing = json.loads(run([CLI, "cache", "--mount", m.mountpoint, "ls", "--json"]).stdout)
        sha = self.manifest["files"][src]["sha256"]
        entry = next(e for e in listing if e["id"] == f"sha256:{sha}")
        self.assertIn(src, entry["paths"])
        human = run([CLI, "cache", "--mount", m.mountpoint, "ls"]).stdout
        self.assertIn(src, human)
        # evict with a path in the mount and no --mount: the mount's cache, not the default.
        ev = run([CLI, "cache", "evict", wheel], env=dict(os.environ, HOME=self.scratch("home"),
                                                          XDG_CACHE_HOME=self.scratch("xdg")))
        self.assertEqual(ev.returncode, 0, ev.stderr)
        self.assertIn("evicted", ev.stdout)
        self.assertNotIn(f"sha256:{sha}",
                         run([CLI, "cache", "--mount", m.mountpoint, "ls", "--json"]).stdout)

    def test_inspecting_a_missing_cache_creates_nothing(self):
        base = self.scratch("nocache")
        for sub in ("stats", "ls", "verify"):
            missing = os.path.join(base, "absent", "cache")
            r = run([CLI, "cache", "--cache-dir", missing, sub])
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("no cache in", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(base, "absent")), sub)
        # The default cache of a user who never mounted is not created either (on a machine
        # with no mount: else the cache is the mount's).
        home = self.scratch("home2")
        r = in_private_namespace(f"exec {CLI} cache stats",
                                 env=dict(os.environ, HOME=home, XDG_CACHE_HOME=home + "/c"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("no cache in", r.stderr)
        self.assertFalse(os.path.exists(home + "/c"))

    def test_options_of_cache_are_taken_after_its_subcommand(self):
        m = self.mount(options=OVERRIDES)
        with open(glob.glob(m.path("current/flash_attn/*.whl"))[0], "rb") as f:
            f.read()
        for args in (["cache", "stats", "--mount", m.mountpoint, "--json"],
                     ["cache", "--mount", m.mountpoint, "stats", "--json"],
                     ["cache", "stats", "--json", "--mount", m.path("flash_attn"),
                      "--log-level", "debug"]):
            r = run([CLI] + args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))
            self.assertEqual(json.loads(r.stdout)["dir"], m.cache_dir, args)


class ExitCodes(MountedTestCase):
    """Every usage error of both programs exits 2, with a line that names it."""

    profile = "small"

    def test_every_usage_error_exits_2(self):
        mnt = self.scratch("mnt")
        fs_cases = [
            ["-o", "cache_size=lots", mnt], ["-o", "nosuchoption", mnt], ["-o", "arch=sm8x", mnt],
            ["-o", "torch=latest", mnt], ["-o", "cuda=twelve", mnt], ["not a repo!", mnt],
            ["-o", "metrics=99999", mnt], ["-o", "metrics_textfile=rel.prom", mnt],
            ["-o", "current=sometimes", mnt], ["-o", "caller_timeout=0s", mnt],
            ["-o", "read_timeout=soon", mnt], ["-o", "connections=0", mnt], ["--bogus", mnt],
            [], ["a", "b", "c"], [os.path.join(mnt, "missing")],
        ]
        for args in fs_cases:
            r = run([mounttest.BINARY] + args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertTrue(r.stderr.startswith("wheelhousefs: "), (args, r.stderr))
            self.assertFalse(is_mounted(mnt))
        cli_cases = [
            ["bogus"], [], ["--bogus"], ["status", "--bogus"], ["detect", "-o", "arch=sm8x"],
            ["detect", "-o", "nonsense=1"], ["detect", "--pid", "-5"],
            ["prefetch", "--mount", mnt, "--target", "garbage"], ["prefetch", "-j", "0"],
            ["cache"], ["cache", "evict"], ["cache", "--mount", mnt, "--cache-dir", mnt, "stats"],
            ["publish"], ["publish", "not-a-wheel.tar.gz"], ["shell-hook"],
            ["shell-hook", "tcsh"], ["hashes", "--current", "--target", "k"],
            ["cache", "clear"],  # no --yes and no terminal to ask on
        ]
        for args in cli_cases:
            r = run([CLI] + args, stdin=subprocess.DEVNULL)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertTrue(r.stderr.strip(), args)
        bogus = run([CLI, "bogus"])
        self.assertIn("unknown command 'bogus'", bogus.stderr)
        # A misspelt option (or command) names the one meant.
        r = run([mounttest.BINARY, "-o", "cachedir=x", mnt])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unknown option 'cachedir'; did you mean 'cache_dir'?", r.stderr)
        r = run([CLI, "status", "--jsn"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unknown option '--jsn' for `wheelhouse status`; did you mean --json?",
                      r.stderr)
        r = run([CLI, "cache", "stats", "--mnt", mnt])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("did you mean --mount?", r.stderr)
        self.assertIn("did you mean mounts?", run([CLI, "mount"]).stderr)
        for prog in (mounttest.BINARY, CLI):
            self.assertIn("Exit status:", run([prog, "--help"]).stdout)

    def test_runtime_failures_exit_1_with_the_reason(self):
        m = self.mount(options=["current=caller"])
        r = run([CLI, "detect", "--pid", "999999"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("--pid 999999: no such process", r.stderr)
        self.assertNotIn("()", r.stdout)
        # current/ unresolved for this process (no GPU, no arch=): a reason, not 0 files.
        r = run([CLI, "prefetch", "--mount", m.mountpoint, "--current", "flash_attn"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("targets/unresolved", r.stderr)
        self.assertIn("wheelhouse detect", r.stderr)
        # .target says why there is no GPU in its arch axis, and the summary repeats it once;
        # the caller's fields point there instead of a third and fourth copy.
        with open(m.path("current/.target"), encoding="utf-8") as f:
            text = f.read()
        why = json.loads(text)["target"]["arch"]["missing"]
        self.assertTrue(why)
        self.assertLessEqual(text.count(json.dumps(why)[1:-1]), 2, text)


class Doctor(MountedTestCase):
    profile = "small"

    def test_doctor_passes_here_and_fails_without_dev_fuse(self):
        m = self.mount(daemon=True)
        self.assertEqual(m.returncode, 0, m.startup_stderr)
        # --mount: only this mount is asked about (the machine may hold other tenants' mounts,
        # dead ones included, which the check of every mount below reports).
        r = run([CLI, "doctor", "--endpoint", self.hub.hub, "--cache-dir", self.scratch("c"),
                 "--mount", m.mountpoint + "/"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        for check in ("/dev/fuse", "fusermount3", "cache", "token", "hub", "gpu", "python",
                      "mount"):
            self.assertTrue(any(ln.split()[1:2] == [check] for ln in lines if ln[:4] in
                                ("PASS", "WARN", "FAIL")), (check, r.stdout))
        self.assertRegex(r.stdout, r"PASS  hub +http://127\.0\.0\.1:\d+: DoctorPopi/python_wheelhouse"
                                   r"@main is [0-9a-f]{12}")
        self.assertIn(m.mountpoint, r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("warnings"))
        # A mount namespace where /dev/fuse is not the FUSE device: FAIL naming it, status 1.
        r = run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 f"mount --bind /dev/null /dev/fuse && exec {CLI} doctor --offline"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^FAIL  /dev/fuse +is not the FUSE device")
        self.assertIn("--device /dev/fuse", r.stdout)
        self.assertRegex(r.stdout, r"not ready: \d+ failed")
        # A mount whose daemon was killed: every-mount doctor fails naming it with the fix;
        # asked about the live one only, it passes; a --mount path that is no mount fails.
        dead = self.mount("dead")
        dead.killed = True
        os.kill(dead.pid, signal.SIGKILL)
        dead.proc.wait()
        r = run([CLI, "doctor", "--offline"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, rf"(?m)^FAIL  mount +{re.escape(dead.mountpoint)}: dead \(its daemon")
        self.assertIn(f"fix: fusermount3 -u -z {dead.mountpoint}", r.stdout)
        self.assertRegex(r.stdout, rf"(?m)^PASS  mount +{re.escape(m.mountpoint)}: ")
        r = run([CLI, "doctor", "--offline", "--mount", m.mountpoint])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn(dead.mountpoint, r.stdout)
        r = run([CLI, "doctor", "--offline", "--mount", dead.mountpoint, "--mount", self.tmp])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, rf"(?m)^FAIL  mount +{re.escape(dead.mountpoint)}: dead")
        self.assertRegex(r.stdout, rf"(?m)^FAIL  mount +{re.escape(self.tmp)}: not a wheelhouse")
        self.assertRegex(r.stdout, r"not ready: 2 failed")
        # An unreachable endpoint fails the hub check, saying the connection was refused: a
        # port of this test's own, bound and not listening (nothing else can answer on it).
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
            r = run([CLI, "doctor", "--endpoint", f"http://127.0.0.1:{port}"])
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout,
                         rf"(?m)^FAIL  hub +http://127\.0\.0\.1:{port}: .*connection refused")


if __name__ == "__main__":
    mounttest.main()
