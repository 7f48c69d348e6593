#!/usr/bin/env python3
"""The systemd units under a real systemd: Debian 12's systemd 252 as PID 1 of a rootful podman
container (the base image of podman_images.py), this build's .deb installed in it with dpkg,
the Hub emulator on the host's loopback (--network host). Each test boots its own container:
- wheelhousefs@.service mounts a public repository with no token file, and a private one with
  the token in /etc/wheelhouse-fs/token (without it, that mount fails);
- `systemctl restart` under an interactive bash with the shell hook and a venv activated after
  the shell started: after one empty prompt its glob of current/ still gives the venv's wheel;
- Restart=on-failure: after `kill -9` of the daemon the unit is back and serving, and the dead
  mount of the killed daemon is gone (nothing had looked at the mount's root before the kill);
- the automount: its mount unit (what the first access starts) binds the mount of
  wheelhousefs-automount@.service on /mnt/wheelhouse, and a crash of that daemon unmounts it;
  where the kernel has autofs, the first access through mnt-wheelhouse.automount mounts it;
- an upgrade of the .deb with dpkg while a mount serves: a reader loop sees no error, and the
  daemon (the old binary, deleted) keeps running until the unit is restarted.
Skipped (exit 77) only where rootful podman cannot run.
"""
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import mounttest
import podman_images as images
from fakehub_ctl import FakeHub
from mounttest import REPO

try:
    import pexpect
except ImportError:  # tools/dev/setup.sh --tests installs python3-pexpect
    pexpect = None

PRIVATE = "acme/private"
TOKEN = "hf_whfs_systemd_token"
KEY = "sm89-torch2.9-cu128-cp311"  # /opt/venv: Debian 12's Python 3.11 with torch 2.9
PROMPT = "WHFS-PROMPT> "
UPGRADE_VERSION = "0.1.1"  # above this build's version, whatever it is (checked)

# Run in the container: until UNIT's daemon, another than OLD, serves MNT (its pid and the
# seconds waited on stdout), or LIMIT seconds, or the unit failed with no restart coming.
WAIT_SERVING = r"""
import json, os, subprocess, sys, time
unit, mnt, old, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
start = time.monotonic()
while True:
    pid, state, sub = subprocess.run(["systemctl", "show", "-P", "MainPID,ActiveState,SubState",
                                      unit], capture_output=True, text=True).stdout.split()
    if state in ("failed", "inactive") and sub in ("failed", "dead"):
        sys.exit(1)
    try:
        ok = (pid not in ("", "0", old) and
              json.loads(os.getxattr(mnt, "user.wheelhouse.status"))["pid"] == int(pid) and
              len(open(os.path.join(mnt, "README.md"), "rb").read()) > 0)
    except (OSError, ValueError, KeyError):
        ok = False
    if ok:
        print(json.dumps({"pid": int(pid), "seconds": time.monotonic() - start}))
        sys.exit(0)
    if time.monotonic() - start > limit:
        sys.exit(1)
    time.sleep(0.05)
"""

# Run in the container: reads the files (and lists their folders) until STOP exists; says
# "reading" after the first round, then the counts.
READER = r"""
import json, os, sys
mnt, stop = sys.argv[1], sys.argv[2]
files = [os.path.join(mnt, p) for p in sys.argv[3:]]
ok = errors = 0
first = None
rounds = 0
while not os.path.exists(stop):
    for p in files:
        try:
            with open(p, "rb") as f:
                f.read(1 << 16)
            os.listdir(os.path.dirname(p))
            ok += 1
        except OSError as e:
            errors += 1
            first = first or f"{p}: {e}"
    rounds += 1
    if rounds == 1:
        print("reading", flush=True)
print(json.dumps({"ok": ok, "errors": errors, "first": first}), flush=True)
"""


def which_missing():
    return [p for p in ("cpack", "dpkg-deb") if shutil.which(p) is None]


