#!/usr/bin/env python3
"""wheelhouse-fs's own benchmark: what the shared peer harness does not measure.

    python3 tests/bench/bench.py [--rate 50m] [--many 10000,100000] [--reps 3] [--out FILE.md]
                                 [--mount-options streaming,...] [--only first_byte,random,...]
                                 [--bins before=OLD,after=NEW] [--data DIR]

--bins measures each build in turn, test by test, in the one run (a before/after comparison
with every reference measured in the same session); --data keeps the generated wheelhouses
(about 2.3 GiB, and the 10k/100k-entry trees) for the next run.

Runs against a generated wheelhouse served by the Hub emulator, whose downloads go to a
private nginx (the shared harness's server.sh), unthrottled and, with --rate, in WAN mode
(nginx limit_rate per connection). Every figure is a ratio to a reference measured in the same
run (a local folder, curl); absolute numbers on these shared machines are noisy.

  time to first byte        open + read 1 byte of a cold wheel vs curl's first byte (verified
                            serving waits for the whole wheel; --mount-options streaming does not)
  200 random 4 KiB reads    of the biggest wheel, cold, with the bytes fetched, vs the same
                            reads of the local file
  ls -R / find, +N entries  cold and warm, with daemon RSS per entry, vs the local folder
  8 parallel readers        8 different wheels at once, aggregate MiB/s, vs local page cache
  pip install               --no-deps --force-reinstall --target of current/<pkg>/*.whl, cold
                            and warm, vs the same wheel from a local folder
  cold sequential 256 MiB   MiB/s and CPU seconds per GiB of the daemon, beside curl (one
                            stream) and aria2c -x16 (their own CPU, same file, same nginx)
  metrics                   the same with metrics= scraped every second vs without,
                            alternated in one run
  scaling                   1, 2, 4 and 8 parallel readers of the 8 biggest wheels (aggregate
                            MiB/s, daemon CPU s/GiB); 1 and 8 daemons on one cache directory
                            reading the same wheels at once (wall time, bytes from the CDN)
  per test                  daemon CPU seconds and peak anonymous RSS
"""
import argparse
import glob
import random
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "bench")
sys.path.insert(0, os.path.join(ROOT, "tests", "fakehub"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import gen_wheelhouse  # noqa: E402
from fakehub_ctl import FakeHub  # noqa: E402
from mounttest import is_mounted, wait_for  # noqa: E402

BIN = os.environ.get("WHFS_BIN", os.path.join(ROOT, "build", "fs", "wheelhousefs"))
BINS = [("", BIN)]  # --bins: (label, path) of each build measured


def use_build(path):
    global BIN
    BIN = path
REPO = "DoctorPopi/python_wheelhouse"
MIB = 1 << 20
EXTRA_OPTIONS = []  # --mount-options
SEQ_MIB = 256
SEQ_FILE = f"seq-{SEQ_MIB}M.bin"


class Proc:
    """CPU seconds and peak anonymous RSS of a process, sampled."""

    def __init__(self, pid):
        self.pid = pid

    def cpu(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def anon_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
        return 0

    def measure(self, fn):
        """Runs fn, returns (result, cpu seconds, peak anon MiB) of the daemon meanwhile."""
        peak = [self.anon_kib()]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], self.anon_kib())
                except OSError:
                    return
                stop.wait(0.01)
        t = threading.Thread(target=sample, daemon=True)
        c0 = self.cpu()
        t.start()
        try:
            r = fn()
        finally:
            stop.set()
            t.join()
        return r, self.cpu() - c0, peak[0] / 1024


class Nginx:
    """The shared harness's private nginx serving the tree (its server.sh)."""

    def __init__(self, data_dir, work, rate):
        self.env = dict(os.environ, DATA_DIR=data_dir, NGINX_PREFIX=os.path.join(work, "nginx"),
                        BENCH_PORT=str(18180 + os.getpid() % 500), BENCH_LIMIT_RATE=rate or "0")
        subprocess.run([os.path.join(SHARED, "server.sh"), "start"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        self.url = subprocess.run([os.path.join(SHARED, "server.sh"), "url"], env=self.env,
                                  check=True, capture_output=True, text=True).stdout.strip()

    def stop(self):
        subprocess.run([os.path.join(SHARED, "server.sh"), "stop"], env=self.env,
                       stdout=subprocess.DEVNULL)


class Mount:
    _seq = 0

    def __init__(self, hub, work, name, options=(), cache=None):
        # Each mount gets a cache of its own (a WAN pass must not find the unthrottled pass's),
        # unless `cache` names one to share.
        Mount._seq += 1
        name = f"{name}-{Mount._seq}"
        self.mnt = os.path.join(work, name)
        os.makedirs(self.mnt, exist_ok=True)
        self.cache = cache or os.path.join(work, name + "-cache")
        self.shared = cache is not None
        opts = ([f"endpoint={hub}", f"cache_dir={self.cache}", "log_level=warn"] + list(options) +
                EXTRA_OPTIONS)
        # The caches earlier measurements wrote are still being written back: not during ours.
        os.sync()
        self.log = open(os.path.join(work, name + ".log"), "ab")
        self.proc = subprocess.Popen([BIN, "-f", "-o", ",".join(opts), REPO, self.mnt],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_for(lambda: is_mounted(self.mnt), timeout=60):
            raise RuntimeError(f"mount failed, see {self.log.name}")
        self.daemon = Proc(self.proc.pid)

    def fetched_bytes(self):
        st = json.loads(os.getxattr(self.mnt, "user.wheelhouse.status"))
        return st["fetch"]["bytes"]

    def unmount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        self.proc.wait(timeout=60)
        self.log.close()
        if not self.shared:
            # Its pages would otherwise stay in memory and be written back during later tests
            # (measured: the scaling rows 1.9x slower after the sequential test's 3 x 256 MiB).
            shutil.rmtree(self.cache, ignore_errors=True)


def drop_page_cache(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def read_all(path, chunk=MIB):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                return n
            n += len(b)


def first_byte(path):
    with open(path, "rb", buffering=0) as f:
        return f.read(1)


def walk_count(root):
    n = 0
    for _, _, files in os.walk(root):
        n += len(files)
    return n


def curl_first_byte(url):
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-r", "0-0", "-w", "%{time_starttransfer}",
                        url], capture_output=True, text=True, check=True)
    return float(r.stdout)


def run_with_cpu(cmd):
    """Runs cmd; returns (wall seconds, CPU seconds of it and its children)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode})")
    return wall, ru.ru_utime + ru.ru_stime


def split_among(paths, n):
    """The paths dealt round-robin to n readers."""
    return [paths[i::n] for i in range(n)]


def pip_install(wheels, target):
    shutil.rmtree(target, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore",
                        "--no-index", "--no-deps", "--force-reinstall", "--target", target,
                        "--python-version", "3.12", "--only-binary", ":all:"] + wheels,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Bench:
    def __init__(self, args, work):
        self.a = args
        self.work = work
        self.rows = []  # (test, value, reference, ratio text, cpu s, peak anon MiB)

    def row(self, test, ours, ref, unit, cpu=None, anon=None, lower_is_better=True):
        ratio = ours / ref if ref else float("nan")
        self.rows.append((test, f"{ours:.4g} {unit}", f"{ref:.4g} {unit}" if ref else "—",
                          f"{ratio:.2f}×" if ref else "—",
                          "" if cpu is None else f"{cpu:.2f}", "" if anon is None else f"{anon:.0f}"))
        print(f"{test}: {ours:.4g} {unit} vs {ref:.4g} {unit} ({ratio:.2f}x)", flush=True)

    def run(self, rate):
        label = f" [{rate}/conn]" if rate else " [unthrottled]"
        data = os.path.join(self.a.data or self.work, "data")
        if not os.path.isdir(data):
            gen_wheelhouse.generate(data, quiet=True)
            # The shared harness's size for a cold sequential read, incompressible.
            big = os.path.join(data, "tree", "bench", SEQ_FILE)
            os.makedirs(os.path.dirname(big), exist_ok=True)
            rng = random.Random(256)
            with open(big, "wb") as f:
                for _ in range(SEQ_MIB):
                    f.write(rng.randbytes(MIB))
        tree = os.path.join(data, "tree")
        with open(os.path.join(data, "manifest.json")) as f:
            man = json.load(f)
        nginx = Nginx(tree, self.work, rate)
        hub = FakeHub({REPO: tree}, os.path.join(self.work, "hub"),
                      extra_args=["--lfs", "all", "--redirect-base", nginx.url])
        try:
            for name, fn in (("first_byte", lambda lb: self.first_byte(hub, man, nginx, lb)),
                             ("random", lambda lb: self.random_reads(hub, man, tree, lb)),
                             ("parallel", lambda lb: self.parallel_readers(hub, man, tree, nginx, lb)),
                             ("pip", lambda lb: self.pip(hub, tree, lb)),
                             ("sequential", lambda lb: self.sequential(hub, tree, nginx, lb)),
                             ("metrics", lambda lb: self.metrics(hub, tree, lb)),
                             ("scaling", lambda lb: self.scaling(hub, man, nginx, lb))):
                if not self.a.only or name in self.a.only.split(","):
                    # --bins: each build in turn, test by test, each with its references
                    for build, path in BINS:
                        use_build(path)
                        fn(label + (f" [{build}]" if build else ""))
        finally:
            hub.stop()
            nginx.stop()

    def first_byte(self, hub, man, nginx, label):
        rel = man["big_file"]
        ours, ref = [], []
        for rep in range(self.a.reps):
            m = Mount(hub.hub, self.work, f"ttfb{rep}", ["nocurrent"])
            try:
                ours.append(timed(lambda: first_byte(os.path.join(m.mnt, rel)))[0])
            finally:
                m.unmount()
            ref.append(curl_first_byte(nginx.url + rel.replace("+", "%2B")))
        self.row("time to first byte, cold wheel (vs curl -r 0-0)" + label, median(ours) * 1000,
                 median(ref) * 1000, "ms")

    def random_reads(self, hub, man, tree, label):
        import random
        rel = man["big_file"]
        size = man["files"][rel]["size"]
        rng = random.Random(200)
        offsets = [rng.randrange(0, size - 4096) for _ in range(200)]

        def reads(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                for off in offsets:
                    os.pread(fd, 4096, off)
            finally:
                os.close(fd)
        ours, fetched = [], []
        for rep in range(self.a.reps):
            m = Mount(hub.hub, self.work, f"rand{rep}", ["nocurrent"])
            try:
                ours.append(timed(lambda: reads(os.path.join(m.mnt, rel)))[0])
                try:
                    st = json.loads(os.getxattr(m.mnt, "user.wheelhouse.status"))
                    fetched.append(st["fetch"]["bytes"] / MIB)
                except ValueError:  # (older builds: no status JSON with nocurrent)
                    fetched.append(float("nan"))
            finally:
                m.unmount()
        local = os.path.join(tree, rel)
        ref = []
        for _ in range(self.a.reps):
            drop_page_cache(local)
            ref.append(timed(lambda: reads(local))[0])
        self.row(f"200 random 4 KiB reads of a {size / MIB:.0f} MiB wheel, cold, "
                 f"{median(fetched):.1f} MiB fetched (vs local file, page cache dropped)" + label,
                 median(ours), median(ref), "s")

    def parallel_readers(self, hub, man, tree, nginx, label):
        wheels = sorted((p for p in man["files"] if p.endswith(".whl")),
                        key=lambda p: -man["files"][p]["size"])[:8]
        total = sum(man["files"][p]["size"] for p in wheels)

        def read8(root):
            ts = [threading.Thread(target=read_all, args=(os.path.join(root, p),)) for p in wheels]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        def curl8():
            procs = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", nginx.url + p.replace("+", "%2B")])
                     for p in wheels]
            for pr in procs:
                pr.wait()
        ours, cpus, anons = [], [], []
        for rep in range(self.a.reps):
            m = Mount(hub.hub, self.work, f"par{rep}", ["nocurrent"])
            try:
                (secs, _), cpu, anon = m.daemon.measure(lambda: timed(lambda: read8(m.mnt)))
                ours.append(total / secs / MIB)
                cpus.append(cpu)
                anons.append(anon)
            finally:
                m.unmount()
        ref = median([total / timed(curl8)[0] / MIB for _ in range(self.a.reps)])
        self.row(f"8 parallel readers of 8 wheels ({total / MIB:.0f} MiB), cold, MiB/s "
                 "(vs 8 curl downloads)" + label, median(ours), ref, "MiB/s", median(cpus), max(anons))

    def pip(self, hub, tree, label):
        # The biggest wheels of the test wheelhouse are cp312: match and install those (pip
        # installs a cp312 wheel into a --target for --python-version 3.12 on any Python).
        opts = ["arch=sm89", "torch=2.9", "cuda=12.8", "python_tag=cp312"]
        m = Mount(hub.hub, self.work, "pip", opts)
        try:
            pkgs = ["flash_attn", "natten"]
            wheels = [w for p in pkgs for w in glob.glob(os.path.join(m.mnt, "current", p, "*.whl"))]
            local = [os.path.join(tree, os.getxattr(w, "user.wheelhouse.source").decode()) for w in wheels]
            size = sum(os.path.getsize(w) for w in local)
            target = os.path.join(self.work, "site")
            (cold, _), cpu, anon = m.daemon.measure(lambda: timed(lambda: pip_install(wheels, target)))
            warm = median([timed(lambda: pip_install(wheels, target))[0] for _ in range(self.a.reps)])
            ref = median([timed(lambda: pip_install(local, target))[0] for _ in range(self.a.reps)])
            self.row(f"pip install {' '.join(pkgs)} ({size / MIB:.0f} MiB) cold (vs local folder)" + label,
                     cold, ref, "s", cpu, anon)
            self.row(f"pip install {' '.join(pkgs)} warm (vs local folder)" + label, warm, ref, "s")
        finally:
            m.unmount()

    def sequential(self, hub, tree, nginx, label):
        rel = "bench/" + SEQ_FILE
        size = os.path.getsize(os.path.join(tree, rel))
        url = nginx.url + rel
        ours, cpus = [], []
        for rep in range(self.a.reps):
            m = Mount(hub.hub, self.work, f"seq{rep}", ["nocurrent"])
            try:
                path = os.path.join(m.mnt, rel)
                os.stat(path)
                (secs, _), cpu, _ = m.daemon.measure(lambda: timed(lambda: read_all(path)))
                ours.append(secs)
                cpus.append(cpu)
            finally:
                m.unmount()
        peers = {
            "curl": ["curl", "-sf", "-o", "/dev/null", url],
            "aria2c -x16": ["aria2c", "-q", "-x16", "-s16", "-k1M", "--file-allocation=none",
                            "--allow-overwrite=true", "-d", self.work, "-o", "aria2c.out", url],
        }
        ref = {}
        for name, cmd in peers.items():
            runs = [run_with_cpu(cmd) for _ in range(self.a.reps)]
            ref[name] = (median([w for w, _ in runs]), median([c for _, c in runs]))
        leaked = os.path.join(self.work, "aria2c.out")
        if os.path.exists(leaked):
            os.remove(leaked)
        gib = size / (1 << 30)
        mibs = size / MIB / median(ours)
        for name, (wall, cpu) in ref.items():
            self.row(f"cold sequential read {size // MIB} MiB, MiB/s (vs {name})" + label, mibs,
                     size / MIB / wall, "MiB/s", median(cpus))
        for name, (wall, cpu) in ref.items():
            self.row(f"CPU seconds per GiB, cold sequential, daemon (vs {name}'s own)" + label,
                     median(cpus) / gib, cpu / gib, "s/GiB")

    def metrics(self, hub, tree, label):
        """Cold sequential with metrics= (scraped every second) against without, alternated in
        one run: what the metrics cost."""
        rel = "bench/" + SEQ_FILE
        size = os.path.getsize(os.path.join(tree, rel))
        runs = {False: [], True: []}
        cpus = {False: [], True: []}
        for rep in range(self.a.reps):
            for on in (False, True):
                m = Mount(hub.hub, self.work, f"metrics{int(on)}-{rep}",
                          ["nocurrent"] + (["metrics=127.0.0.1:0"] if on else []))
                stop = threading.Event()
                scraper = None
                try:
                    if on:
                        url = json.loads(os.getxattr(m.mnt, "user.wheelhouse.status"))["metrics"]

                        def scrape():
                            import urllib.request
                            while not stop.wait(1.0):
                                with urllib.request.urlopen(url, timeout=5) as r:
                                    r.read()

                        scraper = threading.Thread(target=scrape)
                        scraper.start()
                    path = os.path.join(m.mnt, rel)
                    os.stat(path)
                    (secs, _), cpu, _ = m.daemon.measure(lambda: timed(lambda: read_all(path)))
                    runs[on].append(secs)
                    cpus[on].append(cpu)
                finally:
                    stop.set()
                    if scraper is not None:
                        scraper.join()
                    m.unmount()
        self.row(f"cold sequential {size // MIB} MiB with metrics= scraped every 1 s, MiB/s "
                 "(vs without)" + label, size / MIB / median(runs[True]),
                 size / MIB / median(runs[False]), "MiB/s", median(cpus[True]))
        gib = size / (1 << 30)
        self.row("CPU seconds per GiB, cold sequential, with metrics= (vs without)" + label,
                 median(cpus[True]) / gib, median(cpus[False]) / gib, "s/GiB")

    def scaling(self, hub, man, nginx, label):
        wheels = sorted((p for p in man["files"] if p.endswith(".whl")),
                        key=lambda p: -man["files"][p]["size"])[:8]
        total = sum(man["files"][p]["size"] for p in wheels)
        gib = total / (1 << 30)

        def readers(roots_and_paths):
            def one(pairs):
                for root, p in pairs:
                    read_all(os.path.join(root, p))
            ts = [threading.Thread(target=one, args=(pairs,)) for pairs in roots_and_paths]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        base = None
        for n in (1, 2, 4, 8):
            rates, cpus = [], []
            for rep in range(self.a.reps):
                m = Mount(hub.hub, self.work, f"scale{n}-{rep}", ["nocurrent"])
                try:
                    work = [[(m.mnt, p) for p in share] for share in split_among(wheels, n)]
                    (secs, _), cpu, _ = m.daemon.measure(lambda: timed(lambda: readers(work)))
                    rates.append(total / secs / MIB)
                    cpus.append(cpu)
                finally:
                    m.unmount()
            rate = median(rates)
            base = base or rate
            self.row(f"{n} parallel reader(s) of 8 wheels ({total / MIB:.0f} MiB), cold, MiB/s "
                     "(vs 1 reader)" + label, rate, base, "MiB/s", median(cpus))
            self.rows.append((f"  daemon CPU s/GiB, {n} reader(s)" + label,
                              f"{median(cpus) / gib:.2f} s/GiB", "—", "—", "", ""))
        # Daemons on one cache: each reads all 8 wheels, all at once; the cache's download
        # claims make one of them fetch each wheel while the others wait for its blocks.
        for daemons in (1, 8):
            walls, fetched = [], []
            for rep in range(self.a.reps):
                shared = tempfile.mkdtemp(prefix=f"shared{daemons}-", dir=self.work)  # cold
                ms = [Mount(hub.hub, self.work, f"d{daemons}-{rep}-{i}", ["nocurrent"], cache=shared)
                      for i in range(daemons)]
                try:
                    work = [[(m.mnt, p) for p in wheels] for m in ms]
                    walls.append(timed(lambda: readers(work))[0])
                    fetched.append(sum(m.fetched_bytes() for m in ms))
                finally:
                    for m in ms:
                        m.unmount()
                    shutil.rmtree(shared, ignore_errors=True)
            self.row(f"{daemons} daemon(s) on one cache, each reading the 8 wheels, cold: "
                     f"CDN bytes / wheel bytes (vs 1 = each byte once)" + label,
                     median(fetched) / total, 1.0, "×")
            self.rows.append((f"  wall time, {daemons} daemon(s) on one cache" + label,
                              f"{median(walls):.2f} s", "—", "—", "", ""))
            print(f"{daemons} daemons: {median(walls):.2f} s", flush=True)

    def listings(self, many):
        data = os.path.join(self.a.data or self.work, f"many{many}")
        gen_wheelhouse.generate(data, small=True, many=many, quiet=True)
        tree = os.path.join(data, "tree")
        entries = sum(len(d) + len(f) for _, d, f in os.walk(tree))
        hub = FakeHub({REPO: tree}, os.path.join(self.work, f"hub-many{many}"), extra_args=["--lfs", "all"])
        try:
            for build, path in BINS:
                use_build(path)
                self.listings_of(hub, tree, entries, many, f" [{build}]" if build else "")
        finally:
            hub.stop()

    def listings_of(self, hub, tree, entries, many, label):
        for tool in ("ls -R", "find"):
            cmd = ["ls", "-R"] if tool == "ls -R" else ["find"]
            cold, warm, cpus, rss = [], [], [], []
            for rep in range(self.a.reps):
                m = Mount(hub.hub, self.work, f"ls{many}-{rep}", ["nocurrent"])
                try:
                    before = m.daemon.anon_kib()
                    run = lambda: subprocess.run(cmd + [m.mnt], stdout=subprocess.DEVNULL, check=True)  # noqa: E731
                    (secs, _), cpu, _ = m.daemon.measure(lambda: timed(run))
                    cold.append(secs)
                    cpus.append(cpu)
                    rss.append((m.daemon.anon_kib() - before) * 1024 / entries)
                    warm.append(timed(run)[0])
                finally:
                    m.unmount()
            local = lambda: subprocess.run(cmd + [tree], stdout=subprocess.DEVNULL, check=True)  # noqa: E731
            local_warm = median([timed(local)[0] for _ in range(self.a.reps)])
            self.row(f"`{tool}` +{many} entries ({entries} in all), cold (vs local warm)" + label,
                     median(cold), local_warm, "s", median(cpus))
            self.row(f"`{tool}` +{many} entries, warm (vs local warm)" + label, median(warm),
                     local_warm, "s")
            self.rows.append((f"daemon anon RSS per entry after `{tool}` +{many}" + label,
                              f"{median(rss):.0f} B", "—", "—", "", ""))
            print(f"RSS per entry: {median(rss):.0f} B", flush=True)

    def markdown(self):
        out = ["| test | wheelhouse-fs | reference | ratio | daemon CPU s | peak anon MiB |",
               "|---|---|---|---|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--rate", default="", help="also run in WAN mode with this per-connection cap, e.g. 50m")
    p.add_argument("--many", default="10000,100000", help="extra tiny entries for the listing tests")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default="")
    p.add_argument("--skip-listings", action="store_true")
    p.add_argument("--mount-options", default="", help="extra options for every mount, e.g. streaming")
    p.add_argument("--bins", default="",
                   help="LABEL=PATH,... : every test for each build in turn, in this one run "
                        "(e.g. before=/old/wheelhousefs,after=build/fs/wheelhousefs)")
    p.add_argument("--data", default="",
                   help="keep the generated wheelhouses in this folder and reuse them next time")
    p.add_argument("--only", default="",
                   help="run only these: first_byte,random,parallel,pip,sequential,metrics,scaling")
    a = p.parse_args()
    EXTRA_OPTIONS.extend(o for o in a.mount_options.split(",") if o)
    if a.bins:
        BINS[:] = [tuple(b.split("=", 1)) for b in a.bins.split(",") if b]
        for build, path in BINS:
            if not os.access(path, os.X_OK):
                p.error(f"--bins: {build}={path} is not an executable")
    if a.data:
        os.makedirs(a.data, exist_ok=True)
        os.chmod(a.data, 0o755)  # nginx workers (nobody) read the tree under it
    work = tempfile.mkdtemp(prefix="whfs-bench-")
    os.chmod(work, 0o755)  # nginx workers (nobody) read the tree under it
    b = Bench(a, work)
    try:
        b.run("")
        if a.rate:
            b.run(a.rate)
        if not a.skip_listings:
            for many in [int(x) for x in a.many.split(",") if x]:
                b.listings(many)
    finally:
        for m in glob.glob(os.path.join(work, "*")):
            if is_mounted(m):
                subprocess.run(["fusermount3", "-u", "-z", m], check=False)
        shutil.rmtree(work, ignore_errors=True)
    md = b.markdown()
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
