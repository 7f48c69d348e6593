#!/usr/bin/env python3
"""What a CI run left behind: `leftovers.py snapshot FILE` before the run, `leftovers.py check
FILE` after it. The check lists every mount, process, user, group, podman container or image
and temporary folder that appeared since the snapshot and is the run's (by name or place:
nothing else on the machine is judged), and fails (exit 1) when there is any.

The run's own, by these marks:
- mounts: of type fuse.wheelhousefs, or under the checkout, /tmp or /var/tmp;
- processes: wheelhousefs, wheelhouse-csi, wheelhouse-hint, or any whose command line names
  the checkout, a whfs- temporary folder, or the emulator (fakehub);
- users and groups: any new one (nothing else on a CI machine makes users during a run);
- podman: new containers, and new images named localhost/whfs-*;
- cgroups: new ones named wheelhouse* or whfs* at the top of a hierarchy (the CSI plugin's);
- temporary folders: new entries of /tmp and /var/tmp named whfs-*, fakehub-*, fidelity-*,
  gen_wheelhouse_*, or tmp* folders holding a whfs mount's files; new files of
  /run/wheelhouse-fs (a daemon's state for the next one on its mount point).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

CHECKOUT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TEMP_ROOTS = ("/tmp", "/var/tmp")
# Files a daemon keeps for the next one on its mount point (the hooked shells' hints).
STATE_ROOTS = ("/run/wheelhouse-fs",)
TEMP_PREFIXES = ("whfs-", "whfs_", "fakehub-", "fidelity-", "gen_wheelhouse_")
PROGRAMS = {"wheelhousefs", "wheelhouse-csi", "wheelhouse-hint"}


def mounts():
    out = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4].encode().decode("unicode_escape")
            fstype = right.split()[0]
            out.add(f"{point} ({fstype})")
    return out


def ours_mount(entry):
    point, _, fstype = entry.rpartition(" (")
    fstype = fstype.rstrip(")")
    return (fstype == "fuse.wheelhousefs" or point.startswith(CHECKOUT + "/") or
            any(point.startswith(r + "/") for r in TEMP_ROOTS))


def processes():
    out = {}
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            start = stat[stat.rindex(")") + 2:].split()[19]
        except (OSError, ValueError, IndexError):
            continue
        if cmd:
            out[f"{pid}:{start}"] = (comm, cmd)
    return out


def ours_process(comm, cmd):
    return (comm in PROGRAMS or CHECKOUT in cmd or "/whfs-" in cmd or "fakehub" in cmd or
            os.path.basename(cmd.split(" ")[0]) in PROGRAMS)


def names(path):
    with open(path, encoding="utf-8") as f:
        return {line.split(":", 1)[0] for line in f if ":" in line}


def podman(*args):
    if os.geteuid() != 0 or shutil.which("podman") is None:
        return set()
    conf = os.environ.get("CONTAINERS_CONF")
    env = dict(os.environ)
    if not conf:
        # The tests' engine settings (cgroupfs, runc): plain `podman` may not run here.
        conf = os.path.join(CHECKOUT, "build", "podman", "containers.conf")
        if os.path.exists(conf):
            env["CONTAINERS_CONF"] = conf
    r = subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=120)
    return {line.strip() for line in r.stdout.splitlines() if line.strip()} if r.returncode == 0 \
        else set()


def temps():
    out = set()
    for root in TEMP_ROOTS + STATE_ROOTS:
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for e in entries:
            out.add(os.path.join(root, e))
    return out


def ours_temp(path):
    base = os.path.basename(path)
    if os.path.dirname(path) in STATE_ROOTS:
        return True
    if base.startswith(TEMP_PREFIXES):
        return True
    # A tempfile folder of a test (tmpXXXX) holding a mount's or a cache's files.
    if base.startswith("tmp") and os.path.isdir(path):
        try:
            inside = os.listdir(path)
        except OSError:
            return False
        return any(n in ("mnt", "cache", "data.mdb", "wheelhousefs.log") for n in inside)
    return False


def cgroups():
    """Cgroups of the node that the CSI plugin makes for its daemons (wheelhouse-fs*, whfs*),
    in every hierarchy."""
    out = set()
    for top in glob.glob("/sys/fs/cgroup/*/") + ["/sys/fs/cgroup/"]:
        for d in glob.glob(os.path.join(top, "wheelhouse*")) + glob.glob(os.path.join(top, "whfs*")):
            if os.path.isdir(d):
                out.add(d)
    return out


def snapshot():
    return {
        "mounts": sorted(mounts()),
        "processes": sorted(processes()),
        "users": sorted(names("/etc/passwd")),
        "groups": sorted(names("/etc/group")),
        "containers": sorted(podman("ps", "-a", "--format", "{{.ID}} {{.Names}} {{.Image}}")),
        "images": sorted(podman("images", "--format", "{{.Repository}}:{{.Tag}}")),
        "temps": sorted(temps()),
        "cgroups": sorted(cgroups()),
    }


def check(before):
    now_procs = processes()
    found = []
    for m in sorted(mounts() - set(before["mounts"])):
        if ours_mount(m):
            found.append(f"mount     {m}")
    for key, (comm, cmd) in sorted(now_procs.items()):
        if key not in before["processes"] and ours_process(comm, cmd):
            found.append(f"process   {key.split(':')[0]} {cmd[:200]}")
    for u in sorted(names("/etc/passwd") - set(before["users"])):
        found.append(f"user      {u}")
    for g in sorted(names("/etc/group") - set(before["groups"])):
        found.append(f"group     {g}")
    for c in sorted(podman("ps", "-a", "--format", "{{.ID}} {{.Names}} {{.Image}}") -
                    set(before["containers"])):
        found.append(f"container {c}")
    for i in sorted(podman("images", "--format", "{{.Repository}}:{{.Tag}}") -
                    set(before["images"])):
        if i.startswith("localhost/whfs"):
            found.append(f"image     {i}")
    for c in sorted(cgroups() - set(before.get("cgroups", []))):
        found.append(f"cgroup    {c}")
    for t in sorted(temps() - set(before["temps"])):
        if ours_temp(t):
            found.append(f"temp      {t}")
    return found


def main(argv):
    if len(argv) != 3 or argv[1] not in ("snapshot", "check"):
        print("usage: leftovers.py snapshot|check FILE", file=sys.stderr)
        return 2
    path = argv[2]
    if argv[1] == "snapshot":
        with open(path, "w", encoding="utf-8") as f:
            json.dump(snapshot(), f)
        return 0
    with open(path, encoding="utf-8") as f:
        before = json.load(f)
    found = check(before)
    if found:
        print(f"leftovers: FAIL: the run left {len(found)} thing(s) behind:")
        for line in found:
            print("  " + line)
        return 1
    print("leftovers: nothing left behind (mounts, processes, users, groups, podman, temp)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
