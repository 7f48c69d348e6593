#!/usr/bin/env python3
"""Fidelity: the official JavaScript client (@huggingface/hub, pinned in fidelity/package.json)
lists the test dataset recursively through the emulator and downloads every file; paths, sizes
and bytes must equal the source folder. Where the emulator and that client disagree, the
emulator is wrong."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import testdata
from fakehub_ctl import FakeHub

HERE = os.path.dirname(os.path.abspath(__file__))
FIDELITY = os.path.join(HERE, "fidelity")
REPO = "DoctorPopi/python_wheelhouse"


# The emulator's CDN is "localhost" on 127.0.0.1 (another host name than the Hub's, for the
# token tests). Node 17+ takes the resolver's order, ::1 first, and only Node 20 then tries the
# other family; Debian 12's Node 18 (what setup.sh installs where no node is) fails with
# ECONNREFUSED ::1 without this.
NODE = ["node", "--dns-result-order=ipv4first"]


def run_client(hub_url, repo, token=None):
    cmd = NODE + [os.path.join(FIDELITY, "fidelity.mjs"), hub_url, repo] + ([token] if token else [])
    proc = subprocess.run(cmd, cwd=FIDELITY, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"official client failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


class OfficialClientFidelity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("node") is None:
            raise AssertionError("node is not installed: run tools/dev/setup.sh (it installs nodejs)")
        if not os.path.isdir(os.path.join(FIDELITY, "node_modules", "@huggingface", "hub")):
            raise AssertionError("@huggingface/hub is not installed: run tools/dev/setup.sh "
                                 "(npm ci in tests/fakehub/fidelity)")
        cls.data = testdata.dataset("small")
        with open(os.path.join(cls.data, "manifest.json"), encoding="utf-8") as f:
            cls.manifest = json.load(f)
        cls.tmp = tempfile.mkdtemp(prefix="fidelity-")
        tree = os.path.join(cls.data, "tree")
        # Page size 7 makes the client follow many Link headers.
        cls.hub = FakeHub({REPO: tree, "acme/private": tree + ":private"}, cls.tmp,
                          tokens={"hf_fidelity": ["acme/private"]}, extra_args=["--page-size", "7"])

    @classmethod
    def tearDownClass(cls):
        cls.hub.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check_listing_and_bytes(self, seen):
        want = self.manifest["files"]
        self.assertEqual(sorted(seen["files"]), sorted(want))
        for path, meta in want.items():
            got = seen["files"][path]
            self.assertEqual(got["size"], meta["size"], path)
            self.assertEqual(got["downloaded"], meta["size"], path)
            self.assertEqual(got["sha256"], meta["sha256"], path)
            if got["lfs"]:
                self.assertEqual(got["lfs"]["oid"], meta["sha256"], path)
            else:
                self.assertEqual(got["oid"], meta["git_sha1"], path)
        want_dirs = {os.path.dirname(p) for p in want} - {""}
        parents = set()
        for d in want_dirs:
            while d:
                parents.add(d)
                d = os.path.dirname(d)
        self.assertEqual(set(seen["dirs"]), parents)
        big = seen["big"]
        self.assertEqual(seen["downloadInfo"]["size"], want[big]["size"])
        self.assertEqual(seen["downloadInfo"]["etag"].strip('"'), want[big]["sha256"])
        self.assertEqual([p["path"] for p in seen["pathsInfo"]], [big])
        self.assertTrue(seen["missingIsNull"])
        with open(os.path.join(self.data, "tree", big), "rb") as f:
            f.seek(1000)
            import hashlib
            self.assertEqual(seen["slice"]["sha256"], hashlib.sha256(f.read(100)).hexdigest())

    def test_public_repo(self):
        seen = run_client(self.hub.hub, REPO)
        self.assertEqual(seen["sha"], self.hub.state()["repos"][REPO]["head"])
        self.check_listing_and_bytes(seen)
        pages = [e for e in self.hub.log() if "/tree/" in e["path"]]
        self.assertGreater(len(pages), 20)  # pagination was followed

    def test_private_repo_with_token_never_leaks_it_to_the_cdn(self):
        seen = run_client(self.hub.hub, "acme/private", token="hf_fidelity")
        self.check_listing_and_bytes(seen)
        cdn = [e for e in self.hub.log() if e["server"] == "cdn"]
        self.assertTrue(cdn)
        self.assertFalse([e for e in cdn if e["auth"]], "token sent to the CDN")


if __name__ == "__main__":
    unittest.main()
