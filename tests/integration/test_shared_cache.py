#!/usr/bin/env python3
"""Mounted tests of one cache shared the way users share it (issue "One cache, many
tenants"): private by default, read-only tiers for containers, many daemons on one cache
directory downloading each byte about once, and nothing another writer plants being served."""
import concurrent.futures
import grp
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import unittest

import mounttest
import sysusers
from mounttest import REPO, MountedTestCase, sha256_file, wait_for

HELPER = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "cache", "cache_test_helper")


_share_group = []


def share_group(test):
    """A group for caches shared deliberately (cache_group=): made once per test program and
    removed at its end (sysusers); root only, the test is skipped otherwise."""
    if not _share_group:
        ok, why = sysusers.usable()
        if not ok:
            test.skipTest(f"a group is made: {why}")
        _share_group.append(sysusers.group("share"))
    return _share_group[0]


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def cdn_bytes(log):
    """Body bytes the CDN served (206 ranges and whole 200 bodies)."""
    total = 0
    for e in log:
        if e["server"] != "cdn":
            continue
        if e["status"] == 206:
            a, b = map(int, re.match(r"bytes=(\d+)-(\d+)", e["range"]).groups())
            total += b - a + 1
        elif e["status"] == 200:
            total += int(e.get("bytes", 0))
    return total


class Privacy(MountedTestCase):
    profile = "small"

    def test_the_cache_is_private_whatever_the_umask(self):
        cache = os.path.join(self.scratch("c"), "cache")
        old = os.umask(0)
        try:
            m = self.mount(cache_dir=cache)
        finally:
            os.umask(old)
        some = next(p for p in self.manifest["files"] if p.endswith(".whl"))
        self.assertEqual(sha256_file(m.path(some)), self.manifest["files"][some]["sha256"])
        self.assertEqual(mode(cache), 0o700)
        for name in ("data.mdb", "lock.mdb", "session", "session.lock", "downloads.lock"):
            self.assertEqual(mode(os.path.join(cache, name)), 0o600, name)

    def test_a_cache_directory_of_another_user_or_open_to_others_is_refused(self):
        for how in ("other-user", "world-writable"):
            cache = os.path.join(self.scratch(how), "cache")
            os.makedirs(cache)
            if how == "other-user":
                os.chown(cache, 65534, 65534)
            else:
                os.chmod(cache, 0o777)
            r = subprocess.run([mounttest.BINARY, "-o", f"endpoint={self.hub.hub},cache_dir={cache}",
                                REPO, self.scratch(how + "-mnt")], capture_output=True, text=True,
                               timeout=60)
            self.assertNotEqual(r.returncode, 0, how)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("cache directory", r.stderr)
            self.assertIn("cache_group=", r.stderr)


