#!/usr/bin/env python3
"""Mounted tests of what a person waiting on the mount can see: a log written as
things happen, `wheelhouse status` naming the transfer under way, prefetch's progress moving
by bytes on a slow CDN (through a pseudo-terminal), and Prometheus metrics scraped by a real
Prometheus server and checked by promtool."""
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import mounttest
from mounttest import MountedTestCase, sha256_file, wait_for

try:
    import pexpect
except ImportError:  # tools/dev/setup.sh --tests installs python3-pexpect
    pexpect = None

CLI = os.path.join(mounttest.BUILD_DIR, "tools", "wheelhouse")


def need(tool):
    """A tool tools/dev/setup.sh --tests installs: its absence is a setup error, not a skip."""
    path = shutil.which(tool)
    if path is None:
        raise AssertionError(f"{tool} is not installed (tools/dev/setup.sh --tests installs it)")
    return path


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.headers.get("Content-Type", ""), r.read().decode()


def samples(text):
    """{'name{labels}': value} of an exposition text."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def served_bytes(log, server):
    return sum(e.get("bytes", 0) for e in log if e.get("server") == server)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Metrics(MountedTestCase):
    """-o metrics= and -o metrics_textfile=: the Prometheus text format, right figures."""

    profile = "small"

    def cold_read_some(self, m):
        files = sorted(p for p in self.manifest["files"] if p.startswith("flash_attn/"))[:4]
        for rel in files:
            self.assertEqual(sha256_file(m.path(rel)), self.manifest["files"][rel]["sha256"], rel)
        return files

    def test_promtool_and_the_bytes_the_emulator_served(self):
        need("promtool")
        textfile = os.path.join(self.scratch("textfile"), "wheelhouse.prom")
        m = self.mount(options=["metrics=127.0.0.1:0", f"metrics_textfile={textfile}"])
        url = m.status()["metrics"]
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/metrics$")
        self.assertNotIn(":0/", url)
        self.hub.clear_log()
        before = samples(scrape(url)[1])
        self.cold_read_some(m)
        ctype, text = scrape(url)
        self.assertIn("text/plain", ctype)
        check = subprocess.run([need("promtool"), "check", "metrics"], input=text, text=True,
                               capture_output=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        after = samples(text)
        log = self.hub.log()
        for server in ("hub", "cdn"):
            key = f'wheelhouse_http_received_bytes_total{{server="{server}"}}'
            self.assertEqual(after[key] - before[key], served_bytes(log, server), server)
            req = f'wheelhouse_http_requests_total{{server="{server}"}}'
            self.assertEqual(after[req] - before[req],
                             sum(1 for e in log if e.get("server") == server), server)
        self.assertGreater(served_bytes(log, "cdn"), 0)
        reads = {k: v for k, v in after.items() if k.startswith("wheelhouse_reads_total")}
        self.assertGreater(reads['wheelhouse_reads_total{result="miss"}'], 0)
        self.assertEqual(after["wheelhouse_read_duration_seconds_count"], sum(reads.values()))
        self.assertGreater(after["wheelhouse_download_duration_seconds_count"], 0)
        self.assertGreater(after["process_resident_memory_bytes"], 1 << 20)
        self.assertGreater(after["process_threads"], 1)
        self.assertEqual(after["wheelhouse_cache_cap_bytes"], 20 << 30)
        self.assertEqual(after["wheelhouse_transfers_in_flight"], 0)
        # Files downloaded here are verified by the hash that ran as their blocks arrived: none
        # was read from the cache a second time to be hashed.
        self.assertEqual(after["wheelhouse_cache_second_hash_passes_total"], 0)
        # The textfile: the same families, readable by node_exporter, checked by promtool,
        # rewritten every few seconds, gone at unmount.
        self.assertTrue(wait_for(lambda: os.path.exists(textfile), timeout=10))
        self.assertEqual(os.stat(textfile).st_mode & 0o777, 0o644)
        mtime = os.stat(textfile).st_mtime_ns
        self.assertTrue(wait_for(lambda: os.stat(textfile).st_mtime_ns != mtime, timeout=15))
        with open(textfile, encoding="utf-8") as f:
            text = f.read()
        check = subprocess.run([need("promtool"), "check", "metrics"], input=text, text=True,
                               capture_output=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn("wheelhouse_http_received_bytes_total", text)
        self.assertEqual([n for n in os.listdir(os.path.dirname(textfile))], ["wheelhouse.prom"])
        m.unmount()
        self.assertFalse(os.path.exists(textfile))

    def test_a_real_prometheus_scrapes_it(self):
        prom = need("prometheus")
        m = self.mount(options=["metrics=127.0.0.1:0"])
        target = urllib.parse.urlparse(m.status()["metrics"]).netloc
        self.hub.clear_log()
        self.cold_read_some(m)
        work = self.scratch("prometheus")
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: wheelhouse\n"
                    f"    static_configs:\n      - targets: ['{target}']\n")
        port = free_port()
        with open(os.path.join(work, "prometheus.log"), "wb") as log:
            p = subprocess.Popen([prom, f"--config.file={config}",
                                  f"--storage.tsdb.path={os.path.join(work, 'data')}",
                                  f"--web.listen-address=127.0.0.1:{port}"],
                                 stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: (p.terminate(), p.wait(timeout=30)))
        api = f"http://127.0.0.1:{port}/api/v1/query?query="

        def query(expr):
            try:
                with urllib.request.urlopen(api + urllib.parse.quote(expr), timeout=5) as r:
                    res = json.loads(r.read())["data"]["result"]
            except OSError:
                return None
            return res

        cdn = served_bytes(self.hub.log(), "cdn")
        self.assertGreater(cdn, 0)
        expr = 'wheelhouse_http_received_bytes_total{server="cdn",job="wheelhouse"}'
        got = []

        def scraped():
            res = query(expr)
            if res:
                got[:] = [float(res[0]["value"][1])]
                return True
            return False

        self.assertTrue(wait_for(scraped, timeout=60), "Prometheus never scraped the mount")
        # Every byte the mount counted from the CDN is one the emulator served (the scrape may
        # have come before the last reads' bytes: wait for the value to catch up).
        self.assertTrue(wait_for(lambda: scraped() and got[0] >= cdn, timeout=30), got)
        self.assertEqual(got[0], cdn)
        up = query('up{job="wheelhouse"}')
        self.assertEqual(up[0]["value"][1], "1")
        self.assertTrue(query("wheelhouse_read_duration_seconds_bucket"))
        self.assertTrue(query('wheelhouse_info{repo="DoctorPopi/python_wheelhouse"}'))

    def test_bad_metrics_options_fail_the_mount_with_one_line(self):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        self.addCleanup(taken.close)
        port = taken.getsockname()[1]
        world = self.scratch("world")  # a folder every user can write in, not sticky
        os.chmod(world, 0o777)
        cases = [("metrics=127.0.0.1:99999", "port must be a number from 0 to 65535"),
                 (f"metrics_textfile={world}/w.prom",
                  f"folder {world} is not safe for a file of this daemon"),
                 ("metrics=::1:9101", "in brackets"),
                 ("metrics_textfile=relative.prom", "absolute path"),
                 ("metrics_textfile=/tmp/x.txt", "must end in .prom"),
                 (f"metrics=127.0.0.1:{port}", "cannot listen there")]
        for opt, words in cases:
            mnt = self.scratch("bad")
            r = subprocess.run([mounttest.BINARY, "-f", "-o",
                                f"endpoint={self.hub.hub},cache_dir={mnt}/cache,{opt}",
                                mounttest.REPO, mnt], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0, opt)
            self.assertIn(words, r.stderr, opt)
            self.assertFalse(mounttest.is_mounted(mnt), opt)

    def test_the_default_listens_on_loopback_only(self):
        m = self.mount(options=["metrics=0"])
        url = m.status()["metrics"]
        self.assertTrue(url.startswith("http://127.0.0.1:"), url)
        port = int(urllib.parse.urlparse(url).port)
        with open("/proc/net/tcp", encoding="ascii") as f:
            listening = [line.split()[1] for line in f.readlines()[1:] if line.split()[3] == "0A"]
        self.assertIn(f"0100007F:{port:04X}", listening)
        self.assertNotIn(f"00000000:{port:04X}", listening)


class Logs(MountedTestCase):
    """A detached daemon's log_file gets each line as it happens; it is the daemon's own file
    (never reached through a planted link, created private, rotated private)."""

    profile = "small"

    def test_mount_and_sighup_lines_arrive_within_a_second(self):
        log = os.path.join(self.scratch("logs"), "whfs.log")
        m = self.mount(daemon=True, options=[f"log_file={log}"])
        self.assertEqual(m.returncode, 0, m.startup_stderr)
        returned = time.monotonic()

        def has(pattern):
            try:
                with open(log, encoding="utf-8") as f:
                    return re.search(pattern, f.read(), re.M) is not None
            except FileNotFoundError:
                return False

        self.assertTrue(wait_for(lambda: has(r"info .* mounted \S+@main \(commit [0-9a-f]{40}"),
                                 timeout=5))
        self.assertLess(time.monotonic() - returned, 1.0)
        os.kill(m.pid, signal.SIGHUP)
        sent = time.monotonic()
        self.assertTrue(wait_for(lambda: has(r"SIGHUP: looking for a new commit"), timeout=5))
        self.assertLess(time.monotonic() - sent, 1.0)
        self.assertTrue(wait_for(lambda: has(r"refresh: \S+@main is still at"), timeout=10))
        # The status says when that refresh was, and what it found.
        st = m.status()
        self.assertIn("still at", st["last_refresh"]["result"])
        self.assertLessEqual(abs(st["last_refresh"]["at"] - time.time()), 30)


    def second_user(self):
        """A user of an unlikely name, removed at the end: (name, uid, gid)."""
        if os.geteuid() != 0 or not shutil.which("useradd"):
            self.skipTest("needs root and useradd (a second user is made)")
        name = f"whfs-t-{secrets.token_hex(4)}"
        subprocess.run(["useradd", "-M", "-N", "-g", "nogroup", "-s", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        self.addCleanup(subprocess.run, ["userdel", name], capture_output=True)
        pw = pwd.getpwnam(name)
        return name, pw.pw_uid, pw.pw_gid

    def test_a_log_file_another_user_could_plant_is_refused(self):
        # wh.log -> a root-only file: in a folder of another user, and in a sticky folder (where
        # the link is theirs). The mount is refused (exit 2, one line) and the file unchanged.
        _, uid, gid = self.second_user()
        secret = os.path.join(self.scratch("root"), "secret")
        with open(secret, "w", encoding="utf-8") as f:
            f.write("root only\n")
        os.chmod(secret, 0o600)
        before = os.stat(secret)
        theirs = self.scratch("theirs")
        os.chown(theirs, uid, gid)
        sticky = self.scratch("sticky")
        os.chmod(sticky, 0o1777)
        cases = [(theirs, f"folder {theirs} is not safe for a file of this daemon: it belongs to "
                          f"uid {uid}"),
                 (sticky, "wh.log: it is a symbolic link (not followed)")]
        for folder, words in cases:
            log = os.path.join(folder, "wh.log")
            os.symlink(secret, log)
            os.lchown(log, uid, gid)
            m = self.mount(name=f"m-{os.path.basename(folder)}", daemon=True,
                           options=[f"log_file={log}"])
            self.assertEqual(m.returncode, 2, m.startup_stderr)
            self.assertIn(f"log_file={log}: ", m.startup_stderr)
            self.assertIn(words, m.startup_stderr)
            self.assertEqual(m.startup_stderr.count("\n"), 1, m.startup_stderr)
            self.assertFalse(mounttest.is_mounted(m.mountpoint))
            after = os.stat(secret)
            self.assertEqual((after.st_size, after.st_mtime_ns, after.st_mode & 0o7777),
                             (before.st_size, before.st_mtime_ns, 0o600))
        with open(secret, encoding="utf-8") as f:
            self.assertEqual(f.read(), "root only\n")

    def test_a_rotated_log_is_private(self):
        log = os.path.join(self.scratch("rotated"), "whfs.log")
        old = os.path.join(self.scratch("rotated"), "whfs.1.log")
        m = self.mount(daemon=True, options=[f"log_file={log}"],
                       env={"WHEELHOUSE_LOG_SIZE": "4K"})
        self.assertEqual(m.returncode, 0, m.startup_stderr)

        def refreshes():
            n = 0
            for p in (log, old):
                try:
                    with open(p, encoding="utf-8") as f:
                        n += f.read().count("SIGHUP: looking for a new commit")
                except FileNotFoundError:
                    pass
            return n

        # Each SIGHUP logs a few lines: ask until the log passed 4 KiB and was rotated.
        for _ in range(100):
            if os.path.exists(old):
                break
            n = refreshes()
            m.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: refreshes() > n, timeout=10))
        self.assertTrue(os.path.exists(old), "not rotated at 4 KiB")
        self.assertTrue(wait_for(lambda: os.path.exists(log), timeout=5))
        for p in (log, old):
            st = os.lstat(p)
            self.assertTrue(stat.S_ISREG(st.st_mode), p)
            self.assertEqual(st.st_mode & 0o777, 0o600, p)
            self.assertEqual(st.st_uid, os.geteuid(), p)
        self.assertLessEqual(os.path.getsize(old), 4096)
        # The new log gets the lines from now on.
        n = refreshes()
        m.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: refreshes() > n, timeout=10))


class LiveStatus(MountedTestCase):
    """`wheelhouse status` during a throttled download, and counts that add up."""

    profile = "small"

    def setUp(self):
        self.big = self.manifest["big_file"]
        self.size = self.manifest["files"][self.big]["size"]
        # One connection at 512 KB/s: the 4 MiB wheel takes about 8 s.
        self.hub.config(rate="512k")
        self.addCleanup(lambda: self.hub.config(rate=""))

    def read_in_background(self, m, rel):
        result = {}

        def read():
            result["sha256"] = sha256_file(m.path(rel))

        t = threading.Thread(target=read)
        t.start()
        self.addCleanup(t.join)
        return t, result

    def test_status_names_the_transfer_with_its_progress(self):
        m = self.mount(options=["connections=1"])
        t, result = self.read_in_background(m, self.big)
        seen = []

        def in_flight():
            js = json.loads(subprocess.run([CLI, "status", "--json", m.mountpoint],
                                           capture_output=True, text=True, timeout=30).stdout)
            tr = [x for x in js["transfers"] if x["path"] == self.big]
            if tr and 0 < tr[0]["received"] < self.size:
                seen.append(tr[0])
                return True
            return False

        self.assertTrue(wait_for(in_flight, timeout=20, interval=0.2))
        x = seen[-1]
        self.assertEqual(x["size"], self.size)
        self.assertGreaterEqual(x["connections"], 1)
        self.assertGreaterEqual(x["readers"], 1)  # the kernel's reads of it (readahead: several)
        self.assertGreater(x["rate"], 100_000)
        self.assertLess(x["rate"], 2_000_000)
        text = subprocess.run([CLI, "status", m.mountpoint], capture_output=True, text=True,
                              timeout=30).stdout
        line = next((ln for ln in text.splitlines() if self.big in ln), None)
        self.assertIsNotNone(line, text)
        self.assertRegex(line, r"\d.* / 4\.0 MiB \d+\.\d%  [\d.]+ [KM]iB/s  1 connection, "
                               r"\d+ readers? waiting")
        self.assertRegex(text, r"mount .* up \d+s")
        t.join(timeout=60)
        self.assertEqual(result.get("sha256"), self.manifest["files"][self.big]["sha256"])
        # The counts add up, and a hit ratio counts only reads that reached the daemon.
        for _ in range(3):
            with open(m.path(self.big), "rb", buffering=0) as f:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                f.read()
        st = m.status()
        r = st["reads"]
        self.assertEqual(r["hits"] + r["misses"] + r["errors"], r["reads"])
        self.assertGreaterEqual(r["misses"], 1)
        f = st["fetch"]
        self.assertGreaterEqual(f["demand"] + f["prefetch"], 1)
        self.assertEqual(st["hub"]["cdn_bytes"], served_bytes(self.hub.log(), "cdn"))

    def test_watch_redraws_and_problems_are_listed_once(self):
        # (A message repeated is one entry with a count: common_test's LogTest.)
        victims = sorted(p for p in self.manifest["files"] if p.startswith("cumesh/"))[:2]
        for v in victims:
            self.hub.fault(kind="status", status=500, path=re.escape(v))
        self.addCleanup(self.hub.clear_faults)
        m = self.mount(options=["read_timeout=2s"])
        for v in victims + victims:
            with self.assertRaises(OSError):
                with open(m.path(v), "rb") as f:
                    f.read()
        problems = m.status()["recent_problems"]
        messages = [p["message"] for p in problems]
        self.assertEqual(len(messages), len(set(messages)), messages)
        for v in victims:
            self.assertTrue(any(v in p["message"] and "HTTP 500" in p["message"]
                                for p in problems), problems)
        text = subprocess.run([CLI, "status", m.mountpoint], capture_output=True, text=True,
                              timeout=30).stdout
        self.assertRegex(text, r"\n  \d{4}-\d\d-\d\dT[\d:]+\S* error: .*HTTP 500")
        # --watch --json: a line a second until interrupted.
        p = subprocess.Popen([CLI, "status", "--watch", "--json", m.mountpoint],
                             stdout=subprocess.PIPE, text=True)
        lines = []
        start = time.monotonic()
        while len(lines) < 3:
            lines.append(json.loads(p.stdout.readline()))
        took = time.monotonic() - start
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=10), 0)
        self.assertGreater(took, 1.5)
        self.assertLess(took, 6)
        self.assertLess(lines[0]["now"], lines[2]["now"] + 1)


class PrefetchProgress(MountedTestCase):
    """prefetch on a terminal redraws by bytes at least once a second on a slow CDN."""

    profile = "small"

    def test_progress_moves_every_second(self):
        if pexpect is None:
            raise AssertionError("python3-pexpect is not installed (tools/dev/setup.sh --tests)")
        big = self.manifest["big_file"]
        size = self.manifest["files"][big]["size"]
        self.hub.config(rate="512k")
        self.addCleanup(lambda: self.hub.config(rate=""))
        m = self.mount(options=["connections=1"])
        child = pexpect.spawn(CLI, ["prefetch", "--mount", m.mountpoint, big], encoding="utf-8",
                              timeout=60, dimensions=(24, 200))
        frames = []  # (time, bytes done)
        unit = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}
        while True:
            i = child.expect([r"\r\x1b\[K\[[#.]+\] +\d+% ([\d.]+) (B|KiB|MiB) / ",
                              r"1 file, .* in [\d.]+ s", pexpect.EOF])
            if i != 0:
                break
            frames.append((time.monotonic(), float(child.match.group(1)) * unit[child.match.group(2)]))
        child.expect(pexpect.EOF)
        child.close()
        self.assertEqual(child.exitstatus, 0)
        gaps = [t1 - t0 for (t0, _), (t1, _) in zip(frames, frames[1:])]
        print(f"prefetch: {len(frames)} frames over {frames[-1][0] - frames[0][0]:.1f} s, "
              f"largest gap {max(gaps):.2f} s", file=sys.stderr)
        self.assertGreater(len(frames), 8, frames)
        moving = [(t, b) for t, b in frames if 0 < b < size]
        self.assertGreater(len(moving), 4, frames)
        # Redrawn at least once a second, and the bytes moved in every second of the download.
        for (t0, b0), (t1, b1) in zip(frames, frames[1:]):
            self.assertLess(t1 - t0, 1.0)
        start, end = moving[0][0], moving[-1][0]
        t = start
        while t + 1.0 <= end:
            window = [b for tt, b in moving if t <= tt <= t + 1.0]
            self.assertGreater(max(window), min(window), (t - start, frames))
            t += 1.0


if __name__ == "__main__":
    mounttest.main()
