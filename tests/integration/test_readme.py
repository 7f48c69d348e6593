#!/usr/bin/env python3
"""README's commands, run as a newcomer types them. Every shell block of README.md that has the
line `<!-- run -->` right before it runs, in README's order, in one `bash -e` started in the
checkout: `tools/dev.sh try` and what to type on its mount, `tools/dev.sh try stop`, then a mount
by hand on /mnt/wheelhouse and what the node's users type, and last the commands that take it
down.

Hermetic: the blocks run in a mount namespace of their own (unshare -m, private propagation)
with a tmpfs on /tmp, /mnt, /run, /var/cache and /var/log (the try's folder, the mount point,
the daemon's default state folder, cache and log) and a home folder in that /tmp; the other
wheelhouse mounts of the machine are detached there, so "the only mount" is the blocks' own.
The environment is made here, not inherited: this build first on PATH (README's blocks use the
checkout's build/, so this test runs where the build folder is the checkout's build/),
HF_ENDPOINT naming an emulator of the test's (the "Hub" of the blocks after the try), no GPU or
torch but the targets' overrides (WHEELHOUSE_ARCH/TORCH/CUDA, as the try's), and no package
index (PIP_NO_INDEX: nothing but loopback is reachable). The blocks must end with nothing of
theirs left in the namespace (no process, no FUSE mount); whatever a failed block left is
stopped by the driver and, failing that, killed here by pid.

A failed block fails the test with its line in README.md, its text and its output."""
import os
import re
import secrets
import signal
import subprocess
import sys

import mounttest
from mounttest import MountedTestCase, wait_for

README = os.path.join(mounttest.SOURCE_DIR, "README.md")
MARK = "<!-- run -->"
PRIVATE_DIRS = ("/tmp", "/mnt", "/run", "/var/cache", "/var/log")
HOME = "/tmp/readme-home"


def marked_blocks(text):
    """[(line of the block's first command, its text)] for each ``` block right after a MARK
    line, in order; ValueError for a mark not followed by a shell block."""
    lines = text.split("\n")
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        if not fence.startswith("```"):
            raise ValueError(f"README.md:{i + 1}: {MARK} is not followed by a ``` block")
        if fence[3:].strip() not in ("sh", "bash", ""):
            raise ValueError(f"README.md:{i + 2}: a marked block must be sh, not {fence[3:]!r}")
        end = i + 2
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"README.md:{i + 2}: the marked block is not closed")
        blocks.append((i + 3, "\n".join(lines[i + 2:end])))
    return blocks


# What runs in this mount namespace besides the driver (argv[1]), and the FUSE mounts of the
# namespace: one line each, nothing when it is clean.
LEFT_PY = r"""
import os, sys
own = {sys.argv[1], str(os.getpid()), str(os.getppid())}  # the driver, this, a $( ) subshell
ns = os.readlink("/proc/self/ns/mnt")
for pid in sorted(os.listdir("/proc"), key=lambda p: int(p) if p.isdigit() else 0):
    if not pid.isdigit() or pid in own:
        continue
    try:
        if os.readlink(f"/proc/{pid}/ns/mnt") != ns:
            continue
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                continue
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue
    print(f"process {pid}: {cmd}")
with open("/proc/self/mountinfo", encoding="utf-8") as f:
    for line in f:
        left, _, right = line.partition(" - ")
        if right.split()[0].startswith("fuse"):
            print("mount " + left.split()[4].encode().decode("unicode_escape"))
"""

# Detaches, in this namespace only, the wheelhouse mounts it was given a copy of.
DETACH_PY = r"""
import subprocess
with open("/proc/self/mountinfo", encoding="utf-8") as f:
    points = [l.partition(" - ")[0].split()[4].encode().decode("unicode_escape")
              for l in f if l.partition(" - ")[2].split()[0] == "fuse.wheelhousefs"]
for p in reversed(points):
    subprocess.run(["umount", "-l", p], check=False)
"""


def q(s):
    """s as one bash word."""
    return "'" + s.replace("'", "'\\''") + "'"


