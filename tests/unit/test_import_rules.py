"""What importing each module really loads, checked in a fresh interpreter through ``sys.modules``.

The monitor must start without torch (seconds and hundreds of MB), the probe must never drag Textual
into a training job, and the pure layers must not touch the machine. The arrows between our own
packages are import-linter's contracts in pyproject.toml (tests/unit/test_layers.py), which read the source;
this test sees what they cannot: what a dependency imports in turn when it runs, and which lazy imports
in the monitor's and the probe's entry points really stay unrun at import time.
"""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import gputui

HEAVY = ("torch", "textual", "pynvml", "psutil", "prometheus_client")


def all_modules() -> list[str]:
    names = ["gputui"]
    for info in pkgutil.walk_packages(gputui.__path__, "gputui."):
        if not info.name.endswith("__main__"):  # runs the CLI when imported
            names.append(info.name)
    return sorted(names)


def forbidden(module: str) -> set[str]:
    """Heavy packages that importing ``module`` must not load."""
    banned = {"torch"}
    if not module.startswith("gputui.serve"):
        banned.add("prometheus_client")  # the exporter's alone: --once and the monitor start without it
    if not module.startswith("gputui.ui") or module in TEXTUAL_FREE_UI_MODULES:
        banned.add("textual")
    if module.startswith(("gputui.model", "gputui.analysis", "gputui.link")):
        banned |= {"pynvml", "psutil"}
    if module.startswith("gputui.probe.") and module not in TORCH_FREE_PROBE_MODULES:
        banned.discard("torch")  # the probe's working parts use torch; its entry points must not
    if module.startswith("gputui.estimate."):
        banned.discard("torch")  # gputui estimate's own process runs a step; the package's name does not
    return banned


# Probe modules that run before torch is known to be wanted, and the socket thread's side of the probe
# (the board it reads and the desk that answers), which must not be able to reach torch at all:
# importing them must not load torch.
TORCH_FREE_PROBE_MODULES = {"gputui.probe", "gputui.probe.hook", "gputui.probe.board",
                            "gputui.probe.desk"}


# The live monitor's start: the driver opens and the first sample is taken while Textual loads.
TEXTUAL_FREE_UI_MODULES = {"gputui.ui.startup.launch", "gputui.ui.sources.sampler", "gputui.ui.startup.early_frame",
                           "gputui.ui.startup.terminal"}


