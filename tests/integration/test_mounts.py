#!/usr/bin/env python3
"""Mounted tests of a node with several wheelhouse mounts: every command that needs a mount
uses the one named (its folder or a path in it), else the only one, and refuses with the list
when there are several; `wheelhouse mounts` tells live, stopped and dead mounts apart; refresh
and stop act on one daemon only, found from its mount's status and checked to be it; detect
reports what the mount's current/ shows; pip-config --append keeps a file's other lines.

The machine may hold other mounts: these tests look at their own only, and where a case needs
exactly one mount (or none) they run it in a private mount namespace without the others."""
import configparser
import json
import os
import re
import signal
import subprocess

import mounttest
from mounttest import REPO, MountedTestCase, is_mounted, wait_for
from test_admin import CLI, in_private_namespace, run

OVERRIDES = ["arch=sm89", "torch=2.9", "cuda=12.8"]
OTHER_KEY = "sm120-torch2.7-cu128-cp312"  # a target of the small dataset this machine is not


def entry(listing, mountpoint):
    return next(e for e in listing if e["mountpoint"] == mountpoint)


class Mounts(MountedTestCase):
    profile = "small"

    def two_mounts(self, **kw):
        return self.mount("a", options=OVERRIDES, **kw), self.mount("b", options=OVERRIDES, **kw)

    def test_several_mounts_give_a_list_or_a_refusal(self):
        a, b = self.two_mounts()
        # (The machine may hold a real /mnt/wheelhouse; it is then one of the list.)
        no_default = not is_mounted("/mnt/wheelhouse")
        for args in (["status"], ["pip-config"], ["prefetch", "--current"], ["hashes"],
                     ["cache", "stats"], ["detect", "--key"], ["refresh"], ["stop"]):
            r = run([CLI] + args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn("wheelhouse mounts here", r.stderr, args)
            if no_default:
                self.assertNotIn("/mnt/wheelhouse", r.stderr, args)
            for m in (a, b):
                # Each mount on a line of its own, with its daemon and state.
                self.assertRegex(r.stderr, rf"(?m)^  {re.escape(m.mountpoint)}  {REPO}@main  "
                                           rf"pid {m.pid}  \S+  live", args)
        self.assertIsNone(a.status()["last_refresh"])
        self.assertIsNone(b.status()["last_refresh"])
        self.assertTrue(a.serving() and b.serving())
        # detect with no mount named reads this machine, and says which mounts it did not ask.
        r = run([CLI, "detect"])
        self.assertIn("wheelhouse mounts here", r.stderr)
        self.assertIn(a.mountpoint, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^folder +targets/")
        # A mount named by a path inside it; a folder that is no mount is refused, never used.
        r = run([CLI, "pip-config", "--mount", a.path("current/flash_attn")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"find-links = {a.mountpoint}/current/all/", r.stdout)
        plain = self.scratch("plain")
        for args in (["status", plain], ["pip-config", "--mount", plain],
                     ["prefetch", "--mount", plain, "--current"], ["hashes", "--mount", plain],
                     ["cache", "--mount", plain, "stats"], ["detect", "--mount", plain]):
            r = run([CLI] + args)
            self.assertEqual(r.returncode, 3, (args, r.stdout, r.stderr))
            self.assertIn(f"{plain} is not a wheelhouse-fs mount", r.stderr, args)
            self.assertIn(a.mountpoint, r.stderr, args)
            self.assertEqual(r.stdout, "", args)

    def test_one_mount_is_used_and_none_says_how_to_mount(self):
        work = self.scratch("ns")
        mnt, cache = os.path.join(work, "mnt"), os.path.join(work, "cache")
        os.makedirs(mnt)
        opts = ",".join([f"endpoint={self.hub.hub}", f"cache_dir={cache}"] + OVERRIDES)
        out = lambda name: os.path.join(work, name)  # noqa: E731
        script = f"""
            {CLI} status > {out('none.out')} 2> {out('none.err')}; echo $? > {out('none.rc')}
            trap 'fusermount3 -u -z {mnt} 2>/dev/null' EXIT
            {mounttest.BINARY} -o {opts} {REPO} {mnt} || exit 99
            {CLI} status --json > {out('status.out')}; echo $? > {out('status.rc')}
            {CLI} pip-config > {out('pip.out')}; echo $? > {out('pip.rc')}
            {CLI} hashes > {out('hashes.out')}; echo $? > {out('hashes.rc')}
            {CLI} prefetch --target {OTHER_KEY} flash_attn > {out('prefetch.out')}
            echo $? > {out('prefetch.rc')}
            {CLI} cache stats --json > {out('cache.out')}; echo $? > {out('cache.rc')}
            {CLI} stop > {out('stop.out')}; echo $? > {out('stop.rc')}
            grep -c ' - fuse.wheelhousefs ' /proc/self/mountinfo > {out('left.out')} || true
        """
        r = in_private_namespace(script)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

        def read(name):
            with open(out(name), encoding="utf-8") as f:
                return f.read()
        self.assertEqual(read("none.rc").strip(), "3")
        self.assertIn("no wheelhouse mount here", read("none.err"))
        self.assertIn(f"wheelhousefs {REPO} /mnt/wheelhouse", read("none.err"))
        self.assertEqual(read("status.rc").strip(), "0")
        self.assertEqual(json.loads(read("status.out"))["mountpoint"], mnt)
        self.assertEqual(read("pip.rc").strip(), "0")
        self.assertIn(f"find-links = {mnt}/current/all/", read("pip.out"))
        self.assertEqual(read("hashes.rc").strip(), "0")
        self.assertIn("--hash=sha256:", read("hashes.out"))
        self.assertEqual(read("prefetch.rc").strip(), "0", read("prefetch.out"))
        fetched = f"fetched {mnt}/targets/{OTHER_KEY}/flash_attn/"
        self.assertEqual(read("prefetch.out").count(fetched), 1, read("prefetch.out"))
        self.assertEqual(read("cache.rc").strip(), "0")
        self.assertEqual(json.loads(read("cache.out"))["dir"], cache)
        self.assertEqual(read("stop.rc").strip(), "0", read("stop.out"))
        self.assertRegex(read("stop.out"), rf"^{mnt}: unmounted; its daemon \(pid \d+\) ended")
        self.assertEqual(read("left.out").strip(), "0")

    def test_mounts_lists_live_stopped_and_dead(self):
        live, stopped = self.two_mounts()
        dead = self.mount("dead")
        os.kill(stopped.pid, signal.SIGSTOP)
        self.addCleanup(os.kill, stopped.pid, signal.SIGCONT)  # before its unmount (LIFO)
        dead.killed = True
        os.kill(dead.pid, signal.SIGKILL)
        dead.proc.wait()
        r = run([CLI, "mounts", "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        listing = json.loads(r.stdout)
        want = {live.mountpoint: ("live", live.pid), stopped.mountpoint: ("stopped", stopped.pid),
                dead.mountpoint: ("dead", None)}
        for mnt, (state, pid) in want.items():
            e = entry(listing, mnt)
            self.assertEqual((e["state"], e["pid"], e["user"], e["repo"]),
                             (state, pid, "root", REPO), e)
        self.assertEqual(entry(listing, live.mountpoint)["revision"], "main")
        human = run([CLI, "mounts"]).stdout
        self.assertRegex(human, rf"(?m)^{live.mountpoint} +{REPO}@main +{live.pid} +root +live$")
        self.assertRegex(human, rf"(?m)^{stopped.mountpoint} .* {stopped.pid} +root +stopped .*"
                                rf"kill -CONT {stopped.pid}")
        self.assertRegex(human, rf"(?m)^{dead.mountpoint} .* - +root +dead ")
        # What needs the stopped one says so and ends; the dead one is detached by stop.
        r = run([CLI, "status", stopped.mountpoint])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("no answer in 3 s (its daemon is stopped or hung", r.stderr)
        r = run([CLI, "stop", stopped.mountpoint])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"kill -CONT {stopped.pid}", r.stderr)
        self.assertTrue(is_mounted(stopped.mountpoint))
        r = run([CLI, "status", dead.mountpoint])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dead (its daemon is gone", r.stderr)
        r = run([CLI, "stop", dead.mountpoint])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("detached", r.stdout)
        self.assertFalse(is_mounted(dead.mountpoint))
        os.kill(stopped.pid, signal.SIGCONT)
        self.assertTrue(wait_for(stopped.serving, timeout=30))
        self.assertEqual(entry(json.loads(run([CLI, "mounts", "--json"]).stdout),
                               stopped.mountpoint)["state"], "live")

    def test_refresh_and_stop_act_on_one_mount_only(self):
        a, b = self.two_mounts()
        r = run([CLI, "refresh", "--mount", a.path("flash_attn")])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"{a.mountpoint}: asked its daemon (pid {a.pid})", r.stdout)
        self.assertIsNotNone(a.status()["last_refresh"])
        self.assertIn(a.status()["last_refresh"]["result"], r.stdout)
        self.assertIsNone(b.status()["last_refresh"])
        self.assertIn("SIGHUP: looking for a new commit", a.read_log())
        self.assertNotIn("SIGHUP", b.read_log())
        r = run([CLI, "stop", a.mountpoint])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"{a.mountpoint}: unmounted; its daemon (pid {a.pid}) ended", r.stdout)
        self.assertEqual(a.proc.wait(timeout=30), 0)
        self.assertFalse(is_mounted(a.mountpoint))
        self.assertTrue(b.serving())
        self.assertIsNone(b.status()["last_refresh"])
        self.assertIsNone(b.proc.poll())

    def test_a_pid_that_is_not_the_mount_daemon_is_never_signalled(self):
        # A daemon in a pid namespace of its own (as in a container) reports its own pid, 1:
        # here pid 1 is another program, which refresh must not signal.
        mnt = self.scratch("pidns")
        log = open(os.path.join(self.tmp, "pidns.log"), "ab")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            ["unshare", "--pid", "--kill-child", mounttest.BINARY, "-f", "-o",
             f"endpoint={self.hub.hub},cache_dir={mnt}-cache", REPO, mnt],
            stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(proc.wait, timeout=60)
        self.addCleanup(subprocess.run, ["fusermount3", "-u", "-z", mnt], check=False,
                        stderr=subprocess.DEVNULL)
        self.addCleanup(proc.kill)
        self.assertTrue(wait_for(lambda: is_mounted(mnt) or proc.poll() is not None, timeout=30))
        self.assertEqual(json.loads(os.getxattr(mnt, "user.wheelhouse.status"))["pid"], 1)
        r = run([CLI, "refresh", mnt])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"{mnt}: not refreshed: pid 1 (its status's) is", r.stderr)
        self.assertIn("another pid namespace", r.stderr)
        self.assertIsNone(json.loads(os.getxattr(mnt, "user.wheelhouse.status"))["last_refresh"])
        # stop still unmounts it (no signal is sent), and says its daemon was not waited for.
        r = run([CLI, "stop", mnt])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("not waited for", r.stdout)
        self.assertFalse(is_mounted(mnt))
        self.assertEqual(proc.wait(timeout=60), 0)

    def test_prefetch_target_takes_one_key_and_the_names_after_are_packages(self):
        m = self.mount(options=OVERRIDES)
        r = run([CLI, "prefetch", "--mount", m.mountpoint, "--target", OTHER_KEY, "flash_attn"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        fetched = [ln for ln in r.stdout.splitlines() if ln.startswith("fetched ")]
        self.assertEqual(len(fetched), 1, r.stdout)
        want = f"fetched {m.mountpoint}/targets/{OTHER_KEY}/flash_attn/"
        self.assertTrue(fetched[0].startswith(want), fetched)
        # Repeated, each --target takes one key; a path (with a '/') stays a path of the mount.
        key = run([CLI, "detect", "--key", "--mount", m.mountpoint]).stdout.strip()
        r = run([CLI, "prefetch", "--mount", m.mountpoint, "--target", OTHER_KEY, "--target", key,
                 "flash_attn", f"targets/{key}/.target"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for k in (OTHER_KEY, key):
            self.assertIn(f"fetched {m.mountpoint}/targets/{k}/flash_attn/", r.stdout)
        self.assertIn(f"fetched {m.mountpoint}/targets/{key}/.target ", r.stdout)

    def test_detect_reports_what_the_mount_shows(self):
        m = self.mount(options=["arch=sm89"])
        self.mount("other")  # a second mount: detect must not read this machine instead
        # What current/ shows a process of this environment that is not Python: cat, as the CLI.
        truth = json.loads(run(["cat", m.path("current/.target")]).stdout)
        self.assertEqual(truth["target"]["arch"]["value"], "sm89")
        r = run([CLI, "detect", "--mount", m.mountpoint])
        self.assertIn(r.returncode, (0, 1), r.stderr)
        self.assertRegex(r.stdout, r"(?m)^GPU arch +sm89 ")
        self.assertRegex(r.stdout, rf"(?m)^folder +targets/{truth['key']}( |$)")
        j = json.loads(run([CLI, "detect", "--json", "--mount", m.mountpoint]).stdout)
        self.assertEqual(j["arch"]["value"], "sm89")
        self.assertEqual(j["key"], truth["key"])
        self.assertEqual(j["mount"], m.mountpoint)
        key = run([CLI, "detect", "--key", "--mount", m.mountpoint]).stdout.strip()
        self.assertEqual(key, truth["key"])
        # Run in a folder of the mount, it is that mount's answer.
        r = run([CLI, "detect", "--json"], cwd=m.path("flash_attn"))
        self.assertEqual(json.loads(r.stdout)["mount"], m.mountpoint, r.stderr)
        r = run([CLI, "detect", "--mount", m.mountpoint, "-o", "arch=sm80"])
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_pip_config_append_keeps_the_other_lines(self):
        m = self.mount()
        conf = os.path.join(self.scratch("pip"), "pip.conf")
        before = ("# the site's settings\n"
                  "[global]\n"
                  "timeout = 60\n"
                  "find-links = /opt/local-wheels\n"
                  "    /old/wheelhouse/current/all/\n"
                  "index-url = https://pypi.example/simple\n"
                  "\n"
                  "[install]\n"
                  "no-cache-dir = true\n")
        with open(conf, "w", encoding="utf-8") as f:
            f.write(before)
        os.chmod(conf, 0o640)
        r = run([CLI, "pip-config", "--mount", m.mountpoint, "--append", conf])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(conf, encoding="utf-8") as f:
            after = f.read()
        parsed = configparser.ConfigParser()
        parsed.read_string(after)
        self.assertEqual(parsed["global"]["find-links"].split(),
                         ["/opt/local-wheels", f"{m.mountpoint}/current/all/"])
        self.assertEqual(parsed["global"]["prefer-binary"], "true")
        for line in ("# the site's settings", "timeout = 60",
                     "index-url = https://pypi.example/simple", "[install]",
                     "no-cache-dir = true"):
            self.assertIn(line + "\n", after)
        self.assertNotIn("/old/wheelhouse", after)
        self.assertEqual(os.stat(conf).st_mode & 0o777, 0o640)
        # Again: nothing to change.
        r = run([CLI, "pip-config", "--mount", m.mountpoint, "--append", conf])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("already", r.stdout)
        with open(conf, encoding="utf-8") as f:
            self.assertEqual(f.read(), after)
        # A file without [global] gets one; a missing file is created; a link is refused.
        other = os.path.join(self.scratch("pip"), "other.conf")
        with open(other, "w", encoding="utf-8") as f:
            f.write("[install]\nuser = false\n")
        self.assertEqual(run([CLI, "pip-config", "--mount", m.mountpoint, "--append",
                              other]).returncode, 0)
        parsed = configparser.ConfigParser()
        parsed.read(other)
        self.assertEqual(parsed["install"]["user"], "false")
        self.assertEqual(parsed["global"]["find-links"], f"{m.mountpoint}/current/all/")
        new = os.path.join(self.scratch("pip"), "new.conf")
        self.assertEqual(run([CLI, "pip-config", "--mount", m.mountpoint, "--append",
                              new]).returncode, 0)
        parsed = configparser.ConfigParser()
        parsed.read(new)
        self.assertEqual(parsed["global"]["prefer-binary"], "true")
        link = os.path.join(self.scratch("pip"), "link.conf")
        os.symlink(conf, link)
        r = run([CLI, "pip-config", "--mount", m.mountpoint, "--append", link])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("a symbolic link", r.stderr)
        with open(conf, encoding="utf-8") as f:
            self.assertEqual(f.read(), after)


if __name__ == "__main__":
    mounttest.main()