class Container:
    """A container booted with systemd as PID 1 and the .deb installed with dpkg."""

    def __init__(self, name):
        self.name = name
        self.up = False

    def boot(self, image, debs):
        args = ["run", "-d", "--pull=never", "--systemd=always",
                "--cgroupns=private", "--network", "host", "--device", "/dev/fuse",
                # What the unit's CapabilityBoundingSet= asks for, as root has it on a host.
                "--cap-add", "SYS_ADMIN,DAC_READ_SEARCH,SYS_PTRACE,SETUID,SETGID"]
        if os.path.exists("/dev/autofs"):
            args += ["--device", "/dev/autofs"]
        self.up = True  # removed from here on, whatever happens
        images.podman(*args, "--name", self.name, image, "/lib/systemd/systemd", timeout=120)
        # Until PID 1 answers on its socket, then until it has booted.
        r = self.sh("for i in $(seq 1200); do s=$(systemctl is-system-running --wait 2>&1) && "
                    "break; case $s in *'Failed to connect'*) sleep 0.05;; *) break;; esac; "
                    "done; echo $s", check=False, timeout=120)
        assert r.stdout.strip() in ("running", "degraded"), \
            f"systemd did not boot: {r.stdout}{self.sh('systemctl --failed', check=False).stdout}"
        # systemd makes / shared when it boots a host; in a container it leaves that to the
        # container's manager (podman's is private), and then a unit's credentials or a mount
        # it moves into place is not seen by the rest of the system.
        self.sh("mount --make-rshared /")
        for deb in debs:
            images.podman("cp", deb, f"{self.name}:/root/{os.path.basename(deb)}")
        self.sh(f"dpkg -i /root/{os.path.basename(debs[0])} >/dev/null")

    def exec(self, *argv, check=True, timeout=120, stdin=None):
        extra = ["-i"] if stdin is not None else []
        return images.podman("exec", *extra, self.name, *argv, check=check, timeout=timeout,
                             input=stdin)

    def sh(self, script, check=True, timeout=120):
        return self.exec("sh", "-c", script, check=check, timeout=timeout)

    def py(self, script, *args, check=True, timeout=120):
        return self.exec("python3", "-", *args, stdin=script, check=check, timeout=timeout)

    def write(self, path, text, mode=0o644):
        self.exec("sh", "-c", f'mkdir -p "${{1%/*}}" && umask 077 && cat > "$1" && '
                  f'chmod {mode:o} "$1"', "sh", path, stdin=text)

    def journal(self, unit):
        return self.sh(f"journalctl -u '{unit}' -o cat --no-pager | tail -40", check=False).stdout

    def state(self, unit):
        return self.exec("systemctl", "is-active", unit, check=False).stdout.strip()

    def remove(self):
        if self.up:
            images.podman("rm", "-f", "-t", "0", self.name, check=False, timeout=120)
            self.up = False