def loaded_by(module: str) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"importing {module} failed:\n{out.stderr}"
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def printed_last(code: str) -> object:
    """The value ``code`` printed last (its repr), run by a fresh Python: only what it imports is loaded."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", all_modules())
def test_module_respects_layering(module):
    assert loaded_by(module) & forbidden(module) == set()


def test_rules_catch_a_violation():
    """The checker itself works: the CLI pulls in argparse-only code, torch itself is seen."""
    assert "torch" in loaded_by("torch")
    assert forbidden("gputui.collect.nvml") >= {"torch", "textual"}
    assert "psutil" in forbidden("gputui.analysis.history")
    assert "prometheus_client" in forbidden("gputui.cli") - forbidden("gputui.serve.metrics")
    assert "textual" in forbidden("gputui.serve.metrics")


# What the live monitor's first frame needs: the CLI, the launcher, the sampler opened on the driver, one
# sample rendered as --once renders it (ui/startup/early_frame.py). Whatever else these load is time before the
# first frame (issue 31 item 21: nvitop's first frame came sooner), so each of these must wait.
FIRST_FRAME = (
    "gputui.cli", "gputui.plain.terminal", "gputui.ui.startup.launch", "gputui.ui.startup.early_frame",
    "gputui.collect.collector", "gputui.plain.render",
)
NOT_BEFORE_THE_FIRST_FRAME = (
    "textual",  # the frame is drawn while it loads
    "tomllib",  # a config file's parser, only where there is a config file
    "gputui.analysis.leaks", "statistics",  # the leak verdicts, judged after the first sample
    "gputui.analysis.process", "gputui.plain.jobs",  # a probed process's or a job's analysis, where there is one
    "concurrent.futures", "logging",  # Textual's (asyncio's); the launcher hands the first sample over without
)


def test_the_first_frame_waits_for_nothing_it_does_not_draw():
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(FIRST_FRAME)!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {list(NOT_BEFORE_THE_FIRST_FRAME)!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# The live monitor's whole module set, past its first frame: the app with its job rows, step charts and
# the leak and job analyses. The stdlib modules below cost resident memory (issue 31 item 21: gputui's
# share above a bare Textual app) for what a few lines of our own do.
LIVE_MONITOR = FIRST_FRAME + (
    "gputui.ui.app", "gputui.ui.table.job_rows", "gputui.ui.widgets.step_chart", "gputui.analysis.leaks",
    "gputui.analysis.jobs", "gputui.analysis.process", "gputui.analysis.advice", "gputui.config",
    "gputui.link.oom_file",
    "gputui.link.client", "gputui.link.protocol",  # the sampler looks for probes (json only where one answers)
)
NOT_IN_THE_LIVE_MONITOR = ("statistics", "json", "shlex")


def test_the_live_monitor_loads_no_stdlib_module_it_can_do_without():
    code = (
        "import importlib, sys\n"  # not json: it is one of the modules looked for
        f"for name in {list(LIVE_MONITOR)!r}: importlib.import_module(name)\n"
        f"print(repr([m for m in {list(NOT_IN_THE_LIVE_MONITOR)!r} if m in sys.modules]))\n"
    )
    assert printed_last(code) == []


# The live monitor on a machine with no job spread over GPUs and no probe: its app, screens, sampler and the
# client that looks for probes. A job's analysis (with the advice it ranks) and a probed process's are
# loaded with the first job or probe: 0.3 MB of resident memory otherwise (issue 31 item 21).
MONITOR_ALONE = FIRST_FRAME + (
    "gputui.ui.app", "gputui.ui.main_screen", "gputui.ui.table.job_rows", "gputui.ui.sources.sampler",
    "gputui.link.client",
    "gputui.analysis.leaks", "gputui.analysis.trends", "gputui.ui.widgets.charts",
)
# model.job_verdicts is not among them: the sampling pipeline's Judgements (model/judgement.py) hold the
# job findings, so every monitor loads their vocabulary, though not the analysis that makes them.
ONLY_WITH_A_JOB_OR_A_PROBE = (
    "gputui.analysis.jobs", "gputui.plain.jobs", "gputui.analysis.advice",
    "gputui.analysis.process", "gputui.analysis.whatif", "gputui.analysis.sites", "json",
)


def test_the_monitor_alone_loads_no_job_or_probe_analysis():
    code = (
        "import importlib, sys\n"
        f"for name in {list(MONITOR_ALONE)!r}: importlib.import_module(name)\n"
        f"print(repr([m for m in {list(ONLY_WITH_A_JOB_OR_A_PROBE)!r} if m in sys.modules]))\n"
    )
    assert printed_last(code) == []


# The many-host view's settings and connections (gputui.fleet), loaded only by --hosts or a config file with
# [hosts]: the live monitor of this machine reads its config without them (issue 31 item 21: its share above a
# bare Textual app).
MONITOR_OF_THIS_MACHINE = MONITOR_ALONE + ("gputui.config", "gputui.ui.alert_toasts")


def test_the_monitor_of_this_machine_loads_no_many_host_view():
    code = (
        "import importlib, sys\n"
        f"for name in {list(MONITOR_OF_THIS_MACHINE)!r}: importlib.import_module(name)\n"
        "from gputui.config import load_config\n"
        "load_config('/dev/null')\n"  # a config read: without [hosts], no fleet

        "print(repr(sorted(m for m in sys.modules if m.startswith('gputui.fleet'))))\n"
    )
    assert printed_last(code) == []


def test_judging_a_job_loads_no_advice_rules():
    """A job is judged every sample (its ranks side by side, ranked advice): that needs the order advice
    is shown in (analysis/ranking.py), not the rules that write a process's advice, which load with the
    first probed or growing process (issue 31: the monitor's share above a bare Textual app)."""
    code = (
        "import sys\n"
        "from gputui.analysis.jobs import analyse_job\n"
        "from gputui.collect import open_collector\n"
        "snapshot = open_collector('dataparallel', clock=lambda: 5.0).sample()\n"
        "analyses = [analyse_job(job, snapshot) for job in snapshot.jobs]\n"
        "loaded = [name in sys.modules for name in ('gputui.analysis.ranking', 'gputui.analysis.advice')]\n"
        "print(repr((len(analyses), *loaded)))\n"
    )
    assert printed_last(code) == (1, True, False)


def test_a_monitor_with_no_probe_loads_no_leak_analysis():
    """The leak analysis is a quarter of a megabyte of code that judges probe reports: a machine whose
    processes are not probed is judged without it (issue 31: the monitor's share above a bare Textual app);
    the first probe's report loads it."""
    code = (
        "import dataclasses, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from ui_data import training_snapshot\n"
        "from gputui.model import ProbeReport\n"
        "from gputui.sample.judge import Judge\n"
        "judge = Judge()\n"
        "plain = training_snapshot()\n"
        "sample = judge(plain)\n"
        "before = (len(plain.processes), sample.leaks, 'gputui.analysis.leaks' in sys.modules)\n"
        "later = plain.taken_at + 1\n"
        "probed = dataclasses.replace(training_snapshot(later), probes=(ProbeReport(pid=2000, taken_at=later),))\n"
        "sample = judge(probed)\n"
        "print(repr((before, sorted(sample.leaks), 'gputui.analysis.leaks' in sys.modules)))\n"
    )
    assert printed_last(code) == ((6, {}, False), [2000], True)
