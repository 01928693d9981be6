"""The simulator as a real libnvidia-ml.so.1: what a program loading it reads is what --demo reads.

Each check runs pynvml (or gputui) in a subprocess, because loading the library into this process
would replace the Python simulator the other tests patch into pynvml.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote

import pytest

from gputui.collect.sim import SCENARIOS, SimulatedMachine, native
from gputui.collect.sim.feed import listed_pids, parse_args
from gputui.collect.sim.library import Nvml

needs_cc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")

# Every call the library answers, on every device and MIG device, errors included (as codes).
QUERY = textwrap.dedent("""
    import ctypes, json, sys
    import pynvml as N

    def ask(f, *a):
        try:
            v = f(*a)
        except N.NVMLError as e:
            return {"error": e.value}
        if isinstance(v, ctypes.c_uint):  # pynvml hands some answers back as a c_uint
            return v.value
        if isinstance(v, (list, tuple)):
            return [ask(lambda x=x: x) for x in v]
        if hasattr(v, "_fields_"):
            return {k: getattr(v, k) for k, _ in v._fields_ if not k.startswith("reserved")}
        if isinstance(v, N.nvmlFriendlyObject):
            return dict(vars(v))
        return v

    if sys.argv[1] == "sim":
        from gputui.collect.sim import install
        install(sys.argv[2], processes=int(sys.argv[4]) if len(sys.argv) > 4 else None).freeze(float(sys.argv[3]))
    N.nvmlInit()
    out = {"driver": ask(N.nvmlSystemGetDriverVersion), "nvml": ask(N.nvmlSystemGetNVMLVersion),
           "cuda": ask(N.nvmlSystemGetCudaDriverVersion), "count": ask(N.nvmlDeviceGetCount), "devices": []}
    names = {}

    def device(h):
        d = {}
        for f in ("Name", "UUID", "Index", "MinorNumber", "PersistenceMode", "ComputeMode", "FanSpeed",
                  "PowerUsage", "EnforcedPowerLimit", "PowerManagementLimit", "PerformanceState",
                  "CurrPcieLinkGeneration", "MaxPcieLinkGeneration", "CurrPcieLinkWidth", "MaxPcieLinkWidth",
                  "PciInfo", "MigMode", "MaxMigDeviceCount", "IsMigDeviceHandle", "GpuInstanceId",
                  "ComputeInstanceId", "UtilizationRates", "EncoderUtilization", "DecoderUtilization",
                  "CurrentClocksEventReasons", "CurrentClocksThrottleReasons", "CudaComputeCapability",
                  "MemoryInfo", "DisplayMode", "DisplayActive"):
            d[f] = ask(getattr(N, "nvmlDevice" + ("" if f.startswith("Is") else "Get") + f), h)
        d["MemoryInfo_v2"] = ask(N.nvmlDeviceGetMemoryInfo, h, N.nvmlMemory_v2)
        if hasattr(N, "nvmlDeviceGetTemperatureV"):  # nvidia-ml-py 12.570 and newer
            d["TemperatureV"] = ask(N.nvmlDeviceGetTemperatureV, h, 0)
        for k in range(5):
            d[f"Clock{k}"] = ask(N.nvmlDeviceGetClockInfo, h, k)
            d[f"MaxClock{k}"] = ask(N.nvmlDeviceGetMaxClockInfo, h, k)
        for k in range(9):
            d[f"Threshold{k}"] = ask(N.nvmlDeviceGetTemperatureThreshold, h, k)
        for k in range(3):
            d[f"Temperature{k}"] = ask(N.nvmlDeviceGetTemperature, h, k)
            d[f"Pcie{k}"] = ask(N.nvmlDeviceGetPcieThroughput, h, k)
            d[f"Ecc{k}"] = ask(N.nvmlDeviceGetTotalEccErrors, h, k, 0)
        for kind in ("Compute", "Graphics"):
            for v in ("_v3", "_v2"):
                d[kind + v] = ask(getattr(N, f"nvmlDeviceGet{kind}RunningProcesses{v}"), h)
            fn = N._nvmlGetFunctionPointer(f"nvmlDeviceGet{kind}RunningProcesses")
            n = ctypes.c_uint(0)
            d[kind + "_v1_size"] = [fn(h, ctypes.byref(n), None), n.value]
        d["ProcessUtilization"] = ask(N.nvmlDeviceGetProcessUtilization, h, 0)
        d["ProcessesUtilizationInfo"] = ask(N.nvmlDeviceGetProcessesUtilizationInfo, h, 0)
        for p in d["Compute_v3"] if isinstance(d["Compute_v3"], list) else []:
            names[p["pid"]] = ask(N.nvmlSystemGetProcessName, p["pid"])
        d["mig"] = []
        for i in range(8):
            m = ask(N.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if isinstance(m, dict):
                d["mig"].append(m)
            else:
                d["mig"].append(device(m))
                d["mig"][-1]["parent"] = ask(N.nvmlDeviceGetIndex, N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m))
        return d

    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        d = device(h)
        if isinstance(d["UUID"], str):
            d["by_uuid"] = ask(lambda: N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(d["UUID"])))
        if "busId" in d["PciInfo"]:
            d["by_bus"] = ask(lambda: N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(d["PciInfo"]["busId"])))
        out["devices"].append(d)
    out["names"] = sorted(names.items())
    out["unknown_uuid"] = ask(N.nvmlDeviceGetHandleByUUID, "GPU-nothing")
    out["bad_index"] = ask(N.nvmlDeviceGetHandleByIndex, 99)
    print(json.dumps(out, sort_keys=True, default=repr))
