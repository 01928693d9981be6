"""Who is wasting GPUs where people look: --once's section and --json's `judgements.waste` on the shared
Kubernetes node of --demo after eleven simulated minutes, and the flags' errors as one line each."""

from __future__ import annotations

import json
import os
from datetime import timezone

import pytest
from cli_helpers import ROOT, gputui, no_traceback
from test_plain_golden import FakeClock

from gputui.model.waste import IdleGpu
from gputui.options import Options
from gputui.plain.document import dumps, snapshot_document
from gputui.plain.render import render
from gputui.sample.pipeline import open_pipeline

GiB = 1 << 30


def watched_k8s(minutes=11, **options):
    """--watch's pipeline on the demo node: a sample every 10 s for ``minutes``; the last sample."""
    clock = FakeClock()
    with open_pipeline(Options(mode="watch", demo="shared-k8s", **options), clock=clock, pause=clock.advance,
                       environ={}) as pipeline:
        clock.advance(60)
        for _ in range(minutes * 6 + 1):
            sample = pipeline.sample()
            clock.advance(10)
    return sample


def test_once_names_the_idle_pod_with_the_rules_in_view():
    sample = watched_k8s()
    text = render(sample.snapshot, sample.judgements, width=100, tz=timezone.utc)
    section = text[text.index("Who holds the GPUs"):].splitlines()
    assert section[1:3] == [
        "  idle = 1.00 GiB or more held at under 5% SM for 10 min or longer; SM% = mean over the last 10 min;",
        "  watched 11 min"]
    assert section[3] == "OWNER                           GPUS  MEMORY      SM% IDLE ON IDLE FOR"
    # the notebook's process ran nothing, so the driver gives it no figure: its GPUs' 0 % stands in, marked so
    assert section[4] == "pod team-vision/notebook-sam    5-6  40.0GiB ≤0 (GPU) 5-6     11 min"
    assert [line.split()[1] for line in section[5:8]] == ["ml-research/llama-ft-0", "inference/vllm-mistral-7d9f",
                                                         "batch/embed-nightly-x2k4p"]
    assert all(line.split()[-2:] == ["-", "-"] for line in section[5:8])


def test_json_carries_the_idle_pod_and_the_rules():
    sample = watched_k8s(idle_flags=(), waste=None)
    document = json.loads(dumps(snapshot_document(sample.snapshot, sample.judgements)))
    waste = document["judgements"]["waste"]
    assert waste["rules"] == {"window": 600.0, "min_memory": GiB, "max_util": 5.0, "idle_after": 600.0}
    assert waste["watched"] == 660.0
    assert waste["owners"][0] == {
        "kind": "pod", "name": "team-vision/notebook-sam", "pids": [83001], "gpus": [5, 6], "memory": 40 * GiB,
        "sm_util": 0.0, "sm_source": "gpu", "idle_for": 660.0,
        "idle": [{"device": 5, "memory": 21 * GiB, "idle_for": 660.0},
                 {"device": 6, "memory": 19 * GiB, "idle_for": 660.0}]}
    assert [o["idle"] for o in waste["owners"][1:]] == [[], [], []]


def test_rules_from_the_options_reach_the_judgement():
    from gputui.model.waste import WasteRules

    asked = WasteRules(idle_after=300.0, min_memory=20 * GiB)
    waste = watched_k8s(minutes=6, waste=asked).judgements.waste
    assert waste.rules == asked
    # six minutes watched are past 5 min; of the notebook's GPUs only GPU 5 (21 GiB) holds 20 GiB or more
    assert {o.name: o.idle for o in waste.owners if o.idle} == {
        "team-vision/notebook-sam": (IdleGpu(5, 21 * GiB, 360.0),)}
    assert watched_k8s(minutes=6).judgements.waste.idle_gpus == 0  # the default 10 min: none yet


@pytest.fixture
def env(tmp_path):
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    clean.update(GPUTUI_PROBE_DIR=str(tmp_path), COLUMNS="120", PYTHONPATH=str(ROOT),
                 XDG_CONFIG_HOME=str(tmp_path / "config"))
    return clean


@pytest.mark.parametrize(("args", "said"), [
    (("--idle-util", "0"), "gputui: --idle-util must be a percentage above 0 and at most 100, not '0'"),
    (("--idle-after", "soon"), 'gputui: --idle-after must be a duration such as "10m", "1h", "90s", up to 30.0 '
                               "days, not 'soon'"),
    (("--idle-memory", "lots"), "gputui: --idle-memory must be a size such as \"1GiB\", \"512MiB\" or a number of "
                                "bytes, not 'lots'"),
    (("--waste-window", "2d"), 'gputui: --waste-window must be a duration such as "10m", "1h", "90s", up to 24.0 h, '
                               "not '2d'"),
])
def test_bad_flags_are_one_line(env, args, said):
    result = gputui(env, "--demo", "shared-k8s", "--json", *args)
    no_traceback(result)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", said + "\n")


