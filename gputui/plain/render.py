"""The compact text picture of a Snapshot that ``--once`` and ``--watch`` print.

Pure: a Snapshot and its judgements (gputui/sample/) in, a string out. A header line, one block per GPU
with bars, the process table, and under each probed process what its probe says about its memory and
what the monitor judged of it.
"""

from __future__ import annotations

from datetime import tzinfo

from gputui import units
from gputui.analysis import vocabulary as vocab
from gputui.analysis.breakdown import breakdown_of, devices_shown
from gputui.analysis.vocabulary import ASCII, UNICODE, Glyphs
from gputui.model import (
    PROCESS_OK,
    AllocatorStats,
    Device,
    GpuProcess,
    MigInstance,
    OomRecord,
    ProbeReport,
    Snapshot,
    mig_name,
)
from gputui.model.breakdown import Breakdown
from gputui.model.judgement import Judgements, ProcessJudgement
from gputui.model.verdicts import (
    LEAK_CACHE_GROWTH,
    LEAK_CLEAN,
    LEAK_COLLECTING,
    LEAK_FRAGMENTATION,
    LEAK_LEAK,
)
from gputui.plain.styled import Line, flow, text
from gputui.plain.waste import waste_lines, worth_a_section
from gputui.untrusted import visible, visible_all

MIN_WIDTH = 40
MAX_BAR = 40  # longer bars add no information, only width

def render(snapshot: Snapshot, judgements: Judgements | None = None, *, color: bool = False, ascii: bool = False,
           width: int = 100, tz: tzinfo | None = None) -> str:
    """The whole snapshot as text, ``width`` columns wide (at least 40), ending in a newline.

    ``judgements`` (the pipeline's) add the verdicts, advice and job findings; ``tz`` is the time zone for
    clock times (None: local time); tests pass UTC.
    """
    snapshot = visible_all(snapshot)  # command lines, names, probe strings: from other users
    judgements = judgements or Judgements()  # its words quote them: made visible where shown, line by line
    width = max(MIN_WIDTH, width)
    glyphs = ASCII if ascii else UNICODE
    lines: list[Line] = []
    lines += _header(snapshot, width, glyphs, tz)
    if not snapshot.devices:
        lines.append(text("No GPUs found.", "dim"))
    for device in snapshot.devices:
        lines += _device_block(device, width, glyphs)
    lines.append(Line())
    lines += _process_table(snapshot, judgements, width, glyphs, tz)
    lines += _unlisted_probes(snapshot, judgements, width, glyphs, tz)
    if snapshot.jobs:
        # Imported where there is a job: the live monitor's first frame (ui/startup/early_frame.py) is drawn by
        # this function and waits on imports.
        from gputui.plain.jobs import job_lines

        lines += job_lines(snapshot, judgements, width, glyphs.ellipsis)
    if worth_a_section(judgements.waste):
        assert judgements.waste is not None  # worth_a_section says so
        lines += waste_lines(judgements.waste, width, glyphs)
    for problem in snapshot.problems:
        lines += flow([text(problem, "warn")], width, first=text("! ", "warn"), indent=2,
                      ellipsis=glyphs.ellipsis)
    out = "\n".join(line.write(color) for line in lines) + "\n"
    if ascii:  # names and command lines can hold anything; --ascii promises plain ASCII
        out = out.encode("ascii", "replace").decode("ascii")
    return out


# ----------------------------------------------------------------------------------------- header

def _header(snapshot: Snapshot, width: int, glyphs: Glyphs, tz: tzinfo | None) -> list[Line]:
    driver = snapshot.driver
    host = snapshot.host
    when = units.clock_time(snapshot.taken_at, tz, date=True, zone=True)
    chunks = [
        text(when or "", None),
        _labelled("driver", driver.driver_version),
        _labelled("CUDA", driver.cuda_driver_version),
    ]
    if snapshot.source.startswith("sim:"):
        chunks.append(text(f"simulated: {snapshot.source[4:]}", "accent"))
    lines = flow(chunks, width, first=text(host.hostname or "localhost", "title"), indent=2,
                 ellipsis=glyphs.ellipsis)
    host_chunks = []
    if host.cpu_percent is not None or host.cpu_count is not None:
        cpu = Line().add("CPU ")
        cpu.add(units.percent(host.cpu_percent) or "n/a", _level(host.cpu_percent))
        if host.cpu_count is not None:
            cpu.add(f" of {host.cpu_count}")
        host_chunks.append(cpu)
    if host.memory_total is not None:
        host_chunks.append(Line().add("MEM ").add(
            units.size_pair(host.memory_used, host.memory_total) or "n/a",
            _ratio_level(_ratio(host.memory_used, host.memory_total))))
    if host.swap_total:
        host_chunks.append(Line().add("swap ").add(
            units.size_pair(host.swap_used, host.swap_total) or "n/a",
            _ratio_level(_ratio(host.swap_used, host.swap_total))))
    if host.load_average is not None:
        host_chunks.append(text("load " + " ".join(f"{x:.2f}" for x in host.load_average)))
    if host_chunks:
        lines += flow(host_chunks, width, first=text("  "), indent=2, ellipsis=glyphs.ellipsis)
    return lines


