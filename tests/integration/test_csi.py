#!/usr/bin/env python3
"""wheelhouse-csi driven over its unix socket as kubelet drives it: the Identity
calls, NodeGetCapabilities and NodeGetInfo, then NodePublishVolume for two "pods" that are
podman containers with different torch in their images, each installing its own build from its
volume; publish twice, an incompatible publish, bad volume_context, unpublish of an unknown
path, the plugin killed and started again between publish and unpublish, and the daemon's end
with its last target. CsiTenants: one pod neither stalls nor steers another (a publish onto a
running daemon answers while another volume's daemon waits on the Hub, a restart during that
start leaves no daemon behind, the admin's options win, offline and the daemon cap, and an
unpublish that ends when its daemon does not). Each daemon runs in a cgroup of its own under the
class's --cgroup-parent, which goes with its last target. The gRPC client is Debian's
python3-grpcio, with messages that protoc generates from tools/csi/csi.proto.
"""
import os

import debian_python

debian_python.need("grpc")
import grpc  # noqa: E402  (Debian's python3-grpcio)

import concurrent.futures
import glob
import importlib.util
import json
import signal
import subprocess

import mounttest
from fakehub_ctl import FakeHub
import podman_images as images
from mounttest import REPO, MountedTestCase, sha256_file, wait_for
from test_containers import FAKE_CUDART, ContainerImages

PLUGIN = os.path.join(mounttest.BUILD_DIR, "tools", "csi", "wheelhouse-csi")
TOKEN = "hf_csi_secret_0123456789"
SLOW_REPO = "DoctorPopi/slow_wheelhouse"  # the same files; its Hub requests are held at will


def kubelet_target(kubelet_dir, pod):
    """kubelet's path for a pod's CSI volume; kubelet makes its parent, the plugin the rest."""
    parent = os.path.join(kubelet_dir, "pods", pod, "volumes", "kubernetes.io~csi", "wheels")
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, "mount")


def state_daemons(state_dir):
    """The daemons the plugin's state file records, by volume key."""
    with open(os.path.join(state_dir, "state.json"), encoding="utf-8") as f:
        return json.load(f)["daemons"]


def daemon_processes(state_dir, repo=None):
    """pid -> argv of the wheelhousefs processes (starters and daemons) whose mount point is
    under `state_dir`, of `repo` when given."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue
        if (len(argv) >= 3 and os.path.basename(argv[0]) == "wheelhousefs"
                and argv[-1].startswith(state_dir + os.sep) and repo in (None, argv[-2])):
            found[int(pid)] = argv
    return found


def cgroup_hierarchies(root="/sys/fs/cgroup"):
    """The cgroup mounts daemons go in: root itself (v2), or the hierarchies in it (v1, and a
    hybrid's unified tree)."""
    out = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point, fstype = left.split()[4], right.split()[0]
            if fstype in ("cgroup", "cgroup2") and root in (point, os.path.dirname(point)):
                out.add(point)
    return sorted(out)


def cgroups_left(parent):
    """The folders of `parent` (a --cgroup-parent) in any hierarchy."""
    return [os.path.join(h, parent) for h in cgroup_hierarchies()
            if os.path.exists(os.path.join(h, parent))]


def remove_cgroups(parent):
    """What a failed test left of `parent`'s cgroups (deepest first; none with a process)."""
    for top in cgroups_left(parent):
        for dirpath, _, _ in os.walk(top, topdown=False):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


def cgroup_paths(pid):
    """The process's cgroup in each of its hierarchies."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
        return [line.rstrip("\n").split(":", 2)[2] for line in f if line.strip()]


def close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def load_messages(out):
    os.makedirs(out, exist_ok=True)
    subprocess.run(["protoc", "-I", mounttest.SOURCE_DIR, f"--python_out={out}",
                    os.path.join(mounttest.SOURCE_DIR, "tools", "csi", "csi.proto")], check=True)
    spec = importlib.util.spec_from_file_location("csi_pb2",
                                                  os.path.join(out, "tools", "csi", "csi_pb2.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Kubelet:
    """The calls kubelet makes, one gRPC channel on the plugin's socket."""

    def __init__(self, pb, socket):
        self.pb = pb
        self.channel = grpc.insecure_channel("unix://" + socket)

    def call(self, service, method, request, response):
        rpc = self.channel.unary_unary(f"/csi.v1.{service}/{method}",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=getattr(self.pb, response).FromString)
        return rpc(request, timeout=180)

    def publish(self, volume_id, target, context, secrets=None):
        pb = self.pb
        cap = pb.VolumeCapability(
            mount=pb.VolumeCapability.MountVolume(),
            access_mode=pb.VolumeCapability.AccessMode(
                mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))  # what kubelet sends
        req = pb.NodePublishVolumeRequest(volume_id=volume_id, target_path=target,
                                          volume_capability=cap, readonly=True,
                                          volume_context=context, secrets=secrets or {})
        return self.call("Node", "NodePublishVolume", req, "NodePublishVolumeResponse")

    def unpublish(self, volume_id, target):
        req = self.pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target)
        return self.call("Node", "NodeUnpublishVolume", req, "NodeUnpublishVolumeResponse")

    def close(self):
        self.channel.close()


