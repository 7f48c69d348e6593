"""Container images for the podman tests, made here without a registry.

The base is a debootstrap minbase root of Debian 12 with python3, python3-venv, systemd (for
the tests that boot it as PID 1) and every package this build's .deb depends on, and a venv at
/opt/venv (pip from Debian's wheel), made once per dependency list and `podman import`ed. On
it, `podman build` layers of COPY and ENV only (no RUN: nothing runs at build time): the .deb's
files, a torch of a given version in the venv, a warm cache. Images are named
localhost/whfs-test-*:<hash of what is in them>, so a second run reuses them. Rootful podman
with runc and cgroupfs, and no default ulimits (what works on these machines), from a
containers.conf of the tests' own (CONTAINERS_CONF).
"""
import atexit
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import mounttest

WORK = os.path.join(mounttest.BUILD_DIR, "podman")
CONF = os.path.join(WORK, "containers.conf")
ENV = dict(os.environ, CONTAINERS_CONF=CONF)
PY_SITE = "/opt/venv/lib/python3.11/site-packages"  # Debian 12's Python


def _conf():
    os.makedirs(WORK, exist_ok=True)
    with open(CONF, "w", encoding="utf-8") as f:
        f.write('[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n'
                'runtime = "runc"\n')


def podman(*args, check=True, timeout=600, **kw):
    r = subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)[:300]} failed ({r.returncode}):\n"
                             f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def usable():
    """(True, "") where rootful podman can run containers here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "the podman tests run rootful podman: run them as root"
    for prog in ("podman", "runc", "debootstrap"):
        if shutil.which(prog) is None:
            return False, f"{prog} is not installed (tools/dev/setup.sh --tests installs it)"
    _conf()
    r = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], env=ENV,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return False, f"podman info failed: {r.stderr.strip()[-500:]}"
    return True, ""


def _mirror():
    """The Debian mirror apt here uses (debootstrap fetches from it, as apt-get does)."""
    texts = []
    for path in ["/etc/apt/sources.list"] + sorted(
            os.path.join("/etc/apt/sources.list.d", f)
            for f in (os.listdir("/etc/apt/sources.list.d")
                      if os.path.isdir("/etc/apt/sources.list.d") else [])):
        try:
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
        except OSError:
            pass
    for text in texts:
        for m in re.finditer(r"^\s*(?:deb\s+(?:\[[^]]*\]\s+)?|URIs:\s*)(\S+)", text, re.M):
            url = m.group(1).rstrip("/")
            if "security" not in url:
                return url
    return "http://deb.debian.org/debian"


def _locked(fn):
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(WORK, ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return fn()


def _exists(tag):
    return podman("image", "exists", tag, check=False).returncode == 0


def build_deb(version=None):
    """This build's .deb (cpack), in a folder of this test program's own (removed at its exit);
    one cpack at a time (the test programs run in parallel, and cpack stages in the build).
    `version` (e.g. "0.1.1") packages the same files as that version, for an upgrade."""
    os.makedirs(WORK, exist_ok=True)
    out = tempfile.mkdtemp(prefix="deb-", dir=WORK)
    atexit.register(shutil.rmtree, out, True)
    override = ["-D", f"CPACK_PACKAGE_VERSION={version}"] if version else []

    def make():
        r = subprocess.run(["cpack", "-G", "DEB", "-B", out, *override], cwd=mounttest.BUILD_DIR,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"cpack failed:\n{r.stdout}\n{r.stderr}"
        debs = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".deb")]
        assert len(debs) == 1, debs
        return debs[0]

    return _locked(make)


def _packages(deb):
    """The .deb's Depends as real package names (a virtual one becomes its provider)."""
    depends = subprocess.run(["dpkg-deb", "-f", deb, "Depends"], capture_output=True, text=True,
                             check=True).stdout
    wanted = [n for n in (item.split("|")[0].split("(")[0].strip() for item in depends.split(","))
              if n]
    # One apt-cache for all (each run loads the cache: about half a second): a virtual name is
    # left out of its answer.
    show = subprocess.run(["apt-cache", "show", "--no-all-versions", *wanted],
                          capture_output=True, text=True)
    real = set(re.findall(r"^Package: (\S+)$", show.stdout, re.M))
    names = []
    for name in wanted:
        if name not in real:
            pkg = subprocess.run(["apt-cache", "showpkg", name], capture_output=True, text=True)
            tail = pkg.stdout.split("Reverse Provides:", 1)[-1].split()
            name = tail[0] if tail else name
        names.append(name)
    # systemd: the base serves tests that boot it as PID 1 too (test_systemd.py); a container
    # that runs another command never starts it.
    return sorted(set(names + ["python3", "python3-venv", "systemd"]))


def base_image(deb):
    """localhost/whfs-test-base:<hash>: Debian 12 minbase + the .deb's dependencies + a venv."""
    packages = _packages(deb)
    tag = "localhost/whfs-test-base:" + hashlib.sha256(
        ",".join(packages).encode()).hexdigest()[:12]

    def make():
        if _exists(tag):
            return tag
        root = tempfile.mkdtemp(prefix="root-", dir=WORK)
        try:
            r = subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages),
                                "bookworm", root, _mirror()], capture_output=True, text=True,
                               timeout=1200)
            assert r.returncode == 0, f"debootstrap failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            r = subprocess.run(["chroot", root, "/usr/bin/python3", "-m", "venv", "/opt/venv"],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"venv in the image failed:\n{r.stderr}"
            shutil.rmtree(os.path.join(root, "var/cache/apt/archives"), ignore_errors=True)
            tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
            podman("import", "--change", "CMD=/bin/sh", "-", tag, stdin=tar.stdout)
            tar.wait()
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return tag

    return _locked(make)


