#!/usr/bin/env python3
"""Tests for gen_wheelhouse.py (stdlib unittest; uses the --small profile).

Run: python3 tests/fakehub/test_gen_wheelhouse.py
"""
import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_wheelhouse as gw  # noqa: E402

PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
PY_TAGS = sorted({"cp310", "cp312", PY})
KIB, MIB = 1 << 10, 1 << 20


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _all_files(tree):
    """Relative paths ('/'-separated) of every file under tree."""
    out = set()
    for dirpath, _, filenames in os.walk(tree):
        for fn in filenames:
            out.add(os.path.relpath(os.path.join(dirpath, fn), tree).replace(os.sep, "/"))
    return out


def _expected_files():
    """The exact file set of the default (many=0) layout, built independently of gw.plan."""
    files = {"README.md", ".gitattributes"}
    folders = [f"{pkg}/{arch}/{tdir}" for pkg in gw.PACKAGES
               for arch in ("sm75", "sm80", "sm89", "sm120")
               for tdir in ("torch2.7-cu128", "torch2.9-cu128")]
    folders.append("flash_attn/sm80/torch2.9-cu126")
    for folder in folders:
        pkg, _, tdir = folder.split("/")
        torch_mm, cuda = tdir[len("torch"):].split("-cu")
        stem = f"{pkg}-{gw.PACKAGES[pkg]}+cu{cuda}torch{torch_mm}"
        for py in PY_TAGS:
            files.add(f"{folder}/{stem}-{py}-{py}-linux_x86_64.whl")
        if pkg == "nvdiffrec_render":
            files.add(f"{folder}/{stem}-cp39-abi3-manylinux_2_28_x86_64.whl")
        if pkg == "o_voxel":
            files.add(f"{folder}/{stem}-py3-none-any.whl")
    return files


class GenWheelhouseTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="gen_wheelhouse_test_")
        cls.out_a = os.path.join(cls._tmp.name, "a")
        cls.out_b = os.path.join(cls._tmp.name, "b")
        # A through the CLI (also checks the summary line), B through the module.
        cli = subprocess.run([sys.executable, os.path.join(HERE, "gen_wheelhouse.py"), cls.out_a, "--small"],
                             capture_output=True, text=True, check=True)
        cls.cli_output = cli.stdout
        cls.manifest_b = gw.generate(cls.out_b, small=True)
        cls.tree = os.path.join(cls.out_a, "tree")
        with open(os.path.join(cls.out_a, "manifest.json")) as f:
            cls.manifest = json.load(f)
        cls.wheels = sorted(p for p in cls.manifest["files"] if p.endswith(".whl"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_cli_summary(self):
        self.assertEqual(len(self.cli_output.strip().splitlines()), 1, self.cli_output)
        self.assertRegex(self.cli_output, r"\d+ files, \d+ dirs, [\d.]+ MiB .*\([\d.]+s\)")

    def test_exact_layout(self):
        self.assertEqual(_all_files(self.tree), _expected_files())
        self.assertEqual(set(self.manifest["files"]), _expected_files())
        self.assertTrue(os.path.isdir(os.path.join(self.tree, "flash_attn/sm80/torch2.9-cu126")))
        self.assertFalse(os.path.exists(os.path.join(self.tree, "natten/sm80/torch2.9-cu126")))
        with open(os.path.join(self.tree, ".gitattributes")) as f:
            self.assertEqual(f.read(), "*.whl filter=lfs diff=lfs merge=lfs -text\n")
        with open(os.path.join(self.tree, "README.md")) as f:
            self.assertIn("gen_wheelhouse", f.read())
        self.assertEqual(self.manifest["python_tag"], PY)
        self.assertEqual(self.manifest["big_file"], "flash_attn/sm89/torch2.9-cu128/"
                         "flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl")

    def test_small_profile_sizes(self):
        files = self.manifest["files"]
        big = self.manifest["big_file"]
        self.assertEqual(files[big]["size"], 4 * MIB)  # payload padding hits the target exactly
        for rel in self.wheels:
            if rel != big:
                self.assertLessEqual(files[rel]["size"], 256 * KIB, rel)
                self.assertGreaterEqual(files[rel]["size"], 4 * KIB, rel)
        self.assertLess(sum(e["size"] for e in files.values()), 40 * MIB)

    def test_deterministic(self):
        self.assertEqual(self.manifest["files"], self.manifest_b["files"])
        with open(os.path.join(self.out_a, "manifest.json"), "rb") as fa, \
                open(os.path.join(self.out_b, "manifest.json"), "rb") as fb:
            self.assertEqual(fa.read(), fb.read())
        for rel in self.wheels[:5]:
            st = os.stat(os.path.join(self.tree, rel))
            self.assertEqual(st.st_mtime, gw.FIXED_MTIME)

    def test_manifest_matches_disk(self):
        for rel, entry in self.manifest["files"].items():
            with open(os.path.join(self.tree, rel), "rb") as f:
                data = f.read()
            self.assertEqual(entry["size"], len(data), rel)
            self.assertEqual(entry["sha256"], hashlib.sha256(data).hexdigest(), rel)
            git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            self.assertEqual(entry["git_sha1"], git_sha1, rel)

    def test_wheel_contents_and_record(self):
        for rel in self.wheels:
            folder, name = rel.rsplit("/", 1)
            pkg, version, tag = name[:-len(".whl")].split("-", 2)
            dist_info = f"{pkg}-{version}.dist-info"
            with zipfile.ZipFile(os.path.join(self.tree, rel)) as zf:
                self.assertIsNone(zf.testzip(), rel)
                names = set(zf.namelist())
                self.assertEqual(names, {f"{pkg}/__init__.py", f"{pkg}/_payload.bin", f"{dist_info}/METADATA",
                                         f"{dist_info}/WHEEL", f"{dist_info}/top_level.txt",
                                         f"{dist_info}/RECORD"}, rel)
                wheel_txt = zf.read(f"{dist_info}/WHEEL").decode()
                self.assertIn(f"\nTag: {tag}\n", wheel_txt)
                self.assertIn("Root-Is-Purelib: false\n", wheel_txt)
                meta = zf.read(f"{dist_info}/METADATA").decode()
                self.assertIn("Metadata-Version: 2.1\n", meta)
                self.assertIn(f"\nName: {pkg}\n", meta)
                self.assertIn(f"\nVersion: {version}\n", meta)
                # RECORD: one correct line per member, and "RECORD,," for itself.
                record = zf.read(f"{dist_info}/RECORD").decode().splitlines()
                self.assertIn(f"{dist_info}/RECORD,,", record)
                seen = {f"{dist_info}/RECORD"}
                for line in record:
                    path, digest, size = line.rsplit(",", 2)
                    if path == f"{dist_info}/RECORD":
                        continue
                    data = zf.read(path)
                    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual(digest, f"sha256={want}", f"{rel}: {path}")
                    self.assertEqual(int(size), len(data), f"{rel}: {path}")
                    seen.add(path)
                self.assertEqual(seen, names, rel)
                # The module's constants describe where the wheel lives.
                ns = {}
                exec(zf.read(f"{pkg}/__init__.py").decode(), ns)
                arch, tdir = folder.split("/")[1:]
                torch_mm, cuda = tdir[len("torch"):].split("-cu")
                self.assertEqual((ns["PACKAGE"], ns["VERSION"], ns["ARCH"], ns["TORCH"], ns["CUDA"]),
                                 (pkg, version, arch, torch_mm, f"{cuda[:2]}.{cuda[2:]}"), rel)
                self.assertEqual((ns["FOLDER"], ns["where"](), ns["PYTHON_TAG"]),
                                 (folder, folder, tag.split("-")[0]), rel)

    def test_payload_incompressible(self):
        with zipfile.ZipFile(os.path.join(self.tree, self.manifest["big_file"])) as zf:
            payload = zf.read("flash_attn/_payload.bin")
        self.assertGreater(len(zlib.compress(payload[:MIB], 1)), MIB)

    def _pip_install_and_import(self, rel, pkg):
        pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
        if pip.returncode != 0:
            self.fail(f"pip is required for this test but `{sys.executable} -m pip --version` failed "
                      f"(install python3-pip): {pip.stderr.strip()}")
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                   PIP_ROOT_USER_ACTION="ignore", PYTHONDONTWRITEBYTECODE="1")
        with tempfile.TemporaryDirectory(prefix="gen_wheelhouse_pip_") as target:
            res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                                  "--target", target, os.path.join(self.tree, rel)],
                                 capture_output=True, text=True, env=env)
            self.assertEqual(res.returncode, 0, f"pip install {rel} failed:\n{res.stdout}\n{res.stderr}")
            code = f"import sys; sys.path.insert(0, {target!r}); import {pkg}; print({pkg}.where())"
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=target)
            self.assertEqual(res.returncode, 0, res.stderr)
            self.assertEqual(res.stdout.strip(), rel.rsplit("/", 1)[0])

    def test_pip_install_local_tag_wheel(self):
        rel = ("flash_attn/sm89/torch2.9-cu128/"
               f"flash_attn-2.8.3+cu128torch2.9-{PY}-{PY}-linux_x86_64.whl")
        self._pip_install_and_import(rel, "flash_attn")

    def test_pip_install_py3_none_any_wheel(self):
        rel = "o_voxel/sm120/torch2.7-cu128/o_voxel-0.0.1+cu128torch2.7-py3-none-any.whl"
        self._pip_install_and_import(rel, "o_voxel")

    def test_idempotent_rerun(self):
        def snapshot():
            paths = [os.path.join(self.tree, p) for p in _all_files(self.tree)]
            paths.append(os.path.join(self.out_a, "manifest.json"))
            return {p: (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                    for p, st in ((p, os.stat(p)) for p in paths)}

        before = snapshot()
        t0 = time.monotonic()
        manifest = gw.generate(self.out_a, small=True)
        elapsed = time.monotonic() - t0
        self.assertEqual(snapshot(), before)
        self.assertEqual(manifest, self.manifest)
        self.assertLess(elapsed, 1.0)

    def test_force_and_many(self):
        with tempfile.TemporaryDirectory(prefix="gen_wheelhouse_many_") as out:
            gw.generate(out, small=True, many=60)
            tree = os.path.join(out, "tree")
            tiny = sorted(p for p in _all_files(tree) if p.startswith("tinypkg"))
            self.assertEqual(len(tiny), 60)
            self.assertEqual({p.rsplit("/", 1)[0] for p in tiny},
                             {f"tinypkg{i:04d}/sm80/torch2.9-cu128" for i in range(3)})
            with zipfile.ZipFile(os.path.join(tree, tiny[0])) as zf:
                self.assertIsNone(zf.testzip())
                self.assertTrue(any(n.endswith(".dist-info/RECORD") for n in zf.namelist()))
            self.assertLess(os.path.getsize(os.path.join(tree, tiny[0])), 2 * KIB)
            # Dropping --many removes the fillers and reuses the other wheels.
            big = os.path.join(tree, self.manifest["big_file"])
            ino = os.stat(big).st_ino
            manifest = gw.generate(out, small=True)
            self.assertFalse(any(p.startswith("tinypkg") for p in _all_files(tree)))
            self.assertEqual(os.stat(big).st_ino, ino)
            self.assertEqual(manifest["files"], self.manifest["files"])
            # --force rewrites files (new inodes) with identical bytes.
            manifest = gw.generate(out, small=True, force=True)
            self.assertNotEqual(os.stat(big).st_ino, ino)
            self.assertEqual(manifest["files"], self.manifest["files"])


if __name__ == "__main__":
    unittest.main()