class PluginCase(MountedTestCase):
    """A wheelhouse-csi of the class's own (socket, state, cache, kubelet folder), started
    with `plugin_args` and driven through a Kubelet."""

    profile = "small"
    plugin_args = ()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pb = load_messages(os.path.join(cls.tmp, "gen"))
        cls.socket = os.path.join(cls.tmp, "plugin", "csi.sock")
        cls.state = os.path.join(cls.tmp, "state")
        cls.cache = os.path.join(cls.tmp, "node-cache")
        cls.kubelet_dir = os.path.join(cls.tmp, "kubelet")
        cls.plugin_log = os.path.join(cls.tmp, "plugin.log")
        cls.plugin = None
        # The daemons' cgroups: the class's own, removed with its last daemon.
        cls.cgroup_parent = "whfs-test-" + os.path.basename(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        cls.stop_plugin(signal.SIGTERM)
        # Whatever a failed test left: targets first, then the daemons' mounts, then any
        # daemon still starting.
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [line.split()[4] for line in f]
        for path in sorted((p for p in mounts if p.startswith(cls.tmp)), key=len, reverse=True):
            subprocess.run(["umount", "-l", path], check=False)
        for pid in daemon_processes(cls.state):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not daemon_processes(cls.state), timeout=10)
        remove_cgroups(cls.cgroup_parent)
        super().tearDownClass()

    @classmethod
    def start_plugin(cls):
        if os.path.exists(cls.socket):
            os.unlink(cls.socket)  # the killed plugin's: wait for the new one's
        log = open(cls.plugin_log, "ab")
        cls.plugin = subprocess.Popen(
            [PLUGIN, "--csi-address", "unix://" + cls.socket, "--state-dir", cls.state,
             "--cache-dir", cls.cache, "--node-id", "node-1", "--allow-endpoint", cls.hub.hub,
             "--cgroup-parent", cls.cgroup_parent, "--watch-interval", "1", *cls.plugin_args],
            stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, FAKE_CUDA_DEVICES="8.9,8.6", HF_TOKEN="hf_the_plugins_own"))
        log.close()
        assert wait_for(lambda: os.path.exists(cls.socket), timeout=30), cls.log()
        cls.kubelet = Kubelet(cls.pb, cls.socket)

    @classmethod
    def stop_plugin(cls, sig):
        if cls.plugin is not None:
            cls.kubelet.close()
            cls.plugin.send_signal(sig)
            cls.plugin.wait(timeout=30)
            cls.plugin = None

    @classmethod
    def log(cls):
        with open(cls.plugin_log, encoding="utf-8", errors="replace") as f:
            return f.read()

    def setUp(self):
        if self.plugin is None:
            self.start_plugin()

    def context(self, **more):
        c = {"repo": REPO, "endpoint": self.hub.hub, "csi.storage.k8s.io/ephemeral": "true",
             "csi.storage.k8s.io/pod.name": "trainer", "csi.storage.k8s.io/pod.namespace": "ml"}
        c.update(more)
        return c

    def target(self, pod):
        return kubelet_target(self.kubelet_dir, pod)

    def daemons(self):
        return state_daemons(self.state)

    def assert_bytes_right(self, target):
        some = sorted(p for p in self.manifest["files"] if p.endswith(".whl"))[:3]
        for p in some:
            self.assertEqual(sha256_file(os.path.join(target, p)),
                             self.manifest["files"][p]["sha256"], p)


