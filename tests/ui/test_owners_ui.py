"""Pilot tests of the owner view (o) on the shared Kubernetes node of --demo: the OWNER column, rows
grouped under one line per pod, folded with left and Enter."""

from __future__ import annotations

import pytest
from still import still_app
from ui_data import settle, table_keys

from gputui.ui.widgets.processes import ProcessTable

pytestmark = pytest.mark.usefixtures("utc")

NOTEBOOK = "owner:pod:team-vision/notebook-sam"


def table(app) -> ProcessTable:
    return app.screen.query_one(ProcessTable)


async def test_o_groups_rows_under_their_pod_and_folds():
    app = still_app("shared-k8s", seconds=60, interval=3600)
    async with app.run_test(size=(170, 40)) as pilot:
        await settle(pilot)
        assert "owner" in table(app).column_ids
        flat = table_keys(app)
        assert table(app).rows_by_key[flat[0]].cells["owner"] != ""
        await pilot.press("o")
        await pilot.pause()
        keys = table_keys(app)
        # each owner's line where its first row was (sorted by GPU memory, the largest first)
        assert [k for k in keys if k.startswith("owner:")] == [
            "owner:pod:inference/vllm-mistral-7d9f", "owner:pod:ml-research/llama-ft-0", NOTEBOOK,
            "owner:pod:batch/embed-nightly-x2k4p"]
        at = keys.index(NOTEBOOK)
        assert keys[at + 1:at + 3] == ["83001/5", "83001/6"]
        line = table(app).rows_by_key[NOTEBOOK].cells
        assert (line["command"], line["gpu"], line["gpu_memory"], line["sm"]) == (
            "▾ team-vision/notebook-sam · 1 process", "5-6", "40.0G", "")
        assert "owners" in str(app.screen.query_one("#table-status").render())
        table(app).move_cursor(row=at)
        await pilot.press("enter")  # an owner's line: Enter folds it
        await pilot.pause()
        assert "83001/5" not in table_keys(app) and NOTEBOOK in table_keys(app)
        await pilot.press("right")
        await pilot.pause()
        assert "83001/5" in table_keys(app)
        await pilot.press("o")
        await pilot.pause()
        assert table_keys(app) == flat