def _hash_files(h, src):
    """Adds the names, sizes, modes and contents of the files of `src` (a file or a folder)."""
    for dirpath, dirnames, filenames in os.walk(src) if os.path.isdir(src) else [("", [], [src])]:
        dirnames.sort()
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, src)}:{st.st_size}:{st.st_mode}".encode())
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())


def layered(base, files, env=None, name="layer"):
    """An image `base` + COPY of each (host path, image path) + ENV, tagged by their hash."""
    h = hashlib.sha256(base.encode())
    for src, dst in files:
        h.update(dst.encode())
        _hash_files(h, src)
    for k, v in sorted((env or {}).items()):
        h.update(f"{k}={v}".encode())
    tag = f"localhost/whfs-test-{name}:{h.hexdigest()[:12]}"

    def make():
        if _exists(tag):
            return tag
        ctx = tempfile.mkdtemp(prefix="ctx-", dir=WORK)
        try:
            lines = [f"FROM {base}"]
            for i, (src, dst) in enumerate(files):
                shutil.copytree(src, os.path.join(ctx, str(i)), symlinks=True) \
                    if os.path.isdir(src) else shutil.copy2(src, os.path.join(ctx, str(i)))
                lines.append(f"COPY {i} {dst}")
            for k, v in (env or {}).items():
                lines.append(f"ENV {k}={v}")
            with open(os.path.join(ctx, "Containerfile"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            podman("build", "--pull=never", "--network", "none", "-t", tag, ctx)
        finally:
            shutil.rmtree(ctx, ignore_errors=True)
        return tag

    return _locked(make)


def with_package(base, deb):
    """`base` with the .deb's files (unpacked here: the layer has no RUN)."""
    root = tempfile.mkdtemp(prefix="deb-", dir=WORK)
    try:
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        return layered(base, [(root, "/")], name="pkg")
    finally:
        shutil.rmtree(root, ignore_errors=True)


BUILD_IMAGE = os.path.join(mounttest.SOURCE_DIR, "tools", "kubernetes", "build-image.sh")


def plugin_image(base, deb):
    """The wheelhouse-csi image as tools/kubernetes/README.md builds it: tools/kubernetes/build-image.sh, which runs
    `dpkg -i` of the .deb on `base` (it has the .deb's dependencies: no network), tagged
    localhost/whfs-test-plugin:<hash of the base, the .deb's files and the recipe>."""
    root = tempfile.mkdtemp(prefix="deb-", dir=WORK)
    try:
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        h = hashlib.sha256(base.encode())
        _hash_files(h, root)
        _hash_files(h, BUILD_IMAGE)
        _hash_files(h, os.path.join(os.path.dirname(BUILD_IMAGE), "Containerfile"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    tag = f"localhost/whfs-test-plugin:{h.hexdigest()[:12]}"

    def make():
        if _exists(tag):
            return tag
        r = subprocess.run([BUILD_IMAGE, "--network", "none", "--no-pull", "--tag", tag, base, deb],
                           env=dict(ENV, ENGINE="podman"), capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0 and r.stdout.strip() == tag, \
            f"build-image.sh failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return tag

    return _locked(make)


def torch_files(version, cuda):
    """A folder with torch/version.py as torch writes it (what the mount reads)."""
    d = tempfile.mkdtemp(prefix="torch-", dir=WORK)
    os.makedirs(os.path.join(d, "torch"))
    with open(os.path.join(d, "torch", "version.py"), "w", encoding="utf-8") as f:
        f.write(f"__version__ = '{version}'\ndebug = False\ncuda = {cuda!r}\nhip = None\n")
    return os.path.join(d, "torch")


VENV_ENV = {
    "VIRTUAL_ENV": "/opt/venv",
    "PATH": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INDEX": "1",
}


def venv_image(pkg_image, torch, cuda, env=VENV_ENV):
    """`pkg_image` whose /opt/venv has torch `torch`: on PATH, as an activated venv, unless
    `env` says otherwise ({}: a venv to activate)."""
    src = torch_files(torch, cuda)
    try:
        return layered(pkg_image, [(src, f"{PY_SITE}/torch")], env=env, name="venv")
    finally:
        shutil.rmtree(os.path.dirname(src), ignore_errors=True)


def main(what, *needed):
    """unittest.main(), or exit 77 (skipped) with the reason where FUSE or rootful podman cannot
    run, or a program in `needed` is not built."""
    import sys
    import unittest
    ok, why = mounttest.fuse_usable()
    if ok:
        ok, why = usable()
    for program in needed:
        if ok and not os.path.exists(program):
            ok, why = False, f"{program} is not built"
    if not ok:
        print(f"SKIP: {what} need FUSE and rootful podman: {why}", file=sys.stderr)
        sys.exit(mounttest.SKIP)
    unittest.main()
