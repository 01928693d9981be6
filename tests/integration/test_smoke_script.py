"""scripts/smoke.py (run by .ci/run against the installed wheel) covers every demo scenario, each with
checks of what that scenario is there to show: here its checks run on this checkout's --once and
--json output, and each scenario's checks are shown not to pass on the others' output."""

from __future__ import annotations

import importlib.util
import json
from functools import cache

import pytest
from cli_helpers import ROOT, gputui

from gputui.options import SCENARIOS


def load_smoke():
    spec = importlib.util.spec_from_file_location("smoke", ROOT / "scripts" / "smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


smoke = load_smoke()


@cache
def shown(scenario: str) -> tuple[str, dict]:
    """The scenario's --once text and --json snapshot, as the smoke test reads them."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}
    text = gputui(env, "--demo", scenario, "--once")
    document = gputui(env, "--demo", scenario, "--json")
    assert text.returncode == 0 and document.returncode == 0, text.stderr + document.stderr
    return text.stdout, json.loads(document.stdout)["snapshot"]


def test_every_demo_scenario_has_its_smoke_checks():
    assert smoke.SCENARIOS == SCENARIOS
    assert all(len(smoke.SHOWS[name]) >= 2 for name in SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_checks_pass_on_what_the_scenario_shows(scenario):
    smoke.check_shows(scenario, *shown(scenario))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_check_is_specific_to_its_scenario(scenario):
    """No check of ``scenario`` holds on every other scenario's output: each looks for something that
    scenario shows."""
    others = [shown(name) for name in SCENARIOS if name != scenario]
    for what, shows in smoke.SHOWS[scenario]:
        assert not all(smoke._holds(shows, text, snapshot) for text, snapshot in others), what
    for text, snapshot in others:
        with pytest.raises(smoke.SmokeFailure, match="do not show"):
            smoke.check_shows(scenario, text, snapshot)
