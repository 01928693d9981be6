"""Whether a GPU process has loaded PyTorch (the live monitor offers to attach the probe to those):
told from its memory map, read once per process life."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from gputui.collect import torch_use
from gputui.collect.processes import ProcessInspector
from gputui.collect.torch_use import torch_mapped

TORCH_LINE = ("7f2a1c000000-7f2a1e000000 r-xp 00000000 08:01 1234 "
              "/home/alice/.venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so\n")
PLAIN_LINE = "7f2a10000000-7f2a10021000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n"


def fake_proc(tmp_path, pid: int, lines: list[str]) -> str:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "maps").write_text("".join(lines))
    return str(tmp_path)


def test_a_map_with_libtorch_is_a_torch_process(tmp_path):
    root = fake_proc(tmp_path, 41, [PLAIN_LINE] * 50 + [TORCH_LINE] + [PLAIN_LINE] * 50)
    assert torch_mapped(41, root) is True


def test_a_map_without_it_is_not(tmp_path):
    root = fake_proc(tmp_path, 42, [PLAIN_LINE] * 100)
    assert torch_mapped(42, root) is False


def test_a_name_cut_between_two_reads_is_still_found(tmp_path, monkeypatch):
    line = TORCH_LINE
    cut = line.index("/libtorch") + 4  # "/lib" in one piece, "torch_cuda.so" in the next
    monkeypatch.setattr(torch_use, "CHUNK", cut)
    root = fake_proc(tmp_path, 43, [line])
    assert torch_mapped(43, root) is True


def test_a_map_that_cannot_be_read_is_unknown(tmp_path):
    assert torch_mapped(44, str(tmp_path)) is None  # gone, or another user's (EACCES)


def test_real_processes():
    pytest.importorskip("torch")  # this process has torch's libraries mapped now

    assert torch_mapped(os.getpid()) is True
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        assert torch_mapped(child.pid) is False
    finally:
        child.kill()
        child.wait()


def test_the_inspector_asks_once_per_process():
    asked: list[int] = []

    def uses_torch(pid: int) -> bool:
        asked.append(pid)
        return True

    inspector = ProcessInspector(psutil, time.monotonic, uses_torch=uses_torch)
    me = os.getpid()
    for _ in range(3):
        assert inspector.inspect([me])[me].uses_torch is True
    assert asked == [me]
    inspector.inspect([])  # the process left NVML's list: forgotten
    inspector.inspect([me])
    assert asked == [me, me]


def test_without_a_way_to_tell_the_inspector_says_unknown():
    me = os.getpid()
    assert ProcessInspector(psutil, time.monotonic).inspect([me])[me].uses_torch is None
