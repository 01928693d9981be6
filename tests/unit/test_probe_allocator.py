"""torch.cuda readings parsed from recorded memory_stats()/memory_snapshot() outputs, and OOM records.

Most recordings in tests/fixtures/torch are synthetic (see the README there), made to hold cases a
healthy job rarely shows (retries, OOMs, two devices); ``real-h100-*`` were recorded on an H100 by
bench/validate_gpu.py. The values asserted here are the ones in the files.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from gputui.probe import allocator, oom
from gputui.probe.board import Board

FIXTURES = Path(__file__).parents[1] / "fixtures" / "torch"
GiB, MiB = 1 << 30, 1 << 20


def load(name):
    return json.loads((FIXTURES / name).read_text())


def test_memory_stats_become_allocator_stats():
    stats = allocator.stats_from_memory_stats(
        load("memory_stats_cuda0.json"), largest_free_block=20 * MiB,
        settings="expandable_segments:True,max_split_size_mb:512",
    )
    assert stats.allocated == 3_976_200_192
    assert stats.allocated_peak == 9_663_676_416
    assert stats.reserved == stats.reserved_peak == 10 * GiB
    assert stats.active == 3_980_394_496 and stats.active_peak == 9_667_870_720
    assert stats.inactive_split == 512 * MiB and stats.inactive_split_peak == GiB
    assert stats.requested == 3_970_000_000 and stats.requested_peak == 9_650_000_000
    assert (stats.alloc_retries, stats.ooms, stats.segments) == (3, 1, 42)
    assert stats.largest_free_block == 20 * MiB
    assert stats.expandable_segments is True
    assert stats.settings == "expandable_segments:True,max_split_size_mb:512"


def test_an_unused_device_has_no_allocator_stats():
    assert allocator.stats_from_memory_stats(load("memory_stats_unused.json")) is None


def test_largest_free_block_counts_only_inactive_blocks_of_the_device():
    segments = load("memory_snapshot.json")
    assert allocator.largest_free_block(segments, 0) == 20 * MiB  # not the block awaiting free
    assert allocator.largest_free_block(segments, 1) == 56 * MiB
    assert allocator.largest_free_block(segments, 2) is None


def test_real_h100_memory_stats_become_allocator_stats():
    # Recorded at the end of bench/validate_gpu.py's training job (torch 2.11, H100, 2026-11-25).
    stats = allocator.stats_from_memory_stats(load("real-h100-memory_stats.json"))
    assert (stats.allocated, stats.reserved) == (280_215_040, 497_025_024)
    assert stats.active == stats.allocated  # nothing freed but not yet reused at a step's end
    assert stats.inactive_split == 36_454_912 and stats.inactive_split_peak == 49_848_832
    assert stats.requested == 280_213_004 and stats.requested_peak == 356_542_096
    assert (stats.allocated_peak, stats.reserved_peak) == (356_807_168, 497_025_024)
    assert (stats.alloc_retries, stats.ooms, stats.segments) == (0, 0, 28)
    assert stats.expandable_segments is False


def test_largest_free_block_of_a_real_h100_snapshot():
    segments = load("real-h100-memory_snapshot.json")
    # A 34 MiB segment whose single block is free; the small pool's free blocks are 2 MiB at most.
    assert allocator.largest_free_block(segments, 0) == 35_651_584
    assert allocator.largest_free_block(segments, 1) is None


@pytest.mark.parametrize("settings, expected", [
    (None, False),  # the allocator's defaults
    ("expandable_segments:True", True),
    ("max_split_size_mb:128, expandable_segments:true", True),
    ("expandable_segments:False", False),
    ("garbage_collection_threshold:0.6", False),
])
def test_expandable_segments_from_settings(settings, expected):
    assert allocator.expandable_from_settings(settings) is expected


def test_settings_come_from_either_variable_name():
    assert allocator.allocator_settings({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}) \
        == "expandable_segments:True"
    assert allocator.allocator_settings({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}) \
        == "max_split_size_mb:64"
    assert allocator.allocator_settings({}) is None


def test_live_bytes_by_site_from_a_recorded_history_snapshot():
    pytest.importorskip("torch")
    from gputui.probe.sites import live_bytes_by_site

    totals, stacks = live_bytes_by_site(load("snapshot_with_history.json")["segments"], device=0)
    # Inactive blocks and blocks from before recording (no frames) do not count; cuda:1 neither.
    assert totals == {
        "/home/ana/proj/model.py:31 in forward": 8 * MiB,
        "/home/ana/proj/model.py:44 in head": 2 * MiB,
    }
    assert stacks["/home/ana/proj/model.py:31 in forward"] == (
        "/home/ana/proj/train.py:57 in train_step", "/home/ana/proj/model.py:31 in forward",
    )


def test_no_cuda_reading_without_an_initialised_device():
    pytest.importorskip("torch")
    assert allocator.cuda_ready() is False  # CPU torch: never initialised, never initialise it
    assert allocator.devices_in_use() == []


CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of "
    "which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.60 GiB memory in use. "
    "Of the allocated memory 70.00 GiB is allocated by PyTorch, and 6.00 GiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


def record_of(message: str):
    """The OomRecord of a CUDA OOM raised with ``message``, as the probe's excepthook would keep it."""
    torch = pytest.importorskip("torch")
    try:
        raise torch.OutOfMemoryError(message)
    except torch.OutOfMemoryError as exc:
        return oom.record_from_exception(exc, at=12.0)