class Csi(ContainerImages, PluginCase):
    plugin_args = ("--daemon-option", f"cudart={FAKE_CUDART}")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.hub.stop()  # again, knowing the volumes' token
        cls.hub = FakeHub({REPO: cls.tree}, os.path.join(cls.tmp, "hub-t"), tokens={TOKEN: [REPO]})
        cls.make_images()

    def pod_installs(self, image, target):
        r = images.podman("run", "--rm", "--pull=never", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0",
                          "-v", f"{target}:/wheelhouse:ro", image, "sh", "-c",
                          "pip install --no-deps /wheelhouse/current/flash_attn/*.whl "
                          ">/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }; "
                          "python -c 'import flash_attn; print(flash_attn.where())'",
                          check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout.split()[-1]

    def test_1_identity_capabilities_and_info(self):
        pb = self.pb
        info = self.kubelet.call("Identity", "GetPluginInfo", pb.GetPluginInfoRequest(),
                                 "GetPluginInfoResponse")
        self.assertEqual(info.name, "wheelhouse-fs.csi")
        self.assertTrue(info.vendor_version)
        caps = self.kubelet.call("Identity", "GetPluginCapabilities",
                                 pb.GetPluginCapabilitiesRequest(), "GetPluginCapabilitiesResponse")
        self.assertEqual(len(caps.capabilities), 0)  # no controller: a node plugin
        probe = self.kubelet.call("Identity", "Probe", pb.ProbeRequest(), "ProbeResponse")
        self.assertTrue(probe.HasField("ready") and probe.ready.value)
        node_caps = self.kubelet.call("Node", "NodeGetCapabilities", pb.NodeGetCapabilitiesRequest(),
                                      "NodeGetCapabilitiesResponse")
        self.assertEqual(len(node_caps.capabilities), 0)  # no staging: kubelet publishes directly
        ninfo = self.kubelet.call("Node", "NodeGetInfo", pb.NodeGetInfoRequest(),
                                  "NodeGetInfoResponse")
        self.assertEqual(ninfo.node_id, "node-1")
        # An RPC of a capability not declared: UNIMPLEMENTED.
        with self.assertRaises(grpc.RpcError) as e:
            self.kubelet.call("Node", "NodeStageVolume", pb.NodeGetInfoRequest(),
                              "NodeGetInfoResponse")
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_2_bad_requests_are_invalid_argument_with_a_message(self):
        cases = [
            ({"endpoint": self.hub.hub}, "repo is required"),
            (self.context(options="cudart=/tmp/x.so"), "\"cudart\" is not an option"),
            (self.context(endpoint="https://elsewhere.example"), "not one this node allows"),
            (self.context(revison="v1"), "unknown key \"revison\""),
        ]
        for context, says in cases:
            with self.assertRaises(grpc.RpcError) as e:
                self.kubelet.publish("vol-bad", self.target("bad"), context)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(says, e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.kubelet.publish("vol-bad", "relative/path", self.context())
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertFalse(os.path.exists(self.target("bad")))

    def test_3_two_pods_a_restart_and_the_last_unpublish(self):
        ta, tb = self.target("pod-a"), self.target("pod-b")
        self.kubelet.publish("vol-a", ta, self.context())
        self.kubelet.publish("vol-b", tb, self.context())
        self.kubelet.publish("vol-a", ta, self.context())  # again: OK, nothing new
        daemons = self.daemons()
        self.assertEqual(len(daemons), 1, daemons)
        (key, d), = daemons.items()
        self.assertEqual(d["targets"], {ta: "vol-a", tb: "vol-b"})
        pid = d["pid"]
        self.assertTrue(os.path.exists(f"/proc/{pid}"))
        # Out of the plugin's cgroups, in every hierarchy: in the node's cgroup of its own.
        self.assertEqual(set(cgroup_paths(pid)), {f"/{self.cgroup_parent}/{key}"})
        self.assertTrue(mounttest.is_mounted(ta) and mounttest.is_mounted(tb))
        # Read-only, whatever the pod asks.
        with self.assertRaises(OSError):
            open(os.path.join(ta, "x"), "w")
        # Another volume on a published target: ALREADY_EXISTS.
        with self.assertRaises(grpc.RpcError) as e:
            self.kubelet.publish("vol-other", ta, self.context())
        self.assertEqual(e.exception.code(), grpc.StatusCode.ALREADY_EXISTS)
        # Each pod's own current/, and the right bytes.
        self.assertEqual(self.pod_installs(self.image_29, ta), "flash_attn/sm89/torch2.9-cu128")
        self.assertEqual(self.pod_installs(self.image_27, tb), "flash_attn/sm89/torch2.7-cu128")
        self.assert_bytes_right(ta)

        # The plugin dies (a crash, a DaemonSet rollout); the daemon and the mounts go on.
        self.stop_plugin(signal.SIGKILL)
        self.assertTrue(os.path.exists(f"/proc/{pid}"))
        self.assert_bytes_right(tb)
        self.start_plugin()
        self.assertTrue(wait_for(lambda: "adopted daemon" in self.log(), timeout=30), self.log())
        self.kubelet.publish("vol-b", tb, self.context())  # idempotent after the restart too
        self.kubelet.unpublish("vol-a", ta)
        self.assertFalse(mounttest.is_mounted(ta))
        self.assertFalse(os.path.exists(ta), "the target folder was left")
        self.assertTrue(os.path.exists(f"/proc/{pid}"), "the daemon ended with a target left")
        self.kubelet.unpublish("vol-a", ta)  # again: OK
        self.kubelet.unpublish("vol-x", os.path.join(self.kubelet_dir, "never", "published"))
        self.assert_bytes_right(tb)
        self.kubelet.unpublish("vol-b", tb)
        self.assertFalse(mounttest.is_mounted(tb))
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30),
                        "the daemon outlived its last target")
        self.assertEqual(self.daemons(), {})
        self.assertEqual(cgroups_left(self.cgroup_parent), [], "the daemon's cgroup was left")

    def test_4_the_token_comes_from_the_secret_and_is_never_shown(self):
        t = self.target("pod-token")
        self.hub.clear_log()
        self.kubelet.publish("vol-t", t, self.context(), secrets={"token": TOKEN})
        (d,) = self.daemons().values()
        self.assert_bytes_right(t)
        with open(f"/proc/{d['pid']}/cmdline", "rb") as f:
            cmdline = f.read().decode(errors="replace")
        with open(f"/proc/{d['pid']}/environ", "rb") as f:
            environ = f.read().decode(errors="replace")
        self.assertNotIn(TOKEN, cmdline)
        self.assertNotIn("hf_the_plugins_own", environ + cmdline,
                         "the plugin's own token reached a volume's daemon")
        token_file = os.path.join(d["dir"], "token")
        self.assertEqual(os.stat(token_file).st_mode & 0o777, 0o600)
        hub_asks = [e for e in self.hub.log() if e["server"] == "hub"]
        self.assertTrue(hub_asks and all(e["auth"] for e in hub_asks), "the token was not sent")
        texts = [self.log(), json.dumps(self.daemons())]
        for path in glob.glob(os.path.join(d["dir"], "*.log")):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        for text in texts:
            self.assertNotIn(TOKEN, text)
        # A volume without the secret gets a daemon of its own, which sends no token.
        t2 = self.target("pod-notoken")
        self.hub.clear_log()
        self.kubelet.publish("vol-n", t2, self.context())
        self.assertEqual(len(self.daemons()), 2)
        self.assert_bytes_right(t2)
        self.assertFalse([e for e in self.hub.log() if e["server"] == "hub" and e["auth"]])
        self.kubelet.unpublish("vol-t", t)
        self.kubelet.unpublish("vol-n", t2)
        self.assertFalse(os.path.exists(token_file), "the token file outlived its daemon")