def test_config_and_flags_in_the_document(env, tmp_path):
    config = tmp_path / "config" / "gputui"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[waste]\nidle_after = "30m"\nidle_memory = "2GiB"\n')
    result = gputui(env, "--demo", "shared-k8s", "--json", "--idle-util", "2.5")
    no_traceback(result)
    rules = json.loads(result.stdout)["judgements"]["waste"]["rules"]
    assert rules == {"window": 600.0, "min_memory": 2 * GiB, "max_util": 2.5, "idle_after": 1800.0}


# ------------------------------------------------------------------------------------------------ serve

def test_serve_says_who_holds_gpus_idle_with_the_rules():
    from test_serve_metrics import series, value

    from gputui.serve.sampling import Sample

    sample = watched_k8s()
    found = series(Sample(sample.snapshot, sample.judgements))
    notebook = dict(kind="pod", owner="team-vision/notebook-sam")
    assert value(found, "gputui_owner_idle_gpus", **notebook) == 2
    assert value(found, "gputui_owner_idle_seconds", **notebook) == 660.0
    assert value(found, "gputui_owner_memory_bytes", **notebook) == 40 * GiB
    assert value(found, "gputui_owner_gpus", **notebook) == 2
    assert value(found, "gputui_owner_sm_utilization_ratio", **notebook) == 0.0
    assert value(found, "gputui_owner_idle_gpus", kind="pod", owner="ml-research/llama-ft-0") == 0
    assert value(found, "gputui_owner_memory_bytes", kind="pod", owner="ml-research/llama-ft-0") == 126 * GiB
    assert [value(found, f"gputui_idle_{name}") for name in
            ("window_seconds", "min_memory_bytes", "max_utilization_ratio", "after_seconds", "watched_seconds")] == \
        [600.0, GiB, 0.05, 600.0, 660.0]
    assert value(found, "gputui_owners_left_out") == 0


def test_serve_bounds_the_owners_it_labels(monkeypatch):
    from test_serve_metrics import series, value

    from gputui.model import Device, GpuProcess, Snapshot
    from gputui.sample.judge import Judge
    from gputui.serve import metrics
    from gputui.serve.sampling import Sample

    monkeypatch.setattr(metrics, "OWNER_LABEL_SETS", 2)
    snap = Snapshot(taken_at=0.0, devices=(Device(index=0, gpu_util=50),), processes=tuple(
        GpuProcess(pid=100 + i, device_index=0, gpu_memory=i * GiB, sm_util=10, user=f"u{i}") for i in range(1, 5)))
    sample = Judge()(snap)
    found = series(Sample(sample.snapshot, sample.judgements))
    # the two holding the most memory keep their series; the other two are counted
    assert {ls for (name, ls), _ in found.items() if name == "gputui_owner_memory_bytes"} == {
        frozenset({("kind", "user"), ("owner", "u4")}), frozenset({("kind", "user"), ("owner", "u3")})}
    assert value(found, "gputui_owners_left_out") == 2


# --------------------------------------------------- an SM% the GPU's utilisation stood in for (issue 47 item 6)

def workstation(width=100, ascii=False):
    """--once's "Who holds the GPUs" on the workstation demo a minute in: bob's only process has no SM figure
    from the driver (n/a), so GPU 1's 65 % stands in; carol's two processes read 58 and 7 %, her own 65."""
    from test_plain_golden import sample_at

    sample = sample_at("workstation", 60)
    text = render(sample.snapshot, sample.judgements, width=width, ascii=ascii, tz=timezone.utc)
    return text[text.index("Who holds the GPUs"):].splitlines()


def test_once_marks_the_gpus_figure_standing_in_as_the_gpus():
    assert workstation()[3:] == [
        "OWNER      GPUS  MEMORY       SM% IDLE ON IDLE FOR",
        "user alice 0    17.1GiB       96% -       -",
        "user bob   1    6.20GiB ≤65 (GPU) -       -",
        "user carol 1    3.70GiB       65% -       -",
        "user root  0     312MiB        2% -       -",
        "  (GPU): the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this"]


def test_once_in_ascii_says_at_most_in_ascii():
    section = workstation(width=72, ascii=True)
    assert section[4:9] == [
        "OWNER      GPUS  MEMORY        SM% IDLE ON IDLE FOR",
        "user alice 0    17.1GiB        96% -       -",
        "user bob   1    6.20GiB <=65 (GPU) -       -",
        "user carol 1    3.70GiB        65% -       -",
        "user root  0     312MiB         2% -       -"]
    assert " ".join(section[9:]).split() == (
        "(GPU): the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this"
        .split())


@pytest.mark.parametrize(("width", "ascii", "notebook"), [
    (40, True, "pod team-vision/no~ 40.0GiB <=0* -"),  # "<=0 (GPU)" would have cost the SM% column itself
    (50, False, "pod team-vision~ 5-6  40.0GiB ≤0* -       -")])  # "≤0 (GPU)": the GPUS column
