"""``gputui probes`` and ``gputui probe PID``: what this user's probed PyTorch processes report.

Neither needs a GPU driver: the reports come over the probe's socket (or, with --demo, from the
simulated machine). An unknown pid is a UserError (message and exit code 2).
"""

from __future__ import annotations

from gputui.errors import UserError
from gputui.model import Job, ProbeReport, Snapshot
from gputui.options import Options
from gputui.plain import terminal
from gputui.plain.document import dumps, probe_document, probe_list_document
from gputui.plain.report import render_probe, render_probe_list
from gputui.sample.judge import judge_report, judge_reports

PROBE_TIMEOUT = 2.0


def probes(options: Options) -> int:
    """List the probed processes this user can reach."""
    reports, unreachable, jobs, gpus = _all_reports(options)
    if options.demo is None:
        _say_where_probes_cannot_be(found=bool(reports or unreachable))
    judgements = judge_reports(reports, gpus, jobs)
    if options.json:
        out = dumps(probe_list_document(reports, unreachable, jobs, judgements)) + "\n"
    else:
        out = render_probe_list(reports, unreachable, color=terminal.use_color(options),
                                ascii=terminal.use_ascii(options), width=terminal.width(), jobs=jobs,
                                judgements=judgements)
    return terminal.show(out)


def probe(options: Options) -> int:
    """Print the current report of the probe in process ``options.pid``, with verdict and advice."""
    report = _one_report(options)
    gpus = _gpus_now(options)
    judgement = judge_report(report, gpus)
    if options.json:
        out = dumps(probe_document(report, gpus, judgement)) + "\n"
    else:
        out = render_probe(report, gpus, judgement, color=terminal.use_color(options),
                           ascii=terminal.use_ascii(options), width=terminal.width())
    return terminal.show(out)


def _gpus_now(options: Options) -> Snapshot | None:
    """One sample of the GPUs for the verdict's time to OOM; None without a driver (CPU jobs)."""
    from gputui.collect import NvmlUnavailable, open_collector

    try:
        collector = open_collector(options.demo, seed=options.seed,
                                   processes=options.demo_processes)
    except NvmlUnavailable:
        return None
    try:
        return collector.sample()
    finally:
        collector.close()


def _all_reports(options: Options) -> tuple[list[ProbeReport], dict[int, str], tuple[Job, ...], Snapshot | None]:
    """The reports, the probes that did not answer, the jobs the probed processes make, and the GPUs
    (None without a driver) for the verdicts."""
    if options.demo is not None:
        reports, jobs, gpus = _demo_probes(options)
        return list(reports), {}, jobs, gpus
    import psutil

    from gputui.collect.jobs import JobFinder
    from gputui.link.client import ProbeUnavailable, discover, fetch_report

    found, unreachable = [], {}
    for pid in discover():
        try:
            found.append(fetch_report(pid, timeout=PROBE_TIMEOUT))
        except ProbeUnavailable as exc:
            unreachable[pid] = exc.detail
    return found, unreachable, JobFinder(psutil).of_probes(found), _gpus_now(options) if found else None


def _say_where_probes_cannot_be(found: bool) -> None:
    """On stderr: each directory refused as unsafe (no probe can serve there, and none is read),
    and where we looked when nothing was found."""
    import sys

    from gputui.link import paths
    from gputui.untrusted import visible

    for _, why in paths.refused_dirs():
        print(f"gputui: probes there are not read: {visible(why)}", file=sys.stderr)
    looked = paths.search_dirs()
    if not found and looked:
        print(f"gputui: looked in {visible(', '.join(str(p) for p in looked))}; a job started with "
              f"another XDG_RUNTIME_DIR or {paths.DIR_ENV} puts its socket elsewhere: set the same "
              "here", file=sys.stderr)


def _one_report(options: Options) -> ProbeReport:
    pid = options.pid
    if options.demo is not None:
        reports = _demo_reports(options)
        for report in reports:
            if report.pid == pid:
                return report
        known = ", ".join(str(r.pid) for r in reports) or "none"
        raise UserError(f"no probe in process {pid} in the {options.demo} demo "
                        f"(probed processes there: {known})")
    from gputui.link.client import ProbeUnavailable, fetch_fresh_report

    if pid is None:  # the CLI requires one
        raise UserError("probe: give the PID of the probed process")
    try:
        return fetch_fresh_report(pid, timeout=PROBE_TIMEOUT)
    except ProbeUnavailable as exc:
        raise UserError(f"{exc}. `gputui probes` lists the probed processes you can reach.") from None


def _demo_reports(options: Options) -> tuple[ProbeReport, ...]:
    return _demo_probes(options)[0]


def _demo_probes(options: Options) -> tuple[tuple[ProbeReport, ...], tuple[Job, ...], Snapshot]:
    """The simulated probes' reports, the jobs their processes make on the simulated machine, and its GPUs
    at the same moment."""
    from gputui.collect import open_collector

    collector = open_collector(options.demo, seed=options.seed, processes=options.demo_processes)
    try:
        gpus = collector.sample()  # the simulated job's reports follow the same clock as its GPUs
        reports = tuple(collector.probe_reports())
        return reports, collector.jobs.of_probes(reports), gpus
    finally:
        collector.close()
