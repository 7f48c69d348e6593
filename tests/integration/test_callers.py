#!/usr/bin/env python3
"""Mounted tests of current/ following the process that looks. Two venvs (one claims
Python 3.12 with torch 2.7, the other is a real 3.11 venv with torch 2.9), a container-like
caller with its own mount namespace, PID namespace and root, processes limited to one of two
fake GPUs, a process with no Python, another user, and targets/<key>/ for a table of keys.

CI has one Python (3.11): the 3.12 venv is a layout (pyvenv.cfg and lib/python3.12) around the
real interpreter, which is what the mount reads; pip in it installs with --python-version 3.12.
"""
import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import mounttest
from mounttest import MountedTestCase, wait_for

FAKE_CUDART = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "targeting", "libfake_cudart.so")
PYTHON = os.path.realpath(sys.executable)  # the real interpreter binary (python3.11)
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
# Two GPUs: device 0 is sm89, device 1 is sm86.
GPUS = {"FAKE_CUDA_DEVICES": "8.9,8.6"}


def fake_torch(site, version, cuda):
    os.makedirs(os.path.join(site, "torch"), exist_ok=True)
    with open(os.path.join(site, "torch", "version.py"), "w", encoding="utf-8") as f:
        f.write(f"__version__ = '{version}'\ndebug = False\ncuda = {cuda!r}\nhip = None\n")


def layout_venv(path, version, torch, cuda, python=PYTHON):
    """A venv as its files say: pyvenv.cfg with `version`, lib/pythonX.Y, bin/python3 a link to
    `python` (run, it is that interpreter: the system site is included so that pip works)."""
    minor = ".".join(version.split(".")[:2])
    os.makedirs(os.path.join(path, "bin"))
    with open(os.path.join(path, "pyvenv.cfg"), "w", encoding="utf-8") as f:
        f.write(f"home = {os.path.dirname(python)}\ninclude-system-site-packages = true\n"
                f"version = {version}\n")
    os.symlink(python, os.path.join(path, "bin", "python3"))
    os.symlink("python3", os.path.join(path, "bin", "python"))
    fake_torch(os.path.join(path, "lib", f"python{minor}", "site-packages"), torch, cuda)


def real_venv(path, torch, cuda):
    r = subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                        path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fake_torch(os.path.join(path, "lib", f"python{PY}", "site-packages"), torch, cuda)


