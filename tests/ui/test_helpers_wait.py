"""The suite's one wait-until-sampled helper (ui_data.settle) fails loudly: a test whose app never
samples must not go on to check a blank screen."""

from __future__ import annotations

import asyncio

import pytest
from ui_data import settle


class StuckPilot:
    """A pilot whose app never takes a sample."""

    def __init__(self) -> None:
        self.app = type("App", (), {"samples": 0})()
        self.pauses = 0

    async def pause(self, delay: float | None = None) -> None:
        self.pauses += 1


def test_settle_fails_when_the_app_never_samples():
    pilot = StuckPilot()
    with pytest.raises(AssertionError):
        asyncio.run(settle(pilot, tries=3))
    assert pilot.pauses == 3


def test_settle_returns_once_sampled():
    pilot = StuckPilot()
    pilot.app.samples = 2
    asyncio.run(settle(pilot, samples=2))
    assert pilot.pauses == 1  # the one pause that lets the sample be drawn
