"""What hostile owners' input costs, before and after a change, on real files and real processes.

Two cases, each run for every source tree given (this checkout, and each ``--baseline`` git ref
exported to a temporary folder), in a Python of its own with that tree first on its path:

- ``pods``: a HostFiles root holding ``--processes`` pod processes' /proc/PID/cgroup, a
  /var/log/pods of ``--entries`` directories (100,000) and a kubelet checkpoint of 4 MiB: the seconds
  OwnerReader.owners() takes for the first sample (what ``--once`` pays), and for a sample of as
  many new processes (pids recycled: read again) with the files unchanged; the memory the reader
  keeps after a sample, and its peak (tracemalloc).
- ``serve``: ``gputui serve`` on the simulated libnvidia-ml.so.1 (gputui/collect/sim/native, built
  with cc) whose GPU processes are ``--processes`` real processes of uid 65534 carrying a
  131,000-byte SLURM_JOB_ID and TORCHELASTIC_RUN_ID: the bytes of /metrics and /snapshot and the
  exporter's resident memory (VmRSS, and VmHWM, its peak) after a few samples.

    python bench/bench_owners.py --baseline HEAD~3
    python bench/bench_owners.py pods --entries 100000 --processes 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUGE = 131_000  # bytes of one environment value: under the kernel's 128 KiB a string (MAX_ARG_STRLEN)
NOBODY = 65534

# Run inside the measured tree's Python: only the API both old and new trees have.
PODS_CHILD = r"""
import gc, json, sys, time, tracemalloc
from gputui.collect.owners import HostFiles, OwnerReader
root, pids = sys.argv[1], json.loads(sys.argv[2])
reader = OwnerReader(HostFiles(root), lambda pid: None, home="/nonexistent")
began = time.perf_counter()
first = reader.owners({pid: (1.0, "1000") for pid in pids})
cold = time.perf_counter() - began
began = time.perf_counter()
reader.owners({pid: (2.0, "1000") for pid in pids})
warm = time.perf_counter() - began
named = sum(1 for o in first.values() if o.pod is not None and o.pod.name is not None)
gc.collect()
tracemalloc.start()  # a reader of its own: what one sample keeps, and its peak
reader = OwnerReader(HostFiles(root), lambda pid: None, home="/nonexistent")
reader.owners({pid: (1.0, "1000") for pid in pids})
gc.collect()
kept, peak = tracemalloc.get_traced_memory()
print(json.dumps({"cold": cold, "again": warm, "named": named, "kept": kept, "peak": peak}))
"""

def export(ref: str, work: Path) -> Path:
    """The tree of git ``ref`` in a folder of its own under ``work``."""
    where = work / ref.replace("/", "_").replace("~", "-")
    where.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def pod_root(where: Path, entries: int, processes: int) -> list[int]:
    """A fake machine under ``where``: pod processes, ``entries`` log directories, a 4 MiB checkpoint."""
    pods = where / "var/log/pods"
    pods.mkdir(parents=True)
    uids = [f"{i:08x}-0000-4000-8000-{i:012x}" for i in range(entries)]
    for i, uid in enumerate(uids):
        os.mkdir(pods / f"ns{i % 50}_pod-{i}_{uid}")
    (where / "var/log/containers").mkdir(parents=True)
    entry = {"PodUID": "", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-x"]}}
    listed, size = [], 0
    for uid in uids:  # entries until the file is just under 4 MiB, the most gputui reads of it
        one = {**entry, "PodUID": uid}
        size += len(json.dumps(one)) + 2
        if size >= (4 << 20) - 1024:
            break
        listed.append(one)
    checkpoint = where / "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    checkpoint.parent.mkdir(parents=True)
    text = json.dumps({"Data": {"PodDeviceEntries": listed, "RegisteredDevices": {}}, "Checksum": 0})
    checkpoint.write_text(text)
    pids = []
    for n in range(processes):
        pid = 4000 + n
        uid = uids[(n * 7919) % entries].replace("-", "_")
        cgroup = where / f"proc/{pid}/cgroup"
        cgroup.parent.mkdir(parents=True)
        cgroup.write_text(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
                          f"cri-containerd-{'ab' * 32}.scope\n")
        pids.append(pid)
    return pids


def pods_case(trees: dict[str, Path], entries: int, processes: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="gputui-bench-owners-"))
    try:
        made = time.perf_counter()
        pids = pod_root(work, entries, processes)
        checkpoint = work / "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
        print(f"pods: {processes} pod processes, {entries} entries in /var/log/pods, a "
              f"{checkpoint.stat().st_size / 2**20:.1f} MiB checkpoint (made in {time.perf_counter() - made:.1f} s)")
        for name, tree in trees.items():
            # cwd: `python -c` puts it first on the path, before PYTHONPATH and the editable install
            done = subprocess.run([sys.executable, "-c", PODS_CHILD, str(work), json.dumps(pids)], check=True,
                                  capture_output=True, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
            r = json.loads(done.stdout)
            print(f"  {name:10} first sample {r['cold']:7.3f} s   {processes} new processes {r['again']:7.3f} s   "
                  f"pods named {r['named']}/{processes}   kept {r['kept'] / 2**20:5.2f} MiB "
                  f"(peak {r['peak'] / 2**20:5.1f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def hostile_children(count: int) -> list[subprocess.Popen]:
    """Real processes of uid 65534 whose environments claim a job with huge values."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "4" * HUGE, "SLURM_STEP_ID": "0",
           "TORCHELASTIC_RUN_ID": "r" * HUGE}

    def drop() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    return [subprocess.Popen(["sleep", "infinity"], env=env, preexec_fn=drop, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL) for _ in range(count)]


