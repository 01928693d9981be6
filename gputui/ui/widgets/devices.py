"""One row per GPU: memory and utilisation bars, temperature, fan, power, clocks, PCIe, codecs and
why the GPU is being slowed. Two lines in the normal layout, one line in compact and tiny panes.
"""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widget import Widget

from gputui.model import Device, Snapshot
from gputui.ui import format as fmt
from gputui.ui.widgets.bars import join, label, meter, value


class DeviceRow(Widget):
    """One device; re-renders only when its Device (a frozen value) or the layout changes."""

    DEFAULT_CSS = "DeviceRow { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }"

    class Chosen(Message):
        """The user clicked a device: the charts follow it."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, device: Device, mode: str, selected: bool, *, ascii: bool = False) -> None:
        super().__init__(id=f"device-{device.index}", classes="-selected" if selected else "")
        self.device = device
        self.ascii = ascii
        self.mode = mode
        self.selected = selected

    def show(self, device: Device, mode: str, selected: bool) -> None:
        if (device, mode, selected) != (self.device, self.mode, self.selected):
            layout_changed = mode != self.mode
            self.device, self.mode, self.selected = device, mode, selected
            self.set_class(selected, "-selected")
            self.refresh(layout=layout_changed)

    def on_click(self) -> None:
        self.post_message(self.Chosen(self.device.index))

    def render(self) -> Content:
        return render_device(self.device, self.mode, self.size.width or 80, ascii=self.ascii,
                             selected=self.selected)


def render_device(d: Device, mode: str, width: int, *, ascii: bool = False,
                  selected: bool = False) -> Content:
    """The text of one device row for a layout mode and width."""
    marker = (">" if ascii else "▶") if selected else " "
    name_width = 5 if mode == "tiny" else 16 if mode == "compact" else 20
    name = fmt.short_gpu_name(d.name)[:name_width].ljust(name_width)
    head = Content.assemble((marker, "$accent"), (f"{d.index}", "bold"), " ", (name, "bold"))
    if d.lost:
        return join([head, Content.styled(f"LOST: {d.lost}", "bold $error")])

    mem_f = fmt.fraction(d.memory_used, d.memory_total)
    util_f = None if d.gpu_util is None else d.gpu_util / 100
    mem_text = f"{fmt.size(d.memory_used, short=True)}/{fmt.size(d.memory_total, short=True)}"
    temp_level = None
    if d.temperature is not None and d.temperature_slowdown:
        temp_level = fmt.level(d.temperature / d.temperature_slowdown, warn=0.85, high=0.95)
    temp = value(fmt.temperature(d.temperature), temp_level)
    slow = fmt.slowdown(d.throttle_reasons)
    slow_part = Content.styled(("! " if ascii else "⚠ ") + slow, "bold $warning") if slow else ""

    if mode == "tiny":
        bar_w = max(3, (width - 32) // 2)
        used = fmt.size(d.memory_used, short=True)
        return join([head, meter(mem_f, bar_w, ascii=ascii, high=0.95), f"{used:>5}",
                     meter(util_f, bar_w, ascii=ascii), f"{fmt.percent(d.gpu_util):>4}", temp])

    power = fmt.watts(d.power_draw, d.power_limit)
    if mode == "compact":
        slow_short = Content.styled("!" if ascii else "⚠", "bold $warning") if slow else ""
        bar_w = max(4, min(30, (width - 64) // 2))
        return join([head, label("MEM"), meter(mem_f, bar_w, ascii=ascii, high=0.95),
                     f"{mem_text:>11}", label("UTIL"), meter(util_f, bar_w, ascii=ascii),
                     f"{fmt.percent(d.gpu_util):>4}", temp, value(fmt.watts(d.power_draw)), slow_short])

    bar_w = max(6, min(40, (width - 79) // 2))
    first = join([
        head, label("MEM"), meter(mem_f, bar_w, ascii=ascii, high=0.95), f"{mem_text:>11}",
        label("UTIL"), meter(util_f, bar_w, ascii=ascii), f"{fmt.percent(d.gpu_util):>4}",
        temp, join([label("fan"), value(fmt.percent(d.fan_speed))]), value(power),
    ])
    codecs = ""
    if d.encoder_util or d.decoder_util:  # only worth a place while a codec is busy
        codecs = join([label("ENC"), fmt.percent(d.encoder_util), label("DEC"), fmt.percent(d.decoder_util)])
    second = join([
        " " * (len(str(d.index)) + 2),
        join([label("SM"), value(fmt.megahertz(d.clock_sm, d.clock_sm_max))]),
        join([label("MEM"), value(fmt.megahertz(d.clock_memory))]),
        value("n/a" if d.performance_state is None else f"P{d.performance_state}"),
        join([label("PCIe"), value(fmt.pcie_link(d.pcie_generation, d.pcie_width)),
              label("rx"), value(fmt.rate(d.pcie_rx)), label("tx"), value(fmt.rate(d.pcie_tx))]),
        codecs, slow_part,
    ], "  ")
    return Content("\n").join([first, second])


class DeviceList(VerticalScroll):
    """All devices; rows are added or removed only when the set of GPUs changes."""

    DEFAULT_CSS = "DeviceList { height: auto; }"

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=False)
        self.ascii = ascii
        self.indices: tuple[int, ...] = ()

    def show(self, snapshot: Snapshot, mode: str, selected: int | None) -> None:
        indices = tuple(d.index for d in snapshot.devices)
        if indices != self.indices:
            self.indices = indices
            self.remove_children()
            self.mount_all([DeviceRow(d, mode, d.index == selected, ascii=self.ascii)
                            for d in snapshot.devices])
            return
        for device, row in zip(snapshot.devices, self.query_children(DeviceRow)):
            row.show(device, mode, device.index == selected)
