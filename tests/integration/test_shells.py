#!/usr/bin/env python3
"""Mounted tests of the headline command the way people type it. A real interactive
bash and zsh in a pseudo-terminal, with the hook of `wheelhouse shell-hook` in their rc file,
expand current/flash_attn/*.whl themselves (the shell's own glob, answered for the shell's
process) after `source activate`, `deactivate` and another venv, a conda-style env, pyenv shims
with PYENV_VERSION and with .python-version; a Python interpreter then opens those names. A
script uses `wheelhouse detect --key`; pip with `wheelhouse pip-config` takes the wheel over a
newer sdist; hints that name another user's process, a FIFO, or a hung path change nothing else.
The hint asks only mounts it can trust: another user's mount (allow_other) is skipped unless
listed, and its daemon sees no request. A daemon restarted on the same folder (stopped and
mounted again, or killed) keeps the hints of the shells that are still running.
"""
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

import mounttest
import sysusers
from mounttest import MountedTestCase
from test_callers import PY, PYTHON, TAG, fake_torch, layout_venv, real_venv

try:
    import pexpect
except ImportError:  # tools/dev/setup.sh --tests installs python3-pexpect
    pexpect = None

FAKE_CUDART = os.path.join(mounttest.BUILD_DIR, "tests", "unit", "targeting", "libfake_cudart.so")
CLI = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")
HINT = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse-hint")
GPUS = {"FAKE_CUDA_DEVICES": "8.9"}
KEY_A = "sm89-torch2.7-cu128-cp312"  # venv-a: "3.12" with torch 2.7
KEY_B = f"sm89-torch2.9-cu128-{TAG}"  # venv-b: the real Python with torch 2.9
PROMPT = "WHFS-PROMPT> "


class Shell:
    """An interactive shell in a pseudo-terminal, its rc file evaluating the hook."""

    def __init__(self, kind, home, mnt):
        self.kind = kind
        os.makedirs(home, exist_ok=True)
        # bash as README writes it (the hook finds every wheelhouse mount), zsh naming its mount.
        named = "" if kind == "bash" else f" --mount {mnt}"
        hook = f'eval "$({CLI} shell-hook {kind}{named})"\n'
        env = {"HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "TERM": "dumb",
               "LANG": "C.UTF-8", "VIRTUAL_ENV_DISABLE_PROMPT": "1"}
        if kind == "bash":
            rc = os.path.join(home, "bashrc")
            with open(rc, "w") as f:
                f.write(hook + f"PS1='{PROMPT}'\nPS2=''\n")
            argv = ["bash", "--noprofile", "--rcfile", rc, "-i"]
        else:
            with open(os.path.join(home, ".zshrc"), "w") as f:
                f.write(hook + f"PROMPT='{PROMPT}'\nunsetopt PROMPT_SP\nsetopt NO_NOMATCH\n")
            env["ZDOTDIR"] = home
            argv = ["zsh", "-i"]
        self.p = pexpect.spawn(argv[0], argv[1:], env=env, encoding="utf-8", timeout=30,
                               echo=False, dimensions=(50, 400))
        self.p.expect_exact(PROMPT)

    def run(self, line):
        """Runs one line at the prompt; its output (between markers, so the echo is no matter)."""
        self.p.sendline(f"echo '<<''<'; {line}; echo '>>''>'")
        self.p.expect(r"<<<\r?\n(.*?)>>>\r?\n", timeout=60)
        out = self.p.match.group(1).replace("\r", "")
        self.p.expect_exact(PROMPT)
        return out

    def glob(self, mnt, pkg="flash_attn"):
        """The shell's own expansion of current/PKG/*.whl (basenames; [] when nothing matched)."""
        out = self.run(f'for f in {mnt}/current/{pkg}/*.whl; do echo "W:$f"; done').split("\n")
        names = [ln[2:] for ln in out if ln.startswith("W:")]
        return sorted(os.path.basename(n) for n in names if "*" not in n)

    def close(self):
        self.p.sendline("exit")
        self.p.close(force=True)