class ReadOnlyCache(MountedTestCase):
    profile = "small"

    def setUp(self):
        self.warm = [p for p in self.manifest["files"] if p.startswith("natten/")][:6]
        self.cold = [p for p in self.manifest["files"] if p.startswith("cumesh/")][:4]
        self.cache = os.path.join(self.scratch("warm"), "cache")
        m = mounttest.Mount(self.hub.hub, self.scratch("warmer"), cache_dir=self.cache)
        for p in self.warm:
            sha256_file(m.path(p))
        m.unmount()
        # The cache as a container sees it: a read-only bind mount (or an image layer).
        self.ro = self.scratch("ro")
        subprocess.run(["mount", "--bind", self.cache, self.ro], check=True)
        self.addCleanup(subprocess.run, ["umount", self.ro], check=False)
        subprocess.run(["mount", "-o", "remount,bind,ro", self.ro], check=True)
        self.snapshot = {n: os.stat(os.path.join(self.cache, n)).st_mtime_ns
                         for n in os.listdir(self.cache)}

    def check(self, m, upper=None):
        self.hub.clear_log()
        for p in self.warm:
            self.assertEqual(sha256_file(m.path(p)), self.manifest["files"][p]["sha256"], p)
        served_from_cache = not [e for e in self.hub.log() if e["server"] == "cdn"]
        self.assertTrue(served_from_cache, "a file of the read-only cache was downloaded")
        for p in self.cold:  # misses: the Hub's bytes, verified
            self.assertEqual(sha256_file(m.path(p)), self.manifest["files"][p]["sha256"], p)
        self.assertEqual({n: os.stat(os.path.join(self.cache, n)).st_mtime_ns
                          for n in os.listdir(self.cache)}, self.snapshot,
                         "the read-only cache was written")

    def test_a_read_only_cache_serves_its_files_and_verifies_the_misses_in_memory(self):
        m = self.mount(cache_dir=self.ro)
        self.check(m)
        self.assertGreaterEqual(m.status()["fetch"]["in_memory"], len(self.cold))
        self.assertIn("read-only", m.read_log())

    def test_a_writable_upper_tier_keeps_what_the_read_only_one_lacks(self):
        upper = os.path.join(self.scratch("upper"), "cache")
        m = self.mount(cache_dir=self.ro, options=[f"cache_upper={upper}"])
        self.check(m, upper)
        self.assertEqual(m.status()["fetch"]["in_memory"], 0)
        m.unmount()
        # A second daemon over the same tiers: everything comes from the caches now.
        m2 = self.mount(name="m2", cache_dir=self.ro, options=[f"cache_upper={upper}"])
        self.hub.clear_log()
        for p in self.warm + self.cold:
            self.assertEqual(sha256_file(m2.path(p)), self.manifest["files"][p]["sha256"], p)
        self.assertFalse([e for e in self.hub.log() if e["server"] == "cdn"])


class Wheels:
    def wheels(self, n):
        ws = sorted((p for p in self.manifest["files"] if p.endswith(".whl")),
                    key=lambda p: -self.manifest["files"][p]["size"])
        return ws[:n]


class ManyDaemons(Wheels, MountedTestCase):
    profile = "default"  # wheels up to 64 MiB: downloads long enough to overlap

    def test_eight_daemons_on_one_cache_download_each_byte_about_once(self):
        cache = os.path.join(self.scratch("shared"), "cache")
        mounts = [self.mount(name=f"d{i}", cache_dir=cache) for i in range(8)]
        wheels = self.wheels(10)
        total = sum(self.manifest["files"][w]["size"] for w in wheels)
        self.hub.clear_log()
        script = ("import hashlib,sys\nfor p in sys.argv[1:]:\n h=hashlib.sha256()\n"
                  " f=open(p,'rb')\n while True:\n  b=f.read(1<<20)\n  if not b: break\n"
                  "  h.update(b)\n print(h.hexdigest())")
        procs = [subprocess.Popen([sys.executable, "-c", script] + [m.path(w) for w in wheels],
                                  stdout=subprocess.PIPE, text=True) for m in mounts]
        for p in procs:
            out = p.communicate(timeout=300)[0].split()
            self.assertEqual(out, [self.manifest["files"][w]["sha256"] for w in wheels])
        served = cdn_bytes(self.hub.log())
        waits = sum(m.status()["fetch"].get("shared_waits", 0) for m in mounts)
        print(f"8 daemons x 10 wheels ({total} bytes): the CDN served {served} bytes "
              f"({served / total:.2f}x); {waits} waits for another daemon's download")
        self.assertLessEqual(served, 1.25 * total)


