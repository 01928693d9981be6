"""Alerts in every mode that samples, as users ask for them: --watch says them on stderr and runs
--alert-command; ``gputui record`` and ``gputui serve`` take the flags after the command too; the
config's [alerts] is read, the flags go over it, and a bad value is one line naming the key."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT, gputui, no_traceback


@pytest.fixture
def env(tmp_path):
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), COLUMNS="120", PYTHONPATH=str(ROOT),
                 XDG_CONFIG_HOME=str(tmp_path / "config"))
    return clean


def receiver(tmp_path):
    """A script that appends each delivery's JSON to got.ndjson, and its first kind to kinds."""
    script = tmp_path / "receiver.sh"
    script.write_text(f'#!/bin/sh\n{{ cat; echo; }} >> {tmp_path}/got.ndjson\n'
                      f'echo "$GPUTUI_ALERT_KIND" >> {tmp_path}/kinds\n')
    script.chmod(0o755)
    return str(script)


def delivered(tmp_path, wait=20.0):
    got = tmp_path / "got.ndjson"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not got.exists():
        time.sleep(0.1)
    return [json.loads(line) for line in got.read_text().splitlines() if line.strip()]


def titles(deliveries):
    return [(e["change"], e["alert"]["kind"], e["alert"]["title"]) for d in deliveries for e in d["events"]]


def run_for(env, seconds, *args):
    child = subprocess.Popen([sys.executable, "-m", "gputui", *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(seconds)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    return child.returncode, out, err


def test_watch_says_the_leaky_demos_alerts_and_runs_the_command(env, tmp_path):
    code, _, err = run_for(env, 6, "--demo", "leaky", "--watch", "1", "--alert-command", receiver(tmp_path))
    assert code == 0, err
    assert "gputui: alert: [warning] process 51200 leaks activations: leak: 48.0 MiB a step, kept at " \
           "train.py:131 in main\n" in err
    assert titles(delivered(tmp_path))[:2] == [("started", "leak", "process 51200 leaks activations"),
                                               ("started", "oom_soon", "process 51200 runs out of GPU memory in 2 min")]
    assert (tmp_path / "kinds").read_text().splitlines()[0] == "leak"


def test_no_alerts_turns_them_off(env):
    code, _, err = run_for(env, 3, "--demo", "leaky", "--watch", "1", "--no-alerts")
    assert code == 0 and "alert" not in err


def test_record_sends_alerts_with_the_flags_after_the_command(env, tmp_path):
    result = gputui(env, "--demo", "faults", "record", str(tmp_path / "r.rec"), "--duration", "2s",
                    "--alert-command", receiver(tmp_path), "--alert-kinds", "gpu_lost")
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert titles(delivered(tmp_path)) == [("started", "gpu_lost", "GPU 1 is lost")]


def test_serve_sends_alerts(env, tmp_path):
    code, _, err = run_for(env, 5, "--demo", "faults", "serve", "--listen", "127.0.0.1:0",
                           "--alert-command", receiver(tmp_path))
    assert titles(delivered(tmp_path)) == [("started", "gpu_lost", "GPU 1 is lost")], err


def test_the_config_sets_alerts_and_the_flags_go_over_it(env, tmp_path):
    config = tmp_path / "config" / "gputui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[alerts]\ncommand = "{receiver(tmp_path)}"\noom_within = "1m"\n')
    code, _, err = run_for(env, 5, "--demo", "leaky", "--watch", "1")
    assert [kind for _, kind, _ in titles(delivered(tmp_path))] == ["leak"]  # its OOM is 2 min off
    (tmp_path / "got.ndjson").unlink()
    code, _, err = run_for(env, 5, "--demo", "leaky", "--watch", "1", "--alert-oom-within", "1h")
    assert [kind for _, kind, _ in titles(delivered(tmp_path))] == ["leak", "oom_soon"]


@pytest.mark.parametrize(("table", "said"), [
    ('oom_within = "soon"', '`alerts.oom_within` must be a duration such as "30m", "1h", "90s", not \'soon\''),
    ('kinds = ["leak", "fire"]', "`alerts.kinds` has unknown kind 'fire'"),
    ('webhook_format = "xml"', "`alerts.webhook_format` must be one of json, slack, ntfy, not 'xml'"),
    ("pager = 1", "`alerts.pager` is not a setting"),
])
def test_a_bad_alerts_setting_is_one_line_naming_the_key(env, tmp_path, table, said):
    config = tmp_path / "bad.toml"
    config.write_text(f"[alerts]\n{table}\n")
    result = gputui(env, "--demo", "leaky", "--once", "--config", str(config))
    no_traceback(result)
    assert result.returncode == 2
    assert said in result.stderr.splitlines()[0]
