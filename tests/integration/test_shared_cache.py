#!/usr/bin/env python3
"""Mounted tests of one cache shared the way users share it (issue "One cache, many
tenants"): private by default, read-only tiers for containers, many daemons on one cache
directory downloading each byte about once, and nothing another writer plants being served."""
import concurrent.futures
import os
import re
import stat
import subprocess
import sys

import mounttest
from mounttest import REPO, MountedTestCase, sha256_file, wait_for

HELPER = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "cache", "cache_test_helper")


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
        cache = os.path.join(self.scratch("planted"), "cache")
        victim = self.wheels(1)[0]
        meta = self.manifest["files"][victim]
        m = self.mount(cache_dir=cache)
        self.assertEqual(sha256_file(m.path(victim)), meta["sha256"])
        m.unmount()
        # Someone who can write the cache replaces block 5 (with a valid block checksum),
        # leaving the record that says the file matched its hash.
        subprocess.run([HELPER, "plant", cache, meta["sha256"], str(meta["size"]), "5"],
                       check=True)
        m2 = self.mount(name="m2", cache_dir=cache)
        self.assertEqual(sha256_file(m2.path(victim)), meta["sha256"])
        self.assertGreaterEqual(m2.status()["fetch"]["corrupt"], 1)

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


if __name__ == "__main__":
    mounttest.main()
