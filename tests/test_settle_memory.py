"""The monitor's memory after its first frames (ui/launch.py's settle_memory): startup's objects are set
aside from the garbage collector, so the cyclic garbage of each redraw is found within seconds; settled
again, what was set aside and dropped since is found too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ui_data import make_app, settle, training_snapshot

# A process with a large startup (200,000 lists kept, as the monitor's 65,000 objects of modules and
# widgets), then 50 objects that point at themselves (as Textual's strips do through their caches),
# each alive through a collection of the middle generation, so old when it is dropped; then 30,000
# objects made and kept, as a monitor's readings are. Printed: how many of the 50 are still there.
CYCLES_LEFT = """
import gc, sys, weakref
sys.path.insert(0, {root!r})
from gputui.ui.launch import settle_memory

class Node:
    pass

startup = [[i] for i in range(200_000)]
gc.collect()
if {settled}:
    settle_memory()
refs = []
for _ in range(50):
    node = Node()
    node.me = node
    refs.append(weakref.ref(node))
    gc.collect(1)
    del node
readings = [[i] for i in range(30_000)]
print(sum(ref() is not None for ref in refs), gc.get_freeze_count() > 0, gc.get_threshold()[2])
"""


def cycles_left(settled: bool) -> list[str]:
    root = str(Path(__file__).resolve().parent.parent)
    code = CYCLES_LEFT.format(root=root, settled=settled)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout.split()


def test_settled_old_cyclic_garbage_goes_at_the_next_rounds():
    assert cycles_left(settled=True) == ["0", "True", "1"]


def test_unsettled_old_cyclic_garbage_waits_for_a_full_round():
    """What settle_memory is for: without it the same garbage is all still there."""
    assert cycles_left(settled=False) == ["50", "False", "10"]


async def test_the_monitor_settles_after_its_first_frame_and_again_at_the_third_sample():
    calls: list[int] = []
    snapshots = [training_snapshot()]
    app = make_app(snapshots, settle=lambda: calls.append(app.samples))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.first_frame_at is not None
        assert calls == [1]  # after the first sample was drawn
        app._settle_due()  # as when two samples came before the first refresh, each asking for it
        assert calls == [1]
        app.accept(snapshots[0])
        await pilot.pause()
        assert calls == [1]
        app.accept(snapshots[0])
        await pilot.pause()
        assert calls == [1, 3]
        for _ in range(3):  # and never again
            app.accept(snapshots[0])
            await pilot.pause()
        assert calls == [1, 3]


# Objects set aside at the first settling that are dropped later in a cycle, as the footer keys of
# the footer's later compositions are: printed, how many are still there after a round of each generation.
FROZEN_GARBAGE_LEFT = """
import gc, sys, weakref
sys.path.insert(0, {root!r})
from gputui.ui.launch import settle_memory

class Node:
    pass

nodes = []
for _ in range(50):
    node = Node()
    node.me = node
    nodes.append(node)
refs = [weakref.ref(node) for node in nodes]
settle_memory()
del nodes, node
if {again}:
    settle_memory()
for generation in range(3):
    gc.collect(generation)
print(sum(ref() is not None for ref in refs))
"""


def test_settling_again_frees_what_the_first_settling_set_aside_and_was_dropped_since():
    root = str(Path(__file__).resolve().parent.parent)
    left = [subprocess.run([sys.executable, "-c", FROZEN_GARBAGE_LEFT.format(root=root, again=again)],
                           capture_output=True, text=True, check=True, timeout=60).stdout.split()
            for again in (False, True)]
    assert left == [["50"], ["0"]]
