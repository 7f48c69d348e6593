#!/usr/bin/env python3
"""Mounted tests of current/: the wheels that run for the process that looks,
detected from a fake CUDA runtime and a fake torch install, or given as overrides; pip installs
them. The per-caller cases (venvs, containers, GPUs per process) are in test_callers.py."""
import glob
import json
import os
import subprocess
import sys

import mounttest
from mounttest import MountedTestCase, sha256_file, wait_for

FAKE_CUDART = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "targeting", "libfake_cudart.so")
PY_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def fake_torch(site, version, cuda):
    os.makedirs(os.path.join(site, "torch"), exist_ok=True)
    with open(os.path.join(site, "torch", "version.py"), "w", encoding="utf-8") as f:
        f.write(f"__version__ = '{version}'\ndebug = False\ncuda = {cuda!r}\nhip = None\n")


def pip_install(wheels, target):
    return subprocess.run(["python3", "-m", "pip", "install", "--no-index", "--no-deps",
                           "--force-reinstall", "--target", target] + wheels,
                          capture_output=True, text=True, timeout=300)


def imported_folder(target, module):
    r = subprocess.run(["python3", "-c", f"import sys; sys.path.insert(0, {target!r}); "
                        f"import {module}; print({module}.where())"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip() or r.stderr


class CurrentView(MountedTestCase):
    profile = "small"

    def test_overrides_pick_one_installable_wheel_per_package_and_pip_installs_it(self):
        m = self.mount(options=["arch=sm89", "torch=2.9", "cuda=12.8"])
        # (simple/ and all/ are the index views of the same wheels: test_index.py)
        packages = sorted(p for p in os.listdir(m.path("current"))
                          if not p.startswith(".") and p not in ("simple", "all"))
        self.assertEqual(packages, ["cumesh", "flash_attn", "flex_gemm", "natten", "nvdiffrast",
                                    "nvdiffrec_render", "o_voxel"])
        for pkg in packages:
            wheels = glob.glob(m.path(f"current/{pkg}/*.whl"))
            self.assertEqual(len(wheels), 1, wheels)  # exactly one for pip
            name = os.path.basename(wheels[0])
            self.assertIn(f"-{PY_TAG}-{PY_TAG}-", name)  # pip's choice over abi3 / py3-none-any
            src = os.getxattr(wheels[0], "user.wheelhouse.source").decode()
            self.assertEqual(src, f"{pkg}/sm89/torch2.9-cu128/{name}")
            self.assertEqual(os.stat(wheels[0]).st_size, self.manifest["files"][src]["size"])
        target = self.scratch("site")
        r = pip_install(glob.glob(m.path("current/flash_attn/*.whl")), target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(imported_folder(target, "flash_attn"), "flash_attn/sm89/torch2.9-cu128")

    def test_a_process_with_no_target_still_has_empty_index_folders(self):
        # No GPU and no torch: current/ leads to targets/unresolved, whose all/ and simple/ are
        # there and empty, so a site-wide find-links to current/all/ costs pip no warning.
        m = self.mount()
        self.assertEqual(os.readlink(m.path("current")), "targets/unresolved")
        self.assertEqual(sorted(os.listdir(m.path("current"))), [".target", "all", "simple"])
        self.assertEqual(os.listdir(m.path("current/all")), [])
        r = subprocess.run(["python3", "-m", "pip", "download", "--no-index", "--no-deps",
                            "--find-links", m.path("current/all/"), "-d", self.scratch("dl"),
                            "flash-attn"], capture_output=True, text=True, timeout=120)
        self.assertNotIn("is ignored", r.stdout + r.stderr)
        self.assertIn("No matching distribution found for flash-attn", r.stdout + r.stderr)

    def test_an_arch_override_is_not_reported_as_a_missing_gpu(self):
        m = self.mount(options=["arch=sm89", "torch=2.9", "cuda=12.8"])
        with open(m.path("current/.target"), encoding="utf-8") as f:
            report = json.load(f)
        self.assertEqual(report["caller"]["gpus"], "not probed: arch=sm89 is set")
        self.assertNotIn("no GPU found", json.dumps(report))

    def test_entries_share_content_and_cache_with_their_source(self):
        m = self.mount(options=["arch=sm89", "torch=2.9", "cuda=12.8"])
        wheel = glob.glob(m.path("current/natten/*.whl"))[0]
        src = os.getxattr(wheel, "user.wheelhouse.source").decode()
        self.hub.clear_log()
        self.assertEqual(sha256_file(wheel), self.manifest["files"][src]["sha256"])
        fetched = [e for e in self.hub.log() if e["server"] == "cdn"]
        self.assertTrue(fetched)
        self.hub.clear_log()
        self.assertEqual(sha256_file(m.path(src)), self.manifest["files"][src]["sha256"])
        self.assertEqual([e for e in self.hub.log() if e["server"] == "cdn"], [],
                         "the source was downloaded again")

    def test_sm86_uses_sm80_and_prefers_the_exact_cuda(self):
        m = self.mount(options=["arch=sm86", "torch=2.9", "cuda=12.6"])
        name = os.path.basename(glob.glob(m.path("current/flash_attn/*.whl"))[0])
        self.assertEqual(os.getxattr(m.path(f"current/flash_attn/{name}"), "user.wheelhouse.source").decode(),
                         f"flash_attn/sm80/torch2.9-cu126/{name}")
        with open(m.path("current/.target")) as f:
            report = json.load(f)
        self.assertEqual(report["packages"]["flash_attn"]["folder"], "sm80/torch2.9-cu126")
        self.assertIn("sm80 runs on sm86", report["packages"]["flash_attn"]["reason"])
        # Packages without a cu126 build fall back to cu128 and say why.
        self.assertEqual(report["packages"]["cumesh"]["folder"], "sm80/torch2.9-cu128")

    def test_sm90_matches_nothing_and_says_why(self):
        m = self.mount(options=["arch=sm90", "torch=2.9", "cuda=12.8"])
        self.assertEqual(sorted(os.listdir(m.path("current"))), [".target", "all", "simple"])
        self.assertEqual(os.listdir(m.path("current/all")), [])
        self.assertEqual(os.listdir(m.path("current/simple")), ["index.html"])
        with open(m.path("current/.target")) as f:
            report = json.load(f)
        self.assertEqual(set(report["unmatched"]), {"cumesh", "flash_attn", "flex_gemm", "natten",
                                                    "nvdiffrast", "nvdiffrec_render", "o_voxel"})
        self.assertIn("sm9", report["unmatched"]["flash_attn"])

    def test_no_gpu_and_no_override_leaves_the_reason_and_no_wheel(self):
        m = self.mount(options=["cudart=/nonexistent/libcudart.so"])
        self.assertEqual(os.readlink(m.path("current")), "targets/unresolved")
        self.assertEqual(sorted(os.listdir(m.path("current"))), [".target", "all", "simple"])
        self.assertEqual(os.listdir(m.path("current/all")), [])
        with open(m.path("current/.target")) as f:
            report = json.load(f)
        self.assertIn("GPU", report["why_empty"])
        self.assertEqual(report["caller"]["pid"], os.getpid())

    def test_detection_from_the_cuda_runtime_and_torch_without_a_refresh(self):
        site = self.scratch("fake-site")
        fake_torch(site, "2.9.0+cu128", "12.8")
        m = self.mount(env={"FAKE_CUDA_DEVICES": "8.9"}, options=[f"cudart={FAKE_CUDART}"])
        # The caller's PYTHONPATH holds its torch (the daemon's environment plays no part).
        caller = dict(os.environ, PYTHONPATH=site)
        read_report = ("import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))")
        r = subprocess.run(["python3", "-c", read_report, m.path("current/.target")], env=caller,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        t = json.loads(r.stdout)["target"]
        self.assertEqual(t["arch"]["value"], "sm89")
        self.assertIn("libfake_cudart", t["arch"]["source"])
        self.assertEqual((t["torch"]["value"], t["cuda"]["value"]), ("2.9", "12.8"))
        self.assertEqual(t["python_tag"]["value"], PY_TAG)
        target = self.scratch("site-installed")
        wheels = subprocess.run(["python3", "-c", "import glob, sys; print(*glob.glob(sys.argv[1]))",
                                 m.path("current/flash_attn/*.whl")], env=caller,
                                capture_output=True, text=True, timeout=60).stdout.split()
        r = subprocess.run(["python3", "-m", "pip", "install", "--no-index", "--no-deps",
                            "--force-reinstall", "--target", target] + wheels, env=caller,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(imported_folder(target, "flash_attn"), "flash_attn/sm89/torch2.9-cu128")
        # torch is downgraded in place: the caller's current/ follows within a second or two,
        # with no signal to the daemon.
        fake_torch(site, "2.7.1+cu128", "12.8")

        def switched():
            link = subprocess.run(["python3", "-c", "import os, sys; print(os.readlink(sys.argv[1]))",
                                   m.path("current")], env=caller, capture_output=True,
                                  text=True, timeout=60).stdout.strip()
            return link == f"targets/sm89-torch2.7-cu128-{PY_TAG}"
        self.assertTrue(wait_for(switched, timeout=20), m.read_log())


if __name__ == "__main__":
    mounttest.main()
