"""The per-step chart of a probed training job: allocated memory at each step's end, and the peaks
during forward, backward and the optimizer step (textual-plotext), with the step time above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static
from textual_plotext import PlotextPlot

from gputui import units
from gputui.analysis.robust import median
from gputui.model import StepRecord
from gputui.model.record import Record
from gputui.ui import format as fmt
from gputui.ui.widgets.line import Line

UNITS = (("GiB", float(1 << 30)), ("MiB", float(1 << 20)), ("KiB", 1024.0), ("bytes", 1.0))
MAX_STEPS = 120  # the chart's width in steps: the most recent ones

# (StepRecord field, legend, plotext colour, ascii marker)
SERIES = (
    ("allocated", "at step end", "cyan", "*"),
    ("peak_forward", "forward peak", "orange", "f"),
    ("peak_backward", "backward peak", "red", "b"),
    ("peak_optimizer", "optimizer peak", "green", "o"),
)


@dataclass(frozen=True, eq=False, repr=False)
class StepSeries(Record):
    """What the chart draws: step numbers and, per series, bytes at each of them (None: not known)."""

    steps: tuple[int, ...]
    values: tuple[tuple[str, tuple[float | None, ...]], ...]  # (field, values)
    step_time: float | None  # median seconds per step
    last_time: float | None


def step_series(steps: tuple[StepRecord, ...], device: str | None = None) -> StepSeries:
    """The latest steps of one device (records without a device count for every device) that carry
    a figure: a CPU job's probe reads memory at a few steps in a hundred, and those are the ones
    worth drawing (a CUDA job's has the allocator's figure at nearly every step)."""
    ours = [s for s in steps if device is None or s.device in (device, None)]
    drawn = [s for s in ours if any(getattr(s, name) is not None for name, *_ in SERIES)] or ours
    chosen = drawn[-MAX_STEPS:]
    values = tuple(
        (name, tuple(getattr(s, name) for s in chosen))
        for name, *_ in SERIES)
    times = [s.duration for s in ours[-MAX_STEPS:] if s.duration is not None]
    return StepSeries(tuple(s.step for s in chosen), values,
                      median(times) if times else None, times[-1] if times else None)


PLOT_ROWS = 7  # rows of the plot's area: the widget's 12 less title, frame, tick labels and "step"


def plotted(series: StepSeries, rows: int = PLOT_ROWS) -> list[tuple[str, str, str]]:
    """(field, legend, colour) of the series the plot draws. A series within one row of an earlier
    one at every step would hide under it (a cell shows one colour): it is drawn once, its legend
    naming both ("forward/backward peak"), so the legend never lists a line nobody can see."""
    known = [v for _, vals in series.values for v in vals if v is not None]
    row = (max(known) - min(known)) / rows if known else 0.0
    values = dict(series.values)
    groups: list[tuple[str, list[str], str]] = []  # (field drawn, legends, colour)
    for name, legend, colour, _ in SERIES:
        if all(v is None for v in values[name]):
            continue
        same = next((g for g in groups if _within(values[g[0]], values[name], row)), None)
        if same is None:
            groups.append((name, [legend], colour))
        else:
            same[1].append(legend)
    return [(name, _joined(legends), colour) for name, legends, colour in groups]


def _within(a: tuple[float | None, ...], b: tuple[float | None, ...], row: float) -> bool:
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return bool(pairs) and all(abs(x - y) <= row for x, y in pairs)


def _joined(legends: list[str]) -> str:
    """"forward peak", "backward peak" -> "forward/backward peak"."""
    if len(legends) > 1 and all(legend.endswith(" peak") for legend in legends):
        return "/".join(legend[:-len(" peak")] for legend in legends) + " peak"
    return " = ".join(legends)


def chart_unit(series: StepSeries) -> tuple[str, float]:
    """The biggest unit the largest value is at least one of, so the axis reads 1.5 GiB, not 0.0015."""
    top = max((v for _, vals in series.values for v in vals if v is not None), default=0)
    return next(((name, scale) for name, scale in UNITS if top >= scale), UNITS[-1])


def summary(series: StepSeries) -> Content:
    """The line above the chart: how many steps, step time, the latest figures."""
    if not series.steps:
        return Content.styled("No training step seen yet (steps end at optimizer.step()).", "$text-muted")
    latest = {name: next((v for v in reversed(vals) if v is not None), None) for name, vals in series.values}
    parts = [Content.styled("Per step", "bold"),
             Content(f"steps {series.steps[0]}-{series.steps[-1]}")]
    if series.step_time is not None:
        parts.append(Content(f"step time {series.step_time * 1000:.0f} ms"))
    for name, legend, *_ in SERIES:
        if latest[name] is not None:
            parts.append(Content.assemble((f"{legend} ", "$text-muted"), units.size(latest[name])))
    return Content("  ").join(parts)


class StepChart(Vertical):
    """The summary line over a plot of the steps (an ASCII sparkline per series with --ascii)."""

    DEFAULT_CSS = """
    StepChart { height: auto; }
    StepChart > PlotextPlot { height: 12; }
    StepChart > .step-ascii { height: 1; }
    StepChart > #step-summary { height: auto; }
    """

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ascii = ascii
        self.series: StepSeries | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="step-summary")  # wraps in narrow panes
        if self.ascii:
            for name, *_ in SERIES:
                yield Line(classes="step-ascii", id=f"step-ascii-{name}")
        else:
            yield PlotextPlot(id="step-plot")

    def show(self, series: StepSeries) -> None:
        if series == self.series:
            return
        self.series = series
        self.query_one("#step-summary", Static).update(summary(series))
        if self.ascii:
            self._show_ascii(series)
        else:
            self._plot(series)

    def _plot(self, series: StepSeries) -> None:
        plot = self.query_one(PlotextPlot)
        plot.display = len(series.steps) > 1
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        unit, scale = chart_unit(series)
        plt.title(f"{unit} per training step")
        for name, legend, colour in plotted(series):
            values = dict(series.values)[name]
            points = [(x, y / scale) for x, y in zip(series.steps, values) if y is not None]
            if points:
                xs, ys = zip(*points)
                plt.plot(xs, ys, label=legend, color=colour, marker="braille")
        if series.steps:
            # Steps are whole numbers: five evenly spread integer ticks, not plotext's decimals.
            first, last = series.steps[0], series.steps[-1]
            ticks: list[float] = sorted({round(first + (last - first) * k / 4) for k in range(5)})
            plt.xticks(ticks, [str(t) for t in ticks])
        plt.xlabel("step")
        plot.refresh()

    def _show_ascii(self, series: StepSeries) -> None:
        width = max(10, (self.size.width or 60) - 16)
        for name, legend, _, _ in SERIES:
            values = [v for v in dict(series.values)[name] if v is not None]
            text = fmt.ascii_spark(fmt.resample(values, width), width) if len(values) > 1 else ""
            self.query_one(f"#step-ascii-{name}", Line).show(
                Content.assemble((f"{legend:>15} ", "$text-muted"), text))
