"""deploy/: the Kubernetes DaemonSet and the image's Dockerfile. No cluster and no docker here: the
manifest is validated against Kubernetes' own schemas (kubernetes-validate, strict: an unknown or
misspelt field fails), and what it promises is read back from it and checked against gputui itself:
the flags it passes, the port it is scraped on, the paths it is probed on, the files it mounts."""

from __future__ import annotations

import configparser
import copy
import errno
import json
import os
import queue
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from plain_data import workstation
from pod_security import violations
from prometheus_client.registry import CollectorRegistry
from serve_helpers import fetch, free_port, serve_env, serving

from gputui import __version__
from gputui.alerts.delivery import Channel
from gputui.cli import parse
from gputui.collect.host import HOSTNAME_ENV, host_name
from gputui.collect.owners import CHECKPOINT, FileStat, HostFiles, OwnerReader
from gputui.collect.sim import SimulatedMachine, native
from gputui.collect.sim.library import Nvml
from gputui.model.alert import Alert, AlertEvent
from gputui.sample.gather import NoDriver
from gputui.serve.auth import Users, password_line
from gputui.serve.metrics import SampleCollector
from gputui.serve.sampling import Sample
from gputui.serve.server import parse_address, tls_context
from gputui.serve.web import make_app
from gputui.untrusted import visible

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kubernetes" / "gputui-daemonset.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"


def documents() -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d is not None]


def daemonset() -> dict:
    (found,) = [d for d in documents() if d["kind"] == "DaemonSet"]
    return found


def pod() -> dict:
    return daemonset()["spec"]["template"]["spec"]


def container() -> dict:
    (found,) = pod()["containers"]
    return found


def listen_port(args: list[str]) -> int:
    """The port of serve's --listen, as gputui's own parser reads the args."""
    options = parse(args)
    assert options.mode == "serve"
    return parse_address(options.serve.listen).port


# ------------------------------------------------------------------------------------------ schema

def test_the_manifest_is_valid_for_every_kubernetes_with_a_schema():
    """Every version kubernetes-validate has schemas for (1.25 to 1.37 in its 1.37.0), strict."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate "
                                              "(the test extra) validates the manifest")
    from kubernetes_validate.utils import all_versions

    versions = sorted(set(all_versions()), key=lambda v: tuple(map(int, v.split("."))))
    assert len(versions) > 1
    kinds = []
    for document in documents():
        for version in versions:
            assert kubernetes_validate.validate(document, version, strict=True) == version.rsplit(".", 1)[0]
        kinds.append(document["kind"])
    assert kinds == ["Namespace", "DaemonSet", "NetworkPolicy"]


def test_the_daemonset_with_basic_auth_and_tls_is_valid_for_every_kubernetes_with_a_schema():
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate "
                                              "(the test extra) validates the manifest")
    from kubernetes_validate.utils import all_versions

    for version in sorted(set(all_versions())):
        assert kubernetes_validate.validate(with_auth(), version, strict=True) == version.rsplit(".", 1)[0]


def test_the_strict_schema_catches_a_misspelt_field():
    """The validation the manifest passes is one that can fail: readonly for readOnly is refused."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate "
                                              "(the test extra) validates the manifest")
    broken = daemonset()
    mount = broken["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]
    mount["readonly"] = mount.pop("readOnly")
    with pytest.raises(kubernetes_validate.ValidationError, match="readonly"):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


# ------------------------------------------------------------------------------------------ what it runs

def test_the_container_runs_gputui_serve_with_flags_gputui_has():
    assert container()["command"] == ["gputui"]  # [project.scripts], the image's ENTRYPOINT too
    options = parse(container()["args"])
    assert options.mode == "serve"
    assert parse_address(options.serve.listen).host == "0.0.0.0"  # the pod's IP, not only its loopback
    assert options.interval == 5.0


def test_the_image_is_this_version():
    assert container()["image"].rsplit(":", 1)[1] == __version__


def test_prometheus_scrapes_the_port_serve_listens_on():
    annotations = daemonset()["spec"]["template"]["metadata"]["annotations"]
    port = listen_port(container()["args"])
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    assert annotations["prometheus.io/path"] == "/metrics"
    assert [(p["name"], p["containerPort"]) for p in container()["ports"]] == [("metrics", port)]


def probes() -> dict[str, dict]:
    return {kind: container()[kind] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}


def test_the_probes_ask_the_metrics_port():
    for kind, probe in probes().items():
        assert probe["httpGet"]["port"] == "metrics", kind
        # serve gives a request 5 s (gputui/serve/server.py REQUEST_TIMEOUT); a probe must wait as long
        assert probe["timeoutSeconds"] >= 5, kind


def test_the_probe_and_scrape_paths_are_answered_by_serve():
    sample = Sample(workstation())
    registry = CollectorRegistry()
    registry.register(SampleCollector(lambda: sample))
    app = make_app(lambda: sample, registry)
    paths = {p["httpGet"]["path"] for p in probes().values()}
    paths.add(daemonset()["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"])
    assert paths == {"/", "/metrics"}
    for path in paths:
        status, body = get(app, path)
        assert status == "200 OK", path
        assert body, path


def get(app, path: str) -> tuple[str, bytes]:
    """(status, body) of a GET of ``path`` from a WSGI app."""
    answer: dict = {}
    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": path},
                        lambda status, headers, exc_info=None: answer.update(status=status)))
    return answer["status"], body


