#!/usr/bin/env python3
"""The container recipes of tools/docs/containers.md, run in real podman containers.

Images come from a debootstrap root of Debian 12 (podman_images.py), never from a registry;
each recipe runs as that page writes it, adapted only in the image's name, the mount's folder and
the emulator's endpoint:
- the host's mount bind-mounted `:ro,rslave` into two containers whose images have different
  torch in their venv: each `pip install /wheelhouse/current/flash_attn/*.whl` installs its own
  build, and NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES given to a container choose its GPU
  (the tests' fake CUDA runtime, which the host's daemon loads);
- the daemon inside a container (/dev/fuse, CAP_SYS_ADMIN), a warm cache in the image and a
  tmpfs `cache_upper`: the warm wheel is served without the network, the others are kept in
  the tmpfs;
- two containers, each with its daemon, on one cache directory of the host: every byte right,
  and the CDN serves each byte about once.
Skipped (exit 77, with the reason) only where rootful podman cannot run; .ci/run checks that
it ran wherever `podman info` works.
"""
import concurrent.futures
import json
import os
import subprocess

import mounttest
import podman_images as images
from mounttest import REPO, MountedTestCase
from test_shared_cache import cdn_bytes

FAKE_CUDART = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "targeting", "libfake_cudart.so")
GPUS = {"FAKE_CUDA_DEVICES": "8.9,8.6"}  # device 0 is sm89, device 1 is sm86
WHEEL = "flash_attn-2.8.3+cu128torch{t}-cp311-cp311-linux_x86_64.whl"
HASH_SCRIPT = ("import hashlib,sys\nfor p in sys.argv[1:]:\n h=hashlib.sha256()\n"
               " f=open(p,'rb')\n while True:\n  b=f.read(1<<20)\n  if not b: break\n"
               "  h.update(b)\n print(h.hexdigest())\n")


def run(*args, timeout=600):
    # --pull=never: an image that is not here is an error, never a registry request.
    return images.podman("run", "--rm", "--pull=never", *args, check=False, timeout=timeout)


class ContainerImages:
    """The images every class here uses: the package, and two venvs with torch 2.9 and 2.7."""

    @classmethod
    def make_images(cls):
        deb = images.build_deb()
        cls.pkg_image = images.with_package(images.base_image(deb), deb)
        cls.fake = images.layered(cls.pkg_image, [(FAKE_CUDART, "/opt/fake/libfake_cudart.so")],
                                  name="fake")
        cls.image_29 = images.venv_image(cls.fake, "2.9.0+cu128", "12.8")
        cls.image_27 = images.venv_image(cls.fake, "2.7.1+cu128", "12.8")


class HostMount(ContainerImages, MountedTestCase):
    """docker run --gpus ... -v /mnt/wheelhouse:/wheelhouse:ro,rslave IMAGE pip install ..."""

    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.make_images()

    def setUp(self):
        self.m = self.mount(env=GPUS, options=[f"cudart={FAKE_CUDART}", "allow_other"])

    def install(self, image, *env):
        """README's command in a container of `image`; (what it installed, its current/)."""
        args = []
        for e in env:
            args += ["-e", e]
        r = run("--network", "none", *args, "-v", f"{self.m.mountpoint}:/wheelhouse:ro,rslave",
                image, "sh", "-c",
                "pip install --no-deps /wheelhouse/current/flash_attn/*.whl >/tmp/pip.log 2>&1"
                " || { cat /tmp/pip.log; exit 1; }; "
                "python -c 'import flash_attn; print(flash_attn.where())'; "
                "readlink /wheelhouse/current")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.split()
        return lines[-2].removeprefix("flash_attn/"), lines[-1]

    def test_two_containers_install_their_own_build_at_once(self):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            a = pool.submit(self.install, self.image_29, "NVIDIA_VISIBLE_DEVICES=0")
            b = pool.submit(self.install, self.image_27, "NVIDIA_VISIBLE_DEVICES=0")
            a, b = a.result(), b.result()
        self.assertEqual(a, ("sm89/torch2.9-cu128", "targets/sm89-torch2.9-cu128-cp311"))
        self.assertEqual(b, ("sm89/torch2.7-cu128", "targets/sm89-torch2.7-cu128-cp311"))

    def test_the_gpus_given_to_a_container_choose_its_arch(self):
        # Device 1 is sm86: sm80 builds run there (same major, lower minor).
        self.assertEqual(self.install(self.image_29, "NVIDIA_VISIBLE_DEVICES=1"),
                         ("sm80/torch2.9-cu128", "targets/sm86-torch2.9-cu128-cp311"))
        self.assertEqual(self.install(self.image_27, "CUDA_VISIBLE_DEVICES=1"),
                         ("sm80/torch2.7-cu128", "targets/sm86-torch2.7-cu128-cp311"))
        # CUDA_VISIBLE_DEVICES counts within the container's share: given host GPUs 0 and 1,
        # its device 1 is the host's sm86; given only GPU 0, it has no device 1 and no GPU.
        self.assertEqual(self.install(self.image_29, "NVIDIA_VISIBLE_DEVICES=0,1",
                                      "CUDA_VISIBLE_DEVICES=1")[0], "sm80/torch2.9-cu128")
        r = run("--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0", "-e",
                "CUDA_VISIBLE_DEVICES=1", "-v", f"{self.m.mountpoint}:/wheelhouse:ro,rslave",
                self.image_29, "sh", "-c", "ls /wheelhouse/current/flash_attn; "
                "cat /wheelhouse/current/.target")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["packages"], {})

    def test_the_container_reads_its_target_report(self):
        r = run("--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=1", "-v",
                f"{self.m.mountpoint}:/wheelhouse:ro,rslave", self.image_27,
                "cat", "/wheelhouse/current/.target")
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(rep["key"], "sm86-torch2.7-cu128-cp311")
        self.assertEqual(rep["caller"]["interpreter"], "/opt/venv/bin/python3")
        # The mount is read-only in the container too.
        w = run("--network", "none", "-v", f"{self.m.mountpoint}:/wheelhouse:ro,rslave",
                self.image_27, "sh", "-c", "touch /wheelhouse/x")
        self.assertNotEqual(w.returncode, 0)