def activated(venv, **more):
    """The environment `source venv/bin/activate` gives, plus `more`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "CUDA_VISIBLE_DEVICES")}
    env["VIRTUAL_ENV"] = venv
    env["PATH"] = os.path.join(venv, "bin") + ":/usr/local/bin:/usr/bin:/bin"
    env.update(more)
    return env


def sh(script, env, timeout=120):
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=timeout)


def view(mnt, env, pkg="flash_attn"):
    """(the link, the wheels of `pkg`) as a shell in `env` sees them."""
    r = sh(f'readlink "{mnt}/current"; ls "{mnt}/current/{pkg}" 2>/dev/null', env)
    lines = r.stdout.split()
    return (lines[0] if lines else None), lines[1:]


def report(mnt, env, path="current/.target"):
    r = subprocess.run(["/bin/cat", os.path.join(mnt, path)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def imported_folder(target, module):
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {target!r}); "
                        f"import {module}; print({module}.where())"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip() or r.stderr


class Callers(MountedTestCase):
    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.venv_a = os.path.join(cls.tmp, "venv-a")  # "3.12", torch 2.7 for CUDA 12.8
        layout_venv(cls.venv_a, "3.12.3", "2.7.1+cu128", "12.8")
        cls.venv_b = os.path.join(cls.tmp, "venv-b")  # the real 3.11, torch 2.9 for CUDA 12.8
        real_venv(cls.venv_b, "2.9.0+cu128", "12.8")
        os.chmod(cls.tmp, 0o755)  # other users' processes may look into the venvs

    def setUp(self):
        self.m = self.mount(env=GPUS, options=[f"cudart={FAKE_CUDART}", "allow_other"])
        self.mnt = self.m.mountpoint
        self.env_a = activated(self.venv_a, CUDA_VISIBLE_DEVICES="0")
        self.env_b = activated(self.venv_b, CUDA_VISIBLE_DEVICES="0")

    def test_two_venvs_see_their_own_wheels_also_at_once(self):
        key_a = "targets/sm89-torch2.7-cu128-cp312"
        key_b = f"targets/sm89-torch2.9-cu128-{TAG}"
        wheel_a = ["flash_attn-2.8.3+cu128torch2.7-cp312-cp312-linux_x86_64.whl"]
        wheel_b = [f"flash_attn-2.8.3+cu128torch2.9-{TAG}-{TAG}-linux_x86_64.whl"]
        self.assertEqual(view(self.mnt, self.env_a), (key_a, wheel_a))
        self.assertEqual(view(self.mnt, self.env_b), (key_b, wheel_b))
        r = report(self.mnt, self.env_a)
        self.assertEqual(r["key"], key_a.split("/")[1])
        self.assertEqual(r["caller"]["interpreter"], os.path.join(self.venv_a, "bin", "python3"))
        self.assertIn("$VIRTUAL_ENV", r["caller"]["interpreter_why"])
        self.assertIn("torch 2.7.1+cu128", r["target"]["torch"]["source"])
        self.assertEqual(r["packages"]["flash_attn"]["folder"], "sm89/torch2.7-cu128")
        # Reading another folder's report says whose it is.
        other = report(self.mnt, self.env_a, f"{key_b}/.target")
        self.assertIn(key_a, other["caller"]["note"])
        # At once, alternating on the same names: the kernel never hands one caller's view to
        # the other.
        def loop(env, expected):
            return [view(self.mnt, env) == expected for _ in range(25)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            runs = [pool.submit(loop, self.env_a, (key_a, wheel_a)),
                    pool.submit(loop, self.env_b, (key_b, wheel_b)),
                    pool.submit(loop, self.env_a, (key_a, wheel_a)),
                    pool.submit(loop, self.env_b, (key_b, wheel_b))]
            results = [all(r.result()) for r in runs]
        self.assertEqual(results, [True] * 4)

    def test_pip_from_each_venv_installs_its_own_build(self):
        pip = ('"$VIRTUAL_ENV/bin/python" -m pip install --no-index --no-deps --force-reinstall '
               '--disable-pip-version-check --target "$T" {extra} "$MNT"/current/flash_attn/*.whl')
        ta, tb = self.scratch("site-a"), self.scratch("site-b")
        r = sh(pip.format(extra="--python-version 3.12"), dict(self.env_a, T=ta, MNT=self.mnt))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(imported_folder(ta, "flash_attn"), "flash_attn/sm89/torch2.7-cu128")
        r = sh(pip.format(extra=""), dict(self.env_b, T=tb, MNT=self.mnt))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(imported_folder(tb, "flash_attn"), "flash_attn/sm89/torch2.9-cu128")
        # The shell of venv B expands the names, venv A's pip opens them: A gets no file of
        # that name (never B's wheel).
        tc = self.scratch("site-c")
        mixed = (f'"{self.venv_a}/bin/python" -m pip install --no-index --no-deps '
                 f'--disable-pip-version-check --python-version 3.12 --target "{tc}" '
                 f'"{self.mnt}"/current/flash_attn/*.whl')
        r = sh(mixed, self.env_b)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertFalse(glob.glob(os.path.join(tc, "flash_attn*")), os.listdir(tc))
        # An unactivated venv's pip counts as that venv (the interpreter as it was started).
        td = self.scratch("site-d")
        plain = activated(self.venv_b, CUDA_VISIBLE_DEVICES="0")
        del plain["VIRTUAL_ENV"]
        plain["PATH"] = "/usr/bin:/bin"
        names = os.listdir(os.path.join(self.mnt, "targets", "sm89-torch2.7-cu128-cp312",
                                        "flash_attn"))
        r = subprocess.run([os.path.join(self.venv_a, "bin", "python"), "-m", "pip", "install",
                            "--no-index", "--no-deps", "--disable-pip-version-check",
                            "--python-version", "3.12", "--target", td,
                            os.path.join(self.mnt, "current", "flash_attn", names[0])],
                           env=plain, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(imported_folder(td, "flash_attn"), "flash_attn/sm89/torch2.7-cu128")

    def test_cuda_visible_devices_picks_the_gpu(self):
        self.assertEqual(view(self.mnt, dict(self.env_b, CUDA_VISIBLE_DEVICES="1"))[0],
                         f"targets/sm86-torch2.9-cu128-{TAG}")
        both = dict(self.env_b)
        del both["CUDA_VISIBLE_DEVICES"]
        link, wheels = view(self.mnt, both)
        self.assertEqual(link, f"targets/sm86+sm89-torch2.9-cu128-{TAG}")
        r = report(self.mnt, both)
        self.assertEqual(r["packages"]["flash_attn"]["folder"], "sm80/torch2.9-cu128")
        self.assertIn("runs on all of sm86+sm89", r["packages"]["flash_attn"]["reason"])
        self.assertTrue(any("differ" in n for n in r["target"]["notes"]), r["target"]["notes"])
        # By UUID, as nvidia-smi -L names them.
        self.assertEqual(view(self.mnt, dict(self.env_b, CUDA_VISIBLE_DEVICES="GPU-fa4e0000-0000-"
                                             "0000-0000-000000000001"))[0],
                         f"targets/sm86-torch2.9-cu128-{TAG}")
        r = report(self.mnt, dict(self.env_b, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(r["key"], "unresolved")
        self.assertIn("CUDA_VISIBLE_DEVICES", r["why_empty"])

    def test_a_process_with_no_python_gets_an_empty_view_and_the_reason(self):
        env = {"PATH": "/nonexistent"}
        r = subprocess.run(["/bin/ls", "-A", os.path.join(self.mnt, "current")], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.stdout.split(), [".target", "all", "simple"])  # (empty folders)
        rep = report(self.mnt, env)
        self.assertEqual(rep["key"], "unresolved")
        self.assertIn("no python3 on the process's PATH (/nonexistent)", rep["why_empty"])
        self.assertEqual(rep["packages"], {})

    def test_a_container_gets_its_own_interpreters_view(self):
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare")
        root = self.scratch("container-root")
        for d in ("usr", "proc", "mnt/wh", "tmp"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                os.symlink(os.readlink(f"/{link}"), os.path.join(root, link))
        # The image's own Python environment at /opt/env (3.10, torch 2.9), which the host
        # does not have. Its interpreter is the image's /usr/bin python (the host's, bound).
        image_python = "/usr/bin/" + os.path.basename(os.path.realpath("/usr/bin/python3"))
        layout_venv(os.path.join(root, "opt", "env"), "3.10.12", "2.9.0+cu128", "12.8",
                    python=image_python)
        self.assertFalse(os.path.exists("/opt/env"))
        script = (f"mount --rbind /usr {root}/usr && mount --rbind {self.mnt} {root}/mnt/wh && "
                  f"exec chroot {root} /usr/bin/env -i PATH=/opt/env/bin:/usr/bin "
                  "CUDA_VISIBLE_DEVICES=1 /bin/sh -c "
                  "'readlink /mnt/wh/current; ls /mnt/wh/current/flash_attn; "
                  "cat /mnt/wh/current/.target'")
        r = subprocess.run(["unshare", "--mount", "--pid", "--fork", "sh", "-c", script],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.split("\n", 2)
        self.assertEqual(out[0], "targets/sm86-torch2.9-cu128-cp310")
        self.assertEqual(out[1], "flash_attn-2.8.3+cu128torch2.9-cp310-cp310-linux_x86_64.whl")
        rep = json.loads(out[2])
        self.assertEqual(rep["caller"]["interpreter"], "/opt/env/bin/python3")
        self.assertIn("own", rep["caller"]["root"])
        self.assertEqual(rep["packages"]["flash_attn"]["folder"], "sm80/torch2.9-cu128")

    def test_targets_for_a_table_of_keys(self):
        table = {
            f"sm89-torch2.9-cu128-{TAG}": ("sm89/torch2.9-cu128", TAG),
            "sm86-torch2.9-cu126-cp312": ("sm80/torch2.9-cu126", "cp312"),
            "sm86+sm89-torch2.7-cu128-cp310": ("sm80/torch2.7-cu128", "cp310"),
            "sm120-torch2.9-cu128-cp312": ("sm120/torch2.9-cu128", "cp312"),
            "sm75-torch2.7-cu128-cp311-glibc2.17": ("sm75/torch2.7-cu128", "cp311"),
            "sm90-torch2.9-cu128-cp311": (None, "no sm9x folder"),
            "sm89-torch2.8-cu128-cp311": (None, "no torch2.8 folder"),
            "sm89-torch2.9-cu128-cp313": (None, "no wheel the target Python can install"),
            "sm89-torch2.9-cu128-cp311-aarch64": (None, "no wheel the target Python can install"),
            "sm80+sm90-torch2.9-cu128-cp311": (None, "differ in major"),
        }
        for key, (folder, detail) in table.items():
            with self.subTest(key=key):
                base = os.path.join(self.mnt, "targets", key)
                rep = report(self.mnt, self.env_b, f"targets/{key}/.target")
                self.assertEqual(rep["key"], key)
                if folder is None:
                    self.assertNotIn("flash_attn", os.listdir(base))
                    self.assertIn(detail, rep["unmatched"]["flash_attn"])
                    continue
                wheels = os.listdir(os.path.join(base, "flash_attn"))
                self.assertEqual(len(wheels), 1, wheels)
                self.assertIn(f"-{detail}-{detail}-", wheels[0])
                self.assertEqual(rep["packages"]["flash_attn"]["folder"], folder)
                self.assertEqual(os.getxattr(os.path.join(base, "flash_attn", wheels[0]),
                                             "user.wheelhouse.source").decode(),
                                 f"flash_attn/{folder}/{wheels[0]}")
        for bad in ("sm89-torch2.9", "sm89+sm80-torch2.9-cu128-cp311", "latest", "current"):
            self.assertFalse(os.path.exists(os.path.join(self.mnt, "targets", bad)), bad)
        self.assertIn(f"sm89-torch2.9-cu128-{TAG}", os.listdir(os.path.join(self.mnt, "targets")))
        # The same wheel is one inode in every folder that shows it (one copy in the page cache).
        key_b = f"sm89-torch2.9-cu128-{TAG}"
        name = os.listdir(os.path.join(self.mnt, "targets", key_b, "flash_attn"))[0]
        ino = os.stat(os.path.join(self.mnt, "targets", key_b, "flash_attn", name)).st_ino
        r = sh(f'stat -c %i "{self.mnt}/current/flash_attn/{name}"', self.env_b)
        self.assertEqual(int(r.stdout), ino)

    def test_another_user_reads_with_its_own_rights(self):
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv")
        private = self.scratch("private")
        venv = os.path.join(private, "venv")
        layout_venv(venv, "3.12.3", "2.7.1+cu128", "12.8")
        os.chmod(private, 0o700)  # root's alone
        env = activated(venv, CUDA_VISIBLE_DEVICES="0")
        self.assertEqual(view(self.mnt, env)[0], "targets/sm89-torch2.7-cu128-cp312")
        nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        r = subprocess.run(nobody + ["cat", os.path.join(self.mnt, "current", ".target")],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(rep["key"], "unresolved")
        self.assertIn("has no bin/python3", rep["why_empty"])  # what that user itself sees
        self.assertNotIn("torch", json.dumps(rep["caller"]))

    def test_nothing_of_the_callers_is_run(self):
        trap = self.scratch("trap")
        marker = os.path.join(trap, "ran")
        os.makedirs(os.path.join(trap, "venv", "bin"))
        with open(os.path.join(trap, "venv", "bin", "python3"), "w") as f:
            f.write(f"#!/bin/sh\ntouch {marker}\n")
        os.chmod(os.path.join(trap, "venv", "bin", "python3"), 0o755)
        env = activated(os.path.join(trap, "venv"), CUDA_VISIBLE_DEVICES="0")
        rep = report(self.mnt, env)
        self.assertEqual(rep["key"], "unresolved")
        self.assertIn("not an ELF executable", rep["why_empty"])
        time.sleep(0.2)
        self.assertFalse(os.path.exists(marker), "the daemon ran a caller's interpreter")

    def test_one_reading_per_venv_and_the_cost_of_a_warm_listing(self):
        # Its own mount, with each reading of a Python in its log: a shell hook run by another
        # test at the same time tells every mount on the machine, and its shell's Python is
        # read then too (the mount-wide counter moves, venv B's readings do not).
        self.m = self.mount("reads", env=GPUS,
                            options=[f"cudart={FAKE_CUDART}", "allow_other", "log_level=debug"])
        self.mnt = self.m.mountpoint
        before = self.m.status()["targets"]
        # 100 processes of one venv, 1000 reads from one of them.
        for _ in range(100):
            view(self.mnt, self.env_b)
        name = view(self.mnt, self.env_b)[1][0]
        timing = ("import os, sys, time\n"
                  "p = os.path.join(sys.argv[1], 'current', 'flash_attn')\n"
                  "os.listdir(p)\n"
                  "t = time.perf_counter()\n"
                  "for _ in range(1000): os.listdir(p)\n"
                  "ls = (time.perf_counter() - t) / 1000\n"
                  "t = time.perf_counter()\n"
                  "for _ in range(1000):\n"
                  "    with open(os.path.join(p, sys.argv[2]), 'rb') as f: f.read(4096)\n"
                  "print(ls, (time.perf_counter() - t) / 1000)\n")
        r = subprocess.run(["python3", "-c", timing, self.mnt, name], env=self.env_b,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        ls, read = (float(x) for x in r.stdout.split())
        after = self.m.status()["targets"]
        line = f"read the Python at {os.path.join(self.venv_b, 'bin', 'python3')} "
        wait_for(lambda: line in self.m.read_log(), timeout=5)  # (debug: flushed each second)
        reads = self.m.read_log().count(line)
        # The shells, ls and python3 of venv B all use venv B's bin/python3: its files are read
        # once for all of them (and re-checked by their stamps, not read, afterwards).
        self.assertEqual(reads, 1, (before, after))
        hinted = after["hints"] - before["hints"]  # other shells' Pythons, read once each
        self.assertLessEqual(after["interpreter_reads"] - before["interpreter_reads"], 1 + hinted)
        self.assertGreaterEqual(after["resolves"] - before["resolves"], 200)
        print(f"\nwarm listing of current/flash_attn: {ls * 1e3:.3f} ms; open+read 4 KiB of a "
              f"wheel: {read * 1e3:.3f} ms; venv readings for 100 processes and 2000 "
              f"operations: {reads}", file=sys.stderr)

    def test_options_fix_the_interpreter_or_the_whole_target(self):
        m = self.mount("py", env=GPUS, options=[f"cudart={FAKE_CUDART}",
                                                f"python={self.venv_a}/bin/python3"])
        self.assertEqual(view(m.mountpoint, self.env_b)[0], "targets/sm89-torch2.7-cu128-cp312")
        m = self.mount("one", env=dict(GPUS, VIRTUAL_ENV=self.venv_b),
                       options=[f"cudart={FAKE_CUDART}", "current=mount", "arch=sm80"])
        self.assertEqual(view(m.mountpoint, self.env_a)[0], f"targets/sm80-torch2.9-cu128-{TAG}")
        self.assertEqual(m.status()["targets"]["mode"], "mount")


if __name__ == "__main__":
    mounttest.main()