@pytest.mark.slow
def test_the_containers_command_serves_the_probed_paths(tmp_path):
    """The manifest's args, as they are but for the address (a free loopback port here), on a demo node."""
    args = container()["args"]
    at = args.index("--listen") + 1
    port = free_port()
    args = [*args[:at], f"127.0.0.1:{port}", *args[at + 1:]]
    with serving(serve_env(tmp_path), "--demo", "training-node", *args) as (_, url):
        assert url == f"http://127.0.0.1:{port}"
        for path in {p["httpGet"]["path"] for p in probes().values()}:
            status, _, body = fetch(url + path)
            assert status == 200, path
        assert b"gputui_process_memory_bytes" in fetch(url + "/metrics")[2]


def env_of(entry: dict) -> str:
    """An env entry's value: as given, or the downward API's field as a node would fill it in here."""
    if "value" in entry:
        return entry["value"]
    assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, entry
    return "gpu-node-7"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the simulated libnvidia-ml")
def test_serve_in_the_pod_names_the_node_not_the_pod(tmp_path):
    """A pod's host name is its own (gputui-x7k2p): with the manifest's environment, serve on a driver
    (the simulated libnvidia-ml, as a real one is loaded) names the node, in /metrics and /snapshot."""
    state = tmp_path / "state"
    machine = SimulatedMachine("training-node")
    machine.freeze(60.0)
    native.write_state(state, native.state_text(Nvml(machine)))
    env = {**serve_env(tmp_path), **{e["name"]: env_of(e) for e in container()["env"]},
           "LD_LIBRARY_PATH": str(native.build(tmp_path / "lib").parent), native.STATE_VARIABLE: str(state)}
    with serving(env, "serve", "--listen", f"127.0.0.1:{free_port()}") as (_, url):
        metrics = fetch(url + "/metrics")[2].decode()
        snapshot = json.loads(fetch(url + "/snapshot")[2])
    assert re.search(r'^gputui_info\{[^}]*hostname="gpu-node-7"', metrics, re.M), metrics[:2000]
    assert snapshot["snapshot"]["host"]["hostname"] == "gpu-node-7"
    assert snapshot["snapshot"]["source"] == "nvml"


def test_the_pod_is_told_its_nodes_name():
    (entry,) = [e for e in container()["env"] if e["name"] == HOSTNAME_ENV]
    assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_name_given_is_made_visible_and_an_empty_one_is_the_kernels():
    assert host_name({HOSTNAME_ENV: "gpu-node-7"}) == "gpu-node-7"
    assert host_name({HOSTNAME_ENV: "node\x1b[2J"}) == visible("node\x1b[2J") != "node\x1b[2J"
    assert host_name({HOSTNAME_ENV: "  "}) == host_name({}) == socket.gethostname()


def test_alerts_and_a_machine_without_a_driver_name_the_node_too(monkeypatch):
    monkeypatch.setenv(HOSTNAME_ENV, "gpu-node-7")
    assert NoDriver("no driver").sample().host.hostname == "gpu-node-7"
    deliveries: queue.Queue = queue.Queue()
    channel = Channel("test", deliveries.put, lambda text: None)
    channel.put([AlertEvent("started", Alert("gpu_lost", "gpu GPU-1", "critical", "GPU 1 is lost", gpu="GPU-1"), 1.0)])
    try:
        assert deliveries.get(timeout=10).document()["host"] == "gpu-node-7"
    finally:
        channel.close(wait=5)


# ------------------------------------------------------------------------------------------ what it may do

