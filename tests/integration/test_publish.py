#!/usr/bin/env python3
"""Mounted tests of `wheelhouse publish`: a wheel built by the test generator for a
fake sm89/torch2.9 target is published to the emulator and appears, byte for byte, in a
running mount after SIGHUP (or refresh=) and in current/ of a caller with that target, where
pip installs it; --target auto from a fake CUDA runtime and a fake torch; nothing to do, a
conflict and --replace; --dry-run; every refusal with its exit code and one line; network
faults mid-upload; a commit that races ours."""
import base64
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import urllib.request
import zipfile

import mounttest
from mounttest import REPO, MountedTestCase, sha256_file

import gen_wheelhouse  # noqa: E402  (tests/fakehub is on the path once mounttest is loaded)
from fakehub_ctl import FakeHub, wait_for  # noqa: E402

WHEELHOUSE = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")
FAKE_CUDART = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "targeting", "libfake_cudart.so")
PY_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
TAG = f"{PY_TAG}-{PY_TAG}-linux_x86_64"
KEY = f"sm89-torch2.9-cu128-{PY_TAG}"
FOLDER = "sm89/torch2.9-cu128"
OK, FAILED, USAGE, WHEEL_REFUSED, DENIED, CONFLICT, NOT_FOUND = 0, 1, 2, 5, 6, 7, 8


def fake_torch(site, version, cuda):
    os.makedirs(os.path.join(site, "torch"), exist_ok=True)
    with open(os.path.join(site, "torch", "version.py"), "w", encoding="utf-8") as f:
        f.write(f"__version__ = '{version}'\ndebug = False\ncuda = {cuda!r}\nhip = None\n")


def rewrite(src, dst, drop=None, change=None):
    """A copy of the wheel `src` without the members ending in `drop`, or with the member
    ending in change[0] replaced by change[1](its bytes) (its RECORD line left as it was)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if drop and info.filename.endswith(drop):
                continue
            data = zin.read(info.filename)
            if change and info.filename.endswith(change[0]):
                data = change[1](data)
            zout.writestr(info, data)
    return dst


def fatbin(sass_archs):
    """A .nv_fatbin section of one container with an uncompressed SASS entry per arch, in the
    layout fs/wheel/fatbin.h documents (each payload starts with a cubin ELF header)."""
    body = b""
    for arch in sass_archs:
        cubin = b"\x7fELF\x02\x01\x01\x33\x07" + b"\0" * 7 + struct.pack("<HHI", 2, 190, 1)
        cubin += b"\0" * (48 - len(cubin)) + struct.pack("<IH", arch | 0x400, 64)
        payload = cubin + b"\0" * (128 - len(cubin))
        header = struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, len(payload), len(payload), 0,
                             7, 1, arch, 0, 0, 0x11, 0, 0)
        body += header + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def cuda_object(sass_archs):
    """A real shared object (g++ -shared) with the fat binary as its .nv_fatbin section; it
    calls pthread_create, GLIBC_2.34 on this host (Debian 12 has 2.36)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.cpp"), "w", encoding="utf-8") as f:
            f.write('#include <pthread.h>\nextern "C" int launch(pthread_t* t) '
                    '{ return pthread_create(t, nullptr, nullptr, nullptr); }\n')
        with open(os.path.join(d, "k.fatbin"), "wb") as f:
            f.write(fatbin(sass_archs))
        subprocess.run(["g++", "-shared", "-fPIC", "-o", "libk.so", "k.cpp"], cwd=d, check=True)
        subprocess.run(["objcopy", "--add-section", ".nv_fatbin=k.fatbin", "libk.so"], cwd=d,
                       check=True, capture_output=True)
        with open(os.path.join(d, "libk.so"), "rb") as f:
            return f.read()