""")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    return native.build(tmp_path_factory.mktemp("nvmlsim"))


def _env(library: Path, state: Path | None) -> dict:
    env = dict(os.environ, LD_LIBRARY_PATH=str(library.parent))
    env.pop(native.STATE_VARIABLE, None)
    if state is not None:
        env[native.STATE_VARIABLE] = str(state)
    return env


def _run(args: list[str], env: dict | None = None, timeout: float = 120) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _write(path: Path, scenario: str, t: float, processes: int | None = None) -> None:
    machine = SimulatedMachine(scenario, processes=processes)
    machine.freeze(t)
    native.write_state(path, native.state_text(Nvml(machine)))


@needs_cc
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_answer_matches_the_python_simulator(library, tmp_path, scenario):
    state = tmp_path / "state"
    _write(state, scenario, 75.0)
    native_answers = json.loads(_run([sys.executable, "-c", QUERY, "native"], _env(library, state)))
    python_answers = json.loads(_run([sys.executable, "-c", QUERY, "sim", scenario, "75.0"]))
    assert native_answers == python_answers
    # and the comparison saw something: devices with names, processes with pids
    assert native_answers["count"] == len(native_answers["devices"]) > 0
    assert sum(d["Compute_v1_size"][1] for d in native_answers["devices"]) > 0


@needs_cc
def test_many_processes_and_mig_devices_survive_the_round_trip(library, tmp_path):
    state = tmp_path / "state"
    _write(state, "mig", 30.0, processes=300)
    native_answers = json.loads(_run([sys.executable, "-c", QUERY, "native"], _env(library, state)))
    python_answers = json.loads(_run([sys.executable, "-c", QUERY, "sim", "mig", "30.0", "300"]))
    assert native_answers == python_answers
    migs = [m for d in native_answers["devices"] for m in d["mig"] if "error" not in m]
    assert migs and all(m["IsMigDeviceHandle"] == 1 and m["FanSpeed"] == {"error": 3} for m in migs)
    machine = SimulatedMachine("mig", processes=300)
    machine.freeze(30.0)
    assert native.state_pids(state) == sorted(listed_pids(machine))
    assert len(native.state_pids(state)) > 250


@needs_cc
def test_gputui_without_demo_reads_the_demo_machine(library, tmp_path):
    """The collector, unchanged, through a dlopen'ed library: same GPUs and processes as --demo."""
    state = tmp_path / "state"
    _write(state, "training-node", 60.0)
    through_library = json.loads(_run([sys.executable, "-m", "gputui", "--json"], _env(library, state)))
    demo = json.loads(_run([sys.executable, "-m", "gputui", "--json", "--demo", "training-node"]))

    def devices(snapshot):
        return [(d["index"], d["name"], d["uuid"], d["pci_bus_id"], d["memory_total"], d["power_limit"])
                for d in snapshot["snapshot"]["devices"]]

    def processes(snapshot):
        return sorted((p["pid"], p["device_index"], p["gpu_memory"] > 0) for p in snapshot["snapshot"]["processes"])

    assert devices(through_library) == devices(demo)
    assert len(devices(demo)) == 8
    assert processes(through_library) == processes(demo)
    assert through_library["snapshot"]["driver"] == demo["snapshot"]["driver"]


