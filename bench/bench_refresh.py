"""Where a refresh's milliseconds go on the UI thread, headless, at 120x40.

A simulated machine is sampled ahead on a fake clock and judged by the monitor's own pipeline (as its
sampling thread does, untimed); the judged samples are then handed to the live monitor one by one
(``app.accept``, as the sampling thread's message is) and each refresh is timed in CPU time of the UI
thread (time.thread_time), split into:

- history (the app's HostState taking the sample in, before any widget sees it);
- each widget's update (header, devices, charts, process rows built, the table given them);
- each widget's drawing (its ``render_lines``: the lines Textual asks it for);
- Textual's frame: the rest (messages, layout, compositing, the driver writing to the terminal).

The sampling thread's own cost (the collector, not counting the simulator) is bench_collect.py's.

    python bench/bench_refresh.py [--refreshes 60] [--processes 64 1000] [--jobs]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual.widget import Widget  # noqa: E402

from gputui.collect import open_collector  # noqa: E402
from gputui.sample.state import HostState  # noqa: E402
from gputui.ui import main_screen  # noqa: E402
from gputui.ui.app import GpuTuiApp  # noqa: E402
from gputui.ui.sources.sampler import Sampler  # noqa: E402
from gputui.ui.startup.monitor_options import MonitorOptions  # noqa: E402
from gputui.ui.widgets.charts import DeviceHistory  # noqa: E402
from gputui.ui.widgets.devices import DeviceList  # noqa: E402
from gputui.ui.widgets.header import HostHeader  # noqa: E402
from gputui.ui.widgets.processes import ProcessTable  # noqa: E402
from tests.still import FrozenSource  # noqa: E402

spent: defaultdict[str, float] = defaultdict(float)
_depth = [0]  # nested timed calls count once, in the outermost bucket


def timed(owner, name: str, bucket) -> None:
    """Wrap ``owner.name`` so its CPU time adds to ``bucket`` (a name, or a function of self)."""
    original = getattr(owner, name)

    def wrapper(self, *args, **kwargs):
        if _depth[0]:
            return original(self, *args, **kwargs)
        _depth[0] += 1
        start = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            _depth[0] -= 1
            spent[bucket(self) if callable(bucket) else bucket] += time.thread_time() - start

    setattr(owner, name, wrapper)


def instrument() -> None:
    timed(HostState, "take", "history")
    timed(HostHeader, "show", "update: header")
    timed(DeviceList, "show", "update: devices")
    timed(DeviceHistory, "show", "update: charts")
    original_build = main_screen.table_rows.build_rows

    def build_rows(*args, **kwargs):  # a function, not a method: wrapped by hand
        start = time.thread_time()
        try:
            return original_build(*args, **kwargs)
        finally:
            spent["update: process rows"] += time.thread_time() - start

    main_screen.table_rows.build_rows = build_rows
    original_group = main_screen.group_by_job

    def group_by_job(*args, **kwargs):
        start = time.thread_time()
        try:
            return original_group(*args, **kwargs)
        finally:
            spent["update: job rows"] += time.thread_time() - start

    main_screen.group_by_job = group_by_job
    timed(ProcessTable, "show", "update: process table")
    timed(Widget, "render_lines", lambda widget: f"draw: {type(widget).__name__}")


def snapshots(processes: int, count: int):
    now = [0.0]
    sampler = Sampler(open_collector("training-node", seed=0, clock=lambda: now[0], processes=processes),
                      watch_probes=False)
    taken = []
    for second in range(count):
        now[0] = float(second)
        taken.append(sampler.sample())
    sampler.close()
    return taken


async def measure(processes: int, refreshes: int, jobs: bool = False) -> tuple[dict[str, float], float]:
    """ms per refresh in each bucket, and the UI thread's median ms per refresh in all; ``jobs``:
    in the job view (the scenario's torchrun job grouped under its line)."""
    taken = snapshots(processes, refreshes + 5)
    app = GpuTuiApp(Sampler(FrozenSource(taken[0]), watch_probes=False),
                    MonitorOptions(me="lena", simulated=True, interval=3600))
    async with app.run_test(size=(120, 40)) as pilot:
        while not app.samples:
            await pilot.pause(0.05)
        if jobs:
            app.main.action_toggle_jobs()
        assert app.sampler is not None
        taken = [app.sampler.judge(snapshot) for snapshot in taken]  # the sampling thread's part, in order
        for snapshot in taken[1:5]:  # warm up: caches filled, history started
            app.accept(snapshot)
            await pilot.pause()
        spent.clear()
        whole = []
        for snapshot in taken[5:]:
            start = time.thread_time()
            app.accept(snapshot)
            await pilot.pause()  # the refresh drawn
            whole.append(time.thread_time() - start)
    per = {bucket: 1000 * seconds / refreshes for bucket, seconds in spent.items()}
    per["Textual's frame (the rest)"] = 1000 * sum(whole) / refreshes - sum(per.values())
    return per, 1000 * statistics.median(whole)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=60)
    parser.add_argument("--processes", type=int, nargs="+", default=[64, 1000])
    parser.add_argument("--jobs", action="store_true", help="in the job view (j)")
    args = parser.parse_args()
    instrument()
    for processes in args.processes:
        per, median = asyncio.run(measure(processes, args.refreshes, args.jobs))
        view = ", job view" if args.jobs else ""
        print(f"8 GPUs x {processes} processes{view}: UI thread {sum(per.values()):.2f} ms per refresh "
              f"(mean; median {median:.2f} ms)")
        for bucket, ms in sorted(per.items(), key=lambda item: -item[1]):
            if ms >= 0.005:
                print(f"  {ms:7.2f} ms  {bucket}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
