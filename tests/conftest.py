"""Fixtures shared by several test modules."""

import time

import pytest


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC for the test: screens and text show times of day in the local zone.
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("utc")``."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def one_torch_thread():
    """torch computes on one thread for the test: the CPU is shared, so steps stay short and steady.
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
