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