@needs_cc
def test_no_state_or_a_bad_one_is_no_driver(library, tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_text("gputui-nvmlsim 1\ndevice zero\nend\n")
    half = tmp_path / "half"
    _write(half, "workstation", 0.0)
    half.write_text(half.read_text().replace("\nend\n", "\n"))  # cut short: no end line
    script = "import pynvml as N\ntry:\n N.nvmlInit()\nexcept N.NVMLError as e: print(e.value, e)\n"
    for state in (None, tmp_path / "absent", garbage, half):
        assert _run([sys.executable, "-c", script], _env(library, state)).strip() == "9 Driver Not Loaded"


@needs_cc
def test_a_change_is_picked_up_and_a_bad_one_keeps_the_last_good(library, tmp_path):
    state, four, one = tmp_path / "state", tmp_path / "four", tmp_path / "one"
    _write(four, "training-node", 60.0, processes=4)
    _write(one, "training-node", 60.0, processes=1)
    shutil.copy(four, state)
    script = textwrap.dedent(f"""
        import os, shutil, time, pynvml as N
        N.nvmlInit()
        def listed():
            return sum(len(N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(i)))
                       for i in range(N.nvmlDeviceGetCount()))
        seen = [listed()]
        shutil.copy({str(one)!r}, {str(state)!r} + ".new"); os.replace({str(state)!r} + ".new", {str(state)!r})
        time.sleep(0.25)
        seen.append(listed())
        with open({str(state)!r} + ".new", "w") as f:
            f.write("not a state file")
        os.replace({str(state)!r} + ".new", {str(state)!r})
        time.sleep(0.25)
        seen.append(listed())
        print(seen)
    """)
    assert _run([sys.executable, "-c", script], _env(library, state)).strip() == "[4, 1, 1]"


@needs_cc
def test_threads_calling_while_the_state_changes(library, tmp_path):
    """The driver's lock: 4 threads asking flat out while the file is replaced 40 times."""
    state, a, b = tmp_path / "state", tmp_path / "a", tmp_path / "b"
    _write(a, "training-node", 60.0, processes=200)
    _write(b, "training-node", 90.0, processes=20)
    shutil.copy(a, state)
    script = textwrap.dedent(f"""
        import os, shutil, threading, time, pynvml as N
        N.nvmlInit()
        counts, stop = set(), False
        def ask():
            while not stop:
                h = N.nvmlDeviceGetHandleByIndex(3)
                counts.add(len(N.nvmlDeviceGetComputeRunningProcesses(h)))
                N.nvmlDeviceGetMemoryInfo(h)
                N.nvmlDeviceGetProcessUtilization(h, 0)
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads: t.start()
        for i in range(40):
            shutil.copy([{str(a)!r}, {str(b)!r}][i % 2], {str(state)!r} + ".new")
            os.replace({str(state)!r} + ".new", {str(state)!r})
            time.sleep(0.11)
        stop = True
        for t in threads: t.join()
        print(sorted(counts))
    """)
    counts = json.loads(_run([sys.executable, "-c", script], _env(library, state)))
    assert len(counts) == 2  # both states were served, and nothing crashed


@needs_cc
def test_rebuilt_only_when_the_source_changes(library):
    before = library.stat().st_mtime_ns
    assert native.build(library.parent) == library
    assert library.stat().st_mtime_ns == before


def test_no_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-here")
    with pytest.raises(RuntimeError, match="needs a C compiler"):
        native.build(tmp_path)


def test_texts_travel_as_one_token():
    for text in ("NVIDIA H100 80GB HBM3", "100%", "evil\x1b[2Jname\nnext", "naïve"):
        token = native.escape(text)
        assert " " not in token and "\n" not in token and token.isascii()
        assert unquote(token) == text
    assert native.escape("a b%c") == "a%20b%25c"


def test_state_pids_lists_every_process_once(tmp_path):
    state = tmp_path / "state"
    machine = SimulatedMachine("training-node")
    machine.freeze(60.0)
    text = native.state_text(Nvml(machine), pids={48231: 7})
    native.write_state(state, text)
    pids = native.state_pids(state)
    assert 7 in pids and 48231 not in pids
    assert pids == sorted(set(pids)) and len(pids) == 10
    assert text.startswith("gputui-nvmlsim 1\n") and text.endswith("\nend\n")


def test_feed_refuses_bad_arguments(tmp_path, capsys):
    for argv, problem in (
        (["training-node", "--state", str(tmp_path / "s"), "--once", "--spawn"], "--spawn needs"),
        (["training-node", "--state", str(tmp_path / "no" / "s")], "no such directory"),
        (["training-node", "--state", str(tmp_path / "s"), "--interval", "0"], "--interval must be"),
        (["nowhere", "--state", str(tmp_path / "s")], "invalid choice"),
    ):
        with pytest.raises(SystemExit) as exit:
            parse_args(argv)
        assert exit.value.code == 2
        assert problem in capsys.readouterr().err


def test_feed_stands_real_processes_in_for_the_simulated_ones(tmp_path):
    import psutil

    state = tmp_path / "state"
    feed = subprocess.Popen(
        [sys.executable, "-m", "gputui.collect.sim.feed", "training-node", "--state", str(state),
         "--processes", "5", "--spawn", "--interval", "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        announced = feed.stdout.readline()
        assert announced == f"state written to {state}: 8 GPUs, 5 processes\n"
        pids = native.state_pids(state)
        children = {c.pid: c for c in psutil.Process(feed.pid).children()}
        assert len(pids) == 5 and set(pids) <= set(children)  # every listed pid is a real child
        assert all(children[p].name() == "sleep" for p in pids)
    finally:
        feed.terminate()
        assert feed.wait(timeout=30) == 0
    gone, alive = psutil.wait_procs([children[p] for p in pids], timeout=5)
    assert not alive  # they went with the feeder


def test_feed_once_writes_the_simulated_pids(tmp_path):
    state = tmp_path / "state"
    out = _run([sys.executable, "-m", "gputui.collect.sim.feed", "leaky", "--state", str(state), "--once"])
    machine = SimulatedMachine("leaky")
    machine.freeze(60.0)  # where --demo leaky begins, and so the feeder
    assert out.startswith(f"state written to {state}:")
    assert native.state_pids(state) == sorted(listed_pids(machine))
