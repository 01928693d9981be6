"""The detail screen's analysis: the NVML memory trend, a probed job's leak verdict, the allocation
sites that grow (and whether site recording is on), and the ranked advice. Renders verdicts the
analysis already made; it judges nothing itself.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from gputui import units
from gputui.analysis import phases as step_phases
from gputui.analysis.process import ProcessAnalysis
from gputui.analysis.sites import keeper_text
from gputui.analysis.text import headroom_lines
from gputui.model import ProbeReport
from gputui.model.verdicts import (
    LEAK_CACHE_GROWTH,
    LEAK_CLEAN,
    LEAK_COLLECTING,
    LEAK_FRAGMENTATION,
    LEAK_GROWING,
    LEAK_LEAK,
    LEAK_WARMING_UP,
    Advice,
    GrowingSite,
    LeakVerdict,
    ProcessTrend,
)

CATEGORY_WORDS = {"parameters": "parameters", "gradients": "gradients",
                  "optimizer_state": "optimizer state", "buffers": "buffers",
                  "activations": "activations (tensors saved for backward)",
                  "other": "other tensors", "cache": "the allocator's cache",
                  "fragmentation": "fragmentation (free bytes stuck in split blocks)"}

STATE_WORDS = {
    LEAK_COLLECTING: ("collecting steps", "$text-muted"),
    LEAK_CLEAN: ("no leak", "$success"),
    LEAK_WARMING_UP: ("warming up", "$text-muted"),
    LEAK_LEAK: ("LEAK", "bold $error"),
    LEAK_CACHE_GROWTH: ("cache growth", "bold $warning"),
    LEAK_FRAGMENTATION: ("fragmentation", "bold $warning"),
}

SEVERITY_STYLES = {"critical": "bold $error", "warning": "bold $warning", "info": "bold"}


def phases_text(phases: tuple[step_phases.PhaseAccount, ...]) -> Content:
    """Where the first and the latest measured step's memory went, phase by phase."""
    parts = [Content.styled("Memory by phase (the first measured step, and the latest)", "bold")]
    for account in phases:
        parts.append(Content.styled(step_phases.headline(account), "bold $text-muted"))
        parts += [Content("  " + line) for line in account.lines]
    return Content("\n").join(parts)


