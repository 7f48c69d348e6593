#!/usr/bin/env python3
"""Mounted tests of what a hostile local user can try against a root daemon with
allow_other, done as a real second user (created here) of a real mount.

- Reentrant: caller paths that lead back into the mount itself (VIRTUAL_ENV, PATH, a symlink,
  a chroot-like root) are never followed, and 400 threads of one user doing so leave the mount
  answering everyone; a caller path on a hung FUSE filesystem (a second, stopped mount) costs
  that caller the deadline, and the mount stays free for everyone else.
- TargetBudgets: one user looking up a thousand made-up target keys does not refuse anyone
  else's, nor the keys that current/ leads to.
- PlantedListings: a listing plus matching "verified" blocks planted by a member of the cache's
  group, or by the writer of a read-only lower tier, is not believed: the Hub's bytes are served.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import mounttest
import sysusers
from mounttest import MountedTestCase, sha256_file, wait_for
from test_callers import TAG, activated, real_venv

FAKE_CUDART = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "targeting", "libfake_cudart.so")
HELPER = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "cache", "cache_test_helper")
HINT = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse-hint")
GPUS = {"FAKE_CUDA_DEVICES": "8.9"}
DEADLINE = 2.0  # the mount's deadline for reading a caller's files (CallerTargetsConfig)


class People:
    """The hostile user (a member of the cache's group), a bystander and that group: made once
    per test program with names of its own (sysusers), removed when it exits."""
    _made = None

    @classmethod
    def get(cls):
        if cls._made is None:
            group = sysusers.group("share")
            cls._made = (sysusers.user("hostile", groups=(group,)), sysusers.user("bystander"),
                         group)
        return cls._made


def as_user(uid, argv, env=None, timeout=60, groups=None):
    """Runs argv as `uid` (its gid nogroup, with `groups` or none); (returncode, out, err, s)."""
    cmd = ["setpriv", f"--reuid={uid}", "--regid=nogroup"]
    cmd += [f"--groups={','.join(groups)}"] if groups else ["--clear-groups"]
    start = time.monotonic()
    r = subprocess.run(cmd + list(argv), env=env or {"PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr, time.monotonic() - start


def needs_root(test):
    ok, why = sysusers.usable()
    if not ok:
        test.skipTest(f"a second user is made: {why}")


class Watch:
    """`ls` of a mount as root, every 0.2 s, in the background: the slowest answer."""

    def __init__(self, path):
        self.path, self.worst, self.count, self.failed = path, 0.0, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                r = subprocess.run(["ls", self.path], capture_output=True, timeout=30)
                if r.returncode != 0:
                    self.failed.append(r.stderr)
            except subprocess.TimeoutExpired:
                self.failed.append("ls timed out after 30 s")
            self.worst = max(self.worst, time.monotonic() - start)
            self.count += 1
            self.stop.wait(0.2)

    def done(self):
        self.stop.set()
        self.thread.join(timeout=60)
        return self.worst


class Hostile(MountedTestCase):
    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.chmod(cls.tmp, 0o755)

    def setUp(self):
        needs_root(self)
        hostile, bystander, group = People.get()
        self.uid, self.other_uid, self.group = hostile.uid, bystander.uid, group


class Reentrant(Hostile):
    def setUp(self):
        super().setUp()
        self.m = self.mount(env=GPUS, options=[f"cudart={FAKE_CUDART}", "allow_other"])
        self.mnt = self.m.mountpoint

    def readlink_as_user(self, env, timeout=30):
        env = dict({"PATH": "/usr/bin:/bin"}, **env)
        return as_user(self.uid, ["readlink", os.path.join(self.mnt, "current")], env, timeout)

    def test_a_path_into_the_mount_is_never_followed(self):
        link = os.path.join(self.scratch("links"), "into")
        os.symlink(self.mnt, link)
        hostile = {
            "VIRTUAL_ENV into current": {"VIRTUAL_ENV": f"{self.mnt}/current"},
            "VIRTUAL_ENV the mount": {"VIRTUAL_ENV": self.mnt},
            "PATH into current": {"PATH": f"{self.mnt}/current/bin:{self.mnt}/targets/x/bin:"
                                          "/usr/bin:/bin"},
            "a symlink to the mount": {"VIRTUAL_ENV": f"{link}/current"},
            "CONDA_PREFIX into targets": {"CONDA_PREFIX": f"{self.mnt}/targets/unresolved"},
        }
        for what, env in hostile.items():
            with self.subTest(what):
                rc, out, err, took = self.readlink_as_user(env)
                self.assertEqual(rc, 0, err)
                self.assertEqual(out.strip(), "targets/unresolved")
                self.assertLess(took, DEADLINE, f"{what}: {took:.2f} s")
        env = dict({"PATH": "/usr/bin:/bin"}, VIRTUAL_ENV=f"{self.mnt}/current")
        rc, out, err, _ = as_user(self.uid, ["cat", os.path.join(self.mnt, "current", ".target")], env)
        self.assertEqual(rc, 0, err)
        self.assertIn("inside this mount", json.loads(out)["why_empty"])

    def test_four_hundred_threads_pointing_into_the_mount_leave_it_answering(self):
        script = (
            "import os,sys,threading,time\n"
            "p=sys.argv[1]; worst=[0.0]; n=[0]; lock=threading.Lock()\n"
            "def run():\n"
            " end=time.monotonic()+4\n"
            " while time.monotonic()<end:\n"
            "  t=time.monotonic(); os.readlink(p); d=time.monotonic()-t\n"
            "  with lock: worst[0]=max(worst[0],d); n[0]+=1\n"
            "ts=[threading.Thread(target=run) for _ in range(400)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(n[0], worst[0])\n")
        env = {"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": f"{self.mnt}/current"}
        self.readlink_as_user(env)  # `current` in the kernel's cache, as the review had it
        watch = Watch(self.mnt)
        rc, out, err, took = as_user(self.uid, [sys.executable, "-c", script,
                                           os.path.join(self.mnt, "current")], env, timeout=120)
        worst_ls = watch.done()
        self.assertEqual(rc, 0, err)
        calls, worst = out.split()
        print(f"400 threads: {calls} readlinks in {took:.1f} s, the slowest {float(worst):.3f} s; "
              f"ls of the mount meanwhile: {watch.count} runs, the slowest {worst_ls:.3f} s")
        self.assertEqual(watch.failed, [])
        self.assertLess(worst_ls, 1.0)
        self.assertLess(float(worst), DEADLINE + 1)
        self.assertEqual(os.readlink(os.path.join(self.mnt, "current"))[:8], "targets/")

    def test_a_hung_filesystem_in_a_callers_paths_costs_only_the_deadline(self):
        hung = self.mount(name="hung", options=["allow_other"])
        os.kill(hung.pid, signal.SIGSTOP)
        self.addCleanup(os.kill, hung.pid, signal.SIGCONT)  # runs before its unmount
        env = {"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": hung.path("flash_attn/venv")}
        watch = Watch(self.mnt)
        results = [None] * 8

        def one(i):
            results[i] = self.readlink_as_user(env, timeout=60)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        own = time.monotonic()
        root_view = os.readlink(os.path.join(self.mnt, "current"))  # root: its own paths
        own = time.monotonic() - own
        worst_ls = watch.done()
        for rc, out, err, took in results:
            self.assertEqual(rc, 0, err)
            self.assertEqual(out.strip(), "targets/unresolved")
            self.assertLess(took, DEADLINE + 1.5)
        self.assertEqual(watch.failed, [])
        self.assertLess(worst_ls, 1.0)
        self.assertLess(own, 1.0)
        self.assertTrue(root_view.startswith("targets/"))
        t = self.m.status()["targets"]
        print(f"8 callers into a stopped mount: the slowest answered in "
              f"{max(r[3] for r in results):.2f} s; {t['timed_out']} timed out, "
              f"{t['refused_busy']} refused at once, {t['in_flight']} readings stuck; "
              f"ls meanwhile at worst {worst_ls:.3f} s")
        self.assertGreaterEqual(t["timed_out"], 1)
        self.assertGreaterEqual(t["refused_busy"], 1)
        self.assertLessEqual(t["in_flight"], 4)
        # The prompt hook's helper asks every mount it is given (by default every one on the
        # machine, a stopped one too): that one costs the prompt its 3 s deadline, not forever,
        # and the mount that answers still takes the hint.
        took = time.monotonic()
        r = subprocess.run([HINT, "-v", hung.mountpoint, self.mnt], capture_output=True,
                           text=True, env={"PATH": "/usr/bin:/bin"}, timeout=30)
        took = time.monotonic() - took
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"{hung.mountpoint}: no answer in 3 s (its daemon is stopped or hung)",
                      r.stderr)
        self.assertIn(f"{self.mnt}: targets/", r.stdout)
        self.assertLess(took, 3 + 1.5)
        # Once that filesystem answers again, the stuck readings end.
        os.kill(hung.pid, signal.SIGCONT)
        self.assertTrue(wait_for(lambda: self.m.status()["targets"]["in_flight"] == 0,
                                 timeout=30))


KEYS = [f"sm{a}-torch2.{t}-cu{c}-cp3{p}"
        for a in (70, 75, 80, 86, 90, 100, 120) for t in range(10)
        for c in (118, 121, 124, 126) for p in (9, 10, 11, 12)]


class TargetBudgets(Hostile):
    def test_one_user_cannot_spend_the_target_folders_of_all(self):
        venv = os.path.join(self.scratch("venv"), "venv")
        real_venv(venv, "2.9.0+cu128", "12.8")  # current/ -> sm89-torch2.9-cu128-cp3XX
        own = activated(venv)
        m = self.mount(env=GPUS, options=[f"cudart={FAKE_CUDART}", "allow_other"])
        script = ("import os,sys\nok=bad=0\nfor k in sys.argv[2:]:\n"
                  " try: os.stat(os.path.join(sys.argv[1],'targets',k)); ok+=1\n"
                  " except FileNotFoundError: bad+=1\nprint(ok,bad)")
        rc, out, err, _ = as_user(self.uid, [sys.executable, "-c", script, m.mountpoint] + KEYS[:1100],
                                  timeout=300)
        self.assertEqual(rc, 0, err)
        made, refused = map(int, out.split())
        print(f"one user looked up 1100 made-up keys: {made} made, {refused} refused")
        self.assertLessEqual(made, 64)
        self.assertGreaterEqual(refused, 1100 - 64)
        # Another user's own made-up keys, and everyone's current/, still work.
        rc, out, err, _ = as_user(self.other_uid, [sys.executable, "-c", script, m.mountpoint] +
                                  KEYS[1100:1110])
        self.assertEqual((rc, out.split()), (0, ["10", "0"]), err)
        ls = ["ls", m.path("current/")]
        self.assertIn("flash_attn", subprocess.run(ls, env=own, capture_output=True, text=True,
                                                   timeout=60).stdout.split())
        m.signal(signal.SIGHUP)
        self.assertIn("flash_attn", subprocess.run(ls, env=own, capture_output=True, text=True,
                                                   timeout=60).stdout.split())
        self.assertIn("looked up", m.read_log())


class Probe(Hostile):
    def test_a_failed_gpu_probe_on_refresh_keeps_the_last_good_one(self):
        lib = os.path.join(self.scratch("lib"), "libcudart.so")
        shutil.copy(FAKE_CUDART, lib)
        m = self.mount(env=GPUS, options=[f"cudart={lib}"])
        before = m.status()["targets"]["gpus"]
        self.assertEqual([g["arch"] for g in before], ["sm89"])
        with open(lib, "wb") as f:
            f.write(b"not a library any more")
        m.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: "the GPU probe failed" in m.read_log(), timeout=30),
                        m.read_log())
        self.assertEqual(m.status()["targets"]["gpus"], before)


class PlantedListings(Hostile):
    def setUp(self):
        super().setUp()
        wheels = sorted((p for p in self.manifest["files"] if p.endswith(".whl")),
                        key=lambda p: self.manifest["files"][p]["size"])
        self.victim = wheels[len(wheels) // 2]
        self.want = self.manifest["files"][self.victim]["sha256"]
        self.planted = os.path.join(self.scratch("planted"), "planted.whl")
        with open(self.planted, "wb") as f:
            f.write(b"PK\x05\x06planted by a co-tenant " + b"\0" * 8)
        os.chmod(self.planted, 0o644)
        os.chmod(os.path.dirname(self.planted), 0o755)

    def plant(self, cache, status, uid=None):
        argv = [HELPER, "plant-listing", cache, status["endpoint"], mounttest.REPO,
                status["commit"], self.victim, self.planted]
        if uid is None:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout
        rc, out, err, _ = as_user(uid, argv, groups=[self.group])
        self.assertEqual(rc, 0, err)
        return out

    def served(self, m):
        return (sha256_file(m.path(self.victim)),
                os.getxattr(m.path(self.victim), "user.wheelhouse.sha256").decode())

    def test_a_listing_planted_by_a_group_member_is_not_believed(self):
        root = self.scratch("group")
        os.chmod(root, 0o755)
        cache = os.path.join(root, "cache")
        opts = [f"cache_group={self.group}"]
        m = self.mount(cache_dir=cache, options=opts)
        self.assertEqual(sha256_file(m.path(self.victim)), self.want)
        status = m.status()
        m.unmount()
        self.plant(cache, status, uid=self.uid)
        m2 = self.mount(name="m2", cache_dir=cache, options=opts)
        self.assertEqual(self.served(m2), (self.want, self.want))
        self.assertIn("differs from the Hub's", m2.read_log())
        m2.unmount()
        # The plant was real: a daemon told to trust the cache's writers serves it (planted
        # again: the wary daemon put the Hub's listing back).
        self.plant(cache, status, uid=self.uid)
        m3 = self.mount(name="m3", cache_dir=cache, options=opts + ["cache_trusted"])
        got, listed = self.served(m3)
        self.assertNotEqual(listed, self.want)
        self.assertEqual(got, listed)

    def test_metadata_planted_by_a_group_member_is_not_served_to_pip(self):
        """What pip resolves from (a wheel's .metadata file of simple/) is read from the wheel
        itself, from bytes this daemon fetched or verified, never a co-tenant's record."""
        root = self.scratch("meta")
        os.chmod(root, 0o755)
        cache = os.path.join(root, "cache")
        opts = [f"cache_group={self.group}", "arch=sm89", "torch=2.9", "cuda=12.8"]
        key = f"sm89-torch2.9-cu128-{TAG}"
        m = self.mount(cache_dir=cache, options=opts)
        page = m.path(f"targets/{key}/simple/flash-attn")
        name = next(f for f in os.listdir(page) if f.endswith(".whl.metadata"))
        with open(os.path.join(page, name), "rb") as f:
            genuine = f.read()
        sha = os.getxattr(os.path.join(page, name[:-len(".metadata")]),
                          "user.wheelhouse.sha256").decode()
        m.unmount()
        planted = os.path.join(self.scratch("planted-meta"), "METADATA")
        with open(planted, "wb") as f:
            f.write(genuine.replace(b"\n\n", b"\nRequires-Dist: evil-package\n\n", 1)
                    if b"\n\n" in genuine else genuine + b"Requires-Dist: evil-package\n")
        os.chmod(planted, 0o644)
        os.chmod(os.path.dirname(planted), 0o755)
        rc, out, err, _ = as_user(self.uid, [HELPER, "plant-metadata", cache, sha, planted],
                                  groups=[self.group])
        self.assertEqual(rc, 0, err)
        m2 = self.mount(name="m2", cache_dir=cache, options=opts)
        with open(m2.path(f"targets/{key}/simple/flash-attn/{name}"), "rb") as f:
            served = f.read()
        self.assertNotIn(b"evil-package", served)
        self.assertEqual(served, genuine)
        m2.unmount()
        # The plant was real: a daemon told to trust the cache's writers serves it.
        as_user(self.uid, [HELPER, "plant-metadata", cache, sha, planted], groups=[self.group])
        m3 = self.mount(name="m3", cache_dir=cache, options=opts + ["cache_trusted"])
        with open(m3.path(f"targets/{key}/simple/flash-attn/{name}"), "rb") as f:
            self.assertIn(b"evil-package", f.read())

    def test_a_listing_planted_in_a_read_only_tier_is_not_believed(self):
        lower = os.path.join(self.scratch("lower"), "cache")
        m = self.mount(cache_dir=lower)
        self.assertEqual(sha256_file(m.path(self.victim)), self.want)
        status = m.status()
        m.unmount()
        self.plant(lower, status)  # whoever made the image's cache
        subprocess.run(["mount", "--bind", lower, lower], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", lower], check=False)
        subprocess.run(["mount", "-o", "remount,bind,ro", lower], check=True)
        upper = self.scratch("upper")
        for name, opts in (("tiered", [f"cache_upper={upper}"]), ("ro", [])):
            with self.subTest(name):
                m2 = self.mount(name=name, cache_dir=lower, options=opts)
                self.assertEqual(self.served(m2), (self.want, self.want))
                m2.unmount()


if __name__ == "__main__":
    mounttest.main()