class DaemonInside(ContainerImages, MountedTestCase):
    """A daemon in the container, a warm cache in the image and a tmpfs cache_upper."""

    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.make_images()

    def daemon_cmd(self, cache_opts, then):
        return ("mkdir -p /mnt/w && wheelhousefs -o " + cache_opts +
                f",endpoint={self.hub.hub},cudart=/opt/fake/libfake_cudart.so {REPO} /mnt/w && "
                + then)

    def test_a_warm_cache_in_the_image_and_a_tmpfs_upper(self):
        # build: warm a cache for the image (README's three lines)
        cache = os.path.join(self.scratch("warm"), "wheel-cache")
        m = self.mount(cache_dir=cache, env=GPUS, options=[f"cudart={FAKE_CUDART}"])
        key = "sm89-torch2.9-cu128-cp311"
        cli = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")
        r = subprocess.run([cli, "prefetch", "--mount", m.mountpoint, "--target", key, "--current",
                            "flash_attn"], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(m.unmount(), 0)
        image = images.layered(self.image_29, [(cache, "/opt/wheel-cache")], name="warm")
        # run: the image's cache read-only, new files in a tmpfs
        self.hub.clear_log()
        warm = "sm89/torch2.9-cu128/" + WHEEL.format(t="2.9")
        cold = "sm80/torch2.7-cu128/" + WHEEL.format(t="2.7")
        r = run("--network", "host", "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
                "--tmpfs", "/var/tmp/wh:mode=0700", "-e", "FAKE_CUDA_DEVICES=8.9", image, "sh", "-c",
                self.daemon_cmd(
                    "cache_dir=/opt/wheel-cache,cache_upper=/var/tmp/wh",
                    "pip install --no-deps /mnt/w/current/flash_attn/*.whl >/tmp/pip.log 2>&1 "
                    "|| { cat /tmp/pip.log; exit 1; }; "
                    "python -c 'import flash_attn; print(flash_attn.where())'; "
                    f"python3 -c \"{HASH_SCRIPT}\" /mnt/w/flash_attn/{warm} "
                    f"/mnt/w/flash_attn/{cold}; "
                    "ls /var/tmp/wh; cat /var/log/wheelhousefs.log 1>&2"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = r.stdout.split()
        self.assertEqual(out[0], "flash_attn/sm89/torch2.9-cu128")
        files = self.manifest["files"]
        self.assertEqual(out[1:3], [files["flash_attn/" + warm]["sha256"],
                                    files["flash_attn/" + cold]["sha256"]])
        self.assertIn("data.mdb", out[3:], "nothing was kept in cache_upper")
        # The Hub resolves a file's name to the CDN (by hash): the names asked for, and the
        # bytes the CDN sent, say what was downloaded.
        asked = [e["path"] for e in self.hub.log() if e["server"] == "hub" and "/resolve/" in e["path"]]
        self.assertFalse([p for p in asked if warm in p], f"the warm wheel was downloaded: {asked}")
        self.assertTrue([p for p in asked if cold in p], f"the cold wheel was not downloaded: {asked}")
        self.assertGreaterEqual(cdn_bytes(self.hub.log()), files["flash_attn/" + cold]["size"])
        self.assertLess(cdn_bytes(self.hub.log()),
                        files["flash_attn/" + cold]["size"] + files["flash_attn/" + warm]["size"])
        self.assertIn("(read-only) under /var/tmp/wh", r.stderr)


class SharedCache(ContainerImages, MountedTestCase):
    """docker run --device /dev/fuse --cap-add SYS_ADMIN -v /var/cache/wheelhouse-fs:/cache ..."""

    profile = "default"  # wheels up to 64 MiB: downloads long enough to overlap

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.make_images()

    def test_two_containers_daemons_on_one_cache_directory(self):
        cache = os.path.join(self.scratch("host"), "wheelhouse-fs")
        os.makedirs(cache, mode=0o700)
        tools = self.scratch("tools")
        with open(os.path.join(tools, "hash.py"), "w", encoding="utf-8") as f:
            f.write(HASH_SCRIPT)
        wheels = sorted((p for p in self.manifest["files"] if p.endswith(".whl")),
                        key=lambda p: -self.manifest["files"][p]["size"])[:8]
        total = sum(self.manifest["files"][w]["size"] for w in wheels)
        self.hub.clear_log()

        def one():
            return run("--network", "host", "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
                       "-v", f"{cache}:/cache", "-v", f"{tools}:/t:ro", self.image_29, "sh", "-c",
                       f"mkdir -p /mnt/w && wheelhousefs -o cache_dir=/cache,endpoint={self.hub.hub}"
                       f" {REPO} /mnt/w && python3 /t/hash.py "
                       + " ".join(f"/mnt/w/{w}" for w in wheels))

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda _: one(), range(2)))
        for r in results:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stdout.split(),
                             [self.manifest["files"][w]["sha256"] for w in wheels])
        served = cdn_bytes(self.hub.log())
        print(f"2 containers x {len(wheels)} wheels ({total} bytes): the CDN served {served} "
              f"bytes ({served / total:.2f}x)")
        self.assertLessEqual(served, 1.25 * total)


if __name__ == "__main__":
    images.main("the podman tests")
