"""One row per GPU: memory and utilisation bars, temperature, fan, power, clocks, PCIe, codecs and
why the GPU is being slowed. Two lines in the normal layout, one line in compact and tiny panes, and
in a tiny pane with more GPUs than lines, as many GPUs a line as the width holds; in a pane too short
even for that (8 GPUs at 40x10), every GPU folded into one line, or the one GPU picked (g).
All rows are drawn by one widget; a row is worded again only when its Device (a frozen value),
the layout or the width changes.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.events import Click, Resize
from textual.geometry import Region
from textual.message import Message

from gputui import units
from gputui.analysis import vocabulary as vocab
from gputui.model import Device, MigInstance, Snapshot, mig_name
from gputui.ui import format as fmt
from gputui.ui.widgets.bars import Words, assemble, join, label, merged, meter, plain, styled, value
from gputui.ui.widgets.line import StyledLines, cell_width

# One device's lines as drawn: (background style, words) each; and what they were drawn from.
_Lines = tuple[tuple[str, Words], ...]
_RowKey = tuple[Device, str, int, bool, int]

# A tiny pane gives the devices this many lines (gputui.tcss: MainScreen.-tiny #devices): with more
# GPUs than that, they share lines, in cells at least PACKED_CELL wide, so 8 GPUs fit 50 columns.
TINY_LINES = 5
PACKED_CELL = 24


def render_device(d: Device, mode: str, width: int, *, ascii: bool = False,
                  selected: bool = False, pcie_age: int = 0) -> tuple[Words, ...]:
    """The lines of one device row for a layout mode and width. ``pcie_age``: whole seconds since
    PCIe throughput was read (it is read every few seconds), said where it is over a second."""
    marker = (">" if ascii else "▶") if selected else " "
    name_width = 5 if mode == "tiny" else 16 if mode == "compact" else 20
    name = fmt.short_gpu_name(d.name)[:name_width].ljust(name_width)
    head = assemble((marker, "$accent"), (f"{d.index}", "bold"), " ", (name, "bold"))
    if d.lost:
        return (join([head, styled(f"LOST: {d.lost}", "bold $error")]),)

    mem_f = fmt.fraction(d.memory_used, d.memory_total)
    util_f = None if d.gpu_util is None else d.gpu_util / 100
    mem_text = units.size_pair_short(d.memory_used, d.memory_total)
    temp_level = vocab.temperature_level(d.temperature, d.temperature_slowdown)
    temp = value(vocab.temperature(d.temperature, vocab.glyphs(ascii)), temp_level)
    slow = vocab.slowdown(d.throttle_reasons)
    slow_style = "bold $error" if vocab.slowed_by_hardware(d.throttle_reasons) else "bold $warning"
    slow_part = styled(("! " if ascii else "⚠ ") + slow, slow_style) if slow else ""

    if mode == "tiny":
        bar_w = max(3, (width - 32) // 2)
        used = units.size_short(d.memory_used)
        return (join([head, meter(mem_f, bar_w, ascii=ascii, thresholds=vocab.GPU_MEMORY), f"{used:>5}",
                      meter(util_f, bar_w, ascii=ascii), f"{units.percent(d.gpu_util):>4}", temp]),)

    migs = tuple(render_mig(d.index, mig, mode, width, ascii=ascii) for mig in d.mig_instances)

    power = vocab.watts(d.power_draw, d.power_limit)
    if mode == "compact":
        slow_short = styled("!" if ascii else "⚠", slow_style) if slow else ""
        bar_w = max(4, min(30, (width - 64) // 2))
        return (join([head, label("MEM"), meter(mem_f, bar_w, ascii=ascii, thresholds=vocab.GPU_MEMORY),
                      f"{mem_text:>11}", label("UTIL"), meter(util_f, bar_w, ascii=ascii),
                      f"{units.percent(d.gpu_util):>4}", temp, value(vocab.watts(d.power_draw)),
                      slow_short]), *migs)

    bar_w = max(6, min(40, (width - 79) // 2))
    first = join([
        head, label("MEM"), meter(mem_f, bar_w, ascii=ascii, thresholds=vocab.GPU_MEMORY), f"{mem_text:>11}",
        label("UTIL"), meter(util_f, bar_w, ascii=ascii), f"{units.percent(d.gpu_util):>4}",
        temp, join([label("fan"), value(units.percent(d.fan_speed))]), value(power),
    ])
    codecs: Words | str = ""
    if d.encoder_util or d.decoder_util:  # only worth a place while a codec is busy
        codecs = join([label("ENC"), units.percent(d.encoder_util), label("DEC"), units.percent(d.decoder_util)])
    second = join([
        " " * (len(str(d.index)) + 2),
        join([label("SM"), value(vocab.megahertz(d.clock_sm, d.clock_sm_max))]),
        join([label("MEM"), value(vocab.megahertz(d.clock_memory))]),
        value("n/a" if d.performance_state is None else f"P{d.performance_state}"),
        join([label("PCIe"), value(fmt.pcie_link(d.pcie_generation, d.pcie_width)),
              label("rx"), value(units.rate(d.pcie_rx)), label("tx"), value(units.rate(d.pcie_tx)),
              styled(f"{pcie_age}s ago", "$text-muted") if pcie_age > 1 else ""]),
        codecs, compute_mode_part(d), slow_part,
    ], "  ")
    return (first, second, *migs)


def tiny_lines(count: int, width: int) -> int:
    """The lines ``count`` GPUs take in a tiny pane ``width`` wide: one each, or packed where they outnumber
    TINY_LINES; never more than TINY_LINES (the rest scroll)."""
    if count > TINY_LINES and width >= 2 * PACKED_CELL:
        count = -(-count // (width // PACKED_CELL))
    return min(count, TINY_LINES)


def render_summary(devices: tuple[Device, ...], width: int, *, ascii: bool = False) -> Words:
    """Every GPU in one line: how many, their memory in all, their mean utilisation, the hottest one's
    temperature, and how many are lost or slowed down."""
    live = [d for d in devices if not d.lost]
    known = [d for d in live if d.memory_used is not None and d.memory_total]
    used = sum(d.memory_used or 0 for d in known) if known else None
    total = sum(d.memory_total or 0 for d in known) if known else None
    utils = [d.gpu_util for d in live if d.gpu_util is not None]
    util = sum(utils) / len(utils) if utils else None
    hottest = max((d for d in live if d.temperature is not None), key=lambda d: d.temperature or 0, default=None)
    temp: Words | str = ""
    if hottest is not None:
        level = vocab.temperature_level(hottest.temperature, hottest.temperature_slowdown)
        temp = value(vocab.temperature(hottest.temperature, vocab.glyphs(ascii)), level)
    lost = len(devices) - len(live)
    slowed = sum(1 for d in live if vocab.slowdown(d.throttle_reasons))
    bar_w = max(3, min(20, width - 33))
    return join([assemble(" ", (f"{len(devices)} GPUs", "bold")),
                 meter(fmt.fraction(used, total), bar_w, ascii=ascii, thresholds=vocab.GPU_MEMORY),
                 units.size_pair_short(used, total), f"{units.percent(util):>4}", temp,
                 styled(f"{lost} LOST", "bold $error") if lost else "",
                 styled(("! " if ascii else "⚠ ") + f"{slowed} slowed", "bold $warning") if slowed else ""])


def render_cell(d: Device, width: int, index_width: int, *, ascii: bool = False,
                selected: bool = False) -> Words:
    """A device in a cell ``width`` wide of a packed line: its index (right-aligned to
    ``index_width``), memory bar and use, utilisation and temperature."""
    marker = (">" if ascii else "▶") if selected else " "
    head = assemble((marker, "$accent"), (f"{d.index:>{index_width}}", "bold"))
    if d.lost:
        return join([head, styled("LOST", "bold $error")])
    temp_level = vocab.temperature_level(d.temperature, d.temperature_slowdown)
    temp = vocab.temperature(d.temperature, vocab.glyphs(ascii))  # "65°C", right-aligned in 4 cells
    bar_w = max(2, width - 21 - index_width)  # the rest: 20 cells of words and spaces, 1 to the next cell
    memory = fmt.fraction(d.memory_used, d.memory_total)
    return join([head, meter(memory, bar_w, ascii=ascii, thresholds=vocab.GPU_MEMORY),
                 f"{units.size_short(d.memory_used):>5}", f"{units.percent(d.gpu_util):>4}",
                 assemble(" " * max(0, 4 - len(temp)), value(temp, temp_level))])


def compute_mode_part(d: Device) -> Words | str:
    """The compute mode where it is not the default: "exclusive process" says why a second job
    cannot start on this GPU (nvidia-smi's "E. Process"); "prohibited", why none can."""
    if d.compute_mode in (None, "default"):
        return ""
    return join([label("compute"), styled(d.compute_mode.replace("_", " "), "$warning")])


def render_mig(parent: int, mig: MigInstance, mode: str, width: int, *, ascii: bool = False) -> Words:
    """One line for a MIG instance under its GPU, named as the process table's GPU column names it
    (GPU index:GPU instance), with its profile and memory."""
    name = mig_name(parent, mig.gpu_instance_id)
    mem_f = fmt.fraction(mig.memory_used, mig.memory_total)
    mem_text = units.size_pair_short(mig.memory_used, mig.memory_total)
    bar_w = max(4, min(30, (width - 64) // 2)) if mode == "compact" else max(6, min(40, (width - 79) // 2))
    placement = " ".join(part for part in (
        f"GI {mig.gpu_instance_id}" if mig.gpu_instance_id is not None else "",
        f"CI {mig.compute_instance_id}" if mig.compute_instance_id is not None else "") if part)
    return join([
        assemble("   ", (f"MIG {name:<5}", "$accent")),
        value((mig.profile or units.NA).ljust(8)),
        join([label("MEM"), meter(mem_f, bar_w, ascii=ascii, thresholds=vocab.GPU_MEMORY), f"{mem_text:>11}"]),
        styled(placement, "$text-muted"),
        styled(f"cuda:{mig.cuda_index}", "$accent") if mig.cuda_index is not None else "",
    ], "  ")


class DeviceLines(StyledLines):
    """Every device's lines in one widget: one repaint per sample instead of one per GPU."""

    def __init__(self, *, ascii: bool = False) -> None:
        super().__init__()
        self.ascii = ascii
        self.devices: tuple[Device, ...] = ()
        self.line_devices: list[tuple[int, ...]] = []  # the device indices of each line, for a click
        self.cell_width = 0  # the width of a device's cell on a packed line (0: a device a line)
        self.width_used = 0
        self._rows: dict[_RowKey, _Lines] = {}  # its lines by (device, mode, width, selected, PCIe age)

    def show(self, devices: tuple[Device, ...], mode: str, selected: int | None,
             now: float | None = None) -> None:
        """``now``: the snapshot's time, which the age of slower readings is counted from."""
        self.devices = devices
        width = self.width_used = self.content_size.width or self.app.size.width
        if mode == "folded":
            self._show_folded(devices, width, selected)
            return
        if mode == "tiny" and len(devices) > TINY_LINES and width >= 2 * PACKED_CELL:
            self._show_packed(devices, width, selected)
            return
        self.cell_width = 0
        rows: dict[_RowKey, _Lines] = {}
        lines: list[tuple[str, Words]] = []
        line_devices: list[tuple[int, ...]] = []
        for device in devices:
            age = (int(now - device.pcie_read_at)
                   if now is not None and device.pcie_read_at is not None else 0)
            key = (device, mode, width, device.index == selected, age)
            row = self._rows.get(key)
            if row is None:  # a device whose readings did not change keeps its lines
                chosen = device.index == selected
                row = tuple((SELECTED if chosen else "", words) for words in
                            render_device(device, mode, width, ascii=self.ascii, selected=chosen,
                                          pcie_age=age))
            rows[key] = row
            lines.extend(row)
            line_devices.extend([(device.index,)] * len(row))
        self._rows = rows
        self.line_devices = line_devices
        self.show_lines(lines)

    def _show_packed(self, devices: tuple[Device, ...], width: int, selected: int | None) -> None:
        """As many devices a line as the width holds, each in a cell of the same width."""
        per_line = width // PACKED_CELL
        cell = self.cell_width = width // per_line
        index_width = max(len(str(d.index)) for d in devices)
        lines: list[tuple[str, Words]] = []
        self.line_devices = []
        for start in range(0, len(devices), per_line):
            group = devices[start:start + per_line]
            cells = [render_cell(d, cell, index_width, ascii=self.ascii, selected=d.index == selected)
                     for d in group]
            line: list[tuple[str, str]] = []
            for i, words in enumerate(cells):
                line.extend(words)
                if i < len(cells) - 1:  # pad to the next cell
                    line.append((" " * max(1, cell - cell_width(plain(words))), ""))
            lines.append(("", merged(line)))
            self.line_devices.append(tuple(d.index for d in group))
        self._rows = {}
        self.show_lines(lines)

    def _show_folded(self, devices: tuple[Device, ...], width: int, selected: int | None) -> None:
        """One line: the GPU picked, or every GPU in a summary."""
        picked = next((d for d in devices if d.index == selected), None)
        words = (render_summary(devices, width, ascii=self.ascii) if picked is None else
                 render_device(picked, "tiny", width, ascii=self.ascii, selected=True)[0])
        self.cell_width, self._rows = 0, {}
        self.line_devices = [(picked.index,) if picked is not None else tuple(d.index for d in devices)]
        self.show_lines([("", words)])

    def line_of(self, index: int) -> int | None:
        """The first line device ``index`` is drawn on."""
        return next((y for y, on_line in enumerate(self.line_devices) if index in on_line), None)

    def on_resize(self, event: Resize) -> None:
        # Bars stretch with the width: redraw at the new width (a new height needs nothing).
        if self.devices and self.content_size.width != self.width_used:
            self.post_message(DeviceList.Redraw())

    def on_click(self, event: Click) -> None:
        if 0 <= event.y < len(self.line_devices):
            on_line = self.line_devices[event.y]
            column = event.x // self.cell_width if self.cell_width else 0
            self.post_message(DeviceList.Chosen(on_line[min(column, len(on_line) - 1)]))


SELECTED = "on $boost"  # the charted GPU's lines


class DeviceList(VerticalScroll):
    """All devices, in a scrolling box when there are more than the pane has room for."""

    DEFAULT_CSS = "DeviceList { height: auto; }"

    class Chosen(Message):
        """The user clicked a device: the charts follow it."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    class Redraw(Message):
        """The width changed: draw the devices again."""

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=False)
        self.ascii = ascii

    def compose(self) -> ComposeResult:
        yield DeviceLines(ascii=self.ascii)

    def show(self, snapshot: Snapshot, mode: str, selected: int | None) -> None:
        self.query_one(DeviceLines).show(snapshot.devices, mode, selected, snapshot.taken_at)

    def bring_into_view(self, index: int) -> None:
        """Scroll so that device ``index``'s first line shows (the list may be taller than its box)."""
        y = self.query_one(DeviceLines).line_of(index)
        if y is not None:
            self.scroll_to_region(Region(0, y, 1, 1), animate=False, immediate=True)
