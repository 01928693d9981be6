"""History charts: the main screen's one-line charts of the charted GPU's utilisation, memory, power
and temperature (one widget, fixed scales), and the detail screen's per-process charts (bars from 0).
"""

from __future__ import annotations

from typing import Callable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content

from gputui import units
from gputui.analysis import vocabulary as vocab
from gputui.analysis.history import History, Series
from gputui.model import Device
from gputui.ui import format as fmt
from gputui.ui.widgets.bars import LEVEL_STYLES, Words, assemble, join
from gputui.ui.widgets.line import Line, StyledLines

# (metric, title, how to word a value with the glyphs shown)
DEVICE_CHARTS: tuple[tuple[str, str, Callable[[float | None, vocab.Glyphs], str]], ...] = (
    ("gpu_util", "UTIL", lambda v, _: units.percent(v)),
    ("memory_used", "MEM", lambda v, _: units.size_short(v)),
    ("power_draw", "POWER", lambda v, _: vocab.watts(v)),
    ("temperature", "TEMP", lambda v, shown: vocab.temperature(None if v is None else int(v), shown)),
)


class Chart(Vertical):
    """A title line ("SM 97%  95%..97% 4m") above two rows of bars, the newest sample at the right.

    Bars stand on a fixed scale, so their height means something whatever the data: ``top`` (100
    for percentages; a value above it, 127 % CPU on two cores, raises the top to it) or, where
    ``top`` is None, the series' own largest value; the bottom is always 0.
    """

    DEFAULT_CSS = """
    Chart { height: 3; }
    Chart > Line { height: 1; }
    """

    ROWS = 2  # rows of bars (one of ASCII marks with --ascii)

    def __init__(self, title: str, words: Callable[[float | None], str], *, top: float | None = None,
                 ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chart_title = title
        self.words = words
        self.top = top
        self.ascii = ascii
        self._last: tuple | None = None
        self._series: Series | None = None
        self._width = 0

    def compose(self) -> ComposeResult:
        yield Line(Content.styled(self.chart_title, "bold $text-muted"), classes="chart-title")
        for _ in range(1 if self.ascii else self.ROWS):
            yield Line("", classes="chart-bars")

    def on_resize(self) -> None:
        # Shown before its first layout, it guessed a width: draw again at the real one.
        if self._series is not None and self.size.width != self._width:
            self.show(self._series)

    def show(self, series: Series) -> None:
        self._series, self._width = series, self.size.width
        width = max(1, self.size.width or 30)
        points = fmt.resample(series.values, width)
        latest = next((v for v in reversed(series.values) if v is not None), None)
        covered = series.times[-1] - series.times[0] if len(series) > 1 else 0.0
        state = (tuple(points), latest, round(covered))
        if state == self._last:
            return
        self._last = state
        title = Content.assemble((self.chart_title, "bold $text-muted"), " ", (self.words(latest), "bold"))
        if len(points) > 1:
            title = Content.assemble(title, (f" {self.words(min(points))}..{self.words(max(points))}"
                                             f" {units.span_short(covered)}", "$text-muted"))
        self.query_one(".chart-title", Line).show(title)
        # One point would draw as a lone bar: wait for a second one.
        drawn = points if len(points) > 1 else []
        top = max([self.top or 0.0, *drawn])
        rows = [ascii_marks(drawn, top)] if self.ascii else bar_rows(drawn, top, self.ROWS)
        for line, text in zip(self.query(".chart-bars").results(Line), rows):
            line.show(Content.styled(text.rjust(width), CHART_STYLE))


BARS = " ▁▂▃▄▅▆▇█"  # eighths of a cell, empty to full


def bar_rows(points: list[float], top: float, rows: int) -> list[str]:
    """Bars ``rows`` cells tall for points on a 0..top scale, top row first. A point above 0 shows at
    least an eighth, so a little use is never drawn as none."""
    full = rows * 8
    heights = [0 if top <= 0 or p <= 0 else max(1, round(min(1.0, p / top) * full)) for p in points]
    return ["".join(BARS[min(8, max(0, h - row * 8))] for h in heights) for row in reversed(range(rows))]


def ascii_marks(points: list[float], top: float) -> str:
    """One line of ASCII marks for points on a 0..top scale (--ascii)."""
    return "".join(mark(0.0 if top <= 0 else p / top, ASCII_MARKS) for p in points)


def mark(fraction: float, marks: str) -> str:
    """The mark for a fraction of a chart's height (clamped to 0..1)."""
    return marks[min(len(marks) - 1, int(min(1.0, max(0.0, fraction)) * len(marks)))]


class DeviceHistory(StyledLines):
    """The charted GPU's recent history: one line per metric, newest sample at the right edge.

    Each chart has a fixed scale (utilisation 0-100 %, memory 0-total, power 0-limit, temperature
    up to the slowdown threshold), so a full column means "at the limit" whatever the data; a cell
    is coloured by the same levels as the device bars. Two charts per line when there is room, one
    per line in narrow places. It repaints only when what it would draw changed, and never asks for
    a new layout unless its number of lines changes.
    """

    DEFAULT_CSS = "DeviceHistory { height: auto; }"

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ascii = ascii
        self._state: tuple | None = None

    def show(self, history: History, device: Device | None) -> None:
        if device is None:
            return
        width = self.content_size.width or (self.size.width or 80)
        columns = 2 if width >= 2 * MIN_CHART_WIDTH + CHART_GAP else 1
        chart_width = (width - CHART_GAP * (columns - 1)) // columns
        cells = max(1, chart_width - TITLE_WIDTH)
        charts = []
        for metric, title, words in DEVICE_CHARTS:
            series = history.device(device.index, metric)
            points = tuple(fmt.resample(series.values, cells))
            latest = next((v for v in reversed(series.values) if v is not None), None)
            charts.append((title, words(latest, vocab.glyphs(self.ascii)), latest, points, chart_scale(metric, device)))
        times = history.device(device.index, "gpu_util").times
        covered = round(times[-1] - times[0]) if len(times) > 1 else 0
        state = (device.index, tuple(charts), columns, chart_width, covered)
        if state == self._state:
            return
        self._state = state
        self.border_title = f"GPU {device.index} history, last {units.span_short(covered)} (g: next GPU)"
        lines = []
        for row in range(0, len(charts), columns):
            parts = [chart_line(*chart, chart_width, ascii=self.ascii)
                     for chart in charts[row:row + columns]]
            lines.append(("", join(parts, " " * CHART_GAP)))
        self.show_lines(lines)


MIN_CHART_WIDTH = 36
CHART_GAP = 3
TITLE_WIDTH = 12  # "POWER  595W "

# How full a chart cell is: seven heights of block (never the full one, so stacked charts keep a
# gap between them), or seven ASCII marks from the baseline up, light to dense.
BLOCKS = "▁▂▃▄▅▆▇"
ASCII_MARKS = "_.-=+*#"
CHART_STYLE = "$primary"


def chart_scale(metric: str, device: Device) -> tuple[float, float, float, float]:
    """(bottom, top, warn, high) for a metric: the values a chart spans and where its colours change."""
    load, memory = vocab.LOAD, vocab.GPU_MEMORY
    if metric == "gpu_util":
        return 0.0, 100.0, load.warn, load.high
    if metric == "memory_used":
        return 0.0, float(device.memory_total or 0), memory.warn, memory.high
    if metric == "power_draw":
        return 0.0, float(device.power_limit or 0), load.warn, load.high
    # Temperature: 20 C is a cool board's floor; the colours change where the device line's do
    # (vocabulary.temperature_level): TEMPERATURE_WARN degrees below the slowdown, and at it.
    top = float(device.temperature_slowdown or 90)
    return 20.0, top, max(0.0, 1.0 - vocab.TEMPERATURE_WARN / max(1.0, top - 20.0)), 1.0


def chart_line(title: str, value: str, latest: float | None, points: tuple[float, ...],
               scale: tuple[float, float, float, float], width: int, *, ascii: bool = False) -> Words:
    """One chart: "UTIL   92% ▁▂▅▇███…", the newest point at the right edge.

    The blocks are drawn in one calm colour so the shape reads at a glance; the latest value
    carries the level colour (as the device bars do).
    """
    bottom, top, warn, high = scale
    cells = max(1, width - TITLE_WIDTH)
    span = top - bottom
    if value == units.NA:
        value_style = "$text-muted"
    elif latest is None or span <= 0:
        value_style = "bold"
    else:
        fraction = min(1.0, max(0.0, (latest - bottom) / span))
        value_style = "bold " + LEVEL_STYLES[vocab.level(fraction, vocab.Thresholds(warn, high))]
    marks = ASCII_MARKS if ascii else BLOCKS
    if span > 0:
        drawn = "".join(mark((p - bottom) / span, marks) for p in points)
    else:  # no scale known (the driver reports no limit): a flat line says "data, no scale"
        drawn = marks[0] * len(points)
    return assemble((f"{title:<6}", "bold $text-muted"), (f"{value:>5}", value_style), " ",
                    " " * (cells - len(drawn)), (drawn, CHART_STYLE))