def _labelled(label: str, value: str | None) -> Line:
    return Line().add(f"{label} ").add(value if value is not None else "n/a",
                                       None if value is not None else "dim")


# ----------------------------------------------------------------------------------------- devices

def _device_block(device: Device, width: int, glyphs: Glyphs) -> list[Line]:
    title = Line().add(f"[{device.index}] ", "bold").add(device.name or "unknown GPU", "bold")
    if device.lost is not None:
        chunks = [text("LOST", "alert"), text(device.lost, "dim")]
        return flow(chunks, width, first=title, ellipsis=glyphs.ellipsis)
    chunks = [
        _temperature(device, glyphs),
        _fan(device),
        _power(device),
        _pstate(device),
        _clocks(device),
    ]
    if device.memory_util is not None:
        chunks.append(Line().add("mem-bw ").add(f"{device.memory_util}%", _level(device.memory_util)))
    for label, value in (("enc", device.encoder_util), ("dec", device.decoder_util)):
        if value:  # only when busy: idle codecs are noise
            chunks.append(text(f"{label} {value}%"))
    if device.cuda_index is not None and device.cuda_index != device.index:
        chunks.append(text(f"cuda:{device.cuda_index}", "accent"))
    if device.compute_mode not in (None, "default"):
        chunks.append(text(device.compute_mode.replace("_", " "), "warn"))
    if device.mig_enabled:
        chunks.append(text("MIG", "accent"))
    if device.ecc_uncorrected:
        chunks.append(text(f"ECC {device.ecc_uncorrected} uncorrected", "bad"))
    chunks.append(_throttle(device))
    lines = flow(chunks, width, first=title, ellipsis=glyphs.ellipsis)
    lines += _bars(device, width, glyphs)
    for mig in device.mig_instances:
        lines += _mig_line(device.index, mig, width, glyphs)
    return lines


def _temperature(device: Device, glyphs: Glyphs) -> Line:
    if device.temperature is None:
        return text("temp n/a", "dim")
    level = vocab.temperature_level(device.temperature, device.temperature_slowdown)
    return text(vocab.temperature(device.temperature, glyphs), _STYLES[level] if level != "none" else None)


def _fan(device: Device) -> Line:
    if device.fan_speed is None:
        return text("fan n/a", "dim")
    return Line().add("fan ").add(f"{device.fan_speed}%", _level(device.fan_speed))


def _power(device: Device) -> Line:
    draw, limit = device.power_draw, device.power_limit
    if draw is None:
        return text("power n/a" if limit is None else vocab.watts(draw, limit), "dim")
    return text(vocab.watts(draw, limit), _ratio_level(_ratio(draw, limit)))


def _pstate(device: Device) -> Line:
    if device.performance_state is None:
        return Line()
    return text(f"P{device.performance_state}")


def _clocks(device: Device) -> Line:
    line = Line()
    if device.clock_sm is not None:
        line.add(f"SM {vocab.megahertz(device.clock_sm, device.clock_sm_max)}")
    if device.clock_memory is not None:
        line.add("  " if len(line) else "").add(f"mem {vocab.megahertz(device.clock_memory)}")
    return line


def _throttle(device: Device) -> Line:
    slowdown = vocab.slowdown(device.throttle_reasons)
    if not slowdown:
        return Line()
    return text("slowed: " + slowdown, "bad" if vocab.slowed_by_hardware(device.throttle_reasons) else "warn")


