"""--once, --json, --watch and the probe commands, with a stand-in collector and probe client.

The real collector and simulator are exercised end to end in test_cli_plain.py; here the modes'
own decisions are tested: two samples for CPU %, filters on probes, probe trouble as a line, the
no-driver path, watch output for logs and terminals, NDJSON, closed pipes.
"""

import dataclasses
import io
import json
import time
from datetime import timezone
from types import SimpleNamespace

import pytest
from plain_data import T, once_text, training_report, workstation

import gputui.collect
import gputui.link.client as link_client
from gputui.cli import Options
from gputui.collect import NvmlUnavailable
from gputui.errors import UserError
from gputui.model import ProbeReport, Snapshot
from gputui.plain import modes, probes, terminal
from gputui.sample import pipeline


class FakeCollector:
    """Hands out the workstation snapshot, one second later each time."""

    def __init__(self, reports=()):
        self.samples = 0
        self.closed = False
        self.reports = tuple(reports)
        self.probed = self  # its probed processes are all listed: /proc has nothing to add
        self.jobs = self  # and the workstation's processes make no job

    def add_to(self, snapshot: Snapshot) -> Snapshot:
        return snapshot

    def of_probes(self, reports):
        return ()

    def sample(self) -> Snapshot:
        self.samples += 1
        return dataclasses.replace(workstation(), taken_at=T + self.samples, probes=())

    def probe_reports(self):
        return self.reports

    def close(self):
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    collector = FakeCollector(reports=workstation().probes)
    opened = []

    def open_collector(demo=None, *, seed=0, processes=None, **_):
        opened.append((demo, seed, processes))
        return collector

    monkeypatch.setattr(gputui.collect, "open_collector", open_collector)
    sleeps = []
    monkeypatch.setattr(pipeline, "time", SimpleNamespace(time=time.time, sleep=sleeps.append))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("NO_COLOR", raising=False)
    collector.opened = opened
    collector.sleeps = sleeps
    return collector


def demo(**kw) -> Options:
    return Options(demo="workstation", **kw)


def real_probes(monkeypatch, answers: dict):
    """Probes on this machine: pid -> ProbeReport, or a reason string for one that fails."""
    monkeypatch.setattr(link_client, "discover", lambda environ=None: {pid: None for pid in answers})

    def fetch_report(pid, timeout=2.0, **_):
        answer = answers[pid]
        if isinstance(answer, str):
            raise link_client.ProbeUnavailable(pid, link_client.TIMED_OUT, answer)
        return answer

    monkeypatch.setattr(link_client, "fetch_report", fetch_report)


# ------------------------------------------------------------------------------------ --once

def test_once_samples_twice_for_cpu_percent_and_prints_the_second(fake, capsys):
    assert modes.once(demo(mode="once", seed=3)) == 0
    out = capsys.readouterr().out
    assert fake.opened == [("workstation", 3, None)]
    assert fake.samples == 2 and fake.sleeps == [pipeline.CPU_WINDOW] and fake.closed
    expected = dataclasses.replace(workstation(), taken_at=T + 2)
    assert out == once_text(expected, color=False, ascii=False, width=100)


def test_once_is_plain_when_not_a_terminal_and_ascii_when_asked(fake, capsys):
    modes.once(demo(mode="once", ascii=True))
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    out.encode("ascii")
    assert "MEM #" in out


def test_filters_apply_to_devices_processes_and_probes(fake, capsys):
    modes.json(demo(mode="json", only=("2",)))
    snap = json.loads(capsys.readouterr().out)["snapshot"]
    assert [d["index"] for d in snap["devices"]] == [2]
    assert [p["pid"] for p in snap["processes"]] == [6666]
    assert snap["probes"] == []  # the probed job is on GPU 0, the CPU-only job on no GPU


def test_user_filter_keeps_that_users_probed_process(fake, capsys):
    modes.json(demo(mode="json", users=("alice",)))
    snap = json.loads(capsys.readouterr().out)["snapshot"]
    assert {p["pid"] for p in snap["processes"]} == {4242}
    assert [r["pid"] for r in snap["probes"]] == [4242]


def test_pid_filter_applies_to_probes_too(fake, capsys):
    modes.json(demo(mode="json", pids=(777,)))
    snap = json.loads(capsys.readouterr().out)["snapshot"]
    assert snap["processes"] == [] and [r["pid"] for r in snap["probes"]] == [777]


