#!/usr/bin/env python3
"""Mounted tests of running it for real: the `wheelhouse` CLI against a live mount
and its cache, the site cache shared by two mounts, and `tools/dev.sh try`."""
import glob
import json
import os
import subprocess
import sys

import mounttest
from mounttest import is_mounted, REPO, FakeHub, Mount, MountedTestCase, sha256_file, wait_for

CLI = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")
SITE_CACHE = os.path.join(mounttest.SOURCE_DIR, "tools", "site-cache", "run-site-cache.sh")
OVERRIDES = ["arch=sm89", "torch=2.9", "cuda=12.8"]


def cli(*args, check=True):
    r = subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"wheelhouse {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def cdn_bytes(log):
    return sum(e["bytes"] for e in log if e["server"] == "cdn" and e["status"] in (200, 206))


class Cli(MountedTestCase):
    profile = "small"

    def test_status_reads_the_running_mount(self):
        m = self.mount(options=OVERRIDES)
        st = json.loads(cli("status", m.mountpoint, "--json").stdout)
        self.assertEqual(st["repo"], REPO)
        self.assertEqual(st["pid"], m.pid)
        self.assertEqual(st["targets"]["overrides"]["arch"], "sm89")
        self.assertEqual(st["targets"]["mode"], "per-caller")
        human = cli("status", m.mountpoint).stdout
        self.assertIn("follows each process", human)
        self.assertIn(st["commit"], human)
        self.assertIn("cache", human)
        notours = cli("status", self.scratch("plain"), check=False)
        self.assertEqual(notours.returncode, 3)
        self.assertIn("not a wheelhouse-fs mount", notours.stderr)

    def test_prefetch_a_target_of_another_machine(self):
        m = self.mount(options=OVERRIDES)
        key = "sm120-torch2.7-cu128-cp312"
        r = cli("prefetch", "--mount", m.mountpoint, "--target", key, "--current", "flash_attn")
        self.assertEqual(r.stdout.count("fetched "), 1, r.stdout)
        wheel = glob.glob(m.path(f"targets/{key}/flash_attn/*.whl"))[0]
        self.assertIn("cp312", wheel)
        self.hub.clear_log()
        sha256_file(wheel)
        self.assertEqual([e for e in self.hub.log() if e["server"] == "cdn"], [])

    def test_prefetch_current_then_reads_need_no_download(self):
        m = self.mount(options=OVERRIDES)
        r = cli("prefetch", "--mount", m.mountpoint, "--current", "flash_attn", "natten")
        self.assertEqual(r.stdout.count("fetched "), 2, r.stdout)  # plain lines off a terminal
        self.hub.clear_log()
        for w in glob.glob(m.path("current/flash_attn/*.whl")) + glob.glob(m.path("current/natten/*.whl")):
            src = os.getxattr(w, "user.wheelhouse.source").decode()
            self.assertEqual(sha256_file(w), self.manifest["files"][src]["sha256"])
        self.assertEqual(cdn_bytes(self.hub.log()), 0)
        bad = cli("prefetch", "--mount", m.mountpoint, "no/such/path", check=False)
        self.assertEqual(bad.returncode, 1)

    def test_cache_commands_work_while_a_mount_uses_the_cache(self):
        m = self.mount(options=OVERRIDES)
        wheel = glob.glob(m.path("current/cumesh/*.whl"))[0]
        src = os.getxattr(wheel, "user.wheelhouse.source").decode()
        self.assertEqual(sha256_file(wheel), self.manifest["files"][src]["sha256"])
        # The mount records its usage in batches; let it write them.
        wait_for(lambda: json.loads(cli("cache", "--cache-dir", m.cache_dir, "stats", "--json").stdout)["contents"] > 0,
                 timeout=10)
        # Reading the figures of a live cache changes nothing of it: same store, still open.
        before = (os.stat(os.path.join(m.cache_dir, "data.mdb")).st_ino,
                  open(os.path.join(m.cache_dir, "session")).read())
        stats = json.loads(cli("cache", "--cache-dir", m.cache_dir, "stats", "--json").stdout)
        self.assertGreaterEqual(stats["contents"], 1)
        self.assertEqual((os.stat(os.path.join(m.cache_dir, "data.mdb")).st_ino,
                          open(os.path.join(m.cache_dir, "session")).read()), before)
        self.assertEqual(os.listdir(os.path.dirname(m.cache_dir)).count("cache"), 1)
        self.assertEqual(stats["block_size"], 32744)
        listing = json.loads(cli("cache", "--cache-dir", m.cache_dir, "ls", "--json").stdout)
        sha = self.manifest["files"][src]["sha256"]
        entry = next(e for e in listing if e["id"] == f"sha256:{sha}")
        self.assertTrue(entry["verified"])
        verify = json.loads(cli("cache", "--cache-dir", m.cache_dir, "verify", "--json").stdout)
        self.assertGreaterEqual(verify["checked"], 1)
        self.assertEqual(verify["corrupt"], 0)
        self.assertIn("evicted", cli("cache", "--cache-dir", m.cache_dir, "evict", wheel).stdout)
        self.assertNotIn(f"sha256:{sha}",
                         cli("cache", "--cache-dir", m.cache_dir, "ls", "--json").stdout)
        self.hub.clear_log()
        fd = os.open(wheel, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        # A cache a mount uses is not emptied by accident: that takes --force.
        busy = cli("cache", "--cache-dir", m.cache_dir, "clear", "--yes", check=False)
        self.assertEqual(busy.returncode, 1)
        self.assertIn("a mount (or another process) uses the cache", busy.stderr)
        self.assertIn("emptied", cli("cache", "--cache-dir", m.cache_dir, "clear", "--yes",
                                     "--force").stdout)
        self.assertEqual(json.loads(cli("cache", "--cache-dir", m.cache_dir, "stats", "--json").stdout)["contents"], 0)
        refuse = cli("cache", "--cache-dir", m.cache_dir, "clear", check=False)
        self.assertEqual(refuse.returncode, 2)  # no --yes and no terminal to ask on

    def test_detect_reports_each_axis(self):
        r = cli("detect", "--json", "-o", "arch=sm86,torch=2.9,cuda=12.6", check=False)
        t = json.loads(r.stdout)
        self.assertEqual(t["arch"]["value"], "sm86")
        self.assertEqual(t["cuda"]["value"], "12.6")
        self.assertEqual(r.returncode, 0)
        key = cli("detect", "--key", "-o", "arch=sm86,torch=2.9,cuda=12.6").stdout.strip()
        self.assertEqual(key, f"sm86-torch2.9-cu126-{t['python_tag']['value']}")
        self.assertEqual(t["key"], key)
        # Another process's target (here: one with no Python at all).
        other = subprocess.Popen(["sleep", "60"], env={"PATH": "/nonexistent"}, executable="/bin/sleep")
        self.addCleanup(other.wait)
        self.addCleanup(other.kill)
        wait_for(lambda: os.readlink(f"/proc/{other.pid}/exe").endswith("/sleep"))
        r = cli("detect", "--pid", str(other.pid), "-o", "arch=sm86", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no python3 on the process's PATH (/nonexistent)", r.stdout)
        self.assertIn("targets/unresolved", r.stdout)
        bad = cli("detect", "-o", "arch=gpu9000", check=False)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("arch", bad.stderr)


class SiteCache(MountedTestCase):
    """Two mounts with their own cache directories behind one nginx site cache: the emulator
    serves each byte once."""
    profile = "small"
    # nginx follows the Hub's redirect itself; its resolver does not read /etc/hosts, so the
    # test CDN is named by address.
    hub_args = ("--cdn-host", "127.0.0.2")

    def test_two_mounts_through_the_site_cache(self):
        site = self.scratch("site-cache")
        port = 18000 + os.getpid() % 1000
        subprocess.run([SITE_CACHE, "start", str(port), self.hub.hub, site], check=True, timeout=30)
        self.addCleanup(subprocess.run, [SITE_CACHE, "stop", site], timeout=30)
        endpoint = f"http://127.0.0.1:{port}"
        wanted = [p for p in self.manifest["files"] if p.startswith(("flash_attn/sm89/", "natten/sm80/"))]
        self.hub.clear_log()
        for name in ("a", "b"):
            m = Mount(endpoint, self.scratch(f"node-{name}"))
            try:
                for rel in wanted:
                    self.assertEqual(sha256_file(m.path(rel)), self.manifest["files"][rel]["sha256"], rel)
            finally:
                m.unmount()
        log = self.hub.log()
        total = sum(self.manifest["files"][p]["size"] for p in wanted)
        # Each byte left the emulator's CDN once (slices of 4 MiB round up to the file ends).
        self.assertEqual(cdn_bytes(log), total)
        resolves = [e for e in log if "/resolve/" in e["path"]]
        self.assertLessEqual(len(resolves), len(wanted) * 2)
        self.assertFalse([e for e in log if e["server"] == "cdn" and e["auth"]])


class Try(MountedTestCase):
    profile = "small"

    def test_try_leaves_a_mount_a_venv_installs_from_until_it_is_stopped(self):
        root = self.scratch("try")
        env = dict(os.environ, WHFS_BUILD_DIR=mounttest.BUILD_DIR, WHEELHOUSE_TRY=root)
        script = os.path.join(mounttest.SOURCE_DIR, "tools", "dev", "try.sh")
        self.addCleanup(subprocess.run, [script, "stop"], env=env, capture_output=True)
        r = subprocess.run([script], capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        mnt = os.path.join(root, "mnt")
        self.assertIn(f"mounted on {mnt}", r.stdout)
        self.assertTrue(is_mounted(mnt))
        venv = os.path.join(self.scratch("venv"), "v")
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        wheels = glob.glob(os.path.join(mnt, "current", "flash_attn", "*.whl"))
        self.assertEqual(len(wheels), 1, wheels)
        r = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-deps",
                            "--disable-pip-version-check"] + wheels, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                            "import flash_attn; print(flash_attn.where())"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.stdout.strip(), "flash_attn/sm89/torch2.9-cu128", r.stderr)
        r = subprocess.run([script, "stop"], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(is_mounted(mnt))
        self.assertFalse(os.path.exists(root))


if __name__ == "__main__":
    mounttest.main()
