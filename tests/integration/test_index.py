#!/usr/bin/env python3
"""Mounted tests of pip reading the mount as an index. Each target folder (and so
current/) has simple/ (PEP 503 pages with #sha256, data-requires-python and PEP 658/714
metadata beside the wheels) and all/ (for --find-links); `wheelhouse hashes` writes a
--require-hashes requirements file. The real pip (Debian's when there is one), offline,
ignoring any pip configuration of this machine."""
import glob
import hashlib
import json
import os
import re
import subprocess
import sys

import mounttest
from mounttest import MountedTestCase

CLI = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
PIP = [PYTHON, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input"]
TAG = "cp" + subprocess.run([PYTHON, "-c", "import sys; print(*sys.version_info[:2], sep='')"],
                            capture_output=True, text=True, check=True).stdout.strip()
OVERRIDES = ["arch=sm89", "torch=2.9", "cuda=12.8"]


def pip(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PATH"] = "/usr/bin:/bin"  # this Python, whatever the test runner's PATH
    return subprocess.run(PIP + list(args), capture_output=True, text=True, timeout=timeout,
                          env=env)


def imported_folder(target, module):
    r = subprocess.run([PYTHON, "-c", f"import sys; sys.path.insert(0, {target!r}); "
                        f"import {module}; print({module}.where())"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip() or r.stderr


def cdn_bytes(log):
    return sum(e["bytes"] for e in log if e["server"] == "cdn" and e["status"] in (200, 206))


class Index(MountedTestCase):
    profile = "small"

    def setUp(self):
        self.m = self.mount(options=OVERRIDES)
        self.key = f"sm89-torch2.9-cu128-{TAG}"
        self.index = f"file://{self.m.path(f'targets/{self.key}/simple/')}"

    def test_index_url_installs_the_right_build_of_each(self):
        target = self.scratch("site")
        r = pip("install", "--no-deps", "--target", target, "--index-url",
                f"file://{self.m.path('current/simple/')}", "flash-attn==2.8.3", "natten", "o-voxel")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(".metadata", r.stdout)  # resolved from the PEP 658 files
        self.assertEqual(imported_folder(target, "flash_attn"), "flash_attn/sm89/torch2.9-cu128")
        self.assertEqual(imported_folder(target, "natten"), "natten/sm89/torch2.9-cu128")
        self.assertEqual(imported_folder(target, "o_voxel"), "o_voxel/sm89/torch2.9-cu128")

    def test_pages_are_pep503_relative_and_escaped(self):
        simple = self.m.path(f"targets/{self.key}/simple")
        with open(os.path.join(simple, "index.html")) as f:
            root = f.read()
        projects = re.findall(r'<a href="([^"]+)/">([^<]+)</a>', root)
        self.assertIn(("flash-attn", "flash-attn"), projects)
        self.assertTrue(all(re.fullmatch(r"[a-z0-9-]+", p) for p, _ in projects), projects)
        with open(os.path.join(simple, "flash-attn", "index.html")) as f:
            page = f.read()
        links = re.findall(r'<a href="([^"#]+)#sha256=([0-9a-f]{64})"([^>]*)>', page)
        self.assertEqual(len(links), 1, page)
        href, sha, attrs = links[0]
        self.assertNotIn("/", href)  # beside the page, inside the mount
        self.assertIn("%2B", href)  # the local version's '+', percent-encoded
        wheel = os.path.join(simple, "flash-attn", href.replace("%2B", "+"))
        self.assertEqual(os.getxattr(wheel, "user.wheelhouse.sha256").decode(), sha)
        self.assertIn('data-requires-python="&gt;=3.9, &lt;4"', attrs)
        meta_sha = re.search(r'data-core-metadata="sha256=([0-9a-f]{64})"', attrs).group(1)
        self.assertIn(f'data-dist-info-metadata="sha256={meta_sha}"', attrs)
        with open(wheel + ".metadata", "rb") as f:
            metadata = f.read()
        self.assertEqual(hashlib.sha256(metadata).hexdigest(), meta_sha)
        self.assertIn(b"Version: 2.8.3+cu128torch2.9", metadata)
        # The name as the index lists it (pip 23.0 compares it with the requirement as typed).
        self.assertIn(b"Name: flash-attn\n", metadata)
        # The same wheel, the same inode, in the package folder and all/.
        name = os.path.basename(wheel)
        self.assertEqual(os.stat(wheel).st_ino,
                         os.stat(self.m.path(f"targets/{self.key}/all/{name}")).st_ino)

    def test_a_project_without_a_wheel_for_the_target_is_not_in_the_index(self):
        sm90 = self.m.path(f"targets/sm90-torch2.9-cu128-{TAG}/simple")
        self.assertEqual(os.listdir(sm90), ["index.html"])
        with open(os.path.join(sm90, "index.html")) as f:
            self.assertNotIn("flash-attn", f.read())
        r = pip("install", "--no-deps", "--target", self.scratch("none"), "--index-url",
                f"file://{sm90}/", "flash-attn")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("No matching distribution", r.stderr)

    def test_find_links_all(self):
        target = self.scratch("site")
        r = pip("install", "--no-deps", "--no-index", "--target", target, "--find-links",
                self.m.path("current/all/"), "flash-attn", "cumesh")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(imported_folder(target, "flash_attn"), "flash_attn/sm89/torch2.9-cu128")
        self.assertEqual(imported_folder(target, "cumesh"), "cumesh/sm89/torch2.9-cu128")

    def test_hash_pinned_requirements(self):
        r = subprocess.run([CLI, "hashes", "--mount", self.m.mountpoint, "flash_attn", "natten"],
                           env=dict(os.environ, PATH="/usr/bin:/bin"), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"--find-links {self.m.path(f'targets/{self.key}/all')}", r.stdout)
        self.assertIn("flash-attn==2.8.3+cu128torch2.9", r.stdout)
        req = os.path.join(self.scratch("req"), "requirements.txt")
        with open(req, "w") as f:
            f.write(r.stdout)
        target = self.scratch("site")
        ok = pip("install", "--no-deps", "--require-hashes", "--target", target, "-r", req)
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        self.assertEqual(imported_folder(target, "natten"), "natten/sm89/torch2.9-cu128")
        # One hash altered: pip refuses, and installs nothing.
        first = re.search(r"sha256:([0-9a-f]{64})", r.stdout).group(1)
        with open(req, "w") as f:
            f.write(r.stdout.replace(first, first[::-1], 1))
        bad_target = self.scratch("site-bad")
        bad = pip("install", "--no-deps", "--require-hashes", "--target", bad_target, "-r", req)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("HASHES", bad.stderr.upper())
        self.assertEqual(glob.glob(os.path.join(bad_target, "*")), [])
        missing = subprocess.run([CLI, "hashes", "--mount", self.m.mountpoint, "--target",
                                  f"sm90-torch2.9-cu128-{TAG}", "flash_attn"],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(missing.returncode, 1)
        self.assertIn("has no wheel of flash-attn", missing.stderr)


class IndexTraffic(MountedTestCase):
    """Real sizes (up to 64 MiB): what resolving costs in bytes from the Hub's CDN."""
    profile = "default"

    def setUp(self):
        self.m = self.mount(options=OVERRIDES)
        self.key = f"sm89-torch2.9-cu128-{TAG}"

    def chosen_sizes(self, projects):
        sizes = {}
        for p in projects:
            page = self.m.path(f"targets/{self.key}/simple/{p}")
            for f in os.listdir(page):
                if f.endswith(".whl"):
                    sizes[p] = os.stat(os.path.join(page, f)).st_size
        return sizes

    def test_resolving_fetches_metadata_and_the_chosen_wheels_only(self):
        projects = ["flash-attn", "natten", "cumesh", "flex-gemm"]
        index = f"file://{self.m.path('current/simple/')}"
        # Listing the index and reading its root page fetch nothing.
        self.hub.clear_log()
        simple = self.m.path(f"targets/{self.key}/simple")
        self.assertTrue(set(projects) <= set(os.listdir(simple)))
        with open(os.path.join(simple, "index.html")) as f:
            f.read()
        self.assertEqual(cdn_bytes(self.hub.log()), 0)
        # Each project's page has the one wheel chosen for the target: resolution reads its
        # METADATA (ranged reads of the wheel's end); pip 23 then downloads the chosen wheel
        # even for --dry-run --report, and nothing else.
        self.hub.clear_log()
        report = os.path.join(self.scratch("r"), "report.json")
        r = pip("install", "--dry-run", "--no-deps", "--ignore-installed", "--report", report,
                "--index-url", index, *projects)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(".metadata", r.stdout)
        with open(report) as f:
            resolved = {i["download_info"]["url"] for i in json.load(f)["install"]}
        self.assertEqual(len(resolved), len(projects), resolved)
        sizes = self.chosen_sizes(projects)
        log = self.hub.log()
        dry = cdn_bytes(log)
        chosen = {os.getxattr(self.m.path(f"targets/{self.key}/simple/{p}/{f}"),
                              "user.wheelhouse.sha256").decode()
                  for p in projects for f in os.listdir(self.m.path(f"targets/{self.key}/simple/{p}"))
                  if f.endswith(".whl")}
        fetched_contents = {e["path"].rsplit("/", 1)[-1] for e in log if e["server"] == "cdn"}
        self.assertTrue(fetched_contents <= chosen, fetched_contents - chosen)
        self.assertLessEqual(dry, sum(sizes.values()) + len(projects) * 2 * 32744, (dry, sizes))
        # Once there, downloading them again costs nothing.
        self.hub.clear_log()
        r = pip("download", "--no-deps", "-d", self.scratch("dl"), "--index-url", index,
                "flash-attn", "natten")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(cdn_bytes(self.hub.log()), 0)
        # The wheels are verified now: the next page that needs their metadata reads it again
        # from the verified wheel and checks it against RECORD (the same key with the host's
        # glibc spelled out is another folder with the same wheels).
        before = self.m.status()["wheel_metadata"]
        glibc = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout
        glibc = re.search(r"(\d+\.\d+)\s*$", glibc.splitlines()[0]).group(1)
        again = self.m.path(f"targets/{self.key}-glibc{glibc}/simple/flash-attn/index.html")
        with open(again) as f:
            self.assertIn("data-core-metadata", f.read())
        after = self.m.status()["wheel_metadata"]
        self.assertEqual(after["verified"] - before["verified"], 1, (before, after))
        self.assertEqual(after["mismatched"], 0)
        print(f"\nresolving {len(projects)} packages ({sum(sizes.values())} bytes of chosen "
              f"wheels): {dry} bytes from the CDN", file=sys.stderr)

    def test_metadata_of_every_wheel_costs_a_fraction_of_the_dataset(self):
        # Every wheel of the dataset is chosen by some key: read each key's pages.
        wheels = {p: meta["size"] for p, meta in self.manifest["files"].items()
                  if p.endswith(".whl")}
        def tag(p):
            m = re.search(r"-(cp3\d+)-", p)
            return m.group(1) if m else TAG  # py3-none-any, abi3: any CPython takes them
        combos = {tuple(p.split("/")[1:3]) + (tag(p),) for p in wheels}
        self.hub.clear_log()
        pages = 0
        for arch, folder, tag in sorted(combos):
            torch, cuda = re.fullmatch(r"torch(\d+\.\d+)-cu(\d+)", folder).groups()
            simple = self.m.path(f"targets/{arch}-torch{torch}-cu{cuda}-{tag}/simple")
            for project in os.listdir(simple):
                if project != "index.html":
                    with open(os.path.join(simple, project, "index.html")) as f:
                        f.read()
                    pages += 1
        fetched = cdn_bytes(self.hub.log())
        total = sum(wheels.values())
        status = self.m.status()["wheel_metadata"]
        self.assertGreater(status["extracted"], 0)
        self.assertLess(fetched, total / 10, (fetched, total))
        print(f"\nmetadata read {status['extracted']} times ({pages} pages, {len(wheels)} wheels "
              f"of {total} bytes): {fetched} bytes from the CDN "
              f"({100.0 * fetched / total:.2f}% of the wheels)", file=sys.stderr)


if __name__ == "__main__":
    mounttest.main()
