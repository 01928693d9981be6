"""History charts (Textual's Sparkline): utilisation, memory, power and temperature of one GPU, and
the same kind of chart for one process in the detail screen. Redrawn only while visible.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.content import Content
from textual.widgets import Sparkline

from gputui.analysis.history import History, Series
from gputui.ui import format as fmt
from gputui.ui.widgets.line import Line

# (metric, title, how to word a value)
DEVICE_CHARTS = (
    ("gpu_util", "UTIL", fmt.percent),
    ("memory_used", "MEM", lambda v: fmt.size(v, short=True)),
    ("power_draw", "POWER", lambda v: fmt.watts(v)),
    ("temperature", "TEMP", lambda v: fmt.temperature(None if v is None else int(v))),
)


class Chart(Vertical):
    """A title line ("UTIL 97%  12-100% over 4m") above a sparkline of the series."""

    DEFAULT_CSS = """
    Chart { height: 3; }
    Chart > .chart-title { height: 1; }
    Chart > Sparkline { height: 2; }
    Chart > .chart-ascii { height: 1; }
    """

    def __init__(self, title: str, words, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chart_title = title
        self.words = words
        self.ascii = ascii
        self._last: tuple | None = None
        self._spark_width: int | None = None

    def compose(self) -> ComposeResult:
        yield Line(Content.styled(self.chart_title, "bold $text-muted"), classes="chart-title")
        if self.ascii:
            yield Line("", classes="chart-ascii")
        else:
            yield Sparkline([], summary_function=max)

    def show(self, series: Series) -> None:
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
            # Sparklines scale to their data: say what the bottom and top are.
            title = Content.assemble(title, (f" {self.words(min(points))}..{self.words(max(points))}"
                                             f" {fmt.span_words(covered)}", "$text-muted"))
        self.query_one(".chart-title", Line).show(title)
        if self.ascii:
            self.query_one(".chart-ascii", Line).show(fmt.ascii_spark(points, width))
        else:
            # A Sparkline stretches its data over its width: while there are fewer points than
            # cells, make it only as wide as the points, so time runs at one cell per sample.
            # One point would draw as a full block: wait for a second one.
            spark = self.query_one(Sparkline)
            wanted = len(points) if 1 < len(points) < width else None
            if wanted != self._spark_width:  # a width change needs a layout: only when it changes
                self._spark_width = wanted
                spark.styles.width = wanted if wanted is not None else "1fr"
            spark.data = points if len(points) > 1 else []


class DeviceCharts(Container):
    """The four charts of the selected GPU (side by side or stacked, by the app's layout class)."""

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ascii = ascii

    def compose(self) -> ComposeResult:
        for metric, title, words in DEVICE_CHARTS:
            yield Chart(title, words, ascii=self.ascii, id=f"chart-{metric}")

    def show(self, history: History, device_index: int | None) -> None:
        if device_index is None:
            return
        self.border_title = f"GPU {device_index} history (g: next GPU)"
        for metric, _, _ in DEVICE_CHARTS:
            self.query_one(f"#chart-{metric}", Chart).show(history.device(device_index, metric))
