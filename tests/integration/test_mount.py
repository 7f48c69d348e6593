#!/usr/bin/env python3
"""Mounted tests of wheelhousefs against the Hub emulator: real FUSE mounts,
compared byte for byte with the source folder and errno for errno with a local read-only
folder."""
import concurrent.futures
import errno
import os
import random
import re
import signal
import socket
import subprocess
import time

import mounttest
from mounttest import REPO, MountedTestCase, is_mounted, non_socket_fds, sha256_file, wait_for


def files_of(manifest):
    return manifest["files"]


class MountBasics(MountedTestCase):
    def test_listing_sizes_and_bytes_equal_the_source(self):
        m = self.mount()
        seen = {}
        for root, dirs, files in os.walk(m.path()):
            if os.path.normpath(root) == os.path.normpath(m.mountpoint):
                # The synthetic views (test_current.py, test_callers.py).
                dirs.remove("current")
                dirs.remove("targets")
                self.assertTrue(os.path.islink(os.path.join(root, "current")))
            for name in files:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, m.path())
                seen[rel] = os.stat(full).st_size
        want = {p: meta["size"] for p, meta in files_of(self.manifest).items()}
        self.assertEqual(seen, want)
        for rel, meta in files_of(self.manifest).items():
            self.assertEqual(sha256_file(m.path(rel)), meta["sha256"], rel)
        st = os.stat(m.path(self.manifest["big_file"]))
        self.assertEqual(st.st_mode & 0o777, 0o444)
        self.assertEqual(os.stat(m.path("flash_attn")).st_mode & 0o777, 0o555)

    def test_random_reads_at_block_edges_eof_and_past_it(self):
        m = self.mount()
        big = self.manifest["big_file"]
        size = files_of(self.manifest)[big]["size"]
        with open(os.path.join(self.tree, big), "rb") as f:
            src = f.read()
        bs = 32744  # the cache's block size; edges on both sides of a few blocks
        offsets = [0, 1, bs - 1, bs, bs + 1, 2 * bs - 3, 7 * bs, size - bs - 1, size - 4096,
                   size - 1, size, size + 1, size + 10 ** 6]
        rng = random.Random(7)
        offsets += [rng.randrange(0, size) for _ in range(40)]
        fd = os.open(m.path(big), os.O_RDONLY)
        try:
            for off in offsets:
                for length in (1, 5, 4096, bs + 7, 300000):
                    got = os.pread(fd, length, off)
                    self.assertEqual(got, src[off:off + length], (off, length))
        finally:
            os.close(fd)

    def test_errno_like_a_local_read_only_folder(self):
        m = self.mount()
        local = self.scratch("local-ro")
        subprocess.run(["mount", "--bind", self.tree, local], check=True)
        self.addCleanup(lambda: subprocess.run(["umount", local], check=False))
        subprocess.run(["mount", "-o", "remount,bind,ro", local], check=True)
        some = self.manifest["big_file"]
        folder = os.path.dirname(some)

        def outcome(fn):
            try:
                r = fn()
                if isinstance(r, int) and r > 2:
                    os.close(r)
                return "ok"
            except OSError as e:
                return errno.errorcode.get(e.errno, e.errno)

        def read_dir_as_file(root):
            fd = os.open(os.path.join(root, folder), os.O_RDONLY)
            try:
                return os.read(fd, 10)
            finally:
                os.close(fd)

        checks = {
            "open missing": lambda r: os.open(os.path.join(r, "no/such/file"), os.O_RDONLY),
            "stat missing": lambda r: os.stat(os.path.join(r, folder, "nope.whl")),
            "open for writing": lambda r: os.open(os.path.join(r, some), os.O_WRONLY),
            "open read-write": lambda r: os.open(os.path.join(r, some), os.O_RDWR),
            "create": lambda r: os.open(os.path.join(r, folder, "new.whl"), os.O_CREAT | os.O_WRONLY, 0o644),
            "truncate": lambda r: os.truncate(os.path.join(r, some), 0),
            "mkdir": lambda r: os.mkdir(os.path.join(r, "newdir")),
            "rmdir": lambda r: os.rmdir(os.path.join(r, folder)),
            "unlink": lambda r: os.unlink(os.path.join(r, some)),
            "rename": lambda r: os.rename(os.path.join(r, some), os.path.join(r, "x.whl")),
            "symlink": lambda r: os.symlink("x", os.path.join(r, "link")),
            "chmod": lambda r: os.chmod(os.path.join(r, some), 0o777),
            "utime": lambda r: os.utime(os.path.join(r, some), (1, 1)),
            "setxattr": lambda r: os.setxattr(os.path.join(r, some), "user.x", b"1"),
            "read a folder": read_dir_as_file,
            "file as folder": lambda r: os.stat(os.path.join(r, some, "x")),
            "list a file": lambda r: os.listdir(os.path.join(r, some)),
            "open a file as a folder": lambda r: os.open(os.path.join(r, some), os.O_RDONLY | os.O_DIRECTORY),
        }
        for what, fn in checks.items():
            self.assertEqual(outcome(lambda: fn(m.path())), outcome(lambda: fn(local)), what)

    def test_xattrs_name_the_content(self):
        m = self.mount()
        big = self.manifest["big_file"]
        p = m.path(big)
        self.assertEqual(os.getxattr(p, "user.wheelhouse.sha256").decode(),
                         files_of(self.manifest)[big]["sha256"])
        self.assertEqual(os.getxattr(p, "user.wheelhouse.path").decode(), big)
        self.assertIn("user.wheelhouse.sha256", os.listxattr(p))
        status = m.status()
        self.assertEqual(status["repo"], REPO)
        self.assertRegex(status["commit"], r"^[0-9a-f]{40}$")
        with self.assertRaises(OSError) as cm:
            os.getxattr(p, "user.nothing")
        self.assertEqual(cm.exception.errno, errno.ENODATA)

    def test_stat_and_listing_never_download_file_bytes(self):
        self.hub.clear_log()
        m = self.mount()
        for root, dirs, files in os.walk(m.path()):
            for name in files:
                os.stat(os.path.join(root, name))
        log = self.hub.log()
        self.assertFalse([e for e in log if e["server"] == "cdn" or "/resolve" in e["path"]])
        # The whole tree came in one recursive listing (one page per 1000 entries).
        self.assertLessEqual(len([e for e in log if "/tree/" in e["path"]]), 2)

    def test_eight_readers_of_one_file_fetch_each_block_once(self):
        big = self.manifest["big_file"]
        size = files_of(self.manifest)[big]["size"]
        m = self.mount()
        self.hub.clear_log()
        script = ("import hashlib,sys\nh=hashlib.sha256()\nf=open(sys.argv[1],'rb')\n"
                  "while True:\n b=f.read(1<<20)\n if not b: break\n h.update(b)\nprint(h.hexdigest())")
        procs = [subprocess.Popen(["python3", "-c", script, m.path(big)], stdout=subprocess.PIPE)
                 for _ in range(8)]
        outs = [p.communicate(timeout=120)[0].decode().strip() for p in procs]
        self.assertEqual(set(outs), {files_of(self.manifest)[big]["sha256"]})
        ranges = []
        for e in self.hub.log():
            if e["server"] == "cdn" and e["status"] == 206:
                a, b = map(int, re.match(r"bytes=(\d+)-(\d+)", e["range"]).groups())
                ranges.append((a, b))
        ranges.sort()
        covered = sum(b - a + 1 for a, b in ranges)
        self.assertEqual(covered, size, "every byte fetched exactly once")
        for (a1, b1), (a2, b2) in zip(ranges, ranges[1:]):
            self.assertLess(b1, a2, "overlapping fetches")

    def test_daemon_leaks_no_file_descriptor(self):
        m = self.mount()
        before = non_socket_fds(m.pid)
        for rel in list(files_of(self.manifest))[:40]:
            with open(m.path(rel), "rb") as f:
                f.read()
        for root, dirs, files in os.walk(m.path()):
            pass
        self.assertTrue(wait_for(lambda: non_socket_fds(m.pid) == before, timeout=5),
                        f"{before} != {non_socket_fds(m.pid)}")
        self.assertEqual(m.unmount(), 0)

    def test_sigterm_unmounts_cleanly(self):
        m = self.mount()
        os.listdir(m.path())
        m.signal(signal.SIGTERM)
        self.assertEqual(m.proc.wait(timeout=30), 0)
        self.assertFalse(is_mounted(m.mountpoint))


