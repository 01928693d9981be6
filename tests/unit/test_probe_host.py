"""Host memory at step ends (CPU-only jobs) and the probe's own leak check that starts site recording."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputui.model import ProbeReport, StepRecord  # noqa: E402
from gputui.probe import runtime  # noqa: E402
from gputui.probe.host import MallocInUse, ResidentMemory  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import loops  # noqa: E402

MIB = 1 << 20


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_resident_memory_is_what_statm_says():
    reader = ResidentMemory()
    first = reader.read()
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    # Between the two readings the interpreter may touch a page or two.
    assert abs(first - pages * os.sysconf("SC_PAGE_SIZE")) < MIB
    # A fresh mapping, every page written: resident, whatever memory earlier tests freed and the C
    # allocator kept for reuse (a bytes object could be made in pages already resident).
    block = mmap.mmap(-1, 64 * MIB)
    block.write(b"\x01" * (64 * MIB))
    assert reader.read() - first >= 60 * MIB
    block.close()


def test_resident_memory_without_proc_is_unknown_and_stays_quiet(tmp_path):
    reader = ResidentMemory(str(tmp_path / "missing"))
    assert reader.read() is None and reader.read() is None


def test_a_forked_child_reads_its_own_resident_memory():
    reader = ResidentMemory()
    reader.read()  # opened in the parent: /proc/self is the parent there
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child grows by 64 MiB: its figure must show it, the parent's would not
        try:
            before = reader.read()
            block = mmap.mmap(-1, 64 * MIB)  # a fresh mapping, every page written (see above)
            block.write(b"\x01" * (64 * MIB))
            os.write(write, str(reader.read() - before).encode())
        finally:
            os._exit(0)
    os.close(write)
    grown = int(os.read(read, 64))
    os.waitpid(pid, 0)
    os.close(read)
    assert grown >= 60 * MIB


@pytest.mark.skipif(not MallocInUse().available, reason="glibc 2.33+ only")
def test_malloc_in_use_counts_a_cpu_tensor_exactly():
    malloc = MallocInUse()
    before = malloc.read()
    tensor = torch.empty(MIB // 4)  # 1 MiB of float32, from the C allocator
    grown = malloc.read() - before
    assert MIB <= grown < MIB + 16384  # the tensor, its storage and TensorImpl objects
    del tensor
    assert malloc.read() - before < 16384


def test_cpu_step_records_carry_host_memory(monkeypatch):
    probe = runtime.start(serve=False, budget=1.0)
    try:
        loops.run("clean", 5)
        steps = probe.report().steps
    finally:
        runtime.stop()
    for record in steps:
        # One figure, the one the verdict uses: the C allocator's bytes where glibc tells them.
        if MallocInUse().available:
            assert record.host_allocated >= record.allocated > 0 and record.host_memory is None
        else:
            assert record.host_memory > record.allocated > 0 and record.host_allocated is None


def test_resident_memory_where_the_c_allocator_cannot_tell(monkeypatch):
    # jemalloc or tcmalloc preloaded: glibc's own figure is tiny, below the tensors it should hold.
    monkeypatch.setattr(MallocInUse, "read", lambda self: 4096)
    probe = runtime.start(serve=False, budget=1.0)
    try:
        loops.run("clean", 3)
        steps = probe.report().steps
    finally:
        runtime.stop()
    assert all(s.host_allocated is None and s.host_memory > s.allocated for s in steps)


def test_the_leak_check_is_budgeted_and_off_when_asked(monkeypatch):
    probe = runtime.start(serve=False, budget=1.0, auto_sites=False)
    try:
        loops.run("cache", 40)
        assert probe.leak_state is None and probe.report().recorded_steps == ()
    finally:
        runtime.stop()

    probe = runtime.start(serve=False, budget=1.0)
    checked = []
    real = runtime.leak_verdict

    def spy(report: ProbeReport):
        checked.append(report.steps[-1].step)
        assert all(isinstance(s, StepRecord) for s in report.steps)
        return real(report)

    monkeypatch.setattr(runtime, "leak_verdict", spy)
    try:
        loops.run("clean", 48)
    finally:
        runtime.stop()
    # The first check at step 16; the next only once step time has paid for the last one 1000 times
    # over (a check costs about 0.4 ms: 0.4 s of 5 ms steps), so not at every 16th step.
    assert checked[0] == runtime.AUTO_CHECK_STEPS
    assert all(b - a >= runtime.AUTO_CHECK_STEPS for a, b in zip(checked, checked[1:]))
    assert probe.leak_state == "clean" and probe._check_cost > 0
    assert probe.tracker.budget.hook_seconds >= probe._check_cost


def test_a_failing_leak_check_is_contained(monkeypatch):
    def broken(report):
        raise RuntimeError("analysis bug")

    monkeypatch.setattr(runtime, "leak_verdict", broken)
    probe = runtime.start(serve=False, budget=1.0)
    try:
        loops.run("clean", 20)
        report = probe.report()
    finally:
        runtime.stop()
    assert [s.step for s in report.steps][-1] == 20
    assert "leak check: RuntimeError: analysis bug" in report.problems