class SharedTrust(Wheels, MountedTestCase):
    profile = "small"

    def test_a_block_planted_with_the_verified_flag_is_not_served(self):
        # A cache shared with a group: each member's daemon hashes a content once itself.
        cache = os.path.join(self.scratch("planted"), "cache")
        group = ["cache_group=" + share_group(self)]
        victim = self.wheels(1)[0]
        meta = self.manifest["files"][victim]
        m = self.mount(cache_dir=cache, options=group)
        self.assertEqual(sha256_file(m.path(victim)), meta["sha256"])
        m.unmount()
        # Someone who can write the cache replaces block 5 (with a valid block checksum),
        # leaving the record that says the file matched its hash.
        subprocess.run([HELPER, "plant", cache, meta["sha256"], str(meta["size"]), "5"],
                       check=True)
        m2 = self.mount(name="m2", cache_dir=cache, options=group)
        self.assertFalse(m2.status()["cache_trust"]["trusted"])
        self.assertEqual(sha256_file(m2.path(victim)), meta["sha256"])
        self.assertGreaterEqual(m2.status()["fetch"]["corrupt"], 1)

    def test_a_private_cache_is_served_as_recorded_and_a_once_shared_one_is_not(self):
        cache = os.path.join(self.scratch("private"), "cache")
        victim = self.wheels(1)[0]
        meta = self.manifest["files"][victim]
        m = self.mount(cache_dir=cache)
        self.assertEqual(sha256_file(m.path(victim)), meta["sha256"])
        m.unmount()
        # Only its owner can write it: a remount serves it without hashing it again.
        m2 = self.mount(name="m2", cache_dir=cache)
        trust = m2.status()["cache_trust"]
        self.assertTrue(trust["trusted"], trust)
        self.assertIn("private", trust["why"])
        self.hub.clear_log()
        self.assertEqual(sha256_file(m2.path(victim)), meta["sha256"])
        self.assertEqual(m2.status()["fetch"]["rechecks"], 0)
        self.assertFalse([e for e in self.hub.log() if e["server"] == "cdn"])
        m2.unmount()
        # Shared with a group once (a member could have planted blocks then), private again
        # now: it stays per-process verified, and the plant is not served.
        m3 = self.mount(name="m3", cache_dir=cache, options=["cache_group=" + share_group(self)])
        m3.unmount()
        subprocess.run([HELPER, "plant", cache, meta["sha256"], str(meta["size"]), "5"],
                       check=True)
        os.chmod(cache, 0o700)  # private again, by its owner's hand
        m4 = self.mount(name="m4", cache_dir=cache)
        self.assertEqual(mode(cache), 0o700)
        self.assertFalse(m4.status()["cache_trust"]["trusted"])
        self.assertIn("shared with a group", m4.status()["cache_trust"]["why"])
        self.assertEqual(sha256_file(m4.path(victim)), meta["sha256"])
        self.assertGreaterEqual(m4.status()["fetch"]["corrupt"], 1)
        # A data file others could write (an older version's mode, a umask) counts as shared.
        other = os.path.join(self.scratch("loose"), "cache")
        self.mount(name="m5", cache_dir=other).unmount()
        os.chmod(os.path.join(other, "data.mdb"), 0o660)
        m6 = self.mount(name="m6", cache_dir=other)
        self.assertFalse(m6.status()["cache_trust"]["trusted"])
        self.assertEqual(mode(os.path.join(other, "data.mdb")), 0o600)

    def test_thirty_two_daemons_share_one_cache(self):
        cache = os.path.join(self.scratch("x32"), "cache")
        mounts = [self.mount(name=f"d{i}", cache_dir=cache) for i in range(32)]
        wheels = self.wheels(4)

        def read(i):
            m = mounts[i]
            return [sha256_file(m.path(w)) for w in wheels]
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(read, range(32)))
        want = [self.manifest["files"][w]["sha256"] for w in wheels]
        self.assertEqual(results, [want] * 32)
        for m in mounts:
            log = m.read_log()
            self.assertNotIn("MDB_READERS_FULL", log)
            self.assertNotIn("verifying it in memory", log)  # nobody fell back


CACHE_NAMES = ("session.lock", "downloads.lock", "session", "session.tmp", "data.mdb",
               "lock.mdb")
CLI = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")