def with_member(src, dst, name, data):
    """A copy of the wheel `src` with one more member, listed in its RECORD with its hash."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            body = zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                body += f"{name},sha256={digest},{len(data)}\n".encode()
            zout.writestr(info, body)
        zout.writestr(name, data)
    return dst


class Publish(MountedTestCase):
    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.hub.stop()  # again, with write tokens and the repos the refusals need
        cls.hub = FakeHub({REPO: cls.tree, "acme/gated": cls.tree + ":gated",
                           "acme/private": cls.tree + ":private"},
                          os.path.join(cls.tmp, "hub-w"), tokens={"hf_r": [REPO]},
                          write_tokens={"hf_w": [REPO]})
        cls.wheels = os.path.join(cls.tmp, "dist")
        os.makedirs(cls.wheels)

    def setUp(self):
        self.hub.clear_faults()
        self.hub.config(multipart_threshold=5 * 10**9, multipart_chunk=64 << 20)

    def build(self, pkg, version="0.1.0", folder=FOLDER, tag=TAG, size=256 << 10, local=None,
              seed=1):
        out = os.path.join(self.wheels, f"{pkg}-{version}-{folder.replace('/', '_')}-{seed}")
        os.makedirs(out, exist_ok=True)
        return gen_wheelhouse.build_wheel(out, pkg, version, f"{pkg}/{folder}", tag, size=size,
                                          seed=seed, local=local)

    def publish(self, *args, token="hf_w", env=None, endpoint=True):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("HF_", "WHEELHOUSE_", "FAKE_CUDA")) and k not in (
                 "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV", "CONDA_PREFIX")}
        e["HF_HOME"] = self.scratch("hf-home")  # holds no token file
        if token:
            e["HF_TOKEN"] = token
        e.update(env or {})
        cmd = [WHEELHOUSE, "publish"] + (["--endpoint", self.hub.hub] if endpoint else [])
        return subprocess.run(cmd + list(args), env=e, capture_output=True, text=True, timeout=300)

    def head(self, repo=REPO):
        return self.hub.state()["repos"][repo]["head"]

    def listing(self, folder):
        url = f"{self.hub.hub}/api/datasets/{REPO}/tree/main/{folder}"
        with urllib.request.urlopen(url, timeout=30) as r:
            return {e["path"]: e for e in json.load(r)}

    def writes(self):
        return [e for e in self.hub.log() if e.get("op") or e["method"] in ("POST", "PUT")]

    def test_published_wheel_shows_in_a_mount_after_sighup_and_in_current(self):
        m = self.mount(options=["arch=sm89", "torch=2.9", "cuda=12.8"])
        self.assertNotIn("demo_ext", os.listdir(m.path()))
        wheel = self.build("demo_ext", size=3 << 20)
        name = os.path.basename(wheel)
        rel = f"demo_ext/{FOLDER}/{name}"
        self.hub.clear_log()
        r = self.publish("--target", KEY, REPO, wheel)
        self.assertEqual(r.returncode, OK, r.stderr)
        self.assertIn(rel, r.stdout)
        self.assertIn("published in commit", r.stdout)
        print(f"\npublish of {os.path.getsize(wheel)} bytes: {r.stdout.splitlines()[-1]}",
              file=sys.stderr)
        # The token went to the Hub, never to the storage host.
        log = self.hub.log()
        self.assertTrue([e for e in log if e["server"] == "cdn" and e["method"] == "PUT"])
        self.assertFalse([e for e in log if e["server"] == "cdn" and e["auth"]])
        self.assertEqual(self.hub.state()["counters"].get("cdn_auth_violations", 0), 0)

        m.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: os.path.exists(m.path(rel)), timeout=20), m.read_log())
        self.assertEqual(sha256_file(m.path(rel)), sha256_file(wheel))
        with open(m.path(rel), "rb") as got, open(wheel, "rb") as want:
            self.assertEqual(got.read(), want.read())
        # current/ of a python3 caller (its own tag; arch, torch and CUDA from the overrides).
        listed = subprocess.run([sys.executable, "-c", "import os, sys; print(*os.listdir(sys.argv[1]))",
                                 m.path("current/demo_ext")], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(listed.stdout.split(), [name], listed.stderr)
        self.assertEqual(sha256_file(m.path(f"current/demo_ext/{name}")), sha256_file(wheel))
        site = self.scratch("site")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                            "--target", site, m.path(f"current/demo_ext/{name}")],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {site!r}); "
                            "import demo_ext; print(demo_ext.where())"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.stdout.strip(), f"demo_ext/{FOLDER}", r.stderr)

    def test_a_mount_with_refresh_finds_it_by_itself(self):
        m = self.mount(options=["refresh=10s"])
        wheel = self.build("demo_refresh")
        r = self.publish("--target", KEY, wheel)
        self.assertEqual(r.returncode, OK, r.stderr)
        rel = f"demo_refresh/{FOLDER}/{os.path.basename(wheel)}"
        self.assertTrue(wait_for(lambda: os.path.exists(m.path(rel)), timeout=40), m.read_log())
        self.assertEqual(sha256_file(m.path(rel)), sha256_file(wheel))

    def test_target_auto_from_the_gpu_and_the_pythons_torch(self):
        site = self.scratch("torch-site")
        fake_torch(site, "2.9.0+cu128", "12.8")
        gpu = {"FAKE_CUDA_DEVICES": "8.9", "WHEELHOUSE_CUDART": FAKE_CUDART, "PYTHONPATH": site}
        wheel = self.build("demo_auto")
        r = self.publish(wheel, env=gpu)
        self.assertEqual(r.returncode, OK, r.stderr)
        self.assertIn(f"target {KEY}: sm89: ", r.stdout)
        self.assertIn("through the CUDA runtime " + FAKE_CUDART, r.stdout)
        self.assertIn(f"; torch 2.9: torch 2.9.0+cu128 ({site}/torch/version.py)", r.stdout)
        self.assertIn(f"demo_auto/{FOLDER}/{os.path.basename(wheel)}", self.listing(f"demo_auto/{FOLDER}"))
        # --python: that interpreter's torch (a venv with torch 2.7) decides the folder.
        venv = self.scratch("venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
        fake_torch(os.path.join(venv, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}",
                                "site-packages"), "2.7.1+cu128", "12.8")
        old = self.build("demo_auto", folder="sm89/torch2.7-cu128")
        r = self.publish("--python", f"{venv}/bin/python3", "--dry-run", old, env=gpu)
        self.assertEqual(r.returncode, OK, r.stderr)
        self.assertIn(f"demo_auto/sm89/torch2.7-cu128/{os.path.basename(old)}: new", r.stdout)
        # Two archs visible: refused, unless CUDA_VISIBLE_DEVICES picks one.
        two = dict(gpu, FAKE_CUDA_DEVICES="8.9,8.6")
        r = self.publish("--dry-run", wheel, env=two)
        self.assertEqual(r.returncode, FAILED)
        self.assertIn("several GPU archs (sm86+sm89)", r.stderr)
        self.assertIn("CUDA_VISIBLE_DEVICES", r.stderr)
        r = self.publish("--dry-run", wheel, env=dict(two, CUDA_VISIBLE_DEVICES="0"))
        self.assertEqual(r.returncode, OK, r.stderr)
        # No GPU at all: say so, and how to name the target.
        r = self.publish("--dry-run", wheel, env=dict(gpu, WHEELHOUSE_CUDART="/nonexistent/libcudart.so"))
        self.assertEqual(r.returncode, FAILED)
        self.assertIn("cannot tell this machine's target", r.stderr)
        self.assertIn("--target KEY", r.stderr)

    def check(self, *args):
        return subprocess.run([WHEELHOUSE, "check"] + list(args), capture_output=True, text=True,
                              timeout=120)

    def test_check_refuses_gpu_code_for_another_arch_and_publish_too_unless_force(self):
        plain = self.build("demo_gpu")
        wheel = with_member(plain, os.path.join(self.scratch("gpu"), os.path.basename(plain)),
                            "demo_gpu/_C.so", cuda_object([90]))
        # sm_90 SASS: runs on sm90, not on sm89 (the key of this test's folder).
        r = self.check("--target", f"sm90-torch2.9-cu128-{PY_TAG}", wheel)
        self.assertEqual(r.returncode, OK, r.stdout + r.stderr)
        self.assertIn("SASS sm_90", r.stdout)
        self.assertIn("verdict: runs on", r.stdout)
        r = self.check("--target", KEY, "--json", wheel)
        self.assertEqual(r.returncode, WHEEL_REFUSED, r.stderr)
        report = json.loads(r.stdout)
        self.assertFalse(report["runs"])
        obj = report["wheels"][0]["objects"][0]
        self.assertEqual((obj["member"], obj["sass"]), ("demo_gpu/_C.so", ["sm_90"]))
        self.assertIn("no GPU code runs on sm89", report["wheels"][0]["problems"][0])
        # glibc: pthread_create is GLIBC_2.34, above a glibc 2.31 key's.
        r = self.check("--target", f"sm90-torch2.9-cu128-{PY_TAG}-glibc2.31", wheel)
        self.assertEqual(r.returncode, WHEEL_REFUSED, r.stdout)
        self.assertIn("needs GLIBC_2.34 (libc.so.6), the target has glibc 2.31", r.stdout)
        # Its tags count too: a wheel of this Python is refused for another one.
        other = "cp310" if PY_TAG != "cp310" else "cp312"
        r = self.check("--target", f"sm90-torch2.9-cu128-{other}", wheel)
        self.assertEqual(r.returncode, WHEEL_REFUSED, r.stdout)
        self.assertIn(f"do not run on the target's Python {other}", r.stdout)
        self.assertIn("verdict: does not run on", r.stdout)

        before = self.head()
        self.hub.clear_log()
        r = self.publish("--target", KEY, wheel)
        self.assertEqual(r.returncode, WHEEL_REFUSED, r.stdout + r.stderr)
        self.assertIn(f"wheelhouse publish: {os.path.basename(wheel)}: demo_gpu/_C.so: no GPU code "
                      "runs on sm89", r.stderr)
        self.assertIn("nothing was uploaded", r.stderr)
        self.assertIn("--force publishes anyway", r.stderr)
        self.assertEqual([e for e in self.hub.log() if e["method"] != "GET"], [])
        self.assertEqual(self.head(), before)

        r = self.publish("--target", KEY, "--force", wheel)
        self.assertEqual(r.returncode, OK, r.stdout + r.stderr)
        self.assertIn("refused, published anyway (--force): demo_gpu/_C.so: no GPU code runs on "
                      "sm89", r.stdout)
        self.assertIn(f"demo_gpu/{FOLDER}/{os.path.basename(wheel)}",
                      self.listing(f"demo_gpu/{FOLDER}"))

    def test_dry_run_prints_the_plan_and_sends_nothing(self):
        wheel = self.build("demo_dry")
        before = self.head()
        self.hub.clear_log()
        r = self.publish("--target", KEY, "--dry-run", wheel, token=None)
        self.assertEqual(r.returncode, OK, r.stderr)
        size = os.path.getsize(wheel)
        self.assertIn(f"demo_dry/{FOLDER}/{os.path.basename(wheel)}", r.stdout)
        self.assertIn(f"({size} bytes), sha256 {sha256_file(wheel)}", r.stdout)
        self.assertIn(f"target {KEY}: sm89, torch 2.9, CUDA 12.8: the key {KEY}", r.stdout)
        self.assertIn(": new", r.stdout)
        self.assertIn("dry run: nothing uploaded", r.stdout)
        self.assertEqual([e for e in self.hub.log() if e["method"] != "GET"], [])
        self.assertEqual(self.head(), before)

    def test_same_bytes_nothing_to_do_another_file_refused_unless_replace(self):
        wheel = self.build("demo_same")
        self.assertEqual(self.publish("--target", KEY, wheel).returncode, OK)
        head = self.head()
        self.hub.clear_log()
        r = self.publish("--target", KEY, wheel)
        self.assertEqual(r.returncode, OK, r.stderr)
        self.assertIn("the same bytes are already there", r.stdout)
        self.assertIn("nothing to do", r.stdout)
        self.assertEqual(self.writes(), [])
        other = self.build("demo_same", seed=2)  # same name, other bytes
        self.assertEqual(os.path.basename(other), os.path.basename(wheel))
        r = self.publish("--target", KEY, other)
        self.assertEqual(r.returncode, CONFLICT)
        self.assertIn("another file is there", r.stderr)
        self.assertIn("--replace replaces it", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertEqual(self.head(), head)
        r = self.publish("--target", KEY, "--replace", other)
        self.assertEqual(r.returncode, OK, r.stderr)
        rel = f"demo_same/{FOLDER}/{os.path.basename(other)}"
        self.assertEqual(self.listing(f"demo_same/{FOLDER}")[rel]["lfs"]["oid"], sha256_file(other))

    def test_wheels_that_fail_their_checks_never_leave_the_machine(self):
        good = self.build("demo_bad")
        cases = {
            "bad name": (shutil.copy(good, os.path.join(self.wheels, "demo_bad.whl")),
                         "not a valid wheel file name"),
            "no METADATA": (rewrite(good, self.scratch("m") + "/" + os.path.basename(good),
                                    drop="METADATA"), "no single *.dist-info/METADATA"),
            "no RECORD": (rewrite(good, self.scratch("r") + "/" + os.path.basename(good),
                                  drop="RECORD"), "no single *.dist-info/RECORD"),
            "RECORD mismatch": (rewrite(good, self.scratch("h") + "/" + os.path.basename(good),
                                        change=("__init__.py", lambda b: b.replace(b"PACKAGE", b"PACKAGF"))),
                                "demo_bad/__init__.py does not match its hash in RECORD"),
            "tags": (self.build("demo_bad", tag="cp312-cp312-linux_x86_64" if PY_TAG != "cp312"
                                else "cp310-cp310-linux_x86_64"),
                     f"do not run on the target's Python {PY_TAG}"),
            "local version": (self.build("demo_bad", folder="sm89/torch2.9-cu126"),
                              "names CUDA 12.6; the target has CUDA 12.8"),
        }
        self.hub.clear_log()
        for what, (path, message) in cases.items():
            r = self.publish("--target", KEY, path)
            self.assertEqual(r.returncode, WHEEL_REFUSED, f"{what}: {r.stderr}")
            self.assertIn(message, r.stderr, what)
            self.assertTrue(r.stderr.startswith("wheelhouse publish: "), r.stderr)
        # Several at once: each refusal on its own line, and nothing uploaded, even the good one.
        r = self.publish("--target", KEY, good, cases["tags"][0], cases["local version"][0])
        self.assertEqual(r.returncode, WHEEL_REFUSED)
        self.assertEqual(len(r.stderr.strip().splitlines()), 3, r.stderr)
        self.assertEqual(self.hub.log(), [])

    def test_tokens_repos_and_branches_refused_with_their_codes(self):
        wheel = self.build("demo_auth")
        self.hub.clear_log()
        cases = [
            ("no token", dict(token=None), [wheel], DENIED, "no token (looked in"),
            ("read token", dict(token="hf_r"), [wheel], DENIED,
             "can only read; publishing needs a token with write access"),
            ("bad token", dict(token="hf_nope"), [wheel], DENIED, "the Hub refused the token"),
            ("gated", {}, ["acme/gated", wheel], DENIED, "gated repository"),
            ("private", {}, ["acme/private", wheel], NOT_FOUND, "repository acme/private not found"),
            ("missing repo", {}, ["acme/missing", wheel], NOT_FOUND, "acme/missing not found"),
            ("missing branch", {}, ["--revision", "nope", wheel], NOT_FOUND, "has no branch nope"),
            ("a tag", {}, ["--revision", "v1.0", wheel], NOT_FOUND, "no such branch to commit to"),
            ("bad key", {}, ["--target", "sm89-torch2.9", wheel], USAGE, "target key"),
            ("two archs", {}, ["--target", f"sm80+sm89-torch2.9-cu128-{PY_TAG}", wheel], USAGE,
             "several GPU archs"),
            ("no wheel", {}, [REPO], USAGE, "no wheel given"),
        ]
        for what, kw, args, code, message in cases:
            r = self.publish(*(["--target", KEY] if "--target" not in args else []), *args, **kw)
            self.assertEqual(r.returncode, code, f"{what}: {r.stdout}{r.stderr}")
            self.assertIn(message, r.stderr, what)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, f"{what}: {r.stderr}")
            self.assertNotIn("hf_w", r.stderr + r.stdout)  # never the token itself
        self.assertFalse([e for e in self.hub.log() if e.get("op") in ("lfs-batch", "commit")])

    def test_a_network_fault_mid_upload_is_retried(self):
        wheel = self.build("demo_net", size=1 << 20)
        self.hub.fault(kind="reset", server="cdn", method="PUT", path="^/lfs-upload/",
                       after_bytes=300000, count=1)
        self.hub.clear_log()
        r = self.publish("--target", KEY, wheel)
        self.assertEqual(r.returncode, OK, r.stderr)
        self.assertIn(", 1 retries", r.stdout)
        self.assertIn("retry 1 of 5", r.stderr)
        puts = [e for e in self.hub.log() if e["server"] == "cdn" and e["method"] == "PUT"]
        self.assertEqual(len(puts), 2)
        # Multipart: only the part that failed is sent again.
        self.hub.config(multipart_threshold=1 << 20, multipart_chunk=512 << 10)
        big = self.build("demo_net", version="0.2.0", size=(2 << 20) + 1000)  # 5 parts
        self.hub.fault(kind="reset", server="cdn", method="PUT", path="^/lfs-upload/",
                       after_bytes=1000, count=1)
        self.hub.clear_log()
        r = self.publish("--target", KEY, big)
        self.assertEqual(r.returncode, OK, r.stderr)
        parts = sorted(e["part"] for e in self.hub.log() if e.get("op") == "storage-part")
        self.assertEqual(parts, [1, 1, 2, 3, 4, 5])

    def test_a_storage_host_that_keeps_failing_fails_cleanly(self):
        wheel = self.build("demo_down")
        head = self.head()
        self.hub.fault(kind="status", status=503, server="cdn", method="PUT", path="^/lfs-upload/")
        r = self.publish("--target", KEY, wheel)
        self.assertEqual(r.returncode, FAILED)
        self.assertIn("the storage host answered HTTP 503 (gave up after 6 tries)", r.stderr)
        self.assertEqual(r.stderr.count("wheelhouse publish:"), 1, r.stderr)
        self.assertEqual(self.head(), head)  # no partial commit: no commit at all

    def test_a_commit_that_races_ours_is_planned_again(self):
        wheel = self.build("demo_race")
        self.hub.fault(kind="branch_moved", server="hub", path="/commit/", count=1)
        self.hub.clear_log()
        r = self.publish("--target", KEY, wheel)
        self.assertEqual(r.returncode, OK, r.stderr)
        self.assertIn("planned again once (the branch moved)", r.stdout)
        commits = [e for e in self.hub.log() if e.get("op") == "commit"]
        self.assertEqual([c["status"] for c in commits], [412, 200])
        puts = [e for e in self.hub.log() if e["server"] == "cdn" and e["method"] == "PUT"]
        self.assertEqual(len(puts), 1)  # the object was not sent again
        self.assertIn(f"demo_race/{FOLDER}/{os.path.basename(wheel)}", self.listing(f"demo_race/{FOLDER}"))


if __name__ == "__main__":
    mounttest.main()
