#!/usr/bin/env python3
"""Fail when the mounted (FUSE) tests did not run although this machine can mount.

ctest reports a test that exits 77 as "skipped" and the run as a success; on a CI machine
with a usable /dev/fuse that would hide a broken mount, so here a skipped, missing or failed
test labelled "mount" is an error."""
import glob
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


def fuse_usable():
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
    except OSError as e:
        return False, f"/dev/fuse cannot be opened: {e}"
    os.close(fd)
    return True, "/dev/fuse opens read-write"


def podman_usable():
    """Rootful podman with runc and cgroupfs, as the container tests run it."""
    if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("runc") is None:
        return False, "no rootful podman with runc here"
    conf = os.path.join(os.path.dirname(os.path.abspath(__file__)), "podman-check.conf")
    with open(conf, "w", encoding="utf-8") as f:
        f.write('[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n'
                'runtime = "runc"\n')
    r = subprocess.run(["podman", "info"], env=dict(os.environ, CONTAINERS_CONF=conf),
                       capture_output=True, text=True)
    os.unlink(conf)
    if r.returncode != 0:
        return False, f"podman info fails: {r.stderr.strip()[-300:]}"
    return True, "podman info works"


def labelled(build, label):
    listing = subprocess.run(["ctest", "--test-dir", build, "-L", label, "--show-only=json-v1"],
                             check=True, capture_output=True, text=True).stdout
    return [t["name"] for t in json.loads(listing).get("tests", [])]


def main(build):
    usable, why = fuse_usable()
    print(f"check_mounted: {why}")
    names = labelled(build, "mount")
    containers = labelled(build, "container")
    if containers:
        podman, pwhy = podman_usable()
        print(f"check_mounted: {pwhy}")
        # The container tests need FUSE and podman both; where both work they must run.
        names += containers if (podman or not usable) else []
    has_mount_binary = os.path.exists(os.path.join(build, "fs", "wheelhousefs"))
    if not names:
        if has_mount_binary:
            print("check_mounted: FAIL: wheelhousefs is built but no test is labelled 'mount'")
            return 1
        print("check_mounted: no mounted tests yet (the mount is not built in this version)")
        return 0
    # tools/dev.sh test writes one JUnit file per label (ctest-junit-<label>.xml).
    junits = sorted(glob.glob(os.path.join(build, "ctest-junit*.xml")))
    if not junits:
        print(f"check_mounted: FAIL: no ctest-junit*.xml in {build}: did the tests run?")
        return 1
    status = {}
    for junit in junits:
        for case in ET.parse(junit).getroot().iter("testcase"):
            status[case.get("name")] = case.get("status", "run")
    bad = []
    for n in names:
        s = status.get(n, "missing")
        if s != "run" and (usable or s != "notrun"):
            bad.append(f"{n}: {s}")
    if not usable:
        print("check_mounted: FUSE is not usable here, mounted tests may skip")
    if bad:
        print("check_mounted: FAIL: mounted tests that did not pass:\n  " + "\n  ".join(bad))
        return 1
    print(f"check_mounted: {len(names)} mounted tests ran and passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build"))
