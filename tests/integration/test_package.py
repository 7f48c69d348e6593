#!/usr/bin/env python3
"""Packaging and units: `systemd-analyze verify` on the units; the .deb that CPack
builds: its contents, its Debian dependencies, lintian, its copyright and changelog, maintainer
scripts that edit no other package's file, and its programs run from a scratch root it is
unpacked into; `wheelhouse shell-hook --install/--uninstall` on rc files of a scratch folder."""
import gzip
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("WHFS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
CLI = os.path.join(BUILD_DIR, "tools", "wheelhouse")
HOOK_LINE = ("[ -r /etc/profile.d/wheelhouse-fs.sh ] && . /etc/profile.d/wheelhouse-fs.sh"
             "  # wheelhouse-fs")
SYSTEMD = os.path.join(SOURCE_DIR, "systemd")
UNIT = os.path.join(SYSTEMD, "wheelhousefs@.service")


class SystemdUnit(unittest.TestCase):
    def test_units_verify_cleanly(self):
        """The templates (instances of them) and the automount's units; test_systemd.py runs
        them under systemd."""
        if shutil.which("systemd-analyze") is None:
            self.fail("systemd-analyze is missing: tools/dev/setup.sh --tests installs systemd")
        texts = {}
        with tempfile.TemporaryDirectory() as d:
            # The freshly built daemon where the package puts it.
            for src, name in (("wheelhousefs@.service", "wheelhousefs@mnt-wheelhouse.service"),
                              ("wheelhousefs-automount@.service",
                               "wheelhousefs-automount@mnt-wheelhouse.service"),
                              ("mnt-wheelhouse.mount", "mnt-wheelhouse.mount"),
                              ("mnt-wheelhouse.automount", "mnt-wheelhouse.automount")):
                with open(os.path.join(SYSTEMD, src), encoding="utf-8") as f:
                    texts[src] = f.read()
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    f.write(texts[src].replace("/usr/bin/wheelhousefs",
                                               os.path.join(BUILD_DIR, "fs", "wheelhousefs")))
            for name in sorted(os.listdir(d)):
                r = subprocess.run(["systemd-analyze", "verify", name], capture_output=True,
                                   text=True, cwd=d, timeout=120)
                self.assertEqual(r.returncode, 0, name + ": " + r.stderr)
                self.assertEqual(r.stderr.strip(), "", f"systemd-analyze warned on {name}")
        for src in ("wheelhousefs@.service", "wheelhousefs-automount@.service"):
            for key in ("Type=notify", "Restart=on-failure", "CacheDirectory=wheelhouse-fs",
                        "Environment=HF_TOKEN_PATH=/etc/wheelhouse-fs/token",
                        "OOMPolicy=continue", "NoNewPrivileges=yes",
                        "ExecReload=/bin/kill -HUP $MAINPID"):
                self.assertIn(key, texts[src], src)

    def test_the_automounts_daemon_is_the_boot_units_but_for_where_it_mounts(self):
        def settings(name):
            with open(os.path.join(SYSTEMD, name), encoding="utf-8") as f:
                lines = [ln for ln in f.read().split("[Install]")[0].splitlines()
                         if ln and not ln.startswith("#")]
            return [ln for ln in lines if not ln.startswith(("Description=", "ExecStart"))]
        boot = settings("wheelhousefs@.service")
        auto = settings("wheelhousefs-automount@.service")
        self.assertEqual(sorted(set(boot) - set(auto)), ["Before=remote-fs.target"])
        self.assertEqual(sorted(set(auto) - set(boot)), ["Conflicts=wheelhousefs@%i.service"])


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
                     "./usr/lib/systemd/system/wheelhousefs-automount@.service",
                     "./usr/share/wheelhouse-fs/automount/mnt-wheelhouse.automount",
                     "./usr/share/wheelhouse-fs/automount/mnt-wheelhouse.mount",
                     "./usr/sbin/mount.fuse.wheelhousefs -> /sbin/mount.fuse3",
                     "./usr/share/doc/wheelhouse-fs/wheelhouse-fs.conf.example",
                     "./usr/share/doc/wheelhouse-fs/site-cache/wheelhouse-site-cache.conf.template",
                     "./usr/bin/wheelhouse-hint", "./etc/profile.d/wheelhouse-fs.sh",
                     "./usr/share/man/man8/wheelhousefs.8.gz",
                     "./usr/share/man/man1/wheelhouse.1.gz", "./usr/bin/wheelhouse-csi",
                     "./usr/share/man/man8/wheelhouse-csi.8.gz",
                     "./usr/share/doc/wheelhouse-fs/copyright",
                     "./usr/share/doc/wheelhouse-fs/changelog.Debian.gz"):
            self.assertIn(path, listing)

    def test_the_man_pages_say_what_help_says(self):
        root = os.path.join(self.out, "man-root")
        subprocess.run(["dpkg-deb", "-x", self.deb, root], check=True)
        for page, words in (("man8/wheelhousefs.8", ["SYNOPSIS", "cache_size", "nonempty",
                                                     "Exit status", "FILES", "wheelhouse (1)"]),
                            ("man1/wheelhouse.1", ["doctor", "status", "Exit status",
                                                   "wheelhousefs (8)", "shell-hook --install",
                                                   "/etc/wheelhouse-fs/hint-mounts"]),
                            ("man8/wheelhouse-csi.8", ["--csi-address", "--allow-endpoint",
                                                       "volume_context", "hostPID",
                                                       "wheelhousefs (8)"])):
            path = os.path.join(root, "usr", "share", "man", page + ".gz")
            with gzip.open(path, "rt", encoding="utf-8") as f:
                text = f.read().replace("\\-", "-")  # roff source; no man-db needed
            self.assertTrue(text.startswith('.\\" DO NOT MODIFY THIS FILE!  It was generated by '
                                            'help2man'), text[:200])
            for w in words:
                self.assertIn(w, text, page)

    def test_edits_no_other_packages_file(self):
        """No maintainer script names the shells' rc files (conffiles of bash and zsh, Debian
        Policy 10.7.4), and the conffiles are exactly the package's own files in /etc."""
        control = os.path.join(self.out, "control")
        subprocess.run(["dpkg-deb", "-e", self.deb, control], check=True)
        for script in ("preinst", "postinst", "prerm", "postrm", "config", "triggers"):
            path = os.path.join(control, script)
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for rc in ("bash.bashrc", "zshrc"):
                    self.assertNotIn(rc, text, script)
        with open(os.path.join(control, "conffiles"), encoding="utf-8") as f:
            conffiles = f.read().split()
        listing = subprocess.run(["dpkg-deb", "-c", self.deb], capture_output=True, text=True,
                                 check=True).stdout
        in_etc = [line.split()[5][1:] for line in listing.splitlines()
                  if line.split()[5].startswith("./etc/") and not line.startswith("d")]
        self.assertEqual(sorted(conffiles), sorted(in_etc))
        self.assertEqual(conffiles, ["/etc/profile.d/wheelhouse-fs.sh"])

    def test_lintian_reports_no_error(self):
        if shutil.which("lintian") is None:
            self.fail("lintian is missing: tools/dev/setup.sh --tests installs it")
        r = subprocess.run(["lintian", "--allow-root", self.deb], capture_output=True, text=True,
                           timeout=600)
        tags = [line for line in r.stdout.splitlines() if line[:2] in ("E:", "W:", "I:")]
        print("lintian:\n" + "\n".join(tags), flush=True)
        self.assertEqual([t for t in tags if t.startswith("E:")], [], r.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_copyright_and_changelog(self):
        root = os.path.join(self.out, "doc-root")
        subprocess.run(["dpkg-deb", "-x", self.deb, root], check=True)
        doc = os.path.join(root, "usr", "share", "doc", "wheelhouse-fs")
        with open(os.path.join(doc, "copyright"), encoding="utf-8") as f:
            copyright_text = f.read()
        self.assertTrue(copyright_text.startswith(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"))
        paragraphs = {p.split("\n", 1)[0]: p for p in copyright_text.split("\n\n")}
        lmdb = paragraphs["Files: cache/third_party/lmdb/*"]
        self.assertIn("Howard Chu, Symas Corp.", lmdb)
        self.assertIn("License: OLDAP-2.8", lmdb)
        # The OpenLDAP licence verbatim (its clause 3), as a standalone paragraph.
        with open(os.path.join(SOURCE_DIR, "cache", "third_party", "lmdb", "LICENSE"),
                  encoding="utf-8") as f:
            licence = [line.strip() for line in f if line.strip()]
        body = [line.strip() for line in paragraphs["License: OLDAP-2.8"].split("\n")[1:]
                if line.strip() not in ("", ".")]
        self.assertEqual(body, licence)
        self.assertIn("License: ISC", paragraphs)
        # changelog.Debian.gz: no name and no time stamp in its gzip header (gzip -9n), and its
        # first entry is the package's version.
        path = os.path.join(doc, "changelog.Debian.gz")
        with open(path, "rb") as f:
            header = f.read(10)
        self.assertEqual(header[:3], b"\x1f\x8b\x08")
        self.assertEqual(header[3] & 0x08, 0, "the gzip header names a file")
        self.assertEqual(header[4:8], b"\0\0\0\0", "the gzip header has a time stamp")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            first = f.readline()
        version = subprocess.run(["dpkg-deb", "-f", self.deb, "Version"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        self.assertTrue(first.startswith(f"wheelhouse-fs ({version}) "), (first, version))

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


class ShellHookFiles(unittest.TestCase):
    """`wheelhouse shell-hook --install/--uninstall FILE...`: the admin's command that adds the
    hook to the shells' system-wide rc files, here on files of a scratch folder."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="whfs-rc-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, text, mode=0o644):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def read(self, path):
        with open(path, encoding="utf-8") as f:
            return f.read()

    def hook(self, *args):
        return subprocess.run([CLI, "shell-hook", *args], capture_output=True, text=True,
                              timeout=60)

    def test_install_appends_once_and_uninstall_takes_only_its_line(self):
        # No final newline, and an admin's own line that ends in the same comment.
        own = "alias ll='ls -l'  # wheelhouse-fs"
        rc = self.write("bashrc", f"# system bashrc\n{own}", mode=0o640)
        if os.geteuid() == 0:
            os.chown(rc, 4242, 4343)
        before = os.stat(rc)
        r = self.hook("--install", rc)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{rc}: added the hook line", r.stdout)
        self.assertEqual(self.read(rc), f"# system bashrc\n{own}\n{HOOK_LINE}\n")
        after = os.stat(rc)
        self.assertNotEqual(after.st_ino, before.st_ino)  # replaced by a rename, not rewritten
        self.assertEqual(stat.S_IMODE(after.st_mode), 0o640)
        self.assertEqual((after.st_uid, after.st_gid), (before.st_uid, before.st_gid))
        # Again: nothing changes, not even the file.
        r = self.hook("--install", rc)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("has the hook line already", r.stdout)
        self.assertEqual(os.stat(rc).st_ino, after.st_ino)
        self.assertEqual(self.read(rc).count(HOOK_LINE), 1)
        # Uninstall: only the exact line goes; the admin's line stays, owner and mode too.
        r = self.hook("--uninstall", rc)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{rc}: removed the hook line", r.stdout)
        self.assertEqual(self.read(rc), f"# system bashrc\n{own}\n")
        final = os.stat(rc)
        self.assertEqual(stat.S_IMODE(final.st_mode), 0o640)
        self.assertEqual((final.st_uid, final.st_gid), (before.st_uid, before.st_gid))
        r = self.hook("--uninstall", rc)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("has no hook line", r.stdout)
        self.assertEqual(sorted(os.listdir(self.dir)), ["bashrc"])  # no temporary file left

    def test_several_files_and_an_empty_one(self):
        a = self.write("a", "")
        b = self.write("b", "x\n")
        r = self.hook("--install", a, b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.read(a), HOOK_LINE + "\n")
        self.assertEqual(self.read(b), f"x\n{HOOK_LINE}\n")
        r = self.hook("--uninstall", a, b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual((self.read(a), self.read(b)), ("", "x\n"))

    def test_a_symbolic_link_a_hard_link_and_a_missing_file_are_refused(self):
        target = self.write("real", "x\n")
        link = os.path.join(self.dir, "link")
        os.symlink(target, link)
        r = self.hook("--install", link)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{link}: a symbolic link (to {target}): name the file itself", r.stderr)
        self.assertEqual(self.read(target), "x\n")
        self.assertTrue(os.path.islink(link))
        hard = os.path.join(self.dir, "hard")
        os.link(target, hard)
        r = self.hook("--install", hard)
        self.assertEqual(r.returncode, 1)
        self.assertIn("hard links", r.stderr)
        self.assertEqual(self.read(target), "x\n")
        missing = os.path.join(self.dir, "missing")
        r = self.hook("--install", missing)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{missing}: No such file or directory", r.stderr)
        self.assertFalse(os.path.exists(missing))
        # A file that fails does not stop the others.
        other = self.write("other", "")
        r = self.hook("--install", link, other)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(self.read(other), HOOK_LINE + "\n")

    def test_usage(self):
        for args in ([], ["bash", "--install"], ["--install", "--uninstall"],
                     ["--install", "x", "--mount", "/mnt"]):
            r = self.hook(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertTrue(r.stderr.strip(), args)


if __name__ == "__main__":
    unittest.main()