def test_cuda_oom_message_is_parsed():
    record = record_of(CUDA_OOM)
    assert record.device == "cuda:0"
    assert record.requested == 2 * GiB
    assert record.free == int(1.5 * GiB)
    assert record.allocated == 70 * GiB
    assert record.reserved == 76 * GiB  # allocated + "reserved by PyTorch but unallocated"
    assert record.message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert record.where[-1].endswith(f"in {record_of.__name__}")


# torch 2.11's message on an H100 under set_per_process_memory_fraction(0.02) (bench/validate_gpu.py);
# the OOM observer's record of the same failure, from memory_stats(), was allocated 1100437504 and
# reserved 1130364928.
REAL_CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of 79.18 GiB of "
    "which 77.39 GiB is free. Including non-PyTorch memory, this process has 1.78 GiB memory in use. "
    "1.58 GiB allowed; Of the allocated memory 1.02 GiB is allocated by PyTorch, and 28.54 MiB is "
    "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage"
    "-with-pytorch-cuda-alloc-conf)"
)


def test_a_real_cuda_oom_message_agrees_with_the_observers_figures():
    record = record_of(REAL_CUDA_OOM)
    assert (record.device, record.requested) == ("cuda:0", 768 * MiB)
    # The message rounds to two decimals: within 0.5 % of what memory_stats() said.
    assert abs(record.allocated - 1_100_437_504) < 0.005 * 1_100_437_504
    assert abs(record.reserved - 1_130_364_928) < 0.005 * 1_130_364_928
    assert record.reserved - record.allocated == int(28.54 * MiB)


def test_a_real_cpu_oom_is_recognised_with_its_size_and_line():
    torch = pytest.importorskip("torch")
    try:
        torch.empty(1 << 62, dtype=torch.uint8)
    except RuntimeError as exc:
        assert oom.is_oom(exc)
        record = oom.record_from_exception(exc)
    assert record.device == "cpu"
    assert record.requested == 1 << 62
    assert "test_probe_allocator.py" in record.where[-1]


def test_excepthooks_note_the_oom_and_pass_it_on(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: seen.append(("main", a[1])))
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(("thread", args.exc_value)))
    board = Board()
    board.problems = type("P", (), {"record": lambda self, *a: seen.append(("problem", a))})()
    watch = oom.OomWatch(board)
    watch.install()
    try:
        error = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                             "4096 bytes. Error code 12 (Cannot allocate memory)")
        sys.excepthook(RuntimeError, error, None)
        assert watch.last.requested == 4096 and watch.last.device == "cpu"
        other = ValueError("not memory")
        thread = threading.Thread(target=lambda: (_ for _ in ()).throw(other))
        thread.start()
        thread.join()
    finally:
        watch.uninstall()
    assert seen == [("main", error), ("thread", other)]  # both passed on unchanged, in order
    assert watch.last.requested == 4096  # the ValueError was not an OOM
    assert sys.excepthook is not watch._excepthook


@pytest.mark.parametrize("filename, mine", [
    ("/home/ann/proj/train.py", True),
    ("/home/ann/bin/train.py", True),  # a script of the user's in a bin/ directory
    ("/opt/venv/bin/gputui", False),  # console-script shims only call into a package
    ("/opt/venv/bin/torchrun", False),
    ("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", False),
    ("/usr/lib/python3.11/threading.py", False),
    ("<frozen importlib._bootstrap>", False),
])
def test_allocation_sites_are_lines_of_the_users_code(filename, mine):
    from gputui.probe.sites import is_user_file

    assert is_user_file(filename) is mine


def test_the_demo_loop_counts_as_the_users_code_and_the_rest_of_gputui_does_not():
    import gputui.probe.demo
    import gputui.probe.runtime
    from gputui.probe.sites import is_user_file

    assert is_user_file(gputui.probe.demo.__file__)
    assert not is_user_file(gputui.probe.runtime.__file__)