def serve_case(trees: dict[str, Path], processes: int, seconds: float) -> None:
    sys.path.insert(0, str(ROOT))
    from gputui.collect.sim import native
    from gputui.collect.sim.feed import listed_pids
    from gputui.collect.sim.library import Nvml
    from gputui.collect.sim.machine import SimulatedMachine
    from gputui.link.paths import DIR_ENV

    work = Path(tempfile.mkdtemp(prefix="gputui-bench-owners-"))
    children: list[subprocess.Popen] = []
    stop = threading.Event()
    try:
        library = native.build(work / "lib").parent
        machine = SimulatedMachine("training-node", processes=processes, start=60.0)
        nv = Nvml(machine)
        listed = sorted(listed_pids(machine))
        children = hostile_children(len(listed))
        pids = {sim: child.pid for sim, child in zip(listed, children)}
        state = work / "state"

        def feed() -> None:
            while not stop.is_set():
                native.write_state(state, native.state_text(nv, pids=pids, stamp_us=time.time_ns() // 1000))
                stop.wait(0.5)

        native.write_state(state, native.state_text(nv, pids=pids, stamp_us=time.time_ns() // 1000))
        threading.Thread(target=feed, daemon=True).start()
        probes = work / "probes"
        probes.mkdir(mode=0o700)
        print(f"serve: {len(listed)} GPU processes of uid {NOBODY}, each with a {HUGE}-byte SLURM_JOB_ID and "
              f"TORCHELASTIC_RUN_ID; measured after {seconds:g} s at --interval 1")
        for name, tree in trees.items():
            port = free_port()
            env = {**os.environ, "PYTHONPATH": str(tree), "LD_LIBRARY_PATH": str(library),
                   native.STATE_VARIABLE: str(state), DIR_ENV: str(probes)}
            proc = subprocess.Popen([sys.executable, "-m", "gputui", "serve", "--listen", f"127.0.0.1:{port}",
                                     "--interval", "1"], env=env, cwd=work, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            try:
                url = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 60
                while True:
                    try:
                        urllib.request.urlopen(url + "/metrics", timeout=30).read()
                        break
                    except OSError:
                        if proc.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"{name}: serve did not answer: "
                                               f"{proc.stderr.read().decode()[-2000:]}") from None
                        time.sleep(0.2)
                time.sleep(seconds)
                metrics = urllib.request.urlopen(url + "/metrics", timeout=60).read()
                snapshot = urllib.request.urlopen(url + "/snapshot", timeout=60).read()
                print(f"  {name:10} /metrics {len(metrics) / 1e6:8.3f} MB   /snapshot {len(snapshot) / 1e6:8.3f} MB   "
                      f"RSS {status_mb(proc.pid, 'VmRSS'):6.1f} MB (peak {status_mb(proc.pid, 'VmHWM'):6.1f})")
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    finally:
        stop.set()
        for child in children:
            child.terminate()
        for child in children:
            child.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", choices=("pods", "serve", "both"), default="both")
    parser.add_argument("--baseline", action="append", default=[], help="git ref to measure as well (repeatable)")
    parser.add_argument("--entries", type=int, default=100_000, help="directories in /var/log/pods")
    parser.add_argument("--processes", type=int, help="processes (pods: 8, serve: 20)")
    parser.add_argument("--seconds", type=float, default=8.0, help="serve: seconds of sampling before measuring")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gputui-bench-trees-"))
    try:
        trees = {ref: export(ref, work) for ref in args.baseline}
        trees["checkout"] = ROOT
        if args.case in ("pods", "both"):
            pods_case(trees, args.entries, args.processes or 8)
        if args.case in ("serve", "both"):
            if os.geteuid() != 0:
                print("serve: needs root (its processes run as uid 65534)")
            elif shutil.which("cc") is None:
                print("serve: needs cc to build the simulated libnvidia-ml.so.1")
            else:
                serve_case(trees, args.processes or 20, args.seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