def test_a_narrow_pane_marks_it_briefly_rather_than_losing_a_column(width, ascii, notebook):
    from test_plain_golden import sample_at

    sample = sample_at("shared-k8s", 60)  # pod names too long for the owner column: it is cut to 16 first
    text = render(sample.snapshot, sample.judgements, width=width, ascii=ascii, tz=timezone.utc)
    table = text[text.index("OWNER  "):].splitlines()
    assert table[2] == notebook
    assert all(len(line) <= width for line in table)
    assert " ".join(table[5:]).split() == (
        "*: the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this".split())


def test_short_owner_names_leave_their_room_to_the_columns():
    from test_plain_golden import sample_at

    sample = sample_at("leaky", 150)  # "user dev" and "user sam": 8 columns, not the 16 a long name keeps

    def table(width):
        text = render(sample.snapshot, sample.judgements, width=width, tz=timezone.utc)
        lines = text[text.index("Who holds the GPUs"):].splitlines()
        return lines[next(i for i, line in enumerate(lines) if line.startswith("OWNER")):][:3]

    assert table(48) == table(100) == ["OWNER    GPUS  MEMORY       SM% IDLE ON IDLE FOR",
                                       "user dev 0    29.8GiB       91% -       -",
                                       "user sam 0    4.99GiB ≤97 (GPU) -       -"]


def test_no_mark_and_no_note_where_no_figure_is_the_gpus():
    from test_plain_golden import sample_at

    sample = sample_at("mig", 60)  # priya's processes' own figures; tom's and li's MIG slices: none at all
    text = render(sample.snapshot, sample.judgements, width=100, tz=timezone.utc)
    section = text[text.index("Who holds the GPUs"):].splitlines()
    assert [line.split()[4] for line in section[4:]] == ["95%", "n/a", "n/a"]  # and no note under them


def test_json_says_whose_utilisation_each_owners_is():
    from test_plain_golden import sample_at

    def owners(scenario):
        sample = sample_at(scenario, 60)
        document = json.loads(dumps(snapshot_document(sample.snapshot, sample.judgements)))
        return {o["name"]: (o["sm_util"], o["sm_source"]) for o in document["judgements"]["waste"]["owners"]}

    assert owners("workstation") == {"alice": (96.0, "processes"), "bob": (65.0, "gpu"),
                                     "carol": (65.0, "processes"), "root": (2.0, "processes")}
    leaky = owners("leaky")
    assert leaky["sam"][1] == "gpu" and leaky["dev"][1] == "processes"  # sam: processes at n/a and 6 %
    assert owners("mig")["tom"] == (None, None)  # a MIG slice: neither its processes' figure nor the GPU's


def test_a_document_of_an_older_gputui_without_the_field_still_reads():
    from test_plain_golden import sample_at

    from gputui.plain.document import read_judgements

    sample = sample_at("workstation", 60)
    document = json.loads(dumps(snapshot_document(sample.snapshot, sample.judgements)))
    assert document["version"] == 1  # a field added: the version stays (docs/json-schema.md)
    for owner in document["judgements"]["waste"]["owners"]:
        del owner["sm_source"]
    bob = next(o for o in read_judgements(document).waste.owners if o.name == "bob")
    assert (bob.sm_util, bob.sm_source) == (65.0, None)


def test_serve_says_which_owners_figure_is_the_gpus():
    from test_plain_golden import sample_at
    from test_serve_metrics import series, value

    from gputui.serve.sampling import Sample

    sample = sample_at("workstation", 60)
    found = series(Sample(sample.snapshot, sample.judgements))
    assert value(found, "gputui_owner_sm_utilization_ratio", kind="user", owner="bob") == 0.65
    assert value(found, "gputui_owner_sm_utilization_from_gpu", kind="user", owner="bob") == 1
    assert value(found, "gputui_owner_sm_utilization_from_gpu", kind="user", owner="carol") == 0
    mig = sample_at("mig", 60)
    unknown = series(Sample(mig.snapshot, mig.judgements))
    assert value(unknown, "gputui_owner_sm_utilization_from_gpu", kind="user", owner="tom") is None  # no figure


def test_over_hosts_an_owner_any_host_read_from_its_gpu_is_marked():
    from gputui.analysis.vocabulary import UNICODE
    from gputui.model.waste import OwnerAcross
    from gputui.plain.waste import across_lines

    owners = [OwnerAcross("user", "bob", ("a", "b"), gpus=2, memory=2 * GiB, sm_util=40.0, sm_source="gpu"),
              OwnerAcross("user", "carol", ("a",), gpus=1, memory=GiB, sm_util=65.0, sm_source="processes")]
    lines = [line.write(False) for line in across_lines(owners, 100, UNICODE)]
    assert lines[4:] == [
        "user bob       2    2 2.00GiB ≤40 (GPU)         - -",
        "user carol     1    1 1.00GiB       65%         - -",
        "  (GPU): the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this"]
