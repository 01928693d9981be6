"""--once text of every simulated scenario at a fixed clock, against reviewed golden files.

The snapshots come through the same pipeline the CLI uses (real collector, simulated NVML, the
two-sample CPU window), with a fake clock so every figure is exact. Regenerate with
GPUTUI_REGEN_GOLDEN=1 and review the diff before committing.
"""

import json
import re
from datetime import timezone

import pytest
from plain_data import check_golden, errors

from gputui.options import SCENARIOS, Options
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.render import render
from gputui.plain.schema import SCHEMA
from gputui.sample.pipeline import CPU_WINDOW, open_pipeline

# Seconds into each scenario worth looking at: jobs running, the training job ramped up, the leaky
# job well into its growth, before its OOM.
MOMENTS = {"workstation": 60, "training-node": 90, "leaky": 150, "mig": 60, "faults": 60, "dataparallel": 90,
           "torchrun": 90, "shared-k8s": 60}


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def sample_at(scenario, seconds, **options):
    """What `gputui --demo SCENARIO --once` prints when run ``seconds`` into the scenario: the snapshot
    and its judgements."""
    clock = FakeClock()
    with open_pipeline(Options(mode="once", demo=scenario, **options), clock=clock, pause=clock.advance,
                       environ={}) as pipeline:
        clock.advance(seconds)
        return pipeline.sample()


def snapshot_at(scenario, seconds, **options):
    return sample_at(scenario, seconds, **options).snapshot


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_text(scenario):
    sample = sample_at(scenario, MOMENTS[scenario])
    snap, judgements = sample.snapshot, sample.judgements
    check_golden(f"{scenario}-100.txt", render(snap, judgements, width=100, tz=timezone.utc))
    check_golden(f"{scenario}-72-ascii.txt", render(snap, judgements, width=72, ascii=True, tz=timezone.utc))


def test_snapshots_are_exactly_repeatable():
    first = snapshot_at("training-node", 90)
    assert snapshot_at("training-node", 90) == first
    assert first.taken_at == pytest.approx(1767603600.0 + 90 + CPU_WINDOW)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("seconds", [0, 5, 30, 90, 200, 600])
def test_json_of_every_scenario_satisfies_the_schema(scenario, seconds):
    sample = sample_at(scenario, seconds)
    doc = json.loads(dumps(snapshot_document(sample.snapshot, sample.judgements)))
    assert errors(doc, SCHEMA) == []


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("width", [40, 57, 80])
def test_every_scenario_fits_narrow_terminals(scenario, width):
    sample = sample_at(scenario, MOMENTS[scenario])
    for ascii in (False, True):
        for line in render(sample.snapshot, sample.judgements, width=width, ascii=ascii).splitlines():
            assert len(line) <= width, line


def test_training_node_with_a_thousand_processes_renders_them_all():
    snap = snapshot_at("training-node", 90, demo_processes=1000)
    text = render(snap, width=120)
    rows = [line for line in text.splitlines() if re.match(r"^ *\d+ ", line)]
    assert len(rows) == len(snap.processes) >= 1000


def test_faults_are_shown_for_what_they_are():
    snap = snapshot_at("faults", MOMENTS["faults"])
    text = render(snap, width=100)
    lost = next(d for d in snap.devices if d.lost)
    assert f"[{lost.index}] " in text and "LOST" in text
    assert "! GPU 1 is not answering: GPU is lost" in text.splitlines()
    for process in snap.processes:
        if process.state != "ok":
            assert process.note and process.note[:20] in text
