#!/usr/bin/env python3
"""wheelhouse-csi as a DaemonSet runs it, in a rootful podman container of the image that
tools/kubernetes/build-image.sh makes from this build's .deb (on the podman_images base, with
no network), with daemonset.yaml's arguments: the host's PID namespace and network (the Hub
emulator is on loopback), privileged, the host's cgroup root where daemonset.yaml mounts it, a
folder standing for /var/lib/kubelet and the state folder both rshared (Bidirectional), the
cache. The test drives it over its socket as kubelet does; the "pods" are podman containers
that bind-mount their targets (rslave: a pod's mountPropagation HostToContainer) and read wheels
in a loop, checking each one's sha256.

Rollout: the plugin's container is killed (`podman kill`: its whole cgroup) and removed, and a
new one started from the image, while two pods of two volumes read: they read the right bytes
throughout (no error), the new plugin adopts the daemons (its log says so), a new publish works,
and unpublishing everything (a node drain) leaves no mount, no daemon and no cgroup of ours.

A daemon killed (SIGKILL): the plugin's watchdog starts it again and binds its target again on
top of the dead mount. The plugin's container is paused while the daemon is killed, so that
each pod reads the dead mount first (ENOTCONN); after that, the pod with HostToContainer
propagation reads again, and one without it (a private copy of the target) keeps failing.

Measured (printed at the end): the plugin's restart to ready (from `podman run` to a Probe
that answers), and from the plugin's unpause (its watchdog free to act) to the HostToContainer
pod's first good read.
"""
import json
import os
import signal
import subprocess
import sys
import time

import debian_python

debian_python.need("grpc")
debian_python.need("yaml")
import grpc  # noqa: E402  (Debian's python3-grpcio)
import yaml  # noqa: E402  (Debian's python3-yaml)

import mounttest  # noqa: E402
import podman_images as images  # noqa: E402
from mounttest import REPO, MountedTestCase, sha256_file, wait_for  # noqa: E402
from test_csi import (PLUGIN, Kubelet, cgroup_hierarchies, cgroup_paths,  # noqa: E402
                      cgroups_left, daemon_processes, kubelet_target, load_messages,
                      remove_cgroups, state_daemons)

DAEMONSET = os.path.join(mounttest.SOURCE_DIR, "tools", "kubernetes", "daemonset.yaml")

# A pod's workload: read each wheel again and again and check its sha256; count what fails and
# note when (CLOCK_MONOTONIC: one clock for every container of the host). The state goes to
# /out/NAME.json after each round; /out/NAME.stop ends it.
READER = r'''
import errno, hashlib, json, os, sys, time
name = sys.argv[1]
with open("/in/files.json") as f:
    files = json.load(f)
s = {"rounds": 0, "reads": 0, "errors": 0, "wrong": 0, "kinds": {}, "last_error": None,
     "first_ok_after_error": None, "last_ok": None}
while not os.path.exists(f"/out/{name}.stop"):
    failed = False
    for rel, sha in files:
        t = time.monotonic()
        h = hashlib.sha256()
        try:
            with open("/wheelhouse/" + rel, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError as e:
            failed = True
            s["errors"] += 1
            kind = errno.errorcode.get(e.errno, str(e.errno))
            s["kinds"][kind] = s["kinds"].get(kind, 0) + 1
            s["last_error"] = t
            continue
        if h.hexdigest() != sha:
            s["wrong"] += 1
            continue
        s["reads"] += 1
        s["last_ok"] = t
        if s["last_error"] is not None and s["first_ok_after_error"] is None:
            s["first_ok_after_error"] = t
    s["rounds"] += 1
    with open(f"/out/{name}.tmp", "w") as f:
        json.dump(s, f)
    os.replace(f"/out/{name}.tmp", f"/out/{name}.json")
    if failed:
        time.sleep(0.01)  # a failing round takes no time: the pod's pace, not the test's
'''