def driver(blocks, tag):
    """The bash script that sets the namespace up, runs the blocks and cleans up after them."""
    src, build, py = mounttest.SOURCE_DIR, mounttest.BUILD_DIR, sys.executable
    out = [
        "# tests/integration/test_readme.py: unshare -m --propagation private bash FILE",
        f"__src={q(src)} __build={q(build)} __py={q(py)} __tag={q(tag)}",
        'echo "@@$__tag ns $(readlink /proc/self/ns/mnt)@@"',
        f"$__py -c {q(DETACH_PY)}",
        # A checkout under a folder the tmpfs hides comes back through a descriptor opened first.
        'exec 9<"$__src"',
    ]
    for d in PRIVATE_DIRS:
        out.append(f"mount -t tmpfs -o mode={'1777' if d == '/tmp' else '0755'} "
                   f"readme-{d.strip('/').replace('/', '-')} {d}")
    out += [
        '[ -d "$__src/tools" ] || { mkdir -p "$__src" && mount --bind /proc/self/fd/9 "$__src"; }',
        "exec 9<&-",
        f"mkdir -p {HOME}",
        "__readme_left() {",
        f"  $__py -c {q(LEFT_PY)} $$",
        "}",
        "__readme_cleanup() {",
        "  local rc=$?",
        "  set +e",
        "  trap - EXIT",
        '  echo "@@$__tag cleanup $rc@@"',
        '  cd "$__src" &&',
        '    env -u WHEELHOUSE_TRY WHFS_BUILD_DIR="$__build" tools/dev/try.sh stop >/dev/null 2>&1',
        "  local what",
        "  __readme_left | sed -n 's/^mount //p' | while IFS= read -r what; do",
        '    "$__build/tools/wheelhouse" stop --timeout 30 "$what" >/dev/null 2>&1 ||',
        '      fusermount3 -u -z "$what"',
        "  done",
        '  exit "$rc"',
        "}",
        "trap __readme_cleanup EXIT",
        'cd "$__src"',
        "set -e",
    ]
    for n, (line, text) in enumerate(blocks, 1):
        out += [f'echo "@@$__tag block {n}@@"', f"__readme_block_{n}() {{", text, "}",
                f"__readme_block_{n}"]
    out += [
        "set +e",
        'echo "@@$__tag done@@"',
        "__left=$(__readme_left)",
        'if [ -n "$__left" ]; then echo "@@$__tag left@@"; echo "$__left"; exit 3; fi',
    ]
    return "\n".join(out) + "\n"


def namespace_processes(ns):
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == ns:
                pids.append(int(pid))
        except OSError:
            continue
    return pids


class Readme(MountedTestCase):
    profile = "small"

    def test_every_marked_block_runs_in_order(self):
        with open(README, encoding="utf-8") as f:
            blocks = marked_blocks(f.read())
        self.assertTrue(blocks, f"no block of README.md is marked with {MARK}")
        tag = "readme-" + secrets.token_hex(4)
        script = os.path.join(self.scratch("driver"), "run.sh")
        with open(script, "w", encoding="utf-8") as f:
            f.write(driver(blocks, tag))
        build = mounttest.BUILD_DIR
        env = {
            "PATH": f"{build}/tools:{build}/fs:"
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": HOME,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "HF_ENDPOINT": self.hub.hub,
            "WHEELHOUSE_ARCH": "sm89",
            "WHEELHOUSE_TORCH": "2.9",
            "WHEELHOUSE_CUDA": "12.8",
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "WHFS_BUILD_DIR": build,
        }
        env.update({k: v for k, v in os.environ.items() if k.startswith("CCACHE_")})
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "bash", script],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                cwd=mounttest.SOURCE_DIR, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            output, _ = proc.communicate(timeout=120)
        output = output.decode(errors="replace")
        self.addCleanup(self.kill_what_is_left, output, tag)
        self.check(output, tag, blocks, proc.returncode)
        self.assertEqual(self.kill_what_is_left(output, tag), [],
                         "processes of the blocks' namespace were left running")

    def kill_what_is_left(self, output, tag):
        """Waits for the namespace's processes to end, kills those that do not; their pids."""
        m = re.search(rf"@@{tag} ns (\S+)@@", output)
        if not m:
            return []
        ns = m.group(1)
        wait_for(lambda: not namespace_processes(ns), timeout=10)
        left = namespace_processes(ns)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def check(self, output, tag, blocks, rc):
        parts = re.split(rf"^@@{tag} (.*)@@$", output, flags=re.M)
        # parts: [before, marker, text, marker, text, ...]
        current, by_block, cleanup_rc, left = None, {}, None, None
        for marker, text in zip(parts[1::2], parts[2::2]):
            if marker.startswith("block "):
                current = int(marker.split()[1])
                by_block[current] = text
            elif marker.startswith("cleanup "):
                cleanup_rc = int(marker.split()[1])
            elif marker == "left":
                left = text.strip()
        if left:
            self.fail(f"README's blocks ran, and left behind them:\n{left}")
        if rc == 0 and cleanup_rc == 0 and len(by_block) == len(blocks):
            return
        if current is None:
            self.fail(f"the namespace for README's blocks was not set up (exit {rc}):\n{output}")
        line, text = blocks[current - 1]
        self.fail(f"README.md block {current} of {len(blocks)} (line {line}) failed "
                  f"(exit {cleanup_rc if cleanup_rc is not None else rc}):\n{text}\n"
                  f"--- its output ---\n{by_block[current]}")


def main():
    if os.geteuid() != 0:
        print("SKIP: README's commands mount as root (tools/dev.sh try, /mnt/wheelhouse)",
              file=sys.stderr)
        sys.exit(mounttest.SKIP)
    checkout_build = os.path.realpath(os.path.join(mounttest.SOURCE_DIR, "build"))
    if os.path.realpath(mounttest.BUILD_DIR) != checkout_build:
        print(f"SKIP: README's commands use the checkout's build/ ({checkout_build}); this "
              f"build is {mounttest.BUILD_DIR}", file=sys.stderr)
        sys.exit(mounttest.SKIP)
    mounttest.main()


if __name__ == "__main__":
    main()
