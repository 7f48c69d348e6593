#!/usr/bin/env python3
"""Write fidelity: the official JavaScript client (@huggingface/hub, pinned in
fidelity/package.json) publishes files to the emulator through preupload, the LFS batch API
(basic and multipart), the storage host and the ndjson commit, then lists and downloads them
back. Paths, sizes and bytes must survive, the commits must be the emulator's heads, and no
Authorization header may reach the storage host. Then `wheelhouse publish` uploads two wheels
(one over the multipart threshold) and the same client lists and downloads them: same paths,
sizes, LFS oids and bytes. Where the emulator and that client disagree, the emulator is
wrong."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

import gen_wheelhouse
from fakehub_ctl import FakeHub
from test_fidelity import NODE

HERE = os.path.dirname(os.path.abspath(__file__))
FIDELITY = os.path.join(HERE, "fidelity")
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                          "build"))
WHEELHOUSE = os.path.join(BUILD_DIR, "tools", "wheelhouse")
REPO = "acme/publish"
CHUNK = 1024 * 1024  # multipart part size, set low so a wheel-sized file has several parts


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def require_client():
    if shutil.which("node") is None:
        raise AssertionError("node is not installed: run tools/dev/setup.sh (it installs nodejs)")
    if not os.path.isdir(os.path.join(FIDELITY, "node_modules", "@huggingface", "hub")):
        raise AssertionError("@huggingface/hub is not installed: run tools/dev/setup.sh "
                             "(npm ci in tests/fakehub/fidelity)")


class OfficialClientUpload(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_client()
        cls.tmp = tempfile.mkdtemp(prefix="fidelity-write-")
        src = os.path.join(cls.tmp, "src")
        os.makedirs(os.path.join(src, "old"))
        with open(os.path.join(src, ".gitattributes"), "w") as f:
            f.write("*.whl filter=lfs diff=lfs merge=lfs -text\n")
        with open(os.path.join(src, "old", "remove-me.txt"), "w") as f:
            f.write("soon gone\n")
        # What gets published: a small text file (regular), a small wheel (LFS, basic
        # transfer) and a wheel over the multipart threshold (3.3 parts), plus a binary
        # without an LFS pattern for the second commit (LFS because it is binary).
        up = os.path.join(cls.tmp, "upload")
        os.makedirs(up)
        cls.sources = {
            "index/simple.txt": b"demo==1.0\n" * 10,
            "wheels/tiny-0.1-py3-none-any.whl": os.urandom(200_000),
            "wheels/demo-1.0+cu128-cp312-cp312-linux_x86_64.whl": os.urandom(3 * CHUNK + 12345),
            "extra/blob.bin": b"\0\1\2" + os.urandom(50_000),
        }
        cls.local = {}
        for i, (path, data) in enumerate(cls.sources.items()):
            cls.local[path] = os.path.join(up, f"f{i}")
            with open(cls.local[path], "wb") as f:
                f.write(data)
        cls.hub = FakeHub({REPO: src}, os.path.join(cls.tmp, "run"),
                          tokens={"hf_reader": [REPO]}, write_tokens={"hf_writer": [REPO]},
                          extra_args=["--multipart-threshold", str(2 * CHUNK),
                                      "--multipart-chunk", str(CHUNK)])
        first = ["index/simple.txt", "wheels/tiny-0.1-py3-none-any.whl",
                 "wheels/demo-1.0+cu128-cp312-cp312-linux_x86_64.whl"]
        spec = {"first": [{"path": p, "local": cls.local[p], "asUrl": p.endswith("x86_64.whl")}
                          for p in first],
                "second": {"path": "extra/blob.bin", "local": cls.local["extra/blob.bin"]},
                "delete": "old/remove-me.txt"}
        cmd = NODE + [os.path.join(FIDELITY, "upload.mjs"), cls.hub.hub, REPO, "hf_writer",
               "hf_reader", json.dumps(spec)]
        proc = subprocess.run(cmd, cwd=FIDELITY, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            cls.hub.stop()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError(f"official client failed:\n{proc.stderr[-4000:]}")
        cls.seen = json.loads(proc.stdout)
        cls.log = sorted(cls.hub.log(), key=lambda e: e["start"])

    @classmethod
    def tearDownClass(cls):
        cls.hub.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_files_round_trip(self):
        files, downloads = self.seen["files"], self.seen["downloads"]
        for path, data in self.sources.items():
            self.assertEqual(files[path]["size"], len(data), path)
            self.assertEqual(downloads[path], {"size": len(data), "sha256": sha256(data)}, path)
        for path in ("wheels/tiny-0.1-py3-none-any.whl", "extra/blob.bin",
                     "wheels/demo-1.0+cu128-cp312-cp312-linux_x86_64.whl"):
            self.assertEqual(files[path]["lfs"]["oid"], sha256(self.sources[path]), path)
        self.assertIsNone(files["index/simple.txt"]["lfs"])
        self.assertNotIn("old/remove-me.txt", files)
        info = {p["path"]: p for p in self.seen["pathsInfo"]}
        self.assertEqual(info["extra/blob.bin"]["lfsOid"], sha256(self.sources["extra/blob.bin"]))
        # The Hub tracks LFS files that no pattern covers in .gitattributes.
        self.assertIn(".gitattributes", files)

    def test_commits_are_the_emulators_heads(self):
        shas = [c["oid"] for c in self.seen["commits"]]
        self.assertEqual(len(set(shas)), 3)
        self.assertEqual(self.seen["after"], shas[-1])
        self.assertEqual(self.hub.state()["repos"][REPO]["head"], shas[-1])
        for c in self.seen["commits"]:
            self.assertEqual(c["url"], f"{self.hub.hub}/datasets/{REPO}/commit/{c['oid']}")
        # The emulator's own tree at the new head (not the client's view of it).
        url = f"{self.hub.hub}/api/datasets/{REPO}/tree/{shas[-1]}?recursive=true"
        with urllib.request.urlopen(url, timeout=30) as r:
            tree = {e["path"]: e for e in json.load(r) if e["type"] == "file"}
        for path, data in self.sources.items():
            self.assertEqual(tree[path]["size"], len(data), path)
        self.assertNotIn("old/remove-me.txt", tree)

    def test_client_sees_the_hubs_errors(self):
        self.assertEqual(self.seen["stale"]["status"], 412)
        self.assertIn("The branch was updated since you opened this page", self.seen["stale"]["message"])
        self.assertEqual(self.seen["readOnly"]["status"], 403)
        self.assertIn("you must use a write token", self.seen["readOnly"]["message"])

    def test_transfers_were_plain_lfs(self):
        ops = [e.get("op") for e in self.log]
        for op in ("preupload", "lfs-batch", "storage-put", "storage-part", "complete-multipart",
                   "commit"):
            self.assertIn(op, ops)
        parts = [e for e in self.log if e.get("op") == "storage-part"]
        self.assertEqual(sorted(e["part"] for e in parts), [1, 2, 3, 4])
        self.assertTrue(all(e["status"] == 200 for e in self.log if e.get("op", "").startswith("storage")))
        batches = [e for e in self.log if e.get("op") == "lfs-batch"]
        self.assertNotIn("xet", batches[0]["transfers"])   # useXet: false
        self.assertIn("xet", batches[1]["transfers"])      # the default offers Xet; LFS answered

    def test_no_token_reached_the_storage_host(self):
        storage = [e for e in self.log if e["server"] == "cdn"]
        self.assertTrue(storage)
        self.assertFalse([e for e in storage if e["auth"]], "token sent to the storage host/CDN")
        self.assertEqual(self.hub.state()["counters"].get("cdn_auth_violations", 0), 0)


class OfficialClientReadsWhatWheelhousePublished(unittest.TestCase):
    """`wheelhouse publish` uploads (basic and multipart transfers, one commit), then the
    official client's listFiles/downloadFile/pathsInfo (fidelity.mjs) read the repo back."""

    @classmethod
    def setUpClass(cls):
        require_client()
        if not os.access(WHEELHOUSE, os.X_OK):
            raise AssertionError(f"{WHEELHOUSE} is not built")
        cls.tmp = tempfile.mkdtemp(prefix="fidelity-publish-")
        src = os.path.join(cls.tmp, "src")
        os.makedirs(src)
        with open(os.path.join(src, "README.md"), "w") as f:
            f.write("# published wheels\n")
        cls.hub = FakeHub({REPO: src}, os.path.join(cls.tmp, "run"),
                          write_tokens={"hf_writer": [REPO]},
                          extra_args=["--multipart-threshold", str(2 * CHUNK),
                                      "--multipart-chunk", str(CHUNK)])
        dist = os.path.join(cls.tmp, "dist")
        os.makedirs(dist)
        folder = "sm89/torch2.9-cu128"
        cls.wheels = {
            f"demo_small/{folder}": gen_wheelhouse.build_wheel(
                dist, "demo_small", "1.0.0", f"demo_small/{folder}", "py3-none-any", 300_000),
            f"demo_big/{folder}": gen_wheelhouse.build_wheel(
                dist, "demo_big", "2.0.0", f"demo_big/{folder}", "py3-none-any", 3 * CHUNK + 4321),
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env["HF_TOKEN"] = "hf_writer"
        cls.published = subprocess.run(
            [WHEELHOUSE, "publish", "--endpoint", cls.hub.hub, "--target",
             "sm89-torch2.9-cu128-cp312", REPO, *cls.wheels.values()],
            env=env, capture_output=True, text=True, timeout=300)
        if cls.published.returncode != 0:
            cls.tearDownClass()
            raise AssertionError(f"wheelhouse publish failed:\n{cls.published.stderr}")
        proc = subprocess.run(NODE + [os.path.join(FIDELITY, "fidelity.mjs"), cls.hub.hub, REPO,
                               "hf_writer"], cwd=FIDELITY, capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            cls.tearDownClass()
            raise AssertionError(f"official client failed:\n{proc.stderr[-4000:]}")
        cls.seen = json.loads(proc.stdout)
        cls.log = cls.hub.log()

    @classmethod
    def tearDownClass(cls):
        cls.hub.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_same_paths_sizes_and_bytes(self):
        files = self.seen["files"]
        for folder, local in self.wheels.items():
            path = f"{folder}/{os.path.basename(local)}"
            with open(local, "rb") as f:
                data = f.read()
            self.assertIn(path, files, sorted(files))
            self.assertEqual(files[path]["size"], len(data), path)
            self.assertEqual(files[path]["downloaded"], len(data), path)
            self.assertEqual(files[path]["sha256"], sha256(data), path)
            self.assertEqual(files[path]["lfs"]["oid"], sha256(data), path)
        self.assertEqual(files["README.md"]["size"], len("# published wheels\n"))
        # The biggest file (the multipart one): a ranged read and paths-info agree too.
        big = f"demo_big/sm89/torch2.9-cu128/{os.path.basename(self.wheels['demo_big/sm89/torch2.9-cu128'])}"
        self.assertEqual(self.seen["big"], big)
        self.assertEqual(self.seen["pathsInfo"][0]["oid"], files[big]["lfs"]["oid"])

    def test_one_commit_the_heads_and_the_transfers(self):
        self.assertIn(f"published in commit {self.seen['sha']}", self.published.stdout)
        self.assertEqual(self.hub.state()["repos"][REPO]["head"], self.seen["sha"])
        ops = [e.get("op") for e in self.log]
        self.assertEqual(ops.count("commit"), 1)
        self.assertEqual(sorted(e["part"] for e in self.log if e.get("op") == "storage-part"),
                         [1, 2, 3, 4])
        self.assertEqual(ops.count("storage-put"), 1)
        self.assertEqual(ops.count("complete-multipart"), 1)
        storage = [e for e in self.log if e["server"] == "cdn"]
        self.assertFalse([e for e in storage if e["auth"]], "token sent to the storage host")


if __name__ == "__main__":
    unittest.main()