class Attacker:
    """The unprivileged member of the cache's group (sysusers: made for this test program)."""

    def __init__(self):
        self.group = sysusers.group("attk")
        self.gid = grp.getgrnam(self.group).gr_gid
        self.uid = sysusers.user("attk", groups=(self.group,)).uid

    def run(self, script, timeout=30):
        """Runs a shell script as the member."""
        return subprocess.run(["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                               "--clear-groups", "--", "/bin/sh", "-c", script],
                              capture_output=True, text=True, timeout=timeout)


def kill_daemons_of(cache):
    """SIGKILLs the wheelhousefs processes started on `cache` (a daemon that hung)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0] == mounttest.BINARY.encode() and any(
                f"cache_dir={cache},".encode() in a for a in cmd):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def fingerprint(path):
    st = os.lstat(path)
    with open(path, "rb") as f:
        content = f.read()
    return (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, content)


class SymlinkAttack(Wheels, MountedTestCase):
    """A member of cache_group replaces the names of a root daemon's shared cache by symbolic
    links or hard links to root-only files, FIFOs or directories. The daemon must neither
    change those files nor hang: it mounts and serves the right bytes, or refuses in one line."""
    profile = "small"

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: a root daemon, and a second user to attack it")
        if shutil.which("setpriv") is None:
            raise unittest.SkipTest("needs setpriv (util-linux)")
        super().setUpClass()
        os.chmod(cls.tmp, 0o711)  # the member reaches the cache directories, lists nothing else
        cls.attacker = Attacker()

    def setUp(self):
        self.victims = self.scratch("victims")
        self.secret = os.path.join(self.victims, "root-only")
        with open(self.secret, "w") as f:
            f.write("root's secret, mode 0600: not to be read, changed or truncated\n")
        os.chmod(self.secret, 0o600)
        # A file the member may hard link to (fs.protected_hardlinks lets a user link only
        # files it can read and write): its mode, owner and bytes must not change either.
        self.shared = os.path.join(self.victims, "group-rw")
        with open(self.shared, "w") as f:
            f.write("a group-writable file of root's, not a cache file\n")
        os.chown(self.shared, 0, self.attacker.gid)
        os.chmod(self.shared, 0o660)
        for v in (self.secret, self.shared):
            os.utime(v, ns=(1600000000 * 10**9, 1600000000 * 10**9))
        self.before = {v: fingerprint(v) for v in (self.secret, self.shared)}
        self.wheel = self.wheels(1)[0]

    def assert_victims_untouched(self):
        for v, fp in self.before.items():
            self.assertEqual(fingerprint(v), fp, f"{v} changed")

    def mount_as_root(self, cache, name):
        """A root daemon on the planted cache: serves the right bytes, or refuses in one line.
        Returns whether it mounted."""
        try:
            m = self.mount(name=name, cache_dir=cache, daemon=True,
                           options=[f"cache_group={self.attacker.group}", "read_timeout=5s"])
        except subprocess.TimeoutExpired:
            kill_daemons_of(cache)
            subprocess.run(["fusermount3", "-u", "-z", os.path.join(self.scratch(name), "mnt")],
                           capture_output=True, timeout=30)
            self.fail(f"the root daemon hung on the planted cache {cache}")
        if m.returncode != 0:
            lines = m.startup_stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, m.startup_stderr)
            self.assertIn(cache, lines[0])
            print(f"{name}: refused: {lines[0]}")
            return False
        out = subprocess.run([sys.executable, "-c",
                              "import hashlib,sys;print(hashlib.sha256("
                              "open(sys.argv[1],'rb').read()).hexdigest())", m.path(self.wheel)],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.stdout.strip(), self.manifest["files"][self.wheel]["sha256"],
                         out.stderr)
        m.unmount(timeout=60)
        print(f"{name}: mounted, served the right bytes")
        return True

    def shared_cache(self, name):
        """A group-shared cache the root daemon made, used once."""
        cache = os.path.join(self.scratch(name), "cache")
        m = self.mount(name=name + "-warm", cache_dir=cache,
                       options=[f"cache_group={self.attacker.group}"])
        self.assertEqual(sha256_file(m.path(self.wheel)),
                         self.manifest["files"][self.wheel]["sha256"])
        m.unmount()
        st = os.stat(cache)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o3770)
        self.assertEqual(st.st_gid, self.attacker.gid)
        return cache

    def test_a_member_cannot_replace_the_root_daemons_files(self):
        cache = self.shared_cache("sticky")
        present = [n for n in CACHE_NAMES if os.path.exists(os.path.join(cache, n))]
        self.assertIn("session.lock", present)
        for n in present:
            with self.subTest(name=n):
                r = self.attacker.run(f"cd '{cache}' && rm -f {n}")
                self.assertNotEqual(r.returncode, 0, f"the member unlinked {n}")
                self.assertIn("Operation not permitted", r.stderr)
                r = self.attacker.run(f"cd '{cache}' && ln -s '{self.secret}' planted.{n} && "
                                f"mv -f planted.{n} {n}; rc=$?; rm -f planted.{n}; exit $rc")
                self.assertNotEqual(r.returncode, 0, f"the member renamed over {n}")
                self.assertIn("Operation not permitted", r.stderr)
                st = os.lstat(os.path.join(cache, n))
                self.assertTrue(stat.S_ISREG(st.st_mode), n)
                self.assertEqual(st.st_uid, 0, n)
        # What does not exist yet (session.tmp) can still be planted: it is never followed.
        r = self.attacker.run(f"cd '{cache}' && ln -s '{self.secret}' session.tmp")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.mount_as_root(cache, "after"))
        self.assert_victims_untouched()

    def plant_before_first_mount(self, kind, names):
        """A fresh 03770 directory of root's shared with the group, where the member put
        `names` before root's first mount."""
        cache = os.path.join(self.scratch(f"{kind}-{len(names)}-{names[0]}"), "cache")
        os.mkdir(cache)
        os.chown(cache, 0, self.attacker.gid)
        os.chmod(cache, 0o3770)
        names = " ".join(names)
        if kind == "symlink":
            script = f"for n in {names}; do ln -s '{self.secret}' $n || exit 1; done"
        elif kind == "fifo":
            script = f"for n in {names}; do mkfifo -m 660 $n || exit 1; done"
        elif kind == "directory":
            script = f"for n in {names}; do mkdir $n && touch $n/x || exit 1; done"
        else:
            target = self.secret
            probe = self.attacker.run(f"cd '{cache}' && ln '{self.secret}' probe && rm probe")
            if probe.returncode != 0:  # fs.protected_hardlinks: a file it may read and write
                target = self.shared
            script = f"for n in {names}; do ln '{target}' $n || exit 1; done"
        r = self.attacker.run(f"cd '{cache}' && {script}")
        if r.returncode != 0 and kind == "hardlink":
            self.skipTest(f"the kernel lets this user link no file of root's: {r.stderr}")
        self.assertEqual(r.returncode, 0, r.stderr)
        return cache

    def check_planted_before_first_mount(self, kind):
        # Each name on its own, then all of them at once.
        for names in [[n] for n in CACHE_NAMES] + [list(CACHE_NAMES)]:
            with self.subTest(names=names):
                cache = self.plant_before_first_mount(kind, names)
                for i in range(2):  # and once more: nothing left half done
                    self.mount_as_root(cache, f"{kind}-{len(names)}-{names[0]}-{i}")
                    self.assert_victims_untouched()
                self.assertEqual(stat.S_IMODE(os.stat(cache).st_mode), 0o3770)

    def test_symlinks_planted_before_the_first_mount(self):
        self.check_planted_before_first_mount("symlink")

    def test_fifos_planted_before_the_first_mount(self):
        self.check_planted_before_first_mount("fifo")

    def test_hard_links_planted_before_the_first_mount(self):
        self.check_planted_before_first_mount("hardlink")

    def test_directories_planted_before_the_first_mount(self):
        self.check_planted_before_first_mount("directory")

    def test_the_cli_inspects_a_group_shared_cache_and_changes_no_mode(self):
        cache = self.shared_cache("cli")

        def modes():
            return {n: (stat.S_IMODE(os.lstat(os.path.join(cache, n)).st_mode),
                        os.lstat(os.path.join(cache, n)).st_gid)
                    for n in [""] + sorted(os.listdir(cache))}
        before = modes()
        r = subprocess.run([CLI, "cache", "--cache-dir", cache, "stats"], capture_output=True,
                           text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, "a group-writable cache opened as a private one")
        self.assertIn("cache_group", r.stderr)
        r = subprocess.run([CLI, "cache", "--cache-dir", cache, "--cache-group", self.attacker.group,
                            "stats"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("contents", r.stdout)
        # A member who does not own the directory inspects it too, and changes no mode.
        r = self.attacker.run(f"'{CLI}' cache --cache-dir '{cache}' --cache-group {self.attacker.group} ls",
                        timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(self.manifest["files"][self.wheel]["sha256"], r.stdout)
        self.assertEqual(modes(), before)


if __name__ == "__main__":
    mounttest.main()
