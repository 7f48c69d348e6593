#!/usr/bin/env python3
"""Packaging and units (issue #7): `systemd-analyze verify` on the template unit, and the .deb
that CPack builds: its contents, its Debian dependencies, and its programs run from a scratch
root it is unpacked into."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("WHFS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
UNIT = os.path.join(SOURCE_DIR, "systemd", "wheelhousefs@.service")


class SystemdUnit(unittest.TestCase):
    def test_template_unit_verifies_cleanly(self):
        if shutil.which("systemd-analyze") is None:
            self.fail("systemd-analyze is missing: tools/setup.sh --tests installs systemd")
        with tempfile.TemporaryDirectory() as d:
            # An instance of the template, with the freshly built daemon where the package puts it.
            inst = os.path.join(d, "wheelhousefs@mnt-wheelhouse.service")
            with open(UNIT, encoding="utf-8") as f:
                text = f.read().replace("/usr/bin/wheelhousefs",
                                        os.path.join(BUILD_DIR, "fs", "wheelhousefs"))
            with open(inst, "w", encoding="utf-8") as f:
                f.write(text)
            r = subprocess.run(["systemd-analyze", "verify", inst], capture_output=True, text=True,
                               cwd=d, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr.strip(), "", "systemd-analyze warned")
        for key in ("Type=notify", "Restart=on-failure", "CacheDirectory=wheelhouse-fs",
                    "LoadCredential=hf-token:", "OOMPolicy=continue", "NoNewPrivileges=yes",
                    "ExecReload=/bin/kill -HUP $MAINPID"):
            self.assertIn(key, text)


class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="whfs-deb-")
        r = subprocess.run(["cpack", "-G", "DEB", "-B", cls.out], cwd=BUILD_DIR, capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise AssertionError(f"cpack failed:\n{r.stdout}\n{r.stderr}")
        debs = [f for f in os.listdir(cls.out) if f.endswith(".deb")]
        assert len(debs) == 1, debs
        cls.deb = os.path.join(cls.out, debs[0])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_contents(self):
        listing = subprocess.run(["dpkg-deb", "-c", self.deb], capture_output=True, text=True,
                                 check=True).stdout
        for path in ("./usr/bin/wheelhousefs", "./usr/bin/wheelhouse",
                     "./usr/lib/systemd/system/wheelhousefs@.service",
                     "./usr/sbin/mount.fuse.wheelhousefs -> /sbin/mount.fuse3",
                     "./usr/share/doc/wheelhouse-fs/wheelhouse-fs.conf.example",
                     "./usr/share/doc/wheelhouse-fs/site-cache/wheelhouse-site-cache.conf.template",
                     "./usr/bin/wheelhouse-hint", "./etc/profile.d/wheelhouse-fs.sh"):
            self.assertIn(path, listing)

    def test_the_shell_hook_is_installed_for_every_interactive_bash_and_zsh(self):
        control = os.path.join(self.out, "control")
        subprocess.run(["dpkg-deb", "-e", self.deb, control], check=True)
        with open(os.path.join(control, "conffiles")) as f:
            self.assertIn("/etc/profile.d/wheelhouse-fs.sh", f.read().split())
        # postinst adds one line to each shell's system rc file, prerm takes it back; run on
        # copies bound over the real ones in a mount namespace of their own.
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare")
        work = os.path.join(self.out, "rc")
        os.makedirs(work)
        script = ""
        for rc in ("/etc/bash.bashrc", "/etc/zsh/zshrc"):
            if not os.path.exists(rc):
                continue
            copy = os.path.join(work, os.path.basename(rc))
            shutil.copy(rc, copy)
            script += f"mount --bind {copy} {rc}\n"
        if not script:
            self.skipTest("neither bash.bashrc nor zshrc here")
        script += (f"sh {control}/postinst configure && sh {control}/postinst configure && "
                   f"grep -c 'wheelhouse-fs.sh  # wheelhouse-fs$' /etc/bash.bashrc > {work}/after && "
                   f"sh {control}/prerm remove && "
                   f"(grep -c '# wheelhouse-fs$' /etc/bash.bashrc || true) > {work}/removed\n")
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-ec", script],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(work, "after")) as f:
            self.assertEqual(f.read().strip(), "1")  # once, however often postinst runs
        with open(os.path.join(work, "removed")) as f:
            self.assertEqual(f.read().strip(), "0")

    def test_declares_its_debian_dependencies(self):
        fields = subprocess.run(["dpkg-deb", "-f", self.deb, "Package", "Depends", "Architecture"],
                                capture_output=True, text=True, check=True).stdout
        self.assertIn("Package: wheelhouse-fs", fields)
        for dep in ("fuse3", "libfuse3-3", "libcurl4", "libc6"):
            self.assertIn(dep, fields)

    def test_programs_run_from_a_scratch_root(self):
        root = os.path.join(self.out, "root")
        subprocess.run(["dpkg-deb", "-x", self.deb, root], check=True)
        for prog, want in (("wheelhousefs", "wheelhousefs "), ("wheelhouse", "wheelhouse ")):
            r = subprocess.run([os.path.join(root, "usr", "bin", prog), "--version"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(want), r.stdout)


if __name__ == "__main__":
    unittest.main()