class Shells(MountedTestCase):
    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.chmod(cls.tmp, 0o755)
        t = cls.tmp
        cls.venv_a = os.path.join(t, "venv-a")
        layout_venv(cls.venv_a, "3.12.3", "2.7.1+cu128", "12.8")
        cls.venv_b = os.path.join(t, "venv-b")
        real_venv(cls.venv_b, "2.9.0+cu128", "12.8")
        # A conda-style env: its own interpreter binary (no pyvenv.cfg) and its torch.
        cls.conda = os.path.join(t, "conda-env")
        os.makedirs(os.path.join(cls.conda, "bin"))
        shutil.copy(PYTHON, os.path.join(cls.conda, "bin", f"python{PY}"))
        os.symlink(f"python{PY}", os.path.join(cls.conda, "bin", "python3"))
        fake_torch(os.path.join(cls.conda, "lib", f"python{PY}", "site-packages"), "2.9.0+cu128",
                   "12.8")
        # pyenv: a shims folder first on PATH (a script, as pyenv's are), two versions.
        cls.pyenv = os.path.join(t, "pyenv")
        os.makedirs(os.path.join(cls.pyenv, "shims"))
        shim = os.path.join(cls.pyenv, "shims", "python3")
        with open(shim, "w") as f:
            f.write("#!/bin/sh\necho 'a pyenv shim was run' >&2; exit 1\n")
        os.chmod(shim, 0o755)
        layout_venv(os.path.join(cls.pyenv, "versions", "3.12.1"), "3.12.1", "2.7.1+cu128", "12.8")
        real_venv(os.path.join(cls.pyenv, "versions", "proj-env"), "2.9.0+cu128", "12.8")
        cls.proj = os.path.join(t, "proj")
        os.makedirs(os.path.join(cls.proj, "sub"))
        with open(os.path.join(cls.proj, ".python-version"), "w") as f:
            f.write("proj-env\n")

    def setUp(self):
        if pexpect is None:
            self.skipTest("python3-pexpect is not installed")
        # The daemon's hint book in the test's own folder (not root's /run/wheelhouse-fs).
        self.options = [f"cudart={FAKE_CUDART}", "allow_other",
                        f"state_dir={self.scratch('state')}"]
        self.m = self.mount(env=GPUS, options=self.options)
        self.mnt = self.m.mountpoint

    def wheels(self, key, pkg="flash_attn"):
        return sorted(os.listdir(self.m.path(f"targets/{key}/{pkg}")))

    def opened_by_python(self, sh):
        """The venv's interpreter opens the names the shell expanded (as pip would)."""
        return sh.run(f'python3 -c "import sys; [open(p, \'rb\').read(2) for p in sys.argv[1:]]; '
                      f'print(len(sys.argv) - 1)" {self.mnt}/current/flash_attn/*.whl').strip()

    def check_shell(self, kind):
        if not shutil.which(kind):
            self.skipTest(f"{kind} is not installed")
        sh = Shell(kind, self.scratch(f"home-{kind}"), self.mnt)
        self.addCleanup(sh.close)
        want_a, want_b = self.wheels(KEY_A), self.wheels(KEY_B)
        self.assertTrue(want_a and want_b and want_a != want_b)
        # No venv: the system's Python, which has no torch.
        self.assertEqual(sh.glob(self.mnt), [])
        # A venv activated after the shell started: the shell's own glob follows it.
        sh.run(f"source {self.venv_b}/bin/activate")
        self.assertEqual(sh.glob(self.mnt), want_b)
        self.assertEqual(self.opened_by_python(sh), str(len(want_b)))
        # Also in a pipeline (the shell expands it in a child it forked).
        piped = sh.run(f"echo {self.mnt}/current/flash_attn/*.whl | tr ' ' '\\n' | sort")
        self.assertEqual(sorted(os.path.basename(p) for p in piped.split()), want_b)
        # deactivate, and another venv, in the same shell (venv-a is a layout with no activate
        # script: what activate does, by hand).
        sh.run(f"deactivate; export VIRTUAL_ENV={self.venv_a} PATH={self.venv_a}/bin:$PATH")
        self.assertEqual(sh.glob(self.mnt), want_a)
        self.assertEqual(self.opened_by_python(sh), str(len(want_a)))
        # The view came from the hook: the shell reads .target itself (a builtin redirect).
        report = sh.run(f'while IFS= read -r l; do printf "%s\\n" "$l"; done '
                        f'< {self.mnt}/current/.target')
        self.assertIn("from the shell hook", json.loads(report)["caller"]["environment"])
        # A conda-style env exported in the shell.
        sh.run(f"unset VIRTUAL_ENV; export CONDA_PREFIX={self.conda} "
               f"PATH={self.conda}/bin:/usr/local/bin:/usr/bin:/bin")
        self.assertEqual(sh.glob(self.mnt), want_b)
        # pyenv shims with PYENV_VERSION, then with .python-version in the working directory.
        sh.run(f"unset CONDA_PREFIX; export PATH={self.pyenv}/shims:/usr/bin:/bin "
               f"PYENV_ROOT={self.pyenv} PYENV_VERSION=3.12.1")
        self.assertEqual(sh.glob(self.mnt), want_a)
        sh.run(f"unset PYENV_VERSION; cd {self.proj}/sub")
        self.assertEqual(sh.glob(self.mnt), want_b)
        rep = sh.run(f"{CLI} detect")
        self.assertIn(f"pyenv proj-env ({self.proj}/.python-version)", rep)
        # And back: cd out of the project, nothing set: pyenv's "system" (no torch).
        sh.run("cd /")
        self.assertEqual(sh.glob(self.mnt), [])

    def test_an_interactive_bash_follows_its_venvs(self):
        self.check_shell("bash")

    def test_an_interactive_zsh_follows_its_venvs(self):
        self.check_shell("zsh")

    def test_a_restarted_daemon_keeps_the_shells_venv(self):
        if not shutil.which("bash"):
            self.skipTest("bash is not installed")
        sh = Shell("bash", self.scratch("home-restart"), self.mnt)
        self.addCleanup(sh.close)
        want = self.wheels(KEY_B)
        self.assertEqual(sh.glob(self.mnt), [])
        sh.run(f"source {self.venv_b}/bin/activate")
        self.assertEqual(sh.glob(self.mnt), want)
        for how in ("stopped", "killed"):
            with self.subTest(how):
                # As `systemctl restart` (SIGTERM, the daemon unmounts) or a crash and
                # Restart=on-failure: a new daemon on the same folder, with the same options.
                if how == "stopped":
                    self.m.signal(signal.SIGTERM)
                    self.assertEqual(self.m.unmount(), 0)
                else:
                    self.m.kill()
                self.m = self.mount(env=GPUS, options=self.options)
                self.assertEqual(self.m.mountpoint, self.mnt)
                self.assertEqual(self.m.status()["targets"]["hints_restored"], 1)
                # The next prompt, nothing typed: the shell's hook has nothing new to send.
                sh.p.sendline("")
                sh.p.expect_exact(PROMPT)
                self.assertEqual(sh.run(f"echo {self.mnt}/current/flash_attn/*.whl").split(),
                                 [f"{self.mnt}/current/flash_attn/{w}" for w in want])
                self.assertEqual(self.m.status()["targets"]["hints"], 0)  # none sent again
                report = json.loads(sh.run(f'while IFS= read -r l; do printf "%s\\n" "$l"; done '
                                           f'< {self.mnt}/current/.target'))
                self.assertIn("from the shell hook", report["caller"]["environment"])
                target = self.scratch(f"site-{how}")
                out = sh.run("python3 -m pip install --no-index --no-deps "
                             f"--disable-pip-version-check --target {target} "
                             f"{self.mnt}/current/flash_attn/*.whl 2>&1; echo rc=$?")
                self.assertIn("rc=0", out, out)
                self.assertTrue(any(n.startswith("flash_attn") for n in os.listdir(target)),
                                out)
        self.assertEqual(sh.glob(self.mnt), want)

    def test_the_hook_costs_nothing_when_nothing_changed(self):
        if not shutil.which("bash"):
            self.skipTest("bash is not installed")
        sh = Shell("bash", self.scratch("home-cost"), self.mnt)
        self.addCleanup(sh.close)
        before = self.m.status()["targets"]["hints"]
        for _ in range(20):
            sh.run("true")
        self.assertEqual(self.m.status()["targets"]["hints"], before)  # no hint sent
        sh.run(f"source {self.venv_b}/bin/activate")
        self.assertEqual(self.m.status()["targets"]["hints"], before + 1)
        # What a prompt costs when it did change: the helper's run, timed here 20 times.
        env = dict(os.environ, VIRTUAL_ENV=self.venv_b)
        start = time.perf_counter()
        for _ in range(20):
            subprocess.run([HINT, self.mnt], env=env, check=True)
        per = (time.perf_counter() - start) / 20 * 1000
        print(f"a hint (wheelhouse-hint, one mount): {per:.2f} ms per prompt that changed")

    def test_a_script_uses_detect_key(self):
        script = (f"set -e\n. {self.venv_b}/bin/activate\n"
                  f"ls {self.mnt}/targets/$({CLI} detect --key --mount {self.mnt})/flash_attn/*.whl\n")
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "HOME": self.tmp})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.path.basename(p) for p in r.stdout.split()),
                         self.wheels(KEY_B))
        # The mount's answer, its overrides included (a mount that fixes torch).
        m2 = self.mount(name="fixed", env=GPUS, options=[f"cudart={FAKE_CUDART}", "torch=2.7",
                                                         f"state_dir={self.scratch('state2')}"])
        r = subprocess.run([CLI, "detect", "--key", "--mount", m2.mountpoint], capture_output=True,
                           text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "VIRTUAL_ENV": self.venv_b})
        self.assertEqual(r.stdout.strip(), f"sm89-torch2.7-cu128-{TAG}", r.stderr)

    def test_pip_with_the_printed_config_takes_the_wheel_over_a_newer_sdist(self):
        conf = os.path.join(self.scratch("pip"), "pip.conf")
        r = subprocess.run([CLI, "pip-config", "--mount", self.mnt], capture_output=True,
                           text=True, check=True)
        with open(conf, "w") as f:
            f.write(r.stdout)
        self.assertIn(f"find-links = {self.mnt}/current/all/", r.stdout)
        # An index that offers only a newer source release, which must not be built.
        index = self.scratch("index")
        marker = os.path.join(index, "BUILT")
        sdist = os.path.join(index, "src", "flash_attn-99.0.0")
        os.makedirs(sdist)
        with open(os.path.join(sdist, "setup.py"), "w") as f:
            f.write(f"open({marker!r}, 'w').write('built')\nraise SystemExit('no')\n")
        with open(os.path.join(sdist, "PKG-INFO"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: flash_attn\nVersion: 99.0.0\n")
        subprocess.run(["tar", "-czf", os.path.join(index, "flash_attn-99.0.0.tar.gz"), "-C",
                        os.path.join(index, "src"), "flash_attn-99.0.0"], check=True)
        page = os.path.join(index, "simple", "flash-attn")
        os.makedirs(page)
        with open(os.path.join(page, "index.html"), "w") as f:
            f.write('<a href="../../flash_attn-99.0.0.tar.gz">flash_attn-99.0.0.tar.gz</a>\n')
        target = self.scratch("site")
        env = {"PATH": f"{self.venv_b}/bin:/usr/bin:/bin", "VIRTUAL_ENV": self.venv_b,
               "PIP_CONFIG_FILE": conf, "HOME": self.tmp}
        r = subprocess.run([f"{self.venv_b}/bin/python", "-m", "pip", "install", "--no-deps",
                            "--disable-pip-version-check", "--no-input", "--target", target,
                            "--index-url", f"file://{index}/simple/", "flash-attn"],
                           capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(marker), "the sdist was built")
        out = subprocess.run([PYTHON, "-c", f"import sys; sys.path.insert(0, {target!r}); "
                              "import flash_attn; print(flash_attn.where())"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout.strip(), "flash_attn/sm89/torch2.9-cu128", out.stderr)

    def test_hints_that_name_others_change_nothing_and_hang_nothing(self):
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv")
        # A child of another user cannot set the view of this (root) process.
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", HINT,
                            "-v", self.mnt], capture_output=True, text=True, timeout=30,
                           env={"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": self.venv_a})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("belongs to user 0", r.stdout)
        self.assertEqual(self.m.status()["targets"]["hints"], 0)
        # A hint naming a FIFO or a path outside this root answers at once and hangs nothing.
        fifo = os.path.join(self.scratch("fifo"), "venv")
        os.mkfifo(fifo)
        for venv in (fifo, "/proc/1/root/nonexistent", f"{self.mnt}/current"):
            start = time.monotonic()
            r = subprocess.run(["bash", "-c", f"{HINT} -v {self.mnt}"], capture_output=True,
                               text=True, timeout=30,
                               env={"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": venv})
            self.assertLess(time.monotonic() - start, 3, venv)
            self.assertIn("targets/unresolved", r.stdout, venv)
        self.assertEqual(os.readlink(self.m.path("current"))[:8], "targets/")


# A FUSE daemon of a few lines: it answers INIT, an extended attribute with ENODATA and the
# rest with ENOSYS, and logs each request (its operation and the pid that asked) to stdout.
FAKE_DAEMON = r"""
import errno, os, struct, sys
fd = int(sys.argv[1])
names = {1: "LOOKUP", 3: "GETATTR", 17: "STATFS", 22: "GETXATTR", 23: "LISTXATTR", 26: "INIT",
         27: "OPENDIR", 34: "ACCESS", 38: "DESTROY"}
def reply(unique, err, payload=b""):
    os.write(fd, struct.pack("<IiQ", 16 + len(payload), -err, unique) + payload)
while True:
    try:
        req = os.read(fd, 1 << 21)
    except OSError as e:
        if e.errno == errno.EINTR:
            continue
        break  # ENODEV: unmounted
    _, op, unique, _, _, _, pid = struct.unpack_from("<IIQQIII", req)
    print(names.get(op, f"op{op}"), f"pid={pid}", flush=True)
    if op == 26:  # INIT: the kernel's own protocol version, no features
        _, minor, readahead, _ = struct.unpack_from("<IIII", req, 40)
        reply(unique, 0, struct.pack("<IIIIHHIIHHI28x", 7, minor, readahead, 0, 16, 12, 1 << 17,
                                     1, 0, 0, 0))
    elif op in (2, 36, 42):  # FORGET, INTERRUPT, BATCH_FORGET: no reply
        continue
    elif op == 22:
        reply(unique, errno.ENODATA)
    elif op == 38:
        reply(unique, 0)
        break
    else:
        reply(unique, errno.ENOSYS)
"""

# In a mount namespace of its own, every wheelhouse mount but the test's is lazily unmounted
# (there only: the machine's mounts are untouched), then the hint runs with no MOUNTPOINT, as
# the prompt hook runs it: it sees the test's mounts and no other.
ISOLATED = r"""
import os, subprocess, sys
keep = set(sys.argv[1].split(":"))
with open("/proc/self/mountinfo") as f:
    lines = f.read().splitlines()
for line in reversed(lines):
    fields = line.split(" - ")
    mnt = fields[0].split()[4].encode().decode("unicode_escape")
    if fields[1].split()[0] == "fuse.wheelhousefs" and mnt not in keep:
        subprocess.run(["umount", "-l", mnt], check=True)
os.execv(sys.argv[2], sys.argv[2:])
"""


class UsersMount:
    """Another user's wheelhouse mount, as fusermount3 makes one where /etc/fuse.conf has
    user_allow_other: type fuse.wheelhousefs, that user's user_id= and group_id=, allow_other, its
    daemon running as that user (FAKE_DAEMON, whose log lists every request it gets)."""

    def __init__(self, mountpoint, user, log_path):
        self.mountpoint = mountpoint
        self.log_path = log_path
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        opts = f"fd={fd},rootmode=40000,user_id={user.uid},group_id={user.gid},allow_other"
        ms_nosuid_nodev = 2 | 4
        if libc.mount(b"whfs-users-mount", mountpoint.encode(), b"fuse.wheelhousefs",
                      ctypes.c_ulong(ms_nosuid_nodev), opts.encode()) != 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, os.strerror(err), mountpoint)
        try:
            with open(log_path, "wb") as log:
                # Debian's Python: the user may run it (the tests' own may live in root's home).
                self.proc = subprocess.Popen(["/usr/bin/python3", "-c", FAKE_DAEMON, str(fd)],
                                             pass_fds=(fd,), stdout=log, user=user.uid,
                                             group=user.gid, extra_groups=[])
        except BaseException:
            # Unserved, the mount would hang whoever looks at it (the scratch folder's removal).
            subprocess.run(["umount", "-l", mountpoint], check=False, capture_output=True)
            raise
        finally:
            os.close(fd)

    def requests(self):
        with open(self.log_path, encoding="utf-8") as f:
            return f.read().split("\n")

    def close(self):
        subprocess.run(["umount", "-l", self.mountpoint], check=False, capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class HintTrust(MountedTestCase):
    """The hook's helper asks the mounts of root and of the calling user, and those listed; not
    another user's (its daemon would learn the pids of everyone's shells and could hold their
    prompts)."""
    profile = "small"

    @classmethod
    def setUpClass(cls):
        ok, why = sysusers.usable()
        if not ok:
            raise unittest.SkipTest(f"a second user mounts: {why}")
        super().setUpClass()
        os.chmod(cls.tmp, 0o755)
        cls.user = sysusers.user("hintmount")
        cls.venv = os.path.join(cls.tmp, "venv")
        real_venv(cls.venv, "2.9.0+cu128", "12.8")

    def setUp(self):
        self.root_mount = self.mount(env=GPUS, options=[f"cudart={FAKE_CUDART}", "allow_other",
                                                        f"state_dir={self.scratch('state')}"])
        mnt = os.path.join(self.scratch("users"), "mnt")
        os.makedirs(mnt)
        self.theirs = UsersMount(mnt, self.user, os.path.join(self.scratch("users"), "requests"))
        self.addCleanup(self.theirs.close)
        # The log shows the daemon serving (INIT) before anything is asked of it.
        self.assertTrue(mounttest.wait_for(lambda: "INIT" in self.theirs.requests()[0],
                                           timeout=30))

    def hint(self, *args, env=None, isolated=False):
        env = dict({"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": self.venv}, **(env or {}))
        argv = [HINT, "-v", *args]
        if isolated:
            keep = f"{self.root_mount.mountpoint}:{self.theirs.mountpoint}"
            argv = ["unshare", "-m", "--propagation", "private", sys.executable, "-c", ISOLATED,
                    keep] + argv
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)

    def asked_theirs(self):
        return [r for r in self.theirs.requests() if r.startswith("GETXATTR")]

    def test_another_users_mount_is_not_asked(self):
        skipped = (f"{self.theirs.mountpoint}: not asked: its daemon runs as user "
                   f"{self.user.uid}, neither root nor you")
        # As the prompt hook runs it: every wheelhouse mount this process sees.
        r = self.hint(isolated=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"{self.root_mount.mountpoint}: targets/sm89-torch2.9-cu128-{TAG}", r.stdout)
        self.assertIn(skipped, r.stdout)
        self.assertEqual(self.root_mount.status()["targets"]["hints"], 1)
        # Named on the command line, it is not asked either.
        r = self.hint(self.theirs.mountpoint)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(skipped, r.stdout)
        self.assertEqual(self.asked_theirs(), [])

    def test_a_listed_mount_and_ones_own_are_asked(self):
        # The log does list what reaches the daemon: listed in $WHEELHOUSE_HINT_MOUNTS, it is
        # asked (and, being no wheelhouse, answers ENODATA).
        r = self.hint(self.theirs.mountpoint,
                      env={"WHEELHOUSE_HINT_MOUNTS": f"/nonexistent:{self.theirs.mountpoint}/"})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"{self.theirs.mountpoint}: not a wheelhouse mount", r.stderr)
        self.assertEqual(len(self.asked_theirs()), 1)
        # Its own user's hint is asked too.
        r = subprocess.run(["setpriv", f"--reuid={self.user.uid}", f"--regid={self.user.gid}",
                            "--clear-groups", HINT, "-v", self.theirs.mountpoint],
                           capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"{self.theirs.mountpoint}: not a wheelhouse mount", r.stderr)
        self.assertEqual(len(self.asked_theirs()), 2)
        # A folder that is no mount is named as such, and not asked.
        r = self.hint(self.tmp)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{self.tmp}: not a wheelhouse mount (no fuse.wheelhousefs mount there",
                      r.stderr)


if __name__ == "__main__":
    mounttest.main()