class MountLifecycle(MountedTestCase):
    profile = "small"

    def test_daemon_mode_returns_when_ready_and_bad_input_fails_fast(self):
        m = self.mount(daemon=True)
        self.assertEqual(m.returncode, 0, m.startup_stderr)
        self.assertTrue(is_mounted(m.mountpoint))  # ready when the command returned
        self.assertIn("flash_attn", os.listdir(m.path()))
        m.unmount()
        bad = subprocess.run([mounttest.BINARY, "-o", "cache_size=lots", self.scratch("x")],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("cache_size must be a size", bad.stderr)
        self.assertEqual(len(bad.stderr.strip().splitlines()), 1)
        unknown = subprocess.run([mounttest.BINARY, "-o", "nosuchoption", self.scratch("y")],
                                 capture_output=True, text=True)
        self.assertEqual(unknown.returncode, 2)
        self.assertIn("unknown option 'nosuchoption'", unknown.stderr)

    def test_unreachable_hub_with_nothing_cached_fails_fast(self):
        work = self.scratch("down")
        start = time.monotonic()
        with socket.socket() as closed:  # a port of this test's own that refuses connections
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
            r = subprocess.run([mounttest.BINARY, "-o",
                                f"endpoint=http://127.0.0.1:{port},cache_dir={work}/c", REPO,
                                self.scratch("mnt")], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertLess(time.monotonic() - start, 30)
        # The cause first, short; what it means and what to check after it.
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 2, r.stderr)
        self.assertLessEqual(len(lines[0]), 160, lines[0])
        self.assertRegex(lines[0], rf"^wheelhousefs: cannot reach the Hub at http://127\.0\.0\.1:{port}: "
                                   r"connection refused \(\d+ tries in \d+ s\)$")
        self.assertIn("no copy", lines[1])
        self.assertNotIn("redacted", r.stderr)

    def test_remount_with_the_hub_stopped_reads_what_was_read_before(self):
        # A hub of its own, so that stopping it does not disturb the other tests.
        hub = mounttest.FakeHub({REPO: self.tree}, self.scratch("own-hub"))
        cache = os.path.join(self.scratch("cache"), "c")
        m = mounttest.Mount(hub.hub, self.scratch("m1"), cache_dir=cache)
        read = list(files_of(self.manifest))[:25]
        sums = {rel: sha256_file(m.path(rel)) for rel in read}
        m.unmount()
        hub.stop()
        m2 = mounttest.Mount(hub.hub, self.scratch("m2"), cache_dir=cache)
        self.addCleanup(m2.unmount)
        for rel in read:
            self.assertEqual(sha256_file(m2.path(rel)), sums[rel], rel)
            self.assertEqual(sums[rel], files_of(self.manifest)[rel]["sha256"])
        self.assertIn("offline fallback", m2.read_log())
        self.assertTrue(m2.status()["offline_fallback"])

    def test_sighup_after_a_new_commit_shows_the_new_tree(self):
        m = self.mount()
        # The kernel now keeps a negative entry for the name (the tree is a pinned commit): the
        # refresh must invalidate it, or the new file stays hidden for the entry timeout.
        self.assertFalse(os.path.exists(m.path("flash_attn/NEWS.txt")))
        old = m.status()["commit"]
        new = self.hub.ctl("/commit", {"repo": REPO, "add": {"flash_attn/NEWS.txt": "new wheels\n"}})
        try:
            m.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: m.status()["commit"] == new["sha"], timeout=20),
                            m.read_log())
            self.assertTrue(wait_for(lambda: os.path.exists(m.path("flash_attn/NEWS.txt")), timeout=10))
            with open(m.path("flash_attn/NEWS.txt")) as f:
                self.assertEqual(f.read(), "new wheels\n")
            self.assertIn("NEWS.txt", os.listdir(m.path("flash_attn")))
        finally:
            self.hub.ctl("/ref", {"repo": REPO, "kind": "branch", "name": "main", "target": old})

    def test_a_killed_daemon_is_replaced_on_the_same_mount_point(self):
        work = self.scratch("killed")
        m = mounttest.Mount(self.hub.hub, work)
        some = next(iter(files_of(self.manifest)))
        sha = sha256_file(m.path(some))
        m.killed = True
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
        self.addCleanup(subprocess.run, ["fusermount3", "-u", "-z", work + "/mnt"], check=False)
        with self.assertRaises(OSError) as cm:
            os.listdir(m.mountpoint)
        self.assertEqual(cm.exception.errno, errno.ENOTCONN)
        m2 = mounttest.Mount(self.hub.hub, work)  # same mount point, same cache
        self.addCleanup(m2.unmount)
        self.assertEqual(sha256_file(m2.path(some)), sha)
        self.assertIn("dead mount", m2.read_log())

    def test_mount_t_fuse_wheelhousefs(self):
        mnt = self.scratch("mnt-t")
        cache = self.scratch("cache-t")
        # mount(8) runs mount.fuse3, which finds "wheelhousefs" on the default PATH only (as it
        # would after `cmake --install`): link the build there for the test.
        link = "/usr/local/bin/wheelhousefs"
        if os.path.lexists(link):
            if os.path.realpath(link) != os.path.realpath(mounttest.BINARY):
                self.fail(f"{link} is another wheelhousefs; remove it to run this test")
        else:
            os.symlink(mounttest.BINARY, link)
            self.addCleanup(os.unlink, link)
        r = subprocess.run(["mount", "-t", "fuse.wheelhousefs", REPO, mnt, "-o",
                            f"endpoint={self.hub.hub},cache_dir={cache},rw,nodev,nosuid"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            self.assertTrue(is_mounted(mnt))
            self.assertIn("flash_attn", os.listdir(mnt))
            with open("/proc/self/mounts") as f:
                line = next(l for l in f if l.split()[1] == os.path.realpath(mnt))
            self.assertIn("fuse.wheelhousefs", line)
            self.assertIn("ro", line.split()[3].split(","))
        finally:
            subprocess.run(["umount", mnt], check=False)


class MountFaults(MountedTestCase):
    profile = "small"

    def test_corrupted_file_reads_as_eio_twice(self):
        victim = "natten/sm80/torch2.9-cu128/" + next(
            os.path.basename(p) for p in files_of(self.manifest) if p.startswith("natten/sm80/torch2.9-cu128/"))
        self.hub.fault(kind="corrupt", path=re.escape(victim))
        self.addCleanup(self.hub.clear_faults)
        m = self.mount()
        for attempt in range(2):
            with self.assertRaises(OSError, msg=f"attempt {attempt}") as cm:
                sha256_file(m.path(victim))
            self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertIn("do not match", m.read_log())
        # Other files are fine.
        other = next(p for p in files_of(self.manifest) if p.startswith("cumesh/"))
        self.assertEqual(sha256_file(m.path(other)), files_of(self.manifest)[other]["sha256"])

    def test_stalled_server_gives_eio_within_the_deadline_and_the_mount_answers(self):
        victim = next(p for p in files_of(self.manifest) if p.startswith("flex_gemm/sm89/"))
        self.hub.fault(kind="stall", server="cdn", seconds=120)
        self.addCleanup(self.hub.clear_faults)
        m = self.mount(options=["read_timeout=3s"])
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(lambda: open(m.path(victim), "rb").read())
            # Meanwhile the mount answers.
            self.assertIn("flash_attn", os.listdir(m.path()))
            os.stat(m.path(victim))
            with self.assertRaises(OSError) as cm:
                fut.result(timeout=60)
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertLess(time.monotonic() - start, 30)
        # Once the server answers again, reads recover (a stalled transfer is cut by its
        # low-speed limit, 15 s, and retried).
        self.hub.clear_faults()

        def recovered():
            try:
                return sha256_file(m.path(victim)) == files_of(self.manifest)[victim]["sha256"]
            except OSError:
                return False
        self.assertTrue(wait_for(recovered, timeout=60, interval=1), m.read_log())
        self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    mounttest.main()