class AnalysisPanel(Vertical):
    """Leak verdict, growing allocation sites, and one title and body per piece of advice."""

    DEFAULT_CSS = """
    AnalysisPanel { height: auto; }
    AnalysisPanel > Static { height: auto; margin: 0 0 1 0; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.analysis: ProcessAnalysis | None = None
        self.ended = False

    def compose(self) -> ComposeResult:
        yield Static(id="analysis-leak")
        yield Static(id="analysis-phases")
        yield Static(id="analysis-sites")
        yield Static(id="analysis-headroom")
        yield AdviceList("nothing to suggest: this process looks healthy", id="analysis-advice")

    def show(self, analysis: ProcessAnalysis, *, ended: bool = False) -> None:
        """``ended``: the process has ended, and the verdicts are those of its last report."""
        if (analysis, ended) == (self.analysis, self.ended):
            return
        self.analysis, self.ended = analysis, ended
        report = analysis.report
        probed = report is not None
        phases = step_phases.accounts(report.steps, attached=report.via == "attach") if report is not None else ()
        self.query_one("#analysis-leak", Static).display = probed
        self.query_one("#analysis-phases", Static).display = bool(phases)
        self.query_one("#analysis-sites", Static).display = probed
        if phases:
            self.query_one("#analysis-phases", Static).update(phases_text(phases))
        if probed:
            self.query_one("#analysis-leak", Static).update(leak_text(analysis.leak, analysis.now, ended=ended))
            self.query_one("#analysis-sites", Static).update(sites_text(analysis.report, analysis.sites))
        room = self.query_one("#analysis-headroom", Static)
        room.display = bool(analysis.headroom)
        room.update(Content("\n").join([part for h in analysis.headroom for part in (
            Content.styled(f"Will it fit ({h.device})", "bold"), *map(Content, headroom_lines(h)))]))
        self.query_one(AdviceList).show(analysis.advice)


class AdviceList(Vertical):
    """Ranked advice under an "Advice" heading: a title and an indented body per item."""

    DEFAULT_CSS = """
    AdviceList { height: auto; }
    AdviceList .advice-title { height: auto; }
    AdviceList .advice-body { height: auto; padding: 0 0 0 3; }
    """

    def __init__(self, healthy: str, *, id: str | None = None) -> None:
        """``healthy``: the words shown when there is no advice."""
        super().__init__(id=id)
        self.healthy = healthy

    def compose(self) -> ComposeResult:
        yield Static(Content.styled("Advice", "bold"), classes="advice-heading")

    def show(self, advice: tuple[Advice, ...]) -> None:
        # A title and an indented body per item (wrapped lines keep the indent); the widgets are
        # kept and reused, since the advice's words change with every refresh but rarely its length.
        titles = list(self.query(".advice-title").results(Static))
        bodies = list(self.query(".advice-body").results(Static))
        wanted = max(1, len(advice))
        if len(titles) < wanted:
            new = []
            for _ in range(wanted - len(titles)):
                new += [Static(classes="advice-title"), Static(classes="advice-body")]
            self.mount_all(new)
            titles += new[0::2]
            bodies += new[1::2]
        for k, (title, body) in enumerate(zip(titles, bodies)):
            shown = k < wanted
            title.display = shown
            body.display = shown and bool(advice)
            if not shown:
                continue
            if not advice:
                title.update(Content.styled(self.healthy, "$text-muted"))
                continue
            head, text = advice_item(advice[k])
            title.update(head)
            body.update(text)


def headline(analysis: ProcessAnalysis) -> Content:
    """One line for the top of the detail screen: the verdict that matters most, and the first advice."""
    parts = []
    leak = analysis.leak
    if leak is not None and leak.state in STATE_WORDS:
        word, style = STATE_WORDS[leak.state]
        what = "" if not leak.category else f" in {leak.category.replace('_', ' ')}"
        parts.append(Content.assemble(("probe: ", "$text-muted"), (word + what, style)))
    trend = analysis.trend
    if trend is not None and trend.verdict == "growing" and trend.rate is not None:  # (so mib_per_min is)
        parts.append(Content.assemble(("NVML: ", "$text-muted"),
                                      (f"growing {units.size(trend.rate * 60)}/min", "$warning")))
    if analysis.advice:
        first = analysis.advice[0]
        parts.append(Content.assemble(("advice 1: ", "$text-muted"),
                                      (first.title, SEVERITY_STYLES.get(first.severity, "bold"))))
    return Content("  ·  ").join(parts)


def trend_words(trend: ProcessTrend | None, *, probe_forecast: bool = False) -> str:
    """The NVML memory trend in words, with the rate and forecast of a growing process.

    With ``probe_forecast`` (the probe forecasts an OOM) NVML's own straight-line figure is left out:
    one screen, one time to OOM, the probe's (it knows the cache and each step's peak)."""
    if trend is None:
        return "not enough history yet"
    words = {"steady": "steady", "warming_up": "warming up (allocator cache filling, then flat)",
             "sawtooth": "sawtooth (grows and is released)", "growing": "growing",
             "unknown": "not enough history yet"}.get(trend.verdict, trend.verdict)
    if trend.verdict == "growing" and trend.rate is not None:
        words += f" at {units.size(trend.rate * 60)}/min"
        if probe_forecast:
            words += "; time to out of memory: the probe's forecast, below"
        elif trend.time_to_oom is not None:
            words += f"; the GPU runs out of memory in about {units.elapsed(trend.time_to_oom)} at this rate"
    return words


def leak_text(leak: LeakVerdict | None, now: float | None = None, *, ended: bool = False) -> Content:
    """The probe's per-step verdict: state, what grows, how fast, when it runs out; ``ended``: the
    verdict on the last report of a process that has ended."""
    title = Content.styled("Leak verdict at its last report (per training step)" if ended
                           else "Leak verdict (per training step)", "bold")
    if leak is None:
        return Content("\n").join([title, Content.styled("no verdict" if ended else "no verdict yet", "$text-muted")])
    word, style = STATE_WORDS.get(leak.state, (leak.state, ""))
    lines = [title, Content.assemble((word, style), "  ", leak.reason)]
    if leak.state in LEAK_GROWING:
        per_step = leak.growth_per_step
        what = CATEGORY_WORDS.get(leak.category or "", leak.category or "allocated memory")
        growth = f"grows {units.size(per_step)} per step" if per_step is not None else "grows"
        if per_step and leak.step_time:
            growth += f" ({units.size(per_step / leak.step_time * 60)}/min at {leak.step_time:.2f} s per step)"
        lines.append(Content.assemble(("  growing: ", "$text-muted"), (what, "bold"), f" {growth}"))
        if leak.oom_step is not None and not ended:  # a forecast for a process that has ended is no news
            left = leak.seconds_to_oom(now)
            # Rounded as the table's "85s" and the advice's "85 s" are: 84.8 s reads 1:25 here too.
            when = "" if left is None else f", in about {units.elapsed(round(left))}"
            at = "" if leak.oom_at is None else f" at {units.clock_time(leak.oom_at)}"
            lines.append(Content.assemble(("  out of memory: ", "$text-muted"),
                                          (f"at step {leak.oom_step}{when}{at}", "bold $error")))
    growing = [g for g in leak.growth if g.bytes_per_step > 0]
    if growing:
        parts = ", ".join(f"{g.name.replace('_', ' ')} {'+' if g.bytes_per_step >= 0 else ''}"
                          f"{units.size(g.bytes_per_step)}/step" for g in growing[:4])
        lines.append(Content.assemble(("  per category: ", "$text-muted"), parts))
    return Content("\n").join(lines)


def sites_text(report: ProbeReport | None, sites: tuple[GrowingSite, ...]) -> Content:
    """Growing allocation sites, and the state and cost of site recording."""
    lines = [Content.styled("Allocation sites", "bold")]
    if report is not None and report.recording:
        steps = report.recorded_steps
        span = f", steps {steps[0]}-{steps[-1]}" if steps else ""
        cost = ("" if report.recording_cost is None
                else f", costs {report.recording_cost * 1000:.1f} ms per step")
        lines.append(Content.assemble(("recording", "bold $warning"),
                                      f" ({len(steps)} steps recorded{span}{cost}); s stops it"))
    else:
        lines.append(Content.styled("not recording; s records the allocation sites of the next steps "
                                    "(with Python stacks, bounded in steps and entries)", "$text-muted"))
    if sites:
        for site in sites[:6]:
            lines.append(Content.assemble(
                ("  " + site.where, "bold"),
                f"  +{units.size(site.bytes_per_step)}/step over {site.steps} steps, "
                f"{units.size(site.live_bytes)} live"))
    elif report is not None and report.recorded_steps:
        lines.append(Content.styled("  no site grows over the recorded steps", "$text-muted"))
    for keeper in report.keepers if report is not None else ():
        lines.append(Content.assemble(("  kept at ", "$text-muted"),
                                      (keeper.where[0] if keeper.where else "(no line found)", "bold"),
                                      f"  {keeper_text(keeper)}"))
    return Content("\n").join(lines)


def advice_item(a: Advice) -> tuple[Content, Content]:
    """One suggestion: its ranked title, then what was seen, what to change, the expected saving."""
    head = Content.assemble((f"{a.rank}. ", "bold"), (a.title, SEVERITY_STYLES.get(a.severity, "bold")),
                            (f"  [{a.severity}]", "$text-muted"))
    lines = [Content.assemble(("saw: ", "$text-muted"), a.detail),
             Content.assemble(("do: ", "$text-muted"), a.action.replace("\n", "\n    "))]
    if a.estimated_saving is not None:
        lines.append(Content.assemble(("saves about ", "$text-muted"), (units.size(a.estimated_saving), "bold")))
    return head, Content("\n").join(lines)