def daemonset_args(moved):
    """daemonset.yaml's arguments of the plugin, with its paths moved (`moved`: old -> new)."""
    with open(DAEMONSET, encoding="utf-8") as f:
        (ds,) = [d for d in yaml.safe_load_all(f) if d]
    (plugin,) = [c for c in ds["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "wheelhouse-csi"]
    args = []
    for a in plugin["args"]:
        a = a.replace("$(NODE_NAME)", "node-1")
        for old, new in moved.items():
            a = a.replace("=" + old, "=" + new).replace("unix://" + old, "unix://" + new)
        args.append(a)
    return args


def running(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def memory_limit(parent, key):
    """The memory limit of a daemon's cgroup (v1's memory hierarchy, or the v2 tree)."""
    for h in cgroup_hierarchies():
        for name in ("memory.limit_in_bytes", "memory.max"):
            path = os.path.join(h, parent, key, name)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    return int(f.read())
    return None


def mounts_under(path):
    """The mount points under `path` in this mount namespace, deepest first."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = [line.split()[4] for line in f]
    return sorted((p for p in points if p.startswith(path + os.sep)), key=len, reverse=True)


class Rollout(MountedTestCase):
    profile = "small"
    figures = {}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.prepare()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def prepare(cls):
        name = os.path.basename(cls.tmp)
        cls.prefix = "whfs-rollout-" + name.rsplit("-", 1)[-1].lower()
        cls.plugin_name = cls.prefix + "-plugin"
        cls.containers = {cls.plugin_name}
        cls.cgroup_parent = "whfs-test-" + name
        cls.pb = load_messages(os.path.join(cls.tmp, "gen"))
        cls.csi_dir = os.path.join(cls.tmp, "csi")
        cls.socket = os.path.join(cls.csi_dir, "csi.sock")
        cls.kubelet_dir = os.path.join(cls.tmp, "kubelet")
        cls.state = os.path.join(cls.tmp, "state")
        cls.cache = os.path.join(cls.tmp, "node-cache")
        cls.pod_in = os.path.join(cls.tmp, "pod-in")
        cls.pod_out = os.path.join(cls.tmp, "pod-out")
        cls.logs = os.path.join(cls.tmp, "plugin-logs")
        for d in (cls.csi_dir, cls.kubelet_dir, cls.state, cls.cache, cls.pod_in, cls.pod_out,
                  cls.logs):
            os.makedirs(d)
        # kubelet's folder and the state folder are shared mounts on a node: the plugin's
        # Bidirectional mounts of them send its mounts to the host, and so to the pods and to
        # the next plugin's container.
        for d in (cls.kubelet_dir, cls.state):
            subprocess.run(["mount", "--bind", d, d], check=True)
            subprocess.run(["mount", "--make-shared", d], check=True)
        wheels = sorted((v["size"], p) for p, v in cls.manifest["files"].items()
                        if p.endswith(".whl"))
        chosen = [p for _, p in wheels[-1:] + wheels[:3]]
        with open(os.path.join(cls.pod_in, "files.json"), "w", encoding="utf-8") as f:
            json.dump([[p, cls.manifest["files"][p]["sha256"]] for p in chosen], f)
        with open(os.path.join(cls.pod_in, "reader.py"), "w", encoding="utf-8") as f:
            f.write(READER)
        deb = images.build_deb()
        cls.pod_image = images.base_image(deb)  # python3 is all a reader needs
        cls.plugin_image = images.plugin_image(cls.pod_image, deb)
        cls.kubelet = None
        cls.generation = 0
        # Where the DaemonSet mounts the host's cgroup root, and its memory limit for each daemon.
        args = daemonset_args({"/csi": cls.csi_dir, "/var/lib/wheelhouse-csi": cls.state,
                               "/var/cache/wheelhouse-fs": cls.cache})
        named = dict(a.lstrip("-").split("=", 1) for a in args)
        cls.host_cgroup = named["cgroup-root"]
        size = named["daemon-memory-max"]
        cls.memory_max = int(size[:-1]) << {"K": 10, "M": 20, "G": 30}[size[-1]]
        cls.plugin_args = args + ["--allow-endpoint=" + cls.hub.hub,
                                  "--cgroup-parent=" + cls.cgroup_parent, "--watch-interval=1"]

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "kubelet", None) is not None:
            cls.kubelet.close()
        for c in sorted(getattr(cls, "containers", ())):
            images.podman("rm", "-f", "-t", "0", c, check=False)
        # What a failed test left: every mount under the class's folder (a target may have a
        # dead mount under a live one), then any daemon, then their cgroups.
        for _ in range(8):
            left = mounts_under(cls.tmp)
            if not left:
                break
            for path in left:
                subprocess.run(["umount", "-l", path], check=False, capture_output=True)
        state = getattr(cls, "state", None)
        if state is not None:
            for pid in daemon_processes(state):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_for(lambda: not daemon_processes(state), timeout=10)
        if getattr(cls, "cgroup_parent", None):
            remove_cgroups(cls.cgroup_parent)
        if cls.figures:
            sys.stderr.write("rollout figures: " + json.dumps(cls.figures) + "\n")
        super().tearDownClass()

    # The plugin's container.

    @classmethod
    def start_plugin(cls):
        """A new plugin container; returns the seconds from `podman run` to a Probe that
        answers ready."""
        if os.path.exists(cls.socket):
            os.unlink(cls.socket)  # the killed plugin's: wait for the new one's
        cls.generation += 1
        t0 = time.monotonic()
        images.podman(
            "run", "-d", "--name", cls.plugin_name, "--pull=never", "--privileged",
            "--pid", "host", "--network", "host",
            "-v", f"/sys/fs/cgroup:{cls.host_cgroup}",
            "-v", f"{cls.kubelet_dir}:{cls.kubelet_dir}:rshared",
            "-v", f"{cls.state}:{cls.state}:rshared",
            "-v", f"{cls.cache}:{cls.cache}", "-v", f"{cls.csi_dir}:{cls.csi_dir}",
            cls.plugin_image, *cls.plugin_args)
        if not wait_for(lambda: cls.probe_ready() or not cls.plugin_running(), timeout=60) or \
                not cls.plugin_running():
            raise AssertionError("the plugin's container never answered Probe:\n" + cls.log())
        ready = time.monotonic() - t0
        cls.kubelet = Kubelet(cls.pb, cls.socket)
        return ready

    @classmethod
    def probe_ready(cls):
        if not os.path.exists(cls.socket):
            return False
        k = Kubelet(cls.pb, cls.socket)
        try:
            return k.call("Identity", "Probe", cls.pb.ProbeRequest(), "ProbeResponse").ready.value
        except grpc.RpcError:
            return False
        finally:
            k.close()

    @classmethod
    def plugin_running(cls):
        r = images.podman("inspect", "--format", "{{.State.Running}}", cls.plugin_name,
                          check=False)
        return r.stdout.strip() == "true"

    @classmethod
    def log(cls):
        r = images.podman("logs", cls.plugin_name, check=False)
        return r.stdout + r.stderr

    @classmethod
    def kill_plugin(cls):
        """What a DaemonSet rollout does to the old pod: the runtime kills the container's
        cgroup, every process in it, and removes it."""
        cls.kubelet.close()
        cls.kubelet = None
        images.podman("kill", cls.plugin_name)
        images.podman("wait", cls.plugin_name, check=False)
        with open(os.path.join(cls.logs, f"{cls.generation}.log"), "w", encoding="utf-8") as f:
            f.write(cls.log())
        images.podman("rm", "-f", cls.plugin_name)

    def setUp(self):
        if self.kubelet is None:
            self.start_plugin()

    # kubelet's side.

    def context(self, **more):
        c = {"repo": REPO, "endpoint": self.hub.hub, "csi.storage.k8s.io/ephemeral": "true"}
        c.update(more)
        return c

    def target(self, pod):
        return kubelet_target(self.kubelet_dir, pod)

    def daemons(self):
        return state_daemons(self.state)

    def unpublish_all(self):
        for d in self.daemons().values():
            for target, volume in d["targets"].items():
                self.kubelet.unpublish(volume, target)

    def assert_nothing_left(self):
        self.assertEqual(self.daemons(), {})
        ours = [p for p in mounts_under(self.tmp) if p not in (self.kubelet_dir, self.state)]
        self.assertEqual(ours, [], "mounts left after every target was unpublished")
        self.assertEqual(daemon_processes(self.state), {}, "daemons left")
        self.assertEqual(cgroups_left(self.cgroup_parent), [], "cgroups left")

    # The pods.

    def start_pod(self, name, target, host_to_container=True):
        container = f"{self.prefix}-pod-{name}"
        self.containers.add(container)
        self.addCleanup(images.podman, "rm", "-f", "-t", "0", container, check=False)
        propagation = ",rslave" if host_to_container else ""
        images.podman("run", "-d", "--name", container, "--pull=never", "--network", "none",
                      "-v", f"{target}:/wheelhouse:ro{propagation}",
                      "-v", f"{self.pod_in}:/in:ro", "-v", f"{self.pod_out}:/out",
                      self.pod_image, "python3", "/in/reader.py", name)

    def pod(self, name):
        try:
            with open(os.path.join(self.pod_out, f"{name}.json"), encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return {"rounds": 0}

    def wait_rounds(self, name, rounds):
        self.assertTrue(wait_for(lambda: self.pod(name)["rounds"] >= rounds, timeout=120),
                        f"pod {name} stopped reading: {self.pod(name)}")

    def stop_pod(self, name):
        with open(os.path.join(self.pod_out, f"{name}.stop"), "w", encoding="utf-8"):
            pass
        container = f"{self.prefix}-pod-{name}"
        images.podman("wait", container)
        images.podman("rm", "-f", container)
        return self.pod(name)

    # The tests.

    def test_1_a_rollout_keeps_every_pod_reading(self):
        ta, tb = self.target("pod-a"), self.target("pod-b")
        self.kubelet.publish("vol-a", ta, self.context())
        self.kubelet.publish("vol-b", tb, self.context(options="arch=sm89"))
        daemons = self.daemons()
        self.assertEqual(len(daemons), 2, daemons)
        pids = {key: d["pid"] for key, d in daemons.items()}
        for key, pid in pids.items():
            self.assertEqual(set(cgroup_paths(pid)), {f"/{self.cgroup_parent}/{key}"},
                             "a daemon runs in the plugin container's cgroup")
            self.assertEqual(memory_limit(self.cgroup_parent, key), self.memory_max)
        self.start_pod("a", ta)
        self.start_pod("b", tb)
        self.wait_rounds("a", 2)
        self.wait_rounds("b", 2)

        self.kill_plugin()
        for pid in pids.values():
            self.assertTrue(running(pid), "a daemon died with the plugin's container")
        rounds = {p: self.pod(p)["rounds"] for p in ("a", "b")}
        self.figures["plugin_restart_to_ready_s"] = round(self.start_plugin(), 2)
        log = self.log()
        for key, pid in pids.items():
            self.assertIn(f"adopted daemon {key} (pid {pid}", log)
        self.assertEqual({k: d["pid"] for k, d in self.daemons().items()}, pids)
        # The pods go on reading through and after the restart.
        for p in ("a", "b"):
            self.wait_rounds(p, rounds[p] + 3)
        # A new pod publishes onto an adopted daemon.
        tc = self.target("pod-c")
        self.kubelet.publish("vol-c", tc, self.context())
        self.assertEqual(len(self.daemons()), 2)
        for p, sha in [(p, self.manifest["files"][p]["sha256"]) for p in self.manifest["files"]
                       if p.endswith(".whl")][:3]:
            self.assertEqual(sha256_file(os.path.join(tc, p)), sha, p)
        for p in ("a", "b"):
            s = self.stop_pod(p)
            self.assertEqual((s["errors"], s["wrong"]), (0, 0), f"pod {p}: {s}")
            self.assertGreater(s["reads"], 0)
        self.figures["pod_read_errors_during_rollout"] = 0

        # The node is drained: every target unpublished.
        self.unpublish_all()
        self.assert_nothing_left()

    def test_2_a_killed_daemon_is_started_again_and_host_to_container_pods_read_again(self):
        t = self.target("pod-k")
        self.kubelet.publish("vol-k", t, self.context())
        ((key, d),) = self.daemons().items()
        self.start_pod("k", t)  # mountPropagation: HostToContainer
        self.start_pod("p", t, host_to_container=False)  # None: a private copy
        self.wait_rounds("k", 2)
        self.wait_rounds("p", 2)

        # The daemon dies while the plugin is frozen: each pod reads the dead mount first.
        images.podman("pause", self.plugin_name)
        try:
            os.kill(d["pid"], signal.SIGKILL)
            for p in ("k", "p"):
                self.assertTrue(wait_for(lambda p=p: self.pod(p).get("errors", 0) > 0,
                                         timeout=60), self.pod(p))
                self.assertIn("ENOTCONN", self.pod(p)["kinds"], self.pod(p))
        finally:
            t0 = time.monotonic()
            images.podman("unpause", self.plugin_name)
        # The watchdog starts it again and binds the target again.
        self.assertTrue(wait_for(lambda: self.daemons().get(key, {}).get("pid") not in
                                 (None, 0, d["pid"]), timeout=60), self.log())
        pid = self.daemons()[key]["pid"]
        self.assertEqual(set(cgroup_paths(pid)), {f"/{self.cgroup_parent}/{key}"})
        self.assertTrue(wait_for(lambda: (self.pod("k")["first_ok_after_error"] or 0) > t0,
                                 timeout=60), self.pod("k"))
        self.figures["daemon_restart_to_pod_read_s"] = round(
            self.pod("k")["first_ok_after_error"] - t0, 2)
        self.assertIn(f"daemon {key} (pid {d['pid']}", self.log())
        self.assertIn(f"daemon {key} serves again (pid {pid})", self.log())
        # The pod without propagation still has the dead mount, after rounds that began once
        # the other pod read again.
        after = self.pod("p")["rounds"]
        self.wait_rounds("p", after + 2)
        s = self.stop_pod("p")
        self.assertLess(s["last_ok"], t0, f"a pod without HostToContainer read again: {s}")
        self.assertIn("ENOTCONN", s["kinds"], s)
        s = self.stop_pod("k")
        self.assertEqual(s["wrong"], 0, s)
        self.assertGreater(s["last_ok"], s["last_error"], s)

        self.unpublish_all()
        self.assert_nothing_left()


if __name__ == "__main__":
    images.main("the rollout tests", PLUGIN)