class CsiTenants(PluginCase):
    """No pod stalls or steers another. The node's admin sets current=mount and at most two
    daemons; SLOW_REPO's Hub requests are held by the emulator (a "hold" fault) while a test
    needs a start in flight, with no clock involved."""

    plugin_args = ("--daemon-option", "current=mount", "--max-daemons", "2")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.hub.stop()  # again, with the second dataset
        cls.hub = FakeHub({REPO: cls.tree, SLOW_REPO: cls.tree}, os.path.join(cls.tmp, "hub-2"))

    def setUp(self):
        super().setUp()
        # Run last to first: held requests answer, the publishes in flight end, and what a
        # test published is unpublished even when it failed halfway.
        self.addCleanup(self.unpublish_left)
        self.pool = concurrent.futures.ThreadPoolExecutor(4)
        self.addCleanup(self.pool.shutdown)
        self.addCleanup(self.hub.clear_faults)

    def hold_slow_repo(self):
        """From now on until clear_faults, the Hub answers no request for SLOW_REPO."""
        self.hub.fault(kind="hold", server="hub", path=SLOW_REPO.split("/")[1])

    def held(self):
        return sum(f["fired"] for f in self.hub.state()["faults"] if f["kind"] == "hold")

    def unpublish_all(self):
        for d in self.daemons().values():
            for target, volume in d["targets"].items():
                self.kubelet.unpublish(volume, target)
        self.assertEqual(self.daemons(), {})

    def unpublish_left(self):
        if self.plugin is None:
            self.start_plugin()
        try:
            daemons = self.daemons()
        except FileNotFoundError:
            return
        for d in daemons.values():
            for target, volume in d["targets"].items():
                try:
                    self.kubelet.unpublish(volume, target)
                except grpc.RpcError:
                    pass

    def test_1_a_publish_onto_a_running_daemon_answers_while_another_daemon_starts(self):
        ta, tb, ts, ts2 = (self.target(p) for p in ("t1-a", "t1-b", "t1-slow", "t1-slow2"))
        self.kubelet.publish("vol-a", ta, self.context())
        self.hold_slow_repo()
        slow = self.pool.submit(self.kubelet.publish, "vol-s", ts, self.context(repo=SLOW_REPO))
        self.assertTrue(wait_for(lambda: self.held() >= 1, timeout=60),
                        "the slow volume's daemon never asked the Hub\n" + self.log())
        fast = self.pool.submit(self.kubelet.publish, "vol-b", tb, self.context())
        fast.result(timeout=120)
        self.assertFalse(slow.done(), "the fast publish answered only after the slow one")
        # The start is in flight: its daemon is recorded as starting.
        starting = [d for d in self.daemons().values() if d.get("starting")]
        self.assertEqual([d["repo"] for d in starting], [SLOW_REPO], self.daemons())
        # Another pod of the slow volume waits for the same start (no second daemon); an
        # unpublish answers meanwhile.
        same = self.pool.submit(self.kubelet.publish, "vol-s2", ts2,
                                self.context(repo=SLOW_REPO))
        self.kubelet.unpublish("vol-a", ta)
        self.assertFalse(mounttest.is_mounted(ta))
        self.assertFalse(slow.done(), "the slow publish answered while the Hub held its start")

        self.hub.clear_faults()
        slow.result(timeout=180)
        same.result(timeout=180)
        daemons = self.daemons()
        self.assertEqual(len(daemons), 2, daemons)
        (s,) = [d for d in daemons.values() if d["repo"] == SLOW_REPO]
        self.assertEqual(s["targets"], {ts: "vol-s", ts2: "vol-s2"})
        self.assertNotIn("starting", s)
        self.assert_bytes_right(ts)
        self.assert_bytes_right(tb)
        self.unpublish_all()

    def test_2_a_plugin_killed_during_a_start_leaves_no_daemon_behind(self):
        t = self.target("t2")
        self.hold_slow_repo()
        slow = self.pool.submit(self.kubelet.publish, "vol-r", t, self.context(repo=SLOW_REPO))
        self.assertTrue(wait_for(lambda: self.held() >= 1, timeout=60), self.log())
        self.assertTrue(daemon_processes(self.state, SLOW_REPO))  # the start runs
        self.stop_plugin(signal.SIGKILL)
        with self.assertRaises(grpc.RpcError):
            slow.result(timeout=60)
        self.start_plugin()  # it listens once it has adopted (or ended) what it found
        left = daemon_processes(self.state, SLOW_REPO)
        self.assertEqual(left, {}, "the start of the killed plugin goes on:\n" + self.log())
        self.assertIn("was starting when the plugin stopped", self.log())
        self.assertEqual(self.daemons(), {})
        self.hub.clear_faults()
        # kubelet asks again: a fresh start, which serves.
        self.kubelet.publish("vol-r", t, self.context(repo=SLOW_REPO))
        self.assert_bytes_right(t)
        self.assertEqual(len(daemon_processes(self.state, SLOW_REPO)), 1)
        self.unpublish_all()

    def test_3_the_admins_options_win_and_offline_is_the_admins_alone(self):
        t = self.target("t3")
        cases = [
            ("current=caller", "current is set by this node's admin (current=mount"),
            ("nocurrent", "nocurrent is set by this node's admin (current=mount"),
            ("offline", "\"offline\" is not an option a volume may set"),
            ("arch=sm89,offline", "\"offline\" is not an option a volume may set"),
            ("readahead=100G", "readahead=100G is out of bounds"),
            ("refresh=10s", "refresh=10s is out of bounds"),
        ]
        for options, says in cases:
            with self.assertRaises(grpc.RpcError) as e:
                self.kubelet.publish("vol-o", t, self.context(options=options))
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, options)
            self.assertIn(says, e.exception.details())
        self.assertFalse(os.path.exists(t))
        self.assertFalse(daemon_processes(self.state))
        # A volume that leaves current alone gets the admin's.
        self.kubelet.publish("vol-m", t, self.context(options="arch=sm89"))
        (d,) = self.daemons().values()
        with open(f"/proc/{d['pid']}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")
        opts = argv[argv.index("-o") + 1].split(",")
        self.assertIn("current=mount", opts)
        self.assertNotIn("current=caller", opts)
        self.assertEqual(opts[-2:], ["arch=sm89", "current=mount"], "the admin's come last")
        self.unpublish_all()

    def test_4_the_daemons_of_a_node_are_capped(self):
        t1, t1b, t2, t3 = (self.target(p) for p in ("t4-1", "t4-1b", "t4-2", "t4-3"))
        self.kubelet.publish("vol-1", t1, self.context())
        self.kubelet.publish("vol-2", t2, self.context(options="arch=sm89"))
        with self.assertRaises(grpc.RpcError) as e:
            self.kubelet.publish("vol-3", t3, self.context(repo=SLOW_REPO))
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("wheelhouse-csi --max-daemons 2", e.exception.details())
        self.assertFalse(os.path.exists(t3))
        self.assertEqual(len(daemon_processes(self.state)), 2)
        self.kubelet.publish("vol-1b", t1b, self.context())  # shares a running daemon
        self.kubelet.unpublish("vol-2", t2)
        self.kubelet.publish("vol-3", t3, self.context(repo=SLOW_REPO))
        self.assert_bytes_right(t3)
        self.unpublish_all()

    def test_5_a_start_that_times_out_leaves_no_daemon_behind(self):
        self.stop_plugin(signal.SIGTERM)
        self.addCleanup(self.stop_plugin, signal.SIGTERM)  # the next test gets the usual one
        usual = type(self).plugin_args
        type(self).plugin_args = usual + ("--start-timeout", "1")
        try:
            self.start_plugin()
        finally:
            type(self).plugin_args = usual
        self.hold_slow_repo()  # this start cannot serve before the timeout, however long it is
        with self.assertRaises(grpc.RpcError) as e:
            self.kubelet.publish("vol-t", self.target("t5"), self.context(repo=SLOW_REPO))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INTERNAL)
        self.assertIn("not serving after 1 s", e.exception.details())
        self.assertEqual(daemon_processes(self.state, SLOW_REPO), {},
                         "the daemon of the start that timed out goes on starting")
        self.assertEqual(self.daemons(), {})

    def test_6_an_unpublish_ends_when_its_daemon_does_not(self):
        t = self.target("t6")
        self.kubelet.publish("vol-6", t, self.context())
        (d,) = self.daemons().values()
        pid = d["pid"]
        # A file open in the target (its plain unmount is EBUSY), and a daemon that answers
        # nothing, not even SIGTERM.
        some = sorted(p for p in self.manifest["files"] if p.endswith(".whl"))[0]
        fd = os.open(os.path.join(t, some), os.O_RDONLY)
        self.addCleanup(close_quietly, fd)  # its daemon is gone: the close's flush fails
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(lambda: os.path.exists(f"/proc/{pid}") and os.kill(pid, signal.SIGKILL))
        self.kubelet.unpublish("vol-6", t)
        self.assertFalse(mounttest.is_mounted(t))
        self.assertFalse(os.path.exists(t))
        self.assertEqual(daemon_processes(self.state), {})
        log = self.log()
        self.assertIn(f"{t} is busy (a file open in it): detached lazily", log)
        self.assertIn(f"daemon pid {pid} on {d['mnt']} still runs 3 s after SIGTERM: SIGKILL", log)
        self.assertEqual(self.daemons(), {})
        self.assertEqual(cgroups_left(self.cgroup_parent), [])

if __name__ == "__main__":
    images.main("the CSI tests", PLUGIN)
