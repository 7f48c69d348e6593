#!/usr/bin/env python3
"""Mounted tests of tenants with different credentials on one node cache (root daemons, one
root-owned cache directory, as the CSI plugin's daemons and a host mount share it): what one
tenant fetched of a private or gated repository is never served to a mount without the same
token, online, offline, with the Hub unreachable, or from a read-only lower tier; a public
dataset is still one download for everybody."""
import errno
import os
import shutil
import subprocess
import sys
import unittest

import mounttest
from mounttest import MountedTestCase, sha256_file
from test_shared_cache import cdn_bytes

PUBLIC = mounttest.REPO
SECRET = "acme/secret"  # private: only TOKEN_A may read it
GATED = "acme/gated"    # gated: its tree is public, its files only TOKEN_A's
TOKEN_A, TOKEN_B = "hf_tenant_a_0123456789", "hf_tenant_b_0123456789"


class Tenants(MountedTestCase):
    profile = "small"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.hub.stop()  # the default emulator: replaced by one with three repositories
        cls.hub = mounttest.FakeHub(
            {PUBLIC: cls.tree, SECRET: cls.tree + ":private", GATED: cls.tree + ":gated"},
            os.path.join(cls.tmp, "hub3"),
            tokens={TOKEN_A: [SECRET, GATED], TOKEN_B: [PUBLIC]})

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("tenants share a root daemon's cache: run as root")
        self.cache = os.path.join(self.scratch("node"), "cache")  # the node's one cache
        self.wheels = sorted(p for p in self.manifest["files"] if p.endswith(".whl"))[:3]

    def token_file(self, token):
        path = os.path.join(self.scratch("tokens"), token)
        with open(path, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        return path

    def tenant(self, name, repo, token=None, options=(), **kw):
        opts = list(options)
        if token:
            opts.append(f"token_file={self.token_file(token)}")
        kw.setdefault("cache_dir", self.cache)
        return self.mount(name=name, repo=repo, options=opts,
                          env={"HF_TOKEN": "", "HF_HOME": self.scratch("hf-home")}, **kw)

    def refused(self, repo, token=None, options=(), cache_dir=None):
        """The mount fails (exit 1) and says why; returns its stderr."""
        opts = [f"endpoint={self.hub.hub}", f"cache_dir={cache_dir or self.cache}"] + list(options)
        if token:
            opts.append(f"token_file={self.token_file(token)}")
        mnt = self.scratch("refused-mnt")
        r = subprocess.run([mounttest.BINARY, "-o", ",".join(opts), repo, mnt],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, HF_TOKEN="", HF_HOME=self.scratch("hf-home")))
        self.addCleanup(subprocess.run, ["fusermount3", "-u", "-z", mnt], capture_output=True)
        self.assertEqual(r.returncode, 1, f"mounted {repo} although it should not:\n{r.stderr}")
        self.assertFalse(mounttest.is_mounted(mnt))
        return r.stderr

    def read_as_a(self, repo):
        a = self.tenant("a-" + repo.replace("/", "-"), repo, TOKEN_A)
        for w in self.wheels:
            self.assertEqual(sha256_file(a.path(w)), self.manifest["files"][w]["sha256"], w)
        a.unmount()

    def test_a_private_repository_is_never_served_without_its_token(self):
        self.read_as_a(SECRET)
        # No token, another token: online the Hub refuses; offline, or with the Hub
        # unreachable (503 on every API call: the automatic fallback), the cache has nothing
        # of theirs to serve.
        for token in (None, TOKEN_B):
            self.refused(SECRET, token)
            err = self.refused(SECRET, token, options=["offline"])
            self.assertIn("no copy of " + SECRET, err)
        fault = self.hub.fault(kind="status", status=503, server="hub")
        try:
            for token in (None, TOKEN_B):
                err = self.refused(SECRET, token)
                self.assertIn("no copy of " + SECRET, err)
            # The same token is the same audience: its own records serve it offline.
            a2 = self.tenant("a2", SECRET, TOKEN_A)
            for w in self.wheels:
                self.assertEqual(sha256_file(a2.path(w)), self.manifest["files"][w]["sha256"])
            self.assertTrue(a2.status()["offline_fallback"])
        finally:
            self.hub.ctl("/faults/clear", {})

    def test_a_gated_file_another_tenant_fetched_is_not_served_to_a_mount_without_access(self):
        # The tree of a gated repository is public, so a mount without access lists it; the
        # files tenant A read are in the cache, but this mount may not read them.
        self.read_as_a(GATED)
        self.hub.clear_log()
        for name, token, options in (("b-none", None, ()), ("b-other", TOKEN_B, ()),
                                     ("b-stream", None, ("streaming",))):
            b = self.tenant(name, GATED, token, options=options)
            for w in self.wheels:
                with self.assertRaises(OSError, msg=f"{name} read {w}") as caught:
                    with open(b.path(w), "rb") as f:
                        f.read(4096)
                self.assertIn(caught.exception.errno, (errno.EACCES, errno.EIO), name)
            self.assertEqual(b.status()["audiences"]["repo_public"], False)
            b.unmount()
        # What B asked of the CDN was refused there: B got none of the file's bytes.
        served = cdn_bytes([e for e in self.hub.log() if e.get("status") in (200, 206)])
        self.assertEqual(served, 0)

    def test_a_read_only_lower_tier_holds_no_more_for_another_tenant(self):
        self.read_as_a(GATED)
        ro = self.scratch("ro")
        subprocess.run(["mount", "--bind", self.cache, ro], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", ro], check=False)
        subprocess.run(["mount", "-o", "remount,bind,ro", ro], check=True)
        upper = os.path.join(self.scratch("upper"), "cache")
        b = self.tenant("b-tier", GATED, None, cache_dir=ro, options=[f"cache_upper={upper}"])
        for w in self.wheels:
            with self.assertRaises(OSError):
                with open(b.path(w), "rb") as f:
                    f.read(4096)
        b.unmount()
        # A's own token over the same tiers reads them from the lower tier.
        self.hub.clear_log()
        a = self.tenant("a-tier", GATED, TOKEN_A, cache_dir=ro, options=[f"cache_upper={upper}"])
        for w in self.wheels:
            self.assertEqual(sha256_file(a.path(w)), self.manifest["files"][w]["sha256"])
        self.assertEqual(cdn_bytes(self.hub.log()), 0)

    def test_two_tenants_of_a_public_dataset_download_each_byte_once(self):
        # One with a token (of other repositories), one without: the Hub says the dataset is
        # public, so what either fetched is everybody's.
        total = sum(self.manifest["files"][w]["size"] for w in self.wheels)
        self.hub.clear_log()
        a = self.tenant("pub-a", PUBLIC, TOKEN_A)
        self.assertEqual(a.status()["audiences"]["writes"], "public")
        for w in self.wheels:
            self.assertEqual(sha256_file(a.path(w)), self.manifest["files"][w]["sha256"])
        b = self.tenant("pub-b", PUBLIC)
        for w in self.wheels:
            self.assertEqual(sha256_file(b.path(w)), self.manifest["files"][w]["sha256"])
        served = cdn_bytes(self.hub.log())
        print(f"two tenants of a public dataset, {len(self.wheels)} wheels of {total} bytes: "
              f"the CDN served {served} bytes ({served / total:.2f}x)")
        self.assertEqual(served, total)
        # And B, offline, has the whole public dataset A listed and read.
        b.unmount()
        b2 = self.tenant("pub-b2", PUBLIC, options=["offline"])
        for w in self.wheels:
            self.assertEqual(sha256_file(b2.path(w)), self.manifest["files"][w]["sha256"])


if __name__ == "__main__":
    mounttest.main()
