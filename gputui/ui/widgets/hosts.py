"""The many-host view's top part: one line per host (name, state or why it is down, GPUs, the
host's CPU and memory, how old its latest snapshot is), and under each host its GPUs, one line
each, drawn as the single-host view draws them. One widget draws every line; a host's block is
worded again only when its view, the layout or the width changes.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.events import Resize

from gputui import units
from gputui.analysis import vocabulary as vocab
from gputui.fleet.status import state_words
from gputui.model import HOST_LIVE, HOST_UNREACHABLE, HostView
from gputui.ui import format as fmt
from gputui.ui.widgets.bars import Words, join, label, styled, value
from gputui.ui.widgets.devices import DeviceList, render_device
from gputui.ui.widgets.line import StyledLines

STATE_STYLES = {HOST_LIVE: "$success", HOST_UNREACHABLE: "bold $error"}  # others: "$warning"

_Lines = tuple[tuple[str, Words], ...]


def host_words(view: HostView, *, compact: bool = False) -> Words:
    """A host's line: ``node1  live  8 GPUs  CPU 4%  MEM 137G/1.97T  0s ago``, and the first of the
    host's own problems (a probe that does not answer there), which the single-host view pops up."""
    parts: list[Words | str] = [styled(view.name, "bold"),
                                styled(state_words(view), STATE_STYLES.get(view.state, "$warning"))]
    snap = view.snapshot
    if snap is not None:
        host = snap.host
        gpus = len(snap.devices)
        parts.append(f"{gpus} GPU{'s' if gpus != 1 else ''}")
        if not compact:
            mem_f = fmt.fraction(host.memory_used, host.memory_total)
            parts += [join([label("CPU"), value(units.percent(host.cpu_percent), vocab.level(
                          None if host.cpu_percent is None else host.cpu_percent / 100))]),
                      join([label("MEM"), value(units.size_pair_short(host.memory_used, host.memory_total),
                                                vocab.level(mem_f))])]
            if snap.source.startswith("sim:"):
                parts.append(styled(f"demo:{snap.source[4:]}", "$accent"))
    if view.age is not None:
        parts.append(styled(f"{units.elapsed(view.age)} ago", "$text-muted"))
    if snap is not None and snap.problems:
        more = f" (+{len(snap.problems) - 1} more)" if len(snap.problems) > 1 else ""
        parts.append(styled(f"! {snap.problems[0]}{more}", "$warning"))
    return join(parts, "  ")


def device_lines(view: HostView, mode: str, width: int, ascii: bool) -> _Lines:
    """A host's GPUs, one line each (there are many hosts to show); none while it is unreachable."""
    if view.snapshot is None or view.state == HOST_UNREACHABLE:
        return ()
    device_mode = "tiny" if mode == "tiny" else "compact"
    return tuple(("", words) for device in view.snapshot.devices
                 for words in render_device(device, device_mode, width, ascii=ascii))


HOST_LINE = "on $boost"


class HostLines(StyledLines):
    """Every host's line and GPU lines in one widget: one repaint per sample."""

    def __init__(self, *, ascii: bool = False) -> None:
        super().__init__()
        self.ascii = ascii
        self.width_used = 0
        # host -> (its snapshot, mode, width) and the GPU lines drawn from them: a host whose
        # snapshot did not change keeps its lines (the sampler hands the same object again).
        self._drawn: dict[str, tuple[tuple[object, str, int], _Lines]] = {}

    def show(self, hosts: tuple[HostView, ...], mode: str) -> None:
        width = self.width_used = self.content_size.width or self.app.size.width
        drawn: dict[str, tuple[tuple[object, str, int], _Lines]] = {}
        lines: list[tuple[str, Words]] = []
        for view in hosts:
            key = (view.snapshot if view.state != HOST_UNREACHABLE else None, mode, width)
            known = self._drawn.get(view.name)
            if known is None or known[0][0] is not key[0] or known[0][1:] != key[1:]:
                known = (key, device_lines(view, mode, width, self.ascii))
            drawn[view.name] = known
            lines.append((HOST_LINE, host_words(view, compact=mode == "tiny")))
            lines.extend(known[1])
        self._drawn = drawn
        self.show_lines(lines)

    def on_resize(self, event: Resize) -> None:
        if self._drawn and self.content_size.width != self.width_used:
            self.post_message(DeviceList.Redraw())  # the main screen draws again at the new width


class HostList(VerticalScroll):
    """All hosts and their GPUs, in a scrolling box when there are more than the pane has room for."""

    DEFAULT_CSS = "HostList { height: auto; }"

    def __init__(self, *, ascii: bool = False, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=False)
        self.ascii = ascii

    def compose(self) -> ComposeResult:
        yield HostLines(ascii=self.ascii)

    def show(self, hosts: tuple[HostView, ...], mode: str) -> None:
        self.query_one(HostLines).show(hosts, mode)