def test_it_runs_as_no_one_in_particular_and_cannot_gain_rights():
    context = pod()["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] > 0 and context["runAsGroup"] > 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    own = container()["securityContext"]
    assert own["allowPrivilegeEscalation"] is False
    assert own["readOnlyRootFilesystem"] is True
    assert own["privileged"] is False
    assert own["capabilities"] == {"drop": ["ALL"]}
    assert pod()["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod() and "hostIPC" not in pod()


# Ranges that hand out uids on a node (the manifest's comment names them): a uid there may be someone's.
UID_RANGES = [(0, 60000), (61184, 65519), (65534, 65534), (65536, 7274496), (200000, 2000200000),
              (524288, 1879048191), (1000000000, 1999999999), (0x7FFE0000, 0x7FFEFFFF)]


def test_it_runs_as_a_uid_no_one_else_on_the_node_is_likely_to_have():
    """hostPID: a node user or a pod with the same uid could signal or trace it. 10001, the uid many
    images take, was the one before."""
    context = pod()["securityContext"]
    uid, gid = context["runAsUser"], context["runAsGroup"]
    assert uid == gid
    assert not [r for r in UID_RANGES if r[0] <= uid <= r[1]]
    assert uid < 2**31 - 1  # tools that take a uid as signed; Kubernetes' own limit is 2^31-1
    assert str(uid) in MANIFEST.read_text(encoding="utf-8").split("runAsUser:")[0]  # the comment says why
    assert "supplementalGroups" not in context  # no other group (none of root's: the logs stay closed)


def test_every_host_path_is_mounted_read_only():
    volumes = {v["name"]: v for v in pod()["volumes"]}
    mounts = container()["volumeMounts"]
    assert {m["name"] for m in mounts} == set(volumes)
    for mount in mounts:
        assert mount["readOnly"] is True, mount["name"]
        # mounted where the host has it: gputui reads these paths as they are named on the host
        assert volumes[mount["name"]]["hostPath"]["path"] == mount["mountPath"]


def test_it_sees_the_nodes_processes_and_gpus_on_gpu_nodes_only():
    spec = pod()
    assert spec["hostPID"] is True  # NVML's PIDs are the node's: gputui must be in its PID namespace
    assert spec["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in container()["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility", HOSTNAME_ENV: None}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_the_resources_are_bounded():
    resources = container()["resources"]
    assert set(resources) == {"requests", "limits"}
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


class Recorded(HostFiles):
    """The host's files under ``root``, remembering every path asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.asked: list[str] = []
        self.opened: list[str] = []  # the files whose bytes were read

    def read(self, path: str, limit: int) -> bytes:
        self.asked.append(path)
        self.opened.append(path)
        return super().read(path, limit)

    def listdir(self, path: str) -> list[str]:
        self.asked.append(path)
        return super().listdir(path)

    def lstat(self, path: str) -> FileStat:
        self.asked.append(path)
        return super().lstat(path)


def test_the_mounts_are_what_gputui_reads_to_name_a_pod(tmp_path):
    """A pod's process on a fake node: every path the owner reader asks for besides /proc (hostPID) is
    under a mount, except the device plugins' checkpoint, which is root's alone (mode 0600) and left out
    on purpose (the manifest's comment says so)."""
    uid, cid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789", "c" * 64
    (tmp_path / "proc/4242").mkdir(parents=True)
    (tmp_path / "proc/4242/cgroup").write_text(
        f"0::/../../kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
    (tmp_path / f"var/log/pods/research_trainer-0_{uid}/train").mkdir(parents=True)
    (tmp_path / "var/log/containers").mkdir(parents=True)
    (tmp_path / f"var/log/containers/trainer-0_research_train-{cid}.log").touch()
    files = Recorded(tmp_path)
    owner = OwnerReader(files, lambda pid: None, home=str(tmp_path / "home")).read(4242, "1000")
    assert owner.pod is not None
    assert (owner.pod.namespace, owner.pod.name, owner.pod.container) == ("research", "trainer-0", "train")
    mounted = [m["mountPath"] for m in container()["volumeMounts"]]
    outside = {p for p in files.asked
               if not p.startswith("/proc/") and not any(p == m or p.startswith(m + "/") for m in mounted)}
    assert outside == {CHECKPOINT}
    assert CHECKPOINT in MANIFEST.read_text(encoding="utf-8")


def test_the_log_mounts_are_listed_never_read_and_both_are_needed(tmp_path):
    """Only names are read there: the pod's directory, its containers' directories, the container links;
    no log. /var/log/containers alone says which of a pod's containers an ID is (the manifest's comment
    says why it stays mounted)."""
    uid, cid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789", "c" * 64
    (tmp_path / "proc/4242").mkdir(parents=True)
    (tmp_path / "proc/4242/cgroup").write_text(
        f"0::/../../kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
    for name in ("train", "sidecar"):
        (tmp_path / f"var/log/pods/research_trainer-0_{uid}/{name}").mkdir(parents=True)
        (tmp_path / f"var/log/pods/research_trainer-0_{uid}/{name}/0.log").write_text("a log line\n")
    (tmp_path / "var/log/containers").mkdir(parents=True)
    (tmp_path / f"var/log/containers/trainer-0_research_train-{cid}.log").symlink_to(
        f"/var/log/pods/research_trainer-0_{uid}/train/0.log")

    def named(files: Recorded) -> str | None:
        owner = OwnerReader(files, lambda pid: None, home=str(tmp_path / "home")).read(4242, "1000")
        assert owner.pod is not None and (owner.pod.namespace, owner.pod.name) == ("research", "trainer-0")
        return owner.pod.container

    files = Recorded(tmp_path)
    assert named(files) == "train"
    assert not [p for p in files.opened if p.startswith("/var/log/")]
    assert {p for p in files.asked if p.startswith("/var/log/")} >= {"/var/log/pods", "/var/log/containers"}
    (tmp_path / f"var/log/containers/trainer-0_research_train-{cid}.log").unlink()
    assert named(Recorded(tmp_path)) is None  # two containers, and nothing says which


# ------------------------------------------------------------------------------------------ who may ask

def network_policy() -> dict:
    (found,) = [d for d in documents() if d["kind"] == "NetworkPolicy"]
    return found


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector of matchLabels only (the policy's are) selects ``labels``; {} selects all."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def admitted(policy: dict, namespace: dict[str, str], pod_labels: dict[str, str], port: int) -> bool:
    """Whether ``policy`` lets a pod (its namespace's labels, its own) connect to the gputui pod's TCP
    ``port``, as NetworkPolicy's rules read: any rule, any of its peers (namespace and pod selectors
    together), any of its ports (a named port is the container's)."""
    names = {p["name"]: p["containerPort"] for p in container()["ports"]}
    for rule in policy["spec"].get("ingress") or ():
        ports = rule.get("ports")
        if ports is not None and not any(p.get("protocol", "TCP") == "TCP" and names.get(p["port"], p["port"]) == port
                                         for p in ports):
            continue
        for peer in rule.get("from") or [{}]:
            if "ipBlock" in peer:
                continue  # pods are not matched by address here
            in_namespace = selects(peer["namespaceSelector"], namespace) if "namespaceSelector" in peer else \
                namespace.get("kubernetes.io/metadata.name") == policy["metadata"]["namespace"]
            if in_namespace and selects(peer.get("podSelector", {}), pod_labels):
                return True
    return False


PROMETHEUS_NAMESPACE = {"kubernetes.io/metadata.name": "monitoring"}
PROMETHEUS = {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/instance": "k8s", "prometheus": "k8s"}


def test_the_network_policy_covers_the_exporters_pods_both_ways():
    policy = network_policy()
    assert policy["metadata"]["namespace"] == daemonset()["metadata"]["namespace"]
    assert selects(policy["spec"]["podSelector"], daemonset()["spec"]["template"]["metadata"]["labels"])
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["spec"]["egress"] == []  # it asks no one


def test_only_prometheus_may_ask_and_only_on_the_metrics_port():
    policy = network_policy()
    port = listen_port(container()["args"])
    assert admitted(policy, PROMETHEUS_NAMESPACE, PROMETHEUS, port)
    assert not admitted(policy, PROMETHEUS_NAMESPACE, PROMETHEUS, 22)
    assert not admitted(policy, PROMETHEUS_NAMESPACE, {"app.kubernetes.io/name": "grafana"}, port)
    assert not admitted(policy, {"kubernetes.io/metadata.name": "research"}, PROMETHEUS, port)  # a look-alike
    assert not admitted(policy, {"kubernetes.io/metadata.name": "gputui"}, {"app.kubernetes.io/name": "gputui"}, port)


def test_the_policys_documented_labels_are_the_ones_it_selects():
    """The manifest's comment names the labels and namespace to change for another Prometheus."""
    (peer,) = network_policy()["spec"]["ingress"][0]["from"]
    text = MANIFEST.read_text(encoding="utf-8")
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    assert "app.kubernetes.io/name=prometheus" in text
    assert peer["namespaceSelector"]["matchLabels"] == PROMETHEUS_NAMESPACE
    assert 'namespace "monitoring"' in text


# ------------------------------------------------------------------------------------------ basic auth and TLS

AUTH_PATCH = ROOT / "deploy" / "kubernetes" / "gputui-serve-auth.yaml"


def strategic_merge(target: object, patch: object) -> object:
    """``kubectl patch --type strategic`` as this patch uses it: maps merged key by key (null deletes),
    lists of named maps (containers, volumes, mounts) merged by name, other lists replaced."""
    if isinstance(target, dict) and isinstance(patch, dict):
        merged = dict(target)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(target.get(key), value) if key in target else value
        return merged
    if isinstance(target, list) and isinstance(patch, list) and all(isinstance(i, dict) and "name" in i
                                                                     for i in [*target, *patch]):
        by_name = {item["name"]: item for item in target}
        for item in patch:
            by_name[item["name"]] = strategic_merge(by_name[item["name"]], item) if item["name"] in by_name else item
        return list(by_name.values())
    return patch


def with_auth() -> dict:
    """The DaemonSet as ``kubectl patch`` with deploy/kubernetes/gputui-serve-auth.yaml leaves it."""
    patch = yaml.safe_load(AUTH_PATCH.read_text(encoding="utf-8"))
    merged = strategic_merge(daemonset(), patch)
    assert isinstance(merged, dict)
    return merged


def test_the_auth_patch_gives_serve_the_secrets_files():
    pod_spec = with_auth()["spec"]["template"]["spec"]
    (patched,) = pod_spec["containers"]
    options = parse(patched["args"])
    assert options.mode == "serve" and listen_port(patched["args"]) == listen_port(container()["args"])
    given = [options.serve.basic_auth_file, options.serve.tls_cert, options.serve.tls_key]
    (secret,) = [v for v in pod_spec["volumes"] if "secret" in v]
    (mount,) = [m for m in patched["volumeMounts"] if m["name"] == secret["name"]]
    assert mount["readOnly"] is True
    # the files are the Secret's keys, as the patch's kubectl create secret names them
    assert [Path(f).parent for f in given] == [Path(mount["mountPath"])] * 3
    command = patch_command("kubectl -n gputui create secret generic")
    assert command[6] == secret["secret"]["secretName"]
    assert {Path(f).name for f in given} == {w.removeprefix("--from-file=") for w in command[7:]}
    assert set(patch_command("openssl req")) >= {"tls.key", "tls.crt"}  # the files it makes
    patching = patch_command("kubectl -n gputui patch")
    assert patching[4:] == ["daemonset", daemonset()["metadata"]["name"], "--type", "strategic", "--patch-file",
                            str(AUTH_PATCH.relative_to(ROOT))]
    # root's files, read by the pod's group: 0440 and fsGroup
    assert secret["secret"]["defaultMode"] == 0o440
    assert pod_spec["securityContext"]["fsGroup"] == pod()["securityContext"]["runAsGroup"]
    # the host paths are mounted as before
    assert [m for m in patched["volumeMounts"] if m["name"] != secret["name"]] == container()["volumeMounts"]


def test_with_auth_the_probes_knock_on_the_port():
    (patched,) = with_auth()["spec"]["template"]["spec"]["containers"]
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert "httpGet" not in patched[kind], kind  # a path answers 401 without a password
        assert patched[kind]["tcpSocket"] == {"port": "metrics"}, kind
        assert patched[kind]["timeoutSeconds"] == container()[kind]["timeoutSeconds"]  # the rest as it was
    # the annotation-driven scrape job has no password: a job of its own scrapes it
    assert with_auth()["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "false"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("openssl") is None,
                    reason="needs root (to be the pod's uid) and openssl (the certificate)")
def test_the_pods_uid_reads_the_secret_as_the_kubelet_lays_it_out(tmp_path):
    """The Secret's volume as the kubelet makes it (the names links into ..data, the files root's, mode
    0440, group fsGroup): a process with the pod's uid and groups loads the users file and the TLS pair."""
    user, group = pod()["securityContext"]["runAsUser"], with_auth()["spec"]["template"]["spec"][
        "securityContext"]["fsGroup"]
    volume = Path(tempfile.mkdtemp(prefix="gputui-secret-"))
    try:
        volume.chmod(0o755)
        data = volume / "..2024_01_01_00_00_00.000000001"
        data.mkdir(mode=0o755)
        subprocess.run(patch_command("openssl req"), cwd=data, check=True, capture_output=True, timeout=60)
        (data / "users").write_text(password_line("prometheus", "correct horse") + "\n")
        for name in ("users", "tls.crt", "tls.key"):
            os.chown(data / name, 0, group)
            (data / name).chmod(0o440)
            (volume / name).symlink_to(f"..data/{name}")
        (volume / "..data").symlink_to(data.name)
        assert as_user(user, group, lambda: (Users.load(volume / "users"),
                                             tls_context(str(volume / "tls.crt"), str(volume / "tls.key")))) == ""
        # the same files as the pod's uid without fsGroup's group: not readable (the patch needs fsGroup)
        assert "Permission denied" in as_user(user, user + 1, lambda: Users.load(volume / "users"))
    finally:
        shutil.rmtree(volume)


def patch_command(start: str) -> list[str]:
    """The command the auth patch's comment gives that begins with ``start``, its lines joined."""
    lines = [line.removeprefix("#").strip() for line in AUTH_PATCH.read_text(encoding="utf-8").splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith(start))
    text = lines[at]
    while text.endswith("\\"):
        at += 1
        text = text[:-1] + " " + lines[at]
    return shlex.split(text, comments=True)


def as_user(uid: int, gid: int, call) -> str:
    """``call()`` in a child process with ``uid``, ``gid`` and no other group: "" when it returned,
    else its error."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(reader)
        message = ""
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            call()
        except BaseException as exc:  # noqa: BLE001 - every failure is the answer
            message = f"{type(exc).__name__}: {exc}"
        os.write(writer, message.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        answer = pipe.read().decode()
    os.waitpid(child, 0)
    return answer


# ------------------------------------------------------------------------------------------ pod security

def test_the_pod_breaks_only_the_controls_hostpid_and_host_paths_break():
    """Enforced at privileged (nothing less admits hostPID); baseline and restricted would refuse it for
    those two and, at restricted, the host paths' volume type: nothing else, with basic auth too."""
    for spec in (pod(), with_auth()["spec"]["template"]["spec"]):
        assert violations(spec, "baseline") == {"host namespaces", "hostPath volumes"}
        assert violations(spec, "restricted") == {"host namespaces", "hostPath volumes", "restricted volume types"}


@pytest.mark.parametrize("change, controls", [
    (lambda spec, c: spec.update(hostNetwork=True), ()),  # one more host namespace: the same control
    (lambda spec, c: c["securityContext"].update(privileged=True), ("privileged",)),
    (lambda spec, c: c["securityContext"]["capabilities"].update(add=["SYS_PTRACE"]),
     ("non-default capabilities", "unrestricted capabilities")),
    (lambda spec, c: c["ports"][0].update(hostPort=9403), ("hostPort",)),
    (lambda spec, c: spec["securityContext"].update(seccompProfile={"type": "Unconfined"}), ("seccompProfile",)),
    (lambda spec, c: c["securityContext"].update(allowPrivilegeEscalation=True),
     ("allowPrivilegeEscalation != false",)),
    (lambda spec, c: spec["securityContext"].pop("runAsNonRoot"), ("runAsNonRoot != true",)),
    (lambda spec, c: c["securityContext"].update(runAsUser=0), ("runAsUser=0",)),
    (lambda spec, c: c["securityContext"]["capabilities"].pop("drop"), ("unrestricted capabilities",)),
    (lambda spec, c: spec["volumes"].append({"name": "tmp", "emptyDir": {}}), ()),  # allowed at restricted
])
def test_a_change_for_the_worse_is_a_new_violation(change, controls):
    """The check the pod passes can fail: each of these would be said by the namespace's warn label."""
    spec = copy.deepcopy(pod())
    change(spec, spec["containers"][0])
    assert violations(spec, "restricted") == {"host namespaces", "hostPath volumes", "restricted volume types",
                                              *controls}


def test_its_namespace_enforces_the_least_level_that_admits_it_and_warns_at_the_strictest():
    (namespace,) = [d for d in documents() if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert namespace["metadata"]["name"] == daemonset()["metadata"]["namespace"]
    assert violations(pod(), "baseline")  # so privileged, the only level left
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
    # the comment quotes what kubectl apply will warn of: those controls, no other
    text = MANIFEST.read_text(encoding="utf-8")
    for control in violations(pod(), "restricted"):
        assert control in text


# ------------------------------------------------------------------------------------------ the image

def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's (INSTRUCTION, arguments), continuation lines joined, comments left out."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last:]


def test_the_image_installs_the_wheel_built_from_this_source():
    steps = instructions()
    froms = [rest for keyword, rest in steps if keyword == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS wheel")
    assert all(re.match(r"python:\$\{PYTHON\}-slim\b", f) for f in froms)
    assert ("RUN", "python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .") in steps
    final = final_stage()
    assert ("COPY", "--from=wheel /dist /dist") in final
    runs = [rest for keyword, rest in final if keyword == "RUN"]
    assert any(re.search(r"pip install .*/dist/gputui-\*\.whl", run) for run in runs), runs


def test_the_image_runs_gputui_serve_as_the_manifests_non_root_user():
    final = dict(final_stage())  # one of each in the final stage
    user, group = final["USER"].split(":")
    assert int(user) > 0 and int(group) > 0
    assert (int(user), int(group)) == (pod()["securityContext"]["runAsUser"], pod()["securityContext"]["runAsGroup"])
    entrypoint, command = json.loads(final["ENTRYPOINT"]), json.loads(final["CMD"])
    assert entrypoint == container()["command"]
    assert int(final["EXPOSE"]) == listen_port(command) == listen_port(container()["args"])


def test_the_build_context_keeps_what_the_wheel_is_built_from():
    ignored = {line.strip() for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")}
    assert not ignored & {"gputui", "pyproject.toml", "README.md", "."}
    assert ".git" in ignored


def test_the_build_command_tags_the_image_the_manifest_runs():
    """The build command the Dockerfile's header gives tags the image the manifest names."""
    (line,) = [line for line in DOCKERFILE.read_text(encoding="utf-8").splitlines() if "docker build" in line]
    words = shlex.split(line.lstrip("# "))
    tag = words[words.index("-t") + 1]
    assert tag.endswith("/" + container()["image"])


# ------------------------------------------------------------------------------------------ systemd (Slurm nodes)

UNIT = ROOT / "deploy" / "systemd" / "gputui-serve.service"


def unit() -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None, strict=True, comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    return {section: dict(parser[section]) for section in parser.sections()}


def test_the_unit_runs_gputui_serve_on_the_manifests_port():
    program, *args = shlex.split(unit()["Service"]["ExecStart"])
    assert program == "/usr/local/bin/gputui"  # where `sudo pip install .` puts it
    assert listen_port(args) == listen_port(container()["args"])
    assert parse_address(parse(args).serve.listen).host == "0.0.0.0"


def test_the_unit_is_root_with_two_powers_and_writes_nothing():
    service = unit()["Service"]
    assert "User" not in service and "DynamicUser" not in service  # root: every user's probes
    assert set(service["CapabilityBoundingSet"].split()) == {"CAP_SYS_PTRACE", "CAP_DAC_OVERRIDE"}
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    # read-only, not yes: "yes" would hide /run/user, where the probes' sockets are too
    assert service["ProtectHome"] == "read-only"
    # NVML needs /dev/nvidia*; the probes' sockets are in /tmp and /run/user; every process must be seen
    left_out = {"PrivateDevices", "PrivateTmp", "ProtectProc", "ProcSubset", "PrivatePIDs", "PrivateUsers"}
    assert not left_out & set(service)


def test_the_unit_allows_the_nvidia_devices_only():
    service = unit()["Service"]
    assert service["DevicePolicy"] == "closed"  # /dev/null, /dev/urandom ... and:
    assert service["DeviceAllow"] == "char-nvidia* rw"  # nvidiactl and nvidiaN are opened read-write


def test_the_unit_allows_the_address_families_serve_uses():
    # TCP to listen on, Unix sockets to reach the probes (gputui/link/paths.py)
    assert set(unit()["Service"]["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
# systemd-analyze security's score of the unit: 6.5 MEDIUM before issue 44; lower is safer, and a change
# that raises it is a change to look at (systemd's bands: under 5.0 is "OK")
UNIT_EXPOSURE = 2.9


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="no systemd-analyze here (apt-get install systemd)")
def test_systemd_rates_the_unit_ok():
    """``systemd-analyze security --offline=yes`` reads the unit as it is, without a running systemd."""
    result = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", str(UNIT)],
                            capture_output=True, text=True, timeout=60)
    if "--offline" in result.stderr and "unrecognized" in result.stderr:
        pytest.skip("systemd-analyze before 250 has no --offline")
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", result.stdout)
    assert found is not None, result.stdout[-2000:] + result.stderr
    assert float(found[1]) <= UNIT_EXPOSURE and found[2] == "OK", result.stdout


@pytest.fixture
def env(tmp_path):
    return serve_env(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(SYSTEMD_ANALYZE is None or shutil.which("cc") is None or os.geteuid() != 0,
                    reason="needs systemd-analyze (the system call groups), cc (the simulated libnvidia-ml) and root")
def test_serve_runs_under_the_units_restrictions(env, tmp_path, probed_process):
    """The unit's ExecStart, as it is but for the address, under the unit's own system call filter, address
    families, write-or-execute memory, personality lock and two capabilities (tests/unit_sandbox.py), on
    a driver (the simulated libnvidia-ml, loaded through ctypes as a real one is), with a users file
    (scrypt) and a probed job (its Unix socket): every part of the exporter answers."""
    state = tmp_path / "state"
    machine = SimulatedMachine("training-node")
    machine.freeze(60.0)
    native.write_state(state, native.state_text(Nvml(machine)))
    users = tmp_path / "users"
    users.write_text(password_line("prometheus", "correct horse") + "\n")
    users.chmod(0o600)
    program, *args = shlex.split(unit()["Service"]["ExecStart"])
    at = args.index("--listen") + 1
    args[at] = f"127.0.0.1:{free_port()}"
    env.update(LD_LIBRARY_PATH=str(native.build(tmp_path / "lib").parent), **{native.STATE_VARIABLE: str(state)})
    command = [sys.executable, str(ROOT / "tests" / "unit_sandbox.py"), str(UNIT), "--",
               sys.executable, "-m", "gputui", *args, "--basic-auth-file", str(users)]
    with sandboxed_serve(command, env) as (proc, url):
        auth = ("prometheus", "correct horse")
        status, _, body = fetch(url + "/metrics", auth=auth)
        metrics = body.decode()
        snapshot = json.loads(fetch(url + "/snapshot", auth=auth)[2])
        assert fetch(url + "/metrics")[0] == 401
        capabilities = _status_field(proc.pid, "CapBnd")
        seccomp = _status_field(proc.pid, "Seccomp_filters")
    assert status == 200
    assert snapshot["snapshot"]["source"] == "nvml" and len(snapshot["snapshot"]["devices"]) == 8
    assert metrics.count("gputui_device_memory_used_bytes{") == 8
    assert f'gputui_probe_steps_total{{device="",pid="{probed_process.pid}",uuid=""}} 7.0' in metrics
    assert int(capabilities, 16) == (1 << 1) | (1 << 19)  # CAP_DAC_OVERRIDE, CAP_SYS_PTRACE
    assert int(seccomp) == 4


@contextmanager
def sandboxed_serve(command: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, str]]:
    """``command`` (gputui serve under tests/unit_sandbox.py, which execs it: the same process);
    yields (process, base URL); stopped with SIGTERM, which must end it with 143."""
    proc = subprocess.Popen(command, cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline()  # "gputui serve: http://127.0.0.1:PORT/metrics and /snapshot, ..."
        assert line.startswith("gputui serve: http"), line + proc.stderr.read()
        yield proc, line.split()[2].removesuffix("/metrics")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == 143, proc.returncode


def _status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split()[1]
    raise AssertionError(f"no {name} in /proc/{pid}/status")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None or os.geteuid() != 0, reason="needs systemd-analyze and root")
def test_the_sandbox_enforces_what_the_unit_says():
    """The restrictions serve ran under are real: each refuses what the unit forbids."""
    probe = """
import ctypes, mmap, os, socket
def refused(call):
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0
print(refused(lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE | mmap.PROT_EXEC)),
      refused(lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE | mmap.PROT_READ)),
      refused(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)),
      refused(lambda: socket.socket(socket.AF_INET6).close()),
      refused(lambda: os.chroot("/")),
      ctypes.CDLL(None, use_errno=True).personality(0x0040000))
"""
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "unit_sandbox.py"), str(UNIT), "--",
                             sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == [str(errno.EPERM), "0", str(errno.EAFNOSUPPORT), "0", str(errno.EPERM), "-1"], \
        result.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here to verify the unit")
def test_systemd_finds_nothing_wrong_in_the_unit(tmp_path):
    """systemd-analyze verify, with ExecStart pointed at an executable that exists here (it checks)."""
    program = tmp_path / "gputui"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    checked = tmp_path / UNIT.name
    checked.write_text(UNIT.read_text(encoding="utf-8").replace("/usr/local/bin/gputui", str(program)))
    result = subprocess.run(["systemd-analyze", "verify", str(checked)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