def test_unknown_gpu_in_only_is_a_user_error(fake):
    with pytest.raises(UserError, match="--only 9: no such GPU"):
        modes.once(demo(mode="once", only=("9",)))


def test_demo_probe_reports_come_from_the_simulated_machine(fake, capsys):
    modes.once(demo(mode="once"))
    out = capsys.readouterr().out
    assert "    probe torch 2.13.0  step 412 in 0.21s" in out


# ------------------------------------------------------------------------------------ real probes

def test_real_probe_reports_are_attached_and_failures_become_problem_lines(fake, capsys, monkeypatch):
    real_probes(monkeypatch, {4242: training_report(), 31337: "the probe did not answer within 1 s"})
    modes.json(Options(mode="json"))
    snap = json.loads(capsys.readouterr().out)["snapshot"]
    assert [r["pid"] for r in snap["probes"]] == [4242]
    assert snap["problems"][-1] == "probe of process 31337 did not answer: the probe did not answer within 1 s"


def test_no_driver_and_no_probes_is_the_nvml_message(monkeypatch):
    def missing(*args, **kw):
        raise NvmlUnavailable("NVML Shared Library Not Found")

    monkeypatch.setattr(gputui.collect, "open_collector", missing)
    real_probes(monkeypatch, {})
    with pytest.raises(NvmlUnavailable, match="Try `gputui --demo`"):
        modes.once(Options(mode="once"))


def test_no_driver_still_shows_reachable_probes(monkeypatch, capsys):
    def missing(*args, **kw):
        raise NvmlUnavailable("NVML Shared Library Not Found")

    monkeypatch.setattr(gputui.collect, "open_collector", missing)
    cpu_job = ProbeReport(pid=777, taken_at=T, torch_version="2.13.0+cpu", command=("python", "eval.py"))
    real_probes(monkeypatch, {777: cpu_job})
    monkeypatch.setenv("COLUMNS", "200")
    assert modes.once(Options(mode="once")) == 0
    out = capsys.readouterr().out
    assert "No GPUs found." in out and "777 python eval.py" in out
    assert "! cannot read the GPUs: the NVIDIA driver's NVML library" in out


# ------------------------------------------------------------------------------------ --watch

