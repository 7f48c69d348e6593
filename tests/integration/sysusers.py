"""Users and groups a test program makes for itself: names no other run uses (whfs + random +
a role), ids chosen by useradd/groupadd, and all of them removed when the program exits (also
after a failed test): two runs on one machine never see each other's, and none is left behind
(.ci/leftovers.py fails a run that leaves one)."""
import atexit
import os
import secrets
import subprocess
import time

_made = []  # ("user" | "group", name), in the order made


def _run(argv):
    """useradd and friends, retried while another one holds the lock of /etc/passwd."""
    for _ in range(100):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return
        if "lock" not in r.stderr.lower():
            raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
        time.sleep(0.1)
    raise RuntimeError(f"{' '.join(argv)}: /etc/passwd stayed locked")


def _name(role):
    return f"whfs{secrets.token_hex(3)}-{role}"[:32]


class User:
    def __init__(self, name):
        self.name = name
        out = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True)
        self.uid = int(out.stdout)
        out = subprocess.run(["id", "-g", name], capture_output=True, text=True, check=True)
        self.gid = int(out.stdout)


def group(role):
    """A new group; its name."""
    name = _name(role)
    _run(["groupadd", name])
    _made.append(("group", name))
    return name


def user(role, groups=()):
    """A new user without a home or a login shell, in group nogroup (and `groups`)."""
    name = _name(role)
    argv = ["useradd", "-M", "-N", "-g", "nogroup", "-s", "/usr/sbin/nologin"]
    if groups:
        argv += ["-G", ",".join(groups)]
    _run(argv + [name])
    _made.append(("user", name))
    return User(name)


def _end_processes_of(name):
    """A process a failed test left running as its user would keep userdel from working."""
    for sig in ("TERM", "KILL"):
        if subprocess.run(["pkill", f"-{sig}", "-u", name], capture_output=True).returncode != 0:
            return  # none (left)
        for _ in range(50):
            if subprocess.run(["pgrep", "-u", name], capture_output=True).returncode != 0:
                return
            time.sleep(0.1)


def remove_all():
    while _made:
        kind, name = _made.pop()
        if kind == "user":
            _end_processes_of(name)
        cmd = ["userdel", name] if kind == "user" else ["groupdel", name]
        try:
            _run(cmd)
        except RuntimeError as e:
            print(f"sysusers: {e}", flush=True)


def usable():
    """(True, "") where users can be made here (root, useradd), else (False, why)."""
    if os.geteuid() != 0:
        return False, "making a second user needs root"
    for prog in ("useradd", "groupadd", "setpriv"):
        if subprocess.run(["which", prog], capture_output=True).returncode != 0:
            return False, f"{prog} is not installed"
    return True, ""


atexit.register(remove_all)