class Systemd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        missing = which_missing()
        if missing:
            raise AssertionError(f"{', '.join(missing)} missing: tools/dev/setup.sh --tests")
        cls.tmp = tempfile.mkdtemp(prefix="whfs-systemd-")
        try:
            data = mounttest.testdata.dataset("small")
            with open(os.path.join(data, "manifest.json"), encoding="utf-8") as f:
                cls.manifest = json.load(f)
            tree = os.path.join(data, "tree")
            cls.hub = FakeHub({REPO: tree, PRIVATE: tree + ":private"},
                              os.path.join(cls.tmp, "hub"), tokens={TOKEN: [PRIVATE]})
            t = time.monotonic()
            cls.deb = images.build_deb()
            version = subprocess.run(["dpkg-deb", "-f", cls.deb, "Version"], capture_output=True,
                                     text=True, check=True).stdout.strip()
            newer = subprocess.run(["dpkg", "--compare-versions", f"{UPGRADE_VERSION}-1", "gt",
                                    version])
            assert newer.returncode == 0, f"the upgrade's {UPGRADE_VERSION} is not above {version}"
            cls.deb_new = images.build_deb(UPGRADE_VERSION)
            # No .deb in the image: dpkg installs it in the container, as on a host.
            cls.image = images.venv_image(images.base_image(cls.deb), "2.9.0+cu128", "12.8",
                                          env={})
            print(f"images and .debs: {time.monotonic() - t:.1f} s", file=sys.stderr)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "hub", None):
            cls.hub.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.started = time.monotonic()
        name = f"whfs-systemd-{os.getpid()}-{self.id().rsplit('.', 1)[-1][5:40]}"
        self.c = Container(name)
        self.addCleanup(self.c.remove)
        self.addCleanup(lambda: print(f"{self.id().rsplit('.', 1)[-1]}: "
                                      f"{time.monotonic() - self.started:.1f} s", file=sys.stderr))
        self.c.boot(self.image, [self.deb, self.deb_new])

    def configure(self, instance, repo=REPO, options=""):
        self.c.write(f"/etc/wheelhouse-fs/{instance}.conf",
                     f"WHEELHOUSE_REPO={repo}\n"
                     f"WHEELHOUSE_OPTIONS=allow_other,endpoint={self.hub.hub}{options}\n")

    def start(self, unit, mnt=None):
        """systemctl start UNIT (a mount point made first, as the admin does); asserts it is
        active."""
        if mnt:
            self.c.sh(f"mkdir -p {mnt}")
        r = self.c.exec("systemctl", "start", unit, check=False, timeout=180)
        self.assertEqual(r.returncode, 0, f"{unit}: {r.stderr}\n{self.c.journal(unit)}")
        self.assertEqual(self.c.state(unit), "active", self.c.journal(unit))

    def main_pid(self, unit):
        return int(self.c.exec("systemctl", "show", "-P", "MainPID", unit).stdout)

    def wait_serving(self, unit, mnt, old_pid=0, limit=60):
        """Waits until UNIT's daemon (another than old_pid) serves MNT; (pid, seconds)."""
        r = self.c.py(WAIT_SERVING, unit, mnt, str(old_pid), str(limit), check=False,
                      timeout=limit + 60)
        self.assertEqual(r.returncode, 0, f"{unit} does not serve {mnt}:\n{self.c.journal(unit)}")
        out = json.loads(r.stdout)
        return out["pid"], out["seconds"]

    def wheel(self, repo_path):
        return self.manifest["files"][repo_path]["sha256"]

    def hashes(self, mnt, paths):
        r = self.c.exec("sha256sum", *[f"{mnt}/{p}" for p in paths], check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [line.split()[0] for line in r.stdout.splitlines()]

    def some_wheels(self, n=2):
        return sorted(p for p in self.manifest["files"] if p.endswith(".whl"))[:n]

    # --- the boot-time unit ------------------------------------------------------------------

    def test_a_public_repository_mounts_without_a_token_file(self):
        self.c.sh("test ! -e /etc/wheelhouse-fs/token")
        self.configure("mnt-wheelhouse")
        self.hub.clear_log()
        self.start("wheelhousefs@mnt-wheelhouse.service", "/mnt/wheelhouse")
        wheels = self.some_wheels()
        self.assertEqual(self.hashes("/mnt/wheelhouse", wheels), [self.wheel(w) for w in wheels])
        self.assertFalse([e for e in self.hub.log() if e["auth"]], "a token was sent")

    def test_the_token_file_is_used(self):
        self.configure("mnt-private", repo=PRIVATE)
        self.c.sh("mkdir -p /mnt/private")
        unit = "wheelhousefs@mnt-private.service"
        # No token: the private repository is not found, and the unit fails.
        r = self.c.exec("systemctl", "start", unit, check=False, timeout=180)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not found", self.c.journal(unit).lower())
        self.c.exec("systemctl", "stop", unit)
        self.c.write("/etc/wheelhouse-fs/token", TOKEN + "\n", mode=0o600)
        self.hub.clear_log()
        self.start(unit)
        wheels = self.some_wheels()
        self.assertEqual(self.hashes("/mnt/private", wheels), [self.wheel(w) for w in wheels])
        self.assertTrue([e for e in self.hub.log() if e["server"] == "hub" and e["auth"]])
        # The token is in no process's environment, only its file's name.
        env = self.c.sh(f"tr '\\0' '\\n' < /proc/{self.main_pid(unit)}/environ").stdout
        self.assertNotIn(TOKEN, env)
        self.assertIn("HF_TOKEN_PATH=/etc/wheelhouse-fs/token", env)

    def test_restart_on_failure_after_kill_9(self):
        self.configure("mnt-wheelhouse")
        unit = "wheelhousefs@mnt-wheelhouse.service"
        self.start(unit, "/mnt/wheelhouse")
        # Nothing looks at the mount's root before the kill: its attributes are not cached,
        # and the killed daemon's mount answers ENOTCONN.
        pid = self.main_pid(unit)
        self.c.sh(f"kill -9 {pid}")
        new, seconds = self.wait_serving(unit, "/mnt/wheelhouse", pid)
        print(f"back and serving {seconds:.1f} s after kill -9 (RestartSec=5s)", file=sys.stderr)
        self.assertNotEqual(new, pid)
        mounts = self.c.sh("grep -c ' /mnt/wheelhouse ' /proc/self/mountinfo", check=False)
        self.assertEqual(mounts.stdout.strip(), "1", "the dead mount is still there")
        wheels = self.some_wheels(1)
        self.assertEqual(self.hashes("/mnt/wheelhouse", wheels), [self.wheel(w) for w in wheels])

    def test_a_restart_under_a_hooked_shell(self):
        if pexpect is None:
            self.fail("python3-pexpect is missing: tools/dev/setup.sh --tests")
        self.configure("mnt-wheelhouse", options=",arch=sm89")  # no GPU here
        unit = "wheelhousefs@mnt-wheelhouse.service"
        self.start(unit, "/mnt/wheelhouse")
        want = self.c.sh(f"ls /mnt/wheelhouse/targets/{KEY}/flash_attn").stdout.split()
        self.assertTrue(want)
        # An interactive bash in the container, the hook in its rc file.
        self.c.write("/root/whfs-bashrc", f'eval "$(wheelhouse shell-hook bash)"\n'
                     f"PS1='{PROMPT}'\nPS2=''\n")
        sh = pexpect.spawn("podman", ["exec", "-it", "-e", "TERM=dumb", "-e",
                                      "VIRTUAL_ENV_DISABLE_PROMPT=1", self.c.name, "bash",
                                      "--noprofile", "--rcfile", "/root/whfs-bashrc", "-i"],
                           env=images.ENV, encoding="utf-8", timeout=60, echo=False,
                           dimensions=(50, 400))
        self.addCleanup(sh.close, True)
        sh.expect_exact(PROMPT)

        def run(line):
            sh.sendline(f"echo '<<''<'; {line}; echo '>>''>'")
            sh.expect(r"<<<\r?\n(.*?)>>>\r?\n")
            out = sh.match.group(1).replace("\r", "")
            sh.expect_exact(PROMPT)
            return out

        def glob():
            out = run('for f in /mnt/wheelhouse/current/flash_attn/*.whl; do echo "W:$f"; done')
            return sorted(os.path.basename(ln[2:]) for ln in out.split("\n")
                          if ln.startswith("W:") and "*" not in ln)

        self.assertEqual(glob(), [])  # the system's Python has no torch
        run("source /opt/venv/bin/activate")
        self.assertEqual(glob(), want, "current/ under the unit does not follow the venv")
        pid = self.main_pid(unit)
        self.c.exec("systemctl", "restart", unit, timeout=180)
        self.wait_serving(unit, "/mnt/wheelhouse", pid)
        # One prompt, nothing typed: the hook has nothing new to say.
        sh.sendline("")
        sh.expect_exact(PROMPT)
        self.assertEqual(glob(), want, "after the restart the shell's glob lost its venv")

    # --- the automount ---------------------------------------------------------------------

    def automount_units(self):
        self.configure("mnt-wheelhouse")
        self.c.sh("cp /usr/share/wheelhouse-fs/automount/mnt-wheelhouse.* /etc/systemd/system/ && "
                  "systemctl daemon-reload")

    def test_the_automounts_mount_unit_binds_its_daemons_mount(self):
        self.automount_units()
        daemon = "wheelhousefs-automount@mnt-wheelhouse.service"
        # What the automount starts at the first access.
        self.start("mnt-wheelhouse.mount")
        self.assertEqual(self.c.state(daemon), "active")
        wheels = self.some_wheels(1)
        self.assertEqual(self.hashes("/mnt/wheelhouse", wheels), [self.wheel(w) for w in wheels])
        # A crash of the daemon unmounts /mnt/wheelhouse (no dead mount for readers), and the
        # next start serves again.
        pid = self.main_pid(daemon)
        self.c.sh(f"kill -9 {pid}")
        r = self.c.sh("for i in $(seq 600); do grep -q ' /mnt/wheelhouse ' /proc/self/mountinfo "
                      "|| exit 0; sleep 0.05; done; exit 1", check=False, timeout=60)
        self.assertEqual(r.returncode, 0, "the bind of a dead mount stayed on /mnt/wheelhouse")
        self.assertEqual(self.c.state("mnt-wheelhouse.mount"), "inactive")
        self.start("mnt-wheelhouse.mount")  # starts the daemon at once (no RestartSec= wait)
        self.assertNotEqual(self.main_pid(daemon), pid)
        self.assertEqual(self.hashes("/mnt/wheelhouse", wheels), [self.wheel(w) for w in wheels])

    def test_the_first_access_mounts_through_the_automount(self):
        with open("/proc/filesystems", encoding="utf-8") as f:
            autofs = "autofs" in f.read().split()
        if not autofs or not os.path.exists("/dev/autofs"):
            self.skipTest("this kernel has no autofs (systemd's automount units need it)")
        self.automount_units()
        self.start("mnt-wheelhouse.automount")
        daemon = "wheelhousefs-automount@mnt-wheelhouse.service"
        self.assertEqual(self.c.state(daemon), "inactive")
        wheels = self.some_wheels(1)
        self.assertEqual(self.hashes("/mnt/wheelhouse", wheels), [self.wheel(w) for w in wheels])
        self.assertEqual(self.c.state(daemon), "active")
        self.assertEqual(self.c.state("mnt-wheelhouse.mount"), "active")

    # --- the package -----------------------------------------------------------------------

    def test_an_upgrade_while_a_mount_serves(self):
        self.configure("mnt-wheelhouse")
        unit = "wheelhousefs@mnt-wheelhouse.service"
        self.start(unit, "/mnt/wheelhouse")
        pid = self.main_pid(unit)
        wheels = self.some_wheels(4)
        reader = subprocess.Popen(
            ["podman", "exec", self.c.name, "python3", "-c", READER, "/mnt/wheelhouse",
             "/tmp/stop-reading", "README.md", *wheels], env=images.ENV,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def end_reader():
            if reader.poll() is None:
                reader.kill()
            reader.communicate()

        self.addCleanup(end_reader)
        ready, _, _ = select.select([reader.stdout], [], [], 60)
        self.assertTrue(ready, "the reader did not start")
        self.assertEqual(reader.stdout.readline().strip(), "reading")
        r = self.c.exec("dpkg", "-i", f"/root/{os.path.basename(self.deb_new)}", check=False,
                        timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.c.sh("touch /tmp/stop-reading")
        out, err = reader.communicate(timeout=120)
        counts = json.loads(out.strip().splitlines()[-1])
        self.assertGreater(counts["ok"], 0, err)
        self.assertEqual(counts["errors"], 0, counts["first"])
        version = self.c.sh("dpkg-query -W -f '${Version}' wheelhouse-fs").stdout
        self.assertEqual(version, f"{UPGRADE_VERSION}-1")
        # Nothing restarted it: the same daemon runs the old (replaced) binary.
        self.assertEqual(self.main_pid(unit), pid)
        self.assertEqual(self.c.state(unit), "active")
        exe = self.c.exec("readlink", f"/proc/{pid}/exe").stdout.strip()
        self.assertEqual(exe, "/usr/bin/wheelhousefs (deleted)")
        reload = self.c.exec("systemctl", "show", "-P", "NeedDaemonReload", unit).stdout.strip()
        print(f"upgrade: {counts['ok']} reads, {counts['errors']} errors; the daemon kept "
              f"running the old binary; NeedDaemonReload={reload}", file=sys.stderr)
        # The admin's restart runs the new one.
        self.c.exec("systemctl", "restart", unit, timeout=180)
        new, _ = self.wait_serving(unit, "/mnt/wheelhouse", pid)
        self.assertEqual(self.c.exec("readlink", f"/proc/{new}/exe").stdout.strip(),
                         "/usr/bin/wheelhousefs")


if __name__ == "__main__":
    images.main("the systemd tests")
