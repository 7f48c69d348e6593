#!/usr/bin/env python3
"""The Kubernetes manifests of tools/kubernetes/: they parse as YAML, every object has what the
API and kubelet need, and they agree with the plugin itself: the driver's name is the one
GetPluginInfo answers, the sockets kubelet, the registrar and the liveness probe use are the
plugin's, what a rollout needs is there (the state folder Bidirectional, the host's cgroup root
where --cgroup-root says, the host's network, pods with HostToContainer propagation), every
container has requests and limits, the image is the one build-image.sh tags, and the
DaemonSet's arguments start the real wheelhouse-csi (with its paths moved to a scratch folder)
within its memory limit."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import debian_python

debian_python.need("yaml")
import yaml  # noqa: E402  (Debian's python3-yaml)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("WHFS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
K8S = os.path.join(SOURCE_DIR, "tools", "kubernetes")
PLUGIN = os.path.join(BUILD_DIR, "tools", "csi", "wheelhouse-csi")


def plugin_name():
    with open(os.path.join(SOURCE_DIR, "tools", "csi", "main.cpp"), encoding="utf-8") as f:
        return re.search(r'kPluginName = "([^"]+)"', f.read()).group(1)


def project_version():
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(wheelhouse-fs VERSION (\S+)", f.read()).group(1)


def quantity(q):
    """A Kubernetes quantity (100m, 64Mi, 1G) as a number (CPUs, bytes)."""
    q = str(q)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 1e3, "M": 1e6, "G": 1e9}
    for unit, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if q.endswith(unit):
            return float(q[:-len(unit)]) * factor
    return float(q)


def args_of(container):
    return dict(a.lstrip("-").split("=", 1) for a in container.get("args", []) if "=" in a)


def load_all():
    objects = []
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml"):
            with open(os.path.join(K8S, name), encoding="utf-8") as f:
                for doc in yaml.safe_load_all(f):
                    if doc is not None:
                        objects.append((name, doc))
    return objects


class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = load_all()
        cls.name = plugin_name()

    def of(self, kind):
        found = [o for _, o in self.objects if o.get("kind") == kind]
        self.assertTrue(found, f"no {kind} in tools/kubernetes/")
        return found

    def test_every_object_has_api_version_kind_and_name(self):
        self.assertGreaterEqual(len(self.objects), 8)
        for file, o in self.objects:
            for key in ("apiVersion", "kind", "metadata"):
                self.assertIn(key, o, file)
            self.assertTrue(o["metadata"].get("name"), file)

    def test_the_csidriver(self):
        (d,) = self.of("CSIDriver")
        self.assertEqual(d["apiVersion"], "storage.k8s.io/v1")
        self.assertEqual(d["metadata"]["name"], self.name)
        self.assertIs(d["spec"]["attachRequired"], False)
        self.assertIs(d["spec"]["podInfoOnMount"], True)
        self.assertEqual(sorted(d["spec"]["volumeLifecycleModes"]), ["Ephemeral", "Persistent"])

    def test_the_daemonset_has_what_the_plugin_needs(self):
        (ds,) = self.of("DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        self.assertEqual(ds["spec"]["selector"]["matchLabels"],
                         ds["spec"]["template"]["metadata"]["labels"])
        self.assertIs(pod["hostPID"], True)
        volumes = {v["name"]: v for v in pod["volumes"]}
        containers = {c["name"]: c for c in pod["containers"]}
        plugin = containers["wheelhouse-csi"]
        registrar = containers["node-driver-registrar"]
        self.assertIs(plugin["securityContext"]["privileged"], True)
        mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
        kubelet = mounts["/var/lib/kubelet"]
        self.assertEqual(kubelet["mountPropagation"], "Bidirectional")
        self.assertEqual(volumes[kubelet["name"]]["hostPath"]["path"], "/var/lib/kubelet")
        self.assertEqual(volumes[mounts["/dev/fuse"]["name"]]["hostPath"],
                         {"path": "/dev/fuse", "type": "CharDevice"})
        for m in plugin["volumeMounts"] + registrar["volumeMounts"]:
            self.assertIn(m["name"], volumes)
        # The socket: the plugin serves it in its plugin-dir, the registrar finds it there, and
        # tells kubelet the host's path of the same folder, named after the driver.
        args = dict(a.lstrip("-").split("=", 1) for a in plugin["args"])
        sock = args["csi-address"].removeprefix("unix://")
        rargs = dict(a.lstrip("-").split("=", 1) for a in registrar["args"])
        self.assertEqual(rargs["csi-address"], sock)
        plugin_dir = mounts[os.path.dirname(sock)]["name"]
        host_dir = volumes[plugin_dir]["hostPath"]["path"]
        self.assertEqual(host_dir, f"/var/lib/kubelet/plugins/{self.name}")
        self.assertEqual(rargs["kubelet-registration-path"],
                         os.path.join(host_dir, os.path.basename(sock)))
        reg = {m["mountPath"]: m["name"] for m in registrar["volumeMounts"]}
        self.assertEqual(volumes[reg["/registration"]]["hostPath"]["path"],
                         "/var/lib/kubelet/plugins_registry")
        self.assertEqual(pod["serviceAccountName"],
                         self.of("ServiceAccount")[0]["metadata"]["name"])

    def daemonset(self):
        (ds,) = self.of("DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        return ds, pod, {c["name"]: c for c in pod["containers"]}, \
            {v["name"]: v for v in pod["volumes"]}

    def test_a_rollout_finds_the_daemons_and_their_mounts(self):
        _, pod, containers, volumes = self.daemonset()
        plugin = containers["wheelhouse-csi"]
        args = args_of(plugin)
        mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
        # The daemons' mounts are in the state folder: the next plugin's container sees them.
        state = mounts[args["state-dir"]]
        self.assertEqual(state["mountPropagation"], "Bidirectional")
        self.assertEqual(volumes[state["name"]]["hostPath"]["path"], args["state-dir"])
        # The daemons' cgroups are the host's: --cgroup-root is where its root is mounted.
        cgroup = mounts[args["cgroup-root"]]
        self.assertEqual(volumes[cgroup["name"]]["hostPath"]["path"], "/sys/fs/cgroup")
        self.assertNotEqual(args["cgroup-root"], "/sys/fs/cgroup",
                            "the container's own /sys/fs/cgroup is not the host's")
        # The daemons outlive the pod: its own network namespace would go with it.
        self.assertIs(pod["hostNetwork"], True)
        self.assertEqual(pod["dnsPolicy"], "ClusterFirstWithHostNet")
        self.assertEqual(pod.get("terminationGracePeriodSeconds", 30), 30)
        rolling = self.of("DaemonSet")[0]["spec"]["updateStrategy"]
        self.assertEqual(rolling["type"], "RollingUpdate")

    def test_the_liveness_probe_calls_the_plugins_probe(self):
        _, _, containers, _ = self.daemonset()
        plugin = containers["wheelhouse-csi"]
        probe = containers["liveness-probe"]
        self.assertTrue(probe["image"].startswith("registry.k8s.io/sig-storage/livenessprobe:"))
        pargs = args_of(probe)
        self.assertEqual(pargs["csi-address"],
                         args_of(plugin)["csi-address"].removeprefix("unix://"))
        live = plugin["livenessProbe"]["httpGet"]
        self.assertEqual(live["path"], "/healthz")
        ports = {p["name"]: p["containerPort"] for p in plugin["ports"]}
        self.assertEqual(ports[live["port"]], int(pargs["health-port"]))
        self.assertNotEqual(int(pargs["health-port"]), 9808, "the default: other drivers' too")
        self.assertIn({"name": "plugin-dir", "mountPath": "/csi"}, probe["volumeMounts"])

    def test_every_container_has_requests_and_limits(self):
        _, _, containers, _ = self.daemonset()
        self.assertEqual(set(containers), {"wheelhouse-csi", "node-driver-registrar",
                                           "liveness-probe"})
        for name, c in containers.items():
            r = c["resources"]
            self.assertGreater(quantity(r["requests"]["cpu"]), 0, name)
            self.assertGreater(quantity(r["requests"]["memory"]), 0, name)
            self.assertGreaterEqual(quantity(r["limits"]["memory"]),
                                    quantity(r["requests"]["memory"]), name)

    def test_the_image_is_the_one_build_image_makes(self):
        _, _, containers, _ = self.daemonset()
        self.assertEqual(containers["wheelhouse-csi"]["image"],
                         f"wheelhouse-fs:{project_version()}")
        for script in ("build-image.sh", "Containerfile"):
            self.assertTrue(os.path.exists(os.path.join(K8S, script)), script)

    def test_the_pods_see_a_daemon_started_again(self):
        pods = self.of("Pod")
        self.assertEqual(len(pods), 2)
        (pv,) = self.of("PersistentVolume")
        claims = {c["metadata"]["name"] for c in self.of("PersistentVolumeClaim")
                  if c["spec"]["volumeName"] == pv["metadata"]["name"]}
        for pod in pods:
            ours = {v["name"] for v in pod["spec"]["volumes"]
                    if v.get("csi", {}).get("driver") == self.name or
                    v.get("persistentVolumeClaim", {}).get("claimName") in claims}
            self.assertTrue(ours, pod["metadata"]["name"])
            for c in pod["spec"]["containers"]:
                for m in c["volumeMounts"]:
                    if m["name"] in ours:
                        self.assertEqual(m.get("mountPropagation"), "HostToContainer",
                                         pod["metadata"]["name"])

    def test_the_volumes_name_the_driver_and_what_the_plugin_reads(self):
        known = {"repo", "revision", "endpoint", "options"}
        (inline,) = [v for p in self.of("Pod") for v in p["spec"]["volumes"] if "csi" in v]
        (pv,) = self.of("PersistentVolume")
        for csi in (inline["csi"], pv["spec"]["csi"]):
            self.assertEqual(csi["driver"], self.name)
            self.assertIs(csi["readOnly"], True)
            self.assertIn("repo", csi["volumeAttributes"])
            self.assertLessEqual(set(csi["volumeAttributes"]), known)
        secret = self.of("Secret")[0]["metadata"]["name"]
        self.assertEqual(inline["csi"]["nodePublishSecretRef"]["name"], secret)
        self.assertEqual(pv["spec"]["accessModes"], ["ReadOnlyMany"])
        (pvc,) = self.of("PersistentVolumeClaim")
        self.assertEqual(pvc["spec"]["volumeName"], pv["metadata"]["name"])
        self.assertEqual(pvc["spec"]["storageClassName"], pv["spec"]["storageClassName"])

    def test_the_plugin_refuses_a_cgroup_root_or_memory_limit_it_cannot_use(self):
        if not os.path.exists(PLUGIN):
            self.fail(f"{PLUGIN} is not built")
        tmp = tempfile.mkdtemp(prefix="whfs-k8s-")
        try:
            common = [PLUGIN, "--csi-address", f"unix://{tmp}/csi.sock", "--state-dir",
                      f"{tmp}/state"]
            cases = [
                (["--cgroup-root", tmp], 1,
                 f"--cgroup-root: {tmp} holds no cgroup hierarchy (it should be the host's "
                 "/sys/fs/cgroup) (or --cgroup-root '' to keep the daemons in the plugin's "
                 "cgroup)"),
                (["--daemon-memory-max", "1x"], 2,
                 "--daemon-memory-max 1x is not a size of 16M or more (e.g. 1G)"),
            ]
            for extra, code, says in cases:
                r = subprocess.run(common + extra, capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertEqual(r.stderr.strip().splitlines()[-1], "wheelhouse-csi: " + says)
            self.assertFalse(os.path.exists(f"{tmp}/csi.sock"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_the_daemonsets_arguments_start_the_real_plugin(self):
        if not os.path.exists(PLUGIN):
            self.fail(f"{PLUGIN} is not built")
        (ds,) = self.of("DaemonSet")
        plugin = [c for c in ds["spec"]["template"]["spec"]["containers"]
                  if c["name"] == "wheelhouse-csi"][0]
        tmp = tempfile.mkdtemp(prefix="whfs-k8s-")
        try:
            moved = {"/csi": os.path.join(tmp, "csi"),
                     "/var/lib/wheelhouse-csi": os.path.join(tmp, "state"),
                     "/var/cache/wheelhouse-fs": os.path.join(tmp, "cache"),
                     "/host/sys/fs/cgroup": "/sys/fs/cgroup"}
            args = []
            for a in plugin["args"]:
                a = a.replace("$(NODE_NAME)", "node-7")
                for old, new in moved.items():
                    a = a.replace("=" + old, "=" + new).replace("unix://" + old, "unix://" + new)
                args.append(a)
            # The daemons' cgroups under a name of the test's own (none is made: no publish).
            args.append("--cgroup-parent=" + os.path.basename(tmp))
            log = os.path.join(tmp, "log")
            with open(log, "wb") as out:
                p = subprocess.Popen([PLUGIN] + args, stdout=out, stderr=subprocess.STDOUT)
            sock = os.path.join(tmp, "csi", "csi.sock")
            deadline = time.time() + 20
            while time.time() < deadline and not os.path.exists(sock) and p.poll() is None:
                time.sleep(0.05)
            alive = p.poll() is None
            rss = 0
            if alive:
                with open(f"/proc/{p.pid}/status", encoding="utf-8") as f:
                    rss = [int(line.split()[1]) * 1024 for line in f
                           if line.startswith("VmHWM:")][0]
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=20)
            with open(log, encoding="utf-8") as f:
                text = f.read()
            self.assertTrue(alive and os.path.exists(os.path.dirname(sock)), text)
            self.assertEqual(rc, 0, text)
            self.assertIn("node node-7", text)
            self.assertIn("cgroup v", text)  # the daemons' cgroups, from --cgroup-root
            limit = quantity(plugin["resources"]["limits"]["memory"])
            self.assertLess(rss, limit / 2, "the plugin's memory limit leaves little room")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
