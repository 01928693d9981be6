"""Pilot and snapshot tests of the w view on the shared Kubernetes node of --demo, eleven simulated minutes
in: the idle notebook pod named first, with the rules it was judged by."""

from __future__ import annotations

import pytest
from still import still_app
from ui_data import settle

from gputui.ui.bindings import binding_sections
from gputui.ui.screens.waste import WasteScreen

pytestmark = pytest.mark.usefixtures("utc")


NOTE = "(GPU): the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this"


def shown(app, widget_id):
    return str(app.screen.query_one(widget_id).render())


async def test_w_names_the_idle_pod_and_goes_back():
    app = still_app("shared-k8s", seconds=660, interval=3600)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, WasteScreen)
        assert shown(app, "#waste-title") == "Who holds the GPUs  2 GPUs held idle"
        assert shown(app, "#waste-rules") == (
            "idle = 1.00 GiB or more held at under 5% SM for 10 min or longer; SM% = mean over the last 10 min; "
            "watched 11 min")
        lines = shown(app, "#waste-table").splitlines()
        assert lines[0] == "OWNER                           GPUS  MEMORY      SM% IDLE ON IDLE FOR"
        # its process ran nothing, so the driver gives it no figure: its GPUs' 0 % stands in, marked so
        assert lines[1] == "pod team-vision/notebook-sam    5-6  40.0GiB ≤0 (GPU) 5-6     11 min"
        assert [line.split()[1] for line in lines[2:5]] == ["ml-research/llama-ft-0", "inference/vllm-mistral-7d9f",
                                                          "batch/embed-nightly-x2k4p"]
        assert lines[5:] == [NOTE]
        await pilot.press("w")
        await pilot.pause()
        assert not isinstance(app.screen, WasteScreen)


async def test_w_a_minute_in_calls_nothing_idle_and_says_why():
    app = still_app("shared-k8s", seconds=60, interval=3600)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        assert shown(app, "#waste-title") == "Who holds the GPUs  0 GPUs held idle"
        assert "watched 60 s of the 10 min a GPU must stay idle: none is called idle yet" in shown(app, "#waste-rules")
        notebook = next(line for line in shown(app, "#waste-table").splitlines() if "notebook-sam" in line)
        assert notebook.split()[-5:] == ["≤0", "(GPU)", "-", "60", "s"]  # 60 s held idle so far, none called idle


def test_the_key_is_in_the_help():
    sections = dict(binding_sections())
    assert [(b.key, b.id) for b in sections["Who holds the GPUs (w)"]] == [("escape,backspace,w", "waste.back")]
    assert any(b.key == "w" and b.id == "waste" for b in sections["Main screen"])


def test_snapshot_of_the_idle_view(snap_compare):
    async def idle_view(pilot):
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause(0.2)

    assert snap_compare(still_app("shared-k8s", seconds=660), terminal_size=(100, 20), run_before=idle_view)


async def test_replay_shows_the_recorded_judgement(tmp_path):
    from still import still_replay_app

    app = still_replay_app("shared-k8s", tmp_path / "k8s.rec", seconds=80, at=60)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        # the recorder had watched the minute before this sample: its judgement, not a fresh one of one sample
        assert "watched 60 s of the 10 min" in shown(app, "#waste-rules")
        notebook = shown(app, "#waste-table").splitlines()[2]
        assert notebook == "pod team-vision/notebook-sam    5-6  40.0GiB ≤0 (GPU) -       60 s"  # as recorded


async def test_many_hosts_each_host_as_its_gputui_judged_it():
    from still import still_hosts_app

    app = still_hosts_app({"k8s-node": "shared-k8s", "ws": "workstation", "down": None}, seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        assert shown(app, "#waste-title") == "Who holds the GPUs  0 GPUs held idle on 2 hosts"
        lines = shown(app, "#waste-table").splitlines()
        assert lines[lines.index("k8s-node") + 1].endswith("watched 60 s of the 10 min a GPU must stay idle: "
                                                           "none is called idle yet")
        notebook = lines[lines.index("k8s-node") + 4]
        assert notebook == "pod team-vision/notebook-sam    5-6  40.0GiB ≤0 (GPU) -       60 s"
        assert lines[lines.index("ws") + 3].startswith("user alice ")
        assert lines[lines.index("down") + 1] == "no judgement from this host (not answering, or an older gputui)"


async def test_many_hosts_add_each_owner_up_over_the_hosts_first():
    from still import still_hosts_app

    # The same pods on two nodes (the shared-k8s demo twice) and a workstation: each pod over both nodes.
    app = still_hosts_app({"node-a": "shared-k8s", "node-b": "shared-k8s", "ws": "workstation"}, seconds=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        lines = shown(app, "#waste-table").splitlines()
        assert lines[0] == "All hosts"
        assert lines[1].split() == ["OWNER", "HOSTS", "GPUS", "MEMORY", "SM%", "IDLE", "GPUS", "IDLE", "FOR"]
        sam = next(line for line in lines[2:] if line.startswith("pod team-vision/notebook-sam "))
        assert sam.split()[2:] == ["2", "4", "80.0GiB", "≤0", "(GPU)", "-", "60", "s"]
        assert next(line for line in lines[2:] if line.startswith("user alice ")).split()[2] == "1"
        assert lines.index("node-a") > lines.index("All hosts")  # then each host as it judged itself


# ------------------------------------------------------------------- the GPU's figure standing in (issue 47 item 6)

async def workstation_table(size, **options):
    """The w view's table on the workstation demo two minutes in: bob's only process has no SM figure from
    the driver, so GPU 1's utilisation stands in; carol's processes give their own."""
    app = still_app("workstation", seconds=120, interval=3600, **options)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        return shown(app, "#waste-table").splitlines()


async def test_w_marks_bobs_figure_as_the_gpus():
    lines = await workstation_table((120, 30))
    assert lines[0] == "OWNER      GPUS  MEMORY       SM% IDLE ON IDLE FOR"
    assert lines[2:4] == ["user bob   1    6.20GiB ≤51 (GPU) -       -",
                          "user carol 1    3.70GiB       70% -       -"]
    assert lines[-1] == NOTE


async def test_w_in_a_narrow_pane_marks_it_briefly_and_keeps_the_columns():
    lines = await workstation_table((40, 15))
    assert lines[0] == "OWNER       MEMORY  SM% IDLE ON IDLE FOR"  # "≤51 (GPU)" would have cost IDLE FOR
    assert lines[2:4] == ["user bob   6.20GiB ≤51* -       -", "user carol 3.70GiB  70% -       -"]
    assert lines[-1] == "*: the GPU's SM% stood in (no per-process figure from the driver); the owner's is at most this"


async def test_w_in_ascii_says_at_most_in_ascii():
    lines = await workstation_table((120, 30), ascii=True)
    assert lines[2] == "user bob   1    6.20GiB <=51 (GPU) -       -"


def test_snapshot_of_a_stand_in_in_a_narrow_pane(snap_compare):
    async def idle_view(pilot):
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause(0.2)

    # the tmux split README recommends: the idle notebook pod's ≤0* (its GPUs' 0 %), every column in view
    assert snap_compare(still_app("shared-k8s", seconds=660), terminal_size=(50, 15), run_before=idle_view)