def stop_after(monkeypatch, rounds: int):
    """A fake clock for the watch loop whose sleep raises Ctrl-C on its ``rounds``-th call."""
    calls = []
    now = [1000.0]

    def sleep(seconds):
        calls.append(seconds)
        now[0] += seconds
        if len(calls) >= rounds:
            raise KeyboardInterrupt

    monkeypatch.setattr(modes, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    return calls


def test_watch_into_a_log_prints_separators_and_ends_quietly_on_ctrl_c(fake, capsys, monkeypatch):
    calls = stop_after(monkeypatch, 3)
    assert modes.watch(demo(mode="watch", watch=5.0)) == 0
    out = capsys.readouterr().out
    separators = [line for line in out.splitlines() if line.startswith("-- ")]
    assert len(separators) == 3 and "\x1b[" not in out
    assert calls == [5.0, 5.0, 5.0]
    assert fake.samples == 4 and fake.closed  # one warm-up sample for CPU %, then one per print


def test_watch_json_is_ndjson(fake, capsys, monkeypatch):
    stop_after(monkeypatch, 2)
    modes.watch(demo(mode="watch", watch=1.0, json=True))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    times = [json.loads(line)["snapshot"]["taken_at"] for line in lines]
    assert times == [T + 2, T + 3]


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_watch_on_a_terminal_redraws_in_colour(fake, monkeypatch):
    stop_after(monkeypatch, 2)
    screen = FakeTerminal()
    monkeypatch.setattr("sys.stdout", screen)
    modes.watch(demo(mode="watch", watch=1.0))
    out = screen.getvalue()
    assert out.count(modes.CLEAR_SCREEN) == 2 and "\x1b[1;31mLOST" in out


def test_no_color_is_respected_on_a_terminal(fake, monkeypatch):
    stop_after(monkeypatch, 1)
    monkeypatch.setenv("NO_COLOR", "1")
    screen = FakeTerminal()
    monkeypatch.setattr("sys.stdout", screen)
    modes.watch(demo(mode="watch", watch=1.0))
    assert "\x1b[1;31m" not in screen.getvalue() and "LOST" in screen.getvalue()


def test_colour_option_wins_over_the_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert terminal.use_color(Options(color=False), FakeTerminal()) is False
    assert terminal.use_color(Options(color=True), io.StringIO()) is True
    assert terminal.use_color(Options(), io.StringIO()) is False
    monkeypatch.setenv("TERM", "dumb")
    assert terminal.use_color(Options(), FakeTerminal()) is False


def test_width_follows_columns_with_a_minimum(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    assert terminal.width() == 40
    monkeypatch.setenv("COLUMNS", "150")
    assert terminal.width() == 150


# ------------------------------------------------------------------------------------ closed pipe

class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError


def test_closed_pipe_ends_quietly(fake, monkeypatch):
    silenced = []
    monkeypatch.setattr(terminal, "silence_stdout", lambda: silenced.append(True))
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert modes.json(demo(mode="json")) == 0
    assert modes.once(demo(mode="once")) == 0
    assert probes.probes(demo(mode="probes")) == 0
    assert silenced == [True, True, True]


# ------------------------------------------------------------------------------------ probe commands

def test_probes_lists_the_demo_probes(fake, capsys):
    assert probes.probes(demo(mode="probes")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["PID", "RANK", "TORCH", "ALLOCATED", "RESERVED", "STEP", "COMMAND"]
    assert lines[1].split()[:6] == ["4242", "-", "2.13.0", "8.00GiB", "9.50GiB", "412"]
    assert lines[2].split()[:6] == ["777", "-", "2.13.0+cpu", "n/a", "n/a", "3"]


def test_probes_json_lists_reports_and_unreachable(capsys, monkeypatch):
    real_probes(monkeypatch, {4242: training_report(), 99: "the probe has gone away"})
    probes.probes(Options(mode="probes", json=True))
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gputui.probes"
    assert [r["pid"] for r in doc["probes"]] == [4242]
    assert doc["unreachable"] == [{"pid": 99, "reason": "the probe has gone away"}]
    # Its judgement, without a driver: the one `gputui probe 4242 --json` carries.
    judged = doc["judgements"]["processes"]
    assert [(p["pid"], p["leak"]["state"], [a["kind"] for a in p["advice"]]) for p in judged] == [
        (4242, "collecting", ["activations"])]
    probes.probe(Options(mode="probe", pid=4242, json=True))
    assert json.loads(capsys.readouterr().out)["judgement"] == judged[0]


def test_probes_when_none_says_how_to_start_one(capsys, monkeypatch):
    real_probes(monkeypatch, {})
    assert probes.probes(Options(mode="probes")) == 0
    out = capsys.readouterr().out
    assert out.startswith("No probed processes found.") and "gputui run --" in out


def test_probe_prints_one_report_as_text_and_json(capsys, monkeypatch):
    real_probes(monkeypatch, {4242: training_report()})
    monkeypatch.setenv("COLUMNS", "120")
    assert probes.probe(Options(mode="probe", pid=4242)) == 0
    out = capsys.readouterr().out
    assert out.startswith("process 4242  python train.py --lr 3e-4\n")
    assert "allocator cuda:0:" in out
    assert probes.probe(Options(mode="probe", pid=4242, json=True)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gputui.probe-report" and doc["report"]["steps"][-1]["step"] == 412


def test_probe_of_an_unknown_pid_is_a_clear_user_error(monkeypatch):
    real_probes(monkeypatch, {})
    monkeypatch.setattr(link_client, "fetch_report", lambda pid, timeout=2.0, **_: (_ for _ in ()).throw(
        link_client.ProbeUnavailable(pid, link_client.NO_PROBE, "no such process")))
    with pytest.raises(UserError, match=r"process 424242: no such process\. `gputui probes` lists"):
        probes.probe(Options(mode="probe", pid=424242))


def test_demo_probe_of_an_unknown_pid_names_the_probed_ones(fake):
    with pytest.raises(UserError, match=r"no probe in process 5 in the workstation demo "
                                        r"\(probed processes there: 4242, 777\)"):
        probes.probe(demo(mode="probe", pid=5))


def test_render_in_utc_for_the_record():
    # The modes print local time; the golden files use UTC. Both come from the same once_text().
    assert once_text(workstation(), tz=timezone.utc).startswith("ws-01  2026-01-05 09:00:00 UTC")