def _bars(device: Device, width: int, glyphs: Glyphs) -> list[Line]:
    """Memory and utilisation bars: side by side when there is room, else one under the other.

    Figures get a fixed width so that every device's bars are the same length and line up.
    """
    memory = (_ratio(device.memory_used, device.memory_total),
              units.size_pair(device.memory_used, device.memory_total), vocab.GPU_MEMORY)
    util = (None if device.gpu_util is None else device.gpu_util / 100, units.percent(device.gpu_util), vocab.LOAD)
    room = width - 4
    half = min((room - 2) // 2, len("MEM ") + MAX_BAR + _MEMORY_FIGURE)
    if half - 4 - _MEMORY_FIGURE >= 10:
        left = _bar("MEM", *memory, _MEMORY_FIGURE, half, glyphs)
        right = _bar("GPU", *util, _MEMORY_FIGURE, half, glyphs)
        return [Line().add("    ").extend(left).add(" " * (half - len(left) + 2)).extend(right)]
    return [Line().add("    ").extend(_bar("MEM", *memory, _MEMORY_FIGURE, room, glyphs)),
            Line().add("    ").extend(_bar("GPU", *util, _MEMORY_FIGURE, room, glyphs))]


_MEMORY_FIGURE = len(" 88.8/888.8GiB")


def _bar(label: str, ratio: float | None, figure: str | None, thresholds: vocab.Thresholds, figure_width: int,
         span: int, glyphs: Glyphs) -> Line:
    """``MEM ████░░░░ 12.3/80.0GiB`` filling ``span`` columns; ``n/a`` when the ratio is unknown."""
    line = Line().add(f"{label} ")
    if ratio is None:
        return line.add("n/a" if figure is None else figure, "dim")
    tail = f" {figure}"
    cells = min(MAX_BAR, max(4, span - len(label) - 1 - max(figure_width, len(tail))))
    filled, empty = vocab.bar(ratio, cells, glyphs)
    style = _ratio_level(ratio, thresholds)
    line.add(filled, style).add(empty, "dim")
    return line.add(tail, style).add(" " * (figure_width - len(tail)))


def _mig_line(gpu: int, mig: MigInstance, width: int, glyphs: Glyphs) -> list[Line]:
    first = Line().add("    ").add(f"MIG {mig_name(gpu, mig.gpu_instance_id)}", "accent")
    chunks = [text(mig.profile or "profile n/a", None if mig.profile else "dim")]
    placement = []
    if mig.gpu_instance_id is not None:
        placement.append(f"GI {mig.gpu_instance_id}")
    if mig.compute_instance_id is not None:
        placement.append(f"CI {mig.compute_instance_id}")
    if placement:
        chunks.append(text(" ".join(placement)))
    figure = units.size_pair(mig.memory_used, mig.memory_total)
    chunks.append(text(figure or "memory n/a", _ratio_level(_ratio(mig.memory_used, mig.memory_total),
                                                            vocab.GPU_MEMORY) if figure else "dim"))
    if mig.cuda_index is not None:
        chunks.append(text(f"cuda:{mig.cuda_index}", "accent"))
    return flow(chunks, width, first=first, indent=8, ellipsis=glyphs.ellipsis)


# ----------------------------------------------------------------------------------------- processes

# --once's columns of the process table, in order; labels, alignment, cell text and the order they give
# way in when the terminal is narrow are the vocabulary's, the monitor's too.
_SHOWN = ("pid", "user", "owner", "gpu", "type", "gpu_memory", "sm", "cpu", "host_memory", "elapsed")
_ALWAYS = ("pid", "gpu", "gpu_memory")  # what the table is for: never given way
_MIN_COMMAND = 24  # the command is what tells processes apart: keep room for it


def _process_table(snapshot: Snapshot, judgements: Judgements, width: int, glyphs: Glyphs,
                   tz: tzinfo | None) -> list[Line]:
    processes = sorted(snapshot.processes,
                       key=lambda p: (p.device_index, -(p.gpu_memory or 0), p.pid))
    if not processes:
        return [text("No GPU processes.", "dim")]
    probes = {report.pid: report for report in snapshot.probes}
    rows = [_process_cells(p, snapshot.taken_at, glyphs.ellipsis) for p in processes]
    widths = {cid: max(len(vocab.COLUMNS[cid].label), *(len(row[cid][0]) for row in rows)) for cid in _SHOWN}
    shown = list(_SHOWN)
    if not any(p.owner is not None and p.owner.key[0] != "user" for p in processes):
        shown.remove("owner")  # it would only repeat USER
    for victim in vocab.GIVE_WAY:
        if _table_width(widths, shown) + _MIN_COMMAND <= width:
            break
        if victim in shown and victim not in _ALWAYS:
            shown.remove(victim)
    header = Line()
    for cid in shown:
        header.add(_pad(vocab.COLUMNS[cid].label, widths[cid], cid) + " ", "head")
    header.add(vocab.COLUMNS["command"].label, "head")
    lines = [header.cropped(width, glyphs.ellipsis)]
    probed_seen: set[int] = set()
    for process, row in zip(processes, rows):
        line = Line()
        for cid in shown:
            value, style = row[cid]
            line.add(_pad(value, widths[cid], cid), style).add(" ")
        line.extend(_command(process, row["command"][0]))
        lines.append(line.cropped(width, glyphs.ellipsis))
        report = probes.get(process.own_pid)
        if report is not None and report.pid not in probed_seen:
            probed_seen.add(report.pid)
            lines += probe_summary(report, snapshot, width, glyphs, tz, judgement=judgements.of(report.pid))
    notes = dict.fromkeys(p.owner.note for p in processes if p.owner is not None and p.owner.note)
    lines += [text(f"Owners: {note}", "dim") for note in notes]  # each cause once, not once per row
    return lines


def _table_width(widths: dict[str, int], shown: list[str]) -> int:
    return sum(widths[cid] + 1 for cid in shown)


def _pad(value: str, size: int, cid: str) -> str:
    return value.rjust(size) if vocab.COLUMNS[cid].right else value.ljust(size)


def _process_cells(p: GpuProcess, now: float, ellipsis: str) -> dict[str, tuple[str, str | None]]:
    """Each column's text (the vocabulary's) and --once's style for it."""
    cells = vocab.process_cells(p, now)
    styles: dict[str, str | None] = {
        "pid": "bold" if p.state == PROCESS_OK else "dim",
        "sm": _level(p.sm_util),
        "cpu": _level(p.cpu_percent),
    }
    shown = {}
    for cid, value in cells.items():
        most = vocab.COLUMNS[cid].most
        if most is not None and len(value) > most:
            value = value[:most - len(ellipsis)] + ellipsis
        shown[cid] = (value, "dim" if value == units.NA else styles.get(cid))
    return shown


def _command(p: GpuProcess, shown: str) -> Line:
    """The command cell: what is wrong with the process (its bracketed end) in colour."""
    why = vocab.why_not_ok(p)
    line = Line().add(shown[:len(shown) - len(why)] if why else shown)
    if why:
        line.add(why, "warn" if p.state != PROCESS_OK else "dim")
    return line


# ----------------------------------------------------------------------------------------- probes

def probe_summary(report: ProbeReport, snapshot: Snapshot | None, width: int, glyphs: Glyphs,
                  tz: tzinfo | None, *, indent: int = 4, judgement: ProcessJudgement | None = None) -> list[Line]:
    """What a probe says about its process, a few indented lines under the process row, and the
    ``judgement`` of it (its leak verdict and first advice).

    With a snapshot, the memory NVML charges to the process on each device is split into the
    allocator's share, its cache and the CUDA context plus libraries.
    """
    pad = " " * indent
    lines: list[Line] = []
    head = [text(f"torch {report.torch_version}" if report.torch_version else "torch n/a")]
    if report.steps:
        head += _step_chunks(report)
    if report.recording:
        head.append(text("recording allocation sites", "accent"))
    lines += flow(head, width, first=Line().add(pad).add("probe ", "accent"), indent=indent + 2,
                  ellipsis=glyphs.ellipsis)
    for probe_device in devices_shown(report):
        label = Line().add(pad + "  ").add(probe_device.device + ":", "bold")
        breakdown = breakdown_of(report, probe_device, snapshot)
        memory = _allocator_chunks(probe_device.allocator, breakdown)
        tensors = _tensor_chunks(breakdown)
        if memory:
            lines += flow(memory, width, first=label, indent=indent + 4, ellipsis=glyphs.ellipsis)
        if tensors:
            first = Line().add(pad + "    ") if memory else label
            lines += flow(tensors, width, first=first, indent=indent + 4, ellipsis=glyphs.ellipsis)
        if breakdown is not None and breakdown.note:
            lines += flow([text(f"note: {breakdown.note}", "dim")], width, first=Line().add(pad + "    "),
                          indent=indent + 4, ellipsis=glyphs.ellipsis)
    if report.last_oom is not None:
        lines += _oom_lines(report.last_oom, width, glyphs, tz, indent + 2)
    if judgement is not None and report.steps:
        lines += verdict_lines(judgement, width, glyphs, indent + 2)
    if report.problems:
        lines += flow([text(problem, "warn") for problem in report.problems], width,
                      first=Line().add(pad + "  ").add("probe problems:", "warn"),
                      indent=indent + 4, ellipsis=glyphs.ellipsis)
    return lines


# How each leak state reads, and its colour: only a real leak is an alarm.
_VERDICT_STYLE = {LEAK_LEAK: "bad", LEAK_CACHE_GROWTH: "warn", LEAK_FRAGMENTATION: "warn",
                  LEAK_CLEAN: "ok"}
ADVICE_SHOWN = 2


def verdict_lines(judgement: ProcessJudgement, width: int, glyphs: Glyphs, indent: int, *,
                  advice: int = ADVICE_SHOWN) -> list[Line]:
    """The per-step leak verdict with its OOM forecast, then the first ``advice`` pieces of advice."""
    verdict = judgement.leak
    pad = " " * indent
    lines: list[Line] = []
    # "Too few steps yet" says nothing a one-shot reader can use.
    if verdict is not None and verdict.state != LEAK_COLLECTING:
        style = _VERDICT_STYLE.get(verdict.state)
        # The reason's clauses are separate chunks, so a narrow screen wraps between them.
        chunks = [text(visible(part), style) for part in verdict.reason.split("; ") if part]
        if verdict.oom_step is not None:
            when = "" if verdict.oom_in is None else f" in {units.elapsed(round(verdict.oom_in))}"
            chunks.append(text(f"out of memory at step {verdict.oom_step}{when}", "bad"))
        label = verdict.state.replace("_", " ") + ": "
        lines += flow(chunks, width, first=Line().add(pad).add(label, style or "bold"),
                      indent=indent + 2, ellipsis=glyphs.ellipsis)
    for item in judgement.advice[:advice]:
        lines += flow([text(visible(item.title))], width,
                      first=Line().add(pad).add(f"advice {item.rank}: ", "accent"),
                      indent=indent + 2, ellipsis=glyphs.ellipsis)
        lines += _fix_lines(item.action, width, glyphs, indent + 2)
    return lines


def _fix_lines(action: str, width: int, glyphs: Glyphs, indent: int) -> list[Line]:
    """An advice's fix under its title: its words wrapped, its code lines (indented) as they are."""
    pad = " " * indent
    lines: list[Line] = []
    for part in map(visible, action.splitlines()):  # its code lines stay lines
        if part.startswith(" "):
            lines.append(Line().add(pad + part).cropped(width, glyphs.ellipsis))
        else:
            lines += flow([text(word) for word in part.split(" ")], width, first=Line().add(pad), gap=1,
                          indent=indent, ellipsis=glyphs.ellipsis)
    return lines


# The breakdown's parts as --once words them, in its order (gputui.analysis.breakdown): the tensors
# on one line, what the allocator and the driver add on the allocator's line.
TENSOR_WORDS = {"parameters": "params", "gradients": "grads", "optimizer_state": "optimizer",
                "buffers": "buffers", "activations": "activations", "gathered": "gathered", "other": "other",
                "untracked": "not categorised", "untracked_growth": "untracked growth"}
ALLOCATOR_WORDS = {"cache": "cache", "fragmentation": "fragmented", "context": "context+libs"}


def _allocator_chunks(stats: AllocatorStats | None, breakdown: Breakdown | None) -> list[Line]:
    if stats is None:
        return []
    chunks = [text(f"allocated {units.size_compact(stats.allocated)}"),
              text(f"reserved {units.size_compact(stats.reserved)}")]
    for item in breakdown.items if breakdown is not None else ():
        if item.key in ALLOCATOR_WORDS:
            alarm = item.key == "fragmentation" and item.size > stats.reserved // 4
            figure = f"{ALLOCATOR_WORDS[item.key]} {units.size_compact(item.size)}"
            chunks.append(text(figure, "warn" if alarm else None))
    return chunks


def _tensor_chunks(breakdown: Breakdown | None) -> list[Line]:
    chunks = []
    for item in breakdown.items if breakdown is not None else ():
        if item.key in TENSOR_WORDS:
            # Read between steps, the activations are the last measured step's peak: the label says so.
            # The untracked growth's says since when, and what it is; what FSDP gathers is always a step's peak.
            when = item.label[len(item.key):] if item.key in ("activations", "untracked_growth") else ""
            when = " (step peak)" if item.key == "gathered" else when
            chunks.append(text(f"{TENSOR_WORDS[item.key]} {units.size_compact(item.size)}{when}"))
    return chunks


def _step_chunks(report: ProbeReport) -> list[Line]:
    last = report.steps[-1]
    chunks = [text(f"step {last.step}" + (f" in {units.step_time(last.duration)}"
                                          if last.duration is not None else ""))]
    if last.allocated is not None:
        chunks.append(text(f"end {units.size_compact(last.allocated)}"))
    peaks = [(name, value) for name, value in (("fwd", last.peak_forward),
                                                ("bwd", last.peak_backward),
                                                ("opt", last.peak_optimizer)) if value is not None]
    for i, (name, value) in enumerate(peaks):  # separate chunks, so a narrow screen wraps them
        chunks.append(text(("peak " if i == 0 else "") + f"{name} {units.size_compact(value)}"))
    return chunks


def _oom_lines(oom: OomRecord, width: int, glyphs: Glyphs, tz: tzinfo | None,
               indent: int) -> list[Line]:
    chunks = [text(units.clock_time(oom.at, tz) or "", "bad")]
    if oom.device:
        chunks.append(text(oom.device))
    if oom.requested is not None:
        chunks.append(text(f"asked {units.size_compact(oom.requested)}"))
    if oom.free is not None:
        chunks.append(text(f"free {units.size_compact(oom.free)}"))
    if oom.allocated is not None:
        chunks.append(text(f"allocated {units.size_compact(oom.allocated)}"))
    if oom.line or oom.where:
        chunks.append(text(f"at {oom.line or oom.where[-1]}"))
    return flow(chunks, width, first=Line().add(" " * indent).add("last OOM", "alert"),
                indent=indent + 2, ellipsis=glyphs.ellipsis)


def _unlisted_probes(snapshot: Snapshot, judgements: Judgements, width: int, glyphs: Glyphs,
                     tz: tzinfo | None) -> list[Line]:
    """Probed processes NVML does not list (CPU-only jobs, no driver): shown from their reports."""
    listed = {p.own_pid for p in snapshot.processes}
    unlisted = [r for r in snapshot.probes if r.pid not in listed]
    if not unlisted:
        return []
    lines = [Line(), text("Probed processes not listed by NVML", "head")]
    seen = {h.pid: h for h in snapshot.probed}
    for report in unlisted:
        row = Line().add(str(report.pid), "bold").add(" ")
        proc = seen.get(report.pid)
        if proc is not None:  # what /proc says of it: whose it is, and its CPU and host memory
            figures = [proc.user or units.NA]
            if proc.cpu_percent is not None:
                figures.append(f"CPU {proc.cpu_percent:.0f}%")
            if proc.host_memory is not None:
                figures.append(f"RSS {units.size_compact(proc.host_memory)}")
            row.add("  ".join(figures) + "  ", "dim")
        row.add(" ".join(report.command) or "?")
        lines.append(row.cropped(width, glyphs.ellipsis))
        lines += probe_summary(report, snapshot, width, glyphs, tz, judgement=judgements.of(report.pid))
    return lines


# ----------------------------------------------------------------------------------------- levels

def _ratio(used: float | None, total: float | None) -> float | None:
    if used is None or not total:
        return None
    return used / total


# The vocabulary's levels as --once colours them; unknown is dim.
_STYLES = {"low": "ok", "mid": "warn", "high": "bad", "none": "dim"}


def _level(percent: float | None) -> str:
    """A percentage's style at the vocabulary's load thresholds (as the monitor colours it)."""
    return _ratio_level(None if percent is None else percent / 100)


def _ratio_level(ratio: float | None, thresholds: vocab.Thresholds = vocab.LOAD) -> str:
    return _STYLES[vocab.level(ratio, thresholds)]
